// SPDX-License-Identifier: MIT
// Channel stress: producers, consumers and selectors (green threads on a
// 4-worker cluster and on the default cluster, plus plain pthreads) over
// several buffered and unbuffered channels, with a random mix of blocking,
// try, timed (random, often racing, deadlines) and select operations, and a
// close of every channel at the end. Every value carries a unique 64-bit id;
// a value whose send succeeded must be received exactly once, a value whose
// send failed (EAGAIN / ETIMEDOUT / EPIPE, or a select that did not pick it)
// must never be received. A watchdog aborts after 120 s.
// Size: ~810k send attempts * FERN_STRESS_SCALE.
#include "../fern_test.h"

#include <memory>
#include <random>
#include <vector>

using namespace fern_test;

namespace {

struct Msg {
    uint64_t id;
    uint64_t check;
};
constexpr uint64_t kMagic = 0x9e3779b97f4a7c15ull;
Msg make_msg(uint64_t id) { return Msg{id, id * kMagic ^ 0x5555}; }

constexpr int kChans = 5;
const size_t kCaps[kChans] = {0, 1, 16, 0, 3};

struct World {
    fern_chan *ch[kChans] = {};
    uint64_t ids = 0;                        // id space size
    std::unique_ptr<std::atomic<uint8_t>[]> sent, recvd;
    std::atomic<long> n_sent{0}, n_recv{0}, n_fail{0}, errors{0}, corrupt{0};
    std::atomic<bool> producers_done{false};
    std::atomic<int> closed{0};
};
World *g;

void err(const char *what, long v) {
    if (g->errors++ < 20) std::fprintf(stderr, "stress_chan: %s (%ld)\n", what, v);
}

void got(const Msg &m) {
    if (m.id >= g->ids || m.check != (m.id * kMagic ^ 0x5555)) {
        g->corrupt++;
        err("corrupt message", (long)m.id);
        return;
    }
    uint8_t prev = g->recvd[m.id].fetch_add(1);
    if (prev != 0) err("id received twice", (long)m.id);
    g->n_recv++;
}

void mark_sent(uint64_t id) {
    if (g->sent[id].exchange(1) != 0) err("id sent twice", (long)id);
    g->n_sent++;
}

int64_t rand_deadline(std::mt19937_64 &rng) {
    switch (rng() % 4) {
    case 0: return 0;  // past: non-blocking
    case 1: return fern_now_ns() + (int64_t)(rng() % 20000);  // < 20 us: races the wake-up
    case 2: return fern_now_ns() + (int64_t)(rng() % 300000);
    default: return fern_now_ns() + (int64_t)(rng() % 2000000);
    }
}

// Send ids [lo, hi). Returns when done.
void producer(uint64_t lo, uint64_t hi, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (uint64_t id = lo; id < hi; id++) {
        Msg m = make_msg(id);
        fern_chan *c = g->ch[rng() % kChans];
        int rc;
        switch (rng() % 6) {
        case 0: rc = fern_chan_send(c, &m); break;
        case 1: rc = fern_chan_trysend(c, &m); break;
        case 2:
        case 3: rc = fern_chan_timedsend(c, &m, rand_deadline(rng)); break;
        default: {
            // select over two or three channels, all sending the same id
            fern_select_case k[3];
            int n = 2 + (int)(rng() % 2);
            for (int i = 0; i < n; i++) {
                k[i].chan = g->ch[rng() % kChans];
                k[i].op = FERN_SEND;
                k[i].elem = &m;
                k[i].result = -1;
            }
            int64_t d = rng() % 3 == 0 ? FERN_FOREVER : rand_deadline(rng);
            int r = fern_select(k, (size_t)n, d);
            if (r >= 0)
                rc = k[r].result;
            else if (r == -ETIMEDOUT)
                rc = ETIMEDOUT;
            else {
                err("select send", r);
                rc = EINVAL;
            }
            break;
        }
        }
        if (rc == 0)
            mark_sent(id);
        else if (rc == EAGAIN || rc == ETIMEDOUT)
            g->n_fail++;
        else
            err("send failed", rc);
        if (fern_is_green() && rng() % 32 == 0) fern_yield();
    }
}

// Drain every channel after close: recv until EPIPE on each.
void drain_all() {
    for (int i = 0; i < kChans; i++) {
        Msg m;
        int rc;
        while ((rc = fern_chan_recv(g->ch[i], &m)) == 0) got(m);
        if (rc != EPIPE) err("drain recv", rc);
    }
}

void consumer(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (;;) {
        Msg m;
        fern_chan *c = g->ch[rng() % kChans];
        int rc;
        switch (rng() % 5) {
        case 0: rc = fern_chan_tryrecv(c, &m); break;
        case 1:
        case 2: rc = fern_chan_timedrecv(c, &m, rand_deadline(rng)); break;
        default: {
            // Blocking form: select over every channel (wakes on any send).
            fern_select_case k[kChans];
            Msg buf[kChans];
            for (int i = 0; i < kChans; i++) {
                k[i].chan = g->ch[i];
                k[i].op = FERN_RECV;
                k[i].elem = &buf[i];
                k[i].result = -1;
            }
            int64_t d = rng() % 2 ? FERN_FOREVER : rand_deadline(rng);
            int r = fern_select(k, kChans, d);
            if (r >= 0) {
                rc = k[r].result;
                m = buf[r];
            } else if (r == -ETIMEDOUT) {
                rc = ETIMEDOUT;
            } else {
                err("select recv", r);
                rc = EINVAL;
            }
            break;
        }
        }
        if (rc == 0)
            got(m);
        else if (rc == EPIPE)
            break;  // closing: drain the rest
        else if (rc != EAGAIN && rc != ETIMEDOUT)
            err("recv failed", rc);
        if (fern_is_green() && rng() % 32 == 0) fern_yield();
    }
    drain_all();
}

// Mixed select: a send case and receive cases, with a deadline; the send's
// ids come from [lo, hi).
void selector(uint64_t lo, uint64_t hi, uint64_t seed) {
    std::mt19937_64 rng(seed);
    uint64_t id = lo;
    bool stopping = false;
    while (!stopping) {
        Msg out = make_msg(id < hi ? id : 0);
        Msg in[3];
        fern_select_case k[4];
        int n = 0;
        if (id < hi) {
            k[n].chan = g->ch[rng() % kChans];
            k[n].op = FERN_SEND;
            k[n].elem = &out;
            k[n].result = -1;
            n++;
        }
        for (int i = 0; i < 3; i++) {
            k[n].chan = rng() % 5 == 0 ? nullptr : g->ch[rng() % kChans];
            k[n].op = FERN_RECV;
            k[n].elem = &in[i];
            k[n].result = -1;
            n++;
        }
        int r = fern_select(k, (size_t)n, rand_deadline(rng));
        bool send_case = id < hi;
        if (r >= 0) {
            if (send_case && r == 0) {
                if (k[0].result == 0)
                    mark_sent(id);
                else if (k[0].result == EPIPE)
                    stopping = true;
                else
                    err("selector send result", k[0].result);
            } else if (k[r].result == 0) {
                got(in[r - (send_case ? 1 : 0)]);
            } else if (k[r].result == EPIPE) {
                stopping = true;
            } else {
                err("selector recv result", k[r].result);
            }
        } else if (r != -ETIMEDOUT) {
            err("selector select", r);
        }
        if (send_case && !(r == 0 && k[0].result == 0)) {
            // This id was not sent: it is given up (never reused).
            if (!(r == 0)) g->n_fail++;
        }
        if (send_case) id++;
        if (id >= hi && g->closed.load() > 0) stopping = true;
        if (fern_is_green() && rng() % 16 == 0) fern_yield();
    }
    drain_all();
}

TEST(StressChan, ExactlyOnceEverywhere) {
    Watchdog wd(120, "stress_chan");
    World w;
    g = &w;
    for (int i = 0; i < kChans; i++) ASSERT_EQ(0, fern_chan_create(&w.ch[i], sizeof(Msg), kCaps[i]));
    fern_cluster *c4 = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c4, 4));

    const int kGreenProd = 16, kPlainProd = 2, kGreenCons = 12, kPlainCons = 2, kGreenSel = 8,
              kPlainSel = 1;
    const uint64_t per = (uint64_t)scaled(30000, 500);
    const int kIdRanges = kGreenProd + kPlainProd + kGreenSel + kPlainSel;
    w.ids = per * kIdRanges;
    w.sent.reset(new std::atomic<uint8_t>[w.ids]);
    w.recvd.reset(new std::atomic<uint8_t>[w.ids]);
    for (uint64_t i = 0; i < w.ids; i++) w.sent[i] = 0, w.recvd[i] = 0;

    int range = 0;
    std::vector<fern_thread *> prods, others;
    std::vector<std::thread> plain_prods, plain_others;
    auto cl = [&](int i) { return i % 2 ? c4 : fern_cluster_default(); };
    for (int i = 0; i < kGreenProd; i++, range++) {
        fern_thread *t = nullptr;
        uint64_t lo = per * range;
        ASSERT_EQ(0, spawn_on(&t, cl(i), [lo, per, i] { producer(lo, lo + per, 1000 + i); }));
        prods.push_back(t);
    }
    for (int i = 0; i < kPlainProd; i++, range++) {
        uint64_t lo = per * range;
        plain_prods.emplace_back([lo, per, i] { producer(lo, lo + per, 2000 + i); });
    }
    for (int i = 0; i < kGreenSel; i++, range++) {
        fern_thread *t = nullptr;
        uint64_t lo = per * range;
        ASSERT_EQ(0, spawn_on(&t, cl(i), [lo, per, i] { selector(lo, lo + per, 3000 + i); }));
        others.push_back(t);
    }
    for (int i = 0; i < kPlainSel; i++, range++) {
        uint64_t lo = per * range;
        plain_others.emplace_back([lo, per, i] { selector(lo, lo + per, 4000 + i); });
    }
    for (int i = 0; i < kGreenCons; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, cl(i + 1), [i] { consumer(5000 + i); }));
        others.push_back(t);
    }
    for (int i = 0; i < kPlainCons; i++) plain_others.emplace_back([i] { consumer(6000 + i); });

    for (auto *t : prods) ASSERT_EQ(0, fern_join(t, nullptr));
    for (auto &p : plain_prods) p.join();
    w.producers_done = true;
    // Selectors may still be sending: their sends from now on race the close
    // (EPIPE = not sent), which is part of the test.
    for (int i = 0; i < kChans; i++) {
        EXPECT_EQ(0, fern_chan_close(w.ch[i]));
        w.closed++;
    }
    for (auto *t : others) ASSERT_EQ(0, fern_join(t, nullptr));
    for (auto &p : plain_others) p.join();

    for (int i = 0; i < kChans; i++) {
        EXPECT_EQ(0u, fern_chan_len(w.ch[i])) << "channel " << i << " not drained";
        EXPECT_EQ(EPIPE, fern_chan_tryrecv(w.ch[i], nullptr));
        EXPECT_EQ(0, fern_chan_destroy(w.ch[i]));
    }
    long lost = 0, ghost = 0, dup = 0;
    for (uint64_t i = 0; i < w.ids; i++) {
        int s = w.sent[i].load(), r = w.recvd[i].load();
        if (r > 1) dup++;
        if (s == 1 && r == 0 && lost++ < 5) ADD_FAILURE() << "id " << i << " sent but never received";
        if (s == 0 && r > 0 && ghost++ < 5)
            ADD_FAILURE() << "id " << i << " received but its send reported failure";
    }
    EXPECT_EQ(0, lost) << "values lost";
    EXPECT_EQ(0, ghost) << "values delivered although the send failed (timeout/try race)";
    EXPECT_EQ(0, dup) << "values delivered twice";
    EXPECT_EQ(0, w.corrupt.load());
    EXPECT_EQ(0, w.errors.load());
    EXPECT_EQ(w.n_sent.load(), w.n_recv.load());
    EXPECT_GT(w.n_sent.load(), (long)(w.ids / 4)) << "too few sends succeeded to mean anything";
    std::fprintf(stderr, "stress_chan: %llu ids, %ld sent, %ld received, %ld failed sends\n",
                 (unsigned long long)w.ids, w.n_sent.load(), w.n_recv.load(), w.n_fail.load());
    EXPECT_EQ(0, fern_cluster_destroy(c4));
    g = nullptr;
}

} // namespace
