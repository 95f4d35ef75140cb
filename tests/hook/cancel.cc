// SPDX-License-Identifier: MIT
// fern-hook and fern_cancel: a green thread parked in a hooked call (read,
// recv, poll, epoll_wait, accept, connect, usleep, nanosleep, sleep) fails
// with -1 and errno ECANCELED soon after the cancel, and its next hooked wait
// fails at once; a call that need not wait still completes.
#include "hook_test.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

using namespace hook_test;

FERN_WATCHDOG_EACH_TEST(120);

namespace {

constexpr int64_t kLateNs = 200 * 1000000ll * kLatenessScale; // target 5 ms: see the printout
constexpr int64_t kAtOnceNs = 50 * 1000000ll * kLatenessScale;

// Run call() (returns -1/errno or a result) on a green thread, cancel it once
// parked, then check the call and a second hooked wait (usleep) fail.
template <class F> void cancel_hooked(const char *what, F call) {
    std::atomic<int> parked{0};
    std::atomic<int64_t> back{0};
    long r = 0;
    int err = 0, again = 0, again_err = 0;
    int64_t again_ns = 0;
    fern_thread *t;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        parked = 1;
        r = call();
        err = get_errno();
        back = fern_now_ns();
        int64_t t0 = fern_now_ns();
        again = usleep(10000000);
        again_err = get_errno();
        again_ns = fern_now_ns() - t0;
    }));
    ASSERT_TRUE(wait_until([&] { return parked.load() == 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(0, back.load()) << what << " returned before the cancel";
    int64_t c = fern_now_ns();
    ASSERT_EQ(0, fern_cancel(t));
    ASSERT_EQ(0, fern_join(t, nullptr));
    int64_t late = back.load() - c;
    EXPECT_EQ(-1, r) << what;
    EXPECT_EQ(ECANCELED, err) << what;
    EXPECT_LT(late, kLateNs) << what;
    EXPECT_EQ(-1, again) << what << ": next usleep";
    EXPECT_EQ(ECANCELED, again_err);
    EXPECT_LT(again_ns, kAtOnceNs);
    std::printf("  hooked %-12s cancelled in %7.3f ms\n", what, (double)late / 1e6);
}

TEST(HookCancel, ReadRecvPollEpoll) {
    int p[2];
    ASSERT_EQ(0, pipe(p));
    char b;
    cancel_hooked("read", [&] { return (long)read(p[0], &b, 1); });
    int sv[2];
    ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
    cancel_hooked("recv", [&] { return (long)recv(sv[0], &b, 1, 0); });
    cancel_hooked("poll", [&] {
        struct pollfd pf = {p[0], POLLIN, 0};
        return (long)poll(&pf, 1, 10000);
    });
    int ep = epoll_create1(EPOLL_CLOEXEC);
    ASSERT_GE(ep, 0);
    struct epoll_event ev = {};
    ev.events = EPOLLIN;
    ASSERT_EQ(0, epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev));
    cancel_hooked("epoll_wait", [&] {
        struct epoll_event out;
        return (long)epoll_wait(ep, &out, 1, 10000);
    });
    // The descriptors still work afterwards, and a cancelled thread's read
    // of data that is there completes.
    ASSERT_EQ(1, write(p[1], "x", 1));
    long got = 0;
    fern_thread *t;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        while (!fern_cancelled()) fern_yield();
        got = read(p[0], &b, 1);
    }));
    ASSERT_EQ(0, fern_cancel(t));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(1, got);
    close(ep);
    close(p[0]);
    close(p[1]);
    close(sv[0]);
    close(sv[1]);
}

TEST(HookCancel, Accept) {
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(ls, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(0, bind(ls, (struct sockaddr *)&a, sizeof a));
    ASSERT_EQ(0, listen(ls, 1));
    cancel_hooked("accept", [&] { return (long)accept(ls, nullptr, nullptr); });
    close(ls);
}

// A connect that waits: the listener's accept queue is full (backlog 1, two
// connections not accepted), so the kernel drops the next SYN and the
// connect retries for a second or more.
TEST(HookCancel, Connect) {
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(ls, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    ASSERT_EQ(0, bind(ls, (struct sockaddr *)&a, sizeof a));
    ASSERT_EQ(0, listen(ls, 1));
    ASSERT_EQ(0, getsockname(ls, (struct sockaddr *)&a, &al));
    std::vector<int> fill;
    for (int i = 0; i < 4; i++) {
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        connect(c, (struct sockaddr *)&a, sizeof a);
        fill.push_back(c);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cancel_hooked("connect", [&] { return (long)connect(s, (struct sockaddr *)&a, sizeof a); });
    close(s);
    for (int c : fill) close(c);
    close(ls);
}

TEST(HookCancel, Sleeps) {
    cancel_hooked("usleep", [] { return (long)usleep(10000000); });
    struct timespec req = {10, 0}, rem = {0, 0};
    cancel_hooked("nanosleep", [&] { return (long)nanosleep(&req, &rem); });
    EXPECT_EQ(10, rem.tv_sec) << "the time left";
    // sleep returns the seconds left (all of them), errno ECANCELED.
    std::atomic<int> parked{0};
    unsigned left = 0;
    int err = 0;
    fern_thread *t;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        parked = 1;
        left = sleep(10);
        err = get_errno();
    }));
    ASSERT_TRUE(wait_until([&] { return parked.load() == 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(0, fern_cancel(t));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(10u, left);
    EXPECT_EQ(ECANCELED, err);
}

} // namespace
