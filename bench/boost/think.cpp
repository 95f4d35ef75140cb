// SPDX-License-Identifier: MIT
// think, Boost.Fiber: N fibers with a 1 MiB fixedsize_stack (malloc'd), each
// touches 900 KiB of its stack (one write per 4 KiB page) and returns;
// windows of 1000 (create 1000, join 1000). Baseline: N plain calls on the
// main stack. Default N = 10,000, not one million: every window's 1000
// stacks (1 GiB) are freed together and glibc trims them back to the kernel,
// so each fiber faults in its 225 pages again (~0.7 ms per fiber).
#include "bench_common.h"

#include <boost/fiber/all.hpp>
#include <vector>

#define WINDOW 1000
#define TOUCH (900u * 1024u)

static void body() { bench_touch_stack(TOUCH); }

int main(int argc, char **argv)
{
    long n = bench_arg(argc, argv, 10000);
    int64_t b0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        bench_touch_stack(TOUCH);
    int64_t base = bench_now_ns() - b0;

    std::vector<boost::fibers::fiber> f;
    f.reserve(WINDOW);
    int64_t t0 = bench_now_ns();
    for (long done = 0; done < n;) {
        long w = n - done < WINDOW ? n - done : WINDOW;
        for (long i = 0; i < w; i++)
            f.emplace_back(std::allocator_arg, boost::fibers::fixedsize_stack(1024 * 1024), body);
        for (auto &x : f)
            x.join();
        f.clear();
        done += w;
    }
    int64_t dt = bench_now_ns() - t0;
    bench_print("think", "boost", "threads", (double)n, "count");
    bench_print("think", "boost", "seconds", (double)dt / 1e9, "s");
    bench_print("think", "boost", "us_per_thread", (double)dt / 1e3 / (double)n, "us");
    bench_print("think", "boost", "baseline_s", (double)base / 1e9, "s");
    bench_print("think", "boost", "ratio_to_baseline", (double)dt / (double)base, "x");
    bench_print("think", "boost", "peak_rss_mib", (double)bench_status_kib("VmHWM") / 1024.0, "MiB");
    return 0;
}
