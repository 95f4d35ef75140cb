/* SPDX-License-Identifier: MIT */
/* Built the documented way (pkg-config --cflags, or the fern::fern CMake
 * target), which adds -fstack-clash-protection: a 200 KiB frame on a
 * 128 KiB stack probes its pages in order and hits the guard page, and fern
 * reports the overflow naming the thread. Without the flag the frame would
 * jump the guard. Expected: abort, with the report on stderr. */
#include <fern/fern.h>
#include <stdio.h>

static int big_frame(void)
{
    volatile char buf[200 * 1024];
    for (unsigned i = 0; i < sizeof buf; i += 64)
        buf[i] = (char)i;
    return buf[64];
}

static void *diver(void *arg)
{
    (void)arg;
    return (void *)(long)big_frame();
}

int main(void)
{
    fern_attr a = {0};
    a.stack_size = 128 * 1024;
    a.name = "big-frame";
    fern_thread *t;
    if (fern_spawn(&t, &a, diver, NULL) || fern_join(t, NULL))
        return 1;
    puts("the overflow was not caught");
    return 0;
}
