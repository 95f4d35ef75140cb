/* SPDX-License-Identifier: MIT */
/*
 * The debugger's map of the runtime: where a debugger finds every green
 * thread without running code in the process (so it works on core files).
 *
 * Model. Every thread descriptor lives in a chunk of THREAD_CHUNK
 * descriptors; chunks form one list from rt.chunks and are never freed
 * before shutdown, so walking the chunks and keeping descriptors whose
 * `alloc` is A_LIVE finds all green threads (fern_dump walks the same
 * list). A parked or runnable thread's registers are on its own stack at
 * `sp`, in the frame fern_ctx_switch pushed (ARCH_DEBUG_FRAME in the
 * architecture's header describes it); a running thread's are in the kernel
 * thread of the worker whose `cur` it is, found through rt.clusters.
 *
 * fern_debug_map is the one exported symbol a debugger needs. It is
 * read-only data: offsets and sizes of the fields the gdb extension
 * (gdb/fern-gdb.py) reads, the address of the runtime, and the layout of
 * the saved switch frame. So the extension needs no DWARF (it works on a
 * Release build, and on a stripped library, since the symbol is dynamic),
 * and a change of a struct here cannot silently desynchronise it: the
 * offsets follow the code, and `version` changes when the meaning of a
 * field does. docs/debugging.md describes the shape for other tools.
 *
 * Invariant: every field listed is written by the runtime where it
 * changes (no field exists only for the debugger except worker.tid, set
 * once per worker), so the map costs nothing on any hot path.
 *
 * The gdb extension itself is embedded here too, as an inline script in a
 * .debug_gdb_scripts section: gdb runs it when it loads the library (or a
 * program linked with libfern.a) if auto-load allows that file's path, so
 * the commands are there for a build tree, a static link, or any install
 * location. The section is not allocated: it costs file size, no memory.
 * `strip -g` removes it; the installed share/gdb/auto-load copy covers that
 * case. Entry format (gdb manual, ".debug_gdb_scripts section"): byte 4
 * (inline Python), the script's name on the first line, its text, a NUL.
 * fern_init refers to fern_debug_map, so a static link keeps this file.
 */
#include "debug/debug.h"

#include <stddef.h>

__asm__(".pushsection .debug_gdb_scripts, \"MS\", @progbits, 1\n\t"
        ".byte 4\n\t"
        ".ascii \"gdb.inlined-script.fern\\n\"\n\t"
        ".incbin \"" FERN_GDB_SCRIPT "\"\n\t"
        ".byte 0\n\t"
        ".popsection");

/* The state numbers the extension names (version 1). */
_Static_assert(T_NEW == 0 && T_RUNNABLE == 1 && T_RUNNING == 2 && T_PARKED == 3 && T_EXITING == 4,
               "thread states changed: bump FERN_DEBUG_MAP_VERSION and gdb/fern-gdb.py");

/* Bump when a field's meaning (not its offset) changes. */
#define FERN_DEBUG_MAP_VERSION 1
#define FERN_DEBUG_MAP_MAGIC   0x70616d2d6e726566ull /* "fern-map" */

#define OFF(type, field) ((uint64_t)offsetof(type, field))

/* All fields are 64-bit words so a reader can take the map as an array. */
struct fern_debug_map {
    uint64_t magic, version, words; /* words: how many 64-bit words follow */
    const void *runtime;            /* &rt */
    /* struct runtime */
    uint64_t rt_running, rt_chunks, rt_clusters;
    /* struct thread_chunk: `next` at 0, then the descriptors */
    uint64_t chunk_threads, chunk_count;
    /* struct fern_thread */
    uint64_t thread_size, t_sp, t_stack, t_fn, t_cluster, t_alloc, t_run_state, t_wait_what,
        t_wait_obj, t_id, t_name, t_name_size, alloc_live;
    /* struct fern_cluster */
    uint64_t c_next, c_nworkers, c_workers;
    /* struct worker */
    uint64_t w_cur, w_g0, w_index, w_tid;
    /* struct stack */
    uint64_t s_lo, s_size;
    /* The saved switch frame, from `sp` up: bytes in the frame (the
     * caller's stack pointer is sp + frame_size), then the offsets of the
     * return address and of the callee-saved registers. */
    uint64_t frame_size, f_rip, f_rbp, f_rbx, f_r12, f_r13, f_r14, f_r15;
};

__attribute__((visibility("default"), used)) const struct fern_debug_map fern_debug_map = {
    .magic = FERN_DEBUG_MAP_MAGIC,
    .version = FERN_DEBUG_MAP_VERSION,
    .words = sizeof(struct fern_debug_map) / 8 - 3,
    .runtime = &rt,
    .rt_running = OFF(struct runtime, running),
    .rt_chunks = OFF(struct runtime, chunks),
    .rt_clusters = OFF(struct runtime, clusters),
    .chunk_threads = OFF(struct thread_chunk, t),
    .chunk_count = THREAD_CHUNK,
    .thread_size = sizeof(struct fern_thread),
    .t_sp = OFF(struct fern_thread, sp),
    .t_stack = OFF(struct fern_thread, stack),
    .t_fn = OFF(struct fern_thread, fn),
    .t_cluster = OFF(struct fern_thread, cluster),
    .t_alloc = OFF(struct fern_thread, alloc),
    .t_run_state = OFF(struct fern_thread, run_state),
    .t_wait_what = OFF(struct fern_thread, wait_what),
    .t_wait_obj = OFF(struct fern_thread, wait_obj),
    .t_id = OFF(struct fern_thread, id),
    .t_name = OFF(struct fern_thread, name),
    .t_name_size = sizeof(((struct fern_thread *)0)->name),
    .alloc_live = A_LIVE,
    .c_next = OFF(struct fern_cluster, next_cluster),
    .c_nworkers = OFF(struct fern_cluster, nworkers),
    .c_workers = OFF(struct fern_cluster, workers),
    .w_cur = OFF(struct worker, cur),
    .w_g0 = OFF(struct worker, g0),
    .w_index = OFF(struct worker, index),
    .w_tid = OFF(struct worker, tid),
    .s_lo = OFF(struct stack, lo),
    .s_size = OFF(struct stack, size),
    ARCH_DEBUG_FRAME,
};
