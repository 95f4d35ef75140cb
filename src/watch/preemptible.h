/* SPDX-License-Identifier: MIT */
/*
 * The table of code that may be preempted (preemptible.c builds it,
 * preempt.c's handler reads it). Private to watch/.
 */
#ifndef FERN_WATCH_PREEMPTIBLE_H
#define FERN_WATCH_PREEMPTIBLE_H

#include "watch/elf.h"

struct code_range {
    uintptr_t lo, hi;
};
struct code_table {
    unsigned n;
    struct code_table *retired; /* older tables, freed at preempt_fini */
    char *what;                 /* what it holds, for fern_dump (malloc'd, may be NULL) */
    struct code_range r[];
};

/* Code in an executable section whose name begins with this is never
 * preempted: fern's own when libfern.a is linked in (CMakeLists.txt renames
 * the static archives' code sections to fern_nopreempt), and code a user
 * excludes the same way (docs/preemption.md). */
#define NOPREEMPT_SECTION "fern_nopreempt"

/* Why the executable's own code is not in the table, if it is not. */
enum exe_state {
    EXE_PREEMPTED,   /* in the table, minus its fern_nopreempt sections */
    EXE_UNREADABLE,  /* its section table could not be read (exe_excluded): nothing known excluded */
    EXE_FERN_INSIDE, /* fern's code is in it outside a fern_nopreempt section */
    EXE_STATIC,      /* linked with -static: libc's code is in it */
};

/* The current table: published with release by table_build, read with
 * acquire in the handler; older tables hang from ->retired until
 * preempt_fini frees them. */
extern struct code_table *preempt_table __attribute__((visibility("hidden")));
/* Build the table from the loaded objects and config.preempt_libs, and
 * publish it: 0, or ENOMEM. */
int table_build(void);
/* Rebuild it if libraries came or went since (monitor thread). */
void table_refresh(void);
/* What the trampoline calls (preempt.c); its address, like preempt_init's,
 * tells table_build whether fern's code is inside the executable. */
void preempt_yield(void) __attribute__((visibility("hidden")));

#endif
