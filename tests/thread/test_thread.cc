// SPDX-License-Identifier: MIT
// Thread lifecycle: spawn, join, detach, go, yield, self, ids, names, exit,
// and errno kept per green thread across yields, sleeps and migrations.
#include "fern_test.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

using namespace fern_test;

namespace {

void *ret_arg(void *arg) { return arg; }

void *double_arg(void *arg) { return (void *)((intptr_t)arg * 2); }

TEST(Thread, RunReturnsResult) {
    void *ret = nullptr;
    ASSERT_EQ(0, fern_run(ret_arg, (void *)42, &ret));
    EXPECT_EQ((void *)42, ret);
    // ret may be NULL.
    ASSERT_EQ(0, fern_run(ret_arg, (void *)43, nullptr));
    EXPECT_TRUE(runtime_running());
}

TEST(Thread, RunNullFnIsEinval) { EXPECT_EQ(EINVAL, fern_run(nullptr, nullptr, nullptr)); }

TEST(Thread, GreenIdentityInsideAndOutside) {
    EXPECT_FALSE(fern_is_green());
    EXPECT_EQ(nullptr, fern_self());
    EXPECT_EQ(0u, fern_thread_id(nullptr));
    EXPECT_STREQ("", fern_thread_name(nullptr));
    EXPECT_EQ(nullptr, fern_current_cluster());
    ASSERT_EQ(0, run_green([] {
        EXPECT_TRUE(fern_is_green());
        fern_thread *self = fern_self();
        EXPECT_NE(nullptr, self);
        EXPECT_GT(fern_thread_id(nullptr), 0u);
        EXPECT_EQ(fern_thread_id(nullptr), fern_thread_id(self));
        EXPECT_EQ(fern_cluster_default(), fern_current_cluster());
    }));
}

TEST(Thread, SpawnJoinManyResults) {
    constexpr int N = 200;
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++) ASSERT_EQ(0, fern_spawn(&ts[i], nullptr, double_arg, (void *)(intptr_t)i));
    for (int i = 0; i < N; i++) {
        void *r = nullptr;
        ASSERT_EQ(0, fern_join(ts[i], &r)) << i;
        EXPECT_EQ((intptr_t)i * 2, (intptr_t)r) << i;
    }
}

TEST(Thread, SpawnAndJoinFromGreen) {
    ASSERT_EQ(0, run_green([] {
        constexpr int N = 100;
        std::vector<fern_thread *> ts(N);
        for (int i = 0; i < N; i++) ASSERT_EQ(0, fern_spawn(&ts[i], nullptr, double_arg, (void *)(intptr_t)i));
        for (int i = N - 1; i >= 0; i--) {
            void *r = nullptr;
            ASSERT_EQ(0, fern_join(ts[i], &r));
            EXPECT_EQ((intptr_t)i * 2, (intptr_t)r);
        }
    }));
}

TEST(Thread, JoinWaitsForCompletion) {
    std::atomic<bool> done{false};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        fern_sleep_ns(ms(50));
        done.store(true);
        return (void *)7;
    }));
    void *r = nullptr;
    ASSERT_EQ(0, fern_join(t, &r));
    EXPECT_TRUE(done.load());
    EXPECT_EQ((void *)7, r);
}

TEST(Thread, JoinFromPlainPthreadsConcurrently) {
    constexpr int N = 16;
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn(&ts[i], nullptr, [i] {
            fern_sleep_ns(ms(i % 4));
            return (void *)(intptr_t)(i + 1);
        }));
    std::vector<std::thread> joiners;
    std::atomic<int> ok{0};
    for (int i = 0; i < N; i++)
        joiners.emplace_back([&, i] {
            void *r = nullptr;
            if (fern_join(ts[i], &r) == 0 && r == (void *)(intptr_t)(i + 1)) ok++;
        });
    for (auto &j : joiners) j.join();
    EXPECT_EQ(N, ok.load());
}

TEST(Thread, ChildOfGreenOnCustomClusterInheritsCluster) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    fern_thread *t = nullptr;
    std::atomic<fern_cluster *> child_cluster{nullptr};
    ASSERT_EQ(0, spawn_on(&t, c, [&] {
        EXPECT_EQ(c, fern_current_cluster());
        fern_thread *ch = nullptr;
        // attr NULL and attr.cluster NULL both mean "the current cluster".
        EXPECT_EQ(0, spawn(&ch, nullptr, [&] { child_cluster.store(fern_current_cluster()); }));
        EXPECT_EQ(0, fern_join(ch, nullptr));
        EXPECT_EQ(c, child_cluster.load());
        child_cluster.store(nullptr);
        fern_attr a{};
        a.name = "child";
        EXPECT_EQ(0, spawn(&ch, &a, [&] { child_cluster.store(fern_current_cluster()); }));
        EXPECT_EQ(0, fern_join(ch, nullptr));
        EXPECT_EQ(c, child_cluster.load());
    }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    // From a plain thread, NULL means the default cluster.
    ASSERT_EQ(0, spawn(&t, nullptr, [&] { child_cluster.store(fern_current_cluster()); }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(fern_cluster_default(), child_cluster.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Thread, IdsUniquePositiveAndMatchSelf) {
    constexpr int N = 1000;
    std::set<uint64_t> ids;
    for (int round = 0; round < 2; round++) {
        std::vector<fern_thread *> ts(N);
        std::vector<uint64_t> seen(N);
        for (int i = 0; i < N; i++)
            ASSERT_EQ(0, spawn(&ts[i], nullptr, [&seen, i] { seen[i] = fern_thread_id(nullptr); }));
        for (int i = 0; i < N; i++) {
            uint64_t id = fern_thread_id(ts[i]);
            ASSERT_EQ(0, fern_join(ts[i], nullptr));
            EXPECT_GT(id, 0u);
            EXPECT_EQ(id, seen[i]) << "handle id differs from the id the thread saw";
            EXPECT_TRUE(ids.insert(id).second) << "id reused: " << id;
        }
    }
    EXPECT_EQ(size_t(2 * N), ids.size());
}

TEST(Thread, NamesFromAttrAndSetName) {
    char buf[64];
    std::strcpy(buf, "worker-7");
    fern_attr a{};
    a.name = buf;
    fern_thread *t = nullptr;
    std::atomic<bool> go_on{false};
    std::string seen_attr, seen_set;
    ASSERT_EQ(0, spawn(&t, &a, [&] {
        while (!go_on.load()) fern_yield();
        seen_attr = fern_thread_name(nullptr);
        EXPECT_EQ(EINVAL, fern_set_name(nullptr));
        EXPECT_EQ(0, fern_set_name("renamed"));
        seen_set = fern_thread_name(nullptr);
        EXPECT_STREQ("renamed", fern_thread_name(fern_self()));
    }));
    // The name was copied at spawn.
    std::strcpy(buf, "clobbered");
    EXPECT_STREQ("worker-7", fern_thread_name(t));
    go_on.store(true);
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ("worker-7", seen_attr);
    EXPECT_EQ("renamed", seen_set);
}

TEST(Thread, NamesTruncatedTo31Bytes) {
    const std::string longname(40, 'x');
    const std::string want(31, 'x');
    fern_attr a{};
    a.name = longname.c_str();
    fern_thread *t = nullptr;
    std::string seen1, seen2;
    ASSERT_EQ(0, spawn(&t, &a, [&] {
        seen1 = fern_thread_name(nullptr);
        std::string other(50, 'y');
        EXPECT_EQ(0, fern_set_name(other.c_str()));
        seen2 = fern_thread_name(nullptr);
    }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(want, seen1);
    EXPECT_EQ(std::string(31, 'y'), seen2);
}

TEST(Thread, UnnamedThreadHasEmptyName) {
    // attr NULL and attr.name NULL both mean "no name".
    std::string seen = "unset";
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] { seen = fern_thread_name(nullptr); }));
    EXPECT_STREQ("", fern_thread_name(t));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ("", seen);
    seen = "unset";
    fern_attr a{};
    ASSERT_EQ(0, spawn(&t, &a, [&] { seen = fern_thread_name(nullptr); }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ("", seen);
}

TEST(Thread, SetNameFromPlainIsEperm) {
    EXPECT_EQ(EPERM, fern_set_name("x"));
    EXPECT_STREQ("", fern_thread_name(nullptr));
}

TEST(Thread, DetachRunsToCompletion) {
    std::atomic<int> done{0};
    constexpr int N = 50;
    for (int i = 0; i < N; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn(&t, nullptr, [&] {
            fern_sleep_ns(ms(1));
            done++;
        }));
        ASSERT_EQ(0, fern_detach(t));
    }
    EXPECT_TRUE(wait_until([&] { return done.load() == N; }));
}

TEST(Thread, DetachedAttrWithNullHandle) {
    std::atomic<int> done{0};
    fern_attr a{};
    a.detached = true;
    for (int i = 0; i < 20; i++) ASSERT_EQ(0, spawn(nullptr, &a, [&] { done++; }));
    EXPECT_TRUE(wait_until([&] { return done.load() == 20; }));
    a.detached = false;
    EXPECT_EQ(EINVAL, fern_spawn(nullptr, &a, ret_arg, nullptr));
    EXPECT_EQ(EINVAL, fern_spawn(nullptr, nullptr, ret_arg, nullptr));
}

TEST(Thread, GoRunsDetached) {
    std::atomic<int> done{0};
    constexpr int N = 500;
    for (int i = 0; i < N; i++) ASSERT_EQ(0, go([&] { done++; }));
    EXPECT_TRUE(wait_until([&] { return done.load() == N; }));
    // Also from a green thread.
    done = 0;
    ASSERT_EQ(0, run_green([&] {
        for (int i = 0; i < N; i++) ASSERT_EQ(0, go([&] { done++; }));
        while (done.load() != N) fern_sleep_ns(ms(1));
    }));
    EXPECT_EQ(N, done.load());
}

// fern_exit does not unwind, so these bodies are plain C functions (a heap
// closure would leak).
std::atomic<bool> g_after_exit{false};
std::atomic<int> g_exit_count{0};

__attribute__((noinline)) void exit_deep(int depth) {
    if (depth == 0) {
        fern_exit((void *)77);
        g_after_exit.store(true);  // must never run
        return;
    }
    exit_deep(depth - 1);
    g_after_exit.store(true);
}

void *exit_body(void *arg) {
    exit_deep((int)(intptr_t)arg);
    g_after_exit.store(true);
    return (void *)1;
}

void *exit_detached_body(void *) {
    g_exit_count++;
    fern_exit(nullptr);
    g_exit_count += 1000;
    return nullptr;
}

TEST(Thread, ExitFromNestedCall) {
    g_after_exit = false;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, exit_body, (void *)10));
    void *r = nullptr;
    ASSERT_EQ(0, fern_join(t, &r));
    EXPECT_EQ((void *)77, r);
    EXPECT_FALSE(g_after_exit.load()) << "code after fern_exit ran";
    // Via fern_run too.
    r = nullptr;
    ASSERT_EQ(0, fern_run(exit_body, (void *)0, &r));
    EXPECT_EQ((void *)77, r);
    EXPECT_FALSE(g_after_exit.load());
}

TEST(Thread, ExitFromPlainIsEperm) { EXPECT_EQ(EPERM, fern_exit((void *)1)); }

TEST(Thread, ExitOfDetachedThread) {
    g_exit_count = 0;
    for (int i = 0; i < 10; i++) ASSERT_EQ(0, fern_go(exit_detached_body, nullptr));
    EXPECT_TRUE(wait_until([&] { return g_exit_count.load() >= 10; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(10, g_exit_count.load());
}

// On a one-worker cluster, a yield must run the other runnable thread before
// the caller resumes.
TEST(Thread, YieldRunsOthersFirst) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, c, [] {
        for (int i = 0; i < 100; i++) {
            std::atomic<bool> ran{false};
            fern_thread *b = nullptr;
            ASSERT_EQ(0, spawn(&b, nullptr, [&] { ran.store(true); }));
            fern_yield();
            EXPECT_TRUE(ran.load()) << "yield returned before the other runnable thread ran, i=" << i;
            ASSERT_EQ(0, fern_join(b, nullptr));
        }
    }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// Cooperative ping-pong by yielding only (one worker): hangs without a fair yield.
TEST(Thread, YieldPingPongOneWorker) {
    Watchdog wd(60, "YieldPingPongOneWorker");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    std::atomic<int> turn{0};
    constexpr int K = 3, ROUNDS = 2000;
    std::vector<fern_thread *> ts(K);
    for (int me = 0; me < K; me++)
        ASSERT_EQ(0, spawn_on(&ts[me], c, [&, me] {
            for (int r = 0; r < ROUNDS; r++) {
                while (turn.load() % K != me) fern_yield();
                turn++;
            }
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(K * ROUNDS, turn.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Thread, YieldOutsideGreenReturns) {
    for (int i = 0; i < 10; i++) fern_yield();
    SUCCEED();
}

// errno is per green thread: several threads on one worker each keep their own
// value across yields and sleeps.
TEST(Thread, ErrnoKeptAcrossYieldAndSleepOnOneWorker) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    constexpr int N = 8;
    std::vector<fern_thread *> ts(N);
    std::atomic<int> bad{0};
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], c, [&, i] {
            for (int k = 0; k < 200; k++) {
                int mine = 1000 + i * 1000 + k;
                set_errno(mine);
                fern_yield();
                if (get_errno() != mine) bad++;
                if (k % 20 == 0) {
                    fern_sleep_ns(100000);
                    if (get_errno() != mine) bad++;
                }
            }
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, bad.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Thread, ErrnoKeptAcrossMigration) {
    fern_cluster *a = nullptr, *b = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&a, 2));
    ASSERT_EQ(0, fern_cluster_create(&b, 2));
    constexpr int N = 6;
    std::vector<fern_thread *> ts(N);
    std::atomic<int> bad{0}, first_want{0}, first_got{0};
    auto check = [&](int want, const char *) {
        int got = get_errno();
        if (got != want) {
            if (bad.fetch_add(1) == 0) {
                first_want = want;
                first_got = got;
            }
        }
    };
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], a, [&, i] {
            for (int k = 0; k < 50; k++) {
                int mine = 7 + i * 100 + k;
                set_errno(mine);
                if (fern_migrate((k & 1) ? a : b) != 0) bad += 1000;
                check(mine, "after migrate");
                if (fern_current_cluster() != ((k & 1) ? a : b)) bad += 100000;
                fern_yield();
                check(mine, "after yield");
            }
            fern_migrate(a);
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, bad.load()) << "first mismatch: errno " << first_got.load() << ", want " << first_want.load();
    EXPECT_EQ(0, fern_cluster_destroy(a));
    EXPECT_EQ(0, fern_cluster_destroy(b));
}

// A plain thread's errno is not disturbed by green threads.
TEST(Thread, PlainErrnoUntouchedByRun) {
    set_errno(4242);
    ASSERT_EQ(0, run_green([] { set_errno(1); }));
    EXPECT_EQ(4242, get_errno());
}

TEST(Thread, HandleIdNameValidUntilJoin) {
    fern_attr a{};
    a.name = "finished";
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, &a, ret_arg, nullptr));
    uint64_t id = fern_thread_id(t);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // it has finished
    EXPECT_EQ(id, fern_thread_id(t));
    EXPECT_STREQ("finished", fern_thread_name(t));
    EXPECT_EQ(0, fern_join(t, nullptr));
}

TEST(Thread, ManyThreadsSpawnTree) {
    std::atomic<int> count{0};
    struct Rec {
        static void *node(void *arg) {
            auto *cnt = static_cast<std::atomic<int> *>(arg);
            (*cnt)++;
            return nullptr;
        }
    };
    ASSERT_EQ(0, run_green([&] {
        std::vector<fern_thread *> kids;
        for (int i = 0; i < 20; i++) {
            fern_thread *k = nullptr;
            ASSERT_EQ(0, spawn(&k, nullptr, [&] {
                std::vector<fern_thread *> gk(20);
                for (auto &g : gk) EXPECT_EQ(0, fern_spawn(&g, nullptr, Rec::node, &count));
                for (auto g : gk) EXPECT_EQ(0, fern_join(g, nullptr));
            }));
            kids.push_back(k);
        }
        for (auto k : kids) EXPECT_EQ(0, fern_join(k, nullptr));
    }));
    EXPECT_EQ(400, count.load());
}

// ThreadSanitizer builds refuse a spawn past FERN_TSAN_THREADS_MAX live
// green threads with EAGAIN and one stderr line, rather than letting the
// sanitizer abort the process; other builds have no such limit.
TEST(Thread, SpawnPastTheSanitizerThreadLimit) {
    fern_sem gate = FERN_SEM_INIT(0);
    fern_attr a{};
    a.stack_size = FERN_STACK_MIN;
    auto parked = [](void *g) -> void * {
        fern_sem_wait(static_cast<fern_sem *>(g));
        return nullptr;
    };
    const long want = FERN_TSAN_THREADS_MAX + 100;
    std::vector<fern_thread *> ts;
    ts.reserve(want);
    int rc = 0;
    testing::internal::CaptureStderr();
    while ((long)ts.size() < want) {
        fern_thread *t = nullptr;
        if ((rc = fern_spawn(&t, &a, parked, &gate)) != 0) break;
        ts.push_back(t);
    }
    std::string err = testing::internal::GetCapturedStderr();
    if (kTsan) {
        EXPECT_EQ(EAGAIN, rc);
        EXPECT_LE((long)ts.size(), FERN_TSAN_THREADS_MAX);
        EXPECT_GE((long)ts.size(), FERN_TSAN_THREADS_MAX - 64) << "other live threads";
        EXPECT_NE(std::string::npos, err.find("FERN_TSAN_THREADS_MAX")) << err;
        EXPECT_EQ(1, std::count(err.begin(), err.end(), '\n')) << err;
    } else {
        EXPECT_EQ(0, rc);
        EXPECT_EQ(want, (long)ts.size());
    }
    for (size_t i = 0; i < ts.size(); i++) EXPECT_EQ(0, fern_sem_post(&gate));
    for (auto *t : ts) EXPECT_EQ(0, fern_join(t, nullptr));
    if (kTsan) { // the slots come back
        fern_thread *t = nullptr;
        fern_sem_post(&gate);
        EXPECT_EQ(0, fern_spawn(&t, &a, parked, &gate));
        EXPECT_EQ(0, fern_join(t, nullptr));
    }
}

} // namespace
