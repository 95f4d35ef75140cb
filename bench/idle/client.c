/* SPDX-License-Identifier: MIT */
/*
 * idle_client: the driver of the idle-connections scenario (bench/idle/idle.py,
 * bench/README.md "Idle connections"). It starts the server under test itself,
 * as a child in a process group of its own, and:
 *
 *  1. waits for the server's `listening on HOST:PORT` line on its stdout;
 *  2. warms it up: --warmup connections (default 100) each send one byte, read
 *     it back and close, so that what a runtime sets up on its first
 *     connections (pollers, JIT-compiled code, the first descriptor-table
 *     chunks) is in the baseline, not in the per-connection figure; then waits
 *     until the server has closed them;
 *  3. reads the baseline: VmRSS + VmPTE of the server (/proc/PID/status), with
 *     0 connections open, and its count of open descriptors (/proc/PID/fd);
 *  4. opens --conns connections (default 18,000), each bound to its own source
 *     address in 127.1.0.0/16 upwards (bind() before connect(), with
 *     IP_BIND_ADDRESS_NO_PORT: the 4-tuples never run out of ports), pacing
 *     itself on the server's descriptor count so the accept queue never
 *     overflows, and waits until the server holds all of them;
 *  5. leaves them idle --idle seconds (default 4), then reads VmRSS + VmPTE
 *     again: bytes per connection = (idle - baseline) / conns;
 *  6. with --stats, sends the server SIGUSR1 and reads one `stats k=v ...`
 *     line from its stdout (fern's server prints fern_stats there);
 *  7. sends one byte on every connection (a different value per connection)
 *     and times until every connection has echoed its own byte back; a
 *     connection that closes, answers wrongly or not at all within --timeout
 *     is reported by index and source address, and the run fails; with
 *     --rounds N, N-1 more times after as many more idle spells (the
 *     figures printed are the first round's, plus the last one's time);
 *  8. reads VmRSS + VmPTE once more (after every thread has run again), closes
 *     everything, stops the server (SIGTERM to its group, SIGKILL after 5 s).
 *
 * Kernel memory is not counted: socket buffers, the sockets themselves, epoll
 * registrations and the kernel stacks of kernel threads are in neither VmRSS
 * nor VmPTE.
 *
 * Bounded: each phase has a deadline, and an alarm of --limit seconds (default
 * 300) ends the whole run; the server dies with the client (PR_SET_PDEATHSIG)
 * and is killed on every failure path, SIGINT and SIGTERM included.
 *
 *   idle_client [--conns N] [--idle SEC] [--warmup N] [--timeout SEC]
 *               [--limit SEC] [--rounds N] [--name NAME] [--stats]
 *               [--min-hibernated N]
 *               -- SERVER [ARGS...]
 *
 * Prints `idle NAME METRIC VALUE UNIT` lines on stdout, progress on stderr.
 * Exit 0 when every connection answered, 1 on a failure, 2 on bad usage,
 * 3 when the time limit hit.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

static volatile pid_t server = -1; /* also the server's process group */
static int srv_out = -1;           /* read end of the server's stdout */
static const char *name = "server";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* SIGTERM to the group, then SIGKILL if it has not gone within 5 s. Returns
 * how it ended: 0 exited on SIGTERM (or by itself), 1 needed SIGKILL. */
static int stop_server(void)
{
    pid_t p = server;
    if (p <= 0)
        return 0;
    kill(-p, SIGTERM);
    int st, killed = 0;
    double end = now_s() + 5.0;
    while (waitpid(p, &st, WNOHANG) == 0) {
        if (now_s() > end) {
            kill(-p, SIGKILL);
            waitpid(p, &st, 0);
            killed = 1;
            break;
        }
        nap_ms(10);
    }
    kill(-p, SIGKILL); /* whatever else it left in its group */
    server = -1;
    return killed;
}

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "idle_client %s: ", name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    stop_server();
    exit(1);
}

static void on_fatal_signal(int sig)
{
    /* async-signal-safe only */
    static const char msg[] = "idle_client: time limit or signal, killing the server\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    if (server > 0)
        kill(-server, SIGKILL);
    _exit(sig == SIGALRM ? 3 : 1);
}

/* Fails if the server has exited. */
static void check_alive(void)
{
    int st;
    pid_t p = server;
    if (p > 0 && waitpid(p, &st, WNOHANG) == p) {
        server = -1;
        if (WIFSIGNALED(st))
            fail("the server died of signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
        fail("the server exited with status %d", WEXITSTATUS(st));
    }
}

struct mem {
    long rss_kib, pte_kib;
};

static struct mem read_mem(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)server);
    FILE *f = fopen(path, "r");
    if (!f)
        fail("cannot read %s: %s", path, strerror(errno));
    struct mem m = {-1, -1};
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "VmRSS:", 6))
            m.rss_kib = strtol(line + 6, NULL, 10);
        else if (!strncmp(line, "VmPTE:", 6))
            m.pte_kib = strtol(line + 6, NULL, 10);
    }
    fclose(f);
    if (m.rss_kib < 0 || m.pte_kib < 0)
        fail("no VmRSS/VmPTE in %s", path);
    return m;
}

/* Open descriptors of the server. */
static long count_fds(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)server);
    DIR *d = opendir(path);
    if (!d)
        fail("cannot open %s: %s", path, strerror(errno));
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* Open sockets of the server (readlink of each descriptor: slower than
 * count_fds, used only while few are open). A runtime may open descriptors
 * of its own on its first connections (the JVM's pollers), which the
 * warm-up wait must not take for connections still open. */
static long count_sockets(void)
{
    char path[64], ln[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)server);
    DIR *d = opendir(path);
    if (!d)
        fail("cannot open %s: %s", path, strerror(errno));
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        ssize_t k = readlinkat(dirfd(d), e->d_name, ln, sizeof ln - 1);
        if (k > 7 && !memcmp(ln, "socket:", 7))
            n++;
    }
    closedir(d);
    return n;
}

/* Source address of connection i: 127.X.Y.Z with X from 1, Y and Z in
 * [1, 254] (no .0 or .255 octets, so no address looks like a network or
 * broadcast one). The warm-up connections use 127.250.Y.Z. */
static struct sockaddr_in source_of(long i, int warm)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    long x = warm ? 250 : 1 + i / (254 * 254);
    long y = 1 + (i / 254) % 254, z = 1 + i % 254;
    sa.sin_addr.s_addr = htonl((uint32_t)(127u << 24 | (uint32_t)x << 16 | (uint32_t)y << 8 | (uint32_t)z));
    return sa;
}

static const char *addr_str(long i, int warm)
{
    static char buf[INET_ADDRSTRLEN];
    struct sockaddr_in sa = source_of(i, warm);
    inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf);
    return buf;
}

/* A blocking connection from source_of(i) to 127.0.0.1:port, with send and
 * receive timeouts of `tmo` seconds (connect() honours the send timeout). */
static int open_conn(long i, int warm, int port, int tmo)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        fail("socket (connection %ld): %s", i, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {tmo, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in src = source_of(i, warm);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0)
        fail("bind to %s (connection %ld): %s", addr_str(i, warm), i, strerror(errno));
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&dst, sizeof dst) < 0)
        fail("connect from %s (connection %ld): %s", addr_str(i, warm), i, strerror(errno));
    return fd;
}

/* One line from the server's stdout, within `tmo` seconds; NULL on EOF or
 * timeout. Lines longer than the buffer are cut. */
static char *server_line(char *buf, size_t cap, double tmo)
{
    size_t n = 0;
    double end = now_s() + tmo;
    while (n + 1 < cap) {
        struct pollfd p = {.fd = srv_out, .events = POLLIN};
        int left = (int)((end - now_s()) * 1000);
        if (left <= 0)
            return NULL;
        int r = poll(&p, 1, left < 200 ? left : 200);
        check_alive();
        if (r <= 0)
            continue;
        ssize_t k = read(srv_out, buf + n, 1);
        if (k <= 0)
            return NULL;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = 0;
    return buf;
}

static unsigned char byte_of(long i) { return (unsigned char)(i * 131 + 7); }

static void metric(const char *m, double v, const char *unit)
{
    printf("idle %s %s %.6g %s\n", name, m, v, unit);
    fflush(stdout);
}

/* Asks the server for its figures (SIGUSR1) and reads its `stats k=v ...`
 * line; prints it on stderr, and as `server_K` metrics if `print`. Returns
 * the value of `hibernated` (-1 if absent). */
static long server_stats(int print)
{
    char line[1024];
    kill(server, SIGUSR1);
    char *s = NULL;
    double end = now_s() + 10.0;
    while (now_s() < end && (s = server_line(line, sizeof line, end - now_s())) && strncmp(s, "stats ", 6))
        ;
    if (!s)
        fail("no `stats ...` line from the server within 10 s of SIGUSR1");
    fprintf(stderr, "idle_client %s: server %s\n", name, s);
    long hibernated = -1;
    for (char *tok = strtok(s + 6, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            continue;
        *eq = 0;
        double v = atof(eq + 1);
        if (print) {
            char mname[96];
            snprintf(mname, sizeof mname, "server_%s", tok);
            metric(mname, v, "count");
        }
        if (!strcmp(tok, "hibernated"))
            hibernated = (long)v;
    }
    return hibernated;
}

static unsigned char *state; /* per connection: 0 waiting, 1 answered, 2 closed, 3 wrong */

/* Round `round` of answers: one byte written on every connection, then every
 * echo read back and checked. Returns the seconds from the first write to
 * the last answer (*half: to half of them; *sent: to the last write); fails
 * the run, naming the first connections that did not answer, unless every
 * one did within `tmo` seconds. The connections are registered in `ep`
 * (level-triggered: an answered socket is empty and stays quiet). */
static double answer_round(int ep, const int *fds, long conns, int round, int tmo, double *half, double *sent)
{
    static struct epoll_event evs[1024];
    long answered = 0, bad = 0;
    memset(state, 0, (size_t)conns);
    *half = -1;
    double t0 = now_s();
    for (long c = 0; c < conns; c++) {
        unsigned char b = byte_of(c + round);
        if (write(fds[c], &b, 1) != 1)
            fail("round %d: write on connection %ld from %s: %s", round + 1, c, addr_str(c, 0),
                 strerror(errno));
    }
    *sent = now_s() - t0;
    double end = t0 + tmo;
    while (answered + bad < conns) {
        int left = (int)((end - now_s()) * 1000);
        if (left <= 0)
            break;
        int n = epoll_wait(ep, evs, 1024, left < 250 ? left : 250);
        if (n < 0 && errno != EINTR)
            fail("epoll_wait: %s", strerror(errno));
        check_alive();
        for (int k = 0; k < n; k++) {
            long c = (long)evs[k].data.u64;
            if (state[c])
                continue; /* a closed or wrong one already counted: its hang-up stays reported */
            unsigned char buf[16];
            ssize_t r = read(fds[c], buf, sizeof buf);
            if (r < 0 && errno == EAGAIN)
                continue;
            state[c] = r == 1 && buf[0] == byte_of(c + round) ? 1 : r == 0 ? 2 : 3;
            if (state[c] == 1) {
                if (++answered == (conns + 1) / 2)
                    *half = now_s() - t0;
            } else {
                epoll_ctl(ep, EPOLL_CTL_DEL, fds[c], NULL);
                bad++;
            }
        }
    }
    double t_all = now_s() - t0;
    if (answered < conns) {
        long shown = 0, silent = conns - answered - bad;
        fprintf(stderr, "idle_client %s: round %d: %ld of %ld connections answered within %d s: %ld closed or "
                        "answered wrongly, %ld silent\n", name, round + 1, answered, conns, tmo, bad, silent);
        for (long c = 0; c < conns && shown < 10; c++)
            if (state[c] != 1) {
                fprintf(stderr, "  connection %ld from %s: %s\n", c, addr_str(c, 0),
                        state[c] == 0 ? "no answer" : state[c] == 2 ? "closed by the server" : "wrong answer");
                shown++;
            }
        metric("answered", (double)answered, "count");
        fail("not every connection answered");
    }
    return t_all;
}

static void usage(void)
{
    fprintf(stderr, "usage: idle_client [--conns N] [--idle SEC] [--warmup N] [--timeout SEC] "
                    "[--limit SEC] [--rounds N] [--name NAME] [--stats] [--min-hibernated N] -- SERVER [ARGS...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long conns = 18000, warmup = 100, min_hib = -1;
    double idle = 4.0;
    int tmo = 60, limit = 300, stats = 0, rounds = 1;
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (i + 1 >= argc && strcmp(a, "--stats"))
            usage();
        if (!strcmp(a, "--conns"))
            conns = atol(argv[++i]);
        else if (!strcmp(a, "--idle"))
            idle = atof(argv[++i]);
        else if (!strcmp(a, "--warmup"))
            warmup = atol(argv[++i]);
        else if (!strcmp(a, "--timeout"))
            tmo = atoi(argv[++i]);
        else if (!strcmp(a, "--limit"))
            limit = atoi(argv[++i]);
        else if (!strcmp(a, "--name"))
            name = argv[++i];
        else if (!strcmp(a, "--stats"))
            stats = 1;
        else if (!strcmp(a, "--rounds"))
            rounds = atoi(argv[++i]);
        else if (!strcmp(a, "--min-hibernated"))
            min_hib = atol(argv[++i]);
        else
            usage();
    }
    if (i >= argc || conns < 1 || conns > 250L * 254 * 254 || warmup < 0 || warmup > 254L * 254 ||
        idle < 0 || tmo < 1 || limit < 1 || rounds < 1)
        usage();
    if (min_hib >= 0 && !stats)
        stats = 1;

    /* Our own descriptors: one per connection, plus a few. */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)conns + 32 > rl.rlim_cur) {
        fprintf(stderr, "idle_client: %ld connections need %ld descriptors; the limit is %lu\n", conns,
                conns + 32, (unsigned long)rl.rlim_cur);
        return 2;
    }

    struct sigaction sa = {.sa_handler = on_fatal_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    alarm((unsigned)limit);

    /* 1. Start the server. */
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        fail("pipe: %s", strerror(errno));
    pid_t me = getpid();
    pid_t p = fork();
    if (p < 0)
        fail("fork: %s", strerror(errno));
    if (p == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(127);
        dup2(pfd[1], 1);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[i], argv + i);
        fprintf(stderr, "idle_client: cannot run %s: %s\n", argv[i], strerror(errno));
        _exit(127);
    }
    setpgid(p, p); /* also here: no race with the kill()s below */
    server = p;
    srv_out = pfd[0];
    close(pfd[1]);
    double t_start = now_s();
    char line[1024];
    int port = 0;
    for (;;) {
        if (!server_line(line, sizeof line, 60.0 - (now_s() - t_start)))
            fail("no `listening on HOST:PORT` line from %s within 60 s", argv[i]);
        const char *l = strstr(line, "listening on ");
        const char *c = l ? strrchr(l, ':') : NULL;
        if (c && (port = atoi(c + 1)) > 0)
            break;
    }
    fprintf(stderr, "idle_client %s: server pid %d on port %d (%.2f s to start)\n", name, (int)server, port,
            now_s() - t_start);

    /* 2. Warm-up. */
    long fd0 = count_sockets();
    for (long w = 0; w < warmup; w++) {
        int fd = open_conn(w, 1, port, tmo);
        unsigned char b = byte_of(w), r = 0;
        if (write(fd, &b, 1) != 1)
            fail("warm-up connection %ld: write: %s", w, strerror(errno));
        ssize_t k = read(fd, &r, 1);
        if (k != 1 || r != b)
            fail("warm-up connection %ld from %s: %s", w, addr_str(w, 1),
                 k < 0 ? strerror(errno) : k == 0 ? "closed without answering" : "wrong answer");
        close(fd);
    }
    double end = now_s() + tmo;
    while (count_sockets() > fd0) {
        check_alive();
        if (now_s() > end)
            fail("the server still holds %ld sockets of the warm-up %d s after they closed",
                 count_sockets() - fd0, tmo);
        nap_ms(20);
    }
    nap_ms(500);

    /* 3. Baseline. */
    check_alive();
    struct mem m0 = read_mem();
    long base = count_fds();

    /* 4. Connect. Keep at most `window` connections not yet accepted. */
    int *fds = malloc((size_t)conns * sizeof *fds);
    if (!fds)
        fail("out of memory");
    const long window = 2048;
    double t0 = now_s();
    long held = 0;
    for (long c = 0; c < conns; c++) {
        if (c % 256 == 0) {
            end = now_s() + tmo;
            while (c - (held = count_fds() - base) > window) {
                check_alive();
                if (now_s() > end)
                    fail("the server accepted %ld of %ld connections and no more within %d s", held, c, tmo);
                nap_ms(1);
            }
        }
        fds[c] = open_conn(c, 0, port, tmo);
    }
    end = now_s() + tmo;
    while ((held = count_fds() - base) < conns) {
        check_alive();
        if (now_s() > end)
            fail("the server holds %ld of %ld connections after %d s", held, conns, tmo);
        nap_ms(5);
    }
    double t_conn = now_s() - t0;
    fprintf(stderr, "idle_client %s: %ld connections held after %.2f s; idle %.1f s\n", name, conns, t_conn,
            idle);

    /* 5. Idle. */
    double idle_end = now_s() + idle;
    while (now_s() < idle_end) {
        check_alive();
        double left = idle_end - now_s();
        nap_ms(left > 0.25 ? 250 : (long)(left * 1000) + 1);
    }
    check_alive();
    struct mem m1 = read_mem();
    long held_idle = count_fds() - base;

    /* 6. The server's own figures. */
    long hibernated = stats ? server_stats(1) : -1;

    /* 7. Every connection answers once (and again after another idle
     * spell, --rounds times in all). */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        fail("epoll_create1: %s", strerror(errno));
    state = calloc((size_t)conns, 1);
    if (!state)
        fail("out of memory");
    for (long c = 0; c < conns; c++) {
        fcntl(fds[c], F_SETFL, fcntl(fds[c], F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)c};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[c], &ev) < 0)
            fail("epoll_ctl: %s", strerror(errno));
    }
    double t_half, t_sent, t_all = answer_round(ep, fds, conns, 0, tmo, &t_half, &t_sent), t_last = t_all;
    for (int r = 1; r < rounds; r++) {
        nap_ms((long)(idle * 1000));
        check_alive();
        double h, sn;
        if (stats)
            server_stats(0);
        t_last = answer_round(ep, fds, conns, r, tmo, &h, &sn);
        fprintf(stderr, "idle_client %s: round %d: every connection answered in %.1f ms\n", name, r + 1,
                t_last * 1e3);
    }

    /* 8. After. */
    struct mem m2 = read_mem();
    for (long c = 0; c < conns; c++)
        close(fds[c]);
    int killed = stop_server();

    double per = ((double)(m1.rss_kib + m1.pte_kib) - (double)(m0.rss_kib + m0.pte_kib)) * 1024.0 / (double)conns;
    metric("conns", (double)conns, "count");
    metric("held_idle", (double)held_idle, "count");
    metric("connect_s", t_conn, "s");
    metric("base_kib", (double)(m0.rss_kib + m0.pte_kib), "KiB");
    metric("bytes_per_conn", per, "B");
    metric("rss_per_conn", (double)(m1.rss_kib - m0.rss_kib) * 1024.0 / (double)conns, "B");
    metric("pte_per_conn", (double)(m1.pte_kib - m0.pte_kib) * 1024.0 / (double)conns, "B");
    metric("send_all_ms", t_sent * 1e3, "ms");
    metric("answer_half_ms", t_half * 1e3, "ms");
    metric("answer_all_ms", t_all * 1e3, "ms");
    metric("bytes_per_conn_after",
           ((double)(m2.rss_kib + m2.pte_kib) - (double)(m0.rss_kib + m0.pte_kib)) * 1024.0 / (double)conns, "B");
    if (rounds > 1)
        metric("answer_all_ms_last", t_last * 1e3, "ms");
    metric("rounds", rounds, "count");
    metric("answered", (double)conns, "count");
    metric("sigkill_needed", killed, "count");
    if (min_hib >= 0 && hibernated < min_hib) {
        fprintf(stderr, "idle_client %s: the server reported %ld hibernated stacks, fewer than %ld\n", name,
                hibernated, min_hib);
        return 1;
    }
    return 0;
}
