/* SPDX-License-Identifier: MIT */
/* hook-plain: what fern-hook costs code that never uses green threads. A
 * plain pthread writes one byte into a pipe and reads it back, ITER times.
 * Built twice from this file: hook_plain (linked with fern-hook: every read
 * and write goes through the hook's plain-thread path) and
 * hook_plain_nohook (libc's read and write). Prints one JSON line. */
#include <fern/fern.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long iters = 2000000;

static void *loop(void *arg)
{
    int *p = arg;
    char c = 'x';
    for (long i = 0; i < iters; i++)
        if (write(p[1], &c, 1) != 1 || read(p[0], &c, 1) != 1)
            abort();
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        iters = atol(argv[1]);
    int p[2];
    if (pipe(p))
        return 1;
    pthread_t t;
    int64_t t0 = fern_now_ns();
    pthread_create(&t, NULL, loop, p);
    pthread_join(t, NULL);
    double ns = (double)(fern_now_ns() - t0) / iters;
    printf("{\"bench\": \"hook-plain\", \"hooked\": %s, \"iters\": %ld, \"ns_per_roundtrip\": %.1f}\n",
#ifdef HOOKED
           "true",
#else
           "false",
#endif
           iters, ns);
    return 0;
}
