// SPDX-License-Identifier: MIT
// The blocking pool: fern_blocking runs fn on a helper kernel thread while the
// calling green thread is parked (its worker keeps running others), carries
// fn's result and errno back, grows on demand up to $FERN_BLOCKING_MAX; from a
// plain thread fn runs inline. fern_pread / fern_pwrite go through it.
#include "fern_test.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

using namespace fern_test;

namespace {

constexpr int64_t kMs = 1000000LL;

pid_t tid() { return (pid_t)syscall(SYS_gettid); }

void *fn_tid(void *) { return (void *)(intptr_t)tid(); }

void *fn_errno(void *arg) {
    errno = (int)(intptr_t)arg;
    return (void *)(intptr_t)4242;
}

template <class F> fern_thread *spawn_c(fern_cluster *c, F &&f) {
    fern_thread *t = nullptr;
    EXPECT_EQ(0, spawn_on(&t, c, std::forward<F>(f)));
    return t;
}

void join(fern_thread *t) {
    if (t) {
        EXPECT_EQ(0, fern_join(t, nullptr));
    }
}

class BlockingOneWorker : public ::testing::Test {
  protected:
    void SetUp() override { ASSERT_EQ(0, fern_cluster_create(&c1, 1)); }
    void TearDown() override {
        if (c1) {
            EXPECT_EQ(0, fern_cluster_destroy(c1));
        }
    }
    fern_cluster *c1 = nullptr;
};

TEST_F(BlockingOneWorker, RunsOnAnotherKernelThread) {
    Watchdog wd(30);
    pid_t caller = 0, helper = 0, after = 0;
    fern_thread *t = spawn_c(c1, [&] {
        caller = tid();
        helper = (pid_t)(intptr_t)fern_blocking(fn_tid, nullptr);
        after = tid();
        EXPECT_EQ(c1, fern_current_cluster()) << "came back on another cluster";
    });
    join(t);
    EXPECT_NE(0, caller);
    EXPECT_NE(0, helper);
    EXPECT_NE(caller, helper) << "fn ran on the worker";
    EXPECT_NE(getpid(), helper);
    EXPECT_EQ(caller, after) << "a 1-worker cluster has one kernel thread";
}

TEST_F(BlockingOneWorker, OtherGreenThreadsRunMeanwhile) {
    Watchdog wd(60);
    std::atomic<long> counter{0};
    std::atomic<bool> stop{false};
    std::atomic<long> before{-1}, after{-1};
    std::atomic<int64_t> took{0};
    fern_thread *ct = spawn_c(c1, [&] {
        int64_t end = fern_now_ns() + 30000 * kMs;
        while (!stop.load() && fern_now_ns() < end) {
            counter++;
            fern_yield();
        }
    });
    fern_thread *bt = spawn_c(c1, [&] {
        fern_yield();
        before = counter.load();
        int64_t t0 = fern_now_ns();
        void *r = fern_blocking(
            [](void *) -> void * {
                usleep(200000); // a 200 ms blocking sleep on the helper
                return (void *)(intptr_t)7;
            },
            nullptr);
        took = fern_now_ns() - t0;
        after = counter.load();
        EXPECT_EQ((void *)(intptr_t)7, r);
    });
    join(bt);
    stop = true;
    join(ct);
    EXPECT_GE(took.load(), 195 * kMs);
    EXPECT_GT(after.load() - before.load(), 100)
        << "the counter on the same worker did not run during fern_blocking";
}

TEST(Blocking, ReturnsResultAndCarriesErrno) {
    Watchdog wd(30);
    ASSERT_EQ(0, run_green([] {
        set_errno(0);
        void *r = fern_blocking(fn_errno, (void *)(intptr_t)ENOENT);
        int e = get_errno();
        EXPECT_EQ((void *)(intptr_t)4242, r);
        EXPECT_EQ(ENOENT, e);
        set_errno(0);
        fern_blocking(fn_errno, (void *)(intptr_t)EDOM);
        EXPECT_EQ(EDOM, get_errno());
        // errno survives later parks of the caller.
        fern_sleep_ns(kMs);
        fern_yield();
        EXPECT_EQ(EDOM, get_errno());
        int x = 5;
        void *p = fern_blocking([](void *a) -> void * { return (void *)((int *)a + 1); }, &x);
        EXPECT_EQ((void *)(&x + 1), p);
    }));
}

TEST(Blocking, NullFnIsEinval) {
    ASSERT_EQ(0, run_green([] {
        set_errno(0);
        EXPECT_EQ(nullptr, fern_blocking(nullptr, nullptr));
        EXPECT_EQ(EINVAL, get_errno());
    }));
    set_errno(0);
    EXPECT_EQ(nullptr, fern_blocking(nullptr, (void *)1));
    EXPECT_EQ(EINVAL, get_errno());
}

TEST(Blocking, PlainThreadRunsInline) {
    pid_t me = tid();
    EXPECT_EQ(me, (pid_t)(intptr_t)fern_blocking(fn_tid, nullptr));
    set_errno(0);
    EXPECT_EQ((void *)(intptr_t)4242, fern_blocking(fn_errno, (void *)(intptr_t)EACCES));
    EXPECT_EQ(EACCES, get_errno());
    std::thread t([] {
        pid_t self = tid();
        EXPECT_EQ(self, (pid_t)(intptr_t)fern_blocking(fn_tid, nullptr));
    });
    t.join();
}

// n green threads each sleep 20 ms in fern_blocking: with a pool that grows
// this takes a fraction of the serial n * 20 ms.
void many_concurrent(fern_cluster *c, int n, const char *what) {
    Watchdog wd(120, what);
    std::mutex mu;
    std::set<pid_t> tids;
    std::atomic<int> conc{0}, maxconc{0};
    struct Arg {
        std::atomic<int> *conc, *maxconc;
    } a{&conc, &maxconc};
    auto fn = [](void *p) -> void * {
        Arg *a = (Arg *)p;
        int c = ++*a->conc;
        int m = a->maxconc->load();
        while (c > m && !a->maxconc->compare_exchange_weak(m, c)) {}
        usleep(20000);
        --*a->conc;
        return (void *)(intptr_t)tid();
    };
    std::vector<fern_thread *> ts;
    int64_t t0 = fern_now_ns();
    for (int i = 0; i < n; i++) {
        ts.push_back(spawn_c(c, [&] {
            pid_t h = (pid_t)(intptr_t)fern_blocking(fn, &a);
            std::lock_guard<std::mutex> g(mu);
            tids.insert(h);
        }));
    }
    for (auto t : ts) join(t);
    int64_t el = fern_now_ns() - t0;
    int64_t serial = (int64_t)n * 20 * kMs;
    EXPECT_LT(el, serial / 2) << what << ": " << n << " x 20 ms took " << el / kMs
                              << " ms; helpers used " << tids.size() << ", max concurrent "
                              << maxconc.load();
    EXPECT_GE(maxconc.load(), 8) << what << ": the pool did not grow";
    EXPECT_GE(tids.size(), 8u) << what;
}

TEST_F(BlockingOneWorker, ManyConcurrentCallsPoolGrows) {
    const int n = (int)tsan_capped(200, 200);
    many_concurrent(c1, n, "first burst");
    // Again, now with idle helpers left from the first burst.
    many_concurrent(c1, n, "second burst (idle helpers)");
    many_concurrent(nullptr, n, "default cluster");
}

// $FERN_BLOCKING_MAX caps the pool. Needs a fresh process: the variable is
// read when the runtime first uses the pool.
void cap_child() {
    alarm(60);
    setenv("FERN_BLOCKING_MAX", "3", 1);
    if (fern_cluster_default() != nullptr) _exit(90); // runtime already up
    if (fern_init(nullptr) != 0) _exit(91);
    std::atomic<int> conc{0}, maxconc{0};
    std::mutex mu;
    std::set<pid_t> tids;
    struct Arg {
        std::atomic<int> *conc, *maxconc;
    } a{&conc, &maxconc};
    auto fn = [](void *p) -> void * {
        Arg *a = (Arg *)p;
        int c = ++*a->conc;
        int m = a->maxconc->load();
        while (c > m && !a->maxconc->compare_exchange_weak(m, c)) {}
        usleep(30000);
        --*a->conc;
        return (void *)(intptr_t)tid();
    };
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 24; i++) {
        fern_thread *t = nullptr;
        if (spawn(&t, nullptr, [&] {
                pid_t h = (pid_t)(intptr_t)fern_blocking(fn, &a);
                std::lock_guard<std::mutex> g(mu);
                tids.insert(h);
            }) != 0)
            _exit(92);
        ts.push_back(t);
    }
    for (auto t : ts) fern_join(t, nullptr);
    if (tids.size() > 3) _exit(40 + (int)std::min<size_t>(tids.size(), 40));
    _exit(maxconc.load()); // expected: 3
}

TEST(BlockingDeathTest, EnvMaxCapsPool) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(cap_child(), ::testing::ExitedWithCode(3), "");
}

// The pool works again after a restart of the runtime.
TEST(BlockingDeathTest, WorksAfterShutdownAndRestart) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(
        {
            alarm(60);
            for (int round = 0; round < 3; round++) {
                void *r = nullptr;
                if (run_green([] { return fern_blocking(fn_tid, nullptr); }, &r) != 0) _exit(10);
                if ((pid_t)(intptr_t)r == tid() || r == nullptr) _exit(11);
                if (fern_shutdown() != 0) _exit(12);
            }
            _exit(0);
        },
        ::testing::ExitedWithCode(0), "");
}

// A burst of jobs arriving while one helper sits idle must still grow the
// pool. Pinned to one CPU in a child so the idle helper cannot wake up before
// the worker has queued the burst (the worst case of a loaded machine).
void burst_child() {
    alarm(60);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(0); // cannot pin: nothing to show
    fern_config cfg{};
    cfg.workers = 1;
    if (fern_init(&cfg) != 0) _exit(91);
    void *r = nullptr;
    if (run_green([] { return fern_blocking(fn_tid, nullptr); }, &r) != 0) _exit(92);
    usleep(50000); // the helper is idle now
    const int n = 100;
    std::mutex mu;
    std::set<pid_t> tids;
    auto fn = [](void *) -> void * {
        usleep(20000);
        return (void *)(intptr_t)tid();
    };
    std::vector<fern_thread *> ts;
    int64_t t0 = fern_now_ns();
    for (int i = 0; i < n; i++) {
        fern_thread *t = nullptr;
        if (spawn(&t, nullptr, [&] {
                pid_t h = (pid_t)(intptr_t)fern_blocking(fn, nullptr);
                std::lock_guard<std::mutex> g(mu);
                tids.insert(h);
            }) != 0)
            _exit(93);
        ts.push_back(t);
    }
    for (auto t : ts) fern_join(t, nullptr);
    int64_t el = fern_now_ns() - t0;
    std::fprintf(stderr, "burst: %d x 20 ms in %lld ms on %zu helpers\n", n, (long long)(el / kMs),
                 tids.size());
    if (el >= (int64_t)n * 20 * kMs / 2) _exit(10 + (int)std::min<size_t>(tids.size(), 100));
    _exit(0);
}

TEST(BlockingDeathTest, BurstWhileOneHelperIdleGrowsPool) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(burst_child(), ::testing::ExitedWithCode(0), "");
}

class TempFile {
  public:
    TempFile() {
        char path[] = "/tmp/fern_blocking_XXXXXX";
        fd = mkstemp(path);
        if (fd >= 0) unlink(path);
    }
    ~TempFile() {
        if (fd >= 0) close(fd);
    }
    int fd = -1;
};

TEST(Blocking, PreadPwriteRoundTripAtOffsets) {
    Watchdog wd(30);
    TempFile f;
    ASSERT_GE(f.fd, 0);
    auto body = [&] {
        const int64_t offs[] = {0, 4096, 12345, 1 << 20, (int64_t)5 << 30};
        for (int64_t o : offs) {
            std::string s = "at-" + std::to_string(o);
            EXPECT_EQ((ssize_t)s.size(), fern_pwrite(f.fd, s.data(), s.size(), o)) << strerror(get_errno());
        }
        for (int64_t o : offs) {
            std::string s = "at-" + std::to_string(o);
            char buf[64] = {};
            EXPECT_EQ((ssize_t)s.size(), fern_pread(f.fd, buf, s.size(), o));
            EXPECT_EQ(s, std::string(buf, s.size()));
        }
        // A hole reads as zeros; past EOF reads 0 bytes.
        char z[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        EXPECT_EQ(8, fern_pread(f.fd, z, 8, 100000));
        for (char c : z) EXPECT_EQ(0, c);
        EXPECT_EQ(0, fern_pread(f.fd, z, 8, ((int64_t)5 << 30) + 1000));
        // The file offset is untouched.
        EXPECT_EQ(0, lseek(f.fd, 0, SEEK_CUR));
        // Errors: -1 with errno.
        set_errno(0);
        EXPECT_EQ(-1, fern_pread(-1, z, 8, 0));
        EXPECT_EQ(EBADF, get_errno());
        set_errno(0);
        EXPECT_EQ(-1, fern_pwrite(f.fd, z, 8, -5));
        EXPECT_EQ(EINVAL, get_errno());
    };
    ASSERT_EQ(0, run_green(body));
    body(); // plain thread
}

TEST(Blocking, ConcurrentPwriteDisjointOffsets) {
    Watchdog wd(60);
    TempFile f;
    ASSERT_GE(f.fd, 0);
    const int n = 64;
    const size_t blk = 8192;
    std::vector<fern_thread *> ts;
    for (int i = 0; i < n; i++) {
        ts.push_back(spawn_c(nullptr, [&, i] {
            std::vector<char> b(blk, (char)('A' + i % 26));
            EXPECT_EQ((ssize_t)blk, fern_pwrite(f.fd, b.data(), blk, (int64_t)i * (int64_t)blk));
            std::vector<char> r(blk);
            EXPECT_EQ((ssize_t)blk, fern_pread(f.fd, r.data(), blk, (int64_t)i * (int64_t)blk));
            EXPECT_EQ(b, r);
        }));
    }
    for (auto t : ts) join(t);
    std::vector<char> all((size_t)n * blk);
    ASSERT_EQ((ssize_t)all.size(), pread(f.fd, all.data(), all.size(), 0));
    for (int i = 0; i < n; i++)
        EXPECT_EQ((char)('A' + i % 26), all[(size_t)i * blk + blk / 2]) << "block " << i;
}

} // namespace
