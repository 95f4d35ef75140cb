/* SPDX-License-Identifier: MIT */
/*
 * echo_server: a TCP echo server, one green thread per connection, written as
 * plain blocking code (read, then write back what was read).
 *
 *   echo_server [--port N] [--workers N]
 *
 * Prints `listening on 127.0.0.1:PORT` once ready; SIGINT/SIGTERM stop it:
 * the listening socket and every connection are shut down, the connection
 * threads finish, and it exits 0.
 *
 * The server part (echo_server_start / echo_server_stop) is also compiled into
 * examples/echo.c, which defines ECHO_SERVER_NO_MAIN before including this
 * file.
 */
#include <fern/fern.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define ECHO_BUF 16384u

struct echo_conn {
    struct echo_server *srv;
    int fd;
    struct echo_conn *prev, *next;
    char buf[ECHO_BUF];
};

struct echo_server {
    int lfd;
    int port;
    fern_thread *acceptor;
    fern_mutex lock; /* guards conns and stopping */
    struct echo_conn *conns;
    bool stopping;
    fern_wg live; /* connection threads running */
};

static bool echo_send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = fern_send(fd, p, n, 0);
        if (w < 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void *echo_conn_main(void *arg)
{
    struct echo_conn *c = arg;
    struct echo_server *srv = c->srv;
    fern_mutex_lock(&srv->lock);
    bool stopping = srv->stopping;
    if (!stopping) {
        c->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = c;
        srv->conns = c;
    }
    fern_mutex_unlock(&srv->lock);
    while (!stopping) {
        ssize_t n = fern_recv(c->fd, c->buf, sizeof c->buf, 0);
        if (n <= 0 || !echo_send_all(c->fd, c->buf, (size_t)n))
            break;
    }
    /* Unlink before closing: the stopper calls shutdown on linked fds, which
     * must never hit an fd number that was closed and reused meanwhile. */
    fern_mutex_lock(&srv->lock);
    if (!stopping) {
        if (c->prev)
            c->prev->next = c->next;
        else
            srv->conns = c->next;
        if (c->next)
            c->next->prev = c->prev;
    }
    fern_mutex_unlock(&srv->lock);
    fern_close(c->fd);
    free(c);
    fern_wg_done(&srv->live);
    return NULL;
}

static void *echo_acceptor_main(void *arg)
{
    struct echo_server *srv = arg;
    int64_t last_log = 0;
    for (;;) {
        int fd = fern_accept(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE)) {
            if (fd >= 0)
                fern_close(fd);
            break;
        }
        int err = fd < 0 ? errno : 0;
        struct echo_conn *c = NULL;
        if (fd >= 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            c = malloc(sizeof *c);
            if (!c)
                err = ENOMEM;
        }
        if (c) {
            c->srv = srv;
            c->fd = fd;
            c->prev = c->next = NULL;
            fern_wg_add(&srv->live, 1);
            fern_attr attr = {
                .stack_size = 0, .name = "echo-conn", .cluster = NULL, .detached = true};
            err = fern_spawn(NULL, &attr, echo_conn_main, c);
            if (err) {
                fern_wg_done(&srv->live);
                free(c);
            }
        }
        if (!err || err == ECONNABORTED || err == EINTR || err == EPROTO)
            continue;
        if (fd >= 0)
            fern_close(fd);
        /* Out of descriptors, memory or stacks: back off instead of spinning,
         * and say so at most once a second. */
        int64_t now = fern_now_ns();
        if (now - last_log >= 1000000000LL) {
            fprintf(stderr, "echo_server: accept: %s (backing off)\n", strerror(err));
            last_log = now;
        }
        fern_sleep_ns(10 * 1000000LL);
    }
    return NULL;
}

/* Listen on 127.0.0.1:port (0 = any free port) and start accepting. From a
 * green thread. Returns 0 or an errno value; srv->port is the bound port. */
static int echo_server_start(struct echo_server *srv, int port)
{
    memset(srv, 0, sizeof *srv);
    srv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (srv->lfd < 0)
        return errno;
    int one = 1;
    setsockopt(srv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (bind(srv->lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(srv->lfd, 4096) < 0 ||
        getsockname(srv->lfd, (struct sockaddr *)&sa, &sl) < 0) {
        int e = errno;
        close(srv->lfd);
        return e;
    }
    srv->port = ntohs(sa.sin_port);
    fern_attr attr = {.stack_size = 0, .name = "echo-accept", .cluster = NULL, .detached = false};
    int r = fern_spawn(&srv->acceptor, &attr, echo_acceptor_main, srv);
    if (r)
        fern_close(srv->lfd);
    return r;
}

/* Stop accepting, shut every connection down and wait (at most 2 s) for the
 * connection threads to finish. */
static void echo_server_stop(struct echo_server *srv)
{
    fern_mutex_lock(&srv->lock);
    __atomic_store_n(&srv->stopping, true, __ATOMIC_RELEASE);
    shutdown(srv->lfd, SHUT_RDWR);
    for (struct echo_conn *c = srv->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    fern_mutex_unlock(&srv->lock);
    fern_join(srv->acceptor, NULL);
    if (fern_wg_timedwait(&srv->live, fern_now_ns() + 2000000000LL) == ETIMEDOUT)
        fprintf(stderr, "echo_server: connections still open after 2 s\n");
    fern_close(srv->lfd);
}

#ifndef ECHO_SERVER_NO_MAIN

static sigset_t stop_signals;

static void *server_main(void *arg)
{
    int port = *(int *)arg;
    int sfd = signalfd(-1, &stop_signals, SFD_NONBLOCK | SFD_CLOEXEC);
    static struct echo_server srv;
    int r = sfd < 0 ? errno : echo_server_start(&srv, port);
    if (r) {
        fprintf(stderr, "echo_server: %s\n", strerror(r));
        exit(1);
    }
    printf("listening on 127.0.0.1:%d\n", srv.port);
    fflush(stdout);
    struct signalfd_siginfo si;
    while (fern_read(sfd, &si, sizeof si) < 0 && errno == EINTR)
        ;
    fprintf(stderr, "echo_server: signal %u, stopping\n", si.ssi_signo);
    echo_server_stop(&srv);
    fern_close(sfd);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: echo_server [--port N] [--workers N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int port = 7007;
    unsigned workers = 0;
    static const struct option opts[] = {{"port", required_argument, NULL, 'p'},
                                         {"workers", required_argument, NULL, 'w'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    for (int c; (c = getopt_long(argc, argv, "p:w:h", opts, NULL)) != -1;) {
        char *end;
        if (c == 'p') {
            port = (int)strtol(optarg, &end, 10);
            if (*end || port < 0 || port > 65535)
                usage();
        } else if (c == 'w') {
            workers = (unsigned)strtoul(optarg, &end, 10);
            if (*end)
                usage();
        } else {
            usage();
        }
    }
    if (optind != argc)
        usage();
    /* Only the signalfd sees the stop signals: block them in every thread
     * (the workers inherit this mask). */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    fern_config cfg = {.workers = workers, .stack_size = 0};
    int r = fern_init(&cfg);
    if (!r)
        r = fern_run(server_main, &port, NULL);
    if (r) {
        fprintf(stderr, "echo_server: %s\n", strerror(r));
        return 1;
    }
    fern_shutdown();
    return 0;
}
#endif
