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
 * touched. A managed descriptor keeps the user's O_NONBLOCK bit (USER_NB) in
 * this table; the first time a green thread would block on it, the kernel
 * flag is switched on (FLIPPED) and stays on until close. fcntl(F_GETFL)
 * shows the user's bit, F_SETFL and ioctl(FIONBIO) change only the user's
 * bit. Invariant: kernel O_NONBLOCK == USER_NB || FLIPPED.
 *
 * Waiting. A call that gets EAGAIN on a managed descriptor the user sees as
 * blocking waits and retries:
 *  - on a green thread it parks through libfern (io/hookapi.h: tick snapshot
 *    before the call, park on the fd's edge, deadline from SO_RCVTIMEO /
 *    SO_SNDTIMEO, EAGAIN when it passes, EBADF when the fd is closed); on
 *    a TCP socket whose last read came back short, a read parks before its
 *    system call, which could only say EAGAIN (fern's short-transfer rule,
 *    src/io/fdtab.c; core.c's green_transfer);
 *  - on a plain thread (only possible once FLIPPED) it blocks in ppoll(2)
 *    with the same deadline, which is what the kernel's blocking call does.
 * A user non-blocking descriptor or MSG_DONTWAIT gets EAGAIN, as from libc.
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

#define HK_MANAGED 1u
#define HK_USER_NB 2u
#define HK_FLIPPED 4u

struct hk_fd {
    uint32_t st;            /* HK_* bits, atomic */
    int64_t rcvto, sndto;   /* SO_RCVTIMEO / SO_SNDTIMEO in ns, 0: none */
    uint64_t dev, ino;      /* the file it was adopted for (fd.c: stale entries) */
};

/* The entry of fd, or NULL if it never had one (no allocation). */
struct hk_fd *hk_fd_find(int fd) HK_HIDDEN;
/* fd was just created by a hooked call: start it clean and managed, its
 * user flags `user_nb`, or a copy of `from` (dup). */
void hk_adopt(int fd, int user_nb, const struct hk_fd *from) HK_HIDDEN;
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

/* The waits after EAGAIN (hook/core.c). */
long hk_plain_retry(int fd, int dir, const struct hk_call *c) HK_HIDDEN;
long hk_green_transfer(int fd, int dir, int nowait, const struct hk_call *c) HK_HIDDEN;
/* Wait on a plain thread for fd in dir until the deadline: 1 ready, 0 timed
 * out, -errno. */
long hk_poll_one(int fd, int dir, int64_t deadline) HK_HIDDEN;
/* Switch the kernel flag on for a managed descriptor: 0 or -errno. */
long hk_flip(int fd, struct hk_fd *h) HK_HIDDEN;

/* A transfer (read, write, recv, ...): try; on EAGAIN where the user sees a
 * blocking descriptor, wait and retry. The plain-thread path is the hot one
 * for code that never uses green threads: one flag load, one call, the
 * system call. */
static inline long hk_transfer(int fd, int dir, int nowait, const struct hk_call *c)
{
    if (HK_LIKELY(!hk_green())) {
        long r = hk_do(c);
        if (HK_LIKELY(r != -EAGAIN) || nowait)
            return r;
        return hk_plain_retry(fd, dir, c);
    }
    return hk_green_transfer(fd, dir, nowait, c);
}

/* Run fn(arg) on fern's blocking pool from a green thread. */
static inline void hk_offload(void *(*fn)(void *), void *arg) { fern_blocking(fn, arg); }

#endif
