/* SPDX-License-Identifier: MIT */
/*
 * cmdline: memcached's command line, and the open-file limit it implies.
 *
 * The flags are spelled as memcached spells them (short and long), so a
 * script that starts memcached can start this instead; --port and --workers
 * are the names every fern server takes. Differences, on purpose:
 *  - `-p 0` picks a free port (memcached: TCP off); the chosen port is in
 *    the `listening on ADDR:PORT` line printed once ready;
 *  - `-t` defaults to one worker per CPU (memcached: 4 threads);
 *  - only `-U 0` is accepted: there is no UDP listener;
 *  - flags this server has no use for are refused, not ignored.
 */
#include "memcached.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define FD_HEADROOM 64 /* listener, signalfd, epoll, stdio, blocking pool */

/* Every option is listed here and in fern-memcached.1 (the install check
 * compares the two). */
static void usage(int code)
{
    fprintf(code ? stderr : stdout,
            "usage: fern-memcached [options]\n"
            "A memcached-compatible cache server (ASCII and binary protocols over TCP)\n"
            "on fern green threads.\n"
            "\n"
            "  -p, --port=PORT           TCP port (default 11211; 0 = any free port)\n"
            "  -l, --listen=ADDR         address or host name to listen on (default 127.0.0.1)\n"
            "  -t, --threads=N           fern workers (default: one per CPU); also --workers\n"
            "  -m, --memory-limit=MB     item memory in megabytes, k/m/g suffix for other\n"
            "                            units (default 64)\n"
            "  -c, --conn-limit=N        simultaneous connections (default 1024); a newcomer\n"
            "                            past it gets \"ERROR Too many open connections\"\n"
            "  -I, --max-item-size=SIZE  largest item, k/m suffix (default 1m, 1k..1024m)\n"
            "  -U, --udp-port=0          accepted for memcached scripts; UDP is not served\n"
            "  -v, --verbose             errors to stderr; -vv also each connection\n"
            "  -h, --help                print this help and exit\n"
            "\n"
            "Once listening it prints \"listening on ADDR:PORT\" on stdout. SIGINT or\n"
            "SIGTERM stops it: open connections are shut and get up to 2 s to finish;\n"
            "exit status 0. A bad option: this help on stderr, exit status 2; a socket\n"
            "that cannot be opened (address in use, ...): a message, exit status 1.\n"
            "See fern-memcached(1).\n");
    exit(code);
}

static void bad(const char *what, const char *arg)
{
    fprintf(stderr, "fern-memcached: bad %s: %s\n", what, arg);
    usage(2);
}

/* A decimal number with an optional k/m/g suffix (powers of 1024). */
static bool parse_size(const char *s, uint64_t unit, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return false;
    uint64_t mul = unit;
    if (*end == 'k' || *end == 'K')
        mul = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1024ull * 1024 * 1024, end++;
    if (*end || v > UINT64_MAX / mul)
        return false;
    *out = v * mul;
    return true;
}

void mc_config_parse(int argc, char **argv, struct mc_config *cfg)
{
    *cfg = (struct mc_config){.addr = "127.0.0.1",
                              .port = 11211,
                              .workers = 0,
                              .mem_limit = 64ull << 20,
                              .maxconns = 1024,
                              .item_max = 1u << 20,
                              .verbose = 0};
    static const struct option opts[] = {
        {"port", required_argument, NULL, 'p'},
        {"listen", required_argument, NULL, 'l'},
        {"threads", required_argument, NULL, 't'},
        {"workers", required_argument, NULL, 't'},
        {"memory-limit", required_argument, NULL, 'm'},
        {"conn-limit", required_argument, NULL, 'c'},
        {"max-item-size", required_argument, NULL, 'I'},
        {"udp-port", required_argument, NULL, 'U'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    for (int o; (o = getopt_long(argc, argv, "p:l:t:m:c:I:U:vh", opts, NULL)) != -1;) {
        switch (o) {
        case 'p':
            if (!parse_size(optarg, 1, &v) || v > 65535)
                bad("port", optarg);
            cfg->port = (int)v;
            break;
        case 'l':
            cfg->addr = optarg;
            break;
        case 't':
            if (!parse_size(optarg, 1, &v) || v > FERN_WORKERS_MAX)
                bad("thread count", optarg);
            cfg->workers = (unsigned)v;
            break;
        case 'm':
            if (!parse_size(optarg, 1024 * 1024, &v) || v == 0 || v > (1ull << 40))
                bad("memory limit", optarg);
            cfg->mem_limit = v;
            break;
        case 'c':
            if (!parse_size(optarg, 1, &v) || v == 0 || v > 1000000)
                bad("connection limit", optarg);
            cfg->maxconns = (unsigned)v;
            break;
        case 'I':
            if (!parse_size(optarg, 1, &v) || v < 1024 || v > (1024ull << 20))
                bad("item size", optarg);
            cfg->item_max = (uint32_t)v;
            break;
        case 'U':
            if (strcmp(optarg, "0") != 0) {
                fprintf(stderr, "fern-memcached: UDP is not supported (only -U 0)\n");
                exit(2);
            }
            break;
        case 'v':
            cfg->verbose++;
            break;
        case 'h':
            usage(0);
            break;
        default:
            usage(2);
        }
    }
    if (optind != argc)
        usage(2);
}

void mc_raise_fd_limit(unsigned maxconns)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)maxconns + FD_HEADROOM;
    if (rl.rlim_cur >= want)
        return;
    rlim_t to = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    rl.rlim_cur = to;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || to < want)
        fprintf(stderr,
                "fern-memcached: open-file limit %llu is below the %llu that -c %u needs; "
                "connections beyond it will be refused\n",
                (unsigned long long)to, (unsigned long long)want, maxconns);
}
