// SPDX-License-Identifier: MIT
// fern_close waking parked threads, hang-ups, EPIPE without SIGPIPE, refused
// and slow connects, MSG_DONTWAIT.
#include "io_test.h"

namespace {

// ------------------------------------------------------------------------
// fern_close wakes parked threads; hang-ups; errors
// ------------------------------------------------------------------------

TEST(Io, CloseWakesParkedReaderAndWriterWithEbadf) {
    Watchdog wd(30);
    for (int closer_green = 0; closer_green < 2; closer_green++) {
        Pair p = unix_pair();
        std::atomic<ssize_t> rres{-100}, wres{-100};
        std::atomic<int> rerr{0}, werr{0};
        std::atomic<int> started{0};
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, FERN_FOREVER));
        ASSERT_GT(fill(p.a), 0u);
        fern_thread *rt = spawn_c(nullptr, [&] {
            char b[8];
            started++;
            rres = fern_read(p.a, b, sizeof b);
            rerr = get_errno();
        });
        fern_thread *wt = spawn_c(nullptr, [&] {
            char b[4096] = {};
            started++;
            wres = fern_write(p.a, b, sizeof b);
            werr = get_errno();
        });
        ASSERT_TRUE(wait_until([&] { return started.load() == 2; }));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ASSERT_EQ(-100, rres.load());
        ASSERT_EQ(-100, wres.load());
        int64_t t0 = fern_now_ns();
        if (closer_green)
            ASSERT_EQ(0, run_green([&] { EXPECT_EQ(0, fern_close(p.a)); }));
        else
            EXPECT_EQ(0, fern_close(p.a));
        EXPECT_TRUE(wait_until([&] { return rres.load() != -100 && wres.load() != -100; }, 5000))
            << "parked threads not woken by fern_close";
        EXPECT_LT(fern_now_ns() - t0, 2000 * kMs);
        join(rt);
        join(wt);
        EXPECT_EQ(-1, rres.load());
        EXPECT_EQ(EBADF, rerr.load());
        EXPECT_EQ(-1, wres.load());
        EXPECT_EQ(EBADF, werr.load());
        close(p.b);
    }
}

TEST(Io, CloseWakesWaitFdWithEbadf) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<int> res{-100}, err{0};
    fern_thread *t = spawn_c(nullptr, [&] {
        res = fern_wait_fd(p.a, FERN_READ, FERN_FOREVER);
        err = get_errno();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(0, fern_close(p.a));
    join(t);
    EXPECT_EQ(-1, res.load());
    EXPECT_EQ(EBADF, err.load());
    close(p.b);
}

TEST(Io, CloseWakesParkedAcceptor) {
    Watchdog wd(30);
    uint16_t port = 0;
    int l = tcp_listen(&port);
    ASSERT_GE(l, 0);
    std::atomic<int> res{-100}, err{0};
    fern_thread *t = spawn_c(nullptr, [&] {
        res = fern_accept(l, nullptr, nullptr, 0);
        err = get_errno();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(0, fern_close(l));
    join(t);
    EXPECT_EQ(-1, res.load());
    EXPECT_EQ(EBADF, err.load());
}

// A plain thread blocked in a fern_* call is a thread waiting on the fd too.
// Bounded by a 3 s read deadline so a missed wake-up cannot hang the test.
TEST(Io, CloseWakesPlainThreadReader) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 3000 * kMs, FERN_FOREVER));
    std::atomic<ssize_t> res{-100};
    std::atomic<int> err{0};
    std::atomic<int64_t> woke{0};
    std::thread t([&] {
        char b[4];
        res = fern_read(p.a, b, sizeof b);
        err = get_errno();
        woke = fern_now_ns();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(0, fern_close(p.a));
    t.join();
    EXPECT_EQ(-1, res.load());
    EXPECT_EQ(EBADF, err.load()) << "plain-thread reader not woken by fern_close (errno "
                                 << strerror(err.load()) << " after " << (woke.load() - t0) / kMs
                                 << " ms)";
    EXPECT_LT(woke.load() - t0, 1500 * kMs);
    close(p.b);
}

TEST(Io, PeerHangupReadReturnsZero) {
    Watchdog wd(30);
    for (int tcp = 0; tcp < 2; tcp++) {
        Pair p = tcp ? tcp_pair() : unix_pair();
        std::atomic<ssize_t> res{-100};
        fern_thread *t = spawn_c(nullptr, [&] {
            char b[4];
            res = fern_read(p.a, b, sizeof b);
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(-100, res.load());
        close(p.b);
        EXPECT_TRUE(wait_until([&] { return res.load() != -100; }, 5000)) << "hang-up not seen";
        join(t);
        EXPECT_EQ(0, res.load());
        EXPECT_EQ(0, fern_close(p.a));
    }
}

// fern_send adds MSG_NOSIGNAL: EPIPE without SIGPIPE. Run in a child so a
// SIGPIPE would fail the test rather than kill the binary.
void send_epipe_child() {
    alarm(20);
    signal(SIGPIPE, SIG_DFL);
    Pair p = unix_pair();
    close(p.b);
    int rc = run_green([&] {
        errno = 0;
        ssize_t r = fern_send(p.a, "x", 1, 0);
        int e = get_errno();
        if (r != -1 || e != EPIPE) _exit(3);
        // A parked writer whose peer goes away wakes with EPIPE too.
        Pair q = unix_pair();
        fill(q.a);
        fern_thread *t = nullptr;
        std::atomic<ssize_t> res{-100};
        std::atomic<int> err{0};
        spawn(&t, nullptr, [&] {
            char b[4096] = {};
            res = fern_send(q.a, b, sizeof b, 0);
            err = get_errno();
        });
        fern_sleep_ns(100 * kMs);
        close(q.b);
        fern_join(t, nullptr);
        if (res.load() != -1 || err.load() != EPIPE) _exit(4);
    });
    _exit(rc == 0 ? 0 : 5);
}

TEST(IoDeathTest, SendEpipeWithoutSigpipe) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(send_epipe_child(), ::testing::ExitedWithCode(0), "");
}

// fern_write uses write(2), which raises SIGPIPE: this test ignores SIGPIPE.
TEST(Io, WriteEpipeAfterPeerCloseWithSigpipeIgnored) {
    Watchdog wd(30);
    struct sigaction ign {}, old {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ASSERT_EQ(0, sigaction(SIGPIPE, &ign, &old));
    Pair p = unix_pair();
    close(p.b);
    ASSERT_EQ(0, run_green([&] {
        errno = 0;
        EXPECT_EQ(-1, fern_write(p.a, "x", 1));
        EXPECT_EQ(EPIPE, get_errno());
        iovec v{(void *)"y", 1};
        errno = 0;
        EXPECT_EQ(-1, fern_writev(p.a, &v, 1));
        EXPECT_EQ(EPIPE, get_errno());
    }));
    EXPECT_EQ(0, fern_close(p.a));
    sigaction(SIGPIPE, &old, nullptr);
}

TEST(Io, ConnectRefused) {
    Watchdog wd(30);
    uint16_t port = closed_port();
    auto attempt = [&] {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        EXPECT_GE(s, 0);
        sockaddr_in sa = loopback(port);
        errno = 0;
        int r = fern_connect(s, (sockaddr *)&sa, sizeof sa);
        int e = get_errno();
        EXPECT_EQ(-1, r);
        EXPECT_EQ(ECONNREFUSED, e) << strerror(e);
        EXPECT_EQ(0, fern_close(s));
    };
    ASSERT_EQ(0, run_green(attempt));
    attempt(); // plain thread
}

TEST(Io, ConnectHonoursWriteDeadline) {
    Watchdog wd(60);
    // A listener that never accepts, with its queue full: further SYNs are
    // dropped and a connect stays in progress.
    uint16_t port = 0;
    int l = tcp_listen(&port, 0);
    ASSERT_GE(l, 0);
    std::vector<int> fillers;
    bool hung = false;
    for (int i = 0; i < 64 && !hung; i++) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        sockaddr_in sa = loopback(port);
        int r = connect(s, (sockaddr *)&sa, sizeof sa);
        fillers.push_back(s);
        if (r < 0 && errno == EINPROGRESS) {
            pollfd pf{s, POLLOUT, 0};
            if (poll(&pf, 1, 100) == 0) hung = true;
        }
    }
    if (!hung) {
        for (int s : fillers) close(s);
        close(l);
        GTEST_SKIP() << "could not make a loopback connect hang";
    }
    ASSERT_EQ(0, run_green([&] {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_EQ(0, fern_fd_set_deadline(s, FERN_FOREVER, fern_now_ns() + 200 * kMs));
        sockaddr_in sa = loopback(port);
        int64_t t0 = fern_now_ns();
        errno = 0;
        EXPECT_EQ(-1, fern_connect(s, (sockaddr *)&sa, sizeof sa));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, 190 * kMs);
        EXPECT_LT(el, 3000 * kMs);
        EXPECT_EQ(0, fern_close(s));
    }));
    for (int s : fillers) close(s);
    close(l);
}

// An AF_UNIX stream connect whose listener's backlog is full reports EAGAIN
// from the non-blocking connect(2); a blocking connect waits for room.
// fern_connect "parks" (header): it must not surface EAGAIN to the caller.
TEST(Io, UnixConnectWaitsWhenBacklogFull) {
    Watchdog wd(60);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(l, 0);
    sockaddr_un ua{};
    ua.sun_family = AF_UNIX;
    // Abstract name, unique per process.
    std::string name = "fern-io-test-" + std::to_string(getpid());
    memcpy(ua.sun_path + 1, name.data(), name.size());
    socklen_t ul = (socklen_t)(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    ASSERT_EQ(0, bind(l, (sockaddr *)&ua, ul));
    ASSERT_EQ(0, listen(l, 0));
    std::vector<int> fillers;
    bool full = false;
    for (int i = 0; i < 64 && !full; i++) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (connect(s, (sockaddr *)&ua, ul) != 0 && errno == EAGAIN) {
            full = true;
            close(s);
        } else {
            fillers.push_back(s);
        }
    }
    if (!full) {
        for (int s : fillers) close(s);
        close(l);
        GTEST_SKIP() << "unix backlog never filled";
    }
    std::atomic<int> res{-100}, err{0};
    std::atomic<int64_t> el{0};
    fern_thread *t = spawn_c(nullptr, [&] {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        fern_fd_set_deadline(s, FERN_FOREVER, fern_now_ns() + 5000 * kMs);
        int64_t t0 = fern_now_ns();
        res = fern_connect(s, (sockaddr *)&ua, ul);
        err = get_errno();
        el = fern_now_ns() - t0;
        fern_close(s);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // Make room: accept the queued connections.
    for (size_t i = 0; i < fillers.size(); i++) {
        int a = accept4(l, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (a >= 0) close(a);
    }
    join(t);
    EXPECT_EQ(0, res.load()) << "fern_connect: " << strerror(err.load()) << " after " << el.load() / kMs
                             << " ms";
    for (int s : fillers) close(s);
    close(l);
}

// "They first try the system call; only on EAGAIN does a green thread park":
// a caller that asks for a non-blocking call (MSG_DONTWAIT) gets what the
// system call returns, EAGAIN, instead of being parked. Bounded by a deadline.
TEST(Io, RecvDontwaitReturnsEagain) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 1500 * kMs, FERN_FOREVER));
    ASSERT_EQ(0, run_green([&] {
        char b[4];
        int64_t t0 = fern_now_ns();
        errno = 0;
        EXPECT_EQ(-1, fern_recv(p.a, b, sizeof b, MSG_DONTWAIT));
        int e = get_errno();
        EXPECT_EQ(EAGAIN, e) << strerror(e) << " after " << (fern_now_ns() - t0) / kMs << " ms";
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

} // namespace
