/* SPDX-License-Identifier: MIT */
/*
 * fern's one clock: CLOCK_MONOTONIC in nanoseconds. Every deadline in the
 * API and inside the runtime (timers, futex waits, epoll) is on it.
 */
#include "base/base.h"

#include <time.h>

int64_t fern_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
