/* SPDX-License-Identifier: MIT */
/*
 * x86_64: the return addresses of a parked green thread (arch.h:
 * arch_stack_walk), for the deadlock reports (watch/backtrace.c). Its
 * registers are in the frame fern_ctx_switch saved (ARCH_DEBUG_FRAME). With
 * libunwind (loaded with dlopen when the monitor starts, not linked: a
 * dependency only where it is installed) the walk follows .eh_frame like a
 * debugger; without it, the saved frame-pointer chain, kept inside the
 * thread's stack (complete only for code built with frame pointers).
 */
#include "arch/arch.h"

#include <dlfcn.h>
#include <string.h>
#include <ucontext.h>

/* libunwind's x86_64 entry points (its header is not needed: the context
 * is a ucontext_t, a cursor 127 words, registers numbered as below). */
enum { UNW_RBX = 3, UNW_RBP = 6, UNW_RSP = 7, UNW_RIP = 16 };
static struct {
    int (*init_local)(void *cursor, ucontext_t *uc);
    int (*step)(void *cursor);
    int (*get_reg)(void *cursor, int reg, uint64_t *val);
} U;
static uint64_t unw_cursor[256]; /* >= UNW_TDEP_CURSOR_LEN (127) words */
static ucontext_t unw_uc;

void arch_stack_walk_prepare(void)
{
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        U.init_local = (int (*)(void *, ucontext_t *))dlsym(h, "_ULx86_64_init_local");
        U.step = (int (*)(void *))dlsym(h, "_ULx86_64_step");
        U.get_reg = (int (*)(void *, int, uint64_t *))dlsym(h, "_ULx86_64_get_reg");
        if (!U.init_local || !U.step || !U.get_reg)
            U.init_local = NULL;
    }
}

unsigned arch_stack_walk(const void *saved, uintptr_t lo, uintptr_t hi, uintptr_t *pcs, unsigned max,
                         const char **how)
{
    const uint64_t *f = saved;
    if (!f || !max)
        return 0;
    /* The frame of ARCH_DEBUG_FRAME: r15..rbp at 8..48, rip at 56. */
    uint64_t rip = f[7], rbp = f[6];
    uintptr_t sp = (uintptr_t)f + 64;
    unsigned n = 0;
    if (U.init_local) {
        *how = "libunwind";
        memset(&unw_uc, 0, sizeof unw_uc);
        greg_t *g = unw_uc.uc_mcontext.gregs;
        g[REG_RIP] = (greg_t)rip;
        g[REG_RSP] = (greg_t)sp;
        g[REG_RBP] = (greg_t)rbp;
        g[REG_RBX] = (greg_t)f[5];
        g[REG_R12] = (greg_t)f[4];
        g[REG_R13] = (greg_t)f[3];
        g[REG_R14] = (greg_t)f[2];
        g[REG_R15] = (greg_t)f[1];
        if (U.init_local(unw_cursor, &unw_uc) == 0) {
            do {
                uint64_t ip;
                if (U.get_reg(unw_cursor, UNW_RIP, &ip) || !ip)
                    break;
                pcs[n++] = (uintptr_t)ip;
            } while (n < max && U.step(unw_cursor) > 0);
            return n;
        }
    }
    /* Frame pointers: each frame's rbp holds the caller's rbp, then the
     * return address; followed while it stays inside t's stack and goes
     * up. */
    *how = "frame pointers: libunwind.so.8 not found or unusable; frames of code built without "
           "them are missing";
    pcs[n++] = (uintptr_t)rip;
    uintptr_t fp = (uintptr_t)rbp, prev = sp - 16;
    while (n < max && fp > prev && fp >= lo && fp + 16 <= hi && !(fp & 7)) {
        const uintptr_t *fr = (const uintptr_t *)fp;
        if (!fr[1])
            break;
        pcs[n++] = fr[1];
        prev = fp;
        fp = fr[0];
    }
    return n;
}
