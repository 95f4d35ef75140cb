/* SPDX-License-Identifier: MIT */
/*
 * debug/: what helps a person find a bug, for runtime/.
 *   debug.c     fern_stats, fern_dump, signal chaining, the overflow report,
 *               per-worker signal stacks
 *   crash.c     the crash report and the dump-signal thread
 *   debugmap.c  the layout a debugger reads (the gdb extension, gdb/)
 *   trace.c     the tracer: sessions, the JSON writer, the flight recorder
 *               (its event points: sched/trace.h; its buffers: base/trace.h)
 * The USDT probes are fired from the layers below: base/probes.h.
 */
#ifndef FERN_DEBUG_H
#define FERN_DEBUG_H

#include "io/io.h"
#include "watch/watch.h"
#include "base/sys.h"

/* base/sys.h's sys_write is the dumps' write(2): never through libc, so
 * never through fern-hook's write (which would park a green thread, or run
 * its descriptor logic inside a signal handler), never touching errno. */

/* debugmap.c: what a debugger reads (see there) */
struct fern_debug_map;
extern const struct fern_debug_map fern_debug_map;

/* debug.c */
size_t fmt_u64(char *p, uint64_t v);
size_t fmt_str(char *p, const char *s, size_t max);
/* Hand a signal to the action `old` that was installed before fern's:
 * its handler, or the default action (re-raised if the signal was sent). */
void signal_chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc);
int signals_install(void);

/* crash.c */
void crash_report(int sig, const siginfo_t *si, const struct sigaction *old);
int crash_start(void);
void crash_stop(void);


/* FERN_DUMP_SIGNAL's syntax (crash.c): the signal, 0 for none, -1 invalid. */
int crash_signal_parse(const char *s);

/* trace.c: fern_init starts $FERN_TRACE's session (returns 0 or why it
 * cannot: the file's errno); fern_shutdown ends it and frees the buffers
 * once the workers are stopped; a line about the session on f (fern_dump,
 * deadlock reports: the flight recorder writes its dump then); the crash
 * report's part (async-signal-safe: the flight recorder's dump, or in file
 * mode the events the writer has not written yet). trace_threads is in
 * watch/watch.h. */
int trace_init(void);
void trace_fini(void);
void trace_report(FILE *f);
void trace_crash(void);

#endif
