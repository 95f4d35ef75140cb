/* SPDX-License-Identifier: MIT */
/* pthread_echo: thread per connection, blocking sockets. --port N;
 * --workers ignored. SIGINT/SIGTERM exit the process. */
#define _GNU_SOURCE
#include "servers_common.h"
#include <pthread.h>

static void *serve(void *arg)
{
    char buf[65536];
    echo_blocking((int)(intptr_t)arg, buf, sizeof buf);
    return NULL;
}

static void on_signal(int s)
{
    (void)s;
    _exit(0);
}

int main(int argc, char **argv)
{
    int port = parse_port(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    int lfd = listen_on(port, 0, &port);
    printf("listening on 127.0.0.1:%d\n", port);
    fflush(stdout);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 * 1024);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                usleep(10000);
            continue;
        }
        set_nodelay(fd);
        pthread_t t;
        if (pthread_create(&t, &at, serve, (void *)(intptr_t)fd) != 0)
            close(fd);
    }
}
