/* SPDX-License-Identifier: MIT */
/* Victims for the overflow tests of test_stack.cc, built with
 * -fno-stack-clash-protection (the compilers' default): a frame far larger
 * than the guard page moves the stack pointer past the guard without
 * touching it. */
#include <fern/fern.h>
#include <stddef.h>

/* Fill a 64 KiB local array from its lowest address up, as code filling a
 * buffer does: the first writes land below the guard, in whatever lies
 * there. */
int big_frame_unprobed(void)
{
    volatile long buf[64 * 1024 / sizeof(long)];
    for (size_t i = 0; i < sizeof buf / sizeof buf[0]; i++)
        buf[i] = (long)i;
    return (int)buf[8];
}

/* Switch out (park for 10 ms) while the 64 KiB frame is live, touching
 * only its top. Long enough to be sure to park: a sleep whose deadline has
 * passed by the time it would park returns at once, and a 1 us one did
 * under qemu-user (which translates each new code path on first use). */
int big_frame_unprobed_yield(void)
{
    volatile char buf[64 * 1024];
    buf[sizeof buf - 1] = 1;
    fern_sleep_ns(10000000);
    return buf[sizeof buf - 1];
}
