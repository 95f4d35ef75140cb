// SPDX-License-Identifier: MIT
// The poll-owner role is never orphaned (issue 30, item 2; src/sched.c's
// header, "The poller has an owner"). One idle worker at a time sleeps in
// epoll_wait; the others sleep on their futex with no deadline. If the
// owner leaves its idle loop for good and nobody takes the role over, no
// descriptor event is seen again.
//
// Two ways a worker leaves for good, each formed many times:
//   - a spare that ran out of work ends after its linger (50 ms): eight
//     green threads block the workers in plain usleep (no fern hook: the
//     kernel sleeps), so the monitor starts spares, while a green thread
//     waits in fern_read on a pipe; then the process idles 150 ms, so the
//     spares end, and a plain thread writes the pipe;
//   - the workers of a second cluster stop (fern_cluster_destroy) while one
//     of them may own the poller; then the pipe is written.
// Either way the reader must wake within a second. Before the hand-over
// (worker_leave), the reader stayed asleep in 2 of 4 runs of 60 rounds of
// the first sequence.
// Size: 40 rounds per worker count * FERN_STRESS_SCALE (at least 6).
#include "../fern_test.h"

#include <unistd.h>

#include <vector>

using namespace fern_test;

namespace {

void restart(unsigned workers) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    // A 1 ms slice: a worker 2 ms in usleep counts as stuck.
    fern_config cfg{workers, 0, 1000};
    ASSERT_EQ(0, fern_init(&cfg));
}

// Wait up to 1 s for `done`; if the reader is still asleep by then, count
// the lost wake-up and nudge a worker (a spawn from this plain thread wakes
// one, which then polls) so the round can end.
bool woke_in_time(std::atomic<bool> &done) {
    for (int i = 0; i < 1000 * kLatenessScale && !done.load(); i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (done.load()) return true;
    for (int i = 0; i < 100 && !done.load(); i++) {
        fern_thread *t;
        EXPECT_EQ(0, spawn(&t, nullptr, [] {}));
        EXPECT_EQ(0, fern_join(t, nullptr));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

// One round of the first sequence; false if the reader missed its byte.
bool spare_round(uint64_t *spares) {
    int fds[2];
    EXPECT_EQ(0, pipe(fds));
    std::atomic<bool> done{false};
    fern_thread *reader;
    EXPECT_EQ(0, spawn(&reader, nullptr, [&] {
                  char c;
                  EXPECT_EQ(1, fern_read(fds[0], &c, 1));
                  done = true;
              }));
    struct fern_stats s0, s1;
    EXPECT_EQ(0, fern_stats(&s0));
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 8; i++) {
        fern_thread *t;
        EXPECT_EQ(0, spawn(&t, nullptr, [] { usleep(20000); }));
        ts.push_back(t);
    }
    for (auto t : ts) EXPECT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, fern_stats(&s1));
    *spares += s1.spares_started - s0.spares_started;
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_FALSE(done.load());
    EXPECT_EQ(1, write(fds[1], "x", 1));
    bool ok = woke_in_time(done);
    EXPECT_EQ(0, fern_join(reader, nullptr));
    close(fds[0]);
    close(fds[1]);
    return ok;
}

void spares_end(unsigned workers) {
    restart(workers);
    Watchdog wd(600);
    long rounds = scaled(40, 6), lost = 0;
    uint64_t spares = 0;
    for (long r = 0; r < rounds; r++) lost += !spare_round(&spares);
    EXPECT_EQ(0, lost) << "of " << rounds << " rounds";
    // The sequence formed: spares started (and so ended) in most rounds.
    EXPECT_GE(spares, (uint64_t)rounds / 2) << "spares started in " << rounds << " rounds";
}

} // namespace

TEST(StressPoller, SparesEndOneWorker) { spares_end(1); }
TEST(StressPoller, SparesEndTwoWorkers) { spares_end(2); }

// The second sequence: a cluster whose idle worker may hold the poller is
// destroyed while a reader of the default cluster waits.
TEST(StressPoller, ClusterDestroyed) {
    restart(1);
    Watchdog wd(600);
    long rounds = scaled(150, 20), lost = 0;
    for (long r = 0; r < rounds; r++) {
        fern_cluster *c;
        ASSERT_EQ(0, fern_cluster_create(&c, 1));
        int fds[2];
        ASSERT_EQ(0, pipe(fds));
        std::atomic<bool> done{false};
        fern_thread *reader;
        ASSERT_EQ(0, spawn(&reader, nullptr, [&] {
                      char c;
                      EXPECT_EQ(1, fern_read(fds[0], &c, 1));
                      done = true;
                  }));
        // Take the poller from the default cluster's worker: keep it busy
        // 3 ms while c's worker runs a thread and goes idle (it finds the
        // role free), then let it go idle too (on its futex, as a rule).
        fern_thread *a, *b;
        ASSERT_EQ(0, spawn_on(&a, nullptr, [] {
                      int64_t end = fern_now_ns() + ms(3);
                      while (fern_now_ns() < end) {
                      }
                  }));
        std::this_thread::sleep_for(std::chrono::microseconds(500));
        ASSERT_EQ(0, spawn_on(&b, c, [] {}));
        ASSERT_EQ(0, fern_join(b, nullptr));
        ASSERT_EQ(0, fern_join(a, nullptr));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ASSERT_EQ(0, fern_cluster_destroy(c));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        EXPECT_FALSE(done.load());
        EXPECT_EQ(1, write(fds[1], "x", 1));
        lost += !woke_in_time(done);
        EXPECT_EQ(0, fern_join(reader, nullptr));
        close(fds[0]);
        close(fds[1]);
    }
    EXPECT_EQ(0, lost) << "of " << rounds << " rounds";
}
