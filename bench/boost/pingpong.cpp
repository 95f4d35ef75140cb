// SPDX-License-Identifier: MIT
// pingpong, Boost.Fiber: two fibers bounce a counter over two
// boost::fibers::unbuffered_channel<long> (ping, pong). ns per round trip.
//  w1: both fibers on one thread (default round_robin scheduler).
//  w2: two threads, each with the work_stealing scheduler (2 threads,
//      suspend = true: an idle thread sleeps instead of spinning, as fern's
//      workers do; the default, spinning, measured slower on this shared
//      2-core machine); the fibers are launched on one thread and the other
//      may steal them.
// Usage: boost_pingpong [N [W]].
#include "bench_common.h"

#include <boost/fiber/all.hpp>

#include <condition_variable>
#include <mutex>
#include <thread>

typedef boost::fibers::unbuffered_channel<long> chan;

static double round_ns(long n)
{
    chan ping, pong;
    int64_t t0 = 0, t1 = 0;
    boost::fibers::fiber b([&] {
        long v = 0;
        for (long i = 0; i < n; i++) {
            ping.pop(v);
            pong.push(v + 1);
        }
    });
    boost::fibers::fiber a([&] {
        t0 = bench_now_ns();
        for (long i = 0; i < n; i++) {
            long back = 0;
            ping.push(i);
            pong.pop(back);
            if (back != i + 1) {
                fprintf(stderr, "pingpong: got %ld, want %ld\n", back, i + 1);
                exit(2);
            }
        }
        t1 = bench_now_ns();
    });
    a.join();
    b.join();
    return (double)(t1 - t0) / (double)n;
}

int main(int argc, char **argv)
{
    long n = bench_arg(argc, argv, 1000000);
    int only = argc > 2 ? atoi(argv[2]) : 0;
    if (only == 0 || only == 1) {
        double r = 0;
        std::thread t([&] {
            round_ns(n < 10000 ? n : 10000);
            r = round_ns(n);
        });
        t.join();
        bench_print("pingpong", "boost", "ns_per_roundtrip_w1", r, "ns");
        bench_print("pingpong", "boost", "roundtrips_w1", (double)n, "count");
    }
    if (only == 0 || only == 2) {
        double r = 0;
        bool done = false;
        std::mutex mtx;
        boost::fibers::condition_variable_any cv;
        std::thread helper([&] {
            boost::fibers::use_scheduling_algorithm<boost::fibers::algo::work_stealing>(2, true);
            std::unique_lock<std::mutex> lk(mtx);
            cv.wait(lk, [&] { return done; }); // parks the main fiber: stolen fibers run here
        });
        std::thread t([&] {
            boost::fibers::use_scheduling_algorithm<boost::fibers::algo::work_stealing>(2, true);
            round_ns(n < 10000 ? n : 10000);
            r = round_ns(n);
            {
                std::lock_guard<std::mutex> lk(mtx);
                done = true;
            }
            cv.notify_all();
        });
        t.join();
        helper.join();
        bench_print("pingpong", "boost", "ns_per_roundtrip_w2", r, "ns");
        bench_print("pingpong", "boost", "roundtrips_w2", (double)n, "count");
    }
    return 0;
}
