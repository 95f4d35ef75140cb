// SPDX-License-Identifier: MIT
// fern_select's descriptor and timer cases (src/io/select.c): a select over
// a socket, a channel and a deadline returns the first that is ready, each
// one first, on one-worker and two-worker clusters, from green and plain
// threads; write readiness; an fd closed while a select waits on it; bad
// fds; readiness shared with fern_read and with other selects on the same
// fd; nothing left registered when a select returns through another case;
// deadline cases against the deadline argument; and a stress of selects on
// fds racing writers on several workers.
#include "test_io/io_test.h"

#include <atomic>
#include <thread>

namespace {

FERN_WATCHDOG_EACH_TEST(120);

fern_select_case fd_case(int fd, fern_select_op op) {
    fern_select_case k{};
    k.fd = fd;
    k.op = op;
    k.result = 12345;
    return k;
}
fern_select_case recv_case(fern_chan *c, void *dst) {
    fern_select_case k{};
    k.chan = c;
    k.op = FERN_RECV;
    k.elem = dst;
    k.result = 12345;
    return k;
}
fern_select_case deadline_case(int64_t at) {
    fern_select_case k{};
    k.deadline = at;
    k.op = FERN_DEADLINE;
    k.result = 12345;
    return k;
}

// Bytes queued for reading on fd (FIONREAD), without consuming them.
int queued(int fd) {
    char buf[64];
    ssize_t r = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    return r < 0 ? 0 : (int)r;
}

// A descriptor number no one holds and no one will be given while the test
// runs: the kernel hands out the lowest free number, and the runtime's own
// threads open files now and then (a number freed by close(2) may be theirs
// a moment later), so take one near the limit.
int unused_fd() {
    rlimit r{};
    getrlimit(RLIMIT_NOFILE, &r);
    int fd = (int)std::min<rlim_t>(r.rlim_cur, 4096) - 1;
    while (fd > 3 && fcntl(fd, F_GETFD) != -1)
        fd--;
    return fd;
}

// Runs f as a green thread on a new cluster of `workers` workers and joins it.
template <class F> void on_cluster(unsigned workers, F &&f) {
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, workers));
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, cl, std::forward<F>(f)));
    ASSERT_EQ(0, fern_join(t, nullptr));
    ASSERT_EQ(0, fern_cluster_destroy(cl));
}

class SelectIo : public ::testing::TestWithParam<unsigned> {};

// Socket, channel, deadline: whichever is made ready first fires, with its
// own index, and the others are left as they were.
TEST_P(SelectIo, SocketChannelDeadlineFirstReadyWins) {
    unsigned workers = GetParam();
    for (int first = 0; first < 3; first++) {
        SCOPED_TRACE("first ready: " + std::string(first == 0 ? "socket" : first == 1 ? "channel" : "deadline"));
        on_cluster(workers, [&] {
            Pair p = unix_pair();
            fern_chan *ch = nullptr;
            ASSERT_EQ(0, fern_chan_create(&ch, sizeof(int), 0));
            int got = -1;
            int64_t t0 = fern_now_ns();
            // The deadline case is far unless it is to be first.
            int64_t at = first == 2 ? t0 + ms(30) : t0 + ms(20000);
            fern_thread *maker = nullptr;
            ASSERT_EQ(0, spawn(&maker, nullptr, [&] {
                fern_sleep_ns(ms(20));
                if (first == 0) {
                    EXPECT_EQ(1, write(p.b, "x", 1));
                } else if (first == 1) {
                    int v = 42;
                    EXPECT_EQ(0, fern_chan_send(ch, &v));
                }
            }));
            fern_select_case cs[3] = {fd_case(p.a, FERN_FD_READABLE), recv_case(ch, &got),
                                      deadline_case(at)};
            int r = fern_select(cs, 3, t0 + ms(30000));
            int64_t took = fern_now_ns() - t0;
            EXPECT_EQ(first, r);
            EXPECT_EQ(0, cs[r < 0 ? 0 : r].result);
            EXPECT_LT(took, ms(10000)) << "woken by the fallback, not by the case";
            if (first == 0) {
                EXPECT_EQ(1, queued(p.a)) << "a select transfers nothing";
                EXPECT_EQ(-1, got);
            }
            if (first == 1) {
                EXPECT_EQ(42, got);
            }
            if (first == 2) {
                EXPECT_GE(took, ms(30)) << "a deadline case fired early";
                EXPECT_EQ(-1, got);
            }
            ASSERT_EQ(0, fern_join(maker, nullptr));
            fern_close(p.a);
            close(p.b);
            EXPECT_EQ(0, fern_chan_destroy(ch));
        });
    }
}

// Ready before the call: the first round finds it (no park).
TEST_P(SelectIo, AlreadyReadyFiresAtOnce) {
    on_cluster(GetParam(), [&] {
        Pair p = unix_pair();
        ASSERT_EQ(1, write(p.b, "y", 1));
        fern_chan *ch = nullptr;
        ASSERT_EQ(0, fern_chan_create(&ch, sizeof(int), 1));
        int got = 0;
        fern_select_case cs[2] = {recv_case(ch, &got), fd_case(p.a, FERN_FD_READABLE)};
        EXPECT_EQ(1, fern_select(cs, 2, 0)) << "non-blocking select sees a readable socket";
        // Both ready: each is chosen sometimes.
        int seen[2] = {0, 0};
        for (int i = 0; i < 200; i++) {
            int v = i;
            ASSERT_EQ(0, fern_chan_send(ch, &v));
            int r = fern_select(cs, 2, 0);
            ASSERT_TRUE(r == 0 || r == 1) << r;
            seen[r]++;
            if (r == 1) {
                ASSERT_EQ(0, fern_chan_recv(ch, &got));
            }
        }
        EXPECT_GT(seen[0], 20);
        EXPECT_GT(seen[1], 20);
        fern_close(p.a);
        close(p.b);
        EXPECT_EQ(0, fern_chan_destroy(ch));
    });
}

INSTANTIATE_TEST_SUITE_P(Workers, SelectIo, ::testing::Values(1u, 2u),
                         [](const auto &info) { return std::to_string(info.param) + "w"; });

// A plain thread waits as a green one does (it blocks on its futex; a
// worker polls for it).
TEST(SelectIoPlain, PlainThreadWokenBySocket) {
    ASSERT_TRUE(fern_init(nullptr) == 0 || runtime_running());
    Pair p = unix_pair();
    std::thread w([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_EQ(1, write(p.b, "z", 1));
    });
    fern_chan *ch = nullptr;
    ASSERT_EQ(0, fern_chan_create(&ch, sizeof(int), 0));
    int got = 0;
    fern_select_case cs[3] = {recv_case(ch, &got), deadline_case(fern_now_ns() + ms(20000)),
                              fd_case(p.a, FERN_FD_READABLE)};
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(2, fern_select(cs, 3, FERN_FOREVER));
    EXPECT_LT(fern_now_ns() - t0, ms(10000));
    w.join();
    // And a deadline case, from a plain thread.
    t0 = fern_now_ns();
    cs[1].deadline = t0 + ms(15);
    char c;
    ASSERT_EQ(1, read(p.a, &c, 1));
    EXPECT_EQ(1, fern_select(cs, 3, FERN_FOREVER));
    EXPECT_GE(fern_now_ns() - t0, ms(15));
    fern_close(p.a);
    close(p.b);
    EXPECT_EQ(0, fern_chan_destroy(ch));
}

// Write readiness: a full socket is not writable until the peer reads.
TEST(SelectIoFd, WritableWhenRoomComes) {
    ASSERT_EQ(0, run_green([&] {
        Pair p = unix_pair();
        fern_select_case w = fd_case(p.a, FERN_FD_WRITABLE);
        EXPECT_EQ(0, fern_select(&w, 1, 0)) << "an empty socket is writable";
        int flags = fcntl(p.a, F_GETFL);
        fcntl(p.a, F_SETFL, flags | O_NONBLOCK);
        char buf[4096] = {};
        size_t filled = 0;
        while (write(p.a, buf, sizeof buf) > 0)
            filled += sizeof buf;
        ASSERT_GT(filled, 0u);
        EXPECT_EQ(-ETIMEDOUT, fern_select(&w, 1, fern_now_ns() + ms(20))) << "full: not writable";
        fern_thread *drainer = nullptr;
        ASSERT_EQ(0, spawn(&drainer, nullptr, [&] {
            fern_sleep_ns(ms(20));
            char b[65536];
            fcntl(p.b, F_SETFL, fcntl(p.b, F_GETFL) | O_NONBLOCK);
            while (read(p.b, b, sizeof b) > 0) {
            }
        }));
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(0, fern_select(&w, 1, t0 + ms(20000)));
        EXPECT_EQ(0, w.result);
        EXPECT_LT(fern_now_ns() - t0, ms(10000));
        ASSERT_EQ(0, fern_join(drainer, nullptr));
        // Read and write cases on one fd: the writable one fires.
        fern_select_case rw[2] = {fd_case(p.a, FERN_FD_READABLE), fd_case(p.a, FERN_FD_WRITABLE)};
        EXPECT_EQ(1, fern_select(rw, 2, fern_now_ns() + ms(5000)));
        fern_close(p.a);
        close(p.b);
    }));
}

// fern_close while a select waits on the fd: the case fires with EBADF.
TEST(SelectIoFd, ClosedWhileWaiting) {
    ASSERT_EQ(0, run_green([&] {
        Pair p = unix_pair();
        fern_chan *ch = nullptr;
        ASSERT_EQ(0, fern_chan_create(&ch, sizeof(int), 0));
        int got = 0;
        fern_thread *closer = nullptr;
        ASSERT_EQ(0, spawn(&closer, nullptr, [&] {
            fern_sleep_ns(ms(20));
            EXPECT_EQ(0, fern_close(p.a));
        }));
        fern_select_case cs[2] = {recv_case(ch, &got), fd_case(p.a, FERN_FD_READABLE)};
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(1, fern_select(cs, 2, t0 + ms(20000)));
        EXPECT_EQ(EBADF, cs[1].result);
        EXPECT_LT(fern_now_ns() - t0, ms(10000));
        ASSERT_EQ(0, fern_join(closer, nullptr));
        close(p.b);
        EXPECT_EQ(0, fern_chan_destroy(ch));
    }));
}

// Bad descriptors fire with EBADF, negative ones are never ready, a regular
// file is always ready; impossible selects say EINVAL.
TEST(SelectIoFd, BadAndSpecialDescriptors) {
    ASSERT_EQ(0, run_green([&] {
        int dead = unused_fd();
        fern_select_case k = fd_case(dead, FERN_FD_READABLE);
        EXPECT_EQ(0, fern_select(&k, 1, FERN_FOREVER));
        EXPECT_EQ(EBADF, k.result);
        k = fd_case(1 << 29, FERN_FD_WRITABLE);
        EXPECT_EQ(0, fern_select(&k, 1, FERN_FOREVER)) << "beyond the fd limit";
        EXPECT_EQ(EBADF, k.result);
        // Closed with close(2) behind fern's back after registration: poll
        // reports POLLNVAL, the case fires with EBADF.
        // (A high number, so that nobody is given it meanwhile.)
        Pair p = unix_pair();
        int hi = fcntl(p.a, F_DUPFD_CLOEXEC, unused_fd());
        ASSERT_GE(hi, 0);
        k = fd_case(hi, FERN_FD_READABLE);
        EXPECT_EQ(-ETIMEDOUT, fern_select(&k, 1, 0));
        close(hi);
        EXPECT_EQ(0, fern_select(&k, 1, FERN_FOREVER));
        EXPECT_EQ(EBADF, k.result);
        fern_close(hi); // forget the stale registration
        close(p.a);
        close(p.b);
        // Negative fds: never ready.
        fern_select_case neg[2] = {fd_case(-1, FERN_FD_READABLE), deadline_case(FERN_FOREVER)};
        EXPECT_EQ(-EINVAL, fern_select(neg, 2, FERN_FOREVER)) << "nothing can ever fire";
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(-ETIMEDOUT, fern_select(neg, 2, t0 + ms(10)));
        EXPECT_GE(fern_now_ns() - t0, ms(9));
        neg[1].deadline = -5;
        EXPECT_EQ(-EINVAL, fern_select(neg, 2, 0)) << "negative deadline case";
        // A regular file: always ready, both ways.
        char path[] = "/tmp/fern_select_XXXXXX";
        int f = mkstemp(path);
        ASSERT_GE(f, 0);
        unlink(path);
        fern_select_case rf[2] = {fd_case(f, FERN_FD_READABLE), fd_case(f, FERN_FD_WRITABLE)};
        int r = fern_select(rf, 2, FERN_FOREVER);
        EXPECT_TRUE(r == 0 || r == 1);
        EXPECT_EQ(0, rf[r < 0 ? 0 : r].result);
        fern_close(f);
    }));
}

// A deadline case against the deadline argument: whichever is earlier.
TEST(SelectIoTimers, DeadlineCaseAndArgument) {
    ASSERT_EQ(0, run_green([&] {
        Pair p = unix_pair();
        int64_t t0 = fern_now_ns();
        fern_select_case cs[3] = {fd_case(p.a, FERN_FD_READABLE), deadline_case(t0 + ms(40)),
                                  deadline_case(t0 + ms(20))};
        EXPECT_EQ(2, fern_select(cs, 3, t0 + ms(60))) << "the earlier deadline case";
        EXPECT_GE(fern_now_ns() - t0, ms(20));
        // Already passed: both deadline cases ready, one of them fires.
        int r = fern_select(cs, 3, FERN_FOREVER);
        EXPECT_TRUE(r == 1 || r == 2) << r;
        cs[1].deadline = cs[2].deadline = t0 + ms(20000);
        int64_t t1 = fern_now_ns();
        EXPECT_EQ(-ETIMEDOUT, fern_select(cs, 3, t1 + ms(20)));
        EXPECT_GE(fern_now_ns() - t1, ms(20));
        fern_close(p.a);
        close(p.b);
    }));
}

// One edge, three parties waiting for it: a fern_read and two selects on
// the same fd all wake. The reader takes one of the two bytes, so the fd is
// still readable when the selects look (a select reports readiness as
// poll(2) does: had the reader taken everything, they would wait on).
TEST(SelectIoFd, ReadinessSharedWithOtherWaiters) {
    ASSERT_EQ(0, run_green([&] {
        Pair p = unix_pair();
        std::atomic<int> done{0};
        fern_thread *reader = nullptr, *sel2 = nullptr;
        ASSERT_EQ(0, spawn(&reader, nullptr, [&] {
            char c = 0;
            EXPECT_EQ(1, fern_read(p.a, &c, 1));
            EXPECT_EQ('r', c);
            done++;
        }));
        ASSERT_EQ(0, spawn(&sel2, nullptr, [&] {
            fern_select_case k = fd_case(p.a, FERN_FD_READABLE);
            EXPECT_EQ(0, fern_select(&k, 1, fern_now_ns() + ms(20000)));
            done++;
        }));
        fern_sleep_ns(ms(20)); // both parked
        fern_select_case k = fd_case(p.a, FERN_FD_READABLE);
        fern_thread *writer = nullptr;
        ASSERT_EQ(0, spawn(&writer, nullptr, [&] {
            fern_sleep_ns(ms(20));
            EXPECT_EQ(2, write(p.b, "rr", 2)); // one edge
        }));
        int r = fern_select(&k, 1, fern_now_ns() + ms(20000));
        EXPECT_EQ(0, r);
        ASSERT_EQ(0, fern_join(reader, nullptr));
        ASSERT_EQ(0, fern_join(sel2, nullptr));
        ASSERT_EQ(0, fern_join(writer, nullptr));
        EXPECT_EQ(2, done.load());
        EXPECT_EQ(1, queued(p.a));
        fern_close(p.a);
        close(p.b);
    }));
}

// A select that returns through another case leaves nothing on the fd: no
// waiter for the next edge to find (ASan would see it), no epoll_ctl per
// call (fern_stats.poller_ctls), and the fd works as before.
TEST(SelectIoFd, NothingLeftBehindThroughAnotherCase) {
    ASSERT_EQ(0, run_green([&] {
        Pair p = unix_pair();
        fern_chan *ch = nullptr;
        ASSERT_EQ(0, fern_chan_create(&ch, sizeof(int), 1));
        fern_select_case cs[2] = {fd_case(p.a, FERN_FD_READABLE), recv_case(ch, nullptr)};
        // Register once.
        EXPECT_EQ(-ETIMEDOUT, fern_select(cs, 2, 0));
        struct fern_stats s0, s1;
        ASSERT_EQ(0, fern_stats(&s0));
        long n = scaled(2000, 200);
        for (long i = 0; i < n; i++) {
            if (i % 2) {
                int v = 1;
                ASSERT_EQ(0, fern_chan_send(ch, &v)); // ready at once
                ASSERT_EQ(1, fern_select(cs, 2, FERN_FOREVER));
            } else {
                // Parked, then woken by the channel.
                fern_thread *s = nullptr;
                ASSERT_EQ(0, spawn(&s, nullptr, [&] {
                    int v = 2;
                    EXPECT_EQ(0, fern_chan_send(ch, &v));
                }));
                ASSERT_EQ(1, fern_select(cs, 2, FERN_FOREVER));
                ASSERT_EQ(0, fern_join(s, nullptr));
            }
        }
        ASSERT_EQ(0, fern_stats(&s1));
        EXPECT_EQ(s0.poller_ctls, s1.poller_ctls) << "a select registers nothing more";
        // Edges now find no stale waiter; the fd still works.
        for (int i = 0; i < 50; i++) {
            ASSERT_EQ(1, write(p.b, "e", 1));
            char c;
            ASSERT_EQ(1, fern_read(p.a, &c, 1));
        }
        ASSERT_EQ(1, write(p.b, "f", 1));
        EXPECT_EQ(0, fern_select(cs, 2, FERN_FOREVER));
        fern_close(p.a);
        close(p.b);
        EXPECT_EQ(0, fern_chan_destroy(ch));
    }));
}

// Stress: selects on fds racing writers, on a cluster of several workers.
// Each reader selects on its socket, a quit channel and a deadline case,
// reads what it can without waiting when readable; every byte arrives and
// every reader leaves through the quit channel.
TEST(SelectIoStress, SelectsRacingWriters) {
    const int pairs = (int)tsan_capped(scaled(16, 4), 8);
    const int per = (int)scaled(2000, 200);
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 4));
    fern_chan *quit = nullptr;
    ASSERT_EQ(0, fern_chan_create(&quit, sizeof(int), 0));
    std::vector<Pair> ps(pairs);
    for (auto &p : ps)
        p = unix_pair();
    std::atomic<long> got{0}, wakes{0}, deadlines{0};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < pairs; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, cl, [&, i] {
            int fd = ps[i].a;
            for (;;) {
                fern_select_case cs[3] = {fd_case(fd, FERN_FD_READABLE), recv_case(quit, nullptr),
                                          deadline_case(fern_now_ns() + ms(2))};
                int r = fern_select(cs, 3, FERN_FOREVER);
                if (r == 1)
                    return;
                if (r == 2) {
                    deadlines++;
                    continue;
                }
                ASSERT_EQ(0, r);
                wakes++;
                char buf[256];
                ssize_t k;
                while ((k = fern_recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
                    got += k;
            }
        }));
        ts.push_back(t);
        ASSERT_EQ(0, spawn_on(&t, cl, [&, i] {
            for (int j = 0; j < per; j++) {
                ASSERT_EQ(1, fern_write(ps[i].b, "w", 1));
                if (j % 7 == 0)
                    fern_yield();
                if (j % 101 == 0)
                    fern_sleep_ns(100000);
            }
        }));
        ts.push_back(t);
    }
    // Writers end; then wait for every byte before quitting the readers.
    for (size_t i = 1; i < ts.size(); i += 2)
        ASSERT_EQ(0, fern_join(ts[i], nullptr));
    ASSERT_TRUE(wait_until([&] { return got.load() == (long)pairs * per; }, 60000))
        << got.load() << " of " << (long)pairs * per;
    ASSERT_EQ(0, fern_chan_close(quit));
    for (size_t i = 0; i < ts.size(); i += 2)
        ASSERT_EQ(0, fern_join(ts[i], nullptr));
    EXPECT_GT(wakes.load(), 0);
    for (auto &p : ps) {
        fern_close(p.a);
        fern_close(p.b);
    }
    EXPECT_EQ(0, fern_chan_destroy(quit));
    ASSERT_EQ(0, fern_cluster_destroy(cl));
}

} // namespace

namespace {

// fern_cancel wakes a select that waits on a socket, a ticker, a deadline
// case and a channel (-ECANCELED), within the 5 ms on an idle
// machine (the bound here is 1 s: a loaded 2-core CI machine, sanitizers);
// its next select that would wait fails at once, a ready one still fires,
// fern_ticker_wait says ECANCELED; nothing stays on the fd or the ticker.
TEST(SelectIoCancel, CancelWakesSelectOnFdsAndTimers) {
    ASSERT_EQ(0, run_green([&] {
        Pair p = unix_pair();
        fern_ticker *tk = nullptr;
        ASSERT_EQ(0, fern_ticker_create(&tk, ms(1000000)));
        fern_chan *ch = nullptr;
        ASSERT_EQ(0, fern_chan_create(&ch, sizeof(int), 1));
        std::atomic<int> parked{0};
        int r1 = 0, r2 = 0, r3 = 0, r4 = 0, r5 = 0;
        int64_t woke = 0;
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn(&t, nullptr, [&] {
            fern_select_case cs[4] = {fd_case(p.a, FERN_FD_READABLE), {},
                                      deadline_case(fern_now_ns() + ms(20000)), recv_case(ch, nullptr)};
            cs[1].ticker = tk;
            cs[1].op = FERN_TICK;
            parked = 1;
            r1 = fern_select(cs, 4, FERN_FOREVER);
            woke = fern_now_ns();
            r2 = fern_select(cs, 4, FERN_FOREVER);         // would wait: fails at once
            fern_select_case only_ch = recv_case(ch, nullptr); // the channel-only path
            r3 = fern_select(&only_ch, 1, FERN_FOREVER);
            r4 = fern_ticker_wait(tk, nullptr, FERN_FOREVER);
            int v = 5;
            EXPECT_EQ(0, fern_chan_send(ch, &v));
            r5 = fern_select(cs, 4, FERN_FOREVER);          // ready: fires
        }));
        while (!parked.load())
            fern_yield();
        fern_sleep_ns(ms(10)); // parked in the select by now
        int64_t t0 = fern_now_ns();
        ASSERT_EQ(0, fern_cancel(t));
        ASSERT_EQ(0, fern_join(t, nullptr));
        EXPECT_EQ(-ECANCELED, r1);
        EXPECT_LT(woke - t0, ms(1000)) << "cancel took " << (woke - t0) / 1000 << " us";
        EXPECT_EQ(-ECANCELED, r2);
        EXPECT_EQ(-ECANCELED, r3);
        EXPECT_EQ(ECANCELED, r4);
        EXPECT_EQ(3, r5) << "a ready case fires even when cancelled";
        // Nothing left: the ticker has no waiter, edges find none.
        EXPECT_EQ(0, fern_ticker_destroy(tk));
        ASSERT_EQ(1, write(p.b, "x", 1));
        char c;
        EXPECT_EQ(1, fern_read(p.a, &c, 1));
        fern_close(p.a);
        close(p.b);
        EXPECT_EQ(0, fern_chan_destroy(ch));
    }));
}

} // namespace
