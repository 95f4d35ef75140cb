/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for fern-memcached's ASCII command parser
 * (apps/memcached/ascii_parse.c; built and run by tests/fuzz/run.sh).
 *
 * The input is read as a stream of command lines, split on '\n' with a
 * trailing '\r' removed as the server does; each line is copied into a
 * buffer of exactly its size (so ASan catches any read past it) and parsed.
 * Besides "no crash", it checks the parser's promises:
 *  - the result is MC_PARSE_OK or one of the documented errors;
 *  - the same line parses the same way twice (a pure function);
 *  - on success every span lies inside the line before its first NUL (a
 *    line ends there, as in memcached), keys are 1..250 bytes,
 *    mc_next_key yields exactly nkeys keys and terminates, a value length
 *    is at most MC_VALUE_LEN_MAX, and the operation is a known one.
 */
#include "../../ascii_parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(int cond)
{
    if (!cond)
        abort();
}

static void check_span(mc_span s, const char *lo, const char *hi)
{
    check(s.n == 0 || (s.p >= lo && s.p + s.n <= hi));
}

static void parse_line(const char *data, size_t len)
{
    char *line = malloc(len ? len : 1);
    if (!line)
        return;
    memcpy(line, data, len);
    mc_ascii_cmd cmd, again;
    int r = mc_ascii_parse(line, len, &cmd);
    check(r == MC_PARSE_OK || r == MC_PARSE_UNKNOWN || r == MC_PARSE_FORMAT ||
          r == MC_PARSE_DELTA || r == MC_PARSE_EXPTIME || r == MC_PARSE_DELETE_USAGE);
    check(mc_ascii_parse(line, len, &again) == r && again.noreply == cmd.noreply);
    if (r == MC_PARSE_OK) {
        const char *nul = memchr(line, '\0', len);
        const char *hi = nul ? nul : line + len;
        check(cmd.op >= MC_A_GET && cmd.op <= MC_A_QUIT);
        check(again.op == cmd.op && again.bytes == cmd.bytes && again.nkeys == cmd.nkeys);
        check_span(cmd.key, line, hi);
        check_span(cmd.keys, line, hi);
        check_span(cmd.args, line, hi);
        check(cmd.bytes <= MC_VALUE_LEN_MAX);
        switch (cmd.op) {
        case MC_A_GET:
        case MC_A_GETS:
        case MC_A_GAT:
        case MC_A_GATS: {
            mc_span rest = cmd.keys, k;
            unsigned n = 0;
            while (mc_next_key(&rest, &k)) {
                check(k.n >= 1 && k.n <= MC_KEY_MAX);
                check_span(k, line, hi);
                check(++n <= len);
            }
            check(n == cmd.nkeys && n >= 1);
            break;
        }
        case MC_A_SET:
        case MC_A_ADD:
        case MC_A_REPLACE:
        case MC_A_APPEND:
        case MC_A_PREPEND:
        case MC_A_CAS:
        case MC_A_DELETE:
        case MC_A_INCR:
        case MC_A_DECR:
        case MC_A_TOUCH:
            check(cmd.key.n >= 1 && cmd.key.n <= MC_KEY_MAX);
            break;
        default:
            break;
        }
    }
    free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        size_t use = len && p[len - 1] == '\r' ? len - 1 : len;
        parse_line(p, use);
        p += len + (nl != NULL);
    }
    return 0;
}
