/* SPDX-License-Identifier: MIT */
/*
 * The blocking pool: helper kernel threads for work that cannot be made
 * non-blocking (DNS, foreign libraries, file calls where io_uring cannot
 * take them: file.c).
 *
 * A green thread calling fern_blocking parks; its job is queued only in the
 * post-switch action (park after save), a helper runs it and wakes the thread
 * through its waiter, which sends it back to its cluster's inbox. Helpers are
 * started on demand (a job queued while no helper is idle) up to `max`, and
 * stop after HELPER_IDLE_NS without work. fern_shutdown stops them all.
 *
 * Memory ordering: the job queue and the helper count are under the pool's
 * lock; a job's completion reaches its caller through a parker (sync/wait.c).
 * The one-time warning flag is a relaxed exchange (only one message
 * matters), the wait notes relaxed (fern_dump).
 */
#include "io/io.h"
#include "sched/trace.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define HELPER_IDLE_NS (10 * 1000000000ll)

struct job {
    void *(*fn)(void *);
    void *arg;
    void *result;
    int err;
    struct waiter wt;
    struct job *next;
};

/* BP.mu is a plock and its conditions pconds (base/base.h), not pthread's:
 * with fern-hook loaded, libfern's own pthread_mutex_lock would be the
 * hooked one, which parks a green thread that finds the mutex taken (by a
 * helper, say). job_publish takes the lock in a post-switch action, where
 * the thread that runs (the parked caller's successor) must not park: it
 * would park inside its own switch, on the worker's post-switch path. A
 * plock makes the worker wait in the kernel for the few instructions a
 * helper holds it. */
static struct {
    struct plock mu;
    struct pcond work, gone;
    struct job *head, *tail;
    unsigned nqueued, nthreads, nidle, max;
    bool stopping;
} BP = {PLOCK_INIT, PCOND_INIT, PCOND_INIT, NULL, NULL, 0, 0, 0, 0, false};

static void *helper_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "fern-blocking"); /* for top, gdb and perf */
    plock_lock(&BP.mu);
    for (;;) {
        int64_t idle_end = fern_now_ns() + HELPER_IDLE_NS;
        while (!BP.head && !BP.stopping) {
            BP.nidle++;
            int r = pcond_wait(&BP.work, &BP.mu, idle_end);
            BP.nidle--;
            if (r == ETIMEDOUT && !BP.head)
                goto out;
        }
        if (!BP.head)
            break; /* stopping and no work left */
        struct job *j = BP.head;
        BP.nqueued--;
        BP.head = j->next;
        if (!BP.head)
            BP.tail = NULL;
        plock_unlock(&BP.mu);
        errno = 0;
        uint64_t caller = 0;
        if (unlikely(LOAD_RELAXED(&trace_on))) {
            caller = j->wt.own.thread ? j->wt.own.thread->id : 0;
            trace_event(NULL, TR_BLOCK_BEGIN, caller, (uintptr_t)j->fn, 0);
        }
        j->result = j->fn(j->arg);
        j->err = errno;
        waiter_wake(&j->wt); /* j may be gone from here on */
        if (caller)
            TRACE(trace_event(NULL, TR_BLOCK_END, caller, 0, 0));
        plock_lock(&BP.mu);
    }
out:
    BP.nthreads--;
    pcond_broadcast(&BP.gone);
    plock_unlock(&BP.mu);
    return NULL;
}

/* Post-switch action of the parked caller: queue its job, start a helper if
 * none is idle. */
static void job_publish(void *arg)
{
    struct job *j = arg;
    plock_lock(&BP.mu);
    if (!BP.max)
        BP.max = config.blocking_max;
    j->next = NULL;
    if (BP.tail)
        BP.tail->next = j;
    else
        BP.head = j;
    BP.tail = j;
    /* Idle helpers leave nidle only once they run, so compare with the
     * queue: more queued jobs than idle helpers means start one. */
    if (++BP.nqueued > BP.nidle && BP.nthreads < BP.max) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, helper_main, NULL) == 0)
            BP.nthreads++;
        else if (BP.nthreads == 0) {
            static int warned;
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                fprintf(stderr, "fern: cannot start a blocking-pool thread; jobs wait\n");
        }
        pthread_attr_destroy(&a);
    }
    pcond_signal(&BP.work);
    plock_unlock(&BP.mu);
}

void *fern_blocking(void *(*fn)(void *), void *arg)
{
    if (!fn) {
        errno = EINVAL;
        return NULL;
    }
    fern_thread *self = thread_current();
    if (!self)
        return fn(arg);
    /* A cancellation point at its start only: a job that runs cannot be
     * stopped, and the caller's frame must outlive it. */
    if (cancel_due(self)) {
        errno_set(ECANCELED);
        return NULL;
    }
    struct job j = {.fn = fn, .arg = arg};
    waiter_init(&j.wt);
    STORE_RELAXED(&self->wait_what, "blocking pool");
    STORE_RELAXED(&self->wait_obj, (const void *)fn);
    /* A helper thread runs fn, whose system calls may be given buffers on
     * this stack (and the job record is here): never hibernated meanwhile,
     * since the kernel cannot restore a stack (sched/hibernate.c). */
    __atomic_fetch_or(&self->hib_no, HN_KERNEL, __ATOMIC_RELAXED);
    parker_wait(j.wt.p, job_publish, &j, FERN_FOREVER);
    __atomic_fetch_and(&self->hib_no, (uint8_t)~HN_KERNEL, __ATOMIC_RELAXED);
    STORE_RELAXED(&self->wait_what, NULL);
    errno_set(j.err);
    return j.result;
}

void blocking_fini(void)
{
    plock_lock(&BP.mu);
    BP.stopping = true;
    pcond_broadcast(&BP.work);
    while (BP.nthreads)
        pcond_wait(&BP.gone, &BP.mu, FERN_FOREVER);
    BP.stopping = false;
    BP.max = 0;
    plock_unlock(&BP.mu);
}

unsigned blocking_threads(void)
{
    plock_lock(&BP.mu);
    unsigned n = BP.nthreads;
    plock_unlock(&BP.mu);
    return n;
}
