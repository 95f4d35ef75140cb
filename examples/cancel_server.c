/* SPDX-License-Identifier: MIT */
/*
 * cancel_server: cancellation and groups in a server (docs/cancellation.md).
 *
 *   cancel_server [--port N]     serve until SIGINT/SIGTERM
 *   cancel_server --selftest     serve, drive it with clients, shut down
 *
 * A line protocol: "echo TEXT" answers TEXT; "work MS" runs a request that
 * takes MS milliseconds under a 100 ms deadline and answers "done" or
 * "timeout". Every connection's handler is a member of the server's group;
 * each request runs in a subgroup of it with the deadline. Shutting down is
 * one call, fern_group_cancel on the server's group: the acceptor's accept
 * and every handler's read fail with ECANCELED, each handler says goodbye
 * under a shield (a write that may wait must not fail now) and closes, and
 * fern_group_wait returns once they all have.
 */
#include <fern/fern.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define REQUEST_DEADLINE_MS 100

static fern_group *server; /* every green thread of the server */
static int listen_fd;

static int send_str(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = fern_write(fd, s, n);
        if (w < 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A request's work: a sleep standing for a slow database call. Returns 0,
 * or its error value (ECANCELED when the deadline cancels it). */
static void *work(void *arg)
{
    int64_t ms = (int64_t)(intptr_t)arg;
    return (void *)(intptr_t)fern_sleep_ns(ms * 1000000);
}

/* Run one "work" request in a subgroup of the connection's group with the
 * request deadline; returns the answer. */
static const char *run_request(fern_group *conn, int64_t ms)
{
    fern_group *req;
    if (fern_group_create(&req, conn, FERN_GROUP_FAILFAST))
        return "error\n";
    fern_group_set_deadline(req, fern_now_ns() + REQUEST_DEADLINE_MS * 1000000ll);
    fern_group_spawn(req, NULL, NULL, work, (void *)(intptr_t)ms);
    int e = fern_group_wait(req);
    fern_group_destroy(req);
    return e == 0 ? "done\n" : e == ETIMEDOUT ? "timeout\n" : e == ECANCELED ? NULL : "error\n";
}

static void *handle(void *arg)
{
    int fd = (int)(intptr_t)arg;
    fern_group *conn; /* this connection's requests */
    if (fern_group_create(&conn, server, 0)) {
        fern_close(fd);
        return NULL;
    }
    char line[256];
    size_t have = 0;
    for (;;) {
        ssize_t r = fern_read(fd, line + have, sizeof line - 1 - have);
        if (r < 0 && errno == ECANCELED) {
            /* Shutting down: a polite goodbye, which may have to wait for
             * the socket, so shielded from the cancel. */
            int was = fern_cancel_shield(1);
            send_str(fd, "server shutting down\n");
            fern_cancel_shield(was);
            break;
        }
        if (r <= 0)
            break; /* the client left, or an error */
        have += (size_t)r;
        line[have] = 0;
        char *nl;
        while ((nl = strchr(line, '\n'))) {
            *nl = 0;
            const char *answer = "unknown command\n";
            char buf[300];
            if (strncmp(line, "echo ", 5) == 0) {
                snprintf(buf, sizeof buf, "%s\n", line + 5);
                answer = buf;
            } else if (strncmp(line, "work ", 5) == 0) {
                answer = run_request(conn, atol(line + 5));
            }
            if (!answer || send_str(fd, answer) < 0)
                goto out; /* cancelled mid-request: the read says goodbye */
            size_t used = (size_t)(nl + 1 - line);
            memmove(line, nl + 1, have - used + 1);
            have -= used;
        }
        if (have == sizeof line - 1)
            break; /* a line too long */
    }
out:
    fern_close(fd);
    fern_group_wait(conn);
    fern_group_destroy(conn);
    return NULL;
}

/* The acceptor, a member too: its accept fails with ECANCELED at shutdown. */
static void *acceptor(void *unused)
{
    (void)unused;
    for (;;) {
        int fd = fern_accept(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == ECANCELED)
                return NULL;
            if (errno == EMFILE || errno == ENFILE)
                fern_sleep_ns(10 * 1000000); /* back off (fern_accept says so) */
            continue;
        }
        if (fern_group_spawn(server, NULL, NULL, handle, (void *)(intptr_t)fd))
            fern_close(fd);
    }
}

static int start(int port)
{
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof a) ||
        listen(listen_fd, 128) || getsockname(listen_fd, (struct sockaddr *)&a, &al)) {
        perror("cancel_server: listen");
        exit(1);
    }
    if (fern_group_create(&server, NULL, 0) ||
        fern_group_spawn(server, NULL, NULL, acceptor, NULL)) {
        fprintf(stderr, "cancel_server: cannot start\n");
        exit(1);
    }
    return ntohs(a.sin_port);
}

/* Graceful shutdown: one cancel stops every thread of the server. */
static void stop(void)
{
    fern_group_cancel(server);
    fern_group_wait(server);
    fern_group_destroy(server);
    fern_close(listen_fd);
}

/* --selftest: a client (a plain thread, blocking calls) for each case. */
static int connect_to(int port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) {
        perror("cancel_server: connect");
        exit(1);
    }
    return s;
}

static int ask(int s, const char *req, const char *want)
{
    char buf[256];
    if (write(s, req, strlen(req)) != (ssize_t)strlen(req))
        return 1;
    size_t have = 0;
    while (have < strlen(want)) {
        ssize_t r = read(s, buf + have, sizeof buf - 1 - have);
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    buf[have] = 0;
    if (strcmp(buf, want)) {
        fprintf(stderr, "cancel_server: %s-> \"%s\", want \"%s\"\n", req, buf, want);
        return 1;
    }
    printf("  %-14s -> %s", req[0] == 'w' ? "work request" : "echo request", buf);
    return 0;
}

static int selftest(void)
{
    int port = start(0);
    int bad = 0;
    int a = connect_to(port), idle = connect_to(port);
    bad |= ask(a, "echo hello\n", "hello\n");
    bad |= ask(a, "work 10\n", "done\n");
    int64_t t0 = fern_now_ns();
    bad |= ask(a, "work 5000\n", "timeout\n"); /* cut by the 100 ms deadline */
    int64_t took = (fern_now_ns() - t0) / 1000000;
    printf("  the 5000 ms request answered after %lld ms\n", (long long)took);
    bad |= took > 2000;
    /* Shutdown with two clients connected, one idle in the server's read. */
    t0 = fern_now_ns();
    stop();
    printf("  shutdown took %.3f ms\n", (double)(fern_now_ns() - t0) / 1e6);
    char buf[64] = {0};
    ssize_t r = read(idle, buf, sizeof buf - 1);
    if (r <= 0 || strcmp(buf, "server shutting down\n")) {
        fprintf(stderr, "cancel_server: the idle client got \"%s\"\n", r > 0 ? buf : "");
        bad = 1;
    }
    r = read(idle, buf, sizeof buf);
    bad |= r != 0; /* then EOF */
    close(a);
    close(idle);
    printf(bad ? "selftest FAILED\n" : "selftest passed\n");
    fern_shutdown();
    return bad;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--selftest") == 0)
        return selftest();
    int port = argc > 2 && strcmp(argv[1], "--port") == 0 ? atoi(argv[2]) : 7070;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* before the workers start */
    port = start(port);
    printf("listening on 127.0.0.1:%d\n", port);
    fflush(stdout);
    int sig;
    sigwait(&sigs, &sig);
    stop();
    return fern_shutdown();
}
