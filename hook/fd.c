/* SPDX-License-Identifier: MIT */
/*
 * fd bookkeeping: the hook's table of descriptors, and the calls that
 * create, copy, inspect and close them (close, dup*, fcntl,
 * pipe*, epoll_create*). The model and the O_NONBLOCK rule are in hook.h.
 *
 * The table is two-level (chunks of HK_CHUNK entries, allocated on first
 * use, never freed), indexed by fd number, covering fds below 2^20; larger
 * fds are simply never managed. Reuse of a number is safe because every
 * creating call re-adopts (resets) the entry and tells libfern to forget the
 * number (fern__io_forget: its epoll events carry a generation, so an old
 * edge cannot wake the new owner), and close wakes the number's waiters with
 * EBADF before the kernel releases the number.
 *
 * A number can still go stale: a managed descriptor closed where no hook
 * sees it (libc's internal close in fclose of an fdopen'ed socket, a
 * sanitizer runtime's own close) leaves its entry behind for the next file
 * with that number. So an entry records the file it was adopted for (device
 * and inode, one fstat at creation), and before its first wait (hk_check,
 * once per descriptor) the file is checked: a different file means a stale
 * entry, which is dropped, and the call passes through.
 *
 * The flags are the kernel's: fcntl(F_GETFL / F_SETFL) passes through (and
 * ioctl is not hooked), since the hook never changes them (hook.h), except
 * for the one
 * accept or connect attempt during which socket.c has O_NONBLOCK on
 * (HK_WINDOW): F_GETFL does not show it.
 */
#include "hook.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

struct hk_fd *hk_chunks[HK_CHUNKS]; /* hook.h: hk_fd_find */

static struct hk_fd *hk_fd_get(int fd)
{
    if (fd < 0 || (unsigned)fd >= HK_CHUNK * HK_CHUNKS)
        return NULL;
    struct hk_fd **slot = &hk_chunks[(unsigned)fd / HK_CHUNK];
    struct hk_fd *c = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!c) {
        struct hk_fd *n = calloc(HK_CHUNK, sizeof *n), *expect = NULL;
        if (!n)
            return NULL;
        if (__atomic_compare_exchange_n(slot, &expect, n, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            c = n;
        else {
            free(n);
            c = expect;
        }
    }
    return &c[(unsigned)fd % HK_CHUNK];
}

void hk_adopt(int fd, const struct hk_fd *from)
{
    fern__io_forget(fd);
    struct hk_fd *h = hk_fd_get(fd);
    if (!h)
        return; /* out of memory or fd too large: it stays unmanaged */
    int64_t rto = from ? __atomic_load_n(&from->rcvto, __ATOMIC_RELAXED) : 0;
    int64_t sto = from ? __atomic_load_n(&from->sndto, __ATOMIC_RELAXED) : 0;
    __atomic_store_n(&h->rcvto, rto, __ATOMIC_RELAXED);
    __atomic_store_n(&h->sndto, sto, __ATOMIC_RELAXED);
    uint32_t st = HK_MANAGED | (from ? hk_state(from) & HK_POLLFIRST : 0);
    if (from && !(hk_state(from) & HK_MANAGED))
        st = hk_state(from) & HK_HINTS; /* a copy of a file: the same description */
    __atomic_store_n(&h->spec, 0, __ATOMIC_RELAXED);
    struct stat sb;
    if (hk_sys(SYS_fstat, fd, &sb) < 0)
        st = 0;
    __atomic_store_n(&h->dev, (uint64_t)sb.st_dev, __ATOMIC_RELAXED);
    __atomic_store_n(&h->ino, (uint64_t)sb.st_ino, __ATOMIC_RELAXED);
    __atomic_store_n(&h->st, st, __ATOMIC_RELEASE);
}

int hk_adopt_tty(int fd)
{
    struct termios t;
    if (hk_sys(SYS_ioctl, fd, TCGETS, &t) < 0)
        return 0; /* not a tty (ENOTTY) */
    struct hk_fd *h = hk_fd_get(fd);
    if (!h)
        return 0;
    uint32_t st = hk_state(h);
    if (st & HK_MANAGED)
        return 1; /* another thread adopted it first */
    struct stat sb;
    if (hk_sys(SYS_fstat, fd, &sb) < 0)
        return 0;
    /* The fields before the state: a racing adopter writes the same. */
    __atomic_store_n(&h->rcvto, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->sndto, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->dev, (uint64_t)sb.st_dev, __ATOMIC_RELAXED);
    __atomic_store_n(&h->ino, (uint64_t)sb.st_ino, __ATOMIC_RELAXED);
    /* Unlike hk_adopt, nothing is forgotten: fd is open and the same tty,
     * and a thread already parked on it (an adopter that won) must stay. */
    while (!(st & HK_MANAGED))
        if (__atomic_compare_exchange_n(&h->st, &st, (st & ~HK_HINTS) | HK_MANAGED | HK_POLLFIRST, 0,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            break;
    return 1;
}

void hk_mark_direct(int fd, int on)
{
    struct hk_fd *h = on ? hk_fd_get(fd) : hk_fd_find(fd);
    if (!h)
        return;
    if (on)
        __atomic_fetch_or(&h->st, HK_DIRECT, __ATOMIC_ACQ_REL);
    else
        __atomic_fetch_and(&h->st, ~HK_DIRECT, __ATOMIC_ACQ_REL);
    /* What RWF_NOWAIT answered was for the old mode (ext4 refuses it for
     * buffered writes only): ask again. */
    __atomic_fetch_and(&h->st, ~(HK_NOWAIT_R | HK_NOWAIT_W), __ATOMIC_ACQ_REL);
}

struct hk_fd *hk_mark_file(int fd, uint32_t bits)
{
    struct hk_fd *h = hk_fd_get(fd);
    if (!h)
        return NULL;
    uint32_t st = hk_state(h);
    while (!(st & HK_MANAGED))
        if (__atomic_compare_exchange_n(&h->st, &st, st | bits, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            break;
    return h;
}

void hk_drop(int fd)
{
    struct hk_fd *h = hk_fd_find(fd);
    if (h && hk_state(h)) {
        __atomic_store_n(&h->st, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&h->spec, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&h->rcvto, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&h->sndto, 0, __ATOMIC_RELAXED);
    }
    fern__io_forget(fd);
}

/* After a call that made `nfd` a copy of `fd`. */
static long hk_copied(int fd, long nfd)
{
    if (nfd >= 0) {
        struct hk_fd *h = hk_fd_find(fd);
        if (hk_state(h) & (HK_MANAGED | HK_HINTS))
            hk_adopt((int)nfd, h);
        else if (hk_state(hk_fd_find((int)nfd)))
            hk_drop((int)nfd);
    }
    return nfd;
}

/* A managed descriptor (a socket, a pipe) closes at once; anything else may
 * be a file whose last close flushes it (NFS, FUSE): on a green thread that
 * close goes off the worker (file.c). */
static HK_EARLY_BODY int hk_close(int fd);
HK_EARLY int close(int fd)
{
    if (HK_BEFORE_START())
        return (int)HK_EARLY_RET(SYS_close, fd, 0, 0, 0);
    return hk_close(fd);
}

/* close's hooked path: out of line, so that it is instrumented in a
 * sanitizer build (close itself is HK_EARLY). */
static int hk_close(int fd)
{
    uint32_t st = hk_state(hk_fd_find(fd));
    hk_drop(fd);
    if (!(st & HK_MANAGED) && hk_green()) {
        long a[6] = {fd, 0, 0, 0, 0, 0};
        HK_TSAN_ENTER();
        long r = fern__file_call(SYS_close, a);
        HK_TSAN_LEAVE();
        return (int)hk_ret(r);
    }
    return (int)hk_ret(hk_sys(SYS_close, fd));
}

int dup(int fd) { return (int)hk_ret(hk_copied(fd, hk_sys(SYS_dup, fd))); }

int dup3(int fd, int nfd, int flags)
{
    if (fd == nfd)
        return (int)hk_ret(-EINVAL);
    /* Whatever nfd was is closed by the kernel: wake its waiters first. */
    if (fd >= 0 && nfd >= 0 && hk_sys(SYS_fcntl, fd, F_GETFD) >= 0)
        hk_drop(nfd);
    return (int)hk_ret(hk_copied(fd, hk_sys(SYS_dup3, fd, nfd, flags)));
}

int dup2(int fd, int nfd)
{
    if (fd == nfd) {
        long r = hk_sys(SYS_fcntl, fd, F_GETFD);
        return (int)hk_ret(r < 0 ? r : fd);
    }
    return dup3(fd, nfd, 0);
}

static long hk_fcntl(int fd, int cmd, long arg)
{
    struct hk_fd *h;
    switch (cmd) {
    case F_GETFL: {
        long r = hk_sys(SYS_fcntl, fd, cmd);
        h = hk_fd_find(fd);
        /* socket.c's one-attempt flag is not the user's (it only ever sets
         * it on a description that was blocking). */
        if (r >= 0 && (hk_state(h) & HK_WINDOW))
            r &= ~(long)O_NONBLOCK;
        return r;
    }
    case F_SETFL: {
        long r = hk_sys(SYS_fcntl, fd, cmd, arg);
        if (r == 0 && !(hk_state(hk_fd_find(fd)) & HK_MANAGED))
            hk_mark_direct(fd, (arg & O_DIRECT) != 0); /* clears HK_NOWAIT_* too */
        return r;
    }
    case F_SETLKW:
    case F_OFD_SETLKW:
        return hk_fcntl_lockw(fd, cmd, arg); /* lock.c */
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
        return hk_copied(fd, hk_sys(SYS_fcntl, fd, cmd, arg));
    default:
        return hk_sys(SYS_fcntl, fd, cmd, arg);
    }
}

HK_EARLY int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    if (HK_BEFORE_START())
        return (int)HK_EARLY_RET(SYS_fcntl, fd, cmd, arg, 0);
    return (int)hk_ret(hk_fcntl(fd, cmd, arg));
}

int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return (int)hk_ret(hk_fcntl(fd, cmd, arg));
}

int pipe2(int fds[2], int flags)
{
    long r = hk_sys(SYS_pipe2, fds, flags);
    if (r == 0) {
        hk_adopt(fds[0], NULL);
        hk_adopt(fds[1], NULL);
    }
    return (int)hk_ret(r);
}

HK_EARLY int pipe(int fds[2])
{
    if (HK_BEFORE_START())
        return (int)HK_EARLY_RET(SYS_pipe2, fds, 0, 0, 0);
    return pipe2(fds, 0);
}

int epoll_create1(int flags)
{
    long r = hk_sys(SYS_epoll_create1, flags);
    if (r >= 0)
        hk_adopt((int)r, NULL);
    return (int)hk_ret(r);
}

int epoll_create(int size) { return size <= 0 ? (int)hk_ret(-EINVAL) : epoll_create1(0); }
