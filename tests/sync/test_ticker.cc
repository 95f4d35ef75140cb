// SPDX-License-Identifier: MIT
// fern_ticker (src/sync/ticker.c) and FERN_TICK select cases: argument
// errors, the period kept under load (ticks never early, no drift, no
// backlog after a slow reader), each tick to exactly one taker, reset and
// stop while a select waits, destroy refused while one is blocked, and a
// stress of tickers reset and stopped while selected on several workers.
#include "fern_test.h"

#include <algorithm>
#include <atomic>
#include <vector>

using namespace fern_test;

namespace {

FERN_WATCHDOG_EACH_TEST(120);

fern_select_case tick_case(fern_ticker *t, uint64_t *ticks) {
    fern_select_case k{};
    k.ticker = t;
    k.op = FERN_TICK;
    k.elem = ticks;
    k.result = 12345;
    return k;
}

TEST(Ticker, ArgumentErrors) {
    fern_ticker *t = nullptr;
    EXPECT_EQ(EINVAL, fern_ticker_create(nullptr, ms(1)));
    EXPECT_EQ(EINVAL, fern_ticker_create(&t, 0));
    EXPECT_EQ(EINVAL, fern_ticker_create(&t, -ms(1))) << "negative period";
    EXPECT_EQ(nullptr, t);
    EXPECT_EQ(EINVAL, fern_ticker_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_ticker_reset(nullptr, ms(1)));
    EXPECT_EQ(EINVAL, fern_ticker_stop(nullptr));
    EXPECT_EQ(EINVAL, fern_ticker_wait(nullptr, nullptr, 0));
    ASSERT_EQ(0, fern_ticker_create(&t, ms(1000)));
    EXPECT_EQ(EINVAL, fern_ticker_reset(t, 0));
    EXPECT_EQ(EINVAL, fern_ticker_reset(t, -5));
    EXPECT_EQ(EINVAL, fern_ticker_wait(t, nullptr, -1));
    EXPECT_EQ(ETIMEDOUT, fern_ticker_wait(t, nullptr, 0)) << "no tick yet";
    // A huge period: never ticks, nothing overflows.
    EXPECT_EQ(0, fern_ticker_reset(t, INT64_MAX));
    EXPECT_EQ(ETIMEDOUT, fern_ticker_wait(t, nullptr, fern_now_ns() + ms(5)));
    EXPECT_EQ(0, fern_ticker_stop(t));
    EXPECT_EQ(0, fern_ticker_stop(t)) << "stopping twice is harmless";
    EXPECT_EQ(ETIMEDOUT, fern_ticker_wait(t, nullptr, fern_now_ns() + ms(5)));
    // A select whose only case is a stopped ticker can still fire (a reset
    // may come): not EINVAL.
    fern_select_case k = tick_case(t, nullptr);
    EXPECT_EQ(-ETIMEDOUT, fern_select(&k, 1, 0));
    fern_select_case none = tick_case(nullptr, nullptr);
    EXPECT_EQ(-EINVAL, fern_select(&none, 1, FERN_FOREVER)) << "NULL ticker: never ready";
    EXPECT_EQ(0, fern_ticker_destroy(t));
}

// Ticks are never early and stay on the period's boundaries: the k-th
// boundary is at create + k * period, and the counts taken add up to the
// boundaries passed. Under load (spinners on the same one-worker cluster,
// preempted every 10 ms) each tick may be late, but by a bounded amount,
// and the next is not moved by that lateness.
TEST(Ticker, PeriodUnderLoad) {
    const int64_t period = ms(10);
    const int n = 30;
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 1));
    std::atomic<bool> stop{false};
    std::vector<fern_thread *> spinners(3);
    for (auto &s : spinners)
        ASSERT_EQ(0, spawn_on(&s, cl, [&] {
            while (!stop.load(std::memory_order_relaxed)) {
            }
        }));
    fern_thread *t = nullptr;
    std::vector<int64_t> late;
    uint64_t total = 0;
    int64_t before = 0, after = 0, end = 0;
    ASSERT_EQ(0, spawn_on(&t, cl, [&] {
        fern_ticker *tk = nullptr;
        before = fern_now_ns();
        ASSERT_EQ(0, fern_ticker_create(&tk, period));
        after = fern_now_ns();
        for (int i = 0; i < n; i++) {
            uint64_t k = 0;
            ASSERT_EQ(0, fern_ticker_wait(tk, &k, FERN_FOREVER));
            int64_t now = fern_now_ns();
            ASSERT_GE(k, 1u);
            total += k;
            // Boundary `total` is at create + total * period, create in
            // [before, after]: never early.
            EXPECT_GE(now, before + (int64_t)total * period) << "tick " << i << " early";
            late.push_back(now - (after + (int64_t)total * period));
        }
        end = fern_now_ns();
        EXPECT_EQ(0, fern_ticker_destroy(tk));
    }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    stop = true;
    for (auto s : spinners)
        ASSERT_EQ(0, fern_join(s, nullptr));
    ASSERT_EQ(0, fern_cluster_destroy(cl));
    // No drift, no backlog: the counts cover exactly the boundaries passed
    // by the last take (within the create call's own duration, + 1).
    EXPECT_LE((int64_t)total, (end - before) / period + 1);
    EXPECT_GE((int64_t)total, (end - after) / period - 1);
    // Lateness: with three spinners and a 10 ms slice the taker waits up to
    // about 30 ms for its turn; allow 250 ms (sanitizers, a loaded 2-core
    // machine) for the median and 2 s for the worst.
    std::sort(late.begin(), late.end());
    EXPECT_LT(late[late.size() / 2], ms(250)) << "median lateness";
    EXPECT_LT(late.back(), ms(2000)) << "worst lateness";
}

// A slow reader finds one tick and a count, not a backlog: the next wait
// blocks until the next boundary.
TEST(Ticker, SlowReaderGetsNoBacklog) {
    ASSERT_EQ(0, run_green([&] {
        const int64_t period = ms(40);
        fern_ticker *tk = nullptr;
        int64_t before = fern_now_ns();
        ASSERT_EQ(0, fern_ticker_create(&tk, period));
        fern_sleep_ns(ms(170)); // 4 boundaries pass
        uint64_t k = 0;
        ASSERT_EQ(0, fern_ticker_wait(tk, &k, 0));
        int64_t took = fern_now_ns();
        EXPECT_GE(k, 4u);
        EXPECT_LE((int64_t)k, (took - before) / period + 1);
        // Boundaries are at c + j * period, c (the create) >= before. A
        // take before c + 5 * period moved the tick to c + 5 * period, so
        // until before + 5 * period a non-blocking wait must find nothing:
        // the dropped ticks did not pile up.
        int r = fern_ticker_wait(tk, &k, 0);
        int64_t now = fern_now_ns();
        if (took < before + 5 * period && now < before + 5 * period) {
            EXPECT_EQ(ETIMEDOUT, r) << "ticks piled up";
        }
        // And the blocking one returns one tick.
        ASSERT_EQ(0, fern_ticker_wait(tk, &k, FERN_FOREVER));
        EXPECT_GE(k, 1u);
        EXPECT_EQ(0, fern_ticker_destroy(tk));
    }));
}

// Several takers: each tick goes to one of them. The counts of all takes
// add up to the boundaries passed, not to a multiple of them.
TEST(Ticker, EachTickToOneTaker) {
    const int64_t period = ms(5);
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 2));
    fern_ticker *tk = nullptr;
    int64_t before = fern_now_ns();
    ASSERT_EQ(0, fern_ticker_create(&tk, period));
    std::atomic<uint64_t> total{0};
    std::atomic<int64_t> last{0};
    int64_t stop_at = fern_now_ns() + ms(150);
    std::vector<fern_thread *> ts(4);
    for (auto &t : ts)
        ASSERT_EQ(0, spawn_on(&t, cl, [&] {
            for (;;) {
                uint64_t k = 0;
                int r = fern_ticker_wait(tk, &k, stop_at);
                if (r == ETIMEDOUT)
                    return;
                ASSERT_EQ(0, r);
                total += k;
                int64_t now = fern_now_ns(), prev = last.load();
                while (prev < now && !last.compare_exchange_weak(prev, now)) {
                }
            }
        }));
    for (auto t : ts)
        ASSERT_EQ(0, fern_join(t, nullptr));
    ASSERT_GT(total.load(), 0u);
    EXPECT_LE((int64_t)total.load(), (last.load() - before) / period + 1)
        << "a tick was taken twice";
    EXPECT_EQ(0, fern_ticker_destroy(tk));
    ASSERT_EQ(0, fern_cluster_destroy(cl));
}

// Reset while a select waits on the ticker: the select sees the new, much
// earlier tick (it would sleep 1000 s on the old one), and not before the
// reset's time plus the new period. Stop while a select waits: no tick
// fires; the select leaves through its other case.
//
// The resetter notes the time just before its reset (the reset reads the
// clock after that, so the tick is due at least 5 ms later), and t0 is
// read before the resetter is spawned: it may start at once on the other
// worker, and under qemu-user it started its 20 ms sleep up to 42 ms
// before a t0 read after the spawn (the spawn took 30-56 ms there), so
// that a correct tick came "before t0 + 25 ms" (24.5 ms once on CI).
TEST(Ticker, ResetAndStopWhileSelected) {
    ASSERT_EQ(0, run_green([&] {
        fern_ticker *tk = nullptr;
        ASSERT_EQ(0, fern_ticker_create(&tk, ms(1000000)));
        fern_thread *r = nullptr;
        std::atomic<int64_t> reset_at{0};
        int64_t t0 = fern_now_ns();
        ASSERT_EQ(0, spawn(&r, nullptr, [&] {
            fern_sleep_ns(ms(20));
            reset_at = fern_now_ns();
            EXPECT_EQ(0, fern_ticker_reset(tk, ms(5)));
        }));
        uint64_t k = 0;
        fern_select_case c = tick_case(tk, &k);
        EXPECT_EQ(0, fern_select(&c, 1, fern_now_ns() + ms(30000)));
        int64_t ticked = fern_now_ns();
        EXPECT_GE(k, 1u); // more if the select ran late (a loaded machine)
        ASSERT_NE(0, reset_at.load()) << "ticked before the reset";
        EXPECT_GE(ticked - reset_at.load(), ms(5)) << "ticked before reset + period";
        EXPECT_GE(ticked - t0, ms(25)) << "ticked before reset + period";
        EXPECT_LT(ticked - t0, ms(10000));
        ASSERT_EQ(0, fern_join(r, nullptr));

        // Stop while selected, with a channel beside it.
        fern_chan *ch = nullptr;
        ASSERT_EQ(0, fern_chan_create(&ch, sizeof(int), 0));
        ASSERT_EQ(0, spawn(&r, nullptr, [&] {
            fern_sleep_ns(ms(2));
            EXPECT_EQ(0, fern_ticker_stop(tk));
            fern_sleep_ns(ms(40)); // many periods: no tick may come
            int v = 9;
            EXPECT_EQ(0, fern_chan_send(ch, &v));
        }));
        int got = 0;
        fern_select_case cs[2] = {tick_case(tk, &k), {}};
        cs[1].chan = ch;
        cs[1].op = FERN_RECV;
        cs[1].elem = &got;
        // A tick may come within the 2 ms before the stop: take those.
        int which;
        while ((which = fern_select(cs, 2, fern_now_ns() + ms(30000))) == 0) {
        }
        EXPECT_EQ(1, which);
        EXPECT_EQ(9, got);
        ASSERT_EQ(0, fern_join(r, nullptr));
        EXPECT_EQ(ETIMEDOUT, fern_ticker_wait(tk, nullptr, fern_now_ns() + ms(20)))
            << "a stopped ticker ticked";
        EXPECT_EQ(0, fern_chan_destroy(ch));
        EXPECT_EQ(0, fern_ticker_destroy(tk));
    }));
}

// Destroy while a select is blocked on the ticker: EBUSY, nothing freed;
// once the select has left, 0.
TEST(Ticker, DestroyWhileSelectedIsRefused) {
    ASSERT_EQ(0, run_green([&] {
        fern_ticker *tk = nullptr;
        ASSERT_EQ(0, fern_ticker_create(&tk, ms(1000000)));
        std::atomic<bool> in{false};
        fern_thread *w = nullptr;
        ASSERT_EQ(0, spawn(&w, nullptr, [&] {
            in = true;
            EXPECT_EQ(0, fern_ticker_wait(tk, nullptr, FERN_FOREVER));
        }));
        while (!in.load())
            fern_yield();
        fern_sleep_ns(ms(10));
        EXPECT_EQ(EBUSY, fern_ticker_destroy(tk));
        EXPECT_EQ(0, fern_ticker_reset(tk, ms(1)));
        ASSERT_EQ(0, fern_join(w, nullptr));
        EXPECT_EQ(0, fern_ticker_destroy(tk));
    }));
}

// Stop, then destroy at once, while a select waits on the ticker and a
// channel: the stop wakes the select to look again, and until it is
// blocked again (or gone) destroy must not free the ticker. On a
// one-worker cluster the destroy runs before the woken select does.
TEST(Ticker, DestroyRightAfterStopWhileSelected) {
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 1));
    fern_thread *main_t = nullptr;
    ASSERT_EQ(0, spawn_on(&main_t, cl, [&] {
        fern_chan *ch = nullptr;
        ASSERT_EQ(0, fern_chan_create(&ch, sizeof(int), 0));
        for (int i = 0; i < 50; i++) {
            fern_ticker *tk = nullptr;
            ASSERT_EQ(0, fern_ticker_create(&tk, ms(1000000)));
            fern_thread *s = nullptr;
            int r = -1;
            ASSERT_EQ(0, spawn(&s, nullptr, [&] {
                fern_select_case cs[2] = {tick_case(tk, nullptr), {}};
                cs[1].chan = ch;
                cs[1].op = FERN_RECV;
                r = fern_select(cs, 2, FERN_FOREVER);
            }));
            fern_yield(); // the select parks
            fern_sleep_ns(100000);
            EXPECT_EQ(0, fern_ticker_stop(tk));
            EXPECT_EQ(EBUSY, fern_ticker_destroy(tk)) << "round " << i;
            int v = 1;
            ASSERT_EQ(0, fern_chan_send(ch, &v));
            ASSERT_EQ(0, fern_join(s, nullptr));
            EXPECT_EQ(1, r);
            EXPECT_EQ(0, fern_ticker_destroy(tk));
        }
        EXPECT_EQ(0, fern_chan_destroy(ch));
    }));
    ASSERT_EQ(0, fern_join(main_t, nullptr));
    ASSERT_EQ(0, fern_cluster_destroy(cl));
}

// Stress (TSan/ASan): on four workers, threads select on a shared ticker,
// a private ticker and a channel while others reset, stop and restart the
// tickers; then every ticker is destroyed right after the selects end.
TEST(TickerStress, ResetAndStopWhileSelected) {
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 4));
    fern_ticker *shared = nullptr;
    ASSERT_EQ(0, fern_ticker_create(&shared, 200000));
    fern_chan *quit = nullptr;
    ASSERT_EQ(0, fern_chan_create(&quit, sizeof(int), 0));
    const int nsel = (int)tsan_capped(scaled(8, 4), 6);
    const long rounds = scaled(3000, 300);
    std::atomic<long> ticks{0};
    std::vector<fern_ticker *> own(nsel);
    for (auto &o : own)
        ASSERT_EQ(0, fern_ticker_create(&o, 300000));
    std::vector<fern_thread *> sel(nsel), ctl(2);
    for (int i = 0; i < nsel; i++)
        ASSERT_EQ(0, spawn_on(&sel[i], cl, [&, i] {
            for (;;) {
                uint64_t a = 0, b = 0;
                fern_select_case cs[3] = {tick_case(shared, &a), tick_case(own[i], &b), {}};
                cs[2].chan = quit;
                cs[2].op = FERN_RECV;
                int r = fern_select(cs, 3, fern_now_ns() + ms(2));
                if (r == 2)
                    return;
                if (r >= 0)
                    ticks++;
            }
        }));
    for (int c = 0; c < 2; c++)
        ASSERT_EQ(0, spawn_on(&ctl[c], cl, [&, c] {
            for (long j = 0; j < rounds; j++) {
                fern_ticker *t = c == 0 ? shared : own[(size_t)j % own.size()];
                switch (j % 3) {
                case 0:
                    EXPECT_EQ(0, fern_ticker_stop(t));
                    break;
                default:
                    EXPECT_EQ(0, fern_ticker_reset(t, 100000 + (j % 5) * 50000));
                }
                if (j % 4 == 0)
                    fern_yield();
            }
        }));
    for (auto t : ctl)
        ASSERT_EQ(0, fern_join(t, nullptr));
    // The resets kept moving the ticks away; now let some come.
    long before = ticks.load();
    ASSERT_EQ(0, fern_ticker_reset(shared, 100000));
    EXPECT_TRUE(wait_until([&] { return ticks.load() > before; })) << "no tick after the resets";
    ASSERT_EQ(0, fern_chan_close(quit));
    for (auto t : sel)
        ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, fern_ticker_destroy(shared));
    for (auto o : own)
        EXPECT_EQ(0, fern_ticker_destroy(o));
    EXPECT_EQ(0, fern_chan_destroy(quit));
    ASSERT_EQ(0, fern_cluster_destroy(cl));
}

} // namespace
