/* SPDX-License-Identifier: MIT */
/*
 * ascii_parse: see ascii_parse.h for the grammar and the results.
 *
 * The line is split into at most MAX_TOKENS tokens first (the storage
 * commands need 7 at most; retrieval commands keep their key list as one
 * span, so the bound never limits how many keys a get may ask for), then
 * each command checks its arity and its fields.
 */
#include "ascii_parse.h"

#include <string.h>

#define MAX_TOKENS 8

struct tokens {
    mc_span t[MAX_TOKENS];
    unsigned n;
    mc_span rest; /* from the start of token MAX_TOKENS-1 (or after the first) */
};

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Split on runs of spaces. t[1]'s start is kept so that retrieval commands
 * can take everything after the command name as their key list. */
static void tokenize(const char *p, size_t len, struct tokens *tk)
{
    size_t i = 0;
    tk->n = 0;
    tk->rest.p = p + len;
    tk->rest.n = 0;
    while (i < len) {
        while (i < len && p[i] == ' ')
            i++;
        if (i == len)
            break;
        size_t s = i;
        while (i < len && p[i] != ' ')
            i++;
        if (tk->n == 1) {
            tk->rest.p = p + s;
            tk->rest.n = len - s;
        }
        if (tk->n == MAX_TOKENS) {
            tk->n++; /* "too many": every command rejects n > MAX_TOKENS */
            return;
        }
        tk->t[tk->n].p = p + s;
        tk->t[tk->n].n = i - s;
        tk->n++;
    }
}

static bool span_is(mc_span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.n == n && memcmp(s.p, lit, n) == 0;
}

static bool parse_u64(mc_span s, uint64_t max, uint64_t *out)
{
    if (s.n == 0 || s.n > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (!is_digit(s.p[i]))
            return false;
        unsigned d = (unsigned)(s.p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

/* Client flags, as memcached 1.6.18 reads them (safe_strtoflags: strtoul,
 * then the low 32 bits). strtoul skips leading whitespace (spaces never
 * reach here: they separate tokens) and takes one '+' or '-'; a number over
 * 2^64 - 1 is refused (ERANGE); '-' negates modulo 2^64, and memcached
 * refuses the result only when it is negative as a signed 64-bit number, so
 * "-0" is 0 and "-18446744073709551615" is 1. Anything after the digits is
 * refused. (A '\n' cannot occur inside a line.) */
static bool parse_flags(mc_span s, uint32_t *out)
{
    size_t i = 0;
    while (i < s.n && (s.p[i] == '\t' || s.p[i] == '\v' || s.p[i] == '\f' || s.p[i] == '\r'))
        i++;
    bool neg = i < s.n && s.p[i] == '-';
    if (i < s.n && (s.p[i] == '-' || s.p[i] == '+'))
        i++;
    uint64_t v;
    if (!parse_u64((mc_span){s.p + i, s.n - i}, UINT64_MAX, &v))
        return false;
    if (neg) {
        v = 0 - v;
        if ((int64_t)v < 0)
            return false;
    }
    *out = (uint32_t)v;
    return true;
}

/* A signed 32-bit number, as memcached's exptime. */
static bool parse_i32(mc_span s, int64_t *out)
{
    bool neg = s.n > 0 && s.p[0] == '-';
    mc_span d = {s.p + neg, s.n - neg};
    uint64_t v;
    if (!parse_u64(d, neg ? (uint64_t)INT32_MAX + 1 : (uint64_t)INT32_MAX, &v))
        return false;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

static bool key_ok(mc_span k)
{
    return k.n > 0 && k.n <= MC_KEY_MAX;
}

bool mc_next_key(mc_span *rest, mc_span *key)
{
    size_t i = 0;
    while (i < rest->n && rest->p[i] == ' ')
        i++;
    if (i == rest->n)
        return false;
    size_t s = i;
    while (i < rest->n && rest->p[i] != ' ')
        i++;
    key->p = rest->p + s;
    key->n = i - s;
    rest->p += i;
    rest->n -= i;
    return true;
}

/* The key list of a retrieval command: every key valid, at least one. */
static int parse_keys(mc_span rest, mc_ascii_cmd *cmd)
{
    cmd->keys = rest;
    cmd->nkeys = 0;
    mc_span k;
    while (mc_next_key(&rest, &k)) {
        if (!key_ok(k))
            return MC_PARSE_FORMAT;
        cmd->nkeys++;
    }
    return cmd->nkeys ? MC_PARSE_OK : MC_PARSE_UNKNOWN;
}

/* memcached's rule: a command that takes noreply has it iff its last token
 * is exactly "noreply"; it is known before any argument is checked, so a
 * malformed command sent with noreply gets no answer either. */
static void noreply_maybe(const struct tokens *tk, mc_ascii_cmd *cmd)
{
    unsigned last = tk->n <= MAX_TOKENS ? tk->n - 1 : MAX_TOKENS - 1;
    cmd->noreply = span_is(tk->t[last], "noreply");
}

/* set/add/replace/append/prepend <key> <flags> <exptime> <bytes> [noreply]
 * cas <key> <flags> <exptime> <bytes> <cas> [noreply]
 * (as memcached, a sixth/seventh token other than noreply is ignored) */
static int parse_storage(const struct tokens *tk, mc_ascii_cmd *cmd)
{
    unsigned need = cmd->op == MC_A_CAS ? 6 : 5;
    if (tk->n < need || tk->n > need + 1)
        return MC_PARSE_UNKNOWN;
    noreply_maybe(tk, cmd);
    uint64_t bytes;
    if (!key_ok(tk->t[1]) || !parse_flags(tk->t[2], &cmd->flags) ||
        !parse_i32(tk->t[3], &cmd->exptime) || !parse_u64(tk->t[4], MC_VALUE_LEN_MAX, &bytes))
        return MC_PARSE_FORMAT;
    if (cmd->op == MC_A_CAS && !parse_u64(tk->t[5], UINT64_MAX, &cmd->cas))
        return MC_PARSE_FORMAT;
    cmd->key = tk->t[1];
    cmd->bytes = (uint32_t)bytes;
    return MC_PARSE_OK;
}

static const struct {
    const char *name;
    int op;
} commands[] = {
    {"get", MC_A_GET},
    {"gets", MC_A_GETS},
    {"gat", MC_A_GAT},
    {"gats", MC_A_GATS},
    {"set", MC_A_SET},
    {"add", MC_A_ADD},
    {"replace", MC_A_REPLACE},
    {"append", MC_A_APPEND},
    {"prepend", MC_A_PREPEND},
    {"cas", MC_A_CAS},
    {"delete", MC_A_DELETE},
    {"incr", MC_A_INCR},
    {"decr", MC_A_DECR},
    {"touch", MC_A_TOUCH},
    {"flush_all", MC_A_FLUSH_ALL},
    {"version", MC_A_VERSION},
    {"verbosity", MC_A_VERBOSITY},
    {"stats", MC_A_STATS},
    {"quit", MC_A_QUIT},
};

int mc_ascii_parse(const char *line, size_t len, mc_ascii_cmd *cmd)
{
    const char *nul = (const char *)memchr(line, '\0', len);
    if (nul) /* memcached parses the line as a C string: it ends here */
        len = (size_t)(nul - line);
    struct tokens tk;
    tokenize(line, len, &tk);
    memset(cmd, 0, sizeof *cmd);
    if (tk.n == 0)
        return MC_PARSE_UNKNOWN;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (span_is(tk.t[0], commands[i].name)) {
            cmd->op = commands[i].op;
            break;
        }
    uint64_t v;
    switch (cmd->op) {
    case MC_A_GET:
    case MC_A_GETS:
        return tk.n >= 2 ? parse_keys(tk.rest, cmd) : MC_PARSE_UNKNOWN;
    case MC_A_GAT:
    case MC_A_GATS: {
        if (tk.n < 3)
            return MC_PARSE_UNKNOWN;
        if (!parse_i32(tk.t[1], &cmd->exptime))
            return MC_PARSE_EXPTIME;
        mc_span rest = tk.rest, first;
        mc_next_key(&rest, &first); /* the exptime */
        return parse_keys(rest, cmd);
    }
    case MC_A_SET:
    case MC_A_ADD:
    case MC_A_REPLACE:
    case MC_A_APPEND:
    case MC_A_PREPEND:
    case MC_A_CAS:
        return parse_storage(&tk, cmd);
    case MC_A_DELETE: {
        /* delete <key> [0] [noreply]: the 0 is a relic of a removed option. */
        if (tk.n < 2 || tk.n > 4)
            return MC_PARSE_UNKNOWN;
        noreply_maybe(&tk, cmd);
        if (!key_ok(tk.t[1]))
            return MC_PARSE_FORMAT;
        cmd->key = tk.t[1];
        bool zero = tk.n > 2 && span_is(tk.t[2], "0");
        if ((tk.n == 3 && !zero && !cmd->noreply) || (tk.n == 4 && !(zero && cmd->noreply)))
            return MC_PARSE_DELETE_USAGE;
        return MC_PARSE_OK;
    }
    case MC_A_INCR:
    case MC_A_DECR:
        if (tk.n < 3 || tk.n > 4)
            return MC_PARSE_UNKNOWN;
        noreply_maybe(&tk, cmd);
        if (!key_ok(tk.t[1]))
            return MC_PARSE_FORMAT;
        cmd->key = tk.t[1];
        return parse_u64(tk.t[2], UINT64_MAX, &cmd->delta) ? MC_PARSE_OK : MC_PARSE_DELTA;
    case MC_A_TOUCH:
        if (tk.n < 3 || tk.n > 4)
            return MC_PARSE_UNKNOWN;
        noreply_maybe(&tk, cmd);
        if (!key_ok(tk.t[1]))
            return MC_PARSE_FORMAT;
        cmd->key = tk.t[1];
        return parse_i32(tk.t[2], &cmd->exptime) ? MC_PARSE_OK : MC_PARSE_EXPTIME;
    case MC_A_FLUSH_ALL:
        if (tk.n > 3)
            return MC_PARSE_UNKNOWN;
        noreply_maybe(&tk, cmd);
        if (tk.n == (cmd->noreply ? 2u : 1u))
            return MC_PARSE_OK;
        return parse_i32(tk.t[1], &cmd->delay) ? MC_PARSE_OK : MC_PARSE_EXPTIME;
    case MC_A_VERSION: /* memcached ignores anything after these two */
    case MC_A_QUIT:
        return MC_PARSE_OK;
    case MC_A_VERBOSITY:
        if (tk.n < 2 || tk.n > 3)
            return MC_PARSE_UNKNOWN;
        noreply_maybe(&tk, cmd);
        if (tk.n == 2 && cmd->noreply)
            return MC_PARSE_OK; /* "verbosity noreply": level 0, silently */
        if (!parse_u64(tk.t[1], UINT32_MAX, &v))
            return MC_PARSE_FORMAT;
        cmd->level = (uint32_t)v;
        return MC_PARSE_OK;
    case MC_A_STATS:
        cmd->args = tk.n >= 2 ? tk.rest : (mc_span){line + len, 0};
        return MC_PARSE_OK;
    default:
        return MC_PARSE_UNKNOWN;
    }
}
