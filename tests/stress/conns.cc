// Stress: 10,000 concurrent loopback TCP connections served by a 2-worker
// cluster. One green thread per server connection (echo), one per client; all
// connections are open at the same time (clients wait for each other after
// their first round trip), every round trip is verified, within a time limit.
// FERN_STRESS_SCALE scales the count (sanitizer builds: 0.1).
#include "../fern_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

using namespace fern_test;

namespace {

constexpr int64_t kMs = 1000000LL;
constexpr int kRounds = 4;
constexpr size_t kMsg = 32;

struct Shared {
    int listen_fd = -1;
    uint16_t port = 0;
    long n = 0;
    fern_cluster *c = nullptr;
    std::atomic<long> accepted{0}, emfile{0}, accept_err{0};
    std::atomic<long> open_now{0}, open_max{0};
    std::atomic<long> handlers_done{0}, handler_err{0}, echoed_msgs{0};
    std::atomic<long> client_ok{0}, client_err{0}, roundtrips{0}, connect_err{0};
    std::atomic<long> barrier_timeouts{0};
    fern_wg all_connected = FERN_WG_INIT;
    int64_t deadline = 0;
};

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

struct ClientArg {
    Shared *s;
    long id;
};

void *client(void *arg) {
    ClientArg *ca = static_cast<ClientArg *>(arg);
    Shared *s = ca->s;
    long id = ca->id;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool counted_done = false;
    bool ok = false;
    if (fd < 0) {
        s->connect_err++;
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
            if (std::memcmp(out, in, kMsg) != 0) break;
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

TEST(StressConns, TenThousandConcurrentEchoConnections) {
    long n = scaled(10000, 100);
    rlimit rl{};
    ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &rl));
    rlim_t need = (rlim_t)(2 * n + 2000);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        /* Raising the hard limit needs CAP_SYS_RESOURCE. */
        rlimit more{need, need};
        if (setrlimit(RLIMIT_NOFILE, &more) == 0)
            rl.rlim_max = need;
    }
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        /* Both ends live in this process: two fds per connection. Use
         * what the limit allows and say so. */
        n = ((long)rl.rlim_max - 2000) / 2;
        if (n < 100)
            GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << rl.rlim_max << " is too low";
        std::printf("RLIMIT_NOFILE hard limit %llu: running %ld connections instead of %ld\n",
                    (unsigned long long)rl.rlim_max, n, scaled(10000, 100));
        need = (rlim_t)(2 * n + 2000);
    }
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &raised));

    const int limit_s = 240;
    Watchdog wd(limit_s + 60, "StressConns");
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
    s->port = ntohs(sa.sin_port);
    ASSERT_EQ(0, fern_wg_add(&s->all_connected, n));

    int64_t t0 = fern_now_ns();
    fern_attr aa{};
    aa.cluster = s->c;
    fern_thread *acc = nullptr;
    ASSERT_EQ(0, fern_spawn(&acc, &aa, acceptor, s.get()));

    std::vector<fern_thread *> clients((size_t)n, nullptr);
    std::vector<ClientArg> args((size_t)n);
    fern_attr ca{};
    ca.cluster = s->c;
    ca.stack_size = 64 * 1024;
    long spawned = 0;
    for (long i = 0; i < n; i++) {
        args[(size_t)i] = {s.get(), i};
        int rc = fern_spawn(&clients[(size_t)i], &ca, client, &args[(size_t)i]);
        if (rc != 0) {
            ADD_FAILURE() << "spawn client " << i << ": " << strerror(rc);
            for (long k = i; k < n; k++) fern_wg_done(&s->all_connected);
            break;
        }
        spawned++;
    }
    for (long i = 0; i < spawned; i++) EXPECT_EQ(0, fern_join(clients[(size_t)i], nullptr));
    int64_t clients_done = fern_now_ns() - t0;
    EXPECT_TRUE(wait_until([&] { return s->handlers_done.load() >= s->accepted.load(); }, 60000))
        << "echo handlers did not all see EOF: " << s->handlers_done.load() << "/" << s->accepted.load();
    // The acceptor has accepted n connections (or hit the deadline) by now.
    if (s->accepted.load() < n) {
        fern_close(s->listen_fd); // wakes the acceptor with EBADF
        s->listen_fd = -1;
    }
    EXPECT_EQ(0, fern_join(acc, nullptr));
    int64_t el = fern_now_ns() - t0;

    EXPECT_EQ(spawned, n);
    EXPECT_EQ(n, s->client_ok.load()) << "client errors " << s->client_err.load() << ", connect errors "
                                      << s->connect_err.load();
    EXPECT_EQ(0, s->client_err.load());
    EXPECT_EQ(n * kRounds, s->roundtrips.load());
    EXPECT_EQ(n, s->accepted.load());
    EXPECT_EQ(0, s->accept_err.load());
    EXPECT_EQ(0, s->handler_err.load());
    EXPECT_EQ((long)(n * kRounds * (long)kMsg), s->echoed_msgs.load());
    EXPECT_EQ(0, s->barrier_timeouts.load()) << "not all connections were open at once";
    EXPECT_EQ(n, s->open_max.load()) << "peak concurrently open server connections";
    EXPECT_LT(el, (int64_t)limit_s * 1000 * kMs);
    std::fprintf(stderr, "conns: %ld connections x %d round trips in %.2f s (clients %.2f s), "
                         "EMFILE back-offs %ld\n",
                 n, kRounds, (double)el / 1e9, (double)clients_done / 1e9, s->emfile.load());

    if (s->listen_fd >= 0) {
        EXPECT_EQ(0, fern_close(s->listen_fd));
    }
    int rc = EBUSY;
    for (int i = 0; i < 2000 && rc == EBUSY; i++) {
        rc = fern_cluster_destroy(s->c);
        if (rc == EBUSY) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(0, rc);
    setrlimit(RLIMIT_NOFILE, &rl);
}

} // namespace
