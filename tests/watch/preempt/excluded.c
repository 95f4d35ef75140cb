/* SPDX-License-Identifier: MIT */
/*
 * "Excluding a static library" (docs/preemption.md) works: the spinners run
 * in a static library whose code sections were renamed to fern_nopreempt
 * (tests/watch/preempt/excluded_lib.c, cmake/nopreempt.cmake), so they are never
 * preempted: fern_stats counts no preemption, and the sleeper beside them
 * still finishes, served by compensation. fern_dump's preemption line
 * counts the excluded bytes.
 */
#include <fern/fern.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

uint64_t excluded_spin(atomic_bool *stop);

static atomic_bool stop;

static void *spinner(void *arg)
{
    (void)arg;
    return (void *)(uintptr_t)excluded_spin(&stop);
}

static void *sleeper(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++)
        fern_sleep_ns(1000000);
    atomic_store(&stop, true);
    return NULL;
}

int main(void)
{
    fern_config cfg = {.workers = 1};
    if (fern_init(&cfg))
        return 1;
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
    if (fern_spawn(&t[0], NULL, spinner, NULL) || fern_spawn(&t[1], NULL, spinner, NULL) ||
        fern_spawn(&t[2], NULL, sleeper, NULL))
        return 1;
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
    printf("%llu preemptions, %llu deferred\n", (unsigned long long)s.preemptions,
           (unsigned long long)s.preemptions_deferred);
    int bad = 0;
    if (!strstr(line, "in the executable's code less ")) {
        fprintf(stderr, "FAIL: fern_dump shows no excluded section\n");
        bad = 1;
    }
    if (s.preemptions != 0) {
        fprintf(stderr, "FAIL: code in a fern_nopreempt section was preempted\n");
        bad = 1;
    }
    fern_shutdown();
    return bad;
}
