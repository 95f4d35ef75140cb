// SPDX-License-Identifier: MIT
// mutex, Boost.Fiber: 8 fibers, 4 on each of 2 threads (round_robin, no
// migration), each locks one boost::fibers::mutex, increments a shared
// counter and unlocks, N times. ops per second = total / wall time.
#include "bench_common.h"

#include <boost/fiber/all.hpp>

#include <thread>

#define THREADS 2
#define PER_THREAD 4

static boost::fibers::mutex mu;
static long counter;

static double run(long per)
{
    counter = 0;
    int64_t t0 = bench_now_ns();
    std::thread th[THREADS];
    for (int k = 0; k < THREADS; k++)
        th[k] = std::thread([per] {
            boost::fibers::fiber f[PER_THREAD];
            for (int i = 0; i < PER_THREAD; i++)
                f[i] = boost::fibers::fiber([per] {
                    for (long j = 0; j < per; j++) {
                        mu.lock();
                        counter++;
                        mu.unlock();
                    }
                });
            for (int i = 0; i < PER_THREAD; i++)
                f[i].join();
        });
    for (int k = 0; k < THREADS; k++)
        th[k].join();
    int64_t dt = bench_now_ns() - t0;
    long want = per * THREADS * PER_THREAD;
    if (counter != want) {
        fprintf(stderr, "mutex: counter %ld, want %ld\n", counter, want);
        exit(2);
    }
    return (double)counter / ((double)dt / 1e9);
}

int main(int argc, char **argv)
{
    long total = bench_arg(argc, argv, 8000000);
    long per = total / (THREADS * PER_THREAD);
    run(per / 10 + 1);
    bench_print("mutex", "boost", "ops_per_sec", run(per), "ops/s");
    bench_print("mutex", "boost", "nthreads", THREADS * PER_THREAD, "count");
    return 0;
}
