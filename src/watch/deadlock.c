/* SPDX-License-Identifier: MIT */
/*
 * Deadlock reports, made by the monitor (monitor.c) every DL_SCAN_NS.
 * A scan walks every thread descriptor, so while workers run it is made
 * only when at least two green threads are parked in fern_mutex_lock
 * without a deadline (per-worker counts, sync/mutex.c): a cycle needs two. With
 * a million parked threads a walk takes tens of milliseconds and holds the
 * chunk lock that spawning a thread may need.
 *
 * Mutex cycles. A green thread parked without a deadline in
 * fern_mutex_lock records the mutex in wait_what/wait_obj (sync/mutex.c). A scan
 * collects those threads, reads each mutex's owner, and follows owner ->
 * the mutex that owner waits for -> its owner ... A walk that comes back to
 * a thread it passed is a cycle: every thread in it waits for a mutex only
 * another thread of the cycle can unlock, so nothing (no plain thread, no
 * timer) can wake any of them. A cycle is reported when two consecutive
 * scans find it (the reads are not one atomic snapshot), once, on stderr,
 * naming each thread's id and name and the mutex it waits for. The program
 * keeps running (unless FERN_DEADLOCK=fatal).
 *
 * Reading a mutex the monitor does not own: the waiter is queued on it, so
 * fern_mutex_destroy says EBUSY and the memory stays, as long as the waiter
 * is still parked there. The owner is read first, with process_vm_readv
 * (a bad address gives EFAULT, never a fault, should the waiter have left
 * and the memory gone meanwhile), and used only if the waiter is still
 * parked on the same mutex afterwards. Where process_vm_readv is refused
 * (ENOSYS under qemu-user, EPERM under seccomp profiles that keep it for
 * debuggers) the word goes through a pipe instead: write(2) from a bad
 * address also gives EFAULT. The pipe is the monitor's own, made on first
 * use and again in a forked child (sharing it would mix two processes'
 * words).
 *
 * What a report shows. Each thread of a cycle with its backtrace, and each
 * mutex by the symbol it lies in where it has one (a static or global
 * fern_mutex; a heap one is its address). Every involved thread is parked
 * (its registers saved at t->sp by fern_ctx_switch) and stays parked, as
 * nothing can wake it and rt.boot_lock, held here, keeps fern_shutdown out,
 * so its stack is stable memory for the walk; it is checked to be parked
 * still just before. The walk (src/arch/x86_64/walk.c: arch_stack_walk):
 * libunwind (libunwind.so.8, opened with dlopen when the monitor starts,
 * not linked: a dependency only where it is installed) from a context made
 * of the saved registers, which follows .eh_frame like a debugger; without
 * it, the saved frame-pointer chain, kept inside the thread's stack
 * (complete only for code built with frame pointers). x86_64 only: the
 * aarch64 saved frame is not described yet (ARCH_DEBUG_FRAME). Symbols
 * (backtrace.c) come from each object's own .symtab (the file, mapped for
 * the report: static functions and variables included), else .dynsym;
 * every frame also gets `object+0xoffset`, which addr2line -e object
 * resolves to a source line.
 *
 * FERN_DEADLOCK (runtime/config.c): report (the default), fatal (abort(3) after the
 * report, so a deadlocked service dies with a core instead of hanging), or
 * off (no scans, no reports).
 *
 * Everyone asleep. Go's "all goroutines are asleep", only when fern can
 * prove it: every live green thread is parked on a fern primitive without a
 * deadline (not a sleep, not an fd, not the blocking pool: those end by
 * themselves), and the process has no kernel thread besides fern's workers,
 * the monitor, the dump-signal thread, the blocking pool's helpers and the
 * callers waiting in fern_run (counted in /proc/self/task). Any other kernel thread could
 * still wake someone, so then nothing is said. Reported once per episode
 * (until some thread runs again), also after two consecutive scans.
 */
#include "watch/backtrace.h"
#include "base/sys.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define DL_SCAN_NS 500000000  /* two scans, so a report within ~1-1.5 s */
#define DL_MAX 4096           /* mutex waiters examined per scan */
#define DL_KEEP 64            /* cycles remembered (reported or candidate) */

struct dl_entry {
    fern_thread *t;
    const void *m;
    fern_thread *owner;      /* NULL: not a parked green thread's */
    uint64_t id;
    char name[32];
};

struct dl_cycle {
    uint64_t key;            /* hash of the member ids, order-free */
    uint64_t last_scan;      /* the scan that last found it */
    bool reported;
};

static struct {
    int64_t next_scan;
    uint64_t scan;
    uint64_t reported;
    struct dl_cycle cycles[DL_KEEP];
    unsigned ncycles;
    bool asleep_candidate, asleep_reported;
    uint64_t asleep_switches;
    struct dl_entry e[DL_MAX];
    unsigned n;
} D;

uint64_t deadlocks_reported(void) { return LOAD_RELAXED(&D.reported); }

void deadlock_reset(void)
{
    memset(&D.cycles, 0, sizeof D.cycles);
    D.ncycles = 0;
    D.next_scan = 0;
    D.scan = 1;
    D.asleep_candidate = D.asleep_reported = false;
    STORE_RELAXED(&D.reported, 0);
}

static struct {
    bool use_pipe;      /* process_vm_readv was refused */
    int fd[2];
    pid_t pid;          /* the process that made fd */
} R = {false, {-1, -1}, 0};

static bool read_word_pipe(const void *addr, void **out)
{
    pid_t me = getpid();
    if (R.pid != me) {
        if (R.fd[0] >= 0) {
            sys_close(R.fd[0]);
            sys_close(R.fd[1]);
        }
        R.fd[0] = R.fd[1] = -1;
        if (sys_pipe2(R.fd, O_CLOEXEC | O_NONBLOCK))
            return false;
        R.pid = me;
    }
    /* At most PIPE_BUF bytes: written whole or not at all, and read back
     * whole, so the pipe is empty between calls. Raw system calls, as
     * process_vm_readv is one: the word is read racily on purpose (see
     * above), which libc's write would show ThreadSanitizer (its
     * interceptor reads the buffer) and fern-hook would interpose. */
    if (syscall(SYS_write, R.fd[1], addr, sizeof *out) != (long)sizeof *out)
        return false;
    return syscall(SYS_read, R.fd[0], out, sizeof *out) == (long)sizeof *out;
}

static bool read_word(const void *addr, void **out)
{
    if (!R.use_pipe) {
        struct iovec local = {out, sizeof *out}, remote = {(void *)addr, sizeof *out};
        if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof *out)
            return true;
        if (errno != ENOSYS && errno != EPERM)
            return false;
        R.use_pipe = true;
    }
    return read_word_pipe(addr, out);
}

/* After a report: abort under FERN_DEADLOCK=fatal. */
static void report_done(const char *keeps_running)
{
    sym_release();
    trace_report(stderr);
    if (config.deadlock == CONFIG_DEADLOCK_FATAL) {
        fprintf(stderr, "fern: deadlock is fatal (FERN_DEADLOCK=fatal): aborting\n");
        fflush(stderr);
        abort();
    }
    fprintf(stderr, "%s\n", keeps_running);
    fflush(stderr);
    STORE_RELAXED(&D.reported, D.reported + 1);
}

static bool parked_on(fern_thread *t, const char *what, const void *obj)
{
    const char *w = LOAD(&t->wait_what);
    return LOAD(&t->run_state) == T_PARKED && w && strcmp(w, what) == 0 &&
           LOAD(&t->wait_obj) == obj && !LOAD(&t->wait_timed);
}

/* thread walk state for the "everyone asleep" test */
struct census {
    unsigned live, asleep;
};

static bool untimed_primitive(const char *what)
{
    return strcmp(what, "sleep") && strncmp(what, "fd ", 3) && strcmp(what, "blocking pool");
}

static void collect(fern_thread *t, void *arg)
{
    struct census *c = arg;
    c->live++;
    const char *what = LOAD(&t->wait_what);
    if (LOAD(&t->run_state) != T_PARKED || !what || LOAD(&t->wait_timed))
        return;
    if (untimed_primitive(what))
        c->asleep++;
    if (strcmp(what, "mutex") || D.n == DL_MAX)
        return;
    struct dl_entry *e = &D.e[D.n];
    e->t = t;
    e->m = LOAD(&t->wait_obj);
    e->owner = NULL;
    e->id = LOAD_RELAXED(&t->id); /* the descriptor may be respawned meanwhile */
    for (int i = 0; i < 31; i++)
        e->name[i] = LOAD_RELAXED(&t->name[i]);
    e->name[31] = 0;
    D.n++;
}

static struct dl_entry *entry_of(const fern_thread *t)
{
    for (unsigned i = 0; i < D.n; i++)
        if (D.e[i].t == t)
            return &D.e[i];
    return NULL;
}

static struct dl_cycle *cycle_slot(uint64_t key)
{
    for (unsigned i = 0; i < D.ncycles; i++)
        if (D.cycles[i].key == key)
            return &D.cycles[i];
    if (D.ncycles == DL_KEEP) {
        /* Forget an unreported candidate, or the oldest entry. */
        unsigned victim = 0;
        for (unsigned i = 0; i < D.ncycles; i++)
            if (!D.cycles[i].reported) {
                victim = i;
                break;
            }
        D.cycles[victim] = D.cycles[--D.ncycles];
    }
    struct dl_cycle *c = &D.cycles[D.ncycles++];
    memset(c, 0, sizeof *c);
    c->key = key;
    return c;
}

static void report_cycle(struct dl_entry *start, unsigned len)
{
    fprintf(stderr, "fern: deadlock: %u green threads wait for each other's fern_mutex:\n", len);
    struct dl_entry *e = start;
    for (unsigned i = 0; i < len; i++) {
        struct dl_entry *next = entry_of(e->owner);
        char mname[256];
        mutex_name(mname, sizeof mname, e->m);
        fprintf(stderr, "  thread %llu \"%s\" waits for mutex %s held by thread %llu \"%s\"\n",
                (unsigned long long)e->id, e->name, mname, (unsigned long long)next->id,
                next->name);
        if (parked_on(e->t, "mutex", e->m))
            print_backtrace(e->t);
        else
            fprintf(stderr, "    (no backtrace: the thread is no longer parked there)\n");
        e = next;
    }
    report_done("fern: the program keeps running; these threads never will");
}

/* Walk from every entry; each cycle is found from each of its members, so
 * it is handled once: from its member with the lowest id. */
static void find_cycles(void)
{
    for (unsigned i = 0; i < D.n; i++) {
        struct dl_entry *e = &D.e[i];
        void *owner;
        if (!read_word(&((const fern_mutex *)e->m)->owner_, &owner))
            continue;
        if (!parked_on(e->t, "mutex", e->m))
            continue; /* it left: the value read means nothing */
        e->owner = owner;
    }
    for (unsigned i = 0; i < D.n; i++) {
        struct dl_entry *start = &D.e[i], *e = start;
        unsigned len = 0;
        uint64_t key = 0, min_id = UINT64_MAX;
        do {
            if (!e->owner || len > D.n)
                break;
            key += e->id * 0x9e3779b97f4a7c15ull ^ (e->id >> 7); /* order-free */
            if (e->id < min_id)
                min_id = e->id;
            len++;
            e = entry_of(e->owner);
        } while (e && e != start);
        if (e != start || start->id != min_id)
            continue;
        struct dl_cycle *c = cycle_slot(key);
        if (c->last_scan + 1 == D.scan && !c->reported) {
            report_cycle(start, len);
            c->reported = true;
        }
        c->last_scan = D.scan;
    }
}

/* Kernel threads in the process. */
static unsigned task_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    unsigned n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* fern's own kernel threads plus callers blocked in fern_run. */
static unsigned fern_task_count(void)
{
    unsigned n = 1 + crash_threads() + trace_threads() + blocking_threads() + LOAD(&rt.run_waiters);
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        for (unsigned i = 0; i < c->nworkers; i++)
            n += i < c->nbase || LOAD(&c->workers[i]->spare) != SPARE_DORMANT;
    return n;
}

static uint64_t switches_total(void)
{
    uint64_t n = 0;
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        for (unsigned i = 0; i < c->nworkers; i++)
            n += LOAD_RELAXED(&c->workers[i]->n_switches);
    return n;
}

/* Green threads parked in fern_mutex_lock without a deadline: a sum of
 * per-worker deltas, each read relaxed, so only an estimate while threads
 * park and resume, exact when they do not. */
static int64_t mutex_parked(void)
{
    int64_t n = 0;
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        for (unsigned i = 0; i < c->nworkers; i++)
            n += LOAD_RELAXED(&c->workers[i]->mutex_parked_delta);
    return n;
}

#define ASLEEP_BT_MAX 16 /* threads of an "all asleep" report given a backtrace */

struct asleep_bt {
    unsigned n;
};

static void asleep_backtrace(fern_thread *t, void *arg)
{
    struct asleep_bt *a = arg;
    if (a->n++ >= ASLEEP_BT_MAX || LOAD(&t->run_state) != T_PARKED)
        return;
    char name[32];
    for (int i = 0; i < 31; i++)
        name[i] = LOAD_RELAXED(&t->name[i]);
    name[31] = 0;
    const char *what = LOAD_RELAXED(&t->wait_what);
    fprintf(stderr, "  thread %llu \"%s\" parked on %s:\n", (unsigned long long)t->id, name,
            what ? what : "?");
    print_backtrace(t);
}

static void report_asleep(unsigned live)
{
    fprintf(stderr, "fern: deadlock: all %u green threads are asleep on fern primitives and no "
                    "other thread can wake them:\n",
            live);
    threads_dump(stderr);
    struct asleep_bt a = {0};
    threads_walk(asleep_backtrace, &a);
    if (a.n > ASLEEP_BT_MAX)
        fprintf(stderr, "  (backtraces of the first %u threads only)\n", ASLEEP_BT_MAX);
    report_done("fern: the program keeps running");
}

/* rt.boot_lock held. Returns when the monitor should look again (it may
 * sleep until then although every worker is idle: that is the state a
 * deadlock leaves), or FERN_FOREVER. */
int64_t deadlock_watch(int64_t now, bool workers_busy)
{
    if (config.deadlock == CONFIG_DEADLOCK_OFF)
        return FERN_FOREVER;
    if (now < D.next_scan)
        return D.next_scan;
    /* While workers run, a scan can only find a mutex cycle, and that needs
     * two parked lockers: without them, walking every thread (a million,
     * under the chunk lock that spawn takes) would only cost. */
    if (workers_busy && mutex_parked() < 2) {
        D.asleep_candidate = D.asleep_reported = false;
        D.asleep_switches = switches_total();
        return FERN_FOREVER;
    }
    D.next_scan = now + DL_SCAN_NS;
    D.n = 0;
    D.scan++;
    struct census cs = {0, 0};
    threads_walk(collect, &cs);
    bool candidates = D.n >= 2;
    if (candidates)
        find_cycles();
    /* Everyone asleep: judged only while every worker is idle. */
    bool asleep = !workers_busy && cs.live > 0 && cs.asleep == cs.live &&
                  task_count() == fern_task_count();
    uint64_t sw = switches_total();
    /* Not yet a candidate: become one now, even if no switch happened
     * since asleep_switches was last recorded (the busy path above records
     * it without a candidate: the last switch may precede it, and the
     * report would then never come). */
    if (!asleep || sw != D.asleep_switches || !D.asleep_candidate) {
        if (!asleep)
            D.asleep_reported = false;
        D.asleep_candidate = asleep;
        D.asleep_switches = sw;
    } else if (D.asleep_candidate && !D.asleep_reported) {
        report_asleep(cs.live);
        D.asleep_reported = true;
    }
    if (asleep && !D.asleep_reported)
        return D.next_scan;
    return candidates ? D.next_scan : FERN_FOREVER;
}
