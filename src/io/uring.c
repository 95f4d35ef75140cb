/* SPDX-License-Identifier: MIT */
/*
 * io_uring rings: how a green thread's file system call runs in the kernel
 * without blocking its worker (file.c decides which calls come here).
 *
 * One ring per worker index (a worker uses ring `index % URING_MAX`, so the
 * workers of one index in different clusters share one, under its lock),
 * made on the first call from a worker of that index, kept until
 * fern_shutdown. No SQPOLL (no kernel thread spins for us); the ring's io-wq
 * (the kernel threads that run what cannot complete asynchronously: opens,
 * stats, writes a file system cannot do without blocking) is capped at
 * URING_IOWQ_MAX per kind. The kernel keeps one io-wq per submitting
 * thread, not per ring, so the cap is per worker (16 x 2 = 32 "iou-wrk"
 * threads seen with every read forced there on 2 workers).
 *
 * Why 16 and not one per green thread that may wait: a buffered read that
 * misses the page cache never reaches io-wq on a file system with
 * asynchronous buffered reads (ext4, xfs, btrfs; Linux 5.9+): the kernel
 * starts the disk read, queues the request on the page's wait queue and
 * finishes it as task work on the submitting worker, so 64 green readers
 * keep 64 reads at the disk (measured: /sys/block/vda/inflight up to 64,
 * no iou-wrk thread, on 6.18 and ext4, as for 64 pthreads). io-wq takes
 * opens, stats, fsyncs and punted writes, where a larger pool of kernel
 * threads on a small machine buys contention: with every read forced to
 * io-wq (IOSQE_ASYNC), a cap of 64 gave 27-28k reads/s against 16's
 * 35-38k (2 CPUs, loaded). The system calls go in raw (io_uring_setup,
 * io_uring_enter, io_uring_register and the ring's mmap): no liburing, so
 * libfern keeps no dependency a cross build or a static link would have to
 * carry.
 *
 * Waiting. The caller parks (parker_wait) and its SQE is written and
 * submitted by the after action, once its registers are saved (invariant 1,
 * docs/design.md: the completion may be reaped by another worker at once).
 * Each ring has an eventfd registered for its completions and sitting in
 * the poller's epoll set (edge-triggered; the count is never read, every
 * completion makes a new edge); an op in flight counts in IO.waiters, so
 * the idle workers' poll and the busy workers' every-64-ticks poll run while
 * any is outstanding (poller.c). The poll that sees the eventfd's edge
 * reaps the whole completion queue under the ring's lock and wakes each
 * op's thread after dropping it. A completion posted after a reap ends
 * signals the eventfd again: no completion is left unreaped.
 *
 * Probe. io_init makes ring 0 once (unless $FERN_IO_URING=0): if the kernel
 * refuses (ENOSYS: too old or a seccomp filter; EPERM:
 * kernel.io_uring_disabled or a container's filter; ENOMEM: locked-memory
 * limit), every call goes to the blocking pool and fern_stats / fern_dump
 * say so and why. IORING_REGISTER_PROBE tells which operations the kernel
 * has; a call whose operation it lacks goes to the pool too.
 *
 * Memory ordering: the rings' head and tail words are shared with the
 * kernel: the SQ tail is published with a release store after the SQE and
 * its array slot are written, the CQ tail read with acquire before the CQEs,
 * the CQ head given back with release. Everything else of a ring is under
 * its spin lock (ring creation under U.mu). U.mode and the ring pointers
 * are published with release and read with acquire.
 */
#include "io.h"

#include <linux/io_uring.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define URING_MAX       64
#define URING_ENTRIES   64
#define URING_IOWQ_MAX  16u
#define EV_RING_BASE    (UINT64_MAX - 1 - URING_MAX) /* epoll tag of ring i: base + i */

struct uring {
    uint32_t lock;
    int fd, evfd;
    uint32_t *sq_head, *sq_tail, sq_mask, sq_entries, *sq_array;
    uint32_t *cq_head, *cq_tail, cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    void *sq_map, *cq_map;
    size_t sq_len, cq_len, sqe_len;
};

static struct {
    struct plock mu;
    struct uring *r[URING_MAX];
    int mode;                    /* FERN_FILE_IO_* */
    int why;                     /* the probe's errno when mode is the pool */
    uint8_t ops[IORING_OP_LAST]; /* supported operations */
    uint64_t n_uring, n_pool, n_nowait;
    uint64_t n_streak, n_streak_ends; /* hook/file.c's page-cache streak */
} U = {PLOCK_INIT, {0}, FERN_FILE_IO_POOL, 0, {0}, 0, 0, 0, 0, 0};

static void ring_free(struct uring *r)
{
    if (r->sqes && r->sqes != MAP_FAILED)
        munmap(r->sqes, r->sqe_len);
    if (r->cq_map && r->cq_map != MAP_FAILED && r->cq_map != r->sq_map)
        munmap(r->cq_map, r->cq_len);
    if (r->sq_map && r->sq_map != MAP_FAILED)
        munmap(r->sq_map, r->sq_len);
    if (r->evfd >= 0)
        sys_close(r->evfd);
    if (r->fd >= 0)
        sys_close(r->fd);
    free(r);
}

/* A new ring, its eventfd in the poller's set under tag `tag`; NULL with
 * errno. */
static struct uring *ring_new(uint64_t tag)
{
    struct uring *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->fd = r->evfd = -1;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_CLAMP;
    long fd = syscall(SYS_io_uring_setup, URING_ENTRIES, &p);
    if (fd < 0)
        goto fail;
    r->fd = (int)fd;
    r->sq_len = p.sq_off.array + p.sq_entries * sizeof(uint32_t);
    r->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        if (r->cq_len > r->sq_len)
            r->sq_len = r->cq_len;
        r->cq_len = r->sq_len;
    }
    r->sq_map = mmap(NULL, r->sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                     IORING_OFF_SQ_RING);
    if (r->sq_map == MAP_FAILED)
        goto fail;
    r->cq_map = p.features & IORING_FEAT_SINGLE_MMAP
                    ? r->sq_map
                    : mmap(NULL, r->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                           r->fd, IORING_OFF_CQ_RING);
    if (r->cq_map == MAP_FAILED)
        goto fail;
    r->sqe_len = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = mmap(NULL, r->sqe_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                   IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED)
        goto fail;
    char *sq = r->sq_map, *cq = r->cq_map;
    r->sq_head = (uint32_t *)(sq + p.sq_off.head);
    r->sq_tail = (uint32_t *)(sq + p.sq_off.tail);
    r->sq_mask = *(uint32_t *)(sq + p.sq_off.ring_mask);
    r->sq_entries = p.sq_entries;
    r->sq_array = (uint32_t *)(sq + p.sq_off.array);
    r->cq_head = (uint32_t *)(cq + p.cq_off.head);
    r->cq_tail = (uint32_t *)(cq + p.cq_off.tail);
    r->cq_mask = *(uint32_t *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    /* Cap the kernel's helper threads for this ring (5.15 and later; an
     * older kernel keeps its own limit). */
    unsigned maxw[2] = {URING_IOWQ_MAX, URING_IOWQ_MAX};
    syscall(SYS_io_uring_register, r->fd, IORING_REGISTER_IOWQ_MAX_WORKERS, maxw, 2);
    r->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->evfd < 0 ||
        syscall(SYS_io_uring_register, r->fd, IORING_REGISTER_EVENTFD, &r->evfd, 1) < 0)
        goto fail;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = tag};
    if (epoll_ctl(IO.epfd, EPOLL_CTL_ADD, r->evfd, &ev))
        goto fail;
    return r;
fail:;
    int e = errno;
    ring_free(r);
    errno = e;
    return NULL;
}

/* The operations this kernel has, into U.ops. */
static void ring_probe_ops(struct uring *r)
{
    size_t sz = sizeof(struct io_uring_probe) + 256 * sizeof(struct io_uring_probe_op);
    struct io_uring_probe *pr = calloc(1, sz);
    if (!pr)
        return;
    if (syscall(SYS_io_uring_register, r->fd, IORING_REGISTER_PROBE, pr, 256) == 0) {
        for (unsigned i = 0; i < pr->ops_len && i < 256; i++) {
            unsigned op = pr->ops[i].op;
            if (op < IORING_OP_LAST && (pr->ops[i].flags & IO_URING_OP_SUPPORTED))
                U.ops[op] = 1;
        }
    }
    free(pr);
}

void uring_init(void)
{
    plock_lock(&U.mu);
    U.mode = FERN_FILE_IO_POOL;
    U.why = 0;
    memset(U.ops, 0, sizeof U.ops);
    STORE_RELAXED(&U.n_uring, 0);
    STORE_RELAXED(&U.n_pool, 0);
    STORE_RELAXED(&U.n_nowait, 0);
    STORE_RELAXED(&U.n_streak, 0);
    STORE_RELAXED(&U.n_streak_ends, 0);
    if (!config.io_uring) {
        U.why = -1; /* turned off by $FERN_IO_URING=0 */
    } else {
        struct uring *r = ring_new(EV_RING_BASE);
        if (!r) {
            U.why = errno;
        } else {
            ring_probe_ops(r);
            STORE(&U.r[0], r);
            STORE(&U.mode, FERN_FILE_IO_URING);
        }
    }
    plock_unlock(&U.mu);
}

void uring_fini(void)
{
    plock_lock(&U.mu);
    for (int i = 0; i < URING_MAX; i++) {
        if (U.r[i]) {
            ring_free(U.r[i]);
            STORE(&U.r[i], NULL);
        }
    }
    STORE(&U.mode, FERN_FILE_IO_POOL);
    plock_unlock(&U.mu);
}

bool uring_has(unsigned op) { return LOAD(&U.mode) == FERN_FILE_IO_URING && op < IORING_OP_LAST && U.ops[op]; }

/* The ring of worker index i, made on first use; NULL if it cannot be. */
static struct uring *ring_of(unsigned i)
{
    i %= URING_MAX;
    struct uring *r = LOAD(&U.r[i]);
    if (likely(r))
        return r;
    plock_lock(&U.mu);
    r = U.r[i];
    if (!r && U.mode == FERN_FILE_IO_URING) {
        r = ring_new(EV_RING_BASE + i);
        if (r)
            STORE(&U.r[i], r);
    }
    plock_unlock(&U.mu);
    return r;
}

bool uring_tag(uint64_t tag) { return tag >= EV_RING_BASE && tag < EV_RING_BASE + URING_MAX; }

/* Take every completion of r off its queue (r->lock held): the ops, chained. */
static struct uop *reap_locked(struct uring *r)
{
    struct uop *chain = NULL, **tail = &chain;
    uint32_t head = LOAD_RELAXED(r->cq_head);
    uint32_t end = __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE);
    for (; head != end; head++) {
        struct io_uring_cqe *c = &r->cqes[head & r->cq_mask];
        struct uop *op = (struct uop *)(uintptr_t)c->user_data;
        op->res = c->res;
        op->next = NULL;
        *tail = op;
        tail = &op->next;
    }
    __atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
    return chain;
}

/* Wake the ops of a chain, after the ring's lock is dropped: a woken
 * thread's op (on its stack) is gone. */
static void wake_chain(struct uop *chain)
{
    while (chain) {
        struct uop *op = chain;
        chain = op->next;
        waiter_wake(&op->wt);
    }
}

/* The poller saw ring (tag)'s eventfd: reap every completion. */
void uring_reap(uint64_t tag)
{
    struct uring *r = LOAD(&U.r[tag - EV_RING_BASE]);
    if (!r)
        return;
    spin_lock(&r->lock);
    struct uop *chain = reap_locked(r);
    spin_unlock(&r->lock);
    wake_chain(chain);
}

/* The after action of uring_run: the thread is parked, its registers
 * saved; write its SQE, submit it. A ring that cannot take it completes
 * the op at once with the error (the caller then runs it on the pool). */
static void uring_submit(void *arg)
{
    struct uop *op = arg;
    struct uring *r = ring_of(worker_self()->index);
    long e = -ENOMEM;
    if (r) {
        spin_lock(&r->lock);
        uint32_t tail = LOAD_RELAXED(r->sq_tail);
        if (tail - __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE) < r->sq_entries) {
            uint32_t slot = tail & r->sq_mask;
            r->sqes[slot] = op->sqe;
            r->sq_array[slot] = slot;
            __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
            e = syscall(SYS_io_uring_enter, r->fd, 1, 0, 0, NULL, 0);
            if (e < 0)
                e = -errno;
            /* Consumed (the head moved past it): its CQE will come, even
             * if the call reported an error for the rest. */
            if (e == 1 || __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE) != tail) {
                /* The completion wakes it. It may be posted already: a read
                 * the page cache served inline, and the completions of
                 * earlier reads, which the kernel finishes as task work on
                 * this thread when it enters: reaped here, they skip the
                 * eventfd's round through the poller (which then finds
                 * the queue empty). */
                struct uop *chain = reap_locked(r);
                spin_unlock(&r->lock);
                wake_chain(chain);
                return;
            }
            /* Not taken: withdraw the SQE (the kernel consumed nothing). */
            __atomic_store_n(r->sq_tail, tail, __ATOMIC_RELEASE);
            if (e >= 0)
                e = -EAGAIN;
        } else {
            e = -EBUSY;
        }
        spin_unlock(&r->lock);
    }
    op->res = (int32_t)e;
    op->refused = true;
    waiter_wake(&op->wt);
}

int uring_run(struct uop *op)
{
    waiter_init(&op->wt);
    op->refused = false;
    op->sqe.user_data = (uint64_t)(uintptr_t)op;
    fern_thread *self = thread_current();
    STORE_RELAXED(&self->wait_what, "file (io_uring)");
    /* Counted as a waiter: the workers poll while it is in flight (this
     * worker too, when it runs out of threads and idles). */
    ADD_RELAXED(&IO.waiters, 1);
    /* The kernel reads and writes the buffers (often on this stack) while
     * the op is in flight, and it cannot restore a hibernated stack: never
     * hibernated meanwhile (sched/hibernate.c), as in fern_blocking. */
    __atomic_fetch_or(&self->hib_no, HN_KERNEL, __ATOMIC_RELAXED);
    parker_wait(op->wt.p, uring_submit, op, FERN_FOREVER);
    __atomic_fetch_and(&self->hib_no, (uint8_t)~HN_KERNEL, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&IO.waiters, 1, __ATOMIC_RELAXED);
    STORE_RELAXED(&self->wait_what, NULL);
    if (op->refused)
        return -1;
    ADD_RELAXED(&U.n_uring, 1);
    return 0;
}

void uring_count_pool(void) { ADD_RELAXED(&U.n_pool, 1); }
void uring_count_nowait(void) { ADD_RELAXED(&U.n_nowait, 1); }
void uring_count_streak(int slow)
{
    ADD_RELAXED(&U.n_streak, 1);
    if (slow)
        ADD_RELAXED(&U.n_streak_ends, 1);
}

void io_file_stats(struct fern_stats *s)
{
    s->file_io = LOAD(&U.mode);
    s->file_uring_ops = LOAD_RELAXED(&U.n_uring);
    s->file_pool_ops = LOAD_RELAXED(&U.n_pool);
    /* A streak read was served on the worker too: one of the hits. */
    s->file_streak_reads = LOAD_RELAXED(&U.n_streak);
    s->file_streak_ends = LOAD_RELAXED(&U.n_streak_ends);
    s->file_nowait_hits = LOAD_RELAXED(&U.n_nowait) + s->file_streak_reads;
}

void io_file_dump(FILE *f)
{
    plock_lock(&U.mu);
    unsigned rings = 0;
    for (int i = 0; i < URING_MAX; i++)
        rings += U.r[i] != NULL;
    if (U.mode == FERN_FILE_IO_URING)
        fprintf(f, "fern: file I/O: io_uring (%u rings, io-wq capped at %u per worker)\n", rings,
                URING_IOWQ_MAX);
    else if (U.why == -1)
        fprintf(f, "fern: file I/O: blocking pool ($FERN_IO_URING=0)\n");
    else
        fprintf(f, "fern: file I/O: blocking pool (io_uring_setup: %s)\n", strerror(U.why));
    plock_unlock(&U.mu);
}
