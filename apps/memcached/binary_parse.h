/* SPDX-License-Identifier: MIT */
/*
 * binary_parse: the memcached binary protocol's framing, for fern-memcached.
 *
 * A request is a 24-byte header (magic 0x80, opcode, key length, extras
 * length, data type, vbucket, total body length, opaque, cas; multi-byte
 * fields big-endian) followed by a body of extras, key and value in that
 * order. This file decodes a header and checks a request's shape against
 * its opcode (which extras it must carry, whether a key or a value is
 * allowed): pure functions, no allocation, no I/O, unit-tested and fuzzed.
 * Executing a request is binary.c's job.
 */
#ifndef FERN_MC_BINARY_PARSE_H
#define FERN_MC_BINARY_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MC_BIN_REQ_MAGIC 0x80u
#define MC_BIN_RES_MAGIC 0x81u
#define MC_BIN_HEADER    24u

enum mc_bin_opcode {
    MC_BIN_GET = 0x00,
    MC_BIN_SET = 0x01,
    MC_BIN_ADD = 0x02,
    MC_BIN_REPLACE = 0x03,
    MC_BIN_DELETE = 0x04,
    MC_BIN_INCREMENT = 0x05,
    MC_BIN_DECREMENT = 0x06,
    MC_BIN_QUIT = 0x07,
    MC_BIN_FLUSH = 0x08,
    MC_BIN_GETQ = 0x09,
    MC_BIN_NOOP = 0x0a,
    MC_BIN_VERSION = 0x0b,
    MC_BIN_GETK = 0x0c,
    MC_BIN_GETKQ = 0x0d,
    MC_BIN_APPEND = 0x0e,
    MC_BIN_PREPEND = 0x0f,
    MC_BIN_STAT = 0x10,
    MC_BIN_SETQ = 0x11,
    MC_BIN_ADDQ = 0x12,
    MC_BIN_REPLACEQ = 0x13,
    MC_BIN_DELETEQ = 0x14,
    MC_BIN_INCREMENTQ = 0x15,
    MC_BIN_DECREMENTQ = 0x16,
    MC_BIN_QUITQ = 0x17,
    MC_BIN_FLUSHQ = 0x18,
    MC_BIN_APPENDQ = 0x19,
    MC_BIN_PREPENDQ = 0x1a,
    MC_BIN_VERBOSITY = 0x1b,
    MC_BIN_TOUCH = 0x1c,
    MC_BIN_GAT = 0x1d,
    MC_BIN_GATQ = 0x1e,
    MC_BIN_GATK = 0x23,
    MC_BIN_GATKQ = 0x24,
};

enum mc_bin_status {
    MC_BIN_OK = 0x00,
    MC_BIN_KEY_ENOENT = 0x01,
    MC_BIN_KEY_EEXISTS = 0x02,
    MC_BIN_E2BIG = 0x03,
    MC_BIN_EINVAL = 0x04,
    MC_BIN_NOT_STORED = 0x05,
    MC_BIN_DELTA_BADVAL = 0x06,
    MC_BIN_UNKNOWN_COMMAND = 0x81,
    MC_BIN_ENOMEM = 0x82,
};

typedef struct mc_bin_header {
    uint8_t opcode;
    uint8_t extlen;
    uint8_t datatype;
    uint16_t keylen;
    uint16_t vbucket;
    uint32_t bodylen;
    uint32_t opaque; /* echoed in the answer */
    uint64_t cas;
} mc_bin_header;

/* What an opcode is, once checked by mc_bin_check. */
enum mc_bin_kind {
    MC_BK_GET = 1, /* get, getq, getk, getkq */
    MC_BK_STORE,   /* set, add, replace (+q): 8 bytes extras, value */
    MC_BK_CONCAT,  /* append, prepend (+q): no extras, value */
    MC_BK_DELETE,  /* delete(q) */
    MC_BK_ARITH,   /* increment, decrement (+q): 20 bytes extras */
    MC_BK_QUIT,    /* quit(q) */
    MC_BK_FLUSH,   /* flush(q): 0 or 4 bytes extras */
    MC_BK_NOOP,
    MC_BK_VERSION,
    MC_BK_STAT,      /* optional key */
    MC_BK_VERBOSITY, /* 4 bytes extras */
    MC_BK_TOUCH,     /* touch, gat, gatq, gatk, gatkq: 4 bytes extras */
};

/* Decode the header at p[0..len). Returns MC_BIN_HEADER when a whole header
 * is there, 0 if more bytes are needed, -1 if the magic byte is wrong (the
 * stream cannot be trusted: close the connection). */
int mc_bin_parse_header(const uint8_t *p, size_t len, mc_bin_header *h);

/* Check a decoded request's shape. Returns MC_BIN_OK with *kind and *quiet
 * set; MC_BIN_UNKNOWN_COMMAND for an opcode this server does not serve;
 * MC_BIN_EINVAL when the extras, key or value do not fit the opcode, a key
 * is over 250 bytes, or extras + key exceed the body. The caller answers
 * either error; after EINVAL it closes the connection (as memcached does),
 * after UNKNOWN_COMMAND it skips the body when extlen + keylen <= bodylen
 * (unless it is over INT32_MAX bytes, which memcached does not skip: see
 * binary.c) and closes otherwise. */
int mc_bin_check(const mc_bin_header *h, int *kind, bool *quiet);

/* Length of the value part of a request's body. Only meaningful after
 * mc_bin_check returned MC_BIN_OK (or the body is consistent). */
static inline uint32_t mc_bin_value_len(const mc_bin_header *h)
{
    return h->bodylen - h->extlen - h->keylen;
}

uint16_t mc_bin_get16(const uint8_t *p);
uint32_t mc_bin_get32(const uint8_t *p);
uint64_t mc_bin_get64(const uint8_t *p);
void mc_bin_put16(uint8_t *p, uint16_t v);
void mc_bin_put32(uint8_t *p, uint32_t v);
void mc_bin_put64(uint8_t *p, uint64_t v);

#ifdef __cplusplus
}
#endif
#endif
