// SPDX-License-Identifier: MIT
// fern-hook, read-write locks, semaphores, barriers, once and spin locks
// (hook/rwlock.c, sem.c, barrier.c, once.c, lock.c): green threads park on
// them, green and plain threads share one object.
#include "lock_test.h"

#include <semaphore.h>
#include <threads.h>
#include <time.h>

using namespace lock_test;

FERN_WATCHDOG_EACH_TEST(120);

namespace {

class Family : public OnWorkers {};

struct timespec after_ms(clockid_t clk, long n) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    ts.tv_nsec += n * 1000000;
    while (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    return ts;
}

// The reproducer: writers hold a pthread rwlock across a hooked
// sleep. It gave 398 violations on 2 workers (glibc saw one kernel thread
// as the owner and said EDEADLK) and hung on 1.
TEST_P(Family, RwlockWritersAcrossHookedSleep) {
    Workers w(GetParam());
    static pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
    Exclusive ex;
    std::atomic<long> readers_in_write{0}, errors{0};
    std::atomic<int> writing{0};
    w.many(200, [&](int i) {
        if (i % 4 != 0) {
            if (pthread_rwlock_wrlock(&l) != 0) errors++;
            ex.enter();
            writing = 1;
            usleep(300);
            writing = 0;
            ex.leave();
        } else {
            if (pthread_rwlock_rdlock(&l) != 0) errors++;
            if (writing.load()) readers_in_write++;
            usleep(300);
        }
        if (pthread_rwlock_unlock(&l) != 0) errors++;
    });
    EXPECT_EQ(ex.violations.load(), 0);
    EXPECT_EQ(readers_in_write.load(), 0);
    EXPECT_EQ(errors.load(), 0);
}

TEST_P(Family, RwlockMixedGreenAndPlainWriterPreferring) {
    Workers w(GetParam());
    pthread_rwlock_t l = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
    Exclusive ex;
    long count = 0;
    std::vector<std::thread> plain;
    for (int p = 0; p < 3; p++)
        plain.emplace_back([&] {
            for (int i = 0; i < 100; i++) {
                if (i % 2) {
                    ASSERT_EQ(pthread_rwlock_wrlock(&l), 0);
                    ex.enter();
                    count++;
                    ex.leave();
                } else {
                    ASSERT_EQ(pthread_rwlock_rdlock(&l), 0);
                }
                if (i % 10 == 0) usleep(100);
                ASSERT_EQ(pthread_rwlock_unlock(&l), 0);
            }
        });
    w.many(30, [&](int g) {
        for (int i = 0; i < 20; i++) {
            if (i % 2) {
                ASSERT_EQ(pthread_rwlock_wrlock(&l), 0);
                ex.enter();
                count++;
                if (i % 5 == 0) usleep(100);
                ex.leave();
            } else {
                ASSERT_EQ(pthread_rwlock_rdlock(&l), 0);
                if (i % 4 == 0) usleep(100);
            }
            ASSERT_EQ(pthread_rwlock_unlock(&l), 0);
        }
    });
    for (auto &t : plain) t.join();
    EXPECT_EQ(ex.violations.load(), 0);
    EXPECT_EQ(count, 3 * 50 + 30 * 10);
}

TEST(HookRwlock, ErrorsAndTimedForms) {
    Workers w(1);
    pthread_rwlock_t l;
    ASSERT_EQ(pthread_rwlock_init(&l, nullptr), 0);
    std::atomic<int> held{0}, go{0};
    fern_thread *h = w.spawn([&] {
        EXPECT_EQ(pthread_rwlock_wrlock(&l), 0);
        if (!kTsan) { // ThreadSanitizer reports the misuse itself
            EXPECT_EQ(pthread_rwlock_wrlock(&l), EDEADLK);
            EXPECT_EQ(pthread_rwlock_rdlock(&l), EDEADLK);
        }
        held = 1;
        while (!go) usleep(1000);
        usleep(10000);
        EXPECT_EQ(pthread_rwlock_unlock(&l), 0);
    });
    w.many(1, [&](int) {
        while (!held) usleep(1000);
        EXPECT_EQ(pthread_rwlock_tryrdlock(&l), EBUSY);
        EXPECT_EQ(pthread_rwlock_trywrlock(&l), EBUSY);
        if (!kTsan) {
            EXPECT_EQ(pthread_rwlock_unlock(&l), EPERM); // not the writer
        }
        struct timespec ts = after_ms(CLOCK_REALTIME, 5);
        EXPECT_EQ(pthread_rwlock_timedrdlock(&l, &ts), ETIMEDOUT);
        ts = after_ms(CLOCK_MONOTONIC, 5);
        EXPECT_EQ(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &ts), ETIMEDOUT);
        struct timespec bad = {0, 2000000000};
        EXPECT_EQ(pthread_rwlock_timedwrlock(&l, &bad), EINVAL);
        go = 1;
        ts = after_ms(CLOCK_MONOTONIC, 10000);
        EXPECT_EQ(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &ts), 0);
        EXPECT_EQ(pthread_rwlock_tryrdlock(&l), 0); // readers share
        EXPECT_EQ(pthread_rwlock_unlock(&l), 0);
        EXPECT_EQ(pthread_rwlock_unlock(&l), 0);
        if (!kTsan) {
            EXPECT_EQ(pthread_rwlock_unlock(&l), EPERM); // not locked
        }
    });
    EXPECT_EQ(fern_join(h, nullptr), 0);
    EXPECT_EQ(pthread_rwlock_destroy(&l), 0);
}

// The hand-over (hook/rwlock.c): an unlock that leaves parties waiting
// gives them the lock before it returns, so the unlocker cannot take it
// back, and a writer's unlock lets in the oldest queued party (a writer
// alone, or every waiting reader: the default kind) or the oldest waiting
// writer (the writer-preferring kind) first.
// One worker: a party that the holder's hooked sleep let run is parked
// by the time the holder wakes.
TEST(HookRwlock, LastReaderHandsToTheWaitingWriter) {
    Workers w(1);
    pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
    std::atomic<int> wrote{0};
    w.many(1, [&](int) {
        ASSERT_EQ(pthread_rwlock_rdlock(&l), 0);
        fern_thread *wr = w.spawn([&] {
            EXPECT_EQ(pthread_rwlock_wrlock(&l), 0);
            wrote = 1;
            EXPECT_EQ(pthread_rwlock_unlock(&l), 0);
        });
        usleep(2000); // the writer runs and parks
        EXPECT_EQ(wrote.load(), 0);
        EXPECT_EQ(pthread_rwlock_unlock(&l), 0);
        EXPECT_EQ(pthread_rwlock_tryrdlock(&l), EBUSY); // the writer holds it now
        EXPECT_EQ(pthread_rwlock_trywrlock(&l), EBUSY);
        EXPECT_EQ(fern_join(wr, nullptr), 0);
        EXPECT_EQ(wrote.load(), 1);
        EXPECT_EQ(pthread_rwlock_trywrlock(&l), 0);
        EXPECT_EQ(pthread_rwlock_unlock(&l), 0);
    });
}

// The parties queue in the order of `queue` (r: a reader, w: a writer)
// behind a writer; `want` is the order in which they get the lock.
static void writer_unlock_order(pthread_rwlock_t *l, const char *queue, const char *want) {
    Workers w(1);
    std::string order;
    w.many(1, [&](int) {
        ASSERT_EQ(pthread_rwlock_wrlock(l), 0);
        std::vector<fern_thread *> ts;
        for (char c : std::string(queue))
            ts.push_back(w.spawn([&, c] {
                EXPECT_EQ(c == 'w' ? pthread_rwlock_wrlock(l) : pthread_rwlock_rdlock(l), 0);
                order += c;
                usleep(1000);
                EXPECT_EQ(pthread_rwlock_unlock(l), 0);
            }));
        usleep(2000); // all three run and park
        EXPECT_EQ(pthread_rwlock_unlock(l), 0);
        EXPECT_EQ(pthread_rwlock_trywrlock(l), EBUSY); // handed over
        for (auto *t : ts) EXPECT_EQ(fern_join(t, nullptr), 0);
    });
    EXPECT_EQ(order, want);
}

TEST(HookRwlock, WriterUnlockHandsToReadersFirst) {
    pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
    writer_unlock_order(&l, "rwr", "rrw"); // the oldest is a reader: both readers
}

// A writer queued before every reader gets the lock before them, and the
// readers then get it before the writer queued after them (neither kind
// waits for parties queued after it).
TEST(HookRwlock, WriterUnlockHandsToTheOldestQueued) {
    pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
    writer_unlock_order(&l, "wrw", "wrw");
    pthread_rwlock_t l2 = PTHREAD_RWLOCK_INITIALIZER;
    writer_unlock_order(&l2, "wwrr", "wwrr");
}

TEST(HookRwlock, WriterPreferringUnlockHandsToTheWriterFirst) {
    pthread_rwlock_t l = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
    writer_unlock_order(&l, "rwr", "wrr");
}

// Semaphores: a green and a plain producer feed green and plain consumers,
// units counted exactly; a plain consumer blocked in the kernel path is
// woken by a green post.
TEST_P(Family, SemMixedProducersConsumers) {
    Workers w(GetParam());
    sem_t s;
    ASSERT_EQ(sem_init(&s, 0, 0), 0);
    std::atomic<long> got{0};
    std::thread pc([&] {
        for (int i = 0; i < 200; i++) {
            ASSERT_EQ(sem_wait(&s), 0);
            got++;
        }
    });
    std::thread pp([&] {
        for (int i = 0; i < 300; i++) {
            ASSERT_EQ(sem_post(&s), 0);
            if (i % 20 == 0) usleep(200);
        }
    });
    fern_thread *gp = w.spawn([&] {
        for (int i = 0; i < 300; i++) {
            ASSERT_EQ(sem_post(&s), 0);
            if (i % 20 == 0) usleep(200);
        }
    });
    w.many(100, [&](int) {
        for (int k = 0; k < 4; k++) {
            ASSERT_EQ(sem_wait(&s), 0);
            got++;
        }
    });
    EXPECT_EQ(fern_join(gp, nullptr), 0);
    pp.join();
    pc.join();
    EXPECT_EQ(got.load(), 600);
    int v = -1;
    EXPECT_EQ(sem_getvalue(&s, &v), 0);
    EXPECT_EQ(v, 0);
    EXPECT_EQ(sem_destroy(&s), 0);
}

TEST(HookSem, TrywaitTimedwaitClockwaitErrors) {
    Workers w(1);
    sem_t s;
    // (On its own object: the sanitizers' sem_init zeroes the object first.)
    sem_t bad;
    EXPECT_EQ(sem_init(&bad, 0, (unsigned)SEM_VALUE_MAX + 1u), -1);
    EXPECT_EQ(errno, EINVAL);
    ASSERT_EQ(sem_init(&s, 0, 1), 0);
    w.many(1, [&](int) {
        EXPECT_EQ(sem_trywait(&s), 0);
        EXPECT_EQ(sem_trywait(&s), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
        int64_t t0 = fern_now_ns(); // before the deadline is read
        struct timespec ts = after_ms(CLOCK_REALTIME, 10);
        EXPECT_EQ(sem_timedwait(&s, &ts), -1);
        EXPECT_EQ(get_errno(), ETIMEDOUT);
        EXPECT_GE(fern_now_ns() - t0, ms(9));
        ts = after_ms(CLOCK_MONOTONIC, 5);
        EXPECT_EQ(sem_clockwait(&s, CLOCK_MONOTONIC, &ts), -1);
        EXPECT_EQ(get_errno(), ETIMEDOUT);
        struct timespec bad = {0, -5};
        EXPECT_EQ(sem_timedwait(&s, &bad), -1);
        EXPECT_EQ(get_errno(), EINVAL);
        EXPECT_EQ(sem_post(&s), 0);
        ts = after_ms(CLOCK_MONOTONIC, 5);
        EXPECT_EQ(sem_clockwait(&s, CLOCK_MONOTONIC, &ts), 0);
    });
    // A process-shared semaphore stays glibc's (its waits block the worker).
    sem_t ps;
    ASSERT_EQ(sem_init(&ps, 1, 2), 0);
    w.many(1, [&](int) {
        EXPECT_EQ(sem_wait(&ps), 0);
        EXPECT_EQ(sem_trywait(&ps), 0);
        EXPECT_EQ(sem_trywait(&ps), -1);
        EXPECT_EQ(sem_post(&ps), 0);
    });
    int v = 0;
    EXPECT_EQ(sem_getvalue(&ps, &v), 0);
    EXPECT_EQ(v, 1);
    EXPECT_EQ(sem_destroy(&ps), 0);
}

// A barrier of green and plain threads, over several rounds, with one
// serial thread per round.
TEST_P(Family, BarrierGreenAndPlain) {
    Workers w(GetParam());
    const int kGreen = 20, kPlain = 2, kRounds = 10;
    pthread_barrier_t b;
    ASSERT_EQ(pthread_barrier_init(&b, nullptr, kGreen + kPlain), 0);
    std::atomic<int> serial{0};
    std::atomic<int> phase[kRounds] = {};
    std::atomic<long> early{0};
    auto body = [&] {
        for (int r = 0; r < kRounds; r++) {
            phase[r]++;
            if (r % 3 == 0) usleep(100);
            int x = pthread_barrier_wait(&b);
            if (x == PTHREAD_BARRIER_SERIAL_THREAD)
                serial++;
            else
                EXPECT_EQ(x, 0);
            if (phase[r].load() != kGreen + kPlain) early++;
        }
    };
    std::vector<std::thread> plain;
    for (int i = 0; i < kPlain; i++) plain.emplace_back(body);
    w.many(kGreen, [&](int) { body(); });
    for (auto &t : plain) t.join();
    EXPECT_EQ(serial.load(), kRounds);
    EXPECT_EQ(early.load(), 0);
    EXPECT_EQ(pthread_barrier_destroy(&b), 0);
    EXPECT_EQ(pthread_barrier_init(&b, nullptr, 0), EINVAL);
}

// pthread_once whose routine parks: the other green threads of the same
// worker wait for it (parked, not blocking the worker) and see its effect.
TEST_P(Family, OnceRoutineThatParks) {
    Workers w(GetParam());
    static pthread_once_t onces[3] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
    pthread_once_t &o = onces[GetParam()]; // one per run
    o = PTHREAD_ONCE_INIT;                 // again for each run of the test (--gtest_repeat)
    static std::atomic<int> runs{0};
    static std::atomic<int> ready{0};
    runs = 0;
    ready = 0;
    std::atomic<long> bad{0};
    uint64_t spares0 = spares_started();
    std::thread plain([&] {
        while (!runs.load()) usleep(1000); // the green routine has begun
        pthread_once(&o, [] {});
        if (!ready.load()) bad++;
    });
    w.many(50, [&](int) {
        EXPECT_EQ(pthread_once(&o, [] {
            runs++;
            usleep(20000); // parks inside the routine
            ready = 1;
        }), 0);
        if (!ready.load()) bad++;
    });
    plain.join();
    EXPECT_EQ(runs.load(), 1);
    EXPECT_EQ(bad.load(), 0);
    // glibc's once made the waiters sleep their workers on the futex: the
    // program only went on because the monitor started spares.
    // (ThreadSanitizer's runtime implements pthread_once itself, in front of
    // fern-hook: there the waiters block their workers.)
    if (!kTsan) {
        EXPECT_EQ(spares_started() - spares0, 0u) << "a waiter blocked its worker";
    }
    static once_flag flags[3] = {ONCE_FLAG_INIT, ONCE_FLAG_INIT, ONCE_FLAG_INIT};
    once_flag &f = flags[GetParam()];
    once_flag fresh = ONCE_FLAG_INIT;
    f = fresh;
    static std::atomic<int> c11{0};
    c11 = 0;
    w.many(10, [&](int) { call_once(&f, [] { usleep(1000); c11++; }); });
    EXPECT_EQ(c11.load(), 1);
}

// A spin lock whose holder parks on the same worker: the waiter must let it
// run (it spun forever before).
TEST(HookSpin, HolderParkedOnTheSameWorker) {
    Workers w(1);
    pthread_spinlock_t l;
    ASSERT_EQ(pthread_spin_init(&l, PTHREAD_PROCESS_PRIVATE), 0);
    Exclusive ex;
    w.many(20, [&](int) {
        for (int k = 0; k < 5; k++) {
            ASSERT_EQ(pthread_spin_lock(&l), 0);
            ex.enter();
            usleep(100);
            ex.leave();
            ASSERT_EQ(pthread_spin_unlock(&l), 0);
        }
    });
    EXPECT_EQ(ex.violations.load(), 0);
    EXPECT_EQ(pthread_spin_destroy(&l), 0);
}

INSTANTIATE_TEST_SUITE_P(Workers, Family, ::testing::Values(1, 2),
                         [](const auto &i) { return std::to_string(i.param) + "w"; });

}  // namespace
