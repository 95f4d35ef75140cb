/* SPDX-License-Identifier: MIT */
/*
 * fern-hook's shared core: raw system calls, the hook's view of each
 * descriptor, and the two ways a hooked call waits.
 *
 * Model. A hooked function first asks "is hooking on and am I on a green
 * thread?" (one global load and one TLS read in libfern). If not, it makes
 * the raw system call that libc would make, and returns what libc would
 * return. Raw (inline `syscall` instruction), so no symbol lookup happens on
 * any call and nothing here can recurse into another hooked function.
 *
 * Descriptors. Only descriptors created through a hooked call (socket,
 * socketpair, accept, accept4, pipe, pipe2, epoll_create*, and dup* of those)
 * are "managed"; everything else (0, 1, 2, whatever the process inherited,
 * descriptors libc opens internally) passes straight through and is never
 * touched.
 *
 * The file's flags are never changed. O_NONBLOCK belongs to the open file
 * description, which a dup, a fork child or a process that received it over
 * SCM_RIGHTS shares: a flag switched on behind the user's back leaks to all
 * of them (stdio on an fdopen'ed socket, a child's blocking read, a
 * recv(MSG_WAITALL) that comes back short). So a green thread asks for one
 * non-blocking attempt per call instead: MSG_DONTWAIT on the socket calls,
 * preadv2/pwritev2 with RWF_NOWAIT (offset -1: the file position, as read
 * and write use) in place of read, readv, write and writev. A descriptor
 * whose driver refuses RWF_NOWAIT (EOPNOTSUPP: a tty or a pty) is marked
 * HK_POLLFIRST: the green thread parks until poll says ready, then makes the
 * blocking call, which then does not wait (unless another reader takes the
 * data first: docs/hooks.md says so). accept and connect have no per-call
 * flag: they switch the flag on for the one attempt and back at once
 * (socket.c, HK_WINDOW hides it from F_GETFL meanwhile).
 *
 * Whether the user's description is non-blocking is asked of the kernel
 * (F_GETFL) on the slow path only, after an EAGAIN: a description shared
 * with another process may have been changed there, and a non-blocking one
 * owes EAGAIN, not a wait.
 *
 * Waiting. A call that gets EAGAIN on a managed, blocking descriptor parks
 * through libfern (io/hookapi.h: tick snapshot before the call, park on the
 * fd's edge, deadline from SO_RCVTIMEO / SO_SNDTIMEO, EAGAIN when it passes,
 * EBADF when the fd is closed) and retries; on a TCP socket whose last read
 * came back short, a read parks before its system call, which could only
 * say EAGAIN (fern's short-transfer rule, src/io/fdtab.c; core.c's
 * green_transfer). A plain thread makes the call libc would make, unchanged:
 * the kernel blocks it. A user non-blocking descriptor or MSG_DONTWAIT gets
 * EAGAIN, as from libc.
 *
 * errno. Internals pass -errno values; errno is written once, at the end,
 * through a non-inlined store: a park may move the green thread to another
 * kernel thread, and errno's address is per kernel thread.
 */
#ifndef FERN_HOOK_H
#define FERN_HOOK_H

#include <errno.h>
#include <fern/fern.h>
#include <stdint.h>
#include <sys/syscall.h>

#include "io/hookapi.h"

#define HK_HIDDEN __attribute__((visibility("hidden")))
#define HK_LIKELY(x) __builtin_expect(!!(x), 1)

/* ---- raw system calls: return the kernel's value (-errno on error) ---- */
#include "arch/syscall.h"
#define hk_sys6 arch_syscall6
#define hk_sys(n, ...) hk_sysn_(n, __VA_ARGS__, 0, 0, 0, 0, 0, 0)
#define hk_sysn_(n, a, b, c, d, e, f, ...)                                                         \
    hk_sys6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

/* One system call, kept to be repeated after a wait. */
struct hk_call {
    long nr;
    long a[6];
};
/* EFAULT may mean a buffer on a hibernated green stack (docs/stacks.md,
 * "Hibernation"), which the kernel cannot restore: fern__hib_retry restores
 * what the call's arguments point into and says whether to try again. */
static inline long hk_do(const struct hk_call *c)
{
    long r = hk_sys6(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
    for (int i = 0; __builtin_expect(r == -EFAULT, 0) && i < 4 && fern__hib_retry(c->nr, c->a); i++)
        r = hk_sys6(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
    return r;
}

/* Under ThreadSanitizer, the part of a green thread's call that may park
 * runs on a second TSan fiber (libfern's thread/thread.c says why). */
#if defined(__SANITIZE_THREAD__)
#define HK_TSAN_ENTER() fern__tsan_enter()
#define HK_TSAN_LEAVE() fern__tsan_leave()
#else
#define HK_TSAN_ENTER() ((void)0)
#define HK_TSAN_LEAVE() ((void)0)
#endif

/* ---- state ---- */
extern int hk_on HK_HIDDEN; /* hooking on: set at load unless FERN_HOOK=0; off in a fork child */

/* ---- entry points a sanitizer's runtime calls before it has started ----
 * In an ASan or TSan build the hook itself is instrumented, and its code
 * must not run before the sanitizer's runtime has set itself up (TSan's
 * function-entry hook then faults on a thread it does not know yet). But
 * the runtimes call some libc functions directly, and find ours: TSan's
 * start-up with log_path makes the log's directory with mkdir, and
 * libtsan and libasan also import fcntl, open, close and pipe. Those entry
 * points are HK_EARLY (not instrumented): until the hook's constructor has
 * run (hk_started; a sanitizer starts before any constructor), they make
 * the raw call and set errno themselves (HK_EARLY_RET), touching nothing
 * instrumented; after it, the usual hooked path. In a build without
 * sanitizers HK_EARLY is nothing and HK_BEFORE_START() is 0. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define HK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define HK_SANITIZED 1
#endif
#endif
#if defined(HK_SANITIZED)
extern int hk_started HK_HIDDEN;
#if defined(__has_attribute) && __has_attribute(disable_sanitizer_instrumentation)
#define HK_EARLY __attribute__((disable_sanitizer_instrumentation))
#else
#define HK_EARLY __attribute__((no_sanitize("address", "thread", "undefined")))
#endif
#define HK_BEFORE_START() __builtin_expect(!__atomic_load_n(&hk_started, __ATOMIC_ACQUIRE), 0)
/* An HK_EARLY function's hooked path, kept out of line (so instrumented). */
#define HK_EARLY_BODY __attribute__((noinline))
#else
#define HK_EARLY
#define HK_BEFORE_START() 0
#define HK_EARLY_BODY
#endif
/* The raw call nr(a, b, c, d) with libc's result: for HK_EARLY's path only
 * (a statement expression: no function is called but __errno_location). */
#define HK_EARLY_RET(nr, a, b, c, d)                                                               \
    ({                                                                                             \
        long r_ = ARCH_SYSCALL6((nr), (a), (b), (c), (d), 0, 0);                                   \
        if (r_ < 0 && r_ > -4096) {                                                                \
            errno = (int)-r_;                                                                      \
            r_ = -1;                                                                               \
        }                                                                                          \
        r_;                                                                                        \
    })

static inline int hk_green(void)
{
    return __atomic_load_n(&hk_on, __ATOMIC_RELAXED) && fern__hook_green();
}

void hk_set_errno(int e) HK_HIDDEN;
/* The hooked function's return: r, or -1 with errno for a -errno value. */
static inline long hk_ret(long r)
{
    if (r < 0 && r > -4096) {
        hk_set_errno((int)-r);
        return -1;
    }
    return r;
}

#define HK_MANAGED   1u
#define HK_CHECKED   2u /* the file identity was checked once (hk_check) */
#define HK_POLLFIRST 4u /* RWF_NOWAIT refused: wait for poll, then the plain call */
#define HK_WINDOW    8u /* socket.c has O_NONBLOCK on for one accept/connect */
#define HK_DIRECT    16u /* an unmanaged file opened (or set) O_DIRECT: file.c */
/* Hints file.c keeps on an unmanaged descriptor (never on a managed one).
 * A hint only chooses a path, never the answer: every path makes the same
 * call, on the worker or off it, so a hint left behind by a close the hook
 * did not see (fclose) costs the next holder of the number a path at most. */
#define HK_SEEN      32u  /* fstat'ed once: HK_REGULAR says what it is */
#define HK_REGULAR   64u  /* a regular file or a block device */
#define HK_NOWAIT_R  128u /* preadv2(RWF_NOWAIT) answered EOPNOTSUPP */
#define HK_NOWAIT_W  256u /* pwritev2(RWF_NOWAIT) answered EOPNOTSUPP (ext4's buffered writes) */
#define HK_HINTS     (HK_DIRECT | HK_SEEN | HK_REGULAR | HK_NOWAIT_R | HK_NOWAIT_W)

struct hk_fd {
    uint32_t st;            /* HK_* bits, atomic */
    uint32_t spec;          /* file.c: the page-cache streak and its price, atomic */
    int64_t rcvto, sndto;   /* SO_RCVTIMEO / SO_SNDTIMEO in ns, 0: none */
    uint64_t dev, ino;      /* the file it was adopted for (fd.c: stale entries) */
};

/* The table of entries (fd.c): chunks of HK_CHUNK, allocated on first use. */
#define HK_CHUNK 1024u
#define HK_CHUNKS 1024u
extern struct hk_fd *hk_chunks[HK_CHUNKS] HK_HIDDEN;

/* The entry of fd, or NULL if it never had one (no allocation). Inline: a
 * page-cache hit (file.c's streak) asks it on every read. */
static inline struct hk_fd *hk_fd_find(int fd)
{
    if (fd < 0 || (unsigned)fd >= HK_CHUNK * HK_CHUNKS)
        return NULL;
    struct hk_fd *c = __atomic_load_n(&hk_chunks[(unsigned)fd / HK_CHUNK], __ATOMIC_ACQUIRE);
    return c ? &c[(unsigned)fd % HK_CHUNK] : NULL;
}
/* fd was just created by a hooked call: start it clean and managed, or a
 * copy of `from` (dup). */
void hk_adopt(int fd, const struct hk_fd *from) HK_HIDDEN;
/* An unmanaged fd that a green thread reads or writes is a tty: make it
 * managed and HK_POLLFIRST, unless another thread already has (no waiter
 * of fd is woken; two threads may race here). 1 if fd is now managed
 * (by this call or another's), 0 if it is no tty or has no entry. */
int hk_adopt_tty(int fd) HK_HIDDEN;
/* Record whether an unmanaged fd is O_DIRECT (file.c). */
void hk_mark_direct(int fd, int on) HK_HIDDEN;
/* Add hint bits (HK_SEEN, HK_REGULAR, HK_NOWAIT_*) to an unmanaged fd's entry
 * (made if need be); a managed fd's is left alone. The entry, or NULL. */
struct hk_fd *hk_mark_file(int fd, uint32_t bits) HK_HIDDEN;
/* fd is being closed or replaced: wake its waiters (EBADF), forget it. */
void hk_drop(int fd) HK_HIDDEN;
static inline uint32_t hk_state(const struct hk_fd *h)
{
    return h ? __atomic_load_n(&h->st, __ATOMIC_ACQUIRE) : 0;
}

/* Deadline for a wait of `to_ns` from now (FERN_FOREVER for 0). */
static inline int64_t hk_deadline(int64_t to_ns)
{
    return to_ns > 0 ? fern_now_ns() + to_ns : FERN_FOREVER;
}

/* The wait after EAGAIN on a green thread (hook/core.c). `deadline`: an
 * absolute one carried over from an earlier part of the same call, or -1 to
 * take SO_RCVTIMEO / SO_SNDTIMEO from now. */
long hk_green_transfer(int fd, int dir, int nowait, const struct hk_call *c,
                       int64_t deadline) HK_HIDDEN;
/* Wait on a plain thread for fd in dir until the deadline: 1 ready, 0 timed
 * out, -errno. */
long hk_poll_one(int fd, int dir, int64_t deadline) HK_HIDDEN;
/* A managed fd's first wait: is it still the file it was adopted for? 0, or
 * -EBADF (the entry was stale and is dropped). */
long hk_check(int fd, struct hk_fd *h) HK_HIDDEN;
/* 1 if fd's open file description is non-blocking (the kernel's flag), 0 if
 * not, -errno. */
long hk_desc_nonblock(int fd) HK_HIDDEN;

/* A read or write of an unmanaged descriptor on a green thread (file.c):
 * nw, c's one-attempt form, on the worker; if it would wait and fd is a
 * regular file or a block device, c off the worker; a tty becomes managed
 * and poll-first (HK_ADOPTED); else c itself. */
long hk_file_io(int fd, const struct hk_call *c, const struct hk_call *nw) HK_HIDDEN;
/* hk_file_io's answer for a tty or pty, which has no
 * RWF_NOWAIT: it is now managed and marked HK_POLLFIRST, and the caller
 * takes the managed path. Below every -errno. */
#define HK_ADOPTED (-4096L - 1)
/* fcntl(F_SETLKW / F_OFD_SETLKW) (lock.c): -errno or the kernel's value. */
long hk_fcntl_lockw(int fd, int cmd, long arg) HK_HIDDEN;
/* _FORTIFY_SOURCE's verdict on a buffer too small: the message, abort. */
void hk_overflow(void) HK_HIDDEN __attribute__((noreturn));

/* A transfer (read, write, recv, ...). The plain-thread path is the hot one
 * for code that never uses green threads: one flag load, one call, the
 * system call, exactly libc's. */
static inline long hk_transfer(int fd, int dir, int nowait, const struct hk_call *c)
{
    if (HK_LIKELY(!hk_green()))
        return hk_do(c);
    return hk_green_transfer(fd, dir, nowait, c, -1);
}

/* Run fn(arg) on fern's blocking pool from a green thread. */
static inline void hk_offload(void *(*fn)(void *), void *arg) { fern_blocking(fn, arg); }

#endif
