/* SPDX-License-Identifier: MIT */
/*
 * http_parser: a small, strict HTTP/1.x request parser for examples/http.c.
 *
 * A pure function over a byte buffer: no allocation, no I/O, no global state.
 * The parsed request points into the caller's buffer (nothing is copied), so
 * it is valid while the buffer is.
 *
 * What it accepts (RFC 9112, strictly):
 *  - request line `METHOD SP TARGET SP HTTP/1.x`, single spaces, a token
 *    method, a target of visible ASCII; empty lines before it are skipped;
 *  - lines end in CRLF; a bare LF is also accepted as a line end (RFC 9112
 *    2.2 allows it), a CR anywhere else is an error;
 *  - header fields `name: value`, a token name with no space before the
 *    colon, optional whitespace around the value; obsolete line folding and
 *    control characters are errors.
 *
 * Limits: request line + headers (including the empty line that ends them) at
 * most HTTP_MAX_HEAD bytes; at most HTTP_MAX_HEADERS fields; a Content-Length
 * body at most HTTP_MAX_BODY bytes.
 *
 * Bodies: Content-Length only. Any Transfer-Encoding (chunked included) is
 * refused with 501: this server never needs a request body, and refusing is
 * safer than a half-done decoder (request smuggling lives in the gap between
 * two parsers' ideas of where a body ends). The parser does not read the body:
 * it reports its length, and the request ends head_len + content_length bytes
 * into the buffer; the caller waits for (or skips) those bytes.
 *
 * HTTP/1.1 requests must carry exactly one Host field (RFC 9112 3.2).
 */
#ifndef FERN_EXAMPLES_HTTP_PARSER_H
#define FERN_EXAMPLES_HTTP_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HTTP_MAX_HEAD    8192u
#define HTTP_MAX_HEADERS 64u
#define HTTP_MAX_BODY    ((uint64_t)1 << 20)

/* Results of http_parse_request other than a head length (> 0). The errors
 * are the negated HTTP status the server should answer with before closing
 * the connection. */
enum {
    HTTP_INCOMPLETE = 0,         /* need more bytes */
    HTTP_ERR_BAD_REQUEST = -400, /* malformed */
    HTTP_ERR_BODY_TOO_LARGE = -413,
    HTTP_ERR_URI_TOO_LONG = -414,    /* request line longer than HTTP_MAX_HEAD */
    HTTP_ERR_EXPECTATION = -417,     /* Expect: other than 100-continue */
    HTTP_ERR_HEAD_TOO_LARGE = -431,  /* head over HTTP_MAX_HEAD or too many fields */
    HTTP_ERR_NOT_IMPLEMENTED = -501, /* Transfer-Encoding */
    HTTP_ERR_VERSION = -505,         /* HTTP/2.0, HTTP/0.x, ... */
};

typedef struct http_span {
    const char *p;
    size_t n;
} http_span;

typedef struct http_header {
    http_span name;  /* as sent (compare case-insensitively) */
    http_span value; /* surrounding whitespace removed */
} http_header;

typedef struct http_request {
    http_span method;
    http_span target;
    int version_minor;       /* HTTP/1.<minor>; 0 or 1 (higher minors read as 1) */
    size_t head_len;         /* bytes of empty lines + request line + fields + end line */
    uint64_t content_length; /* 0 without Content-Length */
    bool keep_alive;         /* from the version and Connection */
    bool expect_continue;    /* Expect: 100-continue */
    size_t num_headers;
    http_header headers[HTTP_MAX_HEADERS];
} http_request;

/* Parse the request at the start of buf[0..len). Returns the head length
 * (> 0) once the request line and all fields are in, HTTP_INCOMPLETE if more
 * bytes are needed, or a negative HTTP_ERR_* status. On success *req is
 * filled; on any other result its contents are unspecified. buf may be NULL
 * when len is 0. An error is reported as soon as a complete line proves the
 * request bad, without waiting for the rest of the head. */
int http_parse_request(const char *buf, size_t len, http_request *req);

/* The value of the first field named `name` (case-insensitive), or NULL. */
const http_span *http_find_header(const http_request *req, const char *name);

/* Reason phrase for a status code ("Unknown" for codes it does not know). */
const char *http_reason(int status);

#ifdef __cplusplus
}
#endif
#endif
