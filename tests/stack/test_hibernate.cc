// SPDX-License-Identifier: MIT
// Stack hibernation (src/sched/hibernate.c, docs/stacks.md "Hibernation"):
// parked threads whose stacks other threads read and write through pointers
// while they sleep (every write kept, every stack intact), threads woken by
// a condition variable, a channel, a timer and a descriptor while
// hibernated, the pages really given back, the per-thread opt-out, the
// blocking pool's threads never hibernated, and real faults still fatal.
#include "fern_test.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace fern_test;

namespace {

// Builds that refuse hibernation (fern_init: EINVAL and one line): on
// aarch64 (no resume frame yet) and under ThreadSanitizer.
#if defined(__x86_64__)
constexpr bool kRefused = kTsan;
#else
constexpr bool kRefused = true;
#endif

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

struct fern_stats stats() {
    struct fern_stats s{};
    EXPECT_EQ(0, fern_stats(&s));
    return s;
}

// Restart the runtime with hibernation after delay_us (1: at the monitor's
// next look, every parked thread). False if this kernel cannot hibernate.
bool start_hibernating(long delay_us = 1) {
    if (runtime_running()) {
        EXPECT_EQ(0, fern_shutdown());
    }
    fern_config cfg{};
    cfg.hibernate_us = delay_us;
    EXPECT_EQ(0, fern_init(&cfg));
    return stats().hibernate;
}

// A build that cannot hibernate refuses it with EINVAL and one line.
TEST(HibernateRefused, BuildThatCannotSaysWhy) {
    if (!kRefused) GTEST_SKIP() << "this build hibernates";
    if (runtime_running()) {
        ASSERT_EQ(0, fern_shutdown());
    }
    fern_config cfg{};
    cfg.hibernate_us = 1000;
    ::testing::internal::CaptureStderr();
    int rc = fern_init(&cfg);
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(EINVAL, rc);
    EXPECT_NE(std::string::npos, err.find("asks for stack hibernation, which")) << err;
    EXPECT_FALSE(runtime_running());
}

class Hibernate : public ::testing::Test {
  protected:
    void SetUp() override {
        if (kRefused) GTEST_SKIP() << "this build refuses hibernation";
        if (!start_hibernating()) GTEST_SKIP() << "no stack hibernation on this kernel";
    }
    void TearDown() override {
        if (runtime_running()) {
            EXPECT_EQ(0, fern_shutdown());
        }
    }
};

bool wait_hibernated(uint64_t n, int timeout_ms = 30000) {
    return wait_until([&] { return stats().hibernated >= n; }, timeout_ms);
}

// Is the page holding p in memory?
bool resident(const void *p) {
    long pg = sysconf(_SC_PAGESIZE);
    unsigned char v = 0;
    void *page = (void *)((uintptr_t)p & ~(uintptr_t)(pg - 1));
    EXPECT_EQ(0, mincore(page, (size_t)pg, &v));
    return v & 1;
}

uint8_t pattern(long i, size_t k) { return (uint8_t)(i * 31 + k * 7 + 1); }

// What a parked thread keeps on its stack for others to touch.
struct Slot {
    uint64_t tag;            // written by its thread, read by others
    uint64_t foreign[4];     // written by others while it sleeps
    volatile uint8_t *big;   // its 8 KiB buffer (half the threads), or NULL
};
constexpr size_t kBig = 8192;
constexpr int kBigWrites = 8; // foreign writes into each big buffer

uint64_t tag_of(long i) { return 0x5eed000000000000ull | (uint64_t)i; }
uint64_t foreign_of(long i, int j) { return ((uint64_t)i << 8) | (uint64_t)(j + 1); }
size_t big_offset(long i, int j) { return (size_t)(i * 97 + j * 1021) % kBig; }

struct World {
    fern_mutex mu = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    bool go = false;
    std::vector<Slot *> slots;
    std::vector<volatile uint8_t *> bigs;
    std::atomic<long> ready{0}, intact{0};
};

// Lets every park_and_check of w return (from a green thread: the broadcast
// wakes hibernated waiters). Returns run_green's result.
int release_all(World *w) {
    return run_green([w] {
        fern_mutex_lock(&w->mu);
        w->go = true;
        fern_cond_broadcast(&w->cv);
        fern_mutex_unlock(&w->mu);
    });
}

// The parked body: a Slot (and, for odd i, 8 KiB more) live on its stack.
__attribute__((noinline)) void park_and_check(World *w, long i, volatile uint8_t *big) {
    Slot s{};
    s.tag = tag_of(i);
    s.big = big;
    if (big)
        for (size_t k = 0; k < kBig; k++) big[k] = pattern(i, k);
    fern_mutex_lock(&w->mu);
    w->slots[i] = &s;
    if ((size_t)i < w->bigs.size()) w->bigs[i] = big;
    w->ready++;
    while (!w->go) fern_cond_wait(&w->cv, &w->mu);
    fern_mutex_unlock(&w->mu);
    bool ok = s.tag == tag_of(i);
    for (int j = 0; j < 4; j++) ok &= s.foreign[j] == foreign_of(i, j);
    if (big) {
        for (size_t k = 0; k < kBig; k++) {
            uint8_t want = pattern(i, k);
            for (int j = 0; j < kBigWrites; j++)
                if (big_offset(i, j) == k) want = (uint8_t)~pattern(i, k);
            ok &= big[k] == want;
        }
    }
    if (ok) w->intact++;
}

__attribute__((noinline)) void body_big(World *w, long i) {
    volatile uint8_t big[kBig];
    park_and_check(w, i, big);
}

// Writes into the stacks of threads [lo, hi) and reads their tags; the
// number of wrong tags.
long touch_range(World *w, long lo, long hi) {
    long wrong = 0;
    for (long i = lo; i < hi; i++) {
        Slot *s = w->slots[i];
        wrong += s->tag != tag_of(i);
        for (int j = 0; j < 4; j++) s->foreign[j] = foreign_of(i, j);
        if (s->big)
            for (int j = 0; j < kBigWrites; j++)
                s->big[big_offset(i, j)] = (uint8_t)~pattern(i, big_offset(i, j));
    }
    return wrong;
}

// n parked threads (half holding 8 KiB of live stack), hibernated, then
// written into and read by plain and green threads while they sleep.
void foreign_touches_kept(long n) {
    World w;
    w.slots.assign((size_t)n, nullptr);
    w.bigs.assign((size_t)n, nullptr);
    std::vector<fern_thread *> ts((size_t)n);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&w, i] {
                      if (i % 2)
                          body_big(&w, i);
                      else
                          park_and_check(&w, i, nullptr);
                  }));
    ASSERT_TRUE(wait_until([&] { return w.ready == n; }));
    ASSERT_TRUE(wait_hibernated((uint64_t)n)) << stats().hibernated << " of " << n;
    // The pages really went back to the kernel, and a page-sized system
    // call cannot see them (EFAULT, not a restore: what docs/stacks.md says).
    EXPECT_FALSE(resident(w.slots[0]));
    EXPECT_FALSE(resident((const void *)w.bigs[1]));
    char *dump = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&dump, &len);
    fern_dump(f);
    fclose(f);
    EXPECT_NE(nullptr, strstr(dump, "(hibernated)"));
    EXPECT_NE(nullptr, strstr(dump, "hibernation: on, after 1 us parked; "));
    free(dump);
    uint64_t touches0 = stats().hibernate_touches;

    // Half by two plain threads, half by two green threads.
    std::atomic<long> wrong{0};
    long q = n / 4;
    std::thread p1([&] { wrong += touch_range(&w, 0, q); });
    std::thread p2([&] { wrong += touch_range(&w, q, 2 * q); });
    fern_thread *g1, *g2;
    ASSERT_EQ(0, spawn(&g1, nullptr, [&] { wrong += touch_range(&w, 2 * q, 3 * q); }));
    ASSERT_EQ(0, spawn(&g2, nullptr, [&] { wrong += touch_range(&w, 3 * q, n); }));
    p1.join();
    p2.join();
    ASSERT_EQ(0, fern_join(g1, nullptr));
    ASSERT_EQ(0, fern_join(g2, nullptr));
    EXPECT_EQ(0, wrong.load());
    EXPECT_GT(stats().hibernate_touches, touches0);

    ASSERT_EQ(0, release_all(&w));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, w.intact.load());
    EXPECT_EQ(0u, stats().hibernated);
}

TEST_F(Hibernate, ForeignReadsAndWritesKeptStacksIntact) {
    foreign_touches_kept(tsan_capped(scaled(10000, 200), 2000));
}

// VmPTE of this process, in KiB.
long vm_pte_kib() {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmPTE:", 6) == 0) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

// Does this kernel free a page-table page that MADV_DONTNEED empties
// (CONFIG_PT_RECLAIM)? Asked on 16 MiB of our own, one page touched in
// every 64 KiB.
bool kernel_frees_empty_page_tables() {
    size_t len = (size_t)16 << 20;
    char *p = (char *)mmap(nullptr, len, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    madvise(p, len, MADV_NOHUGEPAGE);
    for (size_t o = 0; o < len; o += 65536) p[o] = 1;
    long full = vm_pte_kib();
    madvise(p, len, MADV_DONTNEED);
    long empty = vm_pte_kib();
    munmap(p, len);
    return full - empty >= 24; // 8 page-table pages of 4 KiB: most of them
}

// Threads hibernated side by side cost (nearly) no page tables: their
// runs are sealed, guard markers and all removed, and the kernel frees
// the emptied page-table pages. Then they are woken and intact.
TEST_F(Hibernate, SealedRunsGiveTheirPageTablesBack) {
    if (!kernel_frees_empty_page_tables())
        GTEST_SKIP() << "this kernel keeps empty page-table pages";
    // A delay that lets them all park first: then they are hibernated in
    // long runs of adjacent slots, as a million parked threads are.
    ASSERT_TRUE(start_hibernating(200000));
    long n = tsan_capped(scaled(2048, 256), 512);
    World w;
    w.slots.assign((size_t)n, nullptr);
    std::vector<fern_thread *> ts((size_t)n);
    long pte0 = vm_pte_kib();
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&w, i] { park_and_check(&w, i, nullptr); }));
    ASSERT_TRUE(wait_until([&] { return w.ready == n; }));
    ASSERT_TRUE(wait_hibernated((uint64_t)n)) << stats().hibernated << " of " << n;
    // Guard markers keep a page-table page per 2 MiB: 15.5 default stacks,
    // 264 bytes each. Sealed runs leave the pages at their ends only.
    // (Under AddressSanitizer, VmPTE also holds the shadow of every stack
    // and heap block: only the touches and the wake-up below are checked.)
    long grown = vm_pte_kib() - pte0;
    if (!kAsan) {
        EXPECT_LT(grown * 1024 / n, 100) << grown << " KiB of page tables for " << n << " threads";
    }
    // Touches through pointers unseal the runs and restore the stacks,
    // from the middle of a run first.
    EXPECT_EQ(0, touch_range(&w, n / 2, n));
    EXPECT_EQ(0, touch_range(&w, 0, n / 2));
    ASSERT_EQ(0, release_all(&w));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, w.intact.load());
    EXPECT_EQ(0u, stats().hibernated);
}

// With a delay of 64 ms or more, a thread is hibernated once the monitor
// has found it parked for the delay (its stamp), not before.
TEST_F(Hibernate, DelayKeptWithStamps) {
    ASSERT_TRUE(start_hibernating(200000));
    World w;
    w.slots.assign(64, nullptr);
    std::vector<fern_thread *> ts(64);
    for (long i = 0; i < 64; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&w, i] { park_and_check(&w, i, nullptr); }));
    ASSERT_TRUE(wait_until([&] { return w.ready == 64; }));
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(wait_hibernated(64)) << stats().hibernated << " of 64";
    auto waited = std::chrono::steady_clock::now() - t0;
    // Parked before t0, so up to the delay less than that here: at least
    // the part of it the first look came after; never all at once.
    EXPECT_GT(waited, std::chrono::milliseconds(100));
    EXPECT_EQ(0, touch_range(&w, 0, 64)); // park_and_check wants the foreign words
    ASSERT_EQ(0, release_all(&w));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(64, w.intact.load());
}

// Protection keys this process can still allocate (each is freed again).
int free_pkeys() {
    std::vector<int> keys;
    for (int k; (k = pkey_alloc(0, 0)) >= 0;) keys.push_back(k);
    for (int k : keys) pkey_free(k);
    return (int)keys.size();
}

// One thread parked and hibernated; a forked child touches its stack and
// must see (and write) its own copy; the parent's stays intact.
void forked_child_restores_its_copy() {
    World w;
    w.slots.assign(1, nullptr);
    fern_thread *a;
    ASSERT_EQ(0, spawn(&a, nullptr, [&] { park_and_check(&w, 0, nullptr); }));
    ASSERT_TRUE(wait_until([&] { return w.ready == 1; }));
    ASSERT_TRUE(wait_hibernated(1));
    pid_t pid = fork();
    if (pid == 0) {
        // Only this kernel thread lives here; raw system calls only.
        Slot *s = w.slots[0];
        bool ok = s->tag == tag_of(0);
        s->foreign[0] = 99; // the child's copy only
        _exit(ok && s->foreign[0] == 99 ? 0 : 3);
    }
    ASSERT_GT(pid, 0);
    int st = 0;
    ASSERT_EQ(pid, waitpid(pid, &st, 0));
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
    EXPECT_GE(stats().hibernated + stats().hibernate_restores, 1u);
    touch_range(&w, 0, 1); // the parent's stack: its own bytes, its own writes
    ASSERT_EQ(0, release_all(&w));
    ASSERT_EQ(0, fern_join(a, nullptr));
    EXPECT_EQ(1, w.intact.load());
}

// With a protection key to spare, hibernation holds one (restores copy the
// bytes back with only the restorer's PKRU let through); with none left,
// it falls back to writing through /proc/self/mem, and every touch is
// still kept, in this process and in a forked child.
TEST_F(Hibernate, WithoutProtectionKeyFallsBackToProcMem) {
    ASSERT_EQ(0, fern_shutdown());
    int before = free_pkeys();
    ASSERT_TRUE(start_hibernating());
    if (before > 0) {
        EXPECT_EQ(before - 1, free_pkeys()) << "hibernation holds a protection key";
    }
    ASSERT_EQ(0, fern_shutdown());
    std::vector<int> keys;
    for (int k; (k = pkey_alloc(0, 0)) >= 0;) keys.push_back(k);
    ASSERT_TRUE(start_hibernating());
    foreign_touches_kept(tsan_capped(scaled(2000, 100), 500));
    // A forked child restores through its own /proc/self/mem.
    forked_child_restores_its_copy();
    ASSERT_EQ(0, fern_shutdown());
    for (int k : keys) pkey_free(k);
}

// A local pattern that must survive the park.
struct Mark {
    uint64_t v[16];
    explicit Mark(long i) {
        for (int k = 0; k < 16; k++) v[k] = tag_of(i) * 2654435761u + (uint64_t)k;
    }
    bool ok(long i) const {
        Mark m(i);
        return memcmp(v, m.v, sizeof v) == 0;
    }
};

TEST_F(Hibernate, WokenByChannel) {
    const long n = tsan_capped(scaled(2000, 50), 500);
    fern_chan *ch;
    ASSERT_EQ(0, fern_chan_create(&ch, sizeof(long), 0));
    std::atomic<long> good{0}, sum{0};
    std::vector<fern_thread *> ts((size_t)n);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&, i] {
                      volatile Mark m(i);
                      long v = -1; // received into this stack, by the sender
                      if (fern_chan_recv(ch, &v) == 0 && const_cast<Mark &>(m).ok(i)) good++;
                      sum += v;
                  }));
    ASSERT_TRUE(wait_hibernated((uint64_t)n));
    ASSERT_EQ(0, run_green([&] {
        for (long i = 0; i < n; i++) fern_chan_send(ch, &i);
    }));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, good.load());
    EXPECT_EQ(n * (n - 1) / 2, sum.load());
    fern_chan_destroy(ch);
}

TEST_F(Hibernate, WokenByTimer) {
    const long n = tsan_capped(scaled(2000, 50), 500);
    std::atomic<long> good{0};
    std::vector<fern_thread *> ts((size_t)n);
    uint64_t restores0 = stats().hibernate_restores;
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&, i] {
                      volatile Mark m(i);
                      fern_sleep_ns(ms(3000));
                      if (const_cast<Mark &>(m).ok(i)) good++;
                  }));
    // Hibernated while they sleep (the monitor looks every tick; 3 s is
    // generous), then each timer wakes a hibernated thread.
    ASSERT_TRUE(wait_hibernated((uint64_t)n, 2500));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, good.load());
    EXPECT_GE(stats().hibernate_restores - restores0, (uint64_t)n);
}

TEST_F(Hibernate, WokenByDescriptor) {
    const long n = tsan_capped(scaled(500, 20), 200);
    std::vector<int> rd((size_t)n), wr((size_t)n);
    for (long i = 0; i < n; i++) {
        int p[2];
        ASSERT_EQ(0, pipe2(p, O_CLOEXEC));
        rd[(size_t)i] = p[0];
        wr[(size_t)i] = p[1];
    }
    std::atomic<long> good{0};
    std::vector<fern_thread *> ts((size_t)n);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&, i] {
                      volatile Mark m(i);
                      char buf[512]; // the read's buffer, on the parked stack
                      ssize_t r = fern_read(rd[(size_t)i], buf, sizeof buf);
                      std::string want = "hello " + std::to_string(i);
                      if (r == (ssize_t)want.size() && memcmp(buf, want.data(), want.size()) == 0 &&
                          const_cast<Mark &>(m).ok(i))
                          good++;
                  }));
    ASSERT_TRUE(wait_hibernated((uint64_t)n));
    uint64_t touches0 = stats().hibernate_touches;
    for (long i = 0; i < n; i++) {
        std::string s = "hello " + std::to_string(i);
        ASSERT_EQ((ssize_t)s.size(), write(wr[(size_t)i], s.data(), s.size()));
    }
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, good.load());
    // The poller's wake-up reads nothing on a parked stack (the fd entry
    // holds the thread's parker, io/io.c): each stack is restored by its
    // own thread's resume, never through the fault handler. (Under
    // AddressSanitizer the stacks are touched before they resume, as in
    // TracedBatchesAndRestores.)
    if (!kAsan) {
        EXPECT_EQ(touches0, stats().hibernate_touches);
    }
    for (long i = 0; i < n; i++) {
        close(rd[(size_t)i]);
        close(wr[(size_t)i]);
    }
}

// Threads parked on a condition variable, hibernated, then woken by a
// broadcast from a green thread that holds the mutex (they become its
// heirs: sync/cond.c). Under hibernation a green thread's waiter record is
// on the heap, so neither the broadcast's walk nor the mutex's hand-off to
// each heir reads a parked stack: each stack is restored by its own resume
// (or with a hibernated neighbour's), never through the fault handler.
TEST_F(Hibernate, WokenByBroadcastWithoutTouch) {
    const long n = tsan_capped(scaled(2000, 50), 500);
    fern_mutex mu = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    bool go = false;
    std::atomic<long> good{0};
    std::vector<fern_thread *> ts((size_t)n);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&, i] {
                      volatile Mark m(i);
                      fern_mutex_lock(&mu);
                      while (!go) fern_cond_wait(&cv, &mu);
                      fern_mutex_unlock(&mu);
                      if (const_cast<Mark &>(m).ok(i)) good++;
                  }));
    // All n hibernated at once: all parked in the wait (a thread that
    // holds the mutex runs).
    ASSERT_TRUE(wait_hibernated((uint64_t)n));
    uint64_t touches0 = stats().hibernate_touches, restores0 = stats().hibernate_restores;
    ASSERT_EQ(0, run_green([&] {
        fern_mutex_lock(&mu);
        go = true;
        fern_cond_broadcast(&cv);
        fern_mutex_unlock(&mu);
    }));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, good.load());
    EXPECT_GE(stats().hibernate_restores - restores0, (uint64_t)n);
    // (Under AddressSanitizer the stacks are touched before they resume,
    // as in TracedBatchesAndRestores.)
    if (!kAsan) {
        EXPECT_EQ(touches0, stats().hibernate_touches);
    }
}

// A broadcast's heirs wait for the mutex its caller holds, then for each
// other (a million take seconds to drain). Meanwhile the monitor leaves
// them alone (HN_HEIR, sync/cond.c): hibernated there, each would be
// restored again at its hand-off a moment later. Here the broadcaster
// holds the mutex for three hibernation delays: no heir is hibernated.
TEST_F(Hibernate, BroadcastHeirsNotHibernatedWhileQueued) {
    const long delay_us = 100000;
    if (!start_hibernating(delay_us)) GTEST_SKIP() << "no stack hibernation on this kernel";
    const long n = tsan_capped(scaled(500, 50), 200);
    fern_mutex mu = FERN_MUTEX_INIT;
    fern_cond cv = FERN_COND_INIT;
    bool go = false;
    long waiting = 0;
    std::atomic<long> good{0};
    std::vector<fern_thread *> ts((size_t)n);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&, i] {
                      volatile Mark m(i);
                      fern_mutex_lock(&mu);
                      waiting++;
                      while (!go) fern_cond_wait(&cv, &mu);
                      fern_mutex_unlock(&mu);
                      if (const_cast<Mark &>(m).ok(i)) good++;
                  }));
    uint64_t during = 0;
    // The broadcaster sleeps too, holding the mutex: it opts out itself.
    fern_attr keep{};
    keep.no_hibernate = true;
    fern_thread *b;
    ASSERT_EQ(0, spawn(&b, &keep, [&] {
        fern_mutex_lock(&mu);
        // Each counted itself under mu, then released it in its wait: all
        // n wait on cv once the count is n and we hold mu.
        while (waiting < n) {
            fern_mutex_unlock(&mu);
            fern_sleep_ns(ms(1));
            fern_mutex_lock(&mu);
        }
        go = true;
        fern_cond_broadcast(&cv);
        // A batch the monitor had under way at the broadcast ends first.
        fern_sleep_ns(ms(50));
        uint64_t h0 = stats().hibernations;
        fern_sleep_ns(3 * delay_us * 1000);
        during = stats().hibernations - h0;
        fern_mutex_unlock(&mu);
    }));
    ASSERT_EQ(0, fern_join(b, nullptr));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, good.load());
    EXPECT_EQ(0u, during) << "heirs hibernated while queued on the mutex";
}

TEST_F(Hibernate, OptOutNeverHibernated) {
    World w;
    w.slots.assign(2, nullptr);
    fern_attr keep{};
    keep.no_hibernate = true;
    fern_thread *a, *b;
    ASSERT_EQ(0, spawn(&a, &keep, [&] { park_and_check(&w, 0, nullptr); }));
    ASSERT_EQ(0, spawn(&b, nullptr, [&] { park_and_check(&w, 1, nullptr); }));
    ASSERT_TRUE(wait_until([&] { return w.ready == 2; }));
    ASSERT_TRUE(wait_hibernated(1));
    // Many more scans (one per monitor tick at this delay): still only b.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(1u, stats().hibernated);
    EXPECT_TRUE(resident(w.slots[0]));
    EXPECT_FALSE(resident(w.slots[1]));
    touch_range(&w, 0, 2);
    ASSERT_EQ(0, release_all(&w));
    ASSERT_EQ(0, fern_join(a, nullptr));
    ASSERT_EQ(0, fern_join(b, nullptr));
    EXPECT_EQ(2, w.intact.load());
}

// A forked child that touches a hibernated stack restores it in its own
// memory: the /proc/self/mem descriptor it inherits names its parent's, and
// writing the bytes back through it failed there (the child aborted).
TEST_F(Hibernate, ForkedChildRestoresItsOwnCopy) {
    forked_child_restores_its_copy();
}

// fern_blocking's helper thread reads into a buffer on the caller's stack:
// the kernel writes there while the caller is parked, so the caller must
// not be hibernated (the read would fail with EFAULT).
TEST_F(Hibernate, BlockingPoolCallerNeverHibernated) {
    int p[2];
    ASSERT_EQ(0, pipe2(p, O_CLOEXEC));
    struct Job {
        int fd;
        char buf[256];
        ssize_t got;
        int err;
    };
    std::atomic<bool> started{false};
    ssize_t got = -2;
    int err = 0;
    fern_thread *t;
    ASSERT_EQ(0, spawn(&t, nullptr, [&] {
        Job j{};
        j.fd = p[0];
        started = true;
        fern_blocking(
            [](void *a) -> void * {
                auto *jj = static_cast<Job *>(a);
                jj->got = read(jj->fd, jj->buf, sizeof jj->buf);
                jj->err = errno;
                return nullptr;
            },
            &j);
        got = j.got;
        err = j.err;
    }));
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    // Give the monitor many looks at the parked caller.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(0u, stats().hibernated);
    ASSERT_EQ(5, write(p[1], "hello", 5));
    ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(5, got) << strerror(err);
    close(p[0]);
    close(p[1]);
}

// A hibernated thread whose stack a plain thread touches at the moment
// the monitor hibernates it, over and over: each touch waits for the batch
// and restores; nothing is lost.
TEST_F(Hibernate, TouchesDuringHibernationKept) {
    const long n = tsan_capped(scaled(200, 20), 100);
    World w;
    w.slots.assign((size_t)n, nullptr);
    std::vector<fern_thread *> ts((size_t)n);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&w, i] { park_and_check(&w, i, nullptr); }));
    ASSERT_TRUE(wait_until([&] { return w.ready == n; }));
    uint64_t h0 = stats().hibernations;
    long rounds = 0;
    // Keep touching until the monitor has hibernated them again many times.
    while (stats().hibernations < h0 + (uint64_t)n * 5 && rounds < 200000) {
        for (long i = 0; i < n; i++) {
            Slot *s = w.slots[(size_t)i];
            ASSERT_EQ(tag_of(i), s->tag);
            for (int j = 0; j < 4; j++) s->foreign[j] = foreign_of(i, j);
        }
        rounds++;
    }
    EXPECT_GE(stats().hibernations, h0 + (uint64_t)n * 5);
    ASSERT_EQ(0, release_all(&w));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, w.intact.load());
}

// The tracer (docs/debugging.md) shows hibernation: the monitor's batches
// on the outside track, and the restores of threads that resume (sleepers:
// their timers live in their descriptors, so no touch restores them first).
TEST_F(Hibernate, TracedBatchesAndRestores) {
    char path[] = "/tmp/fern-hib-trace-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    ASSERT_EQ(0, fern_trace_start(path));
    const long n = 64;
    struct fern_stats s0 = stats();
    std::atomic<long> good{0};
    std::vector<fern_thread *> ts((size_t)n);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&, i] {
                      volatile Mark m(i);
                      fern_sleep_ns(ms(2000));
                      if (const_cast<Mark &>(m).ok(i)) good++;
                  }));
    ASSERT_TRUE(wait_hibernated((uint64_t)n, 1800));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, good.load());
    struct fern_stats s1 = stats();
    uint64_t resumed = (s1.hibernate_restores - s0.hibernate_restores) -
                       (s1.hibernate_touches - s0.hibernate_touches);
    // Under AddressSanitizer the sleepers' stacks are touched (its fake
    // stacks and shadow checks) before they resume, so every restore can be
    // a touch's, which is not recorded.
    if (!kAsan) {
        EXPECT_GT(resumed, 0u);
    }
    ASSERT_EQ(0, fern_trace_stop());
    FILE *f = fopen(path, "r");
    ASSERT_NE(nullptr, f);
    std::string text;
    char buf[65536];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, k);
    fclose(f);
    unlink(path);
    EXPECT_NE(std::string::npos, text.find("\"name\":\"hibernated stacks\"")) << text.size();
    if (resumed > 0) {
        EXPECT_NE(std::string::npos, text.find("\"name\":\"restored hibernated stacks\""));
    }
}

// A restore that a touch forces runs in the fault handler (a plain
// thread's touch) or in fern-hook's retry: the tracer records it too
// ("by":"touch", through its async-signal-safe table), one event per
// batch, as many threads in all as fern_stats counts touched.
TEST_F(Hibernate, TracedTouchRestores) {
    char path[] = "/tmp/fern-hib-touch-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    const long n = 64;
    World w;
    w.slots.assign((size_t)n, nullptr);
    std::vector<fern_thread *> ts((size_t)n);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(0, spawn(&ts[(size_t)i], nullptr, [&w, i] { park_and_check(&w, i, nullptr); }));
    ASSERT_TRUE(wait_until([&] { return w.ready == n; }));
    ASSERT_TRUE(wait_hibernated((uint64_t)n)) << stats().hibernated << " of " << n;
    ASSERT_EQ(0, fern_trace_start(path));
    uint64_t t0 = stats().hibernate_touches;
    std::atomic<long> wrong{0};
    std::thread p1([&] { wrong += touch_range(&w, 0, n); });
    p1.join();
    uint64_t touched = stats().hibernate_touches - t0;
    ASSERT_EQ(0, fern_trace_stop());
    EXPECT_EQ(0, wrong.load());
    EXPECT_GT(touched, 0u);
    ASSERT_EQ(0, release_all(&w));
    for (auto *t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
    EXPECT_EQ(n, w.intact.load());
    FILE *f = fopen(path, "r");
    ASSERT_NE(nullptr, f);
    std::string text;
    char buf[65536];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, k);
    fclose(f);
    unlink(path);
    // "restored hibernated stacks","args":{"threads":N,"first":ID,"by":"touch"}
    uint64_t recorded = 0, events = 0;
    const std::string key = "\"name\":\"restored hibernated stacks\",\"args\":{\"threads\":";
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
        size_t eol = text.find('\n', at);
        std::string line = text.substr(at, eol - at);
        if (line.find(",\"by\":\"touch\"}") == std::string::npos) continue;
        recorded += strtoull(line.c_str() + key.size(), nullptr, 10);
        events++;
    }
    EXPECT_GT(events, 0u) << text.size();
    EXPECT_EQ(touched, recorded) << events << " touch events";
}

// With hibernation on, a real fault is still reported and fatal: the
// handler restores only stacks it hibernated.
TEST(HibernateDeathTest, RealFaultsStillFatal) {
    if (kRefused) GTEST_SKIP() << "this build refuses hibernation";
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    setenv("FERN_HIBERNATE", "1", 1); // read by the child's runtime
    setenv("FERN_HIBERNATE_US", "0", 1);
    EXPECT_DEATH(
        {
            run_green([] {
                fern_sleep_ns(ms(20)); // hibernated meanwhile
                volatile int *bad = nullptr;
                *bad = 1;
            });
        },
        "");
    EXPECT_EXIT(
        {
            run_green([] {
                fern_sleep_ns(ms(20));
                std::function<int(int)> f = [&](int d) -> int {
                    volatile char pad[512];
                    pad[0] = (char)d;
                    return f(d + 1) + pad[0];
                };
                f(0);
            });
        },
        ::testing::KilledBySignal(SIGABRT), "overflowed its stack");
    unsetenv("FERN_HIBERNATE");
    unsetenv("FERN_HIBERNATE_US");
}

} // namespace
