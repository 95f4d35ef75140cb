/* SPDX-License-Identifier: MIT */
/*
 * Preemption trampoline for x86_64 (see src/watch/preempt.c).
 *
 * The signal handler never switches stacks. When the interrupted point is
 * safe it rewrites the saved context so that, once the handler has returned
 * through sigreturn, the thread runs this code as if it had been called at
 * the interrupted instruction, with one difference: the caller's red zone
 * (128 bytes below its rsp) is skipped. On entry:
 *
 *      rsp + 136   the interrupted rsp
 *      rsp + 8     the red zone, left untouched (128 bytes)
 *      rsp         the interrupted rip
 *
 * It saves every general register and the flags, aligns the stack to 64
 * bytes, saves the vector, x87 and MXCSR state with XSAVE (all components
 * enabled in XCR0; fern_preempt_xsave_size bytes, from CPUID at start) or,
 * without XSAVE, FXSAVE (512 bytes), calls preempt_yield(), restores exactly
 * what it saved and returns with `ret $128`, which pops the interrupted rip
 * and then drops the red-zone gap, so rsp is the interrupted one again. No
 * instruction after the restore changes the flags.
 */
        .text
        .globl  fern_preempt_tramp
        .hidden fern_preempt_tramp
        .type   fern_preempt_tramp, @function
        .p2align 4
fern_preempt_tramp:
        .cfi_startproc
        .cfi_signal_frame
        /* The caller's frame: CFA is the interrupted rsp. */
        .cfi_def_cfa rsp, 136
        .cfi_offset rip, -136
        pushfq
        .cfi_adjust_cfa_offset 8
        pushq   %rax
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rax, 0
        pushq   %rcx
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rcx, 0
        pushq   %rdx
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rdx, 0
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rsi, 0
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rdi, 0
        pushq   %r8
        .cfi_adjust_cfa_offset 8
        pushq   %r9
        .cfi_adjust_cfa_offset 8
        pushq   %r10
        .cfi_adjust_cfa_offset 8
        pushq   %r11
        .cfi_adjust_cfa_offset 8
        pushq   %rbx
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbx, 0
        pushq   %rbp
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbp, 0
        pushq   %r12
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r12, 0
        pushq   %r13
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r13, 0
        pushq   %r14
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r14, 0
        pushq   %r15
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r15, 0
        /* 16 registers + flags = 136 bytes; rbx keeps this rsp. */
        movq    %rsp, %rbx
        .cfi_def_cfa_register rbx
        movl    fern_preempt_xsave_size(%rip), %eax
        subq    %rax, %rsp
        andq    $-64, %rsp
        testl   $1, fern_preempt_use_xsave(%rip)
        jz      1f
        /* XSAVE writes only XSTATE_BV of the 64-byte header; XRSTOR wants
         * the rest zero. */
        xorl    %eax, %eax
        movq    %rax, 512(%rsp)
        movq    %rax, 520(%rsp)
        movq    %rax, 528(%rsp)
        movq    %rax, 536(%rsp)
        movq    %rax, 544(%rsp)
        movq    %rax, 552(%rsp)
        movq    %rax, 560(%rsp)
        movq    %rax, 568(%rsp)
        movl    $-1, %eax
        movl    $-1, %edx
        xsave64 (%rsp)
        call    preempt_yield
        movl    $-1, %eax
        movl    $-1, %edx
        xrstor64 (%rsp)
        jmp     2f
1:      fxsave64 (%rsp)
        call    preempt_yield
        fxrstor64 (%rsp)
2:      movq    %rbx, %rsp
        .cfi_def_cfa_register rsp
        popq    %r15
        .cfi_adjust_cfa_offset -8
        popq    %r14
        .cfi_adjust_cfa_offset -8
        popq    %r13
        .cfi_adjust_cfa_offset -8
        popq    %r12
        .cfi_adjust_cfa_offset -8
        popq    %rbp
        .cfi_adjust_cfa_offset -8
        popq    %rbx
        .cfi_adjust_cfa_offset -8
        popq    %r11
        .cfi_adjust_cfa_offset -8
        popq    %r10
        .cfi_adjust_cfa_offset -8
        popq    %r9
        .cfi_adjust_cfa_offset -8
        popq    %r8
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdx
        .cfi_adjust_cfa_offset -8
        popq    %rcx
        .cfi_adjust_cfa_offset -8
        popq    %rax
        .cfi_adjust_cfa_offset -8
        popfq
        .cfi_adjust_cfa_offset -8
        ret     $128
        .cfi_endproc
        .size   fern_preempt_tramp, .-fern_preempt_tramp

        /* Sized by arch_preempt_init (x86_64/arch.h). */
        .bss
        .p2align 2
        .globl  fern_preempt_xsave_size
        .hidden fern_preempt_xsave_size
        .type   fern_preempt_xsave_size, @object
        .size   fern_preempt_xsave_size, 4
fern_preempt_xsave_size:
        .zero   4
        .globl  fern_preempt_use_xsave
        .hidden fern_preempt_use_xsave
        .type   fern_preempt_use_xsave, @object
        .size   fern_preempt_use_xsave, 4
fern_preempt_use_xsave:
        .zero   4

        .section .note.GNU-stack,"",@progbits
