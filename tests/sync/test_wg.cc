// SPDX-License-Identifier: MIT
// fern_wg: add/done/wait/timedwait, below-zero is EINVAL with nothing
// changed, EBUSY destroy, zero-init and FERN_WG_INIT, green and plain waiters.
#include "fern_test.h"

#include <cstring>
#include <vector>

using namespace fern_test;

namespace {

fern_wg g_static_wg = FERN_WG_INIT;

TEST(WaitGroup, NullIsEinval) {
    EXPECT_EQ(EINVAL, fern_wg_init(nullptr));
    EXPECT_EQ(EINVAL, fern_wg_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_wg_add(nullptr, 1));
    EXPECT_EQ(EINVAL, fern_wg_done(nullptr));
    EXPECT_EQ(EINVAL, fern_wg_wait(nullptr));
    EXPECT_EQ(EINVAL, fern_wg_timedwait(nullptr, FERN_FOREVER));
    fern_wg wg{};
    EXPECT_EQ(EINVAL, fern_wg_timedwait(&wg, -1));
}

TEST(WaitGroup, ZeroInitWaitReturnsAtOnce) {
    fern_wg z{};
    EXPECT_EQ(0, fern_wg_wait(&z));
    EXPECT_EQ(0, fern_wg_timedwait(&z, 0));
    EXPECT_EQ(0, fern_wg_wait(&g_static_wg));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(0, fern_wg_wait(&z));
        EXPECT_EQ(0, fern_wg_timedwait(&g_static_wg, 0));
    }));
    fern_wg w;
    std::memset(&w, 0x33, sizeof w);
    EXPECT_EQ(0, fern_wg_init(&w));
    EXPECT_EQ(0, fern_wg_wait(&w));
    EXPECT_EQ(0, fern_wg_destroy(&w));
    EXPECT_EQ(0, fern_wg_destroy(&z));
}

TEST(WaitGroup, BelowZeroIsEinvalAndChangesNothing) {
    fern_wg wg{};
    EXPECT_EQ(EINVAL, fern_wg_done(&wg));
    EXPECT_EQ(EINVAL, fern_wg_add(&wg, -1));
    EXPECT_EQ(0, fern_wg_add(&wg, 2));
    EXPECT_EQ(EINVAL, fern_wg_add(&wg, -3));
    EXPECT_EQ(EINVAL, fern_wg_add(&wg, INT64_MIN));
    // Count is still 2.
    EXPECT_EQ(ETIMEDOUT, fern_wg_timedwait(&wg, fern_now_ns() + ms(5)));
    EXPECT_EQ(0, fern_wg_done(&wg));
    EXPECT_EQ(ETIMEDOUT, fern_wg_timedwait(&wg, 0));
    EXPECT_EQ(EBUSY, fern_wg_destroy(&wg)) << "count not 0";
    EXPECT_EQ(0, fern_wg_done(&wg));
    EXPECT_EQ(0, fern_wg_timedwait(&wg, 0));
    EXPECT_EQ(EINVAL, fern_wg_done(&wg));
    EXPECT_EQ(0, fern_wg_destroy(&wg));
}

TEST(WaitGroup, OverflowIsEinval) {
    fern_wg wg{};
    EXPECT_EQ(0, fern_wg_add(&wg, INT64_MAX));
    EXPECT_EQ(EINVAL, fern_wg_add(&wg, 1));
    EXPECT_EQ(0, fern_wg_add(&wg, -INT64_MAX));
    EXPECT_EQ(0, fern_wg_wait(&wg));
}

TEST(WaitGroup, TimedwaitTimesOut) {
    fern_wg wg{};
    ASSERT_EQ(0, fern_wg_add(&wg, 1));
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(ETIMEDOUT, fern_wg_timedwait(&wg, t0 + ms(30)));
    EXPECT_GE(fern_now_ns() - t0, ms(30));
    ASSERT_EQ(0, run_green([&] {
        int64_t t1 = fern_now_ns();
        EXPECT_EQ(ETIMEDOUT, fern_wg_timedwait(&wg, t1 + ms(30)));
        EXPECT_GE(fern_now_ns() - t1, ms(30));
    }));
    EXPECT_EQ(0, fern_wg_done(&wg));
    EXPECT_EQ(0, fern_wg_destroy(&wg)) << "timed-out waiters left queued";
}

TEST(WaitGroup, DestroyWithWaiterIsEbusy) {
    Watchdog wd(30, "WaitGroup.DestroyWithWaiterIsEbusy");
    fern_wg wg{};
    ASSERT_EQ(0, fern_wg_add(&wg, 1));
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] { EXPECT_EQ(0, fern_wg_wait(&wg)); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(EBUSY, fern_wg_destroy(&wg));
    EXPECT_EQ(0, fern_wg_done(&wg));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, fern_wg_destroy(&wg));
}

// Many workers (green on 2 workers and plain) done; many waiters (green and
// plain, timed and not) all wake exactly when the count hits 0.
TEST(WaitGroup, ManyDoersManyWaiters) {
    Watchdog wd(60, "WaitGroup.ManyDoersManyWaiters");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    const int kDoers = 20;
    fern_wg wg{};
    ASSERT_EQ(0, fern_wg_add(&wg, kDoers + 2));
    std::atomic<int> finished{0};
    std::atomic<long> early{0}, woke{0};
    std::vector<fern_thread *> waiters;
    for (int i = 0; i < 6; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, c, [&, i] {
            int rc = i % 2 ? fern_wg_wait(&wg) : fern_wg_timedwait(&wg, fern_now_ns() + ms(10000));
            EXPECT_EQ(0, rc);
            if (finished.load() != kDoers + 2) early++;
            woke++;
        }));
        waiters.push_back(t);
    }
    std::thread pw([&] {
        EXPECT_EQ(0, fern_wg_wait(&wg));
        if (finished.load() != kDoers + 2) early++;
        woke++;
    });
    std::vector<fern_thread *> doers;
    for (int i = 0; i < kDoers; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, c, [&, i] {
            fern_sleep_ns(ms(1 + i % 5));
            finished++;
            EXPECT_EQ(0, fern_wg_done(&wg));
        }));
        doers.push_back(t);
    }
    std::thread pd([&] {
        for (int k = 0; k < 2; k++) {
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
            finished++;
            EXPECT_EQ(0, fern_wg_done(&wg));
        }
    });
    for (auto *t : doers) ASSERT_EQ(0, fern_join(t, nullptr));
    pd.join();
    for (auto *t : waiters) ASSERT_EQ(0, fern_join(t, nullptr));
    pw.join();
    EXPECT_EQ(0, early.load());
    EXPECT_EQ(7, woke.load());
    EXPECT_EQ(0, fern_wg_destroy(&wg));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// Reuse: the group can go to 0 and back up, waiters of the second round wait.
TEST(WaitGroup, Reuse) {
    Watchdog wd(30, "WaitGroup.Reuse");
    fern_wg wg = FERN_WG_INIT;
    for (int round = 0; round < 5; round++) {
        ASSERT_EQ(0, fern_wg_add(&wg, 3));
        std::atomic<int> n{0};
        for (int i = 0; i < 3; i++)
            ASSERT_EQ(0, go([&] {
                fern_sleep_ns(ms(1));
                n++;
                fern_wg_done(&wg);
            }));
        ASSERT_EQ(0, run_green([&] { EXPECT_EQ(0, fern_wg_wait(&wg)); }));
        EXPECT_EQ(3, n.load());
    }
    EXPECT_EQ(0, fern_wg_destroy(&wg));
}

} // namespace
