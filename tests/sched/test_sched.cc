// SPDX-License-Identifier: MIT
// Scheduler: init/run/shutdown cycles, FERN_WORKERS / FERN_STACK_SIZE,
// many threads on several workers, spreading, idle CPU, wake-ups of sleeping
// workers from plain threads, fairness of hand-offs, shutdown with parked
// threads.
#include "fern_test.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

using namespace fern_test;

namespace {

thread_local int t_worker_marker;
__attribute__((noipa)) const void *worker_identity() { return &t_worker_marker; }

void *noop(void *arg) { return arg; }

void stop_runtime() {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
}

unsigned cpu_count_affinity() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    return (unsigned)CPU_COUNT(&set);
}

// Restores an environment variable at scope exit.
struct EnvGuard {
    std::string name, old;
    bool had;
    explicit EnvGuard(const char *n) : name(n) {
        const char *v = getenv(n);
        had = v != nullptr;
        if (had) old = v;
    }
    ~EnvGuard() {
        if (had) setenv(name.c_str(), old.c_str(), 1);
        else unsetenv(name.c_str());
    }
};

TEST(Sched, InitRunShutdownCycles) {
    stop_runtime();
    for (int cycle = 0; cycle < 12; cycle++) {
        unsigned w = 1 + cycle % 4;
        fern_config cfg{w, 0, 0};
        ASSERT_EQ(0, fern_init(&cfg)) << cycle;
        ASSERT_NE(nullptr, fern_cluster_default());
        EXPECT_EQ(w, fern_cluster_workers(fern_cluster_default()));
        struct fern_stats s;
        ASSERT_EQ(0, fern_stats(&s));
        EXPECT_EQ(1u, s.clusters);
        EXPECT_EQ(w, s.workers);
        EXPECT_EQ(0u, s.threads_spawned) << "counters restart with the runtime";
        std::vector<fern_thread *> ts(100);
        for (auto &t : ts) ASSERT_EQ(0, fern_spawn(&t, nullptr, noop, (void *)(intptr_t)cycle));
        for (auto t : ts) {
            void *r = nullptr;
            ASSERT_EQ(0, fern_join(t, &r));
            EXPECT_EQ((void *)(intptr_t)cycle, r);
        }
        if (cycle % 3 == 0) {
            fern_cluster *c = nullptr;
            ASSERT_EQ(0, fern_cluster_create(&c, 2));  // left for shutdown to stop
        }
        ASSERT_EQ(0, fern_shutdown()) << cycle;
        EXPECT_EQ(nullptr, fern_cluster_default());
        EXPECT_EQ(EINVAL, fern_shutdown());
        struct fern_stats s2;
        EXPECT_EQ(EINVAL, fern_stats(&s2));
    }
}

TEST(Sched, RunBootsRuntimeWithDefaults) {
    stop_runtime();
    EnvGuard g1("FERN_WORKERS"), g2("FERN_STACK_SIZE");
    unsetenv("FERN_WORKERS");
    unsetenv("FERN_STACK_SIZE");
    void *r = nullptr;
    ASSERT_EQ(0, fern_run(noop, (void *)3, &r));
    EXPECT_EQ((void *)3, r);
    ASSERT_NE(nullptr, fern_cluster_default());
    unsigned w = fern_cluster_workers(fern_cluster_default());
    unsigned online = (unsigned)sysconf(_SC_NPROCESSORS_ONLN), aff = cpu_count_affinity();
    EXPECT_TRUE(w == online || w == aff) << w << " workers; CPUs online " << online << ", affinity " << aff;
    // fern_spawn boots it too.
    stop_runtime();
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, noop, nullptr));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_TRUE(runtime_running());
    // So does fern_go.
    stop_runtime();
    std::atomic<int> ran{0};
    ASSERT_EQ(0, go([&] { ran++; }));
    EXPECT_TRUE(wait_until([&] { return ran.load() == 1; }));
}

TEST(Sched, FernWorkersEnv) {
    stop_runtime();
    EnvGuard g1("FERN_WORKERS");
    setenv("FERN_WORKERS", "3", 1);
    ASSERT_EQ(0, fern_init(nullptr));
    EXPECT_EQ(3u, fern_cluster_workers(fern_cluster_default()));
    stop_runtime();
    fern_config cfg{0, 0, 0};
    ASSERT_EQ(0, fern_init(&cfg));
    EXPECT_EQ(3u, fern_cluster_workers(fern_cluster_default()));
    stop_runtime();
    cfg.workers = 2;  // explicit config wins
    ASSERT_EQ(0, fern_init(&cfg));
    EXPECT_EQ(2u, fern_cluster_workers(fern_cluster_default()));
    stop_runtime();
    ASSERT_EQ(0, fern_run(noop, nullptr, nullptr));
    EXPECT_EQ(3u, fern_cluster_workers(fern_cluster_default()));
    stop_runtime();
    setenv("FERN_WORKERS", "100000", 1);
    EXPECT_EQ(EINVAL, fern_init(nullptr));
    EXPECT_FALSE(runtime_running());
    EXPECT_EQ(EINVAL, fern_run(noop, nullptr, nullptr)) << "fern_run reports fern_init's error";
    EXPECT_FALSE(runtime_running());
}

TEST(Sched, FernStackSizeEnv) {
    stop_runtime();
    EnvGuard g1("FERN_STACK_SIZE");
    setenv("FERN_STACK_SIZE", "1024", 1);
    EXPECT_EQ(EINVAL, fern_init(nullptr));
    EXPECT_FALSE(runtime_running());
    setenv("FERN_STACK_SIZE", "4294967296000", 1);
    EXPECT_EQ(EINVAL, fern_init(nullptr));
    EXPECT_FALSE(runtime_running());
    setenv("FERN_STACK_SIZE", "262144", 1);
    ASSERT_EQ(0, fern_init(nullptr));
    ASSERT_EQ(0, fern_run(noop, nullptr, nullptr));
    stop_runtime();
    // An explicit config stack size is used instead of the environment.
    setenv("FERN_STACK_SIZE", "1024", 1);
    fern_config cfg{1, 65536, 0};
    EXPECT_EQ(0, fern_init(&cfg));
    stop_runtime();
}

TEST(Sched, MaxWorkers) {
    stop_runtime();
    fern_config cfg{FERN_WORKERS_MAX, 0, 0};
    ASSERT_EQ(0, fern_init(&cfg));
    EXPECT_EQ(FERN_WORKERS_MAX, fern_cluster_workers(fern_cluster_default()));
    std::atomic<int> ran{0};
    std::vector<fern_thread *> ts(512);
    for (auto &t : ts) ASSERT_EQ(0, spawn(&t, nullptr, [&] { ran++; }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(512, ran.load());
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, FERN_WORKERS_MAX));
    EXPECT_EQ(0, fern_cluster_destroy(c));
    stop_runtime();
}

TEST(Sched, ManyThreadsOnSeveralWorkersComplete) {
    Watchdog wd(120, "ManyThreadsOnSeveralWorkersComplete");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 4));
    const int N = (int)scaled(20000, 2000);
    std::atomic<long> sum{0};
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], (i % 3) ? c : nullptr, [&, i] {
            for (int k = 0; k < 3; k++) {
                sum += i;
                fern_yield();
            }
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(3L * N * (N - 1) / 2, sum.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// CPU-bound threads spawned from a plain thread onto a 4-worker cluster end up
// running on all 4 workers (idle workers are woken and steal). Each thread
// notes its worker, then spins until all 4 have been seen (or 5 s pass): the
// threads not yet run stay queued until an idle worker takes one, however
// the kernel schedules the workers. (With each thread spinning a fixed 3 ms
// instead, a TSan build on 2 CPUs sometimes had three workers absorb all 64
// as they came, and the fourth never found one queued: 5 runs in 30.)
TEST(Sched, WorkSpreadsToAllWorkers) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 4));
    std::set<const void *> seen;
    std::atomic<size_t> nseen{0};
    std::mutex mu;
    int64_t deadline = 0;
    auto note_and_spin = [&] {
        {
            std::lock_guard<std::mutex> lk(mu);
            seen.insert(worker_identity());
            nseen.store(seen.size());
        }
        while (nseen.load() < 4 && fern_now_ns() < deadline) {
        }
    };
    constexpr int N = 64;
    std::vector<fern_thread *> ts(N);
    deadline = fern_now_ns() + ms(5000);
    for (int i = 0; i < N; i++) ASSERT_EQ(0, spawn_on(&ts[i], c, note_and_spin));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    // At least the 4 workers; a spinner that is not preempted (ThreadSanitizer
    // preempts only at fern calls) can also earn a compensation worker.
    EXPECT_GE(seen.size(), 4u) << "threads ran on only " << seen.size() << " of 4 workers";
    // Also when a green thread spawns them (local queue of one worker).
    seen.clear();
    nseen.store(0);
    deadline = fern_now_ns() + ms(5000);
    fern_thread *parent = nullptr;
    ASSERT_EQ(0, spawn_on(&parent, c, [&] {
        std::vector<fern_thread *> kids(N);
        for (auto &k : kids) EXPECT_EQ(0, spawn(&k, nullptr, note_and_spin));
        for (auto k : kids) EXPECT_EQ(0, fern_join(k, nullptr));
    }));
    ASSERT_EQ(0, fern_join(parent, nullptr));
    EXPECT_GE(seen.size(), 4u) << "children of one thread stayed on " << seen.size() << " of 4 workers";
    struct fern_stats s;
    ASSERT_EQ(0, fern_stats(&s));
    EXPECT_GT(s.steals, 0u);
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// fern's kernel threads carry names (top, gdb, perf and the idle tests'
// per-thread breakdown tell them apart): fern-worker, fern-monitor,
// fern-blocking once the blocking pool has run something.
TEST(Sched, KernelThreadsAreNamed) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 3));
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, c, [] { fern_blocking([](void *a) { return a; }, nullptr); }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    std::map<std::string, int> names;
    auto count = [&] {
        names.clear();
        for (const auto &kv : thread_cpu()) names[kv.second.name]++;
    };
    count();
    auto list = [&] {
        std::string s;
        for (const auto &kv : names) s += kv.first + " x" + std::to_string(kv.second) + "; ";
        return s;
    };
    EXPECT_GE(names["fern-worker"], 3) << list();
    EXPECT_EQ(names["fern-monitor"], 1) << list();
    EXPECT_GE(names["fern-blocking"], 1) << list();
    EXPECT_EQ(0, fern_cluster_destroy(c));
    count();
    EXPECT_GE(names["fern-worker"], 1) << "the default cluster's workers: " << list();
}

double cpu_seconds() {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

// With every green thread parked (on a cond, on a long timed wait, on a
// sleep), the process uses ~0% CPU.
TEST(Sched, IdleProcessUsesNoCpu) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 3));
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    bool release = false;
    std::atomic<int> parked{0};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 100; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, (i & 1) ? c : nullptr, [&, i] {
            fern_mutex_lock(&m);
            parked++;
            while (!release) {
                if (i % 10 == 0) fern_cond_timedwait(&cv, &m, fern_now_ns() + ms(10000));
                else fern_cond_wait(&cv, &m);
            }
            fern_mutex_unlock(&m);
        }));
        ts.push_back(t);
    }
    fern_thread *sleeper = nullptr;
    ASSERT_EQ(0, spawn_on(&sleeper, c, [] { fern_sleep_ns(ms(800)); }));
    ASSERT_TRUE(wait_until([&] { return parked.load() == 100; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let workers go idle
    struct fern_stats s0, s1;
    ASSERT_EQ(0, fern_stats(&s0));
    auto per0 = thread_cpu();
    double c0 = cpu_seconds();
    int64_t t0 = fern_now_ns();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    double used = cpu_seconds() - c0;
    double wall = (double)(fern_now_ns() - t0) / 1e9;
    auto per1 = thread_cpu();
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_LT(used, 0.03) << "idle process used " << used * 1000 << " ms CPU in " << wall * 1000
                          << " ms; by thread: " << thread_cpu_delta(per0, per1);
    EXPECT_EQ(s0.switches, s1.switches) << "workers kept switching while everything was parked";
    EXPECT_GT(s1.worker_sleeps, 0u);
    fern_mutex_lock(&m);
    release = true;
    fern_cond_broadcast(&cv);
    fern_mutex_unlock(&m);
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    ASSERT_EQ(0, fern_join(sleeper, nullptr));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// A plain pthread's signal / spawn / unlock reaches a worker that is asleep.
TEST(Sched, WakeupsFromPlainThreadsReachSleepingWorkers) {
    Watchdog wd(60, "WakeupsFromPlainThreadsReachSleepingWorkers");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    int seq = 0;
    std::atomic<int64_t> woke_at{0};
    constexpr int ROUNDS = 25;
    fern_thread *w = nullptr;
    ASSERT_EQ(0, spawn_on(&w, c, [&] {
        fern_mutex_lock(&m);
        for (int r = 1; r <= ROUNDS; r++) {
            while (seq < r) fern_cond_wait(&cv, &m);
            woke_at = fern_now_ns();
        }
        fern_mutex_unlock(&m);
    }));
    int64_t worst = 0;
    for (int r = 1; r <= ROUNDS; r++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the worker sleeps
        fern_mutex_lock(&m);
        int64_t t0 = fern_now_ns();
        seq = r;
        fern_cond_signal(&cv);
        fern_mutex_unlock(&m);
        while (woke_at.load() < t0) std::this_thread::yield();
        worst = std::max(worst, woke_at.load() - t0);
    }
    ASSERT_EQ(0, fern_join(w, nullptr));
    // A lateness bound: stretched under emulation (kLatenessScale).
    EXPECT_LT(worst, ms(50) * kLatenessScale) << "wake-up from a plain thread took " << worst / 1000 << " us";

    // Spawn onto an idle cluster from a plain thread: it starts promptly.
    worst = 0;
    for (int r = 0; r < 20; r++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::atomic<int64_t> started{0};
        int64_t t0 = fern_now_ns();
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, c, [&] { started = fern_now_ns(); }));
        while (started.load() == 0) std::this_thread::yield();
        worst = std::max(worst, started.load() - t0);
        ASSERT_EQ(0, fern_join(t, nullptr));
    }
    EXPECT_LT(worst, ms(50)) << "spawn onto an idle cluster took " << worst / 1000 << " us to run";

    // A plain thread unlocking a mutex a parked green thread waits for.
    ASSERT_EQ(0, fern_mutex_lock(&m));
    std::atomic<int64_t> got{0};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, c, [&] {
        fern_mutex_lock(&m);
        got = fern_now_ns();
        fern_mutex_unlock(&m);
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int64_t t0 = fern_now_ns();
    ASSERT_EQ(0, fern_mutex_unlock(&m));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_LT(got.load() - t0, ms(50));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// The CPU time of the calling kernel thread (a green thread's worker).
int64_t thread_cpu_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// A hand-off left behind a busy thread, for the two tests below: one thread
// waits; another posts (the waiter goes to the poster's hand-off slot) and
// then computes for 8 ms of its worker's CPU time, less than a time slice,
// so no preemption lets the waiter run there. The waiter can run before the
// computation ends only if the idle worker steals it. The computation is
// measured in CPU time, not wall time: on a loaded machine the kernel may
// keep the idle worker's kernel thread off the CPU for milliseconds, which
// delays the steal but must not fail it (a wall-time bound of 6 ms failed
// so); the busy worker is then held back as much, and its 8 ms of CPU last
// as long.
struct StuckHandoff {
    fern_sem s;
    std::atomic<int64_t> woke_at{0}, posted_at{0};
    bool stolen = false;  // the waiter ran while the poster still computed
    int64_t cpu_used = 0; // the poster's CPU time from the post to the end
    static constexpr int64_t kSpinCpu = 8000000;
    StuckHandoff() { EXPECT_EQ(0, fern_sem_init(&s, 0)); }
    ~StuckHandoff() { EXPECT_EQ(0, fern_sem_destroy(&s)); }
    void wait() {
        EXPECT_EQ(0, fern_sem_wait(&s));
        woke_at = fern_now_ns();
    }
    void post_and_compute() {
        int64_t c0 = thread_cpu_ns(), c;
        posted_at = fern_now_ns();
        EXPECT_EQ(0, fern_sem_post(&s)); // the waiter goes to this worker's hand-off slot
        while ((c = thread_cpu_ns()) - c0 < kSpinCpu && woke_at.load() == 0) {
        }
        stolen = woke_at.load() != 0;
        cpu_used = c - c0;
    }
    void expect_stolen(const std::string &what) {
        ASSERT_NE(0, woke_at.load());
        EXPECT_TRUE(stolen) << what << "the woken thread waited behind the busy one for all of its "
                            << cpu_used / 1000 << " us of CPU";
        std::printf("%sthe woken thread ran after %lld us (the poster used %lld us of CPU)\n", what.c_str(),
                    (long long)(woke_at.load() - posted_at.load()) / 1000, (long long)cpu_used / 1000);
    }
};

// A thread woken into the hand-off slot of a worker whose running thread
// then computes is stolen by the idle worker once that worker has not
// switched for NEXT_STUCK_NS (10 us), not left until the computation ends
// (8 ms of CPU: no preemption helps). What is checked is that it ran during
// the computation, not how soon: that depends on the machine's load (the
// kernel sometimes queues the woken worker's kernel thread on the busy
// one's CPU although the other CPU is idle, and it then runs only at the
// next scheduler tick, 4 ms at HZ=250).
TEST(Sched, HandOffBehindABusyThreadIsStolen) {
    Watchdog wd(60, "HandOffBehindABusyThreadIsStolen");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    {
        StuckHandoff h;
        fern_thread *b = nullptr, *a = nullptr;
        ASSERT_EQ(0, spawn_on(&b, c, [&] { h.wait(); }));
        ASSERT_EQ(0, spawn_on(&a, c, [&] {
            EXPECT_EQ(0, fern_sleep_ns(ms(20))); // b waits by now
            h.post_and_compute();
        }));
        ASSERT_EQ(0, fern_join(a, nullptr));
        ASSERT_EQ(0, fern_join(b, nullptr));
        h.expect_stolen("");
    }
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// The same while hand-offs follow each other on the busy worker, so that the
// idle one naps as the cluster's hand-off watcher and hand-offs wake nobody
// (sched.c, WATCH_NAP_NS): the watcher must still steal the hand-off stuck
// behind the spinner while it computes (as above), in each of 5 rounds.
TEST(Sched, HandOffBehindABusyThreadIsStolenWhileWatched) {
    Watchdog wd(60, "HandOffBehindABusyThreadIsStolenWhileWatched");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    for (int round = 0; round < 5; round++) {
        StuckHandoff h;
        static fern_sem ping, pong;
        ASSERT_EQ(0, fern_sem_init(&ping, 0));
        ASSERT_EQ(0, fern_sem_init(&pong, 0));
        fern_thread *r = nullptr, *p = nullptr, *q = nullptr;
        ASSERT_EQ(0, spawn_on(&r, c, [&] { h.wait(); }));
        ASSERT_EQ(0, spawn_on(&q, c, [&] {
            for (;;) {
                EXPECT_EQ(0, fern_sem_wait(&pong));
                if (h.posted_at.load())
                    break;
                EXPECT_EQ(0, fern_sem_post(&ping));
            }
        }));
        ASSERT_EQ(0, spawn_on(&p, c, [&] {
            EXPECT_EQ(0, fern_sleep_ns(ms(5))); // r waits by now
            // 20 ms of hand-offs back and forth: the idle worker watches.
            int64_t until = fern_now_ns() + ms(20);
            while (fern_now_ns() < until) {
                EXPECT_EQ(0, fern_sem_post(&pong));
                EXPECT_EQ(0, fern_sem_wait(&ping));
            }
            h.post_and_compute();
            EXPECT_EQ(0, fern_sem_post(&pong)); // q ends
        }));
        ASSERT_EQ(0, fern_join(p, nullptr));
        ASSERT_EQ(0, fern_join(q, nullptr));
        ASSERT_EQ(0, fern_join(r, nullptr));
        h.expect_stolen("round " + std::to_string(round) + ": ");
        EXPECT_EQ(0, fern_sem_destroy(&ping));
        EXPECT_EQ(0, fern_sem_destroy(&pong));
    }
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// Two threads handing off to each other through a cond on one worker must not
// starve a third runnable thread (the hand-off chain is bounded).
TEST(Sched, HandoffsDoNotStarveLocalQueue) {
    Watchdog wd(30, "HandoffsDoNotStarveLocalQueue");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    int turn = 0;
    std::atomic<bool> stop{false};
    std::atomic<long> rounds{0};
    auto player = [&](int me) {
        fern_mutex_lock(&m);
        while (!stop.load()) {
            while (turn != me && !stop.load()) fern_cond_wait(&cv, &m);
            turn = 1 - me;
            rounds++;
            fern_cond_signal(&cv);
        }
        fern_cond_broadcast(&cv);
        fern_mutex_unlock(&m);
    };
    fern_thread *a = nullptr, *b = nullptr, *third = nullptr;
    ASSERT_EQ(0, spawn_on(&a, c, [&] { player(0); }));
    ASSERT_EQ(0, spawn_on(&b, c, [&] { player(1); }));
    ASSERT_EQ(0, spawn_on(&third, c, [&] {
        while (rounds.load() < 1000) fern_yield();
        stop = true;
        fern_mutex_lock(&m);
        fern_cond_broadcast(&cv);
        fern_mutex_unlock(&m);
    }));
    ASSERT_EQ(0, fern_join(third, nullptr));
    ASSERT_EQ(0, fern_join(a, nullptr));
    ASSERT_EQ(0, fern_join(b, nullptr));
    EXPECT_GE(rounds.load(), 1000);
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// From a green thread: spawn kids.size() trivial threads, each returning
// its index + 1, then join them all in order. Returns how many spawns or
// joins failed or returned the wrong value.
long fork_join_trivial(std::vector<fern_thread *> &kids) {
    long bad = 0;
    for (size_t i = 0; i < kids.size(); i++)
        if (fern_spawn(&kids[i], nullptr, noop, (void *)(intptr_t)(i + 1)) != 0) bad++;
    for (size_t i = 0; i < kids.size(); i++) {
        void *r = nullptr;
        if (fern_join(kids[i], &r) != 0 || r != (void *)(intptr_t)(i + 1)) bad++;
    }
    return bad;
}

// A fork-join on one worker: the joiner, woken by the exit of the child it
// joins, runs after the children still queued and joins them without
// parking again, so a child costs about one switch, not two (the joiner
// used to run next after every exit and park on the following child).
TEST(Sched, ForkJoinParksTheJoinerRarely) {
    Watchdog wd(60, "ForkJoinParksTheJoinerRarely");
    // One worker, and a 10 s slice: no preemption or compensation can move
    // the children while a sanitizer build spawns them slowly.
    stop_runtime();
    fern_config cfg = {1, 0, FERN_PREEMPT_MAX_US};
    ASSERT_EQ(0, fern_init(&cfg));
    constexpr int kChildren = 2000;
    struct fern_stats s0, s1;
    long bad = 0;
    ASSERT_EQ(0, run_green([&] {
        std::vector<fern_thread *> kids(kChildren);
        fern_stats(&s0);
        bad = fork_join_trivial(kids);
        fern_stats(&s1);
    }));
    EXPECT_EQ(0, bad);
    uint64_t switches = s1.switches - s0.switches;
    EXPECT_GE(switches, (uint64_t)kChildren);
    // One per child plus the joiner's few parks. Before: about 1.5-2 per
    // child (3,001 for 2,000).
    EXPECT_LE(switches, (uint64_t)kChildren * 5 / 4) << switches << " switches for " << kChildren << " children";
    stop_runtime();
}

// A fork-join of tiny threads on two workers stays on the spawner's worker:
// the idle one, after a few steals of threads that ended within
// STEAL_SHORT_NS, backs off from threads that never ran (sched.c). Before,
// it took each new thread as it appeared: 0.1-0.25 steals per child, and
// spawn+join cost twice what it costs on one worker. Long threads spawned
// after that still spread to both workers. Counted per batch, and the
// median batch is judged: on a loaded machine the kernel takes the
// spawner's CPU away now and then for milliseconds, and the idle worker
// then rightly takes what waits behind it (STEAL_STALL_NS), so a disturbed
// batch can see tens of steals (a total of 415 against a bound of 400 once,
// when the spawner that had its CPU back was still judged stuck: see the
// next test); without the back-off every batch sees 100-250.
TEST(Sched, TinyThreadsStayWithTheirSpawner) {
    Watchdog wd(120, "TinyThreadsStayWithTheirSpawner");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    constexpr int kBatch = 1000, kLong = 16;
    const int kBatches = (int)scaled(20, 2);
    std::vector<uint64_t> steals(kBatches);
    long bad = 0;
    std::set<const void *> seen;
    std::mutex mu;
    fern_thread *parent = nullptr;
    ASSERT_EQ(0, spawn_on(&parent, c, [&] {
        std::vector<fern_thread *> kids(kBatch);
        for (int b = 0; b < kBatches; b++) {
            struct fern_stats s0, s1;
            fern_stats(&s0);
            bad += fork_join_trivial(kids);
            fern_stats(&s1);
            steals[b] = s1.steals - s0.steals;
        }
        for (int i = 0; i < kLong; i++)
            EXPECT_EQ(0, spawn(&kids[i], nullptr, [&] {
                {
                    std::lock_guard<std::mutex> lk(mu);
                    seen.insert(worker_identity());
                }
                int64_t end = fern_now_ns() + ms(2);
                while (fern_now_ns() < end) {
                }
            }));
        for (int i = 0; i < kLong; i++) EXPECT_EQ(0, fern_join(kids[i], nullptr));
    }));
    ASSERT_EQ(0, fern_join(parent, nullptr));
    EXPECT_EQ(0, bad);
    uint64_t total = 0;
    std::string each;
    for (uint64_t n : steals) {
        total += n;
        each += " " + std::to_string(n);
    }
    std::sort(steals.begin(), steals.end());
    uint64_t median = steals[steals.size() / 2];
    std::printf("tiny threads: %llu steals for %d children, per batch of %d:%s\n",
                (unsigned long long)total, kBatch * kBatches, kBatch, each.c_str());
    // Sanitizer and emulated builds (FERN_STRESS_SCALE < 1) run a trivial
    // thread in more than STEAL_SHORT_NS, so there stealing it is right.
    if (stress_scale() >= 1) {
        EXPECT_LT(median, (uint64_t)(kBatch / 50))
            << "the idle worker kept stealing tiny threads (per batch:" << each << ")";
    }
    EXPECT_EQ(2u, seen.size()) << "long threads after tiny ones ran on " << seen.size() << " of 2 workers";
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// The back-off holds while the spawner takes its time: here a parent that
// spends 0.3 us before each spawn, so a batch of 1,000 takes ~350 us to
// queue and the parent does not switch meanwhile. It is not stuck (its
// ring's tail moves), and its threads stay with it (steal.c, stall_age).
// Judged by switches alone, as before, it looked stuck once 100 us passed
// (STEAL_STALL_NS) and an idle worker that was looking took nearly each
// thread as it was queued; a spawner that the kernel kept off its CPU for
// a moment in mid-batch met the same (TinyThreadsStayWithTheirSpawner
// failed so on a loaded 2-core machine: 85-175 steals in most batches).
// The worst batch is judged: one that the kernel disturbed sees 15-60
// steals (halves of what waited while the parent was off its CPU, then the
// back-off again), 90-500 before; an undisturbed one sees none here, and
// before saw none only where the idle worker rarely got a CPU to look from
// (a machine at load 10 or more).
TEST(Sched, TinyThreadsOfASlowSpawnerStayWithIt) {
    Watchdog wd(120, "TinyThreadsOfASlowSpawnerStayWithIt");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    constexpr int kBatch = 1000;
    const int kBatches = (int)scaled(10, 2);
    std::vector<uint64_t> steals(kBatches);
    std::vector<int64_t> took(kBatches);
    long bad = 0;
    fern_thread *parent = nullptr;
    ASSERT_EQ(0, spawn_on(&parent, c, [&] {
        std::vector<fern_thread *> kids(kBatch);
        // Trivial fork-joins first, so that the idle worker backs off.
        for (int b = 0; b < 3; b++) bad += fork_join_trivial(kids);
        for (int b = 0; b < kBatches; b++) {
            struct fern_stats s0, s1;
            fern_stats(&s0);
            int64_t t0 = fern_now_ns();
            for (int i = 0; i < kBatch; i++) {
                int64_t end = fern_now_ns() + 300;
                while (fern_now_ns() < end) {
                }
                if (fern_spawn(&kids[i], nullptr, noop, (void *)(intptr_t)(i + 1)) != 0) bad++;
            }
            took[b] = fern_now_ns() - t0;
            for (int i = 0; i < kBatch; i++) {
                void *r = nullptr;
                if (fern_join(kids[i], &r) != 0 || r != (void *)(intptr_t)(i + 1)) bad++;
            }
            fern_stats(&s1);
            steals[b] = s1.steals - s0.steals;
        }
    }));
    ASSERT_EQ(0, fern_join(parent, nullptr));
    EXPECT_EQ(0, bad);
    std::string each;
    for (int b = 0; b < kBatches; b++)
        each += " " + std::to_string(steals[b]) + "/" + std::to_string(took[b] / 1000) + "us";
    std::sort(took.begin(), took.end());
    uint64_t worst = *std::max_element(steals.begin(), steals.end());
    std::printf("slow spawner: steals/time to spawn per batch of %d:%s\n", kBatch, each.c_str());
    // The spawning must have outlasted STEAL_STALL_NS, or nothing was tested.
    EXPECT_GE(took[took.size() / 2], 200000) << "spawning a batch took under 200 us:" << each;
    if (stress_scale() >= 1) {
        EXPECT_LT(worst, (uint64_t)(kBatch / 10))
            << "the idle worker took the threads of a spawner that was still spawning (per batch:" << each
            << ")";
    }
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// The back-off above is for a spawner that runs its threads itself in a
// moment. Tiny threads queued behind a thread that computes are taken as
// usual once their worker has not switched for STEAL_STALL_NS (100 us):
// here 2,000 of them, queued before the parent spins for up to 3 ms (less
// than a time slice, so no preemption lets the parent's worker run them),
// nearly all finish on the other worker meanwhile. With the back-off alone,
// one every 32 us at most: under 100.
TEST(Sched, TinyThreadsBehindALongOneAreStolen) {
    Watchdog wd(120, "TinyThreadsBehindALongOneAreStolen");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    constexpr int kTiny = 2000;
    std::atomic<int> done{0};
    int done_by_end = -1;
    long bad = 0;
    fern_thread *parent = nullptr;
    ASSERT_EQ(0, spawn_on(&parent, c, [&] {
        std::vector<fern_thread *> kids(kTiny);
        // Trivial fork-joins first, so that the idle worker backs off.
        for (long b = 0; b < scaled(5); b++) bad += fork_join_trivial(kids);
        for (int i = 0; i < kTiny; i++)
            if (fern_spawn(&kids[i], nullptr, [](void *a) -> void * {
                    static_cast<std::atomic<int> *>(a)->fetch_add(1);
                    return nullptr;
                }, &done) != 0)
                bad++;
        // 3 ms; ten times that in sanitizer and emulated builds, where all
        // runs slower (there a preemption may also let this worker run
        // them: the check is weaker, but it does not fail falsely).
        int64_t end = fern_now_ns() + (int64_t)((double)ms(3) / stress_scale());
        while (fern_now_ns() < end && done.load() < kTiny) {
        }
        done_by_end = done.load();
        for (int i = 0; i < kTiny; i++)
            if (fern_join(kids[i], nullptr) != 0) bad++;
    }));
    ASSERT_EQ(0, fern_join(parent, nullptr));
    EXPECT_EQ(0, bad);
    EXPECT_EQ(kTiny, done.load());
    std::printf("tiny threads behind a spinner: %d of %d done while it spun\n", done_by_end, kTiny);
    EXPECT_GE(done_by_end, kTiny * 9 / 10) << "threads queued behind a computing thread were left waiting";
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// A backlog in a cluster's inbox (threads spawned from a plain thread while
// its worker is busy) larger than what one look takes from it (half a ring):
// every thread runs once, in spawn order but for the inbox's periodic look
// (one in 61 switches takes the inbox's head ahead of what is queued on the
// ring); a batch's rest goes back to the inbox's front, not behind it.
TEST(Sched, InboxBacklogRunsOnceAndInOrder) {
    Watchdog wd(120, "InboxBacklogRunsOnceAndInOrder");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    constexpr int kN = 5000;
    std::vector<int> pos(kN, -1);
    std::vector<int> runs(kN, 0);
    std::atomic<int> seq{0};
    std::atomic<bool> release{false};
    fern_thread *blocker = nullptr;
    ASSERT_EQ(0, spawn_on(&blocker, c, [&] {
        while (!release.load()) {
        }
    }));
    std::vector<fern_thread *> ts(kN);
    for (int i = 0; i < kN; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], c, [&, i] {
            pos[i] = seq.fetch_add(1);
            runs[i]++;
        }));
    release.store(true);
    ASSERT_EQ(0, fern_join(blocker, nullptr));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    int out_of_order = 0;
    for (int i = 0; i < kN; i++) {
        ASSERT_EQ(1, runs[i]) << "thread " << i;
        if (i > 0 && pos[i] != pos[i - 1] + 1) out_of_order++;
    }
    std::printf("inbox backlog of %d: %d runs out of spawn order\n", kN, out_of_order);
    EXPECT_LE(out_of_order, kN / 20) << "an inbox backlog ran out of order";
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// The same backlog on a two-worker cluster: moving it into rings does not
// leave it to one worker; the other runs part of it. Each thread notes its worker and spins until
// two workers have been seen (or 5 s pass), so a loaded machine that
// deschedules one worker for a while does not fail the test.
TEST(Sched, InboxBacklogIsShared) {
    Watchdog wd(120, "InboxBacklogIsShared");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    const int kN = (int)scaled(4000, 400);
    std::mutex mu;
    std::set<const void *> seen;
    std::atomic<size_t> nseen{0};
    std::atomic<int> ran{0};
    std::atomic<bool> release{false};
    std::vector<fern_thread *> blockers(2);
    for (auto &b : blockers)
        ASSERT_EQ(0, spawn_on(&b, c, [&] {
            while (!release.load()) {
            }
        }));
    int64_t deadline = fern_now_ns() + ms(5000);
    std::vector<fern_thread *> ts(kN);
    for (int i = 0; i < kN; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], c, [&] {
            {
                std::lock_guard<std::mutex> lk(mu);
                seen.insert(worker_identity());
                nseen.store(seen.size());
            }
            while (nseen.load() < 2 && fern_now_ns() < deadline) {
            }
            ran++;
        }));
    release.store(true);
    for (auto b : blockers) ASSERT_EQ(0, fern_join(b, nullptr));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(kN, ran.load());
    EXPECT_GE(seen.size(), 2u) << "one worker ran the whole backlog";
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// Threads still parked at shutdown are destroyed without running (no key
// destructors), shutdown returns 0 and warns on stderr; the runtime restarts.
std::atomic<int> g_dtor_runs{0};
void dtor(void *) { g_dtor_runs++; }

TEST(Sched, ShutdownWithParkedThreads) {
    stop_runtime();
    // fern_shutdown cancels every thread first (docs/cancellation.md); these
    // shield their wait, so they are still parked after the grace period
    // and are destroyed without running.
    fern_config cfg{};
    cfg.shutdown_grace_ms = 50;
    ASSERT_EQ(0, fern_init(&cfg));
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, dtor));
    static fern_mutex m = FERN_MUTEX_INIT;
    static fern_cond cv = FERN_COND_INIT;
    static std::atomic<int> parked{0}, resumed{0};
    parked = 0;
    resumed = 0;
    g_dtor_runs = 0;
    auto body = [](void *arg) -> void * {
        fern_setspecific((fern_key)(uintptr_t)arg, (void *)1);
        fern_cancel_shield(1);
        fern_mutex_lock(&m);
        parked++;
        fern_cond_wait(&cv, &m);
        resumed++;
        fern_mutex_unlock(&m);
        return nullptr;
    };
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_attr a{};
    a.detached = true;
    ASSERT_EQ(0, fern_spawn(nullptr, &a, body, (void *)(uintptr_t)k));
    a.cluster = c;
    ASSERT_EQ(0, fern_spawn(nullptr, &a, body, (void *)(uintptr_t)k));
    fern_thread *j = nullptr;
    ASSERT_EQ(0, fern_spawn(&j, nullptr, body, (void *)(uintptr_t)k));  // never joined
    ASSERT_TRUE(wait_until([] { return parked.load() == 3; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));

    // Capture stderr around the shutdown.
    fflush(stderr);
    FILE *cap = tmpfile();
    ASSERT_NE(nullptr, cap);
    int saved = dup(2);
    dup2(fileno(cap), 2);
    int rc = fern_shutdown();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string err;
    rewind(cap);
    char buf[512];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, cap)) > 0) err.append(buf, n);
    fclose(cap);

    EXPECT_EQ(0, rc);
    EXPECT_EQ(0, resumed.load()) << "parked threads ran during shutdown";
    EXPECT_EQ(0, g_dtor_runs.load()) << "key destructors ran for destroyed threads";
    EXPECT_FALSE(err.empty()) << "no warning on stderr about destroyed threads";
    EXPECT_NE(std::string::npos, err.find('3')) << "warning does not count 3 threads: " << err;
    EXPECT_FALSE(runtime_running());
    // Restart works, and the old mutex (held by no one now) is usable.
    fern_mutex_init(&m);
    fern_cond_init(&cv);
    ASSERT_EQ(0, fern_init(nullptr));
    ASSERT_EQ(0, run_green([] {
        EXPECT_EQ(0, fern_mutex_lock(&m));
        EXPECT_EQ(0, fern_mutex_unlock(&m));
    }));
    struct fern_stats s;
    ASSERT_EQ(0, fern_stats(&s));
    EXPECT_EQ(1u, s.clusters);
    EXPECT_EQ(0u, s.threads_live);
    fern_key_delete(k);  // keys may or may not outlive a shutdown
}

} // namespace

namespace {

// Spin `ns` of CPU in this thread (no fern call).
void spin_ns(int64_t ns) {
    int64_t end = fern_now_ns() + ns;
    while (fern_now_ns() < end) {
    }
}

// A green thread sleeps 1 ms at a time, `ticks` times, on a one-worker
// cluster beside `n` busy threads that keep the run queue about `n` long:
// each spins `spin_us` per turn and then yields (`pairs` false) or
// (`pairs`) wakes its partner through a semaphore (the partner goes to the
// waker's hand-off slot, displacing what was there) and waits for it.
// Returns the most turns that busy threads began after one of the
// sleeper's deadlines had passed and before it ran. Counted in turns, not
// time: on a loaded machine the worker's kernel thread waits for a CPU for
// milliseconds, which says nothing about the order fern runs threads in.
enum BusyKind { YIELD, SEM_PAIRS, SOCKET_PAIRS };
long turns_before_ticker(unsigned workers, int n, int spin_us, BusyKind kind, int ticks) {
    fern_cluster *c = nullptr;
    EXPECT_EQ(0, fern_cluster_create(&c, workers));
    std::atomic<bool> stop{false};
    std::atomic<int64_t> due{INT64_MAX};
    std::atomic<long> overtook{0};
    std::vector<fern_sem> sems(n);
    for (auto &s : sems) EXPECT_EQ(0, fern_sem_init(&s, 0));
    std::vector<int> fds(n);
    for (int i = 0; i < n; i += 2) EXPECT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, &fds[i]));
    bool pairs = kind == SEM_PAIRS;
    std::vector<fern_thread *> ts;
    for (int i = 0; i < n; i++) {
        fern_thread *t;
        EXPECT_EQ(0, spawn_on(&t, c, [&, i] {
                      while (!stop.load(std::memory_order_relaxed)) {
                          if (fern_now_ns() > due.load(std::memory_order_relaxed))
                              overtook.fetch_add(1, std::memory_order_relaxed);
                          spin_ns(spin_us * 1000);
                          if (kind == SOCKET_PAIRS) {
                              char b = 0;
                              // Even threads write first; odd ones answer.
                              if (i % 2 == 0 && fern_write(fds[i], &b, 1) != 1) break;
                              if (fern_read(fds[i], &b, 1) != 1) break;
                              if (i % 2 == 1 && fern_write(fds[i], &b, 1) != 1) break;
                          } else if (pairs) {
                              fern_sem_post(&sems[i ^ 1]);
                              fern_sem_wait(&sems[i]);
                          } else {
                              fern_yield();
                          }
                      }
                      if (pairs) fern_sem_post(&sems[i ^ 1]);
                      if (kind == SOCKET_PAIRS) shutdown(fds[i], SHUT_RDWR);
                  }));
        ts.push_back(t);
    }
    long worst = 0;
    fern_thread *ticker;
    EXPECT_EQ(0, spawn_on(&ticker, c, [&] {
                  fern_sleep_ns(ms(20)); // the busy threads are all queued
                  for (int k = 0; k < ticks; k++) {
                      int64_t d = fern_now_ns() + ms(1);
                      overtook.store(0);
                      due.store(d);
                      fern_sleep_until(d);
                      due.store(INT64_MAX);
                      worst = std::max(worst, overtook.load());
                  }
              }));
    EXPECT_EQ(0, fern_join(ticker, nullptr));
    stop = true;
    for (auto t : ts) EXPECT_EQ(0, fern_join(t, nullptr));
    for (auto &s : sems) fern_sem_destroy(&s);
    if (kind == SOCKET_PAIRS)
        for (int fd : fds) fern_close(fd);
    EXPECT_EQ(0, fern_cluster_destroy(c));
    return worst;
}

} // namespace

// Issue 30, item 6: a thread woken by its timer runs soon, however many
// threads are queued. Its timer is fired within 61 switches (the worker's
// tick) or by another worker (timers_help), and the thread goes to the
// worker's `soon` list, which runs before the hand-off slot and the ring.
// Before, it went to the hand-off slot, and the next hand-off there (a
// semaphore post) or descriptor event pushed it to the tail of the ring:
// then every pair of threads queued ran up to 32 turns before it (13,270 and
// 17,966 turns on 1 and 2 workers, against a queue of 400). With the
// semaphore pairs that happens only when the timer fires just as a chain
// of hand-offs has used its 32 turns, so that case gets 400 deadlines.
// The bound, twice the number of busy threads, says "not the queue's
// length"; the worst seen with the fix is 60-120 turns for yielders and
// pairs, 200-290 beside descriptor pairs.
TEST(Sched, TimerWokenThreadDoesNotWaitBehindTheQueue) {
    Watchdog wd(300, "TimerWokenThreadDoesNotWaitBehindTheQueue");
    const int n = 400;
    for (unsigned nw : {1u, 2u}) {
        // Sanitizer builds run fewer deadlines (FERN_STRESS_SCALE).
        EXPECT_LE(turns_before_ticker(nw, n, 20, YIELD, (int)scaled(50, 20)), 2 * n)
            << nw << " workers, yielders";
        EXPECT_LE(turns_before_ticker(nw, n, 20, SEM_PAIRS, (int)scaled(400, 100)), 2 * n)
            << nw << " workers, semaphore pairs";
        EXPECT_LE(turns_before_ticker(nw, n, 20, SOCKET_PAIRS, (int)scaled(50, 20)), 2 * n)
            << nw << " workers, socket pairs";
    }
}

namespace {

// A green thread waits in fern_read on a socket, on the default cluster
// (its only cluster, so a worker of it, not an idle one elsewhere, polls
// and dispatches the event) beside `n` busy threads that spin `spin_us`
// and yield, keeping its run queue about `n` long. Another green thread
// writes one byte `events` times, 1 ms apart. Returns the most turns that busy
// threads began after a write and before the reader ran.
long turns_before_reader(unsigned workers, int n, int spin_us, int events) {
    stop_runtime();
    fern_config cfg{workers, 0, 0};
    EXPECT_EQ(0, fern_init(&cfg));
    std::atomic<bool> stop{false}, armed{false};
    std::atomic<long> overtook{0}, worst{0};
    std::atomic<int> got{0};
    int fds[2];
    EXPECT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, fds));
    std::vector<fern_thread *> ts;
    for (int i = 0; i < n; i++) {
        fern_thread *t;
        EXPECT_EQ(0, spawn_on(&t, nullptr, [&] {
                      while (!stop.load(std::memory_order_relaxed)) {
                          if (armed.load(std::memory_order_relaxed))
                              overtook.fetch_add(1, std::memory_order_relaxed);
                          spin_ns(spin_us * 1000);
                          fern_yield();
                      }
                  }));
        ts.push_back(t);
    }
    fern_thread *reader;
    EXPECT_EQ(0, spawn_on(&reader, nullptr, [&] {
                  char b;
                  got.store(-1); // running: the busy threads are queued
                  for (int k = 0; k < events; k++) {
                      if (fern_read(fds[0], &b, 1) != 1) break;
                      armed.store(false);
                      worst.store(std::max(worst.load(), overtook.load()));
                      got.store(k + 1);
                  }
              }));
    // The writer is a green thread too: it arms the count and writes in
    // one turn, which a plain thread might be descheduled between.
    fern_thread *writer;
    EXPECT_EQ(0, spawn_on(&writer, nullptr, [&] {
                  while (got.load() != -1) fern_sleep_ns(ms(1));
                  fern_sleep_ns(ms(5)); // the reader is in fern_read
                  for (int k = 0; k < events; k++) {
                      overtook.store(0);
                      armed.store(true);
                      char b = 0;
                      EXPECT_EQ(1, write(fds[1], &b, 1));
                      while (got.load() != k + 1) fern_sleep_ns(ms(1) / 5);
                      fern_sleep_ns(ms(1));
                  }
              }));
    EXPECT_EQ(0, fern_join(writer, nullptr));
    EXPECT_EQ(0, fern_join(reader, nullptr));
    stop = true;
    for (auto t : ts) EXPECT_EQ(0, fern_join(t, nullptr));
    close(fds[0]);
    close(fds[1]);
    EXPECT_EQ(0, fern_shutdown());
    return worst.load();
}

} // namespace

// Issue 30, item 6: a thread woken by a descriptor runs soon too, however
// many threads are queued: the poll's batch goes to the dispatching
// worker's `soon` list, as a timer's sleepers do. Before, it went to the
// tail of the ring and waited for every queued thread: worst 460 and 520
// turns on 1 and 2 workers (most events 420-460), against a queue of 400.
// What remains is the wait for a busy worker's poll, every 64 of its
// switches: worst 104-210 turns seen with the fix. The bound, three
// quarters of the queue, says "not behind the queue".
TEST(Sched, DescriptorWokenThreadDoesNotWaitBehindTheQueue) {
    Watchdog wd(300, "DescriptorWokenThreadDoesNotWaitBehindTheQueue");
    const int n = 400;
    for (unsigned nw : {1u, 2u})
        EXPECT_LE(turns_before_reader(nw, n, 20, (int)scaled(50, 20)), n * 3 / 4) << nw << " workers";
}
