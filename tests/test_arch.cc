// The context switch: FP control state per thread, unwinders stop at the
// thread entry, deep frames and alignment.
#include "fern_test.h"

#include <cfenv>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <execinfo.h>
#include <string>
#include <unwind.h>

#include <xmmintrin.h>

using namespace fern_test;

namespace {

// Each thread keeps its own rounding mode (MXCSR) and x87 control word
// across switches on one worker.
TEST(Arch, FloatingPointControlIsPerThread) {
    fern_cluster *c;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    std::atomic<int> ok{0};
    auto body = [&](int mode) {
        return [&, mode] {
            std::fesetround(mode);
            unsigned short cw;
            __asm__ volatile("fnstcw %0" : "=m"(cw));
            unsigned short mine = (unsigned short)((cw & ~0x0300u) | (mode == FE_UPWARD ? 0x0200u : 0x0300u));
            __asm__ volatile("fldcw %0" ::"m"(mine));
            for (int i = 0; i < 1000; i++) {
                fern_yield();
                unsigned short now;
                __asm__ volatile("fnstcw %0" : "=m"(now));
                if (std::fegetround() != mode || now != mine)
                    return (void *)nullptr;
            }
            ok++;
            return (void *)nullptr;
        };
    };
    fern_thread *a, *b;
    ASSERT_EQ(0, spawn_on(&a, c, body(FE_UPWARD)));
    ASSERT_EQ(0, spawn_on(&b, c, body(FE_TOWARDZERO)));
    ASSERT_EQ(0, fern_join(a, nullptr));
    ASSERT_EQ(0, fern_join(b, nullptr));
    EXPECT_EQ(2, ok.load());
    // A new thread starts with the default modes, whatever its worker ran.
    int fresh = -1;
    ASSERT_EQ(0, run_green([&] {
        fresh = std::fegetround();
        return nullptr;
    }));
    EXPECT_EQ(FE_TONEAREST, fresh);
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// backtrace() and _Unwind_Backtrace walk from a green thread's frame down to
// the thread entry and stop there cleanly, without running off the stack.
struct Walk {
    int frames = 0;
    bool last_in_fern = false; // the bottom frame is fern's (the thread entry)
    _Unwind_Reason_Code end = _URC_NO_REASON;
};

_Unwind_Reason_Code walk_cb(struct _Unwind_Context *ctx, void *arg) {
    auto *w = static_cast<Walk *>(arg);
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (!ip)
        return _URC_NO_REASON; // libgcc's last call, past the bottom frame
    w->frames++;
    Dl_info info;
    w->last_in_fern = dladdr(reinterpret_cast<void *>(ip - 1), &info) && info.dli_fname &&
                      std::strstr(info.dli_fname, "libfern");
    return w->frames > 200 ? _URC_NORMAL_STOP : _URC_NO_REASON;
}

// A thread that exits into a thread that has not run yet hands it its own
// stack (a relay: no trip through the pool). The new thread must still start
// clean: default FP modes, errno 0, no key values, a usable deep stack and a
// bottom frame the unwinder stops at.
struct RelayProbe {
    fern_key key{};
    const char *a_local = nullptr, *b_local = nullptr;
    int b_round = -1, b_errno = -1;
    unsigned short b_cw = 0;
    unsigned b_mxcsr = 0;
    void *b_key = (void *)1;
    fern_thread *b_self = nullptr, *b_handle = nullptr;
    int b_deep = 0;
    _Unwind_Reason_Code b_end = _URC_NO_REASON;
};

__attribute__((noinline)) int relay_deep(int n) {
    volatile char pad[1024];
    pad[0] = (char)n;
    pad[1023] = (char)n;
    return n == 0 ? pad[0] + pad[1023] : relay_deep(n - 1) + 1 + pad[0] * 0;
}

void *relay_b(void *arg) {
    auto *p = static_cast<RelayProbe *>(arg);
    char here;
    p->b_local = &here;
    p->b_round = std::fegetround();
    __asm__ volatile("fnstcw %0" : "=m"(p->b_cw));
    p->b_mxcsr = _mm_getcsr();
    p->b_errno = get_errno();
    p->b_key = fern_getspecific(p->key);
    p->b_self = fern_self();
    p->b_deep = relay_deep(48); // ~48 KiB below the top
    Walk w;
    p->b_end = _Unwind_Backtrace(walk_cb, &w);
    return nullptr;
}

void *relay_a(void *arg) {
    auto *p = static_cast<RelayProbe *>(arg);
    char here;
    p->a_local = &here;
    std::fesetround(FE_UPWARD);                  // MXCSR and x87
    unsigned short cw = 0x0F7F;                  // x87: round toward zero
    __asm__ volatile("fldcw %0" ::"m"(cw));
    _mm_setcsr(_mm_getcsr() | 0x8040);           // MXCSR: flush-to-zero, DAZ
    set_errno(123);
    fern_setspecific(p->key, p);
    fern_attr a{};
    if (fern_spawn(&p->b_handle, &a, relay_b, p) != 0)
        return nullptr;
    return nullptr; // exits now: B is next and has not run
}

TEST(Arch, ExitIntoNewThreadStartsClean) {
    fern_cluster *c;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    RelayProbe p;
    ASSERT_EQ(0, fern_key_create(&p.key, nullptr));
    fern_attr a{};
    a.cluster = c;
    fern_thread *ta;
    ASSERT_EQ(0, fern_spawn(&ta, &a, relay_a, &p));
    ASSERT_EQ(0, fern_join(ta, nullptr));
    ASSERT_NE(nullptr, p.b_handle);
    ASSERT_EQ(0, fern_join(p.b_handle, nullptr));
    // B ran on A's stack (by relay, or the pool gave A's stack back).
    ASSERT_NE(nullptr, p.a_local);
    ASSERT_NE(nullptr, p.b_local);
    EXPECT_LT(std::labs(p.a_local - p.b_local), 64 * 1024);
    EXPECT_EQ(FE_TONEAREST, p.b_round);
    EXPECT_EQ(0x037F, p.b_cw);
    EXPECT_EQ(0x1F80u, p.b_mxcsr);
    EXPECT_EQ(0, p.b_errno);
    EXPECT_EQ(nullptr, p.b_key);
    EXPECT_EQ(p.b_handle, p.b_self);
    EXPECT_EQ(48, p.b_deep);
    EXPECT_EQ(_URC_END_OF_STACK, p.b_end);
    EXPECT_EQ(0, fern_key_delete(p.key));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

__attribute__((noinline)) int deep(int n, Walk *w) {
    if (n == 0) {
        w->end = _Unwind_Backtrace(walk_cb, w);
        return w->frames;
    }
    volatile int pad[8] = {n};
    return deep(n - 1, w) + pad[0]; // not a tail call: keep the frame
}

TEST(Arch, UnwinderStopsAtThreadEntry) {
    Walk w;
    int frames_bt = 0;
    ASSERT_EQ(0, run_green([&] {
        fern_yield(); // resume from a switch, then unwind
        if (deep(10, &w) < 0)
            return (void *)1;
        void *buf[256];
        frames_bt = backtrace(buf, 256);
        return (void *)nullptr;
    }));
    // deep() x 11 + the lambda plumbing + thread_entry: well under the cap,
    // which would be hit if the walk ran past the bottom of the green stack.
    EXPECT_GE(w.frames, 12);
    EXPECT_LT(w.frames, 60);
    // It ended because the CFI says "no caller" (END_OF_STACK), not because of
    // an error or the frame cap, and the bottom frame is fern's entry.
    EXPECT_EQ(_URC_END_OF_STACK, w.end);
    EXPECT_TRUE(w.last_in_fern) << "the bottom frame should be fern's thread entry";
    EXPECT_GE(frames_bt, 3);
    EXPECT_LT(frames_bt, 60);
}

// The stack handed to a new thread is 16-byte aligned as the ABI requires
// (SSE spills of __m128 locals fault otherwise).
TEST(Arch, StackAlignedForSse) {
    std::atomic<int> ok{0};
    for (int i = 0; i < 20; i++)
        ASSERT_EQ(0, run_green([&] {
            alignas(16) volatile float v[4] = {1, 2, 3, 4};
            __m128 x = _mm_load_ps(const_cast<float *>(v));
            x = _mm_add_ps(x, x);
            alignas(16) float out[4];
            _mm_store_ps(out, x);
            uintptr_t sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
            if (out[3] == 8.0f && sp % 16 == 0)
                ok++;
            return nullptr;
        }));
    EXPECT_EQ(20, ok.load());
}

// Callee-saved registers survive switches: a computation that keeps values
// in registers across many yields gets the right answer while other threads
// on the same worker churn their own registers.
__attribute__((noinline)) unsigned long churn(unsigned long seed) {
    unsigned long a = seed, b = seed * 3, c = seed * 7, d = seed * 11, e = seed * 13, f = seed * 17;
    for (int i = 0; i < 2000; i++) {
        a += b ^ i;
        b += c ^ a;
        c += d ^ b;
        d += e ^ c;
        e += f ^ d;
        f += a ^ e;
        if (i % 7 == 0)
            fern_yield();
    }
    return a ^ b ^ c ^ d ^ e ^ f;
}

TEST(Arch, CalleeSavedRegistersSurvive) {
    unsigned long expect[8];
    for (int i = 0; i < 8; i++) {
        unsigned long a = i, b = i * 3, c = i * 7, d = i * 11, e = i * 13, f = i * 17;
        for (int k = 0; k < 2000; k++) {
            a += b ^ k;
            b += c ^ a;
            c += d ^ b;
            d += e ^ c;
            e += f ^ d;
            f += a ^ e;
        }
        expect[i] = a ^ b ^ c ^ d ^ e ^ f;
    }
    fern_cluster *c;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    unsigned long got[8];
    fern_thread *t[8];
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(0, spawn_on(&t[i], c, [&, i] {
            got[i] = churn(i);
            return nullptr;
        }));
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(0, fern_join(t[i], nullptr));
    for (int i = 0; i < 8; i++)
        EXPECT_EQ(expect[i], got[i]) << i;
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

} // namespace
