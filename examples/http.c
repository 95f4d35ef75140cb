/* SPDX-License-Identifier: MIT */
/*
 * http: an HTTP/1.1 server, one green thread per connection, plain sequential
 * code: read, parse every complete request in the buffer, append each answer
 * to one output buffer, write it once, read again.
 *
 *   http [--port N] [--workers N] [--idle-timeout SECONDS]
 *
 * GET (or HEAD) /plaintext answers `Hello, World!` as TechEmpower asks
 * (text/plain, Content-Length, Server and Date); other paths get 404, other
 * methods on /plaintext 405. Keep-alive and pipelining are supported: the
 * answers to a pipelined batch leave in one write, in request order.
 *
 * Requests are parsed by http_parser.c (limits and refusals there: 8 KiB of
 * head, 64 fields, 1 MiB body, no Transfer-Encoding). A request the parser
 * refuses is answered with its status (400, 413, 414, 417, 431, 501, 505)
 * and the connection is closed. Request bodies are skipped, never stored.
 *
 * Idle timeout (default 10 s, 0 = none): each request must arrive in full
 * within that time of the connection opening or of the previous answer, or
 * the connection is closed (408 if part of a request had come). It is a
 * per-fd deadline (fern_fd_set_deadline), so a silent client costs a parked
 * green thread and nothing else; it also bounds writes to a client that stops
 * reading.
 *
 * Stopping: SIGINT/SIGTERM are read from a signalfd by the main green thread,
 * which shuts down the listening socket (the acceptor wakes and leaves) and
 * every open connection (their reads see end-of-file), waits for the
 * connection threads to finish (at most 2 s), and returns; exit code 0.
 */
#include "http_parser.h"

#include <fern/fern.h>

#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IN_CAP       16384u /* > HTTP_MAX_HEAD: a head always fits */
#define OUT_CAP      32768u
#define RESPONSE_MAX 512u /* bound on one answer's size (head + short body) */

struct conn {
    struct server *srv;
    int fd;
    struct conn *prev, *next;
    char in[IN_CAP];
    char out[OUT_CAP];
};

struct server {
    int lfd;
    int64_t idle_ns; /* 0 = no idle timeout */
    fern_mutex lock; /* guards conns and stopping */
    struct conn *conns;
    bool stopping;
    fern_wg live; /* connection threads running */
};

static void die(const char *what, int err)
{
    fprintf(stderr, "http: %s: %s\n", what, strerror(err));
    exit(1);
}

/* ---- the Date header ------------------------------------------------------
 * Formatted at most once a second per worker. The cache is worker-local
 * (C thread_local belongs to the kernel thread); it is only touched inside
 * this function, which never parks, and noinline keeps the compiler from
 * carrying its TLS address into a caller across a switch. */
__attribute__((noinline)) static void http_date(char out[29])
{
    static _Thread_local time_t cached_sec = -1;
    static _Thread_local char cached[30];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    if (ts.tv_sec != cached_sec) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        strftime(cached, sizeof cached, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        cached_sec = ts.tv_sec;
    }
    memcpy(out, cached, 29);
}

/* ---- building answers ---------------------------------------------------- */

struct outbuf {
    char *p;
    size_t n;
};

static void put(struct outbuf *o, const char *s, size_t n)
{
    memcpy(o->p + o->n, s, n);
    o->n += n;
}
#define PUT_LIT(o, lit) put((o), (lit), sizeof(lit) - 1)

static void put_uint(struct outbuf *o, unsigned long long v)
{
    char tmp[24];
    int i = (int)sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(o, tmp + i, sizeof tmp - (size_t)i);
}

/* Append one answer: status line, Server, Date, Content-Type, Content-Length,
 * Connection when it differs from the version's default, extra header lines,
 * then the body unless it answers a HEAD. */
static void put_response(struct outbuf *o, int status, int version_minor, bool keep_alive,
                         bool head_only, const char *extra, const char *body, size_t body_len)
{
    char date[29];
    http_date(date);
    PUT_LIT(o, "HTTP/1.1 ");
    put_uint(o, (unsigned)status);
    put(o, " ", 1);
    const char *reason = http_reason(status);
    put(o, reason, strlen(reason));
    PUT_LIT(o, "\r\nServer: fern\r\nDate: ");
    put(o, date, sizeof date);
    PUT_LIT(o, "\r\nContent-Type: text/plain\r\nContent-Length: ");
    put_uint(o, body_len);
    if (!keep_alive)
        PUT_LIT(o, "\r\nConnection: close");
    else if (version_minor == 0)
        PUT_LIT(o, "\r\nConnection: keep-alive");
    PUT_LIT(o, "\r\n");
    if (extra)
        put(o, extra, strlen(extra));
    PUT_LIT(o, "\r\n");
    if (!head_only)
        put(o, body, body_len);
}

static bool span_eq(http_span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.n == n && memcmp(s.p, lit, n) == 0;
}

static void answer(struct outbuf *o, const http_request *req)
{
    http_span path = req->target;
    const char *q = memchr(path.p, '?', path.n);
    if (q)
        path.n = (size_t)(q - path.p);
    bool get = span_eq(req->method, "GET"), head = span_eq(req->method, "HEAD");
    if (span_eq(path, "/plaintext")) {
        if (get || head) {
            static const char hello[] = "Hello, World!";
            put_response(o, 200, req->version_minor, req->keep_alive, head, NULL, hello,
                         sizeof hello - 1);
        } else {
            static const char msg[] = "Method Not Allowed\n";
            put_response(o, 405, req->version_minor, req->keep_alive, false, "Allow: GET, HEAD\r\n",
                         msg, sizeof msg - 1);
        }
        return;
    }
    static const char nf[] = "Not Found\n";
    put_response(o, 404, req->version_minor, req->keep_alive, head, NULL, nf, sizeof nf - 1);
}

static void answer_error(struct outbuf *o, int status)
{
    char body[64];
    int n = snprintf(body, sizeof body, "%s\n", http_reason(status));
    put_response(o, status, 1, false, false, NULL, body, (size_t)n);
}

/* ---- one connection ------------------------------------------------------ */

static bool send_all(int fd, const char *p, size_t n)
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

/* Closing with unread input makes the kernel send RST, which can destroy the
 * answer before the client reads it: half-close, then drain what the client
 * still sends for a short while. */
static void lingering_close(int fd)
{
    char sink[4096];
    shutdown(fd, SHUT_WR);
    fern_fd_set_deadline(fd, fern_now_ns() + 500 * 1000000LL, FERN_FOREVER);
    for (int i = 0; i < 64; i++)
        if (fern_recv(fd, sink, sizeof sink, 0) <= 0)
            break;
    fern_close(fd);
}

static void renew_deadline(const struct server *srv, int fd)
{
    int64_t d = srv->idle_ns ? fern_now_ns() + srv->idle_ns : FERN_FOREVER;
    fern_fd_set_deadline(fd, d, d);
}

/* Serve requests until the peer leaves, an error, or a close we decide on.
 * Returns true when we decided to close (the caller then closes lingering). */
static bool serve(struct conn *c)
{
    int fd = c->fd;
    size_t have = 0;   /* bytes buffered in c->in */
    uint64_t skip = 0; /* body bytes of an answered request still to drop */
    bool initiated_close = false;
    http_request req;
    renew_deadline(c->srv, fd);
    for (;;) {
        ssize_t n = fern_recv(fd, c->in + have, IN_CAP - have, 0);
        if (n <= 0) {
            if (n < 0 && errno == ETIMEDOUT && have > 0) {
                struct outbuf o = {c->out, 0};
                answer_error(&o, 408);
                send_all(fd, o.p, o.n);
                initiated_close = true;
            }
            break;
        }
        have += (size_t)n;
        if (skip) {
            size_t d = skip < have ? (size_t)skip : have;
            memmove(c->in, c->in + d, have - d);
            have -= d;
            skip -= d;
        }
        struct outbuf o = {c->out, 0};
        size_t off = 0;
        bool answered = false;
        while (off < have && !initiated_close) {
            int r = http_parse_request(c->in + off, have - off, &req);
            if (r == HTTP_INCOMPLETE)
                break;
            if (r < 0) {
                answer_error(&o, -r);
                initiated_close = true;
                break;
            }
            size_t after = have - off - (size_t)r;
            bool body_pending = after < req.content_length;
            if (req.expect_continue && body_pending)
                PUT_LIT(&o, "HTTP/1.1 100 Continue\r\n\r\n");
            answer(&o, &req);
            answered = true;
            if (!req.keep_alive)
                initiated_close = true;
            if (body_pending) {
                skip = req.content_length - after;
                off = have;
            } else {
                off += (size_t)r + (size_t)req.content_length;
            }
            if (o.n > OUT_CAP - 2 * RESPONSE_MAX) {
                if (!send_all(fd, o.p, o.n))
                    return false;
                o.n = 0;
            }
        }
        memmove(c->in, c->in + off, have - off);
        have -= off;
        if (o.n && !send_all(fd, o.p, o.n))
            break;
        if (initiated_close)
            break;
        if (answered)
            renew_deadline(c->srv, fd);
    }
    return initiated_close;
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct server *srv = c->srv;
    fern_mutex_lock(&srv->lock);
    bool stopping = srv->stopping;
    if (!stopping) {
        c->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = c;
        srv->conns = c;
    }
    fern_mutex_unlock(&srv->lock);
    bool linger = stopping ? false : serve(c);
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
    if (linger)
        lingering_close(c->fd);
    else
        fern_close(c->fd);
    free(c);
    fern_wg_done(&srv->live);
    return NULL;
}

/* ---- accepting ----------------------------------------------------------- */

static void *acceptor_main(void *arg)
{
    struct server *srv = arg;
    int64_t last_log = 0;
    for (;;) {
        int fd = fern_accept(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE)) {
            if (fd >= 0)
                fern_close(fd);
            break;
        }
        if (fd < 0) {
            int e = errno;
            if (e == ECONNABORTED || e == EINTR || e == EPROTO)
                continue;
            /* Out of descriptors or memory: retrying at once would spin; back
             * off and say so, at most once a second. */
            int64_t now = fern_now_ns();
            if (now - last_log >= 1000000000LL) {
                fprintf(stderr, "http: accept: %s (backing off)\n", strerror(e));
                last_log = now;
            }
            fern_sleep_ns(10 * 1000000LL);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = malloc(sizeof *c);
        if (!c) {
            fern_close(fd);
            fern_sleep_ns(10 * 1000000LL);
            continue;
        }
        c->srv = srv;
        c->fd = fd;
        c->prev = c->next = NULL;
        fern_wg_add(&srv->live, 1);
        fern_attr attr = {.stack_size = 0, .name = "http-conn", .cluster = NULL, .detached = true};
        int r = fern_spawn(NULL, &attr, conn_main, c);
        if (r) {
            fern_wg_done(&srv->live);
            free(c);
            fern_close(fd);
            int64_t now = fern_now_ns();
            if (now - last_log >= 1000000000LL) {
                fprintf(stderr, "http: spawn: %s (backing off)\n", strerror(r));
                last_log = now;
            }
            fern_sleep_ns(10 * 1000000LL);
        }
    }
    return NULL;
}

/* ---- main ---------------------------------------------------------------- */

struct run_args {
    struct server *srv;
    sigset_t *signals;
};

static void *server_main(void *arg)
{
    struct run_args *a = arg;
    struct server *srv = a->srv;
    int sfd = signalfd(-1, a->signals, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0)
        die("signalfd", errno);
    fern_thread *acceptor;
    fern_attr attr = {.stack_size = 0, .name = "http-accept", .cluster = NULL, .detached = false};
    int r = fern_spawn(&acceptor, &attr, acceptor_main, srv);
    if (r)
        die("fern_spawn", r);

    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    getsockname(srv->lfd, (struct sockaddr *)&sa, &sl);
    printf("listening on 127.0.0.1:%d\n", ntohs(sa.sin_port));
    fflush(stdout);

    struct signalfd_siginfo si;
    while (fern_read(sfd, &si, sizeof si) < 0 && errno == EINTR)
        ;
    fprintf(stderr, "http: signal %u, stopping\n", si.ssi_signo);

    fern_mutex_lock(&srv->lock);
    __atomic_store_n(&srv->stopping, true, __ATOMIC_RELEASE);
    shutdown(srv->lfd, SHUT_RDWR);
    for (struct conn *c = srv->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    fern_mutex_unlock(&srv->lock);

    fern_join(acceptor, NULL);
    if (fern_wg_timedwait(&srv->live, fern_now_ns() + 2000000000LL) == ETIMEDOUT)
        fprintf(stderr, "http: connections still open after 2 s\n");
    fern_close(srv->lfd);
    fern_close(sfd);
    return NULL;
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket", errno);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("bind", errno);
    if (listen(fd, 4096) < 0)
        die("listen", errno);
    return fd;
}

static void usage(void)
{
    fprintf(stderr, "usage: http [--port N] [--workers N] [--idle-timeout SECONDS]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int port = 8080;
    unsigned workers = 0;
    double idle = 10.0;
    static const struct option opts[] = {{"port", required_argument, NULL, 'p'},
                                         {"workers", required_argument, NULL, 'w'},
                                         {"idle-timeout", required_argument, NULL, 'i'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    for (int c; (c = getopt_long(argc, argv, "p:w:i:h", opts, NULL)) != -1;) {
        char *end;
        switch (c) {
        case 'p':
            port = (int)strtol(optarg, &end, 10);
            if (*end || port < 0 || port > 65535)
                usage();
            break;
        case 'w':
            workers = (unsigned)strtoul(optarg, &end, 10);
            if (*end)
                usage();
            break;
        case 'i':
            idle = strtod(optarg, &end);
            if (*end || idle < 0 || idle > 86400)
                usage();
            break;
        default:
            usage();
        }
    }
    if (optind != argc)
        usage();

    /* Block the stop signals in every thread (the workers inherit this mask)
     * so that only the signalfd sees them. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    static struct server srv;
    srv.lfd = listen_on(port);
    srv.idle_ns = (int64_t)(idle * 1e9);
    fern_config cfg = {.workers = workers, .stack_size = 0};
    int r = fern_init(&cfg);
    if (r)
        die("fern_init", r);
    struct run_args a = {&srv, &signals};
    r = fern_run(server_main, &a, NULL);
    if (r)
        die("fern_run", r);
    fern_shutdown();
    return 0;
}
