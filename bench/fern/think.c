/* SPDX-License-Identifier: MIT */
/* think, fern: N green threads with attr.stack_size = 1 MiB each touch
 * 900 KiB of their stack (one write per 4 KiB page) and return; windows of
 * 1000 (spawn 1000, join 1000) from a green thread, default workers.
 * Baseline: N plain calls doing the same, before the runtime starts, spread
 * over one kernel thread per worker (think_baseline.h), so both sides use
 * the same CPUs. Peak RSS = VmHWM of the process. */
#include "bench_common.h"
#include "think_baseline.h"

#include <fern/fern.h>

#define WINDOW 1000
#define TOUCH (900u * 1024u)

static long n;
static int64_t base_ns;

static void *body(void *arg)
{
    bench_touch_stack(TOUCH);
    return arg;
}

static void *main_green(void *arg)
{
    static fern_thread *t[WINDOW];
    fern_attr attr = {.stack_size = 1024 * 1024, .name = NULL, .cluster = NULL, .detached = false};
    int rc;
    int64_t t0 = bench_now_ns();
    for (long done = 0; done < n;) {
        long w = n - done < WINDOW ? n - done : WINDOW;
        for (long i = 0; i < w; i++)
            if ((rc = fern_spawn(&t[i], &attr, body, NULL)))
                bench_die("fern_spawn", rc);
        for (long i = 0; i < w; i++)
            if ((rc = fern_join(t[i], NULL)))
                bench_die("fern_join", rc);
        done += w;
    }
    int64_t dt = bench_now_ns() - t0;
    struct fern_stats st;
    fern_stats(&st);
    bench_print("think", "fern", "threads", (double)n, "count");
    bench_print("think", "fern", "seconds", (double)dt / 1e9, "s");
    bench_print("think", "fern", "us_per_thread", (double)dt / 1e3 / (double)n, "us");
    bench_print("think", "fern", "baseline_s", (double)base_ns / 1e9, "s");
    bench_print("think", "fern", "ratio_to_baseline", (double)dt / (double)base_ns, "x");
    bench_print("think", "fern", "peak_rss_mib", (double)bench_status_kib("VmHWM") / 1024.0, "MiB");
    bench_print("think", "fern", "stacks_mapped", (double)st.stacks_mapped, "count");
    bench_print("think", "fern", "stack_trims", (double)st.stack_trims, "count");
    return arg;
}

int main(int argc, char **argv)
{
    n = bench_arg(argc, argv, 1000000);
    /* fern's default cluster has one worker per online CPU. */
    base_ns = think_baseline(n, think_cpus());
    int rc = fern_run(main_green, NULL, NULL);
    if (rc)
        bench_die("fern_run", rc);
    fern_shutdown();
    return 0;
}
