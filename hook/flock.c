/* SPDX-License-Identifier: MIT */
/*
 * File locks that wait: flock without LOCK_NB, and fcntl's F_SETLKW and
 * F_OFD_SETLKW (fd.c hands those here).
 *
 * A green thread first tries the lock without waiting (LOCK_NB, F_SETLK,
 * F_OFD_SETLK): an uncontended lock costs one system call. If it is held,
 * the waiting call runs on fern's blocking pool while the green thread is
 * parked. That is the same lock: flock and OFD locks belong to the open file
 * description and POSIX record locks to the process, never to a kernel
 * thread, so the helper that waits takes it for the caller. EDEADLK,
 * EINTR and the rest are the kernel's.
 */
#include "hook.h"

#include <fcntl.h>
#include <sys/file.h>

static long off_worker(long nr, long a0, long a1, long a2)
{
    long a[6] = {a0, a1, a2, 0, 0, 0};
    HK_TSAN_ENTER();
    long r = fern__file_call(nr, a);
    HK_TSAN_LEAVE();
    return r;
}

int flock(int fd, int op)
{
    if (HK_LIKELY(!hk_green()) || (op & (LOCK_NB | LOCK_UN)))
        return (int)hk_ret(hk_sys(SYS_flock, fd, op));
    long r = hk_sys(SYS_flock, fd, op | LOCK_NB);
    if (r != -EWOULDBLOCK)
        return (int)hk_ret(r);
    return (int)hk_ret(off_worker(SYS_flock, fd, op, 0));
}

long hk_fcntl_lockw(int fd, int cmd, long arg)
{
    if (HK_LIKELY(!hk_green()))
        return hk_sys(SYS_fcntl, fd, cmd, arg);
    long r = hk_sys(SYS_fcntl, fd, cmd == F_SETLKW ? F_SETLK : F_OFD_SETLK, arg);
    if (r != -EAGAIN && r != -EACCES)
        return r;
    return off_worker(SYS_fcntl, fd, cmd, arg);
}
