// SPDX-License-Identifier: MIT
// Unit tests of the example HTTP request parser (examples/http_parser.c).
// The parser is compiled into this suite directly: tests/CMakeLists.txt links
// every test_*.cc with libfern and GoogleTest only.
#include "../examples/http_parser.c"

#include <gtest/gtest.h>

#include <string>

namespace
{

int parse(const std::string &s, http_request *req)
{
    return http_parse_request(s.data(), s.size(), req);
}

std::string str(http_span s)
{
    return std::string(s.p, s.n);
}

TEST(HttpParser, SimpleGet)
{
    std::string s = "GET /plaintext HTTP/1.1\r\nHost: localhost:8080\r\nAccept: */*\r\n\r\n";
    http_request req;
    ASSERT_EQ(parse(s, &req), (int)s.size());
    EXPECT_EQ(str(req.method), "GET");
    EXPECT_EQ(str(req.target), "/plaintext");
    EXPECT_EQ(req.version_minor, 1);
    EXPECT_EQ(req.head_len, s.size());
    EXPECT_EQ(req.content_length, 0u);
    EXPECT_TRUE(req.keep_alive);
    EXPECT_FALSE(req.expect_continue);
    ASSERT_EQ(req.num_headers, 2u);
    EXPECT_EQ(str(req.headers[0].name), "Host");
    EXPECT_EQ(str(req.headers[0].value), "localhost:8080");
    const http_span *a = http_find_header(&req, "aCCePT");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(str(*a), "*/*");
    EXPECT_EQ(http_find_header(&req, "Cookie"), nullptr);
}

TEST(HttpParser, ValueWhitespaceTrimmed)
{
    std::string s = "GET / HTTP/1.1\r\nHost:a\r\nX-A: \t v a l \t \r\nX-Empty:\r\n\r\n";
    http_request req;
    ASSERT_EQ(parse(s, &req), (int)s.size());
    EXPECT_EQ(str(req.headers[0].value), "a");
    EXPECT_EQ(str(req.headers[1].value), "v a l");
    EXPECT_EQ(str(req.headers[2].value), "");
}

TEST(HttpParser, Persistence)
{
    http_request req;
    EXPECT_GT(parse("GET / HTTP/1.0\r\n\r\n", &req), 0);
    EXPECT_FALSE(req.keep_alive);
    EXPECT_EQ(req.version_minor, 0);
    EXPECT_GT(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &req), 0);
    EXPECT_TRUE(req.keep_alive);
    EXPECT_GT(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade, close\r\n\r\n", &req), 0);
    EXPECT_FALSE(req.keep_alive);
    EXPECT_GT(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", &req), 0);
    EXPECT_TRUE(req.keep_alive);
    // A later 1.x minor is read as 1.1.
    EXPECT_GT(parse("GET / HTTP/1.7\r\nHost: a\r\n\r\n", &req), 0);
    EXPECT_EQ(req.version_minor, 1);
}

TEST(HttpParser, LfLineEndsAndLeadingEmptyLines)
{
    std::string s = "\r\n\nGET / HTTP/1.1\nHost: a\n\n";
    http_request req;
    ASSERT_EQ(parse(s, &req), (int)s.size());
    EXPECT_EQ(str(req.method), "GET");
    EXPECT_EQ(req.num_headers, 1u);
}

TEST(HttpParser, PipelinedBuffer)
{
    std::string one = "GET /plaintext HTTP/1.1\r\nHost: a\r\n\r\n";
    std::string two = "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbody";
    std::string three = "HEAD /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    std::string partial = "GET /next HTTP/1.1\r\nHo";
    std::string buf = one + two + three + partial;
    http_request req;
    size_t off = 0;
    const char *methods[] = {"GET", "POST", "HEAD"};
    for (const char *m : methods) {
        int r = http_parse_request(buf.data() + off, buf.size() - off, &req);
        ASSERT_GT(r, 0) << m;
        EXPECT_EQ(str(req.method), m);
        off += (size_t)r + req.content_length;
    }
    EXPECT_FALSE(req.keep_alive);
    EXPECT_EQ(off, one.size() + two.size() + three.size());
    EXPECT_EQ(http_parse_request(buf.data() + off, buf.size() - off, &req), HTTP_INCOMPLETE);
}

TEST(HttpParser, EveryPrefixIsIncomplete)
{
    std::string s = "GET /plaintext HTTP/1.1\r\nHost: a\r\nX: y\r\n\r\n";
    http_request req;
    for (size_t n = 0; n < s.size(); n++)
        EXPECT_EQ(http_parse_request(s.data(), n, &req), HTTP_INCOMPLETE) << n;
    EXPECT_EQ(http_parse_request(nullptr, 0, &req), HTTP_INCOMPLETE);
}

TEST(HttpParser, ContentLength)
{
    http_request req;
    std::string h = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: ";
    EXPECT_EQ(parse(h + "1048576\r\n\r\n", &req), (int)(h.size() + 11));
    EXPECT_EQ(req.content_length, HTTP_MAX_BODY);
    EXPECT_EQ(parse(h + "1048577\r\n\r\n", &req), HTTP_ERR_BODY_TOO_LARGE);
    EXPECT_EQ(parse(h + "99999999999999999999999999\r\n\r\n", &req), HTTP_ERR_BODY_TOO_LARGE);
    EXPECT_EQ(parse(h + "007\r\n\r\n", &req), (int)(h.size() + 7));
    EXPECT_EQ(req.content_length, 7u);
    EXPECT_EQ(parse(h + "-1\r\n\r\n", &req), HTTP_ERR_BAD_REQUEST);
    EXPECT_EQ(parse(h + "+1\r\n\r\n", &req), HTTP_ERR_BAD_REQUEST);
    EXPECT_EQ(parse(h + "1 2\r\n\r\n", &req), HTTP_ERR_BAD_REQUEST);
    EXPECT_EQ(parse(h + "\r\n\r\n", &req), HTTP_ERR_BAD_REQUEST);
    EXPECT_EQ(parse(h + "5\r\nContent-Length: 6\r\n\r\n", &req), HTTP_ERR_BAD_REQUEST);
    EXPECT_GT(parse(h + "5\r\nContent-Length: 5\r\n\r\n", &req), 0);
    EXPECT_EQ(req.content_length, 5u);
}

TEST(HttpParser, TransferEncodingNotImplemented)
{
    http_request req;
    EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", &req),
              HTTP_ERR_NOT_IMPLEMENTED);
    EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                    "transfer-encoding: gzip, chunked\r\n\r\n",
                    &req),
              HTTP_ERR_NOT_IMPLEMENTED);
}

TEST(HttpParser, Expect)
{
    http_request req;
    EXPECT_GT(
        parse("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 9\r\n\r\n",
              &req),
        0);
    EXPECT_TRUE(req.expect_continue);
    EXPECT_EQ(parse("PUT / HTTP/1.1\r\nHost: a\r\nExpect: teapot\r\n\r\n", &req),
              HTTP_ERR_EXPECTATION);
    // HTTP/1.0 clients cannot mean it: ignored (RFC 9110 10.1.1).
    EXPECT_GT(parse("PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", &req), 0);
    EXPECT_FALSE(req.expect_continue);
}

std::string head_of_size(size_t total)
{
    std::string start = "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: ";
    std::string end = "\r\n\r\n";
    return start + std::string(total - start.size() - end.size(), 'p') + end;
}

TEST(HttpParser, HeadLimit)
{
    http_request req;
    std::string ok = head_of_size(HTTP_MAX_HEAD);
    EXPECT_EQ(parse(ok, &req), (int)HTTP_MAX_HEAD);
    EXPECT_EQ(parse(head_of_size(HTTP_MAX_HEAD + 1), &req), HTTP_ERR_HEAD_TOO_LARGE);
    // Without the end of the head: wait below the limit, refuse at it.
    EXPECT_EQ(parse(ok.substr(0, HTTP_MAX_HEAD - 1), &req), HTTP_INCOMPLETE);
    std::string big = ok.substr(0, HTTP_MAX_HEAD - 4) + std::string(100, 'q');
    EXPECT_EQ(parse(big, &req), HTTP_ERR_HEAD_TOO_LARGE);
    // A request line that alone passes the limit.
    std::string uri = "GET /" + std::string(HTTP_MAX_HEAD, 'u');
    EXPECT_EQ(parse(uri, &req), HTTP_ERR_URI_TOO_LONG);
}

TEST(HttpParser, HeaderCountLimit)
{
    http_request req;
    std::string s = "GET / HTTP/1.1\r\nHost: a\r\n";
    for (unsigned i = 1; i < HTTP_MAX_HEADERS; i++)
        s += "X-" + std::to_string(i) + ": v\r\n";
    EXPECT_GT(parse(s + "\r\n", &req), 0);
    EXPECT_EQ(req.num_headers, HTTP_MAX_HEADERS);
    EXPECT_EQ(parse(s + "X-Last: v\r\n\r\n", &req), HTTP_ERR_HEAD_TOO_LARGE);
    // Refused as soon as the 65th field is complete, before the head ends.
    EXPECT_EQ(parse(s + "X-Last: v\r\n", &req), HTTP_ERR_HEAD_TOO_LARGE);
}

TEST(HttpParser, Malformed)
{
    const char *bad[] = {
        "GARBAGE\r\n\r\n",
        "GET /\r\n\r\n",                      // HTTP/0.9
        "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", // two spaces
        "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", // trailing space
        " GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET / http/1.1\r\nHost: a\r\n\r\n",
        "GET / HTTP/1.10\r\nHost: a\r\n\r\n",
        "GET / HTTP/1.x\r\nHost: a\r\n\r\n",
        "G(T / HTTP/1.1\r\nHost: a\r\n\r\n",            // not a token
        "GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n",       // DEL in the target
        "GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",    // non-ASCII target
        "GET / HTTP/1.1\rHost: a\r\n\r\n",              // bare CR
        "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", // CR in a value
        "GET / HTTP/1.1\r\nHost: a\r\nX: a\x01"
        "b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : a\r\n\r\n",           // space before the colon
        "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", // obsolete folding
        "GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n",     // empty name
        "GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",                       // no Host
        "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", // two Hosts
    };
    http_request req;
    for (const char *b : bad)
        EXPECT_EQ(parse(b, &req), HTTP_ERR_BAD_REQUEST) << b;
    std::string nul("GE\0T / HTTP/1.1\r\nHost: a\r\n\r\n", 29);
    EXPECT_EQ(parse(nul, &req), HTTP_ERR_BAD_REQUEST);
    EXPECT_EQ(parse("GET / HTTP/2.0\r\nHost: a\r\n\r\n", &req), HTTP_ERR_VERSION);
    EXPECT_EQ(parse("GET / HTTP/0.9\r\n\r\n", &req), HTTP_ERR_VERSION);
}

TEST(HttpParser, ErrorsBeforeTheHeadEnds)
{
    http_request req;
    // A bad request line is refused once it is complete, without waiting for
    // the empty line; a bad field likewise.
    EXPECT_EQ(parse("GARBAGE\r\n", &req), HTTP_ERR_BAD_REQUEST);
    EXPECT_EQ(parse("GET / HTTP/1.1\r\nBad Field\r\nMore", &req), HTTP_ERR_BAD_REQUEST);
    EXPECT_EQ(parse("GARB", &req), HTTP_INCOMPLETE);
}

TEST(HttpParser, Reasons)
{
    EXPECT_STREQ(http_reason(200), "OK");
    EXPECT_STREQ(http_reason(431), "Request Header Fields Too Large");
    EXPECT_STREQ(http_reason(-HTTP_ERR_NOT_IMPLEMENTED), "Not Implemented");
    EXPECT_STREQ(http_reason(299), "Unknown");
}

} // namespace
