/* SPDX-License-Identifier: MIT */
/*
 * binary_parse: header decoding and per-opcode shape checks (see
 * binary_parse.h). The table below is the whole protocol surface this
 * server accepts; anything else is MC_BIN_UNKNOWN_COMMAND.
 */
#include "binary_parse.h"

#include "ascii_parse.h" /* MC_KEY_MAX */

uint16_t mc_bin_get16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

uint32_t mc_bin_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t mc_bin_get64(const uint8_t *p)
{
    return (uint64_t)mc_bin_get32(p) << 32 | mc_bin_get32(p + 4);
}

void mc_bin_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

void mc_bin_put32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

void mc_bin_put64(uint8_t *p, uint64_t v)
{
    mc_bin_put32(p, (uint32_t)(v >> 32));
    mc_bin_put32(p + 4, (uint32_t)v);
}

int mc_bin_parse_header(const uint8_t *p, size_t len, mc_bin_header *h)
{
    if (len == 0)
        return 0;
    if (p[0] != MC_BIN_REQ_MAGIC)
        return -1;
    if (len < MC_BIN_HEADER)
        return 0;
    h->opcode = p[1];
    h->keylen = mc_bin_get16(p + 2);
    h->extlen = p[4];
    h->datatype = p[5];
    h->vbucket = mc_bin_get16(p + 6);
    h->bodylen = mc_bin_get32(p + 8);
    h->opaque = mc_bin_get32(p + 12);
    h->cas = mc_bin_get64(p + 16);
    return MC_BIN_HEADER;
}

/* Shape rules per opcode: extras length (-1: 0 or 4), key (0 none, 1
 * required, 2 optional), whether a value may follow. */
struct shape {
    uint8_t kind;
    bool quiet;
    int8_t ext;
    uint8_t key;
    bool value;
};

/* Plain C initializers (the unit test compiles this file as C++). Most
 * used first: the lookup is a scan of a few dozen entries. */
static const struct {
    uint8_t opcode;
    struct shape shape;
} shapes[] = {
    {MC_BIN_GET, {MC_BK_GET, false, 0, 1, false}},
    {MC_BIN_GETK, {MC_BK_GET, false, 0, 1, false}},
    {MC_BIN_GETQ, {MC_BK_GET, true, 0, 1, false}},
    {MC_BIN_GETKQ, {MC_BK_GET, true, 0, 1, false}},
    {MC_BIN_SET, {MC_BK_STORE, false, 8, 1, true}},
    {MC_BIN_ADD, {MC_BK_STORE, false, 8, 1, true}},
    {MC_BIN_REPLACE, {MC_BK_STORE, false, 8, 1, true}},
    {MC_BIN_SETQ, {MC_BK_STORE, true, 8, 1, true}},
    {MC_BIN_ADDQ, {MC_BK_STORE, true, 8, 1, true}},
    {MC_BIN_REPLACEQ, {MC_BK_STORE, true, 8, 1, true}},
    {MC_BIN_APPEND, {MC_BK_CONCAT, false, 0, 1, true}},
    {MC_BIN_PREPEND, {MC_BK_CONCAT, false, 0, 1, true}},
    {MC_BIN_APPENDQ, {MC_BK_CONCAT, true, 0, 1, true}},
    {MC_BIN_PREPENDQ, {MC_BK_CONCAT, true, 0, 1, true}},
    {MC_BIN_DELETE, {MC_BK_DELETE, false, 0, 1, false}},
    {MC_BIN_DELETEQ, {MC_BK_DELETE, true, 0, 1, false}},
    {MC_BIN_INCREMENT, {MC_BK_ARITH, false, 20, 1, false}},
    {MC_BIN_DECREMENT, {MC_BK_ARITH, false, 20, 1, false}},
    {MC_BIN_INCREMENTQ, {MC_BK_ARITH, true, 20, 1, false}},
    {MC_BIN_DECREMENTQ, {MC_BK_ARITH, true, 20, 1, false}},
    {MC_BIN_QUIT, {MC_BK_QUIT, false, 0, 0, false}},
    {MC_BIN_QUITQ, {MC_BK_QUIT, true, 0, 0, false}},
    {MC_BIN_FLUSH, {MC_BK_FLUSH, false, -1, 0, false}},
    {MC_BIN_FLUSHQ, {MC_BK_FLUSH, true, -1, 0, false}},
    {MC_BIN_NOOP, {MC_BK_NOOP, false, 0, 0, false}},
    {MC_BIN_VERSION, {MC_BK_VERSION, false, 0, 0, false}},
    {MC_BIN_STAT, {MC_BK_STAT, false, 0, 2, false}},
    {MC_BIN_VERBOSITY, {MC_BK_VERBOSITY, false, 4, 0, false}},
    {MC_BIN_TOUCH, {MC_BK_TOUCH, false, 4, 1, false}},
    {MC_BIN_GAT, {MC_BK_TOUCH, false, 4, 1, false}},
    {MC_BIN_GATK, {MC_BK_TOUCH, false, 4, 1, false}},
    {MC_BIN_GATQ, {MC_BK_TOUCH, true, 4, 1, false}},
    {MC_BIN_GATKQ, {MC_BK_TOUCH, true, 4, 1, false}},
};

int mc_bin_check(const mc_bin_header *h, int *kind, bool *quiet)
{
    struct shape s = {0, false, 0, 0, false};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (shapes[i].opcode == h->opcode) {
            s = shapes[i].shape;
            break;
        }
    if (s.kind == 0)
        return MC_BIN_UNKNOWN_COMMAND;
    *kind = s.kind;
    *quiet = s.quiet;
    if ((uint64_t)h->extlen + h->keylen > h->bodylen)
        return MC_BIN_EINVAL;
    if (s.ext >= 0 ? h->extlen != (uint8_t)s.ext : (h->extlen != 0 && h->extlen != 4))
        return MC_BIN_EINVAL;
    if ((s.key == 0 && h->keylen) || (s.key == 1 && h->keylen == 0) || h->keylen > MC_KEY_MAX)
        return MC_BIN_EINVAL;
    if (!s.value && mc_bin_value_len(h) != 0)
        return MC_BIN_EINVAL;
    return MC_BIN_OK;
}
