// SPDX-License-Identifier: MIT
// yield, Boost.Fiber: two fibers on one thread (round_robin scheduler)
// alternate with boost::this_fiber::yield().
#include "bench_common.h"

#include <boost/fiber/all.hpp>

static long n_iter;
static volatile int last_runner = -1;
static long switched[2];

static void body(int me)
{
    long sw = 0;
    for (long i = 0; i < n_iter; i++) {
        if (last_runner != me) {
            sw++;
            last_runner = me;
        }
        boost::this_fiber::yield();
    }
    switched[me] = sw;
}

int main(int argc, char **argv)
{
    n_iter = bench_arg(argc, argv, 1000000);
    int64_t t0 = bench_now_ns();
    boost::fibers::fiber a(body, 0), b(body, 1);
    a.join();
    b.join();
    int64_t dt = bench_now_ns() - t0;
    double yields = 2.0 * (double)n_iter;
    bench_print("yield", "boost", "ns_per_switch", (double)dt / yields, "ns");
    bench_print("yield", "boost", "switch_pct", 100.0 * (double)(switched[0] + switched[1]) / yields, "%");
    return 0;
}
