/* SPDX-License-Identifier: MIT */
/*
 * The runtime's own system calls, made raw (arch/syscall.h), never through
 * libc's wrappers.
 *
 * Why: fern-hook (hook/) interposes libc's read, write, close, open, pipe2,
 * poll, epoll_*, fcntl, the socket calls and the sleeps. A libc call made
 * from inside libfern would then run the hook's logic inside the runtime:
 * fern's own descriptors (the poller's epoll and eventfd, the dump pipe)
 * adopted as "managed" by pipe2 and epoll_create1, a fern_read on a green
 * thread waiting through the hook's park instead of fern's, a close moved
 * off the worker to the blocking pool, a sleep in the shutdown loop parked.
 * A raw call also skips libc's cancellation-point bookkeeping and errno.
 * tests/tools/imports.sh fails if libfern.so imports a symbol that
 * libfern-hook.so defines, except its short allow-list.
 *
 * Every function returns the kernel's value: the result, or -errno (in
 * -4095..-1). sys_err turns that into the libc convention (-1 and errno)
 * where a public function owes it. None of them touches errno.
 *
 * Only calls that exist on both architectures are used: aarch64 has no
 * open, poll, epoll_wait, send or recv, so these are openat, ppoll,
 * epoll_pwait, sendto and recvfrom on both.
 */
#ifndef FERN_BASE_SYS_H
#define FERN_BASE_SYS_H

#include "arch/syscall.h"

#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>

struct epoll_event;
struct iovec;
struct msghdr;

#define FERN_SYS6(n, a, b, c, d, e, f)                                                                  \
    arch_syscall6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

static inline long sys_read(int fd, void *p, size_t n) { return FERN_SYS6(SYS_read, fd, p, n, 0, 0, 0); }
static inline long sys_write(int fd, const void *p, size_t n)
{
    return FERN_SYS6(SYS_write, fd, p, n, 0, 0, 0);
}
static inline long sys_readv(int fd, const struct iovec *iov, int cnt)
{
    return FERN_SYS6(SYS_readv, fd, iov, cnt, 0, 0, 0);
}
static inline long sys_writev(int fd, const struct iovec *iov, int cnt)
{
    return FERN_SYS6(SYS_writev, fd, iov, cnt, 0, 0, 0);
}
static inline long sys_pread(int fd, void *p, size_t n, int64_t off)
{
    return FERN_SYS6(SYS_pread64, fd, p, n, off, 0, 0);
}
static inline long sys_pwrite(int fd, const void *p, size_t n, int64_t off)
{
    return FERN_SYS6(SYS_pwrite64, fd, p, n, off, 0, 0);
}
static inline long sys_close(int fd) { return FERN_SYS6(SYS_close, fd, 0, 0, 0, 0, 0); }
static inline long sys_open(const char *path, int flags, int mode)
{
    return FERN_SYS6(SYS_openat, AT_FDCWD, path, flags, mode, 0, 0);
}
static inline long sys_pipe2(int fds[2], int flags) { return FERN_SYS6(SYS_pipe2, fds, flags, 0, 0, 0, 0); }
static inline long sys_fcntl(int fd, int cmd, long arg) { return FERN_SYS6(SYS_fcntl, fd, cmd, arg, 0, 0, 0); }

/* poll(2)'s timeout in ms (negative: none), through ppoll. */
static inline long sys_poll(struct pollfd *p, unsigned n, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000}, *tsp = ms >= 0 ? &ts : NULL;
    return FERN_SYS6(SYS_ppoll, p, n, tsp, 0, 0, 0);
}

static inline long sys_epoll_create1(int flags) { return FERN_SYS6(SYS_epoll_create1, flags, 0, 0, 0, 0, 0); }
static inline long sys_epoll_wait(int epfd, struct epoll_event *ev, int n, int ms)
{
    return FERN_SYS6(SYS_epoll_pwait, epfd, ev, n, ms, 0, 0);
}

static inline long sys_sendto(int fd, const void *p, size_t n, int flags,
                              const struct sockaddr *to, socklen_t tl)
{
    return FERN_SYS6(SYS_sendto, fd, p, n, flags, to, tl);
}
static inline long sys_recvfrom(int fd, void *p, size_t n, int flags, struct sockaddr *from,
                                socklen_t *fl)
{
    return FERN_SYS6(SYS_recvfrom, fd, p, n, flags, from, fl);
}
static inline long sys_sendmsg(int fd, const struct msghdr *m, int flags)
{
    return FERN_SYS6(SYS_sendmsg, fd, m, flags, 0, 0, 0);
}
static inline long sys_recvmsg(int fd, struct msghdr *m, int flags)
{
    return FERN_SYS6(SYS_recvmsg, fd, m, flags, 0, 0, 0);
}
static inline long sys_accept4(int fd, struct sockaddr *a, socklen_t *l, int flags)
{
    return FERN_SYS6(SYS_accept4, fd, a, l, flags, 0, 0);
}
static inline long sys_connect(int fd, const struct sockaddr *a, socklen_t l)
{
    return FERN_SYS6(SYS_connect, fd, a, l, 0, 0, 0);
}
static inline long sys_getsockopt(int fd, int level, int name, void *v, socklen_t *l)
{
    return FERN_SYS6(SYS_getsockopt, fd, level, name, v, l, 0);
}

/* Sleep for a relative CLOCK_MONOTONIC interval, or until an absolute
 * deadline (TIMER_ABSTIME in flags), with the time left in *rem on EINTR. */
static inline long sys_clock_nanosleep(clockid_t clk, int flags, const struct timespec *req,
                                       struct timespec *rem)
{
    return FERN_SYS6(SYS_clock_nanosleep, clk, flags, req, rem, 0, 0);
}
/* Sleep ns nanoseconds (monotonic), the whole interval despite signals. */
static inline void sys_sleep_ns(int64_t ns)
{
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    while (sys_clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == -EINTR)
        ;
}

#undef FERN_SYS6

/* libc's convention for a public function's result: r, or -1 with errno
 * set for a -errno value (errno_set: base/base.h). */
void errno_set(int e);
static inline long sys_err(long r)
{
    if (__builtin_expect(r < 0 && r > -4096, 0)) {
        errno_set((int)-r);
        return -1;
    }
    return r;
}

#endif
