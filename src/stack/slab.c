/* SPDX-License-Identifier: MIT */
/*
 * Stacks' memory: reserved address space, committed on touch, guarded.
 * Carving slots from slabs and putting their guards in; the pools, trimming
 * and binding that hand them out are stack.c.
 *
 * Slabs. Stacks are carved from large MAP_NORESERVE|MAP_ANONYMOUS slabs, one
 * size class (a power of two from 16 KiB to 1 GiB) per slab; a slot is a
 * guard page followed by the stack. The page size is sysconf's (4, 16 or
 * 64 KiB on aarch64), never assumed: a class smaller than a page gets a
 * whole page, and trimming keeps page-aligned ranges. Nothing is committed until touched, and
 * MADV_NOHUGEPAGE keeps transparent huge pages from turning a one-page stack
 * into 2 MiB. A slab is one mapping, so a million stacks cost a few thousand
 * mappings, far below vm.max_map_count (65530 by default).
 *
 * Guards, best first (fern_stats says which each stack got):
 *  1. MADV_GUARD_INSTALL (Linux 6.13+): a guard marker inside the slab's
 *     mapping: faults on access, costs no mapping and no memory. Used only
 *     if a probe guard really refuses access: an emulator (qemu-user) may
 *     accept the advice and ignore it.
 *  2. mprotect(PROT_NONE) on the guard page: splits the mapping, two mappings
 *     per stack, so only GUARD_BUDGET stacks get one (well under the limit,
 *     leaving room for the program's own mappings).
 *  3. Beyond the budget: canary words spread over the stack's lowest page,
 *     checked with the thread's stack pointer at every switch away from it.
 *     An overflow is then caught late (at the thread's next switch) and may
 *     already have corrupted the neighbouring slot; writing the canaries
 *     also commits the stack's lowest page (4 KiB more per stack).
 * FERN_GUARD=mprotect|canary forces a weaker mode (for tests and for kernels
 * that misreport); FERN_GUARD_BUDGET sets the mprotect budget.
 *
 * Memory ordering: slabs and the global pools are under S.lock.
 * guard_mode and guard_batch are relaxed: a downgrade is a hint for later
 * slots and each slot records the mode it got. The counters (mapped,
 * guards_*) are relaxed, for fern_stats.
 */
#include "stack/slab.h"
#include "base/sys.h"


#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#ifdef FERN_VALGRIND
#include <valgrind/valgrind.h>
#endif

struct stacks S;
/* The slab the last lookup found: hibernation's lookups (a broadcast
 * touching its waiters' stacks one after another, the monitor's batches in
 * address order) mostly land in it again, and the list holds a thousand
 * slabs at a million threads. Slabs are freed only by stack_fini (which clears it), so a
 * stale hint is still a slab; it is only a guess, read and written relaxed
 * by any thread (a signal handler too). */
static struct slab *slot_hint;

int stack_class(size_t size, size_t *rounded)
{
    if (size < FERN_STACK_MIN || size > FERN_STACK_MAX)
        return -1;
    /* ceil(log2(size)) - log2(FERN_STACK_MIN) */
    int c = (size <= FERN_STACK_MIN) ? 0 : 64 - __builtin_clzl(size - 1) - 14;
    if (rounded)
        *rounded = FERN_STACK_MIN << c;
    return c;
}

/* Does the page at p refuse access? Asked through write(2) from it, which
 * fails with EFAULT instead of raising a signal, and is answered from the
 * same page tables the program's own accesses use (the emulator's, under
 * qemu-user). If no pipe can be had, the guard is taken on trust. */
static bool page_refuses_access(const char *p)
{
    int fd[2];
    if (sys_pipe2(fd, O_CLOEXEC) != 0)
        return true;
    bool refused = sys_write(fd[1], p, 1) == -EFAULT;
    sys_close(fd[0]);
    sys_close(fd[1]);
    return refused;
}

/* n fresh pages for a start-up probe (the caller unmaps them), or NULL. */
static char *probe_pages(size_t n)
{
    char *p = mmap(NULL, n * S.page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static bool guard_install_works(void)
{
    size_t pg = S.page;
    char *p = probe_pages(2);
    if (!p)
        return false;
    int saved = errno;
    bool ok = madvise(p, pg, MADV_GUARD_INSTALL) == 0 && page_refuses_access(p);
    errno = saved;
    munmap(p, 2 * pg);
    return ok;
}

long stack_madvise_batch(const struct iovec *v, size_t n, int advice)
{
#ifdef SYS_process_madvise
    return syscall(SYS_process_madvise, PIDFD_SELF_THREAD_, v, n, advice, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

static long guard_batch_call(const struct iovec *v, size_t n)
{
    return stack_madvise_batch(v, n, MADV_GUARD_INSTALL);
}

/* Does mincore tell a touched page from an untouched one at our page size?
 * Under qemu-user with a guest page size larger than the host's
 * (QEMU_PAGESIZE), it answers per host page and the answers land at the
 * wrong indices; trim() then takes every stack for untouched and returns
 * nothing. If it misreports, stacks are trimmed without asking. */
static bool mincore_works(void)
{
    size_t pg = S.page;
    char *p = probe_pages(2);
    if (!p)
        return false;
    unsigned char vec[2 * ((size_t)64 << 10) / 4096]; /* room for 4 KiB answers up to 64 KiB pages */
    memset(vec, 0, sizeof vec);
    *(volatile char *)(p + pg) = 1;
    bool ok = 2 * pg <= sizeof vec * 4096 && mincore(p, 2 * pg, vec) == 0 && !(vec[0] & 1) && (vec[1] & 1);
    munmap(p, 2 * pg);
    return ok;
}

/* Can one process_madvise call guard several slots? It needs PIDFD_SELF
 * (Linux 6.15+) and a kernel that lets a process apply any advice to itself
 * that way; older kernels say EBADF or EINVAL. */
static bool guard_batch_works(void)
{
    size_t pg = S.page;
    char *p = probe_pages(4);
    if (!p)
        return false;
    struct iovec v[2] = {{p, pg}, {p + 2 * pg, pg}};
    bool ok = guard_batch_call(v, 2) == (long)(2 * pg) && page_refuses_access(p + 2 * pg);
    munmap(p, 4 * pg);
    return ok;
}

int stack_init(void)
{
    if (S.inited)
        return 0;
    memset(&S, 0, sizeof S);
    long pg = sysconf(_SC_PAGESIZE);
    S.page = pg > 0 ? (size_t)pg : 4096;
    S.guard_budget = config.guard_budget;
    S.mincore_ok = mincore_works();
    if (config.guard == CONFIG_GUARD_CANARY)
        S.guard_mode = FERN_GUARD_CANARY;
    else if (config.guard == CONFIG_GUARD_MPROTECT)
        S.guard_mode = FERN_GUARD_MPROTECT;
    else
        S.guard_mode = guard_install_works() ? FERN_GUARD_MADVISE : FERN_GUARD_MPROTECT;
    /* FERN_GUARD=madvise: MADV_GUARD_INSTALL, but one call per stack. */
    S.guard_batch = S.guard_mode == FERN_GUARD_MADVISE && config.guard != CONFIG_GUARD_MADVISE &&
                    guard_batch_works();
    if (S.guard_mode == FERN_GUARD_MPROTECT && S.guard_budget == 0)
        S.guard_mode = FERN_GUARD_CANARY;
    /* Hibernation finds a hibernated stack's thread from an address
     * through the owner tables (sched/hibernate.c). */
    S.owners = config.hibernate;
    S.inited = true;
    return 0;
}

size_t stack_page(void) { return S.page; }

/* 1: guard markers in batches (process_madvise), 0: guard markers one call
 * at a time, -1: no guard markers. */
int stack_guard_batched(void)
{
    if (LOAD_RELAXED(&S.guard_mode) != FERN_GUARD_MADVISE)
        return -1;
    return LOAD_RELAXED(&S.guard_batch) ? 1 : 0;
}

void stack_fini(void)
{
    STORE_RELAXED(&slot_hint, NULL);
    struct slab *s = S.slabs;
    while (s) {
        struct slab *n = s->next;
        unmap_frames(s->base, s->bytes);
        free(s->owner);
        free(s);
        s = n;
    }
    memset(&S, 0, sizeof S);
}

static size_t slot_index(const struct class_pool *p, const char *slot, size_t stride)
{
    return (size_t)(slot - p->slab_lo) / stride;
}

/* Under S.lock: reserve the next slot of class cls, mapping a new slab if
 * needed; NULL if out of memory or mappings. *mode gets the guard to install
 * (the mprotect budget is taken here), *pre whether it is in already.
 *
 * Batched guards: a slot whose guard is not in claims the next
 * GUARD_BATCH - 1 slots (*job), so the next takers find theirs installed.
 * Slots stay handed out one at a time in address order. A batch of slots per
 * worker would be simpler, but then the threads of two workers park, and a
 * broadcast walks them, interleaved from two address ranges: measured with
 * the hand-off chain prefetched (sync/mutex.h), bench/fern_million's wake-all went
 * from 0.18 to 0.29 s for a spawn+park 2% faster. The claimed slots cost no
 * memory until used but their guards' page-table page.
 *
 * GUARD_BATCH is 64: process_madvise's cost is per iovec (a VMA lookup and a
 * page walk each, ~0.42 us on the EPYC VM) plus a per-call part, so 16 slots
 * a call cost 0.49 us a guard, 64 about 0.44, 1024 0.42; a batch call holds
 * up its caller ~30 us. bench/fern_million's CPU time over spawn+park fell
 * 3.07 -> 2.80 s (medians of 18 interleaved runs; 16 of 18 pairs lower). */
char *slot_reserve(int cls, int *mode, bool *pre, struct guard_job *job)
{
    struct class_pool *p = &S.cls[cls];
    size_t stride = class_span(cls) + S.page;
    if (p->carve == p->carve_end) {
        uint32_t slots = p->slab_slots ? p->slab_slots * 2 : SLAB_SLOTS_MIN;
        if (slots > SLAB_SLOTS_MAX)
            slots = SLAB_SLOTS_MAX;
        while (slots > 1 && (size_t)slots * stride > ((size_t)1 << 30))
            slots /= 2;
        struct slab *sl = malloc(sizeof *sl);
        if (!sl)
            return NULL;
        sl->bytes = (size_t)slots * stride;
        sl->base = mmap(NULL, sl->bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (sl->base == MAP_FAILED) {
            free(sl);
            return NULL;
        }
        sl->stride = stride;
        sl->owner = NULL;
        if (S.owners && !(sl->owner = calloc(slots, sizeof *sl->owner))) {
            munmap(sl->base, sl->bytes);
            free(sl);
            return NULL;
        }
        madvise(sl->base, sl->bytes, MADV_NOHUGEPAGE);
        sl->next = S.slabs;
        STORE(&S.slabs, sl); /* release: stack_slot_of reads the list unlocked */
        S.reserved += sl->bytes;
        p->slab_slots = slots;
        p->carve = sl->base;
        p->carve_end = sl->base + sl->bytes;
        p->slab_lo = p->guarding = sl->base;
        memset(p->guarded, 0, sizeof p->guarded);
    }
    char *slot = p->carve;
    p->carve += stride;
    *mode = LOAD_RELAXED(&S.guard_mode);
    *pre = false;
    job->lo = job->hi = NULL;
    if (*mode == FERN_GUARD_MPROTECT) {
        if (S.mprotect_used >= S.guard_budget)
            *mode = FERN_GUARD_CANARY;
        else
            S.mprotect_used++;
    } else if (*mode == FERN_GUARD_MADVISE && LOAD_RELAXED(&S.guard_batch)) {
        size_t i = slot_index(p, slot, stride);
        *pre = (p->guarded[i / 64] >> (i % 64)) & 1;
        if (!*pre) {
            char *lo = p->guarding > p->carve ? p->guarding : p->carve;
            size_t n = (size_t)(p->carve_end - lo) / stride;
            if (n > GUARD_BATCH - 1)
                n = GUARD_BATCH - 1;
            job->lo = lo;
            job->hi = p->guarding = lo + n * stride;
        }
    }
    return slot;
}

/* Outside the lock: install the guards of slot and of the slots job claimed
 * with one system call, then mark the claimed ones guarded (unless the
 * class has moved on to a newer slab, whose slots they are not). On failure
 * (not expected once the probe passed) batches stop, and each slot gets its
 * own madvise (a guard installed twice is harmless). */
bool guard_run(int cls, char *slot, const struct guard_job *job, size_t stride)
{
    struct iovec v[GUARD_BATCH];
    size_t n = 0;
    size_t pg = S.page;
    v[n++] = (struct iovec){slot, pg};
    for (char *q = job->lo; q < job->hi; q += stride)
        v[n++] = (struct iovec){q, pg};
    if (guard_batch_call(v, n) != (long)(n * pg)) {
        STORE_RELAXED(&S.guard_batch, false);
        return false;
    }
    struct class_pool *p = &S.cls[cls];
    spin_lock(&S.lock);
    if ((uintptr_t)job->lo >= (uintptr_t)p->slab_lo && (uintptr_t)job->hi <= (uintptr_t)p->carve_end)
        for (char *q = job->lo; q < job->hi; q += stride) {
            size_t i = slot_index(p, q, stride);
            p->guarded[i / 64] |= (uint64_t)1 << (i % 64);
        }
    spin_unlock(&S.lock);
    return true;
}

/* Outside the lock (the guard is a system call): guard a reserved slot
 * (unless its guard is in already) and write its header. */
struct stack *slot_init(char *slot, int cls, int mode, bool guarded)
{
    size_t size = class_span(cls), pg = S.page;
    if (mode == FERN_GUARD_MADVISE && !guarded && madvise(slot, pg, MADV_GUARD_INSTALL) != 0) {
        STORE_RELAXED(&S.guard_mode, FERN_GUARD_MPROTECT);
        mode = FERN_GUARD_CANARY;
    }
    if (mode == FERN_GUARD_MPROTECT && mprotect(slot, pg, PROT_NONE) != 0)
        mode = FERN_GUARD_CANARY;
    char *lo = slot + pg;
    struct stack *s = (struct stack *)(lo + size - sizeof(struct stack));
    s->lo = lo;
    s->size = size;
    s->next = NULL;
    s->cls = (uint8_t)cls;
    s->guard = (uint8_t)mode;
    s->dirty = 0;
    ADD_RELAXED(&S.mapped, 1);
    ADD_RELAXED(mode == FERN_GUARD_MADVISE    ? &S.g_madvise
                : mode == FERN_GUARD_MPROTECT ? &S.g_mprotect
                                              : &S.g_canary,
                1);
#ifdef FERN_VALGRIND
    VALGRIND_STACK_REGISTER(lo, lo + size);
#endif
    return s;
}

/* Return a stack's pages below the top STACK_KEEP bytes (rounded to whole
 * pages: madvise would round a partial page up, into the kept part) to the
 * kernel.
 * Most threads never reach below STACK_KEEP, and MADV_DONTNEED is not free
 * even on an untouched range: it flushes the TLB of every CPU running this
 * process, so an idle worker trimming a burst of exited threads' stacks
 * would slow the busy workers down. So for stacks up to TRIM_PROBE_MAX the
 * range is first asked with mincore (no flush), and only stacks that did
 * touch pages there are trimmed. */

static bool slot_in(const struct slab *sl, const char *a, struct slot_ref *r)
{
    size_t i = (size_t)(a - sl->base) / sl->stride;
    char *slot = sl->base + i * sl->stride;
    r->lo = slot + S.page;
    r->top = slot + sl->stride;
    r->owners = sl->owner;
    r->index = i;
    r->nslots = sl->bytes / sl->stride;
    r->stride = sl->stride;
    return true;
}


bool stack_slot_of(const void *addr, struct slot_ref *r)
{
    const char *a = addr;
    struct slab *h = LOAD_RELAXED(&slot_hint);
    if (h && a >= h->base && a < h->base + h->bytes && h->owner)
        return slot_in(h, a, r);
    for (struct slab *sl = LOAD(&S.slabs); sl; sl = LOAD_RELAXED(&sl->next)) {
        if (a < sl->base || a >= sl->base + sl->bytes)
            continue;
        if (!sl->owner)
            return false;
        STORE_RELAXED(&slot_hint, sl);
        return slot_in(sl, a, r);
    }
    return false;
}

bool stack_in_guard(const struct stack *s, const void *addr)
{
    const char *a = addr;
    if (s->guard == FERN_GUARD_CANARY)
        return a >= s->lo && a < s->lo + 256;
    return a >= s->lo - S.page && a < s->lo;
}

void stack_stats(struct fern_stats *st)
{
    spin_lock(&S.lock);
    st->stacks_mapped = LOAD_RELAXED(&S.mapped);
    st->stack_bytes_reserved = S.reserved;
    st->guards_madvise = LOAD_RELAXED(&S.g_madvise);
    st->guards_mprotect = LOAD_RELAXED(&S.g_mprotect);
    st->guards_canary = LOAD_RELAXED(&S.g_canary);
    st->guard_mode = (fern_guard_mode)LOAD_RELAXED(&S.guard_mode);
    spin_unlock(&S.lock);
    st->stack_trims = LOAD_RELAXED(&S.trims);
    /* Every carved stack is either bound to a thread or cached in a pool. */
    st->stacks_cached = st->stacks_mapped - st->stacks_in_use;
}
