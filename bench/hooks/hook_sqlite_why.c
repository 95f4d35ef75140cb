/* SPDX-License-Identifier: MIT */
/* hook-sqlite-why: where hook_lock's SQLite scenario spends its time, on
 * green threads (fern-hook) and on pthreads (the _nohook binary). The same
 * work as `hook_lock sqlite MODE N` (N threads x 50 transactions on one WAL
 * database, each thread its own connection), with three differences made
 * only to see inside it:
 *   - BEGIN IMMEDIATE, the INSERT and COMMIT are three sqlite3_exec calls,
 *     so the time the write lock is held (BEGIN done .. COMMIT done) is known;
 *   - the busy handler is our own, with the default handler's schedule (the
 *     delays SQLite's sqliteDefaultBusyCallback sleeps: 1, 2, 5, 10, 15, 20,
 *     25, 25, 25, 50, 50, then 100 ms; 60 s in all) and the same usleep, but
 *     it counts its calls and times each sleep;
 *   - at the end of each thread's last transaction it looks at when every
 *     sleeping thread is due to wake.
 *
 *   hook_sqlite_why green|pthread N [TX]
 *
 * Prints: transactions/s; the write lock's use (share of the wall time it
 * was held, mean hold per transaction); the gaps between one COMMIT and the
 * next BEGIN (total, and how many were over 5 ms); how many transactions
 * the thread that committed last took again at once (the convoy); busy
 * handler calls and sleep overshoot; and, at each thread's last commit, in
 * how many distinct milliseconds the sleepers' wake-ups fall and how soon
 * the first is due. One distinct millisecond means the sleepers wake in
 * lockstep: the lock then stays free until the whole group wakes. */
#include <fern/fern.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook_sqlite_db.h"

#define MAXT 1000

static const unsigned char delay_ms[] = {1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100};
static const unsigned char prior_ms[] = {0, 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228};
#define NDELAY (int)(sizeof delay_ms)
#define TIMEOUT_MS 60000

static char dbpath[256];
static int ntx = 50, nthreads;
static atomic_llong due[MAXT];      /* when thread i's sleep ends; 0: awake */
static long busy_of[MAXT];          /* busy calls in thread i's current transaction */
static atomic_llong busy_calls, slept_ask, slept_got, hold_ns, gap_ns, gaps_long, again, errors;
static atomic_llong last_release, last_owner = -1;
static atomic_llong ends, end_bins, end_first_due;

static int busy(void *arg, int count)
{
    long i = (long)arg;
    int d = count < NDELAY ? delay_ms[count] : delay_ms[NDELAY - 1];
    int prior = count < NDELAY ? prior_ms[count]
                               : prior_ms[NDELAY - 1] + delay_ms[NDELAY - 1] * (count - (NDELAY - 1));
    if (prior + d > TIMEOUT_MS && (d = TIMEOUT_MS - prior) <= 0)
        return 0;
    int64_t t0 = fern_now_ns();
    due[i] = t0 + d * 1000000ll;
    usleep((useconds_t)d * 1000);
    due[i] = 0;
    busy_calls++;
    busy_of[i]++;
    slept_ask += d * 1000000ll;
    slept_got += fern_now_ns() - t0;
    return 1;
}

/* At a thread's last commit: the sleepers' wake-ups, in distinct ms. */
static void look_at_sleepers(int64_t now)
{
    static char seen[MAXT][256];
    long self = atomic_fetch_add(&ends, 1);
    char *bin = seen[self % MAXT];
    memset(bin, 0, 256);
    int64_t first = INT64_MAX;
    long distinct = 0;
    for (int j = 0; j < nthreads; j++) {
        int64_t d = due[j];
        if (d <= now)
            continue;
        if (d < first)
            first = d;
        int64_t ms = (d - now) / 1000000;
        if (ms < 256 && !bin[ms]) {
            bin[ms] = 1;
            distinct++;
        }
    }
    end_bins += distinct;
    if (first != INT64_MAX)
        end_first_due += first - now;
}

static void *body(void *arg)
{
    long i = (long)arg;
    sqlite3 *db;
    if (sqlite3_open(dbpath, &db) != SQLITE_OK) {
        errors++;
        return NULL;
    }
    sqlite3_busy_handler(db, busy, arg);
    char sql[96];
    for (int k = 0; k < ntx; k++) {
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
            errors++;
            continue;
        }
        int64_t got = fern_now_ns(), rel = last_release;
        if (rel && got > rel)
            gap_ns += got - rel;
        if (rel && got - rel > 5000000)
            gaps_long++;
        if (last_owner == i)
            again++;
        busy_of[i] = 0;
        snprintf(sql, sizeof sql, "INSERT INTO t VALUES(%ld,%d)", i, k);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            errors++;
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        }
        int64_t done = fern_now_ns();
        hold_ns += done - got;
        last_owner = i;
        last_release = done;
        if (k == ntx - 1)
            look_at_sleepers(done);
    }
    sqlite3_close(db);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (nthreads = atoi(argv[2])) < 1 || nthreads > MAXT) {
        fprintf(stderr, "usage: hook_sqlite_why green|pthread N(1..%d) [TX]\n", MAXT);
        return 2;
    }
    int green = !strcmp(argv[1], "green");
    if (argc > 3)
        ntx = atoi(argv[3]);
    snprintf(dbpath, sizeof dbpath, "/tmp/fern-sqlitewhy-%d.db", (int)getpid());
    if (hook_sqlite_db_create(dbpath) != 0)
        return 1;
    fern_thread **gt = calloc((size_t)nthreads, sizeof *gt);
    pthread_t *pt = calloc((size_t)nthreads, sizeof *pt);
    if (green) {
        fern_config cfg = {.workers = 2};
        if (fern_init(&cfg))
            return 1;
    }
    int64_t t0 = fern_now_ns();
    for (long i = 0; i < nthreads; i++)
        if (green ? fern_spawn(&gt[i], NULL, body, (void *)i) : pthread_create(&pt[i], NULL, body, (void *)i))
            return 1;
    for (int i = 0; i < nthreads; i++)
        green ? fern_join(gt[i], NULL) : pthread_join(pt[i], NULL);
    double wall = (double)(fern_now_ns() - t0) / 1e9;
    long tx = (long)nthreads * ntx;
    double n_end = ends ? (double)ends : 1;
    printf("{\"bench\": \"hook-sqlite-why\", \"mode\": \"%s\", \"threads\": %d, \"wall_s\": %.3f,"
           " \"tx_per_s\": %.0f, \"lock_held_share\": %.3f, \"hold_ms_per_tx\": %.3f,"
           " \"gaps_s\": %.3f, \"gaps_over_5ms\": %lld, \"taken_again_at_once\": %lld,"
           " \"busy_calls\": %lld, \"sleep_overshoot_us_mean\": %.0f,"
           " \"sleepers_distinct_ms_at_run_end\": %.2f, \"first_wake_ms_after_run_end\": %.2f,"
           " \"errors\": %lld}\n",
           green ? "green" : "pthread", nthreads, wall, (double)tx / wall, (double)hold_ns / 1e9 / wall,
           (double)hold_ns / 1e6 / (double)tx, (double)gap_ns / 1e9, (long long)gaps_long, (long long)again,
           (long long)busy_calls, busy_calls ? (double)(slept_got - slept_ask) / 1e3 / (double)busy_calls : 0.0,
           (double)end_bins / n_end, (double)end_first_due / 1e6 / n_end, (long long)errors);
    hook_sqlite_db_remove(dbpath);
    return errors != 0;
}
