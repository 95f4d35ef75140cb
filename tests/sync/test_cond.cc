// SPDX-License-Identifier: MIT
// fern_cond: wait/signal/broadcast/timedwait between green and plain threads,
// errors, and no lost wake-ups.
#include "fern_test.h"

#include <thread>

#include <cstring>
#include <vector>

using namespace fern_test;

namespace {

// Wait until count, which the waiters raise while holding m, reaches n.
bool count_reaches(fern_mutex *m, const int &count, int n) {
    return wait_until([&] {
        fern_mutex_lock(m);
        bool all = count == n;
        fern_mutex_unlock(m);
        return all;
    });
}

// Everyone has left: m is free with no hand-off state left, c counts no
// waiter, and both can be destroyed.
void expect_settled(fern_mutex *m, fern_cond *c) {
    EXPECT_EQ(0, fern_mutex_trylock(m));
    EXPECT_EQ(0, fern_mutex_unlock(m));
    EXPECT_EQ(0u, m->heirs_);
    EXPECT_EQ(0u, m->handoff_);
    EXPECT_EQ(0u, c->waiting_);
    EXPECT_EQ(0u, c->timed_);
    EXPECT_EQ(0, fern_mutex_destroy(m));
    EXPECT_EQ(0, fern_cond_destroy(c));
}

fern_cond g_static_cond = FERN_COND_INIT;
fern_mutex g_static_mutex = FERN_MUTEX_INIT;

TEST(Cond, NullIsEinval) {
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    EXPECT_EQ(EINVAL, fern_cond_init(nullptr));
    EXPECT_EQ(EINVAL, fern_cond_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_cond_signal(nullptr));
    EXPECT_EQ(EINVAL, fern_cond_broadcast(nullptr));
    ASSERT_EQ(0, fern_mutex_lock(&m));
    EXPECT_EQ(EINVAL, fern_cond_wait(nullptr, &m));
    EXPECT_EQ(EINVAL, fern_cond_wait(&c, nullptr));
    EXPECT_EQ(EINVAL, fern_cond_timedwait(nullptr, &m, FERN_FOREVER));
    EXPECT_EQ(EINVAL, fern_cond_timedwait(&c, nullptr, FERN_FOREVER));
    EXPECT_EQ(0, fern_mutex_unlock(&m)) << "mutex no longer held after EINVAL";
}

TEST(Cond, InitDestroyAndSignalWithoutWaiters) {
    fern_cond c;
    std::memset(&c, 0xab, sizeof c);
    EXPECT_EQ(0, fern_cond_init(&c));
    EXPECT_EQ(0, fern_cond_signal(&c));
    EXPECT_EQ(0, fern_cond_broadcast(&c));
    EXPECT_EQ(0, fern_cond_destroy(&c));
    fern_cond z{};
    EXPECT_EQ(0, fern_cond_signal(&z));
    EXPECT_EQ(0, fern_cond_destroy(&z));
    EXPECT_EQ(0, fern_cond_signal(&g_static_cond));
    EXPECT_EQ(0, fern_cond_broadcast(&g_static_cond));
}

TEST(Cond, WaitWithoutMutexIsEperm) {
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    EXPECT_EQ(EPERM, fern_cond_wait(&c, &m));
    EXPECT_EQ(EPERM, fern_cond_timedwait(&c, &m, fern_now_ns() + ms(10)));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(EPERM, fern_cond_wait(&c, &m));
        EXPECT_EQ(EPERM, fern_cond_timedwait(&c, &m, fern_now_ns() + ms(10)));
    }));
    // Held by someone else.
    ASSERT_EQ(0, fern_mutex_lock(&m));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(EPERM, fern_cond_wait(&c, &m));
        EXPECT_EQ(EPERM, fern_cond_timedwait(&c, &m, FERN_FOREVER));
    }));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    EXPECT_EQ(0, fern_cond_destroy(&c));
}

TEST(Cond, GreenWaiterGreenSignaller) {
    Watchdog wd(30, "GreenWaiterGreenSignaller");
    fern_cond c{};
    fern_mutex m{};
    bool ready = false;
    fern_thread *w = nullptr;
    ASSERT_EQ(0, spawn(&w, nullptr, [&] {
        EXPECT_EQ(0, fern_mutex_lock(&m));
        while (!ready) EXPECT_EQ(0, fern_cond_wait(&c, &m));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
    }));
    ASSERT_EQ(0, run_green([&] {
        fern_sleep_ns(ms(10));
        fern_mutex_lock(&m);
        ready = true;
        EXPECT_EQ(0, fern_cond_signal(&c));
        fern_mutex_unlock(&m);
    }));
    ASSERT_EQ(0, fern_join(w, nullptr));
    EXPECT_EQ(0, fern_cond_destroy(&c));
}

TEST(Cond, PlainWaiterGreenSignallerAndViceVersa) {
    Watchdog wd(30, "PlainWaiterGreenSignaller");
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    bool ready = false;
    // Plain waits, green signals.
    fern_thread *s = nullptr;
    ASSERT_EQ(0, spawn(&s, nullptr, [&] {
        fern_sleep_ns(ms(20));
        fern_mutex_lock(&m);
        ready = true;
        fern_cond_signal(&c);
        fern_mutex_unlock(&m);
    }));
    ASSERT_EQ(0, fern_mutex_lock(&m));
    while (!ready) ASSERT_EQ(0, fern_cond_wait(&c, &m));
    ASSERT_EQ(0, fern_mutex_unlock(&m));
    ASSERT_EQ(0, fern_join(s, nullptr));
    // Green waits, plain signals.
    ready = false;
    fern_thread *w = nullptr;
    ASSERT_EQ(0, spawn(&w, nullptr, [&] {
        fern_mutex_lock(&m);
        while (!ready) EXPECT_EQ(0, fern_cond_wait(&c, &m));
        fern_mutex_unlock(&m);
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(0, fern_mutex_lock(&m));
    ready = true;
    ASSERT_EQ(0, fern_cond_signal(&c));
    ASSERT_EQ(0, fern_mutex_unlock(&m));
    ASSERT_EQ(0, fern_join(w, nullptr));
}

TEST(Cond, DestroyWithWaitersIsEbusy) {
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    bool waiting = false, go_on = false;
    fern_thread *w = nullptr;
    ASSERT_EQ(0, spawn(&w, nullptr, [&] {
        fern_mutex_lock(&m);
        waiting = true;
        while (!go_on) fern_cond_wait(&c, &m);
        fern_mutex_unlock(&m);
    }));
    // Once we hold m after the waiter set `waiting`, it is inside cond_wait.
    for (;;) {
        ASSERT_EQ(0, fern_mutex_lock(&m));
        if (waiting) break;
        ASSERT_EQ(0, fern_mutex_unlock(&m));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(EBUSY, fern_cond_destroy(&c));
    go_on = true;
    EXPECT_EQ(0, fern_cond_broadcast(&c));
    ASSERT_EQ(0, fern_mutex_unlock(&m));
    ASSERT_EQ(0, fern_join(w, nullptr));
    EXPECT_EQ(0, fern_cond_destroy(&c));
}

TEST(Cond, BroadcastWakesEveryone) {
    Watchdog wd(60, "BroadcastWakesEveryone");
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 2));
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    int waiting = 0, generation = 0;
    std::atomic<int> woken{0};
    constexpr int GREEN = 200, PLAIN = 3;
    auto waiter = [&] {
        fern_mutex_lock(&m);
        int gen = generation;
        waiting++;
        while (generation == gen) EXPECT_EQ(0, fern_cond_wait(&c, &m));
        fern_mutex_unlock(&m);
        woken++;
    };
    std::vector<fern_thread *> ts(GREEN);
    for (int i = 0; i < GREEN; i++) ASSERT_EQ(0, spawn_on(&ts[i], (i & 1) ? cl : nullptr, waiter));
    std::vector<std::thread> ps;
    for (int i = 0; i < PLAIN; i++) ps.emplace_back(waiter);
    for (;;) {
        fern_mutex_lock(&m);
        bool all = waiting == GREEN + PLAIN;
        fern_mutex_unlock(&m);
        if (all) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(0, woken.load());
    fern_mutex_lock(&m);
    generation++;
    EXPECT_EQ(0, fern_cond_broadcast(&g_static_cond));  // another cond: no effect
    EXPECT_EQ(0, fern_cond_broadcast(&c));
    fern_mutex_unlock(&m);
    for (auto &p : ps) p.join();
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(GREEN + PLAIN, woken.load());
    EXPECT_EQ(0, fern_cond_destroy(&c));
    EXPECT_EQ(0, fern_cluster_destroy(cl));
}

// Broadcast with the mutex held moves the waiters onto the mutex (wait
// morphing): each must still return owning the mutex exclusively, in turn,
// while other threads keep locking it, and timed waiters whose deadline
// passed before the broadcast must time out, not be handed the mutex.
TEST(Cond, BroadcastWithMutexHeldHandsMutexToEachWaiter) {
    Watchdog wd(60, "BroadcastWithMutexHeldHandsMutexToEachWaiter");
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 2));
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    int waiting = 0, go = 0, inside = 0, entered = 0;
    std::atomic<int> overlaps{0}, timedout{0}, lockers_done{0}, errors{0};
    std::atomic<bool> stop{false};
    constexpr int GREEN = 300, PLAIN = 2, EARLY = 20, LOCKERS = 4;
    auto enter = [&] {
        if (inside++ != 0) overlaps++;
        entered++;
        fern_yield(); // another thread of the same worker runs meanwhile
        inside--;
    };
    auto waiter = [&](bool timed) {
        fern_mutex_lock(&m);
        waiting++;
        while (!go) {
            int rc = timed ? fern_cond_timedwait(&c, &m, fern_now_ns() + ms(60000)) : fern_cond_wait(&c, &m);
            if (rc != 0) errors++;
        }
        enter();
        if (fern_mutex_unlock(&m) != 0) errors++; // EPERM here: we did not own it
    };
    // Timed waiters that give up before the broadcast.
    std::vector<fern_thread *> early(EARLY);
    for (int i = 0; i < EARLY; i++)
        ASSERT_EQ(0, spawn_on(&early[i], (i & 1) ? cl : nullptr, [&] {
            fern_mutex_lock(&m);
            int rc = fern_cond_timedwait(&c, &m, fern_now_ns() + ms(5));
            if (rc == ETIMEDOUT) timedout++;
            if (fern_mutex_unlock(&m) != 0) errors++;
        }));
    for (auto t : early) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(EARLY, timedout.load());
    std::vector<fern_thread *> ts(GREEN);
    for (int i = 0; i < GREEN; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], (i & 1) ? cl : nullptr, [&, i] { waiter(i % 3 == 0); }));
    std::vector<std::thread> ps;
    for (int i = 0; i < PLAIN; i++) ps.emplace_back([&] { waiter(false); });
    ASSERT_TRUE(count_reaches(&m, waiting, GREEN + PLAIN));
    // Lockers that compete with the heirs for the whole hand-off.
    std::vector<fern_thread *> ls(LOCKERS);
    for (int i = 0; i < LOCKERS; i++)
        ASSERT_EQ(0, spawn_on(&ls[i], (i & 1) ? cl : nullptr, [&] {
            while (!stop.load()) {
                if (fern_mutex_lock(&m) != 0) errors++;
                enter();
                if (fern_mutex_unlock(&m) != 0) errors++;
                fern_yield();
            }
            lockers_done++;
        }));
    fern_mutex_lock(&m);
    go = 1;
    EXPECT_EQ(0, fern_cond_broadcast(&c));
    EXPECT_EQ(EBUSY, fern_mutex_destroy(&m));
    EXPECT_EQ(EBUSY, fern_mutex_trylock(&m)); // we still hold it
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    for (auto &p : ps) p.join();
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    stop = true;
    for (auto t : ls) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, overlaps.load()) << "two threads inside the mutex at once";
    EXPECT_EQ(0, errors.load());
    EXPECT_EQ(LOCKERS, lockers_done.load());
    EXPECT_GE(entered, GREEN + PLAIN);
    expect_settled(&m, &c);
    EXPECT_EQ(0, fern_cluster_destroy(cl));
}

// An heir queued behind lockers whose timed lock has expired but who have
// not yet run to unlink themselves: the hand-off must skip them and still
// reach the heir (an expired waiter cannot be won; an heir is won already).
// Deterministic on one worker: the lockers' timers and the broadcaster's
// sleep expire in one batch while another thread spins, and the last one
// readied (the broadcaster) runs first.
TEST(Cond, HeirBehindExpiredTimedLockers) {
    Watchdog wd(60, "HeirBehindExpiredTimedLockers");
    fern_cluster *one = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&one, 1));
    for (int round = 0; round < 20; round++) {
        fern_cond c = FERN_COND_INIT;
        fern_mutex m = FERN_MUTEX_INIT;
        int waiting = 0, started = 0, heir_done = 0;
        fern_thread *h = nullptr, *b = nullptr;
        ASSERT_EQ(0, spawn_on(&h, one, [&] {
            fern_mutex_lock(&m);
            waiting = 1;
            EXPECT_EQ(0, fern_cond_timedwait(&c, &m, fern_now_ns() + ms(60000)));
            heir_done = 1;
            EXPECT_EQ(0, fern_mutex_unlock(&m));
        }));
        ASSERT_EQ(0, spawn_on(&b, one, [&] {
            while (!waiting) fern_yield();
            fern_mutex_lock(&m);
            fern_thread *ls[2], *spinner = nullptr;
            for (int i = 0; i < 2; i++)
                ASSERT_EQ(0, spawn_on(&ls[i], one, [&, i] {
                    started++;
                    // Expired, but once run it may still find m free.
                    int rc = fern_mutex_timedlock(&m, fern_now_ns() + 500000 + 100000 * i);
                    if (rc == 0)
                        EXPECT_EQ(0, fern_mutex_unlock(&m));
                    else
                        EXPECT_EQ(ETIMEDOUT, rc);
                }));
            while (started < 2) fern_yield(); // both queued on m
            EXPECT_EQ(0, fern_cond_broadcast(&c)); // the heir goes behind them
            ASSERT_EQ(0, spawn_on(&spinner, one, [&] {
                int64_t until = fern_now_ns() + ms(3);
                while (fern_now_ns() < until) {
                }
            }));
            fern_sleep_ns(ms(1));
            EXPECT_EQ(0, fern_mutex_unlock(&m)); // hands m to the heir
            for (auto l : ls) EXPECT_EQ(0, fern_join(l, nullptr));
            EXPECT_EQ(0, fern_join(spinner, nullptr));
        }));
        ASSERT_EQ(0, fern_join(b, nullptr));
        ASSERT_EQ(0, fern_join(h, nullptr));
        EXPECT_EQ(1, heir_done);
        EXPECT_EQ(0, fern_mutex_trylock(&m));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
        EXPECT_EQ(0u, m.heirs_);
        EXPECT_EQ(0u, m.handoff_);
        EXPECT_EQ(0, fern_mutex_destroy(&m));
        EXPECT_EQ(0, fern_cond_destroy(&c));
    }
    EXPECT_EQ(0, fern_cluster_destroy(one));
}

// Broadcast without the mutex: every waiter is woken and locks it again.
TEST(Cond, BroadcastWithoutMutexWakesAllToRelock) {
    Watchdog wd(60, "BroadcastWithoutMutexWakesAllToRelock");
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    int waiting = 0, go = 0, inside = 0;
    std::atomic<int> overlaps{0}, done{0};
    constexpr int N = 100;
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn(&ts[i], nullptr, [&] {
            fern_mutex_lock(&m);
            waiting++;
            while (!go) fern_cond_wait(&c, &m);
            if (inside++ != 0) overlaps++;
            fern_yield();
            inside--;
            fern_mutex_unlock(&m);
            done++;
        }));
    ASSERT_TRUE(count_reaches(&m, waiting, N));
    fern_mutex_lock(&m);
    go = 1;
    fern_mutex_unlock(&m);
    EXPECT_EQ(0, fern_cond_broadcast(&c));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(N, done.load());
    EXPECT_EQ(0, overlaps.load());
    EXPECT_EQ(0, m.handoff_);
}

// Waiters on two mutexes, the first queued on the one the broadcaster does
// not hold: those on the held one become heirs (they return owning it, one
// at a time, only after the broadcaster unlocks it), the others are woken
// to lock theirs. Nobody is lost, no mutex is held twice.
TEST(Cond, BroadcastWithWaitersOnTwoMutexes) {
    Watchdog wd(60, "BroadcastWithWaitersOnTwoMutexes");
    fern_cond c = FERN_COND_INIT;
    fern_mutex held = FERN_MUTEX_INIT, other = FERN_MUTEX_INIT;
    int waiting = 0, go = 0, inside_held = 0, inside_other = 0;
    std::atomic<int> overlaps{0}, done{0}, early{0};
    std::atomic<bool> unlocked{false};
    constexpr int N = 60;
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++) {
        fern_mutex *mine = i % 3 == 0 ? &other : &held;
        int *inside = mine == &held ? &inside_held : &inside_other;
        ASSERT_EQ(0, spawn(&ts[i], nullptr, [&, mine, inside] {
            fern_mutex_lock(mine);
            __atomic_add_fetch(&waiting, 1, __ATOMIC_SEQ_CST);
            while (!__atomic_load_n(&go, __ATOMIC_SEQ_CST)) fern_cond_wait(&c, mine);
            if (mine == &held && !unlocked.load()) early++;
            if ((*inside)++ != 0) overlaps++;
            fern_yield();
            (*inside)--;
            fern_mutex_unlock(mine);
            done++;
        }));
        // The first waiter queued must be one on `other` (queued once it
        // has released `other`).
        if (i == 0) {
            ASSERT_TRUE(wait_until([&] { return __atomic_load_n(&waiting, __ATOMIC_SEQ_CST) == 1; }));
            fern_mutex_lock(&other);
            fern_mutex_unlock(&other);
        }
    }
    ASSERT_TRUE(wait_until([&] { return __atomic_load_n(&waiting, __ATOMIC_SEQ_CST) == N; }));
    // Every waiter is queued on c once it released its mutex: take both.
    fern_mutex_lock(&other);
    fern_mutex_unlock(&other);
    fern_mutex_lock(&held);
    EXPECT_EQ(nullptr, c.mutex_); // two mutexes: the queue cannot move over whole
    __atomic_store_n(&go, 1, __ATOMIC_SEQ_CST);
    EXPECT_EQ(0, fern_cond_broadcast(&c));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    unlocked = true;
    fern_mutex_unlock(&held);
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(N, done.load());
    EXPECT_EQ(0, overlaps.load());
    EXPECT_EQ(0, early.load()) << "an heir ran before the broadcaster unlocked the mutex";
    EXPECT_EQ(0, held.handoff_);
    EXPECT_EQ(0, held.heirs_);
    EXPECT_EQ(0u, c.waiting_);
    EXPECT_EQ(0u, c.timed_);
}

// A broadcast with the mutex held whose waiters are all untimed and use that
// mutex moves the condition's queue over whole (cond_splice): the heirs must
// still return one at a time owning the mutex, in the order they waited,
// while lockers queued before the broadcast, timed lockers that give up next
// to them and plain threads use the mutex; the condition must be usable for
// new waiters at once, and its counts must end at zero.
TEST(Cond, BroadcastMovesUntimedQueueWholeInOrder) {
    Watchdog wd(60, "BroadcastMovesUntimedQueueWholeInOrder");
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 2));
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    constexpr int GREEN = 400, PLAIN = 3, AHEAD = 6, TIMED = 4, LATE = 5;
    int tickets = 0, go = 0, late_go = 0, late_waiting = 0, inside = 0;
    std::vector<int> order;
    std::atomic<int> overlaps{0}, errors{0}, ahead_arrived{0}, timeouts{0}, late_done{0};
    std::atomic<bool> stop{false};
    auto enter = [&] {
        if (inside++ != 0) overlaps++;
        fern_yield();
        inside--;
    };
    auto waiter = [&] {
        // Shielded: a green thread's cancellable wait may leave the queue by
        // itself (fern_cancel), so only shielded ones are moved whole.
        int was = fern_cancel_shield(1);
        fern_mutex_lock(&m);
        int me = tickets++;
        while (!go)
            if (fern_cond_wait(&c, &m) != 0) errors++;
        order.push_back(me);
        enter();
        if (fern_mutex_unlock(&m) != 0) errors++;
        fern_cancel_shield(was);
    };
    std::vector<fern_thread *> ts(GREEN);
    for (int i = 0; i < GREEN; i++) ASSERT_EQ(0, spawn_on(&ts[i], (i & 1) ? cl : nullptr, waiter));
    std::vector<std::thread> ps;
    for (int i = 0; i < PLAIN; i++) ps.emplace_back(waiter);
    ASSERT_TRUE(count_reaches(&m, tickets, GREEN + PLAIN));
    fern_mutex_lock(&m);
    EXPECT_EQ((uint32_t)(GREEN + PLAIN), c.waiting_);
    EXPECT_EQ(0u, c.timed_);
    EXPECT_EQ(&m, c.mutex_);
    // Lockers queued on m ahead of the heirs: they get it first.
    std::vector<fern_thread *> ahead(AHEAD);
    for (int i = 0; i < AHEAD; i++)
        ASSERT_EQ(0, spawn_on(&ahead[i], (i & 1) ? cl : nullptr, [&] {
            ahead_arrived++;
            if (fern_mutex_lock(&m) != 0) errors++;
            enter();
            if (fern_mutex_unlock(&m) != 0) errors++;
        }));
    ASSERT_TRUE(wait_until([&] { return ahead_arrived.load() == AHEAD; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    go = 1;
    EXPECT_EQ(0, fern_cond_broadcast(&c));
    EXPECT_EQ((uint32_t)(GREEN + PLAIN), m.heirs_);
    EXPECT_EQ(0u, c.waiting_);
    EXPECT_EQ(nullptr, c.waiters_.head);
    // Timed lockers that give up beside the heirs, unlinking themselves.
    std::vector<fern_thread *> timed(TIMED);
    for (int i = 0; i < TIMED; i++)
        ASSERT_EQ(0, spawn_on(&timed[i], (i & 1) ? cl : nullptr, [&] {
            while (!stop.load()) {
                int rc = fern_mutex_timedlock(&m, fern_now_ns() + 20000);
                if (rc == 0) {
                    enter();
                    if (fern_mutex_unlock(&m) != 0) errors++;
                } else if (rc == ETIMEDOUT) {
                    timeouts++;
                } else {
                    errors++;
                }
            }
        }));
    // New waiters on c while the heirs are still queued on m.
    std::vector<fern_thread *> late(LATE);
    for (int i = 0; i < LATE; i++)
        ASSERT_EQ(0, spawn_on(&late[i], (i & 1) ? cl : nullptr, [&] {
            fern_mutex_lock(&m);
            late_waiting++;
            while (!late_go)
                if (fern_cond_wait(&c, &m) != 0) errors++;
            enter();
            if (fern_mutex_unlock(&m) != 0) errors++;
            late_done++;
        }));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    for (auto &p : ps) p.join();
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    for (auto t : ahead) ASSERT_EQ(0, fern_join(t, nullptr));
    ASSERT_TRUE(count_reaches(&m, late_waiting, LATE));
    EXPECT_EQ(0, late_done.load()) << "a late waiter returned before any signal";
    fern_mutex_lock(&m);
    late_go = 1;
    for (int i = 0; i < LATE; i++) EXPECT_EQ(0, fern_cond_signal(&c));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    for (auto t : late) ASSERT_EQ(0, fern_join(t, nullptr));
    stop = true;
    for (auto t : timed) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, overlaps.load()) << "two threads inside the mutex at once";
    EXPECT_EQ(0, errors.load());
    ASSERT_EQ((size_t)(GREEN + PLAIN), order.size());
    for (int i = 0; i < GREEN + PLAIN; i++)
        if (order[i] != i) {
            ADD_FAILURE() << "heir " << order[i] << " returned " << i << "th";
            break;
        }
    expect_settled(&m, &c);
    EXPECT_EQ(0, fern_cluster_destroy(cl));
}

// Once a broadcast has moved its waiters onto the mutex, they no longer use
// the condition: it may be destroyed and freed before they run (ASan would
// see any later access to it).
TEST(Cond, DestroyedAfterBroadcastWhileHeirsWait) {
    Watchdog wd(60, "DestroyedAfterBroadcastWhileHeirsWait");
    for (bool timed_one : {false, true}) {
        fern_cond *c = new fern_cond;
        ASSERT_EQ(0, fern_cond_init(c));
        fern_mutex m = FERN_MUTEX_INIT;
        constexpr int N = 50;
        int waiting = 0, go = 0, done = 0;
        std::vector<fern_thread *> ts(N);
        for (int i = 0; i < N; i++)
            ASSERT_EQ(0, spawn(&ts[i], nullptr, [&, i] {
                fern_cancel_shield(1); // moved whole only if not cancellable
                fern_mutex_lock(&m);
                waiting++;
                while (!go) {
                    int rc = timed_one && i == N / 2 ? fern_cond_timedwait(c, &m, fern_now_ns() + ms(60000))
                                                     : fern_cond_wait(c, &m);
                    EXPECT_EQ(0, rc);
                }
                done++;
                fern_mutex_unlock(&m);
            }));
        ASSERT_TRUE(count_reaches(&m, waiting, N));
        fern_mutex_lock(&m);
        EXPECT_EQ(timed_one ? 1u : 0u, c->timed_);
        go = 1;
        EXPECT_EQ(0, fern_cond_broadcast(c));
        EXPECT_EQ(0, fern_cond_destroy(c));
        memset(c, 0xa5, sizeof *c);
        delete c;
        EXPECT_EQ(0, done);
        EXPECT_EQ(0, fern_mutex_unlock(&m));
        for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        EXPECT_EQ(N, done);
        EXPECT_EQ(0u, m.heirs_);
        EXPECT_EQ(0, fern_mutex_destroy(&m));
    }
}

// Token protocol: every signal hands out one token; every token is consumed.
TEST(Cond, SignalHandsOutTokens) {
    Watchdog wd(60, "SignalHandsOutTokens");
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    int tokens = 0;
    std::atomic<int> consumed{0};
    constexpr int N = 100;
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn(&ts[i], nullptr, [&] {
            fern_mutex_lock(&m);
            while (tokens == 0) fern_cond_wait(&c, &m);
            tokens--;
            fern_mutex_unlock(&m);
            consumed++;
        }));
    for (int i = 0; i < N; i++) {
        fern_mutex_lock(&m);
        tokens++;
        EXPECT_EQ(0, fern_cond_signal(&c));
        fern_mutex_unlock(&m);
        if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(N, consumed.load());
    EXPECT_EQ(0, tokens);
}

TEST(Cond, TimedwaitTimesOutWithMutexHeld) {
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    auto check = [&] {
        ASSERT_EQ(0, fern_mutex_lock(&m));
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(ETIMEDOUT, fern_cond_timedwait(&c, &m, t0 + ms(30)));
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, ms(30));
        EXPECT_LT(el, ms(30) + ms(200));
        // m is held again: relock is EDEADLK, unlock succeeds.
        EXPECT_EQ(EDEADLK, fern_mutex_lock(&m));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
        // Past deadline: times out at once, still with m held.
        ASSERT_EQ(0, fern_mutex_lock(&m));
        EXPECT_EQ(ETIMEDOUT, fern_cond_timedwait(&c, &m, fern_now_ns() - ms(1)));
        EXPECT_EQ(ETIMEDOUT, fern_cond_timedwait(&c, &m, 0));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
    };
    ASSERT_EQ(0, run_green(check));
    check();
    EXPECT_EQ(0, fern_cond_destroy(&c)) << "timed-out waiter left on the cond";
}

// The timed-out waiter must re-acquire the mutex even when another thread
// holds it at the deadline.
TEST(Cond, TimedwaitReacquiresContendedMutex) {
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    std::atomic<bool> holder_has_it{false}, release{false};
    std::atomic<int> rc{-1};
    std::atomic<bool> returned{false};
    fern_thread *w = nullptr, *h = nullptr;
    ASSERT_EQ(0, spawn(&w, nullptr, [&] {
        fern_mutex_lock(&m);
        rc = fern_cond_timedwait(&c, &m, fern_now_ns() + ms(20));
        returned = true;
        EXPECT_EQ(0, fern_mutex_unlock(&m));
    }));
    ASSERT_EQ(0, spawn(&h, nullptr, [&] {
        fern_sleep_ns(ms(5));
        fern_mutex_lock(&m);
        holder_has_it = true;
        while (!release) fern_sleep_ns(ms(1));
        fern_mutex_unlock(&m);
    }));
    ASSERT_TRUE(wait_until([&] { return holder_has_it.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    EXPECT_FALSE(returned.load()) << "timedwait returned while another thread holds the mutex";
    release = true;
    ASSERT_EQ(0, fern_join(w, nullptr));
    ASSERT_EQ(0, fern_join(h, nullptr));
    EXPECT_EQ(ETIMEDOUT, rc.load());
}

TEST(Cond, TimedwaitNegativeDeadlineIsEinval) {
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    ASSERT_EQ(0, fern_mutex_lock(&m));
    EXPECT_EQ(EINVAL, fern_cond_timedwait(&c, &m, -1));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(0, fern_mutex_lock(&m));
        EXPECT_EQ(EINVAL, fern_cond_timedwait(&c, &m, -100));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
    }));
}

TEST(Cond, TimedwaitSignalledBeforeDeadline) {
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    bool flag = false;
    fern_thread *w = nullptr;
    std::atomic<int64_t> took{0};
    ASSERT_EQ(0, spawn(&w, nullptr, [&] {
        fern_mutex_lock(&m);
        int64_t t0 = fern_now_ns();
        int rc = 0;
        while (!flag && rc == 0) rc = fern_cond_timedwait(&c, &m, t0 + ms(10000));
        took = fern_now_ns() - t0;
        EXPECT_EQ(0, rc);
        EXPECT_TRUE(flag);
        fern_mutex_unlock(&m);
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fern_mutex_lock(&m);
    flag = true;
    fern_cond_signal(&c);
    fern_mutex_unlock(&m);
    ASSERT_EQ(0, fern_join(w, nullptr));
    EXPECT_LT(took.load(), ms(5000));
}

// Ping-pong between a green thread and a plain thread with cond_wait/signal:
// any lost wake-up hangs (the watchdog turns that into a failure).
TEST(Cond, PingPongGreenPlainNoLostWakeup) {
    Watchdog wd(90, "PingPongGreenPlainNoLostWakeup");
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    int turn = 0;  // 0: green's turn, 1: plain's turn
    const int ROUNDS = (int)scaled(20000, 2000);
    fern_thread *g = nullptr;
    ASSERT_EQ(0, spawn(&g, nullptr, [&] {
        for (int i = 0; i < ROUNDS; i++) {
            fern_mutex_lock(&m);
            while (turn != 0) fern_cond_wait(&c, &m);
            turn = 1;
            fern_cond_signal(&c);
            fern_mutex_unlock(&m);
        }
    }));
    for (int i = 0; i < ROUNDS; i++) {
        fern_mutex_lock(&m);
        while (turn != 1) fern_cond_wait(&c, &m);
        turn = 0;
        fern_cond_signal(&c);
        fern_mutex_unlock(&m);
    }
    ASSERT_EQ(0, fern_join(g, nullptr));
    EXPECT_EQ(0, turn);
}

// Same between green threads on two different clusters, signalling outside the
// lock, plus timedwait with short deadlines racing against signals.
TEST(Cond, PingPongAcrossClustersWithTimedwait) {
    Watchdog wd(90, "PingPongAcrossClustersWithTimedwait");
    fern_cluster *cl = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&cl, 1));
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    int turn = 0;
    const int ROUNDS = (int)scaled(20000, 2000);
    std::atomic<int> timeouts{0};
    auto player = [&](int me) {
        for (int i = 0; i < ROUNDS; i++) {
            fern_mutex_lock(&m);
            while (turn != me) {
                int rc = (i % 3 == 0) ? fern_cond_timedwait(&c, &m, fern_now_ns() + 20000)
                                      : fern_cond_wait(&c, &m);
                if (rc == ETIMEDOUT) timeouts++;
                else EXPECT_EQ(0, rc);
            }
            turn = 1 - me;
            fern_mutex_unlock(&m);
            fern_cond_signal(&c);
        }
    };
    fern_thread *a = nullptr, *b = nullptr;
    ASSERT_EQ(0, spawn_on(&a, nullptr, [&] { player(0); }));
    ASSERT_EQ(0, spawn_on(&b, cl, [&] { player(1); }));
    ASSERT_EQ(0, fern_join(a, nullptr));
    ASSERT_EQ(0, fern_join(b, nullptr));
    EXPECT_EQ(0, fern_cond_destroy(&c));
    EXPECT_EQ(0, fern_cluster_destroy(cl));
}

// Timed waits racing signals: whether woken or timed out, each waiter returns
// exactly once, holding the mutex (no two threads inside at once).
TEST(Cond, TimedwaitRaceWakeExactlyOnce) {
    Watchdog wd(90, "TimedwaitRaceWakeExactlyOnce");
    fern_cond c = FERN_COND_INIT;
    fern_mutex m = FERN_MUTEX_INIT;
    std::atomic<int> inside{0}, overlaps{0}, returns{0};
    std::atomic<bool> stop{false};
    constexpr int N = 32, PLAIN = 3;
    const int ITERS = (int)scaled(300, 30);
    auto waiter = [&](int i) {
        for (int k = 0; k < ITERS; k++) {
            fern_mutex_lock(&m);
            int rc = fern_cond_timedwait(&c, &m, fern_now_ns() + 1000 * ((i + k) % 50));
            if (rc != 0 && rc != ETIMEDOUT) ADD_FAILURE() << "timedwait rc " << rc;
            if (inside.fetch_add(1) != 0) overlaps++;
            returns++;
            inside.fetch_sub(1);
            if (fern_mutex_unlock(&m) != 0) ADD_FAILURE() << "mutex not held after timedwait";
        }
    };
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++) ASSERT_EQ(0, spawn(&ts[i], nullptr, [&, i] { waiter(i); }));
    std::vector<std::thread> ps;
    for (int i = 0; i < PLAIN; i++) ps.emplace_back([&, i] { waiter(1000 + i); });
    std::thread sig([&] {
        int i = 0;
        while (!stop.load()) {
            if (i++ % 4 == 0) fern_cond_broadcast(&c);
            else fern_cond_signal(&c);
            std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
    });
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    for (auto &p : ps) p.join();
    stop = true;
    sig.join();
    EXPECT_EQ(0, overlaps.load());
    EXPECT_EQ((N + PLAIN) * ITERS, returns.load());
    EXPECT_EQ(0u, c.waiting_);
    EXPECT_EQ(0u, c.timed_);
    EXPECT_EQ(0, fern_cond_destroy(&c)) << "a waiter stayed queued after returning";
    EXPECT_EQ(0, fern_mutex_destroy(&m));
}

TEST(Cond, StaticObjects) {
    bool flag = false;
    fern_thread *w = nullptr;
    ASSERT_EQ(0, spawn(&w, nullptr, [&] {
        fern_mutex_lock(&g_static_mutex);
        while (!flag) fern_cond_wait(&g_static_cond, &g_static_mutex);
        fern_mutex_unlock(&g_static_mutex);
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    fern_mutex_lock(&g_static_mutex);
    flag = true;
    fern_cond_broadcast(&g_static_cond);
    fern_mutex_unlock(&g_static_mutex);
    ASSERT_EQ(0, fern_join(w, nullptr));
}

} // namespace
