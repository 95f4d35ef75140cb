// SPDX-License-Identifier: MIT
// fern-hook with real client libraries, unmodified (Debian's hiredis and
// libpq), against real servers started here (servers.h): many green threads
// on ONE worker each with its own connection. Without the hook each call
// would block the worker and the threads would run one after another.
#include "hook_test.h"
#include "servers.h"

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include <cstring>
#include <memory>

using namespace hook_test;

// A hang in any test of this binary aborts with its name and a fern_dump.
FERN_WATCHDOG_EACH_TEST(120);

namespace {

std::unique_ptr<hook_servers::Redis> redis;
std::unique_ptr<hook_servers::Postgres> pg;

class Servers : public ::testing::Environment {
  public:
    void SetUp() override {
        try {
            redis = std::make_unique<hook_servers::Redis>();
            pg = std::make_unique<hook_servers::Postgres>();
        } catch (const std::exception &e) {
            FAIL() << "could not start a server: " << e.what();
        }
    }
    void TearDown() override {
        redis.reset();
        pg.reset();
    }
};
::testing::Environment *const kServers = ::testing::AddGlobalTestEnvironment(new Servers);

#define NEED(s) ASSERT_TRUE(s) << "server not running (see the set-up failure)"

TEST(HookRedis, ManyGreenClientsOnOneWorker) {
    NEED(redis);
    const int n = (int)tsan_capped(100, 20), rounds = 20;
    OneWorker w;
    int64_t late;
    std::atomic<int> bad{0};
    {
        Ticker tick(w);
        std::vector<fern_thread *> ts;
        for (int i = 0; i < n; i++)
            ts.push_back(w.spawn([&, i] {
                redisContext *c = redisConnect("127.0.0.1", redis->port);
                if (!c || c->err) {
                    bad++;
                    if (c) redisFree(c);
                    return;
                }
                for (int k = 0; k < rounds; k++) {
                    redisReply *r = (redisReply *)redisCommand(c, "SET k%d-%d v%d", i, k, k);
                    if (!r || r->type != REDIS_REPLY_STATUS) bad++;
                    if (r) freeReplyObject(r);
                    r = (redisReply *)redisCommand(c, "GET k%d-%d", i, k);
                    char want[16];
                    snprintf(want, sizeof want, "v%d", k);
                    if (!r || r->type != REDIS_REPLY_STRING || strcmp(r->str, want) != 0) bad++;
                    if (r) freeReplyObject(r);
                }
                redisFree(c);
            }));
        for (auto t : ts) OneWorker::join(t);
        late = tick.late_ns.load();
    }
    EXPECT_EQ(bad.load(), 0);
    EXPECT_LT(late, kLateLimit);
}

TEST(HookRedis, BlockingCommandsOverlap) {
    // BLPOP waits 0.3 s in the server: 20 clients on one worker finish
    // together, not in 6 s; redisConnectWithTimeout exercises connect + poll.
    NEED(redis);
    OneWorker w;
    std::vector<fern_thread *> ts;
    std::atomic<int> bad{0};
    int64_t t0 = fern_now_ns();
    for (int i = 0; i < 20; i++)
        ts.push_back(w.spawn([&, i] {
            struct timeval tv = {2, 0};
            redisContext *c = redisConnectWithTimeout("127.0.0.1", redis->port, tv);
            if (!c || c->err) {
                bad++;
                if (c) redisFree(c);
                return;
            }
            redisReply *r = (redisReply *)redisCommand(c, "BLPOP empty-list-%d 0.3", i);
            if (!r || r->type != REDIS_REPLY_NIL) bad++;
            if (r) freeReplyObject(r);
            redisFree(c);
        }));
    for (auto t : ts) OneWorker::join(t);
    double wall = secs_since(t0);
    EXPECT_EQ(bad.load(), 0);
    EXPECT_LT(wall, kTsan ? 3.0 : 1.5);
}

TEST(HookRedis, ServerGoneIsAnError) {
    NEED(redis);
    OneWorker w;
    w.run([] {
        // A port nobody listens on: hiredis reports the refused connect.
        redisContext *c = redisConnect("127.0.0.1", hook_servers::free_port());
        ASSERT_NE(c, nullptr);
        EXPECT_NE(c->err, 0);
        redisFree(c);
    });
}

TEST(HookPg, SleepsOverlapOnOneWorker) {
    NEED(pg);
    const int n = 20;
    OneWorker w;
    std::vector<fern_thread *> ts;
    std::atomic<int> bad{0};
    int64_t late;
    double wall;
    {
        Ticker tick(w);
        int64_t t0 = fern_now_ns();
        for (int i = 0; i < n; i++)
            ts.push_back(w.spawn([&, i] {
                std::string ci = i % 2 ? pg->conninfo_tcp() : pg->conninfo_unix();
                PGconn *c = PQconnectdb(ci.c_str());
                if (PQstatus(c) != CONNECTION_OK) {
                    ADD_FAILURE() << PQerrorMessage(c);
                    bad++;
                    PQfinish(c);
                    return;
                }
                PGresult *r = PQexec(c, "SELECT pg_sleep(0.3), 42");
                if (PQresultStatus(r) != PGRES_TUPLES_OK || strcmp(PQgetvalue(r, 0, 1), "42") != 0)
                    bad++;
                PQclear(r);
                PQfinish(c);
            }));
        for (auto t : ts) OneWorker::join(t);
        wall = secs_since(t0);
        late = tick.late_ns.load();
    }
    EXPECT_EQ(bad.load(), 0);
    EXPECT_LT(wall, kTsan ? 4.0 : 2.0) << "serial would be " << n * 0.3 << " s";
    EXPECT_LT(late, kLateLimit);
}

TEST(HookPg, ErrorsReachTheCaller) {
    NEED(pg);
    OneWorker w;
    w.run([] {
        PGconn *c = PQconnectdb(pg->conninfo_unix().c_str());
        ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
        PGresult *r = PQexec(c, "SELEC 1");
        EXPECT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
        EXPECT_NE(strstr(PQresultErrorMessage(r), "syntax error"), nullptr);
        PQclear(r);
        // statement_timeout cancels a long sleep on the server side.
        PQclear(PQexec(c, "SET statement_timeout = 100"));
        int64_t t0 = fern_now_ns();
        r = PQexec(c, "SELECT pg_sleep(5)");
        EXPECT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
        EXPECT_LT(fern_now_ns() - t0, ms(3000));
        PQclear(r);
        PQfinish(c);
        PGconn *d = PQconnectdb(("host=127.0.0.1 port=" + std::to_string(hook_servers::free_port()) +
                                 " dbname=postgres connect_timeout=2")
                                    .c_str());
        EXPECT_EQ(PQstatus(d), CONNECTION_BAD);
        PQfinish(d);
    });
}

}  // namespace
