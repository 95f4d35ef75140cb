// SPDX-License-Identifier: MIT
// fern_mutex hand-off fairness: under heavy contention from threads that keep
// re-locking (on 2 workers, and plain threads), a thread that locks once gets
// the mutex within a bounded time, whether it is a green thread on the same
// cluster, a green thread on another cluster, or a plain thread; and mutual
// exclusion holds throughout.
#include "fern_test.h"

#include <algorithm>
#include <vector>

using namespace fern_test;

namespace {

// Bound on one lock's wait. Hand-off starts after 1 ms of waiting; allow a
// lot of slack for a busy 2-core machine, more under sanitizers.
int64_t bound_ns() { return kTsan ? ms(3000) : stress_scale() < 1 ? ms(2000) : ms(1000); }

struct Hammer {
    fern_mutex m = FERN_MUTEX_INIT;
    std::atomic<bool> stop{false};
    std::atomic<int> inside{0};
    std::atomic<long> violations{0}, locks{0};
    long counter = 0;  // guarded by m

    void critical() {
        if (++inside != 1) violations++;
        long c = counter;
        for (int i = 0; i < 50; i++) asm volatile("" ::: "memory");
        counter = c + 1;
        --inside;
    }
    bool yield_often = false;  // green hammers call fern_yield every 64 locks
    void hammer() {
        for (long n = 1; !stop.load(std::memory_order_relaxed); n++) {
            if (yield_often && n % 64 == 0) fern_yield();
            if (fern_mutex_lock(&m) != 0) {
                violations++;
                return;
            }
            critical();
            locks++;
            if (fern_mutex_unlock(&m) != 0) violations++;
        }
    }
};

enum class Victim { GreenSameCluster, GreenOtherCluster, Plain };
enum class Hammers { Green, Plain, Mixed };

// The victim locks with a deadline far beyond the bound (so a starved victim
// fails the test instead of hanging it): 3x the bound, or 2x with `tight`.
void run_case(Hammers hk, Victim vk, bool tight, bool yield_often = false) {
    Watchdog wd(60, "Fairness");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    Hammer h;
    h.yield_often = yield_often;
    std::vector<fern_thread *> gts;
    std::vector<std::thread> pts;
    const int kHammers = 4;
    for (int i = 0; i < kHammers; i++) {
        bool green = hk == Hammers::Green || (hk == Hammers::Mixed && i % 2 == 0);
        if (green) {
            fern_thread *t = nullptr;
            ASSERT_EQ(0, spawn_on(&t, c, [&] { h.hammer(); }));
            gts.push_back(t);
        } else {
            pts.emplace_back([&] { h.hammer(); });
        }
    }
    // Let the hammering get going.
    EXPECT_TRUE(wait_until([&] { return h.locks.load() > 1000; }, 10000));
    const int kTries = 10;
    std::vector<int64_t> waits;
    auto victim = [&] {
        for (int i = 0; i < kTries; i++) {
            int64_t t0 = fern_now_ns();
            int rc = fern_mutex_timedlock(&h.m, t0 + (tight ? 2 : 3) * bound_ns());
            int64_t w = fern_now_ns() - t0;
            EXPECT_EQ(0, rc) << "victim lock " << i << " not granted within " << w / 1000000 << " ms: starved";
            if (rc != 0) return;
            h.critical();
            EXPECT_EQ(0, fern_mutex_unlock(&h.m));
            waits.push_back(w);
            if (fern_is_green())
                fern_sleep_ns(ms(2));
            else
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    };
    if (vk == Victim::Plain) {
        std::thread(victim).join();
    } else {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, vk == Victim::GreenSameCluster ? c : fern_cluster_default(), victim));
        ASSERT_EQ(0, fern_join(t, nullptr));
    }
    h.stop = true;
    for (auto *t : gts) ASSERT_EQ(0, fern_join(t, nullptr));
    for (auto &p : pts) p.join();
    EXPECT_EQ(0, h.violations.load()) << "mutual exclusion broken";
    EXPECT_EQ(h.locks.load() + (long)waits.size(), h.counter);
    ASSERT_EQ((size_t)kTries, waits.size()) << "victim starved";
    int64_t worst = *std::max_element(waits.begin(), waits.end());
    EXPECT_LT(worst, bound_ns()) << "victim waited " << worst / 1000000 << " ms for the mutex (bound "
                                 << bound_ns() / 1000000 << " ms): starved";
    EXPECT_EQ(0, fern_mutex_destroy(&h.m));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Fairness, GreenHammersGreenVictimSameCluster) { run_case(Hammers::Green, Victim::GreenSameCluster, false); }
TEST(Fairness, GreenHammersGreenVictimOtherCluster) { run_case(Hammers::Green, Victim::GreenOtherCluster, false); }
TEST(Fairness, GreenHammersPlainVictim) { run_case(Hammers::Green, Victim::Plain, false); }
TEST(Fairness, PlainHammersGreenVictim) { run_case(Hammers::Plain, Victim::GreenOtherCluster, false); }
TEST(Fairness, PlainHammersPlainVictim) { run_case(Hammers::Plain, Victim::Plain, false); }
TEST(Fairness, MixedHammersTimedVictim) { run_case(Hammers::Mixed, Victim::GreenOtherCluster, true); }
TEST(Fairness, GreenHammersTimedPlainVictim) { run_case(Hammers::Green, Victim::Plain, true); }
// Hammers that yield now and then: isolates the mutex's hand-off from the
// scheduler (every woken waiter gets to run).
TEST(Fairness, YieldingGreenHammersGreenVictimSameCluster) {
    run_case(Hammers::Green, Victim::GreenSameCluster, false, true);
}
TEST(Fairness, YieldingGreenHammersPlainVictim) { run_case(Hammers::Green, Victim::Plain, false, true); }
TEST(Fairness, YieldingMixedHammersGreenVictim) {
    run_case(Hammers::Mixed, Victim::GreenOtherCluster, true, true);
}

// Every hammerer makes progress: none is starved by the others (each gets a
// fair share within a factor), with hand-off kicking in.
TEST(Fairness, EveryHammererProgresses) {
    Watchdog wd(60, "Fairness.EveryHammererProgresses");
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    fern_mutex m = FERN_MUTEX_INIT;
    std::atomic<bool> stop{false};
    const int kN = 4;
    std::vector<std::atomic<long>> per(kN);
    for (auto &p : per) p = 0;
    std::vector<fern_thread *> ts;
    for (int i = 0; i < kN; i++) {
        fern_thread *t = nullptr;
        ASSERT_EQ(0, spawn_on(&t, c, [&, i] {
            while (!stop.load(std::memory_order_relaxed)) {
                fern_mutex_lock(&m);
                per[i]++;
                for (int k = 0; k < 200; k++) asm volatile("" ::: "memory");
                fern_mutex_unlock(&m);
            }
        }));
        ts.push_back(t);
    }
    // Sample: within any window after warm-up, every thread got the lock.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int w = 0; w < 5; w++) {
        std::vector<long> before(kN);
        for (int i = 0; i < kN; i++) before[i] = per[i].load();
        // Windows stretch under emulation (kLatenessScale): the emulated
        // workers also wait for a host CPU on a loaded machine.
        std::this_thread::sleep_for(std::chrono::milliseconds(kTsan ? 2000 : 300 * kLatenessScale));
        for (int i = 0; i < kN; i++)
            EXPECT_GT(per[i].load(), before[i]) << "thread " << i << " did not get the mutex in window " << w;
    }
    stop = true;
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, fern_mutex_destroy(&m));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

} // namespace
