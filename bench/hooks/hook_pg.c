/* SPDX-License-Identifier: MIT */
/* hook-pg: 40 green threads on ONE worker, each with its own libpq
 * connection (unmodified libpq, linked with fern-hook), send
 * `SELECT pg_sleep(0.3)` at once; a 1 ms sleeper runs beside them. Prints
 * one JSON line: the wall time from the first query to the last answer. */
#include <fern/fern.h>
#include "hook_ticker.h"
#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 40
static const char *conninfo;
static PGconn *conns[N];
static atomic_int errors, stop_flag;
static struct hook_ticker green_tick = {.stop = &stop_flag};

static void *query(void *arg)
{
    PGconn *c = arg;
    PGresult *r = PQexec(c, "SELECT pg_sleep(0.3)");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "%s", PQerrorMessage(c));
        errors++;
    }
    PQclear(r);
    return NULL;
}

static void *connect_one(void *arg)
{
    long i = (long)arg;
    conns[i] = PQconnectdb(conninfo);
    if (PQstatus(conns[i]) != CONNECTION_OK) {
        fprintf(stderr, "%s", PQerrorMessage(conns[i]));
        errors++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return fprintf(stderr, "usage: hook_pg CONNINFO\n"), 2;
    conninfo = argv[1];
    fern_config cfg = {.workers = 1};
    if (fern_init(&cfg))
        return 1;
    fern_thread *t[N], *tick;
    for (long i = 0; i < N; i++)
        fern_spawn(&t[i], NULL, connect_one, (void *)i);
    for (int i = 0; i < N; i++)
        fern_join(t[i], NULL);
    if (errors)
        return 1;
    fern_spawn(&tick, NULL, hook_ticker_green, &green_tick);
    fern_sleep_ns(20000000);
    atomic_store(&green_tick.late_max, 0);
    int64_t t0 = fern_now_ns();
    for (int i = 0; i < N; i++)
        fern_spawn(&t[i], NULL, query, conns[i]);
    for (int i = 0; i < N; i++)
        fern_join(t[i], NULL);
    double wall = (fern_now_ns() - t0) / 1e9;
    atomic_store(&stop_flag, 1);
    fern_join(tick, NULL);
    for (int i = 0; i < N; i++)
        PQfinish(conns[i]);
    printf("{\"bench\": \"hook-pg\", \"threads\": %d, \"workers\": 1, \"wall_s\": %.3f, "
           "\"ticker_late_max_ms\": %.2f, \"errors\": %d}\n",
           N, wall, atomic_load(&green_tick.late_max) / 1e6, atomic_load(&errors));
    fern_shutdown();
    return atomic_load(&errors) != 0;
}
