// SPDX-License-Identifier: MIT
// Biased mutexes and condition variables (src/bias.c): on a one-worker
// cluster they run without locked instructions until another kernel thread
// (a plain thread, another cluster's worker) uses them; that revokes the
// bias once. These tests revoke while the owner is busy with the object and
// check that nothing is lost: exact counts under the mutex, every waiter
// woken, queues empty afterwards.
#include "fern_test.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <vector>

using namespace fern_test;

namespace {

// Whether this process runs with biasing: not under TSan, not FERN_BIAS=0,
// and the kernel has private expedited membarrier.
bool bias_on() {
    if (kTsan) return false;
    const char *e = std::getenv("FERN_BIAS");
    if (e && std::strcmp(e, "0") == 0) return false;
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    return q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED);
}

uint64_t revocations() {
    struct fern_stats s;
    EXPECT_EQ(0, fern_stats(&s));
    return s.bias_revocations;
}

// Rounds that each biased a fresh object and then had other kernel threads
// use it: at most one revocation per round, at least one in all (with
// biasing on); none with it off.
void expect_revoked_per_round(uint64_t r0, int rounds) {
    if (bias_on()) {
        EXPECT_LE(revocations() - r0, (uint64_t)rounds);
        EXPECT_GE(revocations() - r0, 1u);
    } else {
        EXPECT_EQ(r0, revocations());
    }
}

// Make sure the runtime is up (the first spawn starts it).
void boot() { ASSERT_EQ(0, run_green([] {})); }

struct Cluster {
    fern_cluster *c = nullptr;
    explicit Cluster(unsigned n) { EXPECT_EQ(0, fern_cluster_create(&c, n)); }
    ~Cluster() { EXPECT_EQ(0, fern_cluster_destroy(c)); }
};

// Join both threads, then both objects must be free to destroy.
void join_and_destroy(fern_thread *x, fern_thread *y, fern_cond *c, fern_mutex *m) {
    ASSERT_EQ(0, fern_join(x, nullptr));
    ASSERT_EQ(0, fern_join(y, nullptr));
    EXPECT_EQ(0, fern_cond_destroy(c));
    EXPECT_EQ(0, fern_mutex_destroy(m));
}

// Producer/consumer on one slot with a mutex and two condition variables,
// all on one one-worker cluster: plain mode throughout, no revocation.
TEST(Bias, ProdConsOnOneWorkerNeedsNoRevocation) {
    Watchdog wd(60, "ProdConsOnOneWorkerNeedsNoRevocation");
    boot();
    Cluster one(1);
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond not_full = FERN_COND_INIT, not_empty = FERN_COND_INIT;
    long slot = 0, sum = 0;
    bool full = false;
    const long N = scaled(200000, 20000);
    uint64_t r0 = revocations();
    fern_thread *p = nullptr, *c = nullptr;
    ASSERT_EQ(0, spawn_on(&c, one.c, [&] {
        for (long i = 1; i <= N; i++) {
            fern_mutex_lock(&m);
            while (!full) fern_cond_wait(&not_empty, &m);
            sum += slot;
            full = false;
            fern_cond_signal(&not_full);
            fern_mutex_unlock(&m);
        }
    }));
    ASSERT_EQ(0, spawn_on(&p, one.c, [&] {
        for (long i = 1; i <= N; i++) {
            fern_mutex_lock(&m);
            while (full) fern_cond_wait(&not_full, &m);
            slot = i;
            full = true;
            fern_cond_signal(&not_empty);
            fern_mutex_unlock(&m);
        }
    }));
    ASSERT_EQ(0, fern_join(p, nullptr));
    ASSERT_EQ(0, fern_join(c, nullptr));
    EXPECT_EQ(N * (N + 1) / 2, sum);
    EXPECT_EQ(r0, revocations());
    // The plain thread's destroy calls revoke (the objects are biased).
    EXPECT_EQ(0, fern_cond_destroy(&not_full));
    EXPECT_EQ(0, fern_cond_destroy(&not_empty));
    EXPECT_EQ(0, fern_mutex_destroy(&m));
    EXPECT_EQ(r0 + (bias_on() ? 3 : 0), revocations());
}

// Green threads of a one-worker cluster hammer a mutex-protected plain
// counter; part-way through, plain threads join in. Each round uses a fresh
// mutex, so each round revokes once, at a random point of the owner's loop.
TEST(Bias, RevokedByPlainThreadsMidUse) {
    Watchdog wd(120, "RevokedByPlainThreadsMidUse");
    boot();
    Cluster one(1);
    const int ROUNDS = (int)scaled(200, 20);
    const long PER = 2000;
    constexpr int GREEN = 4, PLAIN = 2;
    uint64_t r0 = revocations();
    for (int round = 0; round < ROUNDS; round++) {
        fern_mutex m = FERN_MUTEX_INIT;
        long counter = 0;
        std::atomic<int> started{0};
        std::vector<fern_thread *> gs(GREEN);
        for (int i = 0; i < GREEN; i++)
            ASSERT_EQ(0, spawn_on(&gs[i], one.c, [&] {
                started++;
                for (long k = 0; k < PER; k++) {
                    ASSERT_EQ(0, fern_mutex_lock(&m));
                    counter++;
                    if (k % 64 == 0) fern_yield(); // hold it across a switch now and then
                    ASSERT_EQ(0, fern_mutex_unlock(&m));
                }
            }));
        while (started.load() == 0) std::this_thread::yield();
        std::vector<std::thread> ps;
        for (int i = 0; i < PLAIN; i++)
            ps.emplace_back([&] {
                for (long k = 0; k < PER; k++) {
                    ASSERT_EQ(0, fern_mutex_lock(&m));
                    counter++;
                    ASSERT_EQ(0, fern_mutex_unlock(&m));
                }
            });
        for (auto &p : ps) p.join();
        for (auto g : gs) ASSERT_EQ(0, fern_join(g, nullptr));
        ASSERT_EQ((GREEN + PLAIN) * PER, counter) << "round " << round;
        ASSERT_EQ(0, fern_mutex_destroy(&m));
    }
    // One per round, unless the green threads had not touched the mutex yet
    // when the plain ones did (then it was never biased).
    expect_revoked_per_round(r0, ROUNDS);
}

// Green waiters parked on a biased condition variable (queued with plain
// stores) are found by a plain thread's signals and broadcast after the
// revocation, and a timed wait that expires after it unlinks cleanly.
TEST(Bias, ParkedWaitersSurviveRevocation) {
    Watchdog wd(60, "ParkedWaitersSurviveRevocation");
    boot();
    Cluster one(1);
    const int ROUNDS = (int)scaled(100, 10);
    for (int round = 0; round < ROUNDS; round++) {
        fern_mutex m = FERN_MUTEX_INIT;
        fern_cond c = FERN_COND_INIT;
        constexpr int N = 8;
        int parked = 0, tokens = 0, woken = 0, timedout = 0;
        std::vector<fern_thread *> ts(N);
        for (int i = 0; i < N; i++)
            ASSERT_EQ(0, spawn_on(&ts[i], one.c, [&, i] {
                fern_mutex_lock(&m);
                parked++;
                int64_t dl = i == 0 ? fern_now_ns() + ms(1) : FERN_FOREVER;
                while (tokens == 0) {
                    int rc = fern_cond_timedwait(&c, &m, dl);
                    if (rc == ETIMEDOUT) {
                        timedout++;
                        dl = FERN_FOREVER;
                    } else {
                        EXPECT_EQ(0, rc);
                    }
                }
                tokens--;
                woken++;
                fern_mutex_unlock(&m);
            }));
        ASSERT_TRUE(wait_until([&] {
            fern_mutex_lock(&m);
            bool all = parked == N;
            fern_mutex_unlock(&m);
            return all;
        }));
        // Let the timed waiter expire while the condition variable is still
        // biased (this thread has only used the mutex so far).
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        // Half by single signals, the rest by one broadcast, from this plain thread.
        for (int i = 0; i < N / 2; i++) {
            fern_mutex_lock(&m);
            tokens++;
            fern_cond_signal(&c);
            fern_mutex_unlock(&m);
        }
        fern_mutex_lock(&m);
        tokens += N - N / 2;
        fern_cond_broadcast(&c);
        fern_mutex_unlock(&m);
        for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        EXPECT_EQ(N, woken);
        EXPECT_LE(timedout, 1);
        EXPECT_EQ(0, fern_cond_destroy(&c)) << "a waiter stayed queued";
        EXPECT_EQ(0, fern_mutex_destroy(&m));
    }
}

// Two one-worker clusters, both able to own biases, ping-pong over one mutex
// and condition variable with a mix of timed and untimed waits: the second
// cluster revokes the first one's bias (a revoker that itself owns a slot),
// then both run in shared mode.
TEST(Bias, TwoOneWorkerClustersPingPong) {
    Watchdog wd(90, "TwoOneWorkerClustersPingPong");
    boot();
    Cluster a(1), b(1);
    const int ROUNDS = (int)scaled(20000, 2000);
    const int PAIRS = 20;
    for (int pair = 0; pair < PAIRS; pair++) {
        fern_cond c = FERN_COND_INIT;
        fern_mutex m = FERN_MUTEX_INIT;
        int turn = 0;
        auto player = [&](int me) {
            for (int i = 0; i < ROUNDS / PAIRS; i++) {
                fern_mutex_lock(&m);
                while (turn != me) {
                    int rc = (i % 3 == 0) ? fern_cond_timedwait(&c, &m, fern_now_ns() + 20000)
                                          : fern_cond_wait(&c, &m);
                    EXPECT_TRUE(rc == 0 || rc == ETIMEDOUT) << rc;
                }
                turn = 1 - me;
                fern_cond_signal(&c);
                fern_mutex_unlock(&m);
            }
        };
        fern_thread *x = nullptr, *y = nullptr;
        ASSERT_EQ(0, spawn_on(&x, a.c, [&] { player(0); }));
        ASSERT_EQ(0, spawn_on(&y, b.c, [&] { player(1); }));
        join_and_destroy(x, y, &c, &m);
    }
}

// A thread locks a biased mutex, migrates to another cluster with it held and
// unlocks there (revoking from the other side); a waiter left behind on the
// first cluster gets the mutex.
TEST(Bias, HolderMigratesAndUnlocksElsewhere) {
    Watchdog wd(60, "HolderMigratesAndUnlocksElsewhere");
    boot();
    Cluster one(1), two(2);
    for (int round = 0; round < 50; round++) {
        fern_mutex m = FERN_MUTEX_INIT;
        std::atomic<int> stage{0};
        fern_thread *h = nullptr, *w = nullptr;
        ASSERT_EQ(0, spawn_on(&h, one.c, [&] {
            ASSERT_EQ(0, fern_mutex_lock(&m));
            stage = 1;
            fern_yield(); // let the waiter queue up behind us (plain mode)
            ASSERT_EQ(0, fern_migrate(two.c));
            stage = 2;
            EXPECT_EQ(0, fern_mutex_unlock(&m));
        }));
        ASSERT_EQ(0, spawn_on(&w, one.c, [&] {
            while (stage == 0) fern_yield();
            ASSERT_EQ(0, fern_mutex_lock(&m));
            EXPECT_EQ(2, stage.load());
            EXPECT_EQ(0, fern_mutex_unlock(&m));
        }));
        ASSERT_EQ(0, fern_join(h, nullptr));
        ASSERT_EQ(0, fern_join(w, nullptr));
        EXPECT_EQ(0, fern_mutex_destroy(&m));
    }
}

// Misuse stays an error in plain mode: unlocking a mutex held by another
// green thread of the same worker, destroying a locked one or a condition
// variable with a waiter, relocking one's own mutex, waiting without it.
TEST(Bias, ErrorsInPlainMode) {
    boot();
    Cluster one(1);
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond c = FERN_COND_INIT;
    bool waiting = false, go = false;
    fern_thread *holder = nullptr, *other = nullptr;
    ASSERT_EQ(0, spawn_on(&holder, one.c, [&] {
        ASSERT_EQ(0, fern_mutex_lock(&m));
        EXPECT_EQ(EDEADLK, fern_mutex_lock(&m));
        EXPECT_EQ(EBUSY, fern_mutex_trylock(&m));
        EXPECT_EQ(EBUSY, fern_mutex_destroy(&m));
        waiting = true;
        while (!go) EXPECT_EQ(0, fern_cond_wait(&c, &m));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
    }));
    ASSERT_EQ(0, spawn_on(&other, one.c, [&] {
        while (!waiting) fern_yield();
        EXPECT_EQ(EPERM, fern_cond_wait(&c, &m));
        EXPECT_EQ(EBUSY, fern_cond_destroy(&c));
        ASSERT_EQ(0, fern_mutex_lock(&m));
        go = true;
        EXPECT_EQ(0, fern_cond_signal(&c));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
        EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
    }));
    join_and_destroy(holder, other, &c, &m);
}

// Many objects, three one-worker clusters and plain threads: each object is
// first used (and biased) by one cluster, then by everyone, with lock,
// trylock, timedlock, timed waits, signals and broadcasts; every increment is
// counted exactly once.
TEST(Bias, StressManyObjectsManyRevokers) {
    Watchdog wd(180, "StressManyObjectsManyRevokers");
    boot();
    constexpr int NC = 3, OBJ = 16;
    std::vector<std::unique_ptr<Cluster>> cls;
    for (int i = 0; i < NC; i++) cls.emplace_back(new Cluster(1));
    struct Obj {
        fern_mutex m = FERN_MUTEX_INIT;
        fern_cond c = FERN_COND_INIT;
        long n = 0;
    };
    std::vector<Obj> objs(OBJ);
    const long ITERS = scaled(20000, 2000);
    std::atomic<long> done{0};
    auto work = [&](unsigned seed, int home) {
        for (long k = 0; k < ITERS; k++) {
            seed = seed * 1103515245u + 12345u;
            // Mostly the home objects at first, then anywhere.
            int o = k < ITERS / 4 ? (home * 5 + (int)(seed >> 16) % 5) % OBJ : (int)((seed >> 16) % OBJ);
            Obj &x = objs[o];
            int how = (int)((seed >> 8) % 8);
            int rc;
            if (how == 0) {
                while ((rc = fern_mutex_trylock(&x.m)) == EBUSY) fern_yield();
            } else if (how == 1) {
                while ((rc = fern_mutex_timedlock(&x.m, fern_now_ns() + 100000)) == ETIMEDOUT) {
                }
            } else {
                rc = fern_mutex_lock(&x.m);
            }
            ASSERT_EQ(0, rc);
            x.n++;
            if (how == 2) {
                rc = fern_cond_timedwait(&x.c, &x.m, fern_now_ns() + 20000);
                ASSERT_TRUE(rc == 0 || rc == ETIMEDOUT) << rc;
            } else if (how == 3) {
                fern_cond_broadcast(&x.c);
            } else {
                fern_cond_signal(&x.c);
            }
            ASSERT_EQ(0, fern_mutex_unlock(&x.m));
            done++;
        }
    };
    std::vector<fern_thread *> ts;
    for (int c = 0; c < NC; c++)
        for (int i = 0; i < 4; i++) {
            fern_thread *t = nullptr;
            ASSERT_EQ(0, spawn_on(&t, cls[c]->c, [&, c, i] { work(7u + 31u * (unsigned)(c * 4 + i), c); }));
            ts.push_back(t);
        }
    std::vector<std::thread> ps;
    for (int i = 0; i < 2; i++) ps.emplace_back([&, i] { work(1000u + (unsigned)i, i); });
    for (auto &p : ps) p.join();
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    long total = 0;
    for (auto &x : objs) {
        total += x.n;
        EXPECT_EQ(0, fern_cond_destroy(&x.c));
        EXPECT_EQ(0, fern_mutex_destroy(&x.m));
    }
    EXPECT_EQ((NC * 4 + 2) * ITERS, total);
    EXPECT_EQ(total, done.load());
}

// ---- channels (src/chan.c: biased like the mutex) ----

// Sum and count of what a receiver got: every value exactly once.
struct Got {
    long n = 0, sum = 0;
    void add(long v) { n++; sum += v; }
};

// An unbuffered and a capacity-1 channel between two green threads of one
// one-worker cluster: plain mode throughout, no revocation; the plain
// thread's destroys revoke each once.
TEST(Bias, ChannelPingPongOnOneWorkerNeedsNoRevocation) {
    Watchdog wd(60, "ChannelPingPongOnOneWorkerNeedsNoRevocation");
    boot();
    Cluster one(1);
    fern_chan *ping = nullptr, *pong = nullptr;
    ASSERT_EQ(0, fern_chan_create(&ping, sizeof(long), 0));
    ASSERT_EQ(0, fern_chan_create(&pong, sizeof(long), 1));
    const long N = scaled(200000, 20000);
    uint64_t r0 = revocations();
    long back = 0;
    fern_thread *a = nullptr, *b = nullptr;
    ASSERT_EQ(0, spawn_on(&b, one.c, [&] {
        long v;
        for (long i = 1; i <= N; i++) {
            ASSERT_EQ(0, fern_chan_recv(ping, &v));
            ASSERT_EQ(i, v);
            v++;
            ASSERT_EQ(0, fern_chan_send(pong, &v));
        }
    }));
    ASSERT_EQ(0, spawn_on(&a, one.c, [&] {
        long v;
        for (long i = 1; i <= N; i++) {
            ASSERT_EQ(0, fern_chan_send(ping, &i));
            ASSERT_EQ(0, fern_chan_recv(pong, &v));
            ASSERT_EQ(i + 1, v);
            back += v;
        }
        EXPECT_EQ(EAGAIN, fern_chan_tryrecv(pong, &v));
        EXPECT_EQ(0u, fern_chan_len(pong));
    }));
    ASSERT_EQ(0, fern_join(a, nullptr));
    ASSERT_EQ(0, fern_join(b, nullptr));
    EXPECT_EQ(N * (N + 1) / 2 + N, back);
    EXPECT_EQ(r0, revocations());
    EXPECT_EQ(0, fern_chan_destroy(ping));
    EXPECT_EQ(0, fern_chan_destroy(pong));
    EXPECT_EQ(r0 + (bias_on() ? 2 : 0), revocations());
}

// Green senders of a one-worker cluster stream into a small buffered
// channel to a green receiver; part-way through, plain threads send too.
// A fresh channel per round, so each round revokes at a random point of the
// owner's stream; the receiver must get every value exactly once.
TEST(Bias, ChannelRevokedByPlainSendersMidStream) {
    Watchdog wd(120, "ChannelRevokedByPlainSendersMidStream");
    boot();
    Cluster one(1);
    const int ROUNDS = (int)scaled(100, 10);
    const long PER = 2000;
    constexpr int GREEN = 3, PLAIN = 2;
    uint64_t r0 = revocations();
    for (int round = 0; round < ROUNDS; round++) {
        fern_chan *ch = nullptr;
        ASSERT_EQ(0, fern_chan_create(&ch, sizeof(long), round % 3 == 0 ? 0 : 4));
        std::atomic<int> started{0};
        Got got;
        fern_thread *rx = nullptr;
        ASSERT_EQ(0, spawn_on(&rx, one.c, [&] {
            long v;
            for (long k = 0; k < (GREEN + PLAIN) * PER; k++) {
                ASSERT_EQ(0, fern_chan_recv(ch, &v));
                got.add(v);
            }
        }));
        std::vector<fern_thread *> gs(GREEN);
        for (int i = 0; i < GREEN; i++)
            ASSERT_EQ(0, spawn_on(&gs[i], one.c, [&, i] {
                started++;
                for (long k = 1; k <= PER; k++) {
                    long v = i * PER + k;
                    ASSERT_EQ(0, fern_chan_send(ch, &v));
                }
            }));
        while (started.load() == 0) std::this_thread::yield();
        std::vector<std::thread> ps;
        for (int i = GREEN; i < GREEN + PLAIN; i++)
            ps.emplace_back([&, i] {
                for (long k = 1; k <= PER; k++) {
                    long v = i * PER + k;
                    ASSERT_EQ(0, fern_chan_send(ch, &v));
                }
            });
        for (auto &p : ps) p.join();
        for (auto g : gs) ASSERT_EQ(0, fern_join(g, nullptr));
        ASSERT_EQ(0, fern_join(rx, nullptr));
        const long all = (GREEN + PLAIN) * PER;
        ASSERT_EQ(all, got.n) << "round " << round;
        ASSERT_EQ(all * (all + 1) / 2, got.sum) << "round " << round;
        ASSERT_EQ(0, fern_chan_destroy(ch)) << "a waiter stayed queued";
    }
    expect_revoked_per_round(r0, ROUNDS);
}

// Green receivers parked on a biased channel (queued with plain stores) are
// found by a plain thread's sends after the revocation; a timed receive
// that expired while the channel was still biased unlinked itself (destroy
// finds no waiter), and a close from the plain thread wakes a late
// receiver with EPIPE.
TEST(Bias, ChannelParkedReceiversSurviveRevocation) {
    Watchdog wd(60, "ChannelParkedReceiversSurviveRevocation");
    boot();
    Cluster one(1);
    const int ROUNDS = (int)scaled(100, 10);
    for (int round = 0; round < ROUNDS; round++) {
        fern_chan *ch = nullptr;
        ASSERT_EQ(0, fern_chan_create(&ch, sizeof(long), 0));
        constexpr int N = 8;
        std::atomic<int> parked{0}, timedout{0};
        std::atomic<long> sum{0};
        std::vector<fern_thread *> ts(N);
        for (int i = 0; i < N; i++)
            ASSERT_EQ(0, spawn_on(&ts[i], one.c, [&, i] {
                long v = 0;
                parked++;
                if (i == 0) {
                    // Expires while only this cluster has used the channel.
                    EXPECT_EQ(ETIMEDOUT, fern_chan_timedrecv(ch, &v, fern_now_ns() + ms(1)));
                    timedout++;
                }
                ASSERT_EQ(0, fern_chan_recv(ch, &v));
                sum += v;
            }));
        ASSERT_TRUE(wait_until([&] { return parked.load() == N && timedout.load() == 1; }));
        for (long v = 1; v <= N; v++) ASSERT_EQ(0, fern_chan_send(ch, &v));
        for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        EXPECT_EQ((long)N * (N + 1) / 2, sum.load());
        // A late receiver, then close from this plain thread.
        fern_thread *late = nullptr;
        std::atomic<int> rc{-1};
        ASSERT_EQ(0, spawn_on(&late, one.c, [&] {
            long v;
            rc = fern_chan_recv(ch, &v);
        }));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_EQ(0, fern_chan_close(ch));
        ASSERT_EQ(0, fern_join(late, nullptr));
        EXPECT_EQ(EPIPE, rc.load());
        long v = 1;
        EXPECT_EQ(EPIPE, fern_chan_send(ch, &v));
        EXPECT_EQ(EPIPE, fern_chan_close(ch));
        EXPECT_EQ(0, fern_chan_destroy(ch)) << "a waiter stayed queued";
    }
}

// select on channels a one-worker cluster has used in plain mode: it makes
// them shared first (one revocation each, none for an unused one), then
// works as before, from green threads of that cluster and from plain threads.
TEST(Bias, SelectSharesBiasedChannels) {
    Watchdog wd(60, "SelectSharesBiasedChannels");
    boot();
    Cluster one(1);
    fern_chan *a = nullptr, *b = nullptr, *unused = nullptr;
    ASSERT_EQ(0, fern_chan_create(&a, sizeof(long), 1));
    ASSERT_EQ(0, fern_chan_create(&b, sizeof(long), 0));
    ASSERT_EQ(0, fern_chan_create(&unused, sizeof(long), 0));
    uint64_t r0 = revocations();
    long got_a = 0, got_b = 0;
    fern_thread *x = nullptr, *y = nullptr;
    ASSERT_EQ(0, spawn_on(&x, one.c, [&] {
        long v = 7;
        ASSERT_EQ(0, fern_chan_send(a, &v)); // plain mode: a is biased
        ASSERT_EQ(0, fern_chan_recv(a, &got_a));
        long w = 0, u = 0;
        EXPECT_EQ(EAGAIN, fern_chan_tryrecv(b, &w)); // b biased too
        EXPECT_EQ(r0, revocations());
        fern_select_case cs[3] = {};
        cs[0].chan = b, cs[0].op = FERN_RECV, cs[0].elem = &w;
        cs[1].chan = a, cs[1].op = FERN_RECV, cs[1].elem = &got_a;
        cs[2].chan = unused, cs[2].op = FERN_RECV, cs[2].elem = &u;
        // Nothing ready: parks on all three until y sends on b.
        ASSERT_EQ(0, fern_select(cs, 3, FERN_FOREVER));
        EXPECT_EQ(0, cs[0].result);
        got_b = w;
    }));
    ASSERT_EQ(0, spawn_on(&y, one.c, [&] {
        // Runs once x has parked in its select (spawned after it, one worker).
        long v = 42;
        ASSERT_EQ(0, fern_chan_send(b, &v));
    }));
    ASSERT_EQ(0, fern_join(x, nullptr));
    ASSERT_EQ(0, fern_join(y, nullptr));
    EXPECT_EQ(7, got_a);
    EXPECT_EQ(42, got_b);
    // a and b were biased: revoked by the select; unused was shared at once.
    EXPECT_EQ(r0 + (bias_on() ? 2 : 0), revocations());
    // Shared for good: this plain thread's use revokes nothing more.
    long v = 5, w = 0;
    ASSERT_EQ(0, fern_chan_send(a, &v));
    ASSERT_EQ(0, fern_chan_recv(a, &w));
    EXPECT_EQ(5, w);
    EXPECT_EQ(0, fern_chan_destroy(a));
    EXPECT_EQ(0, fern_chan_destroy(b));
    EXPECT_EQ(0, fern_chan_destroy(unused));
    EXPECT_EQ(r0 + (bias_on() ? 2 : 0), revocations());
}

} // namespace
