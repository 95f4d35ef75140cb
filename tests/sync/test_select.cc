// SPDX-License-Identifier: MIT
// fern_select: argument errors, non-blocking and timed forms, uniform choice
// among ready cases, exactly one case fires, send+recv mixes, NULL-chan cases,
// closed channels (EPIPE), wake-ups from green and plain threads.
#include "fern_test.h"

#include <cstring>
#include <vector>

using namespace fern_test;

namespace {

struct Chan {
    fern_chan *ch = nullptr;
    Chan(size_t elem, size_t cap) { EXPECT_EQ(0, fern_chan_create(&ch, elem, cap)); }
    ~Chan() {
        if (ch) {
            EXPECT_EQ(0, fern_chan_destroy(ch));
        }
    }
    operator fern_chan *() const { return ch; }
};

fern_select_case recv_case(fern_chan *c, void *dst) {
    fern_select_case k{};
    k.chan = c;
    k.op = FERN_RECV;
    k.elem = dst;
    k.result = 12345;
    return k;
}
fern_select_case send_case(fern_chan *c, void *src) {
    fern_select_case k{};
    k.chan = c;
    k.op = FERN_SEND;
    k.elem = src;
    k.result = 12345;
    return k;
}

TEST(Select, ArgumentErrors) {
    EXPECT_EQ(-EINVAL, fern_select(nullptr, 0, FERN_FOREVER));
    fern_select_case none[1];
    EXPECT_EQ(-EINVAL, fern_select(none, 0, FERN_FOREVER));
    EXPECT_EQ(-EINVAL, fern_select(nullptr, 1, 0));
    Chan c(sizeof(int), 1);
    int v = 0;
    fern_select_case k = recv_case(c, &v);
    EXPECT_EQ(-EINVAL, fern_select(&k, 1, -1)) << "negative deadline";
    k.op = (fern_select_op)3;
    EXPECT_EQ(-EINVAL, fern_select(&k, 1, 0));
    k.op = (fern_select_op)0;
    EXPECT_EQ(-EINVAL, fern_select(&k, 1, 0));
    std::vector<fern_select_case> many(FERN_SELECT_MAX + 1, recv_case(c, &v));
    EXPECT_EQ(-EINVAL, fern_select(many.data(), many.size(), 0));
    // All chans NULL with FERN_FOREVER could never return.
    fern_select_case nulls[2] = {recv_case(nullptr, &v), send_case(nullptr, &v)};
    EXPECT_EQ(-EINVAL, fern_select(nulls, 2, FERN_FOREVER));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(-EINVAL, fern_select(nullptr, 0, FERN_FOREVER));
        EXPECT_EQ(-EINVAL, fern_select(nulls, 2, FERN_FOREVER));
    }));
    // An invalid op after a valid ready case: nothing may fire.
    ASSERT_EQ(0, fern_chan_send(c, &v));
    fern_select_case mix[2] = {recv_case(c, &v), recv_case(c, &v)};
    mix[1].op = (fern_select_op)7;
    EXPECT_EQ(-EINVAL, fern_select(mix, 2, 0));
    EXPECT_EQ(1u, fern_chan_len(c)) << "a case fired although select said EINVAL";
    // FERN_SELECT_MAX cases are allowed.
    std::vector<fern_select_case> max(FERN_SELECT_MAX, recv_case(c, &v));
    EXPECT_GE(fern_select(max.data(), max.size(), 0), 0);
    EXPECT_EQ(0u, fern_chan_len(c));
}

TEST(Select, NonBlockingAndTimeouts) {
    Chan a(sizeof(int), 1), b(sizeof(int), 0);
    int x = -1, y = 5;
    for (int green = 0; green < 2; green++) {
        auto body = [&] {
            fern_select_case k[2] = {recv_case(a, &x), send_case(b, &y)};
            EXPECT_EQ(-ETIMEDOUT, fern_select(k, 2, 0));
            int64_t t0 = fern_now_ns();
            EXPECT_EQ(-ETIMEDOUT, fern_select(k, 2, t0 + ms(30)));
            int64_t el = fern_now_ns() - t0;
            EXPECT_GE(el, ms(30)) << "returned before the deadline";
            EXPECT_LT(el, ms(3000));
            EXPECT_EQ(-1, x);
            // State unchanged: nothing sent to b, nothing taken from a.
            EXPECT_EQ(EAGAIN, fern_chan_tryrecv(b, &x));
            EXPECT_EQ(0u, fern_chan_len(a));
            // n == 0 with a deadline sleeps until it.
            t0 = fern_now_ns();
            EXPECT_EQ(-ETIMEDOUT, fern_select(nullptr, 0, 0));
            EXPECT_EQ(-ETIMEDOUT, fern_select(nullptr, 0, t0 + ms(20)));
            EXPECT_GE(fern_now_ns() - t0, ms(20));
            fern_select_case nulls[1] = {recv_case(nullptr, &x)};
            EXPECT_EQ(-ETIMEDOUT, fern_select(nulls, 1, fern_now_ns() + ms(5)));
        };
        if (green)
            ASSERT_EQ(0, run_green(body));
        else
            body();
    }
    // Timed-out select left no waiters: a trysend to b finds no receiver.
    EXPECT_EQ(EAGAIN, fern_chan_trysend(b, &y));
}

TEST(Select, ReadyCaseFiresAndSetsResult) {
    Chan a(sizeof(int), 2), b(sizeof(int), 2);
    int seven = 7;
    ASSERT_EQ(0, fern_chan_send(b, &seven));
    int x = -1, y = -1;
    fern_select_case k[3] = {recv_case(a, &x), recv_case(nullptr, &x), recv_case(b, &y)};
    EXPECT_EQ(2, fern_select(k, 3, FERN_FOREVER));
    EXPECT_EQ(7, y);
    EXPECT_EQ(-1, x);
    EXPECT_EQ(0, k[2].result);
    // A send case on a buffered channel with room.
    int s = 9;
    fern_select_case k2[2] = {recv_case(a, &x), send_case(a, &s)};
    EXPECT_EQ(1, fern_select(k2, 2, 0));
    EXPECT_EQ(0, k2[1].result);
    EXPECT_EQ(1u, fern_chan_len(a));
    EXPECT_EQ(0, fern_chan_recv(a, &x));
    EXPECT_EQ(9, x);
    // Recv case with NULL elem discards.
    ASSERT_EQ(0, fern_chan_send(b, &seven));
    fern_select_case k3[1] = {recv_case(b, nullptr)};
    EXPECT_EQ(0, fern_select(k3, 1, 0));
    EXPECT_EQ(0u, fern_chan_len(b));
}

// Two always-ready buffered channels: each wins 40-60% of 10,000 selects.
TEST(Select, UniformChoice) {
    Chan a(sizeof(int), 1), b(sizeof(int), 1);
    int one = 1;
    ASSERT_EQ(0, fern_chan_send(a, &one));
    ASSERT_EQ(0, fern_chan_send(b, &one));
    const int kN = 10000;
    for (int green = 0; green < 2; green++) {
        int wins[2] = {0, 0};
        int other = 0;
        auto body = [&] {
            for (int i = 0; i < kN; i++) {
                int x = 0;
                fern_select_case k[2] = {recv_case(a, &x), recv_case(b, &x)};
                int r = fern_select(k, 2, 0);
                if (r == 0 || r == 1) {
                    wins[r]++;
                    // Refill what was taken.
                    EXPECT_EQ(0, fern_chan_trysend(r == 0 ? a : b, &one));
                } else {
                    other++;
                }
            }
        };
        if (green)
            ASSERT_EQ(0, run_green(body));
        else
            body();
        EXPECT_EQ(0, other);
        EXPECT_GE(wins[0], kN * 40 / 100) << "case 0 won " << wins[0] << " of " << kN << (green ? " (green)" : " (plain)");
        EXPECT_GE(wins[1], kN * 40 / 100) << "case 1 won " << wins[1] << " of " << kN << (green ? " (green)" : " (plain)");
    }
    // With a mix of ready send and recv cases too, and 4 cases.
    Chan c(sizeof(int), 100000), d(sizeof(int), 100000);
    int wins[4] = {0, 0, 0, 0};
    for (int i = 0; i < kN; i++) {
        int x = 0;
        fern_select_case k[4] = {recv_case(a, &x), send_case(c, &one), recv_case(b, &x), send_case(d, &one)};
        int r = fern_select(k, 4, 0);
        ASSERT_TRUE(r >= 0 && r < 4) << r;
        wins[r]++;
        if (r == 0) fern_chan_trysend(a, &one);
        if (r == 2) fern_chan_trysend(b, &one);
    }
    for (int i = 0; i < 4; i++)
        EXPECT_TRUE(wins[i] >= kN * 20 / 100 && wins[i] <= kN * 30 / 100) << "case " << i << " won " << wins[i];
    while (fern_chan_tryrecv(c, nullptr) == 0) {
    }
    while (fern_chan_tryrecv(d, nullptr) == 0) {
    }
    fern_chan_tryrecv(a, nullptr);
    fern_chan_tryrecv(b, nullptr);
}

// Exactly one case fires: the others leave their channels untouched.
TEST(Select, ExactlyOneFires) {
    Chan a(sizeof(int), 4), b(sizeof(int), 4), c(sizeof(int), 4);
    int v = 3;
    ASSERT_EQ(0, fern_chan_send(a, &v));
    ASSERT_EQ(0, fern_chan_send(b, &v));
    for (int i = 0; i < 200; i++) {
        int x = -1, y = -1, s = 42;
        size_t la = fern_chan_len(a), lb = fern_chan_len(b), lc = fern_chan_len(c);
        fern_select_case k[3] = {recv_case(a, &x), recv_case(b, &y), send_case(c, &s)};
        int r = fern_select(k, 3, 0);
        ASSERT_TRUE(r >= 0 && r < 3);
        EXPECT_EQ(la - (r == 0), fern_chan_len(a));
        EXPECT_EQ(lb - (r == 1), fern_chan_len(b));
        EXPECT_EQ(lc + (r == 2), fern_chan_len(c));
        EXPECT_EQ(r == 0 ? 3 : -1, x);
        EXPECT_EQ(r == 1 ? 3 : -1, y);
        // Restore.
        if (r == 0) fern_chan_send(a, &v);
        if (r == 1) fern_chan_send(b, &v);
        if (r == 2) fern_chan_recv(c, nullptr);
    }
    fern_chan_recv(a, nullptr);
    fern_chan_recv(b, nullptr);
}

TEST(Select, NullChanCaseNeverFires) {
    Chan a(sizeof(int), 1);
    int v = 1, x = 0;
    ASSERT_EQ(0, fern_chan_send(a, &v));
    for (int i = 0; i < 100; i++) {
        fern_select_case k[4] = {recv_case(nullptr, &x), send_case(nullptr, &v), recv_case(a, &x),
                                 recv_case(nullptr, nullptr)};
        ASSERT_EQ(2, fern_select(k, 4, 0));
        ASSERT_EQ(0, fern_chan_send(a, &v));
    }
    fern_chan_recv(a, nullptr);
    // Blocking with a NULL case: woken by the real one.
    Watchdog wd(30, "Select.NullChanCaseNeverFires");
    std::thread p([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        EXPECT_EQ(0, fern_chan_send(a, &v));
    });
    fern_select_case k[2] = {send_case(nullptr, &v), recv_case(a, &x)};
    EXPECT_EQ(1, fern_select(k, 2, fern_now_ns() + ms(5000)));
    p.join();
}

TEST(Select, ClosedChannelFiresWithEpipe) {
    Chan a(sizeof(int), 1), b(sizeof(int), 0);
    int v = 5, x = -1;
    ASSERT_EQ(0, fern_chan_send(a, &v));
    ASSERT_EQ(0, fern_chan_close(a));
    ASSERT_EQ(0, fern_chan_close(b));
    // Buffered element first, then EPIPE.
    fern_select_case k[2] = {recv_case(nullptr, &x), recv_case(a, &x)};
    EXPECT_EQ(1, fern_select(k, 2, 0));
    EXPECT_EQ(0, k[1].result);
    EXPECT_EQ(5, x);
    x = -1;
    EXPECT_EQ(1, fern_select(k, 2, FERN_FOREVER));
    EXPECT_EQ(EPIPE, k[1].result);
    EXPECT_EQ(-1, x);
    // Send on a closed channel fires with EPIPE.
    fern_select_case s[2] = {send_case(b, &v), recv_case(nullptr, &x)};
    EXPECT_EQ(0, fern_select(s, 2, FERN_FOREVER));
    EXPECT_EQ(EPIPE, s[0].result);
    EXPECT_EQ(0u, fern_chan_len(b));
}

// A blocked select is woken by a close from another thread: result EPIPE.
TEST(Select, BlockedSelectWokenByClose) {
    Watchdog wd(30, "Select.BlockedSelectWokenByClose");
    for (int green = 0; green < 2; green++) {
        Chan a(sizeof(int), 0), b(sizeof(int), 2);
        int x = -1, s = 3;
        int full = 0;
        ASSERT_EQ(0, fern_chan_send(b, &full));
        ASSERT_EQ(0, fern_chan_send(b, &full));
        std::atomic<int> r{-100}, res{-100};
        auto body = [&] {
            fern_select_case k[2] = {recv_case(a, &x), send_case(b, &s)};
            r = fern_select(k, 2, fern_now_ns() + ms(10000));
            res = r >= 0 ? k[r].result : -1;
        };
        fern_thread *t = nullptr;
        std::thread p;
        if (green)
            ASSERT_EQ(0, spawn(&t, nullptr, body));
        else
            p = std::thread(body);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_EQ(-100, r.load());
        EXPECT_EQ(EBUSY, fern_chan_destroy(a)) << "select waiter not queued on a";
        EXPECT_EQ(0, fern_chan_close(b));
        if (green)
            ASSERT_EQ(0, fern_join(t, nullptr));
        else
            p.join();
        EXPECT_EQ(1, r.load());
        EXPECT_EQ(EPIPE, res.load());
        EXPECT_EQ(2u, fern_chan_len(b));
        EXPECT_EQ(-1, x);
        // The select's other waiter is gone.
        EXPECT_EQ(EAGAIN, fern_chan_trysend(a, &s));
        fern_chan_recv(b, nullptr);
        fern_chan_recv(b, nullptr);
    }
}

// A blocked select (green or plain) woken by a sender/receiver (green or
// plain) on one of its channels; the value goes to the right case.
TEST(Select, WokenByOtherThread) {
    Watchdog wd(60, "Select.WokenByOtherThread");
    for (int sel_green = 0; sel_green < 2; sel_green++) {
        for (int peer_green = 0; peer_green < 2; peer_green++) {
            for (int which = 0; which < 2; which++) {
                Chan a(sizeof(int), 0), b(sizeof(int), 0);
                int x = -1, s = 77;
                std::atomic<int> r{-100};
                auto sel = [&] {
                    fern_select_case k[3] = {recv_case(a, &x), send_case(b, &s), recv_case(nullptr, &x)};
                    r = fern_select(k, 3, FERN_FOREVER);
                    EXPECT_EQ(0, k[r.load() >= 0 ? r.load() : 0].result);
                };
                int got = -1;
                auto peer = [&] {
                    if (fern_is_green())
                        fern_sleep_ns(ms(10));
                    else
                        std::this_thread::sleep_for(std::chrono::milliseconds(10));
                    if (which == 0) {
                        int v = 55;
                        EXPECT_EQ(0, fern_chan_send(a, &v));
                    } else {
                        EXPECT_EQ(0, fern_chan_recv(b, &got));
                    }
                };
                fern_thread *st = nullptr, *pt = nullptr;
                std::thread sp, pp;
                if (sel_green)
                    ASSERT_EQ(0, spawn(&st, nullptr, sel));
                else
                    sp = std::thread(sel);
                if (peer_green)
                    ASSERT_EQ(0, spawn(&pt, nullptr, peer));
                else
                    pp = std::thread(peer);
                if (st) {
                    ASSERT_EQ(0, fern_join(st, nullptr));
                }
                if (sp.joinable()) sp.join();
                if (pt) {
                    ASSERT_EQ(0, fern_join(pt, nullptr));
                }
                if (pp.joinable()) pp.join();
                EXPECT_EQ(which, r.load()) << "sel_green=" << sel_green << " peer_green=" << peer_green;
                if (which == 0) {
                    EXPECT_EQ(55, x);
                } else {
                    EXPECT_EQ(77, got);
                    EXPECT_EQ(-1, x);
                }
                // No waiter left over on the other channel.
                int z = 0;
                EXPECT_EQ(EAGAIN, fern_chan_trysend(a, &z));
                EXPECT_EQ(EAGAIN, fern_chan_tryrecv(b, &z));
            }
        }
    }
}

// Two selects facing each other over unbuffered channels (one sends where the
// other receives) complete each rendezvous exactly once.
TEST(Select, SelectAgainstSelect) {
    Watchdog wd(60, "Select.SelectAgainstSelect");
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 2));
    Chan a(sizeof(int), 0), b(sizeof(int), 0);
    const int kN = (int)scaled(2000, 100);
    long sum_sent = 0, sum_recv = 0;
    fern_thread *t1 = nullptr, *t2 = nullptr;
    ASSERT_EQ(0, spawn_on(&t1, cl, [&] {
        for (int i = 1; i <= kN; i++) {
            int v = i, w = i;
            fern_select_case k[2] = {send_case(a, &v), send_case(b, &w)};
            int r = fern_select(k, 2, fern_now_ns() + ms(10000));
            EXPECT_TRUE(r == 0 || r == 1) << r;
            sum_sent += i;
        }
    }));
    ASSERT_EQ(0, spawn_on(&t2, nullptr, [&] {
        for (int i = 1; i <= kN; i++) {
            int x = 0, y = 0;
            fern_select_case k[2] = {recv_case(b, &y), recv_case(a, &x)};
            int r = fern_select(k, 2, fern_now_ns() + ms(10000));
            EXPECT_TRUE(r == 0 || r == 1) << r;
            if (r == 0) {
                EXPECT_EQ(0, x);
                sum_recv += y;
            }
            if (r == 1) {
                EXPECT_EQ(0, y);
                sum_recv += x;
            }
        }
    }));
    ASSERT_EQ(0, fern_join(t1, nullptr));
    ASSERT_EQ(0, fern_join(t2, nullptr));
    EXPECT_EQ(sum_sent, sum_recv);
    EXPECT_EQ(0, fern_cluster_destroy(cl));
}

// Deadline respected while another select case never becomes ready, green
// and plain, several deadlines.
TEST(Select, DeadlineRespected) {
    Chan a(sizeof(int), 0);
    int x;
    for (int green = 0; green < 2; green++) {
        auto body = [&] {
            for (int d : {1, 5, 25}) {
                fern_select_case k[1] = {recv_case(a, &x)};
                int64_t t0 = fern_now_ns();
                EXPECT_EQ(-ETIMEDOUT, fern_select(k, 1, t0 + ms(d)));
                int64_t el = fern_now_ns() - t0;
                EXPECT_GE(el, ms(d));
                EXPECT_LT(el, ms(d) + ms(2000));
            }
        };
        if (green)
            ASSERT_EQ(0, run_green(body));
        else
            body();
    }
}

// Same channel twice in one select (send and recv on a buffered channel).
TEST(Select, SameChannelTwice) {
    Chan a(sizeof(int), 1);
    int v = 4, x = -1;
    fern_select_case k[2] = {recv_case(a, &x), send_case(a, &v)};
    EXPECT_EQ(1, fern_select(k, 2, 0)) << "empty buffer: only the send is ready";
    EXPECT_EQ(0, fern_select(k, 2, 0)) << "full buffer: only the recv is ready";
    EXPECT_EQ(4, x);
    // Two recv cases on one channel, one element: exactly one fires.
    ASSERT_EQ(0, fern_chan_send(a, &v));
    int y = -1;
    x = -1;
    fern_select_case k2[2] = {recv_case(a, &x), recv_case(a, &y)};
    int r = fern_select(k2, 2, 0);
    ASSERT_TRUE(r == 0 || r == 1);
    EXPECT_EQ(4, r == 0 ? x : y);
    EXPECT_EQ(-1, r == 0 ? y : x);
    EXPECT_EQ(-ETIMEDOUT, fern_select(k2, 2, fern_now_ns() + ms(5)));
}

} // namespace
