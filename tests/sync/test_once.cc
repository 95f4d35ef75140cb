// SPDX-License-Identifier: MIT
// fern_call_once: fn runs exactly once, concurrent callers (green on 2
// workers and plain) all wait for it to finish, recursion is EDEADLK,
// FERN_ONCE_INIT / zero-init, EINVAL.
#include "fern_test.h"

#include <vector>

using namespace fern_test;

namespace {

std::atomic<int> g_runs{0};
std::atomic<int> g_finished{0};
void slow_fn() {
    g_runs++;
    if (fern_is_green())
        fern_sleep_ns(ms(50));
    else
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g_finished = 1;
}
void noop() {}

TEST(Once, Einval) {
    fern_once o = FERN_ONCE_INIT;
    EXPECT_EQ(EINVAL, fern_call_once(nullptr, noop));
    EXPECT_EQ(EINVAL, fern_call_once(&o, nullptr));
    EXPECT_EQ(0, fern_call_once(&o, noop));
}

std::atomic<int> g_simple{0};
void simple() { g_simple++; }

TEST(Once, RunsOnceZeroInitAndStatic) {
    static fern_once so = FERN_ONCE_INIT;
    fern_once z{};
    g_simple = 0;
    EXPECT_EQ(0, fern_call_once(&z, simple));
    EXPECT_EQ(0, fern_call_once(&z, simple));
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(0, fern_call_once(&z, simple)); }));
    EXPECT_EQ(1, g_simple.load());
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(0, fern_call_once(&so, simple)); }));
    EXPECT_EQ(0, fern_call_once(&so, simple));
    EXPECT_EQ(2, g_simple.load());
}

TEST(Once, ConcurrentCallersWaitForFn) {
    Watchdog wd(30, "Once.ConcurrentCallersWaitForFn");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    for (int round = 0; round < 3; round++) {
        fern_once o = FERN_ONCE_INIT;
        g_runs = 0;
        g_finished = 0;
        std::atomic<long> early{0};
        std::atomic<bool> go_now{false};
        std::vector<fern_thread *> ts;
        for (int i = 0; i < 16; i++) {
            fern_thread *t = nullptr;
            ASSERT_EQ(0, spawn_on(&t, i % 2 ? c : nullptr, [&] {
                while (!go_now.load()) fern_yield();
                EXPECT_EQ(0, fern_call_once(&o, slow_fn));
                if (g_finished.load() != 1) early++;
            }));
            ts.push_back(t);
        }
        std::vector<std::thread> plain;
        for (int i = 0; i < 3; i++)
            plain.emplace_back([&] {
                while (!go_now.load()) std::this_thread::yield();
                EXPECT_EQ(0, fern_call_once(&o, slow_fn));
                if (g_finished.load() != 1) early++;
            });
        go_now = true;
        for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        for (auto &p : plain) p.join();
        EXPECT_EQ(1, g_runs.load()) << "fn ran more than once";
        EXPECT_EQ(0, early.load()) << "a caller returned before fn finished";
    }
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

fern_once g_rec = FERN_ONCE_INIT;
std::atomic<int> g_rec_rc{-1};
std::atomic<int> g_rec_runs{0};
void recursive_fn() {
    g_rec_runs++;
    g_rec_rc = fern_call_once(&g_rec, recursive_fn);
}

TEST(Once, RecursiveCallIsEdeadlk) {
    Watchdog wd(30, "Once.RecursiveCallIsEdeadlk");
    ASSERT_EQ(0, run_green([] { EXPECT_EQ(0, fern_call_once(&g_rec, recursive_fn)); }));
    EXPECT_EQ(EDEADLK, g_rec_rc.load());
    EXPECT_EQ(1, g_rec_runs.load());
    // Done now: later callers return 0 without running it.
    EXPECT_EQ(0, fern_call_once(&g_rec, recursive_fn));
    EXPECT_EQ(1, g_rec_runs.load());
}

fern_once g_rec_plain = FERN_ONCE_INIT;
std::atomic<int> g_rec_plain_rc{-1};
void recursive_plain_fn() { g_rec_plain_rc = fern_call_once(&g_rec_plain, recursive_plain_fn); }

TEST(Once, RecursiveCallFromPlainIsEdeadlk) {
    Watchdog wd(30, "Once.RecursiveCallFromPlainIsEdeadlk");
    EXPECT_EQ(0, fern_call_once(&g_rec_plain, recursive_plain_fn));
    EXPECT_EQ(EDEADLK, g_rec_plain_rc.load());
}

// A green fn that blocks: a plain caller waits; a caller on the same single
// worker parks (does not spin the worker away from fn).
std::atomic<int> g_single_runs{0};
void single_worker_fn() {
    g_single_runs++;
    for (int i = 0; i < 20; i++) fern_yield();
    fern_sleep_ns(ms(20));
}

TEST(Once, WaitersOnSameWorkerPark) {
    Watchdog wd(30, "Once.WaitersOnSameWorkerPark");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_once o{};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 4; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, c, [&] { EXPECT_EQ(0, fern_call_once(&o, single_worker_fn)); }));
        ts.push_back(t);
    }
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(1, g_single_runs.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

} // namespace
