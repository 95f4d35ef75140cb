// SPDX-License-Identifier: MIT
// fern-hook never changes what the user sees (issue 32, item 4): after a
// green thread has parked on a descriptor, its open file description is as
// blocking as before, for the program (F_GETFL), a dup, a copy passed over
// SCM_RIGHTS, a fork child, stdio on fdopen, sendfile and recv(MSG_WAITALL),
// from green and plain threads, on one worker and on two. Before the hook
// asked for one non-blocking attempt per call it switched O_NONBLOCK on for
// good at the first park, and every case here failed.
#include "hook_test.h"

#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <atomic>
#include <cstring>

using namespace hook_test;

namespace {

// A cluster of n workers (OneWorker's, for n = 1 or 2).
struct Workers {
    fern_cluster *c = nullptr;
    explicit Workers(int n) { EXPECT_EQ(fern_cluster_create(&c, n), 0); }
    ~Workers() {
        if (c) {
            EXPECT_EQ(fern_cluster_destroy(c), 0);
        }
    }
    template <class F> fern_thread *spawn(F &&f) {
        fern_thread *t = nullptr;
        EXPECT_EQ(spawn_on(&t, c, std::forward<F>(f)), 0);
        return t;
    }
    template <class F> void run(F &&f) { join(spawn(std::forward<F>(f))); }
    static void join(fern_thread *t) { EXPECT_EQ(fern_join(t, nullptr), 0); }
};

struct Pair {
    int s[2];
    Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0); }
    ~Pair() {
        close(s[0]);
        close(s[1]);
    }
};

// A green thread on `w` parks in a read of fd until a second green thread
// writes one byte to `wfd` 20 ms later: the park that used to flip the flag.
void park_once(Workers &w, int fd, int wfd) {
    fern_thread *r = w.spawn([&] {
        char c = 0;
        EXPECT_EQ(read(fd, &c, 1), 1);
        EXPECT_EQ(c, 'p');
    });
    fern_thread *wr = w.spawn([&] {
        usleep(20000);
        EXPECT_EQ(write(wfd, "p", 1), 1);
    });
    Workers::join(r);
    Workers::join(wr);
    EXPECT_FALSE(kernel_nonblock(fd));
    EXPECT_FALSE(fcntl(fd, F_GETFL) & O_NONBLOCK);
}

class NonBlock : public ::testing::TestWithParam<int> {};

// recv(MSG_WAITALL) returns the full count when the data comes in pieces,
// from a green thread (whose attempts are non-blocking: the hook asks for
// the rest) and from a plain thread after a green park (the kernel's own).
TEST_P(NonBlock, RecvWaitallFullCount) {
    Pair sp;
    Workers w(GetParam());
    park_once(w, sp.s[0], sp.s[1]);
    auto feed = [&] {
        for (int i = 0; i < 10; i++) {
            usleep(3000);
            EXPECT_EQ(send(sp.s[1], "0123456789", 10, 0), 10);
        }
    };
    char buf[100];
    int64_t late;
    {
        Ticker tick(w);
        fern_thread *f = w.spawn(feed);
        w.run([&] { EXPECT_EQ(recv(sp.s[0], buf, sizeof buf, MSG_WAITALL), 100); });
        Workers::join(f);
        late = tick.late_ns.load();
    }
    EXPECT_LT(late, kLateLimit);
    std::thread plain_feed(feed);
    EXPECT_EQ(recv(sp.s[0], buf, sizeof buf, MSG_WAITALL), 100);
    plain_feed.join();
    // recvmsg too, into two pieces of vector.
    fern_thread *f = w.spawn(feed);
    w.run([&] {
        char a[30], b[70];
        struct iovec iov[2] = {{a, sizeof a}, {b, sizeof b}};
        struct msghdr m = {};
        m.msg_iov = iov;
        m.msg_iovlen = 2;
        EXPECT_EQ(recvmsg(sp.s[0], &m, MSG_WAITALL), 100);
        EXPECT_EQ(memcmp(a, "0123456789", 10), 0);
        EXPECT_EQ(memcmp(b + 60, "0123456789", 10), 0);
    });
    Workers::join(f);
    // End of file stops it short, as in the kernel.
    w.run([&] {
        EXPECT_EQ(send(sp.s[1], "abc", 3, 0), 3);
        EXPECT_EQ(shutdown(sp.s[1], SHUT_WR), 0);
        EXPECT_EQ(recv(sp.s[0], buf, sizeof buf, MSG_WAITALL), 3);
    });
}

// SO_RCVTIMEO ends a green MSG_WAITALL with what came so far, once for the
// whole call (not per piece), as the kernel's blocking call does.
TEST_P(NonBlock, RecvWaitallTimeoutKeepsCount) {
    Pair sp;
    struct timeval tv = {0, 100000};
    ASSERT_EQ(setsockopt(sp.s[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    Workers w(GetParam());
    fern_thread *f = w.spawn([&] {
        for (int i = 0; i < 8; i++) {
            usleep(30000);
            EXPECT_EQ(send(sp.s[1], "x", 1, 0), 1);
        }
    });
    w.run([&] {
        char buf[64];
        int64_t t0 = fern_now_ns();
        ssize_t r = recv(sp.s[0], buf, sizeof buf, MSG_WAITALL);
        int64_t took = fern_now_ns() - t0;
        EXPECT_GE(r, 1);
        EXPECT_LT(r, 8);
        EXPECT_GE(took, ms(95));
        EXPECT_LT(took, ms(220) + kLateLimit);
    });
    Workers::join(f);
}

// A copy passed over SCM_RIGHTS shares the description: it is blocking, and
// a plain blocking read on it waits for data instead of failing.
TEST_P(NonBlock, ScmRightsCopyStaysBlocking) {
    Pair data, carrier;
    Workers w(GetParam());
    park_once(w, data.s[0], data.s[1]);
    char one = 'm';
    struct iovec iov = {&one, 1};
    alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    struct msghdr m = {};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &data.s[0], sizeof(int));
    ASSERT_EQ(sendmsg(carrier.s[0], &m, 0), 1);
    struct msghdr r = {};
    char got = 0;
    struct iovec riov = {&got, 1};
    alignas(struct cmsghdr) char rctl[CMSG_SPACE(sizeof(int))] = {};
    r.msg_iov = &riov;
    r.msg_iovlen = 1;
    r.msg_control = rctl;
    r.msg_controllen = sizeof rctl;
    ASSERT_EQ(recvmsg(carrier.s[1], &r, 0), 1);
    int copy = -1;
    memcpy(&copy, CMSG_DATA(CMSG_FIRSTHDR(&r)), sizeof(int));
    ASSERT_GE(copy, 0);
    EXPECT_FALSE(fcntl(copy, F_GETFL) & O_NONBLOCK);
    std::thread writer([&] {
        usleep(30000);
        EXPECT_EQ(write(data.s[1], "s", 1), 1);
    });
    char c = 0;
    // Raw: what a process without the hook would do with the copy.
    EXPECT_EQ(syscall(SYS_read, copy, &c, 1), 1);
    EXPECT_EQ(c, 's');
    writer.join();
    // dup and fork children see the same.
    int d = dup(data.s[0]);
    EXPECT_FALSE(kernel_nonblock(d));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(kernel_nonblock(d) ? 1 : 0);
    int st = 0;
    EXPECT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(d);
    close(copy);
}

// Another holder of the description makes it non-blocking (through a copy
// the hook never saw): a green read then says EAGAIN at once, as libc's
// would, instead of parking.
TEST_P(NonBlock, NonblockSetElsewhereGivesEagain) {
    Pair sp;
    Workers w(GetParam());
    park_once(w, sp.s[0], sp.s[1]);
    int copy = (int)syscall(SYS_dup, sp.s[0]);
    ASSERT_GE(copy, 0);
    long fl = syscall(SYS_fcntl, copy, F_GETFL);
    ASSERT_EQ(syscall(SYS_fcntl, copy, F_SETFL, fl | O_NONBLOCK), 0);
    w.run([&] {
        char c;
        EXPECT_EQ(read(sp.s[0], &c, 1), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
        EXPECT_EQ(recv(sp.s[0], &c, 1, 0), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
    });
    syscall(SYS_close, copy);
}

// stdio on an fdopen'ed socket: fgets waits for its line (libc's own read,
// which the hook does not see, on a description that stays blocking).
TEST_P(NonBlock, FgetsOnFdopenWaits) {
    Pair sp;
    Workers w(GetParam());
    park_once(w, sp.s[0], sp.s[1]);
    int d = dup(sp.s[0]);
    FILE *f = fdopen(d, "r");
    ASSERT_NE(f, nullptr);
    std::thread writer([&] {
        usleep(30000);
        EXPECT_EQ(write(sp.s[1], "line\n", 5), 5);
    });
    char buf[16] = {};
    EXPECT_NE(fgets(buf, sizeof buf, f), nullptr) << strerror(errno);
    EXPECT_STREQ(buf, "line\n");
    writer.join();
    fclose(f);
}

// A sendfile loop into a socket a green thread has parked on: each call
// blocks until there is room, never EAGAIN.
TEST_P(NonBlock, SendfileLoopNeverEagain) {
    Pair sp;
    Workers w(GetParam());
    park_once(w, sp.s[1], sp.s[0]); // the writing end parks (as a reader) first
    char path[] = "/tmp/fern-nonblock-XXXXXX";
    int file = mkstemp(path);
    ASSERT_GE(file, 0);
    unlink(path);
    std::vector<char> blob(1 << 20, 'z');
    ASSERT_EQ(write(file, blob.data(), blob.size()), (ssize_t)blob.size());
    std::thread reader([&] {
        std::vector<char> b(65536);
        size_t got = 0;
        while (got < blob.size()) {
            usleep(500);
            ssize_t r = syscall(SYS_read, sp.s[0], b.data(), b.size());
            if (r <= 0) break;
            got += (size_t)r;
        }
        EXPECT_EQ(got, blob.size());
    });
    off_t off = 0;
    int eagain = 0;
    while ((size_t)off < blob.size()) {
        ssize_t r = sendfile(sp.s[1], file, &off, blob.size() - (size_t)off);
        if (r < 0) {
            eagain += errno == EAGAIN;
            if (errno != EAGAIN) break;
        }
    }
    EXPECT_EQ(eagain, 0);
    EXPECT_EQ((size_t)off, blob.size());
    reader.join();
    close(file);
}

// accept and connect from green threads park without leaving the flag on:
// the listening and the connected sockets stay blocking.
TEST_P(NonBlock, AcceptConnectLeaveFlagsAlone) {
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(l, 0);
    struct sockaddr_un a = {};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "/tmp/fern-nb-%d-%d", getpid(), GetParam());
    unlink(a.sun_path);
    ASSERT_EQ(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    ASSERT_EQ(listen(l, 4), 0);
    Workers w(GetParam());
    int64_t late;
    int s = -1, c = -1;
    {
        Ticker tick(w);
        fern_thread *acc = w.spawn([&] {
            s = accept(l, nullptr, nullptr);
            EXPECT_GE(s, 0);
            EXPECT_FALSE(fcntl(l, F_GETFL) & O_NONBLOCK);
        });
        fern_thread *con = w.spawn([&] {
            usleep(30000);
            c = socket(AF_UNIX, SOCK_STREAM, 0);
            EXPECT_EQ(connect(c, (struct sockaddr *)&a, sizeof a), 0);
        });
        Workers::join(acc);
        Workers::join(con);
        late = tick.late_ns.load();
    }
    EXPECT_LT(late, kLateLimit);
    EXPECT_FALSE(kernel_nonblock(l));
    EXPECT_FALSE(kernel_nonblock(c));
    EXPECT_FALSE(kernel_nonblock(s));
    close(s);
    close(c);
    close(l);
    unlink(a.sun_path);
}

// A pty: its driver refuses RWF_NOWAIT (EOPNOTSUPP), so the hook parks
// the reader until poll says ready and then makes the user's own read (the
// "ttys poll first" rule, hook/core.c). The read parks (a second green
// thread on the same worker runs while it waits, and no compensation worker
// is started), returns the line, and leaves the slave blocking.
TEST_P(NonBlock, PtyReadParksUntilLine) {
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0)
        GTEST_SKIP() << "no pty: " << strerror(errno);
    ASSERT_EQ(grantpt(m), 0);
    ASSERT_EQ(unlockpt(m), 0);
    int sl = open(ptsname(m), O_RDWR | O_NOCTTY);
    ASSERT_GE(sl, 0);
    Workers w(GetParam());
    struct fern_stats before, after;
    fern_stats(&before);
    std::atomic<int> reading{0}, ran_meanwhile{0};
    for (int round = 0; round < 2; round++) { // the second after the fd is marked poll-first
        reading = 0;
        ran_meanwhile = 0;
        fern_thread *r = w.spawn([&] {
            char buf[16] = {};
            reading = 1;
            EXPECT_EQ(read(sl, buf, sizeof buf), 5) << strerror(errno);
            EXPECT_STREQ(buf, "line\n");
        });
        fern_thread *o = w.spawn([&] {
            while (!reading)
                fern_yield();
            usleep(50000); // hooked: parks, so the reader's worker is free
            ran_meanwhile = 1;
        });
        Workers::join(o);
        EXPECT_EQ(ran_meanwhile.load(), 1);
        // Only now the line: had the read blocked the (single) worker, the
        // other thread could not have finished.
        EXPECT_EQ(syscall(SYS_write, m, "line\n", 5), 5);
        Workers::join(r);
    }
    // A read that blocked its worker for those 50 ms would have made the
    // monitor start a compensation worker (that is how the test passed
    // before ttys were managed); a parked one leaves none.
    fern_stats(&after);
    EXPECT_EQ(after.spares_started, before.spares_started);
    EXPECT_FALSE(kernel_nonblock(sl));
    EXPECT_FALSE(fcntl(sl, F_GETFL) & O_NONBLOCK);
    close(sl);
    close(m);
}

INSTANTIATE_TEST_SUITE_P(Workers, NonBlock, ::testing::Values(1, 2),
                         [](const auto &i) { return std::to_string(i.param) + "w"; });

}  // namespace
