/* SPDX-License-Identifier: MIT */
// Helpers for the fern-hook lock suites (lock.cc, ...): clusters of 1 or 2
// workers, plain threads, and a count of mutual-exclusion violations.
#ifndef FERN_TESTS_HOOK_LOCK_TEST_H
#define FERN_TESTS_HOOK_LOCK_TEST_H

#include "hook_test.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include <atomic>
#include <functional>
#include <thread>

namespace lock_test {
using namespace hook_test;

struct Workers {
    fern_cluster *c = nullptr;
    explicit Workers(int n) { EXPECT_EQ(fern_cluster_create(&c, n), 0); }
    ~Workers() {
        if (c) {
            EXPECT_EQ(fern_cluster_destroy(c), 0);
        }
    }
    template <class F> fern_thread *spawn(F &&f) {
        fern_thread *t = nullptr;
        EXPECT_EQ(spawn_on(&t, c, std::forward<F>(f)), 0);
        return t;
    }
    // n green threads running f(i), joined.
    void many(int n, const std::function<void(int)> &f) {
        std::vector<fern_thread *> ts;
        for (int i = 0; i < n; i++) ts.push_back(spawn([&f, i] { f(i); }));
        for (auto t : ts) EXPECT_EQ(fern_join(t, nullptr), 0);
    }
};

// A section that must be entered by one thread at a time: counts entries
// that found another thread inside.
struct Exclusive {
    std::atomic<int> inside{0};
    std::atomic<long> violations{0};
    void enter() {
        if (inside.fetch_add(1) != 0) violations++;
    }
    void leave() { inside.fetch_sub(1); }
};

// Compensation workers started so far: a green thread that blocked its
// worker in the kernel makes the monitor start one (a worker merely short
// of CPU does not count as stuck), so a test whose threads only park sees
// none started.
inline uint64_t spares_started() {
    struct fern_stats s;
    fern_stats(&s);
    return s.spares_started;
}

// Whether fern-hook's condition variables are in use: not when another
// library in front of it defines pthread_cond_signal (the sanitizer
// runtimes do; hook/lock.h says why), where conditions stay glibc's and a
// green waiter blocks its worker.
inline bool conds_park() {
    Dl_info i;
    void *f = dlsym(RTLD_DEFAULT, "pthread_cond_signal");
    return f && dladdr(f, &i) && i.dli_fname && strstr(i.dli_fname, "fern-hook");
}
#define SKIP_UNLESS_CONDS_PARK()                                                                   \
    if (!conds_park())                                                                             \
    GTEST_SKIP() << "condition variables stay glibc's behind this build's sanitizer interceptors"

// The worker counts the tests run on (1 and 2).
class OnWorkers : public ::testing::TestWithParam<int> {};

}  // namespace lock_test
#endif
