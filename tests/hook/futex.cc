// SPDX-License-Identifier: MIT
// A lock fern cannot see: a futex mutex of the program's own (as absl and
// folly keep), its waits made with an inline system call that no
// interposer reaches. A green thread that waits on it blocks its worker in
// the kernel; compensation (the monitor hands the worker's queue to a spare
// worker, src/watch/monitor.c, src/sched/spare.c) must keep the program
// live, including when the holder is parked on the blocked worker itself
// (its timer must fire elsewhere and it must run elsewhere to let go).
#include "lock_test.h"

#include <linux/futex.h>

using namespace lock_test;

FERN_WATCHDOG_EACH_TEST(120);

namespace {

class Compensation : public OnWorkers {};

long raw_futex(uint32_t *addr, int op, uint32_t val) {
#if defined(__x86_64__)
    long r;
    register long r10 __asm__("r10") = 0;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "0"((long)SYS_futex), "D"(addr), "S"((long)op), "d"((long)val), "r"(r10)
                     : "rcx", "r11", "memory");
    return r;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = SYS_futex;
    register long x0 __asm__("x0") = (long)addr;
    register long x1 __asm__("x1") = op;
    register long x2 __asm__("x2") = val;
    register long x3 __asm__("x3") = 0;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
    return x0;
#else
#error "an inline futex call for this architecture"
#endif
}

// Drepper's three-state futex mutex: 0 free, 1 held, 2 held with waiters.
struct RawMutex {
    uint32_t w = 0;
    void lock() {
        uint32_t e = 0;
        if (__atomic_compare_exchange_n(&w, &e, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        while (__atomic_exchange_n(&w, 2, __ATOMIC_ACQUIRE) != 0)
            raw_futex(&w, FUTEX_WAIT_PRIVATE, 2);
    }
    void unlock() {
        if (__atomic_exchange_n(&w, 0, __ATOMIC_RELEASE) == 2) raw_futex(&w, FUTEX_WAKE_PRIVATE, 1);
    }
};

// Green threads hold the raw lock across a hooked sleep (so the holder
// parks holding it and the next green thread of its worker blocks the
// worker in the kernel): every section runs, one at a time. Compensation
// is bounded (SPARES_MAX spares per cluster), so at most three threads wait
// on the lock at once here.
TEST_P(Compensation, RawFutexLockHeldAcrossHookedSleep) {
    Workers w(GetParam());
    RawMutex m;
    Exclusive ex;
    long count = 0;
    int64_t t0 = fern_now_ns();
    w.many(4, [&](int) {
        for (int k = 0; k < 10; k++) {
            m.lock();
            ex.enter();
            count++;
            usleep(1000);
            ex.leave();
            m.unlock();
            usleep(100);
        }
    });
    EXPECT_EQ(count, 40);
    EXPECT_EQ(ex.violations.load(), 0);
    // Each hand-over waits for the monitor to notice a stuck worker (two
    // slices) and a spare to start: slow, but it must finish.
    EXPECT_LT(secs_since(t0), kTsan ? 60.0 : 30.0);
    struct fern_stats st;
    fern_stats(&st);
    EXPECT_GT(st.spares_started, 0u) << "the program stayed live without compensation?";
}

INSTANTIATE_TEST_SUITE_P(Workers, Compensation, ::testing::Values(1, 2),
                         [](const auto &i) { return std::to_string(i.param) + "w"; });

}  // namespace
