// SPDX-License-Identifier: MIT
// Linearity of the timeout race (invariant 2 of docs/design.md, "wake exactly once"):
// many iterations in which a timed wait's deadline expires at about the same
// moment another thread completes it. Per primitive:
//  - chan (unbuffered and buffered): timedrecv vs a send. Either the recv got
//    the value and the send succeeded, or the recv timed out and the value is
//    still in the channel / the send failed; never both, never lost
//    (sent == received + left over, checked every iteration).
//  - chan timedsend vs a receiver's timedrecv on an unbuffered channel.
//  - sem: timedwait vs post: a timed-out waiter took no unit, the unit stays.
//  - mutex: timedlock vs unlock: ETIMEDOUT means not held, 0 means held.
//  - cond: timedwait vs signal with a second, untimed waiter queued behind:
//    if the timed waiter timed out, the signal must reach the second waiter.
// The completing party fires at deadline + offset, offset sweeping -60..+60
// us, from green threads on a 2-worker cluster and from plain threads.
// Size: 1500 iterations per case * FERN_STRESS_SCALE.
#include "../fern_test.h"

#include <vector>

using namespace fern_test;

namespace {

fern_cluster *g_cl = nullptr;

// Run a on one party and b on the other; party kinds by iteration.
template <class A, class B> void run_pair(int it, A a, B b) {
    bool a_green = it % 4 < 2, b_green = it % 2 == 0;
    fern_thread *ta = nullptr, *tb = nullptr;
    std::thread pa, pb;
    if (a_green)
        ASSERT_EQ(0, spawn_on(&ta, g_cl, a));
    else
        pa = std::thread(a);
    if (b_green)
        ASSERT_EQ(0, spawn_on(&tb, g_cl, b));
    else
        pb = std::thread(b);
    if (ta) {
        ASSERT_EQ(0, fern_join(ta, nullptr));
    }
    if (pa.joinable()) pa.join();
    if (tb) {
        ASSERT_EQ(0, fern_join(tb, nullptr));
    }
    if (pb.joinable()) pb.join();
}

// Spin (yielding) until fern_now_ns() >= t.
void spin_until(int64_t t) {
    while (fern_now_ns() < t) {
        if (fern_is_green())
            fern_yield();
        else
            std::this_thread::yield();
    }
}

int64_t offset_ns(int it) { return ((it * 7919) % 121 - 60) * 1000; }
int64_t lead_ns() { return kTsan ? ms(3) : 300000; }  // time to set up before the deadline

struct Tally {
    long wins = 0, timeouts = 0;
    void note(int rc) { (rc == 0 ? wins : timeouts)++; }
    void report(const char *what) {
        std::fprintf(stderr, "timeout_race %s: %ld completed, %ld timed out\n", what, wins, timeouts);
    }
};

class TimeoutRace : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { ASSERT_EQ(0, fern_cluster_create(&g_cl, 2)); }
    static void TearDownTestSuite() {
        EXPECT_EQ(0, fern_cluster_destroy(g_cl));
        g_cl = nullptr;
    }
    long iters() { return scaled(1500, 100); }
};

void chan_recv_race(size_t cap, long iters, bool timed_sender) {
    fern_chan *ch = nullptr;
    ASSERT_EQ(0, fern_chan_create(&ch, sizeof(uint64_t), cap));
    long sent = 0, received = 0, left = 0;
    Tally t;
    for (int it = 0; it < iters; it++) {
        uint64_t val = 0x1000 + (uint64_t)it, got = 0;
        int rrc = -1, src = -1;
        int64_t deadline = fern_now_ns() + lead_ns();
        run_pair(
            it, [&] { rrc = fern_chan_timedrecv(ch, &got, deadline); },
            [&] {
                spin_until(deadline + offset_ns(it));
                src = timed_sender ? fern_chan_timedsend(ch, &val, fern_now_ns() + 20000)
                                   : fern_chan_trysend(ch, &val);
            });
        if (src == 0) sent++;
        if (rrc == 0) {
            received++;
            if (got != val) ADD_FAILURE() << "it " << it << ": received " << got << " expected " << val;
            if (src != 0) ADD_FAILURE() << "it " << it << ": received a value whose send failed (" << src << ")";
        } else if (rrc != ETIMEDOUT) {
            ADD_FAILURE() << "it " << it << ": timedrecv " << rrc;
        }
        if (src != 0 && src != EAGAIN && src != ETIMEDOUT) ADD_FAILURE() << "it " << it << ": send " << src;
        // Anything left in the channel?
        uint64_t rest = 0;
        int trc = fern_chan_tryrecv(ch, &rest);
        if (trc == 0) {
            left++;
            if (rrc == 0) ADD_FAILURE() << "it " << it << ": value both received and left in the channel";
            if (rest != val) ADD_FAILURE() << "it " << it << ": left over " << rest;
        }
        if (rrc != 0 && src == 0 && trc != 0)
            ADD_FAILURE() << "it " << it << ": send succeeded, recv timed out, value gone (lost)";
        t.note(rrc);
        if (sent != received + left) {
            ADD_FAILURE() << "it " << it << ": sent " << sent << " != received " << received << " + left " << left;
            break;
        }
        if (::testing::Test::HasFailure() && it > 10) break;
    }
    EXPECT_EQ(sent, received + left);
    t.report(cap ? "chan(buffered) recv" : timed_sender ? "chan(unbuffered, timedsend) recv" : "chan(unbuffered) recv");
    EXPECT_EQ(0, fern_chan_destroy(ch)) << "a timed-out waiter left queued";
}

TEST_F(TimeoutRace, ChanUnbufferedTimedRecvVsTrySend) { chan_recv_race(0, iters(), false); }
TEST_F(TimeoutRace, ChanUnbufferedTimedRecvVsTimedSend) { chan_recv_race(0, iters(), true); }
TEST_F(TimeoutRace, ChanBufferedTimedRecvVsSend) { chan_recv_race(1, iters(), false); }

// Timed send whose deadline races a receiver arriving at the deadline.
TEST_F(TimeoutRace, ChanUnbufferedTimedSendVsRecv) {
    fern_chan *ch = nullptr;
    ASSERT_EQ(0, fern_chan_create(&ch, sizeof(uint64_t), 0));
    long sent = 0, received = 0;
    Tally t;
    for (int it = 0; it < iters(); it++) {
        uint64_t val = 0x2000 + (uint64_t)it, got = 0;
        int src = -1, rrc = -1;
        int64_t deadline = fern_now_ns() + lead_ns();
        run_pair(
            it, [&] { src = fern_chan_timedsend(ch, &val, deadline); },
            [&] {
                spin_until(deadline + offset_ns(it));
                rrc = fern_chan_tryrecv(ch, &got);
            });
        if (src == 0) sent++;
        if (rrc == 0) received++;
        if ((src == 0) != (rrc == 0))
            ADD_FAILURE() << "it " << it << ": timedsend " << src << " but tryrecv " << rrc;
        if (rrc == 0 && got != val) ADD_FAILURE() << "it " << it << ": got " << got;
        if (src != 0 && src != ETIMEDOUT) ADD_FAILURE() << "it " << it << ": timedsend " << src;
        t.note(src);
        if (HasFailure() && it > 10) break;
    }
    EXPECT_EQ(sent, received);
    t.report("chan timedsend");
    EXPECT_EQ(0, fern_chan_destroy(ch));
}

TEST_F(TimeoutRace, SemTimedwaitVsPost) {
    fern_sem s{};
    long posts = 0, takes = 0;
    Tally t;
    for (int it = 0; it < iters(); it++) {
        int wrc = -1, prc = -1;
        int64_t deadline = fern_now_ns() + lead_ns();
        run_pair(
            it, [&] { wrc = fern_sem_timedwait(&s, deadline); },
            [&] {
                spin_until(deadline + offset_ns(it));
                prc = fern_sem_post(&s);
            });
        EXPECT_EQ(0, prc);
        posts++;
        if (wrc == 0)
            takes++;
        else if (wrc != ETIMEDOUT)
            ADD_FAILURE() << "it " << it << ": timedwait " << wrc;
        unsigned v = fern_sem_value(&s);
        if ((long)v != posts - takes) {
            ADD_FAILURE() << "it " << it << ": timedwait " << wrc << ", value " << v << " expected "
                          << posts - takes << (wrc == 0 ? " (unit taken twice or post lost)" : " (post lost)");
            break;
        }
        // Reset to 0 for the next round.
        if (v > 0) {
            EXPECT_EQ(0, fern_sem_trywait(&s));
            takes++;
        }
        t.note(wrc);
    }
    EXPECT_EQ(0u, fern_sem_value(&s));
    t.report("sem");
    EXPECT_EQ(0, fern_sem_destroy(&s)) << "a timed-out waiter left queued";
}

TEST_F(TimeoutRace, MutexTimedlockVsUnlock) {
    fern_mutex m = FERN_MUTEX_INIT;
    Tally t;
    std::atomic<int> holder_ready{0};
    for (int it = 0; it < iters(); it++) {
        int lrc = -1, unlock_after = -1, urc = -1;
        int64_t deadline = fern_now_ns() + lead_ns();
        holder_ready = 0;
        // Party b holds the mutex and releases it at the deadline; party a
        // (started first) waits for b to hold it, then timedlocks.
        run_pair(
            it,
            [&] {
                while (!holder_ready.load()) {
                    if (fern_is_green()) fern_yield(); else std::this_thread::yield();
                }
                lrc = fern_mutex_timedlock(&m, deadline);
                if (lrc == 0) {
                    unlock_after = fern_mutex_unlock(&m);
                } else {
                    // Not held: unlock must say EPERM.
                    unlock_after = fern_mutex_unlock(&m) == EPERM ? 0 : -2;
                }
            },
            [&] {
                EXPECT_EQ(0, fern_mutex_lock(&m));
                holder_ready = 1;
                spin_until(deadline + offset_ns(it));
                urc = fern_mutex_unlock(&m);
            });
        if (lrc != 0 && lrc != ETIMEDOUT) ADD_FAILURE() << "it " << it << ": timedlock " << lrc;
        if (urc != 0) ADD_FAILURE() << "it " << it << ": holder unlock " << urc;
        if (unlock_after != 0)
            ADD_FAILURE() << "it " << it << ": timedlock " << lrc << " but the mutex "
                          << (lrc == 0 ? "could not be unlocked" : "is held (unlock did not say EPERM)");
        // The mutex is free now.
        int trc = fern_mutex_trylock(&m);
        if (trc != 0) {
            ADD_FAILURE() << "it " << it << ": mutex not free after the race (timedlock " << lrc << ")";
            break;
        }
        fern_mutex_unlock(&m);
        t.note(lrc);
        if (HasFailure() && it > 10) break;
    }
    t.report("mutex");
    EXPECT_EQ(0, fern_mutex_destroy(&m));
}

TEST_F(TimeoutRace, CondTimedwaitVsSignal) {
    Watchdog wd(300, "TimeoutRace.CondTimedwaitVsSignal");
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond c = FERN_COND_INIT;
    Tally t;
    long lost = 0;
    for (int it = 0; it < iters(); it++) {
        std::atomic<int> a_ready{0}, b_ready{0}, b_woken{0};
        int arc = -1;
        int64_t deadline = fern_now_ns() + lead_ns();
        // Second waiter B (untimed), queued after A. Plain or green.
        fern_thread *tb = nullptr;
        std::thread pb;
        auto b = [&] {
            while (!a_ready.load()) {
                if (fern_is_green()) fern_yield(); else std::this_thread::yield();
            }
            EXPECT_EQ(0, fern_mutex_lock(&m));  // only after A is waiting
            b_ready = 1;
            EXPECT_EQ(0, fern_cond_wait(&c, &m));
            b_woken = 1;
            EXPECT_EQ(0, fern_mutex_unlock(&m));
        };
        if (it % 3 == 0)
            pb = std::thread(b);
        else
            ASSERT_EQ(0, spawn_on(&tb, g_cl, b));
        run_pair(
            it,
            [&] {
                EXPECT_EQ(0, fern_mutex_lock(&m));
                a_ready = 1;
                arc = fern_cond_timedwait(&c, &m, deadline);
                // m is held again either way.
                EXPECT_EQ(0, fern_mutex_unlock(&m)) << "timedwait returned without the mutex";
            },
            [&] {
                while (!b_ready.load()) {
                    if (fern_is_green()) fern_yield(); else std::this_thread::yield();
                }
                spin_until(deadline + offset_ns(it));
                EXPECT_EQ(0, fern_mutex_lock(&m));  // B is waiting once we hold m
                EXPECT_EQ(0, fern_cond_signal(&c));
                EXPECT_EQ(0, fern_mutex_unlock(&m));
            });
        if (arc != 0 && arc != ETIMEDOUT) ADD_FAILURE() << "it " << it << ": timedwait " << arc;
        if (arc == ETIMEDOUT) {
            // The one signal must have gone to B.
            if (!wait_until([&] { return b_woken.load() == 1; }, 3000)) {
                if (lost++ < 5) ADD_FAILURE() << "it " << it << ": A timed out and the signal was lost (B never woke)";
            }
        }
        // Release B if it is still waiting (A took the signal, or it was lost).
        while (!b_woken.load()) {
            fern_mutex_lock(&m);
            fern_cond_broadcast(&c);
            fern_mutex_unlock(&m);
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        if (tb) {
            ASSERT_EQ(0, fern_join(tb, nullptr));
        }
        if (pb.joinable()) pb.join();
        t.note(arc);
        if (HasFailure() && it > 10) break;
    }
    EXPECT_EQ(0, lost);
    t.report("cond");
    EXPECT_EQ(0, fern_cond_destroy(&c)) << "a timed-out waiter left queued";
    EXPECT_EQ(0, fern_mutex_destroy(&m));
}

} // namespace
