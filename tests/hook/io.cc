// SPDX-License-Identifier: MIT
// fern-hook, reads and writes and the descriptor rules: parking on a green
// thread, libc's behaviour on a plain thread, the user's O_NONBLOCK view,
// MSG_DONTWAIT, unmanaged descriptors never flipped, SO_RCVTIMEO/SO_SNDTIMEO
// as deadlines, close waking waiters with EBADF, errno per green thread.
#include "hook_test.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>
#include <string>

using namespace hook_test;

namespace {

// One green thread blocks in `block` (which must return once `unblock` ran)
// while another, 50 ms later on the same worker, runs `unblock`; a ticker
// shows the worker never stalled.
template <class B, class U> void parks_until(B block, U unblock) {
    OneWorker w;
    int64_t late;
    {
        Ticker tick(w);
        std::atomic<bool> done{false};
        fern_thread *a = w.spawn([&] {
            block();
            done = true;
        });
        fern_thread *b = w.spawn([&] {
            usleep(50000);
            EXPECT_FALSE(done.load());
            unblock();
        });
        OneWorker::join(a);
        OneWorker::join(b);
        late = tick.late_ns.load();
    }
    EXPECT_LT(late, kLateLimit);
}

struct Pipe {
    int p[2];
    explicit Pipe(int flags = 0) { EXPECT_EQ(pipe2(p, flags), 0); }
    ~Pipe() {
        close(p[0]);
        close(p[1]);
    }
};

struct Pair {
    int s[2];
    explicit Pair(int type = SOCK_STREAM) { EXPECT_EQ(socketpair(AF_UNIX, type, 0, s), 0); }
    ~Pair() {
        close(s[0]);
        close(s[1]);
    }
};

TEST(HookIo, ReadParksWriteWakes) {
    Pipe p;
    char c = 0;
    parks_until([&] { EXPECT_EQ(read(p.p[0], &c, 1), 1); },
                [&] { EXPECT_EQ(write(p.p[1], "x", 1), 1); });
    EXPECT_EQ(c, 'x');
    // The park changed no flag: the pipe is blocking for the user and the
    // kernel alike (one non-blocking attempt per call, hook/hook.h).
    EXPECT_FALSE(fcntl(p.p[0], F_GETFL) & O_NONBLOCK);
    EXPECT_FALSE(kernel_nonblock(p.p[0]));
}

// With hibernation on (test_hook_hibernate), readers parked in a hooked
// read are hibernated, and the poller's wake-up reads nothing on their
// stacks (fern-hook's waiter records are on the heap then): each stack is
// restored by its own thread's resume, never through the fault handler.
TEST(HookIo, HibernatedReadersWokenWithoutTouch) {
    OneWorker w; // starts the runtime
    struct fern_stats st {};
    ASSERT_EQ(fern_stats(&st), 0);
    if (!st.hibernate) GTEST_SKIP() << "hibernation is off (test_hook_hibernate turns it on)";
    const int n = 100;
    std::vector<int> rd(n), wr(n);
    for (int i = 0; i < n; i++) {
        int p[2];
        ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
        rd[(size_t)i] = p[0];
        wr[(size_t)i] = p[1];
    }
    uint64_t hib0 = st.hibernations;
    std::atomic<int> good{0};
    std::vector<fern_thread *> ts((size_t)n);
    for (int i = 0; i < n; i++)
        ts[(size_t)i] = w.spawn([&, i] {
            char buf[64] = {}; // on the parked stack
            std::string want = "line " + std::to_string(i);
            if (read(rd[(size_t)i], buf, sizeof buf) == (ssize_t)want.size() &&
                memcmp(buf, want.data(), want.size()) == 0)
                good++;
        });
    ASSERT_TRUE(wait_until([&] {
        struct fern_stats s {};
        fern_stats(&s);
        return s.hibernated >= (uint64_t)n && s.hibernations - hib0 >= (uint64_t)n;
    }));
    ASSERT_EQ(fern_stats(&st), 0);
    uint64_t touches0 = st.hibernate_touches;
    for (int i = 0; i < n; i++) {
        std::string s = "line " + std::to_string(i);
        ASSERT_EQ(write(wr[(size_t)i], s.data(), s.size()), (ssize_t)s.size());
    }
    for (auto *t : ts) ASSERT_EQ(fern_join(t, nullptr), 0);
    EXPECT_EQ(good.load(), n);
    ASSERT_EQ(fern_stats(&st), 0);
#if !defined(__SANITIZE_ADDRESS__)
    // (Under AddressSanitizer stacks are touched before they resume.)
    EXPECT_EQ(st.hibernate_touches, touches0);
#endif
    for (int i = 0; i < n; i++) {
        close(rd[(size_t)i]);
        close(wr[(size_t)i]);
    }
}

TEST(HookIo, ReadvWritevParks) {
    Pipe p;
    char a[3] = {}, b[3] = {};
    parks_until(
        [&] {
            struct iovec iov[2] = {{a, 3}, {b, 3}};
            EXPECT_EQ(readv(p.p[0], iov, 2), 6);
        },
        [&] {
            struct iovec iov[2] = {{(void *)"abc", 3}, {(void *)"def", 3}};
            EXPECT_EQ(writev(p.p[1], iov, 2), 6);
        });
    EXPECT_EQ(memcmp(a, "abc", 3), 0);
    EXPECT_EQ(memcmp(b, "def", 3), 0);
}

TEST(HookIo, WriteParksWhenFull) {
    Pipe p;
    OneWorker w;
    // Fill the pipe from a green thread (the kernel flag goes on), then a
    // write of more parks until a reader on the same worker drains it.
    std::atomic<long> wrote{0};
    fern_thread *wr = w.spawn([&] {
        static char buf[1 << 17];
        EXPECT_EQ(write(p.p[1], buf, sizeof buf), (ssize_t)sizeof buf);
        wrote = sizeof buf;
    });
    fern_thread *rd = w.spawn([&] {
        static char buf[1 << 17];
        long got = 0;
        while (got < (long)sizeof buf) {
            ssize_t r = read(p.p[0], buf, sizeof buf);
            ASSERT_GT(r, 0);
            got += r;
        }
    });
    OneWorker::join(wr);
    OneWorker::join(rd);
    EXPECT_EQ(wrote.load(), 1 << 17);
}

TEST(HookIo, RecvSendAllFlavoursPark) {
    Pair sp(SOCK_DGRAM);
    char buf[8] = {};
    parks_until([&] { EXPECT_EQ(recv(sp.s[0], buf, sizeof buf, 0), 2); },
                [&] { EXPECT_EQ(send(sp.s[1], "hi", 2, 0), 2); });
    EXPECT_STREQ(buf, "hi");
    parks_until(
        [&] {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            EXPECT_EQ(recvfrom(sp.s[0], buf, sizeof buf, 0, (struct sockaddr *)&ss, &sl), 3);
        },
        [&] { EXPECT_EQ(sendto(sp.s[1], "abc", 3, 0, nullptr, 0), 3); });
    parks_until(
        [&] {
            struct iovec iov = {buf, sizeof buf};
            struct msghdr m = {};
            m.msg_iov = &iov;
            m.msg_iovlen = 1;
            EXPECT_EQ(recvmsg(sp.s[0], &m, 0), 4);
        },
        [&] {
            struct iovec iov = {(void *)"wxyz", 4};
            struct msghdr m = {};
            m.msg_iov = &iov;
            m.msg_iovlen = 1;
            EXPECT_EQ(sendmsg(sp.s[1], &m, 0), 4);
        });
    EXPECT_EQ(memcmp(buf, "wxyz", 4), 0);
}

TEST(HookIo, PlainThreadBlocksAfterGreenPark) {
    // A green thread parks on the pipe; a plain thread's read must still
    // block in the kernel (the pipe is blocking) until data comes.
    Pipe p;
    char g = 0;
    parks_until([&] { EXPECT_EQ(read(p.p[0], &g, 1), 1); },
                [&] { EXPECT_EQ(write(p.p[1], "a", 1), 1); });
    ASSERT_FALSE(kernel_nonblock(p.p[0]));
    int64_t t0 = fern_now_ns(); // before the writer starts its 50 ms
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_EQ(write(p.p[1], "b", 1), 1);
    });
    char c = 0;
    EXPECT_EQ(read(p.p[0], &c, 1), 1);
    EXPECT_GE(fern_now_ns() - t0, ms(50));
    EXPECT_EQ(c, 'b');
    writer.join();
}

TEST(HookIo, UserNonblockKeepsEagain) {
    Pipe p(O_NONBLOCK);
    EXPECT_TRUE(fcntl(p.p[0], F_GETFL) & O_NONBLOCK);
    OneWorker w;
    w.run([&] {
        char c;
        EXPECT_EQ(read(p.p[0], &c, 1), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
        // Switched to blocking by the user: parks (and the data comes).
        int fl = fcntl(p.p[0], F_GETFL);
        EXPECT_EQ(fcntl(p.p[0], F_SETFL, fl & ~O_NONBLOCK), 0);
        EXPECT_FALSE(fcntl(p.p[0], F_GETFL) & O_NONBLOCK);
        fern_thread *wr = nullptr;
        EXPECT_EQ(spawn_on(&wr, nullptr, [&] {
                      usleep(20000);
                      EXPECT_EQ(write(p.p[1], "z", 1), 1);
                  }),
                  0);
        EXPECT_EQ(read(p.p[0], &c, 1), 1);
        EXPECT_EQ(fern_join(wr, nullptr), 0);
        // Back to non-blocking with F_SETFL: EAGAIN again, and F_GETFL says so.
        EXPECT_EQ(fcntl(p.p[0], F_SETFL, fl | O_NONBLOCK), 0);
        EXPECT_TRUE(fcntl(p.p[0], F_GETFL) & O_NONBLOCK);
        EXPECT_EQ(read(p.p[0], &c, 1), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
        // ioctl(FIONBIO) both ways.
        int off = 0, on = 1;
        EXPECT_EQ(ioctl(p.p[0], FIONBIO, &off), 0);
        EXPECT_FALSE(fcntl(p.p[0], F_GETFL) & O_NONBLOCK);
        EXPECT_FALSE(kernel_nonblock(p.p[0]));
        EXPECT_EQ(ioctl(p.p[0], FIONBIO, &on), 0);
        EXPECT_EQ(read(p.p[0], &c, 1), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
    });
    // A plain thread sees the same EAGAIN.
    char c;
    EXPECT_EQ(read(p.p[0], &c, 1), -1);
    EXPECT_EQ(get_errno(), EAGAIN);
}

TEST(HookIo, SocketNonblockFlagAtCreation) {
    int s[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, s), 0);
    OneWorker w;
    w.run([&] {
        char c;
        EXPECT_EQ(recv(s[0], &c, 1, 0), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
    });
    close(s[0]);
    close(s[1]);
}

TEST(HookIo, DontwaitKeepsEagain) {
    Pair sp;
    OneWorker w;
    w.run([&] {
        char c;
        EXPECT_EQ(recv(sp.s[0], &c, 1, MSG_DONTWAIT), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
        EXPECT_EQ(recvfrom(sp.s[0], &c, 1, MSG_DONTWAIT, nullptr, nullptr), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
    });
}

TEST(HookIo, UnmanagedDescriptorsNeverFlipped) {
    int p[2];
    raw_pipe(p);
    OneWorker w;
    w.run([&] {
        // Data is there: the call passes straight through.
        EXPECT_EQ(write(p[1], "q", 1), 1);
        char c;
        EXPECT_EQ(read(p[0], &c, 1), 1);
        EXPECT_EQ(write(2, "", 0), 0);
        EXPECT_EQ(read(0, &c, 0), 0);
    });
    EXPECT_FALSE(kernel_nonblock(p[0]));
    EXPECT_FALSE(kernel_nonblock(p[1]));
    for (int fd = 0; fd <= 2; fd++) {
        long fl = syscall(SYS_fcntl, fd, F_GETFL);
        if (fl >= 0) {
            EXPECT_FALSE(fl & O_NONBLOCK) << "fd " << fd;
        }
    }
    syscall(SYS_close, p[0]);
    syscall(SYS_close, p[1]);
}

TEST(HookIo, RcvtimeoIsADeadline) {
    Pair sp;
    struct timeval tv = {0, 100000};
    ASSERT_EQ(setsockopt(sp.s[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    OneWorker w;
    int64_t late;
    {
        Ticker tick(w);
        w.run([&] {
            char c;
            int64_t t0 = fern_now_ns();
            EXPECT_EQ(recv(sp.s[0], &c, 1, 0), -1);
            EXPECT_EQ(get_errno(), EAGAIN);
            int64_t took = fern_now_ns() - t0;
            EXPECT_GE(took, ms(95));
            EXPECT_LT(took, kLateLimit);
        });
        late = tick.late_ns.load();
    }
    EXPECT_LT(late, kLateLimit);
    // Still blocking: a plain thread gets the same deadline from the kernel.
    ASSERT_FALSE(kernel_nonblock(sp.s[0]));
    char c;
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(read(sp.s[0], &c, 1), -1);
    EXPECT_EQ(get_errno(), EAGAIN);
    EXPECT_GE(fern_now_ns() - t0, ms(95));
    struct timeval got = {};
    socklen_t gl = sizeof got;
    EXPECT_EQ(getsockopt(sp.s[0], SOL_SOCKET, SO_RCVTIMEO, &got, &gl), 0);
    EXPECT_EQ(got.tv_usec, 100000);
}

TEST(HookIo, SndtimeoIsADeadline) {
    Pair sp;
    struct timeval tv = {0, 100000};
    ASSERT_EQ(setsockopt(sp.s[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
    OneWorker w;
    w.run([&] {
        static char buf[1 << 16];
        int64_t t0 = 0;
        ssize_t r;
        // Fill the buffer: some write eventually waits out the deadline.
        for (int i = 0; i < 1000; i++) {
            t0 = fern_now_ns();
            r = send(sp.s[0], buf, sizeof buf, 0);
            if (r < 0) break;
        }
        EXPECT_EQ(r, -1);
        EXPECT_EQ(get_errno(), EAGAIN);
        EXPECT_GE(fern_now_ns() - t0, ms(95));
    });
}

TEST(HookIo, CloseWakesParkedReaderWithEbadf) {
    Pipe p;
    int fd = dup(p.p[0]);
    ASSERT_GE(fd, 0);
    parks_until(
        [&] {
            char c;
            EXPECT_EQ(read(fd, &c, 1), -1);
            EXPECT_EQ(get_errno(), EBADF);
        },
        [&] { EXPECT_EQ(close(fd), 0); });
}

TEST(HookIo, ReuseAfterCloseGetsNoOldWakeup) {
    // Reader A parks on fd; fd is closed (A: EBADF) and its number reused by
    // a new socket, while the old pipe lives on through a dup. Data on the
    // old pipe must not wake reader B of the new socket: B times out.
    Pipe p;
    int fd = dup(p.p[0]);
    ASSERT_GE(fd, 0);
    OneWorker w;
    fern_thread *a = w.spawn([&] {
        char c;
        EXPECT_EQ(read(fd, &c, 1), -1);
        EXPECT_EQ(get_errno(), EBADF);
    });
    w.run([&] {
        usleep(20000);
        EXPECT_EQ(close(fd), 0);
    });
    OneWorker::join(a);
    int s[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    int nfd = s[0] == fd ? s[0] : s[1] == fd ? s[1] : -1;
    ASSERT_NE(nfd, -1) << "the number was not reused";
    struct timeval tv = {0, 100000};
    ASSERT_EQ(setsockopt(nfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    w.run([&] {
        fern_thread *wr = nullptr;
        EXPECT_EQ(spawn_on(&wr, nullptr, [&] {
                      usleep(20000);
                      EXPECT_EQ(write(p.p[1], "old", 3), 3);
                  }),
                  0);
        char c;
        EXPECT_EQ(read(nfd, &c, 1), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
        EXPECT_EQ(fern_join(wr, nullptr), 0);
    });
    close(s[0]);
    close(s[1]);
}

TEST(HookIo, ShutdownWakesReaderWithEof) {
    Pair sp;
    parks_until(
        [&] {
            char c;
            EXPECT_EQ(read(sp.s[0], &c, 1), 0);
        },
        [&] { EXPECT_EQ(shutdown(sp.s[1], SHUT_WR), 0); });
}

TEST(HookIo, DupCopiesTheUserView) {
    Pipe p(O_NONBLOCK);
    int d1 = dup(p.p[0]);
    int d2 = fcntl(p.p[0], F_DUPFD_CLOEXEC, 100);
    int d3 = dup3(p.p[0], 200, O_CLOEXEC);
    ASSERT_GE(d1, 0);
    ASSERT_GE(d2, 100);
    ASSERT_EQ(d3, 200);
    EXPECT_EQ(dup3(d3, d3, 0), -1);
    EXPECT_EQ(get_errno(), EINVAL);
    EXPECT_EQ(dup2(d3, d3), d3);
    OneWorker w;
    w.run([&] {
        char c;
        for (int fd : {d1, d2, d3}) {
            EXPECT_EQ(read(fd, &c, 1), -1);
            EXPECT_EQ(get_errno(), EAGAIN);
            EXPECT_TRUE(fcntl(fd, F_GETFL) & O_NONBLOCK);
        }
    });
    for (int fd : {d1, d2, d3}) close(fd);
}

TEST(HookIo, Dup2OntoParkedDescriptorWakesIt) {
    Pipe a, b;
    int fd = dup(a.p[0]);
    parks_until(
        [&] {
            char c;
            EXPECT_EQ(read(fd, &c, 1), -1);
            EXPECT_EQ(get_errno(), EBADF);
        },
        [&] { EXPECT_EQ(dup2(b.p[0], fd), fd); });
    close(fd);
}

TEST(HookIo, ErrnoIsPerGreenThread) {
    Pair sp;
    struct timeval tv = {0, 30000};
    ASSERT_EQ(setsockopt(sp.s[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    OneWorker w;
    fern_thread *a = w.spawn([&] {
        char c;
        EXPECT_EQ(read(sp.s[0], &c, 1), -1);  // parks, then EAGAIN
        EXPECT_EQ(get_errno(), EAGAIN);
        usleep(30000);  // B sets its errno meanwhile
        EXPECT_EQ(get_errno(), EAGAIN);
    });
    fern_thread *b = w.spawn([&] {
        for (int i = 0; i < 20; i++) {
            EXPECT_EQ(read(-1, nullptr, 0), -1);
            EXPECT_EQ(get_errno(), EBADF);
            usleep(3000);
        }
    });
    OneWorker::join(a);
    OneWorker::join(b);
}

TEST(HookIo, PlainThreadErrorsAsLibc) {
    char c;
    EXPECT_EQ(read(-1, &c, 1), -1);
    EXPECT_EQ(get_errno(), EBADF);
    EXPECT_EQ(write(-1, &c, 1), -1);
    EXPECT_EQ(get_errno(), EBADF);
    EXPECT_EQ(close(-1), -1);
    EXPECT_EQ(get_errno(), EBADF);
    EXPECT_EQ(fcntl(-1, F_GETFL), -1);
    EXPECT_EQ(get_errno(), EBADF);
    EXPECT_EQ(dup(-1), -1);
    EXPECT_EQ(get_errno(), EBADF);
    EXPECT_EQ(pipe(nullptr), -1);
    EXPECT_EQ(get_errno(), EFAULT);
    signal(SIGPIPE, SIG_IGN);
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    close(p[0]);
    EXPECT_EQ(write(p[1], "x", 1), -1);
    EXPECT_EQ(get_errno(), EPIPE);
    close(p[1]);
    EXPECT_EQ(socket(12345, SOCK_STREAM, 0), -1);
    EXPECT_EQ(get_errno(), EAFNOSUPPORT);
}

TEST(HookIo, RegularFilesPassThrough) {
    char path[] = "/tmp/fern-hook-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    OneWorker w;
    w.run([&] {
        EXPECT_EQ(write(fd, "file", 4), 4);
        EXPECT_EQ(lseek(fd, 0, SEEK_SET), 0);
        char buf[8] = {};
        EXPECT_EQ(read(fd, buf, sizeof buf), 4);
        EXPECT_STREQ(buf, "file");
    });
    EXPECT_FALSE(kernel_nonblock(fd));
    close(fd);
}

}  // namespace

namespace {

TEST(HookIo, StaleEntryAfterHiddenCloseIsDropped) {
    // A managed socket closed where no hook sees it (a raw close, as libc's
    // fclose of an fdopen'ed socket does); the number goes to a pipe made
    // behind the hook's back. A green thread's read must not flip it.
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(s, 0);
    ASSERT_EQ(syscall(SYS_close, s), 0);
    int p[2];
    raw_pipe(p);
    int rd = p[0] == s ? p[0] : p[1] == s ? p[1] : -1;
    ASSERT_NE(rd, -1) << "the number was not reused";
    int other = rd == p[0] ? p[1] : p[0];
    OneWorker w;
    w.run([&] {
        char c = 'x';
        if (rd == p[0]) {
            EXPECT_EQ(write(other, &c, 1), 1);
            EXPECT_EQ(read(rd, &c, 1), 1);
        } else {
            EXPECT_EQ(write(rd, &c, 1), 1);
        }
    });
    EXPECT_FALSE(kernel_nonblock(rd));
    EXPECT_FALSE(fcntl(rd, F_GETFL) & O_NONBLOCK);
    syscall(SYS_close, p[0]);
    syscall(SYS_close, p[1]);
}

}  // namespace

namespace {

// A blocking writev/sendmsg moves every byte: the hook finishes a short
// transfer on a descriptor it switched to non-blocking.
TEST(HookIo, WritevAndSendmsgMoveEveryByte) {
    int s[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    static char a[1 << 18], b[1 << 18];
    OneWorker w;
    fern_thread *rd = w.spawn([&] {
        static char buf[1 << 16];
        long want = 4L * (1 << 18), got = 0;
        while (got < want) {
            ssize_t r = read(s[1], buf, sizeof buf);
            ASSERT_GT(r, 0);
            got += r;
        }
    });
    w.run([&] {
        struct iovec iov[2] = {{a, sizeof a}, {b, sizeof b}};
        EXPECT_EQ(writev(s[0], iov, 2), (ssize_t)(2 << 18));
        struct msghdr m = {};
        m.msg_iov = iov;
        m.msg_iovlen = 2;
        EXPECT_EQ(sendmsg(s[0], &m, 0), (ssize_t)(2 << 18));
        EXPECT_EQ(iov[0].iov_len, sizeof a);  // the caller's iovec is untouched
    });
    OneWorker::join(rd);
    close(s[0]);
    close(s[1]);
}

}  // namespace
