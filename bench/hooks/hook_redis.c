/* SPDX-License-Identifier: MIT */
/* hook-redis: unmodified hiredis doing SET then GET in a loop from 200
 * clients for a fixed time, against the redis-server on 127.0.0.1:PORT.
 * Mode "green": 200 green threads on the default cluster (linked with
 * fern-hook), a 1 ms sleeper beside them; mode "pthread": the same loop on
 * 200 pthreads (the hook passes plain threads straight through). Prints one
 * JSON line: operations per second (SET and GET each count one). In
 * green mode a plain pthread also sleeps 1 ms at a time (clock_nanosleep
 * to an absolute time): its lateness is the machine's alone, the floor
 * the green ticker's figure is judged against. */
#include <fern/fern.h>
#include "hook_ticker.h"
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLIENTS 200
static int port;
static double secs = 3;
static atomic_long ops;
static atomic_int errors, stop_flag, go_flag;
static struct hook_ticker green_tick = {.stop = &stop_flag}, plain_tick = {.stop = &stop_flag};

static void *client(void *arg)
{
    long id = (long)arg;
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        errors++;
        if (c)
            redisFree(c);
        return NULL;
    }
    while (!atomic_load(&go_flag))
        fern_sleep_ns(1000000); /* plain threads: the hook's usleep-free wait */
    long n = 0;
    char key[32];
    snprintf(key, sizeof key, "key:%ld", id);
    while (!atomic_load(&stop_flag)) {
        redisReply *r = redisCommand(c, "SET %s xxx", key);
        if (!r || r->type == REDIS_REPLY_ERROR)
            errors++;
        freeReplyObject(r);
        r = redisCommand(c, "GET %s", key);
        if (!r || r->type != REDIS_REPLY_STRING)
            errors++;
        freeReplyObject(r);
        n += 2;
    }
    atomic_fetch_add(&ops, n);
    redisFree(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return fprintf(stderr, "usage: hook_redis green|pthread PORT [SECONDS]\n"), 2;
    int green = strcmp(argv[1], "green") == 0;
    port = atoi(argv[2]);
    if (argc > 3)
        secs = atof(argv[3]);
    fern_thread *ft[CLIENTS], *tick = NULL;
    pthread_t pt[CLIENTS], ptick;
    if (green) {
        fern_spawn(&tick, NULL, hook_ticker_green, &green_tick);
        if (pthread_create(&ptick, NULL, hook_ticker_plain, &plain_tick))
            return 1;
    }
    for (long i = 0; i < CLIENTS; i++)
        if (green ? fern_spawn(&ft[i], NULL, client, (void *)i)
                  : pthread_create(&pt[i], NULL, client, (void *)i))
            return 1;
    fern_sleep_ns(300000000); /* connections made */
    atomic_store(&green_tick.late_max, 0);
    atomic_store(&plain_tick.late_max, 0);
    int64_t t0 = fern_now_ns();
    atomic_store(&go_flag, 1);
    fern_sleep_ns((int64_t)(secs * 1e9));
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < CLIENTS; i++)
        green ? fern_join(ft[i], NULL) : pthread_join(pt[i], NULL);
    double wall = (fern_now_ns() - t0) / 1e9;
    if (tick) {
        fern_join(tick, NULL);
        pthread_join(ptick, NULL);
    }
    printf("{\"bench\": \"hook-redis\", \"mode\": \"%s\", \"clients\": %d, \"ops_per_s\": %.0f, "
           "\"ticker_late_max_ms\": %s%.2f, \"plain_ticker_late_max_ms\": %s%.2f, "
           "\"errors\": %d}\n",
           argv[1], CLIENTS, atomic_load(&ops) / wall, green ? "" : "-",
           green ? atomic_load(&green_tick.late_max) / 1e6 : 1.0, green ? "" : "-",
           green ? atomic_load(&plain_tick.late_max) / 1e6 : 1.0, atomic_load(&errors));
    if (fern_cluster_default())
        fern_shutdown();
    return atomic_load(&errors) != 0;
}
