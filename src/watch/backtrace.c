/* SPDX-License-Identifier: MIT */
/*
 * What a deadlock report prints of a thread and a mutex (deadlock.c):
 * symbols from each object's own .symtab (the file, mapped for the report:
 * static functions and variables included), else .dynsym, each frame also
 * as `object+0xoffset` for addr2line; and the backtrace of a parked thread,
 * walked by the architecture (arch.h: arch_stack_walk, x86_64 only so far).
 */
#include "watch/backtrace.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>

#define SYM_OBJS 16  /* objects mapped during one report */
#define BT_FRAMES 32 /* frames printed per thread */

struct sym_obj {
    uintptr_t lo, hi;  /* its loaded segments' span */
    uintptr_t bias;    /* load address - file address */
    char path[256];
    void *map;         /* the file, mapped; NULL if unreadable */
    size_t maplen;
    const ElfW(Sym) *syms;
    size_t nsyms;
    const char *strs;
    size_t strslen;
};

static struct {
    struct sym_obj o[SYM_OBJS];
    unsigned n;
} S;

struct phdr_find {
    uintptr_t addr;
    struct sym_obj *out;
    bool found;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct phdr_find *f = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    bool in = false;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo)
            lo = a;
        if (a + ph->p_memsz > hi)
            hi = a + ph->p_memsz;
        in |= f->addr >= a && f->addr < a + ph->p_memsz;
    }
    if (!in)
        return 0;
    f->out->lo = lo;
    f->out->hi = hi;
    f->out->bias = info->dlpi_addr;
    const char *name = info->dlpi_name;
    f->out->path[0] = 0;
    if (!name || !*name) {
        /* The main program (the vDSO has a name). */
        ssize_t n = readlink("/proc/self/exe", f->out->path, sizeof f->out->path - 1);
        f->out->path[n > 0 ? n : 0] = 0;
    } else {
        snprintf(f->out->path, sizeof f->out->path, "%s", name);
    }
    f->found = true;
    return 1;
}

/* Map the file and find its symbol table; a file that is not a readable
 * ELF of this process's class leaves syms NULL (the object still names
 * itself). elf_sections checks every offset against the file's size. */
static void sym_load(struct sym_obj *o)
{
    o->map = NULL;
    o->syms = NULL;
    if (!o->path[0] || !(o->map = (void *)elf_map(o->path, &o->maplen)))
        return;
    unsigned n;
    const ElfW(Shdr) *sh = elf_sections(o->map, o->maplen, &n);
    const ElfW(Shdr) *pick = NULL;
    for (unsigned i = 0; sh && i < n; i++)
        if (sh[i].sh_type == SHT_SYMTAB || (sh[i].sh_type == SHT_DYNSYM && !pick))
            pick = &sh[i];
    if (!pick || pick->sh_link >= n || sh[pick->sh_link].sh_type != SHT_STRTAB)
        return;
    const unsigned char *b = o->map;
    const ElfW(Shdr) *str = &sh[pick->sh_link];
    o->syms = (const ElfW(Sym) *)(b + pick->sh_offset);
    o->nsyms = pick->sh_size / sizeof(ElfW(Sym));
    o->strs = (const char *)(b + str->sh_offset);
    o->strslen = str->sh_size;
    /* Every name ends inside the table. */
    if (!o->strslen || o->strs[o->strslen - 1])
        o->syms = NULL;
}

static struct sym_obj *sym_object(uintptr_t addr)
{
    for (unsigned i = 0; i < S.n; i++)
        if (addr >= S.o[i].lo && addr < S.o[i].hi)
            return &S.o[i];
    struct sym_obj tmp;
    struct phdr_find f = {addr, &tmp, false};
    dl_iterate_phdr(find_object, &f);
    if (!f.found)
        return NULL;
    struct sym_obj *o = S.n < SYM_OBJS ? &S.o[S.n++] : NULL;
    if (!o) {
        /* More objects than slots: reuse the last one. */
        o = &S.o[SYM_OBJS - 1];
        elf_unmap(o->map, o->maplen);
    }
    *o = tmp;
    sym_load(o);
    return o;
}

void sym_release(void)
{
    for (unsigned i = 0; i < S.n; i++)
        elf_unmap(S.o[i].map, S.o[i].maplen);
    S.n = 0;
}

/* The symbol of o holding file address a (a function or an object,
 * defined, with a size), or NULL; *off is a's offset in it. */
static const char *sym_find(const struct sym_obj *o, uintptr_t a, uintptr_t *off)
{
    const ElfW(Sym) *best = NULL;
    for (size_t i = 0; o->syms && i < o->nsyms; i++) {
        const ElfW(Sym) *y = &o->syms[i];
        unsigned type = y->st_info & 0xf; /* ELF32_ST_TYPE and ELF64_ST_TYPE alike */
        if ((type != STT_FUNC && type != STT_OBJECT) || y->st_shndx == SHN_UNDEF ||
            a < y->st_value || a - y->st_value >= y->st_size || y->st_name >= o->strslen)
            continue;
        if (!best || y->st_size < best->st_size)
            best = y; /* the innermost of nested symbols */
    }
    if (!best)
        return NULL;
    *off = a - best->st_value;
    return o->strs + best->st_name;
}

/* __cxa_demangle when the process has a C++ runtime (looked up, not
 * linked), set by deadlock_prepare. */
static char *(*cxa_demangle)(const char *, char *, size_t *, int *);

/* A C++ name demangled by the C++ runtime when the process has one, else
 * as it is. *freeme gets what to free. */
static const char *demangle(const char *name, char **freeme)
{
    *freeme = NULL;
    if (strncmp(name, "_Z", 2))
        return name;
    int st = -1;
    char *d = cxa_demangle ? cxa_demangle(name, NULL, NULL, &st) : NULL;
    if (!d || st)
        return name;
    *freeme = d;
    return d;
}

/* "name+0xoff (object+0xoff)" for addr; look_at is the address to find
 * the symbol for (a return address minus 1: the call, which may be the
 * function's last instruction). Objects print by their full path, for
 * addr2line -e. Used by the x86_64 backtraces only. */
static __attribute__((unused)) void sym_describe(char *buf, size_t len, uintptr_t addr,
                                                 uintptr_t look_at)
{
    struct sym_obj *o = sym_object(look_at);
    if (!o) {
        snprintf(buf, len, "?");
        return;
    }
    uintptr_t off = 0;
    /* No dladdr fallback: it takes the loader's lock (see
     * deadlock_prepare), and it would only find .dynsym, which sym_find
     * reads already when the file has no .symtab. */
    const char *name = sym_find(o, look_at - o->bias, &off);
    off += addr - look_at;
    const char *file = o->path[0] ? o->path : "?";
    char *freeme;
    if (name)
        name = demangle(name, &freeme);
    if (name) {
        snprintf(buf, len, "%s+0x%lx (%s+0x%lx)", name, (unsigned long)off, file,
                 (unsigned long)(addr - o->bias));
        free(freeme);
    } else
        snprintf(buf, len, "%s+0x%lx", file, (unsigned long)(addr - o->bias));
}

/* A mutex as reported: the symbol it lies in, with the offset inside it
 * unless 0 (a fern_mutex inside a global struct), and its address; only
 * the address when no symbol holds it (heap, stack). */
void mutex_name(char *buf, size_t len, const void *m)
{
    struct sym_obj *o = sym_object((uintptr_t)m);
    uintptr_t off = 0;
    const char *name = o ? sym_find(o, (uintptr_t)m - o->bias, &off) : NULL;
    if (!name) {
        snprintf(buf, len, "%p", m);
        return;
    }
    char *freeme;
    name = demangle(name, &freeme);
    if (off)
        snprintf(buf, len, "%s+0x%lx (%p)", name, (unsigned long)off, m);
    else
        snprintf(buf, len, "%s (%p)", name, m);
    free(freeme);
}

#if defined(FERN_TSAN)
/* ThreadSanitizer's dynamic annotations (its runtime defines them). */
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#endif

/* t's backtrace on stderr, indented: one line per frame. t must be parked
 * and unable to leave (see the top of this file). */
void print_backtrace(fern_thread *t)
{
#if ARCH_STACK_WALK
    uintptr_t pcs[BT_FRAMES];
    const char *how = "";
    if (LOAD(&t->run_state) != T_PARKED) {
        fprintf(stderr, "    (no backtrace: the thread is no longer parked)\n");
        return;
    }
#if defined(FERN_TSAN)
    /* The stack header and frames were written before t parked and nobody
     * writes them while it stays parked (deadlock.c's opening), but the
     * park's run_state store is relaxed (a hot path), so ThreadSanitizer
     * sees no order between those writes and the walk's reads. */
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
    struct stack *st = LOAD_RELAXED(&t->stack);
    uintptr_t lo = st ? (uintptr_t)st->lo : 0, hi = st ? lo + st->size : 0;
    /* A hibernated stack is restored by the reads above (hib_fault). */
    unsigned n = arch_stack_walk(hib_real_sp(t), lo, hi, pcs, BT_FRAMES, &how);
#if defined(FERN_TSAN)
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
    if (strcmp(how, "libunwind"))
        fprintf(stderr, "    (backtrace by %s)\n", how);
    for (unsigned i = 0; i < n; i++) {
        char buf[512];
        /* pcs[0] is a return address too (into switch_to). */
        sym_describe(buf, sizeof buf, pcs[i], pcs[i] - 1);
        fprintf(stderr, "    #%u 0x%lx %s\n", i, (unsigned long)pcs[i], buf);
    }
    if (n == BT_FRAMES)
        fprintf(stderr, "    ...\n");
#else
    (void)t;
    fprintf(stderr, "    (no backtrace: parked stacks are walked on x86_64 only)\n");
#endif
}

/* dlopen, dlsym and dladdr take glibc's loader lock (dl_load_lock), and
 * dlopen holds it while it runs the new object's constructors. A report
 * runs with rt.boot_lock held, and a constructor may call into fern
 * (fern_init, fern_dump, fern_cluster_create), which takes rt.boot_lock:
 * so nothing under rt.boot_lock may take the loader's lock. What the
 * report needs from the loader (libunwind, __cxa_demangle) is therefore
 * looked up here, once, by monitor_start, which holds no fern lock; the
 * report itself uses only dl_iterate_phdr, which takes the loader's write
 * lock (dl_load_write_lock), held by dlopen only while it links the new
 * object into its list, never across a constructor. Before the monitor
 * thread starts, so the monitor reads what this wrote. */
void deadlock_prepare(void)
{
    static bool done;
    if (done || config.deadlock == CONFIG_DEADLOCK_OFF)
        return;
    done = true;
    cxa_demangle =
        (char *(*)(const char *, char *, size_t *, int *))dlsym(RTLD_DEFAULT, "__cxa_demangle");
#if ARCH_STACK_WALK
    arch_stack_walk_prepare();
#endif
}
