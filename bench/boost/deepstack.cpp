// SPDX-License-Identifier: MIT
// deepstack, Boost.Fiber: fibers with a 512 KiB fixedsize_stack (malloc'd)
// that each touch 256 KiB of stack.
//  fresh:  N fibers alive at once (each touches, then waits on a condvar), so
//          every stack is new memory (glibc serves 512 KiB with mmap).
//  pooled: N sequential create + join; after the first free glibc raises its
//          mmap threshold and hands the same heap block back (already faulted).
#include "bench_common.h"

#include <boost/fiber/all.hpp>
#include <vector>

#define TOUCH (256u * 1024u)
#define STACK (512u * 1024u)

static boost::fibers::mutex mu;
static boost::fibers::condition_variable cv, main_cv;
static long n, touched;
static bool release_;

static void fresh_body()
{
    bench_touch_stack(TOUCH);
    std::unique_lock<boost::fibers::mutex> lk(mu);
    if (++touched == n)
        main_cv.notify_one();
    cv.wait(lk, [] { return release_; });
}

static void pooled_body() { bench_touch_stack(TOUCH); }

int main(int argc, char **argv)
{
    n = bench_arg(argc, argv, 1000);
    std::vector<boost::fibers::fiber> f;
    f.reserve((size_t)n);
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        f.emplace_back(std::allocator_arg, boost::fibers::fixedsize_stack(STACK), fresh_body);
    {
        std::unique_lock<boost::fibers::mutex> lk(mu);
        main_cv.wait(lk, [] { return touched == n; });
        release_ = true;
        cv.notify_all();
    }
    for (auto &x : f)
        x.join();
    f.clear();
    int64_t fresh = bench_now_ns() - t0;

    t0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        boost::fibers::fiber(std::allocator_arg, boost::fibers::fixedsize_stack(STACK), pooled_body).join();
    int64_t pooled = bench_now_ns() - t0;
    bench_print("deepstack", "boost", "fresh_us", (double)fresh / 1e3 / (double)n, "us");
    bench_print("deepstack", "boost", "pooled_us", (double)pooled / 1e3 / (double)n, "us");
    bench_print("deepstack", "boost", "fresh_over_pooled", (double)fresh / (double)pooled, "x");
    return 0;
}
