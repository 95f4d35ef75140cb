/* SPDX-License-Identifier: MIT */
/*
 * binary: the memcached binary protocol, one request per step.
 *
 * A step needs the 24-byte header plus extras and key in the input buffer
 * (at most 24 + 20 + 250 bytes once binary_parse.c has checked the shape);
 * a value is read straight into a fresh, unlinked item that is linked only
 * when complete, as in ascii.c.
 *
 * Quiet variants answer only when there is something to say: getq/getkq/
 * gatq/gatkq only on a hit, the others only on an error. Answers are
 * buffered and written before the connection would wait for input, so a
 * batch of quiet requests closed by a noop leaves in one write.
 *
 * A step waits for the header, extras and key before it looks at any of
 * them, as memcached does (unless they could never fit in the input buffer:
 * then the key is over 250 bytes, which is EINVAL at once).
 *
 * Errors, as memcached 1.6.18 answers them:
 *  - a request whose shape does not fit its opcode (extras, key or value it
 *    must not have, a key over 250 bytes, extras and key longer than the
 *    body) gets EINVAL and the connection is closed once that answer is
 *    out: its body length cannot be trusted, and skipping it could swallow
 *    every request that follows (a header claiming a 4 GiB body would);
 *  - an unknown opcode gets UNKNOWN_COMMAND and its body is skipped;
 *  - a value over the -I limit gets E2BIG ("Too large.") and is skipped; a
 *    failed set also removes the key's old value. The answer is queued
 *    before the value is skipped, so it leaves at once (memcached sends the
 *    same bytes once the value is in);
 *  - a wrong magic byte closes the connection.
 * memcached keeps the length it skips in an int: a body (unknown opcode) or
 * value (E2BIG) longer than INT32_MAX is answered and not skipped, and the
 * bytes after the key are read as the next request. fern does the same, so
 * the requests after such a header are answered, not swallowed (and a
 * client that does send the value is cut off at its first byte, as by
 * memcached, unless that byte happens to be the request magic).
 */
#include "memcached.h"

#include <string.h>

/* Skip a body or value of n bytes, unless memcached would not (see above). */
static bool skip_body(struct mc_conn *c, uint64_t n)
{
    return n > INT32_MAX || mc_skip(c, n);
}

static const char *status_text(int status)
{
    switch (status) {
    case MC_BIN_KEY_ENOENT:
        return "Not found";
    case MC_BIN_KEY_EEXISTS:
        return "Data exists for key.";
    case MC_BIN_E2BIG:
        return "Too large.";
    case MC_BIN_EINVAL:
        return "Invalid arguments";
    case MC_BIN_NOT_STORED:
        return "Not stored.";
    case MC_BIN_DELTA_BADVAL:
        return "Non-numeric server-side value for incr or decr";
    case MC_BIN_UNKNOWN_COMMAND:
        return "Unknown command";
    default:
        return "Out of memory";
    }
}

/* One answer: header, extras, key, then the value (which may be large and
 * is then sent from where it lies). */
static bool respond(struct mc_conn *c, const mc_bin_header *h, int status, uint64_t cas,
                    const void *ext, size_t extlen, const void *key, size_t keylen, const void *val,
                    size_t vallen)
{
    uint8_t *p = (uint8_t *)mc_out_reserve(c, MC_BIN_HEADER + extlen + keylen);
    if (!p)
        return false;
    p[0] = MC_BIN_RES_MAGIC;
    p[1] = h->opcode;
    mc_bin_put16(p + 2, (uint16_t)keylen);
    p[4] = (uint8_t)extlen;
    p[5] = 0;
    mc_bin_put16(p + 6, (uint16_t)status);
    mc_bin_put32(p + 8, (uint32_t)(extlen + keylen + vallen));
    mc_bin_put32(p + 12, h->opaque);
    mc_bin_put64(p + 16, cas);
    if (extlen)
        memcpy(p + MC_BIN_HEADER, ext, extlen);
    if (keylen)
        memcpy(p + MC_BIN_HEADER + extlen, key, keylen);
    mc_out_commit(c, MC_BIN_HEADER + extlen + keylen);
    return vallen == 0 || mc_out(c, val, vallen);
}

static bool respond_error(struct mc_conn *c, const mc_bin_header *h, int status)
{
    const char *t = status_text(status);
    return respond(c, h, status, 0, NULL, 0, NULL, 0, t, strlen(t));
}

static bool respond_ok(struct mc_conn *c, const mc_bin_header *h, bool quiet, uint64_t cas)
{
    return quiet || respond(c, h, MC_BIN_OK, cas, NULL, 0, NULL, 0, NULL, 0);
}

static bool with_key(uint8_t op)
{
    return op == MC_BIN_GETK || op == MC_BIN_GETKQ || op == MC_BIN_GATK || op == MC_BIN_GATKQ;
}

static bool get(struct mc_conn *c, const mc_bin_header *h, const char *key, bool quiet, bool touch,
                uint32_t exptime)
{
    mc_item *it = mc_get(key, h->keylen, touch, exptime);
    bool k = with_key(h->opcode);
    if (!it) {
        if (quiet)
            return true;
        if (k) /* a getk miss names the key, as memcached does */
            return respond(c, h, MC_BIN_KEY_ENOENT, 0, NULL, 0, key, h->keylen, NULL, 0);
        return respond_error(c, h, MC_BIN_KEY_ENOENT);
    }
    uint8_t flags[4];
    mc_bin_put32(flags, it->flags);
    bool ok = respond(c, h, MC_BIN_OK, it->cas, flags, 4, k ? it->data : NULL, k ? it->nkey : 0,
                      mc_item_value(it), it->nbytes);
    mc_item_release(it);
    return ok;
}

static bool update(struct mc_conn *c, const mc_bin_header *h, const uint8_t *ext, const char *key,
                   int kind, bool quiet)
{
    uint32_t vlen = mc_bin_value_len(h);
    uint32_t flags = kind == MC_BK_STORE ? mc_bin_get32(ext) : 0;
    uint32_t exptime = kind == MC_BK_STORE ? mc_exptime(mc_bin_get32(ext + 4)) : 0;
    int op;
    switch (h->opcode) {
    case MC_BIN_SET:
    case MC_BIN_SETQ:
        op = MC_SET;
        break;
    case MC_BIN_ADD:
    case MC_BIN_ADDQ:
        op = MC_ADD;
        break;
    case MC_BIN_REPLACE:
    case MC_BIN_REPLACEQ:
        op = MC_REPLACE;
        break;
    case MC_BIN_APPEND:
    case MC_BIN_APPENDQ:
        op = MC_APPEND;
        break;
    default:
        op = MC_PREPEND;
        break;
    }
    mc_item *it;
    int r = mc_item_alloc(key, h->keylen, flags, exptime, vlen, &it);
    if (r != MC_OK) {
        if (op == MC_SET)
            mc_unlink_key(key, h->keylen);
        return respond_error(c, h, r == MC_TOO_LARGE ? MC_BIN_E2BIG : MC_BIN_ENOMEM) &&
               skip_body(c, vlen);
    }
    if (!mc_read_exact(c, mc_item_value(it), vlen)) {
        mc_item_release(it);
        return false;
    }
    uint64_t cas;
    r = mc_store_item(it, op, h->cas, &cas);
    mc_item_release(it);
    switch (r) {
    case MC_STORED:
        return respond_ok(c, h, quiet, cas);
    case MC_EXISTS:
        return respond_error(c, h, MC_BIN_KEY_EEXISTS);
    case MC_NOT_FOUND:
        return respond_error(c, h, MC_BIN_KEY_ENOENT);
    case MC_NOT_STORED:
        /* memcached's codes: a failed add means the key exists, a failed
         * replace that it does not. */
        return respond_error(c, h,
                             op == MC_ADD       ? MC_BIN_KEY_EEXISTS
                             : op == MC_REPLACE ? MC_BIN_KEY_ENOENT
                                                : MC_BIN_NOT_STORED);
    default:
        return respond_error(c, h, MC_BIN_ENOMEM);
    }
}

static bool arith(struct mc_conn *c, const mc_bin_header *h, const uint8_t *ext, const char *key,
                  bool quiet)
{
    bool incr = h->opcode == MC_BIN_INCREMENT || h->opcode == MC_BIN_INCREMENTQ;
    uint32_t exp = mc_bin_get32(ext + 16);
    uint64_t v, cas = 0;
    int r = mc_arith(key, h->keylen, incr, mc_bin_get64(ext), exp != 0xffffffffu,
                     mc_bin_get64(ext + 8), mc_exptime(exp), h->cas, &v, &cas);
    switch (r) {
    case MC_OK: {
        if (quiet)
            return true;
        uint8_t body[8];
        mc_bin_put64(body, v);
        return respond(c, h, MC_BIN_OK, cas, NULL, 0, NULL, 0, body, 8);
    }
    case MC_NOT_FOUND:
        return respond_error(c, h, MC_BIN_KEY_ENOENT);
    case MC_EXISTS:
        return respond_error(c, h, MC_BIN_KEY_EEXISTS);
    case MC_NON_NUMERIC:
        return respond_error(c, h, MC_BIN_DELTA_BADVAL);
    default:
        return respond_error(c, h, MC_BIN_ENOMEM);
    }
}

static bool stat(struct mc_conn *c, const mc_bin_header *h, const char *key)
{
    struct mc_stat st[MC_STATS_MAX];
    bool reset;
    int n = mc_stats_collect((mc_span){key, h->keylen}, st, MC_STATS_MAX, &reset);
    if (n < 0)
        return respond_error(c, h, MC_BIN_KEY_ENOENT);
    for (int i = 0; i < n; i++)
        if (!respond(c, h, MC_BIN_OK, 0, NULL, 0, st[i].name, strlen(st[i].name), st[i].value,
                     strlen(st[i].value)))
            return false;
    return respond(c, h, MC_BIN_OK, 0, NULL, 0, NULL, 0, NULL, 0); /* the end marker */
}

int mc_binary_step(struct mc_conn *c)
{
    const uint8_t *p = (const uint8_t *)c->in + c->in_off;
    size_t have = c->in_len - c->in_off;
    mc_bin_header h;
    int r = mc_bin_parse_header(p, have, &h);
    if (r <= 0)
        return r;
    size_t fixed = MC_BIN_HEADER + h.extlen + h.keylen;
    if (have < fixed && fixed <= MC_IN_CAP)
        return 0;
    int kind;
    bool quiet;
    int st = mc_bin_check(&h, &kind, &quiet);
    if (st != MC_BIN_OK) {
        bool framed = (uint64_t)h.extlen + h.keylen <= h.bodylen;
        c->in_off += MC_BIN_HEADER;
        if (!respond_error(c, &h, st) || st == MC_BIN_EINVAL || !framed)
            return -1;
        return skip_body(c, h.bodylen) ? 1 : -1;
    }
    const uint8_t *ext = p + MC_BIN_HEADER;
    const char *key = (const char *)ext + h.extlen;
    c->in_off += fixed; /* ext and key stay valid until the next read */
    bool ok;
    switch (kind) {
    case MC_BK_GET:
        ok = get(c, &h, key, quiet, false, 0);
        break;
    case MC_BK_STORE:
    case MC_BK_CONCAT:
        ok = update(c, &h, ext, key, kind, quiet);
        break;
    case MC_BK_DELETE:
        switch (mc_delete(key, h.keylen, h.cas)) {
        case MC_OK:
            ok = respond_ok(c, &h, quiet, 0);
            break;
        case MC_EXISTS:
            ok = respond_error(c, &h, MC_BIN_KEY_EEXISTS);
            break;
        default:
            ok = respond_error(c, &h, MC_BIN_KEY_ENOENT);
            break;
        }
        break;
    case MC_BK_ARITH:
        ok = arith(c, &h, ext, key, quiet);
        break;
    case MC_BK_QUIT:
        if (!quiet)
            respond_ok(c, &h, false, 0);
        return -1;
    case MC_BK_FLUSH:
        mc_flush(h.extlen ? (int64_t)mc_bin_get32(ext) : 0);
        ok = respond_ok(c, &h, quiet, 0);
        break;
    case MC_BK_NOOP:
        ok = respond_ok(c, &h, false, 0);
        break;
    case MC_BK_VERSION:
        ok = respond(c, &h, MC_BIN_OK, 0, NULL, 0, NULL, 0, MC_VERSION, strlen(MC_VERSION));
        break;
    case MC_BK_STAT:
        ok = stat(c, &h, key);
        break;
    case MC_BK_VERBOSITY: {
        uint32_t level = mc_bin_get32(ext);
        __atomic_store_n(&mc_verbose, (int)(level > 3 ? 3 : level), __ATOMIC_RELAXED);
        ok = respond_ok(c, &h, false, 0);
        break;
    }
    default: /* MC_BK_TOUCH: touch, gat, gatq, gatk, gatkq */
        if (h.opcode == MC_BIN_TOUCH)
            ok = mc_touch(key, h.keylen, mc_exptime(mc_bin_get32(ext))) == MC_OK
                     ? respond_ok(c, &h, false, 0)
                     : respond_error(c, &h, MC_BIN_KEY_ENOENT);
        else
            ok = get(c, &h, key, quiet, true, mc_exptime(mc_bin_get32(ext)));
        break;
    }
    return ok ? 1 : -1;
}
