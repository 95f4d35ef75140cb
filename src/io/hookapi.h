/* SPDX-License-Identifier: MIT */
/*
 * What libfern lends to libfern-hook (hook/), and nothing else.
 *
 * Not part of fern's API: the names carry the `fern__` prefix, the header is
 * not installed, and both libraries are built and shipped together, so these
 * may change in any release. They are exported from libfern.so only because
 * libfern-hook is a separate library (fern.h says so).
 *
 * The waiting model: fern-hook makes its own system calls (raw, on
 * descriptors it switched to O_NONBLOCK itself) and comes here only to wait.
 * Edges are never lost through a tick snapshot: fern__io_snap registers the
 * fd with the poller (flags untouched) and reads the per-direction tick words
 * BEFORE the caller's system call or readiness check; fern__io_park queues
 * the caller on each fd (any number of waiters per fd) only if no edge has
 * ticked since, else it returns at once and the caller checks again.
 */
#ifndef FERN_HOOKAPI_H
#define FERN_HOOKAPI_H

#include <stdint.h>

#define FERN__API __attribute__((visibility("default")))

/* 1 if the caller runs on a green thread (not a worker's own context, not a
 * plain thread). */
FERN__API int fern__hook_green(void);

/* Wake every thread waiting on fd (fern_* calls and fern__io_park) with
 * EBADF and drop its registration: the fd is about to be closed or its
 * number has a new owner. A no-op before the runtime starts. */
FERN__API void fern__io_forget(int fd);

/* fern_close closes raw (base/sys.h), where fern-hook's close cannot see
 * it: when libfern-hook loads it sets this to its own bookkeeping for a
 * closing descriptor (its waiters woken with EBADF, its entry dropped, then
 * fern__io_forget), which fern_close calls in place of io_forget. NULL
 * without the hook. */
FERN__API extern void (*fern__hook_close)(int fd);

struct fern__pollent {
    int fd;
    int dirs;               /* FERN_READ | FERN_WRITE */
    uint32_t rtick, wtick;  /* filled in by fern__io_snap */
    int drained;            /* fern__io_snap: directions marked drained */
};

/* Register pe->fd if needed and take its tick snapshot. Returns 0, or an
 * errno value (EPERM: epoll refuses this fd, e.g. a regular file). Starts
 * the runtime if it is not running. */
FERN__API int fern__io_snap(struct fern__pollent *pe);

/* The short-transfer rule of fern's TCP calls (src/io/fdtab.c) for a snapped
 * entry with one direction in pe->dirs. fern__io_begin, right before the
 * system call: returns a token (0: not a TCP socket, nothing to do) and
 * moves pe's tick of that direction to the value it set, so a park after
 * an EAGAIN uses it. fern__io_short, after a result 0 < r < asked: marks
 * the direction drained unless an edge came since. A later fern__io_snap
 * that reports the direction in pe->drained means the call would only say
 * EAGAIN: the caller parks first (and makes the call once if its deadline
 * passes there). */
FERN__API uint32_t fern__io_begin(struct fern__pollent *pe);
FERN__API void fern__io_short(const struct fern__pollent *pe, uint32_t token);

/* Park the calling green thread until an edge on one of the n entries (fds
 * unique and ascending, each snapped), or the deadline (absolute,
 * fern_now_ns based; FERN_FOREVER). Returns 1: woken or an edge came since
 * the snapshot (check again); 0: deadline passed; -(i + 1): pe[i].fd was
 * closed (fern__io_forget) while waiting; FERN__PARK_NOMEM: no memory for
 * the waiters (only when n > 4). */
#define FERN__PARK_NOMEM INT32_MIN
/* fern__io_park's result when the thread is cancelled (fern_cancel): the
 * hooked call fails with ECANCELED. */
#define FERN__PARK_CANCELED (INT32_MIN + 1)
/* 1 if the calling green thread is cancelled and not shielded: a hooked
 * call that would wait fails with ECANCELED first. */
FERN__API int fern__cancel_due(void);
FERN__API int fern__io_park(const struct fern__pollent *pe, int n, int64_t deadline);

/* System call nr(a[0..5]), a file system call that may wait for the disk
 * (read, write, pread64, preadv2, fsync, openat, statx, unlinkat, ...),
 * made for the calling green thread without blocking its worker: io_uring
 * where the kernel allows it, else fern's blocking pool (src/io/file.c).
 * From a plain thread, the plain system call. Returns the kernel's value or
 * -errno. fern__file_nowait_hit counts a call the page cache served at once
 * (preadv2 with RWF_NOWAIT on the worker: fern_stats); fern__file_streak
 * counts a read of hook/file.c's page-cache streak (the plain call on the
 * worker), and 1 in `slow` says it held the worker too long and ended the
 * streak. */
FERN__API long fern__file_call(long nr, const long a[6]);
FERN__API void fern__file_nowait_hit(void);
FERN__API void fern__file_streak(int slow);
/* 1 if the kernel has preadv2/pwritev2 (probed once when the runtime
 * starts; 0 under qemu-user, which answers ENOSYS): without them a read or
 * write cannot be tried with RWF_NOWAIT first. */
FERN__API int fern__file_rwf(void);

/* ---- the lock families (hook/lock.h) ---- */

/* The calling kernel thread's worker, NULL on a plain thread: the one TLS
 * read that keeps a plain thread's pthread_mutex_lock within a branch of
 * libc's (an alias of sched/worker.c's fern_tls_worker_; initial-exec). A
 * worker may be running its own context rather than a green thread, so a
 * non-NULL value is followed by fern__hook_green(). */
FERN__API extern __thread void *fern__tls_worker __attribute__((tls_model("initial-exec")));

/* The parking lot (src/sync/lot.c has the protocol): park the caller, a
 * green or a plain thread, on addr if valid(addr, arg), run under the
 * lot's lock, says so, until fern__lot_unpark(addr) or the deadline
 * (absolute, fern_now_ns based; FERN_FOREVER). Returns FERN__LOT_WOKEN,
 * FERN__LOT_TIMEDOUT, or FERN__LOT_INVALID (valid said no; no wait).
 * `what` names the object for fern_dump. fern__lot_unpark wakes up to n
 * parties parked on addr, returns how many; call it after changing the
 * word the parties validate. fern__lot_nwait: parties inside
 * fern__lot_park (a waker that changed its word, then after a full fence
 * reads 0 here, has nobody to wake). fern__lot_queued: parties parked on
 * addr (tests). */
#define FERN__LOT_TIMEDOUT 0
#define FERN__LOT_WOKEN 1
#define FERN__LOT_INVALID 2
FERN__API int fern__lot_park(const void *addr, int (*valid)(const void *, void *), void *arg,
                             const char *what, int64_t deadline);
FERN__API int fern__lot_unpark(const void *addr, int n);
FERN__API int fern__lot_queued(const void *addr);
/* fern__lot_unpark with the choice the caller's, under the lot's lock
 * (sync/sync.h's lot_unpark_filter): fn(arg, SEE, token) for every party
 * parked on addr, oldest first, token the arg it parked with; fn(arg, PICK,
 * token) nonzero to wake it, fn(arg, TAKEN, token) once it is claimed (it
 * will return FERN__LOT_WOKEN); fn(arg, DONE, NULL) last, nonzero for
 * another PICK pass. Returns how many it woke. */
#define FERN__LOT_SEE 0
#define FERN__LOT_PICK 1
#define FERN__LOT_TAKEN 2
#define FERN__LOT_DONE 3
FERN__API int fern__lot_unpark_filter(const void *addr, int (*fn)(void *, int, void *), void *arg);
FERN__API extern uint32_t fern__lot_nwait;

/* The calling green thread's owner id for the pthread objects of
 * hook/lock.h: never 0, never a kernel thread id (those are below 2^22),
 * the same for the thread's whole life. 0 on a plain thread. */
FERN__API int fern__lock_owner_id(void);

/* A call failed with EFAULT: restore the hibernated green stacks its
 * arguments (a[0..5] of system call nr; the buffers of read/write-like calls,
 * readv/writev's iovecs, sendmsg/recvmsg's message) point into. Returns 1
 * if any was restored (the call may be retried), 0 if none (the EFAULT is
 * real). */
FERN__API int fern__hib_retry(long nr, const long *a);

/* Under ThreadSanitizer (a libfern built with it), bracket the part of a
 * hooked call that may park: the green thread runs it on a second TSan fiber
 * (thread/thread.c says why). Nesting is counted. No-ops otherwise and on plain
 * threads. */
FERN__API void fern__tsan_enter(void);
FERN__API void fern__tsan_leave(void);

#endif
