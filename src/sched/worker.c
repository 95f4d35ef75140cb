/* SPDX-License-Identifier: MIT */
/*
 * A worker's kernel thread: its setup (signal stack, preemption tick,
 * bias slot), its idle context g0's main loop (find_work, then run what
 * it found) and its teardown.
 */
#include "sched/sched.h"
#include "sched/trace.h"
#include "sched/switch.h"

#ifdef FERN_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef FERN_TSAN
#include <sanitizer/tsan_interface.h>
#endif
#ifdef FERN_VALGRIND
#include <valgrind/valgrind.h>
#endif

/* The worker running the calling kernel thread; read by worker_self() in
 * worker.h, which explains why it is read through an asm statement. */
__thread struct worker *fern_tls_worker_ __attribute__((tls_model("initial-exec"), used));
/* The same slot under the name fern-hook reads (io/hookapi.h). */
extern __thread struct worker *fern__tls_worker
    __attribute__((alias("fern_tls_worker_"), visibility("default")));

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    fern_tls_worker_ = w;
    pthread_setname_np(pthread_self(), "fern-worker"); /* for top, gdb and perf */
    STORE_RELAXED(&w->tid, (int32_t)gettid());
    STORE_RELAXED(&w->cur, &w->g0);
    monitor_worker_busy(w); /* the monitor may sleep: it watches us from now */
    w->errno_loc = &errno; /* this kernel thread's errno, for switch_to */
    if (__cxa_get_globals)
        w->eh = __cxa_get_globals();
    altstack_setup(w);
    hib_worker_start();
    preempt_worker_start(w);
#ifdef FERN_TSAN
    w->g0.tsan_fiber = __tsan_get_current_fiber();
#endif
#ifdef FERN_ASAN
    {
        pthread_attr_t a;
        void *addr;
        size_t sz;
        pthread_getattr_np(pthread_self(), &a);
        pthread_attr_getstack(&a, &addr, &sz);
        pthread_attr_destroy(&a);
        w->g0_lo = addr;
        w->g0_size = sz;
    }
#endif
    for (;;) {
        fern_thread *t = find_work(w);
        if (!t)
            break;
        if (!t->sp && !stack_bind(w, t))
            continue;
        switch_from_g0(w, t);
    }
    run_after(w);
    if (w->spare)
        TRACE(trace_event(w, TR_SPARE_END, trace_track(w), 0, 0));
    stack_cache_flush(w);
    preempt_worker_stop(w);
    hib_worker_stop();
    altstack_free(w);
    fern_tls_worker_ = NULL;
    STORE_RELAXED(&w->tid, 0); /* the monitor skips a worker without a kernel thread */
    STORE_RELAXED(&w->mon.idle, 1);
    if (w->spare)
        STORE(&w->spare, SPARE_EXITED);
    return NULL;
}

/* A worker that has stopped (or never started): its bias slot goes back. */
void worker_free(struct worker *w)
{
    timers_free(w);
    bias_slot_give(w->bias_tag >> 2);
    free(w);
}

struct worker *worker_new(struct fern_cluster *c, unsigned index, bool alone)
{
    struct worker *w;
    if (posix_memalign((void **)&w, 64, sizeof *w))
        return NULL;
    memset(w, 0, sizeof *w);
    w->cluster = c;
    w->index = index;
    w->alone = alone;
    w->ring_shared = !alone || !membarrier_ready();
    w->bias_tag = alone ? bias_slot_take() << 2 : 0;
    w->bias_busy = bias_busy(w->bias_tag);
    w->g0.alloc = A_LIVE;
    return w;
}

int worker_launch(struct worker *w)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, (size_t)256 * 1024);
    int r = pthread_create(&w->os, &a, worker_main, w);
    pthread_attr_destroy(&a);
    return r;
}
