/* SPDX-License-Identifier: MIT */
/*
 * hello: the smallest fern program. fern_run starts the runtime and runs
 * main_green as a green thread; it spawns three named threads, joins them and
 * collects their results.
 */
#include <fern/fern.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(const char *what, int rc)
{
    if (rc != 0) {
        fprintf(stderr, "hello: %s failed: %s\n", what, strerror(rc));
        exit(1);
    }
}

static void *greet(void *arg)
{
    intptr_t i = (intptr_t)arg;
    /* Green threads sleep without holding a kernel thread: the three naps
     * overlap on a worker that is free for others meanwhile. */
    check("fern_sleep_ns", fern_sleep_ns((3 - i) * 10000000));
    printf("hello from green thread %llu \"%s\"\n", (unsigned long long)fern_thread_id(NULL),
           fern_thread_name(NULL));
    return (void *)(i * i);
}

static void *main_green(void *unused)
{
    (void)unused;
    static const char *names[3] = {"alpha", "beta", "gamma"};
    fern_thread *t[3];
    for (intptr_t i = 0; i < 3; i++) {
        fern_attr attr = {.stack_size = 0, .name = names[i], .cluster = NULL, .detached = false};
        check("fern_spawn", fern_spawn(&t[i], &attr, greet, (void *)i));
    }
    for (int i = 0; i < 3; i++) {
        void *ret;
        check("fern_join", fern_join(t[i], &ret));
        printf("joined \"%s\": result %ld\n", names[i], (long)(intptr_t)ret);
    }
    return NULL;
}

int main(void)
{
    check("fern_run", fern_run(main_green, NULL, NULL));
    check("fern_shutdown", fern_shutdown());
    return 0;
}
