/* SPDX-License-Identifier: MIT */
// Shared helpers for the fern GoogleTest suites: run C++ callables as green
// threads, scale counts by FERN_STRESS_SCALE, shut the runtime down at the end
// of each test binary (so LeakSanitizer sees a clean process), and a watchdog
// that turns a hang (a lost wake-up) into a failure with a fern_dump.
#ifndef FERN_TESTS_FERN_TEST_H
#define FERN_TESTS_FERN_TEST_H

#include <fern/fern.h>
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

namespace fern_test {

// Death-test style. "threadsafe" re-executes the test binary, so the child
// starts with no runtime threads. Under qemu-user (FERN_TEST_EMULATED) the
// host cannot run a re-executed aarch64 binary, so there the child is forked
// instead ("fast"). That is safe because every death test is in a suite
// named *DeathTest, which GoogleTest runs before all others: the parent has
// not started the runtime yet when it forks.
// How much later than on the host a wake-up may come under emulation:
// qemu-user translates every new code path and the emulated threads share
// the host's (busy) cores, so bounds on lateness stretch by this factor.
// Bounds on earliness never do.
#ifdef FERN_TEST_EMULATED
constexpr int kLatenessScale = 5;
#else
constexpr int kLatenessScale = 1;
#endif

inline const char *death_style() {
#ifdef FERN_TEST_EMULATED
    return "fast";
#else
    return "threadsafe";
#endif
}

// FERN_STRESS_SCALE as a double (default 1; sanitizer builds set 0.1).
inline double stress_scale() {
    const char *s = std::getenv("FERN_STRESS_SCALE");
    double v = s ? std::strtod(s, nullptr) : 1.0;
    return v > 0 ? v : 1.0;
}

// n scaled by FERN_STRESS_SCALE, at least lo.
inline long scaled(long n, long lo = 1) {
    long v = static_cast<long>(static_cast<double>(n) * stress_scale());
    return v < lo ? lo : v;
}

// ThreadSanitizer tracks each green thread as a fiber, and fibers count
// against its limit of ~8000 live threads; it also makes thread creation slow.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kTsan = true;
#else
inline constexpr bool kTsan = false;
#endif
#else
inline constexpr bool kTsan = false;
#endif

// Asynchronous preemption exists where the architecture has a trampoline
// (src/arch/<arch>/arch.h: ARCH_PREEMPT): x86_64 and aarch64. Elsewhere
// fern_init would leave it off, the preemption counter would stay 0 and
// only the monitor's compensation would serve a sleeper beside spinners.
#if defined(__x86_64__) || defined(__aarch64__)
inline constexpr bool kAsyncPreempt = true;
#else
inline constexpr bool kAsyncPreempt = false;
#endif
inline constexpr const char *kNoPreemptMsg = "no asynchronous preemption on this architecture";

// n, but at most tsan_cap under ThreadSanitizer.
inline long tsan_capped(long n, long tsan_cap) { return kTsan && n > tsan_cap ? tsan_cap : n; }

inline bool runtime_running() { return fern_cluster_default() != nullptr; }

inline int64_t ms(int64_t n) { return n * 1000000; }

// A type-erased body; the trampoline owns (and frees) it.
using Body = std::function<void *()>;

inline void *body_tramp(void *a) {
    std::unique_ptr<Body> b(static_cast<Body *>(a));
    return (*b)();
}

template <class F> Body *make_body(F &&f) {
    using R = std::invoke_result_t<std::decay_t<F> &>;
    if constexpr (std::is_void_v<R>) {
        return new Body([g = std::forward<F>(f)]() mutable -> void * {
            g();
            return nullptr;
        });
    } else {
        return new Body([g = std::forward<F>(f)]() mutable -> void * {
            return (void *)(g());
        });
    }
}

// Run f() as a green thread through fern_run; returns fern_run's status.
template <class F> int run_green(F &&f, void **ret = nullptr) {
    Body *b = make_body(std::forward<F>(f));
    int rc = fern_run(body_tramp, b, ret);
    if (rc != 0) delete b;
    return rc;
}

// fern_spawn with a callable.
template <class F> int spawn(fern_thread **t, const fern_attr *attr, F &&f) {
    Body *b = make_body(std::forward<F>(f));
    int rc = fern_spawn(t, attr, body_tramp, b);
    if (rc != 0) delete b;
    return rc;
}

// fern_spawn on cluster c (NULL = current/default), joinable.
template <class F> int spawn_on(fern_thread **t, fern_cluster *c, F &&f) {
    fern_attr a{};
    a.cluster = c;
    return spawn(t, &a, std::forward<F>(f));
}

// fern_go with a callable.
template <class F> int go(F &&f) {
    Body *b = make_body(std::forward<F>(f));
    int rc = fern_go(body_tramp, b);
    if (rc != 0) delete b;
    return rc;
}

// Poll pred from a plain thread until it holds or timeout_ms passes.
template <class P> bool wait_until(P pred, int timeout_ms = 10000) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end) return pred();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}

// errno through a call the optimiser cannot see into: __errno_location() is
// declared const, so plain `errno` may be cached across a switch in test code.
__attribute__((noipa)) inline int get_errno() { return errno; }
__attribute__((noipa)) inline void set_errno(int e) { errno = e; }

// CPU time of each kernel thread of this process so far (tid -> name and
// ns, from /proc/self/task/*/schedstat), for saying which thread used what
// when a CPU bound fails.
struct ThreadCpu {
    std::string name;
    uint64_t ns = 0;
};
inline std::map<int, ThreadCpu> thread_cpu() {
    std::map<int, ThreadCpu> out;
    DIR *d = opendir("/proc/self/task");
    if (!d) return out;
    while (struct dirent *e = readdir(d)) {
        int tid = std::atoi(e->d_name);
        if (tid <= 0) continue;
        std::string base = std::string("/proc/self/task/") + e->d_name;
        ThreadCpu tc;
        if (FILE *f = std::fopen((base + "/schedstat").c_str(), "r")) {
            unsigned long long ns = 0;
            if (std::fscanf(f, "%llu", &ns) == 1) tc.ns = ns;
            std::fclose(f);
        }
        if (FILE *f = std::fopen((base + "/comm").c_str(), "r")) {
            char buf[64] = "";
            if (std::fgets(buf, sizeof buf, f)) tc.name = buf;
            std::fclose(f);
            while (!tc.name.empty() && tc.name.back() == '\n') tc.name.pop_back();
        }
        out[tid] = tc;
    }
    closedir(d);
    return out;
}
// The threads that used at least 0.1 ms between two snapshots, busiest
// first: "tid name ms; ...".
inline std::string thread_cpu_delta(const std::map<int, ThreadCpu> &a, const std::map<int, ThreadCpu> &b) {
    std::vector<std::pair<uint64_t, std::string>> used;
    for (const auto &kv : b) {
        auto it = a.find(kv.first);
        uint64_t d = kv.second.ns - (it == a.end() ? 0 : it->second.ns);
        if (d >= 100000)
            used.push_back({d, std::to_string(kv.first) + " " + kv.second.name + " " +
                                   std::to_string((double)d / 1e6) + " ms"});
    }
    std::sort(used.rbegin(), used.rend());
    std::string s;
    for (const auto &u : used) s += u.second + "; ";
    return s.empty() ? "no thread used 0.1 ms" : s;
}

// Aborts the process (after a fern_dump to stderr) if not destroyed within
// `seconds`: a hang becomes a visible failure instead of a ctest timeout.
class Watchdog {
  public:
    explicit Watchdog(int seconds, const char *what = "test")
        : th_([this, seconds, what] {
              std::unique_lock<std::mutex> lk(mu_);
              if (!cv_.wait_for(lk, std::chrono::seconds(seconds), [this] { return done_; })) {
                  std::fprintf(stderr, "WATCHDOG: %s did not finish within %d s (lost wake-up?)\n",
                               what, seconds);
                  std::fflush(stderr);
                  if (runtime_running()) {
                      // The dump takes the runtime's locks, which the hang
                      // may hold: give it 10 s, then abort anyway.
                      auto dumped = std::make_shared<std::atomic<bool>>(false);
                      std::thread([dumped] {
                          fern_dump(stderr);
                          std::fflush(stderr);
                          dumped->store(true);
                      }).detach();
                      for (int i = 0; i < 1000 && !dumped->load(); i++)
                          std::this_thread::sleep_for(std::chrono::milliseconds(10));
                      if (!dumped->load()) std::fputs("WATCHDOG: fern_dump blocked\n", stderr);
                  }
                  std::abort();
              }
          }) {}
    ~Watchdog() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            done_ = true;
        }
        cv_.notify_all();
        th_.join();
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread th_;
};

// A Watchdog around every test of a binary that appends it to gtest's
// listeners (FERN_WATCHDOG_EACH_TEST below): a hang in any test aborts with
// the test's name and a fern_dump instead of running into ctest's timeout
// with nothing to show.
class WatchdogEach : public ::testing::EmptyTestEventListener {
  public:
    explicit WatchdogEach(int seconds) : seconds_(seconds) {}
    void OnTestStart(const ::testing::TestInfo &info) override {
        name_ = std::string(info.test_suite_name()) + "." + info.name();
        wd_ = std::make_unique<Watchdog>(seconds_, name_.c_str());
    }
    void OnTestEnd(const ::testing::TestInfo &) override { wd_.reset(); }

  private:
    int seconds_;
    std::string name_;
    std::unique_ptr<Watchdog> wd_;
};

// In one source file of a test binary: every test gets `seconds`.
#define FERN_WATCHDOG_EACH_TEST(seconds)                                                           \
    static const bool fern_watchdog_each_ = [] {                                                   \
        ::testing::UnitTest::GetInstance()->listeners().Append(                                    \
            new ::fern_test::WatchdogEach(seconds));                                               \
        return true;                                                                               \
    }()

// Expect stmt to throw std::system_error whose code is errno value e in
// std::generic_category() (the C++ API's error convention).
#define FERN_EXPECT_ERRNO_THROW(stmt, e)                                                           \
    do {                                                                                           \
        try {                                                                                      \
            stmt;                                                                                  \
            ADD_FAILURE() << #stmt " did not throw";                                               \
        } catch (const std::system_error &ex_) {                                                   \
            EXPECT_EQ(std::error_code((e), std::generic_category()), ex_.code()) << ex_.what();    \
        }                                                                                          \
    } while (0)

// Shut the runtime down at the end of the binary (LeakSanitizer checks after).
class ShutdownEnv : public ::testing::Environment {
  public:
    void TearDown() override {
        if (runtime_running()) {
            EXPECT_EQ(0, fern_shutdown());
        }
    }
};

inline ::testing::Environment *const kShutdownEnv =
    ::testing::AddGlobalTestEnvironment(new ShutdownEnv);

} // namespace fern_test

#endif
