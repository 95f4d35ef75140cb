/* SPDX-License-Identifier: MIT */
/*
 * Children: wait4, waitpid, wait, waitid, and system, popen, pclose (which
 * wait inside libc, where no interposer sees).
 *
 * A green thread's wait for one child that may exit (wait4/waitpid of a pid
 * > 0, waitid of P_PID or P_PIDFD, for exits only) parks on a pidfd, which
 * becomes readable when the child exits: first a WNOHANG attempt (a child
 * already gone costs one system call), then pidfd_open, park on its read
 * edge, WNOHANG again when woken. The pidfd is the hook's own and is closed
 * at the end (libfern forgets it first). What a pidfd cannot say (any child:
 * pid -1, a process group; stops and continues: WUNTRACED, WSTOPPED,
 * WCONTINUED; a kernel before 5.3) runs as the same call on fern's blocking
 * pool, where a helper thread waits in the kernel. Either way the answer is
 * the kernel's.
 *
 * system, popen and pclose run libc's own function on the pool: system
 * forks, waits and changes the process's SIGINT/SIGQUIT/SIGCHLD handling
 * meanwhile, exactly as libc's does on any thread; pclose waits for the
 * child; popen only forks and execs (glibc uses posix_spawn), but runs
 * there too so that the fork's pause does not stop the worker. libc's
 * versions are found once with dlsym(RTLD_NEXT) (names.c).
 */
#include "hook.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* Park until pidfd is readable, making c (a WNOHANG form) after each edge;
 * `ready` says whether c's result means the wait is over. Closes pidfd. */
static long park_pidfd(int pidfd, const struct hk_call *c, int (*ready)(long, const struct hk_call *))
{
    long r;
    for (;;) {
        struct fern__pollent pe = {.fd = pidfd, .dirs = FERN_READ};
        if (fern__io_snap(&pe)) {
            r = -ENOSYS; /* the poller will not take it: the caller uses the pool */
            break;
        }
        r = hk_do(c);
        if (ready(r, c))
            break;
        int k = fern__io_park(&pe, 1, FERN_FOREVER);
        if (k == FERN__PARK_CANCELED) {
            r = -ECANCELED; /* the child stays to be waited for */
            break;
        }
        if (k < 0) {
            r = -ENOSYS;
            break;
        }
    }
    fern__io_forget(pidfd);
    hk_sys(SYS_close, pidfd);
    return r;
}

static int wait4_ready(long r, const struct hk_call *c)
{
    (void)c;
    return r != 0;
}

static long off_worker_call(const struct hk_call *c)
{
    HK_TSAN_ENTER();
    long r = fern__file_call(c->nr, c->a);
    HK_TSAN_LEAVE();
    return r;
}

pid_t wait4(pid_t pid, int *status, int options, struct rusage *ru)
{
    struct hk_call c = {SYS_wait4, {pid, (long)status, options, (long)ru}};
    if (HK_LIKELY(!hk_green()) || (options & WNOHANG))
        return (pid_t)hk_ret(hk_do(&c));
    struct hk_call nh = {SYS_wait4, {pid, (long)status, options | WNOHANG, (long)ru}};
    long r = hk_do(&nh);
    if (r != 0)
        return (pid_t)hk_ret(r);
    if (pid > 0 && !(options & (WUNTRACED | WCONTINUED))) {
        long pfd = hk_sys(SYS_pidfd_open, pid, 0);
        if (pfd >= 0) {
            HK_TSAN_ENTER();
            r = park_pidfd((int)pfd, &nh, wait4_ready);
            HK_TSAN_LEAVE();
            if (r != -ENOSYS)
                return (pid_t)hk_ret(r);
        }
    }
    return (pid_t)hk_ret(off_worker_call(&c));
}

pid_t waitpid(pid_t pid, int *status, int options) { return wait4(pid, status, options, NULL); }
pid_t wait(int *status) { return wait4(-1, status, 0, NULL); }

static int waitid_ready(long r, const struct hk_call *c)
{
    return r != 0 || ((siginfo_t *)c->a[2])->si_pid != 0;
}

int waitid(idtype_t type, id_t id, siginfo_t *info, int options)
{
    struct hk_call c = {SYS_waitid, {type, id, (long)info, options, 0}};
    if (HK_LIKELY(!hk_green()) || (options & WNOHANG))
        return (int)hk_ret(hk_do(&c));
    siginfo_t local;
    siginfo_t *si = info ? info : &local;
    memset(si, 0, sizeof *si);
    struct hk_call nh = {SYS_waitid, {type, id, (long)si, options | WNOHANG, 0}};
    long r = hk_do(&nh);
    if (r != 0 || si->si_pid != 0)
        return (int)hk_ret(r);
    if ((type == P_PID || type == (idtype_t)P_PIDFD) && !(options & (WSTOPPED | WCONTINUED))) {
        long pfd = type == P_PID ? hk_sys(SYS_pidfd_open, id, 0) : hk_sys(SYS_dup, id);
        if (pfd >= 0) {
            HK_TSAN_ENTER();
            r = park_pidfd((int)pfd, &nh, waitid_ready);
            HK_TSAN_LEAVE();
            if (r != -ENOSYS)
                return (int)hk_ret(r);
        }
    }
    return (int)hk_ret(off_worker_call(&c));
}

/* ---- system, popen, pclose: libc's own, on the pool ---- */

extern int (*hk_real_system)(const char *) HK_HIDDEN;
extern FILE *(*hk_real_popen)(const char *, const char *) HK_HIDDEN;
extern int (*hk_real_pclose)(FILE *) HK_HIDDEN;
void hk_names_resolve(void) HK_HIDDEN;

struct proc_job {
    int kind;
    const char *cmd, *mode;
    FILE *f;
    int r, err;
};

static void *proc_run(void *arg)
{
    struct proc_job *j = arg;
    if (j->kind == 0)
        j->r = hk_real_system(j->cmd);
    else if (j->kind == 1)
        j->f = hk_real_popen(j->cmd, j->mode);
    else
        j->r = hk_real_pclose(j->f);
    j->err = errno;
    return NULL;
}

static void proc_offload(struct proc_job *j)
{
    HK_TSAN_ENTER();
    hk_offload(proc_run, j);
    HK_TSAN_LEAVE();
    hk_set_errno(j->err);
}

int system(const char *cmd)
{
    hk_names_resolve();
    if (HK_LIKELY(!hk_green()))
        return hk_real_system(cmd);
    struct proc_job j = {.kind = 0, .cmd = cmd};
    proc_offload(&j);
    return j.r;
}

FILE *popen(const char *cmd, const char *mode)
{
    hk_names_resolve();
    if (HK_LIKELY(!hk_green()))
        return hk_real_popen(cmd, mode);
    struct proc_job j = {.kind = 1, .cmd = cmd, .mode = mode};
    proc_offload(&j);
    return j.f;
}

int pclose(FILE *f)
{
    hk_names_resolve();
    if (HK_LIKELY(!hk_green()))
        return hk_real_pclose(f);
    struct proc_job j = {.kind = 2, .f = f};
    proc_offload(&j);
    return j.r;
}
