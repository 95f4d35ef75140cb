/* SPDX-License-Identifier: MIT */
/*
 * ascii_parse: the memcached ASCII command-line parser of fern-memcached.
 *
 * A pure function over one command line (the bytes before its '\n', a
 * trailing '\r' removed): no allocation, no I/O, no global state, so it is
 * unit-tested and fuzzed on its own. The result points into the line.
 *
 * The line ends at its first NUL byte, if it has one: memcached reads a
 * command line as a C string, so `get a\0b` asks for `a` and a key cannot
 * hold a NUL.
 *
 * Tokens are separated by runs of spaces (as memcached does). Numbers are
 * plain decimal digits (exptime and flush delays may start with '-'); a
 * number out of its range is a format error. Flags are read as memcached
 * 1.6 reads them (strtoul): up to 2^64 - 1, an optional '+', leading
 * whitespace other than spaces, '-' only when the result is still
 * non-negative as a 64-bit signed number, and the low 32 bits are kept
 * (memcached's flags are 32-bit: 4294967296 is stored and returned as 0). Keys are at most MC_KEY_MAX
 * bytes. Arity follows memcached's, including its leniency: `version` and
 * `quit` ignore extra tokens, and a storage command's optional last token
 * is ignored unless it is `noreply`.
 *
 * noreply: a command that takes it has it iff its last token is exactly
 * "noreply". cmd->noreply is set on every result, not only MC_PARSE_OK,
 * because memcached decides it before checking arguments: a malformed
 * command sent with noreply gets no answer at all.
 *
 * Results (what the server answers):
 *   MC_PARSE_OK             the command is in *cmd
 *   MC_PARSE_UNKNOWN        "ERROR" (unknown command or wrong arity)
 *   MC_PARSE_FORMAT         "CLIENT_ERROR bad command line format"
 *   MC_PARSE_DELTA          "CLIENT_ERROR invalid numeric delta argument"
 *   MC_PARSE_EXPTIME        "CLIENT_ERROR invalid exptime argument"
 *   MC_PARSE_DELETE_USAGE   "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
 */
#ifndef FERN_MC_ASCII_PARSE_H
#define FERN_MC_ASCII_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MC_KEY_MAX 250u

typedef struct mc_span {
    const char *p;
    size_t n;
} mc_span;

enum mc_ascii_op {
    MC_A_GET = 1,
    MC_A_GETS,
    MC_A_GAT,
    MC_A_GATS,
    MC_A_SET,
    MC_A_ADD,
    MC_A_REPLACE,
    MC_A_APPEND,
    MC_A_PREPEND,
    MC_A_CAS,
    MC_A_DELETE,
    MC_A_INCR,
    MC_A_DECR,
    MC_A_TOUCH,
    MC_A_FLUSH_ALL,
    MC_A_VERSION,
    MC_A_VERBOSITY,
    MC_A_STATS,
    MC_A_QUIT,
};

enum mc_parse_result {
    MC_PARSE_OK = 0,
    MC_PARSE_UNKNOWN = -1,
    MC_PARSE_FORMAT = -2,
    MC_PARSE_DELTA = -3,
    MC_PARSE_EXPTIME = -4,
    MC_PARSE_DELETE_USAGE = -5,
};

typedef struct mc_ascii_cmd {
    int op;         /* enum mc_ascii_op */
    mc_span key;    /* storage, delete, incr/decr, touch */
    mc_span keys;   /* get/gets/gat/gats: the keys, walk them with mc_next_key */
    unsigned nkeys; /* how many keys `keys` holds (>= 1) */
    uint32_t flags;  /* the low 32 bits of the number sent */
    int64_t exptime; /* as sent (storage, touch, gat/gats) */
    uint32_t bytes;  /* value length of a storage command */
    uint64_t cas;    /* cas: the compare value */
    uint64_t delta;  /* incr/decr */
    int64_t delay;   /* flush_all; 0 if absent */
    uint32_t level;  /* verbosity */
    mc_span args;    /* stats: everything after "stats" (may be empty) */
    bool noreply;
} mc_ascii_cmd;

/* Parse one command line (len bytes, no line end). Returns MC_PARSE_OK or a
 * negative MC_PARSE_*; on an error only cmd->op and cmd->noreply are
 * meaningful. */
int mc_ascii_parse(const char *line, size_t len, mc_ascii_cmd *cmd);

/* Take the next key off *rest (keys of a retrieval command). Returns false
 * when none is left. */
bool mc_next_key(mc_span *rest, mc_span *key);

/* Longest value a storage command may announce (the rest of the int32 range
 * memcached uses, less the line end). */
#define MC_VALUE_LEN_MAX ((uint32_t)INT32_MAX - 2u)

#ifdef __cplusplus
}
#endif
#endif
