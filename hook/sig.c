/* SPDX-License-Identifier: MIT */
/*
 * Waiting for signals: sigwait, sigwaitinfo, sigtimedwait.
 *
 * As in any multi-threaded program, the signals waited for must be blocked
 * in every thread (the workers too: block them before the runtime starts),
 * else the kernel delivers them to a thread that lets them in. A green
 * thread first asks with a zero timeout (a signal already pending costs one
 * system call); then it parks on a signalfd for the set, the hook's own
 * (non-blocking, closed at the end), which becomes readable when one of the
 * signals is pending for the process; when woken it asks with a zero
 * timeout again, which takes the signal exactly as the blocking call would
 * (the signalfd is only the edge to wait on: another waiter may have taken
 * the signal first, and then the thread parks again). sigtimedwait's
 * timeout is the park's deadline: EAGAIN when it passes. A signal directed
 * at one kernel thread (pthread_kill, tgkill) is pending for that thread
 * only and may not be seen by a green thread that runs on another worker;
 * a kernel without signalfd for the set runs the call on the blocking pool.
 */
#include "hook.h"

#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>

#define KSIGSET (_NSIG / 8)

static long sigwait_green(const sigset_t *set, siginfo_t *info, const struct timespec *ts)
{
    static const struct timespec zero = {0, 0};
    long r = hk_sys(SYS_rt_sigtimedwait, set, info, &zero, KSIGSET);
    if (r != -EAGAIN || (ts && ts->tv_sec == 0 && ts->tv_nsec == 0))
        return r;
    if (ts && (ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000 || ts->tv_sec < 0))
        return -EINVAL;
    int64_t dl = ts ? fern_now_ns() + (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : FERN_FOREVER;
    long sfd = hk_sys(SYS_signalfd4, -1, set, KSIGSET, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        long a[6] = {(long)set, (long)info, (long)ts, KSIGSET, 0, 0};
        return fern__file_call(SYS_rt_sigtimedwait, a);
    }
    for (;;) {
        struct fern__pollent pe = {.fd = (int)sfd, .dirs = FERN_READ};
        if (fern__io_snap(&pe)) {
            fern__io_forget((int)sfd);
            hk_sys(SYS_close, sfd);
            long a[6] = {(long)set, (long)info, (long)ts, KSIGSET, 0, 0};
            return fern__file_call(SYS_rt_sigtimedwait, a);
        }
        r = hk_sys(SYS_rt_sigtimedwait, set, info, &zero, KSIGSET);
        if (r != -EAGAIN)
            break;
        int k = fern__io_park(&pe, 1, dl);
        if (k == FERN__PARK_CANCELED) {
            r = -ECANCELED;
            break;
        }
        if (k == 0) {
            r = -EAGAIN; /* the timeout passed */
            break;
        }
    }
    fern__io_forget((int)sfd);
    hk_sys(SYS_close, sfd);
    return r;
}

int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *ts)
{
    if (HK_LIKELY(!hk_green()))
        return (int)hk_ret(hk_sys(SYS_rt_sigtimedwait, set, info, ts, KSIGSET));
    HK_TSAN_ENTER();
    long r = sigwait_green(set, info, ts);
    HK_TSAN_LEAVE();
    return (int)hk_ret(r);
}

int sigwaitinfo(const sigset_t *set, siginfo_t *info) { return sigtimedwait(set, info, NULL); }

/* sigwait returns the error number rather than setting errno. */
int sigwait(const sigset_t *set, int *sig)
{
    siginfo_t si;
    long r;
    do {
        if (HK_LIKELY(!hk_green())) {
            r = hk_sys(SYS_rt_sigtimedwait, set, &si, NULL, KSIGSET);
        } else {
            HK_TSAN_ENTER();
            r = sigwait_green(set, &si, NULL);
            HK_TSAN_LEAVE();
        }
    } while (r == -EINTR); /* POSIX: sigwait does not fail with EINTR */
    if (r < 0)
        return (int)-r;
    *sig = (int)r;
    return 0;
}
