// SPDX-License-Identifier: MIT
// Deadlock reports (src/deadlock.c): a fern_mutex ownership cycle is
// reported once, naming the threads, the mutexes (by symbol where they
// have one) and each thread's backtrace, and the program keeps running
// (FERN_DEADLOCK=fatal: it aborts; off: no report); waits a plain thread or a timer can still end are never
// reported; the whole-program "all asleep" case is reported only when
// provable.
#include "fern_test.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>

#include <regex>
#include <string>

using namespace fern_test;

namespace {

void restart(unsigned workers) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    fern_config cfg{workers, 0, 0};
    ASSERT_EQ(0, fern_init(&cfg));
}

// Captures what the process writes to stderr while alive.
class StderrCapture {
  public:
    StderrCapture() {
        char tmpl[] = "/tmp/fern_dl_XXXXXX";
        fd_ = mkstemp(tmpl);
        unlink(tmpl);
        fflush(stderr);
        saved_ = dup(2);
        dup2(fd_, 2);
    }
    ~StderrCapture() {
        fflush(stderr);
        dup2(saved_, 2);
        close(saved_);
        close(fd_);
    }
    std::string text() const {
        fflush(stderr);
        std::string s;
        char buf[4096];
        ssize_t n;
        off_t off = 0;
        while ((n = pread(fd_, buf, sizeof buf, off)) > 0) {
            s.append(buf, (size_t)n);
            off += n;
        }
        return s;
    }

  private:
    int fd_ = -1, saved_ = -1;
};

uint64_t reported() {
    struct fern_stats s;
    return fern_stats(&s) == 0 ? s.deadlocks_reported : 0;
}

std::string hex(const void *p) {
    char b[32];
    std::snprintf(b, sizeof b, "%p", p);
    return b;
}

} // namespace

namespace {

fern_mutex dl_m1 = FERN_MUTEX_INIT, dl_m2 = FERN_MUTEX_INIT;
fern_sem dl_both;

} // namespace

// Global-namespace statics: a C++ compiler leaves their names unmangled,
// as a C program's `static fern_mutex accounts_lock` would be.
static fern_mutex accounts_lock = FERN_MUTEX_INIT, ledger_lock = FERN_MUTEX_INIT;

// The two sides of the backtrace test, each parking from a function of its
// own (noinline, no tail call) so its frame is in the report.
__attribute__((noinline)) static void *transfer(void *) {
    fern_mutex_lock(&accounts_lock);
    fern_sem_post(&dl_both);
    fern_sleep_ns(ms(20));
    fern_mutex_lock(&ledger_lock);
    __asm__ volatile("" ::: "memory");
    return nullptr;
}

__attribute__((noinline)) static void *audit(void *) {
    fern_mutex_lock(&ledger_lock);
    fern_sem_post(&dl_both);
    fern_sleep_ns(ms(20));
    fern_mutex_lock(&accounts_lock);
    __asm__ volatile("" ::: "memory");
    return nullptr;
}

namespace {

// Takes `first`, then (after the other thread took its own) `second`: with
// the other thread doing the opposite, never returns. Plain functions, no
// heap: shutdown abandons these threads.
void *take_two(void *arg) {
    fern_mutex *first = arg == nullptr ? &dl_m1 : &dl_m2;
    fern_mutex *second = arg == nullptr ? &dl_m2 : &dl_m1;
    fern_mutex_lock(first);
    fern_sem_post(&dl_both);
    fern_sleep_ns(ms(20));
    fern_mutex_lock(second);
    return nullptr;
}

} // namespace

// A death test first (GoogleTest runs *DeathTest suites before the others,
// so the fork of "fast" style, used under qemu-user, has no runtime yet).
// FERN_DEADLOCK=fatal: the report, then abort().
void fatal_child() {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    setenv("FERN_DEADLOCK", "fatal", 1);
    fern_config cfg{2, 0, 0};
    if (fern_init(&cfg)) _exit(90);
    fern_sem_init(&dl_both, 0);
    fern_attr a{};
    a.name = "alpha";
    fern_thread *ta, *tb;
    fern_spawn(&ta, &a, take_two, nullptr);
    a.name = "beta";
    fern_spawn(&tb, &a, take_two, &dl_m2);
    fern_sleep_ns(ms(20000)); // from this plain thread: the monitor aborts first
    _exit(91);
}

TEST(DeadlockDeathTest, FatalAbortsAfterTheReport) {
    GTEST_FLAG_SET(death_test_style, death_style());
    EXPECT_EXIT(fatal_child(),
        ::testing::KilledBySignal(SIGABRT),
        "wait for each other's fern_mutex:\n(.|\n)*\"alpha\"(.|\n)*"
#if defined(__x86_64__)
        "take_two(.|\n)*" // backtraces: x86_64 only
#endif
        "fern: deadlock is fatal \\(FERN_DEADLOCK=fatal\\): aborting\n");
}

// The function each thread blocked in, by name, in a frame line of the
// report ("    #3 0x55... transfer(void*)+0x2d (/path/test_deadlock+0x1a2d)"),
// and each static mutex by its symbol.
TEST(Deadlock, ReportShowsBacktracesAndMutexSymbols) {
    restart(2);
    StderrCapture cap;
    ASSERT_EQ(0, fern_sem_init(&dl_both, 0));
    fern_attr a{};
    a.name = "transfer";
    fern_thread *ta, *tb;
    ASSERT_EQ(0, fern_spawn(&ta, &a, transfer, nullptr));
    a.name = "audit";
    ASSERT_EQ(0, fern_spawn(&tb, &a, audit, nullptr));
    EXPECT_TRUE(wait_until([] { return reported() >= 1; }, 4000));
    std::string out = cap.text();
#if defined(__x86_64__)
    std::regex frame_t("\n    #[0-9]+ 0x[0-9a-f]+ transfer\\(void\\*\\)\\+0x[0-9a-f]+ \\(/[^ ]*"
                       "test_deadlock\\+0x[0-9a-f]+\\)\n");
    std::regex frame_a("\n    #[0-9]+ 0x[0-9a-f]+ audit\\(void\\*\\)\\+0x[0-9a-f]+ ");
    EXPECT_TRUE(std::regex_search(out, frame_t)) << out;
    EXPECT_TRUE(std::regex_search(out, frame_a)) << out;
    // Each backtrace ends at the green stack's bottom.
    EXPECT_NE(std::string::npos, out.find(" fern_ctx_entry+0x")) << out;
#endif
    EXPECT_NE(std::string::npos, out.find("waits for mutex ledger_lock (" + hex(&ledger_lock) + ")"))
        << out;
    EXPECT_NE(std::string::npos,
              out.find("waits for mutex accounts_lock (" + hex(&accounts_lock) + ")"))
        << out;
    ASSERT_EQ(0, fern_shutdown());
}

TEST(Deadlock, OppositeOrderMutexesReportedOnce) {
    restart(2);
    StderrCapture cap;
    ASSERT_EQ(0, fern_sem_init(&dl_both, 0));
    fern_attr a{};
    a.name = "alpha";
    fern_thread *ta, *tb;
    ASSERT_EQ(0, fern_spawn(&ta, &a, take_two, nullptr));
    a.name = "beta";
    ASSERT_EQ(0, fern_spawn(&tb, &a, take_two, &dl_m2));
    int64_t t0 = fern_now_ns();
    EXPECT_TRUE(wait_until([] { return reported() >= 1; }, 4000));
    int64_t took = fern_now_ns() - t0;
    EXPECT_LT(took, ms(2000) + ms(20)) << "report within 2 s";
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    EXPECT_EQ(1u, reported()) << "reported once";
    std::string out = cap.text();
    EXPECT_NE(std::string::npos, out.find("deadlock")) << out;
    EXPECT_NE(std::string::npos, out.find("\"alpha\"")) << out;
    EXPECT_NE(std::string::npos, out.find("\"beta\"")) << out;
    EXPECT_NE(std::string::npos, out.find("thread " + std::to_string(fern_thread_id(ta)))) << out;
    EXPECT_NE(std::string::npos, out.find("thread " + std::to_string(fern_thread_id(tb)))) << out;
    EXPECT_NE(std::string::npos, out.find(hex(&dl_m1))) << out;
    EXPECT_NE(std::string::npos, out.find(hex(&dl_m2))) << out;
    // The program keeps running.
    ASSERT_EQ(0, run_green([] { fern_sleep_ns(ms(1)); }));
    // Shutdown abandons the two threads (and says so).
    ASSERT_EQ(0, fern_shutdown());
}

// Green threads wait on a chain that ends at a plain thread (a mutex it
// holds, a condition it signals) for 1.5 s: no report.
TEST(Deadlock, PlainThreadWakesGreenWaitersNoReport) {
    restart(2);
    StderrCapture cap;
    fern_mutex held = FERN_MUTEX_INIT, m2 = FERN_MUTEX_INIT, cm = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    bool go = false;
    ASSERT_EQ(0, fern_mutex_lock(&held)); // this plain thread holds it
    std::atomic<int> done{0};
    fern_thread *t1, *t2, *t3, *t4;
    // t1 holds m2 and waits for `held`; t2 waits for m2: a chain, no cycle.
    ASSERT_EQ(0, spawn(&t1, nullptr, [&] {
                  fern_mutex_lock(&m2);
                  fern_mutex_lock(&held);
                  fern_mutex_unlock(&held);
                  fern_mutex_unlock(&m2);
                  done++;
              }));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(0, spawn(&t2, nullptr, [&] {
                  fern_mutex_lock(&m2);
                  fern_mutex_unlock(&m2);
                  done++;
              }));
    for (fern_thread **t : {&t3, &t4})
        ASSERT_EQ(0, spawn(t, nullptr, [&] {
                      fern_mutex_lock(&cm);
                      while (!go) fern_cond_wait(&cv, &cm);
                      fern_mutex_unlock(&cm);
                      done++;
                  }));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    fern_mutex_lock(&cm);
    go = true;
    fern_cond_broadcast(&cv);
    fern_mutex_unlock(&cm);
    ASSERT_EQ(0, fern_mutex_unlock(&held));
    for (auto t : {t1, t2, t3, t4}) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(4, done.load());
    EXPECT_EQ(0u, reported());
    EXPECT_EQ(std::string::npos, cap.text().find("deadlock")) << cap.text();
    ASSERT_EQ(0, fern_shutdown());
}

namespace {

// Runs body() in a child process whose main thread calls fern_run(body);
// returns what the child wrote to stderr within `ms_` milliseconds, or up
// to `until` once that appears (the child never ends by itself: without it
// the whole time is spent). before_init() runs in the child first; if it
// fails the child writes "before_init failed" and exits.
template <class F, class B>
std::string child_stderr(F body, int ms_, B before_init, const char *until = nullptr) {
    int p[2];
    EXPECT_EQ(0, pipe(p));
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        if (!before_init()) {
            fputs("before_init failed\n", stderr);
            _exit(3);
        }
        fern_config cfg{2, 0, 0};
        if (fern_init(&cfg)) _exit(2);
        run_green(body);
        _exit(0);
    }
    close(p[1]);
    std::string out;
    int64_t end = fern_now_ns() + ms(ms_);
    for (;;) {
        int64_t left = (end - fern_now_ns()) / 1000000;
        if (left <= 0) break;
        struct pollfd pf = {p[0], POLLIN, 0};
        if (poll(&pf, 1, (int)left) <= 0) break;
        char buf[4096];
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n <= 0) break;
        out.append(buf, (size_t)n);
        if (until && out.find(until) != std::string::npos) break;
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    close(p[0]);
    return out;
}

template <class F> std::string child_stderr(F body, int ms_, const char *until = nullptr) {
    return child_stderr(body, ms_, [] { return true; }, until);
}

// Makes process_vm_readv fail with EPERM in this process, as container
// seccomp profiles that keep it for debuggers do. qemu-user accepts no
// seccomp filter, but refuses process_vm_readv itself (ENOSYS).
bool refuse_process_vm_readv() {
#ifdef FERN_TEST_EMULATED
    return true;
#else
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
#endif
}

} // namespace

// Go's "all goroutines are asleep": the main green thread joins a thread
// that waits on a condition variable nobody can signal.
TEST(Deadlock, AllThreadsAsleepReported) {
#ifdef FERN_TEST_EMULATED
    // qemu-user runs a thread of its own in the process (its RCU thread:
    // /proc/self/task lists 2 tasks for a single-threaded aarch64 program,
    // also in a forked child). fern cannot tell it from a program thread
    // that could still wake a sleeper, so it rightly makes no report.
    GTEST_SKIP() << "qemu-user's own thread is in /proc/self/task: \"all asleep\" is "
                    "unprovable under emulation (docs/platforms.md)";
#endif
    if (kTsan) GTEST_SKIP() << "ThreadSanitizer's own thread makes the kernel-thread count unprovable";
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    std::string out = child_stderr(
        [] {
            static fern_mutex m = FERN_MUTEX_INIT;
            static fern_cond c = FERN_COND_INIT;
            fern_attr a{};
            a.name = "waiter";
            fern_thread *t;
            spawn(&t, &a, [] {
                fern_mutex_lock(&m);
                fern_cond_wait(&c, &m);
            });
            fern_join(t, nullptr);
        },
        // Due within ~1.5 s of the child's start (two scans 0.5 s apart);
        // the reading stops at the report's last line, so the ceiling only
        // matters to a loaded machine that starts the child slowly.
        6000, "fern: the program keeps running\n");
    EXPECT_NE(std::string::npos, out.find("all 2 green threads are asleep")) << out;
    EXPECT_NE(std::string::npos, out.find("\"waiter\"")) << out;
    EXPECT_NE(std::string::npos, out.find("\"main\"")) << out;
#if defined(__x86_64__)
    // Each thread's backtrace, down to the green stack's bottom.
    std::regex waiter("\"waiter\" parked on cond:\n(    #[0-9]+ 0x[0-9a-f]+ [^\n]*\n)*"
                      "    #[0-9]+ 0x[0-9a-f]+ fern_ctx_entry\\+0x");
    std::regex main_bt("\"main\" parked on join:\n    #0 0x[0-9a-f]+ ");
    EXPECT_TRUE(std::regex_search(out, waiter)) << out;
    EXPECT_TRUE(std::regex_search(out, main_bt)) << out;
#endif
}

// The same with a deadline on the wait: a timer can still wake it.
TEST(Deadlock, TimedWaitIsNotAsleep) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    std::string out = child_stderr(
        [] {
            static fern_mutex m = FERN_MUTEX_INIT;
            static fern_cond c = FERN_COND_INIT;
            fern_thread *t;
            spawn(&t, nullptr, [] {
                fern_mutex_lock(&m);
                fern_cond_timedwait(&c, &m, fern_now_ns() + ms(60000));
            });
            fern_join(t, nullptr);
        },
        2500);
    EXPECT_EQ(std::string::npos, out.find("deadlock")) << out;
}

// The monitor reads each waited-for mutex's owner with process_vm_readv;
// where that is refused (EPERM under a seccomp profile, ENOSYS under
// qemu-user) it reads through a pipe and still reports the cycle.
TEST(Deadlock, CycleReportedWithoutProcessVmReadv) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    std::string out = child_stderr(
        [] {
            long word = 7, got = 0;
            struct iovec l = {&got, sizeof got}, r = {&word, sizeof word};
            if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) >= 0 || (errno != EPERM && errno != ENOSYS)) {
                fputs("process_vm_readv was not refused\n", stderr);
                return;
            }
            // Fresh mutexes: the parent's may still be held by the
            // threads an earlier test abandoned.
            fern_mutex_init(&dl_m1);
            fern_mutex_init(&dl_m2);
            fern_sem_init(&dl_both, 0);
            fern_attr a{};
            a.name = "alpha";
            fern_thread *ta, *tb;
            fern_spawn(&ta, &a, take_two, nullptr);
            a.name = "beta";
            fern_spawn(&tb, &a, take_two, &dl_m2);
            fern_join(ta, nullptr);
        },
        6000, refuse_process_vm_readv);
    if (out.find("before_init failed") != std::string::npos)
        GTEST_SKIP() << "seccomp filters unavailable here";
    EXPECT_EQ(std::string::npos, out.find("was not refused")) << out;
    EXPECT_NE(std::string::npos, out.find("wait for each other's fern_mutex")) << out;
    EXPECT_NE(std::string::npos, out.find("\"alpha\"")) << out;
    EXPECT_NE(std::string::npos, out.find("\"beta\"")) << out;
}

// FERN_DEADLOCK=off: the same cycle, no report.
TEST(Deadlock, OffMakesNoReport) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    std::string out = child_stderr(
        [] {
            fern_mutex_init(&dl_m1);
            fern_mutex_init(&dl_m2);
            fern_sem_init(&dl_both, 0);
            fern_thread *ta, *tb;
            fern_spawn(&ta, nullptr, take_two, nullptr);
            fern_spawn(&tb, nullptr, take_two, &dl_m2);
            fputs("spawned\n", stderr);
            fern_join(ta, nullptr);
        },
        2500, [] { return setenv("FERN_DEADLOCK", "off", 1) == 0; });
    EXPECT_NE(std::string::npos, out.find("spawned")) << out;
    EXPECT_EQ(std::string::npos, out.find("deadlock")) << out;
}

// A value that is none of report, fatal, off: fern_init says so and fails.
TEST(Deadlock, InvalidSettingIsRefused) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    setenv("FERN_DEADLOCK", "abort", 1);
    StderrCapture cap;
    fern_config cfg{1, 0, 0};
    int r = fern_init(&cfg);
    unsetenv("FERN_DEADLOCK");
    EXPECT_EQ(EINVAL, r);
    if (r == 0) fern_shutdown();
    EXPECT_NE(std::string::npos,
              cap.text().find("fern: FERN_DEADLOCK=\"abort\" is not valid: expected report (the "
                              "default), fatal (abort after the report) or off\n"))
        << cap.text();
}
