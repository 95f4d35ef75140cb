/* SPDX-License-Identifier: MIT */
/*
 * A profiling target: four green threads compute in busy_work() and yield
 * now and then, for about half a second. tests/tools/check.py perf samples it.
 */
#include <fern/fern.h>

#include <stdint.h>

__attribute__((noinline)) static uint64_t busy_work(uint64_t x)
{
    for (int i = 0; i < 100000; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

static void *worker(void *arg)
{
    int64_t end = fern_now_ns() + 500000000;
    uint64_t x = (uintptr_t)arg;
    while (fern_now_ns() < end) {
        x = busy_work(x);
        fern_yield();
    }
    return (void *)(uintptr_t)x;
}

int main(void)
{
    fern_thread *t[4];
    for (uintptr_t i = 0; i < 4; i++)
        if (fern_spawn(&t[i], NULL, worker, (void *)i))
            return 1;
    for (int i = 0; i < 4; i++)
        fern_join(t[i], NULL);
    return 0;
}
