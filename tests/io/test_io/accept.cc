// SPDX-License-Identifier: MIT
// fern_accept when the process is out of descriptors (EMFILE).
#include "io_test.h"

namespace {

// ------------------------------------------------------------------------
// fern_accept and EMFILE
// ------------------------------------------------------------------------

struct NofileLimit {
    rlimit saved{};
    bool ok = false;
    explicit NofileLimit(rlim_t soft) {
        if (getrlimit(RLIMIT_NOFILE, &saved) != 0) return;
        rlimit r = saved;
        r.rlim_cur = soft;
        ok = setrlimit(RLIMIT_NOFILE, &r) == 0;
    }
    void restore() {
        if (ok) setrlimit(RLIMIT_NOFILE, &saved);
        ok = false;
    }
    ~NofileLimit() { restore(); }
};

int lowest_free_fd() {
    int f = dup(0);
    if (f >= 0) close(f);
    return f;
}

TEST(Io, AcceptEmfileReturnsAtOnceAndLoopRecovers) {
    Watchdog wd(60);
    int ir = fern_init(nullptr);
    ASSERT_TRUE(ir == 0 || ir == EBUSY);
    uint16_t port = 0;
    int l = tcp_listen(&port);
    ASSERT_GE(l, 0);
    // Client sockets made before the limit drops.
    int c1 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int c2 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(c1, 0);
    ASSERT_GE(c2, 0);
    sockaddr_in sa = loopback(port);
    ASSERT_EQ(0, connect(c1, (sockaddr *)&sa, sizeof sa)); // queued, not accepted
    ASSERT_EQ(1, write(c1, "a", 1));                        // the loop echoes one byte
    std::atomic<int> emfiles{0}, accepted{0}, first_err{0};
    std::atomic<int64_t> first_el{-1};
    std::atomic<bool> stop{false};
    std::atomic<bool> echoed{false};
    // Make sure the listener is registered before the limit drops.
    ASSERT_EQ(0, fern_fd_set_deadline(l, FERN_FOREVER, FERN_FOREVER));
    int lowest = lowest_free_fd();
    ASSERT_GT(lowest, 0);
    NofileLimit lim((rlim_t)lowest);
    ASSERT_TRUE(lim.ok);
    // Direct call: returns -1 EMFILE at once.
    ASSERT_EQ(0, run_green([&] {
        int64_t t0 = fern_now_ns();
        errno = 0;
        int r = fern_accept(l, nullptr, nullptr, 0);
        first_el = fern_now_ns() - t0;
        first_err = get_errno();
        if (r >= 0) fern_close(r);
        EXPECT_EQ(-1, r);
    }));
    EXPECT_EQ(EMFILE, first_err.load());
    EXPECT_LT(first_el.load(), 1000 * kMs) << "EMFILE must be returned at once";
    // An accept loop that backs off on EMFILE keeps working once fds free up.
    fern_thread *loop = spawn_c(nullptr, [&] {
        int64_t end = fern_now_ns() + 20000 * kMs;
        while (!stop.load() && fern_now_ns() < end && accepted.load() < 2) {
            int s = fern_accept(l, nullptr, nullptr, 0);
            if (s < 0) {
                int e = get_errno();
                if (e == EMFILE || e == ENFILE) {
                    emfiles++;
                    fern_sleep_ns(5 * kMs);
                    continue;
                }
                ADD_FAILURE() << "fern_accept: " << strerror(e);
                break;
            }
            accepted++;
            char b;
            if (fern_read(s, &b, 1) == 1 && fern_write(s, &b, 1) == 1) echoed = true;
            fern_close(s);
        }
    });
    EXPECT_TRUE(wait_until([&] { return emfiles.load() >= 2; }, 10000));
    lim.restore();
    EXPECT_TRUE(wait_until([&] { return accepted.load() >= 1; }, 10000))
        << "accept loop did not recover after EMFILE";
    {
        char b1 = 0;
        pollfd pf1{c1, POLLIN, 0};
        EXPECT_EQ(1, poll(&pf1, 1, 5000));
        EXPECT_EQ(1, read(c1, &b1, 1));
        EXPECT_EQ('a', b1);
    }
    // A connection made after recovery is accepted too (the loop parks again).
    ASSERT_EQ(0, connect(c2, (sockaddr *)&sa, sizeof sa));
    EXPECT_TRUE(wait_until([&] { return accepted.load() >= 2; }, 10000));
    ASSERT_EQ(1, write(c2, "e", 1));
    char b = 0;
    pollfd pf{c2, POLLIN, 0};
    EXPECT_EQ(1, poll(&pf, 1, 5000));
    EXPECT_EQ(1, read(c2, &b, 1));
    EXPECT_EQ('e', b);
    stop = true;
    close(c1);
    close(c2);
    join(loop);
    EXPECT_EQ(0, fern_close(l));
}

} // namespace
