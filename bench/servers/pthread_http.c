/* SPDX-License-Identifier: MIT */
/* pthread_http: thread per connection, blocking sockets (what users have
 * today). Each connection thread reads, answers every complete request in
 * the batch with one write. --port N; --workers ignored. SIGINT/SIGTERM exit
 * the process (connection threads are detached). */
#define _GNU_SOURCE
#include "servers_common.h"
#include <pthread.h>

static void *serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char in[16384];
    char out[64 * RESP_MAX];
    size_t in_len = 0;
    for (;;) {
        ssize_t r = read(fd, in + in_len, sizeof in - in_len);
        if (r <= 0)
            break;
        in_len += (size_t)r;
        unsigned reqs = 0;
        size_t used = count_requests(in, in_len, &reqs);
        if (used == 0 && in_len == sizeof in)
            break;
        memmove(in, in + used, in_len - used);
        in_len -= used;
        size_t rl;
        const char *resp = http_response(&rl);
        int bad = 0;
        while (reqs && !bad) {
            size_t ol = 0;
            while (reqs && ol + rl <= sizeof out) {
                memcpy(out + ol, resp, rl);
                ol += rl;
                reqs--;
            }
            for (size_t off = 0; off < ol;) {
                ssize_t w = write(fd, out + off, ol - off);
                if (w <= 0) {
                    bad = 1;
                    break;
                }
                off += (size_t)w;
            }
        }
        if (bad)
            break;
    }
    close(fd);
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
