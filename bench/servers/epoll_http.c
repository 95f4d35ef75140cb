/* SPDX-License-Identifier: MIT */
/* epoll_http: the cost floor for HTTP plaintext. One thread, one
 * edge-triggered epoll loop, fixed per-connection buffers; answers every
 * complete request (GET /plaintext or anything else: same answer) and writes
 * all answers to one read batch with one write: per request batch, read +
 * write and a share of one epoll_wait. (Until this version the loop read
 * until EAGAIN, one read more per batch than fern's server makes.)
 * --port N; --workers ignored. SIGINT/SIGTERM stop it (signalfd in the same
 * loop). */
#define _GNU_SOURCE
#include "servers_common.h"
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>

#define IN_CAP 16384
#define OUT_CAP (64 * RESP_MAX)

struct conn {
    int fd;
    int unread; /* input may be waiting behind refused output */
    size_t in_len, out_off, out_len;
    char in[IN_CAP];
    char out[OUT_CAP];
};

static void conn_close(struct conn *c)
{
    close(c->fd);
    free(c);
}

/* Flush pending output; 0 ok (maybe partial), -1 error. */
static int flush_out(struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (w < 0)
            return errno == EAGAIN ? 0 : -1;
        c->out_off += (size_t)w;
    }
    c->out_off = c->out_len = 0;
    return 0;
}

/* Answer every complete request in c->in; 0 ok, -1 close. Answers go out
 * in batches of OUT_CAP; a batch the socket refuses stays in c->out. */
static int answer(struct conn *c)
{
    unsigned reqs = 0;
    size_t used = count_requests(c->in, c->in_len, &reqs);
    if (used == 0 && c->in_len == IN_CAP)
        return -1; /* header too large */
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
    size_t rl;
    const char *resp = http_response(&rl);
    while (reqs) {
        while (reqs && c->out_len + rl <= OUT_CAP) {
            memcpy(c->out + c->out_len, resp, rl);
            c->out_len += rl;
            reqs--;
        }
        if (flush_out(c) < 0)
            return -1;
        if (reqs && c->out_len) /* socket full with answers left: rare, give up politely */
            return -1;
    }
    return 0;
}

/* One epoll event; 0 ok, -1 close. A read that returns less than it asked
 * for emptied the receive queue, so the loop does not read again (that read
 * could only say EAGAIN): the next request raises a new edge. A connection
 * whose answers the socket refused reads nothing more until they are out,
 * then reads what arrived meanwhile (no new edge may come for it). */
static int on_event(struct conn *c, uint32_t events)
{
    if (flush_out(c) < 0)
        return -1;
    if (c->out_len) {
        c->unread |= (events & (EPOLLIN | EPOLLRDHUP)) != 0;
        return 0;
    }
    if (!(events & (EPOLLIN | EPOLLRDHUP)) && !c->unread)
        return 0; /* writability alone: no system call */
    c->unread = 0;
    for (;;) {
        size_t room = IN_CAP - c->in_len;
        ssize_t r = read(c->fd, c->in + c->in_len, room);
        if (r == 0)
            return -1;
        if (r < 0)
            return errno == EAGAIN ? 0 : -1;
        c->in_len += (size_t)r;
        if (answer(c) < 0)
            return -1;
        if (c->out_len) {
            c->unread = 1;
            return 0;
        }
        if ((size_t)r < room)
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
                fprintf(stderr, "epoll_http: signal, stopping\n");
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
                    c->in_len = c->out_off = c->out_len = 0;
                    c->unread = 0;
                    struct epoll_event ce = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ce);
                }
                continue;
            }
            struct conn *c = p;
            if ((evs[i].events & (EPOLLERR | EPOLLHUP)) || on_event(c, evs[i].events) < 0)
                conn_close(c);
        }
    }
}
