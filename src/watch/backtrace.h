/* SPDX-License-Identifier: MIT */
/*
 * Symbols and backtraces for the deadlock reports (backtrace.c). Private
 * to watch/.
 */
#ifndef FERN_WATCH_BACKTRACE_H
#define FERN_WATCH_BACKTRACE_H

#include "watch/elf.h"

/* A mutex as reported (its symbol and offset, and its address) into buf. */
void mutex_name(char *buf, size_t len, const void *m);
/* t's backtrace on stderr, indented: one line per frame. t must be parked
 * and unable to leave (deadlock.c's opening). */
void print_backtrace(fern_thread *t);
/* Drop the objects mapped for a report's symbols (after each report). */
void sym_release(void);

#endif
