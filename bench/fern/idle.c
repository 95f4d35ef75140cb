/* SPDX-License-Identifier: MIT */
/*
 * fern_idle: the fern server of the idle-connections scenario
 * (bench/idle/idle.py, bench/README.md "Idle connections"). One detached green
 * thread per connection, parked in fern_read on a 512-byte buffer on its own
 * stack (default stack size: $FERN_STACK_SIZE or 128 KiB); it writes back
 * what it reads until the peer closes. Hibernation follows $FERN_HIBERNATE
 * and $FERN_HIBERNATE_US.
 *
 *   fern_idle [--port N] [--workers N]     (workers: default 1)
 *
 * Prints `listening on 127.0.0.1:PORT` on stdout once ready. SIGUSR1 prints
 * one line `stats threads=N hibernated=N hibernations=N restores=N
 * touches=N hibernate_bytes=N` (fern_stats) on stdout. SIGTERM ends it
 * (default action).
 */
#include <fern/fern.h>

#include "../servers/servers_common.h"
#include <pthread.h>
#include <stdint.h>

static int lfd;

static void *conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[512];
    for (;;) {
        ssize_t r = fern_read(fd, buf, sizeof buf);
        if (r <= 0)
            break;
        for (ssize_t off = 0; off < r;) {
            ssize_t w = fern_write(fd, buf + off, (size_t)(r - off));
            if (w <= 0)
                goto out;
            off += w;
        }
    }
out:
    fern_close(fd);
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    fern_attr attr = {.name = "conn", .detached = true};
    for (;;) {
        int fd = fern_accept(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
                fern_sleep_ns(10 * 1000 * 1000);
            continue;
        }
        set_nodelay(fd);
        int err = fern_spawn(NULL, &attr, conn_main, (void *)(intptr_t)fd);
        if (err) {
            fprintf(stderr, "fern_idle: fern_spawn: %s\n", strerror(err));
            fern_close(fd);
            fern_sleep_ns(10 * 1000 * 1000);
        }
    }
    return NULL;
}

/* A plain thread: SIGUSR1 (blocked everywhere else) prints fern_stats. */
static void *stats_main(void *arg)
{
    sigset_t *ss = arg;
    for (;;) {
        int sig;
        if (sigwait(ss, &sig) != 0)
            continue;
        struct fern_stats s;
        if (fern_stats(&s) != 0)
            continue;
        printf("stats threads=%llu hibernated=%llu hibernations=%llu restores=%llu touches=%llu "
               "hibernate_bytes=%llu\n",
               (unsigned long long)s.threads_live, (unsigned long long)s.hibernated,
               (unsigned long long)s.hibernations, (unsigned long long)s.hibernate_restores,
               (unsigned long long)s.hibernate_touches, (unsigned long long)s.hibernate_bytes);
        fflush(stdout);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    unsigned workers = 1;
    int port = parse_args(argc, argv, &workers);
    signal(SIGPIPE, SIG_IGN);
    static sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &ss, NULL); /* inherited by the workers and the monitor */
    pthread_t st;
    if (pthread_create(&st, NULL, stats_main, &ss) != 0) {
        fprintf(stderr, "fern_idle: pthread_create failed\n");
        return 1;
    }
    fern_config cfg = {.workers = workers};
    int err = fern_init(&cfg);
    if (err) {
        fprintf(stderr, "fern_idle: fern_init: %s\n", strerror(err));
        return 1;
    }
    lfd = listen_on(port, SOCK_NONBLOCK, &port);
    printf("listening on 127.0.0.1:%d\n", port);
    fflush(stdout);
    err = fern_run(acceptor, NULL, NULL);
    fprintf(stderr, "fern_idle: fern_run: %s\n", strerror(err));
    return 1;
}
