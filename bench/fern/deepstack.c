/* SPDX-License-Identifier: MIT */
/* deepstack, fern (one worker): green threads with attr.stack_size =
 * 512 KiB that each touch 256 KiB of stack.
 *  fresh:  N threads alive at once (each touches, then waits on a fern_cond),
 *          so none can reuse a pooled stack: every one binds a new stack of
 *          this size class (the pool starts empty).
 *  pooled: then N sequential spawn + join: each reuses a stack from the pool
 *          (unless the pool trimmed it, which shows up as page faults).
 * us per thread for each, and fresh/pooled. */
#include "bench_common.h"

#include <fern/fern.h>

#define TOUCH (256u * 1024u)

static fern_mutex mu = FERN_MUTEX_INIT;
static fern_cond cv = FERN_COND_INIT;
static fern_cond main_cv = FERN_COND_INIT;
static long n, touched;
static int release_;

static void *fresh_body(void *arg)
{
    bench_touch_stack(TOUCH);
    fern_mutex_lock(&mu);
    if (++touched == n)
        fern_cond_signal(&main_cv);
    while (!release_)
        fern_cond_wait(&cv, &mu);
    fern_mutex_unlock(&mu);
    return arg;
}

static void *pooled_body(void *arg)
{
    bench_touch_stack(TOUCH);
    return arg;
}

static void *main_green(void *arg)
{
    fern_attr attr = {.stack_size = 512 * 1024, .name = NULL, .cluster = NULL, .detached = false};
    fern_thread **t = calloc((size_t)n, sizeof *t);
    int rc;
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        if ((rc = fern_spawn(&t[i], &attr, fresh_body, NULL)))
            bench_die("fern_spawn", rc);
    fern_mutex_lock(&mu);
    while (touched < n)
        fern_cond_wait(&main_cv, &mu);
    release_ = 1;
    fern_cond_broadcast(&cv);
    fern_mutex_unlock(&mu);
    for (long i = 0; i < n; i++)
        if ((rc = fern_join(t[i], NULL)))
            bench_die("fern_join", rc);
    int64_t fresh = bench_now_ns() - t0;
    struct fern_stats s1, s2;
    fern_stats(&s1);

    t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        fern_thread *one;
        if ((rc = fern_spawn(&one, &attr, pooled_body, NULL)))
            bench_die("fern_spawn", rc);
        if ((rc = fern_join(one, NULL)))
            bench_die("fern_join", rc);
    }
    int64_t pooled = bench_now_ns() - t0;
    fern_stats(&s2);
    bench_print("deepstack", "fern", "fresh_us", (double)fresh / 1e3 / (double)n, "us");
    bench_print("deepstack", "fern", "pooled_us", (double)pooled / 1e3 / (double)n, "us");
    bench_print("deepstack", "fern", "fresh_over_pooled", (double)fresh / (double)pooled, "x");
    bench_print("deepstack", "fern", "stacks_mapped_fresh", (double)s1.stacks_mapped, "count");
    bench_print("deepstack", "fern", "stacks_mapped_pooled", (double)(s2.stacks_mapped - s1.stacks_mapped), "count");
    bench_print("deepstack", "fern", "stack_trims", (double)s2.stack_trims, "count");
    free(t);
    return arg;
}

int main(int argc, char **argv)
{
    n = bench_arg(argc, argv, 1000);
    fern_config cfg = {.workers = 1, .stack_size = 0};
    int rc = fern_init(&cfg);
    if (rc)
        bench_die("fern_init", rc);
    if ((rc = fern_run(main_green, NULL, NULL)))
        bench_die("fern_run", rc);
    fern_shutdown();
    return 0;
}
