// SPDX-License-Identifier: MIT
// Groups: wait returns once every member (subgroups' included) has ended;
// cancel reaches every member, later ones and subgroups; a deadline; the
// FAILFAST option; a cancelled waiter; misuse.
#include "fern_test.h"

#include <vector>

using namespace fern_test;

namespace {

// fern_group_spawn with a callable returning an error value.
template <class F> int gspawn(fern_group *g, F f, fern_thread **t = nullptr) {
    auto *b = new std::function<int()>(std::move(f));
    int rc = fern_group_spawn(
        g, t, nullptr,
        [](void *a) -> void * {
            std::unique_ptr<std::function<int()>> fn(static_cast<std::function<int()> *>(a));
            return (void *)(intptr_t)(*fn)();
        },
        b);
    if (rc) delete b;
    return rc;
}

TEST(Group, WaitReturnsWhenAllEnded) {
    fern_group *g;
    ASSERT_EQ(0, fern_group_create(&g, nullptr, 0));
    EXPECT_EQ(0, fern_group_wait(g)) << "an empty group";
    std::atomic<int> done{0};
    for (int i = 0; i < 50; i++)
        ASSERT_EQ(0, gspawn(g, [&, i] {
            fern_sleep_ns(ms(i % 5));
            done++;
            return 0;
        }));
    EXPECT_EQ(0, fern_group_wait(g));
    EXPECT_EQ(50, done.load());
    EXPECT_EQ(0, fern_group_destroy(g));
}

TEST(Group, CancelReachesMembersSubgroupsAndLaterMembers) {
    fern_group *g, *sub, *subsub;
    ASSERT_EQ(0, fern_group_create(&g, nullptr, 0));
    ASSERT_EQ(0, fern_group_create(&sub, g, 0));
    ASSERT_EQ(0, fern_group_create(&subsub, sub, 0));
    std::atomic<int> cancelled{0};
    auto sleeper = [&] {
        if (fern_sleep_ns(ms(30000)) == ECANCELED) cancelled++;
        return 0;
    };
    for (int i = 0; i < 10; i++) {
        ASSERT_EQ(0, gspawn(g, sleeper));
        ASSERT_EQ(0, gspawn(sub, sleeper));
        ASSERT_EQ(0, gspawn(subsub, sleeper));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int64_t t0 = fern_now_ns();
    ASSERT_EQ(0, fern_group_cancel(g));
    EXPECT_EQ(0, fern_group_wait(g)) << "waits for the subgroups' members too";
    int64_t took = fern_now_ns() - t0;
    EXPECT_EQ(30, cancelled.load());
    EXPECT_LT(took, ms(500) * kLatenessScale);
    std::printf("  30 members in 3 nested groups cancelled and waited for in %.3f ms\n", took / 1e6);
    // Sticky: a member spawned now starts cancelled, into the subgroup too.
    ASSERT_EQ(0, gspawn(subsub, sleeper));
    EXPECT_EQ(0, fern_group_wait(g));
    EXPECT_EQ(31, cancelled.load());
    fern_group *late;
    ASSERT_EQ(0, fern_group_create(&late, g, 0));
    ASSERT_EQ(0, gspawn(late, sleeper));
    EXPECT_EQ(0, fern_group_wait(late));
    EXPECT_EQ(32, cancelled.load()) << "a subgroup of a cancelled group starts cancelled";
    EXPECT_EQ(EBUSY, fern_group_destroy(g)) << "subgroups first";
    EXPECT_EQ(0, fern_group_destroy(late));
    EXPECT_EQ(0, fern_group_destroy(subsub));
    EXPECT_EQ(0, fern_group_destroy(sub));
    EXPECT_EQ(0, fern_group_destroy(g));
}

TEST(Group, DeadlineCancelsAndWaitSaysTimedOut) {
    fern_group *g;
    ASSERT_EQ(0, fern_group_create(&g, nullptr, 0));
    std::atomic<int> cancelled{0};
    int64_t t0 = fern_now_ns();
    ASSERT_EQ(0, fern_group_set_deadline(g, t0 + ms(50)));
    EXPECT_EQ(EBUSY, fern_group_set_deadline(g, t0 + ms(60)));
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(0, gspawn(g, [&] {
            char b;
            int p[2];
            if (pipe(p)) return errno;
            ssize_t r = fern_read(p[0], &b, 1); // a request stuck on its socket
            int e = r < 0 ? get_errno() : 0;
            fern_close(p[0]);
            close(p[1]);
            if (e == ECANCELED) cancelled++;
            return e;
        }));
    EXPECT_EQ(ETIMEDOUT, fern_group_wait(g));
    int64_t took = fern_now_ns() - t0;
    EXPECT_EQ(5, cancelled.load());
    EXPECT_GE(took, ms(50));
    EXPECT_LT(took, ms(50) + ms(300) * kLatenessScale);
    std::printf("  deadline 50 ms: members ended after %.3f ms\n", took / 1e6);
    EXPECT_EQ(0, fern_group_destroy(g));
    // A deadline that does not come: the group empties first.
    ASSERT_EQ(0, fern_group_create(&g, nullptr, 0));
    ASSERT_EQ(0, fern_group_set_deadline(g, fern_now_ns() + ms(60000)));
    ASSERT_EQ(0, gspawn(g, [] { return 0; }));
    EXPECT_EQ(0, fern_group_wait(g));
    int64_t d0 = fern_now_ns();
    EXPECT_EQ(0, fern_group_destroy(g));
    EXPECT_LT(fern_now_ns() - d0, ms(200) * kLatenessScale) << "destroy waited for the deadline";
}

TEST(Group, FailFastCancelsTheOthersAndReturnsTheFirstError) {
    fern_group *g;
    ASSERT_EQ(0, fern_group_create(&g, nullptr, FERN_GROUP_FAILFAST));
    std::atomic<int> cancelled{0};
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(0, gspawn(g, [&] {
            int e = fern_sleep_ns(ms(30000));
            if (e == ECANCELED) cancelled++;
            return e; // ECANCELED: not the first failure
        }));
    ASSERT_EQ(0, gspawn(g, [] {
        fern_sleep_ns(ms(20));
        return EIO;
    }));
    EXPECT_EQ(EIO, fern_group_wait(g));
    EXPECT_EQ(8, cancelled.load());
    EXPECT_EQ(0, fern_group_destroy(g));
    // Without FAILFAST a failure changes nothing.
    ASSERT_EQ(0, fern_group_create(&g, nullptr, 0));
    std::atomic<int> ok{0};
    ASSERT_EQ(0, gspawn(g, [] { return EIO; }));
    ASSERT_EQ(0, gspawn(g, [&] {
        if (fern_sleep_ns(ms(30)) == 0) ok++;
        return 0;
    }));
    EXPECT_EQ(0, fern_group_wait(g));
    EXPECT_EQ(1, ok.load());
    EXPECT_EQ(0, fern_group_destroy(g));
}

TEST(Group, CancelledWaiterStopsItsGroupAndStillWaits) {
    fern_group *g;
    ASSERT_EQ(0, fern_group_create(&g, nullptr, 0));
    std::atomic<int> ended{0};
    int rc = -1, ended_at_return = -1;
    fern_thread *w;
    ASSERT_EQ(0, spawn(&w, nullptr, [&] {
        for (int i = 0; i < 4; i++)
            gspawn(g, [&] {
                fern_sleep_ns(ms(30000));
                int was = fern_cancel_shield(1); // cleanup that waits
                fern_sleep_ns(ms(20));
                fern_cancel_shield(was);
                ended++;
                return 0;
            });
        rc = fern_group_wait(g);
        ended_at_return = ended.load();
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(0, fern_cancel(w));
    ASSERT_EQ(0, fern_join(w, nullptr));
    EXPECT_EQ(ECANCELED, rc);
    EXPECT_EQ(4, ended_at_return) << "the members outlived the wait";
    EXPECT_EQ(0, fern_group_destroy(g));
}

TEST(Group, Misuse) {
    fern_group *g;
    EXPECT_EQ(EINVAL, fern_group_create(nullptr, nullptr, 0));
    EXPECT_EQ(EINVAL, fern_group_create(&g, nullptr, 0x10));
    ASSERT_EQ(0, fern_group_create(&g, nullptr, 0));
    EXPECT_EQ(EINVAL, fern_group_spawn(nullptr, nullptr, nullptr, [](void *) -> void * { return nullptr; }, nullptr));
    EXPECT_EQ(EINVAL, fern_group_spawn(g, nullptr, nullptr, nullptr, nullptr));
    EXPECT_EQ(EINVAL, fern_group_cancel(nullptr));
    EXPECT_EQ(EINVAL, fern_group_wait(nullptr));
    EXPECT_EQ(EINVAL, fern_group_destroy(nullptr));
    EXPECT_EQ(EINVAL, fern_group_set_deadline(nullptr, 0));
    EXPECT_EQ(EINVAL, fern_group_set_deadline(g, -1));
    std::atomic<int> go{0};
    fern_thread *t = nullptr;
    ASSERT_EQ(0, gspawn(g, [&] {
        while (!go.load()) fern_sleep_ns(ms(1));
        return 0;
    }, &t));
    EXPECT_NE(nullptr, t);
    EXPECT_EQ(EINVAL, fern_join(t, nullptr)) << "a member cannot be joined";
    EXPECT_EQ(EBUSY, fern_group_destroy(g));
    go = 1;
    EXPECT_EQ(0, fern_group_wait(g));
    EXPECT_EQ(0, fern_group_destroy(g));
}

// Many groups cancelled while their members end by themselves and new
// subgroups come and go: no member is lost or woken twice, all end.
TEST(Group, StressCancelRacesEnds) {
    const int rounds = std::max(10, (int)(100 * stress_scale()));
    for (int r = 0; r < rounds; r++) {
        fern_group *g;
        ASSERT_EQ(0, fern_group_create(&g, nullptr, FERN_GROUP_FAILFAST));
        std::atomic<int> ran{0};
        std::vector<fern_group *> subs(4);
        for (auto &s : subs) ASSERT_EQ(0, fern_group_create(&s, g, 0));
        for (int i = 0; i < 16; i++)
            ASSERT_EQ(0, gspawn(subs[i % 4], [&, i] {
                ran++;
                fern_sleep_ns(i % 3 ? 1000 * i : ms(30000));
                return 0;
            }));
        std::thread c([&] { fern_group_cancel(g); });
        std::this_thread::sleep_for(std::chrono::microseconds(100 * (r % 5)));
        c.join();
        EXPECT_EQ(0, fern_group_wait(g));
        EXPECT_EQ(16, ran.load());
        for (auto s : subs) ASSERT_EQ(0, fern_group_destroy(s));
        ASSERT_EQ(0, fern_group_destroy(g));
    }
}

} // namespace
