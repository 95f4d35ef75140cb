// SPDX-License-Identifier: MIT
// fern_sem: init/destroy, wait/trywait/timedwait/post, value, errors
// (EINVAL, EAGAIN, ETIMEDOUT, EOVERFLOW, EBUSY), zero-init and FERN_SEM_INIT,
// green and plain threads waking each other, and counting under contention.
#include "fern_test.h"

#include <cstring>
#include <vector>

using namespace fern_test;

namespace {

fern_sem g_static_sem = FERN_SEM_INIT(2);

TEST(Sem, NullIsEinval) {
    EXPECT_EQ(EINVAL, fern_sem_init(nullptr, 0));
    EXPECT_EQ(EINVAL, fern_sem_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_sem_wait(nullptr));
    EXPECT_EQ(EINVAL, fern_sem_trywait(nullptr));
    EXPECT_EQ(EINVAL, fern_sem_timedwait(nullptr, FERN_FOREVER));
    EXPECT_EQ(EINVAL, fern_sem_post(nullptr));
    EXPECT_EQ(0u, fern_sem_value(nullptr));
}

TEST(Sem, InitValueRange) {
    fern_sem s;
    std::memset(&s, 0xab, sizeof s);
    EXPECT_EQ(0, fern_sem_init(&s, 5));
    EXPECT_EQ(5u, fern_sem_value(&s));
    EXPECT_EQ(0, fern_sem_destroy(&s));
    EXPECT_EQ(0, fern_sem_init(&s, FERN_SEM_VALUE_MAX));
    EXPECT_EQ(FERN_SEM_VALUE_MAX, fern_sem_value(&s));
    EXPECT_EQ(EINVAL, fern_sem_init(&s, FERN_SEM_VALUE_MAX + 1u));
    EXPECT_EQ(EINVAL, fern_sem_init(&s, ~0u));
}

TEST(Sem, NegativeDeadlineIsEinval) {
    fern_sem s = FERN_SEM_INIT(1);
    EXPECT_EQ(EINVAL, fern_sem_timedwait(&s, -1));
    EXPECT_EQ(1u, fern_sem_value(&s)) << "EINVAL must not take a unit";
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(EINVAL, fern_sem_timedwait(&s, -5)); }));
    EXPECT_EQ(1u, fern_sem_value(&s));
}

TEST(Sem, ZeroInitAndStaticInit) {
    fern_sem z{};
    EXPECT_EQ(0u, fern_sem_value(&z));
    EXPECT_EQ(EAGAIN, fern_sem_trywait(&z));
    EXPECT_EQ(0, fern_sem_post(&z));
    EXPECT_EQ(1u, fern_sem_value(&z));
    EXPECT_EQ(0, fern_sem_trywait(&z));
    EXPECT_EQ(0u, fern_sem_value(&z));
    EXPECT_EQ(0, fern_sem_destroy(&z));

    EXPECT_EQ(2u, fern_sem_value(&g_static_sem));
    EXPECT_EQ(0, fern_sem_wait(&g_static_sem));
    ASSERT_EQ(0, run_green([] { EXPECT_EQ(0, fern_sem_trywait(&g_static_sem)); }));
    EXPECT_EQ(EAGAIN, fern_sem_trywait(&g_static_sem));
    EXPECT_EQ(0, fern_sem_post(&g_static_sem));
    EXPECT_EQ(0, fern_sem_post(&g_static_sem));
    EXPECT_EQ(2u, fern_sem_value(&g_static_sem));
}

TEST(Sem, CountsDownAndUp) {
    fern_sem s = FERN_SEM_INIT(3);
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(0, fern_sem_wait(&s));
        EXPECT_EQ(0, fern_sem_trywait(&s));
        EXPECT_EQ(0, fern_sem_timedwait(&s, fern_now_ns() + ms(100)));
        EXPECT_EQ(0u, fern_sem_value(&s));
        EXPECT_EQ(EAGAIN, fern_sem_trywait(&s));
        for (int i = 0; i < 10; i++) EXPECT_EQ(0, fern_sem_post(&s));
        EXPECT_EQ(10u, fern_sem_value(&s));
    }));
    for (int i = 0; i < 10; i++) EXPECT_EQ(0, fern_sem_trywait(&s));
    EXPECT_EQ(EAGAIN, fern_sem_trywait(&s));
    EXPECT_EQ(0, fern_sem_destroy(&s));
}

TEST(Sem, PostPastMaxIsEoverflow) {
    fern_sem s = FERN_SEM_INIT(FERN_SEM_VALUE_MAX);
    EXPECT_EQ(EOVERFLOW, fern_sem_post(&s));
    EXPECT_EQ(FERN_SEM_VALUE_MAX, fern_sem_value(&s)) << "value changed by a failed post";
    EXPECT_EQ(0, fern_sem_trywait(&s));
    EXPECT_EQ(FERN_SEM_VALUE_MAX - 1, fern_sem_value(&s));
    EXPECT_EQ(0, fern_sem_post(&s));
    EXPECT_EQ(EOVERFLOW, fern_sem_post(&s));
    fern_sem s2;
    ASSERT_EQ(0, fern_sem_init(&s2, FERN_SEM_VALUE_MAX));
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(EOVERFLOW, fern_sem_post(&s2)); }));
    EXPECT_EQ(FERN_SEM_VALUE_MAX, fern_sem_value(&s2));
}

TEST(Sem, TimedwaitTimesOutAndTakesNothing) {
    fern_sem s{};
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(ETIMEDOUT, fern_sem_timedwait(&s, t0 + ms(30)));
    EXPECT_GE(fern_now_ns() - t0, ms(30));
    EXPECT_EQ(ETIMEDOUT, fern_sem_timedwait(&s, 0)) << "past deadline";
    ASSERT_EQ(0, run_green([&] {
        int64_t t1 = fern_now_ns();
        EXPECT_EQ(ETIMEDOUT, fern_sem_timedwait(&s, t1 + ms(30)));
        EXPECT_GE(fern_now_ns() - t1, ms(30));
        EXPECT_EQ(ETIMEDOUT, fern_sem_timedwait(&s, 0));
    }));
    EXPECT_EQ(0u, fern_sem_value(&s));
    // After the timeouts a post is kept (no ghost waiter swallowed it).
    EXPECT_EQ(0, fern_sem_post(&s));
    EXPECT_EQ(1u, fern_sem_value(&s));
    EXPECT_EQ(0, fern_sem_timedwait(&s, 0)) << "a ready unit is taken even with a past deadline";
    EXPECT_EQ(0, fern_sem_destroy(&s)) << "a timed-out waiter left in the queue";
}

TEST(Sem, DestroyWithWaiterIsEbusy) {
    Watchdog wd(30, "Sem.DestroyWithWaiterIsEbusy");
    fern_sem s{};
    std::atomic<int> done{0};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        EXPECT_EQ(0, fern_sem_wait(&s));
        done = 1;
    }));
    // Wait until it is really queued: destroy only says EBUSY once queued.
    ASSERT_TRUE(wait_until([&] { return fern_sem_destroy(&s) == EBUSY; }));
    EXPECT_EQ(EBUSY, fern_sem_destroy(&s));
    EXPECT_EQ(0, done.load());
    EXPECT_EQ(0, fern_sem_post(&s));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(1, done.load());
    EXPECT_EQ(0u, fern_sem_value(&s)) << "post handed to the waiter must not also count";
    EXPECT_EQ(0, fern_sem_destroy(&s));
}

TEST(Sem, GreenWaiterWokenByPlainPoster) {
    Watchdog wd(30, "Sem.GreenWaiterWokenByPlainPoster");
    fern_sem s{};
    std::atomic<int> got{0};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        for (int i = 0; i < 5; i++) {
            EXPECT_EQ(0, fern_sem_wait(&s));
            got++;
        }
    }));
    for (int i = 0; i < 5; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        EXPECT_EQ(0, fern_sem_post(&s));
    }
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(5, got.load());
    EXPECT_EQ(0u, fern_sem_value(&s));
}

TEST(Sem, PlainWaiterWokenByGreenPoster) {
    Watchdog wd(30, "Sem.PlainWaiterWokenByGreenPoster");
    fern_sem s{};
    std::atomic<int> got{0};
    std::thread th([&] {
        for (int i = 0; i < 5; i++) {
            EXPECT_EQ(0, fern_sem_wait(&s));
            got++;
        }
        // A plain timed wait woken in time.
        EXPECT_EQ(0, fern_sem_timedwait(&s, fern_now_ns() + ms(5000)));
        got++;
    });
    ASSERT_EQ(0, run_green([&] {
        for (int i = 0; i < 6; i++) {
            fern_sleep_ns(ms(2));
            EXPECT_EQ(0, fern_sem_post(&s));
        }
    }));
    th.join();
    EXPECT_EQ(6, got.load());
    EXPECT_EQ(0u, fern_sem_value(&s));
}

TEST(Sem, GreenTimedwaitWokenBeforeDeadline) {
    Watchdog wd(30, "Sem.GreenTimedwaitWokenBeforeDeadline");
    fern_sem s{};
    int rc = -1;
    int64_t waited = 0;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        int64_t t0 = fern_now_ns();
        rc = fern_sem_timedwait(&s, t0 + ms(5000));
        waited = fern_now_ns() - t0;
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(0, fern_sem_post(&s));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, rc);
    EXPECT_LT(waited, ms(4000));
    EXPECT_EQ(0u, fern_sem_value(&s));
}

// Units are conserved: N posters, M waiters, green and plain, on 2 workers.
TEST(Sem, UnitsConservedUnderContention) {
    Watchdog wd(60, "Sem.UnitsConservedUnderContention");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    fern_sem s{};
    const int kGreen = 8, kPlain = 2;
    const long per = scaled(2000, 50);
    std::atomic<long> taken{0}, timeouts{0};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < kGreen; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, c, [&, i] {
            for (long k = 0; k < per; k++) {
                if (i % 2 == 0) {
                    EXPECT_EQ(0, fern_sem_post(&s));
                } else {
                    int rc;
                    while ((rc = fern_sem_timedwait(&s, fern_now_ns() + 100000)) == ETIMEDOUT)
                        timeouts++;
                    EXPECT_EQ(0, rc);
                    taken++;
                }
                if (k % 16 == 0) fern_yield();
            }
        }));
        ts.push_back(t);
    }
    std::vector<std::thread> plain;
    for (int i = 0; i < kPlain; i++) {
        plain.emplace_back([&, i] {
            for (long k = 0; k < per; k++) {
                if (i == 0) {
                    EXPECT_EQ(0, fern_sem_post(&s));
                } else {
                    EXPECT_EQ(0, fern_sem_wait(&s));
                    taken++;
                }
            }
        });
    }
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    for (auto &p : plain) p.join();
    EXPECT_EQ(per * (kGreen / 2 + kPlain / 2), taken.load());
    EXPECT_EQ(0u, fern_sem_value(&s)) << "units created or lost";
    EXPECT_EQ(0, fern_sem_destroy(&s));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

} // namespace
