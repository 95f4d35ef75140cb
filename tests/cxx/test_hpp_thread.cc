// SPDX-License-Identifier: MIT
// fern.hpp threads: fern::thread / spawn / go, join results and exceptions,
// move-only arguments and results, options, ids, this_thread, the terminate
// rule of a joinable thread, and fern::thread_local_ptr.
#include <fern/fern.hpp>

#include "fern_test.h"

#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

using namespace std::chrono_literals;

namespace {

#define EXPECT_ERRNO_THROW FERN_EXPECT_ERRNO_THROW

static_assert(!std::is_copy_constructible_v<fern::thread<int>>);
static_assert(std::is_nothrow_move_constructible_v<fern::thread<int>>);
static_assert(std::is_same_v<decltype(fern::spawn(+[] { return 1; })), fern::thread<int>>);
static_assert(std::is_same_v<decltype(fern::spawn(+[] {})), fern::thread<void>>);

TEST(HppThread, JoinReturnsResult)
{
    auto t = fern::spawn([](int a, int b) { return a * b; }, 6, 7);
    EXPECT_TRUE(t.joinable());
    EXPECT_EQ(42, t.join());
    EXPECT_FALSE(t.joinable());

    fern::thread s([](std::string x) { return x + "!"; }, std::string("fern"));
    static_assert(std::is_same_v<decltype(s), fern::thread<std::string>>);
    EXPECT_EQ("fern!", s.join());

    int ran = 0;
    fern::thread v([&ran] { ran = 1; });
    static_assert(std::is_same_v<decltype(v.join()), void>);
    v.join();
    EXPECT_EQ(1, ran);
}

TEST(HppThread, ExplicitResultType)
{
    fern::thread<long> t([] { return 5L; });
    EXPECT_EQ(5L, t.join());
    fern::thread<void> v([] {});
    v.join();
    // The result type must be the callable's.
    static_assert(!std::is_constructible_v<fern::thread<long>, int (*)()>);
    static_assert(!std::is_constructible_v<fern::thread<void>, int (*)()>);
    static_assert(std::is_constructible_v<fern::thread<int>, int (*)()>);
}

TEST(HppThread, LvalueReferenceResult)
{
    static int cell = 1;
    auto t = fern::spawn([]() -> int & { return cell; });
    int &r = t.join();
    EXPECT_EQ(&cell, &r);
}

TEST(HppThread, MoveOnlyArgsAndResult)
{
    auto t = fern::spawn(
        [](std::unique_ptr<int> p, std::unique_ptr<std::string> s) {
            return std::make_unique<std::string>(*s + std::to_string(*p));
        },
        std::make_unique<int>(41), std::make_unique<std::string>("n="));
    std::unique_ptr<std::string> r = t.join();
    ASSERT_TRUE(r);
    EXPECT_EQ("n=41", *r);

    // A move-only callable.
    auto owned = std::make_unique<int>(9);
    auto u = fern::spawn([p = std::move(owned)] { return *p; });
    EXPECT_EQ(9, u.join());
}

// Arguments are decayed copies owned by the thread and destroyed there, after
// the call (as std::thread): a shared_ptr argument is released before join.
TEST(HppThread, ArgumentsDestroyedInThread)
{
    auto sp = std::make_shared<int>(3);
    std::weak_ptr<int> w = sp;
    auto t = fern::spawn([](std::shared_ptr<int> p) { return *p; }, std::move(sp));
    EXPECT_EQ(3, t.join());
    EXPECT_TRUE(w.expired());
}

TEST(HppThread, JoinRethrows)
{
    auto t = fern::spawn([]() -> int { throw std::runtime_error("green boom"); });
    try {
        t.join();
        ADD_FAILURE() << "no throw";
    } catch (const std::runtime_error &e) {
        EXPECT_STREQ("green boom", e.what());
    }
    EXPECT_FALSE(t.joinable());

    struct Custom {
        int v;
    };
    auto u = fern::spawn([] {
        fern::this_thread::yield();
        fern::this_thread::sleep_for(1ms);
        throw Custom{17};
    });
    try {
        u.join();
        ADD_FAILURE() << "no throw";
    } catch (const Custom &c) {
        EXPECT_EQ(17, c.v);
    }
}

// Throwing threads joined from green threads, many at once.
TEST(HppThread, JoinRethrowsFromGreenJoiners)
{
    fern_test::Watchdog wd(60, "JoinRethrowsFromGreenJoiners");
    const int N = 50;
    auto outer = fern::spawn([] {
        std::vector<fern::thread<int>> ts;
        for (int i = 0; i < N; i++)
            ts.push_back(fern::spawn([i] {
                fern::this_thread::yield();
                if (i % 2)
                    throw std::out_of_range(std::to_string(i));
                return i;
            }));
        int good = 0, thrown = 0;
        for (int i = 0; i < N; i++) {
            try {
                EXPECT_EQ(i, ts[i].join());
                good++;
            } catch (const std::out_of_range &e) {
                EXPECT_EQ(std::to_string(i), e.what());
                thrown++;
            }
        }
        return std::make_pair(good, thrown);
    });
    auto [good, thrown] = outer.join();
    EXPECT_EQ(N / 2, good);
    EXPECT_EQ(N / 2, thrown);
}

TEST(HppThread, MisuseThrowsSystemError)
{
    fern::thread<int> empty;
    EXPECT_FALSE(empty.joinable());
    EXPECT_ERRNO_THROW(empty.join(), EINVAL);
    EXPECT_ERRNO_THROW(empty.detach(), EINVAL);

    // Joining yourself: EDEADLK, and the thread stays joinable.
    fern::thread<void> *self = nullptr;
    fern::latch ready(1);
    std::atomic<int> code{0};
    fern::thread t([&] {
        ready.wait();
        try {
            self->join();
        } catch (const std::system_error &e) {
            code = e.code().value();
        }
    });
    self = &t;
    ready.count_down();
    fern_test::wait_until([&] { return code.load() != 0; });
    EXPECT_EQ(EDEADLK, code.load());
    EXPECT_TRUE(t.joinable());
    t.join();

    // Stack size out of range.
    EXPECT_ERRNO_THROW((void)fern::spawn(fern::attr{.stack_size = 1}, [] {}), EINVAL);
}

TEST(HppThread, Detach)
{
    // static: fern_wg_add touches the object after waking its waiter (see
    // HppWaitGroup.DestroyedRightAfterWait in test_hpp_sync.cc).
    static fern::wait_group done;
    done.add(1);
    static std::atomic<bool> ran;
    ran = false;
    auto t = fern::spawn([] {
        fern::this_thread::sleep_for(2ms);
        ran = true;
        done.done();
        return std::make_unique<int>(1); // discarded (freed) once detached
    });
    t.detach();
    EXPECT_FALSE(t.joinable());
    EXPECT_EQ(fern::thread_id(), t.get_id());
    done.wait();
    EXPECT_TRUE(ran.load());

    // Detaching a thread that already finished frees it; an exception it
    // stored is discarded.
    auto u = fern::spawn([] { throw std::logic_error("dropped"); });
    std::this_thread::sleep_for(5ms);
    u.detach();
}

TEST(HppThread, GoFireAndForget)
{
    const int N = 100;
    static fern::wait_group wg; // static: see the Detach test
    std::atomic<int> sum{0};
    wg.add(N);
    for (int i = 0; i < N; i++)
        fern::go(
            [&](int v, std::unique_ptr<int> p) {
                sum += v + *p;
                wg.done();
            },
            i, std::make_unique<int>(1));
    wg.wait();
    EXPECT_EQ(N * (N - 1) / 2 + N, sum.load());

    std::string seen;
    wg.add(1);
    fern::go(fern::attr{.name = "goer"}, [&] {
        seen = fern::this_thread::name();
        wg.done();
    });
    wg.wait();
    EXPECT_EQ("goer", seen);
}

TEST(HppThread, Options)
{
    auto t = fern::spawn(fern::attr{.stack_size = 256 * 1024, .name = "worker-1"}, [] {
        // Use a good part of the stack.
        volatile char buf[128 * 1024];
        buf[0] = 1;
        buf[sizeof buf - 1] = 2;
        return std::string(fern::this_thread::name()) + std::to_string(buf[0] + buf[sizeof buf - 1]);
    });
    EXPECT_EQ("worker-13", t.join());

    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern::thread on_c(fern::attr{.cluster = c}, [] { return fern_current_cluster(); });
    EXPECT_EQ(c, on_c.join());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(HppThread, Ids)
{
    EXPECT_EQ(fern::thread_id(), fern::this_thread::get_id()); // plain thread
    EXPECT_EQ(0u, fern::thread_id().value());

    fern::latch go_on(1);
    auto t = fern::spawn([&] {
        go_on.wait();
        return fern::this_thread::get_id();
    });
    fern::thread_id id = t.get_id();
    EXPECT_NE(fern::thread_id(), id);
    EXPECT_EQ(fern_thread_id(t.native_handle()), id.value());
    go_on.count_down();
    EXPECT_EQ(id, t.join());
    EXPECT_EQ(fern::thread_id(), t.get_id());
    EXPECT_EQ(nullptr, t.native_handle());

    std::vector<fern::thread<fern::thread_id>> ts;
    for (int i = 0; i < 20; i++)
        ts.push_back(fern::spawn([] { return fern::this_thread::get_id(); }));
    std::unordered_set<fern::thread_id> ids;
    std::set<fern::thread_id> ordered;
    for (auto &x : ts) {
        auto v = x.join();
        ids.insert(v);
        ordered.insert(v);
    }
    EXPECT_EQ(20u, ids.size());
    EXPECT_EQ(20u, ordered.size());
    std::ostringstream os;
    os << id;
    EXPECT_EQ(std::to_string(id.value()), os.str());
}

TEST(HppThread, MoveAndSwap)
{
    fern::thread<int> a([] { return 1; });
    fern::thread<int> b(std::move(a));
    EXPECT_FALSE(a.joinable());
    EXPECT_TRUE(b.joinable());
    fern::thread<int> c;
    c = std::move(b);
    fern::thread<int> d([] { return 2; });
    swap(c, d);
    EXPECT_EQ(2, c.join());
    EXPECT_EQ(1, d.join());
}

TEST(HppThread, ManyThreads)
{
    fern_test::Watchdog wd(60, "ManyThreads");
    const int N = static_cast<int>(fern_test::tsan_capped(fern_test::scaled(5000, 200), 500));
    std::vector<fern::thread<long>> ts;
    ts.reserve(N);
    for (int i = 0; i < N; i++)
        ts.push_back(fern::spawn([i] {
            fern::this_thread::yield();
            return static_cast<long>(i);
        }));
    long sum = 0;
    for (auto &t : ts)
        sum += t.join();
    EXPECT_EQ(static_cast<long>(N) * (N - 1) / 2, sum);
}

TEST(HppThisThread, SleepForAndUntil)
{
    // steady_clock and fern's clock are the same clock.
    int64_t f0 = fern_now_ns();
    int64_t s = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
    int64_t f1 = fern_now_ns();
    EXPECT_LE(f0, s);
    EXPECT_LE(s, f1);

    auto body = [] {
        auto t0 = std::chrono::steady_clock::now();
        fern::this_thread::sleep_for(5ms);
        auto t1 = std::chrono::steady_clock::now();
        EXPECT_GE(t1 - t0, 5ms);
        fern::this_thread::sleep_until(t1 + 5ms);
        EXPECT_GE(std::chrono::steady_clock::now(), t1 + 5ms);
        // Another clock: converted once.
        auto sys = std::chrono::system_clock::now();
        fern::this_thread::sleep_until(sys + 3ms);
        EXPECT_GE(std::chrono::system_clock::now(), sys + 2ms);
        // Past and negative: no wait, no error.
        fern::this_thread::sleep_for(-1s);
        fern::this_thread::sleep_until(std::chrono::steady_clock::time_point{});
        fern::this_thread::sleep_for(std::chrono::duration<double, std::milli>(0.5));
    };
    body(); // plain thread
    fern::spawn(body).join();
}

// Two green threads on one worker alternate through yield().
TEST(HppThisThread, YieldInterleaves)
{
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    std::string trace;
    auto body = [&trace](char ch) {
        for (int i = 0; i < 3; i++) {
            trace += ch;
            fern::this_thread::yield();
        }
    };
    fern::thread a(fern::attr{.cluster = c}, body, 'a');
    fern::thread b(fern::attr{.cluster = c}, body, 'b');
    a.join();
    b.join();
    EXPECT_EQ(6u, trace.size());
    EXPECT_NE(std::string::npos, trace.find("ab")) << trace;
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(HppThisThread, NameAndGreen)
{
    EXPECT_FALSE(fern::this_thread::is_green());
    EXPECT_ERRNO_THROW(fern::this_thread::set_name("x"), EPERM);
    auto t = fern::spawn([] {
        EXPECT_TRUE(fern::this_thread::is_green());
        fern::this_thread::set_name("renamed");
        return std::string(fern::this_thread::name());
    });
    EXPECT_EQ("renamed", t.join());
}

struct CountingDelete {
    static inline std::atomic<int> deleted{0};
    void operator()(int *p) const noexcept
    {
        deleted++;
        delete p;
    }
};

TEST(HppThreadLocalPtr, PerGreenThreadValues)
{
    fern::thread_local_ptr<int, CountingDelete> tl;
    CountingDelete::deleted = 0;
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1)); // all on one worker: same kernel thread
    const int N = 8;
    std::vector<fern::thread<int>> ts;
    for (int i = 0; i < N; i++)
        ts.push_back(fern::spawn(fern::attr{.cluster = c}, [&tl, i] {
            EXPECT_EQ(nullptr, tl.get());
            tl.reset(new int(i));
            int bad = 0;
            for (int k = 0; k < 5; k++) {
                fern::this_thread::yield();
                if (!tl || *tl != i)
                    bad++;
            }
            if (i == 0) {
                tl.reset(new int(100)); // replaces (deletes) the old value
                EXPECT_EQ(100, *tl);
            }
            if (i == 1) {
                std::unique_ptr<int> mine(tl.release());
                EXPECT_EQ(1, *mine);
                EXPECT_FALSE(tl);
            }
            return bad;
        }));
    for (auto &t : ts)
        EXPECT_EQ(0, t.join());
    // N values deleted at thread exit (thread 1 released its value), plus the
    // one replaced by reset in thread 0.
    EXPECT_EQ(N, CountingDelete::deleted.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(HppThreadLocalPtr, PlainThread)
{
    fern::thread_local_ptr<std::string> tl;
    EXPECT_FALSE(tl);
    tl.reset(new std::string("plain"));
    EXPECT_EQ(5u, tl->size());
    auto t = fern::spawn([&] { return tl.get() == nullptr; });
    EXPECT_TRUE(t.join());
    tl.reset(); // the main thread never exits through pthread_exit
}

// A joinable fern::thread destroyed without join/detach ends the process
// through std::terminate, as std::thread does.
TEST(HppThreadDeathTest, JoinableDestroyedTerminates)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_DEATH(
        {
            fern::thread t([] { fern::this_thread::sleep_for(1ms); });
        },
        "terminate");
}

TEST(HppThreadDeathTest, AssignOverJoinableTerminates)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_DEATH(
        {
            fern::thread<void> t([] {});
            t = fern::thread<void>([] {});
        },
        "terminate");
}

TEST(HppThreadDeathTest, ExceptionEscapingGoTerminates)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_DEATH(
        {
            fern::go([] { throw std::runtime_error("nobody catches this"); });
            fern::this_thread::sleep_for(10s);
        },
        "nobody catches this");
}

} // namespace
