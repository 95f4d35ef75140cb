// SPDX-License-Identifier: MIT
// A one-worker cluster's ring against the monitor's rescue and a spare
// worker (src/sched.c: ring_enter, ring_share). Alone, the worker takes from
// its ring without a CAS and queues a yielding thread before its switch;
// both are wrong while another kernel thread takes from the ring (without
// the handshake this test crashes within a second). Rounds of two phases:
// busy, where threads yield and migrate out and back, and one thread blocks
// the worker in a raw system call long enough to be called stuck (the
// monitor moves the ring to the inbox and starts a spare, which then keeps
// stealing from the owner's ring once it runs again), and quiet, where every
// thread waits on a condition variable until the spare has ended and the
// ring is the owner's alone again. Checks: no thread runs on two kernel
// threads at once, every thread keeps running, spares came and went, the
// spare stole. Size: 2 s * FERN_STRESS_SCALE (at least 0.6 s).
#include "../fern_test.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <time.h>

#include <vector>

using namespace fern_test;

namespace {

struct State {
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    int round = 0;  // guarded by m
    std::atomic<bool> busy{false}, stop{false};
    std::atomic<long> errors{0};
};

State *g;

// A thread's turn on the CPU: nobody else may be inside it.
struct Turn {
    std::atomic<int> inside{0};
    std::atomic<long> turns{0};
    void run() {
        if (inside.exchange(1) != 0) g->errors++;
        turns++;
        inside.store(0);
    }
};

// Wait for the next busy phase; false once the test stops.
bool next_round(int *seen) {
    fern_mutex_lock(&g->m);
    while (g->round == *seen && !g->stop.load()) fern_cond_wait(&g->cv, &g->m);
    *seen = g->round;
    fern_mutex_unlock(&g->m);
    return !g->stop.load();
}

} // namespace

TEST(StressRescue, OneWorkerRingAgainstRescueAndSpare) {
    // A 1 ms slice: a worker 2 ms in the kernel counts as stuck.
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    fern_config cfg{0, 0, 1000};
    ASSERT_EQ(0, fern_init(&cfg));
    Watchdog wd(300);
    State st;
    g = &st;
    fern_cluster *c;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    struct fern_stats s0;
    ASSERT_EQ(0, fern_stats(&s0));

    // Each thread yields a few times (the queue-before-switch path), then
    // leaves for the default cluster and comes back through c's inbox
    // (sched_park's pop; the push wakes an idle worker of c). Threads leave
    // whichever worker runs them, so each worker keeps running dry and
    // stealing half of the other's ring.
    const int nthreads = 32;
    std::vector<Turn> turns(nthreads);
    std::vector<fern_thread *> ts;
    for (int i = 0; i < nthreads; i++) {
        fern_thread *t;
        ASSERT_EQ(0, spawn_on(&t, c, [&turns, i, c] {
                      int seen = 0;
                      while (next_round(&seen))
                          while (g->busy.load(std::memory_order_relaxed)) {
                              for (int k = 0; k < 8; k++) {
                                  turns[i].run();
                                  fern_yield();
                              }
                              if (fern_migrate(fern_cluster_default()) != 0 || fern_migrate(c) != 0)
                                  g->errors++;
                          }
                  }));
        ts.push_back(t);
    }
    std::atomic<long> blocked{0};
    fern_thread *blocker;
    ASSERT_EQ(0, spawn_on(&blocker, c, [&blocked] {
                  int seen = 0;
                  while (next_round(&seen)) {
                      // Let the others fill the ring, then hold the worker in
                      // the kernel for several 1 ms slices.
                      for (int i = 0; i < 200 && g->busy.load(); i++) fern_yield();
                      struct timespec d = {0, 6 * 1000000};
                      syscall(SYS_nanosleep, &d, nullptr);
                      blocked++;
                      while (g->busy.load(std::memory_order_relaxed)) fern_yield();
                  }
              }));

    auto run_for = std::chrono::milliseconds(static_cast<long>(2000 * stress_scale()));
    if (run_for < std::chrono::milliseconds(600)) run_for = std::chrono::milliseconds(600);
    auto end = std::chrono::steady_clock::now() + run_for;
    int rounds = 0;
    while (std::chrono::steady_clock::now() < end) {
        g->busy = true;
        fern_mutex_lock(&g->m);
        g->round++;
        fern_cond_broadcast(&g->cv);
        fern_mutex_unlock(&g->m);
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
        g->busy = false;
        // Quiet: the spare finds nothing for its linger time and ends.
        std::this_thread::sleep_for(std::chrono::milliseconds(80));
        rounds++;
    }
    g->stop = true;
    fern_mutex_lock(&g->m);
    fern_cond_broadcast(&g->cv);
    fern_mutex_unlock(&g->m);
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    ASSERT_EQ(0, fern_join(blocker, nullptr));

    struct fern_stats s1;
    ASSERT_EQ(0, fern_stats(&s1));
    std::printf("rounds %d, blocked %ld, spares started %llu, steals %llu\n", rounds,
                blocked.load(), (unsigned long long)(s1.spares_started - s0.spares_started),
                (unsigned long long)(s1.steals - s0.steals));
    EXPECT_EQ(0, st.errors.load()) << "a thread ran on two kernel threads at once";
    for (size_t i = 0; i < turns.size(); i++) EXPECT_GT(turns[i].turns.load(), 0) << "thread " << i;
    // Without spares and steals the ring was never shared: nothing proved.
    EXPECT_GE(s1.spares_started - s0.spares_started, 2u);
    EXPECT_GT(s1.steals - s0.steals, 0u);
    ASSERT_EQ(0, fern_cluster_destroy(c));
}
