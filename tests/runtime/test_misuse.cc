// SPDX-License-Identifier: MIT
// Every misuse documented in fern.h gets its error, never a hang or a crash,
// and the runtime keeps working afterwards.
#include "fern_test.h"

#include <cstdio>
#include <vector>

using namespace fern_test;

namespace {

void *ret_arg(void *arg) { return arg; }

// A green thread that stays alive until released (so its handle stays valid).
struct Parked {
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond c = FERN_COND_INIT;
    bool release = false;
    std::atomic<bool> started{false};
    std::atomic<bool> finished{false};  // last touch of *this by the thread
    static void *body(void *arg) {
        auto *p = static_cast<Parked *>(arg);
        p->started = true;
        fern_mutex_lock(&p->m);
        while (!p->release) fern_cond_wait(&p->c, &p->m);
        fern_mutex_unlock(&p->m);
        p->finished.store(true);
        return (void *)5;
    }
    void let_go() {
        fern_mutex_lock(&m);
        release = true;
        fern_cond_broadcast(&c);
        fern_mutex_unlock(&m);
    }
};

class Misuse : public ::testing::Test {
  protected:
    // After every misuse the runtime still works.
    void TearDown() override {
        if (!runtime_running()) {
            ASSERT_EQ(0, fern_init(nullptr));
        }
        void *r = nullptr;
        ASSERT_EQ(0, fern_run(ret_arg, (void *)9, &r));
        EXPECT_EQ((void *)9, r);
        std::vector<fern_thread *> ts(20);
        for (auto &t : ts) ASSERT_EQ(0, fern_spawn(&t, nullptr, ret_arg, (void *)3));
        for (auto t : ts) {
            ASSERT_EQ(0, fern_join(t, &r));
            EXPECT_EQ((void *)3, r);
        }
    }
};

TEST_F(Misuse, NullFunctions) {
    fern_thread *t = nullptr;
    EXPECT_EQ(EINVAL, fern_spawn(&t, nullptr, nullptr, nullptr));
    EXPECT_EQ(EINVAL, fern_go(nullptr, nullptr));
    EXPECT_EQ(EINVAL, fern_run(nullptr, nullptr, nullptr));
    ASSERT_EQ(0, run_green([] {
        fern_thread *t2 = nullptr;
        EXPECT_EQ(EINVAL, fern_spawn(&t2, nullptr, nullptr, nullptr));
        EXPECT_EQ(EINVAL, fern_go(nullptr, nullptr));
    }));
}

TEST_F(Misuse, NullHandles) {
    EXPECT_EQ(EINVAL, fern_join(nullptr, nullptr));
    EXPECT_EQ(EINVAL, fern_detach(nullptr));
    EXPECT_EQ(EINVAL, fern_spawn(nullptr, nullptr, ret_arg, nullptr));
    EXPECT_EQ(EINVAL, fern_cluster_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_cluster_create(nullptr, 1));
    EXPECT_EQ(EINVAL, fern_key_create(nullptr, nullptr));
    EXPECT_EQ(EINVAL, fern_stats(nullptr));
    errno = 0;
    EXPECT_EQ(-1, fern_dump(nullptr));
    EXPECT_EQ(EINVAL, errno);
    ASSERT_EQ(0, run_green([] {
        EXPECT_EQ(EINVAL, fern_join(nullptr, nullptr));
        EXPECT_EQ(EINVAL, fern_detach(nullptr));
        EXPECT_EQ(EINVAL, fern_migrate(nullptr));
        EXPECT_EQ(EINVAL, fern_set_name(nullptr));
    }));
}

TEST_F(Misuse, JoinDetachedIsEinval) {
    Parked p;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, Parked::body, &p));
    ASSERT_EQ(0, fern_detach(t));
    EXPECT_EQ(EINVAL, fern_join(t, nullptr));  // t is alive: parked
    EXPECT_EQ(EINVAL, fern_detach(t)) << "detach twice";
    // Detached via attr, handle kept.
    Parked q;
    fern_attr a{};
    a.detached = true;
    fern_thread *u = nullptr;
    ASSERT_EQ(0, fern_spawn(&u, &a, Parked::body, &q));
    ASSERT_TRUE(wait_until([&] { return q.started.load(); }));
    ASSERT_EQ(0, run_green([&] { EXPECT_EQ(EINVAL, fern_join(u, nullptr)); }));
    EXPECT_EQ(EINVAL, fern_detach(u));
    p.let_go();
    q.let_go();
    // Let the detached threads finish with p and q before they go out of scope.
    ASSERT_TRUE(wait_until([&] { return p.finished.load() && q.finished.load(); }));
}

TEST_F(Misuse, JoinTwiceIsEinval) {
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, ret_arg, (void *)1));
    void *r = nullptr;
    ASSERT_EQ(0, fern_join(t, &r));
    EXPECT_EQ((void *)1, r);
    EXPECT_EQ(EINVAL, fern_join(t, &r));
    EXPECT_EQ(EINVAL, fern_detach(t)) << "detach after join";
    // From a green thread.
    ASSERT_EQ(0, run_green([] {
        fern_thread *t2 = nullptr;
        ASSERT_EQ(0, fern_spawn(&t2, nullptr, ret_arg, (void *)2));
        EXPECT_EQ(0, fern_join(t2, nullptr));
        EXPECT_EQ(EINVAL, fern_join(t2, nullptr));
    }));
}

TEST_F(Misuse, SecondConcurrentJoinerIsEinval) {
    Parked p;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, Parked::body, &p));
    std::atomic<int> first_rc{-1};
    std::atomic<void *> first_ret{nullptr};
    fern_thread *j = nullptr;
    ASSERT_EQ(0, spawn(&j, nullptr, [&] {
        void *r = nullptr;
        first_rc = fern_join(t, &r);
        first_ret = r;
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // j is joining
    EXPECT_EQ(-1, first_rc.load());
    EXPECT_EQ(EINVAL, fern_join(t, nullptr));
    EXPECT_EQ(EINVAL, fern_detach(t)) << "detach while being joined";
    p.let_go();
    ASSERT_EQ(0, fern_join(j, nullptr));
    EXPECT_EQ(0, first_rc.load());
    EXPECT_EQ((void *)5, first_ret.load());
}

TEST_F(Misuse, JoinSelfIsEdeadlk) {
    ASSERT_EQ(0, run_green([] { EXPECT_EQ(EDEADLK, fern_join(fern_self(), nullptr)); }));
}

TEST_F(Misuse, DetachTwiceIsEinval) {
    Parked p;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, Parked::body, &p));
    EXPECT_EQ(0, fern_detach(t));
    EXPECT_EQ(EINVAL, fern_detach(t));
    p.let_go();
    ASSERT_TRUE(wait_until([&] { return p.finished.load(); }));
}

TEST_F(Misuse, JoinableSpawnNeedsHandle) {
    fern_attr a{};
    EXPECT_EQ(EINVAL, fern_spawn(nullptr, &a, ret_arg, nullptr));
    EXPECT_EQ(EINVAL, fern_spawn(nullptr, nullptr, ret_arg, nullptr));
}

TEST_F(Misuse, YieldOutsideGreenIsNoop) {
    fern_yield();
    std::thread([] { fern_yield(); }).join();
    SUCCEED();
}

TEST_F(Misuse, PlainThreadOnlyCalls) {
    fern_cluster *c = fern_cluster_default();
    ASSERT_NE(nullptr, c);
    EXPECT_EQ(EPERM, fern_migrate(c));
    EXPECT_EQ(EPERM, fern_exit(nullptr));
    EXPECT_EQ(EPERM, fern_set_name("x"));
    EXPECT_EQ(nullptr, fern_current_cluster());
}

TEST_F(Misuse, ShutdownFromGreenIsEperm) {
    ASSERT_EQ(0, run_green([] { EXPECT_EQ(EPERM, fern_shutdown()); }));
    EXPECT_TRUE(runtime_running());
}

TEST_F(Misuse, InitTwiceIsEbusy) {
    if (!runtime_running()) {
        ASSERT_EQ(0, fern_init(nullptr));
    }
    EXPECT_EQ(EBUSY, fern_init(nullptr));
    fern_config cfg{2, 0, 0};
    EXPECT_EQ(EBUSY, fern_init(&cfg));
    ASSERT_EQ(0, run_green([] { EXPECT_EQ(EBUSY, fern_init(nullptr)); }));
}

TEST_F(Misuse, BeforeInit) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    ASSERT_FALSE(runtime_running());
    EXPECT_EQ(nullptr, fern_cluster_default());
    EXPECT_EQ(EINVAL, fern_shutdown());
    struct fern_stats s;
    EXPECT_EQ(EINVAL, fern_stats(&s));
    errno = 0;
    EXPECT_EQ(-1, fern_dump(stdout));
    EXPECT_EQ(EINVAL, errno);
    fern_yield();
    EXPECT_EQ(nullptr, fern_self());
    EXPECT_FALSE(fern_is_green());
}

TEST_F(Misuse, BadConfig) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    fern_config cfg{FERN_WORKERS_MAX + 1, 0, 0};
    EXPECT_EQ(EINVAL, fern_init(&cfg));
    EXPECT_FALSE(runtime_running());
    cfg = {1, FERN_STACK_MIN / 2, 0};
    EXPECT_EQ(EINVAL, fern_init(&cfg));
    cfg = {1, FERN_STACK_MAX * 2, 0};
    EXPECT_EQ(EINVAL, fern_init(&cfg));
    EXPECT_FALSE(runtime_running());
}

TEST_F(Misuse, ClusterMisuse) {
    fern_cluster *c = nullptr;
    EXPECT_EQ(EINVAL, fern_cluster_create(&c, 0));
    EXPECT_EQ(EINVAL, fern_cluster_create(&c, FERN_WORKERS_MAX + 1));
    EXPECT_EQ(EINVAL, fern_cluster_destroy(fern_cluster_default()));
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    ASSERT_EQ(0, run_green([&] {
        ASSERT_EQ(0, fern_migrate(c));
        EXPECT_EQ(EBUSY, fern_cluster_destroy(c)) << "destroying the caller's own cluster";
        EXPECT_EQ(EINVAL, fern_cluster_destroy(fern_cluster_default()));
        ASSERT_EQ(0, fern_migrate(fern_cluster_default()));
    }));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST_F(Misuse, BadStackSizes) {
    fern_attr a{};
    fern_thread *t = nullptr;
    a.stack_size = FERN_STACK_MIN - 4096;
    EXPECT_EQ(EINVAL, fern_spawn(&t, &a, ret_arg, nullptr));
    a.stack_size = 1;
    EXPECT_EQ(EINVAL, fern_spawn(&t, &a, ret_arg, nullptr));
    a.stack_size = FERN_STACK_MAX + 4096;
    EXPECT_EQ(EINVAL, fern_spawn(&t, &a, ret_arg, nullptr));
    a.stack_size = SIZE_MAX;
    EXPECT_EQ(EINVAL, fern_spawn(&t, &a, ret_arg, nullptr));
}

TEST_F(Misuse, NegativeDeadlines) {
    EXPECT_EQ(EINVAL, fern_sleep_until(-1));
    EXPECT_EQ(0, fern_sleep_ns(-1));
    EXPECT_EQ(0, fern_sleep_ns(0));
    ASSERT_EQ(0, run_green([] {
        EXPECT_EQ(EINVAL, fern_sleep_until(-1));
        EXPECT_EQ(EINVAL, fern_sleep_until(INT64_MIN));
        EXPECT_EQ(0, fern_sleep_ns(INT64_MIN));
    }));
}

TEST_F(Misuse, MutexAndCondMisuse) {
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond c = FERN_COND_INIT;
    EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
    EXPECT_EQ(EPERM, fern_cond_wait(&c, &m));
    ASSERT_EQ(0, fern_mutex_lock(&m));
    EXPECT_EQ(EDEADLK, fern_mutex_lock(&m));
    EXPECT_EQ(EBUSY, fern_mutex_destroy(&m));
    EXPECT_EQ(0, fern_mutex_unlock(&m));
    EXPECT_EQ(EPERM, fern_mutex_unlock(&m));
}

TEST_F(Misuse, KeyMisuse) {
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, nullptr));
    EXPECT_EQ(0, fern_key_delete(k));
    EXPECT_EQ(EINVAL, fern_key_delete(k));
    EXPECT_EQ(EINVAL, fern_setspecific(k, (void *)1));
    EXPECT_EQ(nullptr, fern_getspecific(k));
    EXPECT_EQ(EINVAL, fern_key_delete(123456789u));
    EXPECT_EQ(nullptr, fern_getspecific(123456789u));
}

} // namespace
