// SPDX-License-Identifier: MIT
// Clusters: create/destroy, spawning on a cluster, migration back and forth,
// destroy errors.
#include "fern_test.h"

#include <set>
#include <vector>

using namespace fern_test;

namespace {

thread_local int t_worker_marker;
// The address of the calling kernel thread's marker, read through a call the
// optimiser cannot cache across a switch.
__attribute__((noipa)) const void *worker_identity() { return &t_worker_marker; }

TEST(Cluster, CreateDestroyAndWorkers) {
    ASSERT_EQ(0, fern_run([](void *) -> void * { return nullptr; }, nullptr, nullptr));
    fern_cluster *def = fern_cluster_default();
    ASSERT_NE(nullptr, def);
    EXPECT_GE(fern_cluster_workers(def), 1u);
    for (unsigned w : {1u, 2u, 4u}) {
        fern_cluster *c = nullptr;
        ASSERT_EQ(0, fern_cluster_create(&c, w));
        ASSERT_NE(nullptr, c);
        EXPECT_NE(def, c);
        EXPECT_EQ(w, fern_cluster_workers(c));
        EXPECT_EQ(0, fern_cluster_destroy(c));
    }
    EXPECT_EQ(def, fern_cluster_default());
}

TEST(Cluster, StatsCountClustersAndWorkers) {
    ASSERT_EQ(0, fern_run([](void *) -> void * { return nullptr; }, nullptr, nullptr));
    struct fern_stats s0, s1, s2;
    ASSERT_EQ(0, fern_stats(&s0));
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 3));
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_EQ(s0.clusters + 1, s1.clusters);
    EXPECT_EQ(s0.workers + 3, s1.workers);
    ASSERT_EQ(0, fern_cluster_destroy(c));
    ASSERT_EQ(0, fern_stats(&s2));
    EXPECT_EQ(s0.clusters, s2.clusters);
    EXPECT_EQ(s0.workers, s2.workers);
}

TEST(Cluster, CreateBadArgs) {
    fern_cluster *c = nullptr;
    EXPECT_EQ(EINVAL, fern_cluster_create(nullptr, 1));
    EXPECT_EQ(EINVAL, fern_cluster_create(&c, 0));
    EXPECT_EQ(EINVAL, fern_cluster_create(&c, FERN_WORKERS_MAX + 1));
    EXPECT_EQ(EINVAL, fern_cluster_destroy(nullptr));
}

TEST(Cluster, DestroyDefaultIsEinval) {
    ASSERT_EQ(0, fern_run([](void *) -> void * { return nullptr; }, nullptr, nullptr));
    EXPECT_EQ(EINVAL, fern_cluster_destroy(fern_cluster_default()));
    // Still works.
    ASSERT_EQ(0, fern_run([](void *) -> void * { return nullptr; }, nullptr, nullptr));
}

TEST(Cluster, SpawnOnClusterRunsThere) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    constexpr int N = 100;
    std::vector<fern_thread *> ts(N);
    std::atomic<int> wrong{0};
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], c, [&] {
            if (fern_current_cluster() != c) wrong++;
            fern_yield();
            fern_sleep_ns(10000);
            if (fern_current_cluster() != c) wrong++;
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, wrong.load());
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Cluster, ClustersUseDistinctKernelThreads) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    std::set<const void *> on_def, on_c;
    std::mutex mu;
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 40; i++) {
        fern_thread *t = nullptr;
        bool onc = i & 1;
        ASSERT_EQ(0, spawn_on(&t, onc ? c : fern_cluster_default(), [&, onc] {
            for (int k = 0; k < 5; k++) {
                const void *w = worker_identity();
                {
                    std::lock_guard<std::mutex> g(mu);
                    (onc ? on_c : on_def).insert(w);
                }
                fern_yield();
            }
        }));
        ts.push_back(t);
    }
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    for (const void *w : on_c) EXPECT_EQ(0u, on_def.count(w)) << "a default-cluster thread ran on a worker of c";
    EXPECT_LE(on_c.size(), 2u);
    EXPECT_LE(on_def.size(), (size_t)fern_cluster_workers(fern_cluster_default()));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Cluster, MigrateBackAndForth) {
    fern_cluster *a = nullptr, *b = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&a, 1));
    ASSERT_EQ(0, fern_cluster_create(&b, 2));
    struct fern_stats s0, s1;
    ASSERT_EQ(0, fern_stats(&s0));
    constexpr int MOVES = 100;
    std::atomic<int> moved{0};
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(fern_cluster_default(), fern_current_cluster());
        fern_cluster *targets[3] = {a, b, fern_cluster_default()};
        for (int i = 0; i < MOVES; i++) {
            fern_cluster *to = targets[i % 3];
            ASSERT_EQ(0, fern_migrate(to));
            moved++;
            ASSERT_EQ(to, fern_current_cluster()) << "i=" << i;
            // Migrating to the current cluster is a no-op success.
            ASSERT_EQ(0, fern_migrate(to));
            ASSERT_EQ(to, fern_current_cluster());
        }
    }));
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_EQ(s0.migrations + MOVES, s1.migrations) << "migrations counts fern_migrate calls that moved";
    EXPECT_EQ(0, fern_cluster_destroy(a));
    EXPECT_EQ(0, fern_cluster_destroy(b));
    // Counted per worker: those of destroyed clusters' workers stay counted.
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_EQ(s0.migrations + MOVES, s1.migrations) << "a destroyed cluster's migrations were lost";
}

// After migrating, the thread really runs on the target cluster's workers.
TEST(Cluster, MigrateChangesKernelThread) {
    fern_cluster *a = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&a, 1));
    const void *a_worker = nullptr;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, a, [&] { a_worker = worker_identity(); }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_NE(a_worker, worker_identity());
        ASSERT_EQ(0, fern_migrate(a));
        EXPECT_EQ(a_worker, worker_identity()) << "not running on a's only worker after migrate";
        ASSERT_EQ(0, fern_migrate(fern_cluster_default()));
        EXPECT_NE(a_worker, worker_identity());
    }));
    EXPECT_EQ(0, fern_cluster_destroy(a));
}

TEST(Cluster, ManyThreadsMigratingConcurrently) {
    Watchdog wd(60, "ManyThreadsMigratingConcurrently");
    fern_cluster *a = nullptr, *b = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&a, 2));
    ASSERT_EQ(0, fern_cluster_create(&b, 3));
    const int N = (int)scaled(200, 20);
    std::vector<fern_thread *> ts(N);
    std::atomic<int> wrong{0};
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], (i & 1) ? a : b, [&, i] {
            for (int k = 0; k < 20; k++) {
                fern_cluster *to = ((i + k) & 1) ? a : b;
                if (fern_migrate(to) != 0 || fern_current_cluster() != to) wrong++;
                if (k % 5 == 0) fern_yield();
            }
            fern_migrate(fern_cluster_default());
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, wrong.load());
    EXPECT_EQ(0, fern_cluster_destroy(a));
    EXPECT_EQ(0, fern_cluster_destroy(b));
}

TEST(Cluster, DestroyWithLiveThreadsIsEbusy) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    bool go_on = false;
    std::atomic<bool> parked{false};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, c, [&] {
        fern_mutex_lock(&m);
        parked = true;
        while (!go_on) fern_cond_wait(&cv, &m);
        fern_mutex_unlock(&m);
    }));
    ASSERT_TRUE(wait_until([&] { return parked.load(); }));
    EXPECT_EQ(EBUSY, fern_cluster_destroy(c));  // parked thread belongs to c
    // A thread that migrated away no longer belongs to c; one that migrated in does.
    fern_mutex_lock(&m);
    go_on = true;
    fern_cond_signal(&cv);
    fern_mutex_unlock(&m);
    ASSERT_EQ(0, fern_join(t, nullptr));
    // A sleeping (timer-parked) thread also keeps it busy.
    ASSERT_EQ(0, spawn_on(&t, c, [] { fern_sleep_ns(ms(100)); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(EBUSY, fern_cluster_destroy(c));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Cluster, MigratedAwayThreadDoesNotKeepClusterBusy) {
    fern_cluster *c = nullptr, *d = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    ASSERT_EQ(0, fern_cluster_create(&d, 1));
    std::atomic<int> stage{0};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, c, [&] {
        fern_migrate(d);
        stage = 1;
        while (stage.load() != 2) fern_sleep_ns(ms(1));
    }));
    ASSERT_TRUE(wait_until([&] { return stage.load() == 1; }));
    EXPECT_EQ(0, fern_cluster_destroy(c)) << "thread left c but c is still busy";
    EXPECT_EQ(EBUSY, fern_cluster_destroy(d));
    stage = 2;
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, fern_cluster_destroy(d));
}

TEST(Cluster, DestroyOwnClusterIsEbusy) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, c, [&] { EXPECT_EQ(EBUSY, fern_cluster_destroy(c)); }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Cluster, DestroyFromGreenOnAnotherCluster) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(0, fern_cluster_destroy(c)); }));
}

TEST(Cluster, MigrateOutsideGreenIsEperm) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    EXPECT_EQ(EPERM, fern_migrate(c));
    EXPECT_EQ(EPERM, fern_migrate(fern_cluster_default()));
    EXPECT_EQ(nullptr, fern_current_cluster());
    ASSERT_EQ(0, run_green([] { EXPECT_EQ(EINVAL, fern_migrate(nullptr)); }));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Cluster, ClusterCreateStartsRuntime) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    EXPECT_EQ(nullptr, fern_cluster_default());
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    EXPECT_NE(nullptr, fern_cluster_default());
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, c, [&] { EXPECT_EQ(c, fern_current_cluster()); }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// fern_shutdown also stops clusters that are still alive.
TEST(Cluster, ShutdownStopsLiveClusters) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn_on(&t, c, [] { fern_yield(); }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    ASSERT_EQ(0, fern_shutdown());
    EXPECT_EQ(nullptr, fern_cluster_default());
    ASSERT_EQ(0, fern_init(nullptr));
    struct fern_stats s;
    ASSERT_EQ(0, fern_stats(&s));
    EXPECT_EQ(1u, s.clusters);
    EXPECT_EQ(fern_cluster_workers(fern_cluster_default()), s.workers);
}

} // namespace
