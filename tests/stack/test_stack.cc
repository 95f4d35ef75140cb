// SPDX-License-Identifier: MIT
// Stacks: deep recursion, overflow reported on stderr, size limits, reuse of
// pooled stacks, late binding, 100k parked threads, guard accounting.
#include "fern_test.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

using namespace fern_test;

namespace {

// One ~1 KiB frame per level; records the lowest stack address reached.
__attribute__((noinline, noipa)) long recurse(int depth, uintptr_t *lowest) {
    volatile char buf[1024];
    for (size_t i = 0; i < sizeof buf; i += 64) buf[i] = (char)(depth + i);
    uintptr_t here = (uintptr_t)&buf[0];
    if (here < *lowest) *lowest = here;
    long r = depth > 0 ? recurse(depth - 1, lowest) : 0;
    return r + buf[depth % sizeof buf];
}

struct DeepArg {
    int depth;
    uintptr_t top;
    uintptr_t lowest;
};

void *deep_body(void *arg) {
    auto *d = static_cast<DeepArg *>(arg);
    volatile char marker = 0;
    d->top = (uintptr_t)&marker;
    d->lowest = d->top;
    return (void *)recurse(d->depth, &d->lowest);
}

// Runs a thread with stack_size that recurses through ~fraction of it and
// checks that it really used that much stack.
void deep_recursion(size_t stack_size, double fraction) {
    DeepArg d{};
    d.depth = (int)((double)stack_size * fraction / 1200);
    fern_attr a{};
    a.stack_size = stack_size;
    a.name = "deep";
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, &a, deep_body, &d));
    ASSERT_EQ(0, fern_join(t, nullptr));
    size_t used = d.top - d.lowest;
    EXPECT_GE(used, (size_t)((double)stack_size * fraction * 0.8)) << "depth " << d.depth;
    EXPECT_LT(used, stack_size);
}

TEST(Stack, DeepRecursionDefaultSize) {
    DeepArg d{};
    d.depth = (int)(FERN_STACK_DEFAULT * 0.6 / 1200);
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, deep_body, &d));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_GE(d.top - d.lowest, (size_t)(FERN_STACK_DEFAULT * 0.45));
}

TEST(Stack, DeepRecursionVariousSizes) {
    deep_recursion(256 * 1024, 0.7);
    deep_recursion(1024 * 1024, 0.8);
    deep_recursion(8 * 1024 * 1024, 0.8);
}

TEST(Stack, MinimumStackWorks) {
    DeepArg d{};
    d.depth = 4;  // ~5 KiB of a 16 KiB stack
    fern_attr a{};
    a.stack_size = FERN_STACK_MIN;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, &a, deep_body, &d));
    ASSERT_EQ(0, fern_join(t, nullptr));
    // Not a page multiple: rounded up, accepted.
    a.stack_size = FERN_STACK_MIN + 1;
    ASSERT_EQ(0, fern_spawn(&t, &a, deep_body, &d));
    ASSERT_EQ(0, fern_join(t, nullptr));
}

TEST(Stack, MaximumStackWorks) {
    DeepArg d{};
    d.depth = 2000;  // ~2.3 MiB of 1 GiB
    fern_attr a{};
    a.stack_size = FERN_STACK_MAX;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, &a, deep_body, &d));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_GE(d.top - d.lowest, (size_t)2000 * 1024);
}

TEST(Stack, SizeOutOfRangeIsEinval) {
    fern_attr a{};
    fern_thread *t = nullptr;
    for (size_t bad : {(size_t)1, (size_t)4096, FERN_STACK_MIN - 4096, FERN_STACK_MAX + 4096,
                       FERN_STACK_MAX * 4, SIZE_MAX / 2}) {
        a.stack_size = bad;
        EXPECT_EQ(EINVAL, fern_spawn(&t, &a, deep_body, nullptr)) << bad;
        a.detached = true;
        EXPECT_EQ(EINVAL, fern_spawn(nullptr, &a, deep_body, nullptr)) << bad;
        a.detached = false;
    }
}

// --- overflow: the process dies with a report naming the thread ---

void *overflow_body(void *) {
    std::fprintf(stderr, "self-id=%" PRIu64 "\n", fern_thread_id(nullptr));
    std::fflush(stderr);
    uintptr_t lowest = UINTPTR_MAX;
    return (void *)recurse(1 << 30, &lowest);
}

extern "C" int big_frame_probed(void);
extern "C" int big_frame_unprobed(void);
extern "C" int big_frame_unprobed_yield(void);

fern_fn g_overflow_body = overflow_body;

void overflow_main(size_t stack_size, bool own_cluster) {
    fern_attr a{};
    a.stack_size = stack_size;
    a.name = "deep-diver";
    if (own_cluster) {
        fern_cluster *c = nullptr;
        if (fern_cluster_create(&c, 2) != 0) return;
        a.cluster = c;
    }
    fern_thread *t = nullptr;
    if (fern_spawn(&t, &a, g_overflow_body, nullptr) != 0) return;
    fern_join(t, nullptr);
    std::fprintf(stderr, "joined: the overflow was not caught\n");
    std::exit(0);
}

bool has_number(const std::string &s, const std::string &num) {
    for (size_t p = s.find(num); p != std::string::npos; p = s.find(num, p + 1)) {
        bool left = p == 0 || !std::isdigit((unsigned char)s[p - 1]);
        bool right = p + num.size() >= s.size() || !std::isdigit((unsigned char)s[p + num.size()]);
        if (left && right) return true;
    }
    return false;
}

// stderr after the thread's "self-id=N" line must say "overflowed its stack"
// with the name, the id N and (optionally) the stack size.
class OverflowReport : public ::testing::MatcherInterface<const std::string &> {
  public:
    explicit OverflowReport(size_t stack_size, bool want_size)
        : stack_size_(stack_size), want_size_(want_size) {}
    bool MatchAndExplain(const std::string &err, ::testing::MatchResultListener *l) const override {
        std::smatch mt;
        if (!std::regex_search(err, mt, std::regex("self-id=([0-9]+)\n"))) {
            *l << "the thread never ran";
            return false;
        }
        std::string id = mt[1].str();
        std::string rest = mt.suffix().str();
        if (rest.find("overflowed its stack") == std::string::npos) {
            *l << "no \"overflowed its stack\" after the thread started";
            return false;
        }
        if (rest.find("deep-diver") == std::string::npos) {
            *l << "report lacks the thread name";
            return false;
        }
        if (!has_number(rest, id)) {
            *l << "report lacks the thread id " << id;
            return false;
        }
        if (want_size_) {
            std::string b = std::to_string(stack_size_), k = std::to_string(stack_size_ / 1024);
            char hex[32];
            std::snprintf(hex, sizeof hex, "0x%zx", stack_size_);
            bool ok = has_number(rest, b) || rest.find(hex) != std::string::npos ||
                      std::regex_search(rest, std::regex("[^0-9]" + k + " ?[kK]"));
            if (!ok) {
                *l << "report lacks the stack size (" << b << " bytes / " << k << " KiB)";
                return false;
            }
        }
        return true;
    }
    void DescribeTo(std::ostream *os) const override {
        *os << "an overflow report naming deep-diver and its id";
    }

  private:
    size_t stack_size_;
    bool want_size_;
};

// The size the report names is the stack's usable size: a stack smaller
// than a page gets a whole page (16 KiB asked, 64 KiB given with 64 KiB
// pages: the *_64k_pages runs under qemu).
::testing::Matcher<const std::string &> overflow_report(size_t stack_size, bool want_size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return ::testing::MakeMatcher(new OverflowReport(std::max(stack_size, page), want_size));
}

TEST(StackDeathTest, OverflowReportedWithNameAndId) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_DEATH(overflow_main(64 * 1024, false), overflow_report(64 * 1024, false));
}

TEST(StackDeathTest, OverflowReportedOnOtherClusterDefaultSize) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_DEATH(overflow_main(0, true), overflow_report(FERN_STACK_DEFAULT, false));
}

TEST(StackDeathTest, OverflowReportIncludesStackSize) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_DEATH(overflow_main(256 * 1024, false), overflow_report(256 * 1024, true));
}

// The overflowing thread's slot comes after `parked` others of its class (in
// the death test's fresh process): with batched guards its guard went in
// ahead, with the first slot's (and FERN_GUARD=madvise: with its own call).
void parked_then_overflow(size_t stack_size, int parked) {
    static fern_mutex gate = FERN_MUTEX_INIT;
    static std::atomic<int> started{0};
    fern_mutex_lock(&gate);
    fern_attr a{};
    a.stack_size = stack_size;
    a.detached = true;
    auto hold = [](void *) -> void * {
        started.fetch_add(1);
        fern_mutex_lock(&gate);
        fern_mutex_unlock(&gate);
        return nullptr;
    };
    for (int i = 0; i < parked; i++)
        if (fern_spawn(nullptr, &a, hold, nullptr) != 0) return;
    while (started.load() < parked) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    overflow_main(stack_size, false);
}

TEST(StackDeathTest, OverflowCaughtOnSlotGuardedAhead) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_DEATH(parked_then_overflow(64 * 1024, 5), overflow_report(64 * 1024, false));
}

TEST(StackDeathTest, OverflowCaughtWithOneGuardCallPerStack) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    setenv("FERN_GUARD", "madvise", 1); // read by the child's runtime
    EXPECT_DEATH(parked_then_overflow(64 * 1024, 5), overflow_report(64 * 1024, false));
    unsetenv("FERN_GUARD");
}

// A frame bigger than the guard page: the thread prints its id, then runs
// `victim` (tests/big_frame_*.c).
template <int (*victim)(void)> void *big_frame_body(void *) {
    std::fprintf(stderr, "self-id=%" PRIu64 "\n", fern_thread_id(nullptr));
    std::fflush(stderr);
    long r = victim();
    fern_sleep_ns(ms(10)); // a switch-out (surely parks): where canary mode looks
    return (void *)r;
}

// Built as `pkg-config --cflags fern` says (-fstack-clash-protection): a
// 200 KiB frame on a 128 KiB stack probes into the guard page.
TEST(StackDeathTest, ProbedBigFrameHitsTheGuard) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    g_overflow_body = big_frame_body<big_frame_probed>;
    EXPECT_DEATH(overflow_main(128 * 1024, false), overflow_report(128 * 1024, true));
    g_overflow_body = overflow_body;
}

// Built without -fstack-clash-protection: a 64 KiB frame on a 16 KiB stack
// jumps the guard; the fault comes from below it (a neighbour's guard, with
// neighbours parked below), and the stack pointer says whose overflow it is.
TEST(StackDeathTest, UnprobedBigFrameThatJumpsTheGuardIsReported) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    g_overflow_body = big_frame_body<big_frame_unprobed>;
    EXPECT_DEATH(parked_then_overflow(16 * 1024, 5), overflow_report(16 * 1024, true));
    EXPECT_DEATH(overflow_main(16 * 1024, false), overflow_report(16 * 1024, true));
    g_overflow_body = overflow_body;
}

// Canary mode: no guard page at all. The big frame's writes overwrite the
// canary words over the lowest page (caught at the next switch-out), and a
// thread that switches out with its stack pointer below its stack is caught
// even if no canary word was hit.
TEST(StackDeathTest, CanaryModeCatchesBigFrames) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    setenv("FERN_GUARD", "canary", 1); // read by the child's runtime
    g_overflow_body = big_frame_body<big_frame_unprobed>;
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer sees the writes into the parked neighbours' frames
    // (their redzones) before the thread switches out.
    EXPECT_DEATH(parked_then_overflow(16 * 1024, 5),
                 "AddressSanitizer: stack-buffer-underflow");
#else
    EXPECT_DEATH(parked_then_overflow(16 * 1024, 5), overflow_report(16 * 1024, true));
#endif
#if !defined(__SANITIZE_THREAD__)
    // Not under ThreadSanitizer: there the yield after the big frame is not
    // reported (seen 2026-11-25, not yet understood; the unyielding case
    // above is). Not preemption's doing: it fails with FERN_PREEMPT=0 too.
    g_overflow_body = big_frame_body<big_frame_unprobed_yield>;
    EXPECT_DEATH(parked_then_overflow(16 * 1024, 5), overflow_report(16 * 1024, true));
#endif
    g_overflow_body = overflow_body;
    unsetenv("FERN_GUARD");
}

// --- pooling and accounting ---

void *noop(void *arg) { return arg; }

// Poll, from a plain thread, until *count (guarded by m) reaches n.
template <class T> void wait_for_count(fern_mutex *m, const T *count, T n, int poll_ms) {
    for (;;) {
        fern_mutex_lock(m);
        T now = *count;
        fern_mutex_unlock(m);
        if (now == n) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
    }
}

TEST(Stack, StacksReusedAcrossSequentialThreads) {
    ASSERT_EQ(0, fern_run(noop, nullptr, nullptr));
    struct fern_stats s0, s1;
    ASSERT_EQ(0, fern_stats(&s0));
    const long N = tsan_capped(scaled(100000, 10000), 2000);
    for (long i = 0; i < N; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, fern_spawn(&t, nullptr, noop, (void *)i));
        void *r = nullptr;
        ASSERT_EQ(0, fern_join(t, &r));
        ASSERT_EQ((void *)i, r);
    }
    // A finished thread's stack may go back to the pool just after the join.
    wait_until([&] { return fern_stats(&s1) == 0 && s1.stacks_in_use == 0; }, 2000);
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_EQ(s0.threads_spawned + (uint64_t)N, s1.threads_spawned);
    EXPECT_LE(s1.stacks_mapped - s0.stacks_mapped, 512u) << "stacks are not reused";
    EXPECT_EQ(0u, s1.stacks_in_use);
    EXPECT_GE(s1.stacks_cached, 1u);
    EXPECT_EQ(0u, s1.threads_live);
}

// "Bound late": threads spawned onto a one-worker cluster by its running
// thread do not run (and so hold no stack) until it yields.
TEST(Stack, StackBoundWhenThreadFirstRuns) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    const int N = (int)tsan_capped(5000, 1000);
    std::atomic<int> ran{0};
    uint64_t in_use_before = 0, in_use_after_spawn = 0, mapped_before = 0, mapped_after = 0;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, c, [&] {
        struct fern_stats s;
        fern_stats(&s);
        in_use_before = s.stacks_in_use;
        mapped_before = s.stacks_mapped;
        fern_attr a{};
        a.detached = true;
        struct timespec c0, c1; // the worker's CPU time
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        for (int i = 0; i < N; i++) {
            auto fn = [](void *p) -> void * {
                static_cast<std::atomic<int> *>(p)->fetch_add(1);
                return nullptr;
            };
            ASSERT_EQ(0, fern_spawn(nullptr, &a, fn, &ran));
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        fern_stats(&s);
        in_use_after_spawn = s.stacks_in_use;
        // Cooperative order holds while the spawner has used less than a
        // time slice of CPU (10 ms; slices are counted in CPU time, so the
        // machine's load does not matter). Past that, preemption or (under
        // ThreadSanitizer, where spawning is slow) compensation may run the
        // children meanwhile, as they should.
        double used_ms = (c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) / 1e6;
        if (used_ms < 8)
            EXPECT_EQ(0, ran.load()) << "children ran before the spawner yielded on a 1-worker cluster";
        else
            std::printf("spawning %d threads used %.1f ms of CPU, near or over a slice: order not checked\n",
                        N, used_ms);
        while (ran.load() != N) fern_yield();
        fern_stats(&s);
        mapped_after = s.stacks_mapped;
    }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_LT(in_use_after_spawn - in_use_before, 64u) << "stacks bound at spawn, not at first run";
    EXPECT_LT(mapped_after - mapped_before, 512u);
    EXPECT_EQ(N, ran.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Stack, HundredThousandParkedThenWoken) {
    Watchdog wd(300, "HundredThousandParkedThenWoken");
    const long N = tsan_capped(scaled(100000, 10000), 4000);
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    long waiting = 0;
    bool release = false;
    std::atomic<long> woken{0};
    struct Ctx {
        fern_mutex *m;
        fern_cond *cv;
        long *waiting;
        bool *release;
        std::atomic<long> *woken;
    } ctx{&m, &cv, &waiting, &release, &woken};
    auto body = [](void *p) -> void * {
        auto *c = static_cast<Ctx *>(p);
        fern_mutex_lock(c->m);
        ++*c->waiting;
        while (!*c->release) fern_cond_wait(c->cv, c->m);
        fern_mutex_unlock(c->m);
        c->woken->fetch_add(1);
        return nullptr;
    };
    std::vector<fern_thread *> ts(N);
    for (long i = 0; i < N; i++) ASSERT_EQ(0, fern_spawn(&ts[i], nullptr, body, &ctx)) << i;
    wait_for_count(&m, &waiting, (long)N, 5);
    struct fern_stats s;
    ASSERT_EQ(0, fern_stats(&s));
    EXPECT_GE(s.threads_live, (uint64_t)N);
    EXPECT_GE(s.stacks_in_use, (uint64_t)N);
    EXPECT_GE(s.stack_bytes_reserved, (uint64_t)N * FERN_STACK_MIN);
    EXPECT_EQ(0, woken.load());
    fern_mutex_lock(&m);
    release = true;
    fern_cond_broadcast(&cv);
    fern_mutex_unlock(&m);
    for (long i = 0; i < N; i++) ASSERT_EQ(0, fern_join(ts[i], nullptr));
    EXPECT_EQ(N, woken.load());
    wait_until([&] { return fern_stats(&s) == 0 && s.stacks_in_use == 0; }, 2000);
    ASSERT_EQ(0, fern_stats(&s));
    EXPECT_EQ(0u, s.threads_live);
    EXPECT_EQ(0u, s.stacks_in_use);
}

// The global pool (more stacks than the workers' caches hold): rounds of
// N threads parked at once on a two-worker cluster, some going deep. Every
// later round is served from the pools (clean stacks first, then dirty
// ones, and those an idle worker trimmed meanwhile), mapping at most what
// the other worker's cache may hold meanwhile,
// no stack is handed to two threads (each checks a mark on its own stack
// after the others have run), and none is lost (mapped = in use + cached).
TEST(Stack, PooledStacksServeLaterRoundsWhole) {
    Watchdog wd(120, "PooledStacksServeLaterRoundsWhole");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    const long N = tsan_capped(scaled(4000, 1500), 1500);
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    struct Ctx {
        fern_mutex *m;
        fern_cond *cv;
        long waiting;
        bool release;
        long deep_every;
        std::atomic<long> bad;
    } ctx{&m, &cv, 0, false, 0, {0}};
    auto body = [](void *p) -> void * {
        auto *x = static_cast<Ctx *>(p);
        volatile uintptr_t mark = (uintptr_t)&mark ^ 0x5a5a5a5a;
        fern_mutex_lock(x->m);
        long me = x->waiting++;
        while (!x->release) fern_cond_wait(x->cv, x->m);
        fern_mutex_unlock(x->m);
        if (x->deep_every && me % x->deep_every == 0) {
            volatile char deep[64 * 1024];
            for (size_t i = 0; i < sizeof deep; i += 512) deep[i] = (char)i;
        }
        if (mark != ((uintptr_t)&mark ^ 0x5a5a5a5a)) x->bad++;
        return nullptr;
    };
    uint64_t mapped_after_first = 0;
    for (int round = 0; round < 4; round++) {
        ctx.waiting = 0;
        ctx.release = false;
        ctx.deep_every = round == 1 ? 3 : 0; // dirty stacks for the pool
        std::vector<fern_thread *> ts(N);
        fern_attr attr = {0, nullptr, c, false};
        for (long i = 0; i < N; i++) ASSERT_EQ(0, fern_spawn(&ts[i], &attr, body, &ctx)) << i;
        wait_for_count(&m, &ctx.waiting, N, 2);
        fern_mutex_lock(&m);
        ctx.release = true;
        fern_cond_broadcast(&cv);
        fern_mutex_unlock(&m);
        for (long i = 0; i < N; i++) ASSERT_EQ(0, fern_join(ts[i], nullptr));
        struct fern_stats s;
        wait_until([&] { return fern_stats(&s) == 0 && s.stacks_in_use == 0; }, 2000);
        ASSERT_EQ(0, fern_stats(&s));
        EXPECT_EQ(0u, s.stacks_in_use);
        EXPECT_EQ(s.stacks_mapped, s.stacks_cached) << "round " << round << ": a stack was lost";
        if (round == 0)
            mapped_after_first = s.stacks_mapped;
        else // a worker's own cache (256 cold + 4 hot) may sit idle while the other maps
            EXPECT_LE(s.stacks_mapped - mapped_after_first, 2u * 260) << "round " << round << " mapped more stacks";
        if (round == 2) // the deep ones of round 1 get trimmed while idle
            wait_until([&] { return fern_stats(&s) == 0 && s.stack_trims > 0; }, 5000);
    }
    EXPECT_GE(mapped_after_first, (uint64_t)N);
    EXPECT_EQ(0, ctx.bad.load()) << "threads found their stack written by another";
    struct fern_stats s;
    ASSERT_EQ(0, fern_stats(&s));
    EXPECT_GT(s.stack_trims, 0u);
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

bool kernel_has_madv_guard() {
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
    long pg = sysconf(_SC_PAGESIZE);
    void *p = mmap(nullptr, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    // Accepted is not enough: qemu-user takes the advice and ignores it. A
    // write(2) from a real guard fails with EFAULT.
    bool ok = madvise(p, pg, MADV_GUARD_INSTALL) == 0;
    int fd[2];
    if (ok && pipe(fd) == 0) {
        ok = write(fd[1], p, 1) < 0 && errno == EFAULT;
        close(fd[0]);
        close(fd[1]);
    }
    munmap(p, 4 * pg);
    return ok;
}

TEST(Stack, GuardCounters) {
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, noop, nullptr));
    ASSERT_EQ(0, fern_join(t, nullptr));
    struct fern_stats s;
    wait_until([&] { return fern_stats(&s) == 0 && s.stacks_in_use == 0; }, 2000);
    ASSERT_EQ(0, fern_stats(&s));
    EXPECT_GE(s.stacks_mapped, 1u);
    EXPECT_EQ(s.stacks_mapped, s.guards_madvise + s.guards_mprotect + s.guards_canary)
        << "every stack slot has exactly one kind of protection";
    EXPECT_EQ(s.stacks_mapped, s.stacks_in_use + s.stacks_cached);
    EXPECT_GE(s.stack_bytes_reserved, s.stacks_mapped * FERN_STACK_MIN);
    if (kernel_has_madv_guard()) {
        EXPECT_EQ(FERN_GUARD_MADVISE, s.guard_mode);
        EXPECT_GE(s.guards_madvise, 1u);
        EXPECT_EQ(0u, s.guards_canary);
    } else {
        EXPECT_NE(FERN_GUARD_MADVISE, s.guard_mode);
        EXPECT_EQ(0u, s.guards_madvise);
    }
}

// Guard markers show in /proc/self/pagemap (bit 58, Linux 6.14+): is page p
// one? -1 if pagemap cannot say.
// pagemap has one entry per page of the kernel's size (4, 16 or 64 KiB).
int pagemap_guard(int fd, uintptr_t p) {
    uint64_t e = 0;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (pread(fd, &e, sizeof e, (off_t)(p / pg * sizeof e)) != (ssize_t)sizeof e) return -1;
    return (int)((e >> 58) & 1);
}

bool pagemap_shows_guards(int fd) {
    long pg = sysconf(_SC_PAGESIZE);
    char *p = (char *)mmap(nullptr, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    bool ok = madvise(p, pg, MADV_GUARD_INSTALL) == 0 && pagemap_guard(fd, (uintptr_t)p) == 1 &&
              pagemap_guard(fd, (uintptr_t)p + pg) == 0;
    munmap(p, 2 * pg);
    return ok;
}

// Many threads of a class park at once (several guard batches, claims that
// run into a slab's end); each stack's first page below its usable range must
// be a guard marker, and no page in between.
void every_parked_stack_guarded() {
    int fd = open("/proc/self/pagemap", O_RDONLY);
    ASSERT_GE(fd, 0);
    if (!pagemap_shows_guards(fd)) {
        close(fd);
        GTEST_SKIP() << "no MADV_GUARD_INSTALL, or pagemap does not show guard markers";
    }
    const int N = (int)tsan_capped(200, 200);
    const size_t size = 64 * 1024;
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    int waiting = 0;
    bool release = false;
    std::vector<uintptr_t> where(N);
    struct Ctx {
        fern_mutex *m;
        fern_cond *cv;
        int *waiting;
        bool *release;
        uintptr_t *where;
    } ctx{&m, &cv, &waiting, &release, where.data()};
    auto body = [](void *p) -> void * {
        auto *c = static_cast<Ctx *>(p);
        volatile char here = 0;
        fern_mutex_lock(c->m);
        c->where[(*c->waiting)++] = (uintptr_t)&here;
        while (!*c->release) fern_cond_wait(c->cv, c->m);
        fern_mutex_unlock(c->m);
        return nullptr;
    };
    fern_attr a{};
    a.stack_size = size;
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++) ASSERT_EQ(0, fern_spawn(&ts[i], &a, body, &ctx));
    wait_for_count(&m, &waiting, N, 1);
    struct fern_stats s;
    ASSERT_EQ(0, fern_stats(&s));
    EXPECT_EQ(FERN_GUARD_MADVISE, s.guard_mode);
    EXPECT_EQ(0u, s.guards_canary);
    for (int i = 0; i < N; i++) {
        // The local is in the stack's top page; the guard is the page
        // below the usable size (the size, or a whole page if bigger)
        // under that page's end.
        uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t top = (where[i] | (pg - 1)) + 1, guard = top - std::max<uintptr_t>(size, pg) - pg;
        EXPECT_EQ(1, pagemap_guard(fd, guard)) << "thread " << i;
        int inside = 0;
        for (uintptr_t q = guard + pg; q < top; q += pg) inside += pagemap_guard(fd, q) == 1;
        EXPECT_EQ(0, inside) << "thread " << i;
    }
    fern_mutex_lock(&m);
    release = true;
    fern_cond_broadcast(&cv);
    fern_mutex_unlock(&m);
    for (int i = 0; i < N; i++) ASSERT_EQ(0, fern_join(ts[i], nullptr));
    close(fd);
}

TEST(Stack, EveryStackGuardedBatched) { every_parked_stack_guarded(); }

// FERN_GUARD=madvise: one MADV_GUARD_INSTALL call per stack, no batches.
TEST(Stack, EveryStackGuardedOneCallPerStack) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    setenv("FERN_GUARD", "madvise", 1);
    ASSERT_EQ(0, fern_init(nullptr));
    every_parked_stack_guarded();
    ASSERT_EQ(0, fern_shutdown());
    unsetenv("FERN_GUARD");
}

// Pooled stacks that went deep are trimmed (their pages below the top 32 KiB
// returned) once their worker has been idle a while, and a worker that is
// busy with brief idle moments trims at most one batch of 32 per 10 ms
// (sched.c: TRIM_GAP_NS), so trimming does not take the CPU from work.
struct TrimCtx {
    std::atomic<int> deep{0};
    std::atomic<bool> release{false};
    int depth = 0;
    uintptr_t top[200] = {}, lowest[200] = {};
};

__attribute__((noinline, noipa)) void down_and_wait(TrimCtx *c, int i, int depth) {
    volatile char buf[1024];
    for (size_t k = 0; k < sizeof buf; k += 64) buf[k] = (char)k;
    if ((uintptr_t)&buf[0] < c->lowest[i]) c->lowest[i] = (uintptr_t)&buf[0];
    if (depth > 0) {
        down_and_wait(c, i, depth - 1);
    } else {
        c->deep.fetch_add(1);
        while (!c->release.load()) fern_yield();
    }
    (void)buf[depth % sizeof buf];
}

// Whether mincore reports residency at sysconf's page size (not under
// qemu-user with a QEMU_PAGESIZE larger than the host's: it answers per host
// page).
bool mincore_reliable() {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    char *p = (char *)mmap(nullptr, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    std::vector<unsigned char> vec(2 * pg / 4096 + 2);
    *(volatile char *)(p + pg) = 1;
    bool ok = mincore(p, 2 * pg, vec.data()) == 0 && !(vec[0] & 1) && (vec[1] & 1);
    munmap(p, 2 * pg);
    return ok;
}

// Pages of [lo, hi) resident in memory.
size_t resident_pages(uintptr_t lo, uintptr_t hi) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    lo &= ~(pg - 1);
    hi &= ~(pg - 1);
    if (hi <= lo) return 0;
    std::vector<unsigned char> vec((hi - lo) / pg);
    if (mincore((void *)lo, hi - lo, vec.data()) != 0) return (size_t)-1;
    size_t n = 0;
    for (unsigned char v : vec) n += v & 1;
    return n;
}

TEST(Stack, DeepStacksTrimmedWhenIdleNotWhileBusy) {
    Watchdog wd(120, "DeepStacksTrimmedWhenIdleNotWhileBusy");
    const int N = 200; // all stay in the worker's cache (STACK_CACHE_MAX 256)
    const size_t kStack = 256 * 1024, kKeep = 32 * 1024;
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    auto *ctx = new TrimCtx;
    ctx->depth = 96; // ~96 KiB below the top, well below the kept 32 KiB
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++) {
        fern_attr a{};
        a.cluster = c;
        a.stack_size = kStack;
        ctx->lowest[i] = UINTPTR_MAX;
        ASSERT_EQ(0, spawn(&ts[i], &a, [ctx, i] {
            volatile char marker = 0;
            ctx->top[i] = (uintptr_t)&marker;
            down_and_wait(ctx, i, ctx->depth);
        }));
    }
    ASSERT_TRUE(wait_until([&] { return ctx->deep.load() == N; }, 60000));
    for (int i = 0; i < N; i++)
        ASSERT_GE(ctx->top[i] - ctx->lowest[i], (uintptr_t)64 * 1024) << "thread " << i << " did not go deep";
    struct fern_stats s0, s1, s2;
    ASSERT_EQ(0, fern_stats(&s0));
    auto t0 = std::chrono::steady_clock::now();
    // Busy with brief idle moments: a thread sleeping 200 us at a time for
    // 30 ms keeps the worker from ever being idle 5 ms, while the deep
    // threads end and their stacks go cold in its cache. The busy phase's
    // counts are taken by that thread as it ends, while the worker is still
    // busy: the joins from this plain thread may take longer (under
    // ThreadSanitizer, more than 5 ms), and once the thread has ended the
    // worker is idle and trims, as it should.
    fern_thread *busy = nullptr;
    double busy_ms = 0;
    ASSERT_EQ(0, spawn_on(&busy, c, [&] {
        int64_t end = fern_now_ns() + 30 * 1000000LL;
        while (fern_now_ns() < end) fern_sleep_ns(200 * 1000);
        ASSERT_EQ(0, fern_stats(&s1));
        busy_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }));
    ctx->release.store(true);
    for (int i = 0; i < N; i++) ASSERT_EQ(0, fern_join(ts[i], nullptr));
    ASSERT_EQ(0, fern_join(busy, nullptr));
    uint64_t bound = 32 * (uint64_t)(busy_ms / 10 + 1);
    if (bound < (uint64_t)N - 8)
        EXPECT_LE(s1.stack_trims - s0.stack_trims, bound)
            << "trimmed more than a batch per 10 ms while busy (" << busy_ms << " ms)";
    else
        std::printf("busy phase took %.1f ms: too slow to check the batch limit\n", busy_ms);
    // Idle now: within a few ms every cold stack is trimmed (the STACK_HOT
    // most recently freed stay as they are).
    EXPECT_TRUE(wait_until([&] { return fern_stats(&s2) == 0 && s2.stack_trims - s0.stack_trims >= (uint64_t)N - 8; },
                           10000))
        << "trims " << s2.stack_trims - s0.stack_trims;
    if (mincore_reliable()) {
        int returned = 0;
        for (int i = 0; i < N; i++)
            returned += resident_pages(ctx->lowest[i], ctx->top[i] - kKeep - 4096) == 0;
        EXPECT_GE(returned, N - 8) << "deep pages still resident in most stacks";
    } else {
        std::printf("mincore misreports at this page size (emulator): residency not checked\n");
    }
    EXPECT_EQ(0, fern_cluster_destroy(c));
    delete ctx;
}

} // namespace
