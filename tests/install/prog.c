/* SPDX-License-Identifier: MIT */
#include <fern/fern.h>
#include <stdio.h>

static void *child(void *arg) { return (void *)((long)arg * 2); }

static void *body(void *arg)
{
    fern_thread *t;
    void *r = NULL;
    if (fern_spawn(&t, NULL, child, (void *)21L) || fern_join(t, &r))
        return NULL;
    return r;
}

int main(void)
{
    void *r = NULL;
    int e = fern_run(body, NULL, &r);
    printf("fern %s %ld\n", e ? "error" : "ok", (long)r);
    return e || fern_shutdown();
}
