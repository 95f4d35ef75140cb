// SPDX-License-Identifier: MIT
// switch, Boost.Fiber: the fern_switch.c scenarios with fibers on one thread
// (round_robin) and boost::this_fiber::yield() (argv: N MODE). cold: 10,000
// fibers with 16 KiB fixedsize_stack (the default 128 KiB malloc per fiber
// would measure the allocator). ns per yield call, from the moment every
// fiber runs.
#include "bench_common.h"

#include <errno.h>

#include <boost/fiber/all.hpp>
#include <vector>

#define COLD_THREADS 10000

static long n_iter;
static int nthreads;
static int started;
static int64_t t_start, t_end;
/* What each body does between yields differs, so that the compiler cannot
 * fold the bodies into one function (gcc's -fipa-icf would). */
static volatile long sum_a, xor_b, cnt_c;

// The clock starts when every fiber runs; early arrivals wait blocked.
static boost::fibers::mutex gate_m;
static boost::fibers::condition_variable gate_c;

static void gate(void)
{
    std::unique_lock<boost::fibers::mutex> lk(gate_m);
    if (++started == nthreads) {
        t_start = bench_now_ns();
        gate_c.notify_all();
    }
    while (t_start == 0)
        gate_c.wait(lk);
}

static void finish(void)
{
    int64_t now = bench_now_ns(), end = __atomic_load_n(&t_end, __ATOMIC_RELAXED);
    while (now > end && !__atomic_compare_exchange_n(&t_end, &end, now, false, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED))
        ; /* keep the later finish time; main reads it after the joins */
}

__attribute__((noinline)) static void body_a(long n)
{
    gate();
    for (long i = 0; i < n; i++) {
        sum_a = sum_a + i;
        boost::this_fiber::yield();
    }
    finish();
}

__attribute__((noinline)) static void body_b(long n)
{
    gate();
    for (long i = 0; i < n; i++) {
        boost::this_fiber::yield();
        xor_b = xor_b ^ i;
    }
    finish();
}

__attribute__((noinline)) static void body_c(long n)
{
    gate();
    for (long i = n; i > 0; i--) {
        if (i & 1)
            cnt_c = cnt_c + 1;
        boost::this_fiber::yield();
    }
    finish();
}

int main(int argc, char **argv)
{
    n_iter = bench_arg(argc, argv, 1000000);
    const char *mode = argc > 2 ? argv[2] : "asym";
    void (*bodies[3])(long) = {body_a, body_b, body_c};
    long per_thread;
    if (!strcmp(mode, "asym") || !strcmp(mode, "rr3")) {
        nthreads = mode[0] == 'a' ? 2 : 3;
        per_thread = n_iter;
    } else if (!strcmp(mode, "cold")) {
        nthreads = COLD_THREADS;
        per_thread = n_iter / COLD_THREADS > 0 ? n_iter / COLD_THREADS : 1;
    } else {
        fprintf(stderr, "usage: %s N asym|rr3|cold\n", argv[0]);
        return 2;
    }
    std::vector<boost::fibers::fiber> t;
    for (int i = 0; i < nthreads; i++)
        t.emplace_back(std::allocator_arg, boost::fibers::fixedsize_stack(16 << 10),
                       bodies[nthreads == COLD_THREADS ? 0 : i], per_thread);
    for (auto &f : t)
        f.join();
    char metric[32];
    snprintf(metric, sizeof metric, "ns_per_switch_%s", mode);
    bench_print("switch", "boost", metric, (double)(t_end - t_start) / ((double)nthreads * (double)per_thread),
                "ns");
    return 0;
}
