/* SPDX-License-Identifier: MIT */
/*
 * million: a million green threads alive at once. Each parks on one
 * fern_cond; once all are parked the program prints what they cost, wakes
 * them all with one broadcast and waits for them to finish. A parked thread
 * that used little stack costs about one page plus its descriptor.
 *
 * Usage: million [threads]   (default 1,000,000)
 */
#include <fern/fern.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fern_mutex mu = FERN_MUTEX_INIT;
static fern_cond parked_cv = FERN_COND_INIT; /* where the threads park */
static fern_cond main_cv = FERN_COND_INIT;   /* where main waits for them */
static long n, parked, finished;
static int go;

static void check(const char *what, int rc)
{
    if (rc != 0) {
        fprintf(stderr, "million: %s failed: %s\n", what, strerror(rc));
        exit(1);
    }
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = atol(line + 6);
    if (f)
        fclose(f);
    return kib;
}

static void *body(void *unused)
{
    (void)unused;
    check("fern_mutex_lock", fern_mutex_lock(&mu));
    if (++parked == n)
        check("fern_cond_signal", fern_cond_signal(&main_cv));
    while (!go)
        check("fern_cond_wait", fern_cond_wait(&parked_cv, &mu));
    if (++finished == n)
        check("fern_cond_signal", fern_cond_signal(&main_cv));
    check("fern_mutex_unlock", fern_mutex_unlock(&mu));
    return NULL;
}

int main(int argc, char **argv)
{
    n = argc > 1 ? atol(argv[1]) : 1000000;
    if (n <= 0) {
        fprintf(stderr, "usage: %s [threads]\n", argv[0]);
        return 2;
    }
    check("fern_init", fern_init(NULL));
    long kib0 = rss_kib();
    int64_t t0 = fern_now_ns();
    /* Detached: nobody joins them; main counts them out instead. */
    fern_attr attr = {.stack_size = 0, .name = NULL, .cluster = NULL, .detached = true};
    for (long i = 0; i < n; i++)
        check("fern_spawn", fern_spawn(NULL, &attr, body, NULL));

    /* main is a plain thread: fern_cond_wait blocks it like a pthread. */
    check("fern_mutex_lock", fern_mutex_lock(&mu));
    while (parked < n)
        check("fern_cond_wait", fern_cond_wait(&main_cv, &mu));
    check("fern_mutex_unlock", fern_mutex_unlock(&mu));
    int64_t t1 = fern_now_ns();
    struct fern_stats s;
    check("fern_stats", fern_stats(&s));
    printf(
        "%ld threads parked in %.2f s; %llu live; resident memory grew %.0f MiB, %.0f bytes each\n",
        n, (double)(t1 - t0) / 1e9, (unsigned long long)s.threads_live,
        (double)(rss_kib() - kib0) / 1024, (double)(rss_kib() - kib0) * 1024 / (double)n);

    check("fern_mutex_lock", fern_mutex_lock(&mu));
    go = 1;
    check("fern_cond_broadcast", fern_cond_broadcast(&parked_cv));
    while (finished < n)
        check("fern_cond_wait", fern_cond_wait(&main_cv, &mu));
    check("fern_mutex_unlock", fern_mutex_unlock(&mu));
    printf("woke all %ld with one broadcast; all finished in %.2f s\n", n,
           (double)(fern_now_ns() - t1) / 1e9);
    check("fern_shutdown", fern_shutdown());
    return 0;
}
