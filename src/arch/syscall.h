/* SPDX-License-Identifier: MIT */
/*
 * One raw system call without libc: for fern-hook (hook/), which must not
 * go through the libc functions it replaces, nor touch errno, and for the
 * runtime's own calls that fern-hook must not see (stack hibernation's
 * /proc/self/mem, sched/hibernate.c). Each
 * architecture's <arch>/syscall.h provides
 *
 *   long arch_syscall6(long nr, long a, long b, long c, long d, long e, long f)
 *        the kernel's return value (-errno on error)
 *   ARCH_SYSCALL6(nr, a, b, c, d, e, f)
 *        the same as an expression (no call): for fern-hook's entry points
 *        that a sanitizer's runtime calls before it has started
 *        (hook/hook.h: HK_EARLY), where no instrumented function may run
 *
 * Kept apart from arch.h, which the runtime includes everywhere.
 */
#ifndef FERN_ARCH_SYSCALL_H
#define FERN_ARCH_SYSCALL_H

#if defined(__x86_64__)
#include "arch/x86_64/syscall.h"
#elif defined(__aarch64__)
#include "arch/aarch64/syscall.h"
#else
#error "fern runs on x86_64 and aarch64 only"
#endif

#endif
