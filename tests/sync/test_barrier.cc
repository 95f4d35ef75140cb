// SPDX-License-Identifier: MIT
// fern_barrier: init/destroy errors, zeroed barrier is EINVAL until
// initialised, exactly one FERN_BARRIER_SERIAL_THREAD per round, nobody
// leaves a round before everyone arrived, green and plain threads mixed.
#include "fern_test.h"

#include <cstring>
#include <vector>

using namespace fern_test;

namespace {

TEST(Barrier, Errors) {
    fern_barrier b{};
    EXPECT_EQ(EINVAL, fern_barrier_init(nullptr, 1));
    EXPECT_EQ(EINVAL, fern_barrier_init(&b, 0));
    EXPECT_EQ(EINVAL, fern_barrier_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_barrier_wait(nullptr));
    EXPECT_EQ(EINVAL, fern_barrier_wait(&b)) << "zeroed barrier has count 0";
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(EINVAL, fern_barrier_wait(&b)); }));
    EXPECT_EQ(0, fern_barrier_destroy(&b));
}

TEST(Barrier, CountOneAlwaysSerial) {
    fern_barrier b;
    std::memset(&b, 0x77, sizeof b);
    ASSERT_EQ(0, fern_barrier_init(&b, 1));
    for (int i = 0; i < 3; i++) EXPECT_EQ(FERN_BARRIER_SERIAL_THREAD, fern_barrier_wait(&b));
    ASSERT_EQ(0, run_green([&] {
        for (int i = 0; i < 3; i++) EXPECT_EQ(FERN_BARRIER_SERIAL_THREAD, fern_barrier_wait(&b));
    }));
    EXPECT_EQ(0, fern_barrier_destroy(&b));
}

TEST(Barrier, DestroyWithWaiterIsEbusy) {
    Watchdog wd(30, "Barrier.DestroyWithWaiterIsEbusy");
    fern_barrier b;
    ASSERT_EQ(0, fern_barrier_init(&b, 2));
    std::atomic<int> rc{-2};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] { rc = fern_barrier_wait(&b); }));
    ASSERT_TRUE(wait_until([&] { return fern_barrier_destroy(&b) == EBUSY; }));
    EXPECT_EQ(-2, rc.load());
    EXPECT_EQ(FERN_BARRIER_SERIAL_THREAD, fern_barrier_wait(&b)) << "the last to arrive is serial";
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, rc.load());
    EXPECT_EQ(0, fern_barrier_destroy(&b));
}

// kThreads (green on 2 workers + plain) go through kRounds rounds; each
// round exactly one gets SERIAL and nobody passes round r before all arrived.
TEST(Barrier, RoundsMixedGreenAndPlain) {
    Watchdog wd(60, "Barrier.RoundsMixedGreenAndPlain");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    const int kGreen = 6, kPlain = 2, kThreads = kGreen + kPlain;
    const int kRounds = (int)scaled(200, 20);
    fern_barrier b;
    ASSERT_EQ(0, fern_barrier_init(&b, kThreads));
    std::vector<std::atomic<int>> serial(kRounds), arrived(kRounds);
    for (int r = 0; r < kRounds; r++) serial[r] = 0, arrived[r] = 0;
    std::atomic<long> early{0}, bad_rc{0};
    auto body = [&](bool green, int i) {
        for (int r = 0; r < kRounds; r++) {
            arrived[r]++;
            if (green && (r + i) % 3 == 0) fern_yield();
            int rc = fern_barrier_wait(&b);
            if (rc == FERN_BARRIER_SERIAL_THREAD)
                serial[r]++;
            else if (rc != 0)
                bad_rc++;
            if (arrived[r].load() != kThreads) early++;
        }
    };
    std::vector<fern_thread *> ts;
    for (int i = 0; i < kGreen; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, c, [&, i] { body(true, i); }));
        ts.push_back(t);
    }
    std::vector<std::thread> plain;
    for (int i = 0; i < kPlain; i++) plain.emplace_back([&, i] { body(false, i); });
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    for (auto &p : plain) p.join();
    EXPECT_EQ(0, bad_rc.load());
    EXPECT_EQ(0, early.load()) << "a thread left a round before all arrived";
    int wrong = 0;
    for (int r = 0; r < kRounds; r++)
        if (serial[r].load() != 1) {
            if (wrong++ < 5) ADD_FAILURE() << "round " << r << " had " << serial[r].load() << " serial threads";
        }
    EXPECT_EQ(0, wrong);
    EXPECT_EQ(0, fern_barrier_destroy(&b));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// A plain thread blocked on the barrier released by a green thread and
// vice versa.
TEST(Barrier, PlainAndGreenReleaseEachOther) {
    Watchdog wd(30, "Barrier.PlainAndGreenReleaseEachOther");
    fern_barrier b;
    ASSERT_EQ(0, fern_barrier_init(&b, 2));
    std::atomic<int> prc{-2};
    std::thread p([&] { prc = fern_barrier_wait(&b); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(-2, prc.load());
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(FERN_BARRIER_SERIAL_THREAD, fern_barrier_wait(&b)); }));
    p.join();
    EXPECT_EQ(0, prc.load());
    std::atomic<int> grc{-2};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] { grc = fern_barrier_wait(&b); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(-2, grc.load());
    EXPECT_EQ(FERN_BARRIER_SERIAL_THREAD, fern_barrier_wait(&b));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, grc.load());
    EXPECT_EQ(0, fern_barrier_destroy(&b));
}

} // namespace
