// SPDX-License-Identifier: MIT
// fern-hook, the blocking calls of issue 32 item 3: waits for children
// (pidfd), file locks, copies between descriptors, recvmmsg/sendmmsg,
// sigwait and friends, system/popen/pclose, the user and group look-ups
// and the resolver. Each one, on a green thread of a one-worker cluster,
// parks (fern_dump shows the thread parked while it waits, where the old
// hook left it running in the kernel) while a 1 ms ticker beside it keeps
// ticking, and gives libc's answer.
#include "hook_test.h"

#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <resolv.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstring>
#include <string>

using namespace hook_test;

namespace {

// What fern_dump says the thread named `name` is doing ("" if not listed).
std::string state_of(const char *name) {
    char *buf = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return "";
    fern_dump(f);
    fclose(f);
    std::string out(buf, len);
    free(buf);
    std::string key = std::string("\"") + name + "\" ";
    size_t at = out.find(key);
    if (at == std::string::npos) return "";
    size_t end = out.find('\n', at);
    return out.substr(at + key.size(), end - at - key.size());
}

// `block` runs on a green thread named "waiter" of a one-worker cluster
// beside a ticker; once fern_dump shows it parked, `unblock` runs on this
// (plain) thread. The waiter must then finish.
template <class B, class U> void parks(B block, U unblock) {
    OneWorker w;
    int64_t late;
    bool parked = false;
    std::string seen;
    {
        Ticker tick(w);
        std::atomic<bool> done{false};
        fern_thread *t = w.spawn([&] {
            fern_set_name("waiter");
            block();
            done = true;
        });
        int64_t until = fern_now_ns() + ms(3000);
        while (fern_now_ns() < until && !done.load()) {
            seen = state_of("waiter");
            if (seen.rfind("parked", 0) == 0) {
                parked = true;
                break;
            }
            usleep(2000);
        }
        // The ticker ticks while the call waits (a worker blocked in the
        // call would tick no more until `unblock`, below, ends the wait).
        long ticks0 = tick.ticks.load();
        int64_t give_up = fern_now_ns() + kLateLimit;
        while (tick.ticks.load() <= ticks0 + 2 && fern_now_ns() < give_up) usleep(2000);
        EXPECT_GT(tick.ticks.load(), ticks0 + 2) << "the worker stopped while the call waited";
        EXPECT_FALSE(done.load());
        unblock();
        OneWorker::join(t);
        late = tick.late_ns.load();
    }
    EXPECT_TRUE(parked) << "last seen: " << seen;
    EXPECT_LT(late, kLateLimit);
}

// A child that exits with `code` once a byte comes on its pipe.
struct Child {
    pid_t pid = -1;
    int go[2];
    explicit Child(int code) {
        EXPECT_EQ(syscall(SYS_pipe2, go, O_CLOEXEC), 0);
        pid = fork();
        if (pid == 0) {
            char c;
            syscall(SYS_read, go[0], &c, 1);
            syscall(SYS_exit_group, code);
        }
        EXPECT_GT(pid, 0);
        syscall(SYS_close, go[0]);
    }
    void release() { EXPECT_EQ(syscall(SYS_write, go[1], "x", 1), 1); }
    ~Child() { syscall(SYS_close, go[1]); }
};

TEST(HookProc, WaitpidParks) {
    Child ch(7);
    int st = 0;
    parks([&] { EXPECT_EQ(waitpid(ch.pid, &st, 0), ch.pid); }, [&] { ch.release(); });
    EXPECT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 7);
    OneWorker w;
    w.run([&] {
        EXPECT_EQ(waitpid(ch.pid, &st, 0), -1); // reaped already
        EXPECT_EQ(get_errno(), ECHILD);
        EXPECT_EQ(waitpid(1, &st, WNOHANG), -1); // not our child
        EXPECT_EQ(get_errno(), ECHILD);
    });
}

TEST(HookProc, Wait4WithRusageParks) {
    Child ch(3);
    int st = 0;
    struct rusage ru = {};
    parks([&] { EXPECT_EQ(wait4(ch.pid, &st, 0, &ru), ch.pid); }, [&] { ch.release(); });
    EXPECT_EQ(WEXITSTATUS(st), 3);
}

TEST(HookProc, WaitidParks) {
    Child a(4), b(5);
    siginfo_t si = {};
    parks([&] { EXPECT_EQ(waitid(P_PID, (id_t)a.pid, &si, WEXITED), 0); }, [&] { a.release(); });
    EXPECT_EQ(si.si_pid, a.pid);
    EXPECT_EQ(si.si_status, 4);
    int pfd = (int)syscall(SYS_pidfd_open, b.pid, 0);
    ASSERT_GE(pfd, 0);
    memset(&si, 0, sizeof si);
    parks([&] { EXPECT_EQ(waitid((idtype_t)P_PIDFD, (id_t)pfd, &si, WEXITED), 0); },
          [&] { b.release(); });
    EXPECT_EQ(si.si_pid, b.pid);
    EXPECT_EQ(si.si_status, 5);
    close(pfd);
}

TEST(HookProc, WaitAnyChildOnPool) {
    Child ch(9);
    int st = 0;
    parks([&] { EXPECT_EQ(wait(&st), ch.pid); }, [&] { ch.release(); });
    EXPECT_EQ(WEXITSTATUS(st), 9);
}

std::string lockfile() { return "/tmp/fern-lock-" + std::to_string(getpid()); }

TEST(HookProc, FlockParks) {
    std::string path = lockfile();
    int a = open(path.c_str(), O_CREAT | O_RDWR, 0600), b = open(path.c_str(), O_RDWR);
    ASSERT_GE(a, 0);
    ASSERT_GE(b, 0);
    ASSERT_EQ(flock(a, LOCK_EX), 0);
    parks([&] { EXPECT_EQ(flock(b, LOCK_EX), 0); }, [&] { EXPECT_EQ(flock(a, LOCK_UN), 0); });
    OneWorker w;
    w.run([&] {
        EXPECT_EQ(flock(a, LOCK_EX | LOCK_NB), -1);
        EXPECT_EQ(get_errno(), EWOULDBLOCK);
        EXPECT_EQ(flock(b, LOCK_UN), 0);
        EXPECT_EQ(flock(a, LOCK_SH), 0);
        EXPECT_EQ(flock(-1, LOCK_EX), -1);
        EXPECT_EQ(get_errno(), EBADF);
    });
    close(a);
    close(b);
    unlink(path.c_str());
}

TEST(HookProc, OfdSetlkwParks) {
    std::string path = lockfile() + "o";
    int a = open(path.c_str(), O_CREAT | O_RDWR, 0600), b = open(path.c_str(), O_RDWR);
    ASSERT_GE(a, 0);
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    ASSERT_EQ(fcntl(a, F_OFD_SETLKW, &fl), 0);
    parks([&] {
        struct flock f2 = {};
        f2.l_type = F_WRLCK;
        f2.l_whence = SEEK_SET;
        EXPECT_EQ(fcntl(b, F_OFD_SETLKW, &f2), 0);
    },
          [&] {
              struct flock un = {};
              un.l_type = F_UNLCK;
              un.l_whence = SEEK_SET;
              EXPECT_EQ(fcntl(a, F_OFD_SETLK, &un), 0);
          });
    close(a);
    close(b);
    unlink(path.c_str());
}

// POSIX record locks belong to the process: another process holds it.
TEST(HookProc, SetlkwParks) {
    std::string path = lockfile() + "p";
    int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    int held[2], rel[2];
    ASSERT_EQ(syscall(SYS_pipe2, held, O_CLOEXEC), 0);
    ASSERT_EQ(syscall(SYS_pipe2, rel, O_CLOEXEC), 0);
    pid_t holder = fork();
    if (holder == 0) {
        struct flock fl = {};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        if (syscall(SYS_fcntl, fd, F_SETLK, &fl) != 0) syscall(SYS_exit_group, 1);
        syscall(SYS_write, held[1], "h", 1);
        char c;
        syscall(SYS_read, rel[0], &c, 1);
        syscall(SYS_exit_group, 0);
    }
    ASSERT_GT(holder, 0);
    char c;
    ASSERT_EQ(syscall(SYS_read, held[0], &c, 1), 1);
    parks([&] {
        struct flock fl = {};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        EXPECT_EQ(fcntl(fd, F_SETLKW, &fl), 0);
    },
          [&] { EXPECT_EQ(syscall(SYS_write, rel[1], "r", 1), 1); });
    int st;
    EXPECT_EQ(waitpid(holder, &st, 0), holder);
    EXPECT_EQ(WEXITSTATUS(st), 0);
    for (int x : {held[0], held[1], rel[0], rel[1]}) syscall(SYS_close, x);
    close(fd);
    unlink(path.c_str());
}

TEST(HookProc, SendfileParks) {
    int s[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    int sz = 4096;
    setsockopt(s[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    std::string path = lockfile() + "s";
    int f = open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    std::vector<char> blob(1 << 20, 'q');
    ASSERT_EQ(write(f, blob.data(), blob.size()), (ssize_t)blob.size());
    off_t off = 0;
    std::atomic<size_t> got{0};
    std::thread drain;
    parks([&] { EXPECT_EQ(sendfile(s[1], f, &off, blob.size()), (ssize_t)blob.size()); },
          [&] {
              drain = std::thread([&] {
                  std::vector<char> b(65536);
                  while (got < blob.size()) {
                      ssize_t r = syscall(SYS_read, s[0], b.data(), b.size());
                      if (r <= 0) break;
                      got += (size_t)r;
                  }
              });
          });
    drain.join();
    EXPECT_EQ(got.load(), blob.size());
    close(f);
    unlink(path.c_str());
    close(s[0]);
    close(s[1]);
}

TEST(HookProc, SpliceTeeParkAndCopyFileRange) {
    int p[2], q[2];
    ASSERT_EQ(pipe(p), 0);
    ASSERT_EQ(pipe(q), 0);
    parks([&] { EXPECT_EQ(tee(p[0], q[1], 100, 0), 5); },
          [&] { EXPECT_EQ(write(p[1], "hello", 5), 5); });
    std::string path = lockfile() + "c";
    int f = open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    ASSERT_GE(f, 0);
    OneWorker w;
    w.run([&] { EXPECT_EQ(splice(q[0], nullptr, f, nullptr, 100, 0), 5); });
    // The pipe p still holds "hello" (tee copies): drain it, then splice
    // from the empty pipe parks.
    char buf[8];
    EXPECT_EQ(read(p[0], buf, 5), 5);
    parks([&] { EXPECT_EQ(splice(p[0], nullptr, f, nullptr, 100, 0), 3); },
          [&] { EXPECT_EQ(write(p[1], "abc", 3), 3); });
    std::string path2 = path + "2";
    int g = open(path2.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    w.run([&] {
        loff_t in = 0;
        EXPECT_EQ(copy_file_range(f, &in, g, nullptr, 100, 0), 8);
        char b[9] = {};
        EXPECT_EQ(pread(g, b, 8, 0), 8);
        EXPECT_STREQ(b, "helloabc");
        EXPECT_EQ(copy_file_range(-1, nullptr, g, nullptr, 1, 0), -1);
        EXPECT_EQ(get_errno(), EBADF);
    });
    close(f);
    close(g);
    unlink(path.c_str());
    unlink(path2.c_str());
    for (int fd : {p[0], p[1], q[0], q[1]}) close(fd);
}

TEST(HookProc, RecvmmsgSendmmsgPark) {
    int d[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_DGRAM, 0, d), 0);
    char b0[8] = {}, b1[8] = {};
    struct iovec iv[2] = {{b0, sizeof b0}, {b1, sizeof b1}};
    struct mmsghdr mm[2] = {};
    mm[0].msg_hdr.msg_iov = &iv[0];
    mm[0].msg_hdr.msg_iovlen = 1;
    mm[1].msg_hdr.msg_iov = &iv[1];
    mm[1].msg_hdr.msg_iovlen = 1;
    // Without MSG_WAITFORONE a blocking recvmmsg fills every slot.
    parks([&] { EXPECT_EQ(recvmmsg(d[0], mm, 2, 0, nullptr), 2); },
          [&] {
              EXPECT_EQ(send(d[1], "one", 3, 0), 3);
              usleep(20000);
              EXPECT_EQ(send(d[1], "two", 3, 0), 3);
          });
    EXPECT_STREQ(b0, "one");
    EXPECT_STREQ(b1, "two");
    parks([&] { EXPECT_EQ(recvmmsg(d[0], mm, 2, MSG_WAITFORONE, nullptr), 1); },
          [&] { EXPECT_EQ(send(d[1], "six", 3, 0), 3); });
    // sendmmsg into a full stream socket sends everything once drained.
    int s[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    std::vector<char> big(1 << 20, 'm');
    struct iovec bv[2] = {{big.data(), big.size() / 2}, {big.data(), big.size() / 2}};
    struct mmsghdr sm[2] = {};
    sm[0].msg_hdr.msg_iov = &bv[0];
    sm[0].msg_hdr.msg_iovlen = 1;
    sm[1].msg_hdr.msg_iov = &bv[1];
    sm[1].msg_hdr.msg_iovlen = 1;
    std::thread drain;
    std::atomic<size_t> got{0};
    parks([&] { EXPECT_EQ(sendmmsg(s[1], sm, 2, 0), 2); },
          [&] {
              drain = std::thread([&] {
                  std::vector<char> b(65536);
                  while (got < big.size()) {
                      ssize_t r = syscall(SYS_read, s[0], b.data(), b.size());
                      if (r <= 0) break;
                      got += (size_t)r;
                  }
              });
          });
    drain.join();
    EXPECT_EQ(got.load(), big.size());
    for (int fd : {d[0], d[1], s[0], s[1]}) close(fd);
}

// The signal is blocked in the test thread before the cluster starts (its
// worker inherits the mask) and sent to that worker's kernel thread.
TEST(HookProc, SigwaitFamilyParks) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
    {
        std::atomic<long> tid{0};
        int sig = 0;
        parks([&] {
            tid = syscall(SYS_gettid);
            EXPECT_EQ(sigwait(&set, &sig), 0);
        },
              [&] { EXPECT_EQ(syscall(SYS_tgkill, getpid(), tid.load(), SIGUSR1), 0); });
        EXPECT_EQ(sig, SIGUSR1);
        siginfo_t si = {};
        parks([&] {
            tid = syscall(SYS_gettid);
            EXPECT_EQ(sigwaitinfo(&set, &si), SIGUSR1);
        },
              [&] { EXPECT_EQ(syscall(SYS_tgkill, getpid(), tid.load(), SIGUSR1), 0); });
        EXPECT_EQ(si.si_signo, SIGUSR1);
        OneWorker w;
        w.run([&] {
            struct timespec ts = {0, 50000000};
            int64_t t0 = fern_now_ns();
            EXPECT_EQ(sigtimedwait(&set, &si, &ts), -1);
            EXPECT_EQ(get_errno(), EAGAIN);
            EXPECT_GE(fern_now_ns() - t0, ms(45));
            struct timespec bad = {0, 2000000000};
            EXPECT_EQ(sigtimedwait(&set, &si, &bad), -1);
            EXPECT_EQ(get_errno(), EINVAL);
        });
    }
    ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
}

TEST(HookProc, SystemPopenPcloseOnPool) {
    std::string flag = lockfile() + "f";
    unlink(flag.c_str());
    int st = -1;
    parks([&] { st = system(("while [ ! -e " + flag + " ]; do sleep 0.01; done; exit 3").c_str()); },
          [&] { close(open(flag.c_str(), O_CREAT | O_WRONLY, 0600)); });
    EXPECT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 3);
    unlink(flag.c_str());
    // popen's child says hi at once, then waits for the flag: pclose parks
    // until it exits. (fgets reads through libc's own read, which no hook
    // sees: the line is there before it is called.)
    FILE *f = nullptr;
    OneWorker w;
    w.run([&] {
        f = popen(("echo hi; while [ ! -e " + flag + " ]; do sleep 0.01; done").c_str(), "r");
        EXPECT_NE(f, nullptr);
    });
    ASSERT_NE(f, nullptr);
    char line[8] = {};
    w.run([&] { EXPECT_NE(fgets(line, sizeof line, f), nullptr); });
    EXPECT_STREQ(line, "hi\n");
    parks([&] { EXPECT_EQ(pclose(f), 0); },
          [&] { close(open(flag.c_str(), O_CREAT | O_WRONLY, 0600)); });
    unlink(flag.c_str());
    w.run([&] { EXPECT_EQ(system(nullptr), 1); }); // a shell exists
}

TEST(HookProc, UserGroupAndResolverAsLibc) {
    OneWorker w;
    w.run([&] {
        struct passwd *p = getpwnam("root");
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(p->pw_uid, 0u);
        p = getpwuid(0);
        ASSERT_NE(p, nullptr);
        EXPECT_STREQ(p->pw_name, "root");
        struct passwd pw, *res = nullptr;
        char buf[4096];
        EXPECT_EQ(getpwnam_r("root", &pw, buf, sizeof buf, &res), 0);
        EXPECT_EQ(res, &pw);
        EXPECT_EQ(getpwuid_r(0, &pw, buf, sizeof buf, &res), 0);
        EXPECT_EQ(getpwnam_r("no-such-user-fern", &pw, buf, sizeof buf, &res), 0);
        EXPECT_EQ(res, nullptr);
        EXPECT_EQ(getpwnam_r("root", &pw, buf, 1, &res), ERANGE);
        struct group *g = getgrnam("root");
        ASSERT_NE(g, nullptr);
        EXPECT_EQ(g->gr_gid, 0u);
        EXPECT_NE(getgrgid(0), nullptr);
        struct group gr, *gres = nullptr;
        EXPECT_EQ(getgrnam_r("root", &gr, buf, sizeof buf, &gres), 0);
        EXPECT_EQ(getgrgid_r(0, &gr, buf, sizeof buf, &gres), 0);
        gid_t groups[64];
        int n = 64;
        EXPECT_GE(getgrouplist("root", 0, groups, &n), 1);
    });
    // The resolver gives the same answer green and plain (the machine may
    // have no DNS: then both fail alike).
    unsigned char ans[512];
    int plain = res_query("localhost", C_IN, T_A, ans, sizeof ans);
    int green = -2;
    w.run([&] { green = res_query("localhost", C_IN, T_A, ans, sizeof ans); });
    EXPECT_EQ(green < 0, plain < 0);
}

}  // namespace

namespace {

// The same calls from a plain thread: libc's behaviour (the kernel blocks
// the caller), and from a second worker's green thread (2 workers).
TEST(HookProc, PlainThreadsAsLibc) {
    Child ch(6);
    std::thread rel([&] {
        usleep(20000);
        ch.release();
    });
    int st = 0;
    EXPECT_EQ(waitpid(ch.pid, &st, 0), ch.pid);
    EXPECT_EQ(WEXITSTATUS(st), 6);
    rel.join();
    std::string path = "/tmp/fern-plainlock-" + std::to_string(getpid());
    int a = open(path.c_str(), O_CREAT | O_RDWR, 0600), b = open(path.c_str(), O_RDWR);
    ASSERT_EQ(flock(a, LOCK_EX), 0);
    int64_t t0 = fern_now_ns(); // before the unlocker starts its 20 ms
    std::thread un([&] {
        usleep(20000);
        EXPECT_EQ(flock(a, LOCK_UN), 0);
    });
    EXPECT_EQ(flock(b, LOCK_EX), 0);
    EXPECT_GE(fern_now_ns() - t0, ms(20));
    un.join();
    close(a);
    close(b);
    unlink(path.c_str());
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    siginfo_t si;
    struct timespec ts = {0, 20000000};
    EXPECT_EQ(sigtimedwait(&set, &si, &ts), -1);
    EXPECT_EQ(get_errno(), EAGAIN);
    EXPECT_EQ(WEXITSTATUS(system("exit 2")), 2);
    EXPECT_NE(getpwnam("root"), nullptr);
    // Two workers: the waiter's worker may differ from the releaser's.
    fern_cluster *c = nullptr;
    ASSERT_EQ(fern_cluster_create(&c, 2), 0);
    Child c2(8);
    fern_thread *w = nullptr, *r = nullptr;
    int st2 = 0;
    ASSERT_EQ(spawn_on(&w, c, [&] { EXPECT_EQ(waitpid(c2.pid, &st2, 0), c2.pid); }), 0);
    ASSERT_EQ(spawn_on(&r, c, [&] {
                  usleep(20000);
                  c2.release();
              }),
              0);
    EXPECT_EQ(fern_join(w, nullptr), 0);
    EXPECT_EQ(fern_join(r, nullptr), 0);
    EXPECT_EQ(WEXITSTATUS(st2), 8);
    EXPECT_EQ(fern_cluster_destroy(c), 0);
}

}  // namespace
