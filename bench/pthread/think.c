/* SPDX-License-Identifier: MIT */
/* think, pthreads: N kernel threads with 1 MiB stacks, each touches 900 KiB
 * of its stack (one write per 4 KiB page) and returns; windows of 1000
 * (create 1000, join 1000). Default N = 10,000 (not one million: at ~0.3 ms
 * per thread that would take ~5 minutes). Baseline: N plain calls doing the
 * same, spread over one kernel thread per CPU (think_baseline.h): the
 * threads measured run on every CPU too. glibc caches freed thread stacks (up to 40 MiB) but gives
 * their pages back with MADV_DONTNEED, so each thread faults its pages in. */
#include "bench_common.h"
#include "think_baseline.h"

#include <pthread.h>

#define WINDOW 1000
#define TOUCH (900u * 1024u)

static void *body(void *arg)
{
    bench_touch_stack(TOUCH);
    return arg;
}

int main(int argc, char **argv)
{
    long n = bench_arg(argc, argv, 10000);
    int64_t base = think_baseline(n, think_cpus());

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1024 * 1024);
    static pthread_t t[WINDOW];
    int64_t t0 = bench_now_ns();
    for (long done = 0; done < n;) {
        long w = n - done < WINDOW ? n - done : WINDOW;
        for (long i = 0; i < w; i++) {
            int rc = pthread_create(&t[i], &attr, body, NULL);
            if (rc)
                bench_die("pthread_create", rc);
        }
        for (long i = 0; i < w; i++)
            pthread_join(t[i], NULL);
        done += w;
    }
    int64_t dt = bench_now_ns() - t0;
    bench_print("think", "pthread", "threads", (double)n, "count");
    bench_print("think", "pthread", "seconds", (double)dt / 1e9, "s");
    bench_print("think", "pthread", "us_per_thread", (double)dt / 1e3 / (double)n, "us");
    bench_print("think", "pthread", "baseline_s", (double)base / 1e9, "s");
    bench_print("think", "pthread", "ratio_to_baseline", (double)dt / (double)base, "x");
    bench_print("think", "pthread", "peak_rss_mib", (double)bench_status_kib("VmHWM") / 1024.0, "MiB");
    return 0;
}
