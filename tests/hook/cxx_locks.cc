// SPDX-License-Identifier: MIT
// fern-hook and the C++ standard library's locks: std::mutex,
// std::recursive_mutex, std::timed_mutex, std::condition_variable,
// std::shared_mutex and std::counting_semaphore, unchanged, from green
// threads (they call the pthread functions fern-hook interposes; the
// semaphore of libstdc++ 12 is a raw futex, which compensation covers).
#include "lock_test.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <semaphore>
#include <shared_mutex>

using namespace lock_test;
using namespace std::chrono_literals;

FERN_WATCHDOG_EACH_TEST(120);

namespace {

class Cxx : public OnWorkers {};

// A work queue on std::mutex + std::condition_variable, green producer and
// consumers, the lock held across hooked sleeps.
TEST_P(Cxx, MutexAndConditionVariable) {
    SKIP_UNLESS_CONDS_PARK();
    Workers w(GetParam());
    std::mutex m;
    std::condition_variable cv;
    std::deque<int> q;
    Exclusive ex;
    long sum = 0;
    fern_thread *prod = w.spawn([&] {
        for (int i = 1; i <= 1000; i++) {
            {
                std::lock_guard<std::mutex> g(m);
                q.push_back(i);
            }
            cv.notify_one();
            if (i % 100 == 0) usleep(500);
        }
    });
    w.many(100, [&](int) {
        for (int k = 0; k < 10; k++) {
            std::unique_lock<std::mutex> g(m);
            cv.wait(g, [&] { return !q.empty(); });
            ex.enter();
            sum += q.front();
            q.pop_front();
            if (k == 0) usleep(100); // held across a park
            ex.leave();
        }
    });
    EXPECT_EQ(fern_join(prod, nullptr), 0);
    EXPECT_EQ(sum, 1000L * 1001 / 2);
    EXPECT_EQ(ex.violations.load(), 0);
}

// wait_for (pthread_cond_clockwait on the steady clock) times out on time
// and is woken by notify_all.
TEST_P(Cxx, ConditionVariableWaitForAndNotifyAll) {
    SKIP_UNLESS_CONDS_PARK();
    Workers w(GetParam());
    std::mutex m;
    std::condition_variable cv;
    bool go = false;
    w.many(10, [&](int) {
        std::unique_lock<std::mutex> g(m);
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(cv.wait_for(g, 10ms), std::cv_status::timeout);
        EXPECT_GE(std::chrono::steady_clock::now() - t0, 9ms);
    });
    std::atomic<int> woke{0};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 20; i++)
        ts.push_back(w.spawn([&] {
            std::unique_lock<std::mutex> g(m);
            EXPECT_TRUE(cv.wait_for(g, 60s, [&] { return go; }));
            woke++;
        }));
    usleep(10000);
    {
        std::lock_guard<std::mutex> g(m);
        go = true;
    }
    cv.notify_all();
    for (auto t : ts) EXPECT_EQ(fern_join(t, nullptr), 0);
    EXPECT_EQ(woke.load(), 20);
}

TEST_P(Cxx, RecursiveAndTimedMutex) {
    Workers w(GetParam());
    std::recursive_mutex rm;
    std::timed_mutex tm;
    Exclusive ex;
    std::atomic<long> timeouts{0};
    w.many(40, [&](int i) {
        {
            std::lock_guard<std::recursive_mutex> a(rm);
            std::lock_guard<std::recursive_mutex> b(rm); // per green thread
            ex.enter();
            usleep(100);
            ex.leave();
        }
        // (ThreadSanitizer has no pthread_mutex_clocklock interceptor, which
        // try_lock_for calls: it would report the unlock of a lock it never
        // saw taken.)
        if (kTsan) return;
        if (tm.try_lock_for(100s)) {
            usleep(50);
            tm.unlock();
        } else {
            timeouts++;
        }
    });
    EXPECT_EQ(ex.violations.load(), 0);
    EXPECT_EQ(timeouts.load(), 0);
    if (kTsan) return;
    w.many(1, [&](int) {
        tm.lock();
        w.many(1, [&](int) { EXPECT_FALSE(tm.try_lock_for(5ms)); });
        tm.unlock();
    });
}

TEST_P(Cxx, SharedMutex) {
    Workers w(GetParam());
    std::shared_mutex sm;
    Exclusive ex;
    std::atomic<int> writing{0};
    std::atomic<long> bad{0};
    w.many(100, [&](int i) {
        for (int k = 0; k < 5; k++) {
            if ((i + k) % 3 == 0) {
                std::unique_lock<std::shared_mutex> g(sm);
                ex.enter();
                writing = 1;
                usleep(100);
                writing = 0;
                ex.leave();
            } else {
                std::shared_lock<std::shared_mutex> g(sm);
                if (writing.load()) bad++;
                usleep(50);
            }
        }
    });
    EXPECT_EQ(ex.violations.load(), 0);
    EXPECT_EQ(bad.load(), 0);
}

// libstdc++ 12's counting_semaphore waits on a raw futex, which fern-hook
// cannot see: a green thread blocked in it blocks its worker, and the
// monitor's compensation (a spare worker takes the queue) keeps the
// program going, releaser on the same worker included. Compensation is
// bounded (sched/sched.h: SPARES_MAX spares per cluster), so at most three
// threads block in it at once here.
TEST_P(Cxx, CountingSemaphoreCompletes) {
    Workers w(GetParam());
    std::counting_semaphore<1000> s(0);
    std::atomic<long> got{0};
    fern_thread *rel = w.spawn([&] {
        for (int i = 0; i < 100; i++) {
            usleep(200);
            s.release();
        }
    });
    w.many(3, [&](int) {
        for (int k = 0; k < 33; k++) {
            s.acquire();
            got++;
        }
    });
    EXPECT_EQ(fern_join(rel, nullptr), 0);
    EXPECT_EQ(got.load(), 99);
}

INSTANTIATE_TEST_SUITE_P(Workers, Cxx, ::testing::Values(1, 2),
                         [](const auto &i) { return std::to_string(i.param) + "w"; });

}  // namespace
