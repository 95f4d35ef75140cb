/* SPDX-License-Identifier: MIT */
/* aarch64: one raw system call (arch/syscall.h). */
#ifndef FERN_ARCH_AARCH64_SYSCALL_H
#define FERN_ARCH_AARCH64_SYSCALL_H

/* The call as an expression, for code that must not call a function
 * (arch/syscall.h: ARCH_SYSCALL6). */
#define ARCH_SYSCALL6(n, a, b, c, d, e, f)                                                         \
    ({                                                                                             \
        register long x8_ __asm__("x8") = (long)(n);                                              \
        register long x0_ __asm__("x0") = (long)(a);                                              \
        register long x1_ __asm__("x1") = (long)(b);                                              \
        register long x2_ __asm__("x2") = (long)(c);                                              \
        register long x3_ __asm__("x3") = (long)(d);                                              \
        register long x4_ __asm__("x4") = (long)(e);                                              \
        register long x5_ __asm__("x5") = (long)(f);                                              \
        __asm__ volatile("svc 0"                                                                   \
                         : "+r"(x0_)                                                               \
                         : "r"(x8_), "r"(x1_), "r"(x2_), "r"(x3_), "r"(x4_), "r"(x5_)              \
                         : "memory");                                                              \
        x0_;                                                                                       \
    })

static inline long arch_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    return ARCH_SYSCALL6(n, a, b, c, d, e, f);
}

#endif
