/* SPDX-License-Identifier: MIT */
/*
 * Green thread lifecycle: spawn, run, exit, join, detach; ids, names
 * (green-thread-local keys: keys.c).
 *
 * Descriptors come from chunks of THREAD_CHUNK descriptors (never returned to
 * malloc until shutdown), cached per worker, so spawn is a pop from a list
 * and a stale handle still points at a descriptor (a second join sees it free
 * and says EINVAL instead of touching freed memory). fern_dump walks the
 * chunks, so the spawn path keeps no global list.
 *
 * Lifecycle (t->life, under t->tlock): the exiting thread's last act runs on
 * the next context (after_exit, park after save): release the stack, then
 * under tlock mark EXITED and read DETACHED / the joiner. A detached thread is
 * freed there; a joiner is woken after tlock is released (the joiner frees
 * the descriptor, tlock included). A joiner queues itself under tlock and
 * releases tlock only once parked, so the exit path cannot miss it.
 *
 * Memory ordering. A descriptor's alloc is stored A_LIVE with release after
 * every field is initialised and A_FREE with release when it is retired;
 * join, detach and fern_dump load it with acquire before trusting other
 * fields. life and joiner are under tlock. next_id is a relaxed
 * fetch_add: ids need only be unique. name bytes, wait notes, run_state,
 * cluster and stack_cls are relaxed: read for display (fern_dump) or by
 * the thread itself.
 */
#include "thread/thread.h"
#include "sched/hibernate.h"
#include "io/hookapi.h"
#include "base/probes.h"
#include "base/sys.h"

#include <stdio.h>
#include <unistd.h>

#ifdef FERN_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef FERN_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#define THREAD_CACHE_MAX 4096u


/* ------------------------------------------------------------------------ */
/* Descriptors                                                               */
/* ------------------------------------------------------------------------ */

fern_thread *thread_alloc(struct worker *w)
{
    fern_thread *t;
    if (w && (t = w->free_threads) != NULL) {
        w->free_threads = t->link;
        w->nfree_threads--;
        return t;
    }
    spin_lock(&rt.chunk_lock);
    if (!rt.free_threads) {
        /* Aligned as its descriptors are (see struct fern_thread). */
        struct thread_chunk *c = aligned_alloc(_Alignof(struct thread_chunk), sizeof *c);
        if (!c) {
            spin_unlock(&rt.chunk_lock);
            return NULL;
        }
        memset(c, 0, sizeof *c);
        uint8_t cfence = cancel_fence_mode(); /* probed by runtime_init already */
        c->next = rt.chunks;
        STORE(&rt.chunks, c); /* release: threads_scan reads the list unlocked */
        for (unsigned i = THREAD_CHUNK; i-- > 0;) {
            c->t[i].cfence = cfence;
            c->t[i].link = rt.free_threads;
            rt.free_threads = &c->t[i];
            /* Not waiting (0 would be W_WAITING). A thread leaves it so at
             * exit (it cannot exit waiting), so spawn need not store it. */
            c->t[i].cpark.state = W_WOKEN;
        }
    }
    t = rt.free_threads;
    rt.free_threads = t->link;
    /* Take a batch into the worker's cache while holding the lock. */
    for (unsigned i = 0; w && i < 32 && rt.free_threads; i++) {
        fern_thread *x = rt.free_threads;
        rt.free_threads = x->link;
        x->link = w->free_threads;
        w->free_threads = x;
        w->nfree_threads++;
    }
    spin_unlock(&rt.chunk_lock);
    return t;
}

#ifdef FERN_TSAN
/* ThreadSanitizer tracks each green thread as a fiber, which takes one of its
 * thread slots (8,128 in all, OS threads included) from fern_spawn until the
 * thread is released, and aborts the process when they run out. fern_spawn
 * says EAGAIN before that, leaving room for the program's OS threads. */
static uint32_t tsan_fibers;

static bool tsan_fiber_take(void)
{
    if (__atomic_add_fetch(&tsan_fibers, 1, __ATOMIC_RELAXED) <= FERN_TSAN_THREADS_MAX)
        return true;
    __atomic_sub_fetch(&tsan_fibers, 1, __ATOMIC_RELAXED);
    static uint32_t said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
        static const char msg[] = "fern: ThreadSanitizer build: more than FERN_TSAN_THREADS_MAX (7,000) "
                                  "live green threads; fern_spawn returns EAGAIN\n";
        sys_write(2, msg, sizeof msg - 1);
    }
    return false;
}

static void tsan_fiber_drop(fern_thread *t)
{
    if (t->tsan_fiber) {
        __tsan_destroy_fiber(t->tsan_fiber);
        t->tsan_fiber = NULL;
        __atomic_sub_fetch(&tsan_fibers, 1, __ATOMIC_RELAXED);
    }
    /* fern-hook's second fiber (fern__tsan_enter) is not counted: it exists
     * only for threads that made a hooked call, within the headroom that
     * FERN_TSAN_THREADS_MAX leaves below TSan's limit. */
    if (t->tsan_other) {
        __tsan_destroy_fiber(t->tsan_other);
        t->tsan_other = NULL;
    }
    t->tsan_hook_depth = 0;
}
#endif

void thread_free(struct worker *w, fern_thread *t)
{
    if (t->keys) {
        free(t->keys);
        t->keys = NULL;
    }
    if (t->rdheld) {
        free(t->rdheld);
        t->rdheld = NULL;
    }
#ifdef FERN_TSAN
    tsan_fiber_drop(t);
#endif
    STORE(&t->alloc, A_FREE);
    if (w && w->nfree_threads < THREAD_CACHE_MAX) {
        t->link = w->free_threads;
        w->free_threads = t;
        w->nfree_threads++;
        return;
    }
    spin_lock(&rt.chunk_lock);
    t->link = rt.free_threads;
    rt.free_threads = t;
    spin_unlock(&rt.chunk_lock);
}

void threads_fini(uint64_t *abandoned)
{
    spin_lock(&rt.chunk_lock);
    struct thread_chunk *c = rt.chunks;
    rt.chunks = NULL;
    rt.free_threads = NULL;
    spin_unlock(&rt.chunk_lock);
    while (c) {
        struct thread_chunk *n = c->next;
        for (unsigned i = 0; i < THREAD_CHUNK; i++) {
            fern_thread *t = &c->t[i];
            if (t->alloc == A_LIVE) {
                /* Ended but not joined: released, not counted. */
                *abandoned += t->run_state != T_EXITING;
                free(t->keys);
                free(t->rdheld);
                hib_forget(t);
#ifdef FERN_TSAN
                tsan_fiber_drop(t);
#endif
            }
        }
        free(c);
        c = n;
    }
}

static const char *state_name(uint8_t s)
{
    switch (s) {
    case T_NEW: return "new";
    case T_RUNNABLE: return "runnable";
    case T_RUNNING: return "running";
    case T_PARKED: return "parked";
    case T_EXITING: return "exiting";
    }
    return "?";
}

static void name_read(const fern_thread *t, char out[32])
{
    for (int i = 0; i < 31; i++)
        out[i] = LOAD_RELAXED(&t->name[i]);
    out[31] = 0;
}

/* Without rt.chunk_lock (a scan of a million threads would hold up every
 * spawn that needs a chunk): chunks are only ever added, at the head, with
 * a release store, and freed by threads_fini after the monitor stopped. */
bool threads_scan(struct thread_cursor *cur, unsigned max, void (*fn)(fern_thread *t))
{
    if (!cur->chunk) {
        cur->chunk = LOAD(&rt.chunks);
        cur->i = 0;
    }
    for (; cur->chunk; cur->chunk = LOAD_RELAXED(&cur->chunk->next), cur->i = 0)
        for (; cur->i < THREAD_CHUNK; cur->i++) {
            if (max-- == 0)
                return false;
            fern_thread *t = &cur->chunk->t[cur->i];
            if (LOAD(&t->alloc) == A_LIVE)
                fn(t);
        }
    return true;
}

void threads_walk(void (*fn)(fern_thread *t, void *arg), void *arg)
{
    spin_lock(&rt.chunk_lock);
    for (struct thread_chunk *c = rt.chunks; c; c = c->next)
        for (unsigned i = 0; i < THREAD_CHUNK; i++)
            if (LOAD(&c->t[i].alloc) == A_LIVE)
                fn(&c->t[i], arg);
    spin_unlock(&rt.chunk_lock);
}

int threads_dump(FILE *f)
{
    int n = 0;
    spin_lock(&rt.chunk_lock);
    for (struct thread_chunk *c = rt.chunks; c; c = c->next)
        for (unsigned i = 0; i < THREAD_CHUNK; i++) {
            fern_thread *t = &c->t[i];
            if (LOAD(&t->alloc) != A_LIVE)
                continue;
            char name[32];
            name_read(t, name);
            const char *what = LOAD_RELAXED(&t->wait_what);
            uint8_t st = LOAD_RELAXED(&t->run_state);
            fprintf(f, "thread %llu \"%s\" %s", (unsigned long long)t->id, name, state_name(st));
            if (st == T_PARKED && what) {
                const void *obj = LOAD_RELAXED(&t->wait_obj);
                fprintf(f, obj ? " on %s %p" : " on %s", what, obj);
            }
            uint8_t h = LOAD_RELAXED(&t->hib);
            if (h == H_DONE || h == H_RESTORING)
                fprintf(f, " (hibernated)");
            fprintf(f, " cluster %p stack %zu%s\n", (void *)LOAD_RELAXED(&t->cluster),
                    (size_t)FERN_STACK_MIN << LOAD_RELAXED(&t->stack_cls),
                    LOAD_RELAXED(&t->stack) ? "" : " (not bound)");
            n++;
        }
    spin_unlock(&rt.chunk_lock);
    return n;
}

/* ------------------------------------------------------------------------ */
/* Spawn, exit, join                                                         */
/* ------------------------------------------------------------------------ */


static uint64_t next_id(struct worker *w)
{
    if (!w)
        return __atomic_add_fetch(&rt.next_id, 1, __ATOMIC_RELAXED);
    if (w->id_next == w->id_end) {
        w->id_next = __atomic_fetch_add(&rt.next_id, 1024, __ATOMIC_RELAXED) + 1;
        w->id_end = w->id_next + 1024;
    }
    return w->id_next++;
}

static void name_copy(fern_thread *t, const char *name)
{
    size_t i = 0;
    if (name)
        for (; i < 31 && name[i]; i++)
            STORE_RELAXED(&t->name[i], name[i]);
    STORE_RELAXED(&t->name[i], 0);
}

/* fern_spawn's body, inlined three times: for attr NULL (the common spawn:
 * no test of attr's fields), for an attr, and with `slow` while fern_slow is
 * set (base/slow.h: stack starvation and the tracer's spawn event share
 * that one test, which the other two do not repeat). */
static inline __attribute__((always_inline)) int spawn_as(fern_thread **out, const fern_attr *attr,
                                                         fern_fn fn, void *arg, bool slow)
{
    bool detached = attr && attr->detached;
    if (!fn || (!out && !detached))
        return EINVAL;
    if (unlikely(!LOAD(&rt.running))) {
        int r = runtime_start("fern_spawn (or fern_go)");
        if (r)
            return r;
    }
    int cls = rt.default_cls;
    if (attr && attr->stack_size && (cls = stack_class(attr->stack_size, NULL)) < 0)
        return EINVAL;
    struct worker *w = worker_self();
    struct fern_cluster *c = attr ? attr->cluster : NULL;
    if (!c)
        c = (w && w->cur != &w->g0) ? w->cur->cluster : rt.dflt;
    if (!c || LOAD(&c->stopping))
        return EINVAL;
    if (slow && LOAD_RELAXED(&stack_starved))
        return EAGAIN;
#ifdef FERN_TSAN
    if (!tsan_fiber_take())
        return EAGAIN;
#endif
    fern_thread *t = thread_alloc(w);
    if (!t) {
#ifdef FERN_TSAN
        __atomic_sub_fetch(&tsan_fibers, 1, __ATOMIC_RELAXED);
#endif
        return EAGAIN;
    }
    STORE_RELAXED(&t->sp, NULL);
    STORE_RELAXED(&t->stack, NULL);
    t->fn = fn;
    t->arg = arg; /* result shares its word: set when the thread returns */
    STORE_RELAXED(&t->cluster, c);
    t->link = NULL;
    t->saved_errno = 0;
    t->slice_carry = 0;
    t->tlock = 0;
    /* At once: life, not rescued, no cancel request (cpark's state is
     * W_WOKEN or W_TIMEDOUT/W_CANCELED: not waiting), hibernation's two
     * bytes (H_NONE, the opt-out), T_NEW and the stack class. */
    STORE_RELAXED(&t->lifeword, LW_LIFE(detached ? L_DETACHED : 0u) |
                                    LW_HIB_NO(attr && attr->no_hibernate ? HN_OPTOUT : 0u) |
                                    LW_STACK_CLS((uint8_t)cls));
    STORE_RELAXED(&t->wait_what, NULL);
    t->joiner = NULL;
    t->cshield = 0;
    t->keys = NULL;
    t->rdheld = NULL;
    STORE_RELAXED(&t->id, next_id(w)); /* read by the deadlock watch (watch/deadlock.c) */
    t->eh[0] = t->eh[1] = 0;
    name_copy(t, attr ? attr->name : NULL);
#ifdef FERN_ASAN
    t->asan_fake = NULL;
#endif
#ifdef FERN_TSAN
    t->tsan_fiber = __tsan_create_fiber(0);
#endif
    STORE(&t->alloc, A_LIVE);
    PROBE2(spawn, t->id, t->name);
    if (out)
        *out = t;
    if (slow)
        sched_spawned(t);
    else
        sched_spawned_plain(t);
    return 0;
}

static __attribute__((noinline)) int spawn_slow(fern_thread **out, const fern_attr *attr,
                                                fern_fn fn, void *arg)
{
    return spawn_as(out, attr, fn, arg, true);
}

int fern_spawn(fern_thread **out, const fern_attr *attr, fern_fn fn, void *arg)
{
    SLOW(return spawn_slow(out, attr, fn, arg));
    if (!attr)
        return spawn_as(out, NULL, fn, arg, false);
    return spawn_as(out, attr, fn, arg, false);
}

int fern_go(fern_fn fn, void *arg)
{
    fern_attr a = {.detached = true};
    return fern_spawn(NULL, &a, fn, arg);
}

/* prev's last act, run by the next context (or, when prev handed its stack
 * to a new thread, by prev itself just before that thread starts: then
 * prev->stack is already NULL). */
static void after_exit(struct worker *w, fern_thread *prev, void *arg)
{
    if (prev->stack) {
        stack_put(w, prev->stack);
        STORE_RELAXED(&prev->stack, NULL);
    }
    STORE_RELAXED(&prev->sp, NULL);
    COUNT(&w->n_exited, 1);
    COUNT(&w->live_delta, -1);
    spin_lock(&prev->tlock);
    uint8_t life = prev->life;
    prev->life = life | L_EXITED;
    bool detached = life & L_DETACHED;
    struct waiter *j = prev->joiner;
    /* Claimed under tlock: a joiner that was cancelled instead leaves
     * under tlock (fern_join_body), and its waiter is gone after that. */
    if (j && !waiter_claim(j))
        j = NULL;
    spin_unlock(&prev->tlock);
    if (detached)
        thread_free(w, prev);
    else if (j)
        waiter_release_inline(j, 0, true);
}

static void thread_finish(fern_thread *self, void *ret) __attribute__((noreturn));
static void thread_finish(fern_thread *self, void *ret)
{
    self->result = ret;
    if (self->keys)
        keys_run_dtors(&self->keys);
    sched_exit(after_exit, NULL);
}

void thread_entry(void *from, fern_thread *self)
{
#ifdef FERN_ASAN
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
    sched_after_switch();
    *worker_self()->errno_loc = 0; /* errno, without a call to find it */
    thread_finish(self, self->fn(self->arg));
}

int fern_exit(void *ret)
{
    fern_thread *self = thread_current();
    if (!self)
        return EPERM;
    thread_finish(self, ret);
}

int fern_join_body(fern_thread *t, void **ret)
{
    if (!t)
        return EINVAL;
    fern_thread *self = thread_current();
    if (t == self)
        return EDEADLK;
    if (LOAD(&t->alloc) != A_LIVE)
        return EINVAL;
    spin_lock(&t->tlock);
    if (LOAD(&t->alloc) != A_LIVE || (t->life & (L_DETACHED | L_JOINING))) {
        spin_unlock(&t->tlock);
        return EINVAL;
    }
    if (!(t->life & L_EXITED)) {
        struct waiter wt;
        if (!waiter_init_cancellable(&wt, self)) {
            spin_unlock(&t->tlock);
            return ECANCELED;
        }
        t->life |= L_JOINING;
        t->joiner = &wt;
        if (self) {
            STORE_RELAXED(&self->wait_what, "join");
            STORE_RELAXED(&self->wait_obj, t);
        }
        int st = waiter_wait(&wt, &t->tlock, FERN_FOREVER);
        if (self)
            STORE_RELAXED(&self->wait_what, NULL);
        if (st == W_CANCELED) {
            /* The exiting thread, if it came, failed its claim under tlock
             * and does not touch wt after it. t stays joinable. */
            spin_lock(&t->tlock);
            t->joiner = NULL;
            t->life &= (uint8_t)~L_JOINING;
            spin_unlock(&t->tlock);
            return ECANCELED;
        }
    } else {
        t->life |= L_JOINING;
        spin_unlock(&t->tlock);
    }
    if (ret)
        *ret = t->result;
    thread_free(worker_self(), t);
    return 0;
}

int fern_detach(fern_thread *t)
{
    if (!t || LOAD(&t->alloc) != A_LIVE)
        return EINVAL;
    spin_lock(&t->tlock);
    if (LOAD(&t->alloc) != A_LIVE || (t->life & (L_DETACHED | L_JOINING))) {
        spin_unlock(&t->tlock);
        return EINVAL;
    }
    if (t->life & L_EXITED) {
        spin_unlock(&t->tlock);
        thread_free(worker_self(), t);
        return 0;
    }
    t->life |= L_DETACHED;
    spin_unlock(&t->tlock);
    return 0;
}

int fern_run(fern_fn fn, void *arg, void **ret)
{
    if (!fn)
        return EINVAL;
    if (unlikely(!LOAD(&rt.running))) {
        int r = runtime_start("fern_run");
        if (r)
            return r;
    }
    fern_attr a = {.name = "main", .cluster = rt.dflt};
    fern_thread *t;
    int r = fern_spawn(&t, &a, fn, arg);
    if (r)
        return r;
    bool plain = !thread_current();
    if (plain)
        ADD_RELAXED(&rt.run_waiters, 1);
    r = fern_join_body(t, ret);
    if (plain)
        __atomic_fetch_sub(&rt.run_waiters, 1, __ATOMIC_RELAXED);
    return r;
}

fern_thread *fern_self(void) { return thread_current(); }

bool fern_is_green(void) { return thread_current() != NULL; }

uint64_t fern_thread_id(const fern_thread *t)
{
    if (!t)
        t = thread_current();
    return t ? t->id : 0;
}

int fern_set_name(const char *name)
{
    fern_thread *self = thread_current();
    if (!name)
        return EINVAL;
    if (!self)
        return EPERM;
    name_copy(self, name);
    return 0;
}

const char *fern_thread_name(const fern_thread *t)
{
    if (!t)
        t = thread_current();
    return t ? t->name : "";
}

/* fern-hook under ThreadSanitizer (io/hookapi.h). A hooked call reaches
 * fern-hook through TSan's interceptor, and TSan's blocking interceptors
 * (usleep, poll, epoll_wait, ...) mark the calling fiber "in a blocking
 * call", which makes TSan ignore that fiber's atomics and nested
 * interceptors: the parking code would run blind (its lock acquisitions and
 * queue hand-offs unrecorded, and false races reported later). So for the
 * length of a hooked call the green thread runs on a second TSan fiber of
 * its own, which the scheduler switches to and from like the first
 * (switching establishes happens-before both ways). */
void fern__tsan_enter(void)
{
#ifdef FERN_TSAN
    fern_thread *t = thread_current();
    if (!t || t->tsan_hook_depth++)
        return;
    if (!t->tsan_other)
        t->tsan_other = __tsan_create_fiber(0);
    void *f = t->tsan_other;
    t->tsan_other = t->tsan_fiber;
    t->tsan_fiber = f;
    __tsan_switch_to_fiber(f, 0);
#endif
}

void fern__tsan_leave(void)
{
#ifdef FERN_TSAN
    fern_thread *t = thread_current();
    if (!t || --t->tsan_hook_depth)
        return;
    void *f = t->tsan_other;
    t->tsan_other = t->tsan_fiber;
    t->tsan_fiber = f;
    __tsan_switch_to_fiber(f, 0);
#endif
}

#if !ARCH_JUMP_RETURN
/* Where switch.S has no jump_return trampolines (arch.h: ARCH_JUMP_RETURN),
 * the public call is a plain call of its body. */
int fern_join(fern_thread *t, void **ret) { return fern_join_body(t, ret); }
#endif
