/* SPDX-License-Identifier: MIT */
/*
 * What stack/'s two files share (private to stack/): the slabs, the
 * per-class global pools and the allocator's state S.
 */
#ifndef FERN_STACK_SLAB_H
#define FERN_STACK_SLAB_H

#include "stack/stack.h"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif

#define SLAB_SLOTS_MIN 16u
#define SLAB_SLOTS_MAX 1024u
#define GUARD_BATCH 64u
/* process_madvise's pidfd for "the calling thread" (Linux 6.15+; the same
 * value in every kernel that has it). The thread's mm is the process's. */
#define PIDFD_SELF_THREAD_ (-10000)

struct slab {
    struct slab *next;           /* published with a release store: read
                                  * without S.lock (stack_slot_of) */
    char *base;
    size_t bytes;
    size_t stride;               /* guard page + stack */
    fern_thread **owner;         /* per slot: the thread whose stack there
                                  * is hibernated (sched/hibernate.c), or
                                  * NULL; allocated with the slab when
                                  * hibernation is on */
};

struct class_pool {
    struct stack *clean, *dirty; /* free stacks; dirty ones await a trim */
    uint64_t nclean, ndirty;
    char *carve, *carve_end;     /* unused part of the newest slab */
    uint32_t slab_slots;
    /* Batched guards, newest slab: slab_lo is its base; the slots below
     * guarding are claimed by a batch; guarded has a bit per slot whose
     * guard is in. */
    char *slab_lo, *guarding;
    uint64_t guarded[SLAB_SLOTS_MAX / 64];
};

struct stacks {
    uint32_t lock;
    size_t page;                 /* sysconf(_SC_PAGESIZE) */
    int guard_mode;
    bool guard_batch;            /* process_madvise guards a batch of slots */
    bool mincore_ok;             /* trim() may ask mincore (mincore_works) */
    uint32_t guard_budget;
    uint32_t mprotect_used;
    struct slab *slabs;
    struct class_pool cls[STACK_CLASSES];
    fern_thread *starved;        /* threads waiting for a stack */
    uint64_t mapped, trims, reserved;
    uint64_t g_madvise, g_mprotect, g_canary;
    bool inited;
    bool owners;                 /* new slabs get an owner table */
};
/* The stack allocator's state, shared by slab.c and stack.c. */
extern struct stacks S __attribute__((visibility("hidden")));

static size_t class_size(int cls) { return FERN_STACK_MIN << cls; }

/* Usable bytes of a class-cls stack: the class size, or a whole page if the
 * page is bigger (both are powers of two), so every guard and every stack
 * starts on a page boundary. */
static size_t class_span(int cls)
{
    size_t size = class_size(cls);
    return size < S.page ? S.page : size;
}

/* Slots claimed ahead, [lo, hi) a stride apart: their guards go in with the
 * caller's own, in one process_madvise call. */
struct guard_job {
    char *lo, *hi;
};

/* Carving a stack when the pools are empty (slab.c says each one's
 * contract): slot_reserve under S.lock, then guard_run (if it handed out a
 * batch) and slot_init outside it. */
char *slot_reserve(int cls, int *mode, bool *pre, struct guard_job *job);
bool guard_run(int cls, char *slot, const struct guard_job *job, size_t stride);
struct stack *slot_init(char *slot, int cls, int mode, bool guarded);

#endif
