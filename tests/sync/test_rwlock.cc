// SPDX-License-Identifier: MIT
// fern_rwlock: read sharing, write exclusion, writer preference, try and timed
// forms, EDEADLK/EPERM/EAGAIN/EBUSY/EINVAL, zero-init and FERN_RWLOCK_INIT,
// green and plain threads mixed.
#include "fern_test.h"

#include <cstring>
#include <vector>

using namespace fern_test;

namespace {

fern_rwlock g_static_rw = FERN_RWLOCK_INIT;

TEST(RwLock, NullIsEinval) {
    EXPECT_EQ(EINVAL, fern_rwlock_init(nullptr));
    EXPECT_EQ(EINVAL, fern_rwlock_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_rwlock_rdlock(nullptr));
    EXPECT_EQ(EINVAL, fern_rwlock_tryrdlock(nullptr));
    EXPECT_EQ(EINVAL, fern_rwlock_timedrdlock(nullptr, FERN_FOREVER));
    EXPECT_EQ(EINVAL, fern_rwlock_wrlock(nullptr));
    EXPECT_EQ(EINVAL, fern_rwlock_trywrlock(nullptr));
    EXPECT_EQ(EINVAL, fern_rwlock_timedwrlock(nullptr, FERN_FOREVER));
    EXPECT_EQ(EINVAL, fern_rwlock_unlock(nullptr));
}

TEST(RwLock, NegativeDeadlineIsEinval) {
    fern_rwlock rw = FERN_RWLOCK_INIT;
    EXPECT_EQ(EINVAL, fern_rwlock_timedrdlock(&rw, -1));
    EXPECT_EQ(EINVAL, fern_rwlock_timedwrlock(&rw, -1));
    EXPECT_EQ(EPERM, fern_rwlock_unlock(&rw)) << "EINVAL took a lock";
    EXPECT_EQ(0, fern_rwlock_destroy(&rw));
}

TEST(RwLock, ZeroInitAndStaticInit) {
    fern_rwlock z{};
    EXPECT_EQ(0, fern_rwlock_rdlock(&z));
    EXPECT_EQ(0, fern_rwlock_unlock(&z));
    EXPECT_EQ(0, fern_rwlock_wrlock(&z));
    EXPECT_EQ(0, fern_rwlock_unlock(&z));
    EXPECT_EQ(0, fern_rwlock_destroy(&z));
    ASSERT_EQ(0, run_green([] {
        EXPECT_EQ(0, fern_rwlock_wrlock(&g_static_rw));
        EXPECT_EQ(0, fern_rwlock_unlock(&g_static_rw));
        EXPECT_EQ(0, fern_rwlock_tryrdlock(&g_static_rw));
        EXPECT_EQ(0, fern_rwlock_unlock(&g_static_rw));
    }));
    fern_rwlock r;
    std::memset(&r, 0x5a, sizeof r);
    EXPECT_EQ(0, fern_rwlock_init(&r));
    EXPECT_EQ(0, fern_rwlock_trywrlock(&r));
    EXPECT_EQ(0, fern_rwlock_unlock(&r));
    EXPECT_EQ(0, fern_rwlock_destroy(&r));
}

TEST(RwLock, ReadersShareWritersExclude) {
    fern_rwlock rw{};
    ASSERT_EQ(0, fern_rwlock_rdlock(&rw));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(0, fern_rwlock_tryrdlock(&rw));
        EXPECT_EQ(0, fern_rwlock_timedrdlock(&rw, fern_now_ns() + ms(10)));
        EXPECT_EQ(EBUSY, fern_rwlock_trywrlock(&rw)) << "holds a read lock: a try says busy";
        EXPECT_EQ(EDEADLK, fern_rwlock_wrlock(&rw)) << "holds a read lock: would wait for itself";
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(EDEADLK, fern_rwlock_timedwrlock(&rw, t0 + ms(20))) << "holds a read lock";
        EXPECT_EQ(0, fern_rwlock_unlock(&rw));
        EXPECT_EQ(0, fern_rwlock_unlock(&rw));
        EXPECT_EQ(EBUSY, fern_rwlock_trywrlock(&rw)) << "the plain thread still holds a read lock";
        t0 = fern_now_ns();
        EXPECT_EQ(ETIMEDOUT, fern_rwlock_timedwrlock(&rw, t0 + ms(20)));
        EXPECT_GE(fern_now_ns() - t0, ms(20));
        EXPECT_EQ(EPERM, fern_rwlock_unlock(&rw)) << "green unlocked the plain thread's read lock";
    }));
    EXPECT_EQ(EBUSY, fern_rwlock_destroy(&rw));
    EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    EXPECT_EQ(EPERM, fern_rwlock_unlock(&rw));
    EXPECT_EQ(0, fern_rwlock_destroy(&rw));

    ASSERT_EQ(0, fern_rwlock_wrlock(&rw));
    EXPECT_EQ(EBUSY, fern_rwlock_destroy(&rw));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(EBUSY, fern_rwlock_tryrdlock(&rw));
        EXPECT_EQ(EBUSY, fern_rwlock_trywrlock(&rw));
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(ETIMEDOUT, fern_rwlock_timedrdlock(&rw, t0 + ms(20)));
        EXPECT_GE(fern_now_ns() - t0, ms(20));
        EXPECT_EQ(ETIMEDOUT, fern_rwlock_timedwrlock(&rw, t0 + ms(30)));
        EXPECT_EQ(ETIMEDOUT, fern_rwlock_timedrdlock(&rw, 0));
        EXPECT_EQ(EPERM, fern_rwlock_unlock(&rw)) << "green unlocked a plain thread's write lock";
    }));
    // State unchanged after the timeouts: still write-held by us, nobody queued.
    EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    EXPECT_EQ(0, fern_rwlock_destroy(&rw)) << "timed-out waiters left queued or lock still held";
    EXPECT_EQ(0, fern_rwlock_trywrlock(&rw));
    EXPECT_EQ(0, fern_rwlock_unlock(&rw));
}

TEST(RwLock, DeadlockAndPermissionErrors) {
    fern_rwlock rw{};
    for (int green = 0; green < 2; green++) {
        auto body = [&] {
            ASSERT_EQ(0, fern_rwlock_wrlock(&rw));
            EXPECT_EQ(EDEADLK, fern_rwlock_wrlock(&rw));
            EXPECT_EQ(EDEADLK, fern_rwlock_rdlock(&rw));
            EXPECT_EQ(EDEADLK, fern_rwlock_timedrdlock(&rw, fern_now_ns() + ms(5)));
            EXPECT_EQ(EDEADLK, fern_rwlock_timedwrlock(&rw, fern_now_ns() + ms(5)));
            EXPECT_EQ(EBUSY, fern_rwlock_trywrlock(&rw)) << "a try never says EDEADLK";
            EXPECT_EQ(EBUSY, fern_rwlock_tryrdlock(&rw)) << "a try never says EDEADLK";
            EXPECT_EQ(0, fern_rwlock_unlock(&rw));
            EXPECT_EQ(EPERM, fern_rwlock_unlock(&rw));
            ASSERT_EQ(0, fern_rwlock_rdlock(&rw));
            EXPECT_EQ(EDEADLK, fern_rwlock_wrlock(&rw));
            EXPECT_EQ(EDEADLK, fern_rwlock_timedwrlock(&rw, fern_now_ns() + ms(5)));
            EXPECT_EQ(EBUSY, fern_rwlock_trywrlock(&rw)) << "a try never says EDEADLK";
            EXPECT_EQ(0, fern_rwlock_unlock(&rw));
            EXPECT_EQ(EPERM, fern_rwlock_unlock(&rw));
            EXPECT_EQ(0, fern_rwlock_destroy(&rw));
        };
        if (green)
            ASSERT_EQ(0, run_green(body));
        else
            body();
    }
}

// Unlocking a read lock you do not hold is EPERM even while others hold it,
// and it must not release their lock.
TEST(RwLock, UnlockReadLockHeldByOtherIsEperm) {
    fern_rwlock rw{};
    std::atomic<int> stage{0};
    std::thread holder([&] {
        EXPECT_EQ(0, fern_rwlock_rdlock(&rw));
        stage = 1;
        while (stage.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    });
    ASSERT_TRUE(wait_until([&] { return stage.load() == 1; }));
    EXPECT_EQ(EPERM, fern_rwlock_unlock(&rw));
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(EPERM, fern_rwlock_unlock(&rw)); }));
    // Still read-held: a writer cannot get it.
    EXPECT_EQ(EBUSY, fern_rwlock_trywrlock(&rw));
    stage = 2;
    holder.join();
    EXPECT_EQ(0, fern_rwlock_trywrlock(&rw));
    EXPECT_EQ(0, fern_rwlock_unlock(&rw));
}

TEST(RwLock, ReadsMaxIsEagain) {
    std::vector<fern_rwlock> locks(FERN_RWLOCK_READS_MAX + 1);
    for (auto &l : locks) fern_rwlock_init(&l);
    auto body = [&] {
        for (int i = 0; i < FERN_RWLOCK_READS_MAX; i++) ASSERT_EQ(0, fern_rwlock_rdlock(&locks[i]));
        EXPECT_EQ(EAGAIN, fern_rwlock_rdlock(&locks[FERN_RWLOCK_READS_MAX]));
        EXPECT_EQ(EAGAIN, fern_rwlock_tryrdlock(&locks[FERN_RWLOCK_READS_MAX]));
        EXPECT_EQ(EAGAIN, fern_rwlock_rdlock(&locks[0]));
        // The failed lock was not taken.
        EXPECT_EQ(EPERM, fern_rwlock_unlock(&locks[FERN_RWLOCK_READS_MAX]));
        EXPECT_EQ(0, fern_rwlock_trywrlock(&locks[FERN_RWLOCK_READS_MAX]));
        EXPECT_EQ(0, fern_rwlock_unlock(&locks[FERN_RWLOCK_READS_MAX]));
        for (int i = 0; i < FERN_RWLOCK_READS_MAX; i++) ASSERT_EQ(0, fern_rwlock_unlock(&locks[i]));
        ASSERT_EQ(0, fern_rwlock_rdlock(&locks[FERN_RWLOCK_READS_MAX]));
        ASSERT_EQ(0, fern_rwlock_unlock(&locks[FERN_RWLOCK_READS_MAX]));
    };
    body();
    ASSERT_EQ(0, run_green(body));
    for (auto &l : locks) EXPECT_EQ(0, fern_rwlock_destroy(&l));
}

// Writer preference: once a writer waits, tryrdlock says EBUSY and new
// readers queue behind it; the writer gets in when the readers leave.
TEST(RwLock, WriterPreference) {
    Watchdog wd(30, "RwLock.WriterPreference");
    fern_rwlock rw{};
    ASSERT_EQ(0, fern_rwlock_rdlock(&rw));  // plain reader holds
    std::atomic<int> order{0};
    std::atomic<int> writer_at{-1}, reader_at{-1};
    fern_thread *w = nullptr, *r = nullptr;
    ASSERT_EQ(0, spawn(&w, nullptr, [&] {
        EXPECT_EQ(0, fern_rwlock_wrlock(&rw));
        writer_at = order++;
        fern_sleep_ns(ms(10));
        EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    }));
    // Wait for the writer to queue (destroy is EBUSY anyway; use tryrdlock).
    ASSERT_TRUE(wait_until([&] {
        int rc = fern_rwlock_tryrdlock(&rw);
        if (rc == 0) fern_rwlock_unlock(&rw);
        return rc == EBUSY;
    })) << "tryrdlock still succeeds while a writer waits";
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(EBUSY, fern_rwlock_tryrdlock(&rw)); }));
    int64_t t0 = fern_now_ns();
    std::thread([&] { EXPECT_EQ(ETIMEDOUT, fern_rwlock_timedrdlock(&rw, fern_now_ns() + ms(20))); })
        .join();
    EXPECT_GE(fern_now_ns() - t0, ms(20));
    ASSERT_EQ(0, spawn(&r, nullptr, [&] {
        EXPECT_EQ(0, fern_rwlock_rdlock(&rw));
        reader_at = order++;
        EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(-1, writer_at.load());
    EXPECT_EQ(-1, reader_at.load()) << "new reader overtook a waiting writer";
    EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    ASSERT_EQ(0, fern_join(w, nullptr));
    ASSERT_EQ(0, fern_join(r, nullptr));
    EXPECT_EQ(0, writer_at.load());
    EXPECT_EQ(1, reader_at.load());
    EXPECT_EQ(0, fern_rwlock_destroy(&rw));
}

// A writer that times out lets the readers it held back in.
TEST(RwLock, TimedOutWriterAdmitsQueuedReaders) {
    Watchdog wd(30, "RwLock.TimedOutWriterAdmitsQueuedReaders");
    fern_rwlock rw{};
    ASSERT_EQ(0, fern_rwlock_rdlock(&rw));
    std::atomic<int> wrc{-1};
    std::atomic<int> readers_in{0};
    fern_thread *w = nullptr;
    ASSERT_EQ(0, spawn(&w, nullptr, [&] { wrc = fern_rwlock_timedwrlock(&rw, fern_now_ns() + ms(50)); }));
    ASSERT_TRUE(wait_until([&] {
        int rc = fern_rwlock_tryrdlock(&rw);
        if (rc == 0) fern_rwlock_unlock(&rw);
        return rc == EBUSY;
    }));
    std::vector<fern_thread *> rs;
    for (int i = 0; i < 3; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn(&t, nullptr, [&] {
            EXPECT_EQ(0, fern_rwlock_rdlock(&rw));
            readers_in++;
            while (readers_in.load() < 3) fern_sleep_ns(ms(1));  // all in at once
            EXPECT_EQ(0, fern_rwlock_unlock(&rw));
        }));
        rs.push_back(t);
    }
    std::thread plain_reader([&] {
        EXPECT_EQ(0, fern_rwlock_timedrdlock(&rw, fern_now_ns() + ms(5000)));
        EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    });
    ASSERT_EQ(0, fern_join(w, nullptr));
    EXPECT_EQ(ETIMEDOUT, wrc.load());
    for (auto *t : rs) ASSERT_EQ(0, fern_join(t, nullptr));
    plain_reader.join();
    EXPECT_EQ(3, readers_in.load());
    EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    EXPECT_EQ(0, fern_rwlock_destroy(&rw));
}

TEST(RwLock, ManyReadersAtOnce) {
    Watchdog wd(30, "RwLock.ManyReadersAtOnce");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    fern_rwlock rw{};
    const int kReaders = 16;
    std::atomic<int> inside{0}, max_inside{0};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < kReaders; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, c, [&] {
            EXPECT_EQ(0, fern_rwlock_rdlock(&rw));
            int v = ++inside;
            int m = max_inside.load();
            while (v > m && !max_inside.compare_exchange_weak(m, v)) {
            }
            // Stay until everyone is in (bounded).
            int64_t end = fern_now_ns() + ms(3000);
            while (max_inside.load() < kReaders && fern_now_ns() < end) fern_sleep_ns(ms(1));
            --inside;
            EXPECT_EQ(0, fern_rwlock_unlock(&rw));
        }));
        ts.push_back(t);
    }
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(kReaders, max_inside.load()) << "readers did not share the lock";
    EXPECT_EQ(0, fern_rwlock_destroy(&rw));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// Writers exclude everyone: counters checked inside the critical sections.
TEST(RwLock, ExclusionUnderContention) {
    Watchdog wd(60, "RwLock.ExclusionUnderContention");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    fern_rwlock rw{};
    std::atomic<int> readers{0}, writers{0};
    std::atomic<long> violations{0}, writes{0}, reads{0};
    long shared_a = 0, shared_b = 0;  // guarded by rw
    const long iters = scaled(3000, 100);
    auto work = [&](int i, bool green) {
        for (long k = 0; k < iters; k++) {
            int kind = (int)((k + i) % 5);
            if (kind == 0 || kind == 3) {
                int rc = kind == 0 ? fern_rwlock_wrlock(&rw)
                                   : fern_rwlock_timedwrlock(&rw, fern_now_ns() + 200000);
                if (rc == ETIMEDOUT) continue;
                EXPECT_EQ(0, rc);
                if (++writers != 1 || readers.load() != 0) violations++;
                shared_a++;
                if (green && k % 7 == 0) fern_yield();
                shared_b++;
                writes++;
                --writers;
                EXPECT_EQ(0, fern_rwlock_unlock(&rw));
            } else {
                int rc = kind == 1 ? fern_rwlock_rdlock(&rw)
                         : kind == 2 ? fern_rwlock_tryrdlock(&rw)
                                     : fern_rwlock_timedrdlock(&rw, fern_now_ns() + 200000);
                if (rc == EBUSY || rc == ETIMEDOUT) continue;
                EXPECT_EQ(0, rc);
                ++readers;
                if (writers.load() != 0) violations++;
                if (shared_a != shared_b) violations++;
                if (green && k % 5 == 0) fern_yield();
                reads++;
                --readers;
                EXPECT_EQ(0, fern_rwlock_unlock(&rw));
            }
        }
    };
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 8; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, c, [&, i] { work(i, true); }));
        ts.push_back(t);
    }
    std::vector<std::thread> plain;
    for (int i = 0; i < 2; i++) plain.emplace_back([&, i] { work(100 + i, false); });
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    for (auto &p : plain) p.join();
    EXPECT_EQ(0, violations.load());
    EXPECT_EQ(writes.load(), shared_a);
    EXPECT_EQ(shared_a, shared_b);
    EXPECT_GT(reads.load(), 0);
    EXPECT_EQ(0, fern_rwlock_destroy(&rw)) << "lock left held or waiters left queued";
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// A plain writer blocked behind a green reader, and a green writer behind a
// plain reader, are woken.
TEST(RwLock, MixedWakeups) {
    Watchdog wd(30, "RwLock.MixedWakeups");
    fern_rwlock rw{};
    std::atomic<int> stage{0};
    fern_thread *g = nullptr;
    ASSERT_EQ(0, spawn(&g, nullptr, [&] {
        EXPECT_EQ(0, fern_rwlock_rdlock(&rw));
        stage = 1;
        fern_sleep_ns(ms(20));
        EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    }));
    ASSERT_TRUE(wait_until([&] { return stage.load() == 1; }));
    EXPECT_EQ(0, fern_rwlock_wrlock(&rw));  // plain writer waits for green reader
    ASSERT_EQ(0, fern_join(g, nullptr));
    std::atomic<int> grc{-1};
    ASSERT_EQ(0, spawn(&g, nullptr, [&] { grc = fern_rwlock_wrlock(&rw); if (grc == 0) fern_rwlock_unlock(&rw); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(-1, grc.load());
    EXPECT_EQ(0, fern_rwlock_unlock(&rw));
    ASSERT_EQ(0, fern_join(g, nullptr));
    EXPECT_EQ(0, grc.load());
    EXPECT_EQ(0, fern_rwlock_destroy(&rw));
}

} // namespace
