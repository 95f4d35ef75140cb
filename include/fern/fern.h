/* SPDX-License-Identifier: MIT */
/*
 * fern — green threads for C and C++ on Linux.
 *
 * One header, C11, usable from C++. Conventions:
 *  - Runtime calls return 0 on success or a positive errno value (as pthreads).
 *  - Times are int64_t nanoseconds on CLOCK_MONOTONIC. A deadline is absolute
 *    (fern_now_ns() + d); FERN_FOREVER waits without limit.
 *  - Every blocking call works from a green thread (it parks the green thread,
 *    the worker runs others) and from a plain OS thread (it blocks that thread).
 *  - errno is kept per green thread across parks and migrations; C
 *    thread_local variables belong to the worker (kernel thread) and may change
 *    under a green thread whenever it blocks or yields. Use fern_key_* instead.
 *    The same holds for any thread-local address the compiler keeps in a
 *    register: glibc declares errno's accessor `const`, so a function that
 *    reads errno, then blocks, then reads errno again may read the old
 *    worker's errno. Read errno right after the call that set it.
 *  - Objects (fern_mutex, fern_cond) are valid when zero-initialised.
 */
#ifndef FERN_FERN_H
#define FERN_FERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERN_VERSION_MAJOR 0
#define FERN_VERSION_MINOR 1

/* Wait without a deadline. */
#define FERN_FOREVER INT64_MAX

/* Stack sizes accepted by fern_attr.stack_size / fern_config.stack_size,
 * rounded up to a power of two (docs/stacks.md). 0 means the default. */
#define FERN_STACK_MIN ((size_t)16 * 1024)
#define FERN_STACK_MAX ((size_t)1024 * 1024 * 1024)
#define FERN_STACK_DEFAULT ((size_t)128 * 1024)

/* Largest number of workers in one cluster. */
#define FERN_WORKERS_MAX 256u

/* Number of green-thread-local keys that can exist at once. */
#define FERN_KEYS_MAX 128u

typedef void *(*fern_fn)(void *arg);
typedef struct fern_thread fern_thread;
typedef struct fern_cluster fern_cluster;

/* ------------------------------------------------------------------------ */
/* Runtime                                                                   */
/* ------------------------------------------------------------------------ */

/* The settings fern_init takes; a field left at 0 takes its environment
 * variable, else the default. Every setting, with its environment variable,
 * is in docs/configuration.md. */
typedef struct fern_config {
    unsigned workers;  /* workers of the default cluster; 0 = $FERN_WORKERS or one per CPU */
    size_t stack_size; /* default stack size; 0 = $FERN_STACK_SIZE or FERN_STACK_DEFAULT */
    long preempt_us;   /* time slice in microseconds (docs/preemption.md): a
                        * green thread that runs longer while others wait is
                        * preempted; a worker stuck twice as long gets a
                        * compensation worker. 0 = $FERN_PREEMPT_US or
                        * FERN_PREEMPT_DEFAULT_US; FERN_PREEMPT_OFF (or
                        * $FERN_PREEMPT=0) = no preemption (the slice is then
                        * still the unit for compensation). Otherwise
                        * [FERN_PREEMPT_MIN_US, FERN_PREEMPT_MAX_US]. */
    const char *preempt_libs; /* shared libraries whose code may be preempted
                        * besides the executable's (docs/preemption.md): a
                        * colon-separated list of file names as loaded
                        * ("libfoo.so.1", or "libfoo" for any libfoo.so*) or
                        * absolute paths; copied by fern_init. NULL =
                        * $FERN_PREEMPT_LIBS, "" = none. libc, the loader,
                        * libstdc++, libgcc_s, the sanitizer runtimes and
                        * fern's own libraries cannot be named. */
    long shutdown_grace_ms; /* how long fern_shutdown lets cancelled green
                        * threads end before it destroys them: 0 =
                        * $FERN_SHUTDOWN_GRACE_MS or FERN_SHUTDOWN_GRACE_DEFAULT_MS;
                        * FERN_SHUTDOWN_GRACE_NONE (-1) = destroy at once;
                        * otherwise 1 to FERN_SHUTDOWN_GRACE_MAX_MS. */
    long hibernate_us; /* stack hibernation (docs/stacks.md, "Hibernation"):
                        * a green thread parked this many microseconds has
                        * its stack copied out and its stack pages returned
                        * to the kernel until it runs again or another
                        * thread touches them. 0 = $FERN_HIBERNATE (off by
                        * default) and $FERN_HIBERNATE_US
                        * (FERN_HIBERNATE_DEFAULT_US); FERN_HIBERNATE_OFF =
                        * off; otherwise on, [1, FERN_HIBERNATE_MAX_US]. */
} fern_config;

#define FERN_HIBERNATE_DEFAULT_US 1000000L
#define FERN_HIBERNATE_MAX_US 3600000000L
#define FERN_HIBERNATE_OFF (-1L)

#define FERN_PREEMPT_DEFAULT_US 10000L
#define FERN_PREEMPT_MIN_US 100L
#define FERN_PREEMPT_MAX_US 10000000L
#define FERN_PREEMPT_OFF (-1L)
#define FERN_SHUTDOWN_GRACE_DEFAULT_MS 1000L
#define FERN_SHUTDOWN_GRACE_MAX_MS 3600000L
#define FERN_SHUTDOWN_GRACE_NONE (-1L)

/* Start the runtime: the default cluster and its workers. Optional: fern_run,
 * fern_spawn and the other calls listed in docs/configuration.md ("Implicit
 * start") start it with the defaults when needed; call fern_init before any
 * of them to choose the configuration.
 * Returns 0; EINVAL if cfg asks for more than FERN_WORKERS_MAX workers, a
 * stack size outside [FERN_STACK_MIN, FERN_STACK_MAX] or a preempt_us that is
 * neither 0, FERN_PREEMPT_OFF nor in [FERN_PREEMPT_MIN_US,
 * FERN_PREEMPT_MAX_US], a preempt_libs list that is not valid, a hibernate_us that is neither 0,
 * FERN_HIBERNATE_OFF nor in [1, FERN_HIBERNATE_MAX_US] (or hibernation asked
 * for in a build or on an architecture that cannot hibernate: see
 * docs/stacks.md), or if a FERN_*
 * environment variable holds a value that is not accepted (one line on stderr
 * names the setting, the value and what is accepted); EBUSY if the runtime
 * is already running; EAGAIN/ENOMEM if workers or memory could not be had;
 * ENOTSUP if the process runs with a CET shadow stack (forced on by glibc
 * tunables: fern's context switch is incompatible with it). */
int fern_init(const fern_config *cfg);

/* Run fn(arg) as a green thread on the default cluster (starting the runtime
 * if needed) and wait for it; *ret (if not NULL) receives its result.
 * Returns 0, or an error of fern_init / fern_spawn; EINVAL if fn is NULL. */
int fern_run(fern_fn fn, void *arg, void **ret);

/* Stop the runtime; it never waits for ever (docs/cancellation.md). Every
 * green thread that has not finished is cancelled (fern_cancel) and given
 * the grace period (fern_config.shutdown_grace_ms) to end; then every
 * cluster's workers are stopped and joined and all memory is released.
 * Threads still there after the grace period, parked or runnable (spinners,
 * yielders, threads migrating between clusters), are destroyed without
 * running again (their key destructors do not run); one line on stderr
 * says how many, then one per thread (id, name, what it waited in; the
 * first 20). A thread that never leaves the CPU and cannot be preempted
 * (preemption off) cannot be destroyed: its worker is left running (said on
 * stderr) and the runtime's memory is not released, and fern_shutdown
 * returns about a second after the grace period all the same. Call it from
 * a plain thread. Returns 0; EPERM if called from a green thread; EINVAL if
 * the runtime is not running. The runtime can be started again afterwards. */
int fern_shutdown(void);

/* Monotonic clock in nanoseconds. */
int64_t fern_now_ns(void);

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */
/* ------------------------------------------------------------------------ */

/* Options of one new green thread, given to fern_spawn; a zeroed fern_attr,
 * like attr NULL, asks for every default. */
typedef struct fern_attr {
    size_t stack_size;     /* stack size in bytes; 0 = the runtime default */
    const char *name;      /* the thread's name, copied (first 31 bytes); NULL = no name */
    fern_cluster *cluster; /* where it runs; NULL = the current cluster, or the default one */
    bool detached;         /* true: resources freed at exit, cannot be joined */
    bool no_hibernate;     /* true: its stack is never hibernated (docs/stacks.md):
                            * for a thread whose stack memory other threads
                            * pass to system calls while it is parked */
} fern_attr;

/* Create a green thread running fn(arg). Returning from fn ends the thread
 * with that value as its result. *t receives the handle (may be NULL only
 * with attr->detached). The stack is bound when the thread first runs.
 * Returns 0; EINVAL if fn is NULL, t is NULL for a joinable thread, the stack
 * size is outside [FERN_STACK_MIN, FERN_STACK_MAX] or the cluster is being
 * destroyed; EAGAIN if stacks or descriptors cannot be had (memory or
 * mappings exhausted), or, in a ThreadSanitizer build, if
 * FERN_TSAN_THREADS_MAX green threads are live already (spawned and not yet
 * joined or, if detached, finished; one line on stderr says so the first
 * time); or an error of fern_init when it starts the runtime. */
int fern_spawn(fern_thread **t, const fern_attr *attr, fern_fn fn, void *arg);

/* ThreadSanitizer counts each live green thread against its limit of 8,128
 * threads (OS threads included) and aborts the process past it; a
 * ThreadSanitizer build of fern refuses spawns beyond this many instead. */
#define FERN_TSAN_THREADS_MAX 7000

/* Spawn a detached thread with default attributes. Same errors as fern_spawn. */
int fern_go(fern_fn fn, void *arg);

/* Wait for t to finish, then release it; *ret (if not NULL) receives its
 * result. Works from green and plain threads. Returns 0; EINVAL if t is NULL,
 * detached, already joined, or being joined by someone else; EDEADLK if t is
 * the calling thread. Joining a handle after it was joined and reused by a
 * new thread cannot be detected (as with pthreads). A cancellation point:
 * ECANCELED if the calling green thread is cancelled while t runs (t stays
 * joinable). */
int fern_join(fern_thread *t, void **ret);

/* Make t release its resources at exit instead of waiting for a join.
 * Returns 0; EINVAL if t is NULL, already detached or already joined. */
int fern_detach(fern_thread *t);

/* Let the other runnable threads of this worker run; the caller goes behind
 * them. Outside a green thread it calls sched_yield(2). */
void fern_yield(void);

/* The calling green thread, or NULL from a plain thread. */
fern_thread *fern_self(void);

/* True when called from a green thread. */
bool fern_is_green(void);

/* A thread's id: unique, > 0, never reused in the life of the process.
 * fern_thread_id(NULL) is the id of the calling green thread, 0 from a plain
 * thread. */
uint64_t fern_thread_id(const fern_thread *t);

/* Name the calling green thread (first 31 bytes copied).
 * Returns 0; EINVAL if name is NULL; EPERM from a plain thread. */
int fern_set_name(const char *name);

/* A thread's name ("" if none); t == NULL means the calling green thread.
 * The pointer is valid while the thread is. Returns "" from a plain thread. */
const char *fern_thread_name(const fern_thread *t);

/* End the calling green thread with result ret, as if fn had returned it:
 * key destructors run, joiners wake. From a plain thread it returns EPERM. */
int fern_exit(void *ret);

/* Sleep for ns nanoseconds (ns <= 0 returns at once) / until the deadline.
 * Cancellation points (fern_cancel). Return 0; EINVAL if the deadline is
 * negative; ECANCELED if the calling green thread is cancelled (then at
 * once, or as soon as a cancel comes while it sleeps). */
int fern_sleep_ns(int64_t ns);
int fern_sleep_until(int64_t deadline_ns);

/* ------------------------------------------------------------------------ */
/* Cancellation                                                              */
/* ------------------------------------------------------------------------ */

/* Ask green thread t to stop (docs/cancellation.md). The request is sticky
 * and nothing is unwound: the cancellation point t waits in, if any, is
 * woken at once and fails, and so does every cancellation point t reaches
 * afterwards when it would have to wait; t then cleans up and returns as
 * it sees fit. A cancellation point fails with ECANCELED as its error
 * value (fern_sleep_ns, fern_sleep_until, fern_join, fern_cond_wait and
 * fern_cond_timedwait, which take the mutex back first, fern_sem_wait and
 * fern_sem_timedwait, fern_wg_wait and fern_wg_timedwait, the blocking
 * channel calls and fern_select, which returns -ECANCELED, fern_group_wait)
 * or with -1 and errno ECANCELED (fern_read, fern_write and the other
 * descriptor calls that wait, fern_blocking and fern_pread/fern_pwrite
 * before their job starts, and, through fern-hook, read, recv, send,
 * accept, connect, poll, select, epoll_wait and the sleeps). A call that
 * can complete without waiting completes. Locking a mutex or an rwlock,
 * fern_barrier_wait and fern_once are not cancellation points. A cancel
 * affects t only; use a group (fern_group_cancel) for threads t started.
 * Plain threads have no handle and cannot be cancelled. Cancelling a
 * thread twice, or one that has ended but is not yet joined, does nothing
 * more. Works from green and plain threads. Returns 0; EINVAL if t is
 * NULL; ESRCH if t's descriptor is free (it was joined, or detached and
 * ended; a handle reused by a new thread cannot be detected, as with
 * fern_join). */
int fern_cancel(fern_thread *t);

/* Shield the calling green thread's waits from its cancel (on != 0) or
 * stop shielding them (on == 0), for cleanup that must wait, such as
 * closing a protocol politely; the request stays and fails the first
 * cancellation point after the shield is lifted. Returns the previous
 * setting (1 shielded, 0 not), so that shields nest:
 * `int was = fern_cancel_shield(1); ...; fern_cancel_shield(was);`.
 * Returns 0 and does nothing on a plain thread. */
int fern_cancel_shield(int on);

/* 1 if the calling green thread has been cancelled (shielded or not),
 * else 0 (always 0 on a plain thread). For loops that compute without
 * waiting: check it now and then. */
int fern_cancelled(void);

/* ------------------------------------------------------------------------ */
/* Groups: structured concurrency                                            */
/* ------------------------------------------------------------------------ */

/* A group owns the green threads spawned into it (docs/cancellation.md):
 * fern_group_wait returns once all of them have ended, cancelling the
 * group cancels every one of them, groups nest (a subgroup's threads are
 * its parent's too: cancelled with it, waited for by its wait), and a
 * group may have a deadline. A member reports failure through its result:
 * fn's return value (or fern_exit's) is read as an error value, NULL (0)
 * for success, as in `return (void *)(intptr_t)EIO;`. Works from green and
 * plain threads. */
typedef struct fern_group fern_group;

/* fern_group_create's flags: the first member that fails (returns a
 * non-zero result) before the group is cancelled cancels the group, and
 * fern_group_wait returns its result, as Go's errgroup. */
#define FERN_GROUP_FAILFAST 1u

/* Create an empty group in *g, a subgroup of parent (NULL: none), with
 * flags (0 or FERN_GROUP_FAILFAST). A subgroup of a cancelled group starts
 * cancelled. Returns 0; EINVAL if g is NULL, flags has an unknown bit, or
 * parent is being destroyed; ENOMEM. */
int fern_group_create(fern_group **g, fern_group *parent, unsigned flags);

/* Spawn a green thread running fn(arg) as a member of g (attr as for
 * fern_spawn; its `detached` is ignored: the group owns the thread, which
 * cannot be joined). *t (if t is not NULL) receives its handle, valid for
 * fern_cancel and names until the thread ends. A member spawned into a
 * cancelled group starts cancelled: its first cancellation point fails.
 * Returns 0; EINVAL if g or fn is NULL or g is being destroyed; ENOMEM;
 * or an error of fern_spawn. */
int fern_group_spawn(fern_group *g, fern_thread **t, const fern_attr *attr, fern_fn fn, void *arg);

/* Cancel g: fern_cancel every member, and every subgroup the same way;
 * members spawned into g later start cancelled. Sticky. Returns 0; EINVAL
 * if g is NULL. */
int fern_group_cancel(fern_group *g);

/* Cancel g at deadline_ns (fern_now_ns's clock), unless it has emptied by
 * then: a timeout for a whole request; fern_group_wait then returns
 * ETIMEDOUT (in a FAILFAST group, unless a member failed first). One
 * deadline per group; a subgroup's deadline is its own, its parent's
 * reaches it by the parent's cancel. Uses a green thread of the runtime
 * (started if needed). Returns 0; EINVAL if g is NULL or the deadline is
 * negative; EBUSY if g has a deadline already or is being destroyed;
 * ENOMEM, or an error of fern_spawn. */
int fern_group_set_deadline(fern_group *g, int64_t deadline_ns);

/* Wait until every member of g and of its subgroups has ended. Returns 0;
 * in a FAILFAST group the first failure's result; ETIMEDOUT if g's
 * deadline cancelled it (and no failure came first); EINVAL if g is NULL.
 * A cancellation point, the structured way: if the caller is cancelled,
 * g is cancelled and the call still waits for its members to end (they
 * never outlive it), then returns ECANCELED. */
int fern_group_wait(fern_group *g);

/* Free g, which has no running member and no subgroup left (destroy
 * subgroups first). Returns 0; EINVAL if g is NULL; EBUSY if a member
 * still runs or a subgroup exists. */
int fern_group_destroy(fern_group *g);

/* ------------------------------------------------------------------------ */
/* Green-thread-local storage                                                */
/* ------------------------------------------------------------------------ */

typedef unsigned fern_key;

/* Create a key; dtor (may be NULL) runs with the value of each thread whose
 * value is not NULL at its exit (green threads at their end, plain threads at
 * their pthread exit), up to 4 rounds as pthreads does.
 * Returns 0; EINVAL if key is NULL; EAGAIN if FERN_KEYS_MAX keys exist. */
int fern_key_create(fern_key *key, void (*dtor)(void *));

/* Delete a key (no destructor runs). Returns 0; EINVAL for an unknown key. */
int fern_key_delete(fern_key key);

/* The calling thread's value for key; NULL if unset or key is unknown. */
void *fern_getspecific(fern_key key);

/* Set the calling thread's value. Returns 0; EINVAL for an unknown key;
 * ENOMEM if the thread's value table cannot be allocated. */
int fern_setspecific(fern_key key, const void *value);

/* ------------------------------------------------------------------------ */
/* Clusters                                                                  */
/* ------------------------------------------------------------------------ */

/* Create a cluster of `workers` workers (kernel threads) with its own run
 * queues. Starts the runtime if needed.
 * Returns 0; EINVAL if c is NULL or workers is 0 or above FERN_WORKERS_MAX;
 * EAGAIN/ENOMEM if threads or memory could not be had. */
int fern_cluster_create(fern_cluster **c, unsigned workers);

/* Stop and join the cluster's workers and free it. Returns 0; EINVAL if c is
 * NULL or the default cluster; EBUSY if green threads still belong to it
 * (running, runnable or parked) or the caller runs on it. */
int fern_cluster_destroy(fern_cluster *c);

/* The default cluster (NULL before the runtime starts). */
fern_cluster *fern_cluster_default(void);

/* The cluster of the calling green thread; NULL from a plain thread. */
fern_cluster *fern_current_cluster(void);

/* Number of workers of c as created (0 if c is NULL); compensation workers
 * started while one is stuck (docs/preemption.md) are not counted. */
unsigned fern_cluster_workers(const fern_cluster *c);

/* Move the calling green thread to cluster c: it returns running on one of
 * c's workers. Returns 0 (also when already on c); EINVAL if c is NULL or
 * being destroyed; EPERM from a plain thread. */
int fern_migrate(fern_cluster *c);

/* ------------------------------------------------------------------------ */
/* Mutex and condition variable                                              */
/* ------------------------------------------------------------------------ */

/* Internal fields: do not touch. A zeroed object is an unlocked mutex /
 * a condition variable with no waiters.
 *
 * Biasing: a mutex or condition variable used only by the green threads of a
 * one-worker cluster (fern_cluster_create(&c, 1), or FERN_WORKERS=1) needs no
 * atomic instruction at all, since those threads never run at once; fern
 * then reads and writes its fields plainly (about a third faster for a
 * producer/consumer on a mutex and two condition variables). The first use
 * by any other kernel thread (a plain thread, another cluster's worker)
 * revokes the bias once, with a membarrier(2) call of a few microseconds,
 * and the object is atomic from then on; fern_stats counts revocations.
 * Biasing is off with FERN_BIAS=0, under ThreadSanitizer, and where
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is unavailable. */
typedef struct fern_waitq {
    void *head, *tail;
} fern_waitq;

typedef struct fern_mutex {
    uint32_t state_;   /* 0 free, 1 locked, 2 locked with waiters */
    uint32_t lock_;    /* guards waiters_ */
    void *owner_;      /* holder's identity, for EPERM and fern_dump */
    fern_waitq waiters_;
    uint32_t handoff_; /* 1: unlock hands the mutex over to a waiter */
    uint32_t heirs_;   /* waiters moved here by fern_cond_broadcast */
    uint32_t bias_;    /* worker whose green threads use plain stores, or shared */
    uint32_t users_;   /* lockers queued or woken to compete again, until they leave */
    uint32_t cwait_;   /* condition waiters using it, until they hold it again */
    uint32_t pad_;
} fern_mutex;

typedef struct fern_cond {
    uint32_t lock_;
    uint32_t bias_;
    fern_waitq waiters_;
    fern_mutex *mutex_; /* the mutex its waiters use; NULL if they use several */
    uint32_t waiting_;  /* waiters queued */
    uint32_t timed_;    /* of them, ones with a deadline */
} fern_cond;

#define FERN_MUTEX_INIT {0, 0, NULL, {NULL, NULL}, 0, 0, 0, 0, 0, 0}
#define FERN_COND_INIT {0, 0, {NULL, NULL}, NULL, 0, 0}

/* Initialise a mutex (same as zeroing). Return 0; EINVAL if the pointer is NULL. */
int fern_mutex_init(fern_mutex *m);

/* Destroying waitable objects (mutex, cond, sem, rwlock, barrier, wait
 * group, channel): *_destroy says EBUSY only while a thread is blocked on
 * the object or holds it. Threads that are only leaving it (woken, timed
 * out, or whose select fired on another case, and not yet returned; or one
 * holding its internal lock for an instant) are waited for: destroy yields,
 * then naps briefly, from a green thread as from a plain one, and returns 0
 * once they are out. The memory may then be freed at once, e.g. right after
 * the last broadcast, post, close or unlock, as glibc allows for
 * pthread_cond_destroy. A call that starts concurrently with or after the
 * destroy is the caller's bug, as in POSIX. */

/* Destroy a mutex. It first waits for lockers that are leaving it (one
 * woken to compete again, or whose timed lock expired) to get it or leave.
 * Return 0; EINVAL if m is NULL; EBUSY if it is locked (also by such a
 * locker, once it got it), a locker is blocked on it, or a thread waiting on
 * a condition variable with it (blocked there, or woken and about to lock it
 * again) uses it. */
int fern_mutex_destroy(fern_mutex *m);

/* Lock, parking (green) or blocking (plain) while another holds it.
 * Fairness: a waiter that has waited more than 1 ms switches the mutex to
 * hand-off mode, in which unlock passes it straight to the longest waiter, so
 * no waiter starves behind threads that keep re-locking.
 * Return 0; EINVAL if m is NULL; EDEADLK if the caller already holds it. */
int fern_mutex_lock(fern_mutex *m);

/* Lock if it is free, without waiting.
 * Return 0; EBUSY if held (also by the caller); EINVAL if m is NULL. */
int fern_mutex_trylock(fern_mutex *m);

/* Lock with an absolute deadline. Return 0; ETIMEDOUT if the deadline passed
 * first (the mutex is then not held); EINVAL if m is NULL or the deadline is
 * negative; EDEADLK if the caller already holds it. */
int fern_mutex_timedlock(fern_mutex *m, int64_t deadline_ns);

/* Release the mutex the caller holds, waking a waiter if there is one.
 * Return 0; EINVAL if m is NULL; EPERM if the caller does not hold it. */
int fern_mutex_unlock(fern_mutex *m);

/* Initialise a condition variable (same as zeroing).
 * Return 0; EINVAL if c is NULL. */
int fern_cond_init(fern_cond *c);

/* Destroy a condition variable. It first waits for waiters that timed out
 * to leave it; a woken waiter no longer uses c, only its mutex, so c may be
 * destroyed and freed right after the last signal or broadcast.
 * Return 0; EINVAL if c is NULL; EBUSY while a waiter is blocked on it. */
int fern_cond_destroy(fern_cond *c);

/* Atomically release m and wait for a signal, then re-acquire m. Wake-ups
 * can be spurious: wait in a loop on your predicate.
 * Return 0; EINVAL if c or m is NULL; EPERM if the caller does not hold m;
 * ECANCELED if the calling green thread is cancelled (fern_cancel), with m
 * held again. */
int fern_cond_wait(fern_cond *c, fern_mutex *m);

/* As fern_cond_wait with an absolute deadline. Returns ETIMEDOUT if the
 * deadline passed first (m is held again either way); EINVAL also for a
 * negative deadline; ECANCELED as fern_cond_wait. */
int fern_cond_timedwait(fern_cond *c, fern_mutex *m, int64_t deadline_ns);

/* Wake one / every waiter. Return 0; EINVAL if c is NULL.
 * A broadcast made while holding the mutex the waiters use does not wake them
 * all to fight for it: it moves them onto the mutex, and each unlock hands the
 * mutex to the next of them, which returns from its wait owning it. Other
 * threads locking the mutex meanwhile queue behind them. When no waiter has a
 * deadline and all use that mutex, the move takes constant time, however
 * many wait; otherwise the broadcast visits each waiter. Once it returns, the
 * moved waiters no longer use c: it may be destroyed. */
int fern_cond_signal(fern_cond *c);
int fern_cond_broadcast(fern_cond *c);

/* ------------------------------------------------------------------------ */
/* Semaphore, rwlock, barrier, wait group, once                              */
/* ------------------------------------------------------------------------ */

/* Largest value a semaphore holds. */
#define FERN_SEM_VALUE_MAX 2147483647u

typedef struct fern_sem {
    uint32_t lock_;
    uint32_t value_;
    fern_waitq waiters_;
} fern_sem;
#define FERN_SEM_INIT(v) {0, (v), {NULL, NULL}}

/* Initialise a semaphore with a value. Return 0; EINVAL if s is NULL or value exceeds
 * FERN_SEM_VALUE_MAX. A zeroed fern_sem is a semaphore of value 0. */
int fern_sem_init(fern_sem *s, unsigned value);
/* Destroy a semaphore. It first waits for waiters that timed out to leave
 * it (a woken one no longer uses it). Return 0; EINVAL if s is NULL; EBUSY while a
 * waiter is blocked on it. */
int fern_sem_destroy(fern_sem *s);
/* Take one unit, waiting while the value is 0. Return 0; EINVAL if s is
 * NULL; ECANCELED if the calling green thread is cancelled (fern_cancel)
 * while it would wait (no unit taken). */
int fern_sem_wait(fern_sem *s);
/* Take one unit if the value is above 0, without waiting.
 * Return 0; EAGAIN if the value is 0; EINVAL if s is NULL. */
int fern_sem_trywait(fern_sem *s);
/* As fern_sem_wait, with an absolute deadline.
 * Return 0; ETIMEDOUT if the deadline passed first (no unit taken); EINVAL if
 * s is NULL or the deadline is negative; ECANCELED as fern_sem_wait. */
int fern_sem_timedwait(fern_sem *s, int64_t deadline_ns);
/* Add one unit (handed straight to a waiter if there is one).
 * Return 0; EINVAL if s is NULL; EOVERFLOW if the value is FERN_SEM_VALUE_MAX. */
int fern_sem_post(fern_sem *s);
/* Current value (0 if s is NULL). */
unsigned fern_sem_value(fern_sem *s);

/* Reader-writer lock, writer-preferring: once a writer waits, new readers
 * queue behind it, so writers do not starve. A thread that holds a read lock
 * must not take it again while a writer waits (it would wait for itself). */
typedef struct fern_rwlock {
    uint32_t lock_;
    uint32_t readers_;        /* read holders */
    void *writer_;            /* write holder's identity, or NULL */
    uint32_t writers_waiting_;
    uint32_t pad_;
    fern_waitq readq_, writeq_;
} fern_rwlock;
#define FERN_RWLOCK_INIT {0, 0, NULL, 0, 0, {NULL, NULL}, {NULL, NULL}}

/* Initialise a reader-writer lock (same as zeroing or FERN_RWLOCK_INIT).
 * Return 0; EINVAL if rw is NULL. */
int fern_rwlock_init(fern_rwlock *rw);
/* Destroy a reader-writer lock. It first waits for waiters that timed out
 * to leave it. Return 0; EINVAL if rw is NULL; EBUSY if it is held (a woken waiter
 * holds it already: it was granted before its wake-up) or a waiter is
 * blocked on it. */
int fern_rwlock_destroy(fern_rwlock *rw);
/* Take a read lock, waiting while a writer holds the lock or waits for it.
 * Return 0; EINVAL if rw is NULL; EDEADLK if the caller holds the write lock;
 * EAGAIN if the caller already holds FERN_RWLOCK_READS_MAX read locks. */
int fern_rwlock_rdlock(fern_rwlock *rw);
/* As rdlock, but never waits: EBUSY where rdlock would wait, and also when
 * the caller holds the write lock (as fern_mutex_trylock: a try cannot
 * deadlock, so it reports the lock as taken, like POSIX's tryrdlock). */
int fern_rwlock_tryrdlock(fern_rwlock *rw);
/* As rdlock with a deadline; ETIMEDOUT if it passed first; EINVAL also for a
 * negative deadline. */
int fern_rwlock_timedrdlock(fern_rwlock *rw, int64_t deadline_ns);
/* Take the write lock, waiting while any thread holds the lock.
 * Return 0; EINVAL if rw is NULL; EDEADLK if the caller holds it (read or write). */
int fern_rwlock_wrlock(fern_rwlock *rw);
/* As wrlock, but never waits: EBUSY where wrlock would wait, and also when
 * the caller itself holds the lock, for reading or writing (no EDEADLK, as
 * POSIX's trywrlock). Return 0; EINVAL if rw is NULL. */
int fern_rwlock_trywrlock(fern_rwlock *rw);
/* As wrlock with a deadline; ETIMEDOUT if it passed first. */
int fern_rwlock_timedwrlock(fern_rwlock *rw, int64_t deadline_ns);
/* Release the caller's write lock or one of its read locks.
 * Return 0; EINVAL if rw is NULL; EPERM if the caller holds neither. */
int fern_rwlock_unlock(fern_rwlock *rw);
/* Read locks one thread can hold at once (across all rwlocks). */
#define FERN_RWLOCK_READS_MAX 16

/* Barrier for a fixed number of threads. */
typedef struct fern_barrier {
    uint32_t lock_;
    uint32_t count_;          /* threads per round */
    uint32_t arrived_;
    uint32_t round_;
    fern_waitq waiters_;
} fern_barrier;
#define FERN_BARRIER_SERIAL_THREAD (-1)

/* Initialise a barrier that releases its waiters count at a time.
 * Return 0; EINVAL if b is NULL or count is 0. A zeroed barrier must be
 * initialised before use (its count is 0: fern_barrier_wait says EINVAL). */
int fern_barrier_init(fern_barrier *b, unsigned count);
/* Destroy a barrier. Threads released by the last arrival no longer use
 * it, so it may follow the last fern_barrier_wait at once.
 * Return 0; EINVAL if b is NULL; EBUSY while threads wait on it. */
int fern_barrier_destroy(fern_barrier *b);
/* Wait until `count` threads have arrived. Returns FERN_BARRIER_SERIAL_THREAD
 * in exactly one of them (the last to arrive) and 0 in the others; EINVAL if b
 * is NULL or not initialised. */
int fern_barrier_wait(fern_barrier *b);

/* Wait group (Go's sync.WaitGroup): a counter and waiters for it to reach 0. */
typedef struct fern_wg {
    uint32_t lock_;
    uint32_t pad_;
    int64_t count_;
    fern_waitq waiters_;
} fern_wg;
#define FERN_WG_INIT {0, 0, 0, {NULL, NULL}}

/* Initialise a wait group with a count of 0 (same as zeroing).
 * Return 0; EINVAL if wg is NULL. */
int fern_wg_init(fern_wg *wg);
/* Destroy a wait group. It first waits for waiters that timed out to leave
 * it (a woken one no longer uses it). Return 0; EINVAL if wg is NULL; EBUSY if the
 * count is not 0 or a waiter is blocked on it. */
int fern_wg_destroy(fern_wg *wg);
/* Add delta (may be negative) to the counter; at 0 every waiter wakes.
 * Return 0; EINVAL if wg is NULL or the counter would go below 0 (nothing
 * changes then). */
int fern_wg_add(fern_wg *wg, int64_t delta);
/* Take one from the counter: fern_wg_add(wg, -1), with its returns. */
int fern_wg_done(fern_wg *wg);
/* Wait for the counter to be 0. Return 0; EINVAL if wg is NULL; ECANCELED
 * if the calling green thread is cancelled (fern_cancel) while it waits. */
int fern_wg_wait(fern_wg *wg);
/* As fern_wg_wait, with an absolute deadline.
 * Return 0; ETIMEDOUT if the deadline passed first; EINVAL if wg is NULL or
 * the deadline is negative; ECANCELED as fern_wg_wait. */
int fern_wg_timedwait(fern_wg *wg, int64_t deadline_ns);

/* Run-once. */
typedef struct fern_once {
    uint32_t state_;          /* 0 not run, 1 running, 2 done */
    uint32_t lock_;
    void *runner_;            /* identity of the thread running fn */
    fern_waitq waiters_;
} fern_once;
#define FERN_ONCE_INIT {0, 0, NULL, {NULL, NULL}}

/* Call fn exactly once per fern_once; callers that arrive while it runs wait
 * for it to finish. fn may block. Return 0; EINVAL if o or fn is NULL;
 * EDEADLK if fn itself calls fern_call_once on the same object. */
int fern_call_once(fern_once *o, void (*fn)(void));

/* ------------------------------------------------------------------------ */
/* Channels                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct fern_chan fern_chan;

/* Create a channel of elements of elem_size bytes holding up to capacity
 * buffered elements (0 = unbuffered: a send waits for a receiver).
 * Return 0; EINVAL if ch is NULL, elem_size is 0 or elem_size * capacity
 * overflows; ENOMEM if the buffer cannot be allocated.
 *
 * Channels are biased like mutexes (see fern_mutex): one used only by the
 * green threads of a one-worker cluster takes no lock and makes no atomic
 * instruction (an unbuffered round trip between two such threads is about a
 * fifth faster); the first use by any other kernel thread revokes that once
 * (a membarrier(2) call), and fern_select makes its channels shared for good
 * before it locks them. Nothing changes in what the calls return. */
int fern_chan_create(fern_chan **ch, size_t elem_size, size_t capacity);
/* Free a channel. It first waits for senders, receivers and selects that
 * are leaving it (one that timed out, or whose select fired on another
 * case, relocks it to unlink itself; one inside an operation holds its
 * lock), so destroy may follow the last close or send at once. A thread woken
 * by this channel does not touch it again. Return 0; EINVAL if ch is NULL;
 * EBUSY while a sender, receiver or select is blocked on it (the channel is
 * not freed then). */
int fern_chan_destroy(fern_chan *ch);
/* Close the channel: no more sends. Receivers get what is buffered, then EPIPE; blocked
 * senders wake with EPIPE. Return 0; EINVAL if ch is NULL; EPIPE if closed. */
int fern_chan_close(fern_chan *ch);
/* Send a copy of *elem, waiting for room or a receiver. Return 0; EINVAL if
 * ch or elem is NULL; EPIPE if the channel is closed (before or while
 * waiting: the element was not sent); ECANCELED if the calling green thread
 * is cancelled (fern_cancel) while it would wait (nothing sent). */
int fern_chan_send(fern_chan *ch, const void *elem);
/* Send without waiting: only if a receiver waits or the buffer has room.
 * Return 0; EAGAIN if it would wait; EPIPE if closed; EINVAL as above. */
int fern_chan_trysend(fern_chan *ch, const void *elem);
/* As fern_chan_send, with an absolute deadline.
 * Return 0; ETIMEDOUT if the deadline passed first (nothing sent); EPIPE if
 * closed; EINVAL as above or for a negative deadline; ECANCELED as
 * fern_chan_send. */
int fern_chan_timedsend(fern_chan *ch, const void *elem, int64_t deadline_ns);
/* Receive into *elem (elem may be NULL to discard). Return 0; EINVAL if ch is
 * NULL; EPIPE once the channel is closed and drained; ECANCELED if the
 * calling green thread is cancelled (fern_cancel) while it would wait
 * (nothing received). */
int fern_chan_recv(fern_chan *ch, void *elem);
/* Receive without waiting: only if an element is buffered or a sender waits.
 * Return 0; EAGAIN if nothing is ready; EPIPE if closed and drained; EINVAL
 * if ch is NULL. */
int fern_chan_tryrecv(fern_chan *ch, void *elem);
/* As fern_chan_recv, with an absolute deadline.
 * Return 0; ETIMEDOUT if the deadline passed first (nothing received);
 * EPIPE if closed and drained; EINVAL as above or for a negative deadline;
 * ECANCELED as fern_chan_recv. */
int fern_chan_timedrecv(fern_chan *ch, void *elem, int64_t deadline_ns);
/* Buffered elements now / the capacity. */
size_t fern_chan_len(fern_chan *ch);
size_t fern_chan_cap(fern_chan *ch);

/* Tickers (Go's time.Ticker): a periodic timer that fern_select waits on
 * (a FERN_TICK case) or fern_ticker_wait. A ticker holds no thread and no
 * timer of its own: it is a period and the time of its next tick, and the
 * threads waiting on it sleep until then. A tick goes to exactly one taker
 * (as a channel element would). A slow taker never finds a backlog: ticks
 * that came while nobody took one are dropped (as Go's ticker does), the
 * next tick stays on the ticker's original period boundaries, and the
 * taker learns how many boundaries passed (`ticks`, below). */
typedef struct fern_ticker fern_ticker;

/* Create a ticker whose first tick comes period_ns from now, then every
 * period_ns. Return 0; EINVAL if t is NULL or period_ns <= 0; ENOMEM. */
int fern_ticker_create(fern_ticker **t, int64_t period_ns);
/* Free a ticker, as fern_chan_destroy frees a channel: it first waits for
 * selects that are leaving it, or that a reset or stop woke to look at it
 * again (until they block again or return). Return 0; EINVAL if t is NULL;
 * EBUSY while a select or fern_ticker_wait is blocked on it (the ticker is
 * not freed then; stopping it does not unblock them: wake them through
 * another case, and try again). */
int fern_ticker_destroy(fern_ticker *t);
/* Restart the ticker with a new period: the next tick comes period_ns from
 * now; a tick not yet taken is dropped. Threads blocked on it wait for the
 * new tick. Return 0; EINVAL if t is NULL or period_ns <= 0 (the ticker is
 * unchanged then). */
int fern_ticker_reset(fern_ticker *t, int64_t period_ns);
/* Stop the ticker: no tick comes until fern_ticker_reset; a tick not yet
 * taken is dropped. Threads blocked on it go on waiting (on their other
 * cases, their deadline, or a reset), as on a stopped Go ticker. Stopping
 * twice is harmless. Return 0; EINVAL if t is NULL. */
int fern_ticker_stop(fern_ticker *t);
/* Wait for the next tick and take it (a fern_select of one FERN_TICK case).
 * *ticks (if not NULL) as for FERN_TICK. Return 0; ETIMEDOUT if the
 * deadline passed first (no tick taken); ECANCELED if the calling green
 * thread is cancelled (fern_cancel) before a tick comes; EINVAL if t is
 * NULL or the deadline is negative. On a stopped ticker it waits for a
 * reset. */
int fern_ticker_wait(fern_ticker *t, uint64_t *ticks, int64_t deadline_ns);

/* What a select case waits for. 0 and 3 to 7 are not ops (they never
 * were: programs may rely on fern_select refusing them). */
typedef enum fern_select_op {
    FERN_SEND = 1,        /* send *elem on chan */
    FERN_RECV = 2,        /* receive from chan into elem */
    FERN_FD_READABLE = 8, /* fd is readable (poll(2)'s POLLIN, or hang-up, error) */
    FERN_FD_WRITABLE = 9, /* fd is writable (POLLOUT, or hang-up, error) */
    FERN_DEADLINE = 10,    /* the clock reached deadline (Go's time.After) */
    FERN_TICK = 11,        /* ticker has a tick: take it */
} fern_select_op;

typedef struct fern_select_case {
    union {                   /* what the case waits on, by op: */
        fern_chan *chan;      /* FERN_SEND, FERN_RECV; NULL: never ready (as a nil channel in Go) */
        int fd;               /* FERN_FD_*; negative: never ready (as in poll(2)) */
        int64_t deadline;     /* FERN_DEADLINE: absolute (fern_now_ns() based); FERN_FOREVER: never */
        fern_ticker *ticker;  /* FERN_TICK; NULL: never ready */
    };
    fern_select_op op;
    void *elem;               /* FERN_SEND: element to send; FERN_RECV: where to receive (may be NULL);
                               * FERN_TICK: a uint64_t receiving the tick count (may be NULL); else unused */
    int result;               /* out: 0, or for the case that fired: EPIPE (closed channel), EBADF (fd) */
} fern_select_case;

/* NOTE: unlike every other fern call, fern_select returns a NEGATIVE errno
 * value on error (-ETIMEDOUT, -EINVAL), because a non-negative return is the
 * index of the case that fired. Test `r < 0`, not `r != 0`.
 *
 * Wait until one case can proceed and perform exactly that one (Go's select).
 * Among cases ready at the same time one is chosen uniformly at random. A
 * receive on a closed, drained channel is ready and fires with result EPIPE;
 * a send on a closed channel is ready and fires with result EPIPE (nothing
 * sent). deadline 0 (or any past deadline) makes it non-blocking.
 *
 * Descriptor cases (FERN_FD_READABLE, FERN_FD_WRITABLE) report readiness,
 * as poll(2) would, and transfer nothing: read or write afterwards (a
 * readiness may be gone by then if another thread took the data; fern_read
 * then waits again). The fd is registered as by any fern_* I/O call (made
 * O_NONBLOCK, kept until fern_close: close it with fern_close). For both
 * directions give two cases. Any number of selects and fern_* calls may
 * wait on one fd at once: each edge wakes all of them, none takes it from
 * another, and a select that returns through another case leaves nothing
 * registered behind. A case whose fd is not open fires with result EBADF, as
 * does one whose fd is closed with fern_close while the select waits
 * (closing it with close(2) instead wakes nobody); a regular file is always
 * ready, as in poll(2). The first descriptor case starts the runtime if it
 * is not running (a failure fires the case with that error).
 *
 * Timer cases. FERN_DEADLINE fires once the clock has reached its deadline
 * (it stays ready: in a loop, keep the deadline of the first round, as Go's
 * time.After channel is made once). FERN_TICK takes the ticker's tick and
 * stores in *elem (if not NULL) how many ticks came since the one taken
 * last: 1 when the taker keeps up, k > 1 when k - 1 were dropped. Unlike the
 * deadline argument (-ETIMEDOUT) they fire as cases, with their index, so
 * one select can tell a request's deadline from a keep-alive tick.
 * Destroying a ticker while a select waits on it is refused (EBUSY,
 * fern_ticker_destroy); stopping it is not: the case never fires until a
 * reset.
 *
 * A select is a cancellation point (fern_cancel): a cancelled green thread's
 * select that would wait returns -ECANCELED, whatever its cases (one that
 * can fire at once still fires), and leaves nothing behind on them.
 *
 * Returns the index of the case that fired (>= 0); -ETIMEDOUT if none became
 * ready by the deadline; -ECANCELED (above); -ENOMEM if the waiters of more than 8 cases cannot
 * be allocated; -EINVAL if cases is NULL with n > 0, n exceeds
 * FERN_SELECT_MAX, an op is invalid, a send case has a channel and no elem,
 * a FERN_DEADLINE case's deadline or the deadline argument is negative, or
 * no case can ever be ready (n is 0, every chan and ticker NULL, every fd
 * negative, every deadline FERN_FOREVER) and the deadline is FERN_FOREVER
 * (it could never return). */
int fern_select(fern_select_case *cases, size_t n, int64_t deadline_ns);
#define FERN_SELECT_MAX 64

/* ------------------------------------------------------------------------ */
/* I/O                                                                       */
/* ------------------------------------------------------------------------ */

/* Blocking-style I/O that parks the green thread instead of the worker.
 * The first fern_* call on an fd switches it to O_NONBLOCK and registers it,
 * edge-triggered, with the runtime's epoll poller; the registration lasts
 * until fern_close. An fd used with these calls must be closed with
 * fern_close (a plain close(2) leaves a stale registration that a new fd with
 * the same number would inherit).
 *
 * POSIX shape: they return what the system call returns, -1 with errno on
 * error. They first try the system call; only on EAGAIN does a green thread
 * park until the fd is ready (a plain thread blocks in poll(2)).
 *
 * Deadlines, per fd (as Go's SetDeadline): fern_fd_set_deadline sets
 * absolute deadlines for reads and writes on an fd; a call that would wait
 * past its deadline fails with errno ETIMEDOUT (nothing was transferred). A
 * deadline stays until changed; FERN_FOREVER (the default) removes it.
 * fern_wait_fd takes its own deadline as well.
 *
 * SIGPIPE: no fern call raises it on a socket. Writing to a socket whose peer
 * has gone fails with errno EPIPE (fern_write and fern_writev use send(2) /
 * sendmsg(2) with MSG_NOSIGNAL on sockets; the send calls always add
 * MSG_NOSIGNAL). A pipe is not a socket: fern_write to a pipe whose reader
 * has gone raises SIGPIPE as write(2) does, unless the program ignores it.
 *
 * The first of these calls starts the runtime with the defaults if it is not
 * running, also from a plain thread (docs/configuration.md, "Implicit start"). */

/* fern-hook (libfern-hook, docs/hooks.md) makes libc's blocking calls
 * (read, connect, poll, usleep, getaddrinfo, ...) park green threads without
 * any call to this API. libfern.so exports a few `fern__*` symbols for it
 * alone; they are not part of this API, are declared in no installed header
 * and may change in any release. */

#define FERN_READ 1
#define FERN_WRITE 2

/* Set the read and write deadlines of fd (absolute, fern_now_ns() based;
 * FERN_FOREVER for none). Threads already waiting see the new deadline when
 * they next wake. Return 0; EBADF if fd is negative or above the fd limit. */
int fern_fd_set_deadline(int fd, int64_t read_deadline, int64_t write_deadline);

/* Wait until fd is readable (FERN_READ) and/or writable (FERN_WRITE), or the
 * deadline passes. Returns the ready events (> 0), 0 on timeout, -1 with
 * errno EBADF if fd is bad or closed with fern_close while waiting, EINVAL if
 * events is 0 or has unknown bits, EBUSY if another thread already waits for
 * the same direction on fd (one reader and one writer per fd), ECANCELED if
 * the calling green thread is cancelled (fern_cancel) while it would wait. */
int fern_wait_fd(int fd, int events, int64_t deadline_ns);

/* Reads and writes that park instead of blocking: read(2), write(2),
 * readv(2), writev(2), recv(2), send(2), recvfrom(2), sendto(2), recvmsg(2)
 * and sendmsg(2) with the same arguments and results, -1 with errno on
 * error; ETIMEDOUT when the call would wait past the fd's deadline (nothing
 * transferred); EBADF when the fd is closed with fern_close while the call
 * waits; ECANCELED when the calling green thread is cancelled (fern_cancel)
 * while the call would wait (nothing transferred). MSG_DONTWAIT in flags makes one attempt, without parking. The send
 * calls, and fern_write/fern_writev on sockets, never raise SIGPIPE: EPIPE
 * instead (above). */
ssize_t fern_read(int fd, void *buf, size_t n);
ssize_t fern_write(int fd, const void *buf, size_t n);
ssize_t fern_readv(int fd, const struct iovec *iov, int iovcnt);
ssize_t fern_writev(int fd, const struct iovec *iov, int iovcnt);
ssize_t fern_recv(int fd, void *buf, size_t n, int flags);
ssize_t fern_send(int fd, const void *buf, size_t n, int flags);
ssize_t fern_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from,
                      socklen_t *fromlen);
ssize_t fern_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,
                    socklen_t tolen);
ssize_t fern_recvmsg(int fd, struct msghdr *msg, int flags);
ssize_t fern_sendmsg(int fd, const struct msghdr *msg, int flags);

/* accept4(2) that parks. The new fd is non-blocking and ready for fern_*
 * calls (SOCK_NONBLOCK is always added to flags). On EMFILE/ENFILE it returns
 * -1 at once with that errno: the caller should back off (for example
 * fern_sleep_ns) rather than retry in a loop. ECANCELED if the calling green
 * thread is cancelled (fern_cancel) while it waits. */
int fern_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags);

/* connect(2) that parks: makes fd non-blocking, starts the connection, waits
 * for writability (within fd's write deadline), then reports SO_ERROR.
 * Returns 0, or -1 with errno (ECONNREFUSED, ETIMEDOUT, ECANCELED if the
 * calling green thread is cancelled while it waits, ...). */
int fern_connect(int fd, const struct sockaddr *addr, socklen_t addrlen);

/* Close fd: threads parked in fern_* calls on it wake with EBADF, the poller
 * forgets it, then close(2). Returns close(2)'s result. */
int fern_close(int fd);

/* ------------------------------------------------------------------------ */
/* Blocking pool                                                             */
/* ------------------------------------------------------------------------ */

/* Run fn(arg) on a helper kernel thread while the calling green thread is
 * parked, and return its result: for work that cannot be made non-blocking
 * (regular files, getaddrinfo and other DNS look-ups, foreign libraries that
 * block). The pool starts threads on demand up to $FERN_BLOCKING_MAX (default
 * 64) and stops threads idle for 10 seconds. From a plain thread fn runs on
 * the caller. fn must not call fern functions that park (it runs on a plain
 * thread: they would block it, which is allowed but wastes the helper).
 * Returns fn's result; if fn is NULL returns NULL with errno EINVAL. errno set
 * by fn is carried back to the caller. A cancellation point at its start
 * only: a cancelled green thread gets NULL with errno ECANCELED and fn does
 * not run; a job that has started is waited for. */
void *fern_blocking(void *(*fn)(void *), void *arg);

/* pread(2) / pwrite(2) that never block the worker (regular files never
 * report readiness, so epoll cannot help them). On a green thread the call
 * is first made on the worker as preadv2/pwritev2 with RWF_NOWAIT, which the
 * page cache serves at the plain call's cost; if the kernel would have to
 * wait (a cache miss, a write the file system cannot do without blocking),
 * the green thread parks while io_uring (a ring per worker, probed once at
 * start) or, where the kernel refuses io_uring or $FERN_IO_URING=0, the
 * blocking pool does the call (fern_stats().file_io says which). From a plain
 * thread, the plain pread(2) / pwrite(2). fern-hook's pread, read and the
 * other file calls take the same path (docs/hooks.md).
 * Returns the bytes read (0 at end of file) or written, or -1 with errno:
 * EINVAL for a negative offset, else pread(2)'s and pwrite(2)'s (EBADF,
 * EFAULT, EISDIR, ENOSPC, EIO, ...). A cancellation point before the call
 * is made: -1 with errno ECANCELED, nothing done, if the calling green thread
 * is cancelled (fern_cancel); a call that has started is waited for. */
ssize_t fern_pread(int fd, void *buf, size_t n, int64_t offset);
ssize_t fern_pwrite(int fd, const void *buf, size_t n, int64_t offset);

/* ------------------------------------------------------------------------ */
/* Introspection                                                             */
/* ------------------------------------------------------------------------ */

/* How stacks are protected against overflow (see docs/stacks.md). */
typedef enum fern_guard_mode {
    FERN_GUARD_MADVISE = 0, /* MADV_GUARD_INSTALL guard page: no extra mapping */
    FERN_GUARD_MPROTECT = 1, /* PROT_NONE guard page: two mappings per stack */
    FERN_GUARD_CANARY = 2,   /* canary word checked at every switch */
} fern_guard_mode;

/* How file calls that would wait for the disk run (fern_pread, fern-hook's
 * file calls; see docs/hooks.md). */
typedef enum fern_file_io {
    FERN_FILE_IO_POOL = 0,  /* on the blocking pool: io_uring refused by the
                               kernel (too old, kernel.io_uring_disabled, a
                               seccomp filter) or $FERN_IO_URING=0 */
    FERN_FILE_IO_URING = 1, /* on io_uring, a ring per worker */
} fern_file_io;

/* Like struct stat and stat(2), the struct and the function share a name:
 * declare `struct fern_stats s;` and call fern_stats(&s). */
struct fern_stats {
    uint64_t threads_live;     /* spawned and not yet finished */
    uint64_t threads_spawned;  /* since the runtime started */
    uint64_t switches;         /* context switches, all workers */
    uint64_t steals;           /* successful steals, all workers */
    uint64_t migrations;       /* fern_migrate calls that moved */
    uint64_t worker_sleeps;    /* times a worker went to sleep idle */
    uint32_t clusters;         /* live clusters */
    uint32_t workers;          /* workers in all clusters, running
                                  compensation workers included */
    uint64_t stacks_mapped;    /* stack slots carved from slabs */
    uint64_t stacks_in_use;    /* bound to a live thread */
    uint64_t stacks_cached;    /* in pools, ready for reuse */
    uint64_t stack_trims;      /* pooled stacks trimmed (memory returned) */
    uint64_t stack_bytes_reserved; /* address space reserved for stacks */
    uint64_t guards_madvise;   /* stacks guarded by MADV_GUARD_INSTALL */
    uint64_t guards_mprotect;  /* stacks guarded by mprotect */
    uint64_t guards_canary;    /* stacks protected by a canary only */
    fern_guard_mode guard_mode; /* what new stack slots get now */
    uint64_t bias_revocations; /* mutexes, condition variables and channels
                                  taken out of a one-worker cluster's plain
                                  mode (see fern_mutex) since the process
                                  started */
    uint64_t poller_ctls;      /* epoll_ctl calls fern's poller made on user
                                  descriptors since fern_init: one when a
                                  descriptor is first waited on (fern_* I/O
                                  calls, fern-hook), one at its close; a
                                  loop of calls on the same descriptors adds
                                  none (docs/hooks.md) */
    /* Preemption and the monitor (docs/preemption.md). */
    uint64_t preemptions;      /* green threads preempted at the end of their
                                  time slice (live workers) */
    uint64_t preemptions_deferred; /* requests that found the thread at an
                                  unsafe point (fern, libc, no stack room)
                                  and were retried at a later tick */
    uint64_t spares_started;   /* compensation workers started because a
                                  worker was stuck with work waiting, since
                                  fern_init; `workers` counts running ones */
    uint64_t deadlocks_reported; /* deadlock reports printed since fern_init
                                  (none with $FERN_DEADLOCK=off; with
                                  $FERN_DEADLOCK=fatal the first one ends
                                  the process with abort()) */
    /* File calls off the worker (fern_pread, fern-hook's file calls). */
    fern_file_io file_io;      /* io_uring or the blocking pool, as probed
                                  at start (fern_dump says why) */
    uint64_t file_nowait_hits; /* served by the page cache on the worker
                                  (preadv2 with RWF_NOWAIT, or a streak
                                  read: file_streak_reads), since fern_init */
    uint64_t file_uring_ops;   /* calls completed on io_uring */
    uint64_t file_pool_ops;    /* calls run on the blocking pool */
    /* Stack hibernation (docs/stacks.md). */
    bool hibernate;            /* on (asked for, and this kernel has guard
                                  markers and membarrier) */
    uint64_t hibernated;       /* threads whose stack is hibernated now */
    uint64_t hibernations;     /* stacks hibernated since fern_init */
    uint64_t hibernate_restores; /* stacks restored since fern_init, by their
                                  thread resuming or by a touch */
    uint64_t hibernate_touches; /* of those, restored because another thread
                                  touched the stack (a fault or, in fern-hook,
                                  EFAULT) */
    uint64_t hibernate_bytes;  /* heap bytes holding hibernated stacks now */
    /* fern-hook's page-cache streak (docs/hooks.md): a descriptor whose
     * reads the cache kept serving gets plain pread calls on the worker. */
    uint64_t file_streak_reads; /* reads made so, since fern_init (also
                                  counted in file_nowait_hits) */
    uint64_t file_streak_ends; /* of those, reads that held the worker too
                                  long (a miss, or the host's jitter) and
                                  ended their descriptor's streak */
};

/* Fill *s with counters (read without stopping workers: each is exact, the
 * set is not one atomic snapshot). Returns 0; EINVAL if s is NULL or the
 * runtime is not running. */
int fern_stats(struct fern_stats *s);

/* Print every live thread (id, name, state, what it waits on, cluster) and
 * every cluster's workers to f. Returns the number of threads printed, or -1
 * with errno EINVAL if f is NULL or the runtime is not running. */
int fern_dump(FILE *f);

/* Start recording a timeline of every green thread, for Perfetto
 * (ui.perfetto.dev) or chrome://tracing, and for the fern-trace(1) summary:
 * each run of a thread on a worker, why it stopped (yield, park and on
 * what, preemption, exit), who woke or spawned it, steals, migrations,
 * poller wake-ups, fern_blocking jobs and the monitor's spares. `path` is
 * the file to write (Chrome trace-event JSON, created or truncated; a
 * writer thread fills it as the program runs, and a crash report in a
 * green thread appends what the writer had not yet written), or "ring"
 * (or "ring:DIR") for the flight recorder: only the last events of each
 * worker are kept in memory, and fern_dump (so the dump signal), a
 * deadlock report and a crash report write them to
 * DIR/fern-ring.PID.N.json (DIR defaults to the current directory). Recording costs no lock and no system call on a
 * worker; a worker whose buffer is full drops events and counts them (see
 * docs/debugging.md, and $FERN_TRACE, $FERN_TRACE_EVENTS there;
 * $FERN_TRACE_THREADS=1, read by fern_init, adds a track per green thread
 * to every session after). The runtime
 * need not be running: workers record from their first switch. Returns 0;
 * EINVAL if path is NULL, empty or too long; EBUSY if a session (this call's
 * or $FERN_TRACE's) is already recording; ENOMEM; or the error of opening
 * the file (ENOENT, EACCES, ...) or the flight recorder's directory
 * (ENOTDIR, ...). */
int fern_trace_start(const char *path);

/* Stop the session fern_trace_start (or $FERN_TRACE) began: the writer
 * drains every buffer, closes the slices still open and completes the file;
 * the flight recorder's events are discarded. A program that exits without
 * calling it still gets a complete file (an atexit handler stops the
 * session), and so does fern_shutdown. Returns 0; EINVAL if no session
 * records; or the first error writing the file (ENOSPC, EIO, ...: the
 * file then ends early, and a line on stderr says so). */
int fern_trace_stop(void);

#ifdef __cplusplus
}
#endif
#endif /* FERN_FERN_H */
