/* SPDX-License-Identifier: MIT */
/*
 * errno across a context switch (see errno_get in base.h).
 */
#include "base/base.h"

/* errno lives at a per-kernel-thread address that glibc declares `const`, so
 * the compiler may reuse it across a switch: save and restore it in
 * functions of their own. */
__attribute__((noinline)) int errno_get(void)
{
    __asm__ volatile("" ::: "memory");
    return errno;
}
__attribute__((noinline)) void errno_set(int e)
{
    __asm__ volatile("" ::: "memory");
    errno = e;
}
