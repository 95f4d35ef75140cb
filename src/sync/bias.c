/* SPDX-License-Identifier: MIT */
/*
 * Biased mutexes, condition variables and channels (chan.c): no locked
 * instruction while only one worker's green threads use them.
 *
 * Green threads of one worker never run at the same time, so among
 * themselves they need no atomic read-modify-write: plain loads and stores
 * are enough. Only another kernel thread (a plain thread, another worker)
 * does. A locked instruction costs 5-8 ns here, and the classic
 * producer/consumer with a mutex and two condition variables makes twelve
 * per item, so on a one-worker cluster this is most of the cost.
 *
 * An object's bias_ word:
 *   BIAS_NONE (0)       untouched since zero-initialisation;
 *   id << 2             biased to the worker holding bias slot `id`: its
 *                       green threads use plain loads and stores;
 *   (id << 2) | 2       being revoked (one revoker at a time);
 *   BIAS_SHARED (1)     atomic mode, for good.
 * The first user settles it: a green thread of a one-worker cluster biases
 * it to its worker, anyone else makes it shared. Only workers that are their
 * cluster's only one own a slot (with several workers, green threads move
 * between kernel threads and stealing would revoke at once).
 *
 * Revocation is an asymmetric Dekker handshake. The owner, at the start of
 * each operation, stores busy = 1 in its slot and then loads bias_ (a
 * compiler barrier between them, no fence); it works in plain mode only if
 * bias_ still names it, and stores busy = 0 when done (or, for an operation
 * that parks, in the post-switch action, once the thread is off its stack).
 * A revoker marks bias_ revoking, then calls membarrier(PRIVATE_EXPEDITED),
 * which runs a full barrier on every thread of the process, then waits until
 * the owner's busy is 0, then stores BIAS_SHARED. Either the owner's load of
 * bias_ came after that barrier and saw the mark (so it goes atomic), or its
 * busy = 1 came before the barrier and the revoker sees it and waits until
 * the plain-mode operation is over and its stores are visible. The owner
 * pays two plain stores per operation; a revocation costs a membarrier
 * (microseconds), once per object.
 *
 * Deadlock freedom: a revoker waits for a busy flag, so it must hold no spin
 * lock and have its own busy clear while it does; objects are settled at the
 * start of an operation, before any lock is taken (bias_enter), and an
 * owner's busy window contains no wait for anything but spin locks.
 *
 * Slots are reused by later workers. That is safe: a worker that inherits a
 * slot also inherits objects still biased to it, and every access to them
 * so far was by the previous owner, whose stores are visible (the slot is
 * given back and taken again under a lock, after the old worker stopped).
 *
 * Off under ThreadSanitizer (it cannot see the membarrier handshake, so it
 * would report the plain-mode accesses), when membarrier is missing, and
 * with FERN_BIAS=0.
 *
 * Memory ordering. The owner's busy = 1 is relaxed and its load of bias_ an
 * acquire with only a compiler barrier between: membarrier supplies the
 * missing StoreLoad fence on the owner's CPU when, and only when, a revoker
 * needs it (the kernel runs a full barrier on every CPU running a thread of
 * the process, on aarch64 as on x86). busy = 0 is a release store and the
 * revoker's wait an acquire load, so the plain-mode stores of the last
 * operation are visible before BIAS_SHARED is published (release). bias_
 * itself changes by acq_rel CAS; revocations is a relaxed counter.
 */
#include "sync/sync.h"

#include <sched.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

struct bias_slot bias_slots[BIAS_SLOTS];

static struct {
    struct plock lock;
    int state;        /* 0 not probed, 1 usable, -1 off */
    uint8_t used[BIAS_SLOTS];
    uint64_t revocations;
} B = {PLOCK_INIT, 0, {0}, 0};

/* Called with B.lock held. */
static bool bias_usable(void)
{
    if (B.state == 0) {
        B.state = -1;
#ifndef FERN_TSAN
        if (config.bias && membarrier_ready())
            B.state = 1;
#endif
    }
    return B.state == 1;
}

uint32_t bias_slot_take(void)
{
    uint32_t id = 0;
    plock_lock(&B.lock);
    if (bias_usable())
        for (uint32_t i = 1; i < BIAS_SLOTS; i++)
            if (!B.used[i]) {
                B.used[i] = 1;
                id = i;
                break;
            }
    plock_unlock(&B.lock);
    return id;
}

void bias_slot_give(uint32_t id)
{
    if (!id)
        return;
    plock_lock(&B.lock);
    STORE(bias_busy(id << 2), 0);
    B.used[id] = 0;
    plock_unlock(&B.lock);
}

uint64_t bias_revocations(void) { return LOAD_RELAXED(&B.revocations); }

void bias_settle(uint32_t *bias, uint32_t tag)
{
    unsigned spins = 0;
    for (;;) {
        uint32_t b = LOAD(bias);
        if (b == BIAS_SHARED || (tag && b == tag))
            return;
        if (b == BIAS_NONE) {
            if (CAS(bias, &b, tag ? tag : BIAS_SHARED))
                return;
            continue;
        }
        if (b & BIAS_REVOKING) {
            spin_backoff(&spins); /* another thread is revoking it */
            continue;
        }
        if (!CAS(bias, &b, b | BIAS_REVOKING))
            continue;
        membarrier_all();
        uint32_t *busy = bias_busy(b & ~BIAS_REVOKING);
        while (LOAD(busy))
            spin_backoff(&spins); /* the owner is inside an operation */
        ADD_RELAXED(&B.revocations, 1);
        STORE(bias, BIAS_SHARED);
        return;
    }
}
