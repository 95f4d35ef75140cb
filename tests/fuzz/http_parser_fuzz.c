/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for examples/http_parser.c (built and run by run.sh).
 *
 * Besides "no crash, no out-of-bounds read" (ASan; the input is copied into
 * a buffer of exactly its size so a read past the end is caught), it checks
 * the parser's promises:
 *  - a head length is within the input and at most HTTP_MAX_HEAD; every
 *    parsed span lies inside the head; at most HTTP_MAX_HEADERS fields;
 *  - an error is one of the documented statuses;
 *  - the same input parses the same way twice (a pure function);
 *  - every proper prefix of an accepted head is HTTP_INCOMPLETE;
 *  - the input treated as a pipelined stream is consumed request by request
 *    without looping (each step advances).
 */
#include "../../examples/http_parser.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(int cond)
{
    if (!cond)
        abort();
}

static void check_span(http_span s, const char *lo, const char *hi)
{
    check(s.n == 0 || (s.p >= lo && s.p + s.n <= hi));
}

static int parse_checked(const char *buf, size_t len, http_request *req)
{
    int r = http_parse_request(buf, len, req);
    if (r > 0) {
        check((size_t)r <= len && (size_t)r <= HTTP_MAX_HEAD && (size_t)r == req->head_len);
        check(req->num_headers <= HTTP_MAX_HEADERS);
        check(req->content_length <= HTTP_MAX_BODY);
        check(req->version_minor == 0 || req->version_minor == 1);
        check(req->method.n > 0 && req->target.n > 0);
        check_span(req->method, buf, buf + r);
        check_span(req->target, buf, buf + r);
        for (size_t i = 0; i < req->num_headers; i++) {
            check(req->headers[i].name.n > 0);
            check_span(req->headers[i].name, buf, buf + r);
            check_span(req->headers[i].value, buf, buf + r);
        }
    } else if (r < 0) {
        check(r == HTTP_ERR_BAD_REQUEST || r == HTTP_ERR_BODY_TOO_LARGE ||
              r == HTTP_ERR_URI_TOO_LONG || r == HTTP_ERR_EXPECTATION ||
              r == HTTP_ERR_HEAD_TOO_LARGE || r == HTTP_ERR_NOT_IMPLEMENTED ||
              r == HTTP_ERR_VERSION);
    }
    return r;
}

static http_request req, again;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);

    int r = parse_checked(buf, size, &req);
    check(http_parse_request(buf, size, &again) == r);
    if (r > 0) {
        check(again.num_headers == req.num_headers && again.content_length == req.content_length &&
              again.keep_alive == req.keep_alive);
        size_t cuts[4] = {0, (size_t)r / 2, (size_t)r - 1, (size_t)r * 3 / 4};
        for (int i = 0; i < 4; i++) {
            /* A prefix in a buffer of its own size, so ASan sees over-reads. */
            char *pre = malloc(cuts[i] ? cuts[i] : 1);
            if (!pre)
                break;
            memcpy(pre, buf, cuts[i]);
            check(http_parse_request(pre, cuts[i], &again) == HTTP_INCOMPLETE);
            free(pre);
        }
    }

    size_t off = 0;
    for (int steps = 0; off < size; steps++) {
        check(steps <= (int)size);
        int s = parse_checked(buf + off, size - off, &req);
        if (s <= 0)
            break;
        uint64_t next = (uint64_t)off + (uint64_t)s + req.content_length;
        if (next >= size)
            break;
        off = (size_t)next;
    }
    free(buf);
    return 0;
}
