/* SPDX-License-Identifier: MIT */
/*
 * migrate: keep CPU-heavy work off the cluster that must stay responsive.
 * Each job starts on the default cluster, moves itself to a one-worker
 * "compute" cluster with fern_migrate for the heavy part, and comes back to
 * report. A ticker on the default cluster keeps its 10 ms beat meanwhile.
 */
#include <fern/fern.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOBS 4

static fern_cluster *compute;

static void check(const char *what, int rc)
{
    if (rc != 0) {
        fprintf(stderr, "migrate: %s failed: %s\n", what, strerror(rc));
        exit(1);
    }
}

static const char *where(void)
{
    return fern_current_cluster() == compute ? "compute" : "default";
}

static long count_primes(long below)
{
    long n = 0;
    for (long i = 2; i < below; i++) {
        long d = 2;
        while (d * d <= i && i % d)
            d++;
        n += d * d > i;
    }
    return n;
}

static void *job(void *arg)
{
    long below = (long)(intptr_t)arg;
    const char *from = where();
    check("fern_migrate", fern_migrate(compute));
    const char *on = where();
    long primes = count_primes(below); /* runs on the compute worker */
    check("fern_migrate", fern_migrate(fern_cluster_default()));
    printf("job %s: started on %s, counted %ld primes below %ld on %s, reports from %s\n",
           fern_thread_name(NULL), from, primes, below, on, where());
    return NULL;
}

static atomic_int jobs_done;

static void *ticker(void *unused)
{
    (void)unused;
    int ticks = 0;
    int64_t worst = 0;
    while (!atomic_load(&jobs_done)) {
        int64_t t0 = fern_now_ns();
        check("fern_sleep_ns", fern_sleep_ns(10000000));
        int64_t late = fern_now_ns() - t0 - 10000000;
        worst = late > worst ? late : worst;
        ticks++;
    }
    printf("ticker on %s: %d ticks of 10 ms while the jobs ran, worst lateness %.2f ms\n", where(),
           ticks, (double)worst / 1e6);
    return NULL;
}

int main(void)
{
    check("fern_init", fern_init(NULL));
    check("fern_cluster_create", fern_cluster_create(&compute, 1));
    fern_thread *tick, *jobs[JOBS];
    check("fern_spawn", fern_spawn(&tick, NULL, ticker, NULL));
    for (int i = 0; i < JOBS; i++) {
        char name[8];
        snprintf(name, sizeof name, "#%d", i);
        fern_attr attr = {.stack_size = 0, .name = name, .cluster = NULL, .detached = false};
        check("fern_spawn", fern_spawn(&jobs[i], &attr, job, (void *)(intptr_t)(200000 * (i + 1))));
    }
    for (int i = 0; i < JOBS; i++)
        check("fern_join", fern_join(jobs[i], NULL));
    atomic_store(&jobs_done, 1);
    check("fern_join", fern_join(tick, NULL));
    check("fern_cluster_destroy", fern_cluster_destroy(compute));
    check("fern_shutdown", fern_shutdown());
    return 0;
}
