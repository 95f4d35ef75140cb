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

uint64_t preemptions() {
    struct fern_stats s;
    EXPECT_EQ(0, fern_stats(&s));
    return s.preemptions;
}

// Runs n green threads of body(i) for about run_ms each, then checks that
// preemption interrupted the executable's code meanwhile. A round can see
// no preemption (about 1 in 4 of RandBytes' on 2 workers, and under ASan);
// the likely way, not yet proven: when the library's lock puts a worker to
// sleep in the kernel, the monitor moves its threads to a spare, and a
// thread so rescued is not preempted until it leaves the CPU by itself
// (sched/spare.c), so four threads that never do may run their whole
// stretch unpreempted. Such a round proves nothing and is run again, up to
// three rounds; preemption that is off fails all three.
template <class F> void run_threads(int n, int run_ms, F body) {
    ASSERT_TRUE(fern_is_green() || !fern_self());
    uint64_t got = 0;
    for (int round = 1; round <= 3 && !got; round++) {
        uint64_t p0 = runtime_running() ? preemptions() : 0;
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
        got = preemptions() - p0;
        if (!got) std::printf("round %d: no preemption (threads rescued to spares?), again\n", round);
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

// 4 green threads (one worker in tests/CMakeLists.txt's runs) draw 16 random
// bytes at a time: every call succeeds and no draw repeats.
TEST(PreemptLibs, RandBytesNeverFailsNorRepeats) {
    Watchdog wd(120);
    std::vector<std::vector<std::string>> draws(4);
    std::atomic<long> failures{0};
    std::atomic<unsigned long> last_err{0};
    run_threads(4, (int)scaled(3000, 300), [&](int id, int64_t end) {
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
