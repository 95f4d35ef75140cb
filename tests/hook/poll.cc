// SPDX-License-Identifier: MIT
// fern-hook, waiting on many descriptors: poll, ppoll, select, pselect,
// epoll_wait, epoll_pwait on green threads (readiness first, park with a
// deadline, close reported) and on plain threads (libc's results).
#include "hook_test.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>

#include <atomic>
#include <csignal>
#include <thread>

using namespace hook_test;

namespace {

struct Pipes {
    std::vector<std::array<int, 2>> p;
    explicit Pipes(int n) : p(n) {
        for (auto &x : p) EXPECT_EQ(pipe(x.data()), 0);
    }
    ~Pipes() {
        for (auto &x : p) {
            close(x[0]);
            close(x[1]);
        }
    }
};

TEST(HookPoll, ReadyFirstThenParksUntilWrite) {
    Pipes ps(64);
    OneWorker w;
    int64_t late;
    {
        Ticker tick(w);
        w.run([&] {
            std::vector<struct pollfd> fds;
            for (auto &x : ps.p) fds.push_back({x[0], POLLIN, 0});
            // Nothing ready, timeout passes.
            int64_t t0 = fern_now_ns();
            EXPECT_EQ(poll(fds.data(), fds.size(), 50), 0);
            EXPECT_GE(fern_now_ns() - t0, ms(45));
            // Ready already: returns at once.
            EXPECT_EQ(write(ps.p[7][1], "a", 1), 1);
            EXPECT_EQ(poll(fds.data(), fds.size(), 1000), 1);
            EXPECT_EQ(fds[7].revents, POLLIN);
            char c;
            EXPECT_EQ(read(ps.p[7][0], &c, 1), 1);
            // Parks until another green thread writes to one of them.
            fern_thread *wr = nullptr;
            EXPECT_EQ(spawn_on(&wr, nullptr, [&] {
                          usleep(30000);
                          EXPECT_EQ(write(ps.p[40][1], "b", 1), 1);
                      }),
                      0);
            t0 = fern_now_ns();
            EXPECT_EQ(poll(fds.data(), fds.size(), -1), 1);
            EXPECT_GE(fern_now_ns() - t0, ms(25));
            EXPECT_EQ(fds[40].revents, POLLIN);
            EXPECT_EQ(fern_join(wr, nullptr), 0);
        });
        late = tick.late_ns.load();
    }
    EXPECT_LT(late, kLateLimit);
}

TEST(HookPoll, PollOutAndDuplicates) {
    int s[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    OneWorker w;
    w.run([&] {
        struct pollfd fds[3] = {{s[0], POLLOUT, 0}, {s[0], POLLIN, 0}, {-1, POLLIN, 7}};
        EXPECT_EQ(poll(fds, 3, 100), 1);
        EXPECT_EQ(fds[0].revents, POLLOUT);
        EXPECT_EQ(fds[1].revents, 0);
        EXPECT_EQ(fds[2].revents, 0);
        struct timespec ts = {0, 20000000};
        fds[0].events = POLLIN;
        EXPECT_EQ(ppoll(fds, 2, &ts, nullptr), 0);
        EXPECT_EQ(ts.tv_nsec, 20000000);
    });
    close(s[0]);
    close(s[1]);
}

TEST(HookPoll, CloseWhileParkedIsPollnval) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    int fd = dup(p[0]);
    OneWorker w;
    fern_thread *a = w.spawn([&] {
        struct pollfd f = {fd, POLLIN, 0};
        EXPECT_EQ(poll(&f, 1, 5000), 1);
        EXPECT_EQ(f.revents, POLLNVAL);
    });
    w.run([&] {
        usleep(30000);
        close(fd);
    });
    OneWorker::join(a);
    close(p[0]);
    close(p[1]);
}

TEST(HookPoll, UnmanagedDescriptorGoesToThePool) {
    int p[2];
    raw_pipe(p);
    OneWorker w;
    int64_t late;
    {
        Ticker tick(w);
        fern_thread *a = w.spawn([&] {
            struct pollfd f = {p[0], POLLIN, 0};
            EXPECT_EQ(poll(&f, 1, 5000), 1);
            EXPECT_EQ(f.revents, POLLIN);
        });
        w.run([&] {
            usleep(50000);
            EXPECT_EQ(write(p[1], "u", 1), 1);
        });
        OneWorker::join(a);
        late = tick.late_ns.load();
    }
    EXPECT_LT(late, kLateLimit);
    EXPECT_FALSE(kernel_nonblock(p[0]));
    syscall(SYS_close, p[0]);
    syscall(SYS_close, p[1]);
}

TEST(HookPoll, SelectParksAndReports) {
    Pipes ps(8);
    OneWorker w;
    w.run([&] {
        fd_set r;
        FD_ZERO(&r);
        int maxfd = 0;
        for (auto &x : ps.p) {
            FD_SET(x[0], &r);
            maxfd = std::max(maxfd, x[0]);
        }
        fd_set wset;
        FD_ZERO(&wset);
        fern_thread *wr = nullptr;
        EXPECT_EQ(spawn_on(&wr, nullptr, [&] {
                      usleep(30000);
                      EXPECT_EQ(write(ps.p[3][1], "s", 1), 1);
                  }),
                  0);
        struct timeval tv = {5, 0};
        fd_set rr = r;
        EXPECT_EQ(select(maxfd + 1, &rr, &wset, nullptr, &tv), 1);
        EXPECT_TRUE(FD_ISSET(ps.p[3][0], &rr));
        EXPECT_FALSE(FD_ISSET(ps.p[2][0], &rr));
        EXPECT_LT(tv.tv_sec, 5);  // the time left was written back
        EXPECT_EQ(fern_join(wr, nullptr), 0);
        // Timeout: every set comes back empty.
        char c;
        EXPECT_EQ(read(ps.p[3][0], &c, 1), 1);
        rr = r;
        struct timespec ts = {0, 20000000};
        EXPECT_EQ(pselect(maxfd + 1, &rr, nullptr, nullptr, &ts, nullptr), 0);
        for (auto &x : ps.p) EXPECT_FALSE(FD_ISSET(x[0], &rr));
        // A closed descriptor in the set: EBADF.
        int q[2];
        EXPECT_EQ(pipe(q), 0);
        close(q[1]);
        fd_set bad;
        FD_ZERO(&bad);
        FD_SET(q[1], &bad);
        tv = {0, 1000};
        EXPECT_EQ(select(q[1] + 1, &bad, nullptr, nullptr, &tv), -1);
        EXPECT_EQ(get_errno(), EBADF);
        close(q[0]);
    });
}

TEST(HookPoll, SelectCloseWhileParkedIsEbadf) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    int fd = dup(p[0]);
    OneWorker w;
    fern_thread *a = w.spawn([&] {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(fd, &r);
        EXPECT_EQ(select(fd + 1, &r, nullptr, nullptr, nullptr), -1);
        EXPECT_EQ(get_errno(), EBADF);
    });
    w.run([&] {
        usleep(30000);
        close(fd);
    });
    OneWorker::join(a);
    close(p[0]);
    close(p[1]);
}

TEST(HookPoll, EpollWaitParks) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    ASSERT_GE(ep, 0);
    struct epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.u32 = 77;
    ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev), 0);
    OneWorker w;
    int64_t late;
    {
        Ticker tick(w);
        w.run([&] {
            struct epoll_event out[4];
            int64_t t0 = fern_now_ns();
            EXPECT_EQ(epoll_wait(ep, out, 4, 40), 0);
            EXPECT_GE(fern_now_ns() - t0, ms(35));
            fern_thread *wr = nullptr;
            EXPECT_EQ(spawn_on(&wr, nullptr, [&] {
                          usleep(30000);
                          EXPECT_EQ(write(p[1], "e", 1), 1);
                      }),
                      0);
            EXPECT_EQ(epoll_pwait(ep, out, 4, -1, nullptr), 1);
            EXPECT_EQ(out[0].data.u32, 77u);
            EXPECT_EQ(fern_join(wr, nullptr), 0);
            EXPECT_EQ(epoll_wait(ep, out, 0, 0), -1);
            EXPECT_EQ(get_errno(), EINVAL);
        });
        late = tick.late_ns.load();
    }
    EXPECT_LT(late, kLateLimit);
    close(ep);
    close(p[0]);
    close(p[1]);
}

uint64_t poller_ctls() {
    struct fern_stats st;
    EXPECT_EQ(fern_stats(&st), 0);
    return st.poller_ctls;
}

// The "no per-call epoll_ctl storm": a loop of poll, ppoll, select,
// pselect and epoll_wait calls on the same descriptors registers each with
// fern's poller once, at the first wait, and never again; close removes
// them. Counted by fern's poller itself (fern_stats.poller_ctls, every
// epoll_ctl it makes on a user descriptor), which also runs where a system
// call tracer cannot (qemu-user, sandboxes without ptrace). The writer runs
// on the same worker as the waiter and writes only once the waiter has
// announced its wait, so the waits park (unless preempted in between).
TEST(HookPoll, LoopsMakeNoEpollCtlPerCall) {
    constexpr int kFds = 16, kRounds = 60;
    auto *ps = new Pipes(kFds);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    ASSERT_GE(ep, 0);
    for (int i = 0; i < kFds; i++) {
        struct epoll_event ev = {};
        ev.events = EPOLLIN;
        ev.data.u32 = (uint32_t)i;
        ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, ps->p[i][0], &ev), 0);
    }
    OneWorker w;
    uint64_t before = poller_ctls(), used = 0, warm = 0, after = 0;
    w.run([&] {
        // A green thread's first read or write of a descriptor registers it
        // (the hook snapshots before the system call): all 32 ends here.
        for (auto &x : ps->p) {
            char c;
            EXPECT_EQ(write(x[1], "w", 1), 1);
            EXPECT_EQ(read(x[0], &c, 1), 1);
        }
        used = poller_ctls();
        std::atomic<int> want{-1};
        fern_thread *wr = nullptr;
        constexpr int kCalls = 5 * (kRounds + 1);
        EXPECT_EQ(spawn_on(&wr, nullptr, [&] {
                      for (int i = 0; i < kCalls; i++) {
                          while (want.load() != i) fern_yield();
                          EXPECT_EQ(write(ps->p[(i * 7) % kFds][1], "x", 1), 1);
                      }
                  }),
                  0);
        int call = 0;
        // One wait of each kind on fd (i * 7) % kFds's byte; returns when
        // it has read it.
        auto wait_one = [&](int kind) {
            int i = call++, k = (i * 7) % kFds;
            std::vector<struct pollfd> fds;
            fd_set rs;
            FD_ZERO(&rs);
            int maxfd = 0;
            for (auto &x : ps->p) {
                fds.push_back({x[0], POLLIN, 0});
                FD_SET(x[0], &rs);
                maxfd = std::max(maxfd, x[0]);
            }
            struct timespec ts = {10, 0};
            struct timeval tv = {10, 0};
            struct epoll_event out[4];
            want.store(i);
            switch (kind) {
            case 0: EXPECT_EQ(poll(fds.data(), fds.size(), 10000), 1); break;
            case 1: EXPECT_EQ(ppoll(fds.data(), fds.size(), &ts, nullptr), 1); break;
            case 2: EXPECT_EQ(select(maxfd + 1, &rs, nullptr, nullptr, &tv), 1); break;
            case 3: EXPECT_EQ(pselect(maxfd + 1, &rs, nullptr, nullptr, &ts, nullptr), 1); break;
            case 4:
                EXPECT_EQ(epoll_wait(ep, out, 4, 10000), 1);
                EXPECT_EQ(out[0].data.u32, (uint32_t)k);
                break;
            }
            char c;
            EXPECT_EQ(read(ps->p[k][0], &c, 1), 1);
        };
        for (int kind = 0; kind < 5; kind++) wait_one(kind);
        warm = poller_ctls();
        for (int r = 0; r < kRounds; r++)
            for (int kind = 0; kind < 5; kind++) wait_one(kind);
        after = poller_ctls();
        EXPECT_EQ(fern_join(wr, nullptr), 0);
    });
    EXPECT_EQ(used - before, 2u * kFds);
    // The first waits registered only the epoll fd, then nothing more.
    EXPECT_EQ(warm - used, 1u);
    EXPECT_EQ(after, warm) << "epoll_ctl calls during " << 5 * kRounds << " waits";
    delete ps;
    close(ep);
    // Closing removes each registered descriptor once.
    EXPECT_EQ(poller_ctls() - after, 2u * kFds + 1);
}

TEST(HookPoll, PlainThreadIsLibc) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    struct pollfd f = {p[0], POLLIN, 0};
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(poll(&f, 1, 30), 0);
    EXPECT_GE(fern_now_ns() - t0, ms(25));
    EXPECT_EQ(write(p[1], "x", 1), 1);
    EXPECT_EQ(poll(&f, 1, -1), 1);
    struct timeval tv = {0, 0};
    fd_set r;
    FD_ZERO(&r);
    FD_SET(p[0], &r);
    EXPECT_EQ(select(p[0] + 1, &r, nullptr, nullptr, &tv), 1);
    struct epoll_event one;
    EXPECT_EQ(epoll_wait(-1, &one, 1, 0), -1);
    EXPECT_EQ(get_errno(), EBADF);
    close(p[0]);
    close(p[1]);
    struct pollfd bad = {p[0], POLLIN, 0};
    EXPECT_EQ(poll(&bad, 1, 0), 1);
    EXPECT_EQ(bad.revents, POLLNVAL);
}

// A handler that runs on the worker while a green thread's zero-timeout
// check is in the kernel fails select and poll with EINTR (Linux does so
// even under SA_RESTART). The signal was not the caller's to see: fern's own
// preemption tick lands there too, and a parked wait is not interrupted by
// signals either. Without a mask of the caller's, the checks retry.
std::atomic<long> g_usr1{0};
void count_usr1(int) { g_usr1.fetch_add(1, std::memory_order_relaxed); }

TEST(HookPoll, ChecksDoNotFailWithEintrTheCallerDidNotAsk) {
    struct sigaction sa = {}, old;
    sa.sa_handler = count_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    OneWorker w;
    std::atomic<pid_t> tid{0};
    std::atomic<bool> done{false};
    std::thread killer([&] {
        while (!tid.load()) usleep(100);
        int64_t end = fern_now_ns() + ms(3000);
        while (!done.load() && fern_now_ns() < end) {
            syscall(SYS_tgkill, getpid(), tid.load(), SIGUSR1);
            usleep(20);
        }
    });
    long fails[3] = {0, 0, 0}, rounds = 0;
    w.run([&] {
        tid.store((pid_t)syscall(SYS_gettid));
        int64_t end = fern_now_ns() + ms(1500);
        for (; rounds < 200000 && fern_now_ns() < end; rounds++) {
            struct pollfd f = {p[0], POLLIN, 0};
            fails[0] += poll(&f, 1, 0) != 0;
            fd_set r;
            FD_ZERO(&r);
            FD_SET(p[0], &r);
            struct timeval tv = {0, 0};
            fails[1] += select(p[0] + 1, &r, nullptr, nullptr, &tv) != 0;
            FD_ZERO(&r);
            FD_SET(p[0], &r);
            struct timespec ts = {0, 0};
            fails[2] += pselect(p[0] + 1, &r, nullptr, nullptr, &ts, nullptr) != 0;
        }
    });
    done.store(true);
    killer.join();
    ASSERT_EQ(sigaction(SIGUSR1, &old, nullptr), 0);
    close(p[0]);
    close(p[1]);
    printf("zero-timeout checks: %ld rounds, %ld signals handled\n", rounds, g_usr1.load());
    EXPECT_GT(g_usr1.load(), 100) << "the signals did not reach the worker";
    EXPECT_EQ(fails[0], 0) << "poll";
    EXPECT_EQ(fails[1], 0) << "select";
    EXPECT_EQ(fails[2], 0) << "pselect";
}

}  // namespace
