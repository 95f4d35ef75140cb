/* SPDX-License-Identifier: MIT */
/*
 * The architecture interface: everything in the runtime that depends on the
 * CPU is behind this header and one directory per architecture
 * (x86_64/, aarch64/), so no other file in src/ names an architecture.
 * Each architecture's arch.h provides:
 *
 *   cpu_relax()          one round of a spin-wait loop (x86 pause, Arm isb)
 *   prefetch(p)          start loading p's cache line; never elided
 *   full_fence()         order every earlier load and store before every
 *                        later one (StoreLoad included)
 *   arch_cycles()        a cheap counter of ticks (x86 rdtsc, Arm cntvct_el0)
 *                        for the tracer's timestamps (debug/trace.c)
 *   ARCH_JUMP_IF_SET(flag, label)  (optional) jump to label if a 32-bit
 *                        global is nonzero, in as few instructions as the
 *                        CPU allows; without it, a plain test (base/trace.h)
 *   ARCH_TLS_LOAD(var)   read an initial-exec __thread pointer variable
 *                        with a volatile asm that also clobbers memory, so
 *                        the read is redone at each use and never moved
 *                        across a context switch (invariant 4, docs/design.md)
 *   ctx_init(top, self)  build the first frame of a green thread below
 *                        `top` for fern_ctx_switch to pop; returns its sp
 *   ARCH_DEBUG_FRAME     the saved frame's layout for debuggers (debug/debugmap.c)
 *   arch_uc_pc(uc), arch_uc_sp(uc)
 *                        the interrupted pc and sp in a signal handler's
 *                        ucontext_t (watch/preempt.c, debug/debug.c)
 *   arch_shadow_stack_active()
 *                        a hardware shadow stack is on for this thread
 *                        (fern_init then refuses: switches would fault)
 *   ARCH_JUMP_RETURN     1 if switch.S defines the public blocking calls
 *                        as jump_return wrappers of their *_body functions
 *                        (docs/switch.md); 0: each body's own file defines
 *                        the public call as a plain call of it
 *   ARCH_STACK_WALK      1 if <arch>/walk.c has arch_stack_walk (below): the
 *                        return addresses of a parked green thread, for
 *                        the deadlock reports; 0: they show no backtrace
 *   ARCH_PREEMPT_STATIC  1 if a program linked with libfern.a may be
 *                        preempted (watch/preemptible.c); 0: its code never is
 *   ARCH_PREEMPT         1 if <arch>/preempt.S has fern_preempt_tramp; the
 *                        arch header then also has arch_preempt_init()
 *                        (size the save area), arch_preempt_frame() (stack
 *                        the trampoline needs) and arch_preempt_redirect(uc)
 *                        (make the context call the trampoline; false if
 *                        this context cannot be, and nothing was changed).
 *                        0: no asynchronous preemption (docs/preemption.md)
 *
 * and its <arch>/switch.S defines fern_ctx_switch, fern_ctx_entry and
 * fern_ctx_start with the contracts below; <arch>/syscall.h has the raw
 * system call fern-hook makes (syscall.h), and walk.c, if ARCH_STACK_WALK,
 * arch_stack_walk. Adding an architecture means a directory here with
 * those files. Page size is not here: it is
 * read from sysconf at run time (stack/stack.c), never assumed.
 */
#ifndef FERN_ARCH_H
#define FERN_ARCH_H

#include <fern/fern.h>
#include <stdint.h>

/* Save the callee-saved registers and floating-point control state on the
 * current stack, store sp in *save_sp, resume the context whose sp is new_sp
 * and return `arg` there. */
void *fern_ctx_switch(void **save_sp, void *new_sp, void *arg);
/* The first code of a fresh context: calls thread_entry(arg, self) and marks
 * the bottom of the stack for unwinders. */
void fern_ctx_entry(void);
/* Run thread t on a fresh frame at `top` (16-byte aligned), abandoning the
 * calling context. */
void fern_ctx_start(void *top, fern_thread *t) __attribute__((noreturn));
void thread_entry(void *from, fern_thread *self) __attribute__((noreturn));

#if defined(__x86_64__)
#include "arch/x86_64/arch.h"
#elif defined(__aarch64__)
#include "arch/aarch64/arch.h"
#else
#error "fern runs on x86_64 and aarch64 only"
#endif

#if ARCH_STACK_WALK
/* The return addresses of a parked thread, innermost first (pcs[0]: where
 * fern_ctx_switch returns to), from the frame it saved at `saved` (its sp),
 * staying inside its stack [lo, hi); at most max. *how names the walk
 * ("libunwind", or why the frame-pointer chain was walked instead). */
unsigned arch_stack_walk(const void *saved, uintptr_t lo, uintptr_t hi, uintptr_t *pcs, unsigned max,
                         const char **how);
/* Look up what the walk needs from the dynamic loader (libunwind), once,
 * holding no fern lock (watch/backtrace.c: deadlock_prepare says why). */
void arch_stack_walk_prepare(void);
#endif

#endif
