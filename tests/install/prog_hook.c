/* SPDX-License-Identifier: MIT */
/* Built against an installed fern-hook: ten green threads on one worker each
 * make a plain 100 ms usleep and a blocking pipe read; hooked, they overlap. */
#include <fern/fern.h>
#include <stdio.h>
#include <unistd.h>

static int fds[2];

static void *sleeper(void *arg)
{
    (void)arg;
    return (void *)(long)usleep(100000);
}

static void *writer(void *arg)
{
    (void)arg;
    usleep(50000);
    return (void *)(long)(write(fds[1], "k", 1) != 1);
}

static void *body(void *arg)
{
    (void)arg;
    fern_thread *t[11];
    long bad = 0;
    int64_t t0 = fern_now_ns();
    for (int i = 0; i < 10; i++)
        bad += fern_spawn(&t[i], NULL, sleeper, NULL) != 0;
    bad += fern_spawn(&t[10], NULL, writer, NULL) != 0;
    char c = 0;
    bad += read(fds[0], &c, 1) != 1 || c != 'k';
    for (int i = 0; i < 11; i++) {
        void *r = NULL;
        bad += fern_join(t[i], &r) != 0 || r != NULL;
    }
    bad += fern_now_ns() - t0 > 600000000; /* ten 100 ms sleeps, overlapped */
    return (void *)bad;
}

int main(void)
{
    fern_config cfg = {.workers = 1};
    void *r = (void *)1;
    if (pipe(fds) || fern_init(&cfg))
        return 1;
    int e = fern_run(body, NULL, &r);
    printf("fern-hook %s\n", e || r ? "error" : "ok");
    return e || r || fern_shutdown();
}
