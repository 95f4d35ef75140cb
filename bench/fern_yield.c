/* yield, fern: two green threads on a one-worker runtime alternate with
 * fern_yield(). ns per switch (per yield call); switch_pct = share of yields
 * that actually handed the worker to the other thread. */
#include "bench_common.h"

#include <fern/fern.h>

static long n_iter;
static volatile int last_runner = -1;
static long switched[2];

static void *body(void *arg)
{
    int me = (int)(intptr_t)arg;
    long sw = 0;
    for (long i = 0; i < n_iter; i++) {
        if (last_runner != me) {
            sw++;
            last_runner = me;
        }
        fern_yield();
    }
    switched[me] = sw;
    return NULL;
}

int main(int argc, char **argv)
{
    n_iter = bench_arg(argc, argv, 1000000);
    fern_config cfg = {.workers = 1, .stack_size = 0};
    int rc = fern_init(&cfg);
    if (rc)
        bench_die("fern_init", rc);
    fern_thread *t[2];
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < 2; i++)
        if ((rc = fern_spawn(&t[i], NULL, body, (void *)(intptr_t)i)))
            bench_die("fern_spawn", rc);
    for (int i = 0; i < 2; i++)
        if ((rc = fern_join(t[i], NULL)))
            bench_die("fern_join", rc);
    int64_t dt = bench_now_ns() - t0;
    double yields = 2.0 * (double)n_iter;
    bench_print("yield", "fern", "ns_per_switch", (double)dt / yields, "ns");
    bench_print("yield", "fern", "switch_pct", 100.0 * (double)(switched[0] + switched[1]) / yields, "%");
    fern_shutdown();
    return 0;
}
