// SPDX-License-Identifier: MIT
// A cluster's inbox when its array cannot grow. The inbox keeps threads in
// an array of pointers, doubled when full; if malloc refuses, threads queue
// behind the array on a list, in order, and nothing is lost. This suite
// makes malloc refuse the inbox's growth (a power of two of at least 4 KiB:
// no other allocation in the window has such a size) through its own
// malloc, which the shared libfern calls; a sanitizer's allocator cannot be
// replaced that way, so sanitizer builds skip it (release and aarch64 runs
// keep it).
#include "fern_test.h"

#include <atomic>
#include <cstdio>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FERN_OWN_MALLOC 0
#else
#define FERN_OWN_MALLOC 1
#endif

using namespace fern_test;

#if FERN_OWN_MALLOC
static std::atomic<bool> refuse_growth{false}, watch{false};
static std::atomic<int> refused{0}, small_arrays{0};

extern "C" void *__libc_malloc(size_t n);
extern "C" void *malloc(size_t n) {
    if (n >= 4096 && (n & (n - 1)) == 0 && refuse_growth.load(std::memory_order_relaxed)) {
        refused.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    if (n == 2048 && watch.load(std::memory_order_relaxed)) // an inbox's first array: 256 slots
        small_arrays.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(n);
}
#endif

// A backlog pushed from a plain thread behind a busy one-worker cluster,
// while the inbox cannot grow past its first 256 slots: the rest go to the
// overflow list. Each thread runs once, in push order. Then, with malloc
// working again, a backlog grows the array to 8,192 slots, which is freed
// when it drains (more than 4,096), so the next backlog starts from a new
// 256-slot array.
TEST(Inbox, BacklogSurvivesARefusedGrowth) {
#if !FERN_OWN_MALLOC
    GTEST_SKIP() << "the sanitizer's allocator cannot be replaced";
#else
    Watchdog wd(120, "BacklogSurvivesARefusedGrowth");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    constexpr int kN = 5000;
    for (int round = 0; round < 3; round++) {
        bool refuse = round == 0;
        std::vector<int> pos(kN, -1);
        std::vector<int> runs(kN, 0);
        std::vector<fern_thread *> ts(kN);
        std::atomic<int> seq{0};
        std::atomic<bool> release{false};
        small_arrays.store(0);
        watch.store(true);
        fern_thread *blocker = nullptr;
        ASSERT_EQ(0, spawn_on(&blocker, c, [&] {
            while (!release.load()) {
            }
        }));
        refused.store(0);
        refuse_growth.store(refuse);
        int rc = 0;
        for (int i = 0; i < kN && rc == 0; i++)
            rc = spawn_on(&ts[i], c, [&, i] {
                pos[i] = seq.fetch_add(1);
                runs[i]++;
            });
        refuse_growth.store(false);
        watch.store(false);
        ASSERT_EQ(0, rc);
        if (refuse) {
            EXPECT_GT(refused.load(), 0) << "the inbox never asked to grow: the overflow list went untested";
        } else {
            EXPECT_EQ(0, refused.load());
        }
        if (round == 2) {
            EXPECT_GE(small_arrays.load(), 1) << "the drained 8,192-slot array was kept";
        }
        release.store(true);
        ASSERT_EQ(0, fern_join(blocker, nullptr));
        for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        int out_of_order = 0;
        for (int i = 0; i < kN; i++) {
            ASSERT_EQ(1, runs[i]) << "thread " << i << " (round " << round << ")";
            if (i > 0 && pos[i] != pos[i - 1] + 1) out_of_order++;
        }
        std::printf("round %d: %d growths refused, %d runs out of push order\n", round, refused.load(),
                    out_of_order);
        EXPECT_LE(out_of_order, kN / 20) << "round " << round;
    }
    EXPECT_EQ(0, fern_cluster_destroy(c));
#endif
}
