/* SPDX-License-Identifier: MIT */
/*
 * A reader of ELF files' section tables, for the two places that need what
 * the loader does not map: preemptible.c (the executable's fern_nopreempt
 * sections) and backtrace.c (an object's .symtab). One set of bounds checks
 * for both: a file that is truncated, of another class, or whose tables
 * point outside it is refused as a whole, so callers index its sections
 * without checking again.
 *
 * Raw system calls: both callers run on the monitor thread (or in
 * fern_init), where libc's open/close may be fern-hook's wrappers, whose
 * close updates the runtime's descriptor table unsynchronised with green
 * threads (see task_sleeping in preempt.c). The monitor's own descriptor
 * is none of that table's business.
 */
#include "watch/elf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

const void *elf_map(const char *path, size_t *len)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *m = MAP_FAILED;
    if (syscall(SYS_fstat, fd, &st) == 0 && st.st_size >= (off_t)sizeof(ElfW(Ehdr)))
        m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    syscall(SYS_close, fd);
    if (m == MAP_FAILED)
        return NULL;
    *len = (size_t)st.st_size;
    return m;
}

void elf_unmap(const void *m, size_t len)
{
    if (m)
        munmap((void *)m, len);
}

/* off and size (of n entries of es bytes, or bytes if es is 1) lie in len. */
static bool inside(uint64_t off, uint64_t n, uint64_t es, size_t len)
{
    return off <= len && (n == 0 || (len - off) / es >= n);
}

const ElfW(Shdr) *elf_sections(const void *m, size_t len, unsigned *n)
{
    const unsigned char *b = m;
    const ElfW(Ehdr) *eh = m;
    if (!m || len < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != (__ELF_NATIVE_CLASS == 64 ? ELFCLASS64 : ELFCLASS32) ||
        eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff == 0 || eh->e_shnum == 0 ||
        eh->e_shstrndx >= eh->e_shnum || !inside(eh->e_shoff, eh->e_shnum, sizeof(ElfW(Shdr)), len))
        return NULL; /* no section table (or an extended one, which only objects need) */
    if (eh->e_phnum &&
        (eh->e_phentsize != sizeof(ElfW(Phdr)) ||
         !inside(eh->e_phoff, eh->e_phnum, sizeof(ElfW(Phdr)), len)))
        return NULL;
    const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(b + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type != SHT_NOBITS && !inside(sh[i].sh_offset, sh[i].sh_size, 1, len))
            return NULL;
    *n = eh->e_shnum;
    return sh;
}
