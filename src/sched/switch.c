/* SPDX-License-Identifier: MIT */
/*
 * Leaving the CPU: picking the next thread (pick_next), switching to it
 * (switch_to), parking, exiting, yielding. A thread that stops running
 * picks its successor itself and switches straight to it; only when
 * nothing is runnable locally does it switch to the worker's idle context
 * g0 (worker.c). What must happen once the old context is saved is left
 * in w->after and run by the new context first (run_after).
 *
 * Park after save (invariant 1, docs/design.md): a thread never makes
 * itself visible to other workers before its registers are saved. It names
 * an "after" action and switches; the next context on the same worker runs
 * the action (run_after) before anything else.
 *
 * No system calls on the switch path (invariant 5): fern_ctx_switch stays
 * in user space, and so does everything here but the bounded exceptions
 * docs/design.md lists (a first run needing a fresh stack goes through g0;
 * a non-blocking poll every 64 ticks).
 *
 * The design of the scheduler as a whole opens sched.h.
 */
#include "sched/sched.h"
#include "sched/switch.h"
#include "sched/trace.h"
#include "base/probes.h"

#include <sched.h>

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


/* A preempted thread goes back first when it made way for a woken one
 * (it keeps the rest of its slice: watch/preempt.c), else last. */
void sched_pin(struct worker *w, fern_thread *t, bool front)
{
    if (front)
        tqueue_push_front(&w->pinned, t);
    else
        tqueue_push(&w->pinned, t);
}


/* Switch from cur to next on w. Returns on cur's context when it is resumed,
 * possibly on another worker. `dying` marks a context that never resumes. */
/* A thread leaving the CPU: on a canary-guarded stack, check the canaries
 * and that its stack pointer (this frame's) is still inside the stack. */
static inline void canary_check(fern_thread *t, struct stack *s)
{
    if (s && unlikely(s->guard == FERN_GUARD_CANARY) &&
        !stack_canary_intact(s, __builtin_frame_address(0)))
        overflow_report(t, s->lo);
}

/* Make next w's running thread: its state, counters and (TSan) its fiber.
 * The caller has saved what the old thread keeps and swapped in next's C++
 * exception state. */
static inline void enter_thread(struct worker *w, fern_thread *next)
{
    STORE_RELAXED(&w->cur, next); /* read by the monitor */
    STORE_RELAXED(&next->run_state, T_RUNNING);
    STORE_RELAXED(&w->n_switches, w->n_switches + 1);
#ifdef FERN_TSAN
    __tsan_switch_to_fiber(next->tsan_fiber, 0);
#endif
}

static void switch_to(struct worker *w, fern_thread *cur, fern_thread *next, bool dying)
{
    canary_check(cur, cur->stack);
    cur->saved_errno = *w->errno_loc;
    /* One test for both halves of the swap: the tracer's event point below
     * costs about what a second test of w->eh did. */
    uintptr_t *eh = w->eh;
    if (eh) {
        cur->eh[0] = eh[0];
        cur->eh[1] = eh[1];
        eh[0] = next->eh[0];
        eh[1] = next->eh[1];
    }
    PROBE2(switch, cur->id, next->id);
    enter_thread(w, next);
    /* After enter_thread, and handing back next's sp: nothing but cur (in a
     * callee-saved register anyway) is live across the call, so the event
     * point costs the switch no stack frame. */
    void *sp = next->sp;
    TRACE(sp = trace_switch(w, cur, next));
#ifdef FERN_ASAN
    if (next == &w->g0)
        __sanitizer_start_switch_fiber(dying ? NULL : &cur->asan_fake, w->g0_lo, w->g0_size);
    else
        __sanitizer_start_switch_fiber(dying ? NULL : &cur->asan_fake, next->stack->lo,
                                       next->stack->size);
#endif
    fern_ctx_switch(&cur->sp, sp, NULL);
#ifdef FERN_ASAN
    {
        const void *ob;
        size_t os;
        __sanitizer_finish_switch_fiber(cur->asan_fake, &ob, &os);
    }
#endif
    w = worker_self();
    run_after(w);
    /* A busy worker still serves ready fds: poll now and then, here where
     * the resumed thread holds no queue locks (a parking thread does, so
     * pick_next must not dispatch events). */
    if (unlikely((w->tick & 63) == 0) && io_active() && !io_poll_owned())
        io_poll_nonblocking();
    *w->errno_loc = cur->saved_errno;
}

/* Give up the CPU: run `fn(arg)` after the switch, then whatever is next.
 * `unlocked`: the caller holds no lock (see pick_next's `batch`). */
static inline __attribute__((always_inline)) void park(after_fn fn, void *arg, bool unlocked)
{
    struct worker *w = worker_self();
    fern_thread *cur = w->cur;
    fern_thread *next;
    /* run_state stays T_RUNNING until the wait's after-switch action
     * stores T_PARKED, once the registers are saved (sync/wait.c): a
     * canceller waits for that before it readies cur (thread/cancel.c), and
     * only then is cur a candidate for hibernation (sched/hibernate.c). */
    PROBE2(park, cur->id, cur->wait_what);
    w->after = fn;
    w->after_prev = cur;
    w->after_arg = arg;
    next = pick_next(w, false, unlocked, true);
    if (next && !next->sp && !(stack_ready(w, next->stack_cls) && stack_bind(w, next))) {
        /* Binding a stack that is not in the cache may fault in a page and
         * take a system call, which must not happen while the parking
         * thread's queue lock is still held (it is released in `fn`): that
         * first run goes through g0. */
        w->start = next;
        next = NULL;
    }
    switch_to(w, cur, next ? next : &w->g0, false);
}

/* The idle context runs t (worker.c's loop); returns when w is back in g0.
 * switch_to stays static so the switch paths above keep the code GCC
 * specialises for them in this one file. */
void switch_from_g0(struct worker *w, fern_thread *t) { switch_to(w, &w->g0, t, false); }

void sched_park(after_fn fn, void *arg) { park(fn, arg, false); }

/* Exit into a thread that has not run yet and wants a stack of the same
 * class: hand it the exiting thread's stack, hot in the cache, instead of
 * returning the stack to the pool, switching to g0 to bind one, and switching
 * again. The exiting thread's after-action runs here, still on its stack:
 * nothing else owns that stack, and the action touches only the descriptor
 * (which it may free, or hand to a joiner), never the stack. Then the new
 * thread starts on a fresh frame at the top, abandoning the old frames. */
static inline __attribute__((always_inline, noreturn)) void
relay(struct worker *w, fern_thread *cur, fern_thread *next, after_fn fn, void *arg, bool slow)
{
    struct stack *s = cur->stack;
    canary_check(cur, s);
    STORE_RELAXED(&cur->stack, NULL);
    STORE_RELAXED(&next->stack, s);
    /* Before fn: under TSan, fn may free cur and with it cur's fiber. */
    PROBE2(switch, cur->id, next->id);
    if (w->eh) {
        w->eh[0] = next->eh[0];
        w->eh[1] = next->eh[1];
    }
    enter_thread(w, next);
    if (slow && LOAD_RELAXED(&trace_on))
        trace_switch(w, cur, next);
    fn(w, cur, arg); /* cur may be freed from here on */
#ifdef FERN_ASAN
    __sanitizer_start_switch_fiber(NULL, s->lo, s->size);
    /* The old frames left their redzones poisoned. */
    ASAN_UNPOISON_MEMORY_REGION(s->lo, s->size - sizeof *s);
#endif
    fern_ctx_start((void *)((uintptr_t)s & ~(uintptr_t)15), next);
}

/* The relay while fern_slow is set (base/slow.h): while a trace records (the
 * switch's event) or threads wait for a stack (then no relay: the stack
 * goes back through the pool, which serves them first). Apart, so that the
 * common relay tests both at once. */
static __attribute__((noinline)) void relay_slow(struct worker *w, fern_thread *cur,
                                                 fern_thread *next, after_fn fn, void *arg)
{
    if (!LOAD_RELAXED(&stack_starved))
        relay(w, cur, next, fn, arg, true);
}

/* Exit path: never returns. */
void sched_exit(after_fn fn, void *arg) __attribute__((noreturn));
void sched_exit(after_fn fn, void *arg)
{
    struct worker *w = worker_self();
    fern_thread *cur = w->cur;
    fern_thread *next;
    STORE_RELAXED(&cur->run_state, T_EXITING);
    PROBE1(exit, cur->id);
    next = pick_next(w, false, true, false);
    if (next && !next->sp && cur->stack && next->stack_cls == cur->stack_cls) {
        SLOW({
            relay_slow(w, cur, next, fn, arg); /* returns if it did not relay */
            goto no_relay;
        });
        relay(w, cur, next, fn, arg, false);
    }
no_relay:
    w->after = fn;
    w->after_prev = cur;
    w->after_arg = arg;
    if (next && !next->sp) {
        /* Through g0, after `fn` returned our stack to the pool: the new
         * thread reuses it while it is hot. */
        w->start = next;
        next = NULL;
    }
    switch_to(w, cur, next ? next : &w->g0, true);
    __builtin_unreachable();
}

static void after_requeue(struct worker *w, fern_thread *prev, void *arg)
{
    runq_put(w, prev);
}

void sched_yield_green(struct worker *w)
{
    fern_thread *cur = w->cur;
    /* Alone in its cluster and not shared with the monitor or a spare, the
     * worker queues cur before the switch, with no after-switch call: the
     * ring section (ring_enter) lasts until the next context's run_after,
     * so nobody else takes cur from the ring before its context is saved
     * (invariant 1). */
    bool owned = w->alone && ring_enter(w);
    fern_thread *next = pick_next(w, owned, true, true);
    if (!next) {
        if (owned)
            ring_leave(w);
        owned = false;
        /* Alone on this worker: still serve fds now and then, or a thread
         * that only yields would keep parked readers waiting. */
        if ((w->tick & 63) == 0 && io_active() && !io_poll_owned()) {
            io_poll_nonblocking();
            next = pick_next(w, false, true, true);
        }
        if (!next)
            return;
    }
    if (!next->sp && !(stack_ready(w, next->stack_cls) && stack_bind(w, next))) {
        w->start = next;
        next = &w->g0;
    }
    if (owned) {
        runq_put(w, cur);
    } else {
        w->after = after_requeue;
        w->after_prev = cur;
        w->after_arg = NULL;
        STORE_RELAXED(&cur->run_state, T_RUNNABLE);
    }
    switch_to(w, cur, next, false);
}

static void after_pin(struct worker *w, fern_thread *prev, void *arg)
{
    sched_pin(w, prev, arg != NULL);
}

/* A preempted thread gives up the worker. Preemptions are rare (one per
 * slice, or per wake-up beside a busy thread), so first the worker's due
 * timers and the inbox get a look: a thread a timer woke must not wait
 * behind pinned spinners for the 61-tick inbox check. A thread preempted
 * for a woken one before its slice ended (w->preempt.pin_front,
 * watch/preempt.c) goes to the front of the pinned list: it resumes as soon
 * as the woken threads park, and its slice goes on. */
void sched_yield_pinned(struct worker *w)
{
    fern_thread *cur = w->cur;
    bool front = w->preempt.pin_front;
    w->preempt.pin_front = 0;
    if (LOAD_RELAXED(&w->timers.n))
        timers_run(w, fern_now_ns());
    /* A stopping cluster: back to g0, which ends the worker (pick_next). */
    fern_thread *next = LOAD(&w->cluster->stopping) ? &w->g0 : inbox_pop(&w->cluster->inbox);
    if (!next) /* preempted outside fern: no fern lock held (watch/preempt.c) */
        next = pick_next(w, false, true, true);
    if (!next)
        return;
    if (!next->sp && !(stack_ready(w, next->stack_cls) && stack_bind(w, next))) {
        w->start = next;
        next = &w->g0;
    }
    TRACE(trace_event(w, TR_PREEMPT, cur->id, 0, 0));
    w->after = after_pin;
    w->after_prev = cur;
    w->after_arg = front ? cur : NULL;
    STORE_RELAXED(&cur->run_state, T_RUNNABLE);
    switch_to(w, cur, next, false);
}


static void after_migrate(struct worker *w, fern_thread *prev, void *arg)
{
    inbox_push(arg, prev, true);
}

int fern_migrate(fern_cluster *c)
{
    fern_thread *self = thread_current();
    if (!self)
        return EPERM;
    if (!c)
        return EINVAL;
    if (LOAD(&c->stopping)) {
        /* Still a trip through the scheduler: a thread that migrates in a
         * loop must not become a spinner its stopping cluster cannot stop
         * (pick_next sends a stopping cluster's workers to g0). */
        sched_yield_green(worker_self());
        return EINVAL;
    }
    if (self->cluster == c)
        return 0;
    struct worker *w = worker_self();
    COUNT(&w->live_delta, -1);
    self->cluster = c;
    /* Per worker: a shared counter cost every migration a contended
     * cache line. */
    COUNT(&w->n_migrations, 1);
    TRACE(trace_event(w, TR_MIGRATE, self->id, (uintptr_t)c, 0));
    park(after_migrate, c, true);
    return 0;
}

void fern_yield_body(void)
{
    struct worker *w = worker_self();
    if (w && w->cur != &w->g0)
        sched_yield_green(w);
    else
        sched_yield();
}


void sched_after_switch(void) { run_after(worker_self()); }

#if !ARCH_JUMP_RETURN
/* Where switch.S has no jump_return trampolines (arch.h: ARCH_JUMP_RETURN),
 * the public call is a plain call of its body. */
void fern_yield(void) { fern_yield_body(); }
#endif
