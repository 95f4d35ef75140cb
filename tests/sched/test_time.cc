// SPDX-License-Identifier: MIT
// Clock and sleeps: fern_now_ns is monotonic, sleeps last at least what was
// asked (and not wildly more), from green and plain threads, many at once.
#include "fern_test.h"

#include <time.h>

#include <algorithm>
#include <random>
#include <vector>

using namespace fern_test;

namespace {

// Noisy 2-core VM: allow generous lateness (more under emulation).
constexpr int64_t kSlack = 50 * 1000000LL * kLatenessScale;

int64_t mono_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

TEST(Time, NowIsMonotonicClock) {
    int64_t a = mono_ns();
    int64_t n = fern_now_ns();
    int64_t b = mono_ns();
    EXPECT_GE(n, a);
    EXPECT_LE(n, b);
    int64_t prev = fern_now_ns();
    for (int i = 0; i < 200000; i++) {
        int64_t now = fern_now_ns();
        ASSERT_GE(now, prev);
        prev = now;
    }
    EXPECT_GT(fern_now_ns(), 0);
}

TEST(Time, NowMonotonicInGreenAcrossMigrations) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    ASSERT_EQ(0, run_green([&] {
        int64_t prev = fern_now_ns();
        for (int i = 0; i < 200; i++) {
            fern_migrate((i & 1) ? c : fern_cluster_default());
            int64_t now = fern_now_ns();
            ASSERT_GE(now, prev);
            prev = now;
        }
        fern_migrate(fern_cluster_default());
    }));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

void check_sleep_ns(int64_t d) {
    int64_t t0 = fern_now_ns();
    ASSERT_EQ(0, fern_sleep_ns(d));
    int64_t el = fern_now_ns() - t0;
    EXPECT_GE(el, d) << "slept less than asked";
    EXPECT_LT(el, d + kSlack) << "slept far longer than asked: " << el << " ns for " << d;
}

void check_sleep_until(int64_t d) {
    int64_t deadline = fern_now_ns() + d;
    ASSERT_EQ(0, fern_sleep_until(deadline));
    int64_t now = fern_now_ns();
    EXPECT_GE(now, deadline) << "woke before the deadline";
    EXPECT_LT(now, deadline + kSlack);
}

TEST(Time, SleepAccuracyGreen) {
    ASSERT_EQ(0, run_green([] {
        for (int64_t d : {ms(1), ms(5), ms(20), ms(60)}) {
            check_sleep_ns(d);
            check_sleep_until(d);
        }
        check_sleep_ns(1);
        check_sleep_ns(123456);
    }));
}

TEST(Time, SleepAccuracyPlain) {
    for (int64_t d : {ms(1), ms(20), ms(60)}) {
        check_sleep_ns(d);
        check_sleep_until(d);
    }
    std::thread([] {
        check_sleep_ns(ms(10));
        check_sleep_until(ms(10));
    }).join();
}

TEST(Time, NonPositiveSleepReturnsAtOnce) {
    auto check = [] {
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(0, fern_sleep_ns(0));
        EXPECT_EQ(0, fern_sleep_ns(-1000000000));
        EXPECT_EQ(0, fern_sleep_until(0));
        EXPECT_EQ(0, fern_sleep_until(fern_now_ns() - ms(100)));
        EXPECT_LT(fern_now_ns() - t0, ms(20));
    };
    check();
    ASSERT_EQ(0, run_green(check));
}

TEST(Time, NegativeDeadlineIsEinval) {
    EXPECT_EQ(EINVAL, fern_sleep_until(-1));
    ASSERT_EQ(0, run_green([] {
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(EINVAL, fern_sleep_until(-1));
        EXPECT_EQ(EINVAL, fern_sleep_until(INT64_MIN));
        EXPECT_LT(fern_now_ns() - t0, ms(20));
    }));
}

// 1000 green threads sleep at once with varied durations; every one wakes,
// none early, within a bounded time.
TEST(Time, ThousandConcurrentSleepers) {
    Watchdog wd(60, "ThousandConcurrentSleepers");
    constexpr int N = 1000;
    std::vector<fern_thread *> ts(N);
    std::vector<int64_t> late(N, -1);
    std::atomic<int> early{0};
    int64_t start = fern_now_ns();
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn(&ts[i], nullptr, [&, i] {
            int64_t d = ms(5) + (int64_t)(i * 7919 % 100) * ms(1);
            int64_t deadline = fern_now_ns() + d;
            if (i & 1) EXPECT_EQ(0, fern_sleep_until(deadline));
            else EXPECT_EQ(0, fern_sleep_ns(d));
            int64_t now = fern_now_ns();
            if (now < deadline) early++;
            late[i] = now - deadline;
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, early.load());
    // ThreadSanitizer makes each spawn cost tens of microseconds (a fiber).
    EXPECT_LT(fern_now_ns() - start, ms(kTsan ? 30000 : 3000));
    int64_t worst = *std::max_element(late.begin(), late.end());
    EXPECT_LT(worst, ms(500)) << "a sleeper woke far too late";
}

// Timers fire even while the worker always has runnable work.
TEST(Time, SleeperWakesWhileWorkerBusyYielding) {
    Watchdog wd(30, "SleeperWakesWhileWorkerBusyYielding");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    std::atomic<bool> woke{false};
    std::atomic<int64_t> el{0};
    fern_thread *spinner = nullptr, *sleeper = nullptr;
    ASSERT_EQ(0, spawn_on(&spinner, c, [&] {
        int64_t t0 = fern_now_ns();
        while (!woke.load() && fern_now_ns() - t0 < ms(5000)) fern_yield();
    }));
    ASSERT_EQ(0, spawn_on(&sleeper, c, [&] {
        int64_t t0 = fern_now_ns();
        fern_sleep_ns(ms(20));
        el = fern_now_ns() - t0;
        woke = true;
    }));
    ASSERT_EQ(0, fern_join(sleeper, nullptr));
    ASSERT_EQ(0, fern_join(spinner, nullptr));
    EXPECT_GE(el.load(), ms(20));
    EXPECT_LT(el.load(), ms(20) + kSlack + ms(100)) << "timer starved by a yielding thread";
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// A long sleeper does not delay a short one scheduled after it.
TEST(Time, ShortSleepNotBlockedByLongSleep) {
    fern_thread *longs = nullptr;
    std::atomic<bool> long_done{false};
    ASSERT_EQ(0, spawn(&longs, nullptr, [&] {
        fern_sleep_ns(ms(300));
        long_done = true;
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(0, run_green([&] { check_sleep_ns(ms(10)); }));
    EXPECT_FALSE(long_done.load());
    ASSERT_EQ(0, fern_join(longs, nullptr));
    EXPECT_TRUE(long_done.load());
}

// Sleeps on a green thread and on plain threads at the same time.
TEST(Time, MixedGreenAndPlainSleepers) {
    std::vector<std::thread> ps;
    std::atomic<int> bad{0};
    for (int i = 0; i < 4; i++)
        ps.emplace_back([&, i] {
            int64_t d = ms(5 + 5 * i), t0 = fern_now_ns();
            fern_sleep_ns(d);
            if (fern_now_ns() - t0 < d) bad++;
        });
    std::vector<fern_thread *> ts(20);
    for (int i = 0; i < 20; i++)
        ASSERT_EQ(0, spawn(&ts[i], nullptr, [&, i] {
            int64_t d = ms(1 + i), t0 = fern_now_ns();
            fern_sleep_ns(d);
            if (fern_now_ns() - t0 < d) bad++;
        }));
    for (auto &p : ps) p.join();
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, bad.load());
}

} // namespace
