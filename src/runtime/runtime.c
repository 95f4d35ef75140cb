/* SPDX-License-Identifier: MIT */
/*
 * Starting and stopping the runtime: every layer in order (fern_init,
 * explicit or implicit, and fern_shutdown).
 */
#include "runtime/runtime.h"

#include <unistd.h>

struct runtime rt = {.boot_lock = PTHREAD_MUTEX_INITIALIZER};

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
    pthread_mutex_lock(&rt.boot_lock);
    if (rt.running) {
        /* An explicit fern_init that comes after an implicit start would
         * otherwise fail with a bare EBUSY while the program believes its
         * configuration is in force: say which call started the runtime. */
        const char *by = rt.started_by;
        pthread_mutex_unlock(&rt.boot_lock);
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
    pthread_mutex_unlock(&rt.boot_lock);
    if (r) {
        crash_stop();
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
    pthread_mutex_lock(&rt.boot_lock);
    rt.dflt = d;
    rt.started_by = implicit_by;
    STORE(&rt.running, 1);
    pthread_mutex_unlock(&rt.boot_lock);
    return 0;
}

int fern_init(const fern_config *cfg) { return runtime_init(cfg, NULL); }

int runtime_start(const char *by)
{
    if (LOAD(&rt.running))
        return 0;
    int r = runtime_init(NULL, by);
    return r == EBUSY ? 0 : r;
}

int fern_shutdown(void)
{
    if (thread_current() || worker_self())
        return EPERM;
    pthread_mutex_lock(&rt.boot_lock);
    if (!rt.running) {
        pthread_mutex_unlock(&rt.boot_lock);
        return EINVAL;
    }
    STORE(&rt.running, 0);
    pthread_mutex_unlock(&rt.boot_lock);
    crash_stop(); /* no dump in flight while the runtime is torn down */
    monitor_stop();
    for (;;) {
        pthread_mutex_lock(&rt.boot_lock);
        struct fern_cluster *c = rt.clusters;
        pthread_mutex_unlock(&rt.boot_lock);
        if (!c)
            break;
        cluster_stop(c);
    }
    preempt_fini(); /* after the workers: their handlers read its table */
    blocking_fini();
    uint64_t abandoned = 0;
    threads_fini(&abandoned);
    io_fini();
    hib_fini();
    stack_fini();
    if (abandoned)
        fprintf(stderr, "fern: shutdown destroyed %llu green thread(s) that had not finished\n",
                (unsigned long long)abandoned);
    pthread_mutex_lock(&rt.boot_lock);
    rt.dflt = NULL;
    rt.started_by = NULL;
    rt.spawned_ext = rt.retired_spawned = rt.retired_exited = 0;
    rt.retired_bound = rt.retired_unbound = 0;
    stack_starved = 0;
    pthread_mutex_unlock(&rt.boot_lock);
    return 0;
}
