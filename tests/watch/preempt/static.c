/* SPDX-License-Identifier: MIT */
/*
 * A program linked with the static libfern.a is preempted (tests/CMakeLists.txt
 * links it with fern_static). fern's code is then inside the executable;
 * the build moves it to a section of its own (cmake/nopreempt.cmake) that
 * preemption leaves alone, and the rest of the executable's code is
 * preempted as with libfern.so. Before, preemption was silently off in such
 * a program.
 *
 * On one worker, two green threads spin in this file's code until a third
 * one, which sleeps 1 ms at a time, has woken 200 times. The spinners call
 * nothing (neither fern nor libc): fern_stats must count preemptions (the
 * old code counted none: the sleeper ran only through compensation), the
 * worker must spend a few ms of CPU per 1 ms sleep (the sleep and about a
 * kernel tick of spinning, in CPU time so that the machine's load does not
 * matter: median <= 6 ms, 9 in 10 <= 10 ms, as tests/watch/test_preempt.cc), and
 * fern_dump's preemption line must say that the executable's code is
 * preempted, less fern's section.
 */
#include <fern/fern.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_bool stop;
static int64_t worst;
static double gaps[200]; /* the worker's CPU time per sleep, ms */

static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static __attribute__((noinline)) void *spinner(void *arg)
{
    uint64_t x = (uintptr_t)arg | 1;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        for (int i = 0; i < 1000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    return (void *)(uintptr_t)x;
}

static void *sleeper(void *arg)
{
    (void)arg;
    fern_sleep_ns(20 * 1000000);
    for (int i = 0; i < 200; i++) {
        int64_t t0 = fern_now_ns(), c0 = cpu_ns();
        fern_sleep_ns(1000000);
        int64_t late = fern_now_ns() - t0 - 1000000;
        gaps[i] = (cpu_ns() - c0) / 1e6;
        if (late > worst)
            worst = late;
    }
    atomic_store(&stop, true);
    return NULL;
}

int main(void)
{
    fern_config cfg = {.workers = 1};
    if (fern_init(&cfg)) {
        fprintf(stderr, "fern_init failed\n");
        return 1;
    }
    char line[1024] = "";
    FILE *f = tmpfile();
    if (!f || fern_dump(f) < 0)
        return 1;
    rewind(f);
    while (fgets(line, sizeof line, f) && !strstr(line, "preemption"))
        ;
    fclose(f);
    printf("%s", line);
    fern_thread *t[3];
    if (fern_spawn(&t[0], NULL, spinner, (void *)1) || fern_spawn(&t[1], NULL, spinner, (void *)2) ||
        fern_spawn(&t[2], NULL, sleeper, NULL))
        return 1;
    /* A watchdog: without preemption (and with compensation slower than
     * this), the spinners keep the sleeper out. */
    for (int i = 0; i < 600 && !atomic_load(&stop); i++)
        usleep(100000);
    if (!atomic_load(&stop)) {
        fprintf(stderr, "FAIL: the sleeper did not finish in 60 s\n");
        _exit(1);
    }
    for (int i = 0; i < 3; i++)
        fern_join(t[i], NULL);
    struct fern_stats s;
    fern_stats(&s);
    qsort(gaps, 200, sizeof *gaps, by_value);
    double p50 = gaps[100], p90 = gaps[180];
    printf("worst lateness %.1f ms (wall); worker CPU per sleep: median %.2f, p90 %.2f ms; "
           "%llu preemptions\n",
           worst / 1e6, p50, p90, (unsigned long long)s.preemptions);
    int bad = 0;
    if (!strstr(line, "in the executable's code less ")) {
        fprintf(stderr, "FAIL: fern_dump does not say the executable's code is preempted\n");
        bad = 1;
    }
    if (s.preemptions == 0) {
        fprintf(stderr, "FAIL: no preemption\n");
        bad = 1;
    }
#ifdef FERN_TEST_EMULATED
    const double scale = 5; /* qemu-user: as kLatenessScale in tests/fern_test.h */
#else
    const double scale = 1;
#endif
    if (p50 > 6.0 * scale || p90 > 10.0 * scale) {
        fprintf(stderr, "FAIL: the sleeper waited too long behind the spinners\n");
        bad = 1;
    }
    fern_shutdown();
    return bad;
}
