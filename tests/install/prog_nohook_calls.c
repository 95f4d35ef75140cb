/* SPDX-License-Identifier: MIT */
/* Calls no hooked function itself (a program whose client library makes the
 * blocking calls): linked with fern::hook_static it must still carry all of
 * libfern-hook, which check.sh compares symbol by symbol. */
#include <fern/fern.h>
#include <stdio.h>

static void *body(void *arg)
{
    (void)arg;
    return NULL;
}

int main(void)
{
    int rc = fern_run(body, NULL, NULL);
    printf("fern-hook static ok %d\n", rc);
    return rc;
}
