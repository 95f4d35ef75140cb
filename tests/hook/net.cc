// SPDX-License-Identifier: MIT
// fern-hook, sockets and names: connect/accept on green threads of one
// worker, refused connections, SO_SNDTIMEO on TCP and AF_UNIX connect, the
// resolver on the blocking pool, fork (the child runs with hooking off),
// FERN_HOOK=0, and invalid FERN_HOOK values refused.
#include "hook_test.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <cstring>
#include <string>

using namespace hook_test;

namespace {

int listener(uint16_t *port) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(l, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    EXPECT_EQ(listen(l, 128), 0);
    socklen_t al = sizeof a;
    EXPECT_EQ(getsockname(l, (struct sockaddr *)&a, &al), 0);
    *port = ntohs(a.sin_port);
    return l;
}

struct sockaddr_in loopback(uint16_t port) {
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

TEST(HookNet, EchoOnOneWorker) {
    uint16_t port;
    int l = listener(&port);
    OneWorker w;
    const int kClients = 20;
    fern_thread *srv = w.spawn([&] {
        for (int i = 0; i < kClients; i++) {
            int c = accept(l, nullptr, nullptr);
            ASSERT_GE(c, 0);
            EXPECT_FALSE(fcntl(c, F_GETFL) & O_NONBLOCK);
            fern_thread *t = nullptr;
            EXPECT_EQ(spawn_on(&t, nullptr, [c] {
                          char buf[64];
                          ssize_t n;
                          while ((n = read(c, buf, sizeof buf)) > 0)
                              EXPECT_EQ(write(c, buf, n), n);
                          close(c);
                      }),
                      0);
            EXPECT_EQ(fern_detach(t), 0);
        }
    });
    std::vector<fern_thread *> cl;
    for (int i = 0; i < kClients; i++)
        cl.push_back(w.spawn([&, i] {
            int s = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in a = loopback(port);
            ASSERT_EQ(connect(s, (struct sockaddr *)&a, sizeof a), 0);
            for (int k = 0; k < 50; k++) {
                char msg[16], back[16] = {};
                int n = snprintf(msg, sizeof msg, "%d-%d", i, k);
                ASSERT_EQ(write(s, msg, n), n);
                ssize_t got = 0;
                while (got < n) {
                    ssize_t r = read(s, back + got, sizeof back - got);
                    ASSERT_GT(r, 0);
                    got += r;
                }
                EXPECT_EQ(memcmp(msg, back, n), 0);
            }
            close(s);
        }));
    for (auto t : cl) OneWorker::join(t);
    OneWorker::join(srv);
    usleep(20000);  // let the detached echo threads see EOF
    close(l);
}

TEST(HookNet, Accept4FlagsAndRefused) {
    uint16_t port;
    int l = listener(&port);
    OneWorker w;
    fern_thread *srv = w.spawn([&] {
        int c = accept4(l, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        ASSERT_GE(c, 0);
        EXPECT_TRUE(fcntl(c, F_GETFL) & O_NONBLOCK);
        EXPECT_TRUE(fcntl(c, F_GETFD) & FD_CLOEXEC);
        char ch;
        EXPECT_EQ(read(c, &ch, 1), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
        close(c);
    });
    w.run([&] {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = loopback(port);
        EXPECT_EQ(connect(s, (struct sockaddr *)&a, sizeof a), 0);
        OneWorker::join(srv);
        close(s);
        close(l);
        // Nobody listens there any more.
        s = socket(AF_INET, SOCK_STREAM, 0);
        EXPECT_EQ(connect(s, (struct sockaddr *)&a, sizeof a), -1);
        EXPECT_EQ(get_errno(), ECONNREFUSED);
        EXPECT_FALSE(fcntl(s, F_GETFL) & O_NONBLOCK);
        close(s);
    });
}

TEST(HookNet, UserNonblockConnectSaysInProgress) {
    uint16_t port;
    int l = listener(&port);
    OneWorker w;
    w.run([&] {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct sockaddr_in a = loopback(port);
        int r = connect(s, (struct sockaddr *)&a, sizeof a);
        // Loopback may finish at once; otherwise the user gets EINPROGRESS.
        if (r != 0) {
            EXPECT_EQ(get_errno(), EINPROGRESS);
        }
        close(s);
    });
    close(l);
}

// A listener whose accept queue is full (backlog 0 holds one connection
// nobody accepts) drops further SYNs, so a TCP connect to it waits for a
// retransmission a second away: SO_SNDTIMEO bounds that wait, and its
// expiry gives EINPROGRESS, as the kernel's blocking connect does.
TEST(HookNet, SndtimeoBoundsConnect) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(l, 0);
    struct sockaddr_in a = loopback(0);
    ASSERT_EQ(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    ASSERT_EQ(listen(l, 0), 0);
    socklen_t al = sizeof a;
    ASSERT_EQ(getsockname(l, (struct sockaddr *)&a, &al), 0);
    int first = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(first, (struct sockaddr *)&a, sizeof a), 0);  // fills the queue
    struct timeval tv = {0, 200000};
    // Plain thread: the kernel's own answer, for comparison.
    int s = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(connect(s, (struct sockaddr *)&a, sizeof a), -1);
    EXPECT_EQ(get_errno(), EINPROGRESS);
    EXPECT_GE(fern_now_ns() - t0, ms(190));
    close(s);
    OneWorker w;
    int64_t late;
    {
        Ticker tick(w);
        w.run([&] {
            int g = socket(AF_INET, SOCK_STREAM, 0);
            ASSERT_EQ(setsockopt(g, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
            int64_t t1 = fern_now_ns();
            EXPECT_EQ(connect(g, (struct sockaddr *)&a, sizeof a), -1);
            EXPECT_EQ(get_errno(), EINPROGRESS);
            int64_t took = fern_now_ns() - t1;
            EXPECT_GE(took, ms(190));
            // Without the bound the connect would wait for retransmitted
            // SYNs (1 s, 3 s, ...) that the full queue keeps dropping.
            EXPECT_LT(took, ms(200) + kLateLimit);
            EXPECT_FALSE(fcntl(g, F_GETFL) & O_NONBLOCK);
            close(g);
        });
        late = tick.late_ns.load();
    }
    EXPECT_LT(late, kLateLimit);
    close(first);
    close(l);
}

// A full AF_UNIX backlog answers a blocking connect only when room comes or
// SO_SNDTIMEO passes (EAGAIN). On a green thread the hook retries with
// back-off within that time, and the worker runs on meanwhile.
TEST(HookNet, SndtimeoBoundsUnixConnect) {
    char dir[] = "/tmp/fern-hook-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    struct sockaddr_un u = {};
    u.sun_family = AF_UNIX;
    snprintf(u.sun_path, sizeof u.sun_path, "%s/s", dir);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_EQ(bind(l, (struct sockaddr *)&u, sizeof u), 0);
    ASSERT_EQ(listen(l, 0), 0);
    std::vector<int> queued;
    OneWorker w;
    int64_t late;
    {
        Ticker tick(w);
        w.run([&] {
            struct timeval tv = {0, 150000};
            // Fill the backlog, then one more connect must wait it out.
            for (int i = 0; i < 8; i++) {
                int g = socket(AF_UNIX, SOCK_STREAM, 0);
                ASSERT_EQ(setsockopt(g, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
                int64_t t1 = fern_now_ns();
                int r = connect(g, (struct sockaddr *)&u, sizeof u);
                int64_t took = fern_now_ns() - t1;
                if (r == 0) {
                    queued.push_back(g);
                    continue;
                }
                EXPECT_EQ(get_errno(), EAGAIN);
                EXPECT_GE(took, ms(100));
                EXPECT_LT(took, ms(150) + kLateLimit);
                close(g);
                return;
            }
            ADD_FAILURE() << "the backlog never filled";
        });
        late = tick.late_ns.load();
    }
    EXPECT_LT(late, kLateLimit);
    for (int q : queued) close(q);
    close(l);
    unlink(u.sun_path);
    rmdir(dir);
}

// read() system calls of this process so far (/proc/self/io syscr).
long read_syscalls() {
    FILE *f = fopen("/proc/self/io", "r");
    char k[32];
    long v, got = -1;
    while (f && fscanf(f, "%31s %ld", k, &v) == 2)
        if (strcmp(k, "syscr:") == 0) got = v;
    if (f) fclose(f);
    return got;
}

// The short-transfer rule (src/fdtab.c) on the hook's TCP reads: after a
// read that came back short, the next read parks for the next edge without
// the system call that could only say EAGAIN. A ping-pong of small messages
// between two green threads of one worker then costs one read per message
// and side instead of two.
TEST(HookNet, ShortTcpReadSkipsTheEagainRead) {
    uint16_t port;
    int l = listener(&port);
    int a = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = loopback(port);
    ASSERT_EQ(connect(a, (struct sockaddr *)&sa, sizeof sa), 0);
    int b = accept(l, nullptr, nullptr);
    ASSERT_GE(b, 0);
    constexpr int kRounds = 300;
    long reads = 0;
    OneWorker w;
    fern_thread *echo = w.spawn([&] {
        char buf[4096];
        for (int i = 0; i < kRounds; i++) {
            ssize_t r = read(b, buf, sizeof buf);
            ASSERT_EQ(r, 8);
            ASSERT_EQ(write(b, buf, r), r);
        }
    });
    w.run([&] {
        char buf[4096];
        long r0 = read_syscalls();
        for (int i = 0; i < kRounds; i++) {
            ASSERT_EQ(write(a, "12345678", 8), 8);
            ASSERT_EQ(read(a, buf, sizeof buf), 8);
        }
        reads = read_syscalls() - r0;
    });
    OneWorker::join(echo);
    // 2 per round trip with the rule, 4 without (each side's read before
    // its data came would say EAGAIN); a little room for other threads.
    EXPECT_GE(reads, 2 * kRounds);
    EXPECT_LE(reads, 2 * kRounds + kRounds / 4);
    // A deadline still ends a skipped wait: SO_RCVTIMEO after a short read.
    struct timeval tv = {0, 100000};
    ASSERT_EQ(setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    w.run([&] {
        char buf[4096];
        ASSERT_EQ(write(b, "xy", 2), 2);
        ASSERT_EQ(read(a, buf, sizeof buf), 2);  // short: drained
        int64_t t0 = fern_now_ns();
        EXPECT_EQ(read(a, buf, sizeof buf), -1);
        EXPECT_EQ(get_errno(), EAGAIN);
        EXPECT_GE(fern_now_ns() - t0, ms(95));
        // Data that comes while parked after a short read wakes the reader.
        fern_thread *late = nullptr;
        EXPECT_EQ(spawn_on(&late, nullptr, [&] {
                      usleep(20000);
                      EXPECT_EQ(write(b, "z", 1), 1);
                  }),
                  0);
        ASSERT_EQ(read(a, buf, 1), 1);       // not short (1 of 1): no mark
        EXPECT_EQ(buf[0], 'z');
        EXPECT_EQ(fern_join(late, nullptr), 0);
    });
    close(a);
    close(b);
    close(l);
}

TEST(HookNet, PlainThreadConnectAcceptAsLibc) {
    uint16_t port;
    int l = listener(&port);
    std::thread srv([&] {
        int c = accept(l, nullptr, nullptr);
        EXPECT_GE(c, 0);
        EXPECT_EQ(write(c, "ok", 2), 2);
        close(c);
    });
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = loopback(port);
    EXPECT_EQ(connect(s, (struct sockaddr *)&a, sizeof a), 0);
    char buf[2];
    EXPECT_EQ(recv(s, buf, 2, MSG_WAITALL), 2);
    srv.join();
    EXPECT_FALSE(kernel_nonblock(s));
    close(s);
    close(l);
}

TEST(HookNet, NamesOnGreenThreads) {
    OneWorker w;
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 20; i++)
        ts.push_back(w.spawn([] {
            struct addrinfo hints = {}, *res = nullptr;
            hints.ai_family = AF_INET;
            hints.ai_socktype = SOCK_STREAM;
            ASSERT_EQ(getaddrinfo("localhost", "80", &hints, &res), 0);
            ASSERT_NE(res, nullptr);
            char host[64], serv[16];
            EXPECT_EQ(getnameinfo(res->ai_addr, res->ai_addrlen, host, sizeof host, serv,
                                  sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV),
                      0);
            EXPECT_STREQ(host, "127.0.0.1");
            EXPECT_STREQ(serv, "80");
            freeaddrinfo(res);
            struct hostent he, *out = nullptr;
            char buf[1024];
            int herr = 0;
            EXPECT_EQ(gethostbyname_r("localhost", &he, buf, sizeof buf, &out, &herr), 0);
            ASSERT_NE(out, nullptr);
            EXPECT_EQ(out->h_addrtype, AF_INET);
            // A failure that needs no DNS server (glibc's resolver keeps
            // per-thread buffers that LeakSanitizer reports on pool threads).
            EXPECT_EQ(getaddrinfo("localhost", "no-such-service-fern", &hints, &res), EAI_SERVICE);
        }));
    for (auto t : ts) OneWorker::join(t);
    w.run([] {
        struct hostent *h = gethostbyname("localhost");
        ASSERT_NE(h, nullptr);
        EXPECT_EQ(h->h_addrtype, AF_INET);
    });
}

TEST(HookNet, ForkChildRunsPlain) {
    // A pipe a green thread has parked on is still blocking in the child
    // (it shares the open file description), whose read blocks as the user
    // expects; sleeps work without a runtime, and exec works.
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    OneWorker w;
    w.run([&] {
        char c;
        fern_thread *wr = w.spawn([&] {
            usleep(10000);
            EXPECT_EQ(write(p[1], "a", 1), 1);
        });
        EXPECT_EQ(read(p[0], &c, 1), 1);
        OneWorker::join(wr);
    });
    ASSERT_FALSE(kernel_nonblock(p[0]));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        char c = 0;
        if (usleep(1000) != 0) _exit(2);
        if (read(p[0], &c, 1) != 1 || c != 'b') _exit(3);
        execl("/bin/true", "true", (char *)nullptr);
        _exit(4);
    }
    usleep(50000);
    EXPECT_EQ(write(p[1], "b", 1), 1);
    int st = 0;
    EXPECT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0);
    close(p[0]);
    close(p[1]);
}

// FERN_HOOK is checked like every other FERN_* variable (src/config.c):
// "0" and "1" (and unset or empty, the default) are taken, anything else is
// refused with one line naming the variable, the value and what is
// accepted. It is read while the library loads, so the refusal is the
// process's: this binary re-run with each value exits 1 before main prints
// anything. (Before, any value but "0", "banana" included, meant on.)
// Under qemu-user the copy runs through the emulator ctest names in
// FERN_TEST_EMULATOR (as stress/conns.cc does), with this binary's path,
// which qemu reports for /proc/self/exe.
std::string run_self_with_hook(const char *value, int *status) {
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    EXPECT_GT(len, 0) << strerror(errno);
    if (len <= 0) return "";
    self[len] = 0;
    std::string cmd = "FERN_HOOK='";
    cmd += value;
    cmd += "' ";
    if (const char *e = getenv("FERN_TEST_EMULATOR")) {
        cmd += e;
        cmd += " ";
    }
    cmd += "'";
    cmd += self;
    cmd += "' --gtest_list_tests --gtest_filter=HookOff.* 2>&1";
    FILE *f = popen(cmd.c_str(), "r");
    EXPECT_NE(f, nullptr);
    std::string out;
    if (!f) return out;
    char buf[256];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    *status = pclose(f);
    return out;
}

TEST(HookEnv, InvalidValueIsRefused) {
    for (const char *bad : {"banana", "on", "off", "true", "00", " 1", "1 "}) {
        int st = -1;
        std::string out = run_self_with_hook(bad, &st);
        ASSERT_TRUE(WIFEXITED(st)) << bad;
        EXPECT_EQ(WEXITSTATUS(st), 1) << "FERN_HOOK=\"" << bad << "\" printed: " << out;
        EXPECT_EQ(out, std::string("fern: FERN_HOOK=\"") + bad +
                           "\" is not valid: expected 0 (off) or 1 (on)\n");
    }
    for (const char *good : {"0", "1", ""}) {
        int st = -1;
        std::string out = run_self_with_hook(good, &st);
        ASSERT_TRUE(WIFEXITED(st)) << good;
        EXPECT_EQ(WEXITSTATUS(st), 0) << "FERN_HOOK=\"" << good << "\" printed: " << out;
        EXPECT_NE(out.find("EnvironmentTurnsHookingOff"), std::string::npos) << out;
    }
}

// Run by ctest with FERN_HOOK=0 (test_hook_off): a green thread's read of
// an empty pipe then waits in the kernel (the hook would park it), and
// F_GETFL shows the kernel's flags, as it always does. (How long the worker stays blocked is not
// checked: the monitor may hand its other threads to a spare worker.)
TEST(HookOff, EnvironmentTurnsHookingOff) {
    const char *v = getenv("FERN_HOOK");
    ASSERT_TRUE(v && strcmp(v, "0") == 0) << "run with FERN_HOOK=0";
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    OneWorker w;
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_EQ(write(p[1], "a", 1), 1);
    });
    w.run([&] {
        char c;
        EXPECT_EQ(read(p[0], &c, 1), 1);
        EXPECT_EQ(usleep(1000), 0);
    });
    writer.join();
    EXPECT_FALSE(kernel_nonblock(p[0]));
    EXPECT_EQ(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
    EXPECT_TRUE(kernel_nonblock(p[1]));
    EXPECT_TRUE(fcntl(p[1], F_GETFL) & O_NONBLOCK);
    close(p[0]);
    close(p[1]);
}

}  // namespace
