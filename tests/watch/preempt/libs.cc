// SPDX-License-Identifier: MIT
// Preemption beside libraries that keep per-kernel-thread state
// (docs/preemption.md "What is interrupted"). A tick that preempted a green
// thread inside such a library let another green thread of the same worker
// enter the same thread cache or lock: with jemalloc or tcmalloc preloaded,
// 8 green threads doing malloc/free corrupted the heap or crashed; OpenSSL's
// RAND_bytes failed ("unable to lock parent") or returned one draw twice.
// Only the executable's own code is preempted now, so these run as with
// preemption off, while the CPU-bound stretches in this executable's code
// are still preempted (checked by the preemption counter, so that the test
// cannot pass with preemption silently off).
//
// tests/CMakeLists.txt runs MallocChurn with LD_PRELOAD of each allocator
// (FERN_TEST_ALLOCATOR names the library that must then be loaded) and both
// suites on 1 and 2 workers (FERN_WORKERS).
#include "fern_test.h"

#include <link.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

using namespace fern_test;

namespace {

// Arithmetic in this executable's code, where ticks preempt.
__attribute__((noinline)) uint64_t spin(uint64_t x, int rounds) {
    for (int i = 0; i < rounds; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    __asm__ volatile("" : "+r"(x));
    return x;
}

bool loaded(const char *part) {
    struct Q {
        const char *part;
        bool found;
    } q{part, false};
    dl_iterate_phdr(
        [](struct dl_phdr_info *info, size_t, void *arg) {
            auto *q = static_cast<Q *>(arg);
            if (info->dlpi_name && std::strstr(info->dlpi_name, q->part)) q->found = true;
            return 0;
        },
        &q);
    return q.found;
}

struct fern_stats stats() {
    struct fern_stats s{};
    EXPECT_EQ(0, fern_stats(&s));
    return s;
}

// Spares (compensation workers) that the monitor started for an earlier
// round or test, while a worker stayed where ticks cannot preempt (libasan,
// libcrypto, the allocator) or slept in the kernel, run until they have had
// nothing to do for 50 ms (sched/idle.c). An idle one meanwhile steals the
// threads spawned next: with a worker for each thread, none ever waits and
// no preemption is due. Under ASan, RandBytes after MallocChurn on 2 workers
// ran its 4 threads on 4 workers (2 spares left) in 2 of 6 processes, all
// 3 rounds each, every tick finding nothing waiting. Waits (at most 5 s)
// until only the cluster's own workers run.
void wait_for_spares_to_end() {
    if (!runtime_running()) return;
    unsigned base = fern_cluster_workers(fern_cluster_default());
    int64_t end = fern_now_ns() + ms(5000);
    while (stats().workers > base && fern_now_ns() < end) {
        if (fern_is_green())
            fern_sleep_ns(ms(10));
        else
            usleep(10000);
    }
}

// Runs n green threads of body(i) for about run_ms each, then checks that
// preemption interrupted the executable's code meanwhile. Each round starts
// on the cluster's own workers (wait_for_spares_to_end). It can still see
// no preemption if spares started during it give every thread a worker of
// its own (under ASan most ticks land in libasan or libcrypto, where
// compensation, not preemption, serves the threads waiting): such a round
// proves nothing and is run again, up to three rounds; preemption that is
// off fails all three.
template <class F> void run_threads(int n, int run_ms, F body) {
    ASSERT_TRUE(fern_is_green() || !fern_self());
    uint64_t got = 0;
    for (int round = 1; round <= 3 && !got; round++) {
        wait_for_spares_to_end();
        struct fern_stats s0{};
        if (runtime_running()) s0 = stats();
        std::vector<fern_thread *> ts;
        for (int i = 0; i < n; i++) {
            fern_thread *t;
            ASSERT_EQ(0, spawn(&t, nullptr, [&, i] {
                          int64_t end = fern_now_ns() + ms(run_ms);
                          body(i, end);
                      }));
            ts.push_back(t);
        }
        for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
        if (kTsan) // ThreadSanitizer: preemption at fern's own operations only
            return;
        struct fern_stats s1 = stats();
        got = s1.preemptions - s0.preemptions;
        if (!got)
            std::printf("round %d: no preemption (%u workers at its start, %u at its end, %llu "
                        "spares started, %llu deferred requests), again\n",
                        round, s0.workers, s1.workers,
                        (unsigned long long)(s1.spares_started - s0.spares_started),
                        (unsigned long long)(s1.preemptions_deferred - s0.preemptions_deferred));
    }
    EXPECT_GT(got, 0u) << "preemption did not run in 3 rounds: the test proves nothing";
}

} // namespace

// 8 green threads allocate and free blocks of varied sizes (the allocator's
// small and large classes), fill each with a pattern of its own and check
// it before freeing, between stretches of arithmetic here.
TEST(PreemptLibs, MallocChurn) {
    const char *want = std::getenv("FERN_TEST_ALLOCATOR");
    if (want) {
        ASSERT_TRUE(loaded(want)) << want << " is not loaded: LD_PRELOAD did not take effect";
    }
    Watchdog wd(120);
    std::atomic<long> bad{0}, ops{0};
    run_threads(8, (int)scaled(3000, 300), [&](int id, int64_t end) {
        uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
        std::vector<std::pair<unsigned char *, size_t>> live(64, {nullptr, 0});
        long n = 0;
        while (fern_now_ns() < end) {
            for (int k = 0; k < 64; k++) {
                x = spin(x, 16);
                size_t slot = x % live.size();
                auto &[p, len] = live[slot];
                if (p) {
                    unsigned char tag = (unsigned char)((uintptr_t)p >> 4 ^ id);
                    for (size_t j = 0; j < len; j += 61) bad += p[j] != tag;
                    free(p);
                    p = nullptr;
                }
                len = (x >> 8) % 8 == 0 ? 4096 + (x >> 16) % 60000 : 1 + (x >> 16) % 512;
                p = static_cast<unsigned char *>(malloc(len));
                if (!p) {
                    bad++;
                    continue;
                }
                std::memset(p, (unsigned char)((uintptr_t)p >> 4 ^ id), len);
                n++;
            }
            x = spin(x, 300); // CPU-bound here: this is where ticks land
        }
        for (auto &[p, len] : live) free(p);
        ops += n;
    });
    std::printf("%ld allocations, %ld corrupt\n", ops.load(), bad.load());
    EXPECT_EQ(0, bad.load());
    EXPECT_GT(ops.load(), 1000);
}

// 8 green threads draw 16 random bytes at a time: every call succeeds and
// no draw repeats. 8, more than the workers that may run them (1 or 2 in
// tests/CMakeLists.txt's runs, plus at most 4 spares): with 4, spares that
// compensation started during a round gave each thread a worker of its own
// in 4 of 24 rounds (20 runs) under ASan on 2 workers (most ticks land in
// libasan or libcrypto there), and those rounds saw no preemption; with 8,
// none of 40 runs on 1 and 2 workers had such a round.
TEST(PreemptLibs, RandBytesNeverFailsNorRepeats) {
    Watchdog wd(120);
    std::vector<std::vector<std::string>> draws(8);
    std::atomic<long> failures{0};
    std::atomic<unsigned long> last_err{0};
    run_threads(8, (int)scaled(3000, 300), [&](int id, int64_t end) {
        uint64_t x = (uint64_t)id + 1;
        while (fern_now_ns() < end) {
            unsigned char b[16];
            if (RAND_bytes(b, sizeof b) != 1) {
                failures++;
                last_err = ERR_get_error();
            } else {
                draws[id].emplace_back(reinterpret_cast<char *>(b), sizeof b);
            }
            x = spin(x, 300);
        }
    });
    std::set<std::string> all;
    size_t n = 0;
    for (auto &d : draws) {
        n += d.size();
        all.insert(d.begin(), d.end());
    }
    char msg[256] = "";
    if (last_err) ERR_error_string_n(last_err, msg, sizeof msg);
    std::printf("%zu draws, %zu distinct, %ld failures %s\n", n, all.size(), failures.load(), msg);
    EXPECT_EQ(0, failures.load()) << msg;
    EXPECT_EQ(n, all.size()) << "a draw of 16 random bytes repeated";
    EXPECT_GT(n, 1000u);
}
