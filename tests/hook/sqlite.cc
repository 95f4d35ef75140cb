// SPDX-License-Identifier: MIT
// Unmodified SQLite (Debian's libsqlite3, built thread-safe: its own
// pthread mutexes, POSIX advisory locks, and a busy handler that sleeps
// with usleep) from green threads: WAL mode, a busy timeout, each thread
// its own connection. Before fern-hook parked on pthread locks this hung
// (3 of 3 runs in the issue).
#include "lock_test.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <string>

using namespace lock_test;

FERN_WATCHDOG_EACH_TEST(120);

namespace {

class Sqlite : public OnWorkers {
  protected:
    std::string dir, path;
    void SetUp() override {
        char tmpl[] = "/tmp/fern-sqlite-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir = tmpl;
        path = dir + "/t.db";
        sqlite3 *db;
        ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db,
                               "PRAGMA journal_mode=WAL;"
                               "CREATE TABLE t(thread INTEGER, n INTEGER, PRIMARY KEY(thread, n));",
                               nullptr, nullptr, nullptr),
                  SQLITE_OK);
        sqlite3_close(db);
    }
    void TearDown() override {
        for (const char *s : {"", "-wal", "-shm"}) unlink((path + s).c_str());
        rmdir(dir.c_str());
    }
};

TEST_P(Sqlite, WalBusyTimeoutEveryRow) {
    Workers w(GetParam());
    const int kThreads = 12, kTx = 20;
    std::atomic<long> errors{0};
    std::atomic<int> first_error{0};
    w.many(kThreads, [&](int i) {
        sqlite3 *db;
        if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
            errors++;
            return;
        }
        sqlite3_busy_timeout(db, 30000);
        for (int k = 0; k < kTx; k++) {
            std::string sql = "BEGIN IMMEDIATE; INSERT INTO t VALUES(" + std::to_string(i) + "," +
                              std::to_string(k) + "); COMMIT;";
            int r = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
            if (r != SQLITE_OK) {
                errors++;
                first_error = r;
                sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
            }
            if (k % 5 == 0) usleep(200); // a hooked sleep between transactions
        }
        sqlite3_close(db);
    });
    EXPECT_EQ(errors.load(), 0) << "first error " << first_error.load();
    sqlite3 *db;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt *st;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*), count(DISTINCT thread) FROM t", -1, &st,
                                 nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), kThreads * kTx);
    EXPECT_EQ(sqlite3_column_int(st, 1), kThreads);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

INSTANTIATE_TEST_SUITE_P(Workers, Sqlite, ::testing::Values(1, 2),
                         [](const auto &i) { return std::to_string(i.param) + "w"; });

}  // namespace
