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
