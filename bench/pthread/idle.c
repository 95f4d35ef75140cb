/* SPDX-License-Identifier: MIT */
/*
 * pthread_idle: the kernel-thread server of the idle-connections scenario
 * (bench/idle/idle.py, bench/README.md "Idle connections"). One detached
 * thread per connection with a 64 KiB stack (pthread_attr_setstacksize;
 * glibc adds its guard page), blocked in read(2) on a 512-byte buffer on
 * that stack; it writes back what it reads until the peer closes.
 *
 *   pthread_idle [--port N] [--workers N]   (--workers ignored)
 *
 * Prints `listening on 127.0.0.1:PORT` once ready; SIGTERM ends it (default
 * action).
 */
#define _GNU_SOURCE
#include "../servers/servers_common.h"
#include <pthread.h>
#include <stdint.h>

#define STACK (64 * 1024)

static void *serve(void *arg)
{
    char buf[512];
    echo_blocking((int)(intptr_t)arg, buf, sizeof buf);
    return NULL;
}

int main(int argc, char **argv)
{
    int port = parse_port(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    int lfd = listen_on(port, 0, &port);
    printf("listening on 127.0.0.1:%d\n", port);
    fflush(stdout);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, STACK);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
                usleep(10000);
            continue;
        }
        set_nodelay(fd);
        pthread_t t;
        int err = pthread_create(&t, &at, serve, (void *)(intptr_t)fd);
        if (err) {
            fprintf(stderr, "pthread_idle: pthread_create: %s\n", strerror(err));
            close(fd);
            usleep(10000);
        }
    }
}
