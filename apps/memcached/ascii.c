/* SPDX-License-Identifier: MIT */
/*
 * ascii: the memcached text protocol, one command per step.
 *
 * A step needs a whole line in the input buffer (ascii_parse.c reads it);
 * a storage command's value is then read straight into a fresh, unlinked
 * item, and the item is linked only once the value and its "\r\n" are all
 * in: a client that vanishes or sends a bad data chunk leaves nothing
 * half-written behind.
 *
 * Errors, as memcached answers them:
 *  - unknown command or wrong arity: ERROR;
 *  - malformed arguments: CLIENT_ERROR ...;
 *  - a value over the -I limit: SERVER_ERROR object too large for cache,
 *    the value is read and dropped, and for `set` the key's old value is
 *    removed (a failed set must not leave stale data); out of memory the
 *    same with SERVER_ERROR out of memory storing object. The answer is
 *    queued before the value is dropped, so it leaves before the server
 *    waits for the value's bytes (memcached sends the same bytes, but only
 *    once the whole value is in);
 *  - a line longer than the input buffer: CLIENT_ERROR line too long, and
 *    the connection closes (there is no telling where the next command
 *    starts).
 * noreply silences every answer, errors included, as memcached 1.6 does: a
 * client that asked for silence is not reading, and a pipelining client
 * would take any answer for the answer to its next command. That includes
 * CLIENT_ERROR bad data chunk (memcached 1.6.18 sends it only without
 * noreply; the bytes after the value's announced length are then read as
 * the next command, with or without noreply).
 */
#include "memcached.h"

#include <string.h>

#define OUT_LIT(c, lit) mc_out((c), (lit), sizeof(lit) - 1)

static bool reply(struct mc_conn *c, const mc_ascii_cmd *cmd, const char *s)
{
    return cmd->noreply || mc_out(c, s, strlen(s));
}
#define REPLY_LIT(c, cmd, lit) ((cmd)->noreply || OUT_LIT((c), (lit)))

static size_t put_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

/* "VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n" */
static bool send_value(struct mc_conn *c, mc_item *it, bool with_cas)
{
    size_t head_max = 6 + MC_KEY_MAX + 3 * 21 + 2;
    char *p = mc_out_reserve(c, head_max);
    if (!p)
        return false;
    char *s = p;
    memcpy(p, "VALUE ", 6);
    p += 6;
    memcpy(p, it->data, it->nkey);
    p += it->nkey;
    *p++ = ' ';
    p += put_u64(p, it->flags);
    *p++ = ' ';
    p += put_u64(p, it->nbytes);
    if (with_cas) {
        *p++ = ' ';
        p += put_u64(p, it->cas);
    }
    *p++ = '\r';
    *p++ = '\n';
    mc_out_commit(c, (size_t)(p - s));
    return mc_out(c, mc_item_value(it), it->nbytes + 2);
}

static bool retrieve(struct mc_conn *c, const mc_ascii_cmd *cmd)
{
    bool cas = cmd->op == MC_A_GETS || cmd->op == MC_A_GATS;
    bool touch = cmd->op == MC_A_GAT || cmd->op == MC_A_GATS;
    uint32_t exptime = touch ? mc_exptime(cmd->exptime) : 0;
    mc_span rest = cmd->keys, key;
    while (mc_next_key(&rest, &key)) {
        mc_item *it = mc_get(key.p, key.n, touch, exptime);
        if (!it)
            continue;
        bool ok = send_value(c, it, cas);
        mc_item_release(it);
        if (!ok)
            return false;
    }
    return OUT_LIT(c, "END\r\n");
}

static const int store_ops[] = {
    [MC_A_SET] = MC_SET,       [MC_A_ADD] = MC_ADD,         [MC_A_REPLACE] = MC_REPLACE,
    [MC_A_APPEND] = MC_APPEND, [MC_A_PREPEND] = MC_PREPEND, [MC_A_CAS] = MC_CAS,
};

static bool storage(struct mc_conn *c, const mc_ascii_cmd *cmd)
{
    mc_item *it;
    int r = mc_item_alloc(cmd->key.p, cmd->key.n, cmd->flags, mc_exptime(cmd->exptime), cmd->bytes,
                          &it);
    if (r != MC_OK) {
        if (cmd->op == MC_A_SET)
            mc_unlink_key(cmd->key.p, cmd->key.n);
        bool ok = r == MC_TOO_LARGE
                      ? REPLY_LIT(c, cmd, "SERVER_ERROR object too large for cache\r\n")
                      : REPLY_LIT(c, cmd, "SERVER_ERROR out of memory storing object\r\n");
        return ok && mc_skip(c, (uint64_t)cmd->bytes + 2);
    }
    char *v = mc_item_value(it);
    if (!mc_read_exact(c, v, (size_t)cmd->bytes + 2)) {
        mc_item_release(it);
        return false;
    }
    if (v[cmd->bytes] != '\r' || v[cmd->bytes + 1] != '\n') {
        mc_item_release(it);
        return REPLY_LIT(c, cmd, "CLIENT_ERROR bad data chunk\r\n");
    }
    uint64_t cas;
    r = mc_store_item(it, store_ops[cmd->op], cmd->cas, &cas);
    mc_item_release(it);
    switch (r) {
    case MC_STORED:
        return reply(c, cmd, "STORED\r\n");
    case MC_NOT_STORED:
        return reply(c, cmd, "NOT_STORED\r\n");
    case MC_EXISTS:
        return reply(c, cmd, "EXISTS\r\n");
    case MC_NOT_FOUND:
        return reply(c, cmd, "NOT_FOUND\r\n");
    default:
        return REPLY_LIT(c, cmd, "SERVER_ERROR out of memory storing object\r\n");
    }
}

static bool arith(struct mc_conn *c, const mc_ascii_cmd *cmd)
{
    uint64_t v, cas;
    int r = mc_arith(cmd->key.p, cmd->key.n, cmd->op == MC_A_INCR, cmd->delta, false, 0, 0, 0, &v,
                     &cas);
    switch (r) {
    case MC_OK: {
        if (cmd->noreply)
            return true;
        char *p = mc_out_reserve(c, 22);
        if (!p)
            return false;
        size_t n = put_u64(p, v);
        p[n] = '\r';
        p[n + 1] = '\n';
        mc_out_commit(c, n + 2);
        return true;
    }
    case MC_NOT_FOUND:
        return reply(c, cmd, "NOT_FOUND\r\n");
    case MC_NON_NUMERIC:
        return REPLY_LIT(c, cmd,
                         "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    default:
        return REPLY_LIT(c, cmd, "SERVER_ERROR out of memory\r\n");
    }
}

static bool stats(struct mc_conn *c, const mc_ascii_cmd *cmd)
{
    struct mc_stat st[MC_STATS_MAX];
    bool reset;
    int n = mc_stats_collect(cmd->args, st, MC_STATS_MAX, &reset);
    if (reset)
        return OUT_LIT(c, "RESET\r\n");
    if (n < 0)
        return OUT_LIT(c, "ERROR\r\n");
    for (int i = 0; i < n; i++) {
        size_t kn = strlen(st[i].name), vn = strlen(st[i].value);
        char *p = mc_out_reserve(c, 5 + kn + 1 + vn + 2);
        if (!p)
            return false;
        memcpy(p, "STAT ", 5);
        memcpy(p + 5, st[i].name, kn);
        p[5 + kn] = ' ';
        memcpy(p + 6 + kn, st[i].value, vn);
        memcpy(p + 6 + kn + vn, "\r\n", 2);
        mc_out_commit(c, 8 + kn + vn);
    }
    return OUT_LIT(c, "END\r\n");
}

static bool execute(struct mc_conn *c, const mc_ascii_cmd *cmd)
{
    switch (cmd->op) {
    case MC_A_GET:
    case MC_A_GETS:
    case MC_A_GAT:
    case MC_A_GATS:
        return retrieve(c, cmd);
    case MC_A_SET:
    case MC_A_ADD:
    case MC_A_REPLACE:
    case MC_A_APPEND:
    case MC_A_PREPEND:
    case MC_A_CAS:
        return storage(c, cmd);
    case MC_A_DELETE:
        return reply(c, cmd,
                     mc_delete(cmd->key.p, cmd->key.n, 0) == MC_OK ? "DELETED\r\n"
                                                                   : "NOT_FOUND\r\n");
    case MC_A_INCR:
    case MC_A_DECR:
        return arith(c, cmd);
    case MC_A_TOUCH:
        return reply(c, cmd,
                     mc_touch(cmd->key.p, cmd->key.n, mc_exptime(cmd->exptime)) == MC_OK
                         ? "TOUCHED\r\n"
                         : "NOT_FOUND\r\n");
    case MC_A_FLUSH_ALL:
        mc_flush(cmd->delay);
        return reply(c, cmd, "OK\r\n");
    case MC_A_VERSION:
        return OUT_LIT(c, "VERSION " MC_VERSION "\r\n");
    case MC_A_VERBOSITY:
        __atomic_store_n(&mc_verbose, (int)(cmd->level > 3 ? 3 : cmd->level), __ATOMIC_RELAXED);
        return reply(c, cmd, "OK\r\n");
    case MC_A_STATS:
        return stats(c, cmd);
    default:
        return false;
    }
}

int mc_ascii_step(struct mc_conn *c)
{
    char *start = c->in + c->in_off;
    size_t have = c->in_len - c->in_off;
    char *nl = memchr(start, '\n', have);
    if (!nl) {
        if (have < MC_IN_CAP)
            return 0;
        OUT_LIT(c, "CLIENT_ERROR line too long\r\n");
        return -1;
    }
    size_t len = (size_t)(nl - start);
    if (len && start[len - 1] == '\r')
        len--;
    c->in_off += (size_t)(nl - start) + 1;
    mc_ascii_cmd cmd;
    const char *err;
    switch (mc_ascii_parse(start, len, &cmd)) {
    case MC_PARSE_OK:
        err = NULL;
        break;
    case MC_PARSE_UNKNOWN:
        err = "ERROR\r\n";
        break;
    case MC_PARSE_DELTA:
        err = "CLIENT_ERROR invalid numeric delta argument\r\n";
        break;
    case MC_PARSE_EXPTIME:
        err = "CLIENT_ERROR invalid exptime argument\r\n";
        break;
    case MC_PARSE_DELETE_USAGE:
        err = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
        break;
    default:
        err = "CLIENT_ERROR bad command line format\r\n";
        break;
    }
    if (err)
        return reply(c, &cmd, err) ? 1 : -1;
    if (cmd.op == MC_A_QUIT)
        return -1;
    return execute(c, &cmd) ? 1 : -1;
}
