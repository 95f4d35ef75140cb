/* SPDX-License-Identifier: MIT */
/* hook-sleep: 300 green threads on ONE worker, each making one plain 200 ms
 * blocking call of one kind (usleep, nanosleep, poll(NULL, 0, 200), select
 * with a timeout, read of a pipe that a plain thread writes 200 ms later,
 * getaddrinfo("localhost") on a resolver delayed by nothing but itself),
 * with a green thread beside them sleeping 1 ms at a time. Linked with
 * fern-hook, the calls overlap; prints one JSON line.
 *
 * Beside the green ticker, a plain pthread sleeps 1 ms at a time with
 * clock_nanosleep(TIMER_ABSTIME): its lateness is the kernel's and the
 * machine's alone (no fern on its path), the floor the green ticker's
 * figure is judged against on a shared machine. */
#include <fern/fern.h>
#include "hook_ticker.h"
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#define N 300
#define KINDS 6
static int pipes[N][2];
static atomic_int errors, stop;
static struct hook_ticker green_tick = {.stop = &stop}, plain_tick = {.stop = &stop};

static int only = -1; /* argv[1]: run only this kind (diagnosis) */

static void *call(void *arg)
{
    long i = (long)arg;
    switch (only >= 0 ? only : i % KINDS) {
    case 0:
        if (usleep(200000))
            errors++;
        break;
    case 1: {
        struct timespec ts = {0, 200000000};
        if (nanosleep(&ts, NULL))
            errors++;
        break;
    }
    case 2:
        if (poll(NULL, 0, 200) != 0)
            errors++;
        break;
    case 3: {
        struct timeval tv = {0, 200000};
        if (select(0, NULL, NULL, NULL, &tv) != 0)
            errors++;
        break;
    }
    case 4: {
        char c;
        if (read(pipes[i][0], &c, 1) != 1)
            errors++;
        break;
    }
    default: {
        struct addrinfo *res = NULL, hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
        if (getaddrinfo("localhost", "80", &hints, &res) || !res)
            errors++;
        else
            freeaddrinfo(res);
        /* The lookup itself is quick: the 200 ms is a sleep after it, so
         * every kind waits the same time. */
        usleep(200000);
        break;
    }
    }
    return NULL;
}

static void *plain_writer(void *arg)
{
    (void)arg;
    usleep(200000);
    for (int i = 0; i < N; i++)
        if ((only >= 0 ? only : i % KINDS) == 4 && write(pipes[i][1], "x", 1) != 1)
            errors++;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        only = atoi(argv[1]);
    fern_config cfg = {.workers = 1};
    if (fern_init(&cfg))
        return 1;
    for (int i = 0; i < N; i++)
        if ((only >= 0 ? only : i % KINDS) == 4 && pipe(pipes[i]))
            return 1;
    fern_thread *tick, *t[N];
    fern_spawn(&tick, NULL, hook_ticker_green, &green_tick);
    pthread_t w, pt;
    if (pthread_create(&pt, NULL, hook_ticker_plain, &plain_tick))
        return 1;
    usleep(20000);
    /* Both tickers count from here: the start-up above is not measured. */
    atomic_store(&green_tick.late_max, 0);
    atomic_store(&plain_tick.late_max, 0);
    int64_t t0 = fern_now_ns();
    pthread_create(&w, NULL, plain_writer, NULL);
    for (long i = 0; i < N; i++)
        if (fern_spawn(&t[i], NULL, call, (void *)i))
            errors++;
    for (int i = 0; i < N; i++)
        fern_join(t[i], NULL);
    double wall = (fern_now_ns() - t0) / 1e9;
    pthread_join(w, NULL);
    atomic_store(&stop, 1);
    fern_join(tick, NULL);
    pthread_join(pt, NULL);
    printf("{\"bench\": \"hook-sleep\", \"threads\": %d, \"workers\": 1, \"wall_s\": %.3f, "
           "\"ticker_late_max_ms\": %.2f, \"plain_ticker_late_max_ms\": %.2f, \"errors\": %d}\n",
           N, wall, atomic_load(&green_tick.late_max) / 1e6, atomic_load(&plain_tick.late_max) / 1e6,
           atomic_load(&errors));
    fern_shutdown();
    return atomic_load(&errors) != 0;
}
