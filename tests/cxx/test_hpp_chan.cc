// SPDX-License-Identifier: MIT
// fern.hpp channels and select: fern::channel<T> with trivially copyable,
// move-only and heap-owning T (no leak, no double destruction, no copy),
// range-for until close, timeouts, many producers and consumers, errors, and
// fern::select with move-only values and timeouts.
#include <fern/fern.hpp>

#include "fern_test.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;

#define EXPECT_ERRNO_THROW FERN_EXPECT_ERRNO_THROW

namespace {

static_assert(std::input_iterator<fern::channel<std::string>::iterator>);
static_assert(std::sentinel_for<std::default_sentinel_t, fern::channel<std::unique_ptr<int>>::iterator>);
static_assert(!std::is_copy_constructible_v<fern::channel<int>>);

// Counts live instances; copying is a compile error, so the channel cannot copy.
struct Tracked {
    static inline std::atomic<long> live{0};
    static inline std::atomic<long> moves{0};
    int v;
    explicit Tracked(int x) : v(x) { live++; }
    Tracked(Tracked &&o) noexcept : v(o.v)
    {
        o.v = -1;
        live++;
        moves++;
    }
    Tracked &operator=(Tracked &&o) noexcept
    {
        v = o.v;
        o.v = -1;
        return *this;
    }
    Tracked(const Tracked &) = delete;
    Tracked &operator=(const Tracked &) = delete;
    ~Tracked() { live--; }
};

TEST(HppChannel, BufferedInts)
{
    fern::channel<int> ch(4);
    EXPECT_EQ(4u, ch.capacity());
    for (int i = 0; i < 4; i++)
        ch.send(i);
    EXPECT_EQ(4u, ch.size());
    EXPECT_FALSE(ch.try_send(99));
    for (int i = 0; i < 4; i++)
        EXPECT_EQ(i, ch.recv());
    fern::chan_status st;
    EXPECT_EQ(std::nullopt, ch.try_recv(st));
    EXPECT_EQ(fern::chan_status::timeout, st);
    ch.close();
    EXPECT_EQ(std::nullopt, ch.recv());
    EXPECT_EQ(std::nullopt, ch.try_recv(st));
    EXPECT_EQ(fern::chan_status::closed, st);
}

struct Point {
    double x, y;
    int tag;
};

TEST(HppChannel, TriviallyCopyableStruct)
{
    fern::channel<Point> ch(1);
    auto t = fern::spawn([&] {
        for (int i = 0; i < 100; i++)
            ch.send(Point{i * 0.5, -i * 1.0, i});
        ch.close();
    });
    int n = 0;
    for (const Point &p : ch) {
        EXPECT_EQ(n, p.tag);
        EXPECT_EQ(n * 0.5, p.x);
        n++;
    }
    EXPECT_EQ(100, n);
    t.join();
}

TEST(HppChannel, UnbufferedRendezvous)
{
    fern::channel<std::string> ch; // capacity 0
    std::atomic<bool> sent{false};
    auto t = fern::spawn([&] {
        ch.send(std::string("hello"));
        sent = true;
    });
    std::this_thread::sleep_for(5ms);
    EXPECT_FALSE(sent.load()); // waits for a receiver
    EXPECT_EQ("hello", ch.recv());
    t.join();
    EXPECT_TRUE(sent.load());
}

TEST(HppChannel, UniquePtrRangeForUntilClose)
{
    fern::channel<std::unique_ptr<int>> ch(3);
    const int N = 500;
    auto producer = fern::spawn([&] {
        for (int i = 0; i < N; i++)
            ch.send(std::make_unique<int>(i));
        ch.close();
    });
    long sum = 0;
    int n = 0;
    for (auto &p : ch) {
        ASSERT_TRUE(p);
        EXPECT_EQ(n, *p);
        std::unique_ptr<int> mine = std::move(p); // take ownership out of the iterator
        sum += *mine;
        n++;
    }
    producer.join();
    EXPECT_EQ(N, n);
    EXPECT_EQ(long(N) * (N - 1) / 2, sum);
}

TEST(HppChannel, MoveOnlyNoLeakNoDoubleDestroy)
{
    Tracked::live = 0;
    {
        fern::channel<Tracked> ch(8);
        for (int i = 0; i < 8; i++)
            ch.send(Tracked(i));
        EXPECT_EQ(8, Tracked::live.load()); // the heap copies in the channel
        {
            auto a = ch.recv();
            ASSERT_TRUE(a);
            EXPECT_EQ(0, a->v);
            auto b = ch.try_recv();
            ASSERT_TRUE(b);
            EXPECT_EQ(1, b->v);
        }
        EXPECT_EQ(6, Tracked::live.load());
        EXPECT_TRUE(ch.try_send(Tracked(8)));
        ch.send(Tracked(9));
        EXPECT_EQ(8u, ch.size());
        // A failed send leaves the value with the caller.
        Tracked keep(42);
        EXPECT_FALSE(ch.try_send(std::move(keep)));
        EXPECT_EQ(42, keep.v);
        EXPECT_FALSE(ch.send_for(std::move(keep), 1ms));
        EXPECT_EQ(42, keep.v);
        EXPECT_EQ(9, Tracked::live.load()); // 8 buffered + keep
    } // the destructor destroys the 8 buffered elements
    EXPECT_EQ(0, Tracked::live.load());
}

TEST(HppChannel, DestructorDrainsUniquePtrs)
{
    // LeakSanitizer (ASan build) reports these if the destructor leaked them.
    auto ch = std::make_unique<fern::channel<std::unique_ptr<std::string>>>(16);
    for (int i = 0; i < 16; i++)
        ch->send(std::make_unique<std::string>(64, 'x'));
    ch->close();
    ch.reset();
}

TEST(HppChannel, StringsManyProducersConsumers)
{
    fern_test::Watchdog wd(120, "StringsManyProducersConsumers");
    const int P = 8, C = 8;
    const int M = static_cast<int>(fern_test::scaled(2000, 100));
    fern::channel<std::string> ch(16);
    fern::wait_group producers;
    producers.add(P);
    for (int p = 0; p < P; p++)
        fern::go([&, p] {
            for (int i = 0; i < M; i++) {
                char head[32];
                std::snprintf(head, sizeof head, "p%d:%d", p, i);
                std::string msg(head);
                msg.append(static_cast<size_t>(i % 40), '.');
                ch.send(std::move(msg));
            }
            producers.done();
        });
    fern::go([&] {
        producers.wait();
        ch.close();
    });
    std::vector<fern::thread<std::map<int, long>>> consumers;
    for (int c = 0; c < C; c++)
        consumers.push_back(fern::spawn([&] {
            std::map<int, long> seen; // producer -> count
            while (auto s = ch.recv()) {
                int p = std::stoi(s->substr(1));
                int i = std::stoi(s->substr(s->find(':') + 1));
                EXPECT_EQ(i % 40, std::count(s->begin(), s->end(), '.'));
                seen[p]++;
            }
            return seen;
        }));
    std::map<int, long> total;
    for (auto &c : consumers)
        for (auto [p, n] : c.join())
            total[p] += n;
    ASSERT_EQ(static_cast<size_t>(P), total.size());
    for (auto [p, n] : total)
        EXPECT_EQ(M, n) << "producer " << p;
}

// A plain thread receiving from green producers.
TEST(HppChannel, PlainThreadReceiver)
{
    fern::channel<std::unique_ptr<int>> ch(2);
    std::vector<fern::thread<void>> ps;
    for (int p = 0; p < 4; p++)
        ps.push_back(fern::spawn([&] {
            for (int i = 0; i < 50; i++)
                ch.send(std::make_unique<int>(1));
        }));
    long sum = 0;
    std::thread plain([&] {
        for (int k = 0; k < 200; k++)
            sum += **ch.recv();
    });
    plain.join();
    for (auto &p : ps)
        p.join();
    EXPECT_EQ(200, sum);
}

TEST(HppChannel, Timeouts)
{
    fern::channel<std::unique_ptr<int>> ch(1);
    fern::chan_status st;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(nullptr, ch.recv_for(3ms, st).value_or(nullptr));
    EXPECT_EQ(fern::chan_status::timeout, st);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 3ms);
    EXPECT_FALSE(ch.recv_until(std::chrono::steady_clock::now() + 1ms));
    EXPECT_FALSE(ch.recv_for(-1s)); // past: no wait

    ASSERT_TRUE(ch.try_send(std::make_unique<int>(1)));
    auto p = std::make_unique<int>(2);
    t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(ch.send_for(std::move(p), 3ms));
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 3ms);
    ASSERT_TRUE(p); // not sent: still ours
    EXPECT_FALSE(ch.send_until(std::move(p), std::chrono::system_clock::now() + 1ms));
    ASSERT_TRUE(p);

    auto r = fern::spawn([&] {
        fern::this_thread::sleep_for(2ms);
        return **ch.recv();
    });
    EXPECT_TRUE(ch.send_for(std::move(p), 10s));
    EXPECT_FALSE(p);
    EXPECT_EQ(1, r.join());
    auto last = ch.recv_for(10s, st);
    ASSERT_TRUE(last);
    EXPECT_EQ(fern::chan_status::ok, st);
    EXPECT_EQ(2, **last);
}

TEST(HppChannel, ClosedErrors)
{
    fern::channel<std::unique_ptr<int>> ch(4);
    ch.send(std::make_unique<int>(1));
    ch.close();
    EXPECT_ERRNO_THROW(ch.close(), EPIPE);
    auto p = std::make_unique<int>(5);
    EXPECT_ERRNO_THROW(ch.send(std::move(p)), EPIPE);
    ASSERT_TRUE(p); // a failed send leaves the value with the caller
    EXPECT_ERRNO_THROW(ch.try_send(std::move(p)), EPIPE);
    EXPECT_ERRNO_THROW(ch.send_for(std::move(p), 1ms), EPIPE);
    ASSERT_TRUE(p);
    EXPECT_EQ(5, *p);
    // Buffered values are still delivered, then the end.
    auto v = ch.recv();
    ASSERT_TRUE(v);
    EXPECT_EQ(1, **v);
    EXPECT_FALSE(ch.recv());
    fern::chan_status st;
    EXPECT_FALSE(ch.recv_for(1s, st));
    EXPECT_EQ(fern::chan_status::closed, st);
}

TEST(HppChannel, BlockedSenderWokenByClose)
{
    fern::channel<std::string> ch; // unbuffered: the sender waits
    auto t = fern::spawn([&] {
        std::string s = "kept";
        try {
            ch.send(std::move(s));
        } catch (const std::system_error &e) {
            return e.code() == std::errc::broken_pipe && s == "kept";
        }
        return false;
    });
    std::this_thread::sleep_for(5ms);
    ch.close();
    EXPECT_TRUE(t.join());
}

TEST(HppChannel, Emplace)
{
    fern::channel<std::pair<std::string, int>> ch(1);
    ch.emplace("k", 3);
    auto v = ch.recv();
    ASSERT_TRUE(v);
    EXPECT_EQ("k", v->first);
    EXPECT_EQ(3, v->second);
}

TEST(HppSelect, RecvMoveOnly)
{
    fern::channel<std::unique_ptr<int>> a(1), b(1);
    b.send(std::make_unique<int>(7));
    int got = 0;
    std::size_t which = fern::select(
        fern::recv_case(a, [&](std::unique_ptr<int>) { got = -1; }),
        fern::recv_case(b, [&](std::optional<std::unique_ptr<int>> p) { got = **p; }));
    EXPECT_EQ(1u, which);
    EXPECT_EQ(7, got);
    EXPECT_EQ(0u, b.size());
}

TEST(HppSelect, SendMoveOnlyKeptUnlessSent)
{
    Tracked::live = 0;
    {
        fern::channel<Tracked> full(1), other(1);
        full.send(Tracked(1));
        Tracked v(2);
        // Nothing ready: the timeout fires, v stays with us.
        bool timed_out = false;
        auto t0 = std::chrono::steady_clock::now();
        std::size_t which = fern::select(fern::send_case(full, std::move(v), [] { FAIL(); }),
                                         fern::timeout(3ms, [&] { timed_out = true; }));
        EXPECT_EQ(1u, which);
        EXPECT_TRUE(timed_out);
        EXPECT_GE(std::chrono::steady_clock::now() - t0, 3ms);
        EXPECT_EQ(2, v.v);
        // default_case: non-blocking.
        EXPECT_EQ(1u, fern::select(fern::send_case(full, std::move(v)), fern::default_case()));
        EXPECT_EQ(2, v.v);
        // A ready send case takes its value, the other keeps its own.
        bool sent = false;
        Tracked w(3);
        which = fern::select(fern::send_case(full, std::move(v), [] { FAIL(); }),
                             fern::send_case(other, std::move(w), [&] { sent = true; }));
        EXPECT_EQ(1u, which);
        EXPECT_TRUE(sent);
        EXPECT_EQ(2, v.v);
        EXPECT_EQ(-1, w.v); // moved from
        auto r = other.recv();
        ASSERT_TRUE(r);
        EXPECT_EQ(3, r->v);
    }
    EXPECT_EQ(0, Tracked::live.load());
}

TEST(HppSelect, TimeoutAt)
{
    fern::channel<int> ch;
    auto until = std::chrono::steady_clock::now() + 3ms;
    bool fired = false;
    EXPECT_EQ(1u, fern::select(fern::recv_case(ch, [](int) { FAIL(); }),
                               fern::timeout_at(until, [&] { fired = true; })));
    EXPECT_TRUE(fired);
    EXPECT_GE(std::chrono::steady_clock::now(), until);
    // A timeout alone is a sleep.
    EXPECT_EQ(0u, fern::select(fern::timeout(1ms)));
}

TEST(HppSelect, ClosedChannels)
{
    fern::channel<std::string> rc(1), sc(1);
    rc.close();
    sc.close();
    bool got_end = false;
    EXPECT_EQ(0u, fern::select(fern::recv_case(rc, [&](std::optional<std::string> s) {
        got_end = !s.has_value();
    })));
    EXPECT_TRUE(got_end);
    // A T handler is not called for the end, the case still fires.
    EXPECT_EQ(0u, fern::select(fern::recv_case(rc, [](std::string) { FAIL(); }),
                               fern::timeout(10s)));
    std::string v = "mine";
    EXPECT_ERRNO_THROW(fern::select(fern::send_case(sc, std::move(v))), EPIPE);
    EXPECT_EQ("mine", v);
}

TEST(HppSelect, ImpossibleSelectThrows)
{
    EXPECT_ERRNO_THROW(fern::select(), EINVAL);
}

TEST(HppSelect, HandlerExceptionGivesValuesBack)
{
    fern::channel<std::unique_ptr<int>> ready(1), full(1);
    ready.send(std::make_unique<int>(1));
    full.send(std::make_unique<int>(2));
    auto keep = std::make_unique<int>(3);
    EXPECT_THROW(fern::select(fern::recv_case(ready, [](std::unique_ptr<int>) {
                                  throw std::runtime_error("handler");
                              }),
                              fern::send_case(full, std::move(keep))),
                 std::runtime_error);
    ASSERT_TRUE(keep);
    EXPECT_EQ(3, *keep);
}

TEST(HppSelect, FairAmongReady)
{
    fern::channel<int> a(64), b(64);
    int na = 0, nb = 0;
    for (int i = 0; i < 64; i++) {
        a.send(i);
        b.send(i);
    }
    for (int i = 0; i < 64; i++)
        fern::select(fern::recv_case(a, [&](int) { na++; }), fern::recv_case(b, [&](int) { nb++; }));
    EXPECT_EQ(64, na + nb);
    EXPECT_GT(na, 5);
    EXPECT_GT(nb, 5);
}

// A select loop in a green thread: fan-in of move-only values from several
// producers until all channels are closed, with a periodic timeout.
TEST(HppSelect, FanInUntilClosed)
{
    fern_test::Watchdog wd(60, "FanInUntilClosed");
    const int N = static_cast<int>(fern_test::scaled(300, 50));
    fern::channel<std::unique_ptr<int>> a(2), b;
    fern::go([&] {
        for (int i = 0; i < N; i++)
            a.send(std::make_unique<int>(1));
        a.close();
    });
    fern::go([&] {
        for (int i = 0; i < N; i++)
            b.send(std::make_unique<int>(2));
        b.close();
    });
    auto loop = fern::spawn([&] {
        long sum = 0;
        int open = 2, ticks = 0;
        bool a_open = true, b_open = true;
        fern::channel<std::unique_ptr<int>> never; // stands in for a closed channel
        while (open > 0) {
            fern::select(
                fern::recv_case(a_open ? a : never,
                                [&](std::optional<std::unique_ptr<int>> p) {
                                    if (p)
                                        sum += **p;
                                    else
                                        a_open = false, open--;
                                }),
                fern::recv_case(b_open ? b : never,
                                [&](std::optional<std::unique_ptr<int>> p) {
                                    if (p)
                                        sum += **p;
                                    else
                                        b_open = false, open--;
                                }),
                fern::timeout(50ms, [&] { ticks++; }));
        }
        return sum;
    });
    EXPECT_EQ(3L * N, loop.join());
}

} // namespace
