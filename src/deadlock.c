/* SPDX-License-Identifier: MIT */
/*
 * Deadlock reports, made by the monitor (monitor.c) every DL_SCAN_NS.
 * A scan walks every thread descriptor, so while workers run it is made
 * only when at least two green threads are parked in fern_mutex_lock
 * without a deadline (per-worker counts, sync.c): a cycle needs two. With
 * a million parked threads a walk takes tens of milliseconds and holds the
 * chunk lock that spawning a thread may need.
 *
 * Mutex cycles. A green thread parked without a deadline in
 * fern_mutex_lock records the mutex in wait_what/wait_obj (sync.c). A scan
 * collects those threads, reads each mutex's owner, and follows owner ->
 * the mutex that owner waits for -> its owner ... A walk that comes back to
 * a thread it passed is a cycle: every thread in it waits for a mutex only
 * another thread of the cycle can unlock, so nothing (no plain thread, no
 * timer) can wake any of them. A cycle is reported when two consecutive
 * scans find it (the reads are not one atomic snapshot), once, on stderr,
 * naming each thread's id and name and the mutex it waits for. The program
 * keeps running (unless FERN_DEADLOCK=fatal).
 *
 * Reading a mutex the monitor does not own: the waiter is queued on it, so
 * fern_mutex_destroy says EBUSY and the memory stays, as long as the waiter
 * is still parked there. The owner is read first, with process_vm_readv
 * (a bad address gives EFAULT, never a fault, should the waiter have left
 * and the memory gone meanwhile), and used only if the waiter is still
 * parked on the same mutex afterwards. Where process_vm_readv is refused
 * (ENOSYS under qemu-user, EPERM under seccomp profiles that keep it for
 * debuggers) the word goes through a pipe instead: write(2) from a bad
 * address also gives EFAULT. The pipe is the monitor's own, made on first
 * use and again in a forked child (sharing it would mix two processes'
 * words).
 *
 * What a report shows. Each thread of a cycle with its backtrace, and each
 * mutex by the symbol it lies in where it has one (a static or global
 * fern_mutex; a heap one is its address). Every involved thread is parked
 * (its registers saved at t->sp by fern_ctx_switch) and stays parked, as
 * nothing can wake it and rt.boot_lock, held here, keeps fern_shutdown out,
 * so its stack is stable memory for the walk; it is checked to be parked
 * still just before. The walk: libunwind (libunwind.so.8, opened with dlopen
 * when the monitor starts, not linked: a dependency only where it is installed)
 * from a context made of the saved registers, which follows .eh_frame like
 * a debugger; without it, the saved frame-pointer chain, kept inside the
 * thread's stack (complete only for code built with frame pointers). x86_64
 * only: the aarch64 saved frame is not described yet (ARCH_DEBUG_FRAME).
 * Symbols come from each object's own .symtab (the file, mapped for the
 * report: static functions and variables included), else .dynsym; every
 * frame also gets `object+0xoffset`, which addr2line -e object resolves to a
 * source line.
 *
 * FERN_DEADLOCK (config.c): report (the default), fatal (abort(3) after the
 * report, so a deadlocked service dies with a core instead of hanging), or
 * off (no scans, no reports).
 *
 * Everyone asleep. Go's "all goroutines are asleep", only when fern can
 * prove it: every live green thread is parked on a fern primitive without a
 * deadline (not a sleep, not an fd, not the blocking pool: those end by
 * themselves), and the process has no kernel thread besides fern's workers,
 * the monitor, the dump-signal thread, the blocking pool's helpers and the
 * callers waiting in fern_run (counted in /proc/self/task). Any other kernel thread could
 * still wake someone, so then nothing is said. Reported once per episode
 * (until some thread runs again), also after two consecutive scans.
 */
#include "internal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#define DL_SCAN_NS 500000000  /* two scans, so a report within ~1-1.5 s */
#define DL_MAX 4096           /* mutex waiters examined per scan */
#define DL_KEEP 64            /* cycles remembered (reported or candidate) */

struct dl_entry {
    fern_thread *t;
    const void *m;
    fern_thread *owner;      /* NULL: not a parked green thread's */
    uint64_t id;
    char name[32];
};

struct dl_cycle {
    uint64_t key;            /* hash of the member ids, order-free */
    uint64_t last_scan;      /* the scan that last found it */
    bool reported;
};

static struct {
    int64_t next_scan;
    uint64_t scan;
    uint64_t reported;
    struct dl_cycle cycles[DL_KEEP];
    unsigned ncycles;
    bool asleep_candidate, asleep_reported;
    uint64_t asleep_switches;
    struct dl_entry e[DL_MAX];
    unsigned n;
} D;

uint64_t deadlocks_reported(void) { return LOAD_RELAXED(&D.reported); }

void deadlock_reset(void)
{
    memset(&D.cycles, 0, sizeof D.cycles);
    D.ncycles = 0;
    D.next_scan = 0;
    D.scan = 1;
    D.asleep_candidate = D.asleep_reported = false;
    STORE_RELAXED(&D.reported, 0);
}

static struct {
    bool use_pipe;      /* process_vm_readv was refused */
    int fd[2];
    pid_t pid;          /* the process that made fd */
} R = {false, {-1, -1}, 0};

static bool read_word_pipe(const void *addr, void **out)
{
    pid_t me = getpid();
    if (R.pid != me) {
        if (R.fd[0] >= 0) {
            close(R.fd[0]);
            close(R.fd[1]);
        }
        R.fd[0] = R.fd[1] = -1;
        if (pipe2(R.fd, O_CLOEXEC | O_NONBLOCK))
            return false;
        R.pid = me;
    }
    /* At most PIPE_BUF bytes: written whole or not at all, and read back
     * whole, so the pipe is empty between calls. Raw system calls, as
     * process_vm_readv is one: the word is read racily on purpose (see
     * above), which libc's write would show ThreadSanitizer (its
     * interceptor reads the buffer) and fern-hook would interpose. */
    if (syscall(SYS_write, R.fd[1], addr, sizeof *out) != (long)sizeof *out)
        return false;
    return syscall(SYS_read, R.fd[0], out, sizeof *out) == (long)sizeof *out;
}

static bool read_word(const void *addr, void **out)
{
    if (!R.use_pipe) {
        struct iovec local = {out, sizeof *out}, remote = {(void *)addr, sizeof *out};
        if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof *out)
            return true;
        if (errno != ENOSYS && errno != EPERM)
            return false;
        R.use_pipe = true;
    }
    return read_word_pipe(addr, out);
}

/* ---- symbols: each object's .symtab, else .dynsym ---- */

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

static void sym_release(void)
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
static void mutex_name(char *buf, size_t len, const void *m)
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

/* ---- backtraces of parked threads ---- */

#if defined(FERN_TSAN)
/* ThreadSanitizer's dynamic annotations (its runtime defines them). */
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#endif

#if defined(__x86_64__)
/* libunwind's x86_64 entry points (its header is not needed: the context
 * is a ucontext_t, a cursor 127 words, registers numbered as below). */
enum { UNW_RBX = 3, UNW_RBP = 6, UNW_RSP = 7, UNW_RIP = 16 };
static struct {
    int (*init_local)(void *cursor, ucontext_t *uc);
    int (*step)(void *cursor);
    int (*get_reg)(void *cursor, int reg, uint64_t *val);
} U;
static uint64_t unw_cursor[256]; /* >= UNW_TDEP_CURSOR_LEN (127) words */
static ucontext_t unw_uc;

/* Resolved by deadlock_prepare, before any report. */
static void unw_open(void)
{
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        U.init_local = (int (*)(void *, ucontext_t *))dlsym(h, "_ULx86_64_init_local");
        U.step = (int (*)(void *))dlsym(h, "_ULx86_64_step");
        U.get_reg = (int (*)(void *, int, uint64_t *))dlsym(h, "_ULx86_64_get_reg");
        if (!U.init_local || !U.step || !U.get_reg)
            U.init_local = NULL;
    }
}

/* t's return addresses, innermost first (pcs[0]: where fern_ctx_switch
 * returns to). *how says which walk ran. */
static unsigned stack_walk(fern_thread *t, uintptr_t *pcs, unsigned max, const char **how)
{
    const uint64_t *f = LOAD_RELAXED(&t->sp);
    if (!f || !max)
        return 0;
    /* The frame of ARCH_DEBUG_FRAME: r15..rbp at 8..48, rip at 56. */
    uint64_t rip = f[7], rbp = f[6];
    uintptr_t sp = (uintptr_t)f + 64;
    unsigned n = 0;
    if (U.init_local) {
        *how = "libunwind";
        memset(&unw_uc, 0, sizeof unw_uc);
        greg_t *g = unw_uc.uc_mcontext.gregs;
        g[REG_RIP] = (greg_t)rip;
        g[REG_RSP] = (greg_t)sp;
        g[REG_RBP] = (greg_t)rbp;
        g[REG_RBX] = (greg_t)f[5];
        g[REG_R12] = (greg_t)f[4];
        g[REG_R13] = (greg_t)f[3];
        g[REG_R14] = (greg_t)f[2];
        g[REG_R15] = (greg_t)f[1];
        if (U.init_local(unw_cursor, &unw_uc) == 0) {
            do {
                uint64_t ip;
                if (U.get_reg(unw_cursor, UNW_RIP, &ip) || !ip)
                    break;
                pcs[n++] = (uintptr_t)ip;
            } while (n < max && U.step(unw_cursor) > 0);
            return n;
        }
    }
    /* Frame pointers: each frame's rbp holds the caller's rbp, then the
     * return address; followed while it stays inside t's stack and goes
     * up. */
    *how = "frame pointers: libunwind.so.8 not found or unusable; frames of code built without "
           "them are missing";
    pcs[n++] = (uintptr_t)rip;
#if defined(FERN_TSAN)
    /* The stack header and frames were written before t parked and nobody
     * writes them while it stays parked (the top of this file), but the
     * park's run_state store is relaxed (a hot path), so ThreadSanitizer
     * sees no order between those writes and these reads. */
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
    struct stack *st = LOAD_RELAXED(&t->stack);
    uintptr_t lo = st ? (uintptr_t)st->lo : 0, hi = st ? lo + st->size : 0;
    uintptr_t fp = (uintptr_t)rbp, prev = sp - 16;
    while (n < max && fp > prev && fp >= lo && fp + 16 <= hi && !(fp & 7)) {
        const uintptr_t *fr = (const uintptr_t *)fp;
        if (!fr[1])
            break;
        pcs[n++] = fr[1];
        prev = fp;
        fp = fr[0];
    }
#if defined(FERN_TSAN)
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
    return n;
}
#endif

/* t's backtrace on stderr, indented: one line per frame. t must be parked
 * and unable to leave (see the top of this file). */
static void print_backtrace(fern_thread *t)
{
#if defined(__x86_64__)
    uintptr_t pcs[BT_FRAMES];
    const char *how = "";
    if (LOAD(&t->run_state) != T_PARKED) {
        fprintf(stderr, "    (no backtrace: the thread is no longer parked)\n");
        return;
    }
    unsigned n = stack_walk(t, pcs, BT_FRAMES, &how);
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

/* After a report: abort under FERN_DEADLOCK=fatal. */
static void report_done(const char *keeps_running)
{
    sym_release();
    if (config.deadlock == CONFIG_DEADLOCK_FATAL) {
        fprintf(stderr, "fern: deadlock is fatal (FERN_DEADLOCK=fatal): aborting\n");
        fflush(stderr);
        abort();
    }
    fprintf(stderr, "%s\n", keeps_running);
    fflush(stderr);
    STORE_RELAXED(&D.reported, D.reported + 1);
}

static bool parked_on(fern_thread *t, const char *what, const void *obj)
{
    const char *w = LOAD(&t->wait_what);
    return LOAD(&t->run_state) == T_PARKED && w && strcmp(w, what) == 0 &&
           LOAD(&t->wait_obj) == obj && !LOAD(&t->wait_timed);
}

/* thread walk state for the "everyone asleep" test */
struct census {
    unsigned live, asleep;
};

static bool untimed_primitive(const char *what)
{
    return strcmp(what, "sleep") && strncmp(what, "fd ", 3) && strcmp(what, "blocking pool");
}

static void collect(fern_thread *t, void *arg)
{
    struct census *c = arg;
    c->live++;
    const char *what = LOAD(&t->wait_what);
    if (LOAD(&t->run_state) != T_PARKED || !what || LOAD(&t->wait_timed))
        return;
    if (untimed_primitive(what))
        c->asleep++;
    if (strcmp(what, "mutex") || D.n == DL_MAX)
        return;
    struct dl_entry *e = &D.e[D.n];
    e->t = t;
    e->m = LOAD(&t->wait_obj);
    e->owner = NULL;
    e->id = LOAD_RELAXED(&t->id); /* the descriptor may be respawned meanwhile */
    for (int i = 0; i < 31; i++)
        e->name[i] = LOAD_RELAXED(&t->name[i]);
    e->name[31] = 0;
    D.n++;
}

static struct dl_entry *entry_of(const fern_thread *t)
{
    for (unsigned i = 0; i < D.n; i++)
        if (D.e[i].t == t)
            return &D.e[i];
    return NULL;
}

static struct dl_cycle *cycle_slot(uint64_t key)
{
    for (unsigned i = 0; i < D.ncycles; i++)
        if (D.cycles[i].key == key)
            return &D.cycles[i];
    if (D.ncycles == DL_KEEP) {
        /* Forget an unreported candidate, or the oldest entry. */
        unsigned victim = 0;
        for (unsigned i = 0; i < D.ncycles; i++)
            if (!D.cycles[i].reported) {
                victim = i;
                break;
            }
        D.cycles[victim] = D.cycles[--D.ncycles];
    }
    struct dl_cycle *c = &D.cycles[D.ncycles++];
    memset(c, 0, sizeof *c);
    c->key = key;
    return c;
}

static void report_cycle(struct dl_entry *start, unsigned len)
{
    fprintf(stderr, "fern: deadlock: %u green threads wait for each other's fern_mutex:\n", len);
    struct dl_entry *e = start;
    for (unsigned i = 0; i < len; i++) {
        struct dl_entry *next = entry_of(e->owner);
        char mname[256];
        mutex_name(mname, sizeof mname, e->m);
        fprintf(stderr, "  thread %llu \"%s\" waits for mutex %s held by thread %llu \"%s\"\n",
                (unsigned long long)e->id, e->name, mname, (unsigned long long)next->id,
                next->name);
        if (parked_on(e->t, "mutex", e->m))
            print_backtrace(e->t);
        else
            fprintf(stderr, "    (no backtrace: the thread is no longer parked there)\n");
        e = next;
    }
    report_done("fern: the program keeps running; these threads never will");
}

/* Walk from every entry; each cycle is found from each of its members, so
 * it is handled once: from its member with the lowest id. */
static void find_cycles(void)
{
    for (unsigned i = 0; i < D.n; i++) {
        struct dl_entry *e = &D.e[i];
        void *owner;
        if (!read_word(&((const fern_mutex *)e->m)->owner_, &owner))
            continue;
        if (!parked_on(e->t, "mutex", e->m))
            continue; /* it left: the value read means nothing */
        e->owner = owner;
    }
    for (unsigned i = 0; i < D.n; i++) {
        struct dl_entry *start = &D.e[i], *e = start;
        unsigned len = 0;
        uint64_t key = 0, min_id = UINT64_MAX;
        do {
            if (!e->owner || len > D.n)
                break;
            key += e->id * 0x9e3779b97f4a7c15ull ^ (e->id >> 7); /* order-free */
            if (e->id < min_id)
                min_id = e->id;
            len++;
            e = entry_of(e->owner);
        } while (e && e != start);
        if (e != start || start->id != min_id)
            continue;
        struct dl_cycle *c = cycle_slot(key);
        if (c->last_scan + 1 == D.scan && !c->reported) {
            report_cycle(start, len);
            c->reported = true;
        }
        c->last_scan = D.scan;
    }
}

/* Kernel threads in the process. */
static unsigned task_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    unsigned n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* fern's own kernel threads plus callers blocked in fern_run. */
static unsigned fern_task_count(void)
{
    unsigned n = 1 + crash_threads() + blocking_threads() + LOAD(&rt.run_waiters);
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        for (unsigned i = 0; i < c->nworkers; i++)
            n += i < c->nbase || LOAD(&c->workers[i]->spare) != SPARE_DORMANT;
    return n;
}

static uint64_t switches_total(void)
{
    uint64_t n = 0;
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        for (unsigned i = 0; i < c->nworkers; i++)
            n += LOAD_RELAXED(&c->workers[i]->n_switches);
    return n;
}

/* Green threads parked in fern_mutex_lock without a deadline: a sum of
 * per-worker deltas, each read relaxed, so only an estimate while threads
 * park and resume, exact when they do not. */
static int64_t mutex_parked(void)
{
    int64_t n = 0;
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        for (unsigned i = 0; i < c->nworkers; i++)
            n += LOAD_RELAXED(&c->workers[i]->mutex_parked_delta);
    return n;
}

#define ASLEEP_BT_MAX 16 /* threads of an "all asleep" report given a backtrace */

struct asleep_bt {
    unsigned n;
};

static void asleep_backtrace(fern_thread *t, void *arg)
{
    struct asleep_bt *a = arg;
    if (a->n++ >= ASLEEP_BT_MAX || LOAD(&t->run_state) != T_PARKED)
        return;
    char name[32];
    for (int i = 0; i < 31; i++)
        name[i] = LOAD_RELAXED(&t->name[i]);
    name[31] = 0;
    const char *what = LOAD_RELAXED(&t->wait_what);
    fprintf(stderr, "  thread %llu \"%s\" parked on %s:\n", (unsigned long long)t->id, name,
            what ? what : "?");
    print_backtrace(t);
}

static void report_asleep(unsigned live)
{
    fprintf(stderr, "fern: deadlock: all %u green threads are asleep on fern primitives and no "
                    "other thread can wake them:\n",
            live);
    threads_dump(stderr);
    struct asleep_bt a = {0};
    threads_walk(asleep_backtrace, &a);
    if (a.n > ASLEEP_BT_MAX)
        fprintf(stderr, "  (backtraces of the first %u threads only)\n", ASLEEP_BT_MAX);
    report_done("fern: the program keeps running");
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
#if defined(__x86_64__)
    unw_open();
#endif
}

/* rt.boot_lock held. Returns when the monitor should look again (it may
 * sleep until then although every worker is idle: that is the state a
 * deadlock leaves), or FERN_FOREVER. */
int64_t deadlock_watch(int64_t now, bool workers_busy)
{
    if (config.deadlock == CONFIG_DEADLOCK_OFF)
        return FERN_FOREVER;
    if (now < D.next_scan)
        return D.next_scan;
    /* While workers run, a scan can only find a mutex cycle, and that needs
     * two parked lockers: without them, walking every thread (a million,
     * under the chunk lock that spawn takes) would only cost. */
    if (workers_busy && mutex_parked() < 2) {
        D.asleep_candidate = D.asleep_reported = false;
        D.asleep_switches = switches_total();
        return FERN_FOREVER;
    }
    D.next_scan = now + DL_SCAN_NS;
    D.n = 0;
    D.scan++;
    struct census cs = {0, 0};
    threads_walk(collect, &cs);
    bool candidates = D.n >= 2;
    if (candidates)
        find_cycles();
    /* Everyone asleep: judged only while every worker is idle. */
    bool asleep = !workers_busy && cs.live > 0 && cs.asleep == cs.live &&
                  task_count() == fern_task_count();
    uint64_t sw = switches_total();
    /* Not yet a candidate: become one now, even if no switch happened
     * since asleep_switches was last recorded (the busy path above records
     * it without a candidate: the last switch may precede it, and the
     * report would then never come). */
    if (!asleep || sw != D.asleep_switches || !D.asleep_candidate) {
        if (!asleep)
            D.asleep_reported = false;
        D.asleep_candidate = asleep;
        D.asleep_switches = sw;
    } else if (D.asleep_candidate && !D.asleep_reported) {
        report_asleep(cs.live);
        D.asleep_reported = true;
    }
    if (asleep && !D.asleep_reported)
        return D.next_scan;
    return candidates ? D.next_scan : FERN_FOREVER;
}
