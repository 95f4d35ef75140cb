/* SPDX-License-Identifier: MIT */
/* AArch64 side of the architecture interface (arch.h). Weakly ordered:
 * every ordering the runtime relies on must be spelled out (see the
 * memory-ordering notes in docs/platforms.md). */
#ifndef FERN_ARCH_AARCH64_H
#define FERN_ARCH_AARCH64_H

#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <ucontext.h>

/* isb, not yield: yield is a no-op on most cores, while isb stalls for
 * tens of cycles, close to what x86's pause gives a spin loop. */
static inline void cpu_relax(void) { __asm__ volatile("isb" ::: "memory"); }

/* An asm, not __builtin_prefetch: see x86_64/arch.h. */
static inline __attribute__((always_inline)) void prefetch(const void *p)
{
    __asm__ volatile("prfm pldl1keep, %0" : : "Q"(*(const char *)p));
}
/* For a line about to be written (see x86_64/arch.h). */
static inline __attribute__((always_inline)) void prefetch_w(const void *p)
{
    __asm__ volatile("prfm pstl1keep, %0" : : "Q"(*(const char *)p));
}

/* dmb ish. A seq_cst RMW on a local, the x86 trick, is not a fence here:
 * an acquire-release exclusive pair lets a later load be satisfied before
 * an earlier store is visible to other cores. */
static inline void full_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* The generic timer's virtual count: constant-rate by the architecture's
 * definition, readable at EL0 on Linux (the tracer's clock, base/trace.h). */
static inline uint64_t arch_cycles(void)
{
    uint64_t v;
    __asm__ volatile("isb; mrs %0, cntvct_el0" : "=r"(v) : : "memory");
    return v;
}

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

/* The saved switch frame for debuggers (debug/debugmap.c): not described yet
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

/* ---- preemption (watch/preempt.c, aarch64/preempt.S) ----
 * The handler copies the kernel's signal frame below the interrupted sp
 * and points the context at fern_preempt_tramp, which yields and resumes
 * the interrupted point with rt_sigreturn on that copy (preempt.S says
 * why: no register is free for a branch). */
/* *st = v, then *ld (see x86_64/arch.h); a compiler barrier between. */
static inline uint8_t arch_store_load_u8(uint8_t *st, uint8_t v, const uint8_t *ld)
{
    __atomic_store_n(st, v, __ATOMIC_RELAXED);
    __asm__ volatile("" ::: "memory");
    return __atomic_load_n(ld, __ATOMIC_RELAXED);
}

/* Stack hibernation (sched/hibernate.c) has no entry frame here yet. */
#define ARCH_HIBERNATE 0
#define ARCH_HIB_FRAME_WORDS 0
static inline void arch_hib_frame(uint64_t *f, const void *real_sp, void *t, void *block)
{
    (void)f, (void)real_sp, (void)t, (void)block;
}
/* Nor protection keys (they serve hibernation only). */
#define ARCH_PKEYS 0
static inline uint32_t arch_pkru_read(void) { return 0; }
static inline void arch_pkru_write(uint32_t v) { (void)v; }
#define ARCH_PREEMPT 1
/* A program linked with libfern.a is preempted as on x86_64: the PLT
 * stubs fern calls libc through are excluded (watch/preemptible.c), and
 * fern is compiled with -mno-outline-atomics (CMakeLists.txt), so its spin
 * locks call no libgcc helper that would sit in the program's preemptible
 * code (any other helper it called would be copied into fern's section by
 * cmake/nopreempt.cmake). The PLT or the helpers left preemptible
 * deadlocked tests/cross/prog.c under qemu. */
#define ARCH_PREEMPT_STATIC 1

void fern_preempt_tramp(void) __attribute__((visibility("hidden")));

/* The copy: siginfo then ucontext, as the kernel lays out its frame (the
 * handler's ucontext pointer is 128 bytes into it). preempt.S reads these
 * offsets from the copy. */
#define ARCH_PREEMPT_COPY (sizeof(siginfo_t) + sizeof(ucontext_t))
_Static_assert(sizeof(siginfo_t) == 128, "preempt.S: frame layout");
_Static_assert(128 + __builtin_offsetof(ucontext_t, uc_stack) == 144, "preempt.S: F_UC_STACK");
_Static_assert(128 + __builtin_offsetof(ucontext_t, uc_sigmask) == 168, "preempt.S: F_UC_SIGMASK");
_Static_assert(128 + __builtin_offsetof(ucontext_t, uc_mcontext.regs) == 312, "preempt.S: F_REGS");
_Static_assert(128 + __builtin_offsetof(ucontext_t, uc_mcontext.sp) == 560, "preempt.S: F_SP");
_Static_assert(128 + __builtin_offsetof(ucontext_t, uc_mcontext.pc) == 568, "preempt.S: F_PC");

/* Nothing to size: the frame's size is fixed by the ABI. */
static inline void arch_preempt_init(void) {}

/* Stack the trampoline takes below the interrupted sp before it calls
 * preempt_yield: the copy and up to 15 bytes of alignment. AAPCS64 on
 * Linux has no red zone, so nothing below sp is live. */
static inline uintptr_t arch_preempt_frame(void) { return ARCH_PREEMPT_COPY + 16; }

#define ARCH_PSTATE_BTYPE (3u << 10)
#define ARCH_EXTRA_MAGIC 0x45585401u /* EXTRA_MAGIC, asm/sigcontext.h */

/* Make the context, once the handler returns, run the trampoline on a copy
 * of the signal frame. false (nothing changed): the frame keeps part of its
 * state outside the ucontext (an extra_context record, for SVE/SME state
 * too large for it, holds a pointer into the alternate signal stack, which
 * the copy cannot follow); the preemption is deferred. */
static inline bool arch_preempt_redirect(void *ucv)
{
    ucontext_t *uc = (ucontext_t *)ucv;
    const unsigned char *rec = uc->uc_mcontext.__reserved;
    const unsigned char *end = rec + sizeof uc->uc_mcontext.__reserved;
    while (rec + 8 <= end) {
        uint32_t magic = ((const uint32_t *)rec)[0], size = ((const uint32_t *)rec)[1];
        if (magic == ARCH_EXTRA_MAGIC)
            return false;
        if (magic == 0 || size < 8 || size > (uintptr_t)(end - rec))
            break;
        rec += size;
    }
    uintptr_t copy = ((uintptr_t)uc->uc_mcontext.sp - ARCH_PREEMPT_COPY) & ~(uintptr_t)15;
    __builtin_memcpy((void *)copy, (const char *)ucv - sizeof(siginfo_t), ARCH_PREEMPT_COPY);
    uc->uc_mcontext.sp = copy;
    uc->uc_mcontext.pc = (uintptr_t)fern_preempt_tramp;
    uc->uc_mcontext.pstate &= ~(uint64_t)ARCH_PSTATE_BTYPE;
    return true;
}

/* switch.S has no jump_return wrappers: the file of each body (sched/yield.c,
 * thread/thread.c, sync/chan.c, sync/cond.c) defines the public blocking
 * calls as plain calls of their bodies. */
#define ARCH_JUMP_RETURN 0

/* No walk of a parked stack yet: the saved frame is not described for
 * debuggers either (ARCH_DEBUG_FRAME). */
#define ARCH_STACK_WALK 0

/* fern never enables the Guarded Control Stack (Arm's shadow stack), and
 * Linux only turns it on at a process's own request. */
static inline bool arch_shadow_stack_active(void) { return false; }

#endif
