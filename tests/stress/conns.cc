// SPDX-License-Identifier: MIT
// Stress: 10,000 concurrent loopback TCP connections served by a 2-worker
// cluster. One green thread per server connection (echo); all connections are
// open at the same time (clients wait for each other after their first round
// trip), every round trip is verified, within a time limit.
//
// The clients live in a separate process, so that each process needs only one
// fd per connection (RLIMIT_NOFILE's hard limit may be as low as 20,000): the
// test binary re-executes itself (/proc/self/exe, posix_spawn) with
// kClientFlag, and main() below runs the client side instead of the tests.
// The client process runs fern with 2 workers, one green thread per client,
// and reports its counts to the server process as one line on a pipe.
// FERN_STRESS_SCALE scales the count (sanitizer builds: 0.1).
#include "../fern_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

extern char **environ;

using namespace fern_test;

namespace {

constexpr int64_t kMs = 1000000LL;
constexpr int kRounds = 4;
constexpr size_t kMsg = 32;
// fds a process needs besides one per connection (listener, runtime, pipe,
// stdio, sanitizer files), with room to spare.
constexpr long kFdMargin = 1000;
// argv[1] that turns the binary into the client process:
//   <exe> kClientFlag <port> <connections> <time limit ms> <report fd> <parent pid>
constexpr const char *kClientFlag = "--fern-conns-client";

const char *g_argv0 = "stress_conns";

void fill_msg(char *m, long id, int round) {
    std::memset(m, 0, kMsg);
    std::snprintf(m, kMsg, "c%ld r%d", id, round);
    for (size_t i = std::strlen(m) + 1; i < kMsg; i++) m[i] = (char)((id * 31 + round * 7 + (long)i) & 0x7f);
}

bool read_full(int fd, char *b, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = fern_read(fd, b + got, n - got);
        if (r <= 0) return false;
        got += (size_t)r;
    }
    return true;
}

bool write_full(int fd, const char *b, size_t n) {
    size_t put = 0;
    while (put < n) {
        ssize_t r = fern_write(fd, b + put, n - put);
        if (r <= 0) return false;
        put += (size_t)r;
    }
    return true;
}

// Raise the RLIMIT_NOFILE soft limit to the hard limit; the hard limit (or
// RLIM_INFINITY) in *hard. Raising the hard limit itself needs
// CAP_SYS_RESOURCE: tried when it is below want.
bool raise_nofile(rlim_t want, rlimit *old, rlim_t *hard) {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
    if (old) *old = rl;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
        rlimit more{want, want};
        if (setrlimit(RLIMIT_NOFILE, &more) == 0) rl.rlim_max = want;
    }
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) return false;
    *hard = rl.rlim_max;
    return true;
}

// ---------------------------------------------------------------------------
// Client process

struct ClientSide {
    uint16_t port = 0;
    int64_t deadline = 0;
    std::atomic<long> client_ok{0}, client_err{0}, roundtrips{0}, connect_err{0};
    std::atomic<long> mismatches{0}, barrier_timeouts{0};
    fern_wg all_connected = FERN_WG_INIT;
};

struct ClientArg {
    ClientSide *s;
    long id;
};

void *client(void *arg) {
    ClientArg *ca = static_cast<ClientArg *>(arg);
    ClientSide *s = ca->s;
    long id = ca->id;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool counted_done = false;
    bool ok = false;
    if (fd < 0) {
        s->connect_err++;
        s->client_err++;
        fern_wg_done(&s->all_connected);
        return nullptr;
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(s->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fern_fd_set_deadline(fd, s->deadline, s->deadline);
    do {
        if (fern_connect(fd, (sockaddr *)&sa, sizeof sa) != 0) {
            s->connect_err++;
            break;
        }
        char out[kMsg], in[kMsg];
        int round = 0;
        for (; round < kRounds; round++) {
            fill_msg(out, id, round);
            if (!write_full(fd, out, kMsg) || !read_full(fd, in, kMsg)) break;
            if (std::memcmp(out, in, kMsg) != 0) {
                s->mismatches++;
                break;
            }
            s->roundtrips++;
            if (round == 0) {
                // Hold the connection until every client has one.
                fern_wg_done(&s->all_connected);
                counted_done = true;
                if (fern_wg_timedwait(&s->all_connected, s->deadline) != 0) s->barrier_timeouts++;
            }
        }
        ok = round == kRounds;
    } while (0);
    if (!counted_done) fern_wg_done(&s->all_connected);
    (ok ? s->client_ok : s->client_err)++;
    fern_close(fd);
    return nullptr;
}

// The client process: connect n clients to the server's port, report
//   "conns-client spawned=.. ok=.. err=.. roundtrips=.. connect_err=.. mismatches=.. barrier_timeouts=.. secs=.."
// on report_fd. Exit status 0 only if every client completed every round.
int client_main(int argc, char **argv) {
    if (argc != 7) {
        std::fprintf(stderr, "conns client: usage: %s %s port n limit_ms report_fd parent_pid\n", argv[0],
                     kClientFlag);
        return 2;
    }
    long port = std::atol(argv[2]), n = std::atol(argv[3]), limit_ms = std::atol(argv[4]);
    int report_fd = std::atoi(argv[5]);
    pid_t parent = (pid_t)std::atol(argv[6]);
    // Die with the server process (its spawning thread lives until the end).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) return 3;
    if (port <= 0 || port > 65535 || n <= 0 || limit_ms <= 0) return 2;

    rlim_t hard = 0;
    if (!raise_nofile((rlim_t)(n + kFdMargin), nullptr, &hard)) {
        std::perror("conns client: setrlimit");
        return 2;
    }
    if (hard != RLIM_INFINITY && hard < (rlim_t)(n + kFdMargin)) {
        std::fprintf(stderr, "conns client: RLIMIT_NOFILE hard limit %llu is too low for %ld\n",
                     (unsigned long long)hard, n);
        return 2;
    }

    fern_config cfg{};
    cfg.workers = 2;
    int rc = fern_init(&cfg);
    if (rc != 0) {
        std::fprintf(stderr, "conns client: fern_init: %s\n", strerror(rc));
        return 2;
    }
    long spawned = 0;
    int64_t t0 = fern_now_ns();
    auto s = std::make_unique<ClientSide>();
    {
        // Past the deadline every client gives up on its own; a hang beyond
        // it is a lost wake-up: dump and abort (the server sees the signal).
        Watchdog wd((int)(limit_ms / 1000) + 20, "conns client process");
        s->port = (uint16_t)port;
        s->deadline = t0 + limit_ms * kMs;
        fern_wg_add(&s->all_connected, n);
        std::vector<fern_thread *> clients((size_t)n, nullptr);
        std::vector<ClientArg> args((size_t)n);
        fern_attr ca{};
        ca.stack_size = 64 * 1024;
        for (long i = 0; i < n; i++) {
            args[(size_t)i] = {s.get(), i};
            rc = fern_spawn(&clients[(size_t)i], &ca, client, &args[(size_t)i]);
            if (rc != 0) {
                std::fprintf(stderr, "conns client: spawn client %ld: %s\n", i, strerror(rc));
                for (long k = i; k < n; k++) fern_wg_done(&s->all_connected);
                break;
            }
            spawned++;
        }
        for (long i = 0; i < spawned; i++) {
            rc = fern_join(clients[(size_t)i], nullptr);
            if (rc != 0) std::fprintf(stderr, "conns client: join %ld: %s\n", i, strerror(rc));
        }
    }
    double secs = (double)(fern_now_ns() - t0) / 1e9;
    rc = fern_shutdown();
    char line[512];
    int len = std::snprintf(line, sizeof line,
                            "conns-client spawned=%ld ok=%ld err=%ld roundtrips=%ld connect_err=%ld "
                            "mismatches=%ld barrier_timeouts=%ld secs=%.3f\n",
                            spawned, s->client_ok.load(), s->client_err.load(), s->roundtrips.load(),
                            s->connect_err.load(), s->mismatches.load(), s->barrier_timeouts.load(),
                            secs);
    bool sent = write(report_fd, line, (size_t)len) == len;
    close(report_fd);
    bool all_ok = sent && rc == 0 && spawned == n && s->client_ok.load() == n &&
                  s->roundtrips.load() == n * kRounds && s->barrier_timeouts.load() == 0;
    return all_ok ? 0 : 1;
}

// ---------------------------------------------------------------------------
// Server process (the test)

struct Shared {
    int listen_fd = -1;
    long n = 0;
    fern_cluster *c = nullptr;
    std::atomic<long> accepted{0}, emfile{0}, accept_err{0};
    std::atomic<long> open_now{0}, open_max{0};
    std::atomic<long> handlers_done{0}, handler_err{0}, echoed_msgs{0};
    int64_t deadline = 0;
};

struct Conn {
    Shared *s;
    int fd;
};

void *echo_handler(void *arg) {
    Conn *c = static_cast<Conn *>(arg);
    Shared *s = c->s;
    int fd = c->fd;
    delete c;
    long now = ++s->open_now;
    long m = s->open_max.load();
    while (now > m && !s->open_max.compare_exchange_weak(m, now)) {}
    char buf[256];
    for (;;) {
        ssize_t r = fern_read(fd, buf, sizeof buf);
        if (r == 0) break;
        if (r < 0) {
            s->handler_err++;
            break;
        }
        if (!write_full(fd, buf, (size_t)r)) {
            s->handler_err++;
            break;
        }
        s->echoed_msgs += r;
    }
    --s->open_now;
    fern_close(fd);
    s->handlers_done++;
    return nullptr;
}

void *acceptor(void *arg) {
    Shared *s = static_cast<Shared *>(arg);
    fern_attr a{};
    a.cluster = s->c;
    a.detached = true;
    a.stack_size = 64 * 1024;
    while (s->accepted.load() < s->n && fern_now_ns() < s->deadline) {
        int fd = fern_accept(s->listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            int e = get_errno();
            if (e == EMFILE || e == ENFILE) {
                s->emfile++;
                fern_sleep_ns(2 * kMs);
                continue;
            }
            if (e == EBADF) break; // listener closed: give up
            s->accept_err++;
            fern_sleep_ns(kMs);
            continue;
        }
        s->accepted++;
        Conn *c = new Conn{s, fd};
        int rc;
        while ((rc = fern_spawn(nullptr, &a, echo_handler, c)) == EAGAIN) fern_sleep_ns(kMs);
        if (rc != 0) {
            delete c;
            fern_close(fd);
            s->accept_err++;
        }
    }
    return nullptr;
}

struct ClientReport {
    long spawned = -1, ok = -1, err = -1, roundtrips = -1, connect_err = -1, mismatches = -1,
         barrier_timeouts = -1;
    double secs = -1;
};

bool parse_report(const std::string &text, ClientReport *r) {
    return std::sscanf(text.c_str(),
                       "conns-client spawned=%ld ok=%ld err=%ld roundtrips=%ld connect_err=%ld "
                       "mismatches=%ld barrier_timeouts=%ld secs=%lf",
                       &r->spawned, &r->ok, &r->err, &r->roundtrips, &r->connect_err, &r->mismatches,
                       &r->barrier_timeouts, &r->secs) == 8;
}

std::string describe_status(int st) {
    if (WIFEXITED(st)) return "exit status " + std::to_string(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) return std::string("killed by signal ") + strsignal(WTERMSIG(st));
    return "status " + std::to_string(st);
}

TEST(StressConns, TenThousandConcurrentEchoConnections) {
    const long full = scaled(10000, 100);
    long n = full;
    // This process holds one fd per connection; so does the client process.
    rlimit old{};
    rlim_t hard = 0;
    ASSERT_TRUE(raise_nofile((rlim_t)(n + kFdMargin), &old, &hard)) << strerror(errno);
    if (hard != RLIM_INFINITY && hard < (rlim_t)(n + kFdMargin)) {
        // Use what the limit allows and say so.
        n = (long)hard - kFdMargin;
        if (n < 100) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << hard << " is too low";
        std::printf("RLIMIT_NOFILE hard limit %llu: running %ld connections instead of %ld\n",
                    (unsigned long long)hard, n, full);
    }

    const int limit_s = 240;
    // Client process report: by the deadline + 30 s; handlers: 60 s more.
    Watchdog wd(limit_s + 120, "StressConns");
    auto s = std::make_unique<Shared>();
    s->n = n;
    s->deadline = fern_now_ns() + (int64_t)limit_s * 1000 * kMs;
    ASSERT_EQ(0, fern_cluster_create(&s->c, 2));

    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(s->listen_fd, 0);
    int one = 1;
    setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(0, bind(s->listen_fd, (sockaddr *)&sa, sizeof sa));
    ASSERT_EQ(0, listen(s->listen_fd, 4096));
    socklen_t sl = sizeof sa;
    ASSERT_EQ(0, getsockname(s->listen_fd, (sockaddr *)&sa, &sl));
    uint16_t port = ntohs(sa.sin_port);

    // The client process reports on a pipe: its write end reaches the child
    // as the one fd here without FD_CLOEXEC (everything else has it).
    int p[2] = {-1, -1};
    ASSERT_EQ(0, pipe2(p, O_CLOEXEC));
    int child_fd = fcntl(p[1], F_DUPFD, 10);
    ASSERT_GE(child_fd, 10) << strerror(errno);
    close(p[1]);

    int64_t t0 = fern_now_ns();
    fern_attr aa{};
    aa.cluster = s->c;
    fern_thread *acc = nullptr;
    ASSERT_EQ(0, fern_spawn(&acc, &aa, acceptor, s.get()));

    std::string a_port = std::to_string(port), a_n = std::to_string(n),
                a_limit = std::to_string(limit_s * 1000L - (fern_now_ns() - t0) / kMs),
                a_fd = std::to_string(child_fd), a_ppid = std::to_string((long)getpid());
    // Under qemu-user the host cannot run this (target) binary itself: the
    // client goes through the emulator command ctest names in
    // FERN_TEST_EMULATOR, with this binary's path (which qemu reports for
    // /proc/self/exe) as its program.
    std::vector<std::string> emu;
    std::string self = "/proc/self/exe";
    if (const char *e = getenv("FERN_TEST_EMULATOR")) {
        for (const char *w = e; *w;) {
            size_t len = strcspn(w, " ");
            if (len)
                emu.emplace_back(w, len);
            w += len + (w[len] == ' ');
        }
        char buf[4096];
        ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 1);
        ASSERT_GT(len, 0) << strerror(errno);
        self.assign(buf, (size_t)len);
    }
    std::vector<char *> cargv;
    for (auto &w : emu)
        cargv.push_back(w.data());
    cargv.push_back(emu.empty() ? const_cast<char *>(g_argv0) : self.data());
    cargv.push_back(const_cast<char *>(kClientFlag));
    for (std::string *a : {&a_port, &a_n, &a_limit, &a_fd, &a_ppid})
        cargv.push_back(a->data());
    cargv.push_back(nullptr);
    pid_t pid = -1;
    int src = emu.empty() ? posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargv.data(), environ)
                          : posix_spawnp(&pid, emu[0].c_str(), nullptr, nullptr, cargv.data(), environ);
    close(child_fd);
    int rfd = p[0];
    std::string text;
    int status = 0;
    bool reaped = false, timed_out = false;
    if (src != 0) {
        ADD_FAILURE() << "posix_spawn " << cargv[0] << ": " << strerror(src);
    } else {
        // Read the report until EOF (the child exits), until the deadline + 30 s.
        int64_t wait_end = s->deadline + 30000 * kMs;
        for (;;) {
            int64_t left_ms = (wait_end - fern_now_ns()) / kMs;
            if (left_ms <= 0) {
                timed_out = true;
                break;
            }
            pollfd pf{rfd, POLLIN, 0};
            int r = poll(&pf, 1, (int)(left_ms < 1000 ? left_ms + 1 : 1000));
            if (r < 0 && errno != EINTR) {
                ADD_FAILURE() << "poll: " << strerror(errno);
                timed_out = true; // cannot wait for it: kill it
                break;
            }
            if (r <= 0) continue;
            char b[512];
            ssize_t k = read(rfd, b, sizeof b);
            if (k > 0) {
                text.append(b, (size_t)k);
            } else if (k == 0 || errno != EINTR) {
                break;
            }
        }
        if (timed_out) {
            ADD_FAILURE() << "client process " << pid << " did not finish within " << limit_s + 30
                          << " s (or could not be waited for): killed";
            kill(pid, SIGKILL);
        }
        pid_t w;
        while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
        reaped = w == pid;
        EXPECT_TRUE(reaped) << "waitpid: " << strerror(errno);
    }
    close(rfd);
    int64_t clients_done = fern_now_ns() - t0;

    EXPECT_TRUE(wait_until([&] { return s->handlers_done.load() >= s->accepted.load(); }, 60000))
        << "echo handlers did not all see EOF: " << s->handlers_done.load() << "/" << s->accepted.load();
    // The acceptor has accepted n connections (or hit the deadline) by now,
    // unless the client process failed early.
    if (s->accepted.load() < n) {
        fern_close(s->listen_fd); // wakes the acceptor with EBADF
        s->listen_fd = -1;
    }
    EXPECT_EQ(0, fern_join(acc, nullptr));
    int64_t el = fern_now_ns() - t0;

    // The client process's side.
    if (reaped) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "client process: " << describe_status(status);
    }
    ClientReport cr;
    if (parse_report(text, &cr)) {
        EXPECT_EQ(n, cr.spawned);
        EXPECT_EQ(n, cr.ok) << "client errors " << cr.err << ", connect errors " << cr.connect_err
                            << ", mismatched echoes " << cr.mismatches;
        EXPECT_EQ(0, cr.err);
        EXPECT_EQ(0, cr.connect_err);
        EXPECT_EQ(0, cr.mismatches);
        EXPECT_EQ(n * kRounds, cr.roundtrips);
        EXPECT_EQ(0, cr.barrier_timeouts) << "not all client connections were open at once";
    } else {
        ADD_FAILURE() << "no report from the client process: \"" << text << "\"";
    }

    // This side.
    EXPECT_EQ(n, s->accepted.load());
    EXPECT_EQ(0, s->accept_err.load());
    EXPECT_EQ(0, s->handler_err.load());
    EXPECT_EQ((long)(n * kRounds * (long)kMsg), s->echoed_msgs.load());
    EXPECT_EQ(n, s->open_max.load()) << "peak concurrently open server connections";
    EXPECT_LT(el, (int64_t)limit_s * 1000 * kMs);
    std::fprintf(stderr,
                 "conns: %ld connections x %d round trips in %.2f s (client process %.2f s, its "
                 "clients %.2f s), EMFILE back-offs %ld\n",
                 n, kRounds, (double)el / 1e9, (double)clients_done / 1e9, cr.secs, s->emfile.load());

    if (s->listen_fd >= 0) {
        EXPECT_EQ(0, fern_close(s->listen_fd));
    }
    int rc = EBUSY;
    for (int i = 0; i < 2000 && rc == EBUSY; i++) {
        rc = fern_cluster_destroy(s->c);
        if (rc == EBUSY) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(0, rc);
    setrlimit(RLIMIT_NOFILE, &old);
}

} // namespace

// Own main: the same binary is the client process when run with kClientFlag.
int main(int argc, char **argv) {
    if (argc >= 2 && std::strcmp(argv[1], kClientFlag) == 0) return client_main(argc, argv);
    if (argc >= 1 && argv[0]) g_argv0 = argv[0];
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
