/* SPDX-License-Identifier: MIT */
/* x86_64 side of the architecture interface (arch.h). Strongly ordered:
 * only StoreLoad needs a fence. */
#ifndef FERN_ARCH_X86_64_H
#define FERN_ARCH_X86_64_H

#include <cpuid.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

/* Not __builtin_prefetch: GCC 12 deletes calls to a static function whose
 * only effect is that builtin (it takes the function for one without side
 * effects), so helpers built on it silently vanished. */
static inline __attribute__((always_inline)) void prefetch(const void *p)
{
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
}

/* The same, for a line about to be written: fetched exclusive, so the
 * first store does not pay a second transfer to take it from the core
 * that wrote it last (PREFETCHW: a no-op on Intel cores before Broadwell). */
static inline __attribute__((always_inline)) void prefetch_w(const void *p)
{
    __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
}

/* A locked RMW on a local is a full fence on x86 and, unlike
 * atomic_thread_fence, ThreadSanitizer accepts it. */
static inline void full_fence(void)
{
    uint32_t x = 0;
    __atomic_fetch_or(&x, 0, __ATOMIC_SEQ_CST);
}

/* The time-stamp counter: a cycle count the tracer reads (base/trace.h),
 * about 10 ns against 25 for clock_gettime's vDSO path on the machine it
 * was measured on; constant-rate only where /proc/cpuinfo says
 * constant_tsc and nonstop_tsc (debug/trace.c checks). */
static inline uint64_t arch_cycles(void) { return __builtin_ia32_rdtsc(); }

/* Jump to `label` if the 32-bit word `flag` (a hidden global) is nonzero:
 * a compare with memory and a branch, where C's relaxed load and test take
 * three instructions (the tracer's event points, base/trace.h). */
#define ARCH_JUMP_IF_SET(flag, label) \
    __asm__ goto("cmpl $0, %0\n\tjne %l1" : : "m"(flag) : "cc" : label)
/* The same for a 64-bit word (base/slow.h's SLOW). */
#define ARCH_JUMP_IF_SET64(flag, label) \
    __asm__ goto("cmpq $0, %0\n\tjne %l1" : : "m"(flag) : "cc" : label)

/* Two instructions: the variable's offset from the GOT, then a load
 * relative to the thread pointer in fs. */
#define ARCH_TLS_LOAD(var)                                        \
    ({                                                            \
        __typeof__(var) v_;                                       \
        __asm__ volatile("movq " #var "@gottpoff(%%rip), %0\n\t"  \
                         "movq %%fs:(%0), %0"                     \
                         : "=r"(v_)                               \
                         :                                        \
                         : "memory");                             \
        v_;                                                       \
    })

/* The frame fern_ctx_switch pops (MXCSR/x87 CW, r15..rbp) and a return
 * into fern_ctx_entry, with rbx = the thread and r12 = thread_entry. */
static inline void *ctx_init(char *top, fern_thread *self)
{
    uintptr_t sp = ((uintptr_t)top & ~(uintptr_t)15) - 64;
    uint64_t *f = (uint64_t *)sp;
    ((uint32_t *)f)[0] = 0x1F80; /* MXCSR: all exceptions masked, round to nearest */
    ((uint32_t *)f)[1] = 0x037F; /* x87 CW: default */
    f[1] = 0;                        /* r15 */
    f[2] = 0;                        /* r14 */
    f[3] = 0;                        /* r13 */
    f[4] = (uint64_t)(uintptr_t)thread_entry; /* r12 */
    f[5] = (uint64_t)(uintptr_t)self;         /* rbx */
    f[6] = 0;                                 /* rbp */
    f[7] = (uint64_t)(uintptr_t)fern_ctx_entry;
    return (void *)sp;
}

/* The saved switch frame for debuggers (debug/debugmap.c, gdb/fern-gdb.py):
 * fern_ctx_switch pushes rbp, rbx, r12..r15, then 8 bytes of MXCSR and x87
 * control word, below the return address of its call. */
#define ARCH_DEBUG_FRAME                                                     \
    .frame_size = 64, .f_rip = 56, .f_rbp = 48, .f_rbx = 40, .f_r12 = 32,     \
    .f_r13 = 24, .f_r14 = 16, .f_r15 = 8

/* *st = v, then return *ld, in that order as far as the compiler goes (the
 * light side of an asymmetric Dekker handshake: the CPU may still reorder
 * them; the other side's membarrier orders that). Two instructions, without
 * the memory clobber a compiler barrier costs the code around it. Under
 * ThreadSanitizer, atomics it can see. */
static inline uint8_t arch_store_load_u8(uint8_t *st, uint8_t v, const uint8_t *ld)
{
#if defined(__SANITIZE_THREAD__) || defined(FERN_TSAN)
    __atomic_store_n(st, v, __ATOMIC_SEQ_CST);
    return __atomic_load_n(ld, __ATOMIC_SEQ_CST);
#else
    uint8_t r;
    __asm__ volatile("movb %2, %0\n\tmovb %3, %1" : "=m"(*st), "=q"(r) : "qi"(v), "m"(*ld));
    return r;
#endif
}

/* ---- stack hibernation (sched/hibernate.c, x86_64/switch.S) ---- */
/* A hibernated thread's saved stack pointer points at a frame of the same
 * shape in its heap block, whose return address is fern_hib_entry: the
 * next fern_ctx_switch into the thread pops it, and fern_hib_entry (with
 * rbx = the thread, r12 = the block) calls hib_resume on the worker's
 * hibernation stack, then pops the real frame at the address it returns. */
#define ARCH_HIBERNATE 1
#define ARCH_HIB_FRAME_WORDS 8
void fern_hib_entry(void) __attribute__((visibility("hidden")));
/* Build that frame in f; real_sp is the thread's real saved frame (its
 * first word, MXCSR and the x87 control word, is copied). f[1..3] and
 * f[6] are free for the caller's own use (popped into r15..r13 and rbp,
 * which fern_hib_entry overwrites from the real frame). */
static inline void arch_hib_frame(uint64_t *f, const void *real_sp, void *t, void *block)
{
    f[0] = *(const uint64_t *)real_sp;
    f[4] = (uint64_t)(uintptr_t)block;
    f[5] = (uint64_t)(uintptr_t)t;
    f[7] = (uint64_t)(uintptr_t)fern_hib_entry;
}

/* Memory protection keys: hibernation takes a key whose access every
 * thread's PKRU denies (the kernel's default for every key but 0), tags
 * stacks being copied out or back with it, and lets only the copying
 * thread through, for the copy. Only called once pkey_alloc succeeded
 * (rdpkru faults on a CPU or kernel without them). */
#define ARCH_PKEYS 1
static inline uint32_t arch_pkru_read(void)
{
    uint32_t a, d;
    __asm__ volatile("rdpkru" : "=a"(a), "=d"(d) : "c"(0));
    return a;
}
static inline void arch_pkru_write(uint32_t v)
{
    __asm__ volatile("wrpkru" : : "a"(v), "c"(0), "d"(0) : "memory");
}

/* ---- preemption (watch/preempt.c, x86_64/preempt.S) ---- */
#define ARCH_PREEMPT 1
#define ARCH_PREEMPT_STATIC 1

/* Sized here, read by the trampoline (defined in preempt.S). */
extern uint32_t fern_preempt_xsave_size __attribute__((visibility("hidden")));
extern uint32_t fern_preempt_use_xsave __attribute__((visibility("hidden")));
void fern_preempt_tramp(void) __attribute__((visibility("hidden")));

static inline uintptr_t arch_uc_pc(const void *uc)
{
    return (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
}
static inline uintptr_t arch_uc_sp(const void *uc)
{
    return (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.gregs[REG_RSP];
}

/* XSAVE with every component XCR0 enables (its size from CPUID leaf 0xd),
 * or FXSAVE's 512 bytes where the OS has not enabled XSAVE. */
static inline void arch_preempt_init(void)
{
    unsigned a, b, c, d;
    fern_preempt_use_xsave = 0;
    fern_preempt_xsave_size = 512;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) && __get_cpuid_max(0, NULL) >= 0xd) {
        __cpuid_count(0xd, 0, a, b, c, d);
        if (b >= 576) {
            fern_preempt_use_xsave = 1;
            fern_preempt_xsave_size = b;
        }
    }
}

/* Stack the trampoline takes below the interrupted sp before it calls
 * preempt_yield: the 128-byte red zone, the pushed rip, up to 64 bytes of
 * alignment, 16 registers + flags, the XSAVE area. */
static inline uintptr_t arch_preempt_frame(void)
{
    return 128 + 8 + 64 + 136 + fern_preempt_xsave_size;
}

/* Make the context, once the handler returns, call the trampoline from the
 * interrupted instruction: push the interrupted rip below the red zone.
 * Always possible. */
static inline bool arch_preempt_redirect(void *ucv)
{
    greg_t *g = ((ucontext_t *)ucv)->uc_mcontext.gregs;
    uintptr_t nsp = (uintptr_t)g[REG_RSP] - 128 - 8;
    *(uintptr_t *)nsp = (uintptr_t)g[REG_RIP];
    g[REG_RSP] = (greg_t)nsp;
    g[REG_RIP] = (greg_t)(uintptr_t)fern_preempt_tramp;
    return true;
}

/* ---- the switch's public entry points (switch.S) ---- */
/* switch.S defines fern_yield, fern_join, fern_chan_send, fern_chan_recv
 * and fern_cond_wait as jump_return wrappers of their *_body functions. */
#define ARCH_JUMP_RETURN 1

/* walk.c walks a parked thread's stack (libunwind, else frame pointers). */
#define ARCH_STACK_WALK 1

/* arch_prctl(ARCH_SHSTK_STATUS) (Linux 6.6+, not in older headers) reports
 * the shadow-stack features enabled for this thread; bit 0 is the shadow
 * stack itself. Older kernels fail the call: no shadow stack then. */
static inline bool arch_shadow_stack_active(void)
{
    unsigned long long features = 0;
    return syscall(SYS_arch_prctl, 0x5005, &features) == 0 && (features & 1ULL);
}

#endif
