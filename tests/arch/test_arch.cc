// SPDX-License-Identifier: MIT
// The context switch: FP control state per thread, unwinders stop at the
// thread entry, deep frames and alignment. Runs on x86_64 and aarch64; the
// few architecture-specific probes are the fp_ctl helpers below.
#include "fern_test.h"

#include <cfenv>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <execinfo.h>
#include <string>
#include <unwind.h>

using namespace fern_test;

namespace {

// The floating-point control state a switch keeps per thread, beyond the
// rounding mode <cfenv> shows: x87 control word and MXCSR on x86_64, FPCR
// (flush-to-zero, default-NaN, ...) on aarch64.
#if defined(__x86_64__)
struct FpCtl {
    unsigned short cw;
    unsigned mxcsr;
    bool operator==(const FpCtl &o) const { return cw == o.cw && mxcsr == o.mxcsr; }
};
const FpCtl kFpDefault = {0x037F, 0x1F80};
FpCtl fp_ctl() {
    FpCtl f;
    __asm__ volatile("fnstcw %0" : "=m"(f.cw));
    __asm__ volatile("stmxcsr %0" : "=m"(f.mxcsr));
    return f;
}
// Change state the rounding mode does not cover: the x87 precision or
// rounding field (variant picks which), and on variant 1 MXCSR's
// flush-to-zero and denormals-are-zero.
void fp_ctl_mark(int variant) {
    FpCtl f = fp_ctl();
    f.cw = (unsigned short)((f.cw & ~0x0300u) | (variant ? 0x0200u : 0x0000u));
    __asm__ volatile("fldcw %0" ::"m"(f.cw));
    if (variant) {
        f.mxcsr |= 0x8040;
        __asm__ volatile("ldmxcsr %0" ::"m"(f.mxcsr));
    }
}
#elif defined(__aarch64__)
struct FpCtl {
    unsigned long fpcr;
    bool operator==(const FpCtl &o) const { return fpcr == o.fpcr; }
};
const FpCtl kFpDefault = {0};
FpCtl fp_ctl() {
    FpCtl f;
    __asm__ volatile("mrs %0, fpcr" : "=r"(f.fpcr));
    return f;
}
// FPCR bits <cfenv> does not touch: default-NaN (25), and on variant 1
// flush-to-zero (24) too.
void fp_ctl_mark(int variant) {
    unsigned long v = fp_ctl().fpcr | (1ul << 25) | (variant ? 1ul << 24 : 0);
    __asm__ volatile("msr fpcr, %0" ::"r"(v));
}
#else
#error "test_arch.cc knows x86_64 and aarch64"
#endif

// Each thread keeps its own rounding mode and the rest of its FP control
// state across switches on one worker.
TEST(Arch, FloatingPointControlIsPerThread) {
    fern_cluster *c;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    std::atomic<int> ok{0};
    auto body = [&](int mode) {
        return [&, mode] {
            std::fesetround(mode);
            fp_ctl_mark(mode == FE_UPWARD);
            FpCtl mine = fp_ctl();
            for (int i = 0; i < 1000; i++) {
                fern_yield();
                if (std::fegetround() != mode || !(fp_ctl() == mine))
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
    FpCtl fresh_ctl{};
    ASSERT_EQ(0, run_green([&] {
        fresh = std::fegetround();
        fresh_ctl = fp_ctl();
        return nullptr;
    }));
    EXPECT_EQ(FE_TONEAREST, fresh);
    EXPECT_TRUE(fresh_ctl == kFpDefault);
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
    FpCtl b_ctl{};
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
    p->b_ctl = fp_ctl();
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
    std::fesetround(FE_UPWARD);
    fp_ctl_mark(1);
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
    EXPECT_TRUE(p.b_ctl == kFpDefault);
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

// The stack handed to a new thread is 16-byte aligned as both ABIs require
// (aligned vector spills fault otherwise on x86_64; sp-relative accesses
// fault with a misaligned sp on aarch64).
typedef float v4sf __attribute__((vector_size(16)));
TEST(Arch, StackAlignedForVectors) {
    std::atomic<int> ok{0};
    for (int i = 0; i < 20; i++)
        ASSERT_EQ(0, run_green([&] {
            alignas(16) volatile float v[4] = {1, 2, 3, 4};
            v4sf x = {v[0], v[1], v[2], v[3]};
            x = x + x;
            alignas(16) float out[4];
            std::memcpy(out, &x, sizeof out);
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

// The blocking entry points that return with a jump (arch/x86_64/switch.S): each
// of several threads, running different code and blocking in different
// calls, gets back to its own call site with its results, its error codes
// and the values it keeps in callee-saved registers.
__attribute__((noinline)) unsigned long mix(unsigned long a, unsigned long k) { return (a ^ k) * 0x9E3779B97F4A7C15ul; }

TEST(Arch, JumpReturnsLandAtEachCallersSite) {
    constexpr long kRounds = 2000;
    fern_cluster *c;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    fern_chan *ch;
    ASSERT_EQ(0, fern_chan_create(&ch, sizeof(long), 0));
    fern_mutex m;
    fern_cond cv;
    ASSERT_EQ(0, fern_mutex_init(&m));
    ASSERT_EQ(0, fern_cond_init(&cv));
    long turn = 0; // condvar pair: even = waiter A's turn, odd = B's
    unsigned long h_send = 0, h_recv = 0, h_yield = 0, h_cv = 0;
    int bad = 0;
    fern_thread *t[5];
    ASSERT_EQ(0, spawn_on(&t[0], c, [&] {
        unsigned long a = 1, b = 2;
        for (long i = 0; i < kRounds; i++) {
            a = mix(a, (unsigned long)i);
            if (fern_chan_send(ch, &i) != 0)
                bad++;
            b += a;
        }
        h_send = a ^ b;
        return nullptr;
    }));
    ASSERT_EQ(0, spawn_on(&t[1], c, [&] {
        unsigned long a = 1, b = 2;
        for (long i = 0; i < kRounds; i++) {
            long v = -1;
            a = mix(a, (unsigned long)i);
            if (fern_chan_recv(ch, &v) != 0 || v != i)
                bad++;
            b += a;
        }
        h_recv = a ^ b;
        return nullptr;
    }));
    ASSERT_EQ(0, spawn_on(&t[2], c, [&] {
        unsigned long a = 1, b = 2, d = 3;
        for (long i = 0; i < kRounds; i++) {
            a = mix(a, (unsigned long)i);
            fern_yield();
            b += a;
            fern_yield();
            d ^= b;
        }
        h_yield = a ^ b ^ d;
        return nullptr;
    }));
    for (int side = 0; side < 2; side++)
        ASSERT_EQ(0, spawn_on(&t[3 + side], c, [&, side] {
            unsigned long a = 1;
            for (long i = 0; i < kRounds; i++) {
                fern_mutex_lock(&m);
                while ((turn & 1) != side)
                    if (fern_cond_wait(&cv, &m) != 0)
                        bad++;
                a = mix(a, (unsigned long)turn);
                turn++;
                fern_cond_broadcast(&cv);
                fern_mutex_unlock(&m);
            }
            __atomic_fetch_xor(&h_cv, a, __ATOMIC_RELAXED);
            return nullptr;
        }));
    for (auto *x : t)
        ASSERT_EQ(0, fern_join(x, nullptr));
    // The same computations without any switch.
    unsigned long a = 1, b = 2, d = 3, cva = 1, cvb = 1;
    for (long i = 0; i < kRounds; i++) {
        a = mix(a, (unsigned long)i);
        b += a;
        d ^= b;
    }
    for (long i = 0; i < 2 * kRounds; i++)
        (i & 1 ? cvb : cva) = mix(i & 1 ? cvb : cva, (unsigned long)i);
    EXPECT_EQ(0, bad);
    EXPECT_EQ(a ^ b, h_send);
    EXPECT_EQ(a ^ b, h_recv);
    EXPECT_EQ(a ^ b ^ d, h_yield);
    EXPECT_EQ(cva ^ cvb, h_cv);
    // Error results come back through the same jumps.
    ASSERT_EQ(0, run_green([&] {
        if (fern_join(fern_self(), nullptr) != EDEADLK || fern_join(nullptr, nullptr) != EINVAL ||
            fern_chan_send(nullptr, &a) != EINVAL || fern_chan_recv(nullptr, &a) != EINVAL ||
            fern_cond_wait(nullptr, &m) != EINVAL)
            bad++;
        return nullptr;
    }));
    EXPECT_EQ(0, bad);
    EXPECT_EQ(0, fern_chan_destroy(ch));
    EXPECT_EQ(0, fern_cond_destroy(&cv));
    EXPECT_EQ(0, fern_mutex_destroy(&m));
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

// Unwinders, debuggers and profilers find call frame information for each
// jump-return entry point, starting at its first instruction.
struct EhBases {
    void *tbase, *dbase, *func;
};
extern "C" const void *_Unwind_Find_FDE(void *pc, EhBases *bases);

TEST(Arch, JumpReturnEntryPointsHaveUnwindInfo) {
    void *fns[] = {(void *)&fern_yield, (void *)&fern_join, (void *)&fern_chan_send, (void *)&fern_chan_recv,
                   (void *)&fern_cond_wait};
    for (void *fn : fns) {
        Dl_info info;
        ASSERT_TRUE(dladdr(fn, &info) && info.dli_saddr);
        EhBases b{};
        EXPECT_NE(nullptr, _Unwind_Find_FDE(static_cast<char *>(info.dli_saddr) + 1, &b)) << info.dli_sname;
        EXPECT_EQ(info.dli_saddr, b.func) << info.dli_sname;
    }
}

// The same with floating-point values live across the yields: on aarch64
// the compiler keeps them in d8-d15, which the switch must preserve (on
// x86_64 every vector register is caller-saved, so they are spilled).
__attribute__((noinline)) double churn_fp(double seed) {
    double a = seed, b = seed * 0.5, c = seed * 0.25, d = seed + 1, e = seed + 2, f = seed + 3, g = 1.5,
           h = 2.5;
    for (int i = 0; i < 2000; i++) {
        a = a * 0.999 + b;
        b = b * 0.998 + c;
        c = c * 0.997 + d;
        d = d * 0.996 + e;
        e = e * 0.995 + f;
        f = f * 0.994 + g;
        g = g * 0.993 + h;
        h = h * 0.992 + a * 1e-3;
        if (i % 5 == 0)
            fern_yield();
    }
    return a + b + c + d + e + f + g + h;
}

TEST(Arch, CalleeSavedFpRegistersSurvive) {
    double expect[8];
    for (int i = 0; i < 8; i++) {
        double seed = i + 0.125, a = seed, b = seed * 0.5, c = seed * 0.25, d = seed + 1, e = seed + 2,
               f = seed + 3, g = 1.5, h = 2.5;
        for (int k = 0; k < 2000; k++) {
            a = a * 0.999 + b;
            b = b * 0.998 + c;
            c = c * 0.997 + d;
            d = d * 0.996 + e;
            e = e * 0.995 + f;
            f = f * 0.994 + g;
            g = g * 0.993 + h;
            h = h * 0.992 + a * 1e-3;
        }
        expect[i] = a + b + c + d + e + f + g + h;
    }
    fern_cluster *c;
    ASSERT_EQ(0, fern_cluster_create(&c, 1));
    double got[8];
    fern_thread *t[8];
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(0, spawn_on(&t[i], c, [&, i] {
            got[i] = churn_fp(i + 0.125);
            return nullptr;
        }));
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(0, fern_join(t[i], nullptr));
    for (int i = 0; i < 8; i++)
        EXPECT_DOUBLE_EQ(expect[i], got[i]) << i; // within 4 ulp: the compiler may fuse differently
    EXPECT_EQ(0, fern_cluster_destroy(c));
}

} // namespace
