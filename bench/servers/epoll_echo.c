/* epoll_echo: the cost floor for TCP echo. One thread, one edge-triggered
 * epoll loop; echoes what it reads, keeps unsent bytes per connection until
 * EPOLLOUT. --port N; --workers ignored. SIGINT/SIGTERM stop it. */
#define _GNU_SOURCE
#include "servers_common.h"
#include <sys/epoll.h>
#include <sys/signalfd.h>

#define CAP 65536

struct conn {
    int fd;
    size_t off, len; /* pending output in buf[off..len) */
    char buf[CAP];
};

/* 0 ok, -1 close. */
static int pump(struct conn *c)
{
    for (;;) {
        while (c->off < c->len) {
            ssize_t w = write(c->fd, c->buf + c->off, c->len - c->off);
            if (w < 0)
                return errno == EAGAIN ? 0 : -1;
            c->off += (size_t)w;
        }
        c->off = c->len = 0;
        ssize_t r = read(c->fd, c->buf, CAP);
        if (r == 0)
            return -1;
        if (r < 0)
            return errno == EAGAIN ? 0 : -1;
        c->len = (size_t)r;
    }
}

int main(int argc, char **argv)
{
    int port = parse_port(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGINT);
    sigaddset(&ss, SIGTERM);
    sigprocmask(SIG_BLOCK, &ss, NULL);
    int sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    int lfd = listen_on(port, SOCK_NONBLOCK, &port);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    ev.data.ptr = &sfd;
    epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
    printf("listening on 127.0.0.1:%d\n", port);
    fflush(stdout);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        if (n < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &sfd) {
                fprintf(stderr, "epoll_echo: signal, stopping\n");
                return 0;
            }
            if (p == NULL) {
                for (;;) {
                    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd < 0)
                        break;
                    set_nodelay(fd);
                    struct conn *c = malloc(sizeof *c);
                    c->fd = fd;
                    c->off = c->len = 0;
                    struct epoll_event ce = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ce);
                }
                continue;
            }
            struct conn *c = p;
            if ((evs[i].events & (EPOLLERR | EPOLLHUP)) || pump(c) < 0) {
                close(c->fd);
                free(c);
            }
        }
    }
}
