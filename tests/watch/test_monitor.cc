// SPDX-License-Identifier: MIT
// The monitor (src/monitor.c): timers and queues of a worker stuck in a
// system call are served elsewhere (issue 17 item 2), compensation workers
// start and end, an idle process stays asleep, configuration errors.
#include "fern_test.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace fern_test;

namespace {

void restart(unsigned workers, long preempt_us) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    fern_config cfg{workers, 0, preempt_us};
    ASSERT_EQ(0, fern_init(&cfg));
}

// Eight green threads sleep 1 ms at a time for `run_ms`; after 50 ms one
// more green thread blocks `block_ms` in a raw read(2) on a pipe, which no
// fern hook sees. Returns the worst lateness of any sleep, in ms.
double stuck_syscall_lateness(int run_ms, int block_ms) {
    int fds[2];
    EXPECT_EQ(0, pipe(fds));
    std::atomic<int64_t> worst{0};
    std::atomic<bool> stop{false};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 8; i++) {
        fern_thread *t;
        EXPECT_EQ(0, spawn(&t, nullptr, [&] {
                      while (!stop.load()) {
                          int64_t t0 = fern_now_ns();
                          fern_sleep_ns(ms(1));
                          int64_t late = fern_now_ns() - t0 - ms(1);
                          int64_t w = worst.load();
                          while (late > w && !worst.compare_exchange_weak(w, late)) {
                          }
                      }
                  }));
        ts.push_back(t);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fern_thread *blocker;
    EXPECT_EQ(0, spawn(&blocker, nullptr, [&] {
                  char c;
                  EXPECT_EQ(1, syscall(SYS_read, fds[0], &c, 1));
              }));
    std::this_thread::sleep_for(std::chrono::milliseconds(block_ms));
    EXPECT_EQ(1, write(fds[1], "x", 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max(0, run_ms - block_ms - 50)));
    stop = true;
    EXPECT_EQ(0, fern_join(blocker, nullptr));
    for (auto t : ts) EXPECT_EQ(0, fern_join(t, nullptr));
    close(fds[0]);
    close(fds[1]);
    return worst.load() / 1e6;
}

// The bound says "not stranded for the length of the system call" (1 s, or
// 0.4 s), with room for a loaded 2-core CI machine (this suite saw 91 ms once
// at load average 18) and the sanitizers; the 40 ms target is measured by
// bench/fern_preempt (late_stuck2_ms).
double lateness_bound_ms() {
    const char *s = std::getenv("FERN_STRESS_SCALE");
    return s && std::strtod(s, nullptr) < 1 ? 600.0 : 250.0;
}

} // namespace

// Issue 17, item 2: two workers, one stuck 1 s in a raw system call, eight
// 1 ms sleepers, preemption off: a sleeper whose timer sits on the stuck
// worker is woken by the monitor and run by the other worker.
TEST(Monitor, StuckWorkerStrandsNoTimerPreemptionOff) {
    restart(2, FERN_PREEMPT_OFF);
    Watchdog wd(60);
    double worst = 0;
    for (int run = 0; run < 3; run++) worst = std::max(worst, stuck_syscall_lateness(1300, 1000));
    RecordProperty("worst_ms", std::to_string(worst));
    std::printf("worst lateness %.1f ms\n", worst);
    EXPECT_LE(worst, lateness_bound_ms());
    ASSERT_EQ(0, fern_shutdown());
}

TEST(Monitor, StuckWorkerStrandsNoTimerPreemptionOn) {
    restart(2, 0);
    Watchdog wd(60);
    double worst = stuck_syscall_lateness(1300, 1000);
    EXPECT_LE(worst, lateness_bound_ms());
    ASSERT_EQ(0, fern_shutdown());
}

// One worker: nobody else can run the sleepers, so a compensation worker
// starts; once the system call returns and the spare has nothing to do, it
// ends.
TEST(Monitor, OneWorkerGetsASpareThatEnds) {
    restart(1, FERN_PREEMPT_OFF);
    Watchdog wd(60);
    double worst = stuck_syscall_lateness(600, 400);
    EXPECT_LE(worst, lateness_bound_ms());
    struct fern_stats s;
    ASSERT_EQ(0, fern_stats(&s));
    EXPECT_GE(s.spares_started, 1u);
    EXPECT_LE(s.spares_started, 3u) << "a spare per stuck episode, not per tick";
    EXPECT_TRUE(wait_until([] {
        struct fern_stats st;
        return fern_stats(&st) == 0 && st.workers == 1;
    })) << "the spare did not end once idle";
    ASSERT_EQ(0, fern_shutdown());
}

namespace {

std::string dump_text() {
    char *buf = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    EXPECT_NE(nullptr, f);
    if (!f) return "";
    EXPECT_GE(fern_dump(f), 0);
    fclose(f);
    std::string out(buf, len);
    free(buf);
    return out;
}

// fern_dump's worker counts agree: the header's workers, the cluster's
// workers (its live ones, spares included), its worker lines, and no more
// idle than workers. Returns the cluster's count.
long dump_counts_agree(const std::string &out) {
    long header = -1, cluster = -1, idle = -1, lines = 0;
    EXPECT_EQ(1, std::sscanf(out.c_str(), "fern: %*u live threads, %*u clusters, %ld workers",
                             &header))
        << out;
    size_t at = out.find("(default): ");
    EXPECT_NE(std::string::npos, at) << out;
    if (at == std::string::npos) return -1;
    EXPECT_EQ(1, std::sscanf(out.c_str() + at, "(default): %ld workers", &cluster)) << out;
    size_t comma = out.find(", ", at + 11);
    EXPECT_EQ(1, std::sscanf(out.c_str() + comma, ", %ld idle", &idle)) << out;
    for (size_t p = out.find("\n  worker "); p != std::string::npos; p = out.find("\n  worker ", p + 1))
        lines++;
    EXPECT_EQ(header, cluster) << out;
    EXPECT_EQ(cluster, lines) << out;
    EXPECT_LE(idle, cluster) << out;
    return cluster;
}

} // namespace

// Issue 30, item 7: once spares have started and ended, fern_dump counted
// their empty slots as workers ("6 workers, 2 idle" under a header of 2).
TEST(Monitor, DumpCountsOnlyLiveWorkers) {
    restart(2, FERN_PREEMPT_OFF);
    Watchdog wd(60);
    struct fern_stats s0, s1;
    ASSERT_EQ(0, fern_stats(&s0));
    // Both workers and then the spares block in the kernel (no fern hook:
    // usleep sleeps there), so the monitor starts spares.
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 12; i++) {
        fern_thread *t;
        ASSERT_EQ(0, spawn(&t, nullptr, [] { usleep(100000); }));
        ts.push_back(t);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    // While spares run: the counts agree too (a spare shown is counted).
    dump_counts_agree(dump_text());
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_GE(s1.spares_started - s0.spares_started, 1u) << "no spare started: nothing tested";
    EXPECT_TRUE(wait_until([] {
        struct fern_stats st;
        return fern_stats(&st) == 0 && st.workers == 2;
    })) << "the spares did not end once idle";
    std::string out = dump_text();
    EXPECT_EQ(2, dump_counts_agree(out));
    EXPECT_EQ(std::string::npos, out.find("spare")) << out;
    ASSERT_EQ(0, fern_shutdown());
}

// Issue 30, item 2, the monitor's part (watch_poller): the poll owner
// leaves epoll_wait to run a thread that then blocks in the kernel (a raw
// read(2), which no fern hook sees), and no other worker is idle to take
// the role. A reader parked in fern_read must still be woken when its pipe
// is written: the monitor polls once the role has been vacant 10 ms, the
// reader lands in the inbox, and compensation runs it. Before, it waited
// for the blocked thread (1 s here).
TEST(Monitor, ReaderWakesWhileThePollOwnerIsBlockedInTheKernel) {
    restart(1, FERN_PREEMPT_OFF);
    Watchdog wd(60);
    int rfd[2], bfd[2];
    ASSERT_EQ(0, pipe(rfd));
    ASSERT_EQ(0, pipe(bfd));
    std::atomic<int64_t> woke{0};
    fern_thread *reader, *blocker;
    ASSERT_EQ(0, spawn(&reader, nullptr, [&] {
                  char c;
                  EXPECT_EQ(1, fern_read(rfd[0], &c, 1));
                  woke = fern_now_ns();
              }));
    // The worker goes idle and owns the poller; the blocker wakes it and
    // holds it in the kernel.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::atomic<bool> blocking{false};
    ASSERT_EQ(0, spawn(&blocker, nullptr, [&] {
                  blocking = true;
                  char c;
                  EXPECT_EQ(1, syscall(SYS_read, bfd[0], &c, 1));
              }));
    while (!blocking.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int64_t wrote = fern_now_ns();
    ASSERT_EQ(1, write(rfd[1], "x", 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    int64_t at = woke.load();
    ASSERT_EQ(1, write(bfd[1], "x", 1));
    ASSERT_EQ(0, fern_join(blocker, nullptr));
    ASSERT_EQ(0, fern_join(reader, nullptr));
    EXPECT_NE(0, at) << "the reader slept until the blocked thread returned";
    if (at) {
        EXPECT_LE((at - wrote) / 1e6, lateness_bound_ms());
    }
    for (int fd : {rfd[0], rfd[1], bfd[0], bfd[1]}) close(fd);
    ASSERT_EQ(0, fern_shutdown());
}

// A worker stuck with threads queued behind it (not timers): they are moved
// and run elsewhere.
TEST(Monitor, QueuedThreadsOfAStuckWorkerRun) {
    restart(1, FERN_PREEMPT_OFF);
    Watchdog wd(60);
    int fds[2];
    ASSERT_EQ(0, pipe(fds));
    std::atomic<int> ran{0};
    std::atomic<int64_t> ran_at{0};
    int64_t t0 = fern_now_ns();
    ASSERT_EQ(0, run_green([&] {
                  fern_thread *blocker;
                  EXPECT_EQ(0, spawn(&blocker, nullptr, [&] {
                                char c;
                                EXPECT_EQ(1, syscall(SYS_read, fds[0], &c, 1));
                            }));
                  fern_yield(); // the blocker runs and blocks the only worker
                  // Not reached until a spare runs this thread, since the
                  // blocker holds the worker: we were queued behind it.
                  ran = 1;
                  ran_at = fern_now_ns();
                  EXPECT_EQ(1, write(fds[1], "x", 1));
                  EXPECT_EQ(0, fern_join(blocker, nullptr));
              }));
    EXPECT_EQ(1, ran.load());
    EXPECT_LT(ran_at.load() - t0, ms(1000)) << "the queued thread waited for the system call";
    close(fds[0]);
    close(fds[1]);
    ASSERT_EQ(0, fern_shutdown());
}

// An idle runtime (no timers, nothing runnable) costs no CPU: the monitor
// sleeps without a periodic tick, like the workers.
TEST(Monitor, IdleProcessUsesNoCpu) {
    restart(2, 0);
    ASSERT_EQ(0, run_green([] { fern_sleep_ns(ms(20)); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    struct rusage a, b;
    auto per0 = thread_cpu();
    getrusage(RUSAGE_SELF, &a);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    getrusage(RUSAGE_SELF, &b);
    auto per1 = thread_cpu();
    auto us = [](const struct rusage &r) {
        return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000L + r.ru_utime.tv_usec +
               r.ru_stime.tv_usec;
    };
#if defined(FERN_TEST_EMULATED) || defined(__SANITIZE_THREAD__)
    // qemu-user itself: 3.4-4.7 ms per 500 ms for a program of five threads
    // all blocked (measured), which left the runtime ~1 ms of the native
    // bound (6 of 10 runs failed, the session-start code as often). Under
    // ThreadSanitizer this window measured 3.4-9.6 ms on a noisy host, for
    // the session-start code as for the current one (0.5-1.9 ms natively).
    const long bound = 12000;
#else
    const long bound = 5000;
#endif
    EXPECT_LT(us(b) - us(a), bound) << "CPU used by an idle runtime in 500 ms, us; by thread: "
                                    << thread_cpu_delta(per0, per1);
    ASSERT_EQ(0, fern_shutdown());
}

TEST(Monitor, ConfigErrors) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    fern_config cfg{1, 0, FERN_PREEMPT_MIN_US - 1};
    EXPECT_EQ(EINVAL, fern_init(&cfg));
    cfg.preempt_us = FERN_PREEMPT_MAX_US + 1;
    EXPECT_EQ(EINVAL, fern_init(&cfg));
    cfg.preempt_us = -2;
    EXPECT_EQ(EINVAL, fern_init(&cfg));
    cfg.preempt_us = 0;
    setenv("FERN_PREEMPT_US", "12x", 1);
    EXPECT_EQ(EINVAL, fern_init(&cfg));
    setenv("FERN_PREEMPT_US", "50", 1);
    EXPECT_EQ(EINVAL, fern_init(&cfg)) << "below FERN_PREEMPT_MIN_US";
    unsetenv("FERN_PREEMPT_US");
    setenv("FERN_PREEMPT", "maybe", 1);
    EXPECT_EQ(EINVAL, fern_init(&cfg));
    setenv("FERN_PREEMPT", "0", 1);
    EXPECT_EQ(0, fern_init(&cfg));
    EXPECT_EQ(0, fern_shutdown());
    unsetenv("FERN_PREEMPT");
    cfg.preempt_us = FERN_PREEMPT_MIN_US;
    EXPECT_EQ(0, fern_init(&cfg));
    EXPECT_EQ(0, fern_shutdown());
}

// fern_dump says how long each running thread has run, and marks spares.
TEST(Monitor, DumpShowsRunningTime) {
    restart(1, FERN_PREEMPT_OFF);
    std::atomic<bool> stop{false};
    fern_thread *t;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
                  while (!stop.load(std::memory_order_relaxed)) {
                  }
              }));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    char *buf = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ASSERT_NE(nullptr, f);
    EXPECT_GE(fern_dump(f), 1);
    fclose(f);
    std::string out(buf, len);
    free(buf);
    stop = true;
    ASSERT_EQ(0, fern_join(t, nullptr));
    std::string want = "running thread " + std::to_string(fern_thread_id(t)) + " for ";
    size_t at = out.find(want);
    ASSERT_NE(std::string::npos, at) << out;
    long ran_ms = std::strtol(out.c_str() + at + want.size(), nullptr, 10);
    EXPECT_GE(ran_ms, 100) << out;
    EXPECT_LT(ran_ms, 5000) << out;
    ASSERT_EQ(0, fern_shutdown());
}

namespace {

// Arithmetic in the caller's own code (preemptible) for `ns`.
uint64_t spin_app_code(uint64_t x, int64_t ns) {
    int64_t end = fern_now_ns() + ns;
    while (fern_now_ns() < end)
        for (int k = 0; k < 1000; k++) x = x * 6364136223846793005ull + 1;
    return x;
}

// A green thread takes a std::mutex (a kernel-side lock, invisible to fern)
// and runs `hold` with it held; then 20 more, spawned from this plain thread
// (so into the inbox), each take it. All must finish.
void holder_and_takers(uint64_t (*hold)()) {
    std::mutex mu;
    std::atomic<bool> locked{false};
    std::atomic<int> done{0};
    fern_thread *holder;
    ASSERT_EQ(0, spawn(&holder, nullptr, [&] {
                  std::lock_guard<std::mutex> g(mu);
                  locked = true;
                  return (void *)(uintptr_t)hold();
              }));
    while (!locked.load()) std::this_thread::yield();
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 20; i++) {
        fern_thread *t;
        ASSERT_EQ(0, spawn(&t, nullptr, [&] {
                      std::lock_guard<std::mutex> g(mu);
                      done++;
                  }));
        ts.push_back(t);
    }
    ASSERT_EQ(0, fern_join(holder, nullptr));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(20, done.load());
}

} // namespace

// A green thread preempted while it holds a pthread mutex, on a worker that
// then blocks in the kernel on that mutex (the next thread it ran wants it
// too), with many more such threads queued in the inbox: the rescue puts
// the preempted holder at the front of the inbox, so the first spare runs it
// and the lock is released. Behind the queue, every spare (at most 4) would
// take a thread that blocks on the mutex too, and nothing would ever run
// the holder (a hang first seen under qemu-user in test_blocking).
TEST(Monitor, PreemptedPthreadMutexHolderIsRescuedFirst) {
    restart(1, 0);
    Watchdog wd(60, "PreemptedPthreadMutexHolderIsRescuedFirst");
    // Several slices, in application code.
    holder_and_takers([] { return spin_app_code(1, ms(100)); });
    ASSERT_EQ(0, fern_shutdown());
}

// A thread rescued from a worker asleep in the kernel runs unpreempted on
// the worker that takes it, but not for ever when that worker has threads
// of its own preempted there (they can run nowhere else). Four spinners on
// two workers (each worker runs one and has one or more pinned) and a fifth
// thread that blocks in a raw read(2): its worker sleeps with spinners
// pinned, they are rescued, and the other worker, woken for them, runs one.
// Every spinner must keep making progress; a rescued spinner that was never
// preempted again starved the pinned spinners of the worker it landed on.
TEST(Monitor, RescuedSpinnerDoesNotStarvePinnedThreads) {
    if (!kAsyncPreempt) GTEST_SKIP() << kNoPreemptMsg;
    if (kTsan) GTEST_SKIP() << "ThreadSanitizer: cooperative preemption only";
    restart(2, 2000);
    Watchdog wd(60, "RescuedSpinnerDoesNotStarvePinnedThreads");
    int fds[2];
    ASSERT_EQ(0, pipe(fds));
    constexpr int kSpinners = 4;
    std::atomic<uint64_t> count[kSpinners] = {};
    std::atomic<bool> stop{false};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < kSpinners; i++) {
        fern_thread *t;
        ASSERT_EQ(0, spawn(&t, nullptr, [&, i] {
                      while (!stop.load(std::memory_order_relaxed))
                          count[i].fetch_add(1, std::memory_order_relaxed);
                  }));
        ts.push_back(t);
    }
    // Until every spinner has run: each worker has one running, others pinned.
    for (int i = 0; i < kSpinners; i++)
        while (count[i].load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    fern_thread *blocker;
    std::atomic<bool> blocking{false};
    ASSERT_EQ(0, spawn(&blocker, nullptr, [&] {
                  blocking = true;
                  char c;
                  EXPECT_EQ(1, syscall(SYS_read, fds[0], &c, 1));
              }));
    while (!blocking.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // The rescue comes a few slices after the blocker's worker fell asleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    uint64_t before[kSpinners];
    for (int i = 0; i < kSpinners; i++) before[i] = count[i].load();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    int starved = 0;
    for (int i = 0; i < kSpinners; i++) starved += count[i].load() == before[i];
    EXPECT_EQ(0, starved) << "spinners that made no progress in 300 ms with the blocker asleep";
    ASSERT_EQ(1, write(fds[1], "x", 1));
    stop = true;
    ASSERT_EQ(0, fern_join(blocker, nullptr));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    close(fds[0]);
    close(fds[1]);
    ASSERT_EQ(0, fern_shutdown());
}

// The holder of a kernel-side lock first runs long inside libc, where
// preemption cannot stop it: every worker the monitor adds meanwhile (up
// to the 4 spares) takes a thread that blocks on the lock. Then the holder,
// back in its own code, is preempted, its worker runs one more such thread
// and sleeps too: the rescue puts the holder at the front of the inbox, but
// every worker, spares included, sleeps in the kernel. A rescue spare, over
// the limit, runs it; before, the program hung.
TEST(Monitor, RescuedHolderRunsWhenEverySpareIsBlocked) {
    if (!kAsyncPreempt) GTEST_SKIP() << kNoPreemptMsg;
    if (kTsan) GTEST_SKIP() << "ThreadSanitizer: cooperative preemption only";
    Watchdog wd(60, "RescuedHolderRunsWhenEverySpareIsBlocked");
    // Under qemu-user the scenario does not always form (a spare short: 4
    // started, in 2 of 44 emulated runs, and in 1 of 30 for the code before
    // session 16): up to three attempts, each in a fresh runtime, of which
    // one must form it; a hang in any of them fails the test.
    struct fern_stats s;
    for (int attempt = 0; attempt < 3; attempt++) {
        restart(1, 0);
        holder_and_takers([] {
            // In libc (not preemptible) until the spares are all taken...
            static char zeros[1 << 20];
            int64_t end = fern_now_ns() + ms(400) * kLatenessScale;
            uint64_t found = 0;
            while (fern_now_ns() < end) found += memchr(zeros, 1, sizeof zeros) != nullptr;
            // ...then in its own code, where it is preempted.
            return spin_app_code(found, ms(100));
        });
        ASSERT_EQ(0, fern_stats(&s));
        std::printf("attempt %d: spares started %llu, preemptions %llu, deferred %llu\n", attempt,
                    (unsigned long long)s.spares_started, (unsigned long long)s.preemptions,
                    (unsigned long long)s.preemptions_deferred);
        if (s.spares_started >= 5) break;
    }
    // The scenario happened: the four spares, and one over the limit.
    EXPECT_GE(s.spares_started, 5u);
    // Once they have ended, ordinary compensation (eight threads blocked in
    // a raw read, nothing rescued) still stops at 4 spares: the rescue
    // spare's slot is not reused for it.
    ASSERT_TRUE(wait_until([&] { return fern_stats(&s) == 0 && s.workers == 1; }, 5000)) << s.workers;
    int fds[2];
    ASSERT_EQ(0, pipe(fds));
    std::vector<fern_thread *> blockers;
    for (int i = 0; i < 8; i++) {
        fern_thread *t;
        ASSERT_EQ(0, spawn(&t, nullptr, [&] {
                      char c;
                      EXPECT_EQ(1, syscall(SYS_read, fds[0], &c, 1));
                  }));
        blockers.push_back(t);
    }
    EXPECT_TRUE(wait_until([&] { return fern_stats(&s) == 0 && s.workers >= 5; }, 5000 * kLatenessScale));
    uint32_t most = s.workers;
    for (int i = 0; i < 40; i++) { // a spare starts every few ticks: room for more
        std::this_thread::sleep_for(std::chrono::milliseconds(5 * kLatenessScale));
        ASSERT_EQ(0, fern_stats(&s));
        most = std::max(most, s.workers);
    }
    EXPECT_EQ(5u, most) << "1 worker and at most 4 ordinary spares";
    ASSERT_EQ(8, write(fds[1], "xxxxxxxx", 8));
    for (auto t : blockers) ASSERT_EQ(0, fern_join(t, nullptr));
    close(fds[0]);
    close(fds[1]);
    ASSERT_EQ(0, fern_shutdown());
}
