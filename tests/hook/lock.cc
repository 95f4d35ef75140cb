// SPDX-License-Identifier: MIT
// fern-hook, pthread mutexes and condition variables (hook/lock.c,
// hook/cond.c): green threads park on them; green and plain threads share
// one object; ownership is per green thread.
#include "lock_test.h"

#include <threads.h>
#include <time.h>

using namespace lock_test;

FERN_WATCHDOG_EACH_TEST(120);

namespace {

// The reproducer: 200 green threads each hold one pthread mutex
// across a hooked usleep(500). Before fern-hook parked on mutexes this hung
// (the holder parked, the next green thread of its worker blocked the
// worker in the kernel).
TEST_P(OnWorkers, MutexHeldAcrossHookedSleep) {
    Workers w(GetParam());
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    Exclusive ex;
    int64_t t0 = fern_now_ns();
    w.many(200, [&](int) {
        ASSERT_EQ(pthread_mutex_lock(&m), 0);
        ex.enter();
        usleep(500);
        ex.leave();
        ASSERT_EQ(pthread_mutex_unlock(&m), 0);
    });
    EXPECT_EQ(ex.violations.load(), 0);
    // 200 x 0.5 ms one after another: 0.1 s ideal.
    EXPECT_LT(secs_since(t0), kTsan ? 20.0 : 5.0);
}

// The other mutex types, each held across a park.
TEST_P(OnWorkers, RecursiveAndErrorcheckPerGreenThread) {
    Workers w(GetParam());
    for (int type : {PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_ADAPTIVE_NP}) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, type);
        pthread_mutex_t m;
        ASSERT_EQ(pthread_mutex_init(&m, &a), 0);
        Exclusive ex;
        std::atomic<long> wrong{0};
        w.many(50, [&](int) {
            ASSERT_EQ(pthread_mutex_lock(&m), 0);
            if (type == PTHREAD_MUTEX_RECURSIVE) {
                if (pthread_mutex_lock(&m) != 0) wrong++;
            } else if (type == PTHREAD_MUTEX_ERRORCHECK && !kTsan) { // TSan reports the misuse
                if (pthread_mutex_lock(&m) != EDEADLK) wrong++;
            }
            ex.enter();
            usleep(200);
            ex.leave();
            if (type == PTHREAD_MUTEX_RECURSIVE && pthread_mutex_unlock(&m) != 0) wrong++;
            ASSERT_EQ(pthread_mutex_unlock(&m), 0);
            if (type != PTHREAD_MUTEX_ADAPTIVE_NP && !kTsan && pthread_mutex_unlock(&m) != EPERM)
                wrong++;
        });
        EXPECT_EQ(ex.violations.load(), 0) << type;
        EXPECT_EQ(wrong.load(), 0) << type;
        EXPECT_EQ(pthread_mutex_destroy(&m), 0);
    }
}

// The reproducer: preemption inside code holding a recursive (or
// error-checking) pthread mutex. glibc saw the next green thread of the
// same worker as the owner: the recursive mutex let it in (41-44
// violations in 3 of 3 runs), the error-checking one said EDEADLK.
TEST(HookMutex, PreemptedHolderKeepsOthersOut) {
    if (!kAsyncPreempt) GTEST_SKIP() << kNoPreemptMsg;
    Workers w(1);
    for (int type : {PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK}) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, type);
        pthread_mutex_t m;
        ASSERT_EQ(pthread_mutex_init(&m, &a), 0);
        Exclusive ex;
        std::atomic<long> errors{0};
        w.many(4, [&](int) {
            for (int k = 0; k < 3; k++) {
                if (pthread_mutex_lock(&m) != 0) {
                    errors++;
                    continue;
                }
                ex.enter();
                // Compute past the 10 ms slice: preempted while holding it.
                // (Mostly in this file's code, which preemption may
                // interrupt; fern's clock is not.)
                int64_t end = fern_now_ns() + ms(25);
                volatile unsigned long spin = 0;
                while (fern_now_ns() < end)
                    for (int i = 0; i < 200000; i++) spin = spin + 1;
                ex.leave();
                if (pthread_mutex_unlock(&m) != 0) errors++;
            }
        });
        EXPECT_EQ(ex.violations.load(), 0) << type;
        EXPECT_EQ(errors.load(), 0) << type;
        EXPECT_EQ(pthread_mutex_destroy(&m), 0);
    }
}

// A green thread's unlock of a mutex another green thread holds: EPERM for
// the checking types, as glibc between kernel threads.
TEST(HookMutex, UnlockByAnotherGreenThreadIsEperm) {
    if (kTsan) GTEST_SKIP() << "ThreadSanitizer reports the misuse this test makes";
    Workers w(1);
    for (int type : {PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK}) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, type);
        pthread_mutex_t m;
        ASSERT_EQ(pthread_mutex_init(&m, &a), 0);
        std::atomic<int> held{0}, done{0};
        fern_thread *owner = w.spawn([&] {
            EXPECT_EQ(pthread_mutex_lock(&m), 0);
            held = 1;
            while (!done) usleep(1000);
            EXPECT_EQ(pthread_mutex_unlock(&m), 0);
        });
        fern_thread *other = w.spawn([&] {
            while (!held) usleep(1000);
            EXPECT_EQ(pthread_mutex_unlock(&m), EPERM);
            EXPECT_EQ(pthread_mutex_trylock(&m), EBUSY);
            done = 1;
        });
        EXPECT_EQ(fern_join(other, nullptr), 0);
        EXPECT_EQ(fern_join(owner, nullptr), 0);
        // A plain thread is not the owner either.
        ASSERT_EQ(pthread_mutex_lock(&m), 0);
        w.many(1, [&](int) { EXPECT_EQ(pthread_mutex_unlock(&m), EPERM); });
        EXPECT_EQ(pthread_mutex_unlock(&m), 0);
        EXPECT_EQ(pthread_mutex_destroy(&m), 0);
    }
}

// Green and plain threads on one mutex, held across parks and kernel
// sleeps: each wakes the other kind.
TEST_P(OnWorkers, MutexMixedGreenAndPlain) {
    Workers w(GetParam());
    pthread_mutex_t m;
    memset(&m, 0, sizeof m); // zeroed memory is a valid mutex
    Exclusive ex;
    long count = 0;
    std::vector<std::thread> plain;
    for (int p = 0; p < 4; p++)
        plain.emplace_back([&] {
            for (int i = 0; i < 50; i++) {
                ASSERT_EQ(pthread_mutex_lock(&m), 0);
                ex.enter();
                count++;
                if (i % 8 == 0) usleep(200); // a kernel sleep while green threads wait
                ex.leave();
                ASSERT_EQ(pthread_mutex_unlock(&m), 0);
            }
        });
    w.many(40, [&](int i) {
        for (int k = 0; k < 10; k++) {
            ASSERT_EQ(pthread_mutex_lock(&m), 0);
            ex.enter();
            count++;
            if (k % 3 == 0) usleep(100); // parks holding it
            ex.leave();
            ASSERT_EQ(pthread_mutex_unlock(&m), 0);
        }
    });
    for (auto &t : plain) t.join();
    EXPECT_EQ(ex.violations.load(), 0);
    EXPECT_EQ(count, 4 * 50 + 40 * 10);
}

TEST(HookMutex, TrylockTimedlockClocklock) {
    Workers w(1);
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    std::atomic<int> held{0}, go{0};
    fern_thread *h = w.spawn([&] {
        EXPECT_EQ(pthread_mutex_lock(&m), 0);
        held = 1;
        while (!go) usleep(1000);
        usleep(20000);
        EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    });
    fern_thread *t = w.spawn([&] {
        while (!held) usleep(1000);
        EXPECT_EQ(pthread_mutex_trylock(&m), EBUSY);
        int64_t t0 = fern_now_ns(); // the deadline's clock, read first
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 10000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        EXPECT_EQ(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &ts), ETIMEDOUT);
        EXPECT_GE(fern_now_ns() - t0, ms(10));
        struct timespec bad = {0, 1000000000};
        EXPECT_EQ(pthread_mutex_timedlock(&m, &bad), EINVAL);
        EXPECT_EQ(pthread_mutex_clocklock(&m, CLOCK_PROCESS_CPUTIME_ID, &ts), EINVAL);
        go = 1;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 10;
        EXPECT_EQ(pthread_mutex_timedlock(&m, &ts), 0); // the holder lets go in 20 ms
        EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    });
    EXPECT_EQ(fern_join(t, nullptr), 0);
    EXPECT_EQ(fern_join(h, nullptr), 0);
}

// The reproducer: 200 green consumers wait on a pthread condvar fed
// by a green producer (a work queue). It hung on 1 and 2 workers.
TEST_P(OnWorkers, CondWorkQueueGreenProducer) {
    SKIP_UNLESS_CONDS_PARK();
    Workers w(GetParam());
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    long queued = 0, taken = 0;
    const int kN = 200, kEach = 5;
    fern_thread *prod = w.spawn([&] {
        for (int i = 0; i < kN * kEach; i++) {
            pthread_mutex_lock(&m);
            queued++;
            pthread_cond_signal(&c);
            pthread_mutex_unlock(&m);
            if (i % 50 == 0) usleep(200);
        }
    });
    w.many(kN, [&](int) {
        for (int k = 0; k < kEach; k++) {
            pthread_mutex_lock(&m);
            while (queued == 0) ASSERT_EQ(pthread_cond_wait(&c, &m), 0);
            queued--;
            taken++;
            pthread_mutex_unlock(&m);
        }
    });
    EXPECT_EQ(fern_join(prod, nullptr), 0);
    EXPECT_EQ(taken, kN * kEach);
}

// A plain producer feeding green consumers: completes, and a 1 ms green
// ticker on the consumers' worker stays on time (it was 115-170 ms late).
TEST(HookCond, PlainProducerGreenConsumersTickerOnTime) {
    SKIP_UNLESS_CONDS_PARK();
    OneWorker w;
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    long queued = 0, taken = 0;
    const int kN = 400, kEach = 1; // one item a millisecond: 0.4 s
    int64_t late;
    std::atomic<int64_t> plain_late{0};
    std::atomic<bool> stop{false};
    uint64_t spares0 = spares_started();
    // A plain thread's 1 ms ticker beside it: the machine's own lateness.
    std::thread ptick([&] {
        while (!stop) {
            int64_t due = fern_now_ns() + 1000000;
            struct timespec ts = {(time_t)(due / 1000000000), (long)(due % 1000000000)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
            int64_t l = fern_now_ns() - due;
            if (l > plain_late) plain_late = l;
        }
    });
    {
        Ticker tick(w);
        std::thread prod([&] {
            for (int i = 0; i < kN * kEach; i++) {
                pthread_mutex_lock(&m);
                queued++;
                pthread_cond_signal(&c);
                pthread_mutex_unlock(&m);
                usleep(1000);
            }
        });
        std::vector<fern_thread *> ts;
        for (int i = 0; i < kN; i++)
            ts.push_back(w.spawn([&] {
                for (int k = 0; k < kEach; k++) {
                    pthread_mutex_lock(&m);
                    while (queued == 0) pthread_cond_wait(&c, &m);
                    queued--;
                    taken++;
                    pthread_mutex_unlock(&m);
                }
            }));
        for (auto t : ts) OneWorker::join(t);
        prod.join();
        late = tick.late_ns.load();
    }
    stop = true;
    ptick.join();
    EXPECT_EQ(taken, kN * kEach);
    EXPECT_LT(late, kLateLimit);
    EXPECT_LT(late, plain_late + ms(kTsan ? 100 : 30))
        << "green ticker " << late / 1000 << " us late, plain " << plain_late / 1000 << " us";
    // Before the lock families were hooked, each consumer blocked the worker
    // in the kernel (the ticker was 115-170 ms late) and the monitor
    // started spares to run the rest.
    EXPECT_EQ(spares_started() - spares0, 0u) << "a green consumer blocked its worker";
}

// Green producer, plain consumers (blocked in the kernel on the condvar):
// each green signal wakes a plain thread.
TEST_P(OnWorkers, CondGreenProducerPlainConsumers) {
    Workers w(GetParam());
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c;
    ASSERT_EQ(pthread_cond_init(&c, nullptr), 0);
    long queued = 0, taken = 0;
    std::vector<std::thread> cons;
    for (int i = 0; i < 4; i++)
        cons.emplace_back([&] {
            for (int k = 0; k < 100; k++) {
                pthread_mutex_lock(&m);
                while (queued == 0) pthread_cond_wait(&c, &m);
                queued--;
                taken++;
                pthread_mutex_unlock(&m);
            }
        });
    w.many(4, [&](int) {
        for (int k = 0; k < 100; k++) {
            pthread_mutex_lock(&m);
            queued++;
            pthread_cond_signal(&c);
            pthread_mutex_unlock(&m);
            if (k % 10 == 0) usleep(100);
        }
    });
    for (auto &t : cons) t.join();
    EXPECT_EQ(taken, 400);
    EXPECT_EQ(pthread_cond_destroy(&c), 0);
}

TEST(HookCond, TimedwaitClocksAndBroadcast) {
    SKIP_UNLESS_CONDS_PARK();
    Workers w(1);
    for (clockid_t clk : {CLOCK_REALTIME, CLOCK_MONOTONIC}) {
        pthread_condattr_t a;
        pthread_condattr_init(&a);
        pthread_condattr_setclock(&a, clk);
        pthread_cond_t c;
        ASSERT_EQ(pthread_cond_init(&c, &a), 0);
        pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        w.many(10, [&](int) {
            // t0 before the deadline is read (and before the lock, which ten
            // threads contend for); 19 ms, not 20: clk may be CLOCK_REALTIME.
            int64_t t0 = fern_now_ns();
            struct timespec ts;
            clock_gettime(clk, &ts);
            ts.tv_nsec += 20000000;
            if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
            pthread_mutex_lock(&m);
            EXPECT_EQ(pthread_cond_timedwait(&c, &m, &ts), ETIMEDOUT);
            EXPECT_GE(fern_now_ns() - t0, ms(19));
            struct timespec bad = {0, -1};
            EXPECT_EQ(pthread_cond_timedwait(&c, &m, &bad), EINVAL);
            EXPECT_EQ(pthread_cond_clockwait(&c, &m, CLOCK_THREAD_CPUTIME_ID, &ts), EINVAL);
            pthread_mutex_unlock(&m);
        });
        // A broadcast wakes every waiter, green and plain.
        int gen = 0, woke = 0;
        std::thread plain([&] {
            pthread_mutex_lock(&m);
            while (gen == 0) pthread_cond_wait(&c, &m);
            woke++;
            pthread_mutex_unlock(&m);
        });
        std::vector<fern_thread *> ts;
        for (int i = 0; i < 20; i++)
            ts.push_back(w.spawn([&] {
                pthread_mutex_lock(&m);
                while (gen == 0) pthread_cond_wait(&c, &m);
                woke++;
                pthread_mutex_unlock(&m);
            }));
        usleep(20000);
        pthread_mutex_lock(&m);
        gen = 1;
        pthread_cond_broadcast(&c);
        pthread_mutex_unlock(&m);
        for (auto t : ts) EXPECT_EQ(fern_join(t, nullptr), 0);
        plain.join();
        EXPECT_EQ(woke, 21);
        EXPECT_EQ(pthread_cond_destroy(&c), 0);
    }
}

// An error-checking mutex not held by the waiter: EPERM, as glibc.
TEST(HookCond, WaitWithoutTheMutexIsEperm) {
    if (kTsan) GTEST_SKIP() << "ThreadSanitizer reports the misuse this test makes";
    Workers w(1);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_t m;
    pthread_mutex_init(&m, &a);
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    w.many(1, [&](int) { EXPECT_EQ(pthread_cond_wait(&c, &m), EPERM); });
    EXPECT_EQ(pthread_cond_wait(&c, &m), EPERM);
}

// C11 threads.h: glibc's mtx_* and cnd_* call its internals directly, so
// fern-hook has entries for them.
TEST_P(OnWorkers, C11MtxCnd) {
    SKIP_UNLESS_CONDS_PARK();
    Workers w(GetParam());
    mtx_t m;
    cnd_t c;
    ASSERT_EQ(mtx_init(&m, mtx_plain), thrd_success);
    ASSERT_EQ(cnd_init(&c), thrd_success);
    Exclusive ex;
    long queued = 0, taken = 0;
    fern_thread *prod = w.spawn([&] {
        for (int i = 0; i < 200; i++) {
            mtx_lock(&m);
            queued++;
            cnd_signal(&c);
            mtx_unlock(&m);
            if (i % 20 == 0) usleep(200);
        }
    });
    w.many(50, [&](int) {
        for (int k = 0; k < 4; k++) {
            ASSERT_EQ(mtx_lock(&m), thrd_success);
            ex.enter();
            usleep(50); // held across a park
            ex.leave();
            while (queued == 0) ASSERT_EQ(cnd_wait(&c, &m), thrd_success);
            queued--;
            taken++;
            ASSERT_EQ(mtx_unlock(&m), thrd_success);
        }
    });
    EXPECT_EQ(fern_join(prod, nullptr), 0);
    EXPECT_EQ(taken, 200);
    EXPECT_EQ(ex.violations.load(), 0);
    w.many(1, [&](int) {
        struct timespec ts;
        timespec_get(&ts, TIME_UTC);
        ts.tv_nsec += 5000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        mtx_lock(&m);
        EXPECT_EQ(cnd_timedwait(&c, &m, &ts), thrd_timedout);
        mtx_unlock(&m);
    });
    cnd_destroy(&c);
    mtx_destroy(&m);
}

INSTANTIATE_TEST_SUITE_P(Workers, OnWorkers, ::testing::Values(1, 2),
                         [](const auto &i) { return std::to_string(i.param) + "w"; });

}  // namespace
