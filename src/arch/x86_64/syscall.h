/* SPDX-License-Identifier: MIT */
/* x86_64: one raw system call (arch/syscall.h). */
#ifndef FERN_ARCH_X86_64_SYSCALL_H
#define FERN_ARCH_X86_64_SYSCALL_H

/* The call as an expression, for code that must not call a function
 * (arch/syscall.h: ARCH_SYSCALL6). */
#define ARCH_SYSCALL6(n, a, b, c, d, e, f)                                                         \
    ({                                                                                             \
        register long r10_ __asm__("r10") = (long)(d);                                            \
        register long r8_ __asm__("r8") = (long)(e);                                              \
        register long r9_ __asm__("r9") = (long)(f);                                              \
        long ret_;                                                                                 \
        __asm__ volatile("syscall"                                                                 \
                         : "=a"(ret_)                                                              \
                         : "a"((long)(n)), "D"((long)(a)), "S"((long)(b)), "d"((long)(c)),         \
                           "r"(r10_), "r"(r8_), "r"(r9_)                                           \
                         : "rcx", "r11", "memory");                                                \
        ret_;                                                                                      \
    })

static inline long arch_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    return ARCH_SYSCALL6(n, a, b, c, d, e, f);
}

#endif
