// SPDX-License-Identifier: MIT
// prodcons, Boost.Fiber: one producer and one consumer fiber on one thread.
//  condvar: one-slot buffer, boost::fibers::mutex + two
//           boost::fibers::condition_variable (not_full, not_empty);
//  chan:    boost::fibers::buffered_channel<long>(2) — Boost requires a
//           power-of-2 capacity of at least 2 and keeps one slot free, so it
//           holds at most one element: a capacity-1 channel.
// ns per item; the consumer checks the sum.
#include "bench_common.h"

#include <boost/fiber/all.hpp>

#include <mutex>

static long n;
static int64_t t0, t1;
static long got_sum;

static double run_cv()
{
    boost::fibers::mutex m;
    boost::fibers::condition_variable not_full, not_empty;
    long slot = 0;
    bool full = false;
    got_sum = 0;
    boost::fibers::fiber cons([&] {
        long sum = 0;
        for (long i = 1; i <= n; i++) {
            std::unique_lock<boost::fibers::mutex> lk(m);
            while (!full)
                not_empty.wait(lk);
            sum += slot;
            full = false;
            not_full.notify_one();
        }
        t1 = bench_now_ns();
        got_sum = sum;
    });
    boost::fibers::fiber prod([&] {
        t0 = bench_now_ns();
        for (long i = 1; i <= n; i++) {
            std::unique_lock<boost::fibers::mutex> lk(m);
            while (full)
                not_full.wait(lk);
            slot = i;
            full = true;
            not_empty.notify_one();
        }
    });
    prod.join();
    cons.join();
    return (double)(t1 - t0) / (double)n;
}

static double run_chan()
{
    boost::fibers::buffered_channel<long> ch(2);
    got_sum = 0;
    boost::fibers::fiber cons([&] {
        long sum = 0, v = 0;
        for (long i = 1; i <= n; i++) {
            ch.pop(v);
            sum += v;
        }
        t1 = bench_now_ns();
        got_sum = sum;
    });
    boost::fibers::fiber prod([&] {
        t0 = bench_now_ns();
        for (long i = 1; i <= n; i++)
            ch.push(i);
    });
    prod.join();
    cons.join();
    return (double)(t1 - t0) / (double)n;
}

static void check()
{
    if (got_sum != n * (n + 1) / 2) {
        fprintf(stderr, "prodcons: sum %ld, want %ld\n", got_sum, n * (n + 1) / 2);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    long full = bench_arg(argc, argv, 1000000);
    n = full / 10 + 1; // warm-up
    run_cv();
    check();
    run_chan();
    check();
    n = full;
    double cv = run_cv();
    check();
    double chv = run_chan();
    check();
    bench_print("prodcons", "boost", "ns_per_item_condvar", cv, "ns");
    bench_print("prodcons", "boost", "ns_per_item_chan", chv, "ns");
    bench_print("prodcons", "boost", "items", (double)n, "count");
    return 0;
}
