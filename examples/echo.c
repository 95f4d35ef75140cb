/* SPDX-License-Identifier: MIT */
/*
 * echo: the echo server and its load client in one process. Starts the server
 * on a free loopback port, runs the client against it on the same runtime
 * (server and client green threads share the workers), prints the results and
 * stops the server.
 *
 *   echo [--conns 64] [--size 64] [--duration 3 | --count N] [--workers N] [--trace FILE]
 *
 * --trace records the run with fern's tracer (fern_trace_start; open FILE in
 * Perfetto, or summarise it with fern-trace): what tracing costs is the
 * difference in round trips per second from an untraced run.
 *
 * The server and the client are examples/echo_server.c and echo_client.c,
 * compiled in without their main functions.
 */
#define ECHO_SERVER_NO_MAIN
#include "echo_server.c"
#define ECHO_CLIENT_NO_MAIN
#include "echo_client.c"

static struct echo_load load = {"127.0.0.1", 0, 64, 64, 3.0, 0};

static void *echo_main(void *unused)
{
    (void)unused;
    static struct echo_server srv;
    int r = echo_server_start(&srv, 0);
    if (r) {
        fprintf(stderr, "echo: server: %s\n", strerror(r));
        exit(1);
    }
    printf("server listening on 127.0.0.1:%d; %u connections, %zu-byte messages, ", srv.port,
           load.conns, load.size);
    if (load.count)
        printf("%llu round trips each\n", (unsigned long long)load.count);
    else
        printf("%.1f s\n", load.duration);
    fflush(stdout);
    load.port = srv.port;
    struct echo_result res;
    r = echo_load_run(&load, &res);
    echo_server_stop(&srv);
    if (r) {
        fprintf(stderr, "echo: client: %s\n", strerror(r));
        exit(1);
    }
    echo_result_print(&load, &res);
    return (void *)(uintptr_t)(res.failed_conns != 0);
}

static void usage(void)
{
    fprintf(stderr, "usage: echo [--conns N] [--size BYTES] [--duration SECONDS | --count N]"
                    " [--workers N] [--trace FILE]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    unsigned workers = 0;
    const char *trace = NULL;
    static const struct option opts[] = {{"conns", required_argument, NULL, 'c'},
                                         {"size", required_argument, NULL, 's'},
                                         {"duration", required_argument, NULL, 'd'},
                                         {"count", required_argument, NULL, 'n'},
                                         {"workers", required_argument, NULL, 'w'},
                                         {"trace", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    for (int c; (c = getopt_long(argc, argv, "c:s:d:n:w:t:h", opts, NULL)) != -1;) {
        char *end = NULL;
        switch (c) {
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
        case 't':
            trace = optarg;
            end = optarg + strlen(optarg);
            break;
        default:
            usage();
        }
        if (*end)
            usage();
    }
    if (optind != argc || load.conns == 0 || load.size == 0 || load.duration <= 0)
        usage();
    signal(SIGPIPE, SIG_IGN);
    fern_config cfg = {.workers = workers, .stack_size = 0};
    void *failed = NULL;
    int r = fern_init(&cfg);
    if (!r && trace && (r = fern_trace_start(trace)))
        fprintf(stderr, "echo: --trace %s: %s\n", trace, strerror(r));
    if (!r)
        r = fern_run(echo_main, NULL, &failed);
    if (!r && trace && (r = fern_trace_stop()))
        fprintf(stderr, "echo: --trace %s: %s\n", trace, strerror(r));
    if (r) {
        fprintf(stderr, "echo: %s\n", strerror(r));
        return 1;
    }
    fern_shutdown();
    return failed ? 1 : 0;
}
