// SPDX-License-Identifier: MIT
// fern_wait_fd: readiness and timeouts, EBUSY for a second waiter, stale
// edges never reported, plain threads.
#include "io_test.h"

namespace {

// ------------------------------------------------------------------------
// fern_wait_fd
// ------------------------------------------------------------------------

TEST(Io, WaitFdReadyAndTimeout) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(FERN_WRITE, fern_wait_fd(p.a, FERN_WRITE, fern_now_ns() + 1000 * kMs));
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(0, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 100 * kMs));
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, 95 * kMs);
        EXPECT_LT(el, 2000 * kMs);
        // Past deadline: poll without waiting.
        EXPECT_EQ(0, fern_wait_fd(p.a, FERN_READ, 0));
        ASSERT_EQ(1, write(p.b, "x", 1));
        EXPECT_EQ(FERN_READ, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 1000 * kMs));
        EXPECT_EQ(FERN_READ | FERN_WRITE,
                  fern_wait_fd(p.a, FERN_READ | FERN_WRITE, fern_now_ns() + 1000 * kMs));
        char c;
        EXPECT_EQ(1, fern_read(p.a, &c, 1));
        EXPECT_EQ(FERN_WRITE, fern_wait_fd(p.a, FERN_READ | FERN_WRITE, fern_now_ns() + 1000 * kMs));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WaitFdParksUntilReadable) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<int> res{-100};
    fern_thread *t = spawn_c(nullptr, [&] { res = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 10000 * kMs); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(-100, res.load());
    int64_t t0 = fern_now_ns();
    ASSERT_EQ(1, write(p.b, "x", 1));
    join(t);
    EXPECT_EQ(FERN_READ, res.load());
    EXPECT_LT(fern_now_ns() - t0, 3000 * kMs);
    EXPECT_TRUE(readable_now(p.a)) << "fern_wait_fd must not consume data";
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WaitFdInvalid) {
    Pair p = unix_pair();
    for (int ev : {0, 4, 8, -1, FERN_READ | 4, 0x100}) {
        errno = 0;
        EXPECT_EQ(-1, fern_wait_fd(p.a, ev, fern_now_ns() + 10 * kMs)) << "events " << ev;
        EXPECT_EQ(EINVAL, get_errno()) << "events " << ev;
    }
    errno = 0;
    EXPECT_EQ(-1, fern_wait_fd(-1, FERN_READ, fern_now_ns() + 10 * kMs));
    EXPECT_EQ(EBADF, get_errno());
    int dead = dup(p.a);
    close(dead);
    errno = 0;
    EXPECT_EQ(-1, fern_wait_fd(dead, FERN_READ, fern_now_ns() + 10 * kMs));
    EXPECT_EQ(EBADF, get_errno());
    errno = 0;
    EXPECT_EQ(-1, fern_read(-1, nullptr, 0));
    EXPECT_EQ(EBADF, get_errno());
    errno = 0;
    char c;
    EXPECT_EQ(-1, fern_read(INT32_MAX, &c, 1));
    EXPECT_EQ(EBADF, get_errno());
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WaitFdSecondWaiterSameDirectionIsEbusy) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<bool> started{false};
    std::atomic<int> first{-100};
    fern_thread *t = spawn_c(nullptr, [&] {
        started = true;
        first = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 10000 * kMs);
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(0, run_green([&] {
        int64_t t0 = fern_now_ns();
        errno = 0;
        EXPECT_EQ(-1, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 2000 * kMs));
        EXPECT_EQ(EBUSY, get_errno());
        EXPECT_LT(fern_now_ns() - t0, 1000 * kMs) << "EBUSY must be immediate";
        // The other direction is free.
        EXPECT_EQ(FERN_WRITE, fern_wait_fd(p.a, FERN_WRITE, fern_now_ns() + 2000 * kMs));
    }));
    EXPECT_EQ(-100, first.load());
    ASSERT_EQ(1, write(p.b, "x", 1));
    join(t);
    EXPECT_EQ(FERN_READ, first.load()) << "the first waiter was disturbed";
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

// Spec: "EBUSY if another thread already waits for the same direction on fd"
// - a plain thread counts as a thread.
TEST(Io, WaitFdPlainThreadSecondWaiterIsEbusy) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<bool> started{false};
    std::atomic<int> first{-100};
    fern_thread *t = spawn_c(nullptr, [&] {
        started = true;
        first = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 10000 * kMs);
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int64_t t0 = fern_now_ns();
    errno = 0;
    int r = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 300 * kMs);
    int e = get_errno();
    EXPECT_EQ(-1, r) << "plain-thread second reader: got " << r << " after "
                     << (fern_now_ns() - t0) / kMs << " ms";
    EXPECT_EQ(EBUSY, e);
    ASSERT_EQ(1, write(p.b, "x", 1));
    join(t);
    EXPECT_EQ(FERN_READ, first.load());
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

// READ|WRITE waits for either: writability appearing while nothing is
// readable must end the wait.
TEST(Io, WaitFdEitherDirectionWakesOnWritable) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<int> res{-100};
    std::atomic<int64_t> el{0};
    std::atomic<bool> started{false};
    fern_thread *t = spawn_c(nullptr, [&] {
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, FERN_FOREVER)); // register
        ASSERT_GT(fill(p.a), 0u);
        ASSERT_FALSE(writable_now(p.a));
        started = true;
        int64_t t0 = fern_now_ns();
        res = fern_wait_fd(p.a, FERN_READ | FERN_WRITE, fern_now_ns() + 4000 * kMs);
        el = fern_now_ns() - t0;
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    drain(p.b); // a becomes writable, still not readable
    join(t);
    EXPECT_EQ(FERN_WRITE, res.load()) << "fern_wait_fd(READ|WRITE) missed writability; waited "
                                      << el.load() / kMs << " ms";
    EXPECT_LT(el.load(), 2500 * kMs);
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

// fern_wait_fd reports events that hold: a stale edge (readiness consumed by
// an earlier call) must not be reported as ready.
TEST(Io, WaitFdDoesNotReportStaleWritability) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        // A reader parks and is woken: the poller has seen the fd's edges
        // (EPOLLOUT included) while nobody waited to write.
        fern_thread *r = spawn_c(nullptr, [&] {
            char c;
            EXPECT_EQ(1, fern_read(p.a, &c, 1));
        });
        fern_sleep_ns(50 * kMs);
        EXPECT_EQ(1, write(p.b, "x", 1));
        join(r);
        // Now make the fd unwritable with raw sends.
        ASSERT_GT(fill(p.a), 0u);
        ASSERT_FALSE(writable_now(p.a));
        int64_t t0 = fern_now_ns();
        int w = fern_wait_fd(p.a, FERN_WRITE, fern_now_ns() + 200 * kMs);
        int64_t el = fern_now_ns() - t0;
        EXPECT_EQ(0, w) << "reported FERN_WRITE on an fd that is not writable (after " << el / kMs
                        << " ms); writable now: " << writable_now(p.a);
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WaitFdDoesNotReportStaleReadability) {
    Watchdog wd(30);
    Pair p = unix_pair();
    Pair q = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        char c;
        // Register a, let data arrive and be seen by the poller while nobody
        // waits on a (someone else waits on q, so the worker polls).
        EXPECT_EQ(0, fern_wait_fd(p.a, FERN_READ, 0));
        EXPECT_EQ(1, write(p.b, "x", 1));
        EXPECT_EQ(0, fern_wait_fd(q.a, FERN_READ, fern_now_ns() + 50 * kMs));
        // Consume the data directly (fern_read need not wait).
        EXPECT_EQ(1, fern_read(p.a, &c, 1));
        ASSERT_FALSE(readable_now(p.a));
        int64_t t0 = fern_now_ns();
        int r = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 200 * kMs);
        int64_t el = fern_now_ns() - t0;
        EXPECT_EQ(0, r) << "reported FERN_READ on an fd with nothing to read (after " << el / kMs
                        << " ms); readable now: " << readable_now(p.a);
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
    EXPECT_EQ(0, fern_close(q.a));
    close(q.b);
}

TEST(Io, WaitFdFromPlainThread) {
    Watchdog wd(30);
    Pair p = unix_pair();
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(0, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 100 * kMs));
    EXPECT_GE(fern_now_ns() - t0, 95 * kMs);
    std::thread w([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(1, write(p.b, "x", 1));
    });
    EXPECT_EQ(FERN_READ, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 5000 * kMs));
    w.join();
    EXPECT_EQ(FERN_WRITE, fern_wait_fd(p.a, FERN_WRITE, FERN_FOREVER));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

} // namespace
