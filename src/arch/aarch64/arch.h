/* SPDX-License-Identifier: MIT */
/* AArch64 side of the architecture interface (arch.h). Weakly ordered:
 * every ordering the runtime relies on must be spelled out (see the
 * memory-ordering notes in docs/platforms.md). */
#ifndef FERN_ARCH_AARCH64_H
#define FERN_ARCH_AARCH64_H

#include <stdbool.h>
#include <ucontext.h>

/* isb, not yield: yield is a no-op on most cores, while isb stalls for
 * tens of cycles, close to what x86's pause gives a spin loop. */
static inline void cpu_relax(void) { __asm__ volatile("isb" ::: "memory"); }

/* An asm, not __builtin_prefetch: see x86_64/arch.h. */
static inline __attribute__((always_inline)) void prefetch(const void *p)
{
    __asm__ volatile("prfm pldl1keep, %0" : : "Q"(*(const char *)p));
}

/* dmb ish. A seq_cst RMW on a local, the x86 trick, is not a fence here:
 * an acquire-release exclusive pair lets a later load be satisfied before
 * an earlier store is visible to other cores. */
static inline void full_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* Four instructions: the thread pointer, the variable's offset from the
 * GOT (page, then offset), and the load. */
#define ARCH_TLS_LOAD(var)                                              \
    ({                                                                  \
        __typeof__(var) v_;                                             \
        uintptr_t off_;                                                 \
        __asm__ volatile("mrs %0, tpidr_el0\n\t"                        \
                         "adrp %1, :gottprel:" #var "\n\t"              \
                         "ldr %1, [%1, #:gottprel_lo12:" #var "]\n\t"   \
                         "ldr %0, [%0, %1]"                             \
                         : "=&r"(v_), "=&r"(off_)                       \
                         :                                              \
                         : "memory");                                   \
        v_;                                                             \
    })

/* The frame fern_ctx_switch pops (switch.S): callee-saved registers
 * zero, x19 = the thread, FPCR 0 (the Linux default), and x30 =
 * fern_ctx_entry signed with the sp autiasp will see once the 176-byte
 * frame is popped. pacia1716 (signs x17 with modifier x16) is a hint: a
 * no-op, leaving x17 as it was, on cores without PAC. */
#define CTX_FRAME 176
static inline void *ctx_init(char *top, fern_thread *self)
{
    uintptr_t sp = ((uintptr_t)top & ~(uintptr_t)15) - CTX_FRAME;
    uint64_t *f = (uint64_t *)sp;
    for (unsigned i = 0; i < CTX_FRAME / 8; i++)
        f[i] = 0;
    register uint64_t lr __asm__("x17") = (uint64_t)(uintptr_t)fern_ctx_entry;
    register uint64_t mod __asm__("x16") = sp + CTX_FRAME;
    __asm__("hint #8" : "+r"(lr) : "r"(mod));
    f[1] = lr;                          /* x30 */
    f[2] = (uint64_t)(uintptr_t)self;   /* x19 */
    return (void *)sp;
}

/* The saved switch frame for debuggers (debugmap.c): not described yet
 * (frame size 0). The map's frame fields name x86_64 registers, and
 * fern-gdb.py's walk of parked threads is x86_64-only (docs/platforms.md). */
#define ARCH_DEBUG_FRAME .frame_size = 0

static inline uintptr_t arch_uc_pc(const void *uc)
{
    return (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.pc;
}
static inline uintptr_t arch_uc_sp(const void *uc)
{
    return (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.sp;
}

/* No asynchronous preemption (docs/platforms.md): resuming an arbitrary
 * instruction needs a branch through a register, and AAPCS64 leaves none
 * that compiled code does not use (x16/x17 are ordinary temporaries inside
 * a function), so the trampoline would have to return through
 * rt_sigreturn with a frame it builds itself. Until then preempt_init
 * leaves preemption off; the monitor's compensation still works. */
#define ARCH_PREEMPT 0

/* switch.S has no jump_return wrappers: stack.c defines the public
 * blocking calls as plain calls of their bodies. */
#define ARCH_JUMP_RETURN 0

/* fern never enables the Guarded Control Stack (Arm's shadow stack), and
 * Linux only turns it on at a process's own request. */
static inline bool arch_shadow_stack_active(void) { return false; }

#endif
