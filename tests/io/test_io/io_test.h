// SPDX-License-Identifier: MIT
// The I/O suite, test_io, built from the files of tests/io/test_io/, one
// feature each: fern_read/write/readv/writev/recv/send/recvfrom/sendto/
// recvmsg/sendmsg, fern_accept, fern_connect, fern_close, fern_wait_fd and
// per-fd deadlines, from green threads (they park, the worker keeps running
// others) and from plain threads (they block in poll). Loopback (127.0.0.1)
// and AF_UNIX socketpairs only; ports are chosen by the kernel. This header
// holds what the files share: sockets, pairs, fill/drain, readiness probes
// and the one-worker fixture. Its functions are inline so that a file that
// uses few of them is not warned about the rest.
#ifndef FERN_TESTS_IO_TEST_H
#define FERN_TESTS_IO_TEST_H

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

inline Pair unix_pair(int type = SOCK_STREAM) {
    int sv[2];
    if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) != 0) {
        ADD_FAILURE() << "socketpair: " << strerror(errno);
        return {};
    }
    return {sv[0], sv[1]};
}

inline sockaddr_in loopback(uint16_t port) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

inline uint16_t port_of(int fd) {
    sockaddr_in sa{};
    socklen_t l = sizeof sa;
    if (getsockname(fd, (sockaddr *)&sa, &l) != 0) return 0;
    return ntohs(sa.sin_port);
}

// A listening TCP socket on 127.0.0.1, kernel-chosen port.
inline int tcp_listen(uint16_t *port, int backlog = 128) {
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
inline int tcp_connect_plain(uint16_t port) {
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
inline Pair tcp_pair() {
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
inline uint16_t closed_port() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa = loopback(0);
    bind(fd, (sockaddr *)&sa, sizeof sa);
    uint16_t p = port_of(fd);
    close(fd);
    return p;
}

// Fill fd's send path (and the peer's receive buffer) with raw non-blocking
// sends until EAGAIN. Returns the bytes queued.
inline size_t fill(int fd) {
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
inline size_t drain(int fd) {
    static char junk[65536];
    size_t total = 0;
    for (int i = 0; i < 100000; i++) {
        ssize_t r = recv(fd, junk, sizeof junk, MSG_DONTWAIT);
        if (r <= 0) break;
        total += (size_t)r;
    }
    return total;
}

inline bool is_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

inline bool readable_now(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

inline bool writable_now(int fd) {
    pollfd p{fd, POLLOUT, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLOUT);
}

inline uint8_t pat(size_t i) { return (uint8_t)(i ^ (i >> 8) ^ (i >> 16) ^ 0x5a); }

template <class F> fern_thread *spawn_c(fern_cluster *c, F &&f) {
    fern_thread *t = nullptr;
    EXPECT_EQ(0, spawn_on(&t, c, std::forward<F>(f)));
    return t;
}

inline void join(fern_thread *t) {
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

} // namespace

#endif /* FERN_TESTS_IO_TEST_H */
