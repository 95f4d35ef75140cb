// SPDX-License-Identifier: MIT
// Short transfers: after a short read or write no edge is lost and nothing
// is skipped (src/fdtab.c's header comment).
#include "io_test.h"

namespace {

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
