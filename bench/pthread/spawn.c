/* SPDX-License-Identifier: MIT */
/* spawn, pthreads: pthread_create + pthread_join of trivial threads in
 * batches of 1000. Default 20,000 threads (not one million: kernel threads
 * cost ~10-20 us each), reported per thread. */
#include "bench_common.h"

#include <pthread.h>

#define BATCH 1000

static void *body(void *arg) { return arg; }

int main(int argc, char **argv)
{
    long n = bench_arg(argc, argv, 20000);
    static pthread_t t[BATCH];
    int64_t t0 = bench_now_ns();
    for (long done = 0; done < n;) {
        long b = n - done < BATCH ? n - done : BATCH;
        for (long i = 0; i < b; i++) {
            int rc = pthread_create(&t[i], NULL, body, NULL);
            if (rc)
                bench_die("pthread_create", rc);
        }
        for (long i = 0; i < b; i++)
            pthread_join(t[i], NULL);
        done += b;
    }
    int64_t dt = bench_now_ns() - t0;
    bench_print("spawn", "pthread", "ns_per_thread", (double)dt / (double)n, "ns");
    bench_print("spawn", "pthread", "threads", (double)n, "count");
    return 0;
}
