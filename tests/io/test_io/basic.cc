// SPDX-License-Identifier: MIT
// The calls' success paths: sockets, datagrams, iovecs, file descriptors
// over SCM_RIGHTS and regular files; partial reads and writes of 8 MiB.
#include "io_test.h"

namespace {

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

} // namespace
