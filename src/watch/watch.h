/* SPDX-License-Identifier: MIT */
/*
 * watch/: what watches the workers from outside, for runtime/ and debug/.
 *   monitor.c   the monitor thread: stuck workers, compensation (spares),
 *               rescue, preemption requests, the deadlock watch's clock
 *   preempt.c   asynchronous preemption: per-worker CPU-time ticks and the
 *               signal handler that redirects a thread to yield
 *   deadlock.c  the deadlock detector (its reports' symbols and
 *               backtraces: backtrace.c)
 *   preemptible.c  which code preemption may interrupt (preempt.c's table)
 *   elf.c       a reader of ELF section tables for those two (elf.h)
 * parts.h holds watch/'s parts of struct worker.
 */
#ifndef FERN_WATCH_H
#define FERN_WATCH_H

#include "thread/thread.h"

/* monitor.c (the monitor's calls for the scheduler are in sched/sched.h) */
int monitor_start(int64_t slice_ns, bool preempt);
void monitor_stop(void);
void monitor_stats(struct fern_stats *s);

/* preempt.c */
int preempt_init(int64_t slice_ns);
void preempt_fini(void);
/* Send w an extra tick now (monitor): its own come only at the kernel's
 * scheduler tick while it runs. */
void preempt_nudge(struct worker *w);
/* The handler found w's running thread (switch count `switches`) at an
 * unsafe point at two ticks or more, with work waiting: preemption cannot
 * reach it, compensation must. */
bool preempt_blocked(struct worker *w, uint64_t switches);
/* The CPU time at which w's running slice began, as its handler stamped
 * it for switch count `switches`; 0 if it has not stamped that one. */
int64_t preempt_slice_start(struct worker *w, uint64_t switches);
/* Rebuild the table of application code if libraries came or went
 * (monitor thread). */
void preempt_refresh(void);
/* FERN_PREEMPT_LIBS's syntax (runtime/config.c): 0 if `list` is valid, 1 if
 * it is malformed, 2 if it names a runtime library that is never preempted. */
int preempt_libs_check(const char *list);
/* One line on f: what preemption may interrupt (fern_dump). */
void preempt_dump(FILE *f);
/* Kernel task tid is asleep in the kernel (/proc state S or D). */
bool task_sleeping(int tid);

/* deadlock.c: a scan if one is due (rt.boot_lock held); returns when to
 * look again, FERN_FOREVER if nothing is pending. */
int64_t deadlock_watch(int64_t now, bool workers_busy);
uint64_t deadlocks_reported(void);
void deadlock_reset(void);
/* What reports need from the dynamic loader, looked up once (no fern lock
 * held: backtrace.c says why); monitor_start calls it. */
void deadlock_prepare(void);
/* io/blocking.c: helper kernel threads alive. */
unsigned blocking_threads(void);
/* debug/crash.c: its kernel threads (the dump-signal thread). */
unsigned crash_threads(void);
/* debug/trace.c: its kernel threads (the trace writer); and, after a
 * deadlock report, the flight recorder's dump and its line on f. */
unsigned trace_threads(void);
void trace_report(FILE *f);

#endif
