// SPDX-License-Identifier: MIT
// spawn, Boost.Fiber: construct + join trivial fibers in batches of 1000,
// default stack allocator (fixedsize_stack, 128 KiB via malloc).
#include "bench_common.h"

#include <boost/fiber/all.hpp>
#include <vector>

#define BATCH 1000

static void body() {}

int main(int argc, char **argv)
{
    long n = bench_arg(argc, argv, 1000000);
    std::vector<boost::fibers::fiber> f;
    f.reserve(BATCH);
    int64_t t0 = bench_now_ns();
    for (long done = 0; done < n;) {
        long b = n - done < BATCH ? n - done : BATCH;
        for (long i = 0; i < b; i++)
            f.emplace_back(body);
        for (auto &x : f)
            x.join();
        f.clear();
        done += b;
    }
    int64_t dt = bench_now_ns() - t0;
    bench_print("spawn", "boost", "ns_per_thread", (double)dt / (double)n, "ns");
    bench_print("spawn", "boost", "threads", (double)n, "count");
    return 0;
}
