// SPDX-License-Identifier: MIT
// fern_mutex: lock/trylock/timedlock/unlock, ownership errors, zero-init,
// and green + plain threads contending on one mutex.
#include "fern_test.h"

#include <algorithm>
#include <cstring>
#include <vector>

using namespace fern_test;

namespace {

fern_mutex g_static_mutex = FERN_MUTEX_INIT;

TEST(Mutex, NullIsEinval) {
    EXPECT_EQ(EINVAL, fern_mutex_init(nullptr));
    EXPECT_EQ(EINVAL, fern_mutex_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_mutex_lock(nullptr));
    EXPECT_EQ(EINVAL, fern_mutex_trylock(nullptr));
    EXPECT_EQ(EINVAL, fern_mutex_timedlock(nullptr, FERN_FOREVER));
    EXPECT_EQ(EINVAL, fern_mutex_unlock(nullptr));
}

TEST(Mutex, StaticInitAndZeroInitFromPlain) {
    EXPECT_EQ(0, fern_mutex_lock(&g_static_mutex));
    EXPECT_EQ(0, fern_mutex_unlock(&g_static_mutex));
    fern_mutex m;
    std::memset(&m, 0, sizeof m);
    EXPECT_EQ(0, fern_mutex_lock(&m));
    EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    EXPECT_EQ(0, fern_mutex_trylock(&m));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    EXPECT_EQ(0, fern_mutex_destroy(&m));
    fern_mutex m2{};
    EXPECT_EQ(0, fern_mutex_init(&m2));
    EXPECT_EQ(0, fern_mutex_timedlock(&m2, fern_now_ns() + ms(100)));
    EXPECT_EQ(0, fern_mutex_unlock(&m2));
    EXPECT_EQ(0, fern_mutex_destroy(&m2));
}

TEST(Mutex, ZeroInitFromGreen) {
    ASSERT_EQ(0, run_green([] {
        fern_mutex m{};
        EXPECT_EQ(0, fern_mutex_lock(&m));
        EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
        EXPECT_EQ(0, fern_mutex_lock(&g_static_mutex));
        EXPECT_EQ(0, fern_mutex_unlock(&g_static_mutex));
        EXPECT_EQ(0, fern_mutex_destroy(&m));
    }));
}

TEST(Mutex, RelockIsEdeadlk) {
    fern_mutex m = FERN_MUTEX_INIT;
    ASSERT_EQ(0, fern_mutex_lock(&m));
    EXPECT_EQ(EDEADLK, fern_mutex_lock(&m));
    EXPECT_EQ(EDEADLK, fern_mutex_timedlock(&m, fern_now_ns() + ms(10)));
    EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(0, fern_mutex_lock(&m));
        EXPECT_EQ(EDEADLK, fern_mutex_lock(&m));
        EXPECT_EQ(EDEADLK, fern_mutex_timedlock(&m, fern_now_ns() + ms(10)));
        EXPECT_EQ(EDEADLK, fern_mutex_timedlock(&m, FERN_FOREVER));
        EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
    }));
    EXPECT_EQ(0, fern_mutex_destroy(&m));
}

TEST(Mutex, UnlockUnheldIsEperm) {
    fern_mutex m = FERN_MUTEX_INIT;
    EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(EPERM, fern_mutex_unlock(&m)); }));
    // Still usable.
    EXPECT_EQ(0, fern_mutex_lock(&m));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
}

TEST(Mutex, UnlockHeldByOtherGreenIsEperm) {
    fern_mutex m = FERN_MUTEX_INIT;
    std::atomic<int> stage{0};
    fern_thread *holder = nullptr;
    ASSERT_EQ(0, spawn(&holder, nullptr, [&] {
        EXPECT_EQ(0, fern_mutex_lock(&m));
        stage = 1;
        while (stage.load() != 2) fern_sleep_ns(ms(1));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
    }));
    ASSERT_TRUE(wait_until([&] { return stage.load() == 1; }));
    // Another green thread.
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
        EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
    }));
    // A plain thread.
    EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
    EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
    stage = 2;
    ASSERT_EQ(0, fern_join(holder, nullptr));
    EXPECT_EQ(0, fern_mutex_trylock(&m));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
}

TEST(Mutex, UnlockHeldByPlainFromGreenOrOtherPlainIsEperm) {
    fern_mutex m = FERN_MUTEX_INIT;
    ASSERT_EQ(0, fern_mutex_lock(&m));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
        EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
    }));
    int other = -1;
    std::thread([&] { other = fern_mutex_unlock(&m); }).join();
    EXPECT_EQ(EPERM, other);
    EXPECT_EQ(0, fern_mutex_unlock(&m));
}

// The owner is the green thread, not the worker: another green thread on the
// same (only) worker must park, not get EDEADLK, and cannot unlock it.
TEST(Mutex, OwnerIsGreenThreadNotWorker) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_mutex m = FERN_MUTEX_INIT;
    std::atomic<int> stage{0};
    std::atomic<int> b_lock_rc{-1};
    fern_thread *a = nullptr, *b = nullptr;
    ASSERT_EQ(0, spawn_on(&a, c, [&] {
        ASSERT_EQ(0, fern_mutex_lock(&m));
        stage = 1;
        while (stage.load() < 2) fern_yield();
        // b is parked on the lock (or about to be).
        for (int i = 0; i < 20; i++) fern_yield();
        EXPECT_EQ(-1, b_lock_rc.load()) << "b got the mutex while a holds it";
        EXPECT_EQ(0, fern_mutex_unlock(&m));
    }));
    ASSERT_EQ(0, spawn_on(&b, c, [&] {
        while (stage.load() < 1) fern_yield();
        EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
        EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
        stage = 2;
        int rc = fern_mutex_lock(&m);
        b_lock_rc = rc;
        EXPECT_EQ(0, rc);
        if (rc == 0) {
            EXPECT_EQ(0, fern_mutex_unlock(&m));
        }
    }));
    ASSERT_EQ(0, fern_join(a, nullptr));
    ASSERT_EQ(0, fern_join(b, nullptr));
    EXPECT_EQ(0, b_lock_rc.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// A green thread that locks, then migrates to another cluster (another
// worker), still owns the mutex and can unlock it there.
TEST(Mutex, OwnershipSurvivesMigration) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    fern_mutex m = FERN_MUTEX_INIT;
    ASSERT_EQ(0, run_green([&] {
        for (int i = 0; i < 20; i++) {
            ASSERT_EQ(0, fern_mutex_lock(&m));
            ASSERT_EQ(0, fern_migrate((i & 1) ? fern_cluster_default() : c));
            EXPECT_EQ(EDEADLK, fern_mutex_lock(&m));
            ASSERT_EQ(0, fern_mutex_unlock(&m));
        }
        ASSERT_EQ(0, fern_migrate(fern_cluster_default()));
    }));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Mutex, DestroyLockedIsEbusy) {
    fern_mutex m = FERN_MUTEX_INIT;
    ASSERT_EQ(0, fern_mutex_lock(&m));
    EXPECT_EQ(EBUSY, fern_mutex_destroy(&m));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    EXPECT_EQ(0, fern_mutex_destroy(&m));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(0, fern_mutex_init(&m));
        ASSERT_EQ(0, fern_mutex_lock(&m));
        EXPECT_EQ(EBUSY, fern_mutex_destroy(&m));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
        EXPECT_EQ(0, fern_mutex_destroy(&m));
    }));
}

TEST(Mutex, TrylockContended) {
    fern_mutex m = FERN_MUTEX_INIT;
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(0, fern_mutex_trylock(&m)); }));
    // The green thread exited holding it: still locked, not ours.
    EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
    EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
}

TEST(Mutex, TimedlockTimesOutAndIsNotHeld) {
    fern_mutex m = FERN_MUTEX_INIT;
    ASSERT_EQ(0, fern_mutex_lock(&m));
    // Green waiter.
    ASSERT_EQ(0, run_green([&] {
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(ETIMEDOUT, fern_mutex_timedlock(&m, t0 + ms(30)));
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, ms(30));
        EXPECT_LT(el, ms(30) + ms(200));
        EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
        EXPECT_EQ(EINVAL, fern_mutex_timedlock(&m, -1));
        // Deadline already passed.
        EXPECT_EQ(ETIMEDOUT, fern_mutex_timedlock(&m, fern_now_ns() - ms(1)));
        EXPECT_EQ(ETIMEDOUT, fern_mutex_timedlock(&m, 0));
    }));
    // Plain waiter.
    int rc = -1;
    int64_t el = 0;
    std::thread([&] {
        int64_t t0 = fern_now_ns();
        rc = fern_mutex_timedlock(&m, t0 + ms(30));
        el = fern_now_ns() - t0;
    }).join();
    EXPECT_EQ(ETIMEDOUT, rc);
    EXPECT_GE(el, ms(30));
    EXPECT_LT(el, ms(30) + ms(200));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    EXPECT_EQ(0, fern_mutex_destroy(&m)) << "a timed-out waiter was left on the mutex";
}

TEST(Mutex, TimedlockNegativeDeadlineIsEinval) {
    fern_mutex m = FERN_MUTEX_INIT;
    EXPECT_EQ(EINVAL, fern_mutex_timedlock(&m, -5));
    EXPECT_EQ(0, fern_mutex_trylock(&m)) << "EINVAL timedlock left the mutex locked";
    EXPECT_EQ(0, fern_mutex_unlock(&m));
}

TEST(Mutex, TimedlockAcquiresWhenReleased) {
    fern_mutex m = FERN_MUTEX_INIT;
    ASSERT_EQ(0, fern_mutex_lock(&m));
    std::atomic<int> rc{-1};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        rc = fern_mutex_timedlock(&m, fern_now_ns() + ms(5000));
        if (rc == 0) fern_mutex_unlock(&m);
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(-1, rc.load());
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, rc.load());
    EXPECT_LT(fern_now_ns() - t0, ms(1000));
    // Plain thread timedlock, green holder.
    std::atomic<int> stage{0};
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        fern_mutex_lock(&m);
        stage = 1;
        fern_sleep_ns(ms(20));
        fern_mutex_unlock(&m);
    }));
    ASSERT_TRUE(wait_until([&] { return stage.load() == 1; }));
    EXPECT_EQ(0, fern_mutex_timedlock(&m, fern_now_ns() + ms(5000)));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    ASSERT_EQ(0, fern_join(t, nullptr));
}

// A plain thread blocked on a mutex held by a green thread is woken on unlock.
TEST(Mutex, PlainWaiterWokenByGreenUnlock) {
    Watchdog wd(30, "PlainWaiterWokenByGreenUnlock");
    fern_mutex m = FERN_MUTEX_INIT;
    for (int i = 0; i < 50; i++) {
        std::atomic<int> stage{0};
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn(&t, nullptr, [&] {
            fern_mutex_lock(&m);
            stage = 1;
            while (stage.load() != 2) fern_yield();
            fern_sleep_ns(200000);
            fern_mutex_unlock(&m);
        }));
        std::thread plain([&] {
            while (stage.load() != 1) std::this_thread::yield();
            stage = 2;
            EXPECT_EQ(0, fern_mutex_lock(&m));
            EXPECT_EQ(0, fern_mutex_unlock(&m));
        });
        plain.join();
        ASSERT_EQ(0, fern_join(t, nullptr));
    }
}

// Green threads on two clusters and plain pthreads increment one counter under
// the mutex; the total must be exact and the critical section exclusive.
TEST(Mutex, MixedGreenAndPlainContention) {
    Watchdog wd(120, "MixedGreenAndPlainContention");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 3));
    fern_mutex m = FERN_MUTEX_INIT;
    long counter = 0;
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    const int iters = (int)scaled(5000, 200);
    constexpr int GREEN = 12, PLAIN = 3;
    auto work = [&](int who) {
        for (int i = 0; i < iters; i++) {
            int rc;
            if (i % 7 == 0) {
                while ((rc = fern_mutex_trylock(&m)) == EBUSY) fern_yield();
            } else if (i % 11 == 0) {
                rc = fern_mutex_timedlock(&m, fern_now_ns() + ms(60000));
            } else {
                rc = fern_mutex_lock(&m);
            }
            if (rc != 0) {
                ADD_FAILURE() << "lock rc " << rc;
                return;
            }
            if (inside.fetch_add(1) != 0) overlaps++;
            counter++;
            if (fern_is_green() && i % 97 == 0) fern_yield();  // hold across a switch
            inside.fetch_sub(1);
            if ((rc = fern_mutex_unlock(&m)) != 0) {
                ADD_FAILURE() << "unlock rc " << rc << " by " << who;
                return;
            }
        }
    };
    std::vector<fern_thread *> ts(GREEN);
    for (int i = 0; i < GREEN; i++) ASSERT_EQ(0, spawn_on(&ts[i], (i & 1) ? c : nullptr, [&, i] { work(i); }));
    std::vector<std::thread> ps;
    for (int i = 0; i < PLAIN; i++) ps.emplace_back([&, i] { work(100 + i); });
    for (auto &p : ps) p.join();
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, overlaps.load());
    EXPECT_EQ(long(GREEN + PLAIN) * iters, counter);
    EXPECT_EQ(0, fern_mutex_destroy(&m));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// Many green threads on one worker contending, lock held across sleeps: the
// park/unpark path (not just spinning) is exercised.
TEST(Mutex, ContentionWithSleepingHolder) {
    Watchdog wd(60, "ContentionWithSleepingHolder");
    fern_mutex m = FERN_MUTEX_INIT;
    int counter = 0;
    constexpr int N = 50, ITERS = 10;
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn(&ts[i], nullptr, [&] {
            for (int k = 0; k < ITERS; k++) {
                ASSERT_EQ(0, fern_mutex_lock(&m));
                int v = counter;
                fern_sleep_ns(20000);
                counter = v + 1;
                ASSERT_EQ(0, fern_mutex_unlock(&m));
            }
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(N * ITERS, counter);
}

// Fairness (fern.h): a waiter that has waited more than 1 ms switches the
// mutex to hand-off mode, so it does not starve behind threads that keep
// re-locking. Two green threads re-lock in a tight loop; a plain thread and a
// green thread each must get the mutex promptly, every time.
TEST(Mutex, WaiterDoesNotStarveBehindRelockers) {
    Watchdog wd(60, "WaiterDoesNotStarveBehindRelockers");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    fern_mutex m = FERN_MUTEX_INIT;
    std::atomic<bool> stop{false};
    std::atomic<long> hogs_rounds{0};
    std::vector<fern_thread *> hogs(2);
    for (auto &h : hogs)
        ASSERT_EQ(0, spawn_on(&h, c, [&] {
            while (!stop.load()) {
                fern_mutex_lock(&m);
                int64_t until = fern_now_ns() + 20000;  // hold 20 us
                while (fern_now_ns() < until) {
                }
                fern_mutex_unlock(&m);
                hogs_rounds++;
            }
        }));
    EXPECT_TRUE(wait_until([&] { return hogs_rounds.load() > 100; }));
    int64_t worst_plain = 0;
    for (int i = 0; i < 20; i++) {
        int64_t t0 = fern_now_ns();
        ASSERT_EQ(0, fern_mutex_lock(&m));
        worst_plain = std::max(worst_plain, fern_now_ns() - t0);
        ASSERT_EQ(0, fern_mutex_unlock(&m));
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::atomic<int64_t> worst_green{0};
    ASSERT_EQ(0, run_green([&] {
        for (int i = 0; i < 20; i++) {
            int64_t t0 = fern_now_ns();
            ASSERT_EQ(0, fern_mutex_lock(&m));
            int64_t d = fern_now_ns() - t0;
            if (d > worst_green.load()) worst_green = d;
            ASSERT_EQ(0, fern_mutex_unlock(&m));
            fern_sleep_ns(ms(2));
        }
    }));
    stop = true;
    for (auto h : hogs) ASSERT_EQ(0, fern_join(h, nullptr));
    // A lateness bound: under emulation the waiter also waits for a host
    // CPU behind the two spinning hogs (kLatenessScale).
    EXPECT_LT(worst_plain, ms(100) * kLatenessScale)
        << "plain waiter starved for " << worst_plain / 1000 << " us";
    EXPECT_LT(worst_green.load(), ms(100) * kLatenessScale)
        << "green waiter starved for " << worst_green.load() / 1000 << " us";
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

} // namespace
