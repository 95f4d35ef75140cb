/* SPDX-License-Identifier: MIT */
/* spawn, fern: fern_spawn + fern_join of trivial green threads in batches of
 * 1000, from a green thread (fern_run), default workers (one per CPU). */
#include "bench_common.h"

#include <fern/fern.h>

#define BATCH 1000

static long n;

static void *body(void *arg) { return arg; }

static void *main_green(void *arg)
{
    static fern_thread *t[BATCH];
    int rc;
    int64_t t0 = bench_now_ns();
    for (long done = 0; done < n;) {
        long b = n - done < BATCH ? n - done : BATCH;
        for (long i = 0; i < b; i++)
            if ((rc = fern_spawn(&t[i], NULL, body, NULL)))
                bench_die("fern_spawn", rc);
        for (long i = 0; i < b; i++)
            if ((rc = fern_join(t[i], NULL)))
                bench_die("fern_join", rc);
        done += b;
    }
    int64_t dt = bench_now_ns() - t0;
    bench_print("spawn", "fern", "ns_per_thread", (double)dt / (double)n, "ns");
    bench_print("spawn", "fern", "threads", (double)n, "count");
    return arg;
}

int main(int argc, char **argv)
{
    n = bench_arg(argc, argv, 1000000);
    int rc = fern_run(main_green, NULL, NULL);
    if (rc)
        bench_die("fern_run", rc);
    fern_shutdown();
    return 0;
}
