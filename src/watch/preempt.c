/* SPDX-License-Identifier: MIT */
/*
 * Asynchronous preemption of green threads that run past their time slice.
 *
 * Model. Each worker has a POSIX timer on its own kernel thread's CPU clock
 * (timer_create(CLOCK_THREAD_CPUTIME_ID), SIGEV_THREAD_ID to itself) that
 * sends it the preemption signal every tick of CPU it uses (a quarter
 * slice, rounded up by the kernel to its scheduler tick: 4 ms at HZ=250).
 * A worker that sleeps uses no CPU and gets no ticks, so an idle process
 * costs nothing, and a thread blocked in a system call is not interrupted.
 * Slices are kept by the worker itself, in its CPU time, so neither a late
 * monitor nor a loaded machine changes what a thread is granted:
 *   - the handler stamps a slice's start when it sees a new switch count:
 *     the CPU time of the preemption that caused the switch (w->preempt.slice_next)
 *     or, after a voluntary switch, that of the tick itself;
 *   - a slice is over when the thread has used P.slice_ns of CPU since;
 *     then, if other threads wait, it is preempted at that tick (granted:
 *     the slice rounded up to the kernel's tick);
 *   - a thread woken (a due timer of this worker, or one in the cluster's
 *     inbox) does not wait for a slice to end: the running thread is
 *     preempted at the next tick, goes to the front of the pinned list and
 *     keeps the rest of its slice (t->slice_carry), so a sleeper beside
 *     spinners is late by at most a tick of CPU and spinners' shares stay
 *     equal (this is the kernel's wake-up preemption, at tick resolution).
 * Preempting goes as in Go since 1.14: the handler, on the worker's
 * alternate signal stack, never switches stacks. It checks that the
 * interrupted point is safe:
 *   - a green thread runs, on its own fern stack;
 *   - the PC is in code that may be preempted: an executable segment of
 *     the main executable, less its sections named fern_nopreempt* (fern's
 *     own code when libfern.a is linked in: CMakeLists.txt renames the
 *     static archives' code sections; code a user excludes the same way),
 *     or of a shared library on the user's list (config.preempt_libs,
 *     $FERN_PREEMPT_LIBS). Every other shared library is left alone: many
 *     keep state per kernel thread (an allocator's thread cache, OpenSSL's
 *     per-thread random generator) or take locks (malloc's, the loader's,
 *     stdio's) that another green thread on the same kernel thread would
 *     enter half-updated, or wait for with the kernel's futex, forever.
 *     libc, the loader, libstdc++, libgcc_s, the sanitizer runtimes and
 *     fern's libraries cannot be listed. The table of ranges is built
 *     outside the handler with dl_iterate_phdr (at start, and again by the
 *     monitor when the loader's add/remove counts change: preemptible.c)
 *     and published as an immutable array, so the handler only reads;
 *   - fern holds no internal lock: fern's code is excluded by the PC test,
 *     and the biased-object busy flag and a pending post-switch action are
 *     checked as well;
 *   - the stack has room for the trampoline's frame (arch_preempt_frame:
 *     on x86_64 the 128-byte red zone, registers, XSAVE area; on aarch64 a
 *     copy of the kernel's signal frame) and the scheduler's frames.
 * If so arch_preempt_redirect (arch.h) makes the context call
 * fern_preempt_tramp (src/arch/<arch>/preempt.S) from the interrupted
 * instruction; after the kernel's sigreturn it saves every register, the
 * flags and the vector state (aarch64: the kernel's frame, copied, holds
 * them), calls preempt_yield() and restores them exactly. An architecture
 * without a trampoline (ARCH_PREEMPT 0) has preemption off, as if
 * FERN_PREEMPT=0. Otherwise (or if arch_preempt_redirect cannot redirect
 * this context) it counts a deferred preemption and tries again at the
 * worker's next tick; a thread that stays where it cannot be preempted (a
 * loop inside memchr) is the monitor's to compensate for.
 *
 * A preempted thread goes on its worker's pinned list, not its run queue:
 * it resumes on the same kernel thread (application code may hold a TLS
 * address in a register) unless it migrates itself, or its worker gets
 * stuck and the monitor hands the list to the others (monitor.c).
 *
 * Signal: SIGURG by default (ignored by default, rarely used: out-of-band
 * socket data), FERN_PREEMPT_SIGNAL (a name or number, runtime/config.c) chooses
 * another. A signal that is not a tick of fern's timers (si_code SI_TIMER
 * with fern's cookie as its value) goes to the handler that was installed
 * before fern_init (a handler installed later replaces fern's until the
 * next fern_init). Installed with SA_RESTART; a timer on the CPU clock does
 * not expire while its thread sleeps, so blocking calls are not interrupted
 * (except one that sleeps in the instant a tick expires: SA_RESTART covers
 * most, and fern's own waits treat an early return as a spurious wake-up).
 *
 * ThreadSanitizer delivers signals late, at its own points, with a copy of
 * the context: there the handler only sets w->preempt.soft and fern's
 * operations (preempt_point) yield when they see it.
 *
 * A program linked with the static libfern has fern's code inside its own
 * executable, in its fern_nopreempt section, found in the executable's
 * section table (exe_excluded). If fern's code is there outside such a
 * section, or the table cannot be read, the executable's code is not
 * preempted at all (fern_dump says so). Off under Valgrind.
 */
#include "watch/preemptible.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef FERN_VALGRIND
#include <valgrind/valgrind.h>
#endif

#ifdef FERN_ASAN
#define PREEMPT_ROOM 32768u  /* ASan's frames are larger */
#else
#define PREEMPT_ROOM 8192u   /* scheduler frames + after-actions, besides XSAVE */
#endif

#define SLICE_NONE UINT64_MAX /* slice_sw: no slice stamped */

static struct {
    int sig;
    bool on;
    int64_t slice_ns;
    int64_t tick_ns;  /* the period of each worker's CPU-time timer */
    struct sigaction old;
    bool installed;             /* the handler stays after fern_shutdown */
    int installed_sig;
} P;

#if !defined(FERN_TSAN) && ARCH_PREEMPT
static bool pc_is_app(uintptr_t pc)
{
    const struct code_table *t = LOAD(&preempt_table);
    if (!t)
        return false;
    for (unsigned i = 0; i < t->n; i++)
        if (pc >= t->r[i].lo && pc < t->r[i].hi)
            return true;
    return false;
}
#endif

/* ---- the handler: one tick of a worker's CPU time ---- */

/* The handler is instrumented by neither AddressSanitizer (as it never
 * was) nor ThreadSanitizer. It runs on the kernel thread it interrupts:
 * what it reads and writes plainly (errno, the slice fields of its worker
 * and thread) belongs to that kernel thread, and what the monitor reads is
 * atomic. TSan cannot model that under fern-hook: a tick arriving inside an
 * intercepted blocking call (poll, epoll_wait) is run as the TSan fiber
 * that entered the call, while fern had switched the thread to its second
 * fiber inside it (fern__tsan_enter, thread/thread.c), so TSan reported the
 * handler's errno and slice accesses against that same kernel thread's
 * other fiber; and a report raised inside the handler while TSan was
 * symbolising another deadlocked TSan on its thread registry lock (test_hook
 * hung until ctest's timeout; with the race reports, 2 of 4 TSan runs of
 * test_hook failed here). */
#define HANDLER_UNINSTRUMENTED __attribute__((no_sanitize("address", "thread")))

static void chain_old(int sig, siginfo_t *si, void *uc)
{
    if (P.old.sa_flags & SA_SIGINFO) {
        if (P.old.sa_sigaction)
            P.old.sa_sigaction(sig, si, uc);
    } else if (P.old.sa_handler != SIG_DFL && P.old.sa_handler != SIG_IGN) {
        P.old.sa_handler(sig);
    }
}

/* The calling kernel thread's CPU time: a system call once per tick (a
 * thread's CPU clock has no vDSO path). Made directly rather than through
 * clock_gettime, which ThreadSanitizer intercepts: it recorded the write to
 * `ts`, on the worker's signal stack, and reported it against the previous
 * tick's (the fiber confusion above). */
HANDLER_UNINSTRUMENTED static int64_t self_cpu_ns(void)
{
    struct timespec ts;
    if (syscall(SYS_clock_gettime, CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#if !defined(FERN_TSAN) && ARCH_PREEMPT
/* The interrupted point may be left for fern_preempt_tramp (see the top). */
static bool point_safe(struct worker *w, fern_thread *t, void *ucv)
{
    uintptr_t pc = arch_uc_pc(ucv), sp = arch_uc_sp(ucv);
    uintptr_t lo = (uintptr_t)t->stack->lo, hi = (uintptr_t)t->stack;
    uintptr_t need = arch_preempt_frame() + PREEMPT_ROOM;
    return pc_is_app(pc) && sp <= hi && sp >= lo + need && !w->after &&
           !(w->bias_tag && LOAD_RELAXED(w->bias_busy));
}
#endif

/* One tick on w, whose running thread is t. */
HANDLER_UNINSTRUMENTED static void preempt_tick(struct worker *w, fern_thread *t, void *ucv)
{
    int64_t cpu = self_cpu_ns();
    uint64_t sw = LOAD_RELAXED(&w->n_switches);
    if (sw != w->preempt.slice_sw) {
        /* A new slice: it began at the last preemption if that was the
         * switch (the usual case beside spinners), else when the monitor or
         * this handler first saw it (at most a tick late). A thread preempted early for
         * a woken one goes on with what it had left. */
        int64_t start = w->preempt.slice_next ? w->preempt.slice_next : cpu;
        /* After a voluntary switch the monitor may have seen this count
         * first (its ticks are finer than the kernel's): its reading of
         * the CPU time is the earlier start. */
        if (!w->preempt.slice_next && __atomic_load_n(&w->mon.switches, __ATOMIC_ACQUIRE) == sw) {
            int64_t m = LOAD_RELAXED(&w->mon.cpu);
            if (m > 0 && m < start)
                start = m;
        }
        STORE_RELAXED(&w->preempt.slice_sw, sw); /* both read by the monitor */
        STORE_RELAXED(&w->preempt.slice_start, start - t->slice_carry);
        w->preempt.slice_next = 0;
        t->slice_carry = 0;
    }
    int64_t used = cpu - w->preempt.slice_start;
    bool expired = used >= P.slice_ns;
    if (unlikely(t->rescued)) {
        /* Rescued from a worker asleep in the kernel (rescue_worker): not
         * preempted during the run in which this tick first sees it, while
         * nothing else needs this worker alone. Threads preempted here
         * (pinned) can run nowhere else: once the rescued thread's slice is
         * over they get their turn, or a rescued spinner would starve them
         * for ever. */
        if (t->rescued_sw == UINT64_MAX)
            t->rescued_sw = sw;
        if (t->rescued_sw == sw && !(expired && tqueue_len(&w->pinned)))
            return;
        t->rescued = 0;
    }
    bool inbox = inbox_len(&w->cluster->inbox) != 0;
    /* A stopping cluster (fern_shutdown's destroy phase): any thread is
     * preempted, so that its worker can end (sched_yield_pinned). */
    bool queued = (expired && (inbox || worker_has_queued(w))) ||
                  LOAD_RELAXED(&w->cluster->stopping);
    /* Only hints so far: a due timer is confirmed below, under its lock. */
    if (!queued && !inbox && !LOAD_RELAXED(&w->timers.n))
        return;
#ifdef FERN_TSAN
    /* The context is a copy here; fern's next operation yields. */
    (void)ucv;
    if (queued || (expired && LOAD_RELAXED(&w->timers.n))) {
        w->preempt.slice_next = cpu;
        STORE_RELAXED(&w->preempt.slice_sw, SLICE_NONE);
        STORE_RELAXED(&w->preempt.soft, 1);
    }
#elif ARCH_PREEMPT
    if (!point_safe(w, t, ucv)) {
        if (queued || inbox) {
            COUNT(&w->n_preempts_deferred, 1);
            if (LOAD_RELAXED(&w->preempt.defer_sw) != sw) {
                STORE_RELAXED(&w->preempt.defer_n, 0);
                STORE_RELAXED(&w->preempt.defer_cpu0, cpu);
                STORE_RELAXED(&w->preempt.defer_sw, sw);
            }
            STORE_RELAXED(&w->preempt.defer_cpu, cpu);
            STORE_RELAXED(&w->preempt.defer_n, w->preempt.defer_n + 1);
        }
        return;
    }
    /* Not in fern (point_safe), so the worker holds no timer lock. */
    bool woken = inbox || (LOAD_RELAXED(&w->timers.n) && timers_next(w) <= fern_now_ns());
    if (!queued && !woken)
        return;
    if (!arch_preempt_redirect(ucv)) { /* a context it cannot resume exactly */
        COUNT(&w->n_preempts_deferred, 1);
        return;
    }
    /* Woken threads run at once; the slice of the thread they displace
     * is kept if it was not over. */
    t->slice_carry = expired ? 0 : used;
    w->preempt.pin_front = !expired;
    w->preempt.slice_next = cpu;
    STORE_RELAXED(&w->preempt.slice_sw, SLICE_NONE); /* restamped if the yield finds nobody */
    COUNT(&w->n_preempts, 1);
#else
    (void)ucv;
#endif
}

HANDLER_UNINSTRUMENTED static void on_preempt(int sig, siginfo_t *si, void *ucv)
{
    int saved_errno = errno;
    struct worker *w = worker_self();
    bool tick = si->si_code == SI_TIMER && si->si_value.sival_ptr == &P;
    /* The monitor's nudge: a tgkill from this process with the flag set
     * (exchanged, so a program's own tgkill of this signal is passed on). */
    bool nudge = !tick && si->si_code == SI_TKILL && si->si_pid == getpid() && w &&
                 __atomic_exchange_n(&w->preempt.nudged, 0, __ATOMIC_ACQ_REL);
    if (!tick && !nudge) {
        chain_old(sig, si, ucv);
        errno = saved_errno;
        return;
    }
    fern_thread *t = w ? w->cur : NULL;
    if (!w || !LOAD_RELAXED(&P.on))
        goto out; /* a tick still in flight from a deleted timer */
    if (t == &w->g0 || !t->stack) {
        STORE_RELAXED(&w->preempt.slice_sw, SLICE_NONE); /* idle path: the next thread starts afresh */
        w->preempt.slice_next = 0;
        goto out;
    }
    preempt_tick(w, t, ucv);
out:
    errno = saved_errno;
}

/* Called by the trampoline on the preempted thread's stack, all its
 * registers saved. */
void preempt_yield(void)
{
    sched_yield_pinned(worker_self());
}

#ifdef FERN_TSAN
void preempt_point_slow(struct worker *w)
{
    STORE_RELAXED(&w->preempt.soft, 0);
    COUNT(&w->n_preempts, 1);
    sched_yield_pinned(w);
}
#endif

/* ---- the worker's tick ---- */

void preempt_worker_start(struct worker *w)
{
    STORE_RELAXED(&w->preempt.slice_sw, SLICE_NONE);
    w->preempt.slice_next = 0;
    if (!LOAD_RELAXED(&P.on))
        return;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = P.sig;
    sev.sigev_value.sival_ptr = &P; /* tells fern's ticks from other signals */
#ifdef sigev_notify_thread_id
    sev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
#else
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
#endif
    if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &w->preempt.timer)) {
        /* Out of timers (RLIMIT_SIGPENDING): this worker is not preempted;
         * the monitor still compensates for it. */
        COUNT(&w->n_preempts_deferred, 1);
        return;
    }
    struct itimerspec its = {{P.tick_ns / 1000000000, P.tick_ns % 1000000000},
                             {P.tick_ns / 1000000000, P.tick_ns % 1000000000}};
    timer_settime(w->preempt.timer, 0, &its, NULL);
    w->preempt.timed = true;
}

void preempt_worker_stop(struct worker *w)
{
    if (!w->preempt.timed)
        return;
    timer_delete(w->preempt.timer);
    w->preempt.timed = false;
}

/* ---- the monitor's side ---- */

/* The handler has found the thread at an unsafe point at every look, at
 * least BLOCKED_LOOKS times over at least a slice of the worker's CPU time,
 * with work waiting: it runs where preemption cannot reach (a loop inside
 * libc). One look is not proof, nor are a few: signals tend to arrive at
 * the same instructions (on a virtual machine, right after an exit to the
 * hypervisor, such as the vDSO's clock read), so a loop that calls
 * clock_gettime between short stretches of arithmetic may be found inside
 * the vDSO several times in a row and still be preempted at the next look.
 * Monitor thread; the fields are hints written by the handler. */
#define BLOCKED_LOOKS 8
bool preempt_blocked(struct worker *w, uint64_t switches)
{
    return LOAD_RELAXED(&w->preempt.defer_sw) == switches && LOAD_RELAXED(&w->preempt.defer_n) >= BLOCKED_LOOKS &&
           LOAD_RELAXED(&w->preempt.defer_cpu) - LOAD_RELAXED(&w->preempt.defer_cpu0) >= P.slice_ns;
}

int64_t preempt_slice_start(struct worker *w, uint64_t switches)
{
    /* A hint (the pair is not written atomically): the handler that the
     * monitor's nudge runs decides with its own, exact values. */
    return LOAD_RELAXED(&w->preempt.slice_sw) == switches ? LOAD_RELAXED(&w->preempt.slice_start) : 0;
}

void preempt_nudge(struct worker *w)
{
    int tid = LOAD_RELAXED(&w->tid);
    if (!P.on || !tid)
        return;
    STORE(&w->preempt.nudged, 1);
    syscall(SYS_tgkill, getpid(), tid, P.sig);
}

/* The thread of kernel task tid is asleep in the kernel ('S' or 'D' in
 * /proc): compensation covers it. */
bool task_sleeping(int tid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    /* Raw system calls: with fern-hook loaded, libc's open/read/close are
     * its wrappers, and its close would make the runtime forget its
     * descriptor table's entry for this number, unsynchronised with a green
     * thread that had just closed the same number (TSan reported the two
     * writing that entry at once). The monitor's own descriptor is none of
     * the table's business. */
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may contain spaces */
    return p && p[1] == ' ' && (p[2] == 'S' || p[2] == 'D');
}

void preempt_refresh(void)
{
    if (LOAD_RELAXED(&P.on))
        table_refresh();
}

bool preempt_enabled(void) { return P.on; }

void preempt_dump(FILE *f)
{
    const struct code_table *t = LOAD(&preempt_table);
    if (!LOAD_RELAXED(&P.on) || !t) {
        fprintf(f, "fern: preemption off\n");
        return;
    }
    fprintf(f, "fern: preemption on, %lld us slice, in %s\n", (long long)(P.slice_ns / 1000),
            t->what ? t->what : "the code in its table");
}

int preempt_init(int64_t slice_ns)
{
    int sig = config.preempt_signal; /* checked by config_load */
    P.slice_ns = slice_ns;
    /* A quarter slice, but the kernel checks CPU-clock timers only at its
     * scheduler tick (4 ms at HZ=250): the slice granted is rounded up to
     * that. */
    P.tick_ns = slice_ns / 4 < 50000 ? 50000 : slice_ns / 4 > 2500000 ? 2500000 : slice_ns / 4;
#ifdef FERN_VALGRIND
    /* Valgrind does not run a rewritten signal context as the kernel does
     * (the trampoline's pushes are reported as invalid writes): off there. */
    if (RUNNING_ON_VALGRIND)
        return 0;
#endif
#if ARCH_PREEMPT
    arch_preempt_init();
#else
    (void)sig;
    P.on = false; /* no trampoline for this architecture (arch.h) */
    return 0;
#endif
    P.sig = sig;
    P.on = true;
    int r = table_build();
    if (r)
        return r;
    /* Left in place when the runtime stops (a tick still in flight then
     * finds preemption off and is dropped). At each start: if the program
     * replaced it meanwhile, that handler becomes the one fern passes
     * other signals to, and fern's goes back in. */
    if (P.installed && P.installed_sig != sig) {
        sigaction(P.installed_sig, &P.old, NULL);
        P.installed = false;
    }
    struct sigaction cur;
    if (P.installed && sigaction(sig, NULL, &cur) == 0 &&
        (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != on_preempt))
        P.installed = false;
    if (!P.installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_preempt;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, &P.old)) {
            P.on = false;
            return errno;
        }
        P.installed = true;
        P.installed_sig = sig;
    }
    return 0;
}

void preempt_fini(void)
{
    P.on = false;
    struct code_table *t = preempt_table;
    preempt_table = NULL;
    while (t) {
        struct code_table *o = t->retired;
        free(t->what);
        free(t);
        t = o;
    }
}
