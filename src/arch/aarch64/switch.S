/* SPDX-License-Identifier: MIT */
/*
 * Context switch for AArch64 (AAPCS64, Linux).
 *
 * void *fern_ctx_switch(void **save_sp, void *new_sp, void *arg);
 *
 * Saves what AAPCS64 says a callee must preserve, x19-x28, the frame pointer
 * x29, the link register x30, the low halves d8-d15 of v8-v15, and FPCR
 * (rounding mode, flush-to-zero: per thread, like MXCSR on x86_64), in one
 * 176-byte frame on the current stack; stores sp in *save_sp, loads new_sp,
 * restores the same frame from it and returns `arg` in x0 on the new
 * context. x18 is not saved: Linux gives it no fixed role in user space, so
 * it is an ordinary temporary. No syscall, no signal-mask work (invariant 5,
 * docs/design.md).
 *
 *   sp+0   x29 x30      sp+96   d8  d9
 *   sp+16  x19 x20      sp+112  d10 d11
 *   sp+32  x21 x22      sp+128  d12 d13
 *   sp+48  x23 x24      sp+144  d14 d15
 *   sp+64  x25 x26      sp+160  fpcr, unused
 *   sp+80  x27 x28
 *
 * Return-address signing (PAC). The saved x30 is signed with paciasp, whose
 * modifier is sp at entry, and authenticated with autiasp after the frame
 * is popped, when sp is that same value again: a context always resumes at
 * the sp it left from, so each signature checks out on the context that
 * made it. A fresh frame (ctx_init) carries fern_ctx_entry signed with the
 * sp its autiasp will see. paciasp/autiasp/pacia1716 are hint-space
 * instructions: plain no-ops on cores without PAC, so one binary runs on
 * both. The caller's own signed return addresses sit in its frames, which
 * the switch leaves alone, under the sp they were signed with.
 *
 * Branch target identification (BTI). fern_ctx_switch and fern_ctx_start
 * are reached by direct calls only, but begin with a landing pad anyway
 * (paciasp counts as one for calls) so a BTI-guarded library may call them
 * through a register. fern_ctx_entry is reached by `ret` or a direct
 * branch, which BTI does not check, and calls thread_entry directly.
 */
        .arch   armv8-a

        .text
        .globl  fern_ctx_switch
        .hidden fern_ctx_switch
        .type   fern_ctx_switch, %function
        .p2align 4
fern_ctx_switch:
        .cfi_startproc
        hint    #25                     /* paciasp */
        .cfi_negate_ra_state
        stp     x29, x30, [sp, #-176]!
        .cfi_def_cfa_offset 176
        .cfi_offset x29, -176
        .cfi_offset x30, -168
        stp     x19, x20, [sp, #16]
        .cfi_offset x19, -160
        .cfi_offset x20, -152
        stp     x21, x22, [sp, #32]
        .cfi_offset x21, -144
        .cfi_offset x22, -136
        stp     x23, x24, [sp, #48]
        .cfi_offset x23, -128
        .cfi_offset x24, -120
        stp     x25, x26, [sp, #64]
        .cfi_offset x25, -112
        .cfi_offset x26, -104
        stp     x27, x28, [sp, #80]
        .cfi_offset x27, -96
        .cfi_offset x28, -88
        stp     d8, d9, [sp, #96]
        .cfi_offset d8, -80
        .cfi_offset d9, -72
        stp     d10, d11, [sp, #112]
        .cfi_offset d10, -64
        .cfi_offset d11, -56
        stp     d12, d13, [sp, #128]
        .cfi_offset d12, -48
        .cfi_offset d13, -40
        stp     d14, d15, [sp, #144]
        .cfi_offset d14, -32
        .cfi_offset d15, -24
        mrs     x9, fpcr
        str     x9, [sp, #160]
        mov     x10, sp
        str     x10, [x0]
        /* From here on sp is the new context's; its frame has the same shape. */
        mov     sp, x1
        ldr     x10, [sp, #160]
        /* Writing FPCR may synchronise the FP pipeline on some cores: skip
         * it in the usual case where both threads use the same modes. */
        cmp     x9, x10
        b.eq    1f
        msr     fpcr, x10
1:      ldp     d14, d15, [sp, #144]
        ldp     d12, d13, [sp, #128]
        ldp     d10, d11, [sp, #112]
        ldp     d8, d9, [sp, #96]
        ldp     x27, x28, [sp, #80]
        ldp     x25, x26, [sp, #64]
        ldp     x23, x24, [sp, #48]
        ldp     x21, x22, [sp, #32]
        ldp     x19, x20, [sp, #16]
        ldp     x29, x30, [sp], #176
        .cfi_def_cfa_offset 0
        mov     x0, x2
        hint    #29                     /* autiasp */
        .cfi_negate_ra_state
        ret
        .cfi_endproc
        .size   fern_ctx_switch, .-fern_ctx_switch

/*
 * First code a green thread runs. x0 = the `arg` of the switch that started
 * it, x19 = its fern_thread. The return address column is undefined, so gdb,
 * perf and the C++ unwinder stop here: this is the bottom of the green
 * stack (invariant 6, docs/design.md). Zero x29 ends frame-pointer walks
 * the same way.
 */
        .globl  fern_ctx_entry
        .hidden fern_ctx_entry
        .type   fern_ctx_entry, %function
        .p2align 4
fern_ctx_entry:
        .cfi_startproc
        .cfi_undefined x30
        mov     x29, #0
        mov     x30, #0
        mov     x1, x19
        bl      thread_entry
        brk     #0x3e8
        .cfi_endproc
        .size   fern_ctx_entry, .-fern_ctx_entry

/*
 * void fern_ctx_start(void *top, fern_thread *t)  (does not return)
 *
 * Start green thread t on a fresh frame at `top` (16-byte aligned),
 * abandoning the calling context: used when an exiting thread hands its own
 * stack to a thread that has not run yet. Default FPCR (0: round to
 * nearest, no flush-to-zero, no traps), as ctx_init gives a new thread, then
 * the same entry as a first switch.
 */
        .globl  fern_ctx_start
        .hidden fern_ctx_start
        .type   fern_ctx_start, %function
        .p2align 4
fern_ctx_start:
        .cfi_startproc
        .cfi_undefined x30
        hint    #34                     /* bti c */
        mov     sp, x0
        mov     x19, x1
        msr     fpcr, xzr
        mov     x0, #0
        b       fern_ctx_entry
        .cfi_endproc
        .size   fern_ctx_start, .-fern_ctx_start

        .section .note.GNU-stack,"",%progbits

/*
 * GNU property note: this object supports BTI (every indirect-call target
 * above has a landing pad) and PAC (every return address it saves is
 * signed). The linker ANDs the notes of all objects, so the library is
 * marked only if the C code was built with -mbranch-protection too; without
 * this note any such build would silently lose BTI.
 */
        .section .note.gnu.property, "a"
        .p2align 3
        .word   4                       /* name size: "GNU\0" */
        .word   16                      /* descriptor size */
        .word   5                       /* NT_GNU_PROPERTY_TYPE_0 */
        .asciz  "GNU"
        .word   0xc0000000              /* GNU_PROPERTY_AARCH64_FEATURE_1_AND */
        .word   4                       /* its data size */
        .word   3                       /* BTI | PAC */
        .word   0                       /* padding to 8 bytes */
