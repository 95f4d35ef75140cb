// SPDX-License-Identifier: MIT
// fern.hpp cancellation: thread::request_stop / get_stop_token, jthread
// (joins on destruction, hands its token to the callable), cancel_shield,
// group (joins in its destructor, cancels on an exception, fail_fast,
// deadlines), and ECANCELED as std::errc::operation_canceled.
#include <fern/fern.hpp>

#include "fern_test.h"

#include <stdexcept>

using namespace std::chrono_literals;

namespace {

bool is_canceled(const std::system_error &e) { return e.code() == std::errc::operation_canceled; }

TEST(HppCancel, RequestStopThrowsOperationCanceledFromTheWait)
{
    std::atomic<int> parked{0};
    auto t = fern::spawn([&] {
        parked = 1;
        try {
            fern::this_thread::sleep_for(30s);
        } catch (const std::system_error &e) {
            return std::string(is_canceled(e) ? "canceled" : e.what());
        }
        return std::string("slept");
    });
    fern::stop_token st = t.get_stop_token();
    EXPECT_TRUE(st.stop_possible());
    EXPECT_FALSE(st.stop_requested());
    ASSERT_TRUE(fern_test::wait_until([&] { return parked.load() == 1; }));
    std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(t.request_stop());
    EXPECT_TRUE(st.stop_requested());
    EXPECT_EQ("canceled", t.join());
    EXPECT_TRUE(st.stop_requested()) << "a token outlives its thread";
    EXPECT_FALSE(t.request_stop()) << "not joinable";
    EXPECT_FALSE(fern::stop_token().stop_possible());
    EXPECT_FALSE(t.get_stop_token().stop_possible());
}

TEST(HppCancel, ChannelsMutexesAndShield)
{
    fern::channel<int> ch(0);
    fern::mutex m;
    fern::condition_variable cv;
    std::atomic<int> step{0};
    auto t = fern::spawn([&] {
        int got = 0;
        try {
            ch.recv();
        } catch (const std::system_error &e) {
            got += is_canceled(e);
        }
        {
            std::unique_lock l(m); // a mutex is not a cancellation point
            try {
                cv.wait(l);
            } catch (const std::system_error &e) {
                got += is_canceled(e) && l.owns_lock();
            }
        }
        {
            fern::cancel_shield shield;
            fern::this_thread::sleep_for(5ms); // shielded: sleeps
            got += fern::this_thread::stop_requested();
        }
        try {
            fern::this_thread::sleep_for(30s);
        } catch (const std::system_error &e) {
            got += is_canceled(e);
        }
        return got;
    });
    std::this_thread::sleep_for(10ms);
    t.request_stop();
    EXPECT_EQ(4, t.join());
}

TEST(HppCancel, JthreadStopsAndJoinsWhenDestroyed)
{
    std::atomic<int> stopped{0};
    int64_t t0 = fern_now_ns();
    {
        auto j = fern::spawn_joining([&](fern::stop_token st) {
            while (!st.stop_requested()) {
                try {
                    fern::this_thread::sleep_for(30s);
                } catch (const std::system_error &e) {
                    if (!is_canceled(e)) throw;
                }
            }
            stopped = 1;
        });
        static_assert(std::is_same_v<decltype(j), fern::jthread<void>>);
        std::this_thread::sleep_for(5ms);
    } // request_stop + join
    EXPECT_EQ(1, stopped.load());
    EXPECT_LT(fern_now_ns() - t0, fern_test::ms(1000));
    fern::jthread plain([] { return 3; });
    EXPECT_EQ(3, plain.join());
    auto k = fern::spawn_joining([](int x) { return x + 1; }, 1);
    EXPECT_EQ(2, k.join());
}

TEST(HppCancel, GroupJoinsInItsDestructor)
{
    std::atomic<int> done{0};
    {
        fern::group g;
        for (int i = 0; i < 10; i++)
            g.spawn([&] {
                fern::this_thread::sleep_for(5ms);
                done++;
            });
    }
    EXPECT_EQ(10, done.load());
}

TEST(HppCancel, GroupCancelsOnExceptionAndFailFast)
{
    std::atomic<int> cancelled{0};
    auto sleeper = [&] {
        try {
            fern::this_thread::sleep_for(30s);
        } catch (const std::system_error &e) {
            if (is_canceled(e)) cancelled++;
            throw;
        }
    };
    try {
        fern::group g;
        for (int i = 0; i < 5; i++) g.spawn(sleeper);
        throw std::runtime_error("scope left");
    } catch (const std::runtime_error &) {
    }
    EXPECT_EQ(5, cancelled.load()) << "the destructor cancelled the members while unwinding";
    cancelled = 0;
    {
        fern::group g(fern::group::fail_fast);
        for (int i = 0; i < 5; i++) g.spawn(sleeper);
        g.spawn([] {
            fern::this_thread::sleep_for(10ms);
            throw std::logic_error("bad request");
        });
        try {
            g.wait();
            ADD_FAILURE() << "wait did not throw";
        } catch (const std::logic_error &e) {
            EXPECT_STREQ("bad request", e.what());
        }
    }
    EXPECT_EQ(5, cancelled.load());
}

TEST(HppCancel, GroupDeadlineAndSubgroups)
{
    fern::group g;
    fern::group sub(&g);
    std::atomic<int> cancelled{0};
    for (auto *x : {&g, &sub})
        x->spawn([&] {
            try {
                fern::this_thread::sleep_for(30s);
            } catch (const std::system_error &e) {
                cancelled += is_canceled(e);
            }
        });
    g.cancel_after(30ms);
    try {
        g.wait();
        ADD_FAILURE() << "wait did not throw";
    } catch (const std::system_error &e) {
        EXPECT_EQ(std::errc::timed_out, e.code());
    }
    EXPECT_EQ(2, cancelled.load());
}

} // namespace
