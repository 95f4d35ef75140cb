// SPDX-License-Identifier: MIT
// Green-thread-local keys: create/delete/get/set, destructors at exit,
// isolation between green threads on one worker, plain threads, EAGAIN.
#include "fern_test.h"

#include <pthread.h>

#include <vector>

using namespace fern_test;

namespace {

std::atomic<int> g_dtor_calls{0};
std::atomic<intptr_t> g_dtor_sum{0};

void counting_dtor(void *v) {
    g_dtor_calls++;
    g_dtor_sum += (intptr_t)v;
}

TEST(Key, CreateSetGetDelete) {
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, nullptr));
    EXPECT_EQ(nullptr, fern_getspecific(k));
    EXPECT_EQ(0, fern_setspecific(k, (void *)0x1234));
    EXPECT_EQ((void *)0x1234, fern_getspecific(k));
    ASSERT_EQ(0, run_green([&] {
        EXPECT_EQ(nullptr, fern_getspecific(k)) << "green thread sees the plain thread's value";
        EXPECT_EQ(0, fern_setspecific(k, (void *)0x99));
        EXPECT_EQ((void *)0x99, fern_getspecific(k));
        EXPECT_EQ(0, fern_setspecific(k, nullptr));
        EXPECT_EQ(nullptr, fern_getspecific(k));
    }));
    EXPECT_EQ((void *)0x1234, fern_getspecific(k)) << "plain thread's value changed";
    EXPECT_EQ(0, fern_setspecific(k, nullptr));
    EXPECT_EQ(0, fern_key_delete(k));
    EXPECT_EQ(EINVAL, fern_key_delete(k));
    EXPECT_EQ(EINVAL, fern_setspecific(k, (void *)1));
    EXPECT_EQ(nullptr, fern_getspecific(k));
}

TEST(Key, NullAndUnknown) {
    EXPECT_EQ(EINVAL, fern_key_create(nullptr, nullptr));
    EXPECT_EQ(EINVAL, fern_key_delete(FERN_KEYS_MAX + 7));
    EXPECT_EQ(EINVAL, fern_setspecific(FERN_KEYS_MAX + 7, (void *)1));
    EXPECT_EQ(nullptr, fern_getspecific(FERN_KEYS_MAX + 7));
    EXPECT_EQ(nullptr, fern_getspecific(~0u));
}

TEST(Key, DestructorsRunAtGreenExit) {
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, counting_dtor));
    g_dtor_calls = 0;
    g_dtor_sum = 0;
    constexpr int N = 50;
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn(&ts[i], nullptr, [&, i] {
            // Threads with odd i leave NULL: no destructor call for them.
            if (i % 2 == 0) {
                EXPECT_EQ(0, fern_setspecific(k, (void *)(intptr_t)(i + 1)));
            }
            fern_yield();
        }));
    intptr_t want = 0;
    for (int i = 0; i < N; i += 2) want += i + 1;
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(N / 2, g_dtor_calls.load());
    EXPECT_EQ(want, g_dtor_sum.load());
    EXPECT_EQ(0, fern_key_delete(k));
}

// The destructor has run by the time join returns (the thread has ended).
TEST(Key, DestructorRunsBeforeJoinReturns) {
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, counting_dtor));
    g_dtor_calls = 0;
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] { fern_setspecific(k, (void *)1); }));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(1, g_dtor_calls.load());
    EXPECT_EQ(0, fern_key_delete(k));
}

TEST(Key, DestructorsRunForDetachedAndFernExit) {
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, counting_dtor));
    g_dtor_calls = 0;
    g_dtor_sum = 0;
    struct F {
        static void *exiting(void *arg) {
            fern_key key = (fern_key)(uintptr_t)arg;
            fern_setspecific(key, (void *)10);
            fern_exit(nullptr);
            return nullptr;
        }
    };
    for (int i = 0; i < 5; i++) ASSERT_EQ(0, fern_go(F::exiting, (void *)(uintptr_t)k));
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, F::exiting, (void *)(uintptr_t)k));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_TRUE(wait_until([] { return g_dtor_calls.load() == 6; }));
    EXPECT_EQ(60, g_dtor_sum.load());
    EXPECT_EQ(0, fern_key_delete(k));
}

// A destructor that sets a value again is called again, up to 4 rounds.
fern_key g_rearm_key;
std::atomic<int> g_rearm_calls{0};
void rearm_dtor(void *v) {
    g_rearm_calls++;
    fern_setspecific(g_rearm_key, (void *)((intptr_t)v + 1));  // never gives up
}

TEST(Key, DestructorRoundsBounded) {
    ASSERT_EQ(0, fern_key_create(&g_rearm_key, rearm_dtor));
    g_rearm_calls = 0;
    ASSERT_EQ(0, run_green([] { fern_setspecific(g_rearm_key, (void *)1); }));
    EXPECT_EQ(4, g_rearm_calls.load()) << "up to 4 rounds, as pthreads";
    EXPECT_EQ(0, fern_key_delete(g_rearm_key));
}

// A destructor that sets another key's value gets that value destroyed too.
fern_key g_k1, g_k2;
std::atomic<int> g_k2_calls{0};
void k2_dtor(void *) { g_k2_calls++; }
void k1_dtor(void *) { fern_setspecific(g_k2, (void *)2); }

TEST(Key, DestructorSettingOtherKeyGetsAnotherRound) {
    ASSERT_EQ(0, fern_key_create(&g_k2, k2_dtor));
    ASSERT_EQ(0, fern_key_create(&g_k1, k1_dtor));
    g_k2_calls = 0;
    ASSERT_EQ(0, run_green([] { fern_setspecific(g_k1, (void *)1); }));
    EXPECT_EQ(1, g_k2_calls.load());
    EXPECT_EQ(0, fern_key_delete(g_k1));
    EXPECT_EQ(0, fern_key_delete(g_k2));
}

TEST(Key, IsolationOnOneWorker) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_key k1, k2;
    ASSERT_EQ(0, fern_key_create(&k1, nullptr));
    ASSERT_EQ(0, fern_key_create(&k2, nullptr));
    constexpr int N = 20;
    std::atomic<int> bad{0};
    std::vector<fern_thread *> ts(N);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(0, spawn_on(&ts[i], c, [&, i] {
            if (fern_getspecific(k1) != nullptr) bad++;
            fern_setspecific(k1, (void *)(intptr_t)(i + 1));
            fern_setspecific(k2, (void *)(intptr_t)(-(i + 1)));
            for (int r = 0; r < 50; r++) {
                fern_yield();
                if (fern_getspecific(k1) != (void *)(intptr_t)(i + 1)) bad++;
                if (fern_getspecific(k2) != (void *)(intptr_t)(-(i + 1))) bad++;
                if (r % 10 == 0) {
                    fern_sleep_ns(10000);
                    if (fern_getspecific(k1) != (void *)(intptr_t)(i + 1)) bad++;
                }
            }
        }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, bad.load());
    EXPECT_EQ(0, fern_key_delete(k1));
    EXPECT_EQ(0, fern_key_delete(k2));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Key, ValueSurvivesMigration) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, nullptr));
    ASSERT_EQ(0, run_green([&] {
        fern_setspecific(k, (void *)77);
        for (int i = 0; i < 20; i++) {
            ASSERT_EQ(0, fern_migrate((i & 1) ? fern_cluster_default() : c));
            EXPECT_EQ((void *)77, fern_getspecific(k));
        }
        fern_migrate(fern_cluster_default());
    }));
    EXPECT_EQ(0, fern_key_delete(k));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Key, PlainThreadsHaveTheirOwnValuesAndDestructors) {
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, counting_dtor));
    g_dtor_calls = 0;
    g_dtor_sum = 0;
    std::vector<std::thread> ps;
    std::atomic<int> bad{0};
    for (int i = 0; i < 4; i++)
        ps.emplace_back([&, i] {
            if (fern_getspecific(k) != nullptr) bad++;
            if (fern_setspecific(k, (void *)(intptr_t)(100 + i)) != 0) bad++;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            if (fern_getspecific(k) != (void *)(intptr_t)(100 + i)) bad++;
        });
    for (auto &p : ps) p.join();
    EXPECT_EQ(0, bad.load());
    EXPECT_EQ(4, g_dtor_calls.load()) << "destructors run at pthread exit";
    EXPECT_EQ(100 + 101 + 102 + 103, g_dtor_sum.load());
    EXPECT_EQ(0, fern_key_delete(k));
}

// A key deleted and re-created (maybe in the same slot) must not expose a
// value set under the old key.
TEST(Key, RecreatedKeyStartsNull) {
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, nullptr));
    std::atomic<int> stage{0};
    std::atomic<fern_key> k2{0};
    std::atomic<void *> seen{(void *)1};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        fern_setspecific(k, (void *)0xdead);
        stage = 1;
        while (stage.load() != 2) fern_sleep_ns(ms(1));
        seen = fern_getspecific(k2.load());
    }));
    ASSERT_TRUE(wait_until([&] { return stage.load() == 1; }));
    EXPECT_EQ(0, fern_key_delete(k));
    fern_key nk;
    ASSERT_EQ(0, fern_key_create(&nk, nullptr));
    k2 = nk;
    stage = 2;
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(nullptr, seen.load()) << "new key (" << nk << ", old " << k << ") shows the old key's value";
    // Same for the plain thread.
    fern_key pk;
    ASSERT_EQ(0, fern_key_create(&pk, nullptr));
    fern_setspecific(pk, (void *)0xbeef);
    EXPECT_EQ(0, fern_key_delete(pk));
    fern_key pk2;
    ASSERT_EQ(0, fern_key_create(&pk2, nullptr));
    EXPECT_EQ(nullptr, fern_getspecific(pk2));
    EXPECT_EQ(0, fern_key_delete(pk2));
    EXPECT_EQ(0, fern_key_delete(nk));
}

TEST(Key, DeletedKeyDestructorDoesNotRun) {
    fern_key k;
    ASSERT_EQ(0, fern_key_create(&k, counting_dtor));
    g_dtor_calls = 0;
    std::atomic<int> stage{0};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        fern_setspecific(k, (void *)1);
        stage = 1;
        while (stage.load() != 2) fern_sleep_ns(ms(1));
    }));
    ASSERT_TRUE(wait_until([&] { return stage.load() == 1; }));
    EXPECT_EQ(0, fern_key_delete(k));
    stage = 2;
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(0, g_dtor_calls.load());
}

TEST(Key, EagainAfterKeysMax) {
    std::vector<fern_key> keys;
    fern_key k;
    int rc;
    while ((rc = fern_key_create(&k, nullptr)) == 0) {
        keys.push_back(k);
        if (keys.size() > FERN_KEYS_MAX + 10) break;
    }
    EXPECT_EQ(EAGAIN, rc);
    EXPECT_EQ((size_t)FERN_KEYS_MAX, keys.size()) << "every earlier test deleted its keys";
    // Keys are distinct and usable.
    for (size_t i = 0; i < keys.size(); i++) EXPECT_EQ(0, fern_setspecific(keys[i], (void *)(i + 1)));
    for (size_t i = 0; i < keys.size(); i++) EXPECT_EQ((void *)(i + 1), fern_getspecific(keys[i]));
    ASSERT_EQ(0, run_green([&] {
        for (size_t i = 0; i < keys.size(); i++) EXPECT_EQ(0, fern_setspecific(keys[i], (void *)(i + 7)));
        fern_yield();
        for (size_t i = 0; i < keys.size(); i++) EXPECT_EQ((void *)(i + 7), fern_getspecific(keys[i]));
    }));
    for (auto key : keys) fern_setspecific(key, nullptr);
    // Freeing one makes room for exactly one.
    ASSERT_FALSE(keys.empty());
    EXPECT_EQ(0, fern_key_delete(keys.back()));
    keys.pop_back();
    EXPECT_EQ(0, fern_key_create(&k, nullptr));
    keys.push_back(k);
    EXPECT_EQ(EAGAIN, fern_key_create(&k, nullptr));
    for (auto key : keys) EXPECT_EQ(0, fern_key_delete(key));
    EXPECT_EQ(0, fern_key_create(&k, nullptr));
    EXPECT_EQ(0, fern_key_delete(k));
}

} // namespace
