/* SPDX-License-Identifier: MIT */
/*
 * tour: fern in six measured scenes, under 30 seconds (`make demo`).
 *
 *   1. context switch: two threads take turns on one CPU, fern vs pthreads
 *   2. spawn + join: trivial threads in batches of 1,000, fern vs pthreads
 *   3. a million threads parked at once on one fern_cond, then woken
 *   4. threads migrating back and forth between two clusters
 *   5. a channel pipeline: generator -> square (1, then 4 workers) -> sum
 *   6. fern_dump of a small live state, then a clean shutdown
 *
 * Every figure printed is measured in this run; nothing is hard-coded.
 * Usage: tour [--threads N]   (N threads in scene 3, default 1,000,000)
 *
 * Scenes 1 and 2 time pthreads too, so they show the cost of the same work
 * done with kernel threads on the same machine. A failing call prints what
 * failed and why (strerror) and exits with status 1.
 */
#include <fern/fern.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define DEFAULT_THREADS 1000000L
#define MAX_THREADS     100000000L

#define YIELD_ROUNDS      1000000L /* fern_yield calls per thread, scene 1 */
#define FERN_PP_ROUNDS    200000L  /* fern mutex+cond hand-offs per thread */
#define PTHREAD_PP_ROUNDS 50000L   /* pthread mutex+cond hand-offs per thread */
#define SPAWN_FERN        500000L  /* scene 2 */
#define SPAWN_PTHREAD     2000L
#define SPAWN_BATCH       1000

#define MOVERS      16   /* scene 4 */
#define MOVER_HOPS  1000 /* fern_migrate calls per mover: A->B, B->A, ... */
#define TRACED      2    /* movers whose first stops are printed */
#define TRACE_STOPS 6

#define PIPE_ITEMS   1000000L /* scene 5: items through the pipeline */
#define PIPE_CAP     64       /* capacity of each pipeline channel */
#define PIPE_FANOUT  4        /* square-stage threads in the fan-out run */

/* ------------------------------------------------------------------------ */
/* Helpers: errors, numbers, memory                                          */
/* ------------------------------------------------------------------------ */

static void die(const char *what, int err)
{
    fprintf(stderr, "\ntour: %s failed: %s\n", what, strerror(err));
    exit(1);
}

/* For calls that return 0 or an errno value (fern_*, pthread_*). */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != 0)                                                                              \
            die(#call, rc_);                                                                       \
    } while (0)

/* 1234567 -> "1,234,567". Returns one of a ring of buffers: only the main
 * thread formats, and no printf uses more than eight at once. */
static const char *grouped(uint64_t v)
{
    static char ring[8][32];
    static unsigned next;
    char *out = ring[next++ % 8];
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%" PRIu64, v);
    int o = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
    return out;
}

static const char *bytes_str(double b)
{
    static char ring[4][32];
    static unsigned next;
    char *out = ring[next++ % 4];
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(out, 32, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(out, 32, "%.1f MiB", b / (1024.0 * 1024));
    else if (b >= 1024.0)
        snprintf(out, 32, "%.1f KiB", b / 1024.0);
    else
        snprintf(out, 32, "%.0f B", b);
    return out;
}

/* A rounded non-negative figure with thousands separators. */
static const char *fig(double v)
{
    return grouped((uint64_t)(v + 0.5));
}

static double secs(int64_t ns)
{
    return (double)ns / 1e9;
}

/* A field of /proc/self/status in KiB, 0 if absent. */
static long status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t n = strlen(field);
    long v = 0;
    if (!f)
        die("fopen /proc/self/status", errno);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* What threads cost the process in memory: resident pages plus the page
 * tables that map them. */
static long mem_bytes(void)
{
    return (status_kib("VmRSS") + status_kib("VmPTE")) * 1024;
}

static long count_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    long n = 0;
    int c;
    if (!f)
        die("fopen /proc/self/maps", errno);
    while ((c = getc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

static const char *guard_name(fern_guard_mode m)
{
    switch (m) {
    case FERN_GUARD_MADVISE:
        return "madvise (MADV_GUARD_INSTALL guard pages)";
    case FERN_GUARD_MPROTECT:
        return "mprotect (PROT_NONE guard pages)";
    case FERN_GUARD_CANARY:
        return "canary (checked at every switch)";
    }
    return "unknown";
}

static void section(const char *title)
{
    printf("\n%s\n", title);
    printf("  ------------------------------------------------------------------------\n");
}

static fern_thread *spawn_on(fern_cluster *c, const char *name, fern_fn fn, void *arg)
{
    fern_attr attr = {.stack_size = 0, .name = name, .cluster = c, .detached = false};
    fern_thread *t;
    CHECK(fern_spawn(&t, &attr, fn, arg));
    return t;
}

/* ------------------------------------------------------------------------ */
/* 1. Context switch                                                         */
/* ------------------------------------------------------------------------ */

/* Two threads alternate; `handoffs` counts the times one of them starts
 * running after the other did, so a yield that did not switch is not
 * counted as a switch. Both run on one worker: no data race. */
struct yield_run {
    long rounds;
    int last;
    long handoffs;
    int64_t ns;
};

struct turn_arg {
    void *run;
    int me;
};

static void *yield_loop(void *p)
{
    struct turn_arg *a = p;
    struct yield_run *r = a->run;
    for (long i = 0; i < r->rounds; i++) {
        if (r->last != a->me) {
            r->last = a->me;
            r->handoffs++;
        }
        fern_yield();
    }
    return NULL;
}

/* Runs on the one-worker cluster: the two children cannot start before it
 * parks in fern_join, so the clock sees only their alternation. */
static void *yield_parent(void *p)
{
    struct yield_run *r = p;
    struct turn_arg a[2] = {{r, 0}, {r, 1}};
    int64_t t0 = fern_now_ns();
    fern_thread *t0h = spawn_on(NULL, "yield-0", yield_loop, &a[0]);
    fern_thread *t1h = spawn_on(NULL, "yield-1", yield_loop, &a[1]);
    CHECK(fern_join(t0h, NULL));
    CHECK(fern_join(t1h, NULL));
    r->ns = fern_now_ns() - t0;
    return NULL;
}

/* Strict ping-pong: each thread waits for its turn, passes it, signals. */
struct fern_pp {
    fern_mutex mu;
    fern_cond cv;
    int turn;
    long rounds, handoffs;
    int64_t ns;
};

static void *fern_pp_loop(void *p)
{
    struct turn_arg *a = p;
    struct fern_pp *s = a->run;
    CHECK(fern_mutex_lock(&s->mu));
    for (long i = 0; i < s->rounds; i++) {
        while (s->turn != a->me)
            CHECK(fern_cond_wait(&s->cv, &s->mu));
        s->handoffs++;
        s->turn = !a->me;
        CHECK(fern_cond_signal(&s->cv));
    }
    CHECK(fern_mutex_unlock(&s->mu));
    return NULL;
}

static void *fern_pp_parent(void *p)
{
    struct fern_pp *s = p;
    struct turn_arg a[2] = {{s, 0}, {s, 1}};
    int64_t t0 = fern_now_ns();
    fern_thread *t0h = spawn_on(NULL, "ping", fern_pp_loop, &a[0]);
    fern_thread *t1h = spawn_on(NULL, "pong", fern_pp_loop, &a[1]);
    CHECK(fern_join(t0h, NULL));
    CHECK(fern_join(t1h, NULL));
    s->ns = fern_now_ns() - t0;
    return NULL;
}

struct pthread_pp {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int turn;
    long rounds, handoffs;
};

static void *pthread_pp_loop(void *p)
{
    struct turn_arg *a = p;
    struct pthread_pp *s = a->run;
    CHECK(pthread_mutex_lock(&s->mu));
    for (long i = 0; i < s->rounds; i++) {
        while (s->turn != a->me)
            CHECK(pthread_cond_wait(&s->cv, &s->mu));
        s->handoffs++;
        s->turn = !a->me;
        CHECK(pthread_cond_signal(&s->cv));
    }
    CHECK(pthread_mutex_unlock(&s->mu));
    return NULL;
}

/* The first CPU this process may run on. */
static int first_cpu(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        die("sched_getaffinity", errno);
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set))
            return i;
    return 0;
}

static double scene_switch(double *pthread_ns_out)
{
    section("1. Context switch: two threads take turns on one CPU");

    fern_cluster *one;
    CHECK(fern_cluster_create(&one, 1));

    struct yield_run yr = {.rounds = YIELD_ROUNDS, .last = -1, .handoffs = 0, .ns = 0};
    CHECK(fern_join(spawn_on(one, "yield-parent", yield_parent, &yr), NULL));
    double fern_yield_ns = (double)yr.ns / (double)yr.handoffs;

    struct fern_pp fp = {.mu = FERN_MUTEX_INIT,
                         .cv = FERN_COND_INIT,
                         .turn = 0,
                         .rounds = FERN_PP_ROUNDS,
                         .handoffs = 0,
                         .ns = 0};
    CHECK(fern_join(spawn_on(one, "pp-parent", fern_pp_parent, &fp), NULL));
    double fern_pp_ns = (double)fp.ns / (double)fp.handoffs;
    CHECK(fern_cluster_destroy(one));

    /* The same ping-pong with kernel threads, both pinned to one CPU so that
     * every hand-off is a context switch, as on the one-worker cluster. */
    int cpu = first_cpu();
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_attr_t attr;
    CHECK(pthread_attr_init(&attr));
    CHECK(pthread_attr_setaffinity_np(&attr, sizeof set, &set));
    struct pthread_pp pp = {.turn = 0, .rounds = PTHREAD_PP_ROUNDS, .handoffs = 0};
    CHECK(pthread_mutex_init(&pp.mu, NULL));
    CHECK(pthread_cond_init(&pp.cv, NULL));
    struct turn_arg pa[2] = {{&pp, 0}, {&pp, 1}};
    pthread_t pt[2];
    int64_t t0 = fern_now_ns();
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&pt[i], &attr, pthread_pp_loop, &pa[i]));
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(pt[i], NULL));
    int64_t pns = fern_now_ns() - t0;
    CHECK(pthread_attr_destroy(&attr));
    CHECK(pthread_mutex_destroy(&pp.mu));
    CHECK(pthread_cond_destroy(&pp.cv));
    double pthread_ns = (double)pns / (double)pp.handoffs;

    char where[48];
    snprintf(where, sizeof where, "mutex+cond ping-pong, CPU %d", cpu);
    printf("  %-8s %-31s %10s switches %7s ns/switch\n", "fern", "fern_yield, 1-worker cluster",
           grouped((uint64_t)yr.handoffs), fig(fern_yield_ns));
    printf("  %-8s %-31s %10s switches %7s ns/switch\n", "fern", "mutex+cond ping-pong, 1 worker",
           grouped((uint64_t)fp.handoffs), fig(fern_pp_ns));
    printf("  %-8s %-31s %10s switches %7s ns/switch\n", "pthread", where,
           grouped((uint64_t)pp.handoffs), fig(pthread_ns));
    printf("  => a fern_yield switch is %.0fx cheaper than a pthread hand-off;\n"
           "     the same mutex+cond ping-pong is %.0fx cheaper with fern.\n",
           pthread_ns / fern_yield_ns, pthread_ns / fern_pp_ns);
    *pthread_ns_out = pthread_ns;
    return fern_yield_ns;
}

/* ------------------------------------------------------------------------ */
/* 2. Spawn + join                                                           */
/* ------------------------------------------------------------------------ */

static void *echo_arg(void *arg)
{
    return arg;
}

/* Runs as a green thread (fern_run): spawns and joins in batches and checks
 * every result. Returns the elapsed ns through *p. */
static void *fern_spawn_batches(void *p)
{
    int64_t *ns = p;
    fern_thread *batch[SPAWN_BATCH];
    int64_t t0 = fern_now_ns();
    for (long done = 0; done < SPAWN_FERN; done += SPAWN_BATCH) {
        for (long i = 0; i < SPAWN_BATCH; i++)
            CHECK(fern_spawn(&batch[i], NULL, echo_arg, (void *)(intptr_t)(done + i)));
        for (long i = 0; i < SPAWN_BATCH; i++) {
            void *ret;
            CHECK(fern_join(batch[i], &ret));
            if (ret != (void *)(intptr_t)(done + i))
                die("fern_join (wrong result)", EPROTO);
        }
    }
    *ns = fern_now_ns() - t0;
    return NULL;
}

static double scene_spawn(double *pthread_ns_out)
{
    section("2. Spawn + join: trivial threads, batches of 1,000");

    int64_t fns;
    CHECK(fern_run(fern_spawn_batches, &fns, NULL));
    double fern_ns = (double)fns / SPAWN_FERN;

    pthread_t batch[SPAWN_BATCH];
    int64_t t0 = fern_now_ns();
    for (long done = 0; done < SPAWN_PTHREAD; done += SPAWN_BATCH) {
        for (long i = 0; i < SPAWN_BATCH; i++)
            CHECK(pthread_create(&batch[i], NULL, echo_arg, (void *)(intptr_t)(done + i)));
        for (long i = 0; i < SPAWN_BATCH; i++) {
            void *ret;
            CHECK(pthread_join(batch[i], &ret));
            if (ret != (void *)(intptr_t)(done + i))
                die("pthread_join (wrong result)", EPROTO);
        }
    }
    int64_t pns = fern_now_ns() - t0;
    double pthread_ns = (double)pns / SPAWN_PTHREAD;

    printf("  %-8s %10s threads in %5.2f s %10s ns/thread  (%6.2f µs)\n", "fern",
           grouped(SPAWN_FERN), secs(fns), fig(fern_ns), fern_ns / 1e3);
    printf("  %-8s %10s threads in %5.2f s %10s ns/thread  (%6.2f µs)\n", "pthread",
           grouped(SPAWN_PTHREAD), secs(pns), fig(pthread_ns), pthread_ns / 1e3);
    printf("  => spawn + join of a fern thread is %.0fx cheaper than of a pthread.\n",
           pthread_ns / fern_ns);
    *pthread_ns_out = pthread_ns;
    return fern_ns;
}

/* ------------------------------------------------------------------------ */
/* 3. A million threads parked at once                                       */
/* ------------------------------------------------------------------------ */

static struct {
    fern_mutex mu;
    fern_cond cv; /* where the N threads park */
    long n;
    int go;                  /* under mu */
    atomic_long spawned;     /* written by the spawner, read by main */
    atomic_long parked;      /* incremented under mu */
    atomic_long finished;    /* incremented under mu */
    atomic_llong t_parked;   /* when the last one parked */
    atomic_llong t_finished; /* when the last one ran after the broadcast */
    fern_thread **handles;
} mil = {.mu = FERN_MUTEX_INIT, .cv = FERN_COND_INIT};

static void *parker(void *arg)
{
    CHECK(fern_mutex_lock(&mil.mu));
    if (atomic_fetch_add(&mil.parked, 1) + 1 == mil.n)
        atomic_store(&mil.t_parked, fern_now_ns());
    while (!mil.go)
        CHECK(fern_cond_wait(&mil.cv, &mil.mu));
    if (atomic_fetch_add(&mil.finished, 1) + 1 == mil.n)
        atomic_store(&mil.t_finished, fern_now_ns());
    CHECK(fern_mutex_unlock(&mil.mu));
    return arg;
}

static void *spawner(void *unused)
{
    (void)unused;
    for (long i = 0; i < mil.n; i++) {
        int rc = fern_spawn(&mil.handles[i], NULL, parker, (void *)(intptr_t)i);
        if (rc) {
            fprintf(stderr, "\ntour: fern_spawn failed at thread %s of %s\n", grouped((uint64_t)i),
                    grouped((uint64_t)mil.n));
            die("fern_spawn", rc);
        }
        if ((i & 1023) == 1023)
            atomic_store_explicit(&mil.spawned, i + 1, memory_order_relaxed);
    }
    atomic_store(&mil.spawned, mil.n);
    return NULL;
}

/* Print a live progress line until *counter reaches mil.n: rewritten in
 * place every 100 ms on a terminal, one line a second otherwise. */
static void wait_progress(atomic_long *counter, const char *verb, int64_t t0)
{
    int tty = isatty(STDOUT_FILENO);
    int64_t every = tty ? 100000000 : 1000000000;
    int64_t next = t0 + every;
    while (atomic_load(counter) < mil.n) {
        CHECK(fern_sleep_ns(10000000));
        int64_t now = fern_now_ns();
        if (now < next)
            continue;
        next = now + every;
        long c = atomic_load(counter);
        if (counter == &mil.parked) {
            struct fern_stats s;
            CHECK(fern_stats(&s));
            printf("%s  spawned %9s  stacks %9s  %s %9s  mem %9s  %4.1f s%s", tty ? "\r" : "",
                   grouped((uint64_t)atomic_load(&mil.spawned)), grouped(s.stacks_in_use), verb,
                   grouped((uint64_t)c), bytes_str((double)mem_bytes()), secs(now - t0),
                   tty ? "" : "\n");
        } else
            printf("%s  %s %11s of %s   %5.1f s%s", tty ? "\r" : "", verb, grouped((uint64_t)c),
                   grouped((uint64_t)mil.n), secs(now - t0), tty ? "" : "\n");
        fflush(stdout);
    }
    if (tty)
        printf("\r%90s\r", "");
}

struct million_result {
    double park_s, bytes_per_thread, wake_s;
};

static struct million_result scene_million(long n)
{
    char title[96];
    snprintf(title, sizeof title, "3. %s threads parked at once on one fern_cond",
             grouped((uint64_t)n));
    section(title);

    mil.n = n;
    mil.handles = calloc((size_t)n, sizeof *mil.handles);
    if (!mil.handles)
        die("calloc (thread handles)", ENOMEM);
    /* Touch the handle array now so its pages are not counted as threads. */
    memset(mil.handles, 0xff, (size_t)n * sizeof *mil.handles);

    long m0 = mem_bytes();
    int64_t t0 = fern_now_ns();
    fern_thread *sp = spawn_on(NULL, "spawner", spawner, NULL);
    printf("  live: spawned, with a stack bound (they have run), parked on the cond\n");
    wait_progress(&mil.parked, "on cond", t0);
    long m1 = mem_bytes();
    CHECK(fern_join(sp, NULL));
    int64_t park_ns = atomic_load(&mil.t_parked) - t0;

    struct fern_stats s;
    CHECK(fern_stats(&s));
    long maps = count_mappings();
    double per = (double)(m1 - m0) / (double)n;
    printf("  all %s parked on the cond %.2f s after the first spawn (%.2f µs per thread)\n",
           grouped((uint64_t)n), secs(park_ns), (double)park_ns / 1e3 / (double)n);
    printf("  %-24s %12s   %s per thread (VmRSS + VmPTE growth / N)\n", "memory",
           bytes_str((double)(m1 - m0)), bytes_str(per));
    printf("  %-24s %12s   (spawned %s since start)\n", "fern_stats threads_live",
           grouped(s.threads_live), grouped(s.threads_spawned));
    printf("  %-24s %12s   %s in use, %s of address space reserved\n", "stacks_mapped",
           grouped(s.stacks_mapped), grouped(s.stacks_in_use),
           bytes_str((double)s.stack_bytes_reserved));
    printf("  %-24s %12s\n", "guard_mode", guard_name(s.guard_mode));
    printf("  %-24s %12s   (madvise %s, mprotect %s, canary %s)\n", "guarded stacks",
           grouped(s.guards_madvise + s.guards_mprotect + s.guards_canary),
           grouped(s.guards_madvise), grouped(s.guards_mprotect), grouped(s.guards_canary));
    printf("  %-24s %12s   lines in /proc/self/maps (limit vm.max_map_count)\n", "mappings",
           grouped((uint64_t)maps));

    /* Broadcast with the mutex held: the waiters move onto the mutex's queue
     * and each is handed the mutex in turn, none of them wakes only to
     * queue again. */
    int64_t t1 = fern_now_ns();
    CHECK(fern_mutex_lock(&mil.mu));
    mil.go = 1;
    CHECK(fern_cond_broadcast(&mil.cv));
    int64_t bcast_ns = fern_now_ns() - t1;
    CHECK(fern_mutex_unlock(&mil.mu));
    printf("  %-24s %9.1f ms   one call moves %s threads onto the mutex's queue\n",
           "fern_cond_broadcast", (double)bcast_ns / 1e6, grouped((uint64_t)n));
    fflush(stdout);
    wait_progress(&mil.finished, "woken and finished", t1);
    int64_t wake_ns = atomic_load(&mil.t_finished) - t1;

    int64_t t2 = fern_now_ns();
    for (long i = 0; i < n; i++) {
        void *ret;
        CHECK(fern_join(mil.handles[i], &ret));
        if (ret != (void *)(intptr_t)i)
            die("fern_join (wrong result)", EPROTO);
    }
    int64_t join_ns = fern_now_ns() - t2;
    free(mil.handles);
    CHECK(fern_stats(&s));

    printf("  %-24s %10.2f s   broadcast until the last thread ran\n", "wake all", secs(wake_ns));
    printf("  %-24s %9.1f ms   from a plain thread, every result checked\n", "join all",
           (double)join_ns / 1e6);
    printf("  %-24s %12s   stacks cached for reuse: %s\n", "threads_live after join",
           grouped(s.threads_live), grouped(s.stacks_cached));
    return (struct million_result){secs(park_ns), per, secs(wake_ns)};
}

/* ------------------------------------------------------------------------ */
/* 4. Migration between clusters                                             */
/* ------------------------------------------------------------------------ */

static fern_cluster *cluster_a, *cluster_b;

struct mover {
    int stops;
    char where[TRACE_STOPS];
    pid_t tid[TRACE_STOPS];
};

static char cluster_letter(fern_cluster *c)
{
    return c == cluster_a ? 'A' : c == cluster_b ? 'B' : '?';
}

static void note_stop(struct mover *m)
{
    if (m->stops < TRACE_STOPS) {
        m->where[m->stops] = cluster_letter(fern_current_cluster());
        m->tid[m->stops] = gettid();
    }
    m->stops++;
}

static void *mover(void *p)
{
    struct mover *m = p;
    note_stop(m);
    for (int i = 0; i < MOVER_HOPS; i++) {
        fern_cluster *to = i % 2 == 0 ? cluster_b : cluster_a;
        CHECK(fern_migrate(to));
        fern_cluster *on = fern_current_cluster();
        if (on != to) {
            fprintf(stderr, "\ntour: fern_migrate to %c returned 0 but the thread runs on %c\n",
                    cluster_letter(to), cluster_letter(on));
            exit(1);
        }
        note_stop(m);
    }
    return NULL;
}

static double scene_migrate(void)
{
    section("4. Migration: threads move between clusters A and B (1 worker each)");

    CHECK(fern_cluster_create(&cluster_a, 1));
    CHECK(fern_cluster_create(&cluster_b, 1));

    struct mover movers[MOVERS];
    fern_thread *t[MOVERS];
    memset(movers, 0, sizeof movers);
    struct fern_stats s0, s1;
    CHECK(fern_stats(&s0));
    int64_t t0 = fern_now_ns();
    for (int i = 0; i < MOVERS; i++) {
        char name[16];
        snprintf(name, sizeof name, "mover-%d", i);
        t[i] = spawn_on(cluster_a, name, mover, &movers[i]);
    }
    for (int i = 0; i < MOVERS; i++)
        CHECK(fern_join(t[i], NULL));
    int64_t ns = fern_now_ns() - t0;
    CHECK(fern_stats(&s1));

    long total = (long)MOVERS * MOVER_HOPS;
    double per_s = (double)total / secs(ns);
    printf("  %d threads x %s fern_migrate calls, each checked with fern_current_cluster()\n",
           MOVERS, grouped(MOVER_HOPS));
    printf("  first stops of %s each (cluster:kernel thread id):\n",
           grouped((uint64_t)movers[0].stops));
    for (int i = 0; i < TRACED; i++) {
        printf("    mover-%d  ", i);
        for (int k = 0; k < TRACE_STOPS; k++)
            printf("%c:%d > ", movers[i].where[k], (int)movers[i].tid[k]);
        printf("...\n");
    }
    printf("  %-24s %12s   in %.1f ms\n", "migrations", grouped((uint64_t)total), (double)ns / 1e6);
    printf("  %-24s %12s   (fern_stats migrations went up by %s)\n", "migrations per second",
           grouped((uint64_t)per_s), grouped(s1.migrations - s0.migrations));
    return per_s;
}

/* ------------------------------------------------------------------------ */
/* 5. Channel pipeline                                                       */
/* ------------------------------------------------------------------------ */

/* generator -> square -> sum over two fern channels. The generator closes
 * `in` when done; each square thread stops at EPIPE, and the last one to stop
 * closes `out`; the sum stage reads until EPIPE. */
struct pipe {
    fern_chan *in, *out; /* uint64_t items */
    long items;
    atomic_int squarers_left;
    uint64_t sum, count;
};

static void *pipe_generate(void *p)
{
    struct pipe *pp = p;
    for (uint64_t i = 1; i <= (uint64_t)pp->items; i++)
        CHECK(fern_chan_send(pp->in, &i));
    CHECK(fern_chan_close(pp->in));
    return NULL;
}

static void *pipe_square(void *p)
{
    struct pipe *pp = p;
    uint64_t v;
    int rc;
    while ((rc = fern_chan_recv(pp->in, &v)) == 0) {
        v *= v;
        CHECK(fern_chan_send(pp->out, &v));
    }
    if (rc != EPIPE)
        die("fern_chan_recv", rc);
    if (atomic_fetch_sub(&pp->squarers_left, 1) == 1)
        CHECK(fern_chan_close(pp->out));
    return NULL;
}

static void *pipe_sum(void *p)
{
    struct pipe *pp = p;
    uint64_t v;
    int rc;
    while ((rc = fern_chan_recv(pp->out, &v)) == 0) {
        pp->sum += v;
        pp->count++;
    }
    if (rc != EPIPE)
        die("fern_chan_recv", rc);
    return NULL;
}

/* One run with `squarers` threads in the middle stage; returns ns. */
static int64_t pipe_run(struct pipe *pp, int squarers)
{
    fern_thread *t[2 + PIPE_FANOUT];
    int nt = 0;
    CHECK(fern_chan_create(&pp->in, sizeof(uint64_t), PIPE_CAP));
    CHECK(fern_chan_create(&pp->out, sizeof(uint64_t), PIPE_CAP));
    atomic_store(&pp->squarers_left, squarers);
    pp->sum = pp->count = 0;
    int64_t t0 = fern_now_ns();
    t[nt++] = spawn_on(NULL, "sum", pipe_sum, pp);
    for (int i = 0; i < squarers; i++) {
        char name[32];
        snprintf(name, sizeof name, "square-%d", i);
        t[nt++] = spawn_on(NULL, name, pipe_square, pp);
    }
    t[nt++] = spawn_on(NULL, "generate", pipe_generate, pp);
    for (int i = 0; i < nt; i++)
        CHECK(fern_join(t[i], NULL));
    int64_t ns = fern_now_ns() - t0;
    CHECK(fern_chan_destroy(pp->in));
    CHECK(fern_chan_destroy(pp->out));
    return ns;
}

static double scene_pipeline(void)
{
    section("5. Channel pipeline: generate -> square -> sum, over fern channels");

    /* 1 + 4 + ... + n^2 = n(n+1)(2n+1)/6, computed without overflow for n
     * up to PIPE_ITEMS (the result fits in 64 bits). */
    uint64_t n = (uint64_t)PIPE_ITEMS;
    uint64_t a = n, b = n + 1, c = 2 * n + 1;
    if (a % 2 == 0) a /= 2; else b /= 2;
    if (a % 3 == 0) a /= 3; else if (b % 3 == 0) b /= 3; else c /= 3;
    uint64_t want = a * b * c;

    printf("  %s items, channels of capacity %d, default cluster (%u workers)\n",
           grouped(n), PIPE_CAP, fern_cluster_workers(fern_cluster_default()));
    double best = 0;
    int runs[2] = {1, PIPE_FANOUT};
    for (int r = 0; r < 2; r++) {
        struct pipe pp = {.items = PIPE_ITEMS};
        int64_t ns = pipe_run(&pp, runs[r]);
        if (pp.count != n || pp.sum != want) {
            fprintf(stderr, "\ntour: pipeline got %s items summing to %" PRIu64 ", want %s summing to %" PRIu64 "\n",
                    grouped(pp.count), pp.sum, grouped(n), want);
            exit(1);
        }
        double per_s = (double)n / secs(ns);
        char what[48];
        snprintf(what, sizeof what, "1 -> %d square -> 1 (%d threads)", runs[r], runs[r] + 2);
        printf("  %-34s %12s items/s %7s ns/item  in %.0f ms\n", what, grouped((uint64_t)per_s),
               fig((double)ns / (double)n), (double)ns / 1e6);
        if (per_s > best)
            best = per_s;
        if (r == 1)
            printf("  sum of squares 1..%s = %" PRIu64 " (checked against n(n+1)(2n+1)/6, both runs)\n",
                   grouped(n), pp.sum);
    }
    return best;
}

/* ------------------------------------------------------------------------ */
/* 6. fern_dump of a small live state                                        */
/* ------------------------------------------------------------------------ */

static fern_mutex dump_mu = FERN_MUTEX_INIT; /* guards dump_go */
static fern_cond dump_cv = FERN_COND_INIT;
static fern_mutex held = FERN_MUTEX_INIT; /* held by main during the dump */
static int dump_go;
static atomic_int dump_ready;

static void *waiter(void *unused)
{
    (void)unused;
    CHECK(fern_mutex_lock(&dump_mu));
    atomic_fetch_add(&dump_ready, 1);
    while (!dump_go)
        CHECK(fern_cond_wait(&dump_cv, &dump_mu));
    CHECK(fern_mutex_unlock(&dump_mu));
    return NULL;
}

static void *sleeper(void *unused)
{
    (void)unused;
    atomic_fetch_add(&dump_ready, 1);
    CHECK(fern_sleep_ns(300000000));
    return NULL;
}

static void *locker(void *unused)
{
    (void)unused;
    atomic_fetch_add(&dump_ready, 1);
    CHECK(fern_mutex_lock(&held));
    CHECK(fern_mutex_unlock(&held));
    return NULL;
}

static void scene_dump(void)
{
    section("6. fern_dump: three named threads, each blocked in its own way");

    CHECK(fern_mutex_lock(&held));
    fern_thread *t[3];
    t[0] = spawn_on(NULL, "waiter (cond)", waiter, NULL);
    t[1] = spawn_on(cluster_a, "sleeper (300 ms)", sleeper, NULL);
    t[2] = spawn_on(cluster_b, "locker (mutex)", locker, NULL);
    while (atomic_load(&dump_ready) < 3)
        CHECK(fern_sleep_ns(1000000));
    CHECK(fern_sleep_ns(20000000)); /* let each reach its blocking call */

    printf("  clusters: default = %p, A = %p, B = %p\n", (void *)fern_cluster_default(),
           (void *)cluster_a, (void *)cluster_b);
    printf("  objects:  cond = %p, mutex (held by main) = %p\n\n", (void *)&dump_cv, (void *)&held);
    fflush(stdout);
    if (fern_dump(stdout) < 0)
        die("fern_dump", errno);

    int64_t t0 = fern_now_ns();
    CHECK(fern_mutex_lock(&dump_mu));
    dump_go = 1;
    CHECK(fern_cond_broadcast(&dump_cv));
    CHECK(fern_mutex_unlock(&dump_mu));
    CHECK(fern_mutex_unlock(&held));
    for (int i = 0; i < 3; i++)
        CHECK(fern_join(t[i], NULL));
    printf("\n  woke the waiter and the locker; the sleeper woke by itself; all joined "
           "(%.0f ms)\n",
           (double)(fern_now_ns() - t0) / 1e6);

    CHECK(fern_cluster_destroy(cluster_a));
    CHECK(fern_cluster_destroy(cluster_b));
    printf("  clusters A and B destroyed, ");
    CHECK(fern_shutdown());
    printf("runtime shut down.\n");
}

/* ------------------------------------------------------------------------ */

static long parse_threads(int argc, char **argv)
{
    long n = DEFAULT_THREADS;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            v = argv[++i];
        else if (strncmp(argv[i], "--threads=", 10) == 0)
            v = argv[i] + 10;
        if (v) {
            char *end;
            errno = 0;
            n = strtol(v, &end, 10);
            if (errno == 0 && *end == '\0' && n >= 1 && n <= MAX_THREADS)
                continue;
            fprintf(stderr, "tour: --threads wants a number from 1 to %s\n", grouped(MAX_THREADS));
            exit(2);
        }
        fprintf(stderr, "usage: %s [--threads N]   (default %s)\n", argv[0],
                grouped(DEFAULT_THREADS));
        exit(strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ? 0 : 2);
    }
    return n;
}

int main(int argc, char **argv)
{
    long n = parse_threads(argc, argv);
    int64_t start = fern_now_ns();

    fern_config cfg = {.workers = 0, .stack_size = 0}; /* one worker per CPU, or $FERN_WORKERS */
    CHECK(fern_init(&cfg));

    struct utsname u;
    if (uname(&u) != 0)
        die("uname", errno);
    printf("fern %d.%d tour: %ld CPUs, %s %s, default cluster of %u workers\n", FERN_VERSION_MAJOR,
           FERN_VERSION_MINOR, sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release,
           fern_cluster_workers(fern_cluster_default()));
    printf("every figure below is measured now, on this machine\n");

    double pthread_switch, pthread_spawn;
    double fern_switch = scene_switch(&pthread_switch);
    double fern_spawn_ns = scene_spawn(&pthread_spawn);
    struct million_result m = scene_million(n);
    double migrations = scene_migrate();
    double pipe_items = scene_pipeline();
    scene_dump();

    section("Summary");
    printf("  %-22s fern %7s ns   pthread %7s ns   %4.0fx cheaper\n", "context switch",
           fig(fern_switch), fig(pthread_switch), pthread_switch / fern_switch);
    printf("  %-22s fern %7s ns   pthread %7s ns   %4.0fx cheaper\n", "spawn + join",
           fig(fern_spawn_ns), fig(pthread_spawn), pthread_spawn / fern_spawn_ns);
    printf("  %-22s %s threads parked in %.1f s, %s each, all woken in %.1f s\n", "parked at once",
           grouped((uint64_t)n), m.park_s, bytes_str(m.bytes_per_thread), m.wake_s);
    printf("  %-22s %s per second between two clusters\n", "migrations",
           grouped((uint64_t)migrations));
    printf("  %-22s %s items per second through 3 stages (faster run, %s ns per item)\n", "channel pipeline",
           grouped((uint64_t)pipe_items), fig(1e9 / pipe_items));
    printf("\n  tour finished in %.1f s\n", secs(fern_now_ns() - start));
    return 0;
}
