/* SPDX-License-Identifier: MIT */
/*
 * Faults and introspection: the stack-overflow report, fern_stats, fern_dump.
 *
 * Overflow: each worker runs with an alternate signal stack, and a SIGSEGV /
 * SIGBUS handler checks whether the faulting address lies in the guard page
 * of the green thread running on that worker, or the thread's stack pointer
 * lies below its stack (a frame that jumped the guard). If so it writes one
 * line to stderr (id, name, stack size; only async-signal-safe calls) and
 * aborts.
 * Any other fault goes to the handler that was installed before ours, or
 * gets the default action after crash.c's report of the green thread.
 */
#include "debug/debug.h"

#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define ALTSTACK_SIZE ((size_t)64 * 1024)

static struct sigaction old_segv, old_bus;
static int installed;

size_t fmt_u64(char *p, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

size_t fmt_str(char *p, const char *s, size_t max)
{
    size_t n = 0;
    while (n < max && s[n]) {
        p[n] = s[n];
        n++;
    }
    return n;
}

void overflow_report(fern_thread *t, const void *addr)
{
    char buf[256];
    size_t n = 0;
    n += fmt_str(buf + n, "fern: green thread ", 64);
    n += fmt_u64(buf + n, t->id);
    n += fmt_str(buf + n, " \"", 4);
    n += fmt_str(buf + n, t->name, 31);
    n += fmt_str(buf + n, "\" overflowed its stack of ", 64);
    n += fmt_u64(buf + n, t->stack ? t->stack->size : 0);
    n += fmt_str(buf + n, " bytes", 16);
    if (t->stack && t->stack->guard == FERN_GUARD_CANARY)
        n += fmt_str(buf + n, " (canary overwritten)", 32);
    n += fmt_str(buf + n, "; aborting\n", 16);
    (void)addr;
    sys_write(2, buf, n); /* raw: a signal handler, maybe beside fern-hook */
    signal(SIGABRT, SIG_DFL);
    abort();
}

void signal_chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc)
{
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) {
            old->sa_sigaction(sig, si, uc);
            return;
        }
    } else if (old->sa_handler == SIG_IGN) {
        if (si->si_code <= 0)
            return; /* sent by kill/raise: ignored, as without fern */
    } else if (old->sa_handler != SIG_DFL) {
        old->sa_handler(sig);
        return;
    }
    /* Default action: reinstall it. A fault repeats when the handler
     * returns and kills; a signal that was sent (abort, kill) is raised
     * again, or it would be lost. */
    signal(sig, SIG_DFL);
    if (si->si_code <= 0)
        raise(sig);
}

/* A frame bigger than the guard page (a large local array or alloca, built
 * without -fstack-clash-protection) can move the stack pointer past the
 * guard without touching it; the fault then comes from some other page
 * (a neighbour's guard, an unmapped gap). It is still an overflow if the
 * faulting thread's stack pointer lies below its stack, within JUMP_MAX: a
 * green thread that switched to a stack of its own elsewhere (a coroutine
 * library) is not taken for one. */
#define JUMP_MAX ((uintptr_t)64 << 20)
static bool sp_jumped_guard(const struct stack *s, const void *uc)
{
    uintptr_t sp = arch_uc_sp(uc);
    uintptr_t lo = (uintptr_t)s->lo;
    return sp < lo && lo - sp <= JUMP_MAX;
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    /* A touch of a hibernated stack: restored, retry the access. */
    if (sig == SIGSEGV && hib_fault(si->si_addr))
        return;
    struct worker *w = worker_self();
    if (w && w->cur && w->cur != &w->g0) {
        fern_thread *t = w->cur;
        struct stack *s = t->stack;
        if (s && (stack_in_guard(s, si->si_addr) || sp_jumped_guard(s, uc)))
            overflow_report(t, si->si_addr);
    }
    struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;
    crash_report(sig, si, old);
    signal_chain(old, sig, si, uc);
}

int signals_install(void)
{
    if (installed)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &old_segv) || sigaction(SIGBUS, &sa, &old_bus))
        return errno;
    installed = 1;
    return 0;
}

int altstack_setup(struct worker *w)
{
    void *p = mmap(NULL, ALTSTACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return errno;
    stack_t ss = {.ss_sp = p, .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
    if (sigaltstack(&ss, NULL)) {
        munmap(p, ALTSTACK_SIZE);
        return errno;
    }
    w->altstack = p;
    return 0;
}

void altstack_free(struct worker *w)
{
    if (!w->altstack)
        return;
    stack_t ss = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
    sigaltstack(&ss, NULL);
    unmap_frames(w->altstack, ALTSTACK_SIZE);
    w->altstack = NULL;
}

void sched_stats(struct fern_stats *s);
void sched_dump_clusters(FILE *f);
int threads_dump(FILE *f);

int fern_stats(struct fern_stats *s)
{
    if (!s || !LOAD(&rt.running))
        return EINVAL;
    memset(s, 0, sizeof *s);
    s->bias_revocations = bias_revocations();
    s->poller_ctls = io_poller_ctls();
    io_file_stats(s);
    sched_stats(s);
    stack_stats(s);
    monitor_stats(s);
    hib_stats(s);
    return 0;
}

int fern_dump(FILE *f)
{
    if (!f || !LOAD(&rt.running)) {
        errno = EINVAL;
        return -1;
    }
    struct fern_stats s;
    if (fern_stats(&s)) {
        errno = EINVAL;
        return -1;
    }
    fprintf(f, "fern: %llu live threads, %u clusters, %u workers, stacks %llu mapped / %llu in use\n",
            (unsigned long long)s.threads_live, s.clusters, s.workers,
            (unsigned long long)s.stacks_mapped, (unsigned long long)s.stacks_in_use);
    preempt_dump(f);
    trace_report(f);
    io_file_dump(f);
    if (s.hibernate)
        fprintf(f,
                "hibernation: on, after %lld us parked; %llu stacks hibernated (%llu heap bytes), "
                "%llu restores (%llu by touches)\n",
                (long long)(config.hibernate_ns / 1000), (unsigned long long)s.hibernated,
                (unsigned long long)s.hibernate_bytes, (unsigned long long)s.hibernate_restores,
                (unsigned long long)s.hibernate_touches);
    sched_dump_clusters(f);
    int n = threads_dump(f);
    fflush(f);
    return n;
}
