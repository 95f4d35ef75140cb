/* SPDX-License-Identifier: MIT */
/*
 * membarrier(PRIVATE_EXPEDITED): the heavy side of an asymmetric Dekker
 * handshake. The light side (a biased object's owner, sync/bias.c; a
 * one-worker ring's owner, sched/runq.c) orders its store before its load
 * with a compiler barrier only; the rare other side calls membarrier_all(),
 * which runs a full barrier on every thread of the process, in place of the
 * fence the light side left out.
 *
 * FERN_MEMBARRIER=0 in the environment makes the probe answer no, as on a
 * kernel without it, so that tests can run every user's fallback (biasing
 * off, cancellation's fenced waits, hibernation refused) on any kernel.
 */
#include "base/base.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct {
    struct plock lock;
    int state; /* registered: 0 not probed, 1 yes, -1 no (under lock) */
} M = {PLOCK_INIT, 0};

static long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

static bool membarrier_probe(void)
{
    if (M.state == 0) {
        const char *off = getenv("FERN_MEMBARRIER");
        if (off && strcmp(off, "0") == 0) {
            M.state = -1;
            return false;
        }
        long q = membarrier(MEMBARRIER_CMD_QUERY);
        M.state = q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                            membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
                        ? 1
                        : -1;
    }
    return M.state == 1;
}

bool membarrier_ready(void)
{
    plock_lock(&M.lock);
    bool ok = membarrier_probe();
    plock_unlock(&M.lock);
    return ok;
}

void membarrier_all(void)
{
    if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
        /* Registered at startup, so this cannot fail short of a kernel
         * bug; going on without the barrier could corrupt the object. */
        fprintf(stderr, "fern: membarrier failed\n");
        abort();
    }
}
