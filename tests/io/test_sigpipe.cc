// SPDX-License-Identifier: MIT
// Writing to a socket whose peer has gone: every fern write and send call
// fails with EPIPE and never raises SIGPIPE, whose default action would end
// this test process (SIGPIPE is left at SIG_DFL on purpose), from green
// threads and from plain threads, on TCP and on AF_UNIX stream sockets.
#include "fern_test.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <string>

using namespace fern_test;

namespace {

struct Pair {
    int a = -1, b = -1;
};

Pair unix_pair() {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        ADD_FAILURE() << "socketpair: " << strerror(errno);
        return {};
    }
    return {sv[0], sv[1]};
}

Pair tcp_pair() {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (l < 0 || bind(l, (sockaddr *)&sa, sizeof sa) || listen(l, 1) ||
        getsockname(l, (sockaddr *)&sa, &len)) {
        ADD_FAILURE() << "listen: " << strerror(errno);
        return {};
    }
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(c, (sockaddr *)&sa, sizeof sa)) ADD_FAILURE() << "connect: " << strerror(errno);
    int s = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    close(l);
    if (s < 0) ADD_FAILURE() << "accept: " << strerror(errno);
    return {c, s};
}

enum Call { kWrite, kWritev, kSend, kSendto, kSendmsg };
const char *const kNames[] = {"fern_write", "fern_writev", "fern_send", "fern_sendto", "fern_sendmsg"};

ssize_t do_call(Call c, int fd) {
    static const char buf[512] = {};
    iovec iov[2] = {{(void *)buf, 256}, {(void *)(buf + 256), 256}};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    switch (c) {
    case kWrite: return fern_write(fd, buf, sizeof buf);
    case kWritev: return fern_writev(fd, iov, 2);
    case kSend: return fern_send(fd, buf, sizeof buf, 0);
    case kSendto: return fern_sendto(fd, buf, sizeof buf, 0, nullptr, 0);
    case kSendmsg: return fern_sendmsg(fd, &m, 0);
    }
    return 0;
}

// Close the peer, then write until the call fails. TCP may accept the first
// writes (the peer's reset comes back a moment later) and may report the
// reset as ECONNRESET once; after that EPIPE. Bounded: 200 tries, 1 ms apart.
std::string writes_after_peer_closed(Call c, bool tcp) {
    Pair p = tcp ? tcp_pair() : unix_pair();
    if (p.a < 0) return "no socket pair";
    close(p.b);
    std::string seen;
    int err = 0;
    for (int i = 0; i < 200; i++) {
        ssize_t r = do_call(c, p.a);
        if (r < 0) {
            err = errno;
            if (err == EPIPE) break;
            if (err != ECONNRESET) break;
            seen += "ECONNRESET ";
        }
        fern_sleep_ns(1000000);
    }
    fern_close(p.a);
    if (err == EPIPE) return "EPIPE";
    return seen + "ended with " + (err ? strerror(err) : "no error after 200 writes");
}

class Sigpipe : public ::testing::TestWithParam<bool> {
  protected:
    void SetUp() override { signal(SIGPIPE, SIG_DFL); }
};

TEST_P(Sigpipe, FromGreenThreads) {
    bool tcp = GetParam();
    for (Call c : {kWrite, kWritev, kSend, kSendto, kSendmsg}) {
        std::string got;
        ASSERT_EQ(0, run_green([&] { got = writes_after_peer_closed(c, tcp); }));
        EXPECT_EQ("EPIPE", got) << kNames[c] << (tcp ? " on TCP" : " on AF_UNIX");
    }
}

TEST_P(Sigpipe, FromPlainThread) {
    bool tcp = GetParam();
    for (Call c : {kWrite, kWritev, kSend, kSendto, kSendmsg})
        EXPECT_EQ("EPIPE", writes_after_peer_closed(c, tcp)) << kNames[c] << (tcp ? " on TCP" : " on AF_UNIX");
}

INSTANTIATE_TEST_SUITE_P(Sockets, Sigpipe, ::testing::Values(false, true),
                         [](const auto &info) { return std::string(info.param ? "Tcp" : "Unix"); });

// A pipe is not a socket: fern_write keeps write(2)'s behaviour there, so a
// program that writes to pipes ignores SIGPIPE itself (documented in fern.h).
// With SIGPIPE ignored the call fails with EPIPE.
TEST(SigpipePipe, EpipeWhenIgnored) {
    signal(SIGPIPE, SIG_IGN);
    int fds[2];
    ASSERT_EQ(0, pipe(fds));
    close(fds[0]);
    char b = 0;
    EXPECT_EQ(-1, fern_write(fds[1], &b, 1));
    EXPECT_EQ(EPIPE, errno);
    fern_close(fds[1]);
    signal(SIGPIPE, SIG_DFL);
}

}  // namespace
