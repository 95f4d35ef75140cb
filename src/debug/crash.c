/* SPDX-License-Identifier: MIT */
/*
 * Crash reports and the dump signal.
 *
 * Crash report. A fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT)
 * raised while a worker runs a green thread prints one line to stderr,
 * naming the thread (id, name) and the address (the faulting data address
 * for SIGSEGV/SIGBUS, the instruction for SIGILL/SIGFPE), then takes the
 * action it would have had without fern, core dump included. The line is
 * written only when that action is the default one: a handler installed
 * before fern's runs first and may well handle the signal (a runtime that
 * maps pages on demand does), and the fault is then no crash at all.
 * SIGSEGV and SIGBUS arrive through debug.c's on_fault (which first tells
 * a stack overflow apart); the other three have a handler here. Only
 * async-signal-safe calls: write(2) of a line formatted by hand, as a raw
 * system call (sys_write: fern-hook's write is not for signal handlers).
 *
 * Dump signal. SIGQUIT (or FERN_DUMP_SIGNAL: a number or a name such as
 * USR2; 0 or "off" to disable) prints fern_dump to stderr and the process
 * goes on, like a JVM thread dump. fern_dump takes a lock and uses stdio,
 * which a signal handler must not, so the handler only writes one byte to
 * a pipe; a kernel thread asleep on that pipe does the dump. It is started
 * by fern_init and joined by fern_shutdown (before the runtime it walks is
 * torn down). A signal the program already handles is left alone: the
 * program owns it.
 *
 * An ignored dump signal. Shells start a script's background jobs (`prog &`)
 * with SIGINT and SIGQUIT ignored, and fern cannot tell that inherited
 * SIG_IGN from a program's own. Taking the signal anyway would change what
 * the program's exec'd children inherit (a handler becomes SIG_DFL across
 * exec, SIG_IGN stays), so the default SIGQUIT is left ignored, and one line
 * on stderr, once per process, says that kill -QUIT will print nothing and
 * how to choose: FERN_DUMP_SIGNAL naming the signal explicitly takes it even
 * when ignored (fern_shutdown gives SIG_IGN back), another signal avoids it,
 * off silences both.
 */
#include "debug/debug.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
    int sig;
    const char *name;
} signames[] = {
    {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"},   {SIGILL, "SIGILL"},   {SIGFPE, "SIGFPE"},
    {SIGABRT, "SIGABRT"}, {SIGQUIT, "SIGQUIT"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"},
    {SIGHUP, "SIGHUP"},   {SIGTRAP, "SIGTRAP"}, {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},
};

static const char *sig_name(int sig)
{
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (signames[i].sig == sig)
            return signames[i].name;
    return "signal";
}

static size_t fmt_hex(char *p, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[16];
    size_t n = 0;
    do {
        tmp[n++] = digits[v & 15];
        v >>= 4;
    } while (v);
    p[0] = '0';
    p[1] = 'x';
    for (size_t i = 0; i < n; i++)
        p[2 + i] = tmp[n - 1 - i];
    return n + 2;
}

/* Will signal_chain take the default action? Not when an earlier handler
 * decides, nor for a sent signal the program ignores (a fault cannot be
 * ignored). */
static bool default_follows(const struct sigaction *old, const siginfo_t *si)
{
    if (old->sa_flags & SA_SIGINFO)
        return old->sa_sigaction == NULL;
    if (old->sa_handler == SIG_IGN)
        return si->si_code > 0;
    return old->sa_handler == SIG_DFL;
}

void crash_report(int sig, const siginfo_t *si, const struct sigaction *old)
{
    if (!default_follows(old, si))
        return;
    struct worker *w = worker_self();
    if (!w || !w->cur || w->cur == &w->g0)
        return;
    fern_thread *t = w->cur;
    char buf[192];
    size_t n = 0;
    n += fmt_str(buf + n, "fern: ", 8);
    n += fmt_str(buf + n, sig_name(sig), 16);
    n += fmt_str(buf + n, " in green thread ", 32);
    n += fmt_u64(buf + n, t->id);
    n += fmt_str(buf + n, " \"", 4);
    n += fmt_str(buf + n, t->name, 31);
    n += fmt_str(buf + n, "\"", 4);
    if (sig == SIGSEGV || sig == SIGBUS) {
        n += fmt_str(buf + n, " at address ", 16);
        n += fmt_hex(buf + n, (uintptr_t)si->si_addr);
    } else if ((sig == SIGILL || sig == SIGFPE) && si->si_code > 0) {
        n += fmt_str(buf + n, " at instruction ", 20);
        n += fmt_hex(buf + n, (uintptr_t)si->si_addr);
    }
    n += fmt_str(buf + n, "\n", 2);
    sys_write(2, buf, n); /* raw: a signal handler, maybe beside fern-hook */
    trace_crash();
}

/* ---- SIGILL, SIGFPE, SIGABRT ---- */

static const int fatal_sigs[] = {SIGILL, SIGFPE, SIGABRT};
static struct sigaction old_fatal[3];
static int fatal_installed;

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
    int i = sig == SIGILL ? 0 : sig == SIGFPE ? 1 : 2;
    crash_report(sig, si, &old_fatal[i]);
    signal_chain(&old_fatal[i], sig, si, uc);
}

/* ---- the dump signal ---- */

static struct {
    int sig;   /* 0: none; written by fern_init and fern_shutdown only, read
                * by the monitor's deadlock scan too (crash_threads) */
    int fd[2]; /* pipe: the handler writes, the dumper reads */
    pthread_t thread;
    struct sigaction old;
} D = {.fd = {-1, -1}};

static void on_dump(int sig)
{
    char one = 1;
    /* Raw (errno untouched, never fern-hook's write: the pipe is one of
     * its descriptors when it is loaded); a full pipe already has a dump
     * queued. */
    sys_write(D.fd[1], &one, 1);
}

static void *dumper(void *arg)
{
    char c;
    for (;;) {
        long r = sys_read(D.fd[0], &c, 1);
        if (r == -EINTR)
            continue;
        if (r <= 0 || c == 0)
            return NULL;
        fern_dump(stderr);
    }
}

/* A FERN_DUMP_SIGNAL value (runtime/config.c checks it when fern_init runs): "off",
 * "none" or "0" = 0, a name with or without "SIG" from signames, or a number
 * in 1..NSIG-1. Returns the signal, 0 for none, -1 if s is none of those. */
int crash_signal_parse(const char *s)
{
    if (!strcmp(s, "off") || !strcmp(s, "none"))
        return 0;
    if (*s >= '0' && *s <= '9') {
        char *end;
        long v = strtol(s, &end, 10);
        return *end == 0 && v >= 0 && v < NSIG ? (int)v : -1;
    }
    if (!strncmp(s, "SIG", 3))
        s += 3;
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (!strcmp(signames[i].name + 3, s))
            return signames[i].sig;
    return -1;
}

/* The line about an ignored default dump signal (see the top). */
static void say_ignored(int sig)
{
    static int said;
    if (said)
        return;
    said = 1;
    const char *name = sig_name(sig);
    fprintf(stderr,
            "fern: %s is ignored (as in a shell script's background job), so kill -%s will not "
            "print fern_dump; FERN_DUMP_SIGNAL=%s takes it anyway, FERN_DUMP_SIGNAL=USR2 (or "
            "another signal) uses another, FERN_DUMP_SIGNAL=off turns this off\n",
            name, name + 3, name + 3);
}

static void dump_start(void)
{
    if (D.sig)
        return; /* still running from an earlier fern_init that failed */
    int sig = config.dump_signal;
    struct sigaction cur;
    if (!sig || sigaction(sig, NULL, &cur))
        return;
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) {
        if (!config.dump_signal_set) {
            say_ignored(sig);
            return;
        }
        /* Named explicitly: taken; D.old keeps SIG_IGN for fern_shutdown. */
    } else if ((cur.sa_flags & SA_SIGINFO) ? cur.sa_sigaction != NULL : cur.sa_handler != SIG_DFL) {
        return;
    }
    if (sys_pipe2(D.fd, O_CLOEXEC))
        return;
    sys_fcntl(D.fd[1], F_SETFL, O_NONBLOCK);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, (size_t)128 * 1024);
    int r = pthread_create(&D.thread, &a, dumper, NULL);
    pthread_attr_destroy(&a);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_dump;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (r || sigaction(sig, &sa, &D.old)) {
        if (!r) {
            char zero = 0;
            sys_write(D.fd[1], &zero, 1);
            pthread_join(D.thread, NULL);
        }
        sys_close(D.fd[0]);
        sys_close(D.fd[1]);
        D.fd[0] = D.fd[1] = -1;
        return;
    }
    pthread_setname_np(D.thread, "fern-dump");
    STORE_RELAXED(&D.sig, sig);
}

void crash_stop(void)
{
    int sig = D.sig;
    if (!sig)
        return;
    sigaction(sig, &D.old, NULL);
    /* Relaxed: the monitor still runs (fern_shutdown stops it next) and
     * its deadlock scan counts the dumper (crash_threads); a count that is
     * one short while the dumper ends only makes that scan hold back. */
    STORE_RELAXED(&D.sig, 0);
    char zero = 0;
    while (sys_write(D.fd[1], &zero, 1) == -EAGAIN)
        sys_sleep_ns(1000000); /* the pipe is full of queued dumps: let it drain */
    pthread_join(D.thread, NULL);
    sys_close(D.fd[0]);
    sys_close(D.fd[1]);
    D.fd[0] = D.fd[1] = -1;
}

int crash_start(void)
{
    if (!fatal_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fatal;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        for (int i = 0; i < 3; i++)
            if (sigaction(fatal_sigs[i], &sa, &old_fatal[i]))
                return errno;
        fatal_installed = 1;
    }
    dump_start();
    return 0;
}

/* Kernel threads this file runs (the dumper), for watch/deadlock.c's count
 * (the monitor's thread, while fern_shutdown may clear D.sig). */
unsigned crash_threads(void) { return LOAD_RELAXED(&D.sig) ? 1u : 0u; }
