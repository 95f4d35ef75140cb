/* SPDX-License-Identifier: MIT */
/* x86_64 side of the architecture interface (arch.h). Strongly ordered:
 * only StoreLoad needs a fence. */
#ifndef FERN_ARCH_X86_64_H
#define FERN_ARCH_X86_64_H

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

/* Not __builtin_prefetch: GCC 12 deletes calls to a static function whose
 * only effect is that builtin (it takes the function for one without side
 * effects), so helpers built on it silently vanished. */
static inline __attribute__((always_inline)) void prefetch(const void *p)
{
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
}

/* A locked RMW on a local is a full fence on x86 and, unlike
 * atomic_thread_fence, ThreadSanitizer accepts it. */
static inline void full_fence(void)
{
    uint32_t x = 0;
    __atomic_fetch_or(&x, 0, __ATOMIC_SEQ_CST);
}

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

/* The saved switch frame for debuggers (debugmap.c, gdb/fern-gdb.py):
 * fern_ctx_switch pushes rbp, rbx, r12..r15, then 8 bytes of MXCSR and x87
 * control word, below the return address of its call. */
#define ARCH_DEBUG_FRAME                                                     \
    .frame_size = 64, .f_rip = 56, .f_rbp = 48, .f_rbx = 40, .f_r12 = 32,     \
    .f_r13 = 24, .f_r14 = 16, .f_r15 = 8

#endif
