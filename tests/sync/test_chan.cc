// SPDX-License-Identifier: MIT
// fern_chan: create errors (EINVAL, ENOMEM), buffered and unbuffered
// send/recv, try and timed forms, close semantics (EPIPE, drain then EPIPE,
// blocked senders and receivers woken), FIFO per sender, large elements,
// discarding receive, len/cap, destroy EBUSY, green and plain mixed.
#include "fern_test.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

// A 2^60-byte malloc must fail with NULL (ENOMEM), not abort under the
// sanitizers' allocators (TSAN_OPTIONS from ctest keeps halt_on_error etc.).
extern "C" const char *__asan_default_options() { return "allocator_may_return_null=1"; }
extern "C" const char *__tsan_default_options() {
    return "allocator_may_return_null=1 halt_on_error=1 second_deadlock_stack=1";
}

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

TEST(Chan, CreateErrors) {
    fern_chan *ch = nullptr;
    EXPECT_EQ(EINVAL, fern_chan_create(nullptr, 8, 1));
    EXPECT_EQ(EINVAL, fern_chan_create(&ch, 0, 1));
    EXPECT_EQ(EINVAL, fern_chan_create(&ch, 0, 0));
    EXPECT_EQ(EINVAL, fern_chan_create(&ch, 2, SIZE_MAX));
    EXPECT_EQ(EINVAL, fern_chan_create(&ch, SIZE_MAX, 2));
    EXPECT_EQ(EINVAL, fern_chan_create(&ch, (size_t)1 << 33, (size_t)1 << 33));
    int rc = fern_chan_create(&ch, (size_t)1 << 20, (size_t)1 << 40);
    EXPECT_TRUE(rc == ENOMEM || rc == EINVAL) << "rc=" << rc;
    if (rc == 0) fern_chan_destroy(ch);
}

TEST(Chan, NullArgs) {
    Chan c(sizeof(int), 1);
    int v = 1;
    EXPECT_EQ(EINVAL, fern_chan_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_chan_close(nullptr));
    EXPECT_EQ(EINVAL, fern_chan_send(nullptr, &v));
    EXPECT_EQ(EINVAL, fern_chan_send(c, nullptr));
    EXPECT_EQ(EINVAL, fern_chan_trysend(nullptr, &v));
    EXPECT_EQ(EINVAL, fern_chan_trysend(c, nullptr));
    EXPECT_EQ(EINVAL, fern_chan_timedsend(nullptr, &v, FERN_FOREVER));
    EXPECT_EQ(EINVAL, fern_chan_timedsend(c, nullptr, FERN_FOREVER));
    EXPECT_EQ(EINVAL, fern_chan_timedsend(c, &v, -1));
    EXPECT_EQ(EINVAL, fern_chan_recv(nullptr, &v));
    EXPECT_EQ(EINVAL, fern_chan_tryrecv(nullptr, &v));
    EXPECT_EQ(EINVAL, fern_chan_timedrecv(nullptr, &v, FERN_FOREVER));
    EXPECT_EQ(EINVAL, fern_chan_timedrecv(c, &v, -1));
    EXPECT_EQ(0u, fern_chan_len(c)) << "an EINVAL call changed the channel";
}

TEST(Chan, LenCap) {
    Chan b(sizeof(int), 3), u(sizeof(int), 0);
    EXPECT_EQ(3u, fern_chan_cap(b));
    EXPECT_EQ(0u, fern_chan_cap(u));
    EXPECT_EQ(0u, fern_chan_len(b));
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(0, fern_chan_trysend(b, &i));
        EXPECT_EQ((size_t)i + 1, fern_chan_len(b));
    }
    int x = 9;
    EXPECT_EQ(EAGAIN, fern_chan_trysend(b, &x));
    EXPECT_EQ(3u, fern_chan_len(b));
    EXPECT_EQ(0, fern_chan_recv(b, &x));
    EXPECT_EQ(2u, fern_chan_len(b));
    EXPECT_EQ(EAGAIN, fern_chan_trysend(u, &x)) << "unbuffered send without receiver";
    EXPECT_EQ(EAGAIN, fern_chan_tryrecv(u, &x));
    EXPECT_EQ(0u, fern_chan_len(u));
    EXPECT_EQ(0, fern_chan_recv(b, nullptr));
    EXPECT_EQ(0, fern_chan_recv(b, nullptr));
}

TEST(Chan, BufferedFifoAndWraparound) {
    Chan c(sizeof(uint64_t), 5);
    uint64_t next_send = 0, next_recv = 0;
    for (int round = 0; round < 50; round++) {
        int n = 1 + round % 5;
        for (int i = 0; i < n; i++) {
            ASSERT_EQ(0, fern_chan_send(c, &next_send));
            next_send++;
        }
        int m = 1 + (round * 7) % n;
        for (int i = 0; i < m; i++) {
            uint64_t v = ~0ull;
            ASSERT_EQ(0, fern_chan_recv(c, &v));
            ASSERT_EQ(next_recv, v);
            next_recv++;
        }
        // Drain to keep room.
        while (fern_chan_len(c) > 0) {
            uint64_t v;
            ASSERT_EQ(0, fern_chan_tryrecv(c, &v));
            ASSERT_EQ(next_recv, v);
            next_recv++;
        }
    }
    EXPECT_EQ(next_send, next_recv);
}

TEST(Chan, RecvNullDiscards) {
    Chan c(sizeof(int), 4);
    for (int i = 0; i < 4; i++) ASSERT_EQ(0, fern_chan_send(c, &i));
    EXPECT_EQ(0, fern_chan_recv(c, nullptr));
    EXPECT_EQ(0, fern_chan_tryrecv(c, nullptr));
    EXPECT_EQ(0, fern_chan_timedrecv(c, nullptr, fern_now_ns() + ms(10)));
    int v = -1;
    EXPECT_EQ(0, fern_chan_recv(c, &v));
    EXPECT_EQ(3, v);
    // Unbuffered: a receiver that discards still takes the sender's element.
    Chan u(sizeof(int), 0);
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        int a = 11, b = 12;
        EXPECT_EQ(0, fern_chan_send(u, &a));
        EXPECT_EQ(0, fern_chan_send(u, &b));
    }));
    EXPECT_EQ(0, fern_chan_recv(u, nullptr));
    v = 0;
    EXPECT_EQ(0, fern_chan_recv(u, &v));
    EXPECT_EQ(12, v);
    ASSERT_EQ(0, fern_join(t, nullptr));
}

TEST(Chan, UnbufferedRendezvousGreenAndPlain) {
    Watchdog wd(30, "Chan.UnbufferedRendezvousGreenAndPlain");
    Chan c(sizeof(int), 0);
    // green -> plain
    fern_thread *t = nullptr;
    std::atomic<int> sent{0};
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        for (int i = 0; i < 100; i++) {
            EXPECT_EQ(0, fern_chan_send(c, &i));
            sent++;
        }
    }));
    for (int i = 0; i < 100; i++) {
        int v = -1;
        ASSERT_EQ(0, fern_chan_recv(c, &v));
        ASSERT_EQ(i, v);
    }
    ASSERT_EQ(0, fern_join(t, nullptr));
    // plain -> green
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        for (int i = 0; i < 100; i++) {
            int v = -1;
            EXPECT_EQ(0, fern_chan_recv(c, &v));
            EXPECT_EQ(i, v);
        }
    }));
    for (int i = 0; i < 100; i++) ASSERT_EQ(0, fern_chan_send(c, &i));
    ASSERT_EQ(0, fern_join(t, nullptr));
    // A sender on an unbuffered channel does not return before a receiver
    // took the value.
    std::atomic<int> done{0};
    std::thread p([&] {
        int v = 42;
        EXPECT_EQ(0, fern_chan_send(c, &v));
        done = 1;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(0, done.load()) << "unbuffered send returned without a receiver";
    EXPECT_EQ(0u, fern_chan_len(c));
    int v = 0;
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(0, fern_chan_recv(c, &v)); }));
    p.join();
    EXPECT_EQ(42, v);
}

struct Big {
    uint64_t id;
    uint8_t bytes[240];
    uint64_t check;
};
static_assert(sizeof(Big) == 256, "256-byte element");

Big make_big(uint64_t id) {
    Big b;
    b.id = id;
    for (size_t i = 0; i < sizeof b.bytes; i++) b.bytes[i] = (uint8_t)(id * 31 + i * 7);
    b.check = id ^ 0xdeadbeefcafef00dull;
    return b;
}
bool big_ok(const Big &b) {
    for (size_t i = 0; i < sizeof b.bytes; i++)
        if (b.bytes[i] != (uint8_t)(b.id * 31 + i * 7)) return false;
    return b.check == (b.id ^ 0xdeadbeefcafef00dull);
}

TEST(Chan, LargeElementsIntact) {
    Watchdog wd(30, "Chan.LargeElementsIntact");
    for (size_t cap : {(size_t)0, (size_t)1, (size_t)7}) {
        Chan c(sizeof(Big), cap);
        const int n = 500;
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn(&t, nullptr, [&] {
            for (int i = 0; i < n; i++) {
                Big b = make_big((uint64_t)i);
                EXPECT_EQ(0, i % 3 ? fern_chan_send(c, &b) : fern_chan_timedsend(c, &b, fern_now_ns() + ms(5000)));
                std::memset(&b, 0xee, sizeof b);  // the channel must have copied it
            }
        }));
        ASSERT_EQ(0, run_green([&] {
            for (int i = 0; i < n; i++) {
                Big b;
                std::memset(&b, 0, sizeof b);
                EXPECT_EQ(0, fern_chan_recv(c, &b));
                EXPECT_EQ((uint64_t)i, b.id);
                EXPECT_TRUE(big_ok(b)) << "element " << i << " corrupted (cap " << cap << ")";
            }
        }));
        ASSERT_EQ(0, fern_join(t, nullptr));
    }
}

// FIFO per sender: several senders (green on 2 workers + plain), one receiver;
// each sender's values arrive in order and nothing is lost or duplicated.
TEST(Chan, FifoPerSenderManySenders) {
    Watchdog wd(60, "Chan.FifoPerSenderManySenders");
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 2));
    for (size_t cap : {(size_t)0, (size_t)3}) {
        Chan c(sizeof(uint64_t), cap);
        const int kSenders = 6;
        const uint64_t per = (uint64_t)scaled(2000, 100);
        std::vector<fern_thread *> ts;
        for (int s = 0; s < kSenders - 1; s++) {
            fern_thread *t = nullptr;
            ASSERT_EQ(0, spawn_on(&t, cl, [&, s] {
                for (uint64_t i = 0; i < per; i++) {
                    uint64_t v = ((uint64_t)s << 32) | i;
                    EXPECT_EQ(0, fern_chan_send(c, &v));
                }
            }));
            ts.push_back(t);
        }
        std::thread p([&] {
            for (uint64_t i = 0; i < per; i++) {
                uint64_t v = ((uint64_t)(kSenders - 1) << 32) | i;
                EXPECT_EQ(0, fern_chan_send(c, &v));
            }
        });
        std::vector<uint64_t> next(kSenders, 0);
        long bad = 0;
        ASSERT_EQ(0, run_green([&] {
            for (uint64_t k = 0; k < per * kSenders; k++) {
                uint64_t v;
                EXPECT_EQ(0, fern_chan_recv(c, &v));
                unsigned s = (unsigned)(v >> 32);
                if (s >= (unsigned)kSenders || (v & 0xffffffffu) != next[s]) {
                    if (bad++ < 5) ADD_FAILURE() << "sender " << s << " value " << (v & 0xffffffffu)
                                                  << " expected " << (s < (unsigned)kSenders ? next[s] : 0);
                } else {
                    next[s]++;
                }
            }
        }));
        for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        p.join();
        EXPECT_EQ(0, bad);
        uint64_t extra;
        EXPECT_EQ(EAGAIN, fern_chan_tryrecv(c, &extra));
    }
    EXPECT_EQ(0, fern_cluster_destroy(cl));
}

TEST(Chan, TimedOpsTimeOutAndChangeNothing) {
    Chan b(sizeof(int), 1), u(sizeof(int), 0);
    int v = 5, r = -1;
    for (int green = 0; green < 2; green++) {
        auto body = [&] {
            int64_t t0 = fern_now_ns();
            EXPECT_EQ(ETIMEDOUT, fern_chan_timedrecv(b, &r, t0 + ms(20)));
            EXPECT_GE(fern_now_ns() - t0, ms(20));
            EXPECT_EQ(-1, r) << "timed-out recv wrote the destination";
            EXPECT_EQ(ETIMEDOUT, fern_chan_timedrecv(u, &r, fern_now_ns() + ms(5)));
            EXPECT_EQ(ETIMEDOUT, fern_chan_timedrecv(u, &r, 0));
            t0 = fern_now_ns();
            EXPECT_EQ(ETIMEDOUT, fern_chan_timedsend(u, &v, t0 + ms(20)));
            EXPECT_GE(fern_now_ns() - t0, ms(20));
            EXPECT_EQ(ETIMEDOUT, fern_chan_timedsend(u, &v, 0));
            EXPECT_EQ(0, fern_chan_timedsend(b, &v, 0)) << "room available: past deadline still sends";
            EXPECT_EQ(ETIMEDOUT, fern_chan_timedsend(b, &v, fern_now_ns() + ms(5)));
            EXPECT_EQ(1u, fern_chan_len(b));
            EXPECT_EQ(0, fern_chan_timedrecv(b, &r, 0));
            EXPECT_EQ(5, r);
            r = -1;
            EXPECT_EQ(0u, fern_chan_len(b));
            EXPECT_EQ(0u, fern_chan_len(u));
        };
        if (green)
            ASSERT_EQ(0, run_green(body));
        else
            body();
    }
    // No timed-out waiter left behind: a trysend on the unbuffered channel
    // finds no receiver, and the channels can be destroyed.
    EXPECT_EQ(EAGAIN, fern_chan_trysend(u, &v));
    EXPECT_EQ(EAGAIN, fern_chan_tryrecv(u, &r));
}

TEST(Chan, TimedRecvWokenBySender) {
    Watchdog wd(30, "Chan.TimedRecvWokenBySender");
    Chan c(sizeof(int), 0);
    int got = -1, rc = -1;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] { rc = fern_chan_timedrecv(c, &got, fern_now_ns() + ms(5000)); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    int v = 77;
    EXPECT_EQ(0, fern_chan_timedsend(c, &v, fern_now_ns() + ms(5000)));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, rc);
    EXPECT_EQ(77, got);
    // Plain timed recv woken by a green sender.
    std::thread p([&] { rc = fern_chan_timedrecv(c, &got, fern_now_ns() + ms(5000)); });
    ASSERT_EQ(0, run_green([&] {
        fern_sleep_ns(ms(10));
        int w = 78;
        EXPECT_EQ(0, fern_chan_send(c, &w));
    }));
    p.join();
    EXPECT_EQ(0, rc);
    EXPECT_EQ(78, got);
}

TEST(Chan, CloseSemantics) {
    Chan c(sizeof(int), 4);
    for (int i = 0; i < 3; i++) ASSERT_EQ(0, fern_chan_send(c, &i));
    EXPECT_EQ(0, fern_chan_close(c));
    EXPECT_EQ(EPIPE, fern_chan_close(c)) << "close twice";
    int v = 9;
    EXPECT_EQ(EPIPE, fern_chan_send(c, &v));
    EXPECT_EQ(EPIPE, fern_chan_trysend(c, &v));
    EXPECT_EQ(EPIPE, fern_chan_timedsend(c, &v, fern_now_ns() + ms(5)));
    EXPECT_EQ(3u, fern_chan_len(c)) << "send on closed channel added an element";
    // Drain, then EPIPE.
    ASSERT_EQ(0, run_green([&] {
        int r = -1;
        EXPECT_EQ(0, fern_chan_recv(c, &r));
        EXPECT_EQ(0, r);
        EXPECT_EQ(0, fern_chan_tryrecv(c, &r));
        EXPECT_EQ(1, r);
    }));
    int r = -1;
    EXPECT_EQ(0, fern_chan_timedrecv(c, &r, fern_now_ns() + ms(5)));
    EXPECT_EQ(2, r);
    EXPECT_EQ(EPIPE, fern_chan_recv(c, &r));
    EXPECT_EQ(EPIPE, fern_chan_tryrecv(c, &r));
    EXPECT_EQ(EPIPE, fern_chan_timedrecv(c, &r, fern_now_ns() + ms(5)));
    EXPECT_EQ(EPIPE, fern_chan_timedrecv(c, &r, 0));
    EXPECT_EQ(EPIPE, fern_chan_recv(c, nullptr));
    EXPECT_EQ(2, r);

    Chan u(sizeof(int), 0);
    EXPECT_EQ(0, fern_chan_close(u));
    EXPECT_EQ(EPIPE, fern_chan_recv(u, &r));
    EXPECT_EQ(EPIPE, fern_chan_send(u, &v));
    EXPECT_EQ(EPIPE, fern_chan_close(u));
}

// Close wakes blocked senders (EPIPE: not sent) and blocked receivers (EPIPE),
// green and plain, buffered (full) and unbuffered.
TEST(Chan, CloseWakesBlockedParties) {
    Watchdog wd(30, "Chan.CloseWakesBlockedParties");
    for (size_t cap : {(size_t)0, (size_t)2}) {
        Chan s(sizeof(int), cap), r(sizeof(int), cap);
        int fill = 1;
        for (size_t i = 0; i < cap; i++) ASSERT_EQ(0, fern_chan_send(s, &fill));
        std::atomic<int> send_eps{0}, recv_eps{0}, other{0};
        std::vector<fern_thread *> ts;
        for (int i = 0; i < 4; i++) {
            fern_thread *t = nullptr;
            ASSERT_EQ(0, spawn(&t, nullptr, [&, i] {
                int v = 100 + i;
                int rc = i % 2 ? fern_chan_send(s, &v) : fern_chan_timedsend(s, &v, fern_now_ns() + ms(10000));
                (rc == EPIPE ? send_eps : other)++;
                int x = -1;
                rc = i % 2 ? fern_chan_recv(r, &x) : fern_chan_timedrecv(r, &x, fern_now_ns() + ms(10000));
                (rc == EPIPE ? recv_eps : other)++;
                if (x != -1) other++;
            }));
            ts.push_back(t);
        }
        std::thread p([&] {
            int v = 200;
            int rc = fern_chan_send(s, &v);
            (rc == EPIPE ? send_eps : other)++;
            int x = -1;
            rc = fern_chan_recv(r, &x);
            (rc == EPIPE ? recv_eps : other)++;
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        EXPECT_EQ(0, send_eps.load());
        EXPECT_EQ(EBUSY, fern_chan_destroy(s)) << "destroy with blocked senders";
        ASSERT_EQ(0, run_green([&] { EXPECT_EQ(0, fern_chan_close(s)); }));
        ASSERT_TRUE(wait_until([&] { return send_eps.load() == 5; })) << "senders not woken by close";
        EXPECT_EQ(cap, fern_chan_len(s)) << "a woken sender's element entered the buffer";
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_EQ(0, recv_eps.load());
        EXPECT_EQ(EBUSY, fern_chan_destroy(r)) << "destroy with blocked receivers";
        EXPECT_EQ(0, fern_chan_close(r));
        for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        p.join();
        EXPECT_EQ(5, recv_eps.load());
        EXPECT_EQ(0, other.load());
        // Buffered elements survive the close.
        for (size_t i = 0; i < cap; i++) {
            int x = 0;
            EXPECT_EQ(0, fern_chan_recv(s, &x));
            EXPECT_EQ(1, x);
        }
        EXPECT_EQ(EPIPE, fern_chan_recv(s, nullptr));
    }
}

// A receiver blocked on a buffered channel is fed directly; senders blocked on
// a full buffer are admitted in order as room appears.
TEST(Chan, BlockedSendersOnFullBuffer) {
    Watchdog wd(30, "Chan.BlockedSendersOnFullBuffer");
    Chan c(sizeof(int), 2);
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 2; i++) ASSERT_EQ(0, fern_chan_send(c, &i));
    for (int i = 2; i < 6; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn(&t, nullptr, [&, i] { EXPECT_EQ(0, fern_chan_send(c, &i)); }));
        ts.push_back(t);
        // Queue them in order.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(2u, fern_chan_len(c));
    std::vector<int> got;
    for (int i = 0; i < 6; i++) {
        int v = -1;
        ASSERT_EQ(0, fern_chan_recv(c, &v));
        got.push_back(v);
        EXPECT_LE(fern_chan_len(c), 2u);
    }
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    for (int i = 0; i < 6; i++) EXPECT_EQ(i, got[i]);
    int v;
    EXPECT_EQ(EAGAIN, fern_chan_tryrecv(c, &v));
}

// Many producers / consumers (green on 2 workers + plain) across an
// unbuffered and a buffered channel: every value received exactly once.
TEST(Chan, ManyToManyExactlyOnce) {
    Watchdog wd(60, "Chan.ManyToManyExactlyOnce");
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 2));
    for (size_t cap : {(size_t)0, (size_t)8}) {
        Chan c(sizeof(uint32_t), cap);
        const int kProd = 4, kCons = 4;
        const uint32_t per = (uint32_t)scaled(3000, 100);
        std::vector<std::atomic<int>> seen(kProd * per);
        for (auto &s : seen) s = 0;
        std::vector<fern_thread *> ts;
        for (int p = 0; p < kProd; p++) {
            fern_thread *t = nullptr;
            ASSERT_EQ(0, spawn_on(&t, p % 2 ? cl : nullptr, [&, p] {
                for (uint32_t i = 0; i < per; i++) {
                    uint32_t v = p * per + i;
                    int rc;
                    if (i % 3 == 0) {
                        while ((rc = fern_chan_timedsend(c, &v, fern_now_ns() + 50000)) == ETIMEDOUT) {
                        }
                    } else if (i % 3 == 1) {
                        while ((rc = fern_chan_trysend(c, &v)) == EAGAIN) fern_yield();
                    } else {
                        rc = fern_chan_send(c, &v);
                    }
                    EXPECT_EQ(0, rc);
                }
            }));
            ts.push_back(t);
        }
        std::atomic<long> total{0};
        auto consume = [&](bool green) {
            for (;;) {
                uint32_t v;
                int rc = fern_chan_timedrecv(c, &v, fern_now_ns() + ms(1));
                if (rc == ETIMEDOUT) continue;
                if (rc == EPIPE) return;
                EXPECT_EQ(0, rc);
                if (v < seen.size()) seen[v]++;
                total++;
                if (green && (v & 15) == 0) fern_yield();
            }
        };
        std::vector<fern_thread *> cs;
        for (int k = 0; k < kCons - 1; k++) {
            fern_thread *t = nullptr;
            ASSERT_EQ(0, spawn_on(&t, k % 2 ? cl : nullptr, [&] { consume(true); }));
            cs.push_back(t);
        }
        std::thread pc([&] { consume(false); });
        for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        // Wait for the buffer to drain before closing? Not needed: receivers
        // drain after close.
        EXPECT_EQ(0, fern_chan_close(c));
        for (auto *t : cs) ASSERT_EQ(0, fern_join(t, nullptr));
        pc.join();
        EXPECT_EQ((long)kProd * per, total.load());
        long bad = 0;
        for (size_t i = 0; i < seen.size(); i++)
            if (seen[i].load() != 1 && bad++ < 5) ADD_FAILURE() << "value " << i << " seen " << seen[i].load() << " times";
        EXPECT_EQ(0, bad);
    }
    EXPECT_EQ(0, fern_cluster_destroy(cl));
}

TEST(Chan, DestroyIdle) {
    fern_chan *ch = nullptr;
    ASSERT_EQ(0, fern_chan_create(&ch, 1, 0));
    EXPECT_EQ(0, fern_chan_destroy(ch));
    ASSERT_EQ(0, fern_chan_create(&ch, 16, 1000));
    char buf[16] = {1};
    EXPECT_EQ(0, fern_chan_send(ch, buf));
    EXPECT_EQ(0, fern_chan_destroy(ch)) << "buffered elements do not make it busy";
}

} // namespace
