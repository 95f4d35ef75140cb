/* SPDX-License-Identifier: MIT */
/*
 * elf.c's reader of ELF section tables, for preemptible.c (the
 * executable's fern_nopreempt sections) and backtrace.c (an object's
 * .symtab). Private to watch/.
 */
#ifndef FERN_WATCH_ELF_H
#define FERN_WATCH_ELF_H

#include "watch/watch.h"

#include <link.h> /* ElfW */

/* The file at path mapped read-only (raw system calls), NULL if it cannot
 * be; *len its size. */
const void *elf_map(const char *path, size_t *len);
void elf_unmap(const void *m, size_t len);
/* The section table of the mapped ELF file m (len bytes), NULL unless it is
 * of this process's class and its program and section headers and every
 * section's contents (SHT_NOBITS aside) lie inside the file; *n entries. */
const ElfW(Shdr) *elf_sections(const void *m, size_t len, unsigned *n);

#endif
