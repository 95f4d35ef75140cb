/* SPDX-License-Identifier: MIT */
/* hook-lock: unmodified pthread locking code on green threads with
 * fern-hook, beside the same code on pthreads (issue 32's targets,
 * bench/hooks/hooks.py runs it). One scenario per run:
 *
 *   hook_lock SCENARIO MODE WORKERS
 *     MODE green: 200 green threads on WORKERS workers, a 1 ms green ticker
 *     MODE pthread: 200 pthreads (run from hook_lock_nohook: no fern-hook)
 *   cond       a pthread_cond work queue fed by one producer thread of the
 *              same kind: each of 200 threads takes 20 items, sleeping 1 ms
 *              (usleep) after each; ideal 20 ms
 *   mutex      each of 200 threads holds one pthread mutex across a
 *              usleep(500); ideal 200 x 0.5 ms = 100 ms
 *   rwsem      a sem_t of 20 units gates 200 threads; every 10th takes a
 *              pthread_rwlock for writing, the rest for reading, each held
 *              across a usleep(1000); ideal 20 x 1 + 180 x 1 / 20 = 29 ms
 *   rwsempw    as rwsem, the lock of the writer-preferring kind
 *              (PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP; for
 *              bench/hooks/lock_ab.py, not a target)
 *   plainprod  as cond, but the producer is a plain pthread in both modes
 *   sqlite     N threads x 50 transactions (BEGIN IMMEDIATE, one INSERT,
 *              COMMIT) on one SQLite database, WAL, busy timeout 60 s, each
 *              thread its own connection (WORKERS = threads in this mode:
 *              hook_lock sqlite green|pthread 100)
 *   plainmutex an uncontended pthread_mutex_lock + unlock on a plain
 *              thread: ns per pair, the fastest of 20 rounds of 1 M (run
 *              from both binaries; WORKERS > 0: that many rounds of
 *              100 k instead, for callgrind); with WORKERS 0 also the
 *              in-process comparison (plainmutex_ab: ab_first_ns through
 *              the pthread_mutex_lock the linker finds, ab_libc_ns
 *              through libc's, alternating rounds)
 *
 * Prints one JSON line. */
#include <dlfcn.h>
#include <fern/fern.h>
#include <pthread.h>
#include <semaphore.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook_sqlite_db.h"
#include "hook_ticker.h"

#define N 200
#define ITEMS 20

static atomic_int stop;
static struct hook_ticker tick = {.stop = &stop};
static struct hook_ticker plain_tick = {.stop = &stop}; /* the machine's own lateness */
static const char *scen;
static int green;

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static sem_t sem;
static long queued, taken;
static atomic_int inside, wrinside;
static atomic_long violations, errors;
static char dbpath[256];
static int sql_tx = 50;

static void *producer(void *arg)
{
    (void)arg;
    for (int i = 0; i < N * ITEMS; i++) {
        pthread_mutex_lock(&m);
        queued++;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&m);
        if (i % 200 == 199)
            usleep(100);
    }
    return NULL;
}

static void *body(void *arg)
{
    long i = (long)arg;
    if (!strcmp(scen, "cond") || !strcmp(scen, "plainprod")) {
        for (int k = 0; k < ITEMS; k++) {
            pthread_mutex_lock(&m);
            while (queued == 0)
                pthread_cond_wait(&cv, &m);
            queued--;
            taken++;
            pthread_mutex_unlock(&m);
            usleep(1000);
        }
    } else if (!strcmp(scen, "mutex")) {
        pthread_mutex_lock(&m);
        if (atomic_fetch_add(&inside, 1))
            violations++;
        usleep(500);
        atomic_fetch_sub(&inside, 1);
        pthread_mutex_unlock(&m);
    } else if (!strcmp(scen, "rwsem") || !strcmp(scen, "rwsempw")) {
        if (sem_wait(&sem))
            errors++;
        if (i % 10 == 0) {
            if (pthread_rwlock_wrlock(&rw))
                errors++;
            if (atomic_fetch_add(&wrinside, 1) || atomic_load(&inside))
                violations++;
            usleep(1000);
            atomic_fetch_sub(&wrinside, 1);
        } else {
            if (pthread_rwlock_rdlock(&rw))
                errors++;
            atomic_fetch_add(&inside, 1);
            if (atomic_load(&wrinside))
                violations++;
            usleep(1000);
            atomic_fetch_sub(&inside, 1);
        }
        pthread_rwlock_unlock(&rw);
        sem_post(&sem);
    } else if (!strcmp(scen, "sqlite")) {
        sqlite3 *db;
        if (sqlite3_open(dbpath, &db) != SQLITE_OK) {
            errors++;
            return NULL;
        }
        sqlite3_busy_timeout(db, 60000);
        char sql[128];
        for (int k = 0; k < sql_tx; k++) {
            snprintf(sql, sizeof sql, "BEGIN IMMEDIATE; INSERT INTO t VALUES(%ld,%d); COMMIT;", i, k);
            if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
                errors++;
                sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            }
        }
        sqlite3_close(db);
    }
    return NULL;
}

/* The fastest of 20 rounds of 1 M pairs: on a shared machine the other
 * rounds measure the machine. */
static double plainmutex(int rounds)
{
    const long iters = rounds ? 100000 : 1000000;
    pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
    double best = 1e9;
    for (int r = 0; r < (rounds ? rounds : 21); r++) {
        int64_t t0 = fern_now_ns();
        for (long i = 0; i < iters; i++) {
            pthread_mutex_lock(&pm);
            __asm__ volatile("" ::: "memory");
            pthread_mutex_unlock(&pm);
        }
        double ns = (double)(fern_now_ns() - t0) / iters;
        if (r > 0 && ns < best) /* round 0 warms up */
            best = ns;
    }
    return best;
}

/* The same pair in one process, both ways: through the first
 * pthread_mutex_lock/unlock the dynamic linker finds (fern-hook's, in
 * hook_lock) and through libc's own, called alike (an indirect call each),
 * in alternating rounds of 100 k pairs, the fastest of 200 rounds each. A
 * loaded machine slows both alike, so the difference is fern-hook's
 * wrapper; in hook_lock_nohook both are libc's and the difference is the
 * method's noise. */
typedef int (*mutex_fn)(pthread_mutex_t *);
static double pair_round(mutex_fn lock, mutex_fn unlock, pthread_mutex_t *pm)
{
    const long iters = 100000;
    int64_t t0 = fern_now_ns();
    for (long i = 0; i < iters; i++) {
        lock(pm);
        __asm__ volatile("" ::: "memory");
        unlock(pm);
    }
    return (double)(fern_now_ns() - t0) / iters;
}

static int plainmutex_ab(double *first, double *libc)
{
    void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    mutex_fn fl = (mutex_fn)dlsym(RTLD_DEFAULT, "pthread_mutex_lock");
    mutex_fn fu = (mutex_fn)dlsym(RTLD_DEFAULT, "pthread_mutex_unlock");
    mutex_fn cl = h ? (mutex_fn)dlsym(h, "pthread_mutex_lock") : NULL;
    mutex_fn cu = h ? (mutex_fn)dlsym(h, "pthread_mutex_unlock") : NULL;
    if (!fl || !fu || !cl || !cu)
        return -1;
    /* Through volatile pointers: the compiler cannot call them directly. */
    mutex_fn volatile vfl = fl, vfu = fu, vcl = cl, vcu = cu;
    pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
    *first = *libc = 1e9;
    pair_round(vfl, vfu, &pm); /* warm-up */
    pair_round(vcl, vcu, &pm);
    for (int r = 0; r < 200; r++) {
        double a = pair_round(vfl, vfu, &pm), b = pair_round(vcl, vcu, &pm);
        if (a < *first)
            *first = a;
        if (b < *libc)
            *libc = b;
    }
    return 0;
}

static long sqlite_rows(void)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    long n = -1;
    if (sqlite3_open(dbpath, &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: hook_lock cond|mutex|rwsem|rwsempw|plainprod|sqlite|plainmutex green|pthread WORKERS\n");
        return 2;
    }
    scen = argv[1];
    green = !strcmp(argv[2], "green");
    int workers = atoi(argv[3]);
#ifdef HOOKED
    const char *hooked = "true";
#else
    const char *hooked = "false";
#endif
    if (!strcmp(scen, "plainmutex")) {
        double ns = plainmutex(workers), first = 0, libc = 0;
        if (!workers && plainmutex_ab(&first, &libc))
            return 1;
        printf("{\"bench\": \"hook-lock\", \"scenario\": \"plainmutex\", \"hooked\": %s, \"ns_per_pair\": %.2f,"
               " \"ab_first_ns\": %.3f, \"ab_libc_ns\": %.3f}\n",
               hooked, ns, first, libc);
        return 0;
    }
    int n = N;
    if (!strcmp(scen, "sqlite")) {
        n = workers;
        workers = 2;
        snprintf(dbpath, sizeof dbpath, "/tmp/fern-hooklock-%d.db", (int)getpid());
        if (hook_sqlite_db_create(dbpath) != 0)
            return 1;
    }
    sem_init(&sem, 0, 20);
    if (!strcmp(scen, "rwsempw")) {
        pthread_rwlockattr_t ra;
        pthread_rwlockattr_init(&ra);
        pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        if (pthread_rwlock_init(&rw, &ra))
            return 1;
        pthread_rwlockattr_destroy(&ra);
    }
    fern_thread *tk = NULL, **gt = calloc((size_t)n + 1, sizeof *gt);
    pthread_t *pt = calloc((size_t)n + 1, sizeof *pt), prod;
    if (green) {
        fern_config cfg = {.workers = (unsigned)workers};
        if (fern_init(&cfg))
            return 1;
        fern_spawn(&tk, NULL, hook_ticker_green, &tick);
    }
    pthread_t ptk;
    pthread_create(&ptk, NULL, hook_ticker_plain, &plain_tick);
    usleep(5000);
    atomic_store(&tick.late_max, 0);
    atomic_store(&plain_tick.late_max, 0);
    int has_prod = !strcmp(scen, "cond") || !strcmp(scen, "plainprod");
    int green_prod = green && !strcmp(scen, "cond");
    int64_t t0 = fern_now_ns();
    for (long i = 0; i < n; i++) {
        if (green ? fern_spawn(&gt[i], NULL, body, (void *)i) : pthread_create(&pt[i], NULL, body, (void *)i))
            return 1;
    }
    if (has_prod) {
        if (green_prod)
            fern_spawn(&gt[n], NULL, producer, NULL);
        else
            pthread_create(&prod, NULL, producer, NULL);
    }
    for (int i = 0; i < n; i++)
        green ? fern_join(gt[i], NULL) : pthread_join(pt[i], NULL);
    if (has_prod)
        green_prod ? fern_join(gt[n], NULL) : pthread_join(prod, NULL);
    double wall = (double)(fern_now_ns() - t0) / 1e9;
    double late = (double)atomic_load(&tick.late_max) / 1e6;
    double plain_late = (double)atomic_load(&plain_tick.late_max) / 1e6;
    atomic_store(&stop, 1);
    if (tk)
        fern_join(tk, NULL);
    pthread_join(ptk, NULL);
    long rows = -1;
    if (!strcmp(scen, "sqlite")) {
        rows = sqlite_rows();
        hook_sqlite_db_remove(dbpath);
    }
    printf("{\"bench\": \"hook-lock\", \"scenario\": \"%s\", \"mode\": \"%s\", \"hooked\": %s, \"workers\": %d,"
           " \"threads\": %d, \"wall_s\": %.4f, \"ticker_late_max_ms\": %.2f,"
           " \"plain_ticker_late_max_ms\": %.2f, \"violations\": %ld,"
           " \"errors\": %ld, \"taken\": %ld, \"rows\": %ld}\n",
           scen, green ? "green" : "pthread", hooked, workers, n, wall, green ? late : 0.0, plain_late,
           atomic_load(&violations), atomic_load(&errors), taken, rows);
    return 0;
}
