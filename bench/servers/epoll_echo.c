/* SPDX-License-Identifier: MIT */
/* epoll_echo: the cost floor for TCP echo. One thread, one edge-triggered
 * epoll loop, as few system calls per message as such a loop can make:
 *  - a read that returns less than it asked for emptied the receive queue,
 *    so the loop does not read again (that read could only say EAGAIN): the
 *    next data raises a new edge, which epoll reports with EPOLLIN. An event
 *    without EPOLLIN (writability alone) costs no system call at all;
 *  - everything is read into one shared buffer and written straight back;
 *    only bytes a full socket refused are copied to the connection, which
 *    then waits for EPOLLOUT. Per message: read + write, and a share of one
 *    epoll_wait.
 * (Until this version the loop read until EAGAIN: read, write, read per
 * message, and fern's echo, which skips that read, beat this "floor".)
 * --port N; --workers ignored. SIGINT/SIGTERM stop it. */
#define _GNU_SOURCE
#include "servers_common.h"
#include <sys/epoll.h>
#include <sys/signalfd.h>

#define CAP 65536

struct conn {
    int fd;
    size_t off, len;  /* refused output in pending[off..len) */
    char *pending;    /* CAP bytes, allocated the first time a write is short */
};

static char shared[CAP];

/* Queue the bytes a write refused; 0 ok, -1 out of memory. */
static int keep(struct conn *c, const char *p, size_t n)
{
    if (!c->pending && !(c->pending = malloc(CAP)))
        return -1;
    memcpy(c->pending, p, n);
    c->off = 0;
    c->len = n;
    return 0;
}

/* Write p[0..n); what the socket refuses is kept. 0 ok, -1 close. */
static int send_all(struct conn *c, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(c->fd, p, n);
        if (w < 0)
            return errno == EAGAIN ? keep(c, p, n) : -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One epoll event. 0 ok, -1 close. */
static int on_event(struct conn *c, uint32_t events)
{
    if (c->len) { /* earlier output still refused: nothing is read until it is out */
        size_t n = c->len - c->off;
        c->len = 0;
        if (send_all(c, c->pending + c->off, n) < 0)
            return -1;
        if (c->len)
            return 0;
    }
    if (!(events & (EPOLLIN | EPOLLRDHUP)))
        return 0;
    for (;;) {
        ssize_t r = read(c->fd, shared, CAP);
        if (r == 0)
            return -1;
        if (r < 0)
            return errno == EAGAIN ? 0 : -1;
        if (send_all(c, shared, (size_t)r) < 0)
            return -1;
        if (c->len || r < CAP) /* socket full, or the queue was emptied */
            return 0;
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
                    c->pending = NULL;
                    struct epoll_event ce = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ce);
                }
                continue;
            }
            struct conn *c = p;
            if ((evs[i].events & (EPOLLERR | EPOLLHUP)) || on_event(c, evs[i].events) < 0) {
                close(c->fd);
                free(c->pending);
                free(c);
            }
        }
    }
}
