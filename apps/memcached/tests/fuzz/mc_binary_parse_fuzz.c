/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for fern-memcached's binary protocol framing
 * (apps/memcached/binary_parse.c; built and run by tests/fuzz/run.sh).
 *
 * The input is walked as a stream of requests the way the server walks it
 * (header, then skip the body) from a buffer of exactly its size, so ASan
 * catches any read past it. Checks:
 *  - a header is reported only when 24 bytes are there, a bad magic as -1,
 *    and every proper prefix of a header is 0 (or -1 on a bad first byte);
 *  - mc_bin_check returns OK, EINVAL or UNKNOWN_COMMAND only; on OK the
 *    extras and key fit the body, the key is at most 250 bytes, a key is
 *    present when the opcode needs one, and the quiet flag matches the
 *    opcode's family;
 *  - the integer helpers round-trip;
 *  - the walk always advances and ends.
 */
#include "../../binary_parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(int cond)
{
    if (!cond)
        abort();
}

static void one(const uint8_t *p, size_t len, mc_bin_header *h, int r)
{
    (void)p;
    (void)len;
    int kind = 0;
    bool quiet = false;
    int st = mc_bin_check(h, &kind, &quiet);
    check(st == MC_BIN_OK || st == MC_BIN_EINVAL || st == MC_BIN_UNKNOWN_COMMAND);
    if (st == MC_BIN_OK) {
        check(r == (int)MC_BIN_HEADER);
        check((uint64_t)h->extlen + h->keylen <= h->bodylen);
        check(h->keylen <= 250);
        check(mc_bin_value_len(h) == h->bodylen - h->extlen - h->keylen);
        check(kind >= MC_BK_GET && kind <= MC_BK_TOUCH);
        if (kind == MC_BK_GET || kind == MC_BK_STORE || kind == MC_BK_CONCAT ||
            kind == MC_BK_DELETE || kind == MC_BK_ARITH || kind == MC_BK_TOUCH)
            check(h->keylen > 0);
        if (kind != MC_BK_STORE && kind != MC_BK_CONCAT)
            check(mc_bin_value_len(h) == 0);
        if (kind == MC_BK_NOOP || kind == MC_BK_VERSION || kind == MC_BK_STAT ||
            kind == MC_BK_VERBOSITY)
            check(!quiet);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    size_t off = 0;
    for (int steps = 0; off < size; steps++) {
        check(steps <= (int)size);
        mc_bin_header h;
        int r = mc_bin_parse_header(buf + off, size - off, &h);
        if (r < 0) {
            check(buf[off] != MC_BIN_REQ_MAGIC);
            break;
        }
        if (r == 0) {
            check(size - off < MC_BIN_HEADER);
            break;
        }
        check(r == (int)MC_BIN_HEADER);
        for (size_t n = 1; n < MC_BIN_HEADER; n++) {
            mc_bin_header ph;
            check(mc_bin_parse_header(buf + off, n, &ph) == 0);
        }
        uint8_t tmp[MC_BIN_HEADER];
        mc_bin_put16(tmp, h.keylen);
        mc_bin_put32(tmp + 2, h.bodylen);
        mc_bin_put64(tmp + 6, h.cas);
        check(mc_bin_get16(tmp) == h.keylen && mc_bin_get32(tmp + 2) == h.bodylen &&
              mc_bin_get64(tmp + 6) == h.cas);
        one(buf + off, size - off, &h, r);
        uint64_t next = (uint64_t)off + MC_BIN_HEADER + h.bodylen;
        if (next >= size)
            break;
        off = (size_t)next;
    }
    free(buf);
    return 0;
}
