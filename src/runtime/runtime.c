/* SPDX-License-Identifier: MIT */
/*
 * Starting and stopping the runtime: every layer in order (fern_init,
 * explicit or implicit, and fern_shutdown).
 */
#include "runtime/runtime.h"
#include "base/sys.h"

#include <unistd.h>
#ifdef FERN_TSAN
#include <sanitizer/common_interface_defs.h>
#endif

struct runtime rt = {.boot_lock = PLOCK_INIT};

#ifdef FERN_TSAN
/* ThreadSanitizer symbolises a report with libbacktrace, which opens the
 * program's files and their /usr/lib/debug companions the first time it
 * runs. Under fern-hook that open, made on a green thread, went off the
 * worker and parked inside the report, with TSan's thread-registry lock
 * and the loader's lock held; the worker went on to other threads, the next
 * that reached TSan (a report, a thread or fiber created) waited on that
 * lock in the kernel, and with it every kernel thread: a hang instead of a
 * report (test_hook_files_pool, 440 s). So the symbolizer reads its files
 * here, once, on the plain thread that starts the runtime; later reports
 * open nothing. */
static void tsan_symbolizer_warm(void)
{
    static uint32_t done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_RELAXED))
        return;
    char out[8];
    __sanitizer_symbolize_pc(__builtin_return_address(0), "%p", out, sizeof out);
}
#endif

/* Start the runtime with cfg. `implicit_by` names the call that starts it
 * with the defaults (runtime_start), or is NULL for fern_init itself. */
static int runtime_init(const fern_config *cfg, const char *implicit_by)
{
    struct config c;
    int r = config_load(cfg, &c);
    if (r)
        return r;
    /* Green threads switch stacks under the CPU's feet and return with
     * jumps (docs/switch.md): a hardware shadow stack would fault. */
    if (arch_shadow_stack_active())
        return ENOTSUP;

    /* A reference, so a static link keeps the debugger's map (and the
     * embedded gdb extension) although nothing reads them in-process. */
    __asm__ volatile("" : : "r"(&fern_debug_map));
#ifdef FERN_TSAN
    tsan_symbolizer_warm();
#endif
    plock_lock(&rt.boot_lock);
    if (rt.running) {
        /* An explicit fern_init that comes after an implicit start would
         * otherwise fail with a bare EBUSY while the program believes its
         * configuration is in force: say which call started the runtime. */
        const char *by = rt.started_by;
        plock_unlock(&rt.boot_lock);
        if (!implicit_by && by)
            fprintf(stderr,
                    "fern: fern_init: the runtime is already running: %s started it with the "
                    "default configuration; call fern_init before the first such call\n",
                    by);
        return EBUSY;
    }
    config = c;
    r = stack_init();
    if (r == 0)
        hib_init(); /* before the workers: each maps its hibernation stack */
    if (r == 0)
        r = signals_install();
    if (r == 0)
        r = crash_start();
    if (r == 0)
        r = io_init();
    rt.default_cls = stack_class(c.stack_size, NULL);
    plock_unlock(&rt.boot_lock);
    if (r) {
        crash_stop();
        return r;
    }
    /* Before any descriptor is made: the side of cancellation's
     * handshake its waits take (thread/cancel.c; it may probe membarrier,
     * which thread_alloc must not do under its spin lock). */
    (void)cancel_fence_mode();
    /* $FERN_TRACE, before the workers: they record from their first switch. */
    if ((r = trace_init())) {
        crash_stop();
        io_fini();
        stack_fini();
        return r;
    }
    /* Before the workers start: each arms its own preemption tick. */
    r = c.preempt ? preempt_init(c.slice_ns) : 0;
    struct fern_cluster *d = NULL;
    if (r == 0)
        r = cluster_start(&d, c.workers);
    if (r) {
        preempt_fini();
        crash_stop();
        io_fini();
        stack_fini();
        return r;
    }
    r = monitor_start(c.slice_ns, preempt_enabled());
    if (r) {
        cluster_stop(d);
        preempt_fini();
        crash_stop();
        io_fini();
        stack_fini();
        return r;
    }
    plock_lock(&rt.boot_lock);
    rt.dflt = d;
    rt.started_by = implicit_by;
    STORE(&rt.running, 1);
    plock_unlock(&rt.boot_lock);
    return 0;
}

/* Starting leaves errno as the caller had it: its probes fail on purpose
 * (slab.c's page probe, io/file.c's RWF_NOWAIT, uring.c's setup), and an
 * implicit start runs inside a call the program checks errno after. */
int fern_init(const fern_config *cfg)
{
    int e = errno;
    int r = runtime_init(cfg, NULL);
    errno = e;
    return r;
}

int runtime_start(const char *by)
{
    if (LOAD(&rt.running))
        return 0;
    int e = errno;
    int r = runtime_init(NULL, by);
    errno = e;
    return r == EBUSY ? 0 : r;
}

int fern_shutdown(void)
{
    if (thread_current() || worker_self())
        return EPERM;
    plock_lock(&rt.boot_lock);
    if (!rt.running) {
        plock_unlock(&rt.boot_lock);
        return EINVAL;
    }
    STORE(&rt.running, 0);
    plock_unlock(&rt.boot_lock);
    /* Cancel every thread that has not finished (again for ones spawned
     * meanwhile) and give them the grace period: the threads run on while
     * they end, so the runtime is still whole here. */
    int64_t grace_end = fern_now_ns() + config.shutdown_grace_ns;
    while (threads_cancel_all() && fern_now_ns() < grace_end) {
        sys_sleep_ns(1000000);
    }
    unsigned left = threads_report_unfinished(NULL, 0);
    if (left) {
        fprintf(stderr,
                "fern: shutdown: %u green thread(s) had not ended %lld ms after being cancelled; "
                "destroying them:\n",
                left, (long long)(config.shutdown_grace_ns / 1000000));
        threads_report_unfinished(stderr, 20);
    }
    crash_stop(); /* no dump in flight while the runtime is torn down */
    monitor_stop();
    /* A stopping cluster's workers leave their threads, runnable or not
     * (pick_next), except one running a thread that never leaves the CPU
     * and cannot be preempted: it is waited for 0.8 s at most, so that
     * fern_shutdown returns within the grace period and a second. */
    int64_t stop_by = fern_now_ns() + 800000000;
    unsigned stuck = 0;
    /* Every cluster stops at once: threads moving between clusters meet
     * only stopping ones. */
    plock_lock(&rt.boot_lock);
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        STORE(&c->stopping, 1);
    plock_unlock(&rt.boot_lock);
    /* Halt them all, then free them: a worker still running may push a
     * migrating thread into another cluster's inbox. */
    plock_lock(&rt.boot_lock);
    unsigned nc = rt.nclusters, k = 0;
    struct fern_cluster **cs = malloc((nc ? nc : 1) * sizeof *cs);
    for (struct fern_cluster *c = rt.clusters; cs && c && k < nc; c = c->next_cluster)
        cs[k++] = c;
    plock_unlock(&rt.boot_lock);
    if (!cs) { /* no memory: one by one, as before */
        for (;;) {
            plock_lock(&rt.boot_lock);
            struct fern_cluster *c = rt.clusters;
            plock_unlock(&rt.boot_lock);
            if (!c)
                break;
            stuck += cluster_stop_by(c, stop_by);
        }
    } else {
        for (unsigned i = 0; i < k; i++)
            stuck += cluster_halt_by(cs[i], stop_by);
        for (unsigned i = 0; i < k; i++)
            cluster_retire(cs[i], stuck != 0);
        free(cs);
        /* One a thread created meanwhile, if any. */
        for (;;) {
            plock_lock(&rt.boot_lock);
            struct fern_cluster *c = rt.clusters;
            plock_unlock(&rt.boot_lock);
            if (!c)
                break;
            stuck += cluster_stop_by(c, stop_by);
        }
    }
    trace_fini(); /* after the workers, before the descriptors: it reads their names */
    if (!stuck)
        preempt_fini(); /* after the workers: their handlers read its table */
    blocking_fini();
    uint64_t abandoned = 0;
    if (!stuck) {
        /* A stuck worker still uses the descriptors and stacks. */
        threads_fini(&abandoned);
        io_fini();
        hib_fini();
        stack_fini();
    }
    (void)abandoned;
    plock_lock(&rt.boot_lock);
    rt.dflt = NULL;
    rt.started_by = NULL;
    rt.spawned_ext = rt.retired_spawned = rt.retired_exited = 0;
    rt.retired_bound = rt.retired_unbound = 0;
    stack_starved = 0;
    plock_unlock(&rt.boot_lock);
    return 0;
}
