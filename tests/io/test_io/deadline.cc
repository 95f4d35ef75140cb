// SPDX-License-Identifier: MIT
// Per-fd deadlines (fern_set_deadline): expiry, nothing consumed, FERN_FOREVER,
// plain threads, bad fds, reset by fern_close.
#include "io_test.h"

namespace {

// ------------------------------------------------------------------------
// Per-fd deadlines
// ------------------------------------------------------------------------

TEST(Io, ReadDeadlineTimesOut) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 100 * kMs, FERN_FOREVER));
        char buf[8];
        int64_t t0 = fern_now_ns();
        errno = 0;
        EXPECT_EQ(-1, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, 95 * kMs) << "fired early";
        EXPECT_LT(el, 2000 * kMs) << "fired far too late";
        // Deadline passed, still set: a read that would wait fails at once...
        t0 = fern_now_ns();
        EXPECT_EQ(-1, fern_recv(p.a, buf, sizeof buf, 0));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        EXPECT_LT(fern_now_ns() - t0, 500 * kMs);
        // ...but one that need not wait succeeds, and nothing was consumed.
        ASSERT_EQ(3, write(p.b, "xyz", 3));
        memset(buf, 0, sizeof buf);
        EXPECT_EQ(3, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(std::string("xyz"), std::string(buf, 3));
        // Writes have no deadline.
        EXPECT_EQ(2, fern_write(p.a, "ok", 2));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, TimedOutReadConsumesNothing) {
    Watchdog wd(30);
    Pair p = unix_pair(SOCK_DGRAM);
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 100 * kMs, FERN_FOREVER));
        char buf[8];
        EXPECT_EQ(-1, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, FERN_FOREVER));
        ASSERT_EQ(2, write(p.b, "d1", 2));
        ASSERT_EQ(2, write(p.b, "d2", 2));
        EXPECT_EQ(2, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(std::string("d1"), std::string(buf, 2)) << "a datagram was lost";
        EXPECT_EQ(2, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(std::string("d2"), std::string(buf, 2));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, ForeverClearsDeadline) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<ssize_t> res{-100};
    std::atomic<int> err{0};
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 50 * kMs, FERN_FOREVER));
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, FERN_FOREVER));
    fern_thread *t = spawn_c(nullptr, [&] {
        char b[4];
        res = fern_read(p.a, b, sizeof b);
        err = get_errno();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(-100, res.load()) << "read ended although the deadline was cleared, errno "
                                << err.load();
    ASSERT_EQ(2, write(p.b, "hi", 2));
    join(t);
    EXPECT_EQ(2, res.load());
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WriteDeadlineTimesOut) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        // Register, then fill the buffer.
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, fern_now_ns() + 150 * kMs));
        ASSERT_GT(fill(p.a), 0u);
        char big[4096] = {};
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(-1, fern_write(p.a, big, sizeof big));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, 140 * kMs);
        EXPECT_LT(el, 2000 * kMs);
        // Reads on the same fd have no deadline: data there succeeds.
        ASSERT_EQ(1, write(p.b, "r", 1));
        char c;
        EXPECT_EQ(1, fern_read(p.a, &c, 1));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, DeadlineFromPlainThread) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 100 * kMs, FERN_FOREVER));
    char buf[4];
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(-1, fern_read(p.a, buf, sizeof buf));
    EXPECT_EQ(ETIMEDOUT, get_errno());
    int64_t el = fern_now_ns() - t0;
    EXPECT_GE(el, 95 * kMs);
    EXPECT_LT(el, 2000 * kMs);
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, SetDeadlineBadFd) {
    EXPECT_EQ(EBADF, fern_fd_set_deadline(-1, FERN_FOREVER, FERN_FOREVER));
    EXPECT_EQ(EBADF, fern_fd_set_deadline(INT32_MAX, FERN_FOREVER, FERN_FOREVER));
}

// fern_close forgets the deadline: a new fd with the same number has none.
TEST(Io, CloseResetsDeadlineForReusedFdNumber) {
    Watchdog wd(30);
    Pair p = unix_pair();
    int num = p.a;
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, 1, 1)); // long past
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
    Pair q = unix_pair();
    if (q.a != num && q.b != num) {
        EXPECT_EQ(0, fern_close(q.a));
        EXPECT_EQ(0, fern_close(q.b));
        GTEST_SKIP() << "fd number not reused";
    }
    int r = q.a == num ? q.a : q.b, w = q.a == num ? q.b : q.a;
    std::atomic<ssize_t> res{-100};
    std::atomic<int> err{0};
    fern_thread *t = spawn_c(nullptr, [&] {
        char b[4];
        res = fern_read(r, b, sizeof b);
        err = get_errno();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(-100, res.load()) << "old deadline applied to the new fd: errno " << err.load();
    ASSERT_EQ(2, write(w, "ok", 2));
    join(t);
    EXPECT_EQ(2, res.load());
    EXPECT_EQ(0, fern_close(q.a));
    EXPECT_EQ(0, fern_close(q.b));
}

} // namespace
