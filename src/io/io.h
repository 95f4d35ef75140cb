/* SPDX-License-Identifier: MIT */
/*
 * The I/O layer's private interface, shared by its files:
 *  - fdtab.c: the fd-indexed table of entries, registration, the
 *    per-direction state words and why no edge is lost (its header comment);
 *  - poller.c: the process's epoll set and how the scheduler polls it;
 *  - io.c: the fern_* fd calls that park;
 *  - iohook.c: the entry points lent to fern-hook (hookapi.h);
 *  - select.c: fern_select (channels, tickers, descriptors, deadlines);
 *  - blocking.c: fern_blocking's helper kernel threads;
 *  - uring.c: the io_uring rings, one per worker index;
 *  - file.c: file system calls off the worker (fern_pread, fern-hook's
 *    file calls): the page cache first, then io_uring or the pool.
 * Nothing here is used outside those files but the last section, which is
 * for runtime/ and debug/; what the scheduler's idle loop needs from the
 * poller is declared in sched/sched.h (poller.c implements it).
 */
#ifndef FERN_IO_H
#define FERN_IO_H

#include "sync/sync.h"
#include "base/sys.h"

#include <linux/io_uring.h>
#include <stdio.h>
#include <sys/epoll.h>

#define FD_CHUNK 1024u

struct fdent {
    uint32_t lock;
    uint8_t registered;
    uint8_t pollable;        /* epoll accepted it (regular files are not pollable) */
    uint8_t tcp;             /* a TCP stream socket: a short transfer drains */
    uint8_t sock;            /* any socket: writes go through send(MSG_NOSIGNAL) */
    uint32_t gen;
    uint32_t rst, wst;       /* per-direction state words (fdtab.c) */
    struct parker *rw, *ww;  /* the waiting reader's and writer's parkers (io.c:
                              * no waiter record on the parked stack) */
    fern_waitq pq;           /* fern-hook's pollers (any number; fern__io_park) */
    int64_t rdl, wdl;        /* per-fd deadlines */
};

/* State word bits; the tick count sits above them. */
#define ST_READY   1u /* an edge found no waiter */
#define ST_DRAINED 2u /* the last transfer was short, nothing since */
#define ST_FINAL   4u /* hang-up, error or urgent data seen: never skip */
#define ST_FLAGS   7u
#define ST_TICK    8u

/* Before a qualifying system call: tick, clear READY and DRAINED. Returns the
 * new word for st_short. Sequentially consistent: the call must not be
 * ordered before it. */
static inline uint32_t st_begin(uint32_t *st)
{
    uint32_t w = LOAD_RELAXED(st), nw;
    do
        nw = ((w & ~ST_FLAGS) + ST_TICK) | (w & ST_FINAL);
    while (!__atomic_compare_exchange_n(st, &w, nw, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return nw;
}

/* After a short result of the call that st_begin returned m for: DRAINED,
 * unless anything ticked since or FINAL is set. */
static inline void st_short(uint32_t *st, uint32_t m)
{
    if (!(m & ST_FINAL))
        __atomic_compare_exchange_n(st, &m, m | ST_DRAINED, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
}

/* Tick, clear `clear`, set `set` (an edge; a reset). */
static inline void st_update(uint32_t *st, uint32_t clear, uint32_t set)
{
    uint32_t w = LOAD_RELAXED(st), nw;
    do
        nw = (((w & ~ST_FLAGS) + ST_TICK) | (w & ST_FLAGS & ~clear)) | set;
    while (!__atomic_compare_exchange_n(st, &w, nw, true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
}

/* The fd table (fdtab.c). chunks is NULL until the runtime has booted. */
struct fdtab {
    uint32_t nchunks;
    struct fdent **chunks;
};
extern struct fdtab FDT;

struct fdent *fdtab_chunk(struct fdent **slot, int fd);

/* The entry of fd, its chunk allocated on first use; NULL if fd is out of
 * range, the runtime is not booted or memory ran out. */
static inline struct fdent *fdent_get(int fd)
{
    struct fdent **chunks = LOAD(&FDT.chunks);
    if (fd < 0 || !chunks || (uint32_t)fd / FD_CHUNK >= FDT.nchunks)
        return NULL;
    struct fdent **slot = &chunks[(uint32_t)fd / FD_CHUNK];
    struct fdent *c = LOAD(slot);
    if (unlikely(!c))
        return fdtab_chunk(slot, fd);
    return &c[(uint32_t)fd % FD_CHUNK];
}

int fdtab_init(void);
void fdtab_fini(void);
struct fdent *io_register(int fd, bool nonblock);
void io_forget(int fd);
struct waiter *pq_claim(struct fdent *e, int dirs);

/* The poller (poller.c). waiters counts threads parked on fds (io_active). */
struct poller {
    int epfd, evfd;
    uint32_t waiters;        /* threads parked on fds */
    uint32_t poll_owner;     /* a worker sleeps in epoll_wait */
    uint32_t wake_pending;   /* the eventfd holds an unread wake */
    uint64_t ctls;           /* epoll_ctl calls on user fds (fern_stats) */
};
extern struct poller IO;

/* epoll_ctl on IO.epfd, counted for fern_stats. */
int poller_ctl(int op, int fd, struct epoll_event *ev);

static inline void unlock_spin_io(void *l) { spin_unlock(l); }

/* One file system call on io_uring (uring.c): the caller's SQE (user_data
 * is set by uring_run), its result, and the chain uring_reap wakes. */
struct uop {
    struct waiter wt;
    struct io_uring_sqe sqe;
    int32_t res;         /* the CQE's result: a value or -errno */
    bool refused;        /* the ring did not take it */
    struct uop *next;
};
void uring_init(void);
void uring_fini(void);
/* io_uring is in use and the kernel has op. */
bool uring_has(unsigned op);
/* Park the calling green thread until op completes: 0 (op->res is the
 * result), or -1 if no ring took it (the caller uses the pool). */
int uring_run(struct uop *op);
/* The poller's view: is an epoll tag a ring's eventfd, and reap it. */
bool uring_tag(uint64_t tag);
void uring_reap(uint64_t tag);
void uring_count_pool(void);
void uring_count_nowait(void);
void uring_count_streak(int slow);
/* System call nr(a[0..5]) off the worker (file.c): the value or -errno. */
long io_file_call(long nr, const long *a);
/* file.c's probe at io_init: does the kernel have preadv2/pwritev2
 * (RWF_NOWAIT)? io_file_rwf says what it found. */
void io_file_probe(void);
bool io_file_rwf(void);

/* ---- for runtime/ and debug/ ---- */
int io_init(void);
void io_fini(void);
uint64_t io_poller_ctls(void);
void io_file_stats(struct fern_stats *s);
void io_file_dump(FILE *f);
void blocking_fini(void);

#endif
