// SPDX-License-Identifier: MIT
// fern-hook, sleeps: on a green thread each sleep parks (a one-worker
// cluster runs many at once and a 1 ms ticker beside them stays on time); on
// a plain thread each is libc's (EINVAL, EINTR and the time left).
#include "hook_test.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/select.h>
#include <threads.h>
#include <time.h>

using namespace hook_test;

// A hang in any test of this binary aborts with its name and a fern_dump.
FERN_WATCHDOG_EACH_TEST(120);

namespace {

// n green threads on one worker each run call() (about 100 ms); all must be
// done in well under n * 100 ms, and the ticker must stay on time.
template <class F> void many_at_once(F call, int n = 20, double each = 0.1) {
    OneWorker w;
    double wall;
    int64_t late;
    {
        Ticker tick(w);
        std::vector<fern_thread *> ts;
        int64_t t0 = fern_now_ns();
        for (int i = 0; i < n; i++) ts.push_back(w.spawn([&] { call(); }));
        for (auto t : ts) OneWorker::join(t);
        wall = secs_since(t0);
        late = tick.late_ns.load();
    }
    EXPECT_LT(wall, each * n / 2) << "the calls ran one after another";
    // Blocked calls would make the ticker late by about each * (n - 1).
    EXPECT_LT(late, std::max<int64_t>(kLateLimit, (int64_t)(each * n / 2 * 1e9)))
        << "the worker was blocked";
}

TEST(HookSleep, UsleepParks) { many_at_once([] { EXPECT_EQ(usleep(100000), 0); }); }

TEST(HookSleep, NanosleepParks) {
    many_at_once([] {
        struct timespec ts = {0, 100000000}, rem = {7, 7};
        EXPECT_EQ(nanosleep(&ts, &rem), 0);
    });
}

TEST(HookSleep, SleepParks) {
    many_at_once([] { EXPECT_EQ(sleep(1), 0u); }, 4, 1.0);
}

TEST(HookSleep, ClockNanosleepRelativeAndAbsolute) {
    many_at_once([] {
        struct timespec ts = {0, 50000000};
        EXPECT_EQ(clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr), 0);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        now.tv_nsec += 50000000;
        if (now.tv_nsec >= 1000000000) {
            now.tv_sec++;
            now.tv_nsec -= 1000000000;
        }
        EXPECT_EQ(clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &now, nullptr), 0);
        struct timespec after;
        clock_gettime(CLOCK_REALTIME, &after);
        EXPECT_TRUE(after.tv_sec > now.tv_sec ||
                    (after.tv_sec == now.tv_sec && after.tv_nsec >= now.tv_nsec));
    });
}

TEST(HookSleep, ThrdSleepParks) {
    many_at_once([] {
        struct timespec ts = {0, 100000000};
        EXPECT_EQ(thrd_sleep(&ts, nullptr), 0);
    });
}

TEST(HookSleep, PollWithNoFdsParks) { many_at_once([] { EXPECT_EQ(poll(nullptr, 0, 100), 0); }); }

TEST(HookSleep, SelectWithNoFdsParks) {
    many_at_once([] {
        struct timeval tv = {0, 100000};
        EXPECT_EQ(select(0, nullptr, nullptr, nullptr, &tv), 0);
        EXPECT_EQ(tv.tv_sec, 0);
        EXPECT_EQ(tv.tv_usec, 0);  // Linux writes back the time not slept
    });
}

TEST(HookSleep, PselectWithNoFdsParks) {
    many_at_once([] {
        struct timespec ts = {0, 100000000};
        EXPECT_EQ(pselect(0, nullptr, nullptr, nullptr, &ts, nullptr), 0);
        EXPECT_EQ(ts.tv_nsec, 100000000);  // pselect leaves it alone
    });
}

TEST(HookSleep, GreenErrorsAsLibc) {
    OneWorker w;
    w.run([] {
        struct timespec bad = {0, 1000000000};
        set_errno(0);
        EXPECT_EQ(nanosleep(&bad, nullptr), -1);
        EXPECT_EQ(get_errno(), EINVAL);
        EXPECT_EQ(clock_nanosleep(CLOCK_MONOTONIC, 0, &bad, nullptr), EINVAL);
        struct timespec neg = {-1, 0};
        EXPECT_EQ(thrd_sleep(&neg, nullptr), -2);
        struct timeval tv = {0, 2000000};
        EXPECT_EQ(select(0, nullptr, nullptr, nullptr, &tv), -1);
        EXPECT_EQ(get_errno(), EINVAL);
    });
}

void on_alarm(int) {}

// Waits until kernel thread tid is inside system call nr (its
// /proc/.../syscall line starts with the number), for at most 2 s: qemu-user
// shows the host's numbers, and there the 2 s wait stands in.
void in_syscall(long tid, long nr) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
    for (int i = 0; i < 2000; i++) {
        FILE *f = fopen(path, "r");
        long got = -1;
        if (f) {
            if (fscanf(f, "%ld", &got) != 1) got = -1;
            fclose(f);
        }
        if (got == nr) return;
        usleep(1000);
    }
}

TEST(HookSleep, PlainThreadIsLibc) {
    struct timespec bad = {0, -1};
    set_errno(0);
    EXPECT_EQ(nanosleep(&bad, nullptr), -1);
    EXPECT_EQ(get_errno(), EINVAL);
    EXPECT_EQ(clock_nanosleep(CLOCK_MONOTONIC, 0, &bad, nullptr), EINVAL);
    int64_t t0 = fern_now_ns();
    EXPECT_EQ(usleep(20000), 0);
    EXPECT_GE(fern_now_ns() - t0, ms(20));

    // A signal without SA_RESTART interrupts: EINTR and the time left. The
    // killer signals 50 ms after it has seen this thread inside the system
    // call, and the time left is checked against the time this thread
    // measured around the call: a machine too busy to run the killer on
    // time makes the call longer, not the check wrong.
    struct sigaction sa = {}, old;
    sa.sa_handler = on_alarm;
    ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    pthread_t self = pthread_self();
    long tid = syscall(SYS_gettid);
    auto killer = [self, tid] {
        return std::thread([self, tid] {
            in_syscall(tid, SYS_nanosleep);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            pthread_kill(self, SIGUSR1);
        });
    };
    std::thread k1 = killer();
    struct timespec ts = {5, 0}, rem = {0, 0};
    t0 = fern_now_ns();
    EXPECT_EQ(nanosleep(&ts, &rem), -1);
    int64_t took = fern_now_ns() - t0;
    EXPECT_EQ(get_errno(), EINTR);
    int64_t left = rem.tv_sec * 1000000000ll + rem.tv_nsec;
    EXPECT_GE(left, ms(5000) - took - ms(2));  // slept no longer than it took
    EXPECT_LE(left, ms(5000) - ms(50));        // slept until the signal
    k1.join();
    std::thread k2 = killer();
    t0 = fern_now_ns();
    unsigned whole = sleep(5);  // whole seconds not slept: 4 unless delayed
    took = fern_now_ns() - t0;
    EXPECT_GE(whole, (unsigned)((ms(5000) - took - ms(2)) / ms(1000)));
    EXPECT_LE(whole, 4u);
    k2.join();
    sigaction(SIGUSR1, &old, nullptr);
}

}  // namespace
