/* SPDX-License-Identifier: MIT */
/*
 * http_parser: see http_parser.h for what is accepted and the limits.
 *
 * The head is read line by line. Every complete line is checked as soon as it
 * is seen, so garbage is refused on its first line rather than after 8 KiB;
 * the meaning of the fields (Content-Length, Transfer-Encoding, Host,
 * Connection, Expect) is settled once the empty line ends the head.
 *
 * Invariant the fuzzer checks: for a request whose head is h bytes, every
 * prefix shorter than h parses as HTTP_INCOMPLETE. That holds because a
 * prefix only holds complete lines that the whole request also holds, and the
 * size limits only fire at HTTP_MAX_HEAD bytes, which h never exceeds.
 *
 * Written in the common subset of C11 and C++ so that the unit tests can
 * compile it into a GoogleTest program.
 */
#include "http_parser.h"

#include <string.h>

static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Visible ASCII: what a request target may hold. */
static bool is_vchar(unsigned char c)
{
    return c > 0x20 && c < 0x7f;
}

/* Field values: visible ASCII, obs-text, space and tab. */
static bool is_value_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static unsigned char ascii_lower(unsigned char c)
{
    return (unsigned char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
}

static bool span_ieq(http_span s, const char *lit)
{
    size_t n = strlen(lit);
    if (s.n != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (ascii_lower((unsigned char)s.p[i]) != ascii_lower((unsigned char)lit[i]))
            return false;
    return true;
}

/* Parse a decimal Content-Length. Returns false unless it is 1*DIGIT; values
 * above HTTP_MAX_BODY saturate to HTTP_MAX_BODY + 1 (enough to refuse them). */
static bool parse_length(http_span v, uint64_t *out)
{
    if (v.n == 0)
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < v.n; i++) {
        unsigned char c = (unsigned char)v.p[i];
        if (c < '0' || c > '9')
            return false;
        if (x <= HTTP_MAX_BODY)
            x = x * 10 + (uint64_t)(c - '0');
    }
    *out = x > HTTP_MAX_BODY ? HTTP_MAX_BODY + 1 : x;
    return true;
}

/* Walk a comma-separated token list (Connection) and note close/keep-alive. */
static void scan_connection(http_span v, bool *close, bool *keep)
{
    size_t i = 0;
    while (i < v.n) {
        while (i < v.n && (v.p[i] == ',' || v.p[i] == ' ' || v.p[i] == '\t'))
            i++;
        size_t s = i;
        while (i < v.n && v.p[i] != ',' && v.p[i] != ' ' && v.p[i] != '\t')
            i++;
        http_span t;
        t.p = v.p + s;
        t.n = i - s;
        if (span_ieq(t, "close"))
            *close = true;
        else if (span_ieq(t, "keep-alive"))
            *keep = true;
    }
}

/* Find the line starting at `at`; lines end in LF (an optional CR before it
 * is dropped). Returns false if no LF is in buf[at..end). */
static bool next_line(const char *buf, size_t at, size_t end, http_span *line, size_t *next)
{
    const char *lf = (const char *)memchr(buf + at, '\n', end - at);
    if (!lf)
        return false;
    size_t e = (size_t)(lf - buf);
    *next = e + 1;
    if (e > at && buf[e - 1] == '\r')
        e--;
    line->p = buf + at;
    line->n = e - at;
    return true;
}

static int parse_request_line(http_span l, http_request *req)
{
    size_t i = 0;
    while (i < l.n && is_tchar((unsigned char)l.p[i]))
        i++;
    if (i == 0 || i >= l.n || l.p[i] != ' ')
        return HTTP_ERR_BAD_REQUEST;
    req->method.p = l.p;
    req->method.n = i;
    size_t t = ++i;
    while (i < l.n && is_vchar((unsigned char)l.p[i]))
        i++;
    if (i == t || i >= l.n || l.p[i] != ' ')
        return HTTP_ERR_BAD_REQUEST;
    req->target.p = l.p + t;
    req->target.n = i - t;
    const char *v = l.p + i + 1;
    size_t vn = l.n - i - 1;
    if (vn != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
        v[7] < '0' || v[7] > '9')
        return HTTP_ERR_BAD_REQUEST;
    if (v[5] != '1')
        return HTTP_ERR_VERSION;
    req->version_minor = v[7] == '0' ? 0 : 1;
    return 0;
}

static int parse_field(http_span l, http_header *h)
{
    size_t i = 0;
    while (i < l.n && is_tchar((unsigned char)l.p[i]))
        i++;
    /* No name, space before the colon, or a line starting with whitespace
     * (obsolete folding) are all refused. */
    if (i == 0 || i >= l.n || l.p[i] != ':')
        return HTTP_ERR_BAD_REQUEST;
    h->name.p = l.p;
    h->name.n = i;
    i++;
    while (i < l.n && (l.p[i] == ' ' || l.p[i] == '\t'))
        i++;
    size_t s = i, e = i;
    for (; i < l.n; i++) {
        unsigned char c = (unsigned char)l.p[i];
        if (!is_value_char(c))
            return HTTP_ERR_BAD_REQUEST;
        if (c != ' ' && c != '\t')
            e = i + 1;
    }
    h->value.p = l.p + s;
    h->value.n = e - s;
    return 0;
}

/* The head is complete: settle body length, persistence and expectations. */
static int settle(http_request *req)
{
    bool have_length = false, te = false, close = false, keep = false;
    int hosts = 0;
    for (size_t k = 0; k < req->num_headers; k++) {
        const http_header *h = &req->headers[k];
        if (span_ieq(h->name, "content-length")) {
            uint64_t n;
            if (!parse_length(h->value, &n))
                return HTTP_ERR_BAD_REQUEST;
            if (have_length && n != req->content_length)
                return HTTP_ERR_BAD_REQUEST;
            have_length = true;
            req->content_length = n;
        } else if (span_ieq(h->name, "transfer-encoding")) {
            te = true;
        } else if (span_ieq(h->name, "host")) {
            hosts++;
        } else if (span_ieq(h->name, "connection")) {
            scan_connection(h->value, &close, &keep);
        } else if (span_ieq(h->name, "expect") && req->version_minor >= 1) {
            if (!span_ieq(h->value, "100-continue"))
                return HTTP_ERR_EXPECTATION;
            req->expect_continue = true;
        }
    }
    if (hosts > 1 || (hosts == 0 && req->version_minor >= 1))
        return HTTP_ERR_BAD_REQUEST;
    if (te)
        return HTTP_ERR_NOT_IMPLEMENTED;
    if (req->content_length > HTTP_MAX_BODY)
        return HTTP_ERR_BODY_TOO_LARGE;
    req->keep_alive = req->version_minor >= 1 ? !close : (keep && !close);
    return (int)req->head_len;
}

int http_parse_request(const char *buf, size_t len, http_request *req)
{
    req->method.p = req->target.p = NULL;
    req->method.n = req->target.n = 0;
    req->version_minor = 0;
    req->head_len = 0;
    req->content_length = 0;
    req->keep_alive = false;
    req->expect_continue = false;
    req->num_headers = 0;
    if (len == 0)
        return HTTP_INCOMPLETE;
    size_t end = len < HTTP_MAX_HEAD ? len : HTTP_MAX_HEAD;
    size_t at = 0, next;
    http_span line;
    bool have_request_line = false;
    for (;;) {
        if (!next_line(buf, at, end, &line, &next)) {
            if (len < HTTP_MAX_HEAD)
                return HTTP_INCOMPLETE;
            return have_request_line ? HTTP_ERR_HEAD_TOO_LARGE : HTTP_ERR_URI_TOO_LONG;
        }
        if (memchr(line.p, '\r', line.n))
            return HTTP_ERR_BAD_REQUEST; /* a CR that does not end a line */
        at = next;
        if (!have_request_line) {
            if (line.n == 0)
                continue; /* empty lines before a request are skipped (RFC 9112 2.2) */
            int r = parse_request_line(line, req);
            if (r)
                return r;
            have_request_line = true;
            continue;
        }
        if (line.n == 0)
            break;
        if (req->num_headers == HTTP_MAX_HEADERS)
            return HTTP_ERR_HEAD_TOO_LARGE;
        int r = parse_field(line, &req->headers[req->num_headers]);
        if (r)
            return r;
        req->num_headers++;
    }
    req->head_len = at;
    return settle(req);
}

const http_span *http_find_header(const http_request *req, const char *name)
{
    for (size_t k = 0; k < req->num_headers; k++)
        if (span_ieq(req->headers[k].name, name))
            return &req->headers[k].value;
    return NULL;
}

const char *http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 417:
        return "Expectation Failed";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}
