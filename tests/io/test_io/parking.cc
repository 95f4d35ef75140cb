// SPDX-License-Identifier: MIT
// Parking: a green thread waiting for its fd leaves the worker free to
// run others, on the default cluster and on a one-worker cluster.
#include "io_test.h"

namespace {

// ------------------------------------------------------------------------
// Parking: the worker keeps running other green threads
// ------------------------------------------------------------------------

// mode 0: the counter yields (the worker never idles: I/O must be served by
// the busy worker's periodic poll); mode 1: the counter sleeps 1 ms between
// steps (the worker idles and polls).
void reader_parks_while_counter_runs(fern_cluster *c1, int mode, bool tcp) {
    Watchdog wd(60);
    Pair p = tcp ? tcp_pair() : unix_pair();
    std::atomic<long> counter{0};
    std::atomic<bool> stop{false}, reader_done{false}, reader_started{false};
    std::atomic<long> at_start{-1}, at_end{-1};
    std::string got;
    fern_thread *ct = spawn_c(c1, [&] {
        int64_t end = fern_now_ns() + 30000 * kMs;
        while (!stop.load() && fern_now_ns() < end) {
            counter++;
            if (mode == 0)
                fern_yield();
            else
                fern_sleep_ns(kMs);
        }
    });
    fern_thread *rt = spawn_c(c1, [&] {
        char buf[32];
        reader_started = true;
        at_start = counter.load();
        ssize_t n = fern_read(p.a, buf, sizeof buf);
        at_end = counter.load();
        if (n > 0) got.assign(buf, (size_t)n);
        reader_done = true;
    });
    ASSERT_TRUE(wait_until([&] { return reader_started.load(); }, 10000));
    long c0 = counter.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(reader_done.load()) << "fern_read returned with no data";
    EXPECT_TRUE(wait_until([&] { return counter.load() > c0 + 20; }, 10000))
        << "counter thread made no progress while the reader was parked (worker blocked?)";
    ASSERT_EQ(5, write(p.b, "wake!", 5));
    EXPECT_TRUE(wait_until([&] { return reader_done.load(); }, 5000))
        << "parked reader not woken by data (mode " << mode << ")";
    stop = true;
    join(rt);
    join(ct);
    EXPECT_EQ("wake!", got);
    EXPECT_GT(at_end.load(), at_start.load() + 20)
        << "the counter on the same worker did not advance while the reader was parked";
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST_F(IoOneWorker, ReaderParksWhileBusyCounterRuns) { reader_parks_while_counter_runs(c1, 0, false); }
TEST_F(IoOneWorker, ReaderParksWhileSleepingCounterRuns) { reader_parks_while_counter_runs(c1, 1, false); }
TEST_F(IoOneWorker, TcpReaderParksWhileBusyCounterRuns) { reader_parks_while_counter_runs(c1, 0, true); }
TEST_F(IoOneWorker, TcpReaderParksWhileSleepingCounterRuns) { reader_parks_while_counter_runs(c1, 1, true); }

// Many green threads parked on different fds; data arrives in scrambled order.
TEST(Io, ManyParkedReadersEachWokenByItsFd) {
    Watchdog wd(60);
    const int n = (int)tsan_capped(scaled(200, 20), 100);
    std::vector<Pair> ps(n);
    for (auto &p : ps) p = unix_pair();
    std::atomic<int> done{0}, bad{0};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < n; i++) {
        ts.push_back(spawn_c(nullptr, [&, i] {
            int v = -1;
            if (fern_read(ps[i].a, &v, sizeof v) != (ssize_t)sizeof v || v != i) bad++;
            done++;
        }));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(0, done.load());
    std::vector<int> order(n);
    for (int i = 0; i < n; i++) order[i] = (i * 7919) % n;
    std::sort(order.begin(), order.end());
    std::reverse(order.begin(), order.end());
    for (int i : order) ASSERT_EQ((ssize_t)sizeof i, write(ps[i].b, &i, sizeof i));
    EXPECT_TRUE(wait_until([&] { return done.load() == n; }, 20000)) << done.load() << "/" << n;
    for (auto t : ts) join(t);
    EXPECT_EQ(0, bad.load());
    for (auto &p : ps) {
        EXPECT_EQ(0, fern_close(p.a));
        close(p.b);
    }
}

// A reader on a non-default cluster is woken (the event is handled by
// whichever worker polls; the thread must go back to its own cluster).
TEST_F(IoOneWorker, ReaderOnOtherClusterWokenAndStaysOnIt) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<bool> ok{false};
    fern_thread *t = spawn_c(c1, [&] {
        char b[4];
        ssize_t n = fern_read(p.a, b, sizeof b);
        EXPECT_EQ(3, n);
        EXPECT_EQ(c1, fern_current_cluster());
        ok = n == 3;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(3, fern_write(p.b, "abc", 3)); }));
    join(t);
    EXPECT_TRUE(ok.load());
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
}

} // namespace
