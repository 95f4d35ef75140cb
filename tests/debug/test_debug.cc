// SPDX-License-Identifier: MIT
// Introspection: fern_stats counters and fern_dump output.
#include "fern_test.h"

#include <regex>
#include <sstream>
#include <string>
#include <vector>

using namespace fern_test;

namespace {

void *noop(void *arg) { return arg; }

std::string dump_to_string(int *rc) {
    FILE *f = tmpfile();
    if (!f) return "";
    *rc = fern_dump(f);
    std::string out;
    rewind(f);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    fclose(f);
    return out;
}

// The line of `out` that mentions name (quoted or not); "" if none.
std::string line_with(const std::string &out, const std::string &name) {
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line))
        if (line.find(name) != std::string::npos) return line;
    return "";
}

bool has_number(const std::string &s, uint64_t v) {
    std::string num = std::to_string(v);
    for (size_t p = s.find(num); p != std::string::npos; p = s.find(num, p + 1)) {
        bool left = p == 0 || !std::isdigit((unsigned char)s[p - 1]);
        bool right = p + num.size() >= s.size() || !std::isdigit((unsigned char)s[p + num.size()]);
        if (left && right) return true;
    }
    return false;
}

bool icontains_any(const std::string &s, std::initializer_list<const char *> words) {
    std::string l = s;
    for (auto &ch : l) ch = (char)std::tolower((unsigned char)ch);
    for (const char *w : words)
        if (l.find(w) != std::string::npos) return true;
    return false;
}

TEST(Debug, StatsNullIsEinval) {
    ASSERT_EQ(0, fern_run(noop, nullptr, nullptr));
    EXPECT_EQ(EINVAL, fern_stats(nullptr));
    errno = 0;
    EXPECT_EQ(-1, fern_dump(nullptr));
    EXPECT_EQ(EINVAL, errno);
}

TEST(Debug, StatsCountersPlausible) {
    ASSERT_EQ(0, fern_run(noop, nullptr, nullptr));
    struct fern_stats s0, s1;
    ASSERT_EQ(0, fern_stats(&s0));
    EXPECT_EQ(1u, s0.clusters);
    EXPECT_EQ(fern_cluster_workers(fern_cluster_default()), s0.workers);
    EXPECT_GE(s0.threads_spawned, 1u);
    EXPECT_LE(s0.threads_live, s0.threads_spawned);
    constexpr int N = 300;
    std::vector<fern_thread *> ts(N);
    for (auto &t : ts) ASSERT_EQ(0, spawn(&t, nullptr, [] {
        fern_yield();
        fern_sleep_ns(1000);
    }));
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    wait_until([&] { return fern_stats(&s1) == 0 && s1.stacks_in_use == 0; }, 2000);
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_EQ(s0.threads_spawned + N, s1.threads_spawned);
    EXPECT_EQ(0u, s1.threads_live);
    EXPECT_GE(s1.switches - s0.switches, (uint64_t)N * 2) << "each thread switched in at least twice";
    EXPECT_GE(s1.stacks_mapped, 1u);
    EXPECT_EQ(0u, s1.stacks_in_use);
    EXPECT_LE(s1.stacks_cached, s1.stacks_mapped);
    EXPECT_GT(s1.stack_bytes_reserved, 0u);
    EXPECT_GE(s1.worker_sleeps, s0.worker_sleeps);
}

TEST(Debug, StatsLiveCountsParkedThreads) {
    fern_mutex m = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    bool release = false;
    int parked = 0;
    constexpr int N = 40;
    std::vector<fern_thread *> ts(N);
    struct fern_stats s0, s1;
    ASSERT_EQ(0, fern_run(noop, nullptr, nullptr));
    wait_until([&] { return fern_stats(&s0) == 0 && s0.threads_live == 0; }, 2000);
    ASSERT_EQ(0, fern_stats(&s0));
    for (auto &t : ts) ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        fern_mutex_lock(&m);
        parked++;
        while (!release) fern_cond_wait(&cv, &m);
        fern_mutex_unlock(&m);
    }));
    for (;;) {
        fern_mutex_lock(&m);
        bool all = parked == N;
        fern_mutex_unlock(&m);
        if (all) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_EQ(s0.threads_live + N, s1.threads_live);
    EXPECT_GE(s1.stacks_in_use, (uint64_t)N);
    fern_mutex_lock(&m);
    release = true;
    fern_cond_broadcast(&cv);
    fern_mutex_unlock(&m);
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
}

TEST(Debug, StatsMigrationsAndClusters) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 2));
    struct fern_stats s0, s1;
    ASSERT_EQ(0, fern_stats(&s0));
    EXPECT_EQ(2u, s0.clusters);
    ASSERT_EQ(0, run_green([&] {
        for (int i = 0; i < 10; i++) {
            fern_migrate(c);
            fern_migrate(c);  // already there: not counted
            fern_migrate(fern_cluster_default());
        }
    }));
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_EQ(s0.migrations + 20, s1.migrations);
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Debug, StatsStealsHappen) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 4));
    struct fern_stats s0, s1;
    ASSERT_EQ(0, fern_stats(&s0));
    fern_thread *p = nullptr;
    ASSERT_EQ(0, spawn_on(&p, c, [] {
        std::vector<fern_thread *> kids(64);
        for (auto &k : kids)
            EXPECT_EQ(0, spawn(&k, nullptr, [] {
                int64_t end = fern_now_ns() + ms(2);
                while (fern_now_ns() < end) {
                }
            }));
        for (auto k : kids) EXPECT_EQ(0, fern_join(k, nullptr));
    }));
    ASSERT_EQ(0, fern_join(p, nullptr));
    ASSERT_EQ(0, fern_stats(&s1));
    EXPECT_GT(s1.steals, s0.steals) << "idle workers never stole from the busy one";
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// fern_dump lists every live thread with id, name, state, what it waits on
// and its cluster, and returns how many it printed.
TEST(Debug, DumpListsThreads) {
    fern_cluster *c = nullptr;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_mutex m = FERN_MUTEX_INIT, held = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    bool release = false;
    std::atomic<int> ready{0};
    ASSERT_EQ(0, fern_mutex_lock(&held));

    fern_attr a{};
    fern_thread *t_cond = nullptr, *t_mutex = nullptr, *t_sleep = nullptr;
    a.name = "dump-cond";
    ASSERT_EQ(0, spawn(&t_cond, &a, [&] {
        fern_mutex_lock(&m);
        ready++;
        while (!release) fern_cond_wait(&cv, &m);
        fern_mutex_unlock(&m);
    }));
    a.name = "dump-mutex";
    a.cluster = c;
    ASSERT_EQ(0, spawn(&t_mutex, &a, [&] {
        ready++;
        fern_mutex_lock(&held);
        fern_mutex_unlock(&held);
    }));
    a.name = "dump-sleep";
    a.cluster = nullptr;
    ASSERT_EQ(0, spawn(&t_sleep, &a, [&] {
        ready++;
        fern_sleep_ns(ms(400));
    }));
    ASSERT_TRUE(wait_until([&] { return ready.load() == 3; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // all parked now

    struct fern_stats s;
    ASSERT_EQ(0, fern_stats(&s));
    int rc = -2;
    std::string out = dump_to_string(&rc);
    EXPECT_EQ((int)s.threads_live, rc);
    EXPECT_EQ(3, rc) << out;
    struct {
        fern_thread *t;
        const char *name;
        std::initializer_list<const char *> waits;
    } cases[] = {
        {t_cond, "dump-cond", {"cond"}},
        {t_mutex, "dump-mutex", {"mutex", "lock"}},
        {t_sleep, "dump-sleep", {"sleep", "timer"}},
    };
    for (auto &k : cases) {
        std::string line = line_with(out, k.name);
        ASSERT_FALSE(line.empty()) << k.name << " missing from dump:\n" << out;
        EXPECT_TRUE(has_number(line, fern_thread_id(k.t))) << "no id in: " << line;
        EXPECT_TRUE(icontains_any(line, {"park", "wait", "block", "sleep"})) << "no state in: " << line;
        EXPECT_TRUE(icontains_any(line, k.waits)) << "does not say what it waits on: " << line;
        EXPECT_TRUE(icontains_any(line, {"cluster"})) << "no cluster in: " << line;
    }
    // The threads on different clusters are told apart.
    std::string l1 = line_with(out, "dump-cond"), l2 = line_with(out, "dump-mutex");
    auto cluster_part = [](const std::string &l) {
        size_t p = l.find("cluster");
        return p == std::string::npos ? std::string() : l.substr(p, 26);
    };
    EXPECT_NE(cluster_part(l1), cluster_part(l2)) << l1 << "\n" << l2;
    // Workers of both clusters are listed.
    size_t workers = 0;
    for (size_t p = out.find("worker"); p != std::string::npos; p = out.find("worker", p + 1)) workers++;
    EXPECT_GE(workers, (size_t)s.workers);

    // A running green thread that dumps shows itself as running.
    ASSERT_EQ(0, run_green([] {
        fern_set_name("dump-self");
        int r = -2;
        std::string o = dump_to_string(&r);
        std::string line = line_with(o, "dump-self");
        EXPECT_TRUE(icontains_any(line, {"run"})) << line;
        EXPECT_EQ(4, r);
    }));

    fern_mutex_lock(&m);
    release = true;
    fern_cond_broadcast(&cv);
    fern_mutex_unlock(&m);
    ASSERT_EQ(0, fern_mutex_unlock(&held));
    ASSERT_EQ(0, fern_join(t_cond, nullptr));
    ASSERT_EQ(0, fern_join(t_mutex, nullptr));
    ASSERT_EQ(0, fern_join(t_sleep, nullptr));
    // Finished threads are gone from the dump.
    wait_until([&] { return fern_stats(&s) == 0 && s.threads_live == 0; }, 2000);
    out = dump_to_string(&rc);
    EXPECT_EQ(0, rc) << out;
    EXPECT_EQ(std::string::npos, out.find("dump-cond"));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

TEST(Debug, BeforeInitIsEinval) {
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    struct fern_stats s;
    EXPECT_EQ(EINVAL, fern_stats(&s));
    errno = 0;
    EXPECT_EQ(-1, fern_dump(stderr));
    EXPECT_EQ(EINVAL, errno);
}

} // namespace
