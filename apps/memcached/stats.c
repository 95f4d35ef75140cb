/* SPDX-License-Identifier: MIT */
/*
 * stats: the counters behind `stats` and their text.
 *
 * Store counters live in store.c under its lock and are copied out in one
 * snapshot; connection counters are relaxed atomics bumped by conn.c and
 * main.c. Both protocols print the same list (ASCII as STAT lines, binary
 * as one packet per entry), built here once. The names and meanings are
 * memcached's, so scripts that read memcached's stats read these.
 */
#include "memcached.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

struct mc_conn_counters mc_conn_stats;
int mc_verbose; /* relaxed atomics: the verbosity command sets it while connections run */
unsigned mc_maxconns, mc_workers;

static uint32_t started; /* unix seconds */

void mc_stats_init(void)
{
    started = mc_now();
}

static bool span_is(mc_span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.n == n && memcmp(s.p, lit, n) == 0;
}

struct list {
    struct mc_stat *e;
    size_t n, max;
};

__attribute__((format(printf, 3, 4))) static void add(struct list *l, const char *name,
                                                      const char *fmt, ...)
{
    if (l->n == l->max)
        return;
    struct mc_stat *s = &l->e[l->n++];
    s->name = name;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->value, sizeof s->value, fmt, ap);
    va_end(ap);
}

static uint64_t load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

#define U64(l, name, v) add((l), (name), "%llu", (unsigned long long)(v))

static void general(struct list *l)
{
    struct mc_store_counters c;
    mc_store_snapshot(&c);
    uint32_t now = mc_now();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    U64(l, "pid", (unsigned long long)getpid());
    U64(l, "uptime", now - started);
    U64(l, "time", now);
    add(l, "version", "%s", MC_VERSION);
    U64(l, "pointer_size", 8 * sizeof(void *));
    add(l, "rusage_user", "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    add(l, "rusage_system", "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    U64(l, "max_connections", mc_maxconns);
    U64(l, "curr_connections", load(&mc_conn_stats.curr_connections));
    U64(l, "total_connections", load(&mc_conn_stats.total_connections));
    U64(l, "rejected_connections", load(&mc_conn_stats.rejected_connections));
    U64(l, "cmd_get", c.cmd_get);
    U64(l, "cmd_set", c.cmd_set);
    U64(l, "cmd_flush", c.cmd_flush);
    U64(l, "cmd_touch", c.cmd_touch);
    U64(l, "get_hits", c.get_hits);
    U64(l, "get_misses", c.get_misses);
    U64(l, "get_expired", c.get_expired);
    U64(l, "get_flushed", c.get_flushed);
    U64(l, "delete_misses", c.delete_misses);
    U64(l, "delete_hits", c.delete_hits);
    U64(l, "incr_misses", c.incr_misses);
    U64(l, "incr_hits", c.incr_hits);
    U64(l, "decr_misses", c.decr_misses);
    U64(l, "decr_hits", c.decr_hits);
    U64(l, "cas_misses", c.cas_misses);
    U64(l, "cas_hits", c.cas_hits);
    U64(l, "cas_badval", c.cas_badval);
    U64(l, "touch_hits", c.touch_hits);
    U64(l, "touch_misses", c.touch_misses);
    U64(l, "bytes_read", load(&mc_conn_stats.bytes_read));
    U64(l, "bytes_written", load(&mc_conn_stats.bytes_written));
    U64(l, "limit_maxbytes", mc_store_limit());
    U64(l, "threads", mc_workers);
    U64(l, "hash_buckets", c.hash_buckets);
    U64(l, "bytes", c.bytes);
    U64(l, "curr_items", c.curr_items);
    U64(l, "total_items", c.total_items);
    U64(l, "evictions", c.evictions);
    U64(l, "reclaimed", c.reclaimed);
}

static void settings(struct list *l)
{
    U64(l, "maxbytes", mc_store_limit());
    U64(l, "maxconns", mc_maxconns);
    U64(l, "num_threads", mc_workers);
    U64(l, "verbosity", (unsigned)__atomic_load_n(&mc_verbose, __ATOMIC_RELAXED));
    U64(l, "item_size_max", mc_store_item_max());
    add(l, "evictions", "on");
    add(l, "cas_enabled", "yes");
    U64(l, "udpport", 0);
}

int mc_stats_collect(mc_span args, struct mc_stat *out, size_t max, bool *reset)
{
    while (args.n && args.p[args.n - 1] == ' ')
        args.n--;
    struct list l = {out, 0, max};
    *reset = false;
    if (args.n == 0) {
        general(&l);
    } else if (span_is(args, "settings")) {
        settings(&l);
    } else if (span_is(args, "reset")) {
        mc_store_reset_counters();
        __atomic_store_n(&mc_conn_stats.total_connections, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&mc_conn_stats.rejected_connections, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&mc_conn_stats.bytes_read, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&mc_conn_stats.bytes_written, 0, __ATOMIC_RELAXED);
        *reset = true;
        return 0;
    } else {
        return -1;
    }
    return (int)l.n;
}
