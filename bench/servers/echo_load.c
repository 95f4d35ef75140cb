/* SPDX-License-Identifier: MIT */
/* echo_load: a neutral load generator for echo servers (not built on fern,
 * so it loads every server the same way). One thread, one epoll loop,
 * N connections; each connection keeps exactly one M-byte message in flight:
 * send, read the full echo back, check it, record the round trip, send again.
 * It spends as few system calls as the protocol allows, so that it can load a
 * server harder than the server loads itself: after a send it waits for the
 * readiness edge instead of trying a read that can only say EAGAIN (the echo
 * cannot be back yet), and it watches EPOLLOUT only while a send is stuck.
 *
 *   echo_load --port N [--conns 64] [--size 64] [--duration 5] [--warmup 0.5]
 *
 * Prints one line:
 *   echo_load conns C size S round_trips R seconds T rps X p50_us A p99_us B max_us M errors E
 * Latencies are kept in a log-linear histogram (64 sub-buckets per power of
 * two, within 1.6%). Pin it with taskset; 127.0.0.1 only. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SUB_BITS 6
#define SUB (1u << SUB_BITS)
#define NBUCKETS ((64 - SUB_BITS + 1) * SUB)

static uint64_t hist[NBUCKETS];

static unsigned hidx(uint64_t v)
{
    if (v < SUB)
        return (unsigned)v;
    unsigned m = 63u - (unsigned)__builtin_clzll(v);
    unsigned k = m - SUB_BITS + 1;
    return (k << SUB_BITS) | (unsigned)((v >> (k - 1)) & (SUB - 1));
}

static double hval(unsigned i)
{
    if (i < SUB)
        return i;
    unsigned k = i >> SUB_BITS, s = i & (SUB - 1);
    return (double)((uint64_t)(SUB + s) << (k - 1)) + (double)((uint64_t)1 << (k - 1)) / 2;
}

static double pct(uint64_t total, double q)
{
    uint64_t want = (uint64_t)(q * (double)total), acc = 0;
    if (want >= total)
        want = total - 1;
    for (unsigned i = 0; i < NBUCKETS; i++) {
        acc += hist[i];
        if (acc > want)
            return hval(i);
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct conn {
    int fd;
    size_t sent, got;
    uint64_t t0;
    int dead;
    int want_out;  /* EPOLLOUT armed: a send returned EAGAIN */
};

static size_t size = 64;
static char *msg;
static char *rbuf;

int main(int argc, char **argv)
{
    int port = 0;
    unsigned conns = 64;
    double duration = 5, warmup = 0.5;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--port"))
            port = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--conns"))
            conns = (unsigned)atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--size"))
            size = (size_t)atol(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--duration"))
            duration = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--warmup"))
            warmup = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: echo_load --port N [--conns 64] [--size 64] [--duration 5] [--warmup 0.5]\n");
            return 2;
        }
    }
    if (!port || !conns || !size || duration <= 0 || duration > 600) {
        fprintf(stderr, "echo_load: need --port, conns > 0, size > 0, 0 < duration <= 600\n");
        return 2;
    }
    msg = malloc(size);
    rbuf = malloc(size);
    for (size_t i = 0; i < size; i++)
        msg[i] = (char)('a' + i % 26);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ep = epoll_create1(0);
    struct conn *cs = calloc(conns, sizeof *cs);
    /* Connect with blocking sockets (simple, one at a time), then go non-blocking. */
    for (unsigned i = 0; i < conns; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            fprintf(stderr, "echo_load: connect %u: %s\n", i, strerror(errno));
            return 1;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int fl = 1;
        ioctl(fd, FIONBIO, &fl);
        cs[i].fd = fd;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = &cs[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    uint64_t start = now_ns();
    uint64_t measure_from = start + (uint64_t)(warmup * 1e9);
    uint64_t end = measure_from + (uint64_t)(duration * 1e9);
    uint64_t rts = 0, errors = 0, max_ns = 0;
    struct epoll_event evs[512];
    unsigned live = conns;
    /* Kick every connection: its first message goes out in the loop below. */
    int nkick = (int)conns;
    for (;;) {
        uint64_t t = now_ns();
        if (t >= end || !live)
            break;
        int n;
        if (nkick > 0) {
            /* First pass: every connection, as if each had an event. */
            n = nkick < 512 ? nkick : 512;
            for (int i = 0; i < n; i++) {
                struct conn *c = &cs[conns - (unsigned)nkick + (unsigned)i];
                c->t0 = now_ns();
                evs[i].data.ptr = c;
            }
            nkick -= n;
        } else {
            n = epoll_wait(ep, evs, 512, (int)((end - t) / 1000000) + 1);
            if (n < 0 && errno != EINTR)
                break;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c->dead)
                continue;
            for (;;) {
                if (c->sent < size) {
                    ssize_t w = send(c->fd, msg + c->sent, size - c->sent, MSG_NOSIGNAL);
                    if (w < 0) {
                        if (errno != EAGAIN)
                            goto dead;
                        if (!c->want_out) { /* watch for room, then retry */
                            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c};
                            epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                            c->want_out = 1;
                        }
                        break;
                    }
                    c->sent += (size_t)w;
                    if (c->sent < size)
                        continue;
                    break; /* the echo cannot be back yet: wait for the edge */
                }
                ssize_t r = recv(c->fd, rbuf + c->got, size - c->got, 0);
                if (r == 0)
                    goto dead;
                if (r < 0) {
                    if (errno == EAGAIN)
                        break;
                    goto dead;
                }
                if (memcmp(rbuf + c->got, msg + c->got, (size_t)r) != 0)
                    goto dead;
                c->got += (size_t)r;
                if (c->got < size)
                    continue;
                uint64_t t1 = now_ns();
                if (t1 >= measure_from && t1 < end) {
                    uint64_t d = t1 - c->t0;
                    hist[hidx(d)]++;
                    if (d > max_ns)
                        max_ns = d;
                    rts++;
                }
                c->sent = c->got = 0;
                c->t0 = t1;
            }
            continue;
        dead:
            errors++;
            c->dead = 1;
            live--;
            epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        }
    }
    double secs = duration;
    uint64_t t = now_ns();
    if (t < end) /* every connection died */
        secs = t > measure_from ? (double)(t - measure_from) / 1e9 : 1e-9;
    for (unsigned i = 0; i < conns; i++)
        close(cs[i].fd);
    printf("echo_load conns %u size %zu round_trips %llu seconds %.3f rps %.0f p50_us %.1f p99_us %.1f "
           "max_us %.1f errors %llu\n",
           conns, size, (unsigned long long)rts, secs, (double)rts / secs,
           rts ? pct(rts, 0.50) / 1e3 : 0.0, rts ? pct(rts, 0.99) / 1e3 : 0.0, (double)max_ns / 1e3,
           (unsigned long long)errors);
    return errors ? 3 : 0;
}
