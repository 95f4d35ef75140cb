// SPDX-License-Identifier: MIT
// fern.hpp's select over descriptors and timers: readable_case,
// writable_case, deadline_case and tick_case beside recv_case, each first;
// a closed descriptor throws EBADF; a cancelled select throws ECANCELED;
// fern::ticker's waits, counts, reset, stop and errors.
#include <fern/fern.hpp>

#include "fern_test.h"

#include <atomic>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace std::chrono_literals;

#define EXPECT_ERRNO_THROW FERN_EXPECT_ERRNO_THROW

namespace {

FERN_WATCHDOG_EACH_TEST(120);

struct Sockets {
    int a = -1, b = -1;
    Sockets()
    {
        int sv[2];
        EXPECT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        a = sv[0];
        b = sv[1];
    }
    ~Sockets()
    {
        fern_close(a);
        close(b);
    }
};

TEST(HppSelectIo, SocketChannelDeadlineEachFirst)
{
    ASSERT_EQ(0, fern_test::run_green([] {
        for (int first = 0; first < 3; first++) {
            Sockets s;
            fern::channel<int> control(0);
            // t0 before the deadline is set: spawning the maker can take
            // milliseconds (qemu-user), which must not count against it.
            auto t0 = std::chrono::steady_clock::now();
            auto until = t0 + (first == 2 ? 30ms : 20s);
            fern::thread maker([&] {
                fern_sleep_ns(20000000);
                if (first == 0)
                    EXPECT_EQ(1, write(s.b, "x", 1));
                else if (first == 1)
                    control.send(7);
            });
            bool readable = false, timed_out = false;
            std::optional<int> cmd;
            std::size_t r = fern::select(fern::readable_case(s.a, [&] { readable = true; }),
                                         fern::recv_case(control, [&](std::optional<int> v) { cmd = v; }),
                                         fern::deadline_case(until, [&] { timed_out = true; }),
                                         fern::timeout(30s));
            EXPECT_EQ((std::size_t)first, r);
            EXPECT_EQ(first == 0, readable);
            EXPECT_EQ(first == 1, cmd.has_value());
            EXPECT_EQ(first == 2, timed_out);
            if (first == 2) {
                EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
            }
            maker.join();
        }
    }));
}

TEST(HppSelectIo, WritableAndClosedDescriptor)
{
    ASSERT_EQ(0, fern_test::run_green([] {
        Sockets s;
        EXPECT_EQ(0u, fern::select(fern::writable_case(s.a), fern::timeout(5s)));
        // A number nobody holds or is given meanwhile (the lowest free one
        // would do, but the runtime's threads may open a file any time).
        int dead = 4000;
        while (dead > 3 && fcntl(dead, F_GETFD) != -1)
            dead--;
        EXPECT_ERRNO_THROW(fern::select(fern::readable_case(dead), fern::timeout(5s)), EBADF);
        // A deadline_case given as a duration, beside an idle socket.
        EXPECT_EQ(1u, fern::select(fern::readable_case(s.a), fern::deadline_case(10ms)));
        // Nothing can ever fire: EINVAL.
        EXPECT_ERRNO_THROW(fern::select(fern::readable_case(-1)), EINVAL);
    }));
}

// A cancelled thread's fern::select over a socket and a ticker throws
// std::system_error ECANCELED (std::errc::operation_canceled).
TEST(HppSelectIo, CancelThrowsOperationCanceled)
{
    ASSERT_EQ(0, fern_test::run_green([] {
        Sockets s;
        fern::ticker t(std::chrono::hours(1));
        std::atomic<bool> in{false}, threw{false};
        fern::thread waiter([&] {
            in = true;
            try {
                fern::select(fern::readable_case(s.a), fern::tick_case(t),
                             fern::deadline_case(std::chrono::seconds(30)));
            } catch (const std::system_error &e) {
                threw = e.code() == std::errc::operation_canceled;
            }
        });
        while (!in.load())
            fern_yield();
        fern_sleep_ns(10000000);
        ASSERT_EQ(0, fern_cancel(waiter.native_handle()));
        waiter.join();
        EXPECT_TRUE(threw.load());
    }));
}

TEST(HppSelectIo, Ticker)
{
    EXPECT_ERRNO_THROW(fern::ticker(0ms), EINVAL);
    EXPECT_ERRNO_THROW(fern::ticker(-1ms), EINVAL);
    ASSERT_EQ(0, fern_test::run_green([] {
        auto t0 = std::chrono::steady_clock::now(); // before the ticker's start
        fern::ticker t(10ms);
        EXPECT_EQ(1u, t.wait());
        EXPECT_GE(std::chrono::steady_clock::now() - t0, 10ms);
        EXPECT_EQ(0u, t.wait_for(0ms)) << "no tick pending right after one";
        // A tick_case with a count, beside a channel that stays empty.
        fern::channel<int> idle(0);
        std::uint64_t n = 0;
        EXPECT_EQ(1u, fern::select(fern::recv_case(idle, [](int) {}),
                                   fern::tick_case(t, [&](std::uint64_t k) { n = k; })));
        EXPECT_GE(n, 1u);
        fern_sleep_ns(35000000); // 3 ticks pass
        EXPECT_EQ(0u, fern::select(fern::tick_case(t, [&](std::uint64_t k) { n = k; })));
        EXPECT_GE(n, 3u);
        t.stop();
        EXPECT_EQ(0u, t.wait_for(30ms)) << "stopped";
        t.reset(5ms);
        EXPECT_GE(t.wait_until(std::chrono::steady_clock::now() + 10s), 1u);
        EXPECT_ERRNO_THROW(t.reset(0ms), EINVAL);
    }));
}

} // namespace
