/* SPDX-License-Identifier: MIT */
/*
 * Unmodified client code on green threads: hiredis, as Debian ships it,
 * called from 100 green threads on ONE worker. Nothing here knows about
 * fern-hook; linking libfern-hook is what turns hiredis's connect, write
 * and read into parks instead of stalls of the worker. Run it with and
 * without FERN_HOOK=0 to see the difference.
 *
 *   redis-server --port 6399 --save '' &
 *   ./redis_hook 127.0.0.1 6399
 */
#include <fern/fern.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>

#define CLIENTS 100
#define ROUNDS 100

static const char *host = "127.0.0.1";
static int port = 6379;

/* One client: its own connection, INCR on a shared counter, plus a BLPOP
 * that waits 0.2 s in the server (a call that would stall the worker). */
static void *client(void *arg)
{
    (void)arg;
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "out of memory");
        exit(1);
    }
    for (int i = 0; i < ROUNDS; i++)
        freeReplyObject(redisCommand(c, "INCR fern:example:counter"));
    freeReplyObject(redisCommand(c, "BLPOP fern:example:nothing 0.2"));
    redisFree(c);
    return NULL;
}

static void *body(void *arg)
{
    (void)arg;
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) {
        fprintf(stderr, "cannot reach redis at %s:%d\n", host, port);
        exit(1);
    }
    freeReplyObject(redisCommand(c, "DEL fern:example:counter"));
    int64_t t0 = fern_now_ns();
    fern_thread *t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        fern_spawn(&t[i], NULL, client, NULL);
    for (int i = 0; i < CLIENTS; i++)
        fern_join(t[i], NULL);
    double secs = (double)(fern_now_ns() - t0) / 1e9;
    redisReply *r = redisCommand(c, "GET fern:example:counter");
    printf("%d clients x %d INCR + one 0.2 s BLPOP each on one worker: counter %s in %.2f s\n",
           CLIENTS, ROUNDS, r && r->str ? r->str : "?", secs);
    freeReplyObject(r);
    redisFree(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        host = argv[1];
    if (argc > 2)
        port = atoi(argv[2]);
    fern_config cfg = {.workers = 1};
    if (fern_init(&cfg) || fern_run(body, NULL, NULL))
        return 1;
    return fern_shutdown();
}
