// SPDX-License-Identifier: MIT
// C++ inside green threads: exceptions (also across yields, migrations and
// with other threads throwing on the same worker) and heavy std:: containers.
#include "fern_test.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

using namespace fern_test;

namespace {

struct Boom {
    int id;
    std::string what;
};

__attribute__((noinline)) void throw_after_yields(int id, int yields) {
    std::string local = "frame-" + std::to_string(id);
    for (int i = 0; i < yields; i++) fern_yield();
    if (yields >= 0) throw Boom{id, local};
}

__attribute__((noinline)) int nested(int id, int depth, int yields) {
    std::vector<int> guard(8, depth);  // a destructor to run while unwinding
    if (depth <= 0) {
        throw_after_yields(id, yields);
        return 0;
    }
    return nested(id, depth - 1, yields) + guard[0];
}

TEST(Cxx, ExceptionCaughtInGreen) {
    ASSERT_EQ(0, run_green([] {
        bool caught = false;
        try {
            throw std::runtime_error("green");
        } catch (const std::runtime_error &e) {
            caught = std::string(e.what()) == "green";
        }
        EXPECT_TRUE(caught);
    }));
}

TEST(Cxx, ExceptionAcrossYield) {
    ASSERT_EQ(0, run_green([] {
        for (int k = 0; k < 10; k++) {
            try {
                nested(k, 5, 3);
                ADD_FAILURE() << "no throw";
            } catch (const Boom &b) {
                EXPECT_EQ(k, b.id);
                EXPECT_EQ("frame-" + std::to_string(k), b.what);
            }
        }
    }));
}

// Many threads on one worker, each throwing its own exception after yields:
// each catches its own.
TEST(Cxx, ManyThrowersOnOneWorker) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    constexpr int N = 64;
    std::atomic<int> good{0}, bad{0};
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], c, [&, i] {
            for (int k = 0; k < 20; k++) {
                try {
                    nested(i * 1000 + k, 3 + (i % 4), 1 + (k % 3));
                    bad++;
                } catch (const Boom &b) {
                    if (b.id == i * 1000 + k && b.what == "frame-" + std::to_string(b.id)) good++;
                    else bad++;
                } catch (...) {
                    bad++;
                }
                fern_yield();
            }
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(N * 20, good.load());
    EXPECT_EQ(0, bad.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// Same on several workers with migration in between try and throw: the
// unwinder runs on a different kernel thread from the one that entered try.
TEST(Cxx, ThrowAfterMigration) {
    fern_cluster *a = nullptr, *b = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&a, 2));
    ASSERT_EQ(0, fern_cluster_create(&b, 2));
    constexpr int N = 32;
    std::atomic<int> good{0};
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], (i & 1) ? a : b, [&, i] {
            for (int k = 0; k < 10; k++) {
                try {
                    std::string s(100, 'a' + (k % 26));
                    fern_migrate(((i + k) & 1) ? a : b);
                    if (k % 2) fern_sleep_ns(10000);
                    throw std::out_of_range(s);
                } catch (const std::out_of_range &e) {
                    if (std::string(e.what()) == std::string(100, 'a' + (k % 26))) good++;
                }
            }
            fern_migrate(fern_cluster_default());
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(N * 10, good.load());
    EXPECT_EQ(0, fern_cluster_destroy(a));
    EXPECT_EQ(0, fern_cluster_destroy(b));
}

TEST(Cxx, DestructorsRunDuringUnwindInGreen) {
    static std::atomic<int> dtors{0};
    struct D {
        ~D() { dtors++; }
    };
    dtors = 0;
    ASSERT_EQ(0, run_green([] {
        try {
            D d1;
            fern_yield();
            D d2;
            fern_sleep_ns(1000);
            throw 5;
        } catch (int v) {
            EXPECT_EQ(5, v);
        }
    }));
    EXPECT_EQ(2, dtors.load());
}

TEST(Cxx, StdContainersHeavyWork) {
    constexpr int N = 32;
    std::vector<fern_thread *> ts(N);
    std::atomic<int> ok{0};
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn(&ts[i], nullptr, [&, i] {
            std::map<std::string, std::vector<int>> m;
            for (int k = 0; k < 2000; k++) {
                std::string key = std::to_string((k * 31 + i) % 500);
                key.insert(0, 1, 'k');
                m[key].push_back(k);
                if (k % 100 == 0) fern_yield();
            }
            size_t total = 0;
            for (auto &[key, v] : m) {
                std::sort(v.begin(), v.end(), std::greater<int>());
                total += v.size();
            }
            std::string big;
            for (int k = 0; k < 1000; k++) big += std::to_string(k);
            if (total == 2000 && m.size() == 500 && big.size() == 2890) ok++;
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(N, ok.load());
}

// std::exception_ptr carried out of a green thread and rethrown on a plain one.
TEST(Cxx, ExceptionPtrOutOfGreen) {
    std::exception_ptr ep;
    ASSERT_EQ(0, run_green([&] {
        try {
            throw std::logic_error("carried");
        } catch (...) {
            ep = std::current_exception();
        }
    }));
    ASSERT_TRUE(ep);
    try {
        std::rethrow_exception(ep);
    } catch (const std::logic_error &e) {
        EXPECT_STREQ("carried", e.what());
    }
}

// Harder: a green thread blocks *inside* a catch handler (the C++ runtime's
// caught-exception stack is per kernel thread) while others throw on the same
// worker, then rethrows. Runs in a child process so a crash is one failure.
void catch_block_switch() {
    fern_config cfg{1, 0, 0};
    if (fern_init(&cfg) != 0) std::exit(10);
    constexpr int N = 16;
    static std::atomic<int> good{0};
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++) {
        auto body = [](void *arg) -> void * {
            int id = (int)(intptr_t)arg;
            try {
                try {
                    throw Boom{id, "inner"};
                } catch (const Boom &b) {
                    fern_yield();
                    fern_sleep_ns(1000);
                    if (b.id != id) return nullptr;
                    if (std::uncaught_exceptions() != 0) return nullptr;
                    throw;
                }
            } catch (const Boom &b2) {
                if (b2.id == id) good++;
            }
            return nullptr;
        };
        if (fern_spawn(&ts[i], nullptr, body, (void *)(intptr_t)i) != 0) std::exit(11);
    }
    for (auto t : ts) fern_join(t, nullptr);
    int g = good.load();
    fern_shutdown();
    std::exit(g == N ? 0 : 12);
}

TEST(CxxDeathTest, BlockingInsideCatchHandler) {
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(catch_block_switch(), ::testing::ExitedWithCode(0), "");
}

} // namespace
