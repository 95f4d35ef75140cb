/* SPDX-License-Identifier: MIT */
// The coursework's producer/consumer (one-slot buffer, a mutex and two
// condition variables) run with a tiny time slice beside spinners, so
// preemption lands inside and around every fern primitive call: every 64th
// item the producer computes for ~2 slices while holding the mutex. Shared
// by test_preempt (short) and stress/preempt (long, label stress).
#ifndef FERN_TESTS_PREEMPT_PRODCONS_H
#define FERN_TESTS_PREEMPT_PRODCONS_H

#include "fern_test.h"

#include <vector>

namespace fern_test {

struct OneSlot {
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond not_full = FERN_COND_INIT, not_empty = FERN_COND_INIT;
    bool full = false;
    long item = 0;
};

// Arithmetic for ns of wall time, reading the clock every ~1000 steps: a
// spinner that reads it much more often is found inside the vDSO at many of
// its ticks (an unsafe point: preempt.c), which is not what these tests are
// about.
__attribute__((noinline)) inline uint64_t burn_ns(int64_t ns) {
    uint64_t x = 1;
    int64_t end = fern_now_ns() + ns;
    while (fern_now_ns() < end)
        for (int i = 0; i < 1000; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

// Two producers (items p, p+2, p+4, ...) and two consumers, one spinner per
// worker; checks every item arrived exactly once, each producer's in order.
inline void run_preempt_prodcons(long items, unsigned workers) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    fern_config cfg{workers, 0, FERN_PREEMPT_MIN_US};
    ASSERT_EQ(0, fern_init(&cfg));
    Watchdog wd(600, "preempt prodcons");
    OneSlot q;
    std::atomic<bool> stop{false};
    std::atomic<long> sum{0}, count{0}, disorder{0};
    std::vector<fern_thread *> ts;
    for (unsigned i = 0; i < workers; i++) {
        fern_thread *t; // spinners: someone is always waiting to run
        ASSERT_EQ(0, spawn(&t, nullptr, [&stop] {
                      uint64_t x = 0;
                      while (!stop.load(std::memory_order_relaxed)) x += burn_ns(20000);
                      return (void *)(uintptr_t)x;
                  }));
        ts.push_back(t);
    }
    std::vector<fern_thread *> workers_v;
    for (int p = 0; p < 2; p++) {
        fern_thread *t;
        ASSERT_EQ(0, spawn(&t, nullptr, [&q, p, items] {
                      for (long i = p; i < items; i += 2) {
                          fern_mutex_lock(&q.m);
                          while (q.full) fern_cond_wait(&q.not_full, &q.m);
                          if (i % 64 == p) burn_ns(200000);
                          q.item = i;
                          q.full = true;
                          fern_cond_signal(&q.not_empty);
                          fern_mutex_unlock(&q.m);
                      }
                  }));
        workers_v.push_back(t);
    }
    long per_consumer = items / 2;
    for (int c = 0; c < 2; c++) {
        fern_thread *t;
        ASSERT_EQ(0, spawn(&t, nullptr, [&, per_consumer] {
                      long last[2] = {-2, -1};
                      for (long k = 0; k < per_consumer; k++) {
                          fern_mutex_lock(&q.m);
                          while (!q.full) fern_cond_wait(&q.not_empty, &q.m);
                          long v = q.item;
                          q.full = false;
                          fern_cond_signal(&q.not_full);
                          fern_mutex_unlock(&q.m);
                          // Two consumers share the stream, so each sees a
                          // subsequence: still increasing per producer.
                          if (v <= last[v & 1]) disorder++;
                          last[v & 1] = v;
                          sum += v;
                          count++;
                      }
                  }));
        workers_v.push_back(t);
    }
    for (auto t : workers_v) ASSERT_EQ(0, fern_join(t, nullptr));
    stop = true;
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(items, count.load());
    EXPECT_EQ(items * (items - 1) / 2, sum.load());
    EXPECT_EQ(0, disorder.load());
    struct fern_stats s;
    ASSERT_EQ(0, fern_stats(&s));
    if (!kTsan && kAsyncPreempt) {
        EXPECT_GT(s.preemptions, 0u);
    } else if (!kAsyncPreempt) {
        EXPECT_EQ(0u, s.preemptions);
    }
    ASSERT_EQ(0, fern_shutdown());
}

} // namespace fern_test

#endif
