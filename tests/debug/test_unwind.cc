// SPDX-License-Identifier: MIT
// Invariant 6 (docs/design.md): unwinders stop at the thread entry. From inside a
// green thread, libgcc's unwinder (the one C++ exceptions use), libunwind
// and glibc's backtrace() walk up to fern_ctx_entry and end there cleanly:
// no error, no frame past the green stack's bottom.
//
// libunwind is opened with dlopen(RTLD_LOCAL), not linked: a linked
// libunwind.so would also supply _Unwind_Backtrace and the C++ exception
// entry points, and the libgcc tests would test libunwind instead.
#include "fern_test.h"

#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <execinfo.h>
#include <libunwind.h>
#include <unwind.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace
{

// The frames of a walk, innermost first.
struct Walk {
    std::vector<std::string> names; // libunwind only
    std::vector<uintptr_t> ips;
    int end = -1; // how the walk ended (each walker's own code)
};

// The few libunwind calls used, from the library opened locally.
struct Libunwind {
    int (*getcontext)(unw_context_t *);
    int (*init_local)(unw_cursor_t *, unw_context_t *);
    int (*step)(unw_cursor_t *);
    int (*get_reg)(unw_cursor_t *, int, unw_word_t *);
    int (*get_proc_name)(unw_cursor_t *, char *, size_t, unw_word_t *);
    int (*get_proc_info)(unw_cursor_t *, unw_proc_info_t *);
    bool ok = false;
    Libunwind()
    {
        void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
        if (!h)
            return;
        getcontext = (int (*)(unw_context_t *))dlsym(h, "_Ux86_64_getcontext");
        init_local = (int (*)(unw_cursor_t *, unw_context_t *))dlsym(h, "_ULx86_64_init_local");
        step = (int (*)(unw_cursor_t *))dlsym(h, "_ULx86_64_step");
        get_reg = (int (*)(unw_cursor_t *, int, unw_word_t *))dlsym(h, "_ULx86_64_get_reg");
        get_proc_name = (int (*)(unw_cursor_t *, char *, size_t, unw_word_t *))dlsym(
            h, "_ULx86_64_get_proc_name");
        get_proc_info =
            (int (*)(unw_cursor_t *, unw_proc_info_t *))dlsym(h, "_ULx86_64_get_proc_info");
        ok = getcontext && init_local && step && get_reg && get_proc_name && get_proc_info;
    }
};
Libunwind &lu()
{
    static Libunwind l;
    return l;
}

// fern_ctx_entry's code range, found by libunwind (the symbol is hidden,
// so dladdr-based tools cannot name it).
uintptr_t entry_lo, entry_hi;

__attribute__((noinline)) Walk libunwind_walk()
{
    Walk w;
    unw_cursor_t c;
    unw_context_t ctx;
    Libunwind &l = lu();
    if (!l.ok)
        return w;
    l.getcontext(&ctx);
    l.init_local(&c, &ctx);
    do {
        char buf[256];
        unw_word_t off, ip;
        unw_proc_info_t pi;
        l.get_reg(&c, UNW_REG_IP, &ip);
        w.ips.push_back(ip);
        w.names.push_back(l.get_proc_name(&c, buf, sizeof buf, &off) == 0 ? buf : "?");
        if (w.names.back() == "fern_ctx_entry" && l.get_proc_info(&c, &pi) == 0) {
            entry_lo = pi.start_ip;
            entry_hi = pi.end_ip;
        }
    } while ((w.end = l.step(&c)) > 0 && w.names.size() < 200);
    return w;
}

_Unwind_Reason_Code gcc_step(struct _Unwind_Context *ctx, void *arg)
{
    auto *w = static_cast<Walk *>(arg);
    w->ips.push_back(_Unwind_GetIP(ctx));
    return w->ips.size() > 200 ? _URC_NORMAL_STOP : _URC_NO_REASON;
}

__attribute__((noinline)) Walk gcc_walk()
{
    Walk w;
    w.end = _Unwind_Backtrace(gcc_step, &w);
    return w;
}

__attribute__((noinline)) Walk glibc_walk()
{
    Walk w;
    void *pcs[200];
    int n = backtrace(pcs, 200);
    for (int i = 0; i < n; i++)
        w.ips.push_back((uintptr_t)pcs[i]);
    return w;
}

// The last frame is fern_ctx_entry (a return address points into it, past
// the call: within (lo, hi]).
bool ends_at_entry(const Walk &w)
{
    return !w.ips.empty() && entry_lo && w.ips.back() > entry_lo && w.ips.back() <= entry_hi;
}

TEST(Unwind, LibunwindEndsAtTheEntryTrampoline)
{
    ASSERT_TRUE(lu().ok) << "libunwind.so.8 not found (libunwind-dev): " << dlerror();
    Walk w;
    ASSERT_EQ(0, fern_test::run_green([&] { w = libunwind_walk(); }));
    ASSERT_FALSE(w.names.empty());
    EXPECT_EQ(0, w.end) << "unw_step failed instead of ending";
    EXPECT_EQ("fern_ctx_entry", w.names.back());
    EXPECT_LT(w.names.size(), 20u);
}

TEST(Unwind, LibgccUnwinderEndsAtTheEntryTrampoline)
{
    Walk ref, w; // ref: libunwind's walk, for fern_ctx_entry's range
    ASSERT_EQ(0, fern_test::run_green([&] {
                  ref = libunwind_walk();
                  w = gcc_walk();
              }));
    EXPECT_EQ(_URC_END_OF_STACK, w.end);
    // libgcc reports fern_ctx_entry, then the end: a last frame whose
    // return address is 0 (the undefined rule), as at the bottom of a
    // kernel thread (glibc's backtrace() drops that 0).
    ASSERT_GE(w.ips.size(), 2u);
    EXPECT_EQ(0u, w.ips.back());
    w.ips.pop_back();
    EXPECT_TRUE(ends_at_entry(w)) << std::hex << w.ips.back();
    EXPECT_LT(w.ips.size(), 20u);
}

TEST(Unwind, GlibcBacktraceEndsAtTheEntryTrampoline)
{
    Walk ref, w;
    ASSERT_EQ(0, fern_test::run_green([&] {
                  ref = libunwind_walk();
                  w = glibc_walk();
              }));
    EXPECT_TRUE(ends_at_entry(w));
    EXPECT_LT(w.ips.size(), 20u);
}

// An exception that escapes the thread's function finds no handler in the
// green stack and ends the search at the bottom: std::terminate, not a
// crash while unwinding into the kernel thread's stack.
TEST(UnwindDeathTest, UncaughtExceptionTerminates)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(
        {
            std::set_terminate([] {
                fputs("terminate called\n", stderr);
                _exit(5);
            });
            fern_test::run_green([] { throw std::runtime_error("escapes"); });
            _exit(6);
        },
        ::testing::ExitedWithCode(5), "terminate called");
}

} // namespace
