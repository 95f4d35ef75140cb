/* SPDX-License-Identifier: MIT */
/*
 * The runtime's settings: fern_config and the environment, checked and
 * loaded once by fern_init (runtime/config.c) and read, never written,
 * by every layer afterwards. See docs/configuration.md.
 */
#ifndef FERN_BASE_CONFIG_H
#define FERN_BASE_CONFIG_H

#include "base/base.h"

enum { CONFIG_GUARD_AUTO, CONFIG_GUARD_MADVISE, CONFIG_GUARD_MPROTECT, CONFIG_GUARD_CANARY };
#define CONFIG_BLOCKING_DEFAULT 64u
#define CONFIG_GUARD_BUDGET_DEFAULT 12000u
struct config {
    unsigned workers;          /* of the default cluster */
    size_t stack_size;         /* default stack size */
    bool bias;                 /* $FERN_BIAS */
    unsigned blocking_max;     /* $FERN_BLOCKING_MAX */
    bool io_uring;             /* $FERN_IO_URING: file calls may use io_uring */
    int guard;                 /* $FERN_GUARD: CONFIG_GUARD_* */
    uint32_t guard_budget;     /* $FERN_GUARD_BUDGET */
    int dump_signal;           /* $FERN_DUMP_SIGNAL: the signal, 0 for none */
    bool dump_signal_set;      /* $FERN_DUMP_SIGNAL given (not the default) */
    bool preempt;              /* fern_config.preempt_us, $FERN_PREEMPT */
    int64_t slice_ns;          /* the time slice, also with preemption off */
    int preempt_signal;        /* $FERN_PREEMPT_SIGNAL */
    char preempt_libs[1024];   /* fern_config.preempt_libs, $FERN_PREEMPT_LIBS: checked */
    int deadlock;              /* $FERN_DEADLOCK: CONFIG_DEADLOCK_* */
    char trace[4096];          /* $FERN_TRACE: a file, "ring" or "ring:DIR"; "" off */
    uint32_t trace_events;     /* $FERN_TRACE_EVENTS: slots per buffer, 0 the default */
    bool trace_threads;        /* $FERN_TRACE_THREADS=1: a track per green thread too */
    int64_t shutdown_grace_ns; /* fern_config.shutdown_grace_ms, $FERN_SHUTDOWN_GRACE_MS */
    bool hibernate;            /* fern_config.hibernate_us, $FERN_HIBERNATE */
    int64_t hibernate_ns;      /* fern_config.hibernate_us, $FERN_HIBERNATE_US */
};
/* FERN_DEADLOCK's values, in its accepted order (watch/deadlock.c). */
enum { CONFIG_DEADLOCK_REPORT, CONFIG_DEADLOCK_FATAL, CONFIG_DEADLOCK_OFF };
extern struct config config;
/* runtime/runtime.c: start the runtime with the defaults unless it runs (the implicit start of
 * fern_spawn, fern_run, fern_cluster_create and the I/O calls; `by` names the
 * call for fern_init's message). Returns 0 or fern_init's error. */
int runtime_start(const char *by);

#endif
