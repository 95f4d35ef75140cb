// SPDX-License-Identifier: MIT
// fern_* I/O calls from plain threads (they block in poll), mixed green and
// plain ends, and many ping-pong pairs across workers at once.
#include "io_test.h"

namespace {

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

} // namespace
