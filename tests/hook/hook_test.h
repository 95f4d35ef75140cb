/* SPDX-License-Identifier: MIT */
// Helpers for the fern-hook suites: a one-worker cluster (so a call that
// blocked its worker would stall everything else on it), a ticker green
// thread that measures how late a 1 ms sleeper gets, and raw system calls
// that bypass the hook to look at the kernel's view of a descriptor.
#ifndef FERN_TESTS_HOOK_TEST_H
#define FERN_TESTS_HOOK_TEST_H

#include "../fern_test.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <vector>

namespace hook_test {
using namespace fern_test;

// O_NONBLOCK as the kernel has it (not the hook's user view).
inline bool kernel_nonblock(int fd) {
    long fl = syscall(SYS_fcntl, fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

// A pipe created behind the hook's back (raw system call): unmanaged.
inline void raw_pipe(int p[2]) { ASSERT_EQ(syscall(SYS_pipe2, p, 0), 0); }

struct OneWorker {
    fern_cluster *c = nullptr;
    OneWorker() { EXPECT_EQ(fern_cluster_create(&c, 1), 0); }
    ~OneWorker() {
        if (c) {
            EXPECT_EQ(fern_cluster_destroy(c), 0);
        }
    }
    template <class F> fern_thread *spawn(F &&f) {
        fern_thread *t = nullptr;
        EXPECT_EQ(spawn_on(&t, c, std::forward<F>(f)), 0);
        return t;
    }
    template <class F> void run(F &&f) { join(spawn(std::forward<F>(f))); }
    static void join(fern_thread *t) { EXPECT_EQ(fern_join(t, nullptr), 0); }
};

// A green thread sleeping 1 ms at a time on the same worker; `late_ns` is
// the worst delay past a wake-up time. Stops when destroyed.
struct Ticker {
    std::atomic<bool> stop{false};
    std::atomic<int64_t> late_ns{0};
    std::atomic<long> ticks{0};
    fern_thread *t;
    template <class W> explicit Ticker(W &w) {
        t = w.spawn([this] {
            while (!stop.load()) {
                int64_t due = fern_now_ns() + 1000000;
                fern_sleep_until(due);
                int64_t l = fern_now_ns() - due;
                if (l > late_ns.load()) late_ns.store(l);
                ticks++;
            }
        });
    }
    ~Ticker() {
        stop = true;
        OneWorker::join(t);
    }
};

// How late the 1 ms ticker may get. A stalled worker shows as lateness of
// the whole blocking call, usually many of them one after another (and in
// the tests where another green thread must run to end the call, a stall
// is a hang); the bound leaves room for a machine shared with other jobs,
// where a worker left unscheduled for 400 ms has been seen.
inline const int64_t kLateLimit = ms(kTsan ? 1000 : 600);

inline double secs_since(int64_t t0) { return (double)(fern_now_ns() - t0) / 1e9; }

}  // namespace hook_test
#endif
