// SPDX-License-Identifier: MIT
// Core stress: thousands of green threads on a 4-worker cluster and the
// default cluster, plus plain pthreads, each doing a seeded random mix of
// yields, short sleeps, mutex-protected counter updates, a producer/consumer
// token protocol on a fern_cond, migrations between the clusters, and spawning
// and joining children. Checks: counters exact, every thread ran exactly once,
// errno and key values kept per thread, no lost wake-ups (a watchdog aborts
// after 120 s), stats consistent. Size: 4000 * FERN_STRESS_SCALE threads.
#include "../fern_test.h"

#include <memory>
#include <random>
#include <vector>

using namespace fern_test;

namespace {

struct Shared {
    fern_cluster *clusters[2] = {nullptr, nullptr};

    fern_mutex mtx = FERN_MUTEX_INIT;
    long counter = 0;  // guarded by mtx
    std::atomic<long> increments{0};

    fern_mutex qm = FERN_MUTEX_INIT;
    fern_cond qcv = FERN_COND_INIT;
    long tokens = 0;  // guarded by qm
    std::atomic<long> produced{0}, consumed{0};

    std::atomic<long> moves{0};  // fern_migrate calls that changed cluster
    std::atomic<long> children_spawned{0}, children_ran{0};
    std::atomic<long> errors{0};
    fern_key key = 0;

    std::vector<std::atomic<bool>> started;
    std::vector<int> produce, consume;  // per top-level thread
};

Shared *g;

void fail(const char *what, long v = 0) {
    g->errors++;
    if (g->errors.load() < 20) std::fprintf(stderr, "stress: %s (%ld)\n", what, v);
}

void locked_increment(std::mt19937 &rng) {
    if (fern_mutex_lock(&g->mtx) != 0) return fail("lock");
    long v = g->counter;
    if (fern_is_green() && rng() % 8 == 0) fern_yield();  // hold across a switch
    g->counter = v + 1;
    g->increments++;
    if (fern_mutex_unlock(&g->mtx) != 0) fail("unlock");
}

void produce_token() {
    fern_mutex_lock(&g->qm);
    g->tokens++;
    g->produced++;
    fern_cond_signal(&g->qcv);
    fern_mutex_unlock(&g->qm);
}

void consume_token(std::mt19937 &rng) {
    fern_mutex_lock(&g->qm);
    while (g->tokens == 0) {
        int rc = (rng() % 3 == 0) ? fern_cond_timedwait(&g->qcv, &g->qm, fern_now_ns() + 50000 * (1 + rng() % 20))
                                  : fern_cond_wait(&g->qcv, &g->qm);
        if (rc != 0 && rc != ETIMEDOUT) fail("cond wait", rc);
    }
    g->tokens--;
    g->consumed++;
    fern_mutex_unlock(&g->qm);
}

void *child_body(void *arg) {
    g->children_ran++;
    auto seed = (unsigned)(uintptr_t)arg;
    std::mt19937 rng(seed);
    if (rng() % 2) fern_yield();
    locked_increment(rng);
    return (void *)(uintptr_t)(seed ^ 0x5a5a);
}

void random_op(std::mt19937 &rng, int self) {
    switch (rng() % 7) {
    case 0:
        fern_yield();
        break;
    case 1:
        fern_sleep_ns((int64_t)(rng() % 200) * 1000);
        break;
    case 2:
    case 3:
        locked_increment(rng);
        break;
    case 4: {
        if (!fern_is_green()) break;
        fern_cluster *to = g->clusters[rng() % 2];
        fern_cluster *from = fern_current_cluster();
        if (fern_migrate(to) != 0) fail("migrate");
        if (fern_current_cluster() != to) fail("not on target cluster after migrate");
        if (from != to) g->moves++;
        break;
    }
    case 5: {
        fern_thread *c = nullptr;
        unsigned seed = (unsigned)rng();
        fern_attr a{};
        a.cluster = g->clusters[rng() % 2];
        a.name = "child";
        if (fern_spawn(&c, &a, child_body, (void *)(uintptr_t)seed) != 0) return fail("spawn child");
        g->children_spawned++;
        void *r = nullptr;
        if (fern_join(c, &r) != 0) return fail("join child");
        if (r != (void *)(uintptr_t)(seed ^ 0x5a5a)) fail("child result");
        break;
    }
    case 6: {
        // A timed wait on the token cond that may or may not be signalled.
        fern_mutex_lock(&g->qm);
        int rc = fern_cond_timedwait(&g->qcv, &g->qm, fern_now_ns() + (int64_t)(rng() % 100) * 1000);
        if (rc != 0 && rc != ETIMEDOUT) fail("timedwait", rc);
        // Pass any wake-up on: a consumer may have been the intended target.
        fern_cond_signal(&g->qcv);
        if (fern_mutex_unlock(&g->qm) != 0) fail("qm not held after timedwait");
        break;
    }
    }
    (void)self;
}

void *top_body(void *arg) {
    int i = (int)(intptr_t)arg;
    if (g->started[i].exchange(true)) fail("thread started twice", i);
    std::mt19937 rng(0xfe4u + (unsigned)i * 2654435761u);
    if (fern_setspecific(g->key, (void *)(intptr_t)(i + 1)) != 0) fail("setspecific");
    int mine = 10000 + i;
    set_errno(mine);
    auto check = [&] {
        // errno is the green thread's own; a plain thread's may be set by the
        // library's syscalls, as POSIX allows.
        if (fern_is_green() && get_errno() != mine) fail("errno not kept", i);
        if (fern_getspecific(g->key) != (void *)(intptr_t)(i + 1)) fail("key value not kept", i);
    };
    // Produce first, consume later: every thread's productions finish without
    // waiting, so every consumer eventually gets its tokens.
    int ops = 8 + (int)(rng() % 16);
    for (int k = 0; k < ops; k++) {
        random_op(rng, i);
        check();
        if (k < g->produce[i]) produce_token();
    }
    for (int k = (ops < g->produce[i] ? ops : g->produce[i]); k < g->produce[i]; k++) produce_token();
    for (int k = 0; k < g->consume[i]; k++) {
        consume_token(rng);
        check();
        random_op(rng, i);
        check();
    }
    if (fern_is_green() && fern_current_cluster() == nullptr) fail("no cluster");
    return (void *)(intptr_t)(i * 3);
}

TEST(StressCore, RandomMix) {
    Watchdog wd(120, "stress_core RandomMix");
    const int N = (int)scaled(4000, 200);
    constexpr int PLAIN = 3;
    const int TOTAL = N + PLAIN;
    std::fprintf(stderr, "stress_core: %d green threads + %d plain\n", N, PLAIN);

    auto shared = std::make_unique<Shared>();
    g = shared.get();
    ASSERT_EQ(0, fern_cluster_create(&g->clusters[1], 4));
    g->clusters[0] = fern_cluster_default();
    ASSERT_NE(nullptr, g->clusters[0]);
    ASSERT_EQ(0, fern_key_create(&g->key, nullptr));
    g->started = std::vector<std::atomic<bool>>(TOTAL);
    g->produce.assign(TOTAL, 0);
    g->consume.assign(TOTAL, 0);
    std::mt19937 plan(12345);
    long total_tokens = 0;
    for (int i = 0; i < TOTAL; i++) total_tokens += (g->produce[i] = (int)(plan() % 4));
    for (long t = 0; t < total_tokens; t++) g->consume[plan() % TOTAL]++;

    struct fern_stats s0;
    ASSERT_EQ(0, fern_stats(&s0));

    // Two plain threads spawn the green threads concurrently; PLAIN plain
    // threads take part in the same protocol.
    std::vector<fern_thread *> ts(N);
    std::atomic<int> spawn_fail{0};
    auto spawner = [&](int from, int step) {
        for (int i = from; i < N; i += step) {
            fern_attr a{};
            a.cluster = g->clusters[i % 2];
            a.name = "stress";
            if (fern_spawn(&ts[i], &a, top_body, (void *)(intptr_t)i) != 0) spawn_fail++;
        }
    };
    std::thread sp1(spawner, 0, 2), sp2(spawner, 1, 2);
    sp1.join();
    sp2.join();
    ASSERT_EQ(0, spawn_fail.load());
    std::vector<std::thread> plains;
    for (int p = 0; p < PLAIN; p++) plains.emplace_back([p, N] { top_body((void *)(intptr_t)(N + p)); });

    for (int i = 0; i < N; i++) {
        void *r = nullptr;
        ASSERT_EQ(0, fern_join(ts[i], &r)) << i;
        EXPECT_EQ((void *)(intptr_t)(i * 3), r) << i;
    }
    for (auto &p : plains) p.join();

    EXPECT_EQ(0, g->errors.load());
    EXPECT_EQ(g->increments.load(), g->counter);
    EXPECT_EQ(total_tokens, g->produced.load());
    EXPECT_EQ(total_tokens, g->consumed.load());
    EXPECT_EQ(0, g->tokens);
    EXPECT_EQ(g->children_spawned.load(), g->children_ran.load());
    for (int i = 0; i < TOTAL; i++) EXPECT_TRUE(g->started[i].load()) << "thread " << i << " never ran";

    struct fern_stats s1;
    wait_until([&] { return fern_stats(&s1) == 0 && s1.threads_live == 0; }, 5000);
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_EQ(0u, s1.threads_live);
    EXPECT_EQ(s0.threads_spawned + (uint64_t)N + (uint64_t)g->children_spawned.load(), s1.threads_spawned);
    EXPECT_EQ(s0.migrations + (uint64_t)g->moves.load(), s1.migrations);
    EXPECT_GT(s1.switches, s0.switches);

    EXPECT_EQ(0, fern_cond_destroy(&g->qcv));
    EXPECT_EQ(0, fern_mutex_destroy(&g->mtx));
    EXPECT_EQ(0, fern_mutex_destroy(&g->qm));
    EXPECT_EQ(0, fern_key_delete(g->key));
    EXPECT_EQ(0, fern_cluster_destroy(g->clusters[1]));
    g = nullptr;
}

// Repeated bursts of spawn/park/wake/join with a runtime restart between
// rounds: shutdown must leave nothing behind and the runtime must come back.
TEST(StressCore, RestartUnderLoad) {
    Watchdog wd(120, "stress_core RestartUnderLoad");
    const int N = (int)scaled(2000, 100);
    for (int round = 0; round < 3; round++) {
        if (runtime_running()) {
            ASSERT_EQ(0, fern_shutdown());
        }
        fern_config cfg{(unsigned)(2 + round), 0, 0};
        ASSERT_EQ(0, fern_init(&cfg));
        fern_mutex m = FERN_MUTEX_INIT;
        fern_cond cv = FERN_COND_INIT;
        int waiting = 0;
        bool go_on = false;
        std::atomic<int> done{0};
        std::vector<fern_thread *> ts(N);
        for (int i = 0; i < N; i++)
            ASSERT_EQ(0, spawn(&ts[i], nullptr, [&] {
                fern_mutex_lock(&m);
                waiting++;
                while (!go_on) fern_cond_wait(&cv, &m);
                fern_mutex_unlock(&m);
                fern_yield();
                done++;
            }));
        for (;;) {
            fern_mutex_lock(&m);
            bool all = waiting == N;
            if (all) {
                go_on = true;
                fern_cond_broadcast(&cv);
            }
            fern_mutex_unlock(&m);
            if (all) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        EXPECT_EQ(N, done.load());
    }
}

} // namespace
