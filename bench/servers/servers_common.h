/* SPDX-License-Identifier: MIT */
/* Shared bits of the C server peers (bench/servers/ and the idle-connections
 * servers bench/fern/idle.c, bench/pthread/idle.c): the CLI contract
 * (--port N, --workers N), the listening socket, the blocking echo loop,
 * and the HTTP plaintext answer (the same headers as examples/http.c:
 * Server, Date, Content-Type, Content-Length). */
#ifndef SERVERS_COMMON_H
#define SERVERS_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static inline void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(1);
}

/* --port N, --workers N. *workers gets N where the caller has a use for
 * it; with workers NULL the option is accepted and ignored. Anything else:
 * the usage line on stderr and exit status 2. */
static inline int parse_args(int argc, char **argv, unsigned *workers)
{
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workers") && i + 1 < argc) {
            i++;
            if (workers)
                *workers = (unsigned)atoi(argv[i]);
        } else {
            fprintf(stderr, "usage: %s [--port N] [--workers N]\n", argv[0]);
            exit(2);
        }
    }
    return port;
}

static inline int parse_port(int argc, char **argv)
{
    return parse_args(argc, argv, NULL);
}

/* Bound, listening IPv4 socket on 127.0.0.1:port; *out_port gets the port. */
static inline int listen_on(int port, int flags, int *out_port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("bind");
    if (listen(fd, 4096) < 0)
        die("listen");
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    *out_port = ntohs(sa.sin_port);
    return fd;
}

static inline void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Write back what a blocking fd reads into buf[0..cap) until the peer
 * closes or a call fails; then close fd. */
static inline void echo_blocking(int fd, char *buf, size_t cap)
{
    for (;;) {
        ssize_t r = read(fd, buf, cap);
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
}

/* The plaintext answer, rebuilt when the second changes (Date header). */
#define RESP_MAX 256
static __thread char resp_buf[RESP_MAX];
static __thread size_t resp_len;
static __thread time_t resp_sec = -1;

static inline const char *http_response(size_t *len)
{
    time_t now = time(NULL);
    if (now != resp_sec) {
        struct tm tm;
        char date[64];
        gmtime_r(&now, &tm);
        strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        resp_len = (size_t)snprintf(resp_buf, sizeof resp_buf,
                                    "HTTP/1.1 200 OK\r\nServer: c\r\nDate: %s\r\n"
                                    "Content-Type: text/plain\r\nContent-Length: 13\r\n\r\n"
                                    "Hello, World!", date);
        resp_sec = now;
    }
    *len = resp_len;
    return resp_buf;
}

/* Count complete requests (GET, no body: each ends at an empty line) in
 * buf[0..n); returns the bytes consumed. */
static inline size_t count_requests(const char *buf, size_t n, unsigned *reqs)
{
    size_t used = 0;
    for (;;) {
        const char *end = memmem(buf + used, n - used, "\r\n\r\n", 4);
        if (!end)
            return used;
        used = (size_t)(end - buf) + 4;
        (*reqs)++;
    }
}

#endif
