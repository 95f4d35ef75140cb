/* SPDX-License-Identifier: MIT */
/*
 * A shared library linked with the static libfern.a, named in
 * FERN_PREEMPT_LIBS (tests/watch/preempt/withfern.c): fern's code is inside it,
 * so none of it may be preempted, its spinners included (docs/preemption.md
 * "What is interrupted"). Everything runs in here: the executable holds no
 * fern.
 */
#include <fern/fern.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static atomic_bool stop;

static void *spinner(void *arg)
{
    (void)arg;
    uint64_t x = 88172645463325252ull;
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
    for (int i = 0; i < 100; i++)
        fern_sleep_ns(1000000);
    atomic_store(&stop, true);
    return NULL;
}

int withfern_main(void)
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
    if (!strstr(line, "libfern_test_withfern.so (not preempted: fern is inside)")) {
        fprintf(stderr, "FAIL: fern_dump does not say the listed library is left alone\n");
        bad = 1;
    }
    if (s.preemptions != 0) {
        fprintf(stderr, "FAIL: a listed library with fern inside was preempted\n");
        bad = 1;
    }
    fern_shutdown();
    return bad;
}
