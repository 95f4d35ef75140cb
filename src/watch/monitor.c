/* SPDX-License-Identifier: MIT */
/*
 * The monitor: one runtime kernel thread per process that watches the
 * workers while any of them is busy, and sleeps while all are idle.
 *
 * What it reads. Each worker already writes, at every switch, which thread
 * runs (w->cur) and a switch count (w->n_switches). The monitor stamps each
 * count it has not seen before with the time it first saw it (mon.since):
 * "which thread, since when" at the resolution of one tick, with nothing
 * added to the switch path. (A timestamp written by the worker would cost a
 * clock read per switch; the count is free.)
 *
 * What it does, per tick, for a worker that has not switched since the
 * previous tick (one thread has kept it for at least a tick):
 *   - fires its timers that are due: timers are otherwise fired only by
 *     their owner, so a worker stuck in the kernel would strand its
 *     sleepers; fired threads go to the cluster's inbox and wake an idle
 *     worker;
 *   - notes, once a thread has kept it for a slice with other threads
 *     waiting, the worker's CPU time (mon.req_cpu). Preemption itself is
 *     done by the worker's own CPU-time tick (preempt.c), not by the
 *     monitor: a monitor that waits for a CPU on a loaded machine does not
 *     delay it;
 *   - after two slices it counts the worker as stuck if it sleeps in the
 *     kernel (seen so at looks a tick apart: worker_asleep), or
 *     (preemption on) its handler found the thread at an unsafe point at
 *     every look for a slice of CPU (preempt_blocked) with work waiting,
 *     or has run two slices of CPU in that thread and one more since work
 *     began to wait, or (preemption off) has used two slices of CPU (code
 *     preemption may not interrupt; see
 *     worker_stuck): what waits on it (ring, hand-off slot; pinned threads
 *     only if it sleeps in the kernel, see rescue_worker's call) moves to
 *     the cluster inbox, and if no worker of the cluster is free to run it,
 *     a compensation worker (a spare) is started (sched/spare.c: spare_start; at
 *     most SPARES_MAX per cluster, and RESCUE_SPARES_MAX more only for a
 *     thread rescued from a worker asleep in the kernel when every worker
 *     sleeps there: it may hold their lock; a spare ends itself after
 *     SPARE_LINGER_NS without work).
 * It is also the poller's safety net (watch_poller): a vacant poll-owner
 * role while threads wait on descriptors, seen for POLL_ORPHAN_NS, gets an
 * idle worker woken to take it, or a poll by the monitor itself.
 * It hibernates the stacks of threads parked for config.hibernate_ns
 * (sched/hibernate.c), in batches, over as many ticks as a scan of every
 * thread takes (HIB_TICK_NS of work each), also while every worker is idle
 * (that is when most threads are parked): it then sleeps only until the
 * next scan is due.
 * It also looks for deadlocks (deadlock.c), also while every worker is
 * idle (that is what a deadlock looks like): then it sleeps only until the
 * deadlock watch's next scan, and without a timeout once nothing is
 * pending.
 *
 * Sleeping without losing a wake-up: the monitor stores monitor_sleeping = 1,
 * issues a full fence and checks every worker's mon.idle; it futex-waits only
 * if all are idle. A worker leaving its sleep stores mon.idle = 0, issues a
 * full fence and reads monitor_sleeping (monitor_worker_busy); if set, it
 * wakes the monitor. With both fences one of the two sees the other's store.
 * A worker that starts busy announces itself the same way. So an idle
 * process has no periodic wake-up at all; a busy one pays a tick (a quarter
 * of a slice, between 50 us and 2.5 ms).
 *
 * The time slice is also the unit of "stuck" when preemption is off, so
 * compensation and timer rescue work either way.
 */
#include "watch/watch.h"

#include <time.h>

uint32_t monitor_sleeping;

static struct {
    pthread_t th;
    bool started;
    uint32_t stop;       /* futex word of the tick wait */
    int64_t slice_ns;
    int64_t tick_ns;
    int64_t stuck_cpu_ns; /* CPU a stuck worker has used in one thread */
    bool preempt;
    uint64_t spares_started;
    int64_t unowned_since; /* the poller was first seen without an owner */
    uint64_t switches;     /* all workers' switch counts at the last tick */
    bool switched;         /* ... changed since the tick before */
} M;

void monitor_kick(void)
{
    uint32_t one = 1;
    if (CAS(&monitor_sleeping, &one, 0))
        futex_wake(&monitor_sleeping, 1);
}


/* CPU time used by kernel thread tid (Linux encodes a thread's CPU clock
 * id from its tid: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)), 0 if
 * unknown. */
static int64_t thread_cpu_ns(int tid)
{
    struct timespec ts;
    clockid_t id = (clockid_t)((~(unsigned)tid << 3) | 6);
    if (!tid || clock_gettime(id, &ts))
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Is w asleep in the kernel, and was it at every look since one a tick
 * ago or more (its switch count unchanged)? One look is not proof: a busy
 * worker can be caught in a short sleep (a page fault waiting for the
 * disk, a contended libc lock; under qemu-user, the emulator's own waits
 * while the guest spins), and a rescue moves its preempted threads to
 * other kernel threads. Costs a rescue one tick more. */
static bool worker_asleep(struct worker *w, int64_t now)
{
    if (!task_sleeping(LOAD_RELAXED(&w->tid))) {
        w->mon.asleep = 0;
        return false;
    }
    if (!w->mon.asleep)
        w->mon.asleep = now;
    return now - w->mon.asleep >= M.tick_ns;
}

/* A worker that has kept one thread for two slices of wall time is stuck
 * if it sleeps in the kernel (worker_asleep: *asleep), or if it has used
 * two slices of CPU since: then preemption could not stop it (excluded
 * code, the signal blocked). One that merely waited for a CPU (an
 * overloaded machine) is not: more kernel threads would not help it. */
static bool worker_stuck(struct worker *w, uint64_t sw, int64_t now, bool *asleep)
{
    int tid = LOAD_RELAXED(&w->tid);
    if ((*asleep = worker_asleep(w, now)))
        return true;
    /* Its handler found an unsafe point at every look for a slice of CPU
     * (a loop inside libc): no need to wait for CPU-time proof. */
    if (M.preempt && preempt_blocked(w, sw))
        return true;
    int64_t cpu = thread_cpu_ns(tid);
    if (!cpu)
        return false; /* its clock is unreadable: no proof */
    /* With preemption on: work has waited while the worker ran another
     * slice of CPU, and the thread has run two slices of CPU (mon.cpu is
     * read at most a tick after its switch), each at least 10 ms. Its own
     * tick preempts it after one slice plus one kernel tick of CPU (4 ms
     * at HZ=250, 10 ms at HZ=100), so only code preemption cannot
     * interrupt gets here, whatever the load: both bounds are in the
     * worker's CPU time. */
    if (M.preempt)
        return w->mon.req_cpu && cpu - w->mon.req_cpu >= M.stuck_cpu_ns / 2 &&
               cpu - w->mon.cpu >= M.stuck_cpu_ns;
    return !w->mon.cpu || cpu - w->mon.cpu >= M.stuck_cpu_ns;
}

/* A worker counts only while it is one: base workers, and running spares. */
static bool worker_live(struct fern_cluster *c, unsigned i)
{
    return i < c->nbase || LOAD(&c->workers[i]->spare) == SPARE_RUNNING;
}

/* One pass over cluster c. Returns true if some worker of c is busy. */
static bool watch_cluster(struct fern_cluster *c, int64_t now)
{
    bool busy = false;
    unsigned nlive = 0, nstuck = 0, nfree = 0, nlong = 0;
    spares_reap(c);
    for (unsigned i = 0; i < c->nworkers; i++) {
        struct worker *w = c->workers[i];
        if (!worker_live(c, i))
            continue;
        nlive++;
        if (LOAD_RELAXED(&w->mon.idle)) {
            nfree++;
            STORE_RELAXED(&w->mon.since, 0);
            continue;
        }
        busy = true;
        if (!LOAD_RELAXED(&w->tid)) {
            /* Launched, its kernel thread not yet running (on a loaded
             * machine that can take a while): it looks at the inbox first
             * thing, so it counts as free, never as stuck. */
            nfree++;
            STORE_RELAXED(&w->mon.since, 0);
            continue;
        }
        uint64_t sw = LOAD_RELAXED(&w->n_switches);
        if (sw != w->mon.switches || !w->mon.since) {
            /* mon.cpu before mon.switches (release): the handler takes
             * it as the start of a slice it had not stamped itself. */
            STORE_RELAXED(&w->mon.cpu, thread_cpu_ns(LOAD_RELAXED(&w->tid)));
            __atomic_store_n(&w->mon.switches, sw, __ATOMIC_RELEASE);
            STORE_RELAXED(&w->mon.since, now);
            w->mon.req_cpu = 0;
            w->mon.asleep = 0;
            continue;
        }
        if (LOAD_RELAXED(&w->cur) == &w->g0) {
            nfree++; /* in its idle path: it serves its own queues */
            continue;
        }
        int64_t ran = now - w->mon.since;
        if (LOAD_RELAXED(&w->timers.n) && timers_next(w) <= now)
            timers_run(w, now);
        bool waiting = worker_has_queued(w) || inbox_len(&c->inbox);
        /* The worker keeps its slices itself, in its CPU time (preempt.c),
         * on its own ticks, which the kernel checks only at its scheduler
         * tick while the worker runs: the monitor adds a tick when a woken
         * thread waits, or when the running thread may have used its slice
         * (the handler decides). A monitor late on a loaded machine delays
         * the worker by little CPU: the worker waited for a CPU too. */
        if (M.preempt) {
            int tid = LOAD_RELAXED(&w->tid);
            bool wake = inbox_len(&c->inbox) != 0;
            int64_t start = preempt_slice_start(w, sw);
            bool used =
                waiting && thread_cpu_ns(tid) - (start ? start : w->mon.cpu) >= M.slice_ns;
            if ((wake || used) && !task_sleeping(tid))
                preempt_nudge(w);
            /* For worker_stuck: when work began to wait behind a thread
             * past its slice. */
            if (ran >= M.slice_ns && waiting && !w->mon.req_cpu)
                w->mon.req_cpu = thread_cpu_ns(tid);
        }
        nlong += ran >= M.slice_ns;
        /* Wall time first (cheap), then CPU time (worker_stuck): a worker
         * that merely waited for a CPU is not stuck. */
        bool asleep;
        if (ran >= 2 * M.slice_ns && worker_stuck(w, sw, now, &asleep)) {
            nstuck++;
            /* Preempted threads stay pinned to their worker unless it is
             * blocked in the kernel, where it could wait for one of them
             * (a pthread mutex it holds) forever. */
            if (worker_has_queued(w))
                rescue_worker(w, asleep && tqueue_len(&w->pinned));
        }
    }
    STORE_RELAXED(&c->stuck, nstuck > 0);
    /* Work waits in the inbox, some worker is stuck, and every live worker
     * has kept one thread for a slice or more: nobody is about to run it. */
    if (nstuck && nlong == nlive && !nfree && inbox_len(&c->inbox)) {
        int r = spare_start(c, false);
        /* Every spare is taken. If a thread rescued from a worker asleep in
         * the kernel waits at the front, the workers may all sleep on a
         * lock it holds (preempted with it, after the spares were taken
         * while it ran where preemption could not reach): one more, over
         * the limit, to run it. */
        if (r == EAGAIN && inbox_front_rescued(c))
            r = spare_start(c, true);
        if (r == 0)
            STORE_RELAXED(&M.spares_started, M.spares_started + 1);
    }
    return busy;
}

/* The poller's role is vacant while threads wait on descriptors: normal
 * for a moment (its owner left epoll_wait to run what it found and will
 * take the role again when idle, and busy workers poll every 64 ticks), but
 * not for POLL_ORPHAN_NS (sched/sched.h's opening, "never left without an
 * owner"): then the owner or every awake worker is stuck, in the kernel as a rule.
 * An idle worker asleep on its futex is woken and takes the role; with
 * none, the monitor polls without blocking itself: the threads it readies
 * go to their clusters' inboxes, where compensation sees them. Looked at
 * once a tick (rt.boot_lock held), so the vacancy is sampled: acting on a
 * vacancy that came and went costs one wake-up or one poll per
 * POLL_ORPHAN_NS at most. */
#define POLL_ORPHAN_NS 10000000
static void watch_poller(int64_t now)
{
    if (!io_active() || io_poll_owned()) {
        M.unowned_since = 0;
        return;
    }
    if (!M.unowned_since) {
        M.unowned_since = now;
        return;
    }
    if (now - M.unowned_since < POLL_ORPHAN_NS)
        return;
    M.unowned_since = 0;
    if (!wake_an_idle_cluster())
        io_poll_nonblocking();
}

/* One tick over every cluster (rt.boot_lock held: clusters stay linked).
 * *again: when the deadlock watch wants another look. */
static bool watch_all(int64_t now, int64_t *again)
{
    bool busy = false;
    uint64_t sw = 0;
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster) {
        busy |= watch_cluster(c, now);
        for (unsigned i = 0; i < c->nworkers; i++)
            if (worker_live(c, i))
                sw += LOAD_RELAXED(&c->workers[i]->n_switches);
    }
    /* Threads ran, and so may have parked, since the last tick, even if
     * every worker is idle again by now (for hibernation's scans). */
    M.switched = sw != M.switches;
    M.switches = sw;
    if (busy)
        watch_poller(now);
    else
        M.unowned_since = 0;
    if (busy && M.preempt)
        preempt_refresh(); /* libraries loaded meanwhile */
    *again = deadlock_watch(now, busy);
    return busy;
}

/* Hibernation's share of a tick (outside rt.boot_lock: it takes none of
 * the locks the rest of the monitor's work needs, and a scan of a million
 * threads takes a while). *again: lowered to when it wants the next look. */
#define HIB_TICK_NS 2000000
#define HIB_SCAN_STEP 4096u
static struct thread_cursor hib_cursor;
static bool watch_hibernate(int64_t now, bool busy, int64_t *again)
{
    if (!hib_scan_due(now, busy, again))
        return false;
    for (;;) {
        if (threads_scan(&hib_cursor, HIB_SCAN_STEP, hib_scan_thread)) {
            int64_t end = fern_now_ns();
            hib_scan_end(end);
            hib_scan_due(end, false, again);
            return false;
        }
        if (fern_now_ns() - now >= HIB_TICK_NS) {
            hib_scan_flush();
            *again = now; /* more to scan: at once */
            return true;
        }
    }
}

static bool any_busy(void)
{
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        for (unsigned i = 0; i < c->nworkers; i++)
            if (worker_live(c, i) && !LOAD_RELAXED(&c->workers[i]->mon.idle))
                return true;
    return false;
}

static void *monitor_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "fern-monitor"); /* for top, gdb and perf */
    while (!LOAD(&M.stop)) {
        int64_t now = fern_now_ns(), again;
        plock_lock(&rt.boot_lock);
        bool busy = watch_all(now, &again);
        plock_unlock(&rt.boot_lock);
        bool scanning = watch_hibernate(now, busy || M.switched, &again);
        if (busy) {
            /* A hibernation scan under way goes on at once: its slices
             * (HIB_TICK_NS) space the looks at the workers out as the
             * tick would, and a scan that waited a tick after each slice
             * while the workers are busy (a million threads being spawned
             * and parking) got a third of the monitor's time and fell
             * seconds behind. */
            if (!scanning)
                futex_wait(&M.stop, 0, now + M.tick_ns);
            continue;
        }
        if (again <= now)
            continue; /* a hibernation scan is under way */
        STORE_RELAXED(&monitor_sleeping, 1);
        full_fence(); /* monitor_sleeping = 1 before reading mon.idle: see above */
        plock_lock(&rt.boot_lock);
        busy = any_busy();
        plock_unlock(&rt.boot_lock);
        /* A deadlock leaves every worker idle: a pending deadlock check
         * bounds the sleep. */
        if (!busy && !LOAD(&M.stop))
            futex_wait(&monitor_sleeping, 1, again);
        STORE_RELAXED(&monitor_sleeping, 0);
    }
    return NULL;
}

int monitor_start(int64_t slice_ns, bool preempt)
{
    M.slice_ns = slice_ns;
    M.tick_ns = slice_ns / 4;
    if (M.tick_ns < 50000)
        M.tick_ns = 50000;
    if (M.tick_ns > 2500000)
        M.tick_ns = 2500000;
    M.preempt = preempt;
    M.stuck_cpu_ns = 2 * (preempt && slice_ns < 10000000 ? 10000000 : slice_ns);
    M.stop = 0;
    M.spares_started = 0;
    M.unowned_since = 0;
    hib_cursor = (struct thread_cursor){NULL, 0};
    deadlock_reset();
    deadlock_prepare(); /* the loader's lock, not under rt.boot_lock */
    if (pthread_create(&M.th, NULL, monitor_main, NULL))
        return EAGAIN;
    M.started = true;
    return 0;
}

void monitor_stop(void)
{
    if (!M.started)
        return;
    STORE(&M.stop, 1);
    futex_wake(&M.stop, 1);
    STORE(&monitor_sleeping, 0);
    futex_wake(&monitor_sleeping, 1);
    pthread_join(M.th, NULL);
    M.started = false;
}

void monitor_stats(struct fern_stats *s)
{
    s->spares_started = LOAD_RELAXED(&M.spares_started);
    s->deadlocks_reported = deadlocks_reported();
}
