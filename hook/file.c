/* SPDX-License-Identifier: MIT */
/*
 * Files: the calls that may wait for a disk (or a network file system), made
 * off the worker for a green thread. pread, pwrite and their vector forms
 * (read, write, readv, writev of a file come here from core.c), fsync,
 * fdatasync, sync_file_range, open, openat, creat (and _FORTIFY_SOURCE's
 * __open_2, __openat_2), close of a file, stat, lstat, fstatat, statx,
 * unlink, unlinkat, rmdir, rename, renameat, renameat2, mkdir, mkdirat,
 * truncate, ftruncate, fallocate.
 *
 * On a plain thread each is the raw system call libc makes. On a green
 * thread:
 *  - a read or write is first made on the worker with RWF_NOWAIT
 *    (preadv2/pwritev2), which the page cache serves on the worker (at
 *    ~1.2x a plain pread64's cost: below, the hints and the page-cache
 *    streak that skip the attempt where it is known to fail or to
 *    succeed); only if the kernel answers EAGAIN (it would wait for the disk) or
 *    EOPNOTSUPP (this file system cannot promise not to wait: ext4's
 *    buffered writes, for one) and the descriptor is a regular file or a
 *    block device does the call go to libfern (fern__file_call: io_uring,
 *    or the blocking pool where the kernel refuses io_uring); anything else
 *    (a pipe, a tty the hook does not manage) gets the plain call, as before;
 *    A descriptor opened (or switched with F_SETFL) O_DIRECT skips the first
 *    attempt: it has no cache to hit, and its RWF_NOWAIT read would still
 *    wait for the device;
 *  - the other calls have no "would it wait?" question to ask, so they go to
 *    libfern at once. The stat family goes as statx (io_uring has it; the
 *    answer is converted to struct stat); fstat of an open descriptor reads
 *    no path and stays on the worker.
 * The calls without a path of their own on every architecture (open,
 * unlink, rename, mkdir, rmdir, creat, stat, lstat) are made as their *at
 * forms, which is what libc does too.
 */
#include "hook.h"

#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

/* nr(a) for a green thread, off the worker. */
static long off_worker(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
    long a[6] = {a0, a1, a2, a3, a4, a5};
    HK_TSAN_ENTER();
    long r = fern__file_call(nr, a);
    HK_TSAN_LEAVE();
    return r;
}

/* A call with no cheap first attempt: raw on a plain thread, else off the
 * worker. */
#define HK_FILE(nr, ...) hk_file_((nr), hk_filen_(__VA_ARGS__, 0, 0, 0, 0, 0, 0))
#define hk_filen_(a, b, c, d, e, f, ...) (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f)
static inline long hk_file_6(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
    if (HK_LIKELY(!hk_green()))
        return hk_sys6(nr, a0, a1, a2, a3, a4, a5);
    return off_worker(nr, a0, a1, a2, a3, a4, a5);
}
#define hk_file_(nr, ...) hk_file_6(nr, __VA_ARGS__)

/* ---- what the hook remembers of a file ----
 *
 * Per descriptor (hook.h's hints, on the fd's entry):
 *  - HK_REGULAR, from one fstat: a regular file or a block device. A first
 *    attempt that would wait then goes off the worker without asking fstat
 *    again; the first page-cache hit of a descriptor asks it once (HK_SEEN).
 *  - HK_NOWAIT_R / HK_NOWAIT_W: RWF_NOWAIT was refused (EOPNOTSUPP; ext4
 *    refuses it for every buffered write), so that direction goes off the
 *    worker at once: one system call per write instead of three.
 *  - The page-cache streak (hk_fd.spec): how many positioned reads in a row
 *    the cache served. preadv2(RWF_NOWAIT) costs ~1.2x a plain pread64 on
 *    6.18 (importing the iovec, not the flag: preadv2 without flags costs
 *    the same), so once a descriptor has earned it (SPEC_BASE hits in a
 *    row) its preads are made as the plain call on the worker, timed with
 *    the cycle counter. One that took longer than SPEC_US (plus 1 us per
 *    KiB asked) held the worker too long, a miss or not (a 4 KiB hit takes
 *    ~0.7 us; a pread of a cached block passed 20 us ~300-700 times per
 *    million on a loaded 2-CPU VM, 100 us 6-23 times: the host's jitter).
 *    Then the streak starts again, and its price (SPEC_BASE << k hits)
 *    follows the plain reads made since it was earned: fewer than
 *    SPEC_RUN_SHORT (a file that misses) doubles it, up to k = SPEC_KMAX,
 *    where a file that misses now and then never earns it again; more than
 *    SPEC_RUN_LONG (jitter) halves it. So a speculative read holds a worker
 *    longer than SPEC_US at most once per SPEC_RUN_SHORT fast ones, plus
 *    SPEC_KMAX times. SPEC_RUN_SHORT is about where the ~0.15 us each plain
 *    read saves pays for one worker held 100 us. Only positioned reads: a pipe, a socket or a tty
 *    a stale hint took for a file answers pread with ESPIPE at once, where a
 *    plain read would wait.
 */
#define SPEC_BASE 64u
#define SPEC_KMAX 10u
#ifndef SPEC_US /* -DSPEC_US=1000000u: callgrind (slow system calls) measures the streak */
#define SPEC_US   100u
#endif
#define SPEC_RUN_SHORT 1024u
#define SPEC_RUN_LONG  16384u
#define SPEC_HITS(w) ((w) & 0xffffffu)
#define SPEC_K(w)    ((w) >> 24)

#if defined(__x86_64__)
static inline uint64_t hk_cycles(void) { return __builtin_ia32_rdtsc(); }
#define HK_SPEC 1
#elif defined(__aarch64__)
static inline uint64_t hk_cycles(void)
{
    uint64_t v;
    __asm__ volatile("isb; mrs %0, cntvct_el0" : "=r"(v) : : "memory");
    return v;
}
#define HK_SPEC 1
#else
#define HK_SPEC 0
#endif

#if HK_SPEC
/* The cycle counter's ticks per microsecond, measured against
 * CLOCK_MONOTONIC over the first 2 ms after the first ask; 0 until then
 * (no streak is acted on meanwhile). Racing callers compute the same. */
static uint64_t cal_t0, cal_ns0, cal_tpu;
static __attribute__((noinline)) uint64_t calibrate(void)
{
    uint64_t r;
    uint64_t t = hk_cycles();
    int64_t ns = fern_now_ns();
    uint64_t t0 = __atomic_load_n(&cal_t0, __ATOMIC_ACQUIRE);
    if (!t0) {
        uint64_t zero = 0;
        if (__atomic_compare_exchange_n(&cal_t0, &zero, t ? t : 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            __atomic_store_n(&cal_ns0, (uint64_t)ns, __ATOMIC_RELEASE);
        return 0;
    }
    uint64_t ns0 = __atomic_load_n(&cal_ns0, __ATOMIC_ACQUIRE);
    if (!ns0 || (uint64_t)ns < ns0 + 2000000)
        return 0;
    r = (t - t0) * 1000 / ((uint64_t)ns - ns0);
    if (!r)
        r = 1;
    __atomic_store_n(&cal_tpu, r, __ATOMIC_RELAXED);
    return r;
}
static inline uint64_t ticks_per_us(void)
{
    uint64_t r = __atomic_load_n(&cal_tpu, __ATOMIC_RELAXED);
    return HK_LIKELY(r) ? r : calibrate();
}
#endif

static void spec_hit(struct hk_fd *h)
{
    uint32_t w = __atomic_load_n(&h->spec, __ATOMIC_RELAXED);
    if (SPEC_HITS(w) < 0xffffffu)
        __atomic_store_n(&h->spec, w + 1, __ATOMIC_RELAXED);
}

/* A speculative read held the worker too long. The plain reads since the
 * streak was earned (the run) say whether it was the file or the host: a
 * short run, a file that misses, raises the price; a long one, jitter now
 * and then, lowers it. Either way the streak starts again. */
static void spec_slow(struct hk_fd *h)
{
    uint32_t w = __atomic_load_n(&h->spec, __ATOMIC_RELAXED), k = SPEC_K(w);
    uint32_t run = SPEC_HITS(w) - (SPEC_BASE << k);
    if (run < SPEC_RUN_SHORT && k < SPEC_KMAX)
        k++;
    else if (run >= SPEC_RUN_LONG && k > 0)
        k--;
    __atomic_store_n(&h->spec, k << 24, __ATOMIC_RELAXED);
}

#if HK_SPEC
/* Has fd (entry h, state st) earned the streak for a read of len bytes?
 * The cycles that read may take, or 0 for no (not a regular file, O_DIRECT,
 * RWF_NOWAIT refused, too few hits in a row, the clock not calibrated). */
static inline uint64_t spec_on(struct hk_fd *h, uint32_t st, size_t len)
{
    if ((st & (HK_REGULAR | HK_DIRECT | HK_NOWAIT_R)) != HK_REGULAR)
        return 0;
    uint32_t w = __atomic_load_n(&h->spec, __ATOMIC_RELAXED);
    if (SPEC_HITS(w) < SPEC_BASE << SPEC_K(w))
        return 0;
    return ticks_per_us() * (SPEC_US + len / 1024);
}

/* A read of the streak: the plain call c on the worker, timed against
 * limit cycles. */
static inline long spec_read(struct hk_fd *h, const struct hk_call *c, uint64_t limit)
{
    uint64_t t0 = hk_cycles();
    long r = hk_do(c);
    int slow = hk_cycles() - t0 > limit;
    if (HK_LIKELY(!slow))
        spec_hit(h);
    else
        spec_slow(h);
    fern__file_streak(slow);
    return r;
}
#endif

static int is_positioned(long nr) { return nr == SYS_pread64 || nr == SYS_preadv || nr == SYS_preadv2; }

/* The bytes a preadv2 first attempt asks for. */
static size_t ask_len(const struct hk_call *nw)
{
    const struct iovec *v = (const struct iovec *)nw->a[1];
    size_t n = 0;
    for (long i = 0; i < nw->a[2]; i++)
        n += v[i].iov_len;
    return n;
}

/* An fd the first attempt could not serve: is it a file (HK_REGULAR, kept)? */
static int file_kind(int fd, struct stat *sb)
{
    if (hk_sys(SYS_fstat, fd, sb) < 0)
        return -1;
    return S_ISREG(sb->st_mode) || S_ISBLK(sb->st_mode);
}

long hk_file_io(int fd, const struct hk_call *c, const struct hk_call *nw)
{
    struct hk_fd *h = hk_fd_find(fd);
    uint32_t st = hk_state(h);
    int wr = nw->nr == SYS_pwritev2;
    /* O_DIRECT has no page cache to hit, and its RWF_NOWAIT read still
     * waits for the device: straight off the worker. So is a direction
     * whose RWF_NOWAIT this file refused. */
    if ((st & HK_DIRECT) || ((st & HK_REGULAR) && (st & (wr ? HK_NOWAIT_W : HK_NOWAIT_R))))
        return off_worker(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
#if HK_SPEC
    if (!wr && is_positioned(c->nr)) {
        uint64_t limit = spec_on(h, st, ask_len(nw));
        if (limit)
            return spec_read(h, c, limit);
    }
#endif
    /* Without preadv2/pwritev2 (qemu-user: the runtime's probe) there is no
     * first attempt to make: as for EOPNOTSUPP. */
    long r = -EOPNOTSUPP;
    if (HK_LIKELY(fern__file_rwf())) {
        r = hk_do(nw);
        if (HK_LIKELY(r != -EAGAIN && r != -EOPNOTSUPP)) {
            if (r >= 0) {
                fern__file_nowait_hit();
                if (st & HK_REGULAR) {
                    if (!wr)
                        spec_hit(h);
                } else if (!(st & HK_SEEN) && hk_mark_file(fd, 0)) {
                    /* A descriptor's first hit: is it a file (once)? */
                    struct stat sb;
                    int k = file_kind(fd, &sb);
                    if (k >= 0)
                        hk_mark_file(fd, HK_SEEN | (k ? HK_REGULAR : 0));
                }
            }
            return r;
        }
    }
    if (st & HK_REGULAR) {
        if (r == -EOPNOTSUPP)
            hk_mark_file(fd, wr ? HK_NOWAIT_W : HK_NOWAIT_R);
        else if (!wr) /* a miss: the streak starts again */
            __atomic_store_n(&h->spec, __atomic_load_n(&h->spec, __ATOMIC_RELAXED) & 0xff000000u,
                             __ATOMIC_RELAXED);
        return off_worker(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
    }
    struct stat sb;
    int k = file_kind(fd, &sb);
    if (k < 0)
        return hk_do(c);
    if (S_ISCHR(sb.st_mode)) {
        /* A tty or pty (opened with open, so never managed): no per-call
         * non-blocking form, so it joins the managed descriptors as
         * poll-first (core.c), and the thread parks until it is ready.
         * Other character devices (/dev/null, /dev/urandom, ...) get the
         * plain call, as before. */
        if (!hk_adopt_tty(fd))
            return hk_do(c); /* not a tty, or no entry for it (out of memory) */
        return HK_ADOPTED;
    }
    if (!k)
        return hk_do(c); /* not a file: the plain call, as libc makes it */
    hk_mark_file(fd, HK_SEEN | HK_REGULAR |
                         (r == -EOPNOTSUPP && fern__file_rwf() ? (wr ? HK_NOWAIT_W : HK_NOWAIT_R) : 0));
    return off_worker(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
}

/* ---- positioned reads and writes ---- */

/* pread / pwrite of n bytes at off (vectors: iov, cnt; flags: preadv2's). */
static long prw_green(long nr, int fd, const struct iovec *iov, long cnt, long off, int flags,
                      const struct hk_call *c)
{
    struct hk_call nw = {nr, {fd, (long)iov, cnt, off, 0, flags | RWF_NOWAIT}};
    long r = hk_file_io(fd, c, &nw);
    return r == HK_ADOPTED ? hk_do(c) : r; /* a positioned call on a tty: the kernel's answer */
}

static long prw(long nr, int fd, const struct iovec *iov, long cnt, long off, int flags,
                const struct hk_call *c)
{
    if (HK_LIKELY(!hk_green()) || (flags & RWF_NOWAIT))
        return hk_do(c);
    return prw_green(nr, fd, iov, cnt, off, flags, c);
}

/* pread asks the streak first, inline: on a descriptor the page cache keeps
 * serving, a green thread's pread is the plain call plus a few loads, two
 * cycle-counter reads and a count (docs/hooks.md's figures). */
ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    struct hk_call c = {SYS_pread64, {fd, (long)buf, (long)n, (long)off}};
    if (HK_LIKELY(!hk_green()))
        return hk_ret(hk_do(&c));
#if HK_SPEC
    struct hk_fd *h = hk_fd_find(fd);
    uint64_t limit = h ? spec_on(h, hk_state(h), n) : 0;
    if (limit)
        return hk_ret(spec_read(h, &c, limit));
#endif
    struct iovec v = {buf, n};
    return hk_ret(prw_green(SYS_preadv2, fd, &v, 1, (long)off, 0, &c));
}
ssize_t pread64(int fd, void *buf, size_t n, off_t off) { return pread(fd, buf, n, off); }

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    struct hk_call c = {SYS_pwrite64, {fd, (long)buf, (long)n, (long)off}};
    struct iovec v = {(void *)buf, n};
    return hk_ret(prw(SYS_pwritev2, fd, &v, 1, (long)off, 0, &c));
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
    struct hk_call c = {SYS_preadv, {fd, (long)iov, cnt, (long)off, 0}};
    return hk_ret(prw(SYS_preadv2, fd, iov, cnt, (long)off, 0, &c));
}
ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off) { return preadv(fd, iov, cnt, off); }

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    struct hk_call c = {SYS_pwritev, {fd, (long)iov, cnt, (long)off, 0}};
    return hk_ret(prw(SYS_pwritev2, fd, iov, cnt, (long)off, 0, &c));
}
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off) { return pwritev(fd, iov, cnt, off); }

ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    struct hk_call c = {SYS_preadv2, {fd, (long)iov, cnt, (long)off, 0, flags}};
    return hk_ret(prw(SYS_preadv2, fd, iov, cnt, (long)off, flags, &c));
}
ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    return preadv2(fd, iov, cnt, off, flags);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    struct hk_call c = {SYS_pwritev2, {fd, (long)iov, cnt, (long)off, 0, flags}};
    return hk_ret(prw(SYS_pwritev2, fd, iov, cnt, (long)off, flags, &c));
}
ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    return pwritev2(fd, iov, cnt, off, flags);
}

ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    if (n > buflen)
        hk_overflow();
    return pread(fd, buf, n, off);
}
ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    return __pread_chk(fd, buf, n, off, buflen);
}

/* ---- syncing ---- */

int fsync(int fd) { return (int)hk_ret(HK_FILE(SYS_fsync, fd)); }
int fdatasync(int fd) { return (int)hk_ret(HK_FILE(SYS_fdatasync, fd)); }
int sync_file_range(int fd, off_t off, off_t n, unsigned flags)
{
    return (int)hk_ret(HK_FILE(SYS_sync_file_range, fd, off, n, flags));
}

/* ---- opening ---- */

/* A new descriptor from a file call: a hook entry left by a socket closed
 * behind the hook's back must not make it look managed. */
static long fresh(long fd, int flags)
{
    if (fd >= 0) {
        if (hk_state(hk_fd_find((int)fd)))
            hk_drop((int)fd);
        if (flags & O_DIRECT)
            hk_mark_direct((int)fd, 1);
    }
    return fd;
}

static int wants_mode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

int openat(int dfd, const char *path, int flags, ...)
{
    unsigned mode = 0;
    if (wants_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, unsigned);
        va_end(ap);
    }
    return (int)hk_ret(fresh(HK_FILE(SYS_openat, dfd, path, flags, mode), flags));
}

HK_EARLY int open(const char *path, int flags, ...)
{
    unsigned mode = 0;
    if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) { /* wants_mode, not called */
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, unsigned);
        va_end(ap);
    }
    if (HK_BEFORE_START())
        return (int)HK_EARLY_RET(SYS_openat, AT_FDCWD, path, flags, mode);
    return (int)hk_ret(fresh(HK_FILE(SYS_openat, AT_FDCWD, path, flags, mode), flags));
}

int open64(const char *path, int flags, ...)
{
    unsigned mode = 0;
    if (wants_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, unsigned);
        va_end(ap);
    }
    return open(path, flags, mode);
}

int openat64(int dfd, const char *path, int flags, ...)
{
    unsigned mode = 0;
    if (wants_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, unsigned);
        va_end(ap);
    }
    return openat(dfd, path, flags, mode);
}

int creat(const char *path, mode_t mode) { return open(path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) { return creat(path, mode); }

/* _FORTIFY_SOURCE: an open that may create a file must say its mode. */
static void hk_open_misuse(int flags)
{
    if (wants_mode(flags)) {
        static const char msg[] =
            "*** invalid open call: O_CREAT or O_TMPFILE without mode ***: terminated\n";
        hk_sys(SYS_write, 2, msg, sizeof msg - 1);
        abort();
    }
}
int __open_2(const char *path, int flags)
{
    hk_open_misuse(flags);
    return open(path, flags);
}
int __open64_2(const char *path, int flags) { return __open_2(path, flags); }
int __openat_2(int dfd, const char *path, int flags)
{
    hk_open_misuse(flags);
    return openat(dfd, path, flags);
}
int __openat64_2(int dfd, const char *path, int flags) { return __openat_2(dfd, path, flags); }

/* ---- the stat family, as statx ---- */

static void from_statx(struct stat *st, const struct statx *x)
{
    memset(st, 0, sizeof *st);
    st->st_dev = makedev(x->stx_dev_major, x->stx_dev_minor);
    st->st_ino = x->stx_ino;
    st->st_mode = x->stx_mode;
    st->st_nlink = x->stx_nlink;
    st->st_uid = x->stx_uid;
    st->st_gid = x->stx_gid;
    st->st_rdev = makedev(x->stx_rdev_major, x->stx_rdev_minor);
    st->st_size = (off_t)x->stx_size;
    st->st_blksize = (blksize_t)x->stx_blksize;
    st->st_blocks = (blkcnt_t)x->stx_blocks;
    st->st_atim.tv_sec = x->stx_atime.tv_sec;
    st->st_atim.tv_nsec = x->stx_atime.tv_nsec;
    st->st_mtim.tv_sec = x->stx_mtime.tv_sec;
    st->st_mtim.tv_nsec = x->stx_mtime.tv_nsec;
    st->st_ctim.tv_sec = x->stx_ctime.tv_sec;
    st->st_ctim.tv_nsec = x->stx_ctime.tv_nsec;
}

int fstatat(int dfd, const char *path, struct stat *st, int flags)
{
    if (HK_LIKELY(!hk_green()))
        return (int)hk_ret(hk_sys(SYS_newfstatat, dfd, path, st, flags));
    struct statx x;
    long r = off_worker(SYS_statx, dfd, (long)path, flags | AT_STATX_SYNC_AS_STAT,
                        STATX_BASIC_STATS, (long)&x, 0);
    if (r == 0)
        from_statx(st, &x);
    return (int)hk_ret(r);
}
/* The 64 forms: struct stat64 is struct stat on every 64-bit target. */
int fstatat64(int dfd, const char *path, struct stat64 *st, int flags)
{
    return fstatat(dfd, path, (struct stat *)st, flags);
}
int stat(const char *path, struct stat *st) { return fstatat(AT_FDCWD, path, st, 0); }
int stat64(const char *path, struct stat64 *st) { return fstatat(AT_FDCWD, path, (struct stat *)st, 0); }
int lstat(const char *path, struct stat *st) { return fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW); }
int lstat64(const char *path, struct stat64 *st)
{
    return fstatat(AT_FDCWD, path, (struct stat *)st, AT_SYMLINK_NOFOLLOW);
}

int statx(int dfd, const char *path, int flags, unsigned mask, struct statx *x)
{
    return (int)hk_ret(HK_FILE(SYS_statx, dfd, path, flags, mask, x));
}

/* ---- names in directories ---- */

int unlinkat(int dfd, const char *path, int flags)
{
    return (int)hk_ret(HK_FILE(SYS_unlinkat, dfd, path, flags));
}
int unlink(const char *path) { return unlinkat(AT_FDCWD, path, 0); }
int rmdir(const char *path) { return unlinkat(AT_FDCWD, path, AT_REMOVEDIR); }

int renameat2(int ofd, const char *from, int nfd, const char *to, unsigned flags)
{
    return (int)hk_ret(HK_FILE(SYS_renameat2, ofd, from, nfd, to, flags));
}
int renameat(int ofd, const char *from, int nfd, const char *to) { return renameat2(ofd, from, nfd, to, 0); }
int rename(const char *from, const char *to) { return renameat2(AT_FDCWD, from, AT_FDCWD, to, 0); }

int mkdirat(int dfd, const char *path, mode_t mode) { return (int)hk_ret(HK_FILE(SYS_mkdirat, dfd, path, mode)); }
HK_EARLY int mkdir(const char *path, mode_t mode)
{
    if (HK_BEFORE_START())
        return (int)HK_EARLY_RET(SYS_mkdirat, AT_FDCWD, path, mode, 0);
    return mkdirat(AT_FDCWD, path, mode);
}

/* ---- sizes ---- */

int ftruncate(int fd, off_t len) { return (int)hk_ret(HK_FILE(SYS_ftruncate, fd, len)); }
int ftruncate64(int fd, off64_t len) { return ftruncate(fd, len); }
int truncate(const char *path, off_t len) { return (int)hk_ret(HK_FILE(SYS_truncate, path, len)); }
int truncate64(const char *path, off64_t len) { return truncate(path, len); }
int fallocate(int fd, int mode, off_t off, off_t len)
{
    return (int)hk_ret(HK_FILE(SYS_fallocate, fd, mode, off, len));
}
int fallocate64(int fd, int mode, off64_t off, off64_t len) { return fallocate(fd, mode, off, len); }
