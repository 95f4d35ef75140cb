// SPDX-License-Identifier: MIT
// The destroy rule (src/wait.c): *_destroy waits until no thread that
// entered an operation on the object is still inside it (woken and
// timed-out waiters, a select that fired elsewhere, a thread holding its
// lock), then returns 0, so an object may be freed as soon as destroy
// returns; EBUSY only while a thread is blocked on it or holds it.
//
// Deterministic cases run on a one-worker cluster, where a woken thread
// cannot run before the thread that woke it parks: the interleaving
// "wake, then destroy and free before the woken thread runs" is forced,
// and a destroy that waits must yield to the leaving thread.
//
// Races: a waiter W in a timed wait and a thread K that wakes it (close,
// broadcast, post, unlock...) near W's deadline, then destroys and frees the
// object at once, as POSIX code does after its last wake-up: an EBUSY there
// is a failure unless W's operation got the object (a lock it then holds),
// and for the objects the test allocates (cond, sem, wait group, barrier)
// the memory is freed after the first destroy whatever it said. Objects are
// on the heap, so AddressSanitizer reports any access after the free. Four
// lanes run at once (W and K green or plain), sharing the iterations; K acts
// at W's deadline plus an offset sweeping -40..+40 us, once it has seen W
// inside the object (a destroy before W entered would be the test's own
// bug). Iterations: $FERN_DESTROY_ITERS per race (default 10,000; the stress
// label runs more).
#include "fern_test.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace fern_test;

namespace {

fern_cluster *g_one = nullptr; // one worker: forced interleavings
fern_cluster *g_two = nullptr; // two workers: races

class Destroy : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (!runtime_running()) {
            ASSERT_EQ(0, fern_init(nullptr));
        }
        ASSERT_EQ(0, fern_cluster_create(&g_one, 1));
        ASSERT_EQ(0, fern_cluster_create(&g_two, 2));
    }
    static void TearDownTestSuite() {
        EXPECT_EQ(0, fern_cluster_destroy(g_one));
        EXPECT_EQ(0, fern_cluster_destroy(g_two));
        g_one = g_two = nullptr;
    }
};

void relax() {
    if (fern_is_green())
        fern_yield();
    else
        std::this_thread::yield();
}

// Waiting for another party without burning the two CPUs the suites share:
// a few yields, then 20 us naps.
struct Backoff {
    int n = 0;
    void operator()() {
        if (++n < 16) {
            relax();
        } else if (fern_is_green()) {
            fern_sleep_ns(20000);
        } else {
            std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
    }
};

// Run f as a green thread on cluster c and wait for it from this plain thread.
template <class F> void on(fern_cluster *c, F &&f) {
    fern_thread *t;
    ASSERT_EQ(0, spawn_on(&t, c, std::forward<F>(f)));
    ASSERT_EQ(0, fern_join(t, nullptr));
}

// Green thread W on the current (one-worker) cluster, started and run until
// it parks: `parked` is set just before the blocking call, and on one worker
// nothing else runs until W parks in it.
template <class F> fern_thread *park_one(F &&f) {
    auto parked = std::make_shared<std::atomic<bool>>(false);
    fern_thread *t = nullptr;
    EXPECT_EQ(0, spawn_on(&t, nullptr, [parked, f = std::forward<F>(f)]() mutable {
                  parked->store(true);
                  f();
              }));
    while (!parked->load()) fern_yield();
    return t;
}

// ---- forced interleavings ------------------------------------------------

TEST_F(Destroy, SelectFiredChannelClosedAndDestroyedBeforeTheSelectRuns) {
    on(g_one, [] {
        fern_chan *a, *b;
        ASSERT_EQ(0, fern_chan_create(&a, sizeof(int), 0));
        ASSERT_EQ(0, fern_chan_create(&b, sizeof(int), 0));
        int va = 0, vb = 0, got = -1;
        fern_select_case cs[2] = {{a, FERN_RECV, &va, 0}, {b, FERN_RECV, &vb, 0}};
        fern_thread *w = park_one([&] { got = fern_select(cs, 2, FERN_FOREVER); });
        EXPECT_EQ(0, fern_chan_close(a)); // wins the select
        EXPECT_EQ(0, fern_chan_destroy(a)); // freed: the select must not relock it
        // The select's waiter on b is still linked, the select not run yet:
        // destroy yields to it until it has unlinked itself, then frees b.
        EXPECT_EQ(0, fern_chan_destroy(b));
        EXPECT_EQ(0, fern_join(w, nullptr));
        EXPECT_EQ(0, got);
        EXPECT_EQ(EPIPE, cs[0].result);
    });
}

TEST_F(Destroy, CloseLeavesASelectWaiterItCannotWinLinked) {
    on(g_one, [] {
        fern_chan *a, *b;
        ASSERT_EQ(0, fern_chan_create(&a, sizeof(int), 0));
        ASSERT_EQ(0, fern_chan_create(&b, sizeof(int), 0));
        int got = -1;
        fern_select_case cs[2] = {{a, FERN_RECV, nullptr, 0}, {b, FERN_SEND, &got, 0}};
        fern_thread *w = park_one([&] { got = fern_select(cs, 2, FERN_FOREVER); });
        EXPECT_EQ(0, fern_chan_close(a));
        EXPECT_EQ(0, fern_chan_close(b)); // cannot win the select: must leave its waiter
        EXPECT_EQ(0, fern_chan_destroy(a));
        EXPECT_EQ(0, fern_chan_destroy(b)); // waits for the select to unlink it
        EXPECT_EQ(0, fern_join(w, nullptr));
        EXPECT_EQ(0, got);
    });
}

TEST_F(Destroy, SelectWithTwoCasesOnTheFiredChannel) {
    on(g_one, [] {
        fern_chan *a;
        ASSERT_EQ(0, fern_chan_create(&a, sizeof(int), 0));
        int got = -1, v = 7, r = 0;
        fern_select_case cs[2] = {{a, FERN_RECV, &r, 0}, {a, FERN_SEND, &v, 0}};
        fern_thread *w = park_one([&] { got = fern_select(cs, 2, FERN_FOREVER); });
        EXPECT_EQ(0, fern_chan_close(a)); // wins one case; the other waits in a still
        EXPECT_EQ(0, fern_join(w, nullptr));
        EXPECT_TRUE(got == 0 || got == 1);
        EXPECT_EQ(0, fern_chan_destroy(a));
    });
}

TEST_F(Destroy, MutexDestroyWaitsForAWokenLocker) {
    on(g_one, [] {
        auto *m = new fern_mutex;
        ASSERT_EQ(0, fern_mutex_init(m));
        ASSERT_EQ(0, fern_mutex_lock(m));
        fern_thread *w = park_one([m] {
            EXPECT_EQ(0, fern_mutex_lock(m));
            EXPECT_EQ(0, fern_mutex_unlock(m));
        });
        EXPECT_EQ(0, fern_mutex_unlock(m)); // wakes W to compete: it has not run yet
        // W is counted in m: destroy yields to it, W locks and unlocks m,
        // and only then is m idle.
        EXPECT_EQ(0, fern_mutex_destroy(m));
        delete m;
        EXPECT_EQ(0, fern_join(w, nullptr));
    });
}

// A condition waiter uses its mutex until it holds it again.
void cond_waiter_keeps_mutex_busy(bool broadcast) {
    on(g_one, [broadcast] {
        auto *m = new fern_mutex;
        auto *c = new fern_cond;
        ASSERT_EQ(0, fern_mutex_init(m));
        ASSERT_EQ(0, fern_cond_init(c));
        bool ready = false;
        fern_thread *w = park_one([&] {
            EXPECT_EQ(0, fern_mutex_lock(m));
            while (!ready) EXPECT_EQ(0, fern_cond_wait(c, m));
            EXPECT_EQ(0, fern_mutex_unlock(m));
        });
        EXPECT_EQ(0, fern_mutex_lock(m));
        ready = true;
        EXPECT_EQ(0, broadcast ? fern_cond_broadcast(c) : fern_cond_signal(c));
        EXPECT_EQ(0, fern_mutex_unlock(m));
        EXPECT_EQ(0, fern_cond_destroy(c)); // the woken waiter never touches c again
        delete c;
        EXPECT_EQ(EBUSY, fern_mutex_destroy(m));
        EXPECT_EQ(0, fern_join(w, nullptr));
        EXPECT_EQ(0, fern_mutex_destroy(m));
        delete m;
    });
}
TEST_F(Destroy, CondSignalledWaiterKeepsMutexBusy) { cond_waiter_keeps_mutex_busy(false); }
TEST_F(Destroy, CondBroadcastHeirKeepsMutexBusy) { cond_waiter_keeps_mutex_busy(true); }

// Woken waiters that do not use the object again: destroy succeeds at once
// and the object is freed before they run (ASan checks they never touch it).
TEST_F(Destroy, WokenWaitersNeverTouchTheObjectAgain) {
    on(g_one, [] {
        auto *s = new fern_sem;
        ASSERT_EQ(0, fern_sem_init(s, 0));
        fern_thread *w = park_one([s] { EXPECT_EQ(0, fern_sem_wait(s)); });
        EXPECT_EQ(0, fern_sem_post(s));
        EXPECT_EQ(0, fern_sem_destroy(s));
        delete s;
        EXPECT_EQ(0, fern_join(w, nullptr));

        auto *wg = new fern_wg;
        ASSERT_EQ(0, fern_wg_init(wg));
        ASSERT_EQ(0, fern_wg_add(wg, 1));
        w = park_one([wg] { EXPECT_EQ(0, fern_wg_wait(wg)); });
        EXPECT_EQ(0, fern_wg_done(wg));
        EXPECT_EQ(0, fern_wg_destroy(wg));
        delete wg;
        EXPECT_EQ(0, fern_join(w, nullptr));

        auto *b = new fern_barrier;
        ASSERT_EQ(0, fern_barrier_init(b, 2));
        w = park_one([b] { EXPECT_EQ(0, fern_barrier_wait(b)); });
        EXPECT_EQ(FERN_BARRIER_SERIAL_THREAD, fern_barrier_wait(b));
        EXPECT_EQ(0, fern_barrier_destroy(b));
        delete b;
        EXPECT_EQ(0, fern_join(w, nullptr));

        auto *c = new fern_cond;
        fern_mutex m = FERN_MUTEX_INIT;
        ASSERT_EQ(0, fern_cond_init(c));
        bool ready = false;
        w = park_one([&] {
            EXPECT_EQ(0, fern_mutex_lock(&m));
            while (!ready) EXPECT_EQ(0, fern_cond_wait(c, &m));
            EXPECT_EQ(0, fern_mutex_unlock(&m));
        });
        EXPECT_EQ(0, fern_mutex_lock(&m));
        ready = true;
        EXPECT_EQ(0, fern_cond_signal(c));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
        EXPECT_EQ(0, fern_cond_destroy(c));
        delete c;
        EXPECT_EQ(0, fern_join(w, nullptr));

        for (bool writer : {false, true}) {
            auto *rw = new fern_rwlock;
            ASSERT_EQ(0, fern_rwlock_init(rw));
            ASSERT_EQ(0, fern_rwlock_wrlock(rw));
            w = park_one([rw, writer] {
                EXPECT_EQ(0, writer ? fern_rwlock_wrlock(rw) : fern_rwlock_rdlock(rw));
            });
            EXPECT_EQ(0, fern_rwlock_unlock(rw)); // grants W the lock on its behalf
            EXPECT_EQ(EBUSY, fern_rwlock_destroy(rw));
            EXPECT_EQ(0, fern_join(w, nullptr)); // W exits holding it: still busy
            EXPECT_EQ(EBUSY, fern_rwlock_destroy(rw));
            delete rw; // (a lock held by an exited thread cannot be released)
        }

        fern_chan *ch;
        ASSERT_EQ(0, fern_chan_create(&ch, sizeof(int), 0));
        w = park_one([ch] {
            int v;
            EXPECT_EQ(EPIPE, fern_chan_recv(ch, &v));
        });
        EXPECT_EQ(0, fern_chan_close(ch));
        EXPECT_EQ(0, fern_chan_destroy(ch));
        EXPECT_EQ(0, fern_join(w, nullptr));
    });
}

// A thread still blocked (untimed, or timed with its deadline far off)
// makes destroy say EBUSY at once, without waiting for it: only threads
// that are leaving are waited for. On one worker a destroy that waited for
// a blocked thread would hang the test.
TEST_F(Destroy, BlockedWaitersMakeItBusyAtOnce) {
    on(g_one, [] {
        const int64_t far = fern_now_ns() + 10 * 1000000000LL;
        fern_chan *a, *b;
        ASSERT_EQ(0, fern_chan_create(&a, sizeof(int), 0));
        ASSERT_EQ(0, fern_chan_create(&b, sizeof(int), 0));
        int va = 0, vb = 0, got = -1;
        fern_select_case cs[2] = {{a, FERN_RECV, &va, 0}, {b, FERN_RECV, &vb, 0}};
        fern_thread *w = park_one([&] { got = fern_select(cs, 2, far); });
        EXPECT_EQ(EBUSY, fern_chan_destroy(a));
        EXPECT_EQ(EBUSY, fern_chan_destroy(b));
        int one = 1;
        EXPECT_EQ(0, fern_chan_send(b, &one)); // fires case 1: still linked on a
        EXPECT_EQ(0, fern_chan_destroy(b));
        EXPECT_EQ(0, fern_chan_destroy(a)); // waits for the select to unlink itself
        EXPECT_EQ(0, fern_join(w, nullptr));
        EXPECT_EQ(1, got);
        EXPECT_EQ(1, vb);

        auto *s = new fern_sem;
        ASSERT_EQ(0, fern_sem_init(s, 0));
        w = park_one([s, far] { EXPECT_EQ(0, fern_sem_timedwait(s, far)); });
        EXPECT_EQ(EBUSY, fern_sem_destroy(s));
        EXPECT_EQ(0, fern_sem_post(s));
        EXPECT_EQ(0, fern_sem_destroy(s));
        delete s;
        EXPECT_EQ(0, fern_join(w, nullptr));

        auto *wg = new fern_wg;
        ASSERT_EQ(0, fern_wg_init(wg));
        ASSERT_EQ(0, fern_wg_add(wg, 1));
        w = park_one([wg, far] { EXPECT_EQ(0, fern_wg_timedwait(wg, far)); });
        EXPECT_EQ(EBUSY, fern_wg_destroy(wg));
        EXPECT_EQ(0, fern_wg_done(wg));
        EXPECT_EQ(0, fern_wg_destroy(wg));
        delete wg;
        EXPECT_EQ(0, fern_join(w, nullptr));

        // A condition waiter: EBUSY for c (blocked on it) and for m (it
        // uses m until it holds it again), whether blocked or just woken.
        auto *c = new fern_cond;
        auto *m = new fern_mutex;
        ASSERT_EQ(0, fern_cond_init(c));
        ASSERT_EQ(0, fern_mutex_init(m));
        bool ready = false;
        w = park_one([&] {
            EXPECT_EQ(0, fern_mutex_lock(m));
            while (!ready) EXPECT_EQ(0, fern_cond_timedwait(c, m, far));
            EXPECT_EQ(0, fern_mutex_unlock(m));
        });
        EXPECT_EQ(EBUSY, fern_cond_destroy(c));
        EXPECT_EQ(EBUSY, fern_mutex_destroy(m));
        EXPECT_EQ(0, fern_mutex_lock(m));
        ready = true;
        EXPECT_EQ(0, fern_cond_signal(c));
        EXPECT_EQ(0, fern_mutex_unlock(m));
        EXPECT_EQ(0, fern_cond_destroy(c));
        delete c;
        EXPECT_EQ(EBUSY, fern_mutex_destroy(m)); // woken, not yet holding m
        EXPECT_EQ(0, fern_join(w, nullptr));
        EXPECT_EQ(0, fern_mutex_destroy(m));
        delete m;

        // A locker blocked on a held mutex, and one on a free mutex that
        // an unlock woke (it has not run yet): EBUSY, then a wait.
        m = new fern_mutex;
        ASSERT_EQ(0, fern_mutex_init(m));
        ASSERT_EQ(0, fern_mutex_lock(m));
        w = park_one([m, far] {
            EXPECT_EQ(0, fern_mutex_timedlock(m, far));
            EXPECT_EQ(0, fern_mutex_unlock(m));
        });
        EXPECT_EQ(EBUSY, fern_mutex_destroy(m));
        EXPECT_EQ(0, fern_mutex_unlock(m));
        EXPECT_EQ(0, fern_mutex_destroy(m)); // W locks and unlocks meanwhile
        delete m;
        EXPECT_EQ(0, fern_join(w, nullptr));
    });
}

// ---- races -----------------------------------------------------------------

constexpr int kEarly = -1;

long race_iters() {
    const char *s = std::getenv("FERN_DESTROY_ITERS");
    long v = s ? std::strtol(s, nullptr, 10) : 0;
    return v > 0 ? v : 10000;
}

// One race: make an object (K, once per iteration), W's timed operation on
// it (returns a status to tally), K's wake-up, and destroy (0 or EBUSY; frees
// when 0 for channels, else the test frees with drop).
struct RaceOps {
    std::function<void *()> make;
    std::function<int(void *, int64_t)> wait;
    std::function<void(void *)> wake;
    // 0 or EBUSY; kEarly for an EBUSY that is always premature, where the
    // object has parts (cond and mutex) and only some may legitimately be
    // busy.
    std::function<int(void *)> destroy;
    std::function<void(void *)> drop;
    // When an EBUSY is legitimate: kIfGot when W's operation got the object
    // (a lock W then holds until it unlocks), kAlways when W holds it again
    // anyway (a condition wait's mutex; kEarly still marks c's EBUSY).
    // Otherwise every EBUSY is premature: W is no longer blocked once K's
    // wake-up returned, it is only leaving.
    enum { kNever, kIfGot, kAlways } held_ok = kNever;
    // Free the object after the first destroy whatever it said, as POSIX
    // code does (an EBUSY is counted all the same): ASan then reports the
    // leaving W's accesses that an early EBUSY stood for.
    bool posix_free = false;
    // W (named wname if green) is visibly inside the object.
    std::function<bool(void *, const char *wname)> inside;
    bool w_green_only = false; // inside() needs W green
};

struct Lane {
    std::atomic<long> go{-1}, done{-1};
    std::atomic<void *> obj{nullptr};
    std::atomic<int64_t> deadline{0};
    std::atomic<int> result{0};
    char name[16] = {};
};

// W: a green thread whose fern_dump line says it waits (channels are opaque,
// so their waiters are seen this way).
bool dump_says_waiting(const char *name) {
    std::vector<char> buf(1 << 15); // not thread_local: a green caller may move
    FILE *f = fmemopen(buf.data(), buf.size() - 1, "w");
    if (!f) return false;
    fern_dump(f);
    long n = ftell(f);
    fclose(f);
    buf[n < 0 ? 0 : (size_t)n] = 0;
    std::string key = std::string("\"") + name + "\"";
    const char *p = std::strstr(buf.data(), key.c_str());
    if (!p) return false;
    const char *eol = std::strchr(p, '\n');
    std::string line(p, eol ? (size_t)(eol - p) : std::strlen(p));
    return line.find(" on ") != std::string::npos;
}

void run_race(const RaceOps &ops) {
    const long iters = race_iters();
    constexpr int kLanes = 4;
    const int64_t lead = kTsan ? 400000 : 120000;
    Watchdog dog(kTsan ? 900 : 300, "destroy race");
    std::vector<Lane> lanes(kLanes);
    std::atomic<long> timedout{0}, busy{0}, early{0};
    std::vector<std::function<void()>> bodies;
    for (int l = 0; l < kLanes; l++) {
        Lane &ln = lanes[l];
        std::snprintf(ln.name, sizeof ln.name, "dr-w%d", l);
        long n = iters / kLanes + (l < iters % kLanes);
        bodies.push_back([&ops, &ln, n, lead] { // W
            if (fern_is_green()) fern_set_name(ln.name);
            for (long i = 0; i < n; i++) {
                for (Backoff b; ln.go.load(std::memory_order_acquire) != i;) b();
                void *o = ln.obj.load();
                int64_t dl = fern_now_ns() + lead;
                ln.deadline.store(dl);
                ln.result.store(ops.wait(o, dl));
                ln.done.store(i, std::memory_order_release);
            }
        });
        bodies.push_back([&ops, &ln, &timedout, &busy, &early, n, l] { // K
            for (long i = 0; i < n; i++) {
                void *o = ops.make();
                ln.obj.store(o);
                ln.deadline.store(0);
                ln.go.store(i, std::memory_order_release);
                // W must be inside before the object can be destroyed.
                for (Backoff b; ln.done.load(std::memory_order_acquire) != i &&
                                !(ln.deadline.load() && ops.inside(o, ln.name));)
                    b();
                int64_t off = ((i * 7919 + l * 31) % 81 - 40) * 1000;
                int64_t at = ln.deadline.load() + off;
                while (ln.done.load(std::memory_order_acquire) != i && fern_now_ns() < at) relax();
                ops.wake(o);
                // Destroy at once, as POSIX code does right after its last
                // wake-up. An EBUSY here is counted, then retried (so that the
                // object is freed only once it is idle: ASan then reports
                // only accesses that a destroy saying 0 let through).
                int r;
                bool was_busy = false, was_early = false;
                for (Backoff b; (r = ops.destroy(o)) == EBUSY || r == kEarly; b()) {
                    busy.fetch_add(1, std::memory_order_relaxed);
                    was_busy = true;
                    was_early |= r == kEarly;
                    if (ops.posix_free) {
                        r = 0;
                        break;
                    }
                }
                ASSERT_EQ(0, r);
                if (ops.drop) ops.drop(o);
                for (Backoff b; ln.done.load(std::memory_order_acquire) != i;) b();
                if (ln.result.load() == ETIMEDOUT) timedout.fetch_add(1);
                if (was_early || (was_busy && ops.held_ok == RaceOps::kNever) ||
                    (was_busy && ops.held_ok == RaceOps::kIfGot && ln.result.load() != 0))
                    early.fetch_add(1);
            }
        });
    }
    // Lane l: W green unless l >= 2 (plain), K green for even l. A W that
    // must be green (channel waits) stays green.
    std::vector<fern_thread *> gt;
    std::vector<std::thread> pt;
    for (int l = 0; l < kLanes; l++) {
        bool w_green = l < 2 || ops.w_green_only, k_green = l % 2 == 0;
        for (int side = 0; side < 2; side++) {
            auto &b = bodies[2 * l + side];
            if (side == 0 ? w_green : k_green) {
                fern_thread *t;
                ASSERT_EQ(0, spawn_on(&t, g_two, b));
                gt.push_back(t);
            } else {
                pt.emplace_back(b);
            }
        }
    }
    for (auto *t : gt) EXPECT_EQ(0, fern_join(t, nullptr));
    for (auto &t : pt) t.join();
    std::printf("  %ld iterations: %ld timed out, %ld woken, destroy said EBUSY %ld times "
                "(%ld iterations while W was not holding the object)\n",
                iters, timedout.load(), iters - timedout.load(), busy.load(), early.load());
    // Destroy waits for threads leaving the object; EBUSY only for one
    // holding it (held_ok) or blocked on it, which W is not after K's wake.
    EXPECT_EQ(0, early.load());
}

// A waiter is linked in q: the public struct's internal field, which the
// library writes under the object's spin lock, peeked at without it (hence
// hidden from ThreadSanitizer) only to know that W has entered. A non-null
// head is never stale here: each iteration's object starts empty, and K
// destroyed the previous one only once it was empty.
__attribute__((noinline, no_sanitize("thread"))) bool queued(fern_waitq &q) {
    return __atomic_load_n(&q.head, __ATOMIC_ACQUIRE) != nullptr;
}

// ---- channels ----

RaceOps chan_race(size_t cap, bool send, bool wake_by_close) {
    RaceOps o;
    o.make = [cap, send] {
        fern_chan *ch;
        EXPECT_EQ(0, fern_chan_create(&ch, sizeof(long), cap));
        if (cap && send) {
            long v = 1;
            EXPECT_EQ(0, fern_chan_send(ch, &v)); // full: a send waits
        }
        return (void *)ch;
    };
    o.wait = [send](void *p, int64_t dl) {
        long v = 5;
        int r = send ? fern_chan_timedsend((fern_chan *)p, &v, dl)
                     : fern_chan_timedrecv((fern_chan *)p, &v, dl);
        EXPECT_TRUE(r == 0 || r == ETIMEDOUT || r == EPIPE) << r;
        return r;
    };
    o.wake = [send, wake_by_close, cap](void *p) {
        auto *ch = (fern_chan *)p;
        long v = 9;
        if (!wake_by_close) {
            if (send) {
                EXPECT_TRUE(fern_chan_tryrecv(ch, &v) == 0 || cap == 0);
            } else {
                (void)fern_chan_trysend(ch, &v);
            }
        }
        EXPECT_EQ(0, fern_chan_close(ch));
    };
    o.destroy = [](void *p) { return fern_chan_destroy((fern_chan *)p); };
    o.inside = [](void *, const char *wname) { return dump_says_waiting(wname); };
    o.w_green_only = true;
    return o;
}


// select on two channels (recv a, and recv or send b) against close of a
// (or a send on a) and close of b, then destroy of both.
struct Pair {
    fern_chan *a, *b;
};
RaceOps select_race(bool send_b, bool wake_by_send) {
    RaceOps o;
    o.make = [] {
        auto *p = new Pair;
        EXPECT_EQ(0, fern_chan_create(&p->a, sizeof(long), 0));
        EXPECT_EQ(0, fern_chan_create(&p->b, sizeof(long), 0));
        return (void *)p;
    };
    o.wait = [send_b](void *v, int64_t dl) {
        auto *p = (Pair *)v;
        long ra = 0, sb = 3;
        fern_select_case cs[2] = {{p->a, FERN_RECV, &ra, 0},
                                  {p->b, send_b ? FERN_SEND : FERN_RECV, &sb, 0}};
        int r = fern_select(cs, 2, dl);
        EXPECT_TRUE(r == 0 || r == 1 || r == -ETIMEDOUT) << r;
        return r == -ETIMEDOUT ? ETIMEDOUT : 0;
    };
    o.wake = [wake_by_send](void *v) {
        auto *p = (Pair *)v;
        long x = 1;
        if (wake_by_send) (void)fern_chan_trysend(p->a, &x);
        EXPECT_EQ(0, fern_chan_close(p->a));
        EXPECT_EQ(0, fern_chan_close(p->b));
    };
    // Both channels, in turn: a first (the case that usually fired).
    o.destroy = [](void *v) {
        auto *p = (Pair *)v;
        if (p->a) {
            int r = fern_chan_destroy(p->a);
            if (r) return r;
            p->a = nullptr;
        }
        return fern_chan_destroy(p->b);
    };
    o.drop = [](void *v) { delete (Pair *)v; };
    o.inside = [](void *, const char *wname) { return dump_says_waiting(wname); };
    o.w_green_only = true;
    return o;
}

// cond: W locks m and waits with a deadline; K locks m, signals or
// broadcasts (holding m: a broadcast then makes W an heir of m; or after
// unlocking), unlocks, and destroys c then m.
struct CondPair {
    fern_cond *c; // its own allocation: freed after its destroy, whatever it said
    fern_mutex m;
};
enum CondWake { kSignal, kBroadcastHolding, kBroadcastAfterUnlock };
RaceOps cond_race(CondWake how) {
    RaceOps o;
    o.make = [] {
        auto *p = new CondPair;
        p->c = new fern_cond;
        EXPECT_EQ(0, fern_cond_init(p->c));
        EXPECT_EQ(0, fern_mutex_init(&p->m));
        return (void *)p;
    };
    o.wait = [](void *v, int64_t dl) {
        auto *p = (CondPair *)v;
        EXPECT_EQ(0, fern_mutex_lock(&p->m));
        int r = fern_cond_timedwait(p->c, &p->m, dl);
        EXPECT_TRUE(r == 0 || r == ETIMEDOUT) << r;
        EXPECT_EQ(0, fern_mutex_unlock(&p->m));
        return r;
    };
    o.wake = [how](void *v) {
        auto *p = (CondPair *)v;
        EXPECT_EQ(0, fern_mutex_lock(&p->m));
        if (how == kSignal) {
            EXPECT_EQ(0, fern_cond_signal(p->c));
        }
        if (how == kBroadcastHolding) {
            EXPECT_EQ(0, fern_cond_broadcast(p->c));
        }
        EXPECT_EQ(0, fern_mutex_unlock(&p->m));
        if (how == kBroadcastAfterUnlock) {
            EXPECT_EQ(0, fern_cond_broadcast(p->c));
        }
    };
    o.destroy = [](void *v) {
        auto *p = (CondPair *)v;
        if (p->c) {
            int r = fern_cond_destroy(p->c);
            delete p->c; // as POSIX code does, right after the last wake-up
            p->c = nullptr;
            if (r) return r == EBUSY ? kEarly : r; // W is not blocked on c any more
        }
        return fern_mutex_destroy(&p->m); // EBUSY while W holds m again
    };
    o.held_ok = RaceOps::kAlways; // W relocks m whatever its wait returned
    o.drop = [](void *v) { delete (CondPair *)v; };
    o.inside = [](void *v, const char *) { return queued(((CondPair *)v)->c->waiters_); };
    return o;
}

// mutex: K holds m; W timedlocks it (and unlocks if it got it); K unlocks.
RaceOps mutex_race() {
    RaceOps o;
    o.make = [] {
        auto *m = new fern_mutex;
        EXPECT_EQ(0, fern_mutex_init(m));
        EXPECT_EQ(0, fern_mutex_lock(m));
        return (void *)m;
    };
    o.wait = [](void *v, int64_t dl) {
        int r = fern_mutex_timedlock((fern_mutex *)v, dl);
        EXPECT_TRUE(r == 0 || r == ETIMEDOUT) << r;
        if (r == 0) {
            EXPECT_EQ(0, fern_mutex_unlock((fern_mutex *)v));
        }
        return r;
    };
    o.wake = [](void *v) { EXPECT_EQ(0, fern_mutex_unlock((fern_mutex *)v)); };
    o.destroy = [](void *v) { return fern_mutex_destroy((fern_mutex *)v); };
    o.held_ok = RaceOps::kIfGot;
    o.drop = [](void *v) { delete (fern_mutex *)v; };
    o.inside = [](void *v, const char *) { return queued(((fern_mutex *)v)->waiters_); };
    return o;
}

RaceOps sem_race() {
    RaceOps o;
    o.make = [] {
        auto *s = new fern_sem;
        EXPECT_EQ(0, fern_sem_init(s, 0));
        return (void *)s;
    };
    o.wait = [](void *v, int64_t dl) {
        int r = fern_sem_timedwait((fern_sem *)v, dl);
        EXPECT_TRUE(r == 0 || r == ETIMEDOUT) << r;
        return r;
    };
    o.wake = [](void *v) { EXPECT_EQ(0, fern_sem_post((fern_sem *)v)); };
    o.destroy = [](void *v) { return fern_sem_destroy((fern_sem *)v); };
    o.posix_free = true;
    o.drop = [](void *v) { delete (fern_sem *)v; };
    o.inside = [](void *v, const char *) { return queued(((fern_sem *)v)->waiters_); };
    return o;
}

// rwlock: K holds the write lock; W wants it for reading or writing (and
// unlocks if it got it); K unlocks.
RaceOps rwlock_race(bool writer) {
    RaceOps o;
    o.make = [] {
        auto *rw = new fern_rwlock;
        EXPECT_EQ(0, fern_rwlock_init(rw));
        EXPECT_EQ(0, fern_rwlock_wrlock(rw));
        return (void *)rw;
    };
    o.wait = [writer](void *v, int64_t dl) {
        auto *rw = (fern_rwlock *)v;
        int r = writer ? fern_rwlock_timedwrlock(rw, dl) : fern_rwlock_timedrdlock(rw, dl);
        EXPECT_TRUE(r == 0 || r == ETIMEDOUT) << r;
        if (r == 0) {
            EXPECT_EQ(0, fern_rwlock_unlock(rw));
        }
        return r;
    };
    o.wake = [](void *v) { EXPECT_EQ(0, fern_rwlock_unlock((fern_rwlock *)v)); };
    o.destroy = [](void *v) { return fern_rwlock_destroy((fern_rwlock *)v); };
    o.held_ok = RaceOps::kIfGot;
    o.drop = [](void *v) { delete (fern_rwlock *)v; };
    o.inside = [writer](void *v, const char *) {
        auto *rw = (fern_rwlock *)v;
        return queued(writer ? rw->writeq_ : rw->readq_);
    };
    return o;
}

RaceOps wg_race() {
    RaceOps o;
    o.make = [] {
        auto *wg = new fern_wg;
        EXPECT_EQ(0, fern_wg_init(wg));
        EXPECT_EQ(0, fern_wg_add(wg, 1));
        return (void *)wg;
    };
    o.wait = [](void *v, int64_t dl) {
        int r = fern_wg_timedwait((fern_wg *)v, dl);
        EXPECT_TRUE(r == 0 || r == ETIMEDOUT) << r;
        return r;
    };
    o.wake = [](void *v) { EXPECT_EQ(0, fern_wg_done((fern_wg *)v)); };
    o.destroy = [](void *v) { return fern_wg_destroy((fern_wg *)v); };
    o.posix_free = true;
    o.drop = [](void *v) { delete (fern_wg *)v; };
    o.inside = [](void *v, const char *) { return queued(((fern_wg *)v)->waiters_); };
    return o;
}

// barrier of two: W and K both wait (K arrives near W's "deadline"), then K
// destroys. No timeout here: the race is the last arrival's wake against
// the destroy.
RaceOps barrier_race() {
    RaceOps o;
    o.make = [] {
        auto *b = new fern_barrier;
        EXPECT_EQ(0, fern_barrier_init(b, 2));
        return (void *)b;
    };
    o.wait = [](void *v, int64_t) {
        int r = fern_barrier_wait((fern_barrier *)v);
        EXPECT_TRUE(r == 0 || r == FERN_BARRIER_SERIAL_THREAD) << r;
        return 0;
    };
    o.wake = [](void *v) {
        int r = fern_barrier_wait((fern_barrier *)v);
        EXPECT_TRUE(r == 0 || r == FERN_BARRIER_SERIAL_THREAD) << r;
    };
    o.destroy = [](void *v) { return fern_barrier_destroy((fern_barrier *)v); };
    o.posix_free = true;
    o.drop = [](void *v) { delete (fern_barrier *)v; };
    o.inside = [](void *v, const char *) { return queued(((fern_barrier *)v)->waiters_); };
    return o;
}

} // namespace

TEST_F(Destroy, RaceChanTimedRecvVsCloseDestroy) { run_race(chan_race(0, false, true)); }
TEST_F(Destroy, RaceChanTimedSendVsCloseDestroy) { run_race(chan_race(0, true, true)); }
TEST_F(Destroy, RaceChanTimedRecvVsSendCloseDestroy) { run_race(chan_race(0, false, false)); }
TEST_F(Destroy, RaceBufferedChanTimedSendVsRecvCloseDestroy) { run_race(chan_race(1, true, false)); }
TEST_F(Destroy, RaceSelectVsCloseDestroy) { run_race(select_race(false, false)); }
TEST_F(Destroy, RaceSelectVsSendCloseDestroy) { run_race(select_race(true, true)); }
TEST_F(Destroy, RaceCondTimedwaitVsSignalDestroy) { run_race(cond_race(kSignal)); }
TEST_F(Destroy, RaceCondTimedwaitVsBroadcastDestroy) { run_race(cond_race(kBroadcastHolding)); }
TEST_F(Destroy, RaceCondTimedwaitVsUnlockedBroadcastDestroy) { run_race(cond_race(kBroadcastAfterUnlock)); }
TEST_F(Destroy, RaceMutexTimedlockVsUnlockDestroy) { run_race(mutex_race()); }
TEST_F(Destroy, RaceSemTimedwaitVsPostDestroy) { run_race(sem_race()); }
TEST_F(Destroy, RaceRwlockTimedrdlockVsUnlockDestroy) { run_race(rwlock_race(false)); }
TEST_F(Destroy, RaceRwlockTimedwrlockVsUnlockDestroy) { run_race(rwlock_race(true)); }
TEST_F(Destroy, RaceWgTimedwaitVsDoneDestroy) { run_race(wg_race()); }
TEST_F(Destroy, RaceBarrierLastArrivalVsDestroy) { run_race(barrier_race()); }
