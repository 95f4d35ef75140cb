/* SPDX-License-Identifier: MIT */
/*
 * Sleeps: sleep, usleep, nanosleep, clock_nanosleep, thrd_sleep.
 *
 * On a green thread each becomes a timer of the runtime (fern_sleep_ns): the
 * worker runs other threads meanwhile. A green thread is never interrupted
 * by a signal (signals go to kernel threads), so these sleep the full
 * time and report no time left, unless the thread is cancelled (fern_cancel):
 * then they fail with ECANCELED (sleep returns the seconds asked for, errno
 * ECANCELED) and report all of the time left. clock_nanosleep on a CPU-time clock is not a
 * wait for wall time and passes through. On a plain thread each is the raw
 * system call, returning what libc returns (EINTR and the time left
 * included).
 */
#include "hook.h"

#include <threads.h>
#include <time.h>
#include <unistd.h>

static int bad_ts(const struct timespec *ts)
{
    return !ts || ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000;
}

static int64_t ts_ns(const struct timespec *ts)
{
    if (ts->tv_sec >= INT64_MAX / 1000000000 - 1)
        return INT64_MAX / 2; /* far enough: no overflow below */
    return ts->tv_sec * 1000000000ll + ts->tv_nsec;
}

int nanosleep(const struct timespec *req, struct timespec *rem)
{
    if (HK_LIKELY(!hk_green()))
        return (int)hk_ret(hk_sys(SYS_nanosleep, req, rem));
    if (bad_ts(req))
        return (int)hk_ret(req ? -EINVAL : -EFAULT);
    HK_TSAN_ENTER();
    int e = fern_sleep_ns(ts_ns(req));
    HK_TSAN_LEAVE();
    if (e) { /* cancelled (fern_cancel): all of it left */
        if (rem)
            *rem = *req;
        return (int)hk_ret(-e);
    }
    return 0;
}

int usleep(useconds_t us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    return nanosleep(&ts, NULL);
}

unsigned int sleep(unsigned int s)
{
    struct timespec ts = {s, 0};
    if (HK_LIKELY(!hk_green())) {
        long r = hk_sys(SYS_nanosleep, &ts, &ts);
        return r < 0 ? (unsigned)ts.tv_sec : 0; /* whole seconds left, as glibc */
    }
    HK_TSAN_ENTER();
    int e = fern_sleep_ns(ts_ns(&ts));
    HK_TSAN_LEAVE();
    if (e) { /* cancelled: every second left, errno says why */
        hk_ret(-e);
        return s;
    }
    return 0;
}

/* Returns an error number (0 on success), as POSIX says. */
int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem)
{
    int wall = clk == CLOCK_MONOTONIC || clk == CLOCK_REALTIME || clk == CLOCK_BOOTTIME ||
               clk == CLOCK_TAI;
    if (HK_LIKELY(!hk_green()) || !wall)
        return (int)-hk_sys(SYS_clock_nanosleep, clk, flags, req, rem);
    if (bad_ts(req))
        return req ? EINVAL : EFAULT;
    int64_t ns = ts_ns(req);
    if (flags & TIMER_ABSTIME) {
        struct timespec now;
        clock_gettime(clk, &now);
        ns -= ts_ns(&now);
    }
    int e = 0;
    if (ns > 0) {
        HK_TSAN_ENTER();
        e = fern_sleep_ns(ns);
        HK_TSAN_LEAVE();
    }
    if (e && rem && !(flags & TIMER_ABSTIME))
        *rem = *req;
    return e;
}

int thrd_sleep(const struct timespec *req, struct timespec *rem)
{
    int r = clock_nanosleep(CLOCK_REALTIME, 0, req, rem);
    return r == 0 ? 0 : r == EINTR ? -1 : -2;
}
