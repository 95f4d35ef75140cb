/* SPDX-License-Identifier: MIT */
/*
 * File system calls off the worker: what fern_pread / fern_pwrite and
 * fern-hook's file calls (hook/file.c, through fern__file_call) run when a
 * green thread's call could block on the disk.
 *
 * The cheap case first: a read that the page cache can serve is made on the
 * worker as preadv2(RWF_NOWAIT), which costs what the plain call costs and
 * says EAGAIN instead of waiting for the disk; only then does the call go
 * asynchronous. Asynchronous means io_uring (uring.c) when the probe found
 * it and the kernel has the operation, else the blocking pool
 * (blocking.c): either way the green thread parks and the worker runs on.
 * From a plain thread every call is the plain system call.
 *
 * The operations io_uring has are mapped one to one (file_sqe); the rest
 * (ftruncate, and anything a kernel lacks) run as the same raw system call
 * on a pool thread. Results are the kernel's: the value, or -errno.
 */
#include "io.h"
#include "io/hookapi.h"
#include "arch/syscall.h"

#include <linux/io_uring.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* Does this kernel have preadv2/pwritev2, the calls a page-cache hit is
 * served by (RWF_NOWAIT)? io_file_probe asks once when the runtime starts,
 * beside uring.c's probe: both are missing under qemu-user (ENOSYS), where
 * every file read and write then goes off the worker at once (hook/file.c,
 * file_prw) and a pipe or tty the hook manages waits with poll first
 * (hook/core.c). Written before any green thread runs, read after. */
static bool file_rwf = true;

void io_file_probe(void)
{
    /* A bad descriptor: the kernel that has the call says EBADF before
     * looking at anything else; one that lacks it says ENOSYS. Raw calls:
     * a successful fern_init leaves errno as the caller had it. */
    bool r = arch_syscall6(SYS_preadv2, -1, 0, 0, 0, 0, (long)RWF_NOWAIT) != -ENOSYS;
    bool w = arch_syscall6(SYS_pwritev2, -1, 0, 0, 0, 0, (long)RWF_NOWAIT) != -ENOSYS;
    STORE(&file_rwf, r && w);
}

bool io_file_rwf(void) { return LOAD_RELAXED(&file_rwf); }

static long raw6(long nr, const long *a)
{
    long r = syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
    return r < 0 ? -errno : r;
}

/* The SQE for system call nr(a), or false if io_uring has no such op. */
static bool file_sqe(long nr, const long *a, struct io_uring_sqe *q)
{
    memset(q, 0, sizeof *q);
    q->fd = (int)a[0];
    switch (nr) {
    case SYS_read:
    case SYS_write:
    case SYS_pread64:
    case SYS_pwrite64:
        q->opcode = nr == SYS_read || nr == SYS_pread64 ? IORING_OP_READ : IORING_OP_WRITE;
        q->addr = (uint64_t)a[1];
        q->len = (uint32_t)a[2];
        if ((size_t)a[2] > UINT32_MAX)
            return false;
        q->off = nr == SYS_read || nr == SYS_write ? (uint64_t)-1 : (uint64_t)a[3];
        return true;
    case SYS_readv:
    case SYS_writev:
    case SYS_preadv:
    case SYS_pwritev:
    case SYS_preadv2:
    case SYS_pwritev2:
        q->opcode = nr == SYS_readv || nr == SYS_preadv || nr == SYS_preadv2 ? IORING_OP_READV
                                                                            : IORING_OP_WRITEV;
        q->addr = (uint64_t)a[1];
        q->len = (uint32_t)a[2];
        q->off = nr == SYS_readv || nr == SYS_writev ? (uint64_t)-1 : (uint64_t)a[3];
        if (nr == SYS_preadv2 || nr == SYS_pwritev2)
            q->rw_flags = (int)(a[5] & ~RWF_NOWAIT);
        return true;
    case SYS_fsync:
    case SYS_fdatasync:
        q->opcode = IORING_OP_FSYNC;
        q->fsync_flags = nr == SYS_fdatasync ? IORING_FSYNC_DATASYNC : 0;
        return true;
    case SYS_sync_file_range:
        q->opcode = IORING_OP_SYNC_FILE_RANGE;
        q->off = (uint64_t)a[1];
        q->len = (uint32_t)a[2];
        q->sync_range_flags = (uint32_t)a[3];
        return (uint64_t)a[2] <= UINT32_MAX;
    case SYS_fallocate:
        q->opcode = IORING_OP_FALLOCATE;
        q->len = (uint32_t)a[1];
        q->off = (uint64_t)a[2];
        q->addr = (uint64_t)a[3];
        return true;
    case SYS_openat:
        q->opcode = IORING_OP_OPENAT;
        q->addr = (uint64_t)a[1];
        q->open_flags = (uint32_t)a[2];
        q->len = (uint32_t)a[3];
        return true;
    case SYS_close:
        q->opcode = IORING_OP_CLOSE;
        return true;
    case SYS_statx:
        q->opcode = IORING_OP_STATX;
        q->addr = (uint64_t)a[1];
        q->statx_flags = (uint32_t)a[2];
        q->len = (uint32_t)a[3];
        q->off = (uint64_t)a[4];
        return true;
    case SYS_unlinkat:
        q->opcode = IORING_OP_UNLINKAT;
        q->addr = (uint64_t)a[1];
        q->unlink_flags = (uint32_t)a[2];
        return true;
    case SYS_renameat2:
        q->opcode = IORING_OP_RENAMEAT;
        q->addr = (uint64_t)a[1];
        q->len = (uint32_t)a[2];
        q->addr2 = (uint64_t)a[3];
        q->rename_flags = (uint32_t)a[4];
        return true;
    case SYS_mkdirat:
        q->opcode = IORING_OP_MKDIRAT;
        q->addr = (uint64_t)a[1];
        q->len = (uint32_t)a[2];
        return true;
    default:
        return false;
    }
}

struct sysjob {
    long nr;
    const long *a;
    long res;
};

static void *sysjob_run(void *arg)
{
    struct sysjob *j = arg;
    j->res = raw6(j->nr, j->a);
    return NULL;
}

long io_file_call(long nr, const long *a)
{
    if (!thread_current())
        return raw6(nr, a);
    struct uop op;
    if (file_sqe(nr, a, &op.sqe) && uring_has(op.sqe.opcode) && uring_run(&op) == 0) {
        /* EAGAIN is not an answer a blocking call gives for a file (the
         * kernel may give it when its io-wq cannot take the request), and
         * under load this kernel has been seen to answer EFAULT for a
         * buffered read into a valid buffer (a parked green thread's
         * stack; 36-178 of ~150000 reads in bench/hooks/hooks.py's
         * hook-file): the pool makes the plain call, which gives the true
         * answer (a bad buffer still gets EFAULT there). A positioned read
         * that came back short of a regular file's end asks for the rest
         * there too. */
        /* io_uring will not close an io_uring descriptor (a ring the
         * program made with liburing, say): it answers EBADF, and the plain
         * close then does it (or says EBADF again for a bad number). */
        if (nr == SYS_close && op.res == -EBADF)
            return raw6(nr, a);
        if (op.res != -EAGAIN && op.res != -EFAULT) {
            if (op.sqe.opcode == IORING_OP_READ && nr == SYS_pread64 && op.res > 0 &&
                (uint32_t)op.res < op.sqe.len) {
                long rest[6] = {a[0], a[1] + op.res, a[2] - op.res, a[3] + op.res, 0, 0};
                long more = io_file_call(SYS_pread64, rest);
                return more > 0 ? op.res + more : op.res;
            }
            return op.res;
        }
    }
    uring_count_pool();
    struct sysjob j = {nr, a, 0};
    fern_blocking(sysjob_run, &j);
    return j.res;
}

long fern__file_call(long nr, const long a[6]) { return io_file_call(nr, a); }

void fern__file_nowait_hit(void) { uring_count_nowait(); }

void fern__file_streak(int slow) { uring_count_streak(slow); }

int fern__file_rwf(void) { return io_file_rwf(); }

/* pread or pwrite at offset: the page cache on the worker, else off it. */
static ssize_t file_prw(long nr, int fd, void *buf, size_t n, int64_t off)
{
    fern_thread *self = thread_current();
    if (self) {
        if (cancel_due(self)) { /* a cancellation point before the call only */
            errno_set(ECANCELED);
            return -1;
        }
        if (io_file_rwf()) {
            struct iovec v = {buf, n};
            long r = syscall(nr == SYS_pread64 ? SYS_preadv2 : SYS_pwritev2, fd, &v, 1, (long)off,
                             0L, (long)RWF_NOWAIT);
            if (r >= 0) {
                uring_count_nowait();
                return r;
            }
            if (errno != EAGAIN && errno != EOPNOTSUPP)
                return -1;
        }
        long a[6] = {fd, (long)buf, (long)n, (long)off, 0, 0};
        long r = io_file_call(nr, a);
        if (r < 0) {
            errno_set((int)-r);
            return -1;
        }
        return r;
    }
    return sys_err(nr == SYS_pread64 ? sys_pread(fd, buf, n, off) : sys_pwrite(fd, buf, n, off));
}

ssize_t fern_pread(int fd, void *buf, size_t n, int64_t offset)
{
    if (offset < 0) {
        errno = EINVAL;
        return -1;
    }
    return file_prw(SYS_pread64, fd, buf, n, offset);
}

ssize_t fern_pwrite(int fd, const void *buf, size_t n, int64_t offset)
{
    if (offset < 0) {
        errno = EINVAL;
        return -1;
    }
    return file_prw(SYS_pwrite64, fd, (void *)buf, n, offset);
}
