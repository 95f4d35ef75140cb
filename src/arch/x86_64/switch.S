/* SPDX-License-Identifier: MIT */
/*
 * Context switch for x86_64 System V.
 *
 * void *fern_ctx_switch(void **save_sp, void *new_sp, void *arg);
 *
 * Saves the callee-saved registers (rbp, rbx, r12-r15) plus MXCSR and the x87
 * control word on the current stack, stores the stack pointer in *save_sp,
 * loads new_sp and restores the same set from it, then returns `arg` in rax
 * on the new context. No syscall, no signal-mask work (invariant 5,
 * docs/design.md): the signal mask belongs to the kernel thread, not to the
 * green thread.
 *
 * A fresh context (made by ctx_init) has the same frame with the return
 * address pointing at fern_ctx_entry, rbx = the thread, r12 = the C entry.
 *
 * Branch prediction. A `ret` is predicted from the CPU's return stack, which
 * holds the return addresses of the calls the *suspended* thread made. The
 * resumed thread returns through its own frames, so each of its returns is
 * guessed right only where the two threads' call chains are the same. Inside
 * the runtime they are (fern_ctx_switch has one call site, in switch_to, and a
 * blocking call takes the same path each time), but the return from the
 * public call into the user's code lands at the other thread's call site, and
 * that miss (~15-20 cycles) is what made a switch between two different
 * functions cost more than one between two copies of the same loop.
 *
 * So the blocking entry points most used to hand over the CPU (jump_return
 * below) go back to their caller with an indirect jump, which the indirect
 * branch predictor guesses from the recent branch history instead: the
 * thread that runs next is predictable from what ran before, its call site
 * is not predictable from the return stack. fern_ctx_switch itself keeps its
 * `ret`: ending it with a jump too (tried) leaves the suspended thread's call
 * into it on the return stack, which puts every later return of the resumed
 * thread one entry off and made even the same-site switch twice as slow.
 *
 * Shadow stacks (CET SHSTK) cannot coexist with any of this: a thread's
 * returns would be checked against another thread's calls, and a jump return
 * never pops its entry. This file claims no GNU property (no SHSTK, no IBT),
 * so the loader does not turn a shadow stack on for a process that loads
 * fern; fern_init refuses with ENOTSUP if one was forced on anyway.
 */
        .text
        .globl  fern_ctx_switch
        .hidden fern_ctx_switch
        .type   fern_ctx_switch, @function
        .p2align 4
fern_ctx_switch:
        .cfi_startproc
        pushq   %rbp
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbp, 0
        pushq   %rbx
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbx, 0
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
        subq    $8, %rsp
        .cfi_adjust_cfa_offset 8
        stmxcsr (%rsp)
        fnstcw  4(%rsp)
        movq    %rsp, (%rdi)
        /* From here on rsp is the new context's; its frame has the same shape. */
        movq    %rsi, %rsp
        ldmxcsr (%rsp)
        fldcw   4(%rsp)
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %r15
        .cfi_adjust_cfa_offset -8
        popq    %r14
        .cfi_adjust_cfa_offset -8
        popq    %r13
        .cfi_adjust_cfa_offset -8
        popq    %r12
        .cfi_adjust_cfa_offset -8
        popq    %rbx
        .cfi_adjust_cfa_offset -8
        popq    %rbp
        .cfi_adjust_cfa_offset -8
        movq    %rdx, %rax
        ret
        .cfi_endproc
        .size   fern_ctx_switch, .-fern_ctx_switch

/*
 * First code a green thread runs. rax = the `arg` of the switch that started
 * it, rbx = its fern_thread, r12 = thread_entry. The return address column is
 * undefined, so gdb, perf and the C++ unwinder stop here: this is the bottom
 * of the green stack (invariant 6, docs/design.md).
 */
        .globl  fern_ctx_entry
        .hidden fern_ctx_entry
        .type   fern_ctx_entry, @function
        .p2align 4
fern_ctx_entry:
        .cfi_startproc
        .cfi_undefined rip
        xorl    %ebp, %ebp
        movq    %rax, %rdi
        movq    %rbx, %rsi
        call    *%r12
        ud2
        .cfi_endproc
        .size   fern_ctx_entry, .-fern_ctx_entry

/*
 * A hibernated thread resumes here (sched/hibernate.c): fern_ctx_switch has
 * popped the frame hibernation built in the thread's heap block, so rbx =
 * the thread, r12 = the block, rsp points into the block. hib_resume runs
 * on this worker's hibernation stack (fern_hib_scratch_: the thread's own
 * stack may not be back yet), runs the previous context's after-switch
 * action, restores the stack and returns the real saved stack pointer;
 * the rest is fern_ctx_switch's second half on the real frame. rax (the
 * switch's `arg`) is NULL: a parked thread's switch ignores it.
 */
        .globl  fern_hib_entry
        .hidden fern_hib_entry
        .type   fern_hib_entry, @function
        .p2align 4
fern_hib_entry:
        .cfi_startproc
        .cfi_undefined rip
        movq    fern_hib_scratch_@gottpoff(%rip), %rax
        movq    %fs:(%rax), %rsp
        movq    %rbx, %rdi
        movq    %r12, %rsi
        call    hib_resume
        movq    %rax, %rsp
        ldmxcsr (%rsp)
        fldcw   4(%rsp)
        addq    $8, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        xorl    %eax, %eax
        ret
        .cfi_endproc
        .size   fern_hib_entry, .-fern_hib_entry

/*
 * void fern_ctx_start(void *top, fern_thread *t)  (does not return)
 *
 * Start green thread t on a fresh frame at `top` (16-byte aligned),
 * abandoning the calling context: used when an exiting thread hands its own
 * stack to a thread that has not run yet. Default MXCSR and x87 control word,
 * as ctx_init gives a new thread, then the same entry as a first switch.
 */
        .globl  fern_ctx_start
        .hidden fern_ctx_start
        .type   fern_ctx_start, @function
        .p2align 4
fern_ctx_start:
        .cfi_startproc
        .cfi_undefined rip
        movq    %rdi, %rsp
        movq    %rsi, %rbx
        leaq    thread_entry(%rip), %r12
        movl    $0x1F80, -8(%rsp)
        ldmxcsr -8(%rsp)
        movw    $0x037F, -4(%rsp)
        fldcw   -4(%rsp)
        xorl    %eax, %eax
        jmp     fern_ctx_entry
        .cfi_endproc
        .size   fern_ctx_start, .-fern_ctx_start

/*
 * jump_return NAME: the public symbol NAME calls NAME_body (the C function,
 * same arguments and result) and returns to NAME's caller by popping the
 * return address and jumping to it (see the top of this file for why).
 * Arguments pass through untouched in registers (no entry point here takes
 * any on the stack; r11 is no argument register); rax and rdx carry the
 * result back; rcx is free at a return. The CFI follows the return address
 * from the stack into rcx, so unwinders and debuggers walk through the entry
 * point as through any call.
 *
 * On entry, three conditional branches test bits 2-4 of the caller's return
 * address: each jumps to the next instruction, so whichever way it goes the
 * code is the same, but a taken conditional branch enters the CPU's branch
 * history. Some indirect predictors (AMD Zen 4 here) key on a history of
 * taken conditional branches only, and the runtime's own path is the same
 * for every thread; when the user's code just before two threads' calls has
 * the same conditional branches (two loops of the same shape around a
 * yield), that history cannot tell which thread suspended, so it cannot tell
 * which one resumes, and the final jump missed on every switch (20 ns per
 * yield instead of 11). The three branches put the suspending caller's
 * address into that history. At the exit instead (bits of the target just
 * before the jump) they cost more than they saved: there they are predicted
 * from the same ambiguous history, and the three-thread round-robin and the
 * channel round trip got slower.
 */
        .macro  jump_return name
        .globl  \name
        .type   \name, @function
        .p2align 4
\name:
        .cfi_startproc
        movq    (%rsp), %r11
        subq    $8, %rsp
        .cfi_adjust_cfa_offset 8
        testb   $0x04, %r11b
        jz      1f
1:      testb   $0x08, %r11b
        jz      2f
2:      testb   $0x10, %r11b
        jz      3f
3:      call    \name\()_body
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rcx
        .cfi_adjust_cfa_offset -8
        .cfi_register rip, rcx
        jmp     *%rcx
        .cfi_endproc
        .size   \name, .-\name
        .endm

        jump_return fern_yield
        jump_return fern_join
        jump_return fern_chan_send
        jump_return fern_chan_recv
        jump_return fern_cond_wait

        .section .note.GNU-stack,"",@progbits
