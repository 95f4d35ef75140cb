// SPDX-License-Identifier: MIT
// fern_shutdown never hangs: with green threads still yielding, sleeping,
// spinning (preemption on and off), migrating between clusters or parked
// in reads, it cancels them, waits its grace period, destroys the rest and
// returns within the grace period plus 1 s, saying on stderr which threads
// it destroyed. Threads that end when cancelled are not reported. Each case
// runs in a child process (a stuck spinner must not outlive its case), three
// times.
#include "fern_test.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

using namespace fern_test;

namespace {

constexpr long kGraceMs = 300;

struct Outcome {
    int status = -1;
    bool killed = false;
    std::string err;
};

// Fork; the child runs body() (which calls fern_shutdown) with stderr to a
// pipe and exits 0; the parent kills it if it is not done within `limit_ms`.
template <class F> Outcome in_child(F body, int limit_ms) {
    int p[2];
    EXPECT_EQ(0, pipe(p));
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        body();
        fflush(stderr);
        _exit(0);
    }
    close(p[1]);
    Outcome o;
    int64_t end = fern_now_ns() + (int64_t)limit_ms * 1000000;
    char buf[4096];
    for (;;) {
        struct pollfd pf = {p[0], POLLIN, 0};
        int64_t left = (end - fern_now_ns()) / 1000000;
        if (left <= 0) {
            kill(pid, SIGKILL);
            o.killed = true;
            break;
        }
        if (poll(&pf, 1, (int)left) <= 0) continue;
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n <= 0) break;
        o.err.append(buf, (size_t)n);
    }
    close(p[0]);
    waitpid(pid, &o.status, 0);
    return o;
}

// The body of a case: start the runtime (preemption on or off), start
// `spawn_all`'s threads, let them run, then time fern_shutdown.
template <class S> void shutdown_case(bool preempt, S spawn_all) {
    fern_config cfg{};
    cfg.workers = 2;
    cfg.preempt_us = preempt ? 0 : FERN_PREEMPT_OFF;
    cfg.shutdown_grace_ms = kGraceMs;
    if (fern_init(&cfg) != 0) _exit(3);
    spawn_all();
    struct timespec nap = {0, 50 * 1000000};
    nanosleep(&nap, nullptr);
    int64_t t0 = fern_now_ns();
    int r = fern_shutdown();
    int64_t took = fern_now_ns() - t0;
    fprintf(stderr, "shutdown took %lld ms\n", (long long)(took / 1000000));
    if (r != 0) _exit(4);
    if (took > (kGraceMs + 1000) * 1000000ll) _exit(5);
}

long took_ms(const std::string &err) {
    size_t at = err.find("shutdown took ");
    return at == std::string::npos ? -1 : std::atol(err.c_str() + at + 14);
}

template <class S> void expect_case(const char *what, bool preempt, S spawn_all, const char *must_say) {
    for (int run = 0; run < 3; run++) {
        Outcome o = in_child([&] { shutdown_case(preempt, spawn_all); }, (int)kGraceMs + 10000);
        EXPECT_FALSE(o.killed) << what << ": fern_shutdown hung (run " << run << ")\n" << o.err;
        EXPECT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0)
            << what << ": child status " << o.status << "\n" << o.err;
        if (must_say) {
            EXPECT_NE(std::string::npos, o.err.find(must_say)) << what << ":\n" << o.err;
        }
        std::printf("  %-32s run %d: shutdown took %ld ms\n", what, run, took_ms(o.err));
        if (took_ms(o.err) > kGraceMs + 500) std::printf("%s", o.err.c_str()); // why it waited
    }
}

void *yielder(void *) {
    for (;;) fern_yield();
}
void *spinner(void *) {
    for (;;) __asm__ volatile("" ::: "memory"); // the executable's code: preemptible
}
void *sleeper(void *) {
    // Ends when cancelled, like a well-behaved thread.
    while (fern_sleep_ns(ms(10)) == 0) {
    }
    return nullptr;
}
void *stubborn_sleeper(void *) {
    // Ignores its cancellation: sleeps shielded for ever.
    fern_cancel_shield(1);
    for (;;) fern_sleep_ns(ms(10));
}
fern_cluster *g_other;
void *migrator(void *) {
    fern_cluster *home = fern_current_cluster();
    for (;;) {
        fern_migrate(g_other);
        fern_migrate(home);
    }
}
int g_pipe[2];
void *reader(void *) {
    char b;
    fern_read(g_pipe[0], &b, 1); // fails with ECANCELED
    return nullptr;
}

void spawn_n(int n, fern_fn fn, const char *name) {
    for (int i = 0; i < n; i++) {
        fern_attr a{};
        a.name = name;
        a.detached = true;
        if (fern_spawn(nullptr, &a, fn, nullptr)) _exit(6);
    }
}

TEST(ShutdownDeathTest, YieldersAreDestroyed) {
    for (bool pre : {true, false})
        expect_case(pre ? "8 yielders, preemption on" : "8 yielders, preemption off", pre,
                    [] { spawn_n(8, yielder, "yielder"); }, "\"yielder\", runnable");
}

TEST(ShutdownDeathTest, SpinnersPreemptedAreDestroyed) {
    expect_case("4 spinners, preemption on", true, [] { spawn_n(4, spinner, "spinner"); },
                "\"spinner\"");
}

TEST(ShutdownDeathTest, SpinnersNotPreemptibleAreLeftRunning) {
    expect_case("2 spinners, preemption off", false, [] { spawn_n(2, spinner, "spinner"); },
                "neither leaves the CPU nor can be preempted");
}

TEST(ShutdownDeathTest, SleepersEndWhenCancelled) {
    for (bool pre : {true, false}) {
        for (int run = 0; run < 3; run++) {
            Outcome o = in_child([&] { shutdown_case(pre, [] { spawn_n(100, sleeper, "sleeper"); }); },
                                 (int)kGraceMs + 10000);
            EXPECT_FALSE(o.killed) << o.err;
            EXPECT_EQ(std::string::npos, o.err.find("destroying")) << "cancelled sleepers ended:\n"
                                                                   << o.err;
            // They end at once: no grace period spent.
            EXPECT_GE(took_ms(o.err), 0);
            EXPECT_LT(took_ms(o.err), kGraceMs) << o.err;
            std::printf("  100 sleepers, preemption %s run %d: shutdown took %ld ms\n",
                        pre ? "on" : "off", run, took_ms(o.err));
        }
    }
}

TEST(ShutdownDeathTest, StubbornSleepersAreDestroyedAndNamed) {
    expect_case("3 shielded sleepers", true, [] { spawn_n(3, stubborn_sleeper, "stubborn"); },
                "3 green thread(s) had not ended");
    Outcome o = in_child([] { shutdown_case(true, [] { spawn_n(3, stubborn_sleeper, "stubborn"); }); },
                         (int)kGraceMs + 10000);
    EXPECT_NE(std::string::npos, o.err.find("\"stubborn\", parked in sleep")) << o.err;
}

TEST(ShutdownDeathTest, MigratingThreadsAreDestroyed) {
    for (bool pre : {true, false})
        expect_case(pre ? "6 migrators, preemption on" : "6 migrators, preemption off", pre,
                    [] {
                        if (fern_cluster_create(&g_other, 1)) _exit(7);
                        spawn_n(6, migrator, "migrator");
                    },
                    "\"migrator\"");
}

TEST(ShutdownDeathTest, ReadersEndWhenCancelled) {
    Outcome o = in_child(
        [] {
            if (pipe(g_pipe)) _exit(8);
            shutdown_case(true, [] { spawn_n(50, reader, "reader"); });
        },
        (int)kGraceMs + 10000);
    EXPECT_FALSE(o.killed) << o.err;
    EXPECT_EQ(std::string::npos, o.err.find("destroying")) << o.err;
    EXPECT_LT(took_ms(o.err), kGraceMs) << o.err;
}

TEST(ShutdownDeathTest, GraceSettingIsChecked) {
    Outcome o = in_child(
        [] {
            fern_config cfg{};
            cfg.shutdown_grace_ms = -5;
            if (fern_init(&cfg) != EINVAL) _exit(9);
            setenv("FERN_SHUTDOWN_GRACE_MS", "soon", 1);
            if (fern_init(nullptr) != EINVAL) _exit(10);
            setenv("FERN_SHUTDOWN_GRACE_MS", "0", 1); // none: destroy at once
            if (fern_init(nullptr) != 0) _exit(11);
            spawn_n(2, stubborn_sleeper, "stubborn");
            struct timespec nap = {0, 20 * 1000000};
            nanosleep(&nap, nullptr);
            int64_t t0 = fern_now_ns();
            fern_shutdown();
            if (fern_now_ns() - t0 > 500 * 1000000ll) _exit(12);
        },
        10000);
    EXPECT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) << o.status << "\n" << o.err;
    EXPECT_NE(std::string::npos, o.err.find("fern_config.shutdown_grace_ms=\"-5\" is not valid")) << o.err;
    EXPECT_NE(std::string::npos, o.err.find("FERN_SHUTDOWN_GRACE_MS=\"soon\" is not valid")) << o.err;
    EXPECT_NE(std::string::npos, o.err.find("had not ended 0 ms after")) << o.err;
}

// A thread's last switch leaves the redzones of its frames poisoned (under
// AddressSanitizer), and munmap does not clear that shadow: unless fern
// unpoisons its stacks before unmapping them, whatever the process maps
// there later (the next fern_init maps its executable's file to read its
// sections) reads as a stack overflow. Built without ASan this only checks
// that shutdown unmapped the stack.
TEST(Shutdown, LeavesNoStackPoisonWhereStacksWere) {
    ASSERT_EQ(fern_init(nullptr), 0);
    static uintptr_t where;
    fern_thread *t = nullptr;
    ASSERT_EQ(fern_spawn(&t, nullptr, [](void *) -> void * {
                  volatile char local[64];
                  local[0] = 1;
                  where = (uintptr_t)&local[0];
                  fern_yield();
                  return nullptr;
              }, nullptr), 0);
    ASSERT_EQ(fern_join(t, nullptr), 0);
    ASSERT_EQ(fern_shutdown(), 0);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (where & ~(pg - 1)) - 2 * pg;
    size_t len = 5 * pg;
    void *m = mmap((void *)lo, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    ASSERT_EQ(m, (void *)lo) << "the stack's addresses are still mapped after fern_shutdown";
    unsigned long sum = 0;
    for (size_t i = 0; i < len; i += 8) sum += *(volatile unsigned long *)((char *)m + i);
    EXPECT_EQ(sum, 0u);
    munmap(m, len);
}

} // namespace
