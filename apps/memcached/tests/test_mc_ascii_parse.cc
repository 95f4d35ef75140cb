// SPDX-License-Identifier: MIT
// Unit tests of fern-memcached's ASCII command parser
// (apps/memcached/ascii_parse.c), compiled into this suite directly.
// The expected answers were checked against memcached 1.6 itself where
// memcached is lenient or odd (noted below).
#include "../ascii_parse.c"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

namespace
{

// The parsed spans point into the line: keep every line alive for the test.
int parse(const std::string &s, mc_ascii_cmd *cmd)
{
    static std::deque<std::string> lines;
    lines.push_back(s);
    return mc_ascii_parse(lines.back().data(), lines.back().size(), cmd);
}

std::string str(mc_span s)
{
    return std::string(s.p, s.n);
}

std::vector<std::string> keys(const mc_ascii_cmd &cmd)
{
    std::vector<std::string> out;
    mc_span rest = cmd.keys, k;
    while (mc_next_key(&rest, &k))
        out.push_back(str(k));
    return out;
}

TEST(McAsciiParse, Set)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse("set foo 42 100 5", &c), MC_PARSE_OK);
    EXPECT_EQ(c.op, MC_A_SET);
    EXPECT_EQ(str(c.key), "foo");
    EXPECT_EQ(c.flags, 42u);
    EXPECT_EQ(c.exptime, 100);
    EXPECT_EQ(c.bytes, 5u);
    EXPECT_FALSE(c.noreply);
    ASSERT_EQ(parse("add  k  0 -1 0 noreply", &c), MC_PARSE_OK); // runs of spaces
    EXPECT_EQ(c.op, MC_A_ADD);
    EXPECT_EQ(c.exptime, -1);
    EXPECT_EQ(c.bytes, 0u);
    EXPECT_TRUE(c.noreply);
    // memcached ignores a sixth token that is not noreply.
    ASSERT_EQ(parse("set k 0 0 1 foo", &c), MC_PARSE_OK);
    EXPECT_FALSE(c.noreply);
}

TEST(McAsciiParse, StorageLimits)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse("set k 4294967295 2147483647 2147483645", &c), MC_PARSE_OK);
    EXPECT_EQ(c.flags, 4294967295u);
    EXPECT_EQ(c.bytes, MC_VALUE_LEN_MAX);
    EXPECT_EQ(parse("set k 0 2147483648 1", &c), MC_PARSE_FORMAT); // exptime > int32
    EXPECT_EQ(parse("set k 0 0 -1", &c), MC_PARSE_FORMAT);         // negative length
    EXPECT_EQ(parse("set k 0 0 2147483646", &c), MC_PARSE_FORMAT); // length + 2 overflows
    EXPECT_EQ(parse("set k abc 0 1", &c), MC_PARSE_FORMAT);
    EXPECT_EQ(parse("set k 0 0 1x", &c), MC_PARSE_FORMAT);
    EXPECT_EQ(parse("set k 0 0", &c), MC_PARSE_UNKNOWN); // arity
    EXPECT_EQ(parse("set k 0 0 1 noreply extra", &c), MC_PARSE_UNKNOWN);
    EXPECT_EQ(parse("set " + std::string(251, 'k') + " 0 0 1", &c), MC_PARSE_FORMAT);
    ASSERT_EQ(parse("set " + std::string(250, 'k') + " 0 0 1", &c), MC_PARSE_OK);
    // noreply is known even when the arguments are bad (memcached then
    // stays silent).
    EXPECT_EQ(parse("set k x 0 1 noreply", &c), MC_PARSE_FORMAT);
    EXPECT_TRUE(c.noreply);
}

TEST(McAsciiParse, Cas)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse("cas k 1 2 3 18446744073709551615 noreply", &c), MC_PARSE_OK);
    EXPECT_EQ(c.op, MC_A_CAS);
    EXPECT_EQ(c.cas, UINT64_MAX);
    EXPECT_TRUE(c.noreply);
    EXPECT_EQ(parse("cas k 1 2 3", &c), MC_PARSE_UNKNOWN);
    EXPECT_EQ(parse("cas k 1 2 3 18446744073709551616", &c), MC_PARSE_FORMAT);
}

TEST(McAsciiParse, Retrieval)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse("get a", &c), MC_PARSE_OK);
    EXPECT_EQ(c.op, MC_A_GET);
    EXPECT_EQ(keys(c), std::vector<std::string>{"a"});
    ASSERT_EQ(parse("gets a  b c d e f g h i j", &c), MC_PARSE_OK); // more keys than MAX_TOKENS
    EXPECT_EQ(c.op, MC_A_GETS);
    EXPECT_EQ(c.nkeys, 10u);
    EXPECT_EQ(keys(c).back(), "j");
    EXPECT_EQ(parse("get", &c), MC_PARSE_UNKNOWN);
    EXPECT_EQ(parse("get a " + std::string(251, 'x'), &c), MC_PARSE_FORMAT);
    ASSERT_EQ(parse("gat 100 a b", &c), MC_PARSE_OK);
    EXPECT_EQ(c.op, MC_A_GAT);
    EXPECT_EQ(c.exptime, 100);
    EXPECT_EQ(keys(c), (std::vector<std::string>{"a", "b"}));
    ASSERT_EQ(parse("gats -1 a", &c), MC_PARSE_OK);
    EXPECT_EQ(c.exptime, -1);
    EXPECT_EQ(parse("gat x a", &c), MC_PARSE_EXPTIME);
    EXPECT_EQ(parse("gat 1", &c), MC_PARSE_UNKNOWN);
}

TEST(McAsciiParse, Delete)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse("delete k", &c), MC_PARSE_OK);
    EXPECT_EQ(str(c.key), "k");
    ASSERT_EQ(parse("delete k noreply", &c), MC_PARSE_OK);
    EXPECT_TRUE(c.noreply);
    ASSERT_EQ(parse("delete k 0", &c), MC_PARSE_OK);
    ASSERT_EQ(parse("delete k 0 noreply", &c), MC_PARSE_OK);
    EXPECT_EQ(parse("delete k 1", &c), MC_PARSE_DELETE_USAGE);
    EXPECT_EQ(parse("delete k 1 noreply", &c), MC_PARSE_DELETE_USAGE);
    EXPECT_EQ(parse("delete a b c d e", &c), MC_PARSE_UNKNOWN); // as memcached: ERROR
    EXPECT_EQ(parse("delete", &c), MC_PARSE_UNKNOWN);
}

TEST(McAsciiParse, Arithmetic)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse("incr k 18446744073709551615", &c), MC_PARSE_OK);
    EXPECT_EQ(c.op, MC_A_INCR);
    EXPECT_EQ(c.delta, UINT64_MAX);
    ASSERT_EQ(parse("decr k 0 noreply", &c), MC_PARSE_OK);
    EXPECT_EQ(c.op, MC_A_DECR);
    EXPECT_TRUE(c.noreply);
    EXPECT_EQ(parse("incr k 18446744073709551616", &c), MC_PARSE_DELTA);
    EXPECT_EQ(parse("incr k -1", &c), MC_PARSE_DELTA);
    EXPECT_EQ(parse("incr k abc", &c), MC_PARSE_DELTA);
    EXPECT_EQ(parse("incr k", &c), MC_PARSE_UNKNOWN);
}

TEST(McAsciiParse, TouchFlushVerbosity)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse("touch k 10 noreply", &c), MC_PARSE_OK);
    EXPECT_EQ(c.op, MC_A_TOUCH);
    EXPECT_EQ(c.exptime, 10);
    EXPECT_EQ(parse("touch k abc", &c), MC_PARSE_EXPTIME);
    EXPECT_EQ(parse("touch k", &c), MC_PARSE_UNKNOWN);

    ASSERT_EQ(parse("flush_all", &c), MC_PARSE_OK);
    EXPECT_EQ(c.delay, 0);
    ASSERT_EQ(parse("flush_all noreply", &c), MC_PARSE_OK);
    EXPECT_TRUE(c.noreply);
    ASSERT_EQ(parse("flush_all 30 noreply", &c), MC_PARSE_OK);
    EXPECT_EQ(c.delay, 30);
    EXPECT_EQ(parse("flush_all abc", &c), MC_PARSE_EXPTIME);
    EXPECT_EQ(parse("flush_all noreply 0", &c), MC_PARSE_EXPTIME); // as memcached
    EXPECT_EQ(parse("flush_all 1 2 3", &c), MC_PARSE_UNKNOWN);

    ASSERT_EQ(parse("verbosity 1", &c), MC_PARSE_OK);
    EXPECT_EQ(c.level, 1u);
    ASSERT_EQ(parse("verbosity noreply", &c), MC_PARSE_OK);
    EXPECT_TRUE(c.noreply);
    EXPECT_EQ(parse("verbosity", &c), MC_PARSE_UNKNOWN);
    EXPECT_EQ(parse("verbosity foo bar my", &c), MC_PARSE_UNKNOWN);
    EXPECT_EQ(parse("verbosity foo", &c), MC_PARSE_FORMAT);
}

TEST(McAsciiParse, Misc)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse("version foo bar", &c), MC_PARSE_OK); // memcached ignores the rest
    EXPECT_EQ(c.op, MC_A_VERSION);
    ASSERT_EQ(parse("quit now", &c), MC_PARSE_OK);
    EXPECT_EQ(c.op, MC_A_QUIT);
    ASSERT_EQ(parse("stats", &c), MC_PARSE_OK);
    EXPECT_EQ(c.args.n, 0u);
    ASSERT_EQ(parse("stats settings", &c), MC_PARSE_OK);
    EXPECT_EQ(str(c.args), "settings");
    EXPECT_EQ(parse("", &c), MC_PARSE_UNKNOWN);
    EXPECT_EQ(parse("    ", &c), MC_PARSE_UNKNOWN);
    EXPECT_EQ(parse("GET a", &c), MC_PARSE_UNKNOWN); // commands are case-sensitive
    EXPECT_EQ(parse("bogus", &c), MC_PARSE_UNKNOWN);
    EXPECT_EQ(parse(std::string("get\0a", 5), &c), MC_PARSE_UNKNOWN); // the line is "get"
}

// memcached 1.6.18 reads flags with strtoul and keeps the low 32 bits
// (memcached_diff.py, beside this file, checks the same lines against it).
TEST(McAsciiParse, FlagsAsMemcachedReadsThem)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse("set k 4294967296 0 1", &c), MC_PARSE_OK);
    EXPECT_EQ(c.flags, 0u);
    ASSERT_EQ(parse("set k 4294967301 0 1", &c), MC_PARSE_OK);
    EXPECT_EQ(c.flags, 5u);
    ASSERT_EQ(parse("set k 18446744073709551615 0 1", &c), MC_PARSE_OK);
    EXPECT_EQ(c.flags, 4294967295u);
    EXPECT_EQ(parse("set k 18446744073709551616 0 1", &c), MC_PARSE_FORMAT); // over 2^64 - 1
    EXPECT_EQ(parse("set k 99999999999999999999 0 1", &c), MC_PARSE_FORMAT);
    ASSERT_EQ(parse("set k +7 0 1", &c), MC_PARSE_OK);
    EXPECT_EQ(c.flags, 7u);
    ASSERT_EQ(parse("set k \t8 0 1", &c), MC_PARSE_OK); // strtoul skips whitespace
    EXPECT_EQ(c.flags, 8u);
    ASSERT_EQ(parse("set k -0 0 1", &c), MC_PARSE_OK);
    EXPECT_EQ(c.flags, 0u);
    ASSERT_EQ(parse("set k -18446744073709551615 0 1", &c), MC_PARSE_OK); // 1 modulo 2^64
    EXPECT_EQ(c.flags, 1u);
    EXPECT_EQ(parse("set k -1 0 1", &c), MC_PARSE_FORMAT);
    EXPECT_EQ(parse("set k +-1 0 1", &c), MC_PARSE_FORMAT);
    EXPECT_EQ(parse("set k + 0 1", &c), MC_PARSE_FORMAT);
    EXPECT_EQ(parse("set k 0x5 0 1", &c), MC_PARSE_FORMAT);
    EXPECT_EQ(parse("set k 5\t 0 1", &c), MC_PARSE_FORMAT);
}

// memcached parses a command line as a C string: it ends at its first NUL.
TEST(McAsciiParse, LineEndsAtNul)
{
    mc_ascii_cmd c;
    ASSERT_EQ(parse(std::string("get a\0b", 7), &c), MC_PARSE_OK);
    EXPECT_EQ(keys(c), std::vector<std::string>{"a"});
    ASSERT_EQ(parse(std::string("get a\0b c", 9), &c), MC_PARSE_OK);
    EXPECT_EQ(keys(c), std::vector<std::string>{"a"});
    ASSERT_EQ(parse(std::string("get x a\0", 8), &c), MC_PARSE_OK);
    EXPECT_EQ(keys(c), (std::vector<std::string>{"x", "a"}));
    ASSERT_EQ(parse(std::string("delete a\0zz", 11), &c), MC_PARSE_OK);
    EXPECT_EQ(str(c.key), "a");
    EXPECT_EQ(parse(std::string("set q\0r 0 0 1", 13), &c), MC_PARSE_UNKNOWN); // "set q"
    ASSERT_EQ(parse(std::string("set k 0 0 1\0 noreply", 20), &c), MC_PARSE_OK);
    EXPECT_FALSE(c.noreply);
    ASSERT_EQ(parse(std::string("stats\0settings", 14), &c), MC_PARSE_OK);
    EXPECT_EQ(c.args.n, 0u);
    EXPECT_EQ(parse(std::string("\0get a", 6), &c), MC_PARSE_UNKNOWN);
}

} // namespace
