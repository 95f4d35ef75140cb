/* SPDX-License-Identifier: MIT */
/*
 * rpc: request/response over loopback TCP inside one process, measured two
 * ways with the same code:
 *   fern      one client and one server green thread (on --workers workers,
 *             default 1: the two threads hand the worker to each other);
 *   pthreads  two dedicated kernel threads with blocking sockets.
 *
 *   rpc [--count N] [--size BYTES] [--repeat R] [--workers N]
 *
 * The protocol: a message is a 4-byte big-endian length and that many bytes;
 * the server answers each request with a message of the same length (the
 * request's bytes with the first one incremented, so the client can tell an
 * answer from an echo of a stale buffer). Each run does 1,000 warm-up round
 * trips, then times --count of them. With --repeat R the two kinds alternate
 * (fern, pthreads, fern, ...), R runs each. Output, one line per run:
 *   rpc fern round_trip 23.4 us
 *   rpc pthreads round_trip 19.8 us
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
#include <sys/socket.h>
#include <unistd.h>

#define MSG_MAX ((uint32_t)1 << 20)
#define WARMUP  1000

/* fern_recv/fern_send have recv(2)/send(2)'s shape, so one implementation of
 * the protocol serves both runtimes. */
struct io_ops {
    ssize_t (*recv)(int, void *, size_t, int);
    ssize_t (*send)(int, const void *, size_t, int);
    int (*close)(int);
};

static ssize_t plain_send(int fd, const void *p, size_t n, int flags)
{
    return send(fd, p, n, flags | MSG_NOSIGNAL);
}

static const struct io_ops fern_ops = {fern_recv, fern_send, fern_close};
static const struct io_ops plain_ops = {recv, plain_send, close};

struct rpc_opts {
    uint64_t count;
    uint32_t size;
};

static bool io_full(const struct io_ops *io, int fd, char *p, size_t n, bool out)
{
    while (n) {
        ssize_t r = out ? io->send(fd, p, n, 0) : io->recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

/* buf holds 4 + len bytes: the header is written in front of the payload so
 * a message leaves in one send. */
static bool msg_send(const struct io_ops *io, int fd, char *buf, uint32_t len)
{
    uint32_t be = htonl(len);
    memcpy(buf, &be, 4);
    return io_full(io, fd, buf, 4 + (size_t)len, true);
}

/* Read one message into buf (capacity 4 + MSG_MAX); returns its length, or
 * -1 on end of stream, error or an oversized length. */
static int64_t msg_recv(const struct io_ops *io, int fd, char *buf)
{
    uint32_t be;
    if (!io_full(io, fd, (char *)&be, 4, false))
        return -1;
    uint32_t len = ntohl(be);
    if (len > MSG_MAX || !io_full(io, fd, buf + 4, len, false))
        return -1;
    return len;
}

struct server_args {
    const struct io_ops *io;
    int lfd;
    bool green;
};

static void *server_main(void *arg)
{
    struct server_args *a = arg;
    char *buf = malloc(4 + (size_t)MSG_MAX);
    int fd = a->green ? fern_accept(a->lfd, NULL, NULL, SOCK_CLOEXEC)
                      : accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0 && buf) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        for (;;) {
            int64_t n = msg_recv(a->io, fd, buf);
            if (n < 0)
                break;
            if (n > 0)
                buf[4]++;
            if (!msg_send(a->io, fd, buf, (uint32_t)n))
                break;
        }
    }
    if (fd >= 0)
        a->io->close(fd);
    free(buf);
    return NULL;
}

/* Connect to port, do the warm-up and the timed round trips. Returns ns per
 * round trip, or -1 on failure. */
static double client_run(const struct io_ops *io, bool green, int port, const struct rpc_opts *o)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int c = green ? fern_connect(fd, (struct sockaddr *)&sa, sizeof sa)
                  : connect(fd, (struct sockaddr *)&sa, sizeof sa);
    char *req = malloc(4 + (size_t)o->size), *resp = malloc(4 + (size_t)MSG_MAX);
    double result = -1;
    if (c == 0 && req && resp) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        memset(req + 4, 'r', o->size);
        int64_t t0 = 0;
        uint64_t i = 0, total = WARMUP + o->count;
        for (; i < total; i++) {
            if (i == WARMUP)
                t0 = fern_now_ns();
            if (!msg_send(io, fd, req, o->size))
                break;
            int64_t n = msg_recv(io, fd, resp);
            if (n != (int64_t)o->size || (n > 0 && resp[4] != 'r' + 1))
                break;
        }
        if (i == total)
            result = (double)(fern_now_ns() - t0) / (double)o->count;
    }
    io->close(fd); /* the server sees end of stream and leaves */
    free(req);
    free(resp);
    return result;
}

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        fprintf(stderr, "rpc: listen: %s\n", strerror(errno));
        exit(1);
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

static void *fern_run_once(void *arg)
{
    const struct rpc_opts *o = arg;
    int port;
    struct server_args sa = {&fern_ops, listen_any(&port), true};
    fern_thread *server;
    int r = fern_spawn(&server, NULL, server_main, &sa);
    if (r) {
        fprintf(stderr, "rpc: fern_spawn: %s\n", strerror(r));
        exit(1);
    }
    double ns = client_run(&fern_ops, true, port, o);
    fern_join(server, NULL);
    fern_close(sa.lfd);
    double *out = malloc(sizeof *out);
    if (out)
        *out = ns;
    return out;
}

static double run_fern(const struct rpc_opts *o)
{
    void *ret = NULL;
    int r = fern_run(fern_run_once, (void *)o, &ret);
    if (r || !ret) {
        fprintf(stderr, "rpc: fern_run: %s\n", strerror(r ? r : ENOMEM));
        exit(1);
    }
    double ns = *(double *)ret;
    free(ret);
    return ns;
}

static double run_pthreads(const struct rpc_opts *o)
{
    int port;
    struct server_args sa = {&plain_ops, listen_any(&port), false};
    pthread_t server;
    int r = pthread_create(&server, NULL, server_main, &sa);
    if (r) {
        fprintf(stderr, "rpc: pthread_create: %s\n", strerror(r));
        exit(1);
    }
    double ns = client_run(&plain_ops, false, port, o);
    pthread_join(server, NULL);
    close(sa.lfd);
    return ns;
}

static void usage(void)
{
    fprintf(stderr, "usage: rpc [--count N] [--size BYTES] [--repeat R] [--workers N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct rpc_opts o = {50000, 64};
    unsigned workers = 1, repeat = 1;
    static const struct option opts[] = {{"count", required_argument, NULL, 'n'},
                                         {"size", required_argument, NULL, 's'},
                                         {"repeat", required_argument, NULL, 'r'},
                                         {"workers", required_argument, NULL, 'w'},
                                         {"port", required_argument, NULL, 'p'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    for (int c; (c = getopt_long(argc, argv, "n:s:r:w:p:h", opts, NULL)) != -1;) {
        char *end = NULL;
        unsigned long long v = optarg ? strtoull(optarg, &end, 10) : 0;
        if (!optarg || *end)
            usage();
        switch (c) {
        case 'n':
            o.count = v;
            break;
        case 's':
            o.size = v <= MSG_MAX ? (uint32_t)v : MSG_MAX + 1;
            break;
        case 'r':
            repeat = (unsigned)v;
            break;
        case 'w':
            workers = (unsigned)v;
            break;
        case 'p':
            break; /* accepted for uniformity with the servers; the port is always free */
        default:
            usage();
        }
    }
    if (optind != argc || o.count == 0 || o.size == 0 || o.size > MSG_MAX || repeat == 0)
        usage();
    signal(SIGPIPE, SIG_IGN);
    fern_config cfg = {.workers = workers, .stack_size = 0};
    int r = fern_init(&cfg);
    if (r) {
        fprintf(stderr, "rpc: fern_init: %s\n", strerror(r));
        return 1;
    }
    printf("# rpc: %u-byte messages, %llu round trips per run over loopback TCP, %u fern "
           "worker(s)\n",
           o.size, (unsigned long long)o.count, fern_cluster_workers(fern_cluster_default()));
    int failed = 0;
    for (unsigned i = 0; i < repeat; i++) {
        double f = run_fern(&o);
        double p = run_pthreads(&o);
        failed |= f < 0 || p < 0;
        printf("rpc fern round_trip %.2f us\n", f / 1e3);
        printf("rpc pthreads round_trip %.2f us\n", p / 1e3);
        fflush(stdout);
    }
    fern_shutdown();
    return failed;
}
