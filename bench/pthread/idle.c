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
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define STACK (64 * 1024)

static void *serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[512];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r <= 0)
            break;
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(fd, buf + off, (size_t)(r - off));
            if (w <= 0)
                goto out;
            off += w;
        }
    }
out:
    close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
            i++;
        else {
            fprintf(stderr, "usage: %s [--port N] [--workers N]\n", argv[0]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 4096) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &len) < 0) {
        fprintf(stderr, "pthread_idle: listen: %s\n", strerror(errno));
        return 1;
    }
    printf("listening on 127.0.0.1:%d\n", ntohs(sa.sin_port));
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
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t t;
        int err = pthread_create(&t, &at, serve, (void *)(intptr_t)fd);
        if (err) {
            fprintf(stderr, "pthread_idle: pthread_create: %s\n", strerror(err));
            close(fd);
            usleep(10000);
        }
    }
}
