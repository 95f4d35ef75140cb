/* SPDX-License-Identifier: MIT */
/*
 * Stack hibernation: a green thread parked for config.hibernate_ns has the
 * live part of its stack, [sp, top), copied into a heap block, its pages
 * freed, and the pages that held [sp, top) turned into guard markers
 * (MADV_GUARD_INSTALL, which leaves the mapping whole; the pages below stay
 * empty: nothing live is there). Its saved stack
 * pointer then points at a switch frame in the block that leads to
 * fern_hib_entry (arch/<arch>/switch.S), so the switch that resumes it
 * needs no test: it lands in hib_resume, which copies the stack back to the
 * same addresses (every pointer into it stays valid) and resumes the real
 * frame. Nothing here is on the switch path, and a wake-up of a thread that
 * is not being hibernated pays one load and branch (hib_gate); with
 * hibernation off, not even that: the gate sits on the wake path's out-of-
 * line side, which fern_slow.hib (base/slow.h) sends it to from hib_init on.
 *
 * Who hibernates: the monitor (watch/monitor.c), in batches, never a worker.
 * A batch of up to HIB_BATCH threads costs one membarrier, two
 * pkey_mprotect calls (three mprotect calls without a protection key) and
 * one MADV_DONTNEED per run of adjacent slots, and one
 * process_madvise for all guards (a page each, on pages already empty: no
 * zap and no TLB flush per stack).
 *
 * Claiming a parked thread (the handshake with the wake paths). A thread is
 * a candidate only in T_PARKED, which the wait's after-switch action stores
 * once its registers are saved (sync/wait.c). The monitor takes hib to
 * H_BUSY (CAS), issues membarrier_all() and reads run_state again. Every
 * wake-up passes hib_gate first: run_state = T_RUNNABLE, compiler barrier,
 * read hib (the light side of an asymmetric Dekker handshake, like sync/
 * bias.c's). So either the monitor sees T_RUNNABLE (it lets the thread go:
 * the waker may already have queued it) or the waker sees H_BUSY and sets
 * H_WAKE instead of queueing it; the monitor queues it when its batch is
 * done. A T_PARKED seen after the barrier is a thread that has saved its
 * registers and that nobody can resume until the monitor lets it.
 *
 * Writes while the monitor copies. Another thread may write into the
 * parked stack at any time (a waker filling in its waiter record, a channel
 * sender's value, user code through a pointer). So each run of slots is
 * shut (RUN_SHUT: tagged with a protection key every other thread's PKRU
 * denies, or read-only then PROT_NONE without one) before the copy and
 * opened again after the guards are in: a touch in between faults, and
 * the fault handler
 * (hib_fault) waits for the batch to end, restores the stack and lets the
 * write go ahead on the restored copy. No write is lost.
 *
 * Touches of a hibernated stack. Any access faults on the guard markers;
 * debug/debug.c's fault handler asks hib_fault first, which finds the slot
 * (stack_slot_of) and its thread (the slab's owner table), restores it, and
 * returns to retry the access. It restores the hibernated neighbours parked
 * on the same object with it (a broadcast walks them next), so a wake-all
 * takes one fault per HIB_TOUCH_BATCH threads. The kernel cannot take such
 * a fault: a system call given a pointer into a hibernated stack fails with
 * EFAULT. fern-hook retries those after hib_touch; fern_blocking's parker
 * is never hibernated (HN_KERNEL); docs/stacks.md says what remains.
 *
 * Restoring (by the thread itself in hib_resume, or by a toucher): DONE ->
 * RESTORING (CAS: one restorer), the runs shut, guard markers removed, the
 * bytes copied back (with the key open in the restorer's PKRU alone, or
 * through /proc/self/mem without a key), the runs opened, RESIDENT. The block is freed only by the thread's own hib_resume
 * (a toucher may not free it: the frame in it is what the thread's next
 * switch pops), which also takes RESIDENT -> NONE.
 */
#include "sched/sched.h"
#include "sched/hibernate.h"
#include "sched/trace.h"
#include "arch/syscall.h"

#include <sched.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#ifdef FERN_VALGRIND
#include <valgrind/valgrind.h>

/* The file calls here are raw system calls: fern-hook interposes open,
 * close, pwrite and write for green threads (docs/hooks.md), and a green
 * thread restoring its own stack must not park in one, nor may a fault
 * handler. Each returns the kernel's value (-errno on error). */
static int mem_open(void)
{
    return (int)arch_syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/mem", O_RDWR | O_CLOEXEC, 0,
                              0, 0);
}
static int mem_stat(int fd, struct stat *st)
{
    return (int)arch_syscall6(SYS_newfstatat, fd, (long)"", (long)st, AT_EMPTY_PATH, 0, 0);
}
static void mem_close(int fd) { (void)arch_syscall6(SYS_close, fd, 0, 0, 0, 0, 0); }

/* A release fence. ThreadSanitizer refuses fences at compile time; its
 * builds refuse hibernation (hibernate_unsupported), so none runs there. */
static inline void hib_release_fence(void)
{
#ifndef FERN_TSAN
    __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}
#endif

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif

#define HIB_BATCH 1024u         /* threads per batch (process_madvise takes 1024 iovecs) */
#define HIB_TOUCH_BATCH 256u    /* stacks one touch restores at most (16 KiB of
                                 * the signal stack's 64 for its arrays) */
#define HIB_LIVE_MAX ((size_t)256 * 1024) /* deeper parked stacks are left alone */
#define HIB_SCRATCH ((size_t)64 * 1024)   /* hib_resume's stack per worker */

/* The heap block of a hibernated stack: the switch frame the thread's
 * saved stack pointer points at (arch_hib_frame: it leads to
 * fern_hib_entry), whose free words hold where the stack goes back, then
 * the saved bytes. 64 bytes of header on x86_64. */
struct hib_block {
    uint64_t frame[ARCH_HIB_FRAME_WORDS > 0 ? ARCH_HIB_FRAME_WORDS : 8];
    char data[];
};
#define B_SP(b) ((b)->frame[1])      /* the real saved stack pointer */
#define B_LO(b) ((b)->frame[2])      /* the stack's lowest usable byte */
#define B_WORD3(b) ((b)->frame[3])   /* bits 0-23: bytes saved, [sp, sp + live) =
                                      * [sp, top); 24-31: touches; 32-63: when the
                                      * last touch was (HIB_TICKS) */
#define B_LIVE(b) (B_WORD3(b) & 0xffffffu)
_Static_assert(HIB_LIVE_MAX < (1u << 24), "a block's live size must fit B_LIVE's 24 bits");
#define B_TOUCHES(b) ((unsigned)(B_WORD3(b) >> 24) & 0xffu)
#define B_TOUCH_AT(b) ((uint32_t)(B_WORD3(b) >> 32))
/* The clock in units of 65.5 us, mod 2^32 (a 78-hour wrap): differences of
 * it are exact enough for the back-off below. */
#define HIB_TICKS(ns) ((uint32_t)((uint64_t)(ns) >> 16))
/* A stack restored by a touch and still parked is hibernated again only
 * once it has stayed parked delay << touches (touches capped here) since
 * that touch, and while threads keep running, 8 times that: a touch mostly
 * comes just before a wake-up (a broadcast's walk, then a mutex's hand-off
 * to each heir the walk restored), and a queue of a million heirs drained
 * over seconds would otherwise be hibernated again behind the walk and
 * restored twice. A stack touched again and again stays out longer each
 * time; a thread that runs forgets it (its block is freed). */
#define HIB_TOUCH_BACKOFF_MAX 4u
/* When the monitor first saw a parked thread (fern_thread.hib_at), in
 * units of delay / HIB_AT_UNITS (mod 256): a thread is hibernated at the
 * first scan that finds it parked for the delay since, instead of at the
 * first scan that starts a delay after the one that saw it ended (which
 * took two scans' time more: a scan of a million threads takes a while).
 * Below HIB_AT_MIN_DELAY (a unit under 1 ms, where a tick's work would be
 * more than a unit) the second scan's look is enough, as it always was. */
#define HIB_AT_UNITS 64u
#define HIB_AT_MIN_DELAY ((int64_t)64 * 1000000)
#define B_OWNER(b) ((b)->frame[6])   /* the slab's owner entry of the slot */

bool hib_on;

__thread char *fern_hib_scratch_ __attribute__((tls_model("initial-exec"), used));
/* hib_fault's last address that had nothing to restore, H.gen then, and
 * how many times in a row (see there). */
static __thread const void *miss_addr __attribute__((tls_model("initial-exec")));
static __thread uint32_t miss_gen __attribute__((tls_model("initial-exec")));
static __thread uint32_t miss_count __attribute__((tls_model("initial-exec")));

struct item {
    fern_thread *t;
    struct hib_block *b;
    char *lo, *top, *sp;
    fern_thread **owner;
    bool resident;              /* re-hibernated: b was its block already */
    bool sealed;                /* its run is sealed (below), not guarded */
    bool ok;                    /* hibernated by this batch */
};

/* Sealed runs. A run of adjacent hibernated slots that covers at least one
 * whole 2 MiB-aligned block of address space (HIB_PMD: what one page-table
 * page maps) is not given guard markers: it stays shut (RUN_SHUT) after
 * its copy, its slots' own guard markers are removed and its pages freed,
 * so every page-table entry of those blocks is empty and the kernel frees
 * their page-table pages (CONFIG_PT_RECLAIM, Linux 6.14+; elsewhere the
 * pages stay, as with markers). A touch faults on the shut range as on a
 * marker. Before any stack of a sealed run is restored, the whole run is
 * unsealed: its slots' guards and every stack's live-page markers go in
 * (the form a run that was not sealed has), and it is opened again; only
 * then does the restore proceed as for any hibernated stack. A sealed run
 * is a mapping of its own (two more in the slab), so there are at most
 * HIB_SEAL_MAX of them; beyond that, runs get markers. A slot of a sealed
 * run has OWN_SEALED set in its owner entry (descriptors are 64-byte
 * aligned), under H.seal_lock. */
#define HIB_PMD ((uintptr_t)2 << 20)
#define HIB_SEAL_MAX 4096u
#define OWN_SEALED ((uintptr_t)1)
struct seal {
    char *lo, *hi;              /* the run's range (NULL: a free entry) */
    fern_thread **own;          /* the owner entry of its first slot */
    size_t n, stride;           /* slots, and between them */
};
static struct seal seals[HIB_SEAL_MAX];
/* The thread an owner entry names, without the tag. */
static inline fern_thread *own_load(fern_thread **p)
{
    return (fern_thread *)((uintptr_t)LOAD(p) & ~OWN_SEALED);
}

static struct {
    bool batched;               /* process_madvise takes our advice */
    int64_t delay_ns;
    int64_t next_scan;          /* monitor only, like what follows */
    int64_t last_busy;          /* the last look that found workers busy */
    int64_t scan_start;
    uint32_t now_ticks;         /* the tick's clock (HIB_TICKS) */
    bool quiet;                 /* no thread ran since the last tick */
    bool scanning, pending, marked;
    int64_t now;                /* the tick's clock, ns */
    int64_t unit_ns;            /* of fern_thread.hib_at, or 0 (below) */
    int64_t eligible;           /* the scan's earliest time a marked thread
                                 * not yet old enough will be */
    uint32_t touched;           /* a touch restored stacks: scan again (any thread) */
    uint32_t gen;               /* +1 each time stacks become accessible again */
    int pkey;                   /* the protection key of RUN_SHUT, or -1 */
    int mem_fd;                 /* /proc/self/mem (mem_fd), without a key */
    ino_t mem_ino;
    dev_t mem_dev;
    long mem_pid;               /* the process that opened mem_fd */
    fern_thread *batch[HIB_BATCH];
    bool was[HIB_BATCH];        /* batch[i] was H_RESIDENT (has its block) */
    struct item items[HIB_BATCH];
    struct iovec iov[HIB_BATCH];
    unsigned iov_item[HIB_BATCH]; /* the item iov[i] belongs to */
    unsigned n;
    uint32_t seal_lock;         /* seals[] and the OWN_SEALED tags */
    unsigned seal_used;         /* entries of seals[] in use or reserved */
    bool no_seal;               /* a seal failed: runs get markers from now on */
    uint64_t hibernated, hibernations, restores, touches, bytes; /* relaxed */
} H = {.pkey = -1, .mem_fd = -1}; /* key 0 is everyone's: never freed (hib_fini) */

const char *hibernate_unsupported(void)
{
#if !ARCH_HIBERNATE
    return "this architecture's fern does not support";
#elif defined(FERN_TSAN)
    return "a ThreadSanitizer build of fern does not support (not validated there: the copies of "
           "a stack out and back bypass ThreadSanitizer's view of that memory)";
#else
#ifdef FERN_VALGRIND
    if (RUNNING_ON_VALGRIND)
        return "a program under Valgrind cannot use (Valgrind does not follow a stack that is "
               "copied out and back)";
#endif
    return NULL;
#endif
}

/* Words, not memcpy: the copy must not be instrumented (a sanitizer would
 * flag the live frames' redzones, or report the monitor's read of a stack
 * it has no happens-before with: the handshake above orders it). */
__attribute__((no_sanitize_address, no_sanitize_thread, noinline)) static void
copy_words(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    /* One string move: a tenth of the monitor's time went to the loop
     * below at a million threads. Not instrumented either. */
    size_t words = n / 8;
    __asm__ volatile("rep movsq" : "+D"(dst), "+S"(src), "+c"(words) : : "memory");
#else
    volatile uint64_t *d = dst;
    const volatile uint64_t *s = src;
    for (size_t i = 0; i < n / 8; i++)
        d[i] = s[i];
#endif
}

static void wait_a_bit(unsigned *spins) { spin_backoff(spins); } /* signal-safe */

static long madvise_many(struct iovec *v, size_t n, int advice)
{
    if (H.batched)
        return stack_madvise_batch(v, n, advice);
    long done = 0;
    for (size_t i = 0; i < n; i++) {
        if (madvise(v[i].iov_base, v[i].iov_len, advice) != 0)
            return done ? done : -1;
        done += (long)v[i].iov_len;
    }
    return done;
}

void hib_init(void)
{
    hib_on = false;
    H.mem_fd = -1;
    H.pkey = -1; /* before any return: hib_fini frees a key >= 0 */
    memset(&H.hibernated, 0, 5 * sizeof H.hibernated);
    if (!config.hibernate || hibernate_unsupported())
        return;
    int g = stack_guard_batched();
    const char *why = g < 0 ? "guard markers (MADV_GUARD_INSTALL, Linux 6.13+)"
                      : !membarrier_ready() ? "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)"
                                            : NULL;
    if (why) {
        fprintf(stderr, "fern: stack hibernation needs %s, which this system lacks; it stays off\n",
                why);
        return;
    }
    /* GUARD_REMOVE in batches too? Probe on a page of our own. */
    H.batched = false;
    if (g == 1) {
        size_t pg = stack_page();
        char *p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) {
            struct iovec v = {p, pg};
            H.batched = stack_madvise_batch(&v, 1, MADV_GUARD_INSTALL) == (long)pg &&
                        stack_madvise_batch(&v, 1, MADV_GUARD_REMOVE) == (long)pg;
            munmap(p, pg);
        }
    }
    /* A protection key, if the CPU and kernel have one to spare: then the
     * restorer copies the bytes back itself, with only its own PKRU let
     * through, and /proc/self/mem is not needed. pkey_alloc leaves the key
     * denied in this thread's PKRU, and every other thread's denies it too
     * (the kernel's initial PKRU denies every key but 0, and a new thread
     * inherits its creator's). */
    if (ARCH_PKEYS) {
        long k = syscall(SYS_pkey_alloc, 0, PKEY_DISABLE_ACCESS);
        if (k > 0 && k < 16 && (arch_pkru_read() >> (2 * k) & 1))
            H.pkey = (int)k;
        else if (k >= 0)
            (void)syscall(SYS_pkey_free, k);
    }
    int fd = H.pkey >= 0 ? -1 : mem_open();
    struct stat st;
    int e = H.pkey >= 0 ? 0 : fd < 0 ? fd : mem_stat(fd, &st);
    if (e < 0) {
        fprintf(stderr, "fern: stack hibernation needs /proc/self/mem (%s); it stays off\n",
                strerror(-e));
        if (fd >= 0)
            mem_close(fd);
        return;
    }
    if (fd >= 0) {
        H.mem_fd = fd;
        H.mem_ino = st.st_ino;
        H.mem_dev = st.st_dev;
        H.mem_pid = arch_syscall6(SYS_getpid, 0, 0, 0, 0, 0, 0);
    }
    H.delay_ns = config.hibernate_ns;
    H.unit_ns = H.delay_ns >= HIB_AT_MIN_DELAY ? H.delay_ns / HIB_AT_UNITS : 0;
    H.seal_used = 0;
    H.no_seal = false;
    memset(seals, 0, sizeof seals);
    H.next_scan = 0;
    H.scanning = H.pending = false;
    H.n = 0;
    hib_on = true;
    STORE(&fern_slow.hib, 1); /* every wake-up passes the gate from now on */
}

void hib_fini(void)
{
    hib_on = false;
    STORE(&fern_slow.hib, 0);
    if (H.mem_fd >= 0)
        mem_close(H.mem_fd);
    H.mem_fd = -1;
    if (H.pkey >= 0)
        (void)syscall(SYS_pkey_free, H.pkey);
    H.pkey = -1;
}

void hib_worker_start(void)
{
    if (!hib_on)
        return;
    char *p = mmap(NULL, HIB_SCRATCH, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        /* Without it this worker cannot resume a hibernated thread. */
        fprintf(stderr, "fern: cannot map a worker's hibernation stack; aborting\n");
        abort();
    }
    fern_hib_scratch_ = p + HIB_SCRATCH;
}

void hib_worker_stop(void)
{
    if (fern_hib_scratch_) {
        unmap_frames(fern_hib_scratch_ - HIB_SCRATCH, HIB_SCRATCH); /* hib_resume ran there */
        fern_hib_scratch_ = NULL;
    }
}

/* ---- the wake side ---- */

bool hib_wake_slow(fern_thread *t)
{
    for (;;) {
        uint8_t h = LOAD(&t->hib);
        uint8_t want;
        if (h == H_SEEN)
            want = H_NONE;      /* it ran before it was old enough */
        else if (h == H_RESIDENT_SEEN)
            want = H_RESIDENT;
        else if (h == H_BUSY)
            want = H_BUSY | H_WAKE; /* the monitor queues it */
        else
            return false;       /* none, or hibernated: it resumes through hib_resume */
        if (CAS(&t->hib, &h, want))
            return want == (H_BUSY | H_WAKE);
    }
}

/* ---- restoring ---- */

/* The last item of the run of adjacent slots that starts at v[i]. */
static unsigned run_end(const struct item *v, unsigned n, unsigned i)
{
    while (i + 1 < n && v[i + 1].lo == v[i].top + stack_page() && v[i + 1].owner == v[i].owner + 1)
        i++;
    return i;
}

/* What each_run does to a run of slots [lo, top). */
enum {
    RUN_READ_ONLY, /* PROT_READ (hibernating without a protection key) */
    RUN_SHUT,      /* nobody but the caller may touch it: tagged with H.pkey,
                    * which every thread's PKRU denies (the caller lets
                    * itself through with key_open), or PROT_NONE without one */
    RUN_OPEN,      /* read-write, key 0: as every stack is */
    RUN_RELEASE,   /* MADV_DONTNEED: one page walk and one TLB flush per run,
                    * not one per stack; guard markers stay (the slots' own
                    * guard pages between the stacks of a run stay guards) */
    RUN_SEAL,      /* the slots' guard markers removed, then MADV_DONTNEED:
                    * nothing is left in the run's page-table entries */
};

static int pkey_mprotect_(void *p, size_t len, int prot, int key)
{
    return (int)syscall(SYS_pkey_mprotect, p, len, prot, key);
}

static int run_do(char *p, size_t len, int op)
{
    switch (op) {
    case RUN_READ_ONLY:
        return mprotect(p, len, PROT_READ);
    case RUN_SHUT:
        return H.pkey >= 0 ? pkey_mprotect_(p, len, PROT_READ | PROT_WRITE, H.pkey)
                           : mprotect(p, len, PROT_NONE);
    case RUN_OPEN:
        return H.pkey >= 0 ? pkey_mprotect_(p, len, PROT_READ | PROT_WRITE, 0)
                           : mprotect(p, len, PROT_READ | PROT_WRITE);
    case RUN_SEAL:
        if (madvise(p, len, MADV_GUARD_REMOVE) != 0)
            return -1;
        return madvise(p, len, MADV_DONTNEED);
    default:
        return madvise(p, len, MADV_DONTNEED);
    }
}

/* Apply op to every run of adjacent items' slots: one call per run.
 * each_run_but_sealed skips the sealed runs (a run is sealed whole). */
static bool each_run_sel(struct item *v, unsigned n, int op, bool skip_sealed)
{
    for (unsigned i = 0; i < n;) {
        unsigned j = run_end(v, n, i);
        if (!(skip_sealed && v[i].sealed) &&
            run_do(v[i].lo, (size_t)(v[j].top - v[i].lo), op) != 0)
            return false;
        i = j + 1;
    }
    return true;
}
static bool each_run(struct item *v, unsigned n, int op) { return each_run_sel(v, n, op, false); }
static bool each_run_but_sealed(struct item *v, unsigned n, int op)
{
    return each_run_sel(v, n, op, true);
}

/* Let this thread through H.pkey (RUN_SHUT ranges) until key_close; it
 * returns the PKRU to put back. Without a key: nothing. Signals are
 * blocked meanwhile (a handler must not run with the key open), or the
 * caller is the monitor, whose handlers never touch stacks. */
static uint32_t key_open(void)
{
    if (H.pkey < 0)
        return 0;
    uint32_t old = arch_pkru_read();
    arch_pkru_write(old & ~(3u << (2 * H.pkey)));
    return old;
}
static void key_close(uint32_t old)
{
    if (H.pkey >= 0)
        arch_pkru_write(old);
}

/* The pages of an item's stack that hold its live bytes, [sp, top) rounded
 * out to whole pages: the only ones that get guard markers. The pages below
 * are left empty: a touch there (below the saved stack pointer: nothing
 * live) reads zeros as on a fresh stack, and restoring has no markers to
 * remove there. */
static struct iovec live_pages(const struct item *it)
{
    char *lo = (char *)((uintptr_t)it->sp & ~(uintptr_t)(stack_page() - 1));
    return (struct iovec){lo, (size_t)(it->top - lo)};
}

static void die(const char *msg)
{
    (void)arch_syscall6(SYS_write, 2, (long)msg, (long)strlen(msg), 0, 0, 0); /* async-signal-safe */
    abort();
}

/* /proc/self/mem, for writing into pages that are PROT_NONE to everyone
 * else (a write through it is a forced access, as a debugger's). Checked
 * before each use: a program that closed it, or put another file at its
 * number, gets it opened again. */
static int mem_fd(void)
{
    struct stat st;
    int fd = LOAD_RELAXED(&H.mem_fd);
    /* A forked child inherits the descriptor, which names its parent's
     * memory (and passes the check below): its own is opened again. */
    long pid = arch_syscall6(SYS_getpid, 0, 0, 0, 0, 0, 0);
    if (fd >= 0 && pid == LOAD_RELAXED(&H.mem_pid) && mem_stat(fd, &st) == 0 &&
        st.st_ino == H.mem_ino && st.st_dev == H.mem_dev)
        return fd;
    fd = mem_open();
    if (fd < 0 || mem_stat(fd, &st) != 0)
        die("fern: cannot open /proc/self/mem to restore a hibernated stack; aborting\n");
    H.mem_ino = st.st_ino;
    H.mem_dev = st.st_dev;
    STORE_RELAXED(&H.mem_pid, pid);
    STORE_RELAXED(&H.mem_fd, fd);
    return fd;
}

static void mem_write(int fd, char *dst, const char *src, size_t n)
{
    while (n) {
        long r = arch_syscall6(SYS_pwrite64, fd, (long)src, (long)n, (long)(uintptr_t)dst, 0, 0);
        if (r <= 0) {
            if (r == -EINTR)
                continue;
            die("fern: cannot write a hibernated stack back; aborting\n");
        }
        dst += r;
        src += r;
        n -= (size_t)r;
    }
}

/* Block every signal but the synchronous faults on this kernel thread (the
 * old mask in *old). A thread that has taken a stack to H_RESTORING must
 * not run a signal handler until the stack is back: a handler that reads
 * it (preemption's reads the running thread's stack header, and hib_resume
 * restores the running thread) would fault, find it RESTORING and wait for
 * this very restore, for ever. So the callers that take a stack to
 * RESTORING outside a fault handler block before the CAS, not only in
 * restore(). */
static void signals_block(sigset_t *old)
{
    sigset_t all;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGTRAP); /* a debugger's breakpoint */
    sigdelset(&all, SIGSYS);  /* a seccomp filter's RET_TRAP on restore's calls */
    pthread_sigmask(SIG_BLOCK, &all, old);
}

/* Put a stack's saved bytes back in place while its range is RUN_SHUT:
 * with a protection key, a copy with the key open (the caller opened it);
 * without one, a write through /proc/self/mem (fd), the only write that
 * reaches a PROT_NONE page. */
static void put_back(int fd, const struct item *it)
{
    size_t live = (size_t)B_LIVE(it->b);
    if (H.pkey >= 0)
        copy_words(it->sp, it->b->data, live);
    else
        mem_write(fd, it->sp, it->b->data, live);
}

/* Who restores (restore's `how`). */
enum {
    R_SELF,  /* a thread resuming restores its own stack alone */
    R_AHEAD, /* ... and those of its parked neighbours (restore_near) */
    R_TOUCH, /* a touch: a fault or hib_touch */
};
static void item_of(struct item *it, fern_thread *t);

/* Unseal a sealed run (under H.seal_lock, signals blocked): every slot's
 * guard marker (the first slot's is below the run and stayed) and every
 * stack's live-page markers go in, then the run is opened. Its stacks are
 * hibernated as if never sealed from then on. */
static void unseal_run(struct seal *u)
{
    struct iovec iov[128];
    unsigned c = 0;
    long want = 0;
    size_t pg = stack_page();
    for (size_t k = 0; k < u->n; k++) {
        char *lo = u->lo + k * u->stride;
        if (k) {
            iov[c++] = (struct iovec){lo - pg, pg};
            want += (long)pg;
        }
        fern_thread *t = own_load(&u->own[k]);
        if (t) {
            struct item it;
            item_of(&it, t);
            iov[c] = live_pages(&it);
            want += (long)iov[c++].iov_len;
        }
        if (c + 2 > sizeof iov / sizeof iov[0] || k + 1 == u->n) {
            if (madvise_many(iov, c, MADV_GUARD_INSTALL) != want)
                die("fern: cannot put a sealed run's guard markers back; aborting\n");
            c = 0;
            want = 0;
        }
    }
    if (run_do(u->lo, (size_t)(u->hi - u->lo), RUN_OPEN) != 0)
        die("fern: cannot open a sealed run of hibernated stacks; aborting\n");
    for (size_t k = 0; k < u->n; k++)
        STORE(&u->own[k], own_load(&u->own[k]));
    u->lo = u->hi = NULL;
    H.seal_used--;
}

/* Unseal the sealed runs any of v's stacks are in (before restoring them). */
static void unseal(const struct item *v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (!((uintptr_t)LOAD(v[i].owner) & OWN_SEALED))
            continue;
        spin_lock(&H.seal_lock);
        if ((uintptr_t)LOAD(v[i].owner) & OWN_SEALED)
            for (unsigned j = 0; j < HIB_SEAL_MAX; j++)
                if (seals[j].lo && v[i].lo >= seals[j].lo && v[i].lo < seals[j].hi) {
                    unseal_run(&seals[j]);
                    break;
                }
        spin_unlock(&H.seal_lock);
    }
}

/* Restore n stacks whose threads the caller moved to H_RESTORING, in
 * ascending address order. Nobody may see a page between the removal of
 * its guard and the return of its bytes (it would read zeros), so the
 * ranges are RUN_SHUT meanwhile (a touch faults and waits, as on the
 * guard) and only this thread puts the bytes in (put_back). The caller
 * has blocked signals (signals_block) before it took the first of them to
 * H_RESTORING, and unblocks them after. */
static void restore(struct item *v, unsigned n, int how)
{
    struct iovec iov[HIB_TOUCH_BATCH];
    long want = 0;
    for (unsigned i = 0; i < n; i++) {
        iov[i] = live_pages(&v[i]);
        want += (long)iov[i].iov_len;
    }
    int fd = H.pkey >= 0 ? -1 : mem_fd();
    unseal(v, n);
    if (!each_run(v, n, RUN_SHUT))
        die("fern: cannot protect a hibernated stack while it is restored (vm.max_map_count?); "
            "aborting\n");
    if (madvise_many(iov, n, MADV_GUARD_REMOVE) != want)
        die("fern: cannot remove a hibernated stack's guard markers; aborting\n");
    uint32_t pkru = key_open();
    for (unsigned i = 0; i < n; i++)
        put_back(fd, &v[i]);
    key_close(pkru);
    if (!each_run(v, n, RUN_OPEN))
        die("fern: cannot make a restored stack writable again; aborting\n");
    /* Recorded with signals still blocked. A touch's restore runs in the
     * fault handler, which may have interrupted a record into this
     * thread's buffer: it goes to the tracer's own table (atomics only). */
    if (how == R_TOUCH)
        TRACE(trace_touch(n, v[0].t->id));
    else
        TRACE(trace_event(worker_self(), TR_RESTORE, n, v[0].t->id, 0));
    if (how != R_SELF) {
        /* The stacks restored with a touched or resuming one stay parked:
         * the back-off below keeps them resident for a while. */
        uint32_t at = HIB_TICKS(fern_now_ns());
        for (unsigned i = 0; i < n; i++) {
            struct hib_block *b = v[i].b;
            unsigned c = B_TOUCHES(b) < HIB_TOUCH_BACKOFF_MAX ? B_TOUCHES(b) + 1 : B_TOUCHES(b);
            B_WORD3(b) = B_LIVE(b) | (uint64_t)c << 24 | (uint64_t)at << 32;
        }
    }
    /* Before the states: whoever sees one of them sees the count too. */
    ADD_RELAXED(&H.gen, 1);
    hib_release_fence();
    for (unsigned i = 0; i < n; i++)
        STORE(&v[i].t->hib, H_RESIDENT);
    ADD_RELAXED(&H.hibernated, -(uint64_t)n);
    ADD_RELAXED(&H.restores, n);
    if (how == R_TOUCH)
        ADD_RELAXED(&H.touches, n);
}

static void item_of(struct item *it, fern_thread *t)
{
    struct hib_block *b = (struct hib_block *)LOAD_RELAXED(&t->sp);
    it->t = t;
    it->b = b;
    it->sp = (char *)B_SP(b);
    it->lo = (char *)B_LO(b);
    it->top = it->sp + B_LIVE(b);
    it->owner = (fern_thread **)B_OWNER(b);
    it->resident = it->sealed = it->ok = false;
}

/* The caller (signals blocked) took t, in slot r, to H_RESTORING: restore
 * it and the neighbours in its slab that are hibernated parked on the
 * object t was parked on (`obj`, read before t could run), up to
 * HIB_TOUCH_BATCH in all: those on either side of it, up to the first slot
 * that holds no thread parked there. Threads that parked one after the
 * other on one object sit side by side, and are woken so too (a broadcast
 * walks them in order; a mutex hands itself to its heirs in order), so one
 * restore, a few system calls, serves all of them. */
/* restore_near's walk, one slot: false when the slot holds no thread
 * parked on obj (the walk ends there); else a hibernated one is taken to
 * H_RESTORING and added to v. */
static bool claim_near(fern_thread **slot, const void *obj, struct item *v, unsigned *n)
{
    fern_thread *u = own_load(slot);
    uint8_t h = H_DONE;
    if (!u || !obj || LOAD_RELAXED(&u->wait_obj) != obj)
        return false;
    if (LOAD(&u->hib) == H_DONE && CAS(&u->hib, &h, H_RESTORING))
        item_of(&v[(*n)++], u);
    return true;
}

static void restore_near(fern_thread *t, const struct slot_ref *r, const void *obj, int how)
{
    struct item v[HIB_TOUCH_BATCH];
    unsigned n = 0, below = 0;
    /* Below t first, nearest first, then put in address order. */
    for (size_t j = r->index; j-- > 0 && n < HIB_TOUCH_BATCH / 2;) {
        if (!claim_near(&r->owners[j], obj, v, &n))
            break;
    }
    below = n;
    for (unsigned i = 0; i < below / 2; i++) {
        struct item x = v[i];
        v[i] = v[below - 1 - i];
        v[below - 1 - i] = x;
    }
    item_of(&v[n++], t);
    for (size_t j = r->index + 1; j < r->nslots && n < HIB_TOUCH_BATCH; j++) {
        if (!claim_near(&r->owners[j], obj, v, &n))
            break;
    }
    if (how == R_AHEAD && n == 1)
        how = R_SELF; /* alone: nothing stays parked */
    restore(v, n, how);
    /* The neighbours stay parked: the monitor hibernates them again later
     * (after the back-off) if they are not woken first; a scan soon, then.
     * Not for a broadcast's heirs (HN_HEIR): they run next, and are not
     * hibernated meanwhile (a scan of every thread per batch of a million
     * heirs would only compete with them for the CPUs). */
    if (how == R_TOUCH || (how == R_AHEAD && !(LOAD_RELAXED(&t->hib_no) & HN_HEIR))) {
        STORE_RELAXED(&H.touched, 1);
        monitor_kick();
    }
}

/* A touch found t hibernated and took it to H_RESTORING. */
static void restore_touched(fern_thread *t, const struct slot_ref *r)
{
    restore_near(t, r, LOAD_RELAXED(&t->wait_obj), R_TOUCH);
}

bool hib_fault(const void *addr)
{
    if (!LOAD_RELAXED(&hib_on))
        return false;
    struct slot_ref r;
    if (!stack_slot_of(addr, &r) || (const char *)addr < r.lo) {
        return false;
    }
    unsigned spins = 0;
    for (;;) {
        fern_thread *t = own_load(&r.owners[r.index]);
        uint8_t h = t ? LOAD(&t->hib) : H_NONE;
        switch (h & (uint8_t)~H_WAKE) {
        case H_BUSY:       /* being hibernated: wait for the batch */
        case H_RESTORING:  /* someone else restores it */
            wait_a_bit(&spins);
            continue;
        case H_DONE: {
            sigset_t old;
            signals_block(&old); /* before the CAS (signals_block) */
            bool mine = CAS(&t->hib, &h, H_RESTORING);
            if (mine)
                restore_touched(t, &r);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            if (!mine)
                continue;
            miss_addr = NULL;
            return true;
        }
        default: {
            /* Not hibernated now: it was at the fault and was restored
             * since, so retry. A fault again at the same address with no
             * stack made accessible in between (H.gen, counted before the
             * states are published) is a real one. Under churn (hibernated
             * and restored again between two tries) the count moves; a
             * bound keeps a fault that only looks like churn from looping. */
            uint32_t g = LOAD(&H.gen);
            if (miss_addr == addr && (miss_gen == g || ++miss_count > 100000)) {
                miss_addr = NULL;
                return false;
            }
            if (miss_addr != addr)
                miss_count = 0;
            miss_addr = addr;
            miss_gen = g;
            return true;
        }
        }
    }
}

bool hib_touch(const void *p, size_t n)
{
    if (!LOAD_RELAXED(&hib_on) || !n)
        return false;
    bool any = false;
    const char *a = p, *end = a + n;
    while (a < end) {
        struct slot_ref r;
        if (!stack_slot_of(a, &r)) {
            a = (const char *)(((uintptr_t)a | (stack_page() - 1)) + 1);
            continue;
        }
        unsigned spins = 0;
        for (;;) {
            fern_thread *t = own_load(&r.owners[r.index]);
            uint8_t h = t ? LOAD(&t->hib) : H_NONE;
            if ((h & (uint8_t)~H_WAKE) == H_BUSY || h == H_RESTORING) {
                wait_a_bit(&spins);
                any = true;
                continue;
            }
            if (h == H_DONE) {
                sigset_t old;
                signals_block(&old); /* before the CAS (signals_block) */
                bool mine = CAS(&t->hib, &h, H_RESTORING);
                if (mine)
                    restore_touched(t, &r);
                pthread_sigmask(SIG_SETMASK, &old, NULL);
                if (!mine)
                    continue;
                any = true;
            }
            break;
        }
        a = r.top;
    }
    return any;
}

void *hib_real_sp(const fern_thread *t)
{
    void *sp = LOAD_RELAXED(&t->sp);
    uint8_t h = LOAD(&t->hib);
    if (h == H_DONE || h == H_RESTORING || h == H_RESIDENT || h == H_RESIDENT_SEEN)
        return (void *)B_SP((struct hib_block *)sp);
    return sp;
}

void *hib_resume(fern_thread *t, void *block)
{
    /* The previous context's after-switch action first (it may hold a
     * queue lock until then, and restoring takes system calls). */
    sched_after_switch();
    struct hib_block *b = block;
    unsigned spins = 0;
    /* t was woken while parked on wait_obj (cleared by t itself once it
     * returns from its wait, so it still names the object): the parked
     * neighbours restore_near restores with t are those that parked on it
     * too, likely woken next (a broadcast's heirs). */
    const void *obj = LOAD_RELAXED(&t->wait_obj);
    for (;;) {
        uint8_t h = LOAD(&t->hib);
        if (h == H_RESIDENT || h == H_RESIDENT_SEEN) {
            /* Restored already (by a toucher, or with a neighbour): no
             * system call. A CAS: the monitor may have taken it to BUSY
             * from a stale look (it lets go once it sees the thread run). */
            if (CAS(&t->hib, &h, H_NONE))
                break;
            continue;
        }
        if (h == H_DONE) {
            /* t runs with its stack hibernated: no signal handler from the
             * CAS until it is back (signals_block). */
            sigset_t old;
            signals_block(&old);
            if (CAS(&t->hib, &h, H_RESTORING)) {
                struct slot_ref r;
                if (stack_slot_of((const void *)B_SP(b), &r)) {
                    restore_near(t, &r, obj, R_AHEAD); /* -> RESIDENT, then NONE above */
                } else {
                    struct item it;
                    item_of(&it, t);
                    restore(&it, 1, R_SELF);
                }
            }
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            continue;
        }
        wait_a_bit(&spins); /* a toucher restores it, or the monitor lets go */
    }
    void *sp = (void *)B_SP(b);
    size_t bytes = sizeof *b + (size_t)B_LIVE(b);
    STORE((fern_thread **)B_OWNER(b), NULL);
    ADD_RELAXED(&H.bytes, -bytes);
    free(b);
    return sp;
}

/* ---- the monitor's side ---- */

bool hib_scan_due(int64_t now, bool busy, int64_t *next)
{
    if (!hib_on)
        return false;
    H.now = now;
    H.now_ticks = HIB_TICKS(now);
    H.quiet = !busy;
    if (LOAD_RELAXED(&H.touched)) {
        STORE_RELAXED(&H.touched, 0);
        busy = true;
    }
    if (busy) {
        H.pending = true; /* threads may have parked since the last scan */
        H.last_busy = now;
    }
    if (!H.scanning && H.pending && now >= H.next_scan) {
        H.scan_start = now;
        H.eligible = INT64_MAX;
    }
    if (H.scanning || (H.pending && now >= H.next_scan))
        return true;
    if (H.pending && H.next_scan < *next)
        *next = H.next_scan;
    return false;
}

/* Let t go: the handshake failed or t cannot be hibernated. */
static void hib_release(fern_thread *t, uint8_t to)
{
    for (;;) {
        uint8_t h = LOAD(&t->hib);
        if (h == H_BUSY) {
            if (CAS(&t->hib, &h, to))
                return;
            continue;
        }
        /* H_BUSY | H_WAKE: a waker left t to us. */
        STORE(&t->hib, to);
        sched_ready(t);
        return;
    }
}

void hib_scan_thread(fern_thread *t)
{
    if (!H.scanning) {
        H.scanning = true;
        H.marked = false;
    }
    if (LOAD(&t->run_state) != T_PARKED || LOAD_RELAXED(&t->hib_no) || !LOAD_RELAXED(&t->stack))
        return;
    uint8_t h = LOAD_RELAXED(&t->hib);
    if ((h == H_NONE || h == H_RESIDENT) && H.delay_ns > 0) {
        /* Parked now; hibernated at a later scan if still parked then
         * (and, with a stamp, parked for the delay since this look). */
        if (H.unit_ns) {
            uint8_t at = (uint8_t)((fern_now_ns() + H.unit_ns - 1) / H.unit_ns);
            STORE_RELAXED(&t->hib_at, at);
        }
        if (CAS(&t->hib, &h, h == H_NONE ? H_SEEN : H_RESIDENT_SEEN)) {
            H.marked = true;
            int64_t at = H.now + (int64_t)(HIB_AT_UNITS + 2) * H.unit_ns;
            if (H.unit_ns && at < H.eligible)
                H.eligible = at;
        }
        return;
    }
    if ((h == H_SEEN || h == H_RESIDENT_SEEN) && H.unit_ns) {
        /* The stamp counts in units of delay / HIB_AT_UNITS, modulo 256,
         * rounded up at the look and down now: the age it gives is never
         * more than the real one (a wrap makes it less: later, not early). */
        unsigned age = (uint8_t)((uint8_t)(H.now / H.unit_ns) - LOAD_RELAXED(&t->hib_at));
        if (age < HIB_AT_UNITS + 1) {
            int64_t at = H.now + (int64_t)(HIB_AT_UNITS + 1 - age) * H.unit_ns;
            H.marked = true;
            if (at < H.eligible)
                H.eligible = at;
            return;
        }
    }
    /* RESIDENT: restored by a touch and still parked: again, into the
     * block it has (its live range has not changed). */
    bool was = h == H_RESIDENT || h == H_RESIDENT_SEEN;
    if ((h == H_NONE || h == H_SEEN || was) && CAS(&t->hib, &h, H_BUSY)) {
        if (was) {
            /* Ours while BUSY (hib_resume waits): its block is stable. */
            struct hib_block *b = (struct hib_block *)LOAD_RELAXED(&t->sp);
            int64_t since = (int64_t)(uint32_t)(H.now_ticks - B_TOUCH_AT(b)) << 16;
            int64_t wait = H.delay_ns << B_TOUCHES(b);
            if (B_TOUCHES(b) && (since < wait || (!H.quiet && since < 8 * wait))) {
                hib_release(t, h);
                return;
            }
        }
        H.was[H.n] = was;
        H.batch[H.n++] = t;
        if (H.n == HIB_BATCH)
            hib_scan_flush();
    }
}

/* Mark the runs of v (sorted) to seal: those covering a whole HIB_PMD
 * block, while seals[] has room (an entry is reserved for each). Returns
 * how many items are to be sealed. */
static unsigned seal_pick(struct item *v, unsigned m)
{
    unsigned count = 0;
    if (LOAD_RELAXED(&H.no_seal))
        return 0;
    spin_lock(&H.seal_lock);
    for (unsigned i = 0; i < m;) {
        unsigned j = run_end(v, m, i);
        uintptr_t lo = (uintptr_t)v[i].lo, hi = (uintptr_t)v[j].top;
        bool seal = ((lo + HIB_PMD - 1) & ~(HIB_PMD - 1)) + HIB_PMD <= hi &&
                    H.seal_used < HIB_SEAL_MAX;
        if (seal) {
            H.seal_used++;
            count += j - i + 1;
        }
        for (unsigned q = i; q <= j; q++)
            v[q].sealed = seal;
        i = j + 1;
    }
    spin_unlock(&H.seal_lock);
    return count;
}

/* Enter v's sealed runs in seals[] and tag their owner entries (before
 * their threads become H_DONE); give back the reservations of runs that
 * could not be sealed after all. */
static void seal_publish(struct item *v, unsigned m)
{
    unsigned e = 0;
    spin_lock(&H.seal_lock);
    for (unsigned i = 0; i < m;) {
        unsigned j = run_end(v, m, i);
        if (v[i].sealed) {
            while (seals[e].lo)
                e++; /* a free entry: one was reserved for this run */
            seals[e] = (struct seal){v[i].lo, v[j].top, v[i].owner, j - i + 1,
                                     (size_t)(v[i].top - v[i].lo) + stack_page()};
            for (unsigned q = i; q <= j; q++)
                STORE(v[q].owner, (fern_thread *)((uintptr_t)v[q].t | OWN_SEALED));
        }
        i = j + 1;
    }
    spin_unlock(&H.seal_lock);
}

static int item_cmp(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void hib_scan_flush(void)
{
    unsigned n = H.n, m = 0;
    H.n = 0;
    if (!n)
        return;
    membarrier_all(); /* the heavy side of the handshake (top of the file) */
    struct item *v = H.items;
    for (unsigned i = 0; i < n; i++) {
        fern_thread *t = H.batch[i];
        if (H.was[i]) {
            /* Its stack is resident and the block still holds its frame.
             * An heir now (HN_HEIR, set since the scan): it runs soon. */
            if (LOAD(&t->run_state) != T_PARKED || LOAD_RELAXED(&t->hib_no)) {
                hib_release(t, H_RESIDENT);
                continue;
            }
            item_of(&v[m], t);
            v[m++].resident = true;
            continue;
        }
        struct stack *s = LOAD_RELAXED(&t->stack);
        char *sp = LOAD_RELAXED(&t->sp);
        struct slot_ref r;
        bool ok = LOAD(&t->run_state) == T_PARKED && !LOAD_RELAXED(&t->hib_no) && s &&
                  s->guard == FERN_GUARD_MADVISE && stack_slot_of(sp, &r) && sp >= r.lo &&
                  sp < r.top && (size_t)(r.top - sp) <= HIB_LIVE_MAX &&
                  (char *)(s + 1) == r.top;
        if (!ok && LOAD(&t->run_state) == T_PARKED && !LOAD_RELAXED(&t->hib_no))
            __atomic_fetch_or(&t->hib_no, HN_UNFIT, __ATOMIC_RELAXED); /* not again */
        struct hib_block *b = ok ? malloc(sizeof *b + (size_t)(r.top - sp)) : NULL;
        if (!b) {
            hib_release(t, H_NONE);
            continue;
        }
        v[m] = (struct item){t, b, r.lo, r.top, sp, &r.owners[r.index], false, false, false};
        STORE(v[m].owner, t); /* a fault from here on finds t (H_BUSY: it waits) */
        m++;
    }
    if (!m)
        return;
    qsort(v, m, sizeof *v, item_cmp);
    unsigned k = 0;
    /* With a protection key the runs are shut to every other thread from
     * here on (one call per run, not two: readers wait too); without one,
     * read-only for the copy, then PROT_NONE. */
    bool keyed = H.pkey >= 0;
    if (each_run(v, m, keyed ? RUN_SHUT : RUN_READ_ONLY)) {
        uint32_t pkru = key_open();
        for (unsigned i = 0; i < m; i++) {
            struct hib_block *b = v[i].b;
            size_t live = (size_t)(v[i].top - v[i].sp);
            copy_words(b->data, v[i].sp, live);
            if (v[i].resident)
                continue;
            arch_hib_frame(b->frame, b->data, v[i].t, b);
            B_SP(b) = (uint64_t)(uintptr_t)v[i].sp;
            B_LO(b) = (uint64_t)(uintptr_t)v[i].lo;
            B_WORD3(b) = live;
            B_OWNER(b) = (uint64_t)(uintptr_t)v[i].owner;
        }
        /* Readers too must fault from here on: once a page is freed, a
         * read of it would see zeros. */
        if (!keyed && !each_run(v, m, RUN_SHUT))
            die("fern: cannot protect stacks being hibernated (vm.max_map_count?); aborting\n");
        /* The runs that cover a whole page-table page's 2 MiB are sealed
         * (top of the file): their guards out, their pages freed in one
         * call each, and they stay shut. */
        unsigned sealing = seal_pick(v, m);
        for (unsigned i = 0; i < m;) {
            unsigned j = run_end(v, m, i);
            if (v[i].sealed && run_do(v[i].lo, (size_t)(v[j].top - v[i].lo), RUN_SEAL) != 0) {
                /* Put the guards back: the run gets its bytes back below. */
                for (unsigned q = i; q <= j; q++) {
                    struct iovec g = {v[q].lo - stack_page(), stack_page()};
                    if (madvise_many(&g, 1, MADV_GUARD_INSTALL) != (long)g.iov_len)
                        die("fern: cannot undo a failed hibernation; aborting\n");
                    v[q].sealed = false;
                }
                sealing -= j - i + 1;
                spin_lock(&H.seal_lock);
                H.seal_used--; /* its reservation (seal_pick) */
                spin_unlock(&H.seal_lock);
                STORE_RELAXED(&H.no_seal, true);
                continue; /* i stays: not released, and not sealed now */
            }
            for (unsigned q = i; q <= j; q++)
                v[q].ok = v[q].sealed;
            i = j + 1;
        }
        /* The other runs' pages go with one MADV_DONTNEED per run of
         * adjacent slots; then the guard markers go in over the live pages
         * alone, which are empty by then (no page to free, no TLB flush per
         * stack). */
        unsigned ni = 0;
        for (unsigned i = 0; i < m; i++)
            if (!v[i].ok) {
                H.iov[ni] = live_pages(&v[i]);
                H.iov_item[ni++] = i;
            }
        long done = -1;
        if (!ni)
            done = 0;
        else if (each_run_but_sealed(v, m, RUN_RELEASE))
            done = madvise_many(H.iov, ni, MADV_GUARD_INSTALL);
        /* Guards go in in order: the first kk of those are hibernated. */
        unsigned kk = 0;
        for (long left = done; kk < ni && left >= (long)H.iov[kk].iov_len; kk++) {
            left -= (long)H.iov[kk].iov_len;
            v[H.iov_item[kk]].ok = true;
        }
        /* The others have lost their pages (or some): remove any guard
         * half put in and put their bytes back; they stay resident. */
        if (kk < ni) {
            int fd = keyed ? -1 : mem_fd();
            for (unsigned i = kk; i < ni; i++) {
                if (madvise_many(&H.iov[i], 1, MADV_GUARD_REMOVE) != (long)H.iov[i].iov_len)
                    die("fern: cannot undo a failed hibernation; aborting\n");
                put_back(fd, &v[H.iov_item[i]]);
            }
        }
        key_close(pkru);
        for (unsigned i = 0; i < m; i++)
            if (v[i].ok) {
                k++;
                if (!v[i].resident)
                    STORE_RELAXED(&v[i].t->sp, (void *)v[i].b);
            }
        if (sealing)
            seal_publish(v, m);
        if (!each_run_but_sealed(v, m, RUN_OPEN)) {
            fprintf(stderr, "fern: cannot make hibernated stacks writable again; aborting\n");
            abort();
        }
        if (kk < ni) {
            static int warned;
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                fprintf(stderr, "fern: MADV_GUARD_INSTALL failed (%s); stack hibernation stops\n",
                        strerror(errno));
            STORE_RELAXED(&hib_on, false);
        }
    } else {
        /* Out of mappings (vm.max_map_count): try again at the next scan. */
        each_run(v, m, RUN_OPEN);
    }
    ADD_RELAXED(&H.gen, 1); /* the windows are closed (see hib_fault) */
    hib_release_fence();
    uint64_t bytes = 0;
    for (unsigned i = 0; i < m; i++) {
        if (v[i].ok) {
            if (!v[i].resident)
                bytes += sizeof *v[i].b + (size_t)(v[i].top - v[i].sp);
            hib_release(v[i].t, H_DONE);
            continue;
        }
        if (v[i].resident) {
            hib_release(v[i].t, H_RESIDENT);
            continue;
        }
        STORE(v[i].owner, NULL);
        free(v[i].b);
        hib_release(v[i].t, H_NONE);
    }
    ADD_RELAXED(&H.hibernated, k);
    ADD_RELAXED(&H.hibernations, k);
    ADD_RELAXED(&H.bytes, bytes);
    if (k)
        TRACE(trace_event(NULL, TR_HIBERNATE, k, bytes, 0));
}

void hib_scan_end(int64_t now)
{
    hib_scan_flush();
    H.scanning = false;
    /* Another scan if this one left threads to look at again (marked
     * ones), or if the workers were busy since it began (threads may have
     * parked behind it). */
    H.pending = H.marked || H.last_busy >= H.scan_start;
    H.next_scan = now + H.delay_ns;
    /* With stamps, as soon as the first thread it marked is old enough,
     * but not sooner than a quarter of the delay after this one: threads
     * parked at a steady rate would otherwise keep the monitor scanning. */
    if (H.unit_ns && H.marked) {
        int64_t at = H.eligible > now + H.delay_ns / 4 ? H.eligible : now + H.delay_ns / 4;
        if (at < H.next_scan)
            H.next_scan = at;
    }
}

void hib_forget(fern_thread *t)
{
    uint8_t h = t->hib;
    if (h == H_DONE || h == H_RESIDENT || h == H_RESIDENT_SEEN) {
        free(t->sp);
        t->sp = NULL;
    }
    t->hib = H_NONE;
}

void hib_stats(struct fern_stats *s)
{
    s->hibernate = LOAD_RELAXED(&hib_on);
    s->hibernated = LOAD_RELAXED(&H.hibernated);
    s->hibernations = LOAD_RELAXED(&H.hibernations);
    s->hibernate_restores = LOAD_RELAXED(&H.restores);
    s->hibernate_touches = LOAD_RELAXED(&H.touches);
    s->hibernate_bytes = LOAD_RELAXED(&H.bytes);
}
