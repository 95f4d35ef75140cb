/* SPDX-License-Identifier: MIT */
/*
 * Configuration: the runtime's settings from fern_config and the environment,
 * read and checked in one place. docs/configuration.md is the table of every
 * setting; keep it and this file in step.
 *
 * fern_init calls config_load once, before anything starts. Every value is
 * checked there, so a mistake is reported when the program starts, not when a
 * blocking job or the thousandth stack happens to read the setting. An
 * invalid value prints exactly one line on stderr,
 *
 *     fern: FERN_WORKERS="abc" is not valid: expected a whole number from 1 to 256 ...
 *
 * naming the variable (or the fern_config field), the value as given and what
 * is accepted, and fern_init fails with EINVAL. Unset or empty variables mean
 * the default. fern_init stores the checked values in `config` under the
 * boot lock before any worker exists, and the parts of the runtime read them
 * from there; nothing writes `config` while the runtime runs.
 *
 * Sizes take an optional k, m or g suffix (either case, powers of 1024:
 * 64k = 65536); counts are plain decimal numbers. Leading or trailing
 * spaces, signs, and values that overflow are rejected, not guessed at.
 */
#include "runtime/runtime.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct config config;

static int invalid(const char *name, const char *value, const char *accepted)
{
    fprintf(stderr, "fern: %s=\"%s\" is not valid: expected %s\n", name, value, accepted);
    return EINVAL;
}

/* Decimal digits with an optional k/m/g suffix when `suffixes`. */
static bool parse_number(const char *s, bool suffixes, unsigned long long *out)
{
    if (*s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return false;
    if (suffixes && *end) {
        unsigned shift = 0;
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return false;
        }
        if (v > (~0ull >> shift))
            return false;
        v <<= shift;
        end++;
    }
    if (*end)
        return false;
    *out = v;
    return true;
}

static const char *env(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

/* A count in [min, max] from the environment; *out untouched if unset. */
static int env_count(const char *name, unsigned long long min, unsigned long long max,
                     const char *accepted, unsigned long long *out)
{
    const char *s = env(name);
    unsigned long long v;
    if (!s)
        return 0;
    if (!parse_number(s, false, &v) || v < min || v > max)
        return invalid(name, s, accepted);
    *out = v;
    return 0;
}

/* One of `choices` (a NULL-terminated list) from the environment; *out is
 * its index, untouched if unset. */
static int env_choice(const char *name, const char *const *choices, const char *accepted,
                      int *out)
{
    const char *s = env(name);
    if (!s)
        return 0;
    for (int i = 0; choices[i]; i++)
        if (strcmp(s, choices[i]) == 0) {
            *out = i;
            return 0;
        }
    return invalid(name, s, accepted);
}

#define STACK_ACCEPTED "a size from 16k to 1g (bytes, or with a k, m or g suffix)"
#define WORKERS_ACCEPTED "a whole number from 0 (one worker per CPU) to 256"

static int stack_size_ok(size_t v) { return stack_class(v, NULL) >= 0; }

int config_load(const fern_config *cfg, struct config *out)
{
    fern_config c = cfg ? *cfg : (fern_config){0};
    char given[32];
    int r = 0;

    if (c.workers > FERN_WORKERS_MAX) {
        snprintf(given, sizeof given, "%u", c.workers);
        r = invalid("fern_config.workers", given,
                    "0 (the default: $FERN_WORKERS or one per CPU) or 1 to 256");
    }
    if (!r && c.stack_size && !stack_size_ok(c.stack_size)) {
        snprintf(given, sizeof given, "%zu", c.stack_size);
        r = invalid("fern_config.stack_size", given,
                    "0 (the default: $FERN_STACK_SIZE or 128 KiB) or 16384 to 1073741824");
    }
    if (r)
        return r;

    /* A variable is read only where fern_config leaves the setting at 0:
     * an explicit configuration does not depend on the environment. */
    unsigned long long v = 0;
    if (c.workers == 0) {
        if ((r = env_count("FERN_WORKERS", 0, FERN_WORKERS_MAX, WORKERS_ACCEPTED, &v)))
            return r;
        c.workers = (unsigned)v;
    }
    if (c.workers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        c.workers = n > 0 ? (unsigned)(n > FERN_WORKERS_MAX ? FERN_WORKERS_MAX : n) : 1;
    }
    const char *s = c.stack_size ? NULL : env("FERN_STACK_SIZE");
    if (s && (!parse_number(s, true, &v) || v > FERN_STACK_MAX || !stack_size_ok((size_t)v)))
        return invalid("FERN_STACK_SIZE", s, STACK_ACCEPTED);
    if (c.stack_size == 0)
        c.stack_size = s ? (size_t)v : FERN_STACK_DEFAULT;

    struct config n = {.workers = c.workers, .stack_size = c.stack_size, .bias = true,
                       .blocking_max = CONFIG_BLOCKING_DEFAULT, .guard = CONFIG_GUARD_AUTO,
                       .guard_budget = CONFIG_GUARD_BUDGET_DEFAULT};
    static const char *const bias_choices[] = {"0", "1", NULL};
    int bias = 1;
    if ((r = env_choice("FERN_BIAS", bias_choices, "0 (off) or 1 (on, the default)", &bias)))
        return r;
    n.bias = bias == 1;

    v = n.blocking_max;
    if ((r = env_count("FERN_BLOCKING_MAX", 1, 99999, "a whole number from 1 to 99999 (default 64)",
                       &v)))
        return r;
    n.blocking_max = (unsigned)v;

    int uring = 1;
    if ((r = env_choice("FERN_IO_URING", bias_choices,
                        "0 (file calls use the blocking pool) or 1 (io_uring where the kernel "
                        "allows it, the default)",
                        &uring)))
        return r;
    n.io_uring = uring == 1;

    static const char *const guard_choices[] = {"auto", "madvise", "mprotect", "canary", NULL};
    int guard = CONFIG_GUARD_AUTO;
    if ((r = env_choice("FERN_GUARD", guard_choices,
                        "auto (the default), madvise, mprotect or canary", &guard)))
        return r;
    n.guard = guard;

    v = n.guard_budget;
    if ((r = env_count("FERN_GUARD_BUDGET", 0, 1000000,
                       "a whole number from 0 to 1000000 (default 12000)", &v)))
        return r;
    n.guard_budget = (uint32_t)v;

    const char *d = env("FERN_DUMP_SIGNAL");
    n.dump_signal = SIGQUIT;
    n.dump_signal_set = d != NULL;
    if (d && (n.dump_signal = crash_signal_parse(d)) < 0)
        return invalid("FERN_DUMP_SIGNAL", d,
                       "a signal name (QUIT, USR1, SIGUSR2, HUP, ...) or number, or off (0)");

    static const char *const deadlock_choices[] = {"report", "fatal", "off", NULL};
    n.deadlock = CONFIG_DEADLOCK_REPORT;
    if ((r = env_choice("FERN_DEADLOCK", deadlock_choices,
                        "report (the default), fatal (abort after the report) or off",
                        &n.deadlock)))
        return r;

    /* Preemption and the monitor's time slice (docs/preemption.md). */
    n.preempt = true;
    long us = c.preempt_us;
    if (us == FERN_PREEMPT_OFF) {
        n.preempt = false;
        us = FERN_PREEMPT_DEFAULT_US;
    } else if (us != 0 && (us < FERN_PREEMPT_MIN_US || us > FERN_PREEMPT_MAX_US)) {
        snprintf(given, sizeof given, "%ld", us);
        return invalid("fern_config.preempt_us", given,
                       "0 (the default: $FERN_PREEMPT_US or 10000), FERN_PREEMPT_OFF (-1) or 100 "
                       "to 10000000 microseconds");
    }
    if (us == 0) {
        static const char *const preempt_choices[] = {"0", "1", NULL};
        int on = 1;
        if ((r = env_choice("FERN_PREEMPT", preempt_choices, "0 (off) or 1 (on, the default)",
                            &on)))
            return r;
        n.preempt = on == 1;
        v = FERN_PREEMPT_DEFAULT_US;
        if ((r = env_count("FERN_PREEMPT_US", FERN_PREEMPT_MIN_US, FERN_PREEMPT_MAX_US,
                           "a whole number of microseconds from 100 to 10000000 (default 10000)",
                           &v)))
            return r;
        us = (long)v;
    }
    n.slice_ns = (int64_t)us * 1000;
    const char *ps = env("FERN_PREEMPT_SIGNAL");
    n.preempt_signal = SIGURG;
    if (ps) {
        int sig = crash_signal_parse(ps);
        if (sig <= 0 || sig == SIGSEGV || sig == SIGBUS || sig == SIGKILL || sig == SIGSTOP ||
            sig == n.dump_signal)
            return invalid("FERN_PREEMPT_SIGNAL", ps,
                           "a signal name (URG, USR2, ...) or number other than SEGV, BUS, KILL, "
                           "STOP and FERN_DUMP_SIGNAL's (default URG)");
        n.preempt_signal = sig;
    }

    /* fern_shutdown's grace period (runtime.c). */
    long g = c.shutdown_grace_ms;
    if (g != 0 && g != FERN_SHUTDOWN_GRACE_NONE && (g < 1 || g > FERN_SHUTDOWN_GRACE_MAX_MS)) {
        snprintf(given, sizeof given, "%ld", g);
        return invalid("fern_config.shutdown_grace_ms", given,
                       "0 (the default: $FERN_SHUTDOWN_GRACE_MS or 1000), "
                       "FERN_SHUTDOWN_GRACE_NONE (-1) or 1 to 3600000 milliseconds");
    }
    if (g == 0) {
        v = FERN_SHUTDOWN_GRACE_DEFAULT_MS;
        if ((r = env_count("FERN_SHUTDOWN_GRACE_MS", 0, FERN_SHUTDOWN_GRACE_MAX_MS,
                           "a whole number of milliseconds from 0 (none) to 3600000 (default 1000)",
                           &v)))
            return r;
        g = (long)v;
    }
    n.shutdown_grace_ns = g < 0 ? 0 : (int64_t)g * 1000000;

    /* The shared libraries preempted besides the executable (watch/preempt.c).
     * An explicit list, "" included, does not read the variable. */
    const char *libs = c.preempt_libs ? c.preempt_libs : env("FERN_PREEMPT_LIBS");
    const char *libs_name = c.preempt_libs ? "fern_config.preempt_libs" : "FERN_PREEMPT_LIBS";
    if (libs) {
        int bad = preempt_libs_check(libs);
        if (bad == 1 || strlen(libs) >= sizeof n.preempt_libs)
            return invalid(libs_name, libs,
                           "a colon-separated list of shared library file names (libfoo.so.1, or "
                           "libfoo for any libfoo.so*) or absolute paths, without spaces or empty "
                           "entries, at most 1023 bytes");
        if (bad == 2)
            return invalid(libs_name, libs,
                           "libraries other than libc, the loader, libpthread, libdl, librt, "
                           "libstdc++, libgcc_s, the sanitizer runtimes and fern's own (whose "
                           "code is never preempted)");
        strcpy(n.preempt_libs, libs);
    }

    /* Tracing (debug/trace.c, docs/debugging.md). The file is opened by
     * fern_init (trace_init), which reports one that cannot be. */
    const char *tr = env("FERN_TRACE");
    if (tr) {
        if (strlen(tr) >= sizeof n.trace || !strcmp(tr, "ring:"))
            return invalid("FERN_TRACE", tr,
                           "a file to write the trace to, ring (the flight recorder, dumps in the "
                           "current directory) or ring:DIR, at most 4095 bytes");
        strcpy(n.trace, tr);
    }
    v = 0;
    if ((r = env_count("FERN_TRACE_EVENTS", 1024, 16777216,
                       "a power of two from 1024 to 16777216 (events per worker's buffer; "
                       "default 65536, 16384 for FERN_TRACE=ring)",
                       &v)))
        return r;
    if (v & (v - 1))
        return invalid("FERN_TRACE_EVENTS", env("FERN_TRACE_EVENTS"),
                       "a power of two from 1024 to 16777216 (events per worker's buffer; "
                       "default 65536, 16384 for FERN_TRACE=ring)");
    n.trace_events = (uint32_t)v;
    v = 0;
    if ((r = env_count("FERN_TRACE_THREADS", 0, 1,
                       "0 (the default: one track per worker) or 1 (a track per green thread "
                       "too)",
                       &v)))
        return r;
    n.trace_threads = v == 1;
    /* FERN_MEMBARRIER is read where membarrier is probed (base/membarrier.c,
     * which may run before fern_init); here it is only checked. */
    v = 0;
    if ((r = env_count("FERN_MEMBARRIER", 0, 1,
                       "0 (act as if the kernel had no membarrier) or 1 (the default: use it "
                       "where the kernel has it)",
                       &v)))
        return r;
    /* Stack hibernation (docs/stacks.md): off unless asked for. */
    long hus = c.hibernate_us;
    if (hus != 0 && hus != FERN_HIBERNATE_OFF && (hus < 1 || hus > FERN_HIBERNATE_MAX_US)) {
        snprintf(given, sizeof given, "%ld", hus);
        return invalid("fern_config.hibernate_us", given,
                       "0 (the default: $FERN_HIBERNATE and $FERN_HIBERNATE_US), "
                       "FERN_HIBERNATE_OFF (-1) or 1 to 3600000000 microseconds");
    }
    n.hibernate = hus > 0;
    n.hibernate_ns = (int64_t)(hus > 0 ? hus : FERN_HIBERNATE_DEFAULT_US) * 1000;
    const char *hib_name = "fern_config.hibernate_us";
    if (hus == 0) {
        static const char *const hib_choices[] = {"0", "1", NULL};
        int on = 0;
        if ((r = env_choice("FERN_HIBERNATE", hib_choices, "0 (off, the default) or 1 (on)",
                            &on)))
            return r;
        n.hibernate = on == 1;
        v = FERN_HIBERNATE_DEFAULT_US;
        if ((r = env_count("FERN_HIBERNATE_US", 0, FERN_HIBERNATE_MAX_US,
                           "a whole number of microseconds from 0 (at once, for testing) to "
                           "3600000000 (default 1000000)",
                           &v)))
            return r;
        n.hibernate_ns = (int64_t)v * 1000;
        hib_name = "FERN_HIBERNATE";
    }
    const char *no_hib = hibernate_unsupported();
    if (n.hibernate && no_hib) {
        fprintf(stderr, "fern: %s asks for stack hibernation, which %s (docs/stacks.md)\n",
                hib_name, no_hib);
        return EINVAL;
    }

    *out = n;
    return 0;
}
