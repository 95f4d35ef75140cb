/* SPDX-License-Identifier: MIT */
/*
 * handler: a connection handler that waits for three things in one call:
 * the socket is readable, a message came on the server's control channel,
 * or the request's deadline passed (fern_select with a FERN_FD_READABLE, a
 * FERN_RECV and a FERN_DEADLINE case). No socket is shut down to wake a
 * thread, no timer thread runs, nothing polls.
 *
 *   handler [--idle MS]
 *
 * It runs a small line server on a free loopback port and three clients
 * against it, printing what happens:
 *  - a client that sends lines gets each back upper-cased (readable);
 *  - a client that goes quiet is dropped once its idle deadline passes
 *    (deadline; default 300 ms, --idle);
 *  - a client that stays connected, quiet but within its deadline, is told
 *    "bye" when the server stops, through the handler's control channel.
 * Exits 0 when every client saw what it expected.
 */
#include <fern/fern.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct conn {
    int fd;
    fern_chan *control; /* commands for this handler: ints, CMD_* */
    fern_thread *thread;
};

enum { CMD_STOP = 1 };

static int64_t idle_ns = 300 * 1000000LL;

/* One connection: echo lines upper-cased until the peer leaves, the idle
 * deadline passes or the control channel says stop. */
static void *handle(void *arg)
{
    struct conn *c = arg;
    char buf[512];
    int64_t deadline = fern_now_ns() + idle_ns;
    for (;;) {
        int cmd = 0;
        fern_select_case cases[3] = {
            {.fd = c->fd, .op = FERN_FD_READABLE},
            {.chan = c->control, .op = FERN_RECV, .elem = &cmd},
            {.deadline = deadline, .op = FERN_DEADLINE},
        };
        int r = fern_select(cases, 3, FERN_FOREVER);
        if (r == 0) { /* readable: a read cannot wait now */
            if (cases[0].result) {
                printf("server: connection %d: %s\n", c->fd, strerror(cases[0].result));
                break;
            }
            ssize_t n = fern_read(c->fd, buf, sizeof buf);
            if (n <= 0) {
                printf("server: connection %d: peer left\n", c->fd);
                break;
            }
            for (ssize_t i = 0; i < n; i++)
                buf[i] = (char)toupper((unsigned char)buf[i]);
            if (fern_write(c->fd, buf, (size_t)n) != n)
                break;
            deadline = fern_now_ns() + idle_ns; /* a new request, a new deadline */
        } else if (r == 1) { /* control */
            if (cases[1].result == EPIPE || cmd == CMD_STOP) {
                printf("server: connection %d: told to stop\n", c->fd);
                fern_write(c->fd, "bye\n", 4);
                break;
            }
        } else if (r == 2) { /* deadline */
            printf("server: connection %d: idle for %lld ms, closing\n", c->fd,
                   (long long)(idle_ns / 1000000));
            fern_write(c->fd, "idle\n", 5);
            break;
        } else {
            fprintf(stderr, "server: fern_select: %s\n", strerror(-r));
            break;
        }
    }
    fern_close(c->fd);
    return NULL;
}

static int connect_to(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || fern_connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("client: connect");
        exit(1);
    }
    return fd;
}

/* Read one line (up to '\n') into buf; 0 at EOF. */
static ssize_t read_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = fern_read(fd, buf + n, 1);
        if (r <= 0)
            break;
        if (buf[n++] == '\n')
            break;
    }
    buf[n] = 0;
    return (ssize_t)n;
}

struct client {
    uint16_t port;
    const char *name;
    int ok;
};

/* Sends two lines, checks the echoes, then stays silent: the server's idle
 * deadline should drop it. */
static void *talker(void *arg)
{
    struct client *cl = arg;
    int fd = connect_to(cl->port);
    char line[64];
    const char *msgs[2] = {"hello\n", "two lines\n"};
    const char *want[2] = {"HELLO\n", "TWO LINES\n"};
    int good = 1;
    for (int i = 0; i < 2; i++) {
        fern_write(fd, msgs[i], strlen(msgs[i]));
        read_line(fd, line, sizeof line);
        printf("%s: sent %.*s, got %s", cl->name, (int)strlen(msgs[i]) - 1, msgs[i], line);
        good &= strcmp(line, want[i]) == 0;
    }
    int64_t t0 = fern_now_ns();
    read_line(fd, line, sizeof line);
    int64_t waited = fern_now_ns() - t0;
    printf("%s: after %lld ms of silence the server said %s", cl->name,
           (long long)(waited / 1000000), line);
    cl->ok = good && strcmp(line, "idle\n") == 0 && waited >= idle_ns - 1000000;
    fern_close(fd);
    return NULL;
}

static fern_chan *stayer_ready; /* the stayer got its echo: stop the server */

/* Sends one line, checks the echo, tells the server it did, then waits
 * (well within its idle deadline) for what the server says next. */
static void *stayer(void *arg)
{
    struct client *cl = arg;
    int fd = connect_to(cl->port);
    char line[64];
    fern_write(fd, "ping\n", 5);
    read_line(fd, line, sizeof line);
    printf("%s: sent ping, got %s", cl->name, line);
    int good = strcmp(line, "PING\n") == 0, one = 1;
    fern_chan_send(stayer_ready, &one);
    read_line(fd, line, sizeof line);
    printf("%s: then the server said %s", cl->name, line);
    cl->ok = good && strcmp(line, "bye\n") == 0;
    fern_close(fd);
    return NULL;
}

static void *server(void *arg)
{
    (void)arg;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) || listen(l, 16) ||
        getsockname(l, (struct sockaddr *)&sa, &sl)) {
        perror("server: listen");
        exit(1);
    }
    uint16_t port = ntohs(sa.sin_port);
    printf("server: listening on 127.0.0.1:%u\n", port);

    struct client talk = {port, "talker", 0}, stay = {port, "stayer", 0};
    struct conn conns[2];
    fern_thread *ct, *cs;
    fern_chan_create(&stayer_ready, sizeof(int), 0);
    /* The talker first: it is dropped by its idle deadline. */
    fern_spawn(&ct, NULL, talker, &talk);
    for (int n = 0; n < 2; n++) {
        conns[n].fd = fern_accept(l, NULL, NULL, SOCK_CLOEXEC);
        if (conns[n].fd < 0 || fern_chan_create(&conns[n].control, sizeof(int), 1)) {
            perror("server: accept");
            exit(1);
        }
        fern_spawn(&conns[n].thread, NULL, handle, &conns[n]);
        if (n == 0) {
            fern_join(ct, NULL);
            fern_spawn(&cs, NULL, stayer, &stay);
        }
    }
    /* Then the stayer, stopped through its handler's control channel. */
    int one;
    fern_chan_recv(stayer_ready, &one);
    printf("server: stopping\n");
    for (int i = 0; i < 2; i++) {
        int cmd = CMD_STOP;
        fern_chan_send(conns[i].control, &cmd); /* buffered: the handler may be gone */
    }
    fern_join(cs, NULL);
    for (int i = 0; i < 2; i++) {
        fern_join(conns[i].thread, NULL);
        fern_chan_destroy(conns[i].control);
    }
    fern_chan_destroy(stayer_ready);
    fern_close(l);
    int ok = talk.ok && stay.ok;
    printf("%s\n", ok ? "ok" : "FAILED");
    return (void *)(intptr_t)ok;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--idle") == 0 && atoi(argv[2]) > 0)
        idle_ns = atoi(argv[2]) * 1000000LL;
    else if (argc != 1) {
        fprintf(stderr, "usage: %s [--idle MS]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *ok = NULL;
    int r = fern_run(server, NULL, &ok);
    if (r) {
        fprintf(stderr, "fern_run: %s\n", strerror(r));
        return 1;
    }
    return ok ? 0 : 1;
}
