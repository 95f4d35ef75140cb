/* SPDX-License-Identifier: MIT */
/*
 * echo_client: a load generator for echo servers. N connections, one green
 * thread each, every thread sends an M-byte message, reads the echo back in
 * full, checks it and records the round trip's latency; for a duration or a
 * number of round trips per connection.
 *
 *   echo_client --port N [--host 127.0.0.1] [--conns 64] [--size 64]
 *               [--duration 5 | --count N] [--workers N]
 *
 * Prints round trips per second and the p50/p99 latency in microseconds.
 * Latencies go to a per-connection log-linear histogram (32 sub-buckets per
 * power of two: within 3%), merged at the end, so recording costs no locks
 * and no memory that grows with the run.
 *
 * The load part (echo_load_run / echo_result_print) is also compiled into
 * examples/echo.c, which defines ECHO_CLIENT_NO_MAIN before including this
 * file.
 */
#include <fern/fern.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HIST_SUB_BITS 5
#define HIST_SUB      (1u << HIST_SUB_BITS)
#define HIST_BUCKETS  ((64 - HIST_SUB_BITS + 1) * HIST_SUB)

struct echo_load {
    const char *host; /* IPv4 address */
    int port;
    unsigned conns;
    size_t size;     /* bytes per message */
    double duration; /* seconds; used when count is 0 */
    uint64_t count;  /* round trips per connection; 0 = run for duration */
};

struct echo_result {
    uint64_t round_trips;
    double seconds;
    double p50_us, p99_us, max_us;
    unsigned failed_conns; /* connections that hit an error or a wrong echo */
};

struct load_conn {
    const struct echo_load *cfg;
    struct sockaddr_in addr;
    fern_wg *connected, *go;
    int64_t *end_ns; /* set when go opens (duration runs) */
    uint64_t done;
    uint64_t max_ns;
    bool failed;
    uint32_t hist[HIST_BUCKETS];
};

static unsigned hist_index(uint64_t v)
{
    if (v < HIST_SUB)
        return (unsigned)v;
    unsigned m = 63u - (unsigned)__builtin_clzll(v); /* >= HIST_SUB_BITS */
    unsigned k = m - HIST_SUB_BITS + 1;
    return (k << HIST_SUB_BITS) | (unsigned)((v >> (k - 1)) & (HIST_SUB - 1));
}

/* Midpoint of a bucket. */
static double hist_value(unsigned idx)
{
    if (idx < HIST_SUB)
        return idx;
    unsigned k = idx >> HIST_SUB_BITS, sub = idx & (HIST_SUB - 1);
    double low = (double)((uint64_t)(HIST_SUB + sub) << (k - 1));
    return low + (double)((uint64_t)1 << (k - 1)) / 2;
}

static bool load_io_all(int fd, char *p, size_t n, bool send)
{
    while (n) {
        ssize_t r = send ? fern_send(fd, p, n, 0) : fern_recv(fd, p, n, 0);
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static void *load_conn_main(void *arg)
{
    struct load_conn *lc = arg;
    const struct echo_load *cfg = lc->cfg;
    char *msg = malloc(cfg->size), *back = malloc(cfg->size);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok = msg && back && fd >= 0 &&
              fern_connect(fd, (struct sockaddr *)&lc->addr, sizeof lc->addr) == 0;
    if (ok) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    } else {
        fprintf(stderr, "echo_client: connect: %s\n", strerror(errno));
    }
    fern_wg_done(lc->connected);
    fern_wg_wait(lc->go);
    for (size_t i = 0; ok && i < cfg->size; i++)
        msg[i] = (char)('a' + (i + (uintptr_t)lc) % 26);
    int64_t end = *lc->end_ns;
    while (ok) {
        int64_t t0 = fern_now_ns();
        if (!load_io_all(fd, msg, cfg->size, true) || !load_io_all(fd, back, cfg->size, false) ||
            memcmp(msg, back, cfg->size) != 0) {
            ok = false;
            break;
        }
        int64_t t1 = fern_now_ns();
        uint64_t d = (uint64_t)(t1 - t0);
        lc->hist[hist_index(d)]++;
        if (d > lc->max_ns)
            lc->max_ns = d;
        lc->done++;
        if (cfg->count ? lc->done >= cfg->count : t1 >= end)
            break;
    }
    lc->failed = !ok;
    if (fd >= 0)
        fern_close(fd);
    free(msg);
    free(back);
    return NULL;
}

/* Run the load from a green thread. Returns 0, or an errno value if the
 * address is bad or the connection threads cannot be had. */
static int echo_load_run(const struct echo_load *cfg, struct echo_result *res)
{
    memset(res, 0, sizeof *res);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    if (inet_pton(AF_INET, cfg->host, &addr.sin_addr) != 1 || cfg->conns == 0 || cfg->size == 0)
        return EINVAL;
    struct load_conn *lcs = calloc(cfg->conns, sizeof *lcs);
    fern_thread **ts = calloc(cfg->conns, sizeof *ts);
    if (!lcs || !ts) {
        free(lcs);
        free(ts);
        return ENOMEM;
    }
    fern_wg connected = FERN_WG_INIT, go = FERN_WG_INIT;
    int64_t end_ns = 0;
    fern_wg_add(&connected, cfg->conns);
    fern_wg_add(&go, 1);
    unsigned spawned = 0;
    int err = 0;
    for (; spawned < cfg->conns; spawned++) {
        struct load_conn *lc = &lcs[spawned];
        lc->cfg = cfg;
        lc->addr = addr;
        lc->connected = &connected;
        lc->go = &go;
        lc->end_ns = &end_ns;
        err = fern_spawn(&ts[spawned], NULL, load_conn_main, lc);
        if (err) {
            fern_wg_add(&connected, -(int64_t)(cfg->conns - spawned));
            break;
        }
    }
    /* Every connection is open (or failed) before the clock starts. */
    fern_wg_wait(&connected);
    int64_t t0 = fern_now_ns();
    end_ns = t0 + (int64_t)(cfg->duration * 1e9);
    fern_wg_done(&go);
    for (unsigned i = 0; i < spawned; i++)
        fern_join(ts[i], NULL);
    int64_t t1 = fern_now_ns();

    static uint64_t merged[HIST_BUCKETS];
    memset(merged, 0, sizeof merged);
    uint64_t max_ns = 0;
    for (unsigned i = 0; i < spawned; i++) {
        res->round_trips += lcs[i].done;
        res->failed_conns += lcs[i].failed;
        if (lcs[i].max_ns > max_ns)
            max_ns = lcs[i].max_ns;
        for (unsigned b = 0; b < HIST_BUCKETS; b++)
            merged[b] += lcs[i].hist[b];
    }
    res->failed_conns += cfg->conns - spawned;
    res->seconds = (double)(t1 - t0) / 1e9;
    uint64_t seen = 0, p50 = (res->round_trips + 1) / 2, p99 = (res->round_trips * 99 + 99) / 100;
    bool have50 = false;
    for (unsigned b = 0; b < HIST_BUCKETS && res->round_trips; b++) {
        seen += merged[b];
        if (!have50 && seen >= p50) {
            res->p50_us = hist_value(b) / 1e3;
            have50 = true;
        }
        if (seen >= p99) {
            res->p99_us = hist_value(b) / 1e3;
            break;
        }
    }
    res->max_us = (double)max_ns / 1e3;
    free(lcs);
    free(ts);
    return err;
}

static void echo_result_print(const struct echo_load *cfg, const struct echo_result *res)
{
    printf("conns %u, %zu-byte messages: %llu round trips in %.2f s = %.0f round trips/s, "
           "p50 %.1f us, p99 %.1f us, max %.1f us",
           cfg->conns, cfg->size, (unsigned long long)res->round_trips, res->seconds,
           res->seconds > 0 ? (double)res->round_trips / res->seconds : 0.0, res->p50_us,
           res->p99_us, res->max_us);
    if (res->failed_conns)
        printf(", %u connections failed", res->failed_conns);
    printf("\n");
}

#ifndef ECHO_CLIENT_NO_MAIN

static struct echo_load load = {"127.0.0.1", 0, 64, 64, 5.0, 0};

static void *client_main(void *unused)
{
    (void)unused;
    struct echo_result res;
    int r = echo_load_run(&load, &res);
    if (r) {
        fprintf(stderr, "echo_client: %s\n", strerror(r));
        exit(1);
    }
    echo_result_print(&load, &res);
    return (void *)(uintptr_t)(res.failed_conns != 0);
}

static void usage(void)
{
    fprintf(stderr, "usage: echo_client --port N [--host A.B.C.D] [--conns N] [--size BYTES]\n"
                    "                   [--duration SECONDS | --count ROUND_TRIPS_PER_CONN]"
                    " [--workers N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    unsigned workers = 0;
    static const struct option opts[] = {{"port", required_argument, NULL, 'p'},
                                         {"host", required_argument, NULL, 'H'},
                                         {"conns", required_argument, NULL, 'c'},
                                         {"size", required_argument, NULL, 's'},
                                         {"duration", required_argument, NULL, 'd'},
                                         {"count", required_argument, NULL, 'n'},
                                         {"workers", required_argument, NULL, 'w'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    for (int c; (c = getopt_long(argc, argv, "p:H:c:s:d:n:w:h", opts, NULL)) != -1;) {
        char *end = NULL;
        switch (c) {
        case 'p':
            load.port = (int)strtol(optarg, &end, 10);
            break;
        case 'H':
            load.host = optarg;
            end = optarg + strlen(optarg);
            break;
        case 'c':
            load.conns = (unsigned)strtoul(optarg, &end, 10);
            break;
        case 's':
            load.size = strtoul(optarg, &end, 10);
            break;
        case 'd':
            load.duration = strtod(optarg, &end);
            break;
        case 'n':
            load.count = strtoull(optarg, &end, 10);
            break;
        case 'w':
            workers = (unsigned)strtoul(optarg, &end, 10);
            break;
        default:
            usage();
        }
        if (*end)
            usage();
    }
    if (optind != argc || load.port <= 0 || load.port > 65535 || load.conns == 0 ||
        load.size == 0 || load.duration <= 0)
        usage();
    signal(SIGPIPE, SIG_IGN);
    fern_config cfg = {.workers = workers, .stack_size = 0};
    void *failed = NULL;
    int r = fern_init(&cfg);
    if (!r)
        r = fern_run(client_main, NULL, &failed);
    if (r) {
        fprintf(stderr, "echo_client: %s\n", strerror(r));
        return 1;
    }
    fern_shutdown();
    return failed ? 1 : 0;
}
#endif
