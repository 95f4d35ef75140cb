// SPDX-License-Identifier: MIT
// million, Boost.Fiber: N detached fibers each wait on one
// boost::fibers::condition_variable (with a boost::fibers::mutex), all on the
// main thread's scheduler. Stack: fixedsize_stack of 16 KiB (see the note
// printed as `stack_kib`): the default 128 KiB malloc'd stack would be one
// mmap per fiber.
#include "bench_common.h"

#include <boost/fiber/all.hpp>

static boost::fibers::mutex mu;
static boost::fibers::condition_variable cv, main_cv;
static long n, parked, finished;
static bool go;

static void body()
{
    std::unique_lock<boost::fibers::mutex> lk(mu);
    if (++parked == n)
        main_cv.notify_one();
    cv.wait(lk, [] { return go; });
    if (++finished == n)
        main_cv.notify_one();
}

int main(int argc, char **argv)
{
    n = bench_arg(argc, argv, 1000000);
    const size_t stack = 16 * 1024;
    long m0 = bench_mem_bytes();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        boost::fibers::fiber(std::allocator_arg, boost::fibers::fixedsize_stack(stack), body).detach();
    {
        std::unique_lock<boost::fibers::mutex> lk(mu);
        main_cv.wait(lk, [] { return parked == n; });
    }
    int64_t t1 = bench_now_ns();
    long m1 = bench_mem_bytes();
    {
        std::unique_lock<boost::fibers::mutex> lk(mu);
        go = true;
        cv.notify_all();
        main_cv.wait(lk, [] { return finished == n; });
    }
    int64_t t2 = bench_now_ns();
    bench_print("million", "boost", "threads", (double)n, "count");
    bench_print("million", "boost", "stack_kib", (double)stack / 1024, "KiB");
    bench_print("million", "boost", "spawn_park_s", (double)(t1 - t0) / 1e9, "s");
    bench_print("million", "boost", "bytes_per_thread", (double)(m1 - m0) / (double)n, "bytes");
    bench_print("million", "boost", "wake_all_s", (double)(t2 - t1) / 1e9, "s");
    return 0;
}
