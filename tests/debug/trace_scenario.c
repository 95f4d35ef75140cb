/* SPDX-License-Identifier: MIT */
/*
 * The traced run tests/debug/check_trace.py reads: two named threads
 * ping-ponging over unbuffered channels, a sleeper, and two spinners that
 * share the two workers with them long enough to be preempted at the end of
 * their slices. The trace comes from $FERN_TRACE (set by the checker) or,
 * given a path argument, from fern_trace_start / fern_trace_stop.
 *
 *   trace_scenario [PATH]
 */
#include <fern/fern.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 300
#define SPIN_NS 100000000 /* ten 10 ms slices each */

static fern_chan *to_pong, *to_ping;

static void *ping(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        int v = i, r;
        if (fern_chan_send(to_pong, &v) || fern_chan_recv(to_ping, &r) || r != i + 1)
            return (void *)1;
    }
    return NULL;
}

static void *pong(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        int v;
        if (fern_chan_recv(to_pong, &v))
            return (void *)1;
        v++;
        if (fern_chan_send(to_ping, &v))
            return (void *)1;
    }
    return NULL;
}

static void *sleeper(void *arg)
{
    (void)arg;
    /* Wakes needing a worker while the spinners hold both: they are
     * preempted for it. */
    for (int i = 0; i < 20; i++)
        fern_sleep_ns(3000000);
    return NULL;
}

/* Spins, taking a lock of its own now and then: never contended, so it
 * never parks, and it is preempted at the end of its slice (under
 * ThreadSanitizer, where preemption happens only at such calls, too). */
static void *spinner(void *arg)
{
    (void)arg;
    fern_mutex m;
    memset(&m, 0, sizeof m);
    volatile unsigned long x = 0;
    int64_t end = fern_now_ns() + SPIN_NS;
    while (fern_now_ns() < end) {
        fern_mutex_lock(&m);
        for (int i = 0; i < 1000; i++)
            x += (unsigned long)i;
        fern_mutex_unlock(&m);
    }
    return NULL;
}

static void *scenario(void *arg)
{
    (void)arg;
    static const struct {
        const char *name;
        fern_fn fn;
    } spec[] = {{"ping", ping}, {"pong", pong}, {"sleeper", sleeper},
                {"spinner-1", spinner}, {"spinner-2", spinner}};
    fern_thread *t[5];
    if (fern_chan_create(&to_pong, sizeof(int), 0) || fern_chan_create(&to_ping, sizeof(int), 0))
        return (void *)1;
    for (int i = 0; i < 5; i++) {
        fern_attr a = {0, spec[i].name, NULL, false};
        if (fern_spawn(&t[i], &a, spec[i].fn, NULL))
            return (void *)1;
    }
    uintptr_t bad = 0;
    for (int i = 0; i < 5; i++) {
        void *r;
        if (fern_join(t[i], &r))
            return (void *)1;
        bad |= (uintptr_t)r;
    }
    fern_chan_destroy(to_pong);
    fern_chan_destroy(to_ping);
    return (void *)bad;
}

int main(int argc, char **argv)
{
    fern_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.workers = 2;
    int r = fern_init(&cfg);
    if (r) {
        fprintf(stderr, "trace_scenario: fern_init: %s\n", strerror(r));
        return 1;
    }
    if (argc > 1 && (r = fern_trace_start(argv[1]))) {
        fprintf(stderr, "trace_scenario: fern_trace_start: %s\n", strerror(r));
        return 1;
    }
    void *ret;
    if ((r = fern_run(scenario, NULL, &ret)) || ret) {
        fprintf(stderr, "trace_scenario: the scenario failed\n");
        return 1;
    }
    if (argc > 1 && (r = fern_trace_stop())) {
        fprintf(stderr, "trace_scenario: fern_trace_stop: %s\n", strerror(r));
        return 1;
    }
    return fern_shutdown();
}
