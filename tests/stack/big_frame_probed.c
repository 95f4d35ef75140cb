/* SPDX-License-Identifier: MIT */
/* Victim for the overflow tests of test_stack.cc, built with
 * -fstack-clash-protection (what `pkg-config --cflags fern` and the CMake
 * target give): the prologue probes each page of the frame in order, so the
 * guard page is hit first. */
#include <stddef.h>

int big_frame_probed(void)
{
    volatile char buf[200 * 1024];
    for (size_t i = 0; i < sizeof buf; i += 64)
        buf[i] = (char)i;
    return buf[64];
}
