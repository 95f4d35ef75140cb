/* SPDX-License-Identifier: MIT */
/*
 * fern-memcached: listening, accepting, stopping (see memcached.h for the
 * map of the other files).
 *
 *   fern-memcached [-p PORT] [-l ADDR] [-t N] [-m MB] [-c N] [-I SIZE] [-U 0] [-v]
 *
 * The acceptor green thread spawns one detached green thread per
 * connection. Past -c connections a newcomer is told
 * "ERROR Too many open connections" and closed, as memcached does.
 *
 * Stopping: SIGINT/SIGTERM are blocked in every thread and read from a
 * signalfd by the main green thread, which shuts the listening socket (the
 * acceptor wakes and leaves) and every open connection (their reads see end
 * of input), waits up to 2 s for the connection threads, and returns; exit
 * code 0. Connections are kept on a list for that purpose; a connection
 * unlinks itself before closing its fd, so shutdown(2) never reaches an fd
 * number that was closed and reused.
 */
#include "memcached.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
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

struct conn_entry {
    int fd;
    struct conn_entry *prev, *next;
};

static struct {
    int lfd;
    fern_mutex lock; /* guards conns and stopping */
    struct conn_entry *conns;
    bool stopping;
    fern_wg live;
    sigset_t signals;
} srv;

static void die(const char *what, int err)
{
    fprintf(stderr, "fern-memcached: %s: %s\n", what, strerror(err));
    exit(1);
}

static void *conn_main(void *arg)
{
    struct conn_entry *e = arg;
    fern_mutex_lock(&srv.lock);
    bool stopping = srv.stopping;
    if (!stopping) {
        e->next = srv.conns;
        if (srv.conns)
            srv.conns->prev = e;
        srv.conns = e;
    }
    fern_mutex_unlock(&srv.lock);
    if (!stopping)
        mc_serve(e->fd);
    fern_mutex_lock(&srv.lock);
    if (!stopping) {
        if (e->prev)
            e->prev->next = e->next;
        else
            srv.conns = e->next;
        if (e->next)
            e->next->prev = e->prev;
    }
    fern_mutex_unlock(&srv.lock);
    fern_close(e->fd);
    free(e);
    __atomic_fetch_sub(&mc_conn_stats.curr_connections, 1, __ATOMIC_RELAXED);
    fern_wg_done(&srv.live);
    return NULL;
}

/* Once a second at most: accept errors come in floods. */
static void complain(const char *what, int err, int64_t *last)
{
    int64_t now = fern_now_ns();
    if (__atomic_load_n(&mc_verbose, __ATOMIC_RELAXED) && now - *last >= 1000000000LL) {
        fprintf(stderr, "fern-memcached: %s: %s (backing off)\n", what, strerror(err));
        *last = now;
    }
}

static void *acceptor_main(void *arg)
{
    (void)arg;
    int64_t last = 0;
    for (;;) {
        int fd = fern_accept(srv.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (__atomic_load_n(&srv.stopping, __ATOMIC_ACQUIRE)) {
            if (fd >= 0)
                fern_close(fd);
            break;
        }
        if (fd < 0) {
            int e = errno;
            if (e == ECONNABORTED || e == EINTR || e == EPROTO)
                continue;
            complain("accept", e, &last); /* out of fds or memory: wait, do not spin */
            fern_sleep_ns(10 * 1000000LL);
            continue;
        }
        uint64_t n = __atomic_add_fetch(&mc_conn_stats.curr_connections, 1, __ATOMIC_RELAXED);
        if (n > mc_maxconns) {
            static const char full[] = "ERROR Too many open connections\r\n";
            send(fd, full, sizeof full - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            fern_close(fd);
            __atomic_fetch_sub(&mc_conn_stats.curr_connections, 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&mc_conn_stats.rejected_connections, 1, __ATOMIC_RELAXED);
            continue;
        }
        __atomic_fetch_add(&mc_conn_stats.total_connections, 1, __ATOMIC_RELAXED);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn_entry *e = calloc(1, sizeof *e);
        int r = ENOMEM;
        if (e) {
            e->fd = fd;
            fern_wg_add(&srv.live, 1);
            fern_attr attr = {
                .stack_size = 0, .name = "mc-conn", .cluster = NULL, .detached = true};
            r = fern_spawn(NULL, &attr, conn_main, e);
            if (r)
                fern_wg_done(&srv.live);
        }
        if (r) {
            free(e);
            fern_close(fd);
            __atomic_fetch_sub(&mc_conn_stats.curr_connections, 1, __ATOMIC_RELAXED);
            complain("new connection", r, &last);
            fern_sleep_ns(10 * 1000000LL);
        }
    }
    return NULL;
}

static void print_address(void)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(srv.lfd, (struct sockaddr *)&ss, &sl);
    char host[INET6_ADDRSTRLEN];
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        printf("listening on [%s]:%d\n", host, ntohs(s6->sin6_port));
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        printf("listening on %s:%d\n", host, ntohs(s4->sin_port));
    }
    fflush(stdout);
}

static void *server_main(void *arg)
{
    (void)arg;
    int sfd = signalfd(-1, &srv.signals, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0)
        die("signalfd", errno);
    fern_thread *acceptor;
    fern_attr attr = {.stack_size = 0, .name = "mc-accept", .cluster = NULL, .detached = false};
    int r = fern_spawn(&acceptor, &attr, acceptor_main, NULL);
    if (r)
        die("fern_spawn", r);
    print_address();

    struct signalfd_siginfo si;
    while (fern_read(sfd, &si, sizeof si) < 0 && errno == EINTR)
        ;
    if (__atomic_load_n(&mc_verbose, __ATOMIC_RELAXED))
        fprintf(stderr, "fern-memcached: signal %u, stopping\n", si.ssi_signo);

    fern_mutex_lock(&srv.lock);
    __atomic_store_n(&srv.stopping, true, __ATOMIC_RELEASE);
    shutdown(srv.lfd, SHUT_RDWR);
    for (struct conn_entry *e = srv.conns; e; e = e->next)
        shutdown(e->fd, SHUT_RDWR);
    fern_mutex_unlock(&srv.lock);

    fern_join(acceptor, NULL);
    if (fern_wg_timedwait(&srv.live, fern_now_ns() + 2000000000LL) == ETIMEDOUT)
        fprintf(stderr, "fern-memcached: connections still open after 2 s\n");
    fern_close(srv.lfd);
    fern_close(sfd);
    return NULL;
}

static int listen_on(const char *addr, int port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    char ports[8];
    snprintf(ports, sizeof ports, "%d", port);
    struct addrinfo *ai;
    int r = getaddrinfo(addr, ports, &hints, &ai);
    if (r) {
        fprintf(stderr, "fern-memcached: -l %s: %s\n", addr, gai_strerror(r));
        exit(1);
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket", errno);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
        die("bind", errno);
    freeaddrinfo(ai);
    if (listen(fd, 4096) < 0)
        die("listen", errno);
    return fd;
}

int main(int argc, char **argv)
{
    struct mc_config cfg;
    mc_config_parse(argc, argv, &cfg);
    mc_verbose = cfg.verbose;
    mc_maxconns = cfg.maxconns;
    mc_raise_fd_limit(cfg.maxconns);

    sigemptyset(&srv.signals);
    sigaddset(&srv.signals, SIGINT);
    sigaddset(&srv.signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &srv.signals, NULL); /* inherited by the workers */
    signal(SIGPIPE, SIG_IGN);

    srv.lfd = listen_on(cfg.addr, cfg.port);
    fern_mutex_init(&srv.lock);
    fern_wg_init(&srv.live);
    mc_store_init(cfg.mem_limit, cfg.item_max);
    mc_stats_init();
    fern_config fc = {.workers = cfg.workers, .stack_size = 0};
    int r = fern_init(&fc);
    if (r)
        die("fern_init", r);
    mc_workers = fern_cluster_workers(fern_cluster_default());
    r = fern_run(server_main, NULL, NULL);
    if (r)
        die("fern_run", r);
    fern_shutdown();
    mc_store_destroy();
    return 0;
}
