/* SPDX-License-Identifier: MIT */
/*
 * Copies between descriptors in the kernel: sendfile, splice, tee,
 * copy_file_range.
 *
 * They have no per-call non-blocking form for both ends (SPLICE_F_NONBLOCK
 * makes only the pipe side non-blocking, sendfile has none, and the file
 * side may wait for the disk), so on a green thread each runs as the same
 * system call on fern's blocking pool while the green thread is parked. One
 * exception, for the usual server loop: sendfile into a descriptor the user
 * made non-blocking cannot wait on its socket and is made on the worker,
 * as libc makes it. Results and errors are the kernel's.
 */
#include "hook.h"

#include <fcntl.h>
#include <sys/sendfile.h>

static long off_worker(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
    long a[6] = {a0, a1, a2, a3, a4, a5};
    HK_TSAN_ENTER();
    long r = fern__file_call(nr, a);
    HK_TSAN_LEAVE();
    return r;
}

ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
    if (HK_LIKELY(!hk_green()) || hk_desc_nonblock(out) == 1)
        return hk_ret(hk_sys(SYS_sendfile, out, in, off, n));
    return hk_ret(off_worker(SYS_sendfile, out, in, (long)off, (long)n, 0, 0));
}
ssize_t sendfile64(int out, int in, off_t *off, size_t n) { return sendfile(out, in, off, n); }

ssize_t splice(int in, off_t *ioff, int out, off_t *ooff, size_t n, unsigned flags)
{
    if (HK_LIKELY(!hk_green()))
        return hk_ret(hk_sys(SYS_splice, in, ioff, out, ooff, n, flags));
    return hk_ret(off_worker(SYS_splice, in, (long)ioff, out, (long)ooff, (long)n, flags));
}

ssize_t tee(int in, int out, size_t n, unsigned flags)
{
    if (HK_LIKELY(!hk_green()))
        return hk_ret(hk_sys(SYS_tee, in, out, n, flags));
    return hk_ret(off_worker(SYS_tee, in, out, (long)n, flags, 0, 0));
}

ssize_t copy_file_range(int in, off_t *ioff, int out, off_t *ooff, size_t n, unsigned flags)
{
    if (HK_LIKELY(!hk_green()))
        return hk_ret(hk_sys(SYS_copy_file_range, in, ioff, out, ooff, n, flags));
    return hk_ret(off_worker(SYS_copy_file_range, in, (long)ioff, out, (long)ooff, (long)n, flags));
}
