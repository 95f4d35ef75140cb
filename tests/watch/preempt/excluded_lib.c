/* SPDX-License-Identifier: MIT */
/* A static library whose code sections the build renames to fern_nopreempt
 * (cmake/nopreempt.cmake): tests/watch/preempt/excluded.c. */
#include <stdatomic.h>
#include <stdint.h>

uint64_t excluded_spin(atomic_bool *stop)
{
    uint64_t x = 88172645463325252ull;
    while (!atomic_load_explicit(stop, memory_order_relaxed))
        for (int i = 0; i < 1000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    return x;
}
