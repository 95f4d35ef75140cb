/* SPDX-License-Identifier: MIT */
/*
 * Which code asynchronous preemption may interrupt (preempt.c's opening
 * says why): the executable's executable segments less its fern_nopreempt
 * sections, and the shared libraries on the user's list
 * (config.preempt_libs, $FERN_PREEMPT_LIBS). Built outside the signal
 * handler with dl_iterate_phdr, at start and again when the loader's
 * add/remove counts change, and published as an immutable array
 * (preempt_table), so the handler only reads.
 */
#include "watch/preemptible.h"

#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

struct code_table *preempt_table;

static struct {
    unsigned long long adds, subs; /* the loader's counts when it was built */
} T;

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Libraries that are never preempted, listed or not: their code holds
 * locks (malloc's, the loader's, stdio's, the unwinder's, the sanitizers'
 * own) that another green thread on the same kernel thread would then wait
 * for with the kernel's futex, forever; or it is fern's. `base` is a file
 * name as loaded. */
static bool runtime_base(const char *base)
{
    static const char *const parts[] = {
        "libc.so",    "libc-2.",     "ld-linux",    "ld64.so",    "ld.so",        "libpthread.",
        "libpthread-", "libdl.",     "libdl-",      "librt.",     "librt-",       "libstdc++.",
        "libgcc_s.",  "libasan.",    "libtsan.",    "libubsan.",  "liblsan.",     "libhwasan.",
        "libfern.",   "libfern-hook.", "linux-vdso", "linux-gate"};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (strncmp(base, parts[i], strlen(parts[i])) == 0)
            return true;
    return false;
}

/* One entry of the list (e, len bytes) names the object loaded from path:
 * an absolute path equal to it, or its file name, or the file name up to a
 * dot ("libfoo" and "libfoo.so" both name libfoo.so.1.2). */
static bool entry_names(const char *e, size_t len, const char *path)
{
    if (memchr(e, '/', len))
        return strlen(path) == len && memcmp(path, e, len) == 0;
    const char *b = base_name(path);
    return strncmp(b, e, len) == 0 && (b[len] == 0 || b[len] == '.');
}

int preempt_libs_check(const char *list)
{
    bool runtime = false;
    if (!*list)
        return 0; /* none */
    for (const char *e = list;;) {
        const char *end = strchr(e, ':');
        size_t len = end ? (size_t)(end - e) : strlen(e);
        if (len == 0 || len > 255 || (memchr(e, '/', len) && e[0] != '/') || e[len - 1] == '/')
            return 1;
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)e[i] <= ' ' || e[i] == 0x7f)
                return 1;
        /* "libc" names libc.so.6 as "libc.so" does. */
        char b[272];
        const char *slash = memrchr(e, '/', len);
        size_t off = slash ? (size_t)(slash + 1 - e) : 0;
        memcpy(b, e + off, len - off);
        b[len - off] = 0;
        if (runtime_base(b) || (strcat(b, ".so"), runtime_base(b)))
            runtime = true;
        if (!end)
            break;
        e = end + 1;
    }
    return runtime ? 2 : 0;
}

/* The object loaded from path is on the user's list. */
static bool listed(const char *path)
{
    const char *e = config.preempt_libs;
    if (!*e || !*path || runtime_base(base_name(path)))
        return false;
    for (;;) {
        const char *end = strchr(e, ':');
        size_t len = end ? (size_t)(end - e) : strlen(e);
        if (entry_names(e, len, path))
            return true;
        if (!end)
            return false;
        e = end + 1;
    }
}

/* A PLT section: its stubs only jump into a shared library (or, for
 * .iplt, to an IFUNC's choice), and the code that called through them may
 * be fern's. A tick there, between fern's call and the library, would
 * preempt fern (qemu-user, which delivers signals at the start of a
 * translated block, lands there on most of fern's calls into libc). */
static bool plt_name(const char *n, size_t room)
{
    static const char *const plt[] = {".plt", ".plt.got", ".plt.sec", ".iplt"};
    for (size_t i = 0; i < sizeof plt / sizeof *plt; i++)
        if (strnlen(n, room) == strlen(plt[i]) && strcmp(n, plt[i]) == 0)
            return true;
    return false;
}

/* The executable's fern_nopreempt* sections and its PLT sections, at their
 * run-time addresses, from its file (section headers are not loaded): up
 * to max in out, and the bytes in fern_nopreempt* sections in *fern. The
 * file is checked to be the one the loader mapped (its program headers are
 * info's: under an explicit `ld.so prog`, /proc/self/exe is the loader).
 * Returns how many, or -1 if that cannot be read or there are more than
 * max (then nothing is known to be excluded). elf.c reads it with raw
 * system calls (fern-hook's wrappers are not for the monitor). */
static int exe_excluded(const struct dl_phdr_info *info, struct code_range *out, int max,
                        uintptr_t *fern)
{
    size_t len = 0;
    const unsigned char *m = elf_map("/proc/self/exe", &len);
    unsigned nsh;
    const ElfW(Shdr) *sh = elf_sections(m, len, &nsh);
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)m;
    int n = -1;
    if (!sh || eh->e_phnum != info->dlpi_phnum ||
        memcmp(m + eh->e_phoff, info->dlpi_phdr, (size_t)eh->e_phnum * sizeof(ElfW(Phdr))) != 0)
        goto out;
    const ElfW(Shdr) *str = &sh[eh->e_shstrndx];
    if (str->sh_type != SHT_STRTAB)
        goto out;
    const char *names = (const char *)m + str->sh_offset;
    size_t plen = strlen(NOPREEMPT_SECTION);
    n = 0;
    for (unsigned i = 0; i < nsh; i++) {
        if (!(sh[i].sh_flags & SHF_EXECINSTR) || sh[i].sh_size == 0 ||
            sh[i].sh_name >= str->sh_size)
            continue;
        const char *nm = names + sh[i].sh_name;
        size_t room = str->sh_size - sh[i].sh_name;
        bool ours = room >= plen && memcmp(nm, NOPREEMPT_SECTION, plen) == 0;
        if (!ours && !plt_name(nm, room))
            continue;
        if (n == max) { /* more than we can exclude: preempt none of it */
            n = -1;
            break;
        }
        out[n].lo = info->dlpi_addr + sh[i].sh_addr;
        out[n].hi = out[n].lo + sh[i].sh_size;
        if (ours)
            *fern += sh[i].sh_size;
        n++;
    }
out:
    elf_unmap(m, len);
    return n;
}

#define EXCLUDED_MAX 64 /* sections of distinct names: the linker merges equal ones */

struct build {
    struct code_table *t;
    unsigned cap;
    bool first;       /* the next object is the executable (dl_iterate_phdr's order) */
    enum exe_state exe;
    uintptr_t excluded; /* bytes of the executable's code in fern_nopreempt sections */
    char libs[512];   /* the listed libraries found, for fern_dump */
    bool oom;
};

static bool table_add(struct build *b, uintptr_t lo, uintptr_t hi)
{
    if (lo >= hi)
        return true;
    if (b->t->n == b->cap) {
        unsigned cap = b->cap * 2;
        struct code_table *t = realloc(b->t, sizeof *t + cap * sizeof(struct code_range));
        if (!t) {
            b->oom = true;
            return false;
        }
        b->t = t;
        b->cap = cap;
    }
    b->t->r[b->t->n].lo = lo;
    b->t->r[b->t->n].hi = hi;
    b->t->n++;
    return true;
}

/* Adds [lo, hi) minus the excluded ranges ex[0..nex). */
static bool add_minus(struct build *b, uintptr_t lo, uintptr_t hi, const struct code_range *ex,
                      int nex)
{
    for (int i = 0; i < nex; i++) {
        if (ex[i].hi <= lo || ex[i].lo >= hi)
            continue;
        return add_minus(b, lo, ex[i].lo > lo ? ex[i].lo : lo, ex + i + 1, nex - i - 1) &&
               add_minus(b, ex[i].hi < hi ? ex[i].hi : hi, hi, ex + i + 1, nex - i - 1);
    }
    return table_add(b, lo, hi);
}

static int add_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct build *b = arg;
    (void)size;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    bool exe = b->first;
    b->first = false;
    if (!exe && !listed(name))
        return 0;
    struct code_range ex[EXCLUDED_MAX];
    int nex = 0;
    /* fern's own code (and fern-hook's) must be excluded if it is here:
     * the executable or a listed library built with libfern.a. */
    /* Hidden symbols: their addresses are fern's code, never a PLT entry. */
    uintptr_t self[] = {(uintptr_t)&preempt_init,
#if ARCH_PREEMPT
                        (uintptr_t)&fern_preempt_tramp,
#endif
                        (uintptr_t)&preempt_yield};
    bool fern_here = false, interp = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        interp |= ph->p_type == PT_INTERP;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X))
            for (size_t k = 0; k < sizeof self / sizeof *self; k++)
                fern_here |= self[k] >= lo && self[k] < hi;
    }
    if (exe) {
        if (!interp) {
            /* No loader: a -static program, libc's code (malloc's, stdio's
             * locks) is the executable's. */
            b->exe = EXE_STATIC;
            return 0;
        }
        if (fern_here && !ARCH_PREEMPT_STATIC) {
            b->exe = EXE_FERN_INSIDE; /* arch.h: ARCH_PREEMPT_STATIC */
            return 0;
        }
        uintptr_t fern_bytes = 0;
        nex = exe_excluded(info, ex, EXCLUDED_MAX, &fern_bytes);
        if (nex < 0) {
            b->exe = fern_here ? EXE_FERN_INSIDE : EXE_UNREADABLE;
            return 0;
        }
        for (size_t k = 0; k < sizeof self / sizeof *self && fern_here; k++) {
            bool covered = false;
            for (int i = 0; i < nex; i++)
                covered |= self[k] >= ex[i].lo && self[k] < ex[i].hi;
            if (!covered) {
                b->exe = EXE_FERN_INSIDE; /* linked from objects not built as libfern.a is */
                return 0;
            }
        }
        b->excluded = fern_bytes;
        b->exe = EXE_PREEMPTED;
    } else {
        /* A listed library with fern inside is left alone, all of it (its
         * fern_nopreempt sections are not looked for): fern_dump names it. */
        const char *why = fern_here ? " (not preempted: fern is inside)" : "";
        size_t l = strlen(b->libs), add = strlen(base_name(name)) + strlen(why);
        if (l + add + 2 < sizeof b->libs)
            snprintf(b->libs + l, sizeof b->libs - l, "%s%s%s", l ? ", " : "", base_name(name),
                     why);
        if (fern_here)
            return 0;
    }
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (!add_minus(b, lo, lo + ph->p_memsz, ex, nex))
            return 1;
    }
    return 0;
}

static int read_counts(struct dl_phdr_info *info, size_t size, void *arg)
{
    unsigned long long *c = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c[0] = info->dlpi_adds;
        c[1] = info->dlpi_subs;
    }
    return 1; /* the counts are the same in every entry */
}

/* (Re)build the table. Monitor thread or fern_init only. */
int table_build(void)
{
    struct build b = {.cap = 16, .first = true, .exe = EXE_UNREADABLE};
    b.t = malloc(sizeof *b.t + b.cap * sizeof(struct code_range));
    if (!b.t)
        return ENOMEM;
    b.t->n = 0;
    b.t->what = NULL;
    unsigned long long c[2] = {0, 0};
    dl_iterate_phdr(read_counts, c);
    dl_iterate_phdr(add_object, &b);
    if (b.oom) {
        free(b.t);
        return ENOMEM;
    }
    char what[1700]; /* the list (< 1024) and the names found (< 512) fit */
    int len = snprintf(what, sizeof what, "%s",
                       b.exe == EXE_FERN_INSIDE
                           ? "no code of the executable (fern's code is in it outside a "
                             NOPREEMPT_SECTION " section)"
                       : b.exe == EXE_STATIC
                           ? "no code of the executable (linked with -static: libc's code is in it)"
                       : b.exe == EXE_UNREADABLE
                           ? "no code of the executable (its section table cannot be read, or "
                             "has more than 64 " NOPREEMPT_SECTION " sections)"
                           : "the executable's code");
    if (b.exe == EXE_PREEMPTED && b.excluded)
        len += snprintf(what + len, sizeof what - (size_t)len,
                        " less %zu bytes in " NOPREEMPT_SECTION " sections", (size_t)b.excluded);
    if (len < (int)sizeof what && *config.preempt_libs)
        snprintf(what + len, sizeof what - (size_t)len, "; of the listed libraries (%s): %s",
                 config.preempt_libs, *b.libs ? b.libs : "none loaded");
    b.t->what = strdup(what); /* NULL: fern_dump says less */
    b.t->retired = preempt_table;
    T.adds = c[0];
    T.subs = c[1];
    STORE(&preempt_table, b.t);
    return 0;
}
/* A library was loaded or unloaded since the table was built: rebuild it
 * (a library on the list may have come). (An unloaded library's range may
 * stay in an old table a handler is reading; the handler only compares
 * addresses, never dereferences them.) */
void table_refresh(void)
{
    unsigned long long c[2] = {0, 0};
    dl_iterate_phdr(read_counts, c);
    if (c[0] != T.adds || c[1] != T.subs)
        table_build();
}
