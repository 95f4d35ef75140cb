/* SPDX-License-Identifier: MIT */
/*
 * Preemption trampoline for AArch64 (see src/watch/preempt.c and arch.h).
 *
 * Resuming an arbitrary instruction with every register as it was needs a
 * branch that restores the last register too. AArch64 user code has none:
 * `br`/`ret` take the target from a register, and AAPCS64 leaves no
 * register compiled code does not use (x16/x17 are ordinary temporaries
 * inside a function, x18 too on Linux). The kernel has that branch:
 * rt_sigreturn loads x0-x30, sp, pc, pstate (NZCV, BTYPE) and, from the
 * frame's records, q0-q31, FPSR and FPCR (and SVE state where the frame
 * holds it) all at once.
 *
 * So the handler (arch_preempt_redirect) copies the kernel's signal frame
 * (siginfo and ucontext, 16-byte aligned) from the worker's alternate
 * signal stack to the green stack just below the interrupted sp, and points
 * the live context at this trampoline with sp at that copy. After the
 * handler's own sigreturn the thread runs here with every register of the
 * interrupted point saved in the copy, so it may clobber anything. It
 *
 *   1. calls preempt_yield() (sp is the copy: 16-byte aligned; the
 *      scheduler's frames go below it);
 *   2. writes into the copy what rt_sigreturn would otherwise change: the
 *      kernel thread's current alternate signal stack (sigaltstack) and
 *      signal mask (rt_sigprocmask), so that resuming leaves both as they
 *      are now: the thread normally resumes on the worker it left, but the
 *      monitor may hand it to another one (docs/preemption.md), whose alt
 *      stack is its own;
 *   3. calls rt_sigreturn on the copy: the interrupted instruction runs
 *      next, with every register, the flags and the FP/SIMD state exactly
 *      as they were, and sp back where it was.
 *
 * Raw system calls, not libc's wrappers: nothing here depends on symbol
 * interposition, and errno is not touched (the handler saved it for the
 * interrupted code already).
 *
 * BTI: the handler clears BTYPE in the live context, so entering here needs
 * no landing pad (one is here anyway); the copy keeps the interrupted
 * pstate, so a branch-target check pending at the interrupted instruction
 * still happens when it resumes. PAC: x30 and sp come back exactly, so a
 * return address the interrupted function signed still authenticates; this
 * code never returns, so it signs nothing.
 *
 * Unwinding: the CFI below describes the copy as a signal frame, so a
 * backtrace from preempt_yield continues into the interrupted function:
 * CFA = the interrupted sp, x0-x30 from the copy, the return column is the
 * PC (DWARF 32) with the interrupted pc.
 *
 * Offsets in the copy (sizes and offsets of glibc's siginfo_t and
 * ucontext_t, checked by static asserts in arch.h):
 */
#include <asm/unistd.h>

        .equ    F_UC_STACK,     144     /* 128 + offsetof(ucontext_t, uc_stack) */
        .equ    F_UC_SIGMASK,   168     /* 128 + offsetof(ucontext_t, uc_sigmask) */
        .equ    F_REGS,         312     /* 128 + offsetof(..., uc_mcontext.regs) */
        .equ    F_SP,           560
        .equ    F_PC,           568

/* DW_CFA_expression reg: *(sp + F_REGS + 8 * reg); the offset is a
 * two-byte SLEB128 (312..552). */
.macro  cfi_reg n
        .cfi_escape 0x10, \n, 0x03, 0x8f, ((F_REGS + 8 * \n) & 0x7f) | 0x80, (F_REGS + 8 * \n) >> 7
.endm

        .arch   armv8-a
        .text
        .globl  fern_preempt_tramp
        .hidden fern_preempt_tramp
        .type   fern_preempt_tramp, %function
        .p2align 4
fern_preempt_tramp:
        .cfi_startproc
        .cfi_signal_frame
        .cfi_return_column 32
        /* DW_CFA_def_cfa_expression: *(sp + F_SP) */
        .cfi_escape 0x0f, 0x04, 0x8f, (F_SP & 0x7f) | 0x80, F_SP >> 7, 0x06
        .irp    n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30
        cfi_reg \n
        .endr
        /* the PC column: *(sp + F_PC) */
        .cfi_escape 0x10, 32, 0x03, 0x8f, (F_PC & 0x7f) | 0x80, F_PC >> 7
        hint    #34                     /* bti c */
        bl      preempt_yield
        mov     x0, #0
        add     x1, sp, #F_UC_STACK
        mov     x8, #__NR_sigaltstack
        svc     #0
        mov     x0, #0                  /* SIG_BLOCK of nothing: read the mask */
        mov     x1, #0
        add     x2, sp, #F_UC_SIGMASK
        mov     x3, #8                  /* the kernel's sigset_t */
        mov     x8, #__NR_rt_sigprocmask
        svc     #0
        mov     x8, #__NR_rt_sigreturn
        svc     #0
        brk     #0                      /* rt_sigreturn does not return */
        .cfi_endproc
        .size   fern_preempt_tramp, .-fern_preempt_tramp

        /* BTI and PAC, as switch.S (tests/cross/bti.sh checks every object). */
        .pushsection .note.gnu.property, "a"
        .p2align 3
        .word   4
        .word   16
        .word   5                       /* NT_GNU_PROPERTY_TYPE_0 */
        .asciz  "GNU"
        .word   0xc0000000              /* GNU_PROPERTY_AARCH64_FEATURE_1_AND */
        .word   4
        .word   3                       /* BTI | PAC */
        .word   0
        .popsection

        .section .note.GNU-stack,"",%progbits
