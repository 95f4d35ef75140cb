/* SPDX-License-Identifier: MIT */
/*
 * Stack hibernation (hibernate.c; docs/stacks.md, "Hibernation"): a green
 * thread parked for a while has the live part of its stack copied to a heap
 * block and its stack pages given back to the kernel, with guard markers in
 * their place, until it runs again or another thread touches them.
 *
 * Who calls what: the monitor (watch/monitor.c) scans the threads and
 * hibernates them in batches (hib_scan_*); the wake paths (ready.c) pass
 * every wake-up through hib_gate; a hibernated thread resumes through
 * fern_hib_entry (arch/<arch>/switch.S), which calls hib_resume; the fault
 * handler (debug/debug.c) asks hib_fault first; fern-hook asks hib_touch on
 * EFAULT (io/iohook.c); fern_blocking marks its parker (HN_KERNEL).
 */
#ifndef FERN_SCHED_HIBERNATE_H
#define FERN_SCHED_HIBERNATE_H

#include "sched/desc.h"

_Static_assert(offsetof(struct fern_thread, hib) < 64, "hib shares the wake-up's cache line");
_Static_assert(offsetof(struct fern_thread, hib) > offsetof(struct fern_thread, lifeword) &&
                   offsetof(struct fern_thread, hib) < offsetof(struct fern_thread, lifeword) + 8,
               "spawn's lifeword store clears hib and sets hib_no (desc.h: LW_HIB_NO)");

/* fern_thread.hib. The monitor moves a T_PARKED thread NONE -> SEEN at one
 * scan and SEEN -> BUSY at a later one (at once with a delay of 0); a wake
 * that finds SEEN takes it back to NONE (hib_gate), one that finds BUSY sets
 * H_WAKE and leaves the thread to the monitor, which queues it when done.
 * BUSY -> DONE: hibernated (t->sp points at the block's frame). DONE ->
 * RESTORING by whoever restores it (the thread resuming, or a touch), then
 * RESIDENT (the stack is back, the block still holds the frame that leads
 * to hib_resume), and the thread's own hib_resume takes RESIDENT -> NONE.
 * A RESIDENT thread still parked goes RESIDENT -> RESIDENT_SEEN -> BUSY over
 * two scans, as NONE does (a wake-up takes RESIDENT_SEEN back to RESIDENT):
 * a touch usually comes just before the thread's wake-up (a broadcast's
 * waker reads its waiter), which must not find it hibernated again. */
enum {
    H_NONE = 0, H_SEEN = 1, H_BUSY = 2, H_DONE = 3, H_RESTORING = 4, H_RESIDENT = 5,
    H_RESIDENT_SEEN = 6, /* RESIDENT, and seen so at a scan (as SEEN is to NONE) */
    H_WAKE = 0x80,
};
/* fern_thread.hib_no bits. */
enum {
    HN_OPTOUT = 1, /* fern_attr.no_hibernate */
    HN_KERNEL = 2, /* parked while its stack memory may be in a system call
                    * made for it (fern_blocking's job record and buffers) */
    HN_UNFIT = 4,  /* its stack cannot be hibernated (no guard markers, or
                    * too deep); set by the monitor, cleared at spawn */
    HN_HEIR = 8,   /* a condition broadcast queued it on its mutex as an heir
                    * (sync/cond.c): it runs soon, once the heirs before it
                    * have; set by the broadcaster, cleared by the thread */
};
/* Bits are set and cleared with atomic or/and: the thread and the monitor
 * both write hib_no. */

extern bool hib_on; /* hibernation runs (config.hibernate and the kernel can) */

/* Start and stop (runtime/runtime.c); hib_init warns and leaves hib_on false
 * if this kernel lacks what hibernation needs. */
void hib_init(void);
void hib_fini(void);
/* NULL, or why this build or architecture cannot hibernate (config.c
 * refuses the setting with it). */
const char *hibernate_unsupported(void);

/* Every wake-up of a parked thread passes here before t is queued:
 * run_state becomes T_RUNNABLE, then hib is read (the light side of the
 * handshake with the monitor's membarrier, hibernate.c). True: the monitor
 * is hibernating t and will queue it itself. */
bool hib_wake_slow(fern_thread *t);
/* The light side: true if hibernation's state is set (then ask
 * hib_wake_slow, which says whether the monitor took the wake-up). */
static inline bool hib_gate_hit(fern_thread *t)
{
    return arch_store_load_u8(&t->run_state, T_RUNNABLE, &t->hib) != 0;
}
static inline bool hib_gate(fern_thread *t) { return unlikely(hib_gate_hit(t)) && hib_wake_slow(t); }

/* The monitor's scan over every live thread, perhaps over several ticks:
 * hib_scan_due says whether one is due or under way at `now` (`busy`: the
 * workers ran since the last look, so threads may have parked); if not, it
 * lowers *next to when one will be. hib_scan_thread looks at one live
 * thread (hibernating a batch when it is full); hib_scan_end ends a scan
 * (the last batch). */
bool hib_scan_due(int64_t now, bool busy, int64_t *next);
void hib_scan_thread(fern_thread *t);
void hib_scan_flush(void);
void hib_scan_end(int64_t now);

/* A fault at addr: true if it was a touch of a hibernated stack, which is
 * now restored (retry the access). Async-signal-safe. */
bool hib_fault(const void *addr);
/* Restore every hibernated stack that [p, p+n) overlaps; true if any was. */
bool hib_touch(const void *p, size_t n);
/* The saved stack pointer of t, hibernated or not (backtraces). */
void *hib_real_sp(const fern_thread *t);

/* A worker's kernel thread starts / stops (worker.c): the small stack
 * fern_hib_entry runs hib_resume on. */
void hib_worker_start(void);
void hib_worker_stop(void);
/* Called by fern_hib_entry on that stack as t resumes from hibernation;
 * returns t's real saved stack pointer. */
void *hib_resume(fern_thread *t, void *block);

void hib_stats(struct fern_stats *s);
/* Shutdown destroys t, parked: free its hibernated stack's block, if any
 * (the workers and the monitor are stopped). */
void hib_forget(fern_thread *t);

#endif
