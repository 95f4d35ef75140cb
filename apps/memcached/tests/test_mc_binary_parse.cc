// SPDX-License-Identifier: MIT
// Unit tests of fern-memcached's binary protocol framing
// (apps/memcached/binary_parse.c), compiled into this suite directly.
#include "../binary_parse.c"

#include <gtest/gtest.h>

#include <vector>

namespace
{

std::vector<uint8_t> header(uint8_t op, uint16_t keylen, uint8_t extlen, uint32_t bodylen,
                            uint32_t opaque = 0x01020304, uint64_t cas = 0)
{
    std::vector<uint8_t> h(MC_BIN_HEADER, 0);
    h[0] = MC_BIN_REQ_MAGIC;
    h[1] = op;
    mc_bin_put16(&h[2], keylen);
    h[4] = extlen;
    mc_bin_put32(&h[8], bodylen);
    mc_bin_put32(&h[12], opaque);
    mc_bin_put64(&h[16], cas);
    return h;
}

int check(uint8_t op, uint16_t keylen, uint8_t extlen, uint32_t bodylen, int *kind = nullptr,
          bool *quiet = nullptr)
{
    auto h = header(op, keylen, extlen, bodylen);
    mc_bin_header hd;
    EXPECT_EQ(mc_bin_parse_header(h.data(), h.size(), &hd), (int)MC_BIN_HEADER);
    int k = 0;
    bool q = false;
    int r = mc_bin_check(&hd, &k, &q);
    if (kind)
        *kind = k;
    if (quiet)
        *quiet = q;
    return r;
}

TEST(McBinaryParse, Header)
{
    auto h = header(MC_BIN_SET, 3, 8, 16, 0xdeadbeef, 0x1122334455667788ull);
    mc_bin_header hd;
    for (size_t n = 1; n < MC_BIN_HEADER; n++)
        EXPECT_EQ(mc_bin_parse_header(h.data(), n, &hd), 0) << n;
    EXPECT_EQ(mc_bin_parse_header(h.data(), 0, &hd), 0);
    ASSERT_EQ(mc_bin_parse_header(h.data(), h.size(), &hd), (int)MC_BIN_HEADER);
    EXPECT_EQ(hd.opcode, MC_BIN_SET);
    EXPECT_EQ(hd.keylen, 3);
    EXPECT_EQ(hd.extlen, 8);
    EXPECT_EQ(hd.bodylen, 16u);
    EXPECT_EQ(hd.opaque, 0xdeadbeefu);
    EXPECT_EQ(hd.cas, 0x1122334455667788ull);
    EXPECT_EQ(mc_bin_value_len(&hd), 5u);
    h[0] = 0x81; // a response magic is not a request
    EXPECT_EQ(mc_bin_parse_header(h.data(), h.size(), &hd), -1);
    h[0] = 'g';
    EXPECT_EQ(mc_bin_parse_header(h.data(), 1, &hd), -1); // known wrong at once
}

TEST(McBinaryParse, Shapes)
{
    int kind;
    bool quiet;
    EXPECT_EQ(check(MC_BIN_GET, 3, 0, 3, &kind, &quiet), MC_BIN_OK);
    EXPECT_EQ(kind, MC_BK_GET);
    EXPECT_FALSE(quiet);
    EXPECT_EQ(check(MC_BIN_GETKQ, 3, 0, 3, &kind, &quiet), MC_BIN_OK);
    EXPECT_TRUE(quiet);
    EXPECT_EQ(check(MC_BIN_GET, 0, 0, 0), MC_BIN_EINVAL); // key required
    EXPECT_EQ(check(MC_BIN_GET, 3, 0, 4), MC_BIN_EINVAL); // no value allowed
    EXPECT_EQ(check(MC_BIN_GET, 3, 4, 7), MC_BIN_EINVAL); // no extras allowed
    EXPECT_EQ(check(MC_BIN_SETQ, 1, 8, 100, &kind, &quiet), MC_BIN_OK);
    EXPECT_EQ(kind, MC_BK_STORE);
    EXPECT_TRUE(quiet);
    EXPECT_EQ(check(MC_BIN_SET, 1, 4, 100), MC_BIN_EINVAL);
    EXPECT_EQ(check(MC_BIN_APPEND, 1, 0, 10, &kind), MC_BIN_OK);
    EXPECT_EQ(kind, MC_BK_CONCAT);
    EXPECT_EQ(check(MC_BIN_APPEND, 1, 8, 10), MC_BIN_EINVAL);
    EXPECT_EQ(check(MC_BIN_INCREMENT, 1, 20, 21, &kind), MC_BIN_OK);
    EXPECT_EQ(kind, MC_BK_ARITH);
    EXPECT_EQ(check(MC_BIN_DECREMENTQ, 1, 8, 9), MC_BIN_EINVAL);
    EXPECT_EQ(check(MC_BIN_FLUSH, 0, 0, 0, &kind), MC_BIN_OK);
    EXPECT_EQ(kind, MC_BK_FLUSH);
    EXPECT_EQ(check(MC_BIN_FLUSHQ, 0, 4, 4), MC_BIN_OK);
    EXPECT_EQ(check(MC_BIN_FLUSH, 0, 8, 8), MC_BIN_EINVAL);
    EXPECT_EQ(check(MC_BIN_NOOP, 0, 0, 0, &kind), MC_BIN_OK);
    EXPECT_EQ(kind, MC_BK_NOOP);
    EXPECT_EQ(check(MC_BIN_NOOP, 1, 0, 1), MC_BIN_EINVAL); // no key allowed
    EXPECT_EQ(check(MC_BIN_STAT, 0, 0, 0), MC_BIN_OK);     // key optional
    EXPECT_EQ(check(MC_BIN_STAT, 8, 0, 8), MC_BIN_OK);
    EXPECT_EQ(check(MC_BIN_VERBOSITY, 0, 4, 4), MC_BIN_OK);
    EXPECT_EQ(check(MC_BIN_GATKQ, 2, 4, 6, &kind, &quiet), MC_BIN_OK);
    EXPECT_EQ(kind, MC_BK_TOUCH);
    EXPECT_TRUE(quiet);
    EXPECT_EQ(check(MC_BIN_QUITQ, 0, 0, 0, &kind, &quiet), MC_BIN_OK);
    EXPECT_EQ(kind, MC_BK_QUIT);
    EXPECT_TRUE(quiet);
}

TEST(McBinaryParse, Errors)
{
    EXPECT_EQ(check(0x42, 0, 0, 0), MC_BIN_UNKNOWN_COMMAND);
    EXPECT_EQ(check(0xff, 0, 0, 0), MC_BIN_UNKNOWN_COMMAND);
    EXPECT_EQ(check(MC_BIN_GET, 251, 0, 251), MC_BIN_EINVAL); // key over 250
    EXPECT_EQ(check(MC_BIN_GET, 250, 0, 250), MC_BIN_OK);
    EXPECT_EQ(check(MC_BIN_SET, 10, 8, 17), MC_BIN_EINVAL); // extras + key > body
    EXPECT_EQ(check(MC_BIN_SET, 65535, 255, 0), MC_BIN_EINVAL);
}

TEST(McBinaryParse, Endianness)
{
    uint8_t b[8];
    mc_bin_put16(b, 0x1234);
    EXPECT_EQ(b[0], 0x12);
    EXPECT_EQ(mc_bin_get16(b), 0x1234);
    mc_bin_put32(b, 0x89abcdefu);
    EXPECT_EQ(b[0], 0x89);
    EXPECT_EQ(mc_bin_get32(b), 0x89abcdefu);
    mc_bin_put64(b, 0x0102030405060708ull);
    EXPECT_EQ(b[7], 0x08);
    EXPECT_EQ(mc_bin_get64(b), 0x0102030405060708ull);
}

} // namespace
