// SPDX-License-Identifier: MIT
// I/O layer: fern_read/write/readv/writev/recv/send/recvfrom/sendto/recvmsg/
// sendmsg, fern_accept, fern_connect, fern_close, fern_wait_fd and per-fd
// deadlines, from green threads (they park, the worker keeps running others)
// and from plain threads (they block in poll). Loopback (127.0.0.1) and
// AF_UNIX socketpairs only; ports are chosen by the kernel.
#include "fern_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace fern_test;

namespace {

// Loaded 2-core machine: a 100 ms deadline may fire anywhere in 100..~600 ms;
// "promptly" below means well under the multi-second fallback bounds.
constexpr int64_t kMs = 1000000LL;

struct Pair {
    int a = -1, b = -1;
};

Pair unix_pair(int type = SOCK_STREAM) {
    int sv[2];
    if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) != 0) {
        ADD_FAILURE() << "socketpair: " << strerror(errno);
        return {};
    }
    return {sv[0], sv[1]};
}

sockaddr_in loopback(uint16_t port) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

uint16_t port_of(int fd) {
    sockaddr_in sa{};
    socklen_t l = sizeof sa;
    if (getsockname(fd, (sockaddr *)&sa, &l) != 0) return 0;
    return ntohs(sa.sin_port);
}

// A listening TCP socket on 127.0.0.1, kernel-chosen port.
int tcp_listen(uint16_t *port, int backlog = 128) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa = loopback(0);
    if (bind(fd, (sockaddr *)&sa, sizeof sa) != 0 || listen(fd, backlog) != 0) {
        close(fd);
        return -1;
    }
    *port = port_of(fd);
    return fd;
}

// Plain blocking connect.
int tcp_connect_plain(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in sa = loopback(port);
    if (connect(fd, (sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// A connected loopback TCP pair made with plain calls.
Pair tcp_pair() {
    uint16_t port = 0;
    int l = tcp_listen(&port);
    if (l < 0) {
        ADD_FAILURE() << "listen: " << strerror(errno);
        return {};
    }
    int c = tcp_connect_plain(port);
    int s = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    close(l);
    if (c < 0 || s < 0) ADD_FAILURE() << "tcp pair: " << strerror(errno);
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return {c, s};
}

// A port on 127.0.0.1 with nobody listening (bound then released).
uint16_t closed_port() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa = loopback(0);
    bind(fd, (sockaddr *)&sa, sizeof sa);
    uint16_t p = port_of(fd);
    close(fd);
    return p;
}

// Fill fd's send path (and the peer's receive buffer) with raw non-blocking
// sends until EAGAIN. Returns the bytes queued.
size_t fill(int fd) {
    static char junk[65536];
    size_t total = 0;
    for (int i = 0; i < 100000; i++) {
        ssize_t r = send(fd, junk, sizeof junk, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0) break;
        total += (size_t)r;
    }
    return total;
}

// Read everything currently queued on fd without blocking.
size_t drain(int fd) {
    static char junk[65536];
    size_t total = 0;
    for (int i = 0; i < 100000; i++) {
        ssize_t r = recv(fd, junk, sizeof junk, MSG_DONTWAIT);
        if (r <= 0) break;
        total += (size_t)r;
    }
    return total;
}

bool is_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

bool readable_now(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

bool writable_now(int fd) {
    pollfd p{fd, POLLOUT, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLOUT);
}

uint8_t pat(size_t i) { return (uint8_t)(i ^ (i >> 8) ^ (i >> 16) ^ 0x5a); }

template <class F> fern_thread *spawn_c(fern_cluster *c, F &&f) {
    fern_thread *t = nullptr;
    EXPECT_EQ(0, spawn_on(&t, c, std::forward<F>(f)));
    return t;
}

void join(fern_thread *t) {
    if (t) {
        EXPECT_EQ(0, fern_join(t, nullptr));
    }
}

// Tests that need "the same worker" run on a private 1-worker cluster.
class IoOneWorker : public ::testing::Test {
  protected:
    void SetUp() override { ASSERT_EQ(0, fern_cluster_create(&c1, 1)); }
    void TearDown() override {
        if (c1) {
            EXPECT_EQ(0, fern_cluster_destroy(c1));
        }
    }
    fern_cluster *c1 = nullptr;
};

// ------------------------------------------------------------------------
// Success paths
// ------------------------------------------------------------------------

TEST(Io, ReadWriteSocketpair) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(5, fern_write(p.a, "hello", 5));
        char buf[16] = {};
        ASSERT_EQ(5, fern_read(p.b, buf, sizeof buf));
        EXPECT_STREQ("hello", buf);
        // The first fern_* call switched both fds to O_NONBLOCK.
        EXPECT_TRUE(is_nonblocking(p.a));
        EXPECT_TRUE(is_nonblocking(p.b));
        // Zero-length read/write pass straight through.
        EXPECT_EQ(0, fern_write(p.a, buf, 0));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
}

TEST(Io, TcpAcceptConnectEcho) {
    Watchdog wd(30);
    uint16_t port = 0;
    int l = tcp_listen(&port);
    ASSERT_GE(l, 0);
    std::atomic<int> server_ok{0}, client_ok{0};
    fern_thread *srv = spawn_c(nullptr, [&] {
        sockaddr_in peer{};
        socklen_t pl = sizeof peer;
        int c = fern_accept(l, (sockaddr *)&peer, &pl, SOCK_CLOEXEC);
        ASSERT_GE(c, 0) << strerror(get_errno());
        EXPECT_EQ(sizeof peer, pl);
        EXPECT_EQ(AF_INET, peer.sin_family);
        EXPECT_EQ(htonl(INADDR_LOOPBACK), peer.sin_addr.s_addr);
        EXPECT_TRUE(is_nonblocking(c)) << "SOCK_NONBLOCK is always added";
        EXPECT_TRUE(fcntl(c, F_GETFD) & FD_CLOEXEC) << "caller's SOCK_CLOEXEC kept";
        char buf[64];
        for (int i = 0; i < 3; i++) {
            ssize_t r = fern_recv(c, buf, sizeof buf, 0);
            ASSERT_GT(r, 0);
            ASSERT_EQ(r, fern_send(c, buf, (size_t)r, 0));
        }
        char x;
        EXPECT_EQ(0, fern_recv(c, &x, 1, 0)) << "client closed: EOF";
        EXPECT_EQ(0, fern_close(c));
        server_ok = 1;
    });
    fern_thread *cli = spawn_c(nullptr, [&] {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(s, 0);
        sockaddr_in sa = loopback(port);
        ASSERT_EQ(0, fern_connect(s, (sockaddr *)&sa, sizeof sa)) << strerror(get_errno());
        for (int i = 0; i < 3; i++) {
            std::string msg = "ping-" + std::to_string(i);
            ASSERT_EQ((ssize_t)msg.size(), fern_send(s, msg.data(), msg.size(), 0));
            char buf[64];
            size_t got = 0;
            while (got < msg.size()) {
                ssize_t r = fern_recv(s, buf + got, sizeof buf - got, 0);
                ASSERT_GT(r, 0);
                got += (size_t)r;
            }
            EXPECT_EQ(msg, std::string(buf, got));
        }
        EXPECT_EQ(0, fern_close(s));
        client_ok = 1;
    });
    join(cli);
    join(srv);
    EXPECT_EQ(1, server_ok.load());
    EXPECT_EQ(1, client_ok.load());
    EXPECT_EQ(0, fern_close(l));
}

TEST(Io, AcceptNullAddrAndParksUntilClient) {
    Watchdog wd(30);
    uint16_t port = 0;
    int l = tcp_listen(&port);
    ASSERT_GE(l, 0);
    std::atomic<int> accepted{-2};
    fern_thread *srv = spawn_c(nullptr, [&] { accepted = fern_accept(l, nullptr, nullptr, 0); });
    // The acceptor parks: nothing to accept yet.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(-2, accepted.load());
    int c = tcp_connect_plain(port);
    ASSERT_GE(c, 0);
    EXPECT_TRUE(wait_until([&] { return accepted.load() != -2; }, 5000))
        << "fern_accept did not wake for a new connection";
    join(srv);
    int s = accepted.load();
    ASSERT_GE(s, 0);
    EXPECT_TRUE(is_nonblocking(s));
    EXPECT_FALSE(fcntl(s, F_GETFD) & FD_CLOEXEC);
    EXPECT_EQ(0, fern_close(s));
    close(c);
    EXPECT_EQ(0, fern_close(l));
}

TEST(Io, ReadvWritev) {
    Watchdog wd(30);
    for (int tcp = 0; tcp < 2; tcp++) {
        Pair p = tcp ? tcp_pair() : unix_pair();
        ASSERT_EQ(0, run_green([&] {
            char a[] = "abc", b[] = "defgh", c[] = "ij";
            iovec out[3] = {{a, 3}, {b, 5}, {c, 2}};
            ASSERT_EQ(10, fern_writev(p.a, out, 3));
            char x[4] = {}, y[16] = {};
            iovec in[2] = {{x, 4}, {y, sizeof y}};
            size_t got = 0;
            while (got < 10) {
                // Adjust the iovecs for a short read (TCP may split).
                iovec cur[2];
                int n = 0;
                size_t skip = got;
                for (auto &v : in) {
                    if (skip >= v.iov_len) {
                        skip -= v.iov_len;
                        continue;
                    }
                    cur[n++] = {(char *)v.iov_base + skip, v.iov_len - skip};
                    skip = 0;
                }
                ssize_t r = fern_readv(p.b, cur, n);
                ASSERT_GT(r, 0);
                got += (size_t)r;
            }
            EXPECT_EQ(std::string("abcd"), std::string(x, 4));
            EXPECT_EQ(std::string("efghij"), std::string(y, 6));
        }));
        EXPECT_EQ(0, fern_close(p.a));
        EXPECT_EQ(0, fern_close(p.b));
    }
}

TEST(Io, RecvFlagsPeek) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(4, fern_send(p.a, "data", 4, 0));
        char buf[8] = {};
        ASSERT_EQ(4, fern_recv(p.b, buf, sizeof buf, MSG_PEEK));
        EXPECT_EQ(std::string("data"), std::string(buf, 4));
        memset(buf, 0, sizeof buf);
        ASSERT_EQ(4, fern_recv(p.b, buf, sizeof buf, 0));
        EXPECT_EQ(std::string("data"), std::string(buf, 4));
        EXPECT_FALSE(readable_now(p.b));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
}

TEST(Io, UdpSendtoRecvfrom) {
    Watchdog wd(30);
    int r = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(r, 0);
    ASSERT_GE(s, 0);
    sockaddr_in sa = loopback(0);
    ASSERT_EQ(0, bind(r, (sockaddr *)&sa, sizeof sa));
    ASSERT_EQ(0, bind(s, (sockaddr *)&sa, sizeof sa));
    uint16_t rport = port_of(r), sport = port_of(s);
    std::atomic<int> got{0};
    fern_thread *rt = spawn_c(nullptr, [&] {
        for (int i = 0; i < 5; i++) {
            char buf[64];
            sockaddr_in from{};
            socklen_t fl = sizeof from;
            ssize_t n = fern_recvfrom(r, buf, sizeof buf, 0, (sockaddr *)&from, &fl);
            ASSERT_GT(n, 0) << strerror(get_errno());
            EXPECT_EQ("dgram-" + std::to_string(i), std::string(buf, (size_t)n));
            EXPECT_EQ(sizeof from, fl);
            EXPECT_EQ(sport, ntohs(from.sin_port));
            EXPECT_EQ(htonl(INADDR_LOOPBACK), from.sin_addr.s_addr);
            got++;
        }
    });
    fern_thread *st = spawn_c(nullptr, [&] {
        fern_sleep_ns(50 * kMs); // the receiver parks first
        sockaddr_in to = loopback(rport);
        for (int i = 0; i < 5; i++) {
            std::string m = "dgram-" + std::to_string(i);
            ASSERT_EQ((ssize_t)m.size(), fern_sendto(s, m.data(), m.size(), 0, (sockaddr *)&to, sizeof to));
            fern_sleep_ns(5 * kMs);
        }
    });
    join(st);
    join(rt);
    EXPECT_EQ(5, got.load());
    EXPECT_EQ(0, fern_close(r));
    EXPECT_EQ(0, fern_close(s));
}

TEST(Io, SendmsgRecvmsgIovecs) {
    Watchdog wd(30);
    Pair p = unix_pair(SOCK_SEQPACKET);
    ASSERT_EQ(0, run_green([&] {
        char h[] = "head:", b[] = "body";
        iovec out[2] = {{h, 5}, {b, 4}};
        msghdr m{};
        m.msg_iov = out;
        m.msg_iovlen = 2;
        ASSERT_EQ(9, fern_sendmsg(p.a, &m, 0));
        char x[3], y[16];
        iovec in[2] = {{x, 3}, {y, sizeof y}};
        msghdr r{};
        r.msg_iov = in;
        r.msg_iovlen = 2;
        ASSERT_EQ(9, fern_recvmsg(p.b, &r, 0));
        EXPECT_EQ(std::string("hea"), std::string(x, 3));
        EXPECT_EQ(std::string("d:body"), std::string(y, 6));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
}

TEST(Io, RecvmsgParksThenReceivesFdOverScmRights) {
    Watchdog wd(30);
    Pair p = unix_pair();
    int pp[2];
    ASSERT_EQ(0, pipe2(pp, O_CLOEXEC));
    std::atomic<int> received{-2};
    fern_thread *rt = spawn_c(nullptr, [&] {
        char data[8];
        iovec iov{data, sizeof data};
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
        msghdr m{};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = cbuf;
        m.msg_controllen = sizeof cbuf;
        ssize_t n = fern_recvmsg(p.b, &m, MSG_CMSG_CLOEXEC);
        ASSERT_EQ(1, n) << strerror(get_errno());
        EXPECT_EQ('F', data[0]);
        cmsghdr *c = CMSG_FIRSTHDR(&m);
        ASSERT_NE(nullptr, c);
        EXPECT_EQ(SOL_SOCKET, c->cmsg_level);
        EXPECT_EQ(SCM_RIGHTS, c->cmsg_type);
        int fd;
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
        received = fd;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(-2, received.load()) << "recvmsg returned with nothing sent";
    ASSERT_EQ(0, run_green([&] {
        char d = 'F';
        iovec iov{&d, 1};
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
        msghdr m{};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = cbuf;
        m.msg_controllen = sizeof cbuf;
        cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pp[0], sizeof(int));
        ASSERT_EQ(1, fern_sendmsg(p.a, &m, 0));
    }));
    join(rt);
    int fd = received.load();
    ASSERT_GE(fd, 0);
    EXPECT_NE(pp[0], fd);
    ASSERT_EQ(4, write(pp[1], "ping", 4));
    char buf[8] = {};
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(4, fern_read(fd, buf, sizeof buf)); }));
    EXPECT_STREQ("ping", buf);
    EXPECT_EQ(0, fern_close(fd));
    close(pp[0]);
    close(pp[1]);
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
}

TEST(Io, RegularFileReadWrite) {
    Watchdog wd(30);
    char path[] = "/tmp/fern_io_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(6, fern_write(fd, "abcdef", 6));
        ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
        char buf[8] = {};
        ASSERT_EQ(6, fern_read(fd, buf, sizeof buf));
        EXPECT_STREQ("abcdef", buf);
        EXPECT_EQ(0, fern_read(fd, buf, sizeof buf)) << "EOF on a regular file";
        EXPECT_EQ(FERN_READ, fern_wait_fd(fd, FERN_READ, fern_now_ns() + 1000 * kMs));
    }));
    EXPECT_EQ(0, fern_close(fd));
}

// ------------------------------------------------------------------------
// Parking: the worker keeps running other green threads
// ------------------------------------------------------------------------

// mode 0: the counter yields (the worker never idles: I/O must be served by
// the busy worker's periodic poll); mode 1: the counter sleeps 1 ms between
// steps (the worker idles and polls).
void reader_parks_while_counter_runs(fern_cluster *c1, int mode, bool tcp) {
    Watchdog wd(60);
    Pair p = tcp ? tcp_pair() : unix_pair();
    std::atomic<long> counter{0};
    std::atomic<bool> stop{false}, reader_done{false}, reader_started{false};
    std::atomic<long> at_start{-1}, at_end{-1};
    std::string got;
    fern_thread *ct = spawn_c(c1, [&] {
        int64_t end = fern_now_ns() + 30000 * kMs;
        while (!stop.load() && fern_now_ns() < end) {
            counter++;
            if (mode == 0)
                fern_yield();
            else
                fern_sleep_ns(kMs);
        }
    });
    fern_thread *rt = spawn_c(c1, [&] {
        char buf[32];
        reader_started = true;
        at_start = counter.load();
        ssize_t n = fern_read(p.a, buf, sizeof buf);
        at_end = counter.load();
        if (n > 0) got.assign(buf, (size_t)n);
        reader_done = true;
    });
    ASSERT_TRUE(wait_until([&] { return reader_started.load(); }, 10000));
    long c0 = counter.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(reader_done.load()) << "fern_read returned with no data";
    EXPECT_TRUE(wait_until([&] { return counter.load() > c0 + 20; }, 10000))
        << "counter thread made no progress while the reader was parked (worker blocked?)";
    ASSERT_EQ(5, write(p.b, "wake!", 5));
    EXPECT_TRUE(wait_until([&] { return reader_done.load(); }, 5000))
        << "parked reader not woken by data (mode " << mode << ")";
    stop = true;
    join(rt);
    join(ct);
    EXPECT_EQ("wake!", got);
    EXPECT_GT(at_end.load(), at_start.load() + 20)
        << "the counter on the same worker did not advance while the reader was parked";
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST_F(IoOneWorker, ReaderParksWhileBusyCounterRuns) { reader_parks_while_counter_runs(c1, 0, false); }
TEST_F(IoOneWorker, ReaderParksWhileSleepingCounterRuns) { reader_parks_while_counter_runs(c1, 1, false); }
TEST_F(IoOneWorker, TcpReaderParksWhileBusyCounterRuns) { reader_parks_while_counter_runs(c1, 0, true); }
TEST_F(IoOneWorker, TcpReaderParksWhileSleepingCounterRuns) { reader_parks_while_counter_runs(c1, 1, true); }

// Many green threads parked on different fds; data arrives in scrambled order.
TEST(Io, ManyParkedReadersEachWokenByItsFd) {
    Watchdog wd(60);
    const int n = (int)tsan_capped(scaled(200, 20), 100);
    std::vector<Pair> ps(n);
    for (auto &p : ps) p = unix_pair();
    std::atomic<int> done{0}, bad{0};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < n; i++) {
        ts.push_back(spawn_c(nullptr, [&, i] {
            int v = -1;
            if (fern_read(ps[i].a, &v, sizeof v) != (ssize_t)sizeof v || v != i) bad++;
            done++;
        }));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(0, done.load());
    std::vector<int> order(n);
    for (int i = 0; i < n; i++) order[i] = (i * 7919) % n;
    std::sort(order.begin(), order.end());
    std::reverse(order.begin(), order.end());
    for (int i : order) ASSERT_EQ((ssize_t)sizeof i, write(ps[i].b, &i, sizeof i));
    EXPECT_TRUE(wait_until([&] { return done.load() == n; }, 20000)) << done.load() << "/" << n;
    for (auto t : ts) join(t);
    EXPECT_EQ(0, bad.load());
    for (auto &p : ps) {
        EXPECT_EQ(0, fern_close(p.a));
        close(p.b);
    }
}

// A reader on a non-default cluster is woken (the event is handled by
// whichever worker polls; the thread must go back to its own cluster).
TEST_F(IoOneWorker, ReaderOnOtherClusterWokenAndStaysOnIt) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<bool> ok{false};
    fern_thread *t = spawn_c(c1, [&] {
        char b[4];
        ssize_t n = fern_read(p.a, b, sizeof b);
        EXPECT_EQ(3, n);
        EXPECT_EQ(c1, fern_current_cluster());
        ok = n == 3;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(3, fern_write(p.b, "abc", 3)); }));
    join(t);
    EXPECT_TRUE(ok.load());
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
}

// ------------------------------------------------------------------------
// Partial reads and writes
// ------------------------------------------------------------------------

void big_transfer(bool tcp) {
    Watchdog wd(120);
    const size_t total = 8u << 20;
    Pair p = tcp ? tcp_pair() : unix_pair();
    // Small send buffer; the receive buffer stays default (a tiny TCP window
    // on loopback stalls on the persist timer, which is not what we test).
    int small = 4096;
    ASSERT_EQ(0, setsockopt(p.a, SOL_SOCKET, SO_SNDBUF, &small, sizeof small));
    if (!tcp) {
        ASSERT_EQ(0, setsockopt(p.b, SOL_SOCKET, SO_RCVBUF, &small, sizeof small));
    }
    std::vector<uint8_t> src(total);
    for (size_t i = 0; i < total; i++) src[i] = pat(i);
    std::atomic<long> partial_writes{0}, write_calls{0}, short_reads{0};
    std::atomic<size_t> received{0};
    std::atomic<long> mismatch_at{-1};
    fern_thread *wt = spawn_c(nullptr, [&] {
        size_t off = 0;
        while (off < total) {
            ssize_t r = fern_write(p.a, src.data() + off, total - off);
            write_calls++;
            if (r <= 0) {
                ADD_FAILURE() << "fern_write: " << r << " " << strerror(get_errno()) << " at " << off;
                break;
            }
            if ((size_t)r < total - off) partial_writes++;
            off += (size_t)r;
        }
        EXPECT_EQ(0, fern_close(p.a));
    });
    fern_thread *rt = spawn_c(nullptr, [&] {
        std::vector<uint8_t> buf(16384);
        size_t off = 0;
        int64_t end = fern_now_ns() + 100000 * kMs;
        for (long i = 0; fern_now_ns() < end; i++) {
            ssize_t r = fern_read(p.b, buf.data(), buf.size());
            if (r < 0) {
                ADD_FAILURE() << "fern_read: " << strerror(get_errno());
                break;
            }
            if (r == 0) break;
            if ((size_t)r < buf.size()) short_reads++;
            for (ssize_t k = 0; k < r; k++) {
                if (buf[(size_t)k] != pat(off + (size_t)k) && mismatch_at.load() < 0)
                    mismatch_at = (long)(off + (size_t)k);
            }
            off += (size_t)r;
            received = off;
            if ((i & 7) == 0) fern_sleep_ns(200000); // a slow reader
        }
    });
    join(wt);
    join(rt);
    EXPECT_EQ(total, received.load());
    EXPECT_EQ(-1, mismatch_at.load()) << "stream corrupted";
    EXPECT_GT(partial_writes.load(), 0) << "fern_write never returned a partial count (calls "
                                         << write_calls.load() << ")";
    EXPECT_GT(write_calls.load(), 1);
    EXPECT_GT(short_reads.load(), 0);
    EXPECT_EQ(0, fern_close(p.b));
}

TEST(Io, PartialWritesTcpEightMiB) { big_transfer(true); }
TEST(Io, PartialWritesUnixEightMiB) { big_transfer(false); }

// ------------------------------------------------------------------------
// Per-fd deadlines
// ------------------------------------------------------------------------

TEST(Io, ReadDeadlineTimesOut) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 100 * kMs, FERN_FOREVER));
        char buf[8];
        int64_t t0 = fern_now_ns();
        errno = 0;
        EXPECT_EQ(-1, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, 95 * kMs) << "fired early";
        EXPECT_LT(el, 2000 * kMs) << "fired far too late";
        // Deadline passed, still set: a read that would wait fails at once...
        t0 = fern_now_ns();
        EXPECT_EQ(-1, fern_recv(p.a, buf, sizeof buf, 0));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        EXPECT_LT(fern_now_ns() - t0, 500 * kMs);
        // ...but one that need not wait succeeds, and nothing was consumed.
        ASSERT_EQ(3, write(p.b, "xyz", 3));
        memset(buf, 0, sizeof buf);
        EXPECT_EQ(3, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(std::string("xyz"), std::string(buf, 3));
        // Writes have no deadline.
        EXPECT_EQ(2, fern_write(p.a, "ok", 2));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, TimedOutReadConsumesNothing) {
    Watchdog wd(30);
    Pair p = unix_pair(SOCK_DGRAM);
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 100 * kMs, FERN_FOREVER));
        char buf[8];
        EXPECT_EQ(-1, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, FERN_FOREVER));
        ASSERT_EQ(2, write(p.b, "d1", 2));
        ASSERT_EQ(2, write(p.b, "d2", 2));
        EXPECT_EQ(2, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(std::string("d1"), std::string(buf, 2)) << "a datagram was lost";
        EXPECT_EQ(2, fern_read(p.a, buf, sizeof buf));
        EXPECT_EQ(std::string("d2"), std::string(buf, 2));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, ForeverClearsDeadline) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<ssize_t> res{-100};
    std::atomic<int> err{0};
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 50 * kMs, FERN_FOREVER));
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, FERN_FOREVER));
    fern_thread *t = spawn_c(nullptr, [&] {
        char b[4];
        res = fern_read(p.a, b, sizeof b);
        err = get_errno();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(-100, res.load()) << "read ended although the deadline was cleared, errno "
                                << err.load();
    ASSERT_EQ(2, write(p.b, "hi", 2));
    join(t);
    EXPECT_EQ(2, res.load());
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WriteDeadlineTimesOut) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        // Register, then fill the buffer.
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, fern_now_ns() + 150 * kMs));
        ASSERT_GT(fill(p.a), 0u);
        char big[4096] = {};
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(-1, fern_write(p.a, big, sizeof big));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, 140 * kMs);
        EXPECT_LT(el, 2000 * kMs);
        // Reads on the same fd have no deadline: data there succeeds.
        ASSERT_EQ(1, write(p.b, "r", 1));
        char c;
        EXPECT_EQ(1, fern_read(p.a, &c, 1));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, DeadlineFromPlainThread) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 100 * kMs, FERN_FOREVER));
    char buf[4];
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(-1, fern_read(p.a, buf, sizeof buf));
    EXPECT_EQ(ETIMEDOUT, get_errno());
    int64_t el = fern_now_ns() - t0;
    EXPECT_GE(el, 95 * kMs);
    EXPECT_LT(el, 2000 * kMs);
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, SetDeadlineBadFd) {
    EXPECT_EQ(EBADF, fern_fd_set_deadline(-1, FERN_FOREVER, FERN_FOREVER));
    EXPECT_EQ(EBADF, fern_fd_set_deadline(INT32_MAX, FERN_FOREVER, FERN_FOREVER));
}

// fern_close forgets the deadline: a new fd with the same number has none.
TEST(Io, CloseResetsDeadlineForReusedFdNumber) {
    Watchdog wd(30);
    Pair p = unix_pair();
    int num = p.a;
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, 1, 1)); // long past
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
    Pair q = unix_pair();
    if (q.a != num && q.b != num) {
        EXPECT_EQ(0, fern_close(q.a));
        EXPECT_EQ(0, fern_close(q.b));
        GTEST_SKIP() << "fd number not reused";
    }
    int r = q.a == num ? q.a : q.b, w = q.a == num ? q.b : q.a;
    std::atomic<ssize_t> res{-100};
    std::atomic<int> err{0};
    fern_thread *t = spawn_c(nullptr, [&] {
        char b[4];
        res = fern_read(r, b, sizeof b);
        err = get_errno();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(-100, res.load()) << "old deadline applied to the new fd: errno " << err.load();
    ASSERT_EQ(2, write(w, "ok", 2));
    join(t);
    EXPECT_EQ(2, res.load());
    EXPECT_EQ(0, fern_close(q.a));
    EXPECT_EQ(0, fern_close(q.b));
}

// ------------------------------------------------------------------------
// fern_wait_fd
// ------------------------------------------------------------------------

TEST(Io, WaitFdReadyAndTimeout) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(FERN_WRITE, fern_wait_fd(p.a, FERN_WRITE, fern_now_ns() + 1000 * kMs));
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(0, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 100 * kMs));
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, 95 * kMs);
        EXPECT_LT(el, 2000 * kMs);
        // Past deadline: poll without waiting.
        EXPECT_EQ(0, fern_wait_fd(p.a, FERN_READ, 0));
        ASSERT_EQ(1, write(p.b, "x", 1));
        EXPECT_EQ(FERN_READ, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 1000 * kMs));
        EXPECT_EQ(FERN_READ | FERN_WRITE,
                  fern_wait_fd(p.a, FERN_READ | FERN_WRITE, fern_now_ns() + 1000 * kMs));
        char c;
        EXPECT_EQ(1, fern_read(p.a, &c, 1));
        EXPECT_EQ(FERN_WRITE, fern_wait_fd(p.a, FERN_READ | FERN_WRITE, fern_now_ns() + 1000 * kMs));
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WaitFdParksUntilReadable) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<int> res{-100};
    fern_thread *t = spawn_c(nullptr, [&] { res = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 10000 * kMs); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(-100, res.load());
    int64_t t0 = fern_now_ns();
    ASSERT_EQ(1, write(p.b, "x", 1));
    join(t);
    EXPECT_EQ(FERN_READ, res.load());
    EXPECT_LT(fern_now_ns() - t0, 3000 * kMs);
    EXPECT_TRUE(readable_now(p.a)) << "fern_wait_fd must not consume data";
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WaitFdInvalid) {
    Pair p = unix_pair();
    for (int ev : {0, 4, 8, -1, FERN_READ | 4, 0x100}) {
        errno = 0;
        EXPECT_EQ(-1, fern_wait_fd(p.a, ev, fern_now_ns() + 10 * kMs)) << "events " << ev;
        EXPECT_EQ(EINVAL, get_errno()) << "events " << ev;
    }
    errno = 0;
    EXPECT_EQ(-1, fern_wait_fd(-1, FERN_READ, fern_now_ns() + 10 * kMs));
    EXPECT_EQ(EBADF, get_errno());
    int dead = dup(p.a);
    close(dead);
    errno = 0;
    EXPECT_EQ(-1, fern_wait_fd(dead, FERN_READ, fern_now_ns() + 10 * kMs));
    EXPECT_EQ(EBADF, get_errno());
    errno = 0;
    EXPECT_EQ(-1, fern_read(-1, nullptr, 0));
    EXPECT_EQ(EBADF, get_errno());
    errno = 0;
    char c;
    EXPECT_EQ(-1, fern_read(INT32_MAX, &c, 1));
    EXPECT_EQ(EBADF, get_errno());
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WaitFdSecondWaiterSameDirectionIsEbusy) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<bool> started{false};
    std::atomic<int> first{-100};
    fern_thread *t = spawn_c(nullptr, [&] {
        started = true;
        first = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 10000 * kMs);
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(0, run_green([&] {
        int64_t t0 = fern_now_ns();
        errno = 0;
        EXPECT_EQ(-1, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 2000 * kMs));
        EXPECT_EQ(EBUSY, get_errno());
        EXPECT_LT(fern_now_ns() - t0, 1000 * kMs) << "EBUSY must be immediate";
        // The other direction is free.
        EXPECT_EQ(FERN_WRITE, fern_wait_fd(p.a, FERN_WRITE, fern_now_ns() + 2000 * kMs));
    }));
    EXPECT_EQ(-100, first.load());
    ASSERT_EQ(1, write(p.b, "x", 1));
    join(t);
    EXPECT_EQ(FERN_READ, first.load()) << "the first waiter was disturbed";
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

// Spec: "EBUSY if another thread already waits for the same direction on fd"
// - a plain thread counts as a thread.
TEST(Io, WaitFdPlainThreadSecondWaiterIsEbusy) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<bool> started{false};
    std::atomic<int> first{-100};
    fern_thread *t = spawn_c(nullptr, [&] {
        started = true;
        first = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 10000 * kMs);
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int64_t t0 = fern_now_ns();
    errno = 0;
    int r = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 300 * kMs);
    int e = get_errno();
    EXPECT_EQ(-1, r) << "plain-thread second reader: got " << r << " after "
                     << (fern_now_ns() - t0) / kMs << " ms";
    EXPECT_EQ(EBUSY, e);
    ASSERT_EQ(1, write(p.b, "x", 1));
    join(t);
    EXPECT_EQ(FERN_READ, first.load());
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

// READ|WRITE waits for either: writability appearing while nothing is
// readable must end the wait.
TEST(Io, WaitFdEitherDirectionWakesOnWritable) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<int> res{-100};
    std::atomic<int64_t> el{0};
    std::atomic<bool> started{false};
    fern_thread *t = spawn_c(nullptr, [&] {
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, FERN_FOREVER)); // register
        ASSERT_GT(fill(p.a), 0u);
        ASSERT_FALSE(writable_now(p.a));
        started = true;
        int64_t t0 = fern_now_ns();
        res = fern_wait_fd(p.a, FERN_READ | FERN_WRITE, fern_now_ns() + 4000 * kMs);
        el = fern_now_ns() - t0;
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    drain(p.b); // a becomes writable, still not readable
    join(t);
    EXPECT_EQ(FERN_WRITE, res.load()) << "fern_wait_fd(READ|WRITE) missed writability; waited "
                                      << el.load() / kMs << " ms";
    EXPECT_LT(el.load(), 2500 * kMs);
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

// fern_wait_fd reports events that hold: a stale edge (readiness consumed by
// an earlier call) must not be reported as ready.
TEST(Io, WaitFdDoesNotReportStaleWritability) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        // A reader parks and is woken: the poller has seen the fd's edges
        // (EPOLLOUT included) while nobody waited to write.
        fern_thread *r = spawn_c(nullptr, [&] {
            char c;
            EXPECT_EQ(1, fern_read(p.a, &c, 1));
        });
        fern_sleep_ns(50 * kMs);
        EXPECT_EQ(1, write(p.b, "x", 1));
        join(r);
        // Now make the fd unwritable with raw sends.
        ASSERT_GT(fill(p.a), 0u);
        ASSERT_FALSE(writable_now(p.a));
        int64_t t0 = fern_now_ns();
        int w = fern_wait_fd(p.a, FERN_WRITE, fern_now_ns() + 200 * kMs);
        int64_t el = fern_now_ns() - t0;
        EXPECT_EQ(0, w) << "reported FERN_WRITE on an fd that is not writable (after " << el / kMs
                        << " ms); writable now: " << writable_now(p.a);
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

TEST(Io, WaitFdDoesNotReportStaleReadability) {
    Watchdog wd(30);
    Pair p = unix_pair();
    Pair q = unix_pair();
    ASSERT_EQ(0, run_green([&] {
        char c;
        // Register a, let data arrive and be seen by the poller while nobody
        // waits on a (someone else waits on q, so the worker polls).
        EXPECT_EQ(0, fern_wait_fd(p.a, FERN_READ, 0));
        EXPECT_EQ(1, write(p.b, "x", 1));
        EXPECT_EQ(0, fern_wait_fd(q.a, FERN_READ, fern_now_ns() + 50 * kMs));
        // Consume the data directly (fern_read need not wait).
        EXPECT_EQ(1, fern_read(p.a, &c, 1));
        ASSERT_FALSE(readable_now(p.a));
        int64_t t0 = fern_now_ns();
        int r = fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 200 * kMs);
        int64_t el = fern_now_ns() - t0;
        EXPECT_EQ(0, r) << "reported FERN_READ on an fd with nothing to read (after " << el / kMs
                        << " ms); readable now: " << readable_now(p.a);
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
    EXPECT_EQ(0, fern_close(q.a));
    close(q.b);
}

TEST(Io, WaitFdFromPlainThread) {
    Watchdog wd(30);
    Pair p = unix_pair();
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(0, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 100 * kMs));
    EXPECT_GE(fern_now_ns() - t0, 95 * kMs);
    std::thread w([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(1, write(p.b, "x", 1));
    });
    EXPECT_EQ(FERN_READ, fern_wait_fd(p.a, FERN_READ, fern_now_ns() + 5000 * kMs));
    w.join();
    EXPECT_EQ(FERN_WRITE, fern_wait_fd(p.a, FERN_WRITE, FERN_FOREVER));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

// ------------------------------------------------------------------------
// fern_close wakes parked threads; hang-ups; errors
// ------------------------------------------------------------------------

TEST(Io, CloseWakesParkedReaderAndWriterWithEbadf) {
    Watchdog wd(30);
    for (int closer_green = 0; closer_green < 2; closer_green++) {
        Pair p = unix_pair();
        std::atomic<ssize_t> rres{-100}, wres{-100};
        std::atomic<int> rerr{0}, werr{0};
        std::atomic<int> started{0};
        ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, FERN_FOREVER));
        ASSERT_GT(fill(p.a), 0u);
        fern_thread *rt = spawn_c(nullptr, [&] {
            char b[8];
            started++;
            rres = fern_read(p.a, b, sizeof b);
            rerr = get_errno();
        });
        fern_thread *wt = spawn_c(nullptr, [&] {
            char b[4096] = {};
            started++;
            wres = fern_write(p.a, b, sizeof b);
            werr = get_errno();
        });
        ASSERT_TRUE(wait_until([&] { return started.load() == 2; }));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ASSERT_EQ(-100, rres.load());
        ASSERT_EQ(-100, wres.load());
        int64_t t0 = fern_now_ns();
        if (closer_green)
            ASSERT_EQ(0, run_green([&] { EXPECT_EQ(0, fern_close(p.a)); }));
        else
            EXPECT_EQ(0, fern_close(p.a));
        EXPECT_TRUE(wait_until([&] { return rres.load() != -100 && wres.load() != -100; }, 5000))
            << "parked threads not woken by fern_close";
        EXPECT_LT(fern_now_ns() - t0, 2000 * kMs);
        join(rt);
        join(wt);
        EXPECT_EQ(-1, rres.load());
        EXPECT_EQ(EBADF, rerr.load());
        EXPECT_EQ(-1, wres.load());
        EXPECT_EQ(EBADF, werr.load());
        close(p.b);
    }
}

TEST(Io, CloseWakesWaitFdWithEbadf) {
    Watchdog wd(30);
    Pair p = unix_pair();
    std::atomic<int> res{-100}, err{0};
    fern_thread *t = spawn_c(nullptr, [&] {
        res = fern_wait_fd(p.a, FERN_READ, FERN_FOREVER);
        err = get_errno();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(0, fern_close(p.a));
    join(t);
    EXPECT_EQ(-1, res.load());
    EXPECT_EQ(EBADF, err.load());
    close(p.b);
}

TEST(Io, CloseWakesParkedAcceptor) {
    Watchdog wd(30);
    uint16_t port = 0;
    int l = tcp_listen(&port);
    ASSERT_GE(l, 0);
    std::atomic<int> res{-100}, err{0};
    fern_thread *t = spawn_c(nullptr, [&] {
        res = fern_accept(l, nullptr, nullptr, 0);
        err = get_errno();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(0, fern_close(l));
    join(t);
    EXPECT_EQ(-1, res.load());
    EXPECT_EQ(EBADF, err.load());
}

// A plain thread blocked in a fern_* call is a thread waiting on the fd too.
// Bounded by a 3 s read deadline so a missed wake-up cannot hang the test.
TEST(Io, CloseWakesPlainThreadReader) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 3000 * kMs, FERN_FOREVER));
    std::atomic<ssize_t> res{-100};
    std::atomic<int> err{0};
    std::atomic<int64_t> woke{0};
    std::thread t([&] {
        char b[4];
        res = fern_read(p.a, b, sizeof b);
        err = get_errno();
        woke = fern_now_ns();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(0, fern_close(p.a));
    t.join();
    EXPECT_EQ(-1, res.load());
    EXPECT_EQ(EBADF, err.load()) << "plain-thread reader not woken by fern_close (errno "
                                 << strerror(err.load()) << " after " << (woke.load() - t0) / kMs
                                 << " ms)";
    EXPECT_LT(woke.load() - t0, 1500 * kMs);
    close(p.b);
}

TEST(Io, PeerHangupReadReturnsZero) {
    Watchdog wd(30);
    for (int tcp = 0; tcp < 2; tcp++) {
        Pair p = tcp ? tcp_pair() : unix_pair();
        std::atomic<ssize_t> res{-100};
        fern_thread *t = spawn_c(nullptr, [&] {
            char b[4];
            res = fern_read(p.a, b, sizeof b);
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(-100, res.load());
        close(p.b);
        EXPECT_TRUE(wait_until([&] { return res.load() != -100; }, 5000)) << "hang-up not seen";
        join(t);
        EXPECT_EQ(0, res.load());
        EXPECT_EQ(0, fern_close(p.a));
    }
}

// fern_send adds MSG_NOSIGNAL: EPIPE without SIGPIPE. Run in a child so a
// SIGPIPE would fail the test rather than kill the binary.
void send_epipe_child() {
    alarm(20);
    signal(SIGPIPE, SIG_DFL);
    Pair p = unix_pair();
    close(p.b);
    int rc = run_green([&] {
        errno = 0;
        ssize_t r = fern_send(p.a, "x", 1, 0);
        int e = get_errno();
        if (r != -1 || e != EPIPE) _exit(3);
        // A parked writer whose peer goes away wakes with EPIPE too.
        Pair q = unix_pair();
        fill(q.a);
        fern_thread *t = nullptr;
        std::atomic<ssize_t> res{-100};
        std::atomic<int> err{0};
        spawn(&t, nullptr, [&] {
            char b[4096] = {};
            res = fern_send(q.a, b, sizeof b, 0);
            err = get_errno();
        });
        fern_sleep_ns(100 * kMs);
        close(q.b);
        fern_join(t, nullptr);
        if (res.load() != -1 || err.load() != EPIPE) _exit(4);
    });
    _exit(rc == 0 ? 0 : 5);
}

TEST(IoDeathTest, SendEpipeWithoutSigpipe) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(send_epipe_child(), ::testing::ExitedWithCode(0), "");
}

// fern_write uses write(2), which raises SIGPIPE: this test ignores SIGPIPE.
TEST(Io, WriteEpipeAfterPeerCloseWithSigpipeIgnored) {
    Watchdog wd(30);
    struct sigaction ign {}, old {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ASSERT_EQ(0, sigaction(SIGPIPE, &ign, &old));
    Pair p = unix_pair();
    close(p.b);
    ASSERT_EQ(0, run_green([&] {
        errno = 0;
        EXPECT_EQ(-1, fern_write(p.a, "x", 1));
        EXPECT_EQ(EPIPE, get_errno());
        iovec v{(void *)"y", 1};
        errno = 0;
        EXPECT_EQ(-1, fern_writev(p.a, &v, 1));
        EXPECT_EQ(EPIPE, get_errno());
    }));
    EXPECT_EQ(0, fern_close(p.a));
    sigaction(SIGPIPE, &old, nullptr);
}

TEST(Io, ConnectRefused) {
    Watchdog wd(30);
    uint16_t port = closed_port();
    auto attempt = [&] {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        EXPECT_GE(s, 0);
        sockaddr_in sa = loopback(port);
        errno = 0;
        int r = fern_connect(s, (sockaddr *)&sa, sizeof sa);
        int e = get_errno();
        EXPECT_EQ(-1, r);
        EXPECT_EQ(ECONNREFUSED, e) << strerror(e);
        EXPECT_EQ(0, fern_close(s));
    };
    ASSERT_EQ(0, run_green(attempt));
    attempt(); // plain thread
}

TEST(Io, ConnectHonoursWriteDeadline) {
    Watchdog wd(60);
    // A listener that never accepts, with its queue full: further SYNs are
    // dropped and a connect stays in progress.
    uint16_t port = 0;
    int l = tcp_listen(&port, 0);
    ASSERT_GE(l, 0);
    std::vector<int> fillers;
    bool hung = false;
    for (int i = 0; i < 64 && !hung; i++) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        sockaddr_in sa = loopback(port);
        int r = connect(s, (sockaddr *)&sa, sizeof sa);
        fillers.push_back(s);
        if (r < 0 && errno == EINPROGRESS) {
            pollfd pf{s, POLLOUT, 0};
            if (poll(&pf, 1, 100) == 0) hung = true;
        }
    }
    if (!hung) {
        for (int s : fillers) close(s);
        close(l);
        GTEST_SKIP() << "could not make a loopback connect hang";
    }
    ASSERT_EQ(0, run_green([&] {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_EQ(0, fern_fd_set_deadline(s, FERN_FOREVER, fern_now_ns() + 200 * kMs));
        sockaddr_in sa = loopback(port);
        int64_t t0 = fern_now_ns();
        errno = 0;
        EXPECT_EQ(-1, fern_connect(s, (sockaddr *)&sa, sizeof sa));
        EXPECT_EQ(ETIMEDOUT, get_errno());
        int64_t el = fern_now_ns() - t0;
        EXPECT_GE(el, 190 * kMs);
        EXPECT_LT(el, 3000 * kMs);
        EXPECT_EQ(0, fern_close(s));
    }));
    for (int s : fillers) close(s);
    close(l);
}

// An AF_UNIX stream connect whose listener's backlog is full reports EAGAIN
// from the non-blocking connect(2); a blocking connect waits for room.
// fern_connect "parks" (header): it must not surface EAGAIN to the caller.
TEST(Io, UnixConnectWaitsWhenBacklogFull) {
    Watchdog wd(60);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(l, 0);
    sockaddr_un ua{};
    ua.sun_family = AF_UNIX;
    // Abstract name, unique per process.
    std::string name = "fern-io-test-" + std::to_string(getpid());
    memcpy(ua.sun_path + 1, name.data(), name.size());
    socklen_t ul = (socklen_t)(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    ASSERT_EQ(0, bind(l, (sockaddr *)&ua, ul));
    ASSERT_EQ(0, listen(l, 0));
    std::vector<int> fillers;
    bool full = false;
    for (int i = 0; i < 64 && !full; i++) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (connect(s, (sockaddr *)&ua, ul) != 0 && errno == EAGAIN) {
            full = true;
            close(s);
        } else {
            fillers.push_back(s);
        }
    }
    if (!full) {
        for (int s : fillers) close(s);
        close(l);
        GTEST_SKIP() << "unix backlog never filled";
    }
    std::atomic<int> res{-100}, err{0};
    std::atomic<int64_t> el{0};
    fern_thread *t = spawn_c(nullptr, [&] {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        fern_fd_set_deadline(s, FERN_FOREVER, fern_now_ns() + 5000 * kMs);
        int64_t t0 = fern_now_ns();
        res = fern_connect(s, (sockaddr *)&ua, ul);
        err = get_errno();
        el = fern_now_ns() - t0;
        fern_close(s);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // Make room: accept the queued connections.
    for (size_t i = 0; i < fillers.size(); i++) {
        int a = accept4(l, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (a >= 0) close(a);
    }
    join(t);
    EXPECT_EQ(0, res.load()) << "fern_connect: " << strerror(err.load()) << " after " << el.load() / kMs
                             << " ms";
    for (int s : fillers) close(s);
    close(l);
}

// "They first try the system call; only on EAGAIN does a green thread park":
// a caller that asks for a non-blocking call (MSG_DONTWAIT) gets what the
// system call returns, EAGAIN, instead of being parked. Bounded by a deadline.
TEST(Io, RecvDontwaitReturnsEagain) {
    Watchdog wd(30);
    Pair p = unix_pair();
    ASSERT_EQ(0, fern_fd_set_deadline(p.a, fern_now_ns() + 1500 * kMs, FERN_FOREVER));
    ASSERT_EQ(0, run_green([&] {
        char b[4];
        int64_t t0 = fern_now_ns();
        errno = 0;
        EXPECT_EQ(-1, fern_recv(p.a, b, sizeof b, MSG_DONTWAIT));
        int e = get_errno();
        EXPECT_EQ(EAGAIN, e) << strerror(e) << " after " << (fern_now_ns() - t0) / kMs << " ms";
    }));
    EXPECT_EQ(0, fern_close(p.a));
    close(p.b);
}

// ------------------------------------------------------------------------
// fern_accept and EMFILE
// ------------------------------------------------------------------------

struct NofileLimit {
    rlimit saved{};
    bool ok = false;
    explicit NofileLimit(rlim_t soft) {
        if (getrlimit(RLIMIT_NOFILE, &saved) != 0) return;
        rlimit r = saved;
        r.rlim_cur = soft;
        ok = setrlimit(RLIMIT_NOFILE, &r) == 0;
    }
    void restore() {
        if (ok) setrlimit(RLIMIT_NOFILE, &saved);
        ok = false;
    }
    ~NofileLimit() { restore(); }
};

int lowest_free_fd() {
    int f = dup(0);
    if (f >= 0) close(f);
    return f;
}

TEST(Io, AcceptEmfileReturnsAtOnceAndLoopRecovers) {
    Watchdog wd(60);
    int ir = fern_init(nullptr);
    ASSERT_TRUE(ir == 0 || ir == EBUSY);
    uint16_t port = 0;
    int l = tcp_listen(&port);
    ASSERT_GE(l, 0);
    // Client sockets made before the limit drops.
    int c1 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int c2 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(c1, 0);
    ASSERT_GE(c2, 0);
    sockaddr_in sa = loopback(port);
    ASSERT_EQ(0, connect(c1, (sockaddr *)&sa, sizeof sa)); // queued, not accepted
    ASSERT_EQ(1, write(c1, "a", 1));                        // the loop echoes one byte
    std::atomic<int> emfiles{0}, accepted{0}, first_err{0};
    std::atomic<int64_t> first_el{-1};
    std::atomic<bool> stop{false};
    std::atomic<bool> echoed{false};
    // Make sure the listener is registered before the limit drops.
    ASSERT_EQ(0, fern_fd_set_deadline(l, FERN_FOREVER, FERN_FOREVER));
    int lowest = lowest_free_fd();
    ASSERT_GT(lowest, 0);
    NofileLimit lim((rlim_t)lowest);
    ASSERT_TRUE(lim.ok);
    // Direct call: returns -1 EMFILE at once.
    ASSERT_EQ(0, run_green([&] {
        int64_t t0 = fern_now_ns();
        errno = 0;
        int r = fern_accept(l, nullptr, nullptr, 0);
        first_el = fern_now_ns() - t0;
        first_err = get_errno();
        if (r >= 0) fern_close(r);
        EXPECT_EQ(-1, r);
    }));
    EXPECT_EQ(EMFILE, first_err.load());
    EXPECT_LT(first_el.load(), 1000 * kMs) << "EMFILE must be returned at once";
    // An accept loop that backs off on EMFILE keeps working once fds free up.
    fern_thread *loop = spawn_c(nullptr, [&] {
        int64_t end = fern_now_ns() + 20000 * kMs;
        while (!stop.load() && fern_now_ns() < end && accepted.load() < 2) {
            int s = fern_accept(l, nullptr, nullptr, 0);
            if (s < 0) {
                int e = get_errno();
                if (e == EMFILE || e == ENFILE) {
                    emfiles++;
                    fern_sleep_ns(5 * kMs);
                    continue;
                }
                ADD_FAILURE() << "fern_accept: " << strerror(e);
                break;
            }
            accepted++;
            char b;
            if (fern_read(s, &b, 1) == 1 && fern_write(s, &b, 1) == 1) echoed = true;
            fern_close(s);
        }
    });
    EXPECT_TRUE(wait_until([&] { return emfiles.load() >= 2; }, 10000));
    lim.restore();
    EXPECT_TRUE(wait_until([&] { return accepted.load() >= 1; }, 10000))
        << "accept loop did not recover after EMFILE";
    {
        char b1 = 0;
        pollfd pf1{c1, POLLIN, 0};
        EXPECT_EQ(1, poll(&pf1, 1, 5000));
        EXPECT_EQ(1, read(c1, &b1, 1));
        EXPECT_EQ('a', b1);
    }
    // A connection made after recovery is accepted too (the loop parks again).
    ASSERT_EQ(0, connect(c2, (sockaddr *)&sa, sizeof sa));
    EXPECT_TRUE(wait_until([&] { return accepted.load() >= 2; }, 10000));
    ASSERT_EQ(1, write(c2, "e", 1));
    char b = 0;
    pollfd pf{c2, POLLIN, 0};
    EXPECT_EQ(1, poll(&pf, 1, 5000));
    EXPECT_EQ(1, read(c2, &b, 1));
    EXPECT_EQ('e', b);
    stop = true;
    close(c1);
    close(c2);
    join(loop);
    EXPECT_EQ(0, fern_close(l));
}

// ------------------------------------------------------------------------
// Plain threads
// ------------------------------------------------------------------------

TEST(Io, PlainThreadCallsBlockInPollAndWork) {
    Watchdog wd(60);
    Pair p = unix_pair();
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(3, fern_write(p.b, "abc", 3));
    });
    char buf[8] = {};
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(3, fern_read(p.a, buf, sizeof buf)) << strerror(get_errno());
    EXPECT_GE(fern_now_ns() - t0, 50 * kMs) << "did not block";
    writer.join();
    EXPECT_STREQ("abc", buf);
    // A plain-thread write larger than the buffer blocks until drained.
    const size_t total = 1 << 20;
    std::vector<char> big(total, 'z');
    std::atomic<size_t> got{0};
    std::thread reader([&] {
        std::vector<char> b(8192);
        while (got.load() < total) {
            ssize_t r = fern_read(p.b, b.data(), b.size());
            if (r <= 0) break;
            got += (size_t)r;
        }
    });
    size_t off = 0;
    for (int i = 0; i < 100000 && off < total; i++) {
        ssize_t r = fern_write(p.a, big.data() + off, total - off);
        ASSERT_GT(r, 0);
        off += (size_t)r;
    }
    reader.join();
    EXPECT_EQ(total, got.load());
    // accept / connect / readv / writev / sendmsg / recvmsg from plain threads.
    uint16_t port = 0;
    int l = tcp_listen(&port);
    ASSERT_GE(l, 0);
    std::atomic<int> acc{-100};
    std::thread at([&] { acc = fern_accept(l, nullptr, nullptr, 0); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa = loopback(port);
    EXPECT_EQ(0, fern_connect(s, (sockaddr *)&sa, sizeof sa));
    at.join();
    ASSERT_GE(acc.load(), 0);
    char x[] = "12", y[] = "345";
    iovec out[2] = {{x, 2}, {y, 3}};
    EXPECT_EQ(5, fern_writev(s, out, 2));
    char in[5];
    iovec iv{in, 5};
    msghdr m{};
    m.msg_iov = &iv;
    m.msg_iovlen = 1;
    size_t n = 0;
    while (n < 5) {
        iv = {in + n, 5 - n};
        ssize_t r = fern_recvmsg(acc.load(), &m, 0);
        ASSERT_GT(r, 0);
        n += (size_t)r;
    }
    EXPECT_EQ(std::string("12345"), std::string(in, 5));
    EXPECT_EQ(0, fern_close(s));
    EXPECT_EQ(0, fern_close(acc.load()));
    EXPECT_EQ(0, fern_close(l));
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
}

TEST(Io, GreenReaderPlainWriterSameSocketpair) {
    Watchdog wd(60);
    Pair p = unix_pair();
    const int n = (int)scaled(2000, 200);
    std::atomic<int> bad{0}, got{0};
    fern_thread *rt = spawn_c(nullptr, [&] {
        for (int i = 0; i < n; i++) {
            int v = -1;
            size_t have = 0;
            while (have < sizeof v) {
                ssize_t r = fern_read(p.a, (char *)&v + have, sizeof v - have);
                if (r <= 0) {
                    bad++;
                    return;
                }
                have += (size_t)r;
            }
            if (v != i) bad++;
            // Echo back so the plain writer also blocks in fern_read.
            if (fern_write(p.a, &v, sizeof v) != (ssize_t)sizeof v) bad++;
            got++;
        }
    });
    std::thread wt([&] {
        for (int i = 0; i < n; i++) {
            if (fern_write(p.b, &i, sizeof i) != (ssize_t)sizeof i) {
                bad++;
                return;
            }
            int v = -1;
            if (fern_read(p.b, &v, sizeof v) != (ssize_t)sizeof v || v != i) {
                bad++;
                return;
            }
        }
    });
    wt.join();
    join(rt);
    EXPECT_EQ(0, bad.load());
    EXPECT_EQ(n, got.load());
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
}

// Round trips between green threads on different workers, many pairs at
// once (exercises edge-triggered wake-ups under load).
TEST(Io, ConcurrentPingPongPairs) {
    Watchdog wd(120);
    const int pairs = (int)tsan_capped(scaled(64, 8), 32);
    const int rounds = (int)scaled(300, 30);
    std::vector<Pair> ps(pairs);
    for (auto &p : ps) p = unix_pair();
    std::atomic<int> bad{0};
    std::vector<fern_thread *> ts;
    for (int k = 0; k < pairs; k++) {
        ts.push_back(spawn_c(nullptr, [&, k] {
            for (int i = 0; i < rounds; i++) {
                int v = -1;
                if (fern_read(ps[k].b, &v, sizeof v) != (ssize_t)sizeof v || v != i) {
                    bad++;
                    return;
                }
                if (fern_write(ps[k].b, &v, sizeof v) != (ssize_t)sizeof v) bad++;
            }
        }));
        ts.push_back(spawn_c(nullptr, [&, k] {
            for (int i = 0; i < rounds; i++) {
                int v = -1;
                if (fern_write(ps[k].a, &i, sizeof i) != (ssize_t)sizeof i) bad++;
                if (fern_read(ps[k].a, &v, sizeof v) != (ssize_t)sizeof v || v != i) {
                    bad++;
                    return;
                }
            }
        }));
    }
    for (auto t : ts) join(t);
    EXPECT_EQ(0, bad.load());
    for (auto &p : ps) {
        EXPECT_EQ(0, fern_close(p.a));
        EXPECT_EQ(0, fern_close(p.b));
    }
}

// ------------------------------------------------------------------------
// Short transfers on TCP (src/fdtab.c header comment): after a short read the
// next read parks for the next edge without a system call; after a short
// write the next write waits for EPOLLOUT. An edge must never be lost, and
// where "short" does not mean "drained" nothing may be skipped.
// ------------------------------------------------------------------------

// Let the poller dispatch every pending edge: park a green thread on a fresh
// socketpair (so some worker polls) for a while, then release it.
void let_poller_dispatch()
{
    Pair q = unix_pair();
    fern_thread *t = spawn_c(nullptr, [&] {
        char c;
        EXPECT_EQ(1, fern_read(q.a, &c, 1));
    });
    fern_sleep_ns(100 * kMs);
    EXPECT_EQ(1, write(q.b, "x", 1));
    join(t);
    EXPECT_EQ(0, fern_close(q.a));
    close(q.b);
}

// read() system calls of this process so far (/proc/self/io syscr).
long read_syscalls()
{
    std::ifstream f("/proc/self/io");
    std::string k;
    long v;
    while (f >> k >> v)
        if (k == "syscr:")
            return v;
    return -1;
}

// Many chunks of random tiny sizes with random tiny pauses, read with a
// buffer larger than any chunk (so most reads are short) by one of four
// calls, on a 2-worker cluster. A lost edge leaves the reader parked: its
// read deadline turns that into ETIMEDOUT (a failure) instead of a hang.
void short_read_stream(bool green_writer)
{
    Watchdog wd(300);
    fern_cluster *c2 = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c2, 2));
    const long chunks = tsan_capped(scaled(40000, 4000), 8000);
    Pair p = tcp_pair();
    std::atomic<long> received{0}, short_reads{0}, mismatch_at{-1};
    std::atomic<int> failed{0};
    auto writer = [&](bool green) {
        std::mt19937 rng(green ? 7 : 11);
        uint8_t buf[64];
        size_t off = 0;
        for (long i = 0; i < chunks; i++) {
            size_t n = 1 + rng() % 48;
            for (size_t k = 0; k < n; k++)
                buf[k] = pat(off + k);
            ssize_t w = green ? fern_write(p.a, buf, n) : send(p.a, buf, n, MSG_NOSIGNAL);
            if (w != (ssize_t)n) {
                ADD_FAILURE() << "write " << w << " " << strerror(get_errno());
                failed = 1;
                break;
            }
            off += n;
            unsigned d = rng() % 16;
            if (d < 6) {
                // back to back
            } else if (d < 10) {
                if (green)
                    fern_yield();
                else
                    std::this_thread::yield();
            } else if (d < 15) {
                int64_t until = fern_now_ns() + (int64_t)(rng() % 20000);
                while (fern_now_ns() < until) {
                }
            } else if (green) {
                fern_sleep_ns((int64_t)(rng() % 100000));
            } else {
                std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100));
            }
        }
        shutdown(p.a, SHUT_WR);
        return off;
    };
    std::atomic<size_t> sent{0};
    fern_thread *wt = nullptr;
    std::thread pt;
    if (green_writer)
        wt = spawn_c(c2, [&] { sent = writer(true); });
    else
        pt = std::thread([&] { sent = writer(false); });
    fern_thread *rt = spawn_c(c2, [&] {
        std::mt19937 rng(3);
        uint8_t buf[256];
        size_t off = 0;
        for (;;) {
            ASSERT_EQ(0, fern_fd_set_deadline(p.b, fern_now_ns() + 20000 * kMs, FERN_FOREVER));
            size_t ask = 49 + rng() % (sizeof buf - 49);
            ssize_t r;
            switch (rng() % 4) {
            case 0:
                r = fern_read(p.b, buf, ask);
                break;
            case 1: {
                iovec iov[2] = {{buf, ask / 2}, {buf + ask / 2, ask - ask / 2}};
                r = fern_readv(p.b, iov, 2);
                break;
            }
            case 2:
                r = fern_recv(p.b, buf, ask, 0);
                break;
            default: {
                iovec iov = {buf, ask};
                msghdr m{};
                m.msg_iov = &iov;
                m.msg_iovlen = 1;
                r = fern_recvmsg(p.b, &m, 0);
                break;
            }
            }
            if (r < 0) {
                ADD_FAILURE() << "read at " << off << ": " << strerror(get_errno())
                              << " (ETIMEDOUT: a lost edge)";
                failed = 1;
                break;
            }
            if (r == 0)
                break;
            if ((size_t)r < ask)
                short_reads++;
            for (ssize_t k = 0; k < r; k++)
                if (buf[k] != pat(off + (size_t)k) && mismatch_at.load() < 0)
                    mismatch_at = (long)(off + (size_t)k);
            off += (size_t)r;
            received = (long)off;
            if (rng() % 64 == 0)
                fern_sleep_ns((int64_t)(rng() % 50000));
        }
    });
    if (wt)
        join(wt);
    if (pt.joinable())
        pt.join();
    join(rt);
    EXPECT_EQ(0, failed.load());
    EXPECT_EQ((long)sent.load(), received.load());
    EXPECT_EQ(-1, mismatch_at.load()) << "stream corrupted";
    EXPECT_GT(short_reads.load(), 0);
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
    EXPECT_EQ(0, fern_cluster_destroy(c2));
}

TEST(IoShort, StreamOfTinyChunksGreenWriterLosesNoEdge)
{
    short_read_stream(true);
}
TEST(IoShort, StreamOfTinyChunksPlainWriterLosesNoEdge)
{
    short_read_stream(false);
}

// The echo benchmark's pattern: many TCP connections, each with one message
// of random size in flight, read with a larger buffer, on 2 workers.
TEST(IoShort, EchoPairsLoseNoEdge)
{
    Watchdog wd(300);
    fern_cluster *c2 = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c2, 2));
    const int pairs = (int)tsan_capped(scaled(32, 4), 16);
    const int rounds = (int)tsan_capped(scaled(2000, 200), 300);
    std::vector<Pair> ps(pairs);
    for (auto &p : ps)
        p = tcp_pair();
    std::atomic<int> bad{0};
    std::vector<fern_thread *> ts;
    for (int k = 0; k < pairs; k++) {
        ts.push_back(spawn_c(c2, [&, k] { // server: echo what arrives
            int fd = ps[k].b;
            char buf[512];
            for (;;) {
                fern_fd_set_deadline(fd, fern_now_ns() + 20000 * kMs, FERN_FOREVER);
                ssize_t r = fern_recv(fd, buf, sizeof buf, 0);
                if (r == 0)
                    return;
                if (r < 0) {
                    ADD_FAILURE() << "server read: " << strerror(get_errno());
                    bad++;
                    return;
                }
                for (ssize_t o = 0; o < r;) {
                    ssize_t w = fern_send(fd, buf + o, (size_t)(r - o), 0);
                    if (w <= 0) {
                        bad++;
                        return;
                    }
                    o += w;
                }
            }
        }));
        ts.push_back(spawn_c(c2, [&, k] { // client
            int fd = ps[k].a;
            std::mt19937 rng((unsigned)k);
            char out[200], in[512];
            for (int i = 0; i < rounds; i++) {
                size_t n = 1 + rng() % sizeof out;
                for (size_t j = 0; j < n; j++)
                    out[j] = (char)(i + j);
                if (fern_write(fd, out, n) != (ssize_t)n) {
                    bad++;
                    return;
                }
                size_t got = 0;
                while (got < n) {
                    fern_fd_set_deadline(fd, fern_now_ns() + 20000 * kMs, FERN_FOREVER);
                    ssize_t r = fern_read(fd, in + got, sizeof in - got);
                    if (r <= 0) {
                        ADD_FAILURE() << "client read: " << r << " " << strerror(get_errno());
                        bad++;
                        return;
                    }
                    got += (size_t)r;
                }
                if (got != n || memcmp(in, out, n) != 0) {
                    bad++;
                    return;
                }
            }
            shutdown(fd, SHUT_WR);
        }));
    }
    for (auto t : ts)
        join(t);
    EXPECT_EQ(0, bad.load());
    for (auto &p : ps) {
        EXPECT_EQ(0, fern_close(p.a));
        EXPECT_EQ(0, fern_close(p.b));
    }
    EXPECT_EQ(0, fern_cluster_destroy(c2));
}

// Writes of random sizes into a small send buffer (many short writes) against
// a reader with random pauses; every write call has a deadline.
TEST(IoShort, ShortWritesRandomSizesLoseNoEdge)
{
    Watchdog wd(300);
    fern_cluster *c2 = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c2, 2));
    const size_t total = kTsan ? (2u << 20) : (16u << 20);
    Pair p = tcp_pair();
    int small = 4096;
    ASSERT_EQ(0, setsockopt(p.a, SOL_SOCKET, SO_SNDBUF, &small, sizeof small));
    std::vector<uint8_t> src(total);
    for (size_t i = 0; i < total; i++)
        src[i] = pat(i);
    std::atomic<long> partial{0}, mismatch_at{-1};
    std::atomic<size_t> received{0};
    fern_thread *wt = spawn_c(c2, [&] {
        std::mt19937 rng(5);
        size_t off = 0;
        while (off < total) {
            size_t n = std::min(total - off, (size_t)(1 + rng() % (rng() % 2 ? 300000 : 3000)));
            ASSERT_EQ(0, fern_fd_set_deadline(p.a, FERN_FOREVER, fern_now_ns() + 20000 * kMs));
            ssize_t w = rng() % 2 ? fern_write(p.a, src.data() + off, n)
                                  : fern_send(p.a, src.data() + off, n, 0);
            if (w <= 0) {
                ADD_FAILURE() << "write at " << off << ": " << strerror(get_errno())
                              << " (ETIMEDOUT: a lost edge)";
                break;
            }
            if ((size_t)w < n)
                partial++;
            off += (size_t)w;
        }
        shutdown(p.a, SHUT_WR);
    });
    fern_thread *rt = spawn_c(c2, [&] {
        std::mt19937 rng(9);
        std::vector<uint8_t> buf(65536);
        size_t off = 0;
        for (;;) {
            ssize_t r = fern_read(p.b, buf.data(), 1 + rng() % buf.size());
            if (r <= 0) {
                if (r < 0)
                    ADD_FAILURE() << "read: " << strerror(get_errno());
                break;
            }
            for (ssize_t k = 0; k < r; k++)
                if (buf[(size_t)k] != pat(off + (size_t)k) && mismatch_at.load() < 0)
                    mismatch_at = (long)(off + (size_t)k);
            off += (size_t)r;
            received = off;
            if (rng() % 8 == 0)
                fern_sleep_ns((int64_t)(rng() % 300000));
        }
    });
    join(wt);
    join(rt);
    EXPECT_EQ(total, received.load());
    EXPECT_EQ(-1, mismatch_at.load());
    EXPECT_GT(partial.load(), 0) << "no short write happened";
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
    EXPECT_EQ(0, fern_cluster_destroy(c2));
}

// The point of the rule: a TCP ping-pong costs one read() per message, not a
// read and an EAGAIN read. Both sides read with a larger buffer than sent.
TEST(IoShort, TcpPingPongSkipsTheEagainRead)
{
    Watchdog wd(120);
    Pair p = tcp_pair();
    const int rounds = 2000;
    std::atomic<int> bad{0};
    long before = read_syscalls();
    if (before < 0)
        GTEST_SKIP() << "/proc/self/io unreadable";
    fern_thread *srv = spawn_c(nullptr, [&] {
        char buf[256];
        for (int i = 0; i < rounds; i++) {
            if (fern_read(p.b, buf, sizeof buf) != 8 || fern_write(p.b, buf, 8) != 8) {
                bad++;
                return;
            }
        }
    });
    fern_thread *cli = spawn_c(nullptr, [&] {
        char buf[256] = "01234567";
        for (int i = 0; i < rounds; i++) {
            if (fern_write(p.a, buf, 8) != 8 || fern_read(p.a, buf, sizeof buf) != 8) {
                bad++;
                return;
            }
        }
    });
    join(cli);
    join(srv);
    long reads = read_syscalls() - before;
    EXPECT_EQ(0, bad.load());
    // Two messages per round trip; an EAGAIN read after each would make 4.
    EXPECT_LT(reads, 3L * rounds) << reads << " read() calls for " << rounds << " round trips";
    EXPECT_GE(reads, 2L * rounds);
    EXPECT_EQ(0, fern_close(p.a));
    EXPECT_EQ(0, fern_close(p.b));
}

// Datagram sockets return one datagram per call: a "short" read says nothing
// about the queue. Several datagrams queued at once (one edge) are all read
// at once.
TEST(IoShort, QueuedDatagramsAllReadWithoutWaiting)
{
    Watchdog wd(60);
    int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int v = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(u, 0);
    ASSERT_GE(v, 0);
    sockaddr_in sa = loopback(0);
    ASSERT_EQ(0, bind(u, (sockaddr *)&sa, sizeof sa));
    sa = loopback(port_of(u));
    ASSERT_EQ(0, connect(v, (sockaddr *)&sa, sizeof sa));
    Pair d = unix_pair(SOCK_DGRAM), q = unix_pair(SOCK_SEQPACKET);
    ASSERT_EQ(0, run_green([&] {
                  for (int fd : {u, d.a, q.a}) {
                      int peer = fd == u ? v : fd == d.a ? d.b : q.b;
                      // Registered first, so the edges of the datagrams below are
                      // dispatched before the reads (a worker polls meanwhile).
                      ASSERT_EQ(0,
                                fern_fd_set_deadline(fd, fern_now_ns() + 5000 * kMs, FERN_FOREVER));
                      for (int i = 0; i < 5; i++) {
                          char m[8] = {'d', (char)('0' + i)};
                          ASSERT_EQ(8, send(peer, m, sizeof m, 0));
                      }
                      let_poller_dispatch();
                      int64_t t0 = fern_now_ns();
                      for (int i = 0; i < 5; i++) {
                          char buf[100] = {};
                          ssize_t r = i % 2 ? fern_recv(fd, buf, sizeof buf, 0)
                                            : fern_read(fd, buf, sizeof buf);
                          ASSERT_EQ(8, r)
                              << "fd " << fd << " datagram " << i << ": " << strerror(get_errno());
                          EXPECT_EQ('0' + i, buf[1]);
                      }
                      EXPECT_LT(fern_now_ns() - t0, 1000 * kMs) << "fd " << fd << ": a read waited";
                  }
              }));
    EXPECT_EQ(0, fern_close(u));
    close(v);
    EXPECT_EQ(0, fern_close(d.a));
    close(d.b);
    EXPECT_EQ(0, fern_close(q.a));
    close(q.b);
}

// The shape of the short-read tests below: a TCP pair whose reading end p.b
// has a 5 s deadline (a read that wrongly waits fails the test instead of
// hanging it), then body(p, dispatched_first) on a green thread, once with
// the poller dispatching the writes' edges before the reads and once not;
// then both ends are closed (p.a unless the body closed it and set it to -1).
template <class F> void each_dispatch_order(F body)
{
    for (int dispatched_first = 0; dispatched_first < 2; dispatched_first++) {
        Pair p = tcp_pair();
        ASSERT_EQ(0, run_green([&] {
                      ASSERT_EQ(0, fern_fd_set_deadline(p.b, fern_now_ns() + 5000 * kMs,
                                                        FERN_FOREVER));
                      body(p, dispatched_first != 0);
                  }));
        if (p.a >= 0)
            close(p.a);
        EXPECT_EQ(0, fern_close(p.b));
    }
}

// Written data has arrived: dispatch its edge now, or let it wait (the read
// then comes before the poller sees it).
void arrive(bool dispatched_first)
{
    if (dispatched_first)
        let_poller_dispatch();
    else
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// Data then FIN: the read after the short read returns 0 at once, whether
// the FIN's edge was dispatched before the short read or after it.
TEST(IoShort, EofAfterShortReadReturnsZeroPromptly)
{
    Watchdog wd(60);
    for (int how = 0; how < 2; how++) { // close / shutdown(SHUT_WR)
        each_dispatch_order([&](Pair &p, bool dispatched_first) {
            ASSERT_EQ(10, write(p.a, "0123456789", 10));
            if (how == 0) {
                close(p.a);
                p.a = -1;
            } else {
                shutdown(p.a, SHUT_WR);
            }
            arrive(dispatched_first);
            char buf[100];
            int64_t t0 = fern_now_ns();
            EXPECT_EQ(10, fern_read(p.b, buf, sizeof buf));
            EXPECT_EQ(0, fern_read(p.b, buf, sizeof buf)) << strerror(get_errno());
            EXPECT_EQ(0, fern_recv(p.b, buf, sizeof buf, 0)) << "EOF stays";
            EXPECT_LT(fern_now_ns() - t0, 1000 * kMs)
                << "EOF waited (dispatched_first " << dispatched_first << ", how " << how << ")";
        });
    }
}

// MSG_PEEK leaves the data queued: a short peek must not count as draining.
TEST(IoShort, ShortPeekIsNotDraining)
{
    Watchdog wd(60);
    each_dispatch_order([](Pair &p, bool dispatched_first) {
        ASSERT_EQ(10, write(p.a, "0123456789", 10));
        if (dispatched_first)
            let_poller_dispatch();
        char buf[100] = {};
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(10, fern_recv(p.b, buf, sizeof buf, MSG_PEEK));
        EXPECT_EQ(10, fern_read(p.b, buf, sizeof buf)) << strerror(get_errno());
        EXPECT_EQ(std::string("0123456789"), std::string(buf, 10));
        EXPECT_LT(fern_now_ns() - t0, 1000 * kMs) << "the read after a short peek waited";
        // A peek through recvmsg, too.
        ASSERT_EQ(4, write(p.a, "abcd", 4));
        let_poller_dispatch();
        iovec iov = {buf, sizeof buf};
        msghdr m{};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        t0 = fern_now_ns();
        EXPECT_EQ(4, fern_recvmsg(p.b, &m, MSG_PEEK));
        EXPECT_EQ(4, fern_read(p.b, buf, sizeof buf));
        EXPECT_LT(fern_now_ns() - t0, 1000 * kMs);
    });
}

// TCP stops a read at the urgent mark with data behind it: the read after
// that short read must not wait.
TEST(IoShort, UrgentMarkShortReadDoesNotWait)
{
    Watchdog wd(60);
    each_dispatch_order([](Pair &p, bool dispatched_first) {
        ASSERT_EQ(4, send(p.a, "xxxx", 4, 0));
        ASSERT_EQ(1, send(p.a, "U", 1, MSG_OOB));
        ASSERT_EQ(4, send(p.a, "yyyy", 4, 0));
        arrive(dispatched_first);
        char buf[100];
        int64_t t0 = fern_now_ns();
        size_t got = 0;
        while (got < 8) {
            ssize_t r = fern_read(p.b, buf, sizeof buf);
            ASSERT_GT(r, 0) << strerror(get_errno());
            got += (size_t)r;
        }
        EXPECT_EQ(8u, got);
        EXPECT_LT(fern_now_ns() - t0, 1000 * kMs) << "the read after the urgent mark waited";
    });
}

// AF_UNIX stream reads stop after a message that carried SCM_RIGHTS, with
// data still queued: no skipping there.
TEST(IoShort, UnixStreamShortReadAfterScmRightsDoesNotWait)
{
    Watchdog wd(60);
    Pair p = unix_pair();
    ASSERT_EQ(0, run_green([&] {
                  ASSERT_EQ(0, fern_fd_set_deadline(p.b, fern_now_ns() + 5000 * kMs, FERN_FOREVER));
                  char data[] = "aaaaaaaaaa";
                  iovec iov = {data, 10};
                  alignas(cmsghdr) char cb[CMSG_SPACE(sizeof(int))] = {};
                  msghdr m{};
                  m.msg_iov = &iov;
                  m.msg_iovlen = 1;
                  m.msg_control = cb;
                  m.msg_controllen = sizeof cb;
                  cmsghdr *c = CMSG_FIRSTHDR(&m);
                  c->cmsg_level = SOL_SOCKET;
                  c->cmsg_type = SCM_RIGHTS;
                  c->cmsg_len = CMSG_LEN(sizeof(int));
                  int zero = 0;
                  memcpy(CMSG_DATA(c), &zero, sizeof zero);
                  ASSERT_EQ(10, sendmsg(p.a, &m, 0));
                  ASSERT_EQ(10, write(p.a, "bbbbbbbbbb", 10));
                  let_poller_dispatch();
                  char buf[100];
                  int64_t t0 = fern_now_ns();
                  EXPECT_EQ(10, fern_read(p.b, buf, sizeof buf)); // stops after the fd's message
                  EXPECT_EQ(10, fern_read(p.b, buf, sizeof buf)) << strerror(get_errno());
                  EXPECT_EQ('b', buf[0]);
                  EXPECT_LT(fern_now_ns() - t0, 1000 * kMs);
              }));
    close(p.a);
    EXPECT_EQ(0, fern_close(p.b));
}

// A read parked by the rule (no system call) still honours the fd's
// deadline, still gets data that is there once the deadline has passed, and
// fern_close still wakes it with EBADF.
// fern_stats().poller_ctls: a descriptor is registered with the poller by
// its first call, not again however many times its calls park, and removed
// by fern_close.
TEST(IoStats, PollerRegistersOncePerDescriptor)
{
    Watchdog wd(60);
    Pair p = unix_pair();
    auto ctls = [] {
        struct fern_stats st;
        EXPECT_EQ(0, fern_stats(&st));
        return st.poller_ctls;
    };
    uint64_t c0 = 0, c1 = 0, c2 = 0;
    ASSERT_EQ(0, run_green([&] {
                  c0 = ctls();
                  fern_thread *echo = spawn_c(nullptr, [&] {
                      char c;
                      for (int i = 0; i < 200; i++) {
                          ASSERT_EQ(1, fern_read(p.b, &c, 1));
                          ASSERT_EQ(1, fern_write(p.b, &c, 1));
                      }
                  });
                  char c = 'x';
                  for (int i = 0; i < 200; i++) {
                      ASSERT_EQ(1, fern_write(p.a, &c, 1));
                      ASSERT_EQ(1, fern_read(p.a, &c, 1));
                  }
                  join(echo);
                  c1 = ctls();
                  EXPECT_EQ(0, fern_close(p.a));
                  EXPECT_EQ(0, fern_close(p.b));
                  c2 = ctls();
              }));
    EXPECT_EQ(2u, c1 - c0);
    EXPECT_EQ(2u, c2 - c1);
}

TEST(IoShort, ParkedAfterShortReadKeepsDeadlineAndClose)
{
    Watchdog wd(60);
    Pair p = tcp_pair();
    ASSERT_EQ(0, run_green([&] {
                  char buf[100];
                  ASSERT_EQ(3, write(p.a, "abc", 3));
                  EXPECT_EQ(3, fern_read(p.b, buf, sizeof buf)); // short
                  ASSERT_EQ(0, fern_fd_set_deadline(p.b, fern_now_ns() + 100 * kMs, FERN_FOREVER));
                  int64_t t0 = fern_now_ns();
                  EXPECT_EQ(-1, fern_read(p.b, buf, sizeof buf));
                  EXPECT_EQ(ETIMEDOUT, get_errno());
                  EXPECT_GE(fern_now_ns() - t0, 95 * kMs);
                  // Deadline passed and still set: data that is there is returned.
                  ASSERT_EQ(3, write(p.a, "xyz", 3));
                  std::this_thread::sleep_for(std::chrono::milliseconds(20));
                  EXPECT_EQ(3, fern_read(p.b, buf, sizeof buf)) << strerror(get_errno());
                  EXPECT_EQ(std::string("xyz"), std::string(buf, 3));
                  ASSERT_EQ(0, fern_fd_set_deadline(p.b, FERN_FOREVER, FERN_FOREVER));
                  // Short again: a zero-length read(2) still returns 0 at once (the
                  // kernel answers it before looking at the queue). (recv(2) of 0
                  // bytes says EAGAIN on an empty TCP queue, so fern_recv waits.)
                  ASSERT_EQ(2, write(p.a, "de", 2));
                  EXPECT_EQ(2, fern_read(p.b, buf, sizeof buf));
                  t0 = fern_now_ns();
                  EXPECT_EQ(0, fern_read(p.b, buf, 0));
                  EXPECT_LT(fern_now_ns() - t0, 50 * kMs);
                  // fern_wait_fd takes the next edge; the read after it makes its
                  // system call (the edge cleared "drained").
                  std::thread later([&] {
                      std::this_thread::sleep_for(std::chrono::milliseconds(50));
                      EXPECT_EQ(2, write(p.a, "fg", 2));
                  });
                  EXPECT_EQ(FERN_READ, fern_wait_fd(p.b, FERN_READ, fern_now_ns() + 5000 * kMs));
                  later.join();
                  ASSERT_EQ(0, fern_fd_set_deadline(p.b, fern_now_ns() + 5000 * kMs, FERN_FOREVER));
                  t0 = fern_now_ns();
                  EXPECT_EQ(2, fern_read(p.b, buf, sizeof buf));
                  EXPECT_LT(fern_now_ns() - t0, 1000 * kMs) << "the read after fern_wait_fd waited";
                  ASSERT_EQ(0, fern_fd_set_deadline(p.b, FERN_FOREVER, FERN_FOREVER));
                  // Short again, then a parked read that fern_close ends with EBADF.
                  ASSERT_EQ(2, write(p.a, "hi", 2));
                  EXPECT_EQ(2, fern_read(p.b, buf, sizeof buf));
                  std::atomic<int> res{-100}, err{0};
                  fern_thread *t = spawn_c(nullptr, [&] {
                      char b[100];
                      res = (int)fern_read(p.b, b, sizeof b);
                      err = get_errno();
                  });
                  fern_sleep_ns(100 * kMs);
                  EXPECT_EQ(-100, res.load()) << "the read did not park";
                  EXPECT_EQ(0, fern_close(p.b));
                  join(t);
                  EXPECT_EQ(-1, res.load());
                  EXPECT_EQ(EBADF, err.load());
              }));
    close(p.a);
}

// fern_close resets the state for the fd number's next user: a TCP socket
// left "drained" is closed, and a new connection on the same number whose
// data is already queued reads it at once.
TEST(IoShort, CloseResetsDrainedStateForReusedFdNumber)
{
    Watchdog wd(60);
    Pair p = tcp_pair();
    ASSERT_EQ(0, run_green([&] {
                  char buf[100];
                  ASSERT_EQ(3, write(p.a, "abc", 3));
                  EXPECT_EQ(3, fern_read(p.b, buf, sizeof buf)); // short: drained
                  // A new connection whose server side takes the same number.
                  Pair q = tcp_pair();
                  int num = p.b;
                  EXPECT_EQ(0, fern_close(p.b));
                  close(p.a);
                  ASSERT_EQ(num, dup2(q.b, num));
                  close(q.b);
                  int fd = num;
                  int peer = q.a;
                  ASSERT_EQ(4, write(peer, "wxyz", 4));
                  ASSERT_EQ(0, fern_fd_set_deadline(fd, fern_now_ns() + 5000 * kMs, FERN_FOREVER));
                  int64_t t0 = fern_now_ns();
                  EXPECT_EQ(4, fern_read(fd, buf, sizeof buf));
                  EXPECT_LT(fern_now_ns() - t0, 1000 * kMs);
                  EXPECT_EQ(0, fern_close(fd));
                  close(peer);
              }));
}

// The trap this rule must avoid, made deterministic: an edge that the poller
// dispatches while a short read(2)/write(2) is returning (after the kernel
// stopped copying). seccomp traps read and write on one fd number; the SIGSYS
// handler makes the call (with recvfrom/sendto, which pass), and after the
// first short result makes the edge happen (the peer sends a byte / drains
// its receive queue) and waits while the other worker dispatches it, then
// returns the short result. The next call must see that edge: marking the fd
// drained regardless would park it with no edge to come (the read would wait
// for its 3 s deadline; the write likewise).
#if defined(__x86_64__) || defined(__aarch64__)
constexpr int kTrapFd = 777;
int g_trap_peer = -1;
std::atomic<int> g_trapped_reads{0}, g_trapped_writes{0};

void on_sigsys(int, siginfo_t *, void *ucv)
{
    int saved = errno;
    auto *uc = (ucontext_t *)ucv;
#if defined(__x86_64__)
    long nr = uc->uc_mcontext.gregs[REG_RAX];
    long a0 = uc->uc_mcontext.gregs[REG_RDI], a1 = uc->uc_mcontext.gregs[REG_RSI],
         a2 = uc->uc_mcontext.gregs[REG_RDX];
#else
    long nr = (long)uc->uc_mcontext.regs[8];
    long a0 = (long)uc->uc_mcontext.regs[0], a1 = (long)uc->uc_mcontext.regs[1],
         a2 = (long)uc->uc_mcontext.regs[2];
#endif
    long ret;
    timespec pause = {0, 200 * kMs};
    if (nr == SYS_read) {
        ssize_t r = recvfrom((int)a0, (void *)a1, (size_t)a2, 0, nullptr, nullptr);
        ret = r < 0 ? -errno : r;
        if (r > 0 && (size_t)r < (size_t)a2 && g_trapped_reads.fetch_add(1) == 0) {
            send(g_trap_peer, "z", 1, MSG_NOSIGNAL); // arrives after the copy
            nanosleep(&pause, nullptr);              // the poller dispatches its edge
        }
    } else {
        // write(2) or send(2) (fern_write on a socket): done with sendmsg,
        // which the filter lets through.
        iovec iov = {(void *)a1, (size_t)a2};
        msghdr m{};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        ssize_t r = sendmsg((int)a0, &m, MSG_NOSIGNAL);
        ret = r < 0 ? -errno : r;
        if (r > 0 && (size_t)r < (size_t)a2 && g_trapped_writes.fetch_add(1) == 0) {
            static char junk[1 << 16];
            for (int i = 0; i < 50; i++) { // drain the peer: room comes back, EPOLLOUT
                while (recv(g_trap_peer, junk, sizeof junk, MSG_DONTWAIT) > 0) {
                }
                timespec t = {0, 2 * kMs};
                nanosleep(&t, nullptr);
            }
            nanosleep(&pause, nullptr);
        }
    }
#if defined(__x86_64__)
    uc->uc_mcontext.gregs[REG_RAX] = ret;
#else
    uc->uc_mcontext.regs[0] = (unsigned long)ret;
#endif
    errno = saved;
}

// read(2), write(2) and sendto(2) (what send(2) is made of) on kTrapFd
// raise SIGSYS; everything else passes.
bool trap_reads_and_writes()
{
    sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
#if defined(__x86_64__)
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
#else
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_AARCH64, 1, 0),
#endif
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_read, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sendto, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])), // low half (LE)
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kTrapFd, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
    };
    sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

bool seccomp_usable()
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(trap_reads_and_writes() ? 0 : 1);
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

void edge_during_short_call_child()
{
    alarm(60);
    struct sigaction sa {
    };
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, nullptr))
        _exit(10);
    Pair p = tcp_pair();
    if (dup2(p.b, kTrapFd) != kTrapFd)
        _exit(11);
    close(p.b);
    g_trap_peer = p.a;
    int small = 4096;
    setsockopt(kTrapFd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    setsockopt(p.a, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    // Filter before any worker starts: they inherit it.
    if (!trap_reads_and_writes())
        _exit(12);
    fern_config cfg{};
    cfg.workers = 2;
    if (fern_init(&cfg))
        _exit(13);
    fern_cluster *spin = nullptr;
    if (fern_cluster_create(&spin, 1))
        _exit(26);
    std::atomic<bool> stop{false};
    int rc = run_green([&] {
        // Someone waits on an fd throughout, and a busy worker of another
        // cluster polls every few ticks: edges are dispatched while the
        // reader's worker sits in the SIGSYS handler.
        Pair q = unix_pair();
        fern_thread *helper = spawn_c(nullptr, [&] {
            char c;
            fern_read(q.a, &c, 1);
        });
        fern_thread *spinner = spawn_c(spin, [&] {
            while (!stop.load())
                fern_yield();
        });
        fern_sleep_ns(50 * kMs);
        if (fern_fd_set_deadline(kTrapFd, fern_now_ns() + 3000 * kMs, fern_now_ns() + 3000 * kMs))
            _exit(14);
        // Read side.
        if (send(p.a, "abc", 3, 0) != 3)
            _exit(15);
        fern_sleep_ns(20 * kMs);
        char buf[100];
        if (fern_read(kTrapFd, buf, sizeof buf) != 3)
            _exit(16);
        if (g_trapped_reads.load() != 1)
            _exit(17); // the trap did not run
        int64_t t0 = fern_now_ns();
        ssize_t r = fern_read(kTrapFd, buf, sizeof buf);
        if (r != 1 || buf[0] != 'z')
            _exit(18);
        if (fern_now_ns() - t0 > 1000 * kMs)
            _exit(19); // the read waited for its deadline
        // Write side: a write far larger than the buffers is short.
        std::vector<char> big(4u << 20, 'w');
        ssize_t w = fern_write(kTrapFd, big.data(), big.size());
        if (w <= 0 || (size_t)w >= big.size())
            _exit(20);
        if (g_trapped_writes.load() != 1)
            _exit(21);
        t0 = fern_now_ns();
        w = fern_write(kTrapFd, big.data(), 1024);
        if (w <= 0)
            _exit(22);
        if (fern_now_ns() - t0 > 1000 * kMs)
            _exit(23); // the write waited for its deadline
        if (write(q.b, "x", 1) != 1)
            _exit(24);
        fern_join(helper, nullptr);
        stop = true;
        fern_join(spinner, nullptr);
    });
    _exit(rc == 0 ? 0 : 25);
}

TEST(IoShortDeathTest, EdgeDuringShortCallIsNotLost)
{
    if (!seccomp_usable())
        GTEST_SKIP() << "seccomp filters unavailable here";
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(edge_during_short_call_child(), ::testing::ExitedWithCode(0), "");
}
#endif

} // namespace
