/* SPDX-License-Identifier: MIT */
/*
 * The tracer: fern_trace_start / fern_trace_stop, $FERN_TRACE, the event
 * points the layers below call (sched/trace.h), the writer of Chrome
 * trace-event JSON (what Perfetto and chrome://tracing open) and the flight
 * recorder's dumps. docs/debugging.md ("Tracing") is the user's side.
 *
 * Recording. Each worker records into its own buffer (base/trace.h: no
 * lock, no system call; a full buffer drops and counts). A worker sets its
 * buffer up itself, at its first event of a session: allocated once (the
 * one allocation, reused by later sessions of the same size and mode),
 * given a track number and listed in the session's registry under a spin
 * lock. So a session needs no walk of the workers, and workers that start
 * later (a new cluster, a compensation worker) are traced like the others.
 * Buffers live until fern_shutdown (trace_fini), after the workers that
 * write them are gone: a worker still inside an event point when a session
 * ends writes into memory that is still its buffer. Threads that are no
 * worker share one buffer, under its spin lock.
 *
 * The JSON. One file in the array format ("[" and one event a line; the
 * closing "]" is optional in that format, so a file cut short by a crash
 * still opens). Per worker, one track (tid: the worker's kernel thread id,
 * named "fern worker N"); each run of a green thread is a complete slice
 * ("X") named after the thread, whose args say why it stopped (yield, park
 * and on what, preempted, migrate, exit); a worker's time in its idle
 * context is a slice "idle". A wake-up or a spawn is a flow ("s" on the
 * waker's track, inside its slice; "f" binding to the woken thread's next
 * slice), so a slice nests in its track and every wake-up has its arrow.
 * Preemptions, steals, migrations, poller wake-ups, the monitor's spares
 * and rescues are instant events; fern_blocking jobs are slices on their
 * helper's track; the writer samples running / runnable / parked / live
 * threads as four counters when it drains, at most every COUNTER_NS. With
 * FERN_TRACE_THREADS=1 each run is drawn again on its thread's own track
 * (thread_slice). Times are microseconds since the session began.
 *
 * Writer. In file mode a kernel thread ("fern-trace") drains every buffer
 * when the fullest is about an eighth full (every 0.25 to 100 ms), formats
 * with hand-written number formatting (no stdio: the same code serves the
 * crash path) and writes in large blocks; fern_trace_stop joins it after
 * its last drain.
 * The flight recorder (FERN_TRACE=ring) has no writer: its buffers are
 * rings, and a dump (fern_dump and so the dump signal, a deadlock report, a
 * crash report) formats each worker's last events into a file of its own.
 * The crash dump runs in a signal handler: it takes no lock (a flag that
 * it skips when set), allocates nothing, and makes only raw openat, write
 * and close system calls (base/sys.h: never fern-hook's). In file mode the
 * crash report parks the writer and appends the events it had not drained
 * (file_crash).
 */
#include "debug/debug.h"
#include "sched/trace.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TRACKS_MAX 1024            /* buffers a session lists */
#define OUTSIDE_SLOTS 64           /* fern_blocking helpers' open jobs, per formatter */
#define EVENTS_STREAM 65536u       /* default slots per buffer, file mode */
#define EVENTS_RING 16384u         /* default slots per buffer, flight recorder */
#define WRITER_MIN_NS 250000       /* the writer's period: at least */
#define WRITER_MAX_NS 100000000    /* ... and at most (a crash report writes the rest) */
#define COUNTER_NS 10000000        /* counter samples */
#define OUT_CAP ((size_t)1 << 16)  /* the writer's output block: stays in cache */
#define RING_OUT_CAP ((size_t)1 << 16)

uint8_t trace_tsc;
uint64_t trace_t0;
uint32_t trace_session;

/* A buffer ever allocated, freed by trace_fini. */
struct held {
    struct trace_buf *b;
    size_t size;
};

static struct {
    struct plock mu;         /* start, stop, the settings below */
    bool active;
    bool ring;
    uint32_t events;            /* slots per buffer */
    char path[4096];            /* file mode: the file; ring: the dumps' directory */
    int fd;
    pthread_t writer;
    bool writer_running;
    uint32_t stop;              /* the writer's last drain is due */
    uint32_t wake;              /* 1: the writer's nap ends now (stop, a crash) */
    int err;                    /* the first write error */
    uint64_t written;           /* events formatted */
    uint64_t writer_cpu_ns;     /* the writer thread's CPU time, at its end */
    /* the registry: buffers set up for this session, append-only */
    uint32_t reg_lock;
    uint32_t ntracks;
    struct trace_buf *tracks[TRACKS_MAX];
    uint64_t dropped0[TRACKS_MAX];  /* dropped count when listed */
    uint32_t unlisted;          /* workers past TRACKS_MAX: not traced */
    const void *clusters[TRACKS_MAX]; /* clusters by number, this session */
    uint32_t nclusters;
    struct trace_buf *outside;  /* threads that are no worker */
    /* every buffer allocated, for trace_fini (under reg_lock) */
    struct held *held;
    uint32_t nheld, capheld;
    /* the clock: ticks to ns as ns = ticks * mul >> 32 */
    uint64_t mul;
    uint64_t ns0;               /* CLOCK_MONOTONIC when the session began */
    uint32_t dumps;             /* flight-recorder dumps written */
    uint32_t dumping;           /* a dump runs (crash path: skip, never wait) */
    uint32_t crashed;           /* file mode: a crash report takes over the file */
    uint32_t writer_parked;     /* ... and the writer has written its last line */
    bool atexit_set;
    bool threads;               /* FERN_TRACE_THREADS: a track per green thread too */
} S = {.mu = PLOCK_INIT, .fd = -1};

static __thread int32_t my_tid;

static int32_t tid_self(void)
{
    if (!my_tid)
        my_tid = (int32_t)syscall(SYS_gettid);
    return my_tid;
}

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */
/* ------------------------------------------------------------------------ */

static struct trace_buf *buf_alloc(uint32_t events, bool ring)
{
    size_t size = sizeof(struct trace_buf) + (size_t)events * sizeof(struct trace_ev);
    struct trace_buf *b = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (!b)
        return NULL;
    memset(b, 0, sizeof *b);
    b->mask = events - 1;
    b->ring = ring;
    spin_lock(&S.reg_lock);
    if (S.nheld == S.capheld) {
        uint32_t cap = S.capheld ? 2 * S.capheld : 64;
        struct held *h = realloc(S.held, cap * sizeof *h);
        if (!h) {
            spin_unlock(&S.reg_lock);
            free(b);
            return NULL;
        }
        S.held = h;
        S.capheld = cap;
    }
    S.held[S.nheld++] = (struct held){b, size};
    spin_unlock(&S.reg_lock);
    return b;
}

/* List b in this session's registry as a track; false if full. Under b's
 * spin lock too: the shared buffer's writers (put_outside) may be at it;
 * a worker's is listed by its owner, and the monitor reads its track
 * (trace_track) unlocked. */
static bool buf_list(struct trace_buf *b, uint32_t session)
{
    bool ok = false;
    spin_lock(&S.reg_lock);
    spin_lock(&b->lock);
    if (LOAD_RELAXED(&trace_session) == session && S.ntracks < TRACKS_MAX) {
        uint32_t i = S.ntracks;
        STORE_RELAXED(&b->track, i + 1);
        STORE_RELAXED(&b->tail, LOAD_RELAXED(&b->head));
        b->flow_seq = 0;
        S.dropped0[i] = LOAD_RELAXED(&b->dropped);
        STORE_RELAXED(&b->session, session);
        S.tracks[i] = b;
        STORE(&S.ntracks, i + 1); /* the writer reads the list up to here */
        ok = true;
    } else if (S.ntracks >= TRACKS_MAX) {
        /* Not listed: it records for nobody (and drops once full) rather
         * than ask again at every event. */
        STORE_RELAXED(&b->session, session);
        STORE_RELAXED(&b->tail, LOAD_RELAXED(&b->head));
        S.unlisted++;
    }
    spin_unlock(&b->lock);
    spin_unlock(&S.reg_lock);
    return ok;
}

/* The calling worker's buffer for this session, set up at its first event
 * (see the top); NULL if it cannot have one. */
static __attribute__((noinline)) struct trace_buf *buf_setup(struct worker *w)
{
    uint32_t session = LOAD(&trace_session); /* then the session's settings */
    uint32_t events = LOAD_RELAXED(&S.events);
    bool ring = LOAD_RELAXED(&S.ring);
    struct trace_buf *b = w->trace;
    if (!b || b->mask + 1 != events || b->ring != ring) {
        /* The old one (another size or mode) stays allocated until
         * trace_fini: nothing else refers to it. */
        if (!(b = buf_alloc(events, ring)))
            return NULL;
        STORE(&w->trace, b); /* its zeroed head: for trace_track (the monitor) */
    }
    b->tid = w->tid;
    /* Clusters are numbered in the order their workers first record. */
    unsigned ci = 0;
    spin_lock(&S.reg_lock);
    while (ci < S.nclusters && S.clusters[ci] != w->cluster)
        ci++;
    if (ci == S.nclusters && ci < TRACKS_MAX)
        S.clusters[S.nclusters++] = w->cluster;
    spin_unlock(&S.reg_lock);
    char *p = b->label;
    p += fmt_str(p, "fern worker ", 16);
    p += fmt_u64(p, w->index);
    if (ci) {
        p += fmt_str(p, " (cluster ", 16);
        p += fmt_u64(p, ci);
        *p++ = ')';
    }
    if (LOAD(&w->spare))
        p += fmt_str(p, " spare", 8);
    *p = 0;
    buf_list(b, session);
    return LOAD_RELAXED(&b->session) == session ? b : NULL;
}

static inline struct trace_buf *buf_of(struct worker *w)
{
    struct trace_buf *b = w->trace;
    if (unlikely(!b || LOAD_RELAXED(&b->session) != LOAD_RELAXED(&trace_session)))
        b = buf_setup(w);
    return b;
}


/* ------------------------------------------------------------------------ */
/* Event points (sched/trace.h)                                              */
/* ------------------------------------------------------------------------ */

/* An event of a thread that is no worker: into the shared buffer, its
 * kernel thread id in c's top half. */
static void put_outside(unsigned type, uint64_t a, uint64_t x, uint64_t c, uint32_t *flow)
{
    struct trace_buf *b = LOAD(&S.outside);
    if (!b || LOAD_RELAXED(&b->session) != LOAD_RELAXED(&trace_session))
        return;
    c |= (uint64_t)(uint32_t)tid_self() << 32;
    spin_lock(&b->lock);
    if (flow)
        *flow = trace_flow_new(b), x = *flow;
    trace_put(b, trace_clock(), type, a, x, c);
    spin_unlock(&b->lock);
}

void *trace_switch(struct worker *w, fern_thread *cur, fern_thread *next)
{
    struct trace_buf *b = buf_of(w);
    if (!b)
        return next->sp;
    uint64_t ts = trace_clock();
    if (cur != &w->g0) {
        /* A yield and a preemption store T_RUNNABLE and an exit T_EXITING
         * before their switch; a park (a wait, a migration) leaves
         * T_RUNNING until its after action stores T_PARKED (sync/wait.c). */
        uint8_t st = LOAD_RELAXED(&cur->run_state);
        if (st == T_PARKED || st == T_RUNNING)
            trace_put(b, ts, TR_PARK, cur->id, (uintptr_t)LOAD_RELAXED(&cur->wait_obj),
                      (uintptr_t)LOAD_RELAXED(&cur->wait_what));
        else
            trace_put(b, ts, st == T_EXITING ? TR_EXIT : TR_YIELD, cur->id, 0, 0);
    }
    if (next != &w->g0) {
        uint32_t f = next->trace_flow;
        if (f)
            next->trace_flow = 0;
        trace_put(b, ts, TR_RUN, next->id, f, (uintptr_t)next);
    } else {
        trace_put(b, ts, TR_RUN, 0, 0, 0);
    }
    return next->sp;
}

/* A wake-up's kind, in its flow id: what the arrow is named (flow_tails:
 * handoff, queued, timer, poll, remote; a spawn's is "spawn"). */
enum { WK_HANDOFF, WK_QUEUED, WK_TIMER, WK_POLL, WK_REMOTE };
static uint32_t wake_kind(uint64_t flags)
{
    if (flags & TRW_REMOTE)
        return WK_REMOTE;
    if (flags & TRW_TIMER)
        return WK_TIMER;
    if (flags & TRW_POLL)
        return WK_POLL;
    return flags & TRW_HANDOFF ? WK_HANDOFF : WK_QUEUED;
}

void trace_wake(struct worker *w, fern_thread *t, bool tail)
{
    uint64_t flags = tail ? TRW_TAIL : 0;
    if (!w) {
        uint32_t f = 0;
        put_outside(TR_WAKE, t->id, 0, flags | TRW_REMOTE, &f);
        t->trace_flow = f ? f | TRACE_FLOW_KIND(WK_REMOTE) : 0;
        return;
    }
    struct trace_buf *b = buf_of(w);
    if (!b)
        return;
    if (w->cluster != t->cluster)
        flags |= TRW_REMOTE;
    else if (w->wake_from == WAKE_TIMER)
        flags |= TRW_TIMER;
    else if (w->wake_from == WAKE_POLL)
        flags |= TRW_POLL;
    else if (!tail)
        flags |= TRW_HANDOFF;
    uint32_t f = trace_flow_new(b) | TRACE_FLOW_KIND(wake_kind(flags));
    t->trace_flow = f;
    trace_put(b, trace_clock(), TR_WAKE, t->id, f, flags);
}

void trace_spawn(struct worker *w, fern_thread *t)
{
    if (!w) {
        uint32_t f = 0;
        put_outside(TR_SPAWN, t->id, 0, 0, &f);
        t->trace_flow = f ? f | TRACE_FLOW_SPAWN : 0;
        return;
    }
    struct trace_buf *b = buf_of(w);
    if (!b)
        return;
    uint32_t f = trace_flow_new(b) | TRACE_FLOW_SPAWN;
    t->trace_flow = f;
    trace_put(b, trace_clock(), TR_SPAWN, t->id, f, (uintptr_t)t);
}

void trace_event(struct worker *w, unsigned type, uint64_t a, uint64_t x, uint64_t c)
{
    if (!w) {
        put_outside(type, a, x, c, NULL);
        return;
    }
    struct trace_buf *b = buf_of(w);
    if (b)
        trace_put(b, trace_clock(), type, a, x, c);
}

/* A restore that a touch forced (sched/hibernate.c) runs in the fault
 * handler, which may have interrupted anything on its thread, even (from a
 * signal handler of the program's) an event being recorded into its
 * worker's buffer. So it goes into a table of its own, taken with a
 * compare-and-swap and published with a sequence number: atomics only,
 * async-signal-safe. The writer drains it after the workers' buffers; in
 * the flight recorder it is a ring like theirs (a dump checks each slot's
 * sequence before and after copying it). */
#define TOUCHES 256
struct touch_rec {
    uint64_t seq;       /* 1 + its index, stored last (release) */
    uint64_t ts, n, first;
    uint32_t session;
    int32_t tid;
};
static struct {
    uint64_t head;      /* slots taken */
    uint64_t tail;      /* slots formatted (file mode) */
    uint64_t dropped;   /* file mode: the table was full */
    struct touch_rec rec[TOUCHES];
} T;

void trace_touch(uint64_t n, uint64_t first)
{
    uint32_t session = LOAD_RELAXED(&trace_session);
    bool ring = LOAD_RELAXED(&S.ring);
    uint64_t h = LOAD_RELAXED(&T.head);
    do {
        if (!ring && h - LOAD(&T.tail) >= TOUCHES) {
            ADD_RELAXED(&T.dropped, 1);
            return;
        }
    } while (!__atomic_compare_exchange_n(&T.head, &h, h + 1, true, __ATOMIC_ACQUIRE,
                                          __ATOMIC_RELAXED));
    struct touch_rec *r = &T.rec[h % TOUCHES];
    /* A ring's reader skips the slot meanwhile: the fields are stored with
     * release, so one that sees a new field sees this 0 (or later) when it
     * reads seq again. */
    STORE_RELAXED(&r->seq, 0);
    STORE(&r->ts, trace_clock());
    STORE(&r->n, n);
    STORE(&r->first, first);
    STORE(&r->session, session);
    STORE(&r->tid, (int32_t)arch_syscall6(SYS_gettid, 0, 0, 0, 0, 0, 0));
    STORE(&r->seq, h + 1);
}

/* ------------------------------------------------------------------------ */
/* Formatting                                                                */
/* ------------------------------------------------------------------------ */

/* A track's state while its events are formatted. */
struct trk {
    uint8_t open;       /* 0 nothing, 1 a thread's run, 2 idle */
    uint8_t pend;       /* TR_PREEMPT / TR_MIGRATE seen for the open run */
    uint8_t named;      /* its thread_name line is out */
    uint64_t id, ts, last;
    const fern_thread *desc;
};
struct job_open {
    int32_t tid;
    uint64_t caller, fn, ts;
};
struct fmt {
    int fd;
    int err;
    char *buf;
    size_t n, cap;
    uint64_t events;
    int pid;
    struct trk *trk;    /* [TRACKS_MAX + 1], by track */
    struct name_slot *names; /* [NAMES], or NULL */
    int64_t head_tid;   /* phead's: the tid of head */
    uint8_t head_len;   /* its length; 0: none yet */
    char head[48];      /* ","pid":P,"tid":T,"ts": */
    uint64_t *tnamed;   /* FERN_TRACE_THREADS: [TNAMED], the thread tracks
                           named, by id's hash; NULL: no thread tracks */
    struct job_open jobs[OUTSIDE_SLOTS];
};

static void out_flush(struct fmt *f)
{
    size_t off = 0;
    while (off < f->n && !f->err) {
        long r = sys_write(f->fd, f->buf + off, f->n - off);
        if (r < 0) {
            if (r == -EINTR)
                continue;
            f->err = (int)-r;
        } else {
            off += (size_t)r;
        }
    }
    f->n = 0;
}

/* Room for one event's line (every line is shorter than 512 bytes). */
static inline char *room(struct fmt *f)
{
    if (f->cap - f->n < 512)
        out_flush(f);
    return f->buf + f->n;
}
static inline char *ps(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}
/* A string literal: its length is known, so a memcpy the compiler inlines. */
#define PL(p, lit) ((char *)memcpy((p), lit, sizeof lit - 1) + sizeof lit - 1)
/* Decimal, two digits per division (by a constant: a multiplication),
 * written in place from the last digit back once the length is known (a
 * copy of variable length would be a call to memcpy for every number). */
static inline char *pu(char *p, uint64_t v)
{
    static const char d2[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";
    static const uint64_t pow10[20] = {
        1u, 10u, 100u, 1000u, 10000u, 100000u, 1000000u, 10000000u, 100000000u,
        1000000000u, 10000000000u, 100000000000u, 1000000000000u, 10000000000000u,
        100000000000000u, 1000000000000000u, 10000000000000000u, 100000000000000000u,
        1000000000000000000u, 10000000000000000000u};
    /* The digits from the bit length: log10(2) ~ 1233 / 4096 gives
     * floor(log10) or one more, which one comparison settles (a loop over
     * pow10 took a branch per digit: a tenth of the writer's time). */
    uint64_t x = v | 1;
    unsigned t = (unsigned)(64 - __builtin_clzll(x)) * 1233u >> 12;
    unsigned n = t - (x < pow10[t]) + 1;
    char *q = p + n;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        q -= 2;
        memcpy(q, d2 + 2 * r, 2);
    }
    if (v >= 10)
        memcpy(q - 2, d2 + 2 * v, 2);
    else
        q[-1] = (char)('0' + v);
    return p + n;
}
static char *phex(char *p, uint64_t v)
{
    static const char d[] = "0123456789abcdef";
    char tmp[16];
    int n = 0;
    do {
        tmp[n++] = d[v & 15];
        v >>= 4;
    } while (v);
    *p++ = '0';
    *p++ = 'x';
    while (n)
        *p++ = tmp[--n];
    return p;
}
/* Ticks since the session began, as microseconds with three decimals. */
static char *pts(char *p, uint64_t ticks)
{
    uint64_t ns = (uint64_t)(((unsigned __int128)ticks * S.mul) >> 32);
    p = pu(p, ns / 1000);
    uint64_t r = ns % 1000;
    *p++ = '.';
    *p++ = (char)('0' + r / 100);
    *p++ = (char)('0' + r / 10 % 10);
    *p++ = (char)('0' + r % 10);
    return p;
}
/* A JSON string's body: quotes and backslashes escaped, control bytes dropped. */
static char *pjs(char *p, const char *s, size_t max)
{
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            *p++ = '\\';
        if (ch >= 0x20)
            *p++ = (char)ch;
    }
    return p;
}
/* An event's head, up to its timestamp. The part from the phase to "ts"
 * is the same for every event of a track: kept for the last tid (a drain
 * goes one track at a time) and copied whole. ph is one letter. */
static char *phead(struct fmt *f, char *p, const char *ph, int64_t tid, uint64_t ts)
{
    if (!f->head_len || tid != f->head_tid) {
        char *q = f->head;
        q = PL(q, "\",\"pid\":");
        q = pu(q, (uint64_t)f->pid);
        q = PL(q, ",\"tid\":");
        q = pu(q, (uint64_t)tid);
        q = PL(q, ",\"ts\":");
        f->head_len = (uint8_t)(q - f->head);
        f->head_tid = tid;
    }
    p = PL(p, "{\"ph\":\"");
    *p++ = ph[0];
    memcpy(p, f->head, sizeof f->head); /* a line has 512 bytes of room */
    return pts(p + f->head_len, ts);
}
static inline void line_end(struct fmt *f, char *p)
{
    *p++ = '}';
    *p++ = ',';
    *p++ = '\n';
    f->n = (size_t)(p - f->buf);
    f->events++;
}

/* The thread's name for a slice: its name if its descriptor still holds
 * it (a descriptor lives until shutdown; a reused one has another id),
 * else "thread ID". */
static size_t name_read(const fern_thread *t, uint64_t id, char name[32])
{
    size_t n = 0;
    if (t && LOAD_RELAXED(&t->id) == id)
        for (; n < 31 && (name[n] = LOAD_RELAXED(&t->name[n])) != 0; n++)
            ;
    name[n] = 0;
    return n;
}

/* The writer's names, by thread id: a descriptor's name shares its cache
 * line with the fields a wake-up and a switch write (trace_flow), so
 * reading it at every slice would pull that line away from the workers
 * each time. A name is read again every NAME_REREAD slices (fern_set_name
 * shows within that many), and a slot is taken over by the latest id that
 * hashes to it. The crash path has no cache (f->names NULL). */
#define NAMES 4096
#define NAME_REREAD 256
/* A slot is a cache line of its own: the writer's table is cold when it
 * wakes (the workers' data has evicted it), so a slot costs one miss, and
 * drain() prefetches the slots of the slices a few events ahead. */
struct name_slot {
    uint64_t id;
    uint32_t uses;
    uint8_t len;
    uint8_t plain;       /* no byte of name needs escaping: copied whole */
    char name[32];
} __attribute__((aligned(64)));

static inline size_t name_hash(uint64_t id) { return (size_t)((id * 0x9e3779b97f4a7c15u) >> 52); }

static char *pname(struct fmt *f, char *p, const fern_thread *t, uint64_t id)
{
    char buf[32];
    struct name_slot *c = f->names ? &f->names[name_hash(id)] : NULL;
    if (!c) {
        size_t n = name_read(t, id, buf);
        if (n)
            return pjs(p, buf, 31);
        p = PL(p, "thread ");
        return pu(p, id);
    }
    if (c->id != id || !(++c->uses % NAME_REREAD)) {
        size_t n = name_read(t, id, buf);
        if (n || c->id != id) { /* a reused descriptor keeps the name it had */
            bool plain = true;
            for (size_t i = 0; i < n; i++)
                plain &= buf[i] != '"' && buf[i] != '\\' && (unsigned char)buf[i] >= 0x20;
            memset(c->name, 0, sizeof c->name);
            memcpy(c->name, buf, n);
            c->id = id;
            c->uses = 1;
            c->len = (uint8_t)n;
            c->plain = plain;
        }
    }
    if (!c->len) {
        p = PL(p, "thread ");
        return pu(p, id);
    }
    if (c->plain) {
        /* A fixed-size copy (a line has 512 bytes of room), then the length. */
        memcpy(p, c->name, sizeof c->name);
        return p + c->len;
    }
    return pjs(p, c->name, 31);
}

static void track_name(struct fmt *f, const struct trace_buf *b, struct trk *k)
{
    if (k->named)
        return;
    k->named = 1;
    char *p = room(f);
    p = PL(p, "{\"ph\":\"M\",\"pid\":");
    p = pu(p, (uint64_t)f->pid);
    p = PL(p, ",\"tid\":");
    p = pu(p, (uint64_t)b->tid);
    p = PL(p, ",\"name\":\"thread_name\",\"args\":{\"name\":\"");
    p = pjs(p, b->label, sizeof b->label);
    p = PL(p, "\"}");
    line_end(f, p);
    p = room(f);
    p = PL(p, "{\"ph\":\"M\",\"pid\":");
    p = pu(p, (uint64_t)f->pid);
    p = PL(p, ",\"tid\":");
    p = pu(p, (uint64_t)b->tid);
    p = PL(p, ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":");
    p = pu(p, b->track);
    p = PL(p, "}");
    line_end(f, p);
}

static const char *why_name(unsigned type, uint8_t pend)
{
    if (pend == TR_PREEMPT)
        return "preempted";
    if (pend == TR_MIGRATE)
        return "migrate";
    switch (type) {
    case TR_YIELD: return "yield";
    case TR_PARK: return "park";
    case TR_EXIT: return "exit";
    case TR_RUN: return "switch";
    default: return "trace stopped";
    }
}

/* FERN_TRACE_THREADS: a track per green thread, in a process of its own
 * (pid | THREADS_PID: a kernel's pids are below 2^22) whose tids are the
 * threads' ids. Each run is drawn a second time there, named after the
 * worker it ran on, so one thread's life reads along one row. A thread's
 * track is named at its first run (again if another id took its slot in
 * f->tnamed: a repeated name line is harmless). */
#define THREADS_PID 0x40000000
#define TNAMED 4096

static char *thead(struct fmt *f, char *p, const char *ph, uint64_t id)
{
    p = PL(p, "{\"ph\":\"");
    *p++ = ph[0];
    p = PL(p, "\",\"pid\":");
    p = pu(p, (uint64_t)f->pid | THREADS_PID);
    p = PL(p, ",\"tid\":");
    return pu(p, id);
}

static void thread_slice(struct fmt *f, const struct trace_buf *b, const struct trk *k,
                         uint64_t begin, uint64_t ts, const char *why, const char *what)
{
    uint64_t *slot = &f->tnamed[name_hash(k->id) & (TNAMED - 1)];
    if (*slot != k->id) {
        *slot = k->id;
        char *p = room(f);
        p = thead(f, p, "M", k->id);
        p = PL(p, ",\"name\":\"thread_name\",\"args\":{\"name\":\"");
        p = pname(f, p, k->desc, k->id);
        p = PL(p, "\"}");
        line_end(f, p);
        p = room(f);
        p = thead(f, p, "M", k->id);
        p = PL(p, ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":");
        p = pu(p, k->id);
        *p++ = '}';
        line_end(f, p);
    }
    char *p = room(f);
    p = thead(f, p, "X", k->id);
    p = PL(p, ",\"ts\":");
    p = pts(p, begin);
    p = PL(p, ",\"dur\":");
    p = pts(p, ts - begin);
    p = PL(p, ",\"name\":\"");
    p = pjs(p, b->label, sizeof b->label);
    p = PL(p, "\",\"cat\":\"thread\",\"args\":{\"end\":\"");
    p = ps(p, why);
    *p++ = '"';
    if (what) {
        p = PL(p, ",\"on\":\"");
        p = pjs(p, what, 40);
        *p++ = '"';
    }
    *p++ = '}';
    line_end(f, p);
}

/* Close track k's open slice at ts; `e` is the event that closes it. */
static void slice_close(struct fmt *f, const struct trace_buf *b, struct trk *k, uint64_t ts,
                        const struct trace_ev *e, unsigned type)
{
    if (!k->open)
        return;
    uint64_t begin = k->ts <= ts ? k->ts : ts;
    char *p = room(f);
    p = phead(f, p, "X", b->tid, begin);
    p = PL(p, ",\"dur\":");
    p = pts(p, ts - begin);
    if (k->open == 2) {
        p = PL(p, ",\"name\":\"idle\",\"cat\":\"idle\"");
    } else {
        p = PL(p, ",\"name\":\"");
        p = pname(f, p, k->desc, k->id);
        p = PL(p, "\",\"cat\":\"run\",\"args\":{\"thread\":");
        p = pu(p, k->id);
        p = PL(p, ",\"end\":\"");
        const char *why = why_name(type, k->pend);
        p = ps(p, why);
        *p++ = '"';
        const char *what = type == TR_PARK && e ? (const char *)(uintptr_t)e->c : NULL;
        if (what) {
            p = PL(p, ",\"on\":\"");
            p = pjs(p, what, 40);
            *p++ = '"';
        }
        if (type == TR_PARK && e && e->b) {
            p = PL(p, ",\"obj\":\"");
            p = phex(p, e->b);
            *p++ = '"';
        }
        *p++ = '}';
        line_end(f, p);
        if (f->tnamed)
            thread_slice(f, b, k, begin, ts, why, what);
        k->open = 0;
        k->pend = 0;
        return;
    }
    line_end(f, p);
    k->open = 0;
    k->pend = 0;
}

/* A flow's line from its id on: the id, then a tail fixed by its kind and
 * its end ("s" or "f": a start, or an end binding to the next slice), so
 * one copy of known length (the arrow's name; two in five events are
 * flow ends or starts, and a byte loop per word was a tenth of the
 * writer's instructions). */
struct flow_tail {
    const char *s;
    uint8_t n;
};
#define FLOW_TAIL(cat, name, end) {",\"cat\":\"" cat "\",\"name\":\"" name "\"" end, \
                                   sizeof(",\"cat\":\"" cat "\",\"name\":\"" name "\"" end) - 1}
#define FLOW_TAILS(end)                                                                  \
    {FLOW_TAIL("wake", "handoff", end), FLOW_TAIL("wake", "queued", end),                \
     FLOW_TAIL("wake", "timer", end),   FLOW_TAIL("wake", "poll", end),                  \
     FLOW_TAIL("wake", "remote", end),  FLOW_TAIL("wake", "wake", end),                  \
     FLOW_TAIL("wake", "wake", end),    FLOW_TAIL("wake", "wake", end),                  \
     FLOW_TAIL("spawn", "spawn", end)}
static const struct flow_tail flow_tails[2][9] = {FLOW_TAILS(""), FLOW_TAILS(",\"bp\":\"e\"")};

static void flow(struct fmt *f, int64_t tid, uint64_t ts, const char *ph, uint64_t id)
{
    char *p = room(f);
    p = phead(f, p, ph, tid, ts);
    p = PL(p, ",\"id\":");
    p = pu(p, id);
    const struct flow_tail *t =
        &flow_tails[*ph == 'f'][id & TRACE_FLOW_SPAWN ? 8 : (id >> 20) & 7];
    memcpy(p, t->s, t->n);
    line_end(f, p + t->n);
}

static void label_of_track(char *out, uint64_t track)
{
    uint32_t n = LOAD(&S.ntracks);
    const char *l = track && track <= n ? S.tracks[track - 1]->label : "?";
    size_t i = 0;
    for (; i < 39 && l[i]; i++)
        out[i] = l[i];
    out[i] = 0;
}

/* The instant events: a name, up to three arguments taken from the
 * event's a, b or c, and a fixed tail. One function formats them all. */
enum { IV_U, IV_BIT0, IV_TRACK }; /* a number; its lowest bit; a track's label */
struct instant_arg {
    const char *key;  /* NULL: no more arguments */
    uint8_t from;     /* 0: a, 1: b, 2: c */
    uint8_t how;
};
struct instant_spec {
    const char *name;
    struct instant_arg arg[3];
    const char *tail; /* more arguments, literal: ",\"k\":\"v\"", or NULL */
};
/* On a worker's track, by type. */
static const struct instant_spec instants[TR_TYPES] = {
    [TR_PREEMPT] = {"preempted", {{"thread", 0, IV_U}}, NULL},
    [TR_MIGRATE] = {"migrate", {{"thread", 0, IV_U}}, NULL},
    [TR_STEAL] = {"steal", {{"threads", 0, IV_U}, {"from", 1, IV_TRACK}, {"first", 2, IV_U}}, NULL},
    [TR_POLL] = {"poller wake-up", {{"events", 0, IV_U}, {"slept", 1, IV_BIT0}}, NULL},
    [TR_RESTORE] = {"restored hibernated stacks", {{"threads", 0, IV_U}, {"first", 1, IV_U}}, NULL},
    [TR_SPARE_END] = {"compensation: spare worker ends", {{NULL, 0, 0}}, NULL},
};
/* On the track of a thread that is no worker, by type (c's top half is the
 * thread's tid: IV_BIT0 reads below it). */
static const struct instant_spec instants_outside[TR_TYPES] = {
    [TR_POLL] = {"poller wake-up", {{"events", 0, IV_U}}, ",\"by\":\"monitor\""},
    [TR_SPARE_START] = {"compensation: spare worker started",
                        {{"worker", 0, IV_U}, {"rescue", 2, IV_BIT0}}, NULL},
    [TR_HIBERNATE] = {"hibernated stacks", {{"threads", 0, IV_U}, {"heap_bytes", 1, IV_U}},
                      ",\"by\":\"monitor\""},
    [TR_RESTORE] = {"restored hibernated stacks", {{"threads", 0, IV_U}, {"first", 1, IV_U}}, NULL},
    [TR_RESCUE] = {"rescue: threads moved off a worker asleep in the kernel",
                   {{"from", 0, IV_TRACK}, {"threads", 1, IV_U}}, NULL},
};
/* A restore that a touch forced (trace_touch): a = threads, b = the first. */
static const struct instant_spec instant_touch = {
    "restored hibernated stacks", {{"threads", 0, IV_U}, {"first", 1, IV_U}}, ",\"by\":\"touch\""};

static void instant(struct fmt *f, const struct instant_spec *s, int64_t tid, uint64_t ts,
                    const struct trace_ev *e)
{
    const uint64_t v[3] = {e->a, e->b, e->c};
    char *p = room(f);
    p = phead(f, p, "i", tid, ts);
    p = PL(p, ",\"s\":\"t\",\"name\":\"");
    p = ps(p, s->name);
    p = PL(p, "\",\"args\":{");
    for (int i = 0; i < 3 && s->arg[i].key; i++) {
        const struct instant_arg *a = &s->arg[i];
        if (i)
            *p++ = ',';
        *p++ = '"';
        p = ps(p, a->key);
        p = PL(p, "\":");
        uint64_t x = v[a->from];
        if (a->how == IV_TRACK) {
            char l[40];
            label_of_track(l, x);
            *p++ = '"';
            p = pjs(p, l, 40);
            *p++ = '"';
        } else {
            p = pu(p, a->how == IV_BIT0 ? x & 1 : x);
        }
    }
    if (s->tail)
        p = ps(p, s->tail);
    *p++ = '}';
    line_end(f, p);
}

/* The touch table's restores (trace_touch), on the toucher's track: in
 * file mode those not yet formatted, up to the first slot not yet
 * published (the writer comes back for it); a ring's last ones. */
static void touches_format(struct fmt *f, bool ring)
{
    uint64_t h = LOAD(&T.head);
    uint64_t x = ring ? (h > TOUCHES ? h - TOUCHES : 0) : LOAD_RELAXED(&T.tail);
    uint32_t session = LOAD_RELAXED(&trace_session);
    for (; x < h; x++) {
        const struct touch_rec *r = &T.rec[x % TOUCHES];
        if (LOAD(&r->seq) != x + 1) {
            if (ring)
                continue;
            break;
        }
        /* Acquire loads: seq's second read comes after them (and sees the
         * slot taken again if any field is a newer record's). */
        struct trace_ev e = {0, LOAD(&r->n), LOAD(&r->first), 0};
        uint64_t ts = LOAD(&r->ts);
        int32_t tid = LOAD(&r->tid);
        bool mine = LOAD(&r->session) == session;
        if (ring && LOAD_RELAXED(&r->seq) != x + 1)
            continue; /* overwritten while it was read */
        if (mine)
            instant(f, &instant_touch, tid, ts, &e);
    }
    if (!ring)
        STORE(&T.tail, x);
}

/* A blocking-pool helper's slot for its open job (outside events). */
static struct job_open *job_slot(struct fmt *f, int32_t tid, bool make)
{
    struct job_open *free_slot = NULL;
    for (int i = 0; i < OUTSIDE_SLOTS; i++) {
        if (f->jobs[i].tid == tid)
            return &f->jobs[i];
        if (!f->jobs[i].tid && !free_slot)
            free_slot = &f->jobs[i];
    }
    if (make && free_slot)
        free_slot->tid = tid;
    return make ? free_slot : NULL;
}

/* An event of the shared buffer (threads that are no worker). */
static void format_outside(struct fmt *f, const struct trace_ev *e, unsigned type, uint64_t ts)
{
    int32_t tid = (int32_t)(e->c >> 32);
    char *p;
    switch (type) {
    case TR_WAKE:
    case TR_SPAWN: {
        /* A zero-length slice for the flow to start in. */
        p = room(f);
        p = phead(f, p, "X", tid, ts);
        p = ps(p, type == TR_WAKE ? ",\"dur\":0.001,\"name\":\"wake from outside fern\",\"cat\":\"outside\""
                                  : ",\"dur\":0.001,\"name\":\"spawn from outside fern\",\"cat\":\"outside\"");
        line_end(f, p);
        uint64_t id = type == TR_WAKE ? e->b | TRACE_FLOW_KIND(WK_REMOTE) : e->b | TRACE_FLOW_SPAWN;
        flow(f, tid, ts, "s", id);
        break;
    }
    case TR_BLOCK_BEGIN: {
        struct job_open *j = job_slot(f, tid, true);
        if (j) {
            j->caller = e->a;
            j->fn = e->b;
            j->ts = ts;
        }
        break;
    }
    case TR_BLOCK_END: {
        struct job_open *j = job_slot(f, tid, false);
        if (!j)
            break;
        p = room(f);
        p = phead(f, p, "X", tid, j->ts);
        p = PL(p, ",\"dur\":");
        p = pts(p, ts >= j->ts ? ts - j->ts : 0);
        p = PL(p, ",\"name\":\"fern_blocking job\",\"cat\":\"blocking\",\"args\":{\"for_thread\":");
        p = pu(p, j->caller);
        p = PL(p, ",\"fn\":\"");
        p = phex(p, j->fn);
        p = PL(p, "\"}");
        line_end(f, p);
        j->tid = 0;
        break;
    }
    default:
        if (type < TR_TYPES && instants_outside[type].name)
            instant(f, &instants_outside[type], tid, ts, e);
        break;
    }
}

/* One event of track b (k: its state). */
static void format_event(struct fmt *f, const struct trace_buf *b, struct trk *k,
                         const struct trace_ev *e)
{
    uint64_t w0 = e->w0;
    unsigned type = (unsigned)(w0 >> TRACE_TS_BITS);
    uint64_t ts = w0 & TRACE_TS_MASK;
    if (ts < k->last)
        ts = k->last; /* cycle counters of two cores a few ticks apart */
    k->last = ts;
    if (b == LOAD_RELAXED(&S.outside)) {
        format_outside(f, e, type, ts);
        return;
    }
    track_name(f, b, k);
    switch (type) {
    case TR_RUN:
        slice_close(f, b, k, ts, NULL, TR_RUN);
        k->open = e->a ? 1 : 2;
        k->id = e->a;
        k->ts = ts;
        k->desc = (const fern_thread *)(uintptr_t)e->c;
        if (e->b)
            flow(f, b->tid, ts, "f", e->b);
        break;
    case TR_YIELD:
    case TR_PARK:
    case TR_EXIT:
        if (k->open != 1) {
            /* It ran since before the session (or the ring's first event). */
            slice_close(f, b, k, ts, NULL, TR_RUN);
            k->open = 1;
            k->id = e->a;
            k->desc = NULL;
            k->ts = ts;
        }
        slice_close(f, b, k, ts, e, type);
        break;
    case TR_WAKE:
    case TR_SPAWN:
        if (!k->open) {
            k->open = 2;
            k->ts = ts;
        }
        flow(f, b->tid, ts, "s", e->b);
        break;
    case TR_PREEMPT:
    case TR_MIGRATE:
        if (k->open == 1)
            k->pend = (uint8_t)type;
        instant(f, &instants[type], b->tid, ts, e);
        break;
    default:
        if (type < TR_TYPES && instants[type].name)
            instant(f, &instants[type], b->tid, ts, e);
        break;
    }
}

static void format_start(struct fmt *f)
{
    char *p = room(f);
    p = PL(p, "[\n{\"ph\":\"M\",\"pid\":");
    p = pu(p, (uint64_t)f->pid);
    p = PL(p, ",\"name\":\"process_name\",\"args\":{\"name\":\"fern (pid ");
    p = pu(p, (uint64_t)f->pid);
    p = PL(p, ")\"}");
    line_end(f, p);
    if (f->tnamed) {
        p = room(f);
        p = PL(p, "{\"ph\":\"M\",\"pid\":");
        p = pu(p, (uint64_t)f->pid | THREADS_PID);
        p = PL(p, ",\"name\":\"process_name\",\"args\":{\"name\":\"fern green threads (pid ");
        p = pu(p, (uint64_t)f->pid);
        p = PL(p, ")\"}");
        line_end(f, p);
    }
}

/* Close every open slice at ts and end the array. */
static void format_end(struct fmt *f, uint64_t ts, uint64_t dropped)
{
    uint32_t n = LOAD(&S.ntracks);
    for (uint32_t i = 0; i < n; i++)
        if (S.tracks[i] != LOAD_RELAXED(&S.outside))
            slice_close(f, S.tracks[i], &f->trk[i + 1], ts > f->trk[i + 1].last ? ts : f->trk[i + 1].last,
                        NULL, 0);
    char *p = room(f);
    p = PL(p, "{\"ph\":\"M\",\"pid\":");
    p = pu(p, (uint64_t)f->pid);
    p = PL(p, ",\"name\":\"fern_trace\",\"args\":{\"events\":");
    p = pu(p, f->events);
    p = PL(p, ",\"dropped\":");
    p = pu(p, dropped);
    if (!S.ring) {
        p = PL(p, ",\"writer_cpu_us\":");
        p = pu(p, S.writer_cpu_ns / 1000);
    }
    p = PL(p, ",\"clock\":\"");
    p = ps(p, trace_tsc ? "cycle counter" : "CLOCK_MONOTONIC");
    p = PL(p, "\"}}\n]\n");
    f->n = (size_t)(p - f->buf);
    out_flush(f);
}

/* ------------------------------------------------------------------------ */
/* The clock                                                                 */
/* ------------------------------------------------------------------------ */

static bool tsc_constant(void)
{
#if defined(__x86_64__)
    /* /proc/cpuinfo's first "flags" line names both features. */
    int fd = (int)sys_open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return false;
    static char buf[16384];
    long n = sys_read(fd, buf, sizeof buf - 1);
    sys_close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    char *flags = strstr(buf, "\nflags");
    if (!flags)
        return false;
    char *eol = strchr(flags + 1, '\n');
    if (eol)
        *eol = 0;
    return strstr(flags, " constant_tsc") && strstr(flags, " nonstop_tsc");
#else
    return true; /* the generic timer's rate is constant by definition */
#endif
}

/* Choose the session's clock and calibrate ticks to ns (S.mul), then
 * set trace_t0. The cycle counter against CLOCK_MONOTONIC over 2 ms. */
static void clock_setup(void)
{
    /* Relaxed stores: a worker of the last session may still be reading
     * the clock (trace_clock) as this one starts. */
    STORE_RELAXED(&trace_tsc, 0);
    S.mul = (uint64_t)1 << 32;
    if (tsc_constant()) {
        int64_t n0 = fern_now_ns();
        uint64_t c0 = arch_cycles();
        int64_t n1;
        do
            n1 = fern_now_ns();
        while (n1 - n0 < 2000000);
        uint64_t c1 = arch_cycles();
        uint64_t d = (uint64_t)(n1 - n0);
        if (c1 > c0 && d < (uint64_t)1 << 31) {
            /* ns per tick * 2^32, in 64 bits (d << 32 < 2^63): no 128-bit
             * division, which would call a libgcc helper that a program
             * linked with libfern.a could preempt (CMakeLists.txt). */
            S.mul = (d << 32) / (c1 - c0);
            STORE_RELAXED(&trace_tsc, 1);
        }
    }
    S.ns0 = (uint64_t)fern_now_ns();
    STORE_RELAXED(&trace_t0, trace_tsc ? arch_cycles() : S.ns0);
}

/* ------------------------------------------------------------------------ */
/* File mode: the writer                                                     */
/* ------------------------------------------------------------------------ */

static struct fmt W;
static struct trk W_trk[TRACKS_MAX + 1];

/* Drain track i's buffer; returns the events it held. */
static uint64_t drain(struct fmt *f, uint32_t i)
{
    struct trace_buf *b = S.tracks[i];
    uint64_t h = LOAD(&b->head), t = LOAD_RELAXED(&b->tail);
    for (uint64_t x = t; x < h; x++) {
        if (unlikely(LOAD_RELAXED(&S.crashed))) {
            /* The crash report formats the rest (trace_crash). */
            STORE(&b->tail, x);
            return x - t;
        }
        if (!(x & 1) && x + 32 < h)
            /* The workers wrote these lines on other cores: ask for them
             * early, several at a time (two events a line). */
            __builtin_prefetch(&b->ev[(x + 32) & b->mask]);
        if (x + 8 < h) {
            /* The name slot of the slice that an event 8 ahead closes. */
            const struct trace_ev *a = &b->ev[(x + 8) & b->mask];
            unsigned ty = (unsigned)(LOAD_RELAXED(&a->w0) >> TRACE_TS_BITS);
            if (ty >= TR_YIELD && ty <= TR_EXIT)
                __builtin_prefetch(&f->names[name_hash(LOAD_RELAXED(&a->a))], 1);
        }
        const struct trace_ev *s = &b->ev[x & b->mask];
        struct trace_ev e = {LOAD_RELAXED(&s->w0), LOAD_RELAXED(&s->a), LOAD_RELAXED(&s->b),
                             LOAD_RELAXED(&s->c)};
        format_event(f, b, &f->trk[i + 1], &e);
    }
    STORE(&b->tail, h);
    return h - t;
}

static uint64_t dropped_total(void)
{
    uint64_t d = 0;
    uint32_t n = LOAD(&S.ntracks);
    for (uint32_t i = 0; i < n; i++)
        d += LOAD_RELAXED(&S.tracks[i]->dropped) - S.dropped0[i];
    return d + LOAD_RELAXED(&T.dropped);
}

/* Running, runnable, parked and live threads: four counters. */
static void counters(struct fmt *f)
{
    uint64_t runnable = 0, running = 0;
    int64_t live = 0;
    plock_lock(&rt.boot_lock);
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster) {
        live += cluster_live(c);
        runnable += inbox_len(&c->inbox);
        unsigned nw = LOAD(&c->nworkers);
        for (unsigned i = 0; i < nw; i++) {
            struct worker *w = c->workers[i];
            runnable += (uint32_t)(LOAD_RELAXED(&w->rq_tail) - LOAD_RELAXED(&w->rq_head)) +
                        (LOAD_RELAXED(&w->next) != NULL) + tqueue_len(&w->soon) +
                        tqueue_len(&w->pinned);
            fern_thread *cur = LOAD_RELAXED(&w->cur);
            running += cur && cur != &w->g0;
        }
    }
    plock_unlock(&rt.boot_lock);
    int64_t parked = live - (int64_t)runnable - (int64_t)running;
    /* One counter each, named so that Perfetto's track reads "runnable
     * threads" (it joins a counter's name and its argument's). All four at
     * one timestamp: parked is live less the others (0 if the unlocked
     * reads of a busy moment make that negative). */
    static const char *const names[4] = {"running", "runnable", "parked", "live"};
    uint64_t v[4] = {running, runnable, parked > 0 ? (uint64_t)parked : 0,
                     live > 0 ? (uint64_t)live : 0};
    uint64_t ts = trace_clock();
    for (int i = 0; i < 4; i++) {
        char *p = room(f);
        p = phead(f, p, "C", 0, ts);
        p = PL(p, ",\"name\":\"");
        p = ps(p, names[i]);
        p = PL(p, "\",\"args\":{\"threads\":");
        p = pu(p, v[i]);
        *p++ = '}';
        line_end(f, p);
    }
}

static void *writer_main(void *arg)
{
    (void)arg;
    struct fmt *f = &W;
    int64_t next_counter = 0;
    int64_t nap = WRITER_MIN_NS * 4;
    for (;;) {
        bool last = LOAD(&S.stop);
        uint32_t n = LOAD(&S.ntracks);
        double fill = 0; /* the fullest buffer's share drained now */
        for (uint32_t i = 0; i < n; i++) {
            uint64_t got = drain(f, i);
            double share = (double)got / ((double)S.tracks[i]->mask + 1);
            if (share > fill)
                fill = share;
        }
        touches_format(f, false);
        int64_t now = fern_now_ns();
        if (now >= next_counter && !last) {
            counters(f);
            next_counter = now + COUNTER_NS;
        }
        if (unlikely(LOAD(&S.crashed))) {
            /* Every line formatted goes into the file, and the crash
             * report appends the rest: the process is ending (a
             * fern_trace_stop under way waits for it to end). */
            out_flush(f);
            STORE(&S.writer_parked, 1);
            for (;;)
                pause();
        }
        if (last) {
            /* What the writer cost, for the file's last record. */
            struct timespec cpu;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
            S.writer_cpu_ns = (uint64_t)cpu.tv_sec * 1000000000u + (uint64_t)cpu.tv_nsec;
            break;
        }
        out_flush(f);
        /* Come back when the fullest buffer is about an eighth full, at
         * the rate it filled: each wake-up costs a context switch on a CPU
         * the workers want, and while it runs the writer's tables and
         * output are cold, so a drain costs much more than its events:
         * a quiet program is drained every 100 ms, a busy one up to every
         * 0.25 ms. A crash report writes what was not drained
         * (trace_crash). */
        nap = fill > 0 ? (int64_t)((double)nap * 0.125 / fill) : nap * 2;
        if (nap < WRITER_MIN_NS)
            nap = WRITER_MIN_NS;
        if (nap > WRITER_MAX_NS)
            nap = WRITER_MAX_NS;
        /* A futex, so that fern_trace_stop (and a crash report) need
         * not wait out a nap of up to 100 ms. */
        if (!LOAD(&S.wake))
            futex_wait(&S.wake, 0, fern_now_ns() + nap);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Starting and stopping                                                     */
/* ------------------------------------------------------------------------ */

/* FERN_TRACE's and fern_trace_start's syntax: "ring" or "ring:DIR" for the
 * flight recorder (dumps into DIR, default "."), else a file. */
static bool is_ring(const char *spec, const char **dir)
{
    if (strncmp(spec, "ring", 4) || (spec[4] && spec[4] != ':'))
        return false;
    *dir = spec[4] ? spec + 5 : ".";
    return true;
}

/* A forked child has no writer thread and must not finish the parent's
 * file: its session ends without a word (the parent's goes on). */
static void at_fork_child(void)
{
    trace_on = 0;
    S.active = false;
    S.writer_running = false;
    if (S.fd >= 0)
        sys_close(S.fd);
    S.fd = -1;
    S.mu = (struct plock)PLOCK_INIT;
    S.reg_lock = 0;
    S.dumping = 0;
}

static void at_exit(void)
{
    /* A program that returns from main without fern_shutdown still gets
     * a complete file. */
    fern_trace_stop();
}

static int start_locked(const char *spec, uint32_t events)
{
    if (S.active)
        return EBUSY;
    const char *dir = NULL;
    bool ring = is_ring(spec, &dir);
    const char *path = ring ? dir : spec;
    if (!*path || strlen(path) >= sizeof S.path)
        return EINVAL;
    int fd = -1;
    if (ring) {
        int d = (int)sys_open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
        if (d < 0)
            return -d;
        sys_close(d);
    } else {
        fd = (int)sys_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            return -fd;
    }
    if (!events)
        events = ring ? EVENTS_RING : EVENTS_STREAM;
    struct trace_buf *out = S.outside;
    if (!out || out->mask + 1 != events || out->ring != ring) {
        out = buf_alloc(events, ring);
        if (!out) {
            if (fd >= 0)
                sys_close(fd);
            return ENOMEM;
        }
    }
    if (!ring && !W.buf && !(W.buf = malloc(OUT_CAP))) {
        sys_close(fd);
        return ENOMEM;
    }
    strcpy(S.path, path);
    STORE_RELAXED(&S.ring, ring);
    STORE_RELAXED(&S.events, events);
    S.fd = fd;
    S.err = 0;
    S.stop = 0;
    S.wake = 0;
    S.crashed = 0;
    S.writer_parked = 0;
    S.unlisted = 0;
    S.threads = config.trace_threads;
    /* The touch table starts empty (trace_on is 0: nobody records). */
    STORE(&T.tail, LOAD(&T.head));
    STORE_RELAXED(&T.dropped, 0);
    clock_setup();
    /* A new session number: every buffer is set up again (buf_of). */
    spin_lock(&S.reg_lock);
    uint32_t session = trace_session + 1 ? trace_session + 1 : 1;
    STORE(&trace_session, session); /* after the settings (buf_setup) */
    S.ntracks = 0;
    S.nclusters = 0;
    spin_unlock(&S.reg_lock);
    snprintf(out->label, sizeof out->label, "outside fern");
    out->tid = 0;
    STORE(&S.outside, out);
    buf_list(out, session);
    if (!ring) {
        static struct name_slot W_names[NAMES];
        static uint64_t W_tnamed[TNAMED];
        memset(W_trk, 0, sizeof W_trk);
        memset(W_names, 0, sizeof W_names);
        memset(W_tnamed, 0, sizeof W_tnamed);
        W = (struct fmt){.fd = fd, .buf = W.buf, .cap = OUT_CAP, .pid = getpid(), .trk = W_trk,
                         .names = W_names, .tnamed = S.threads ? W_tnamed : NULL};
        format_start(&W);
        STORE(&trace_on, 1);
        int r = pthread_create(&S.writer, NULL, writer_main, NULL);
        if (r) {
            STORE(&trace_on, 0);
            sys_close(fd);
            S.fd = -1;
            return r;
        }
        pthread_setname_np(S.writer, "fern-trace");
        STORE_RELAXED(&S.writer_running, true); /* read by trace_threads */
    } else {
        STORE(&trace_on, 1);
    }
    S.active = true;
    if (!S.atexit_set) {
        S.atexit_set = true;
        atexit(at_exit);
        pthread_atfork(NULL, NULL, at_fork_child);
    }
    return 0;
}

int fern_trace_start(const char *path)
{
    if (!path)
        return EINVAL;
    plock_lock(&S.mu);
    int r = start_locked(path, 0);
    plock_unlock(&S.mu);
    return r;
}

int fern_trace_stop(void)
{
    plock_lock(&S.mu);
    if (!S.active) {
        plock_unlock(&S.mu);
        return EINVAL;
    }
    STORE(&trace_on, 0);
    int r = 0;
    if (S.writer_running) {
        STORE(&S.stop, 1);
        STORE(&S.wake, 1);
        futex_wake(&S.wake, 1);
        pthread_join(S.writer, NULL);
        STORE_RELAXED(&S.writer_running, false);
        uint64_t dropped = dropped_total();
        format_end(&W, trace_clock(), dropped);
        if (W.err)
            r = W.err;
        long c = sys_close(S.fd);
        if (c && !r)
            r = (int)-c;
        S.fd = -1;
        S.written = W.events;
        if (dropped)
            fprintf(stderr,
                    "fern: trace %s: %llu events dropped (a worker's buffer was full); "
                    "FERN_TRACE_EVENTS raises the buffers' size\n",
                    S.path, (unsigned long long)dropped);
        if (r)
            fprintf(stderr, "fern: trace %s: cannot write: %s\n", S.path, strerror(r));
    }
    if (S.unlisted)
        fprintf(stderr, "fern: trace: %u workers past the first %u were not traced\n", S.unlisted,
                TRACKS_MAX);
    /* Buffers set up from here on belong to no session. */
    spin_lock(&S.reg_lock);
    STORE_RELAXED(&trace_session, trace_session + 1 ? trace_session + 1 : 1);
    spin_unlock(&S.reg_lock);
    S.active = false;
    plock_unlock(&S.mu);
    return r;
}

/* fern_init: $FERN_TRACE (runtime/config.c checked it). */
int trace_init(void)
{
    if (!config.trace[0])
        return 0;
    plock_lock(&S.mu);
    int r = S.active ? 0 : start_locked(config.trace, config.trace_events);
    plock_unlock(&S.mu);
    if (r)
        fprintf(stderr, "fern: FERN_TRACE=\"%s\": cannot start tracing: %s\n", config.trace,
                strerror(r));
    return r;
}

/* fern_shutdown, once the workers are stopped: end the session, free the
 * buffers (nobody can write them any more). */
void trace_fini(void)
{
    fern_trace_stop(); /* EINVAL if no session runs */
    plock_lock(&S.mu);
    spin_lock(&S.reg_lock);
    for (uint32_t i = 0; i < S.nheld; i++)
        free(S.held[i].b);
    free(S.held);
    S.held = NULL;
    S.nheld = S.capheld = 0;
    S.ntracks = 0;
    STORE(&S.outside, NULL);
    spin_unlock(&S.reg_lock);
    plock_unlock(&S.mu);
}

unsigned trace_threads(void) { return LOAD_RELAXED(&S.writer_running) ? 1u : 0u; }

/* ------------------------------------------------------------------------ */
/* The flight recorder's dumps                                               */
/* ------------------------------------------------------------------------ */

static char ring_buf[RING_OUT_CAP];
static struct trk ring_trk[TRACKS_MAX + 1];
static uint64_t ring_tnamed[TNAMED];

/* The crash paths' tables of named thread tracks: empty, or none. */
static uint64_t *ring_threads(void)
{
    if (!S.threads)
        return NULL;
    memset(ring_tnamed, 0, sizeof ring_tnamed);
    return ring_tnamed;
}

/* Format each buffer's last events: from the oldest slot the owner cannot
 * be rewriting (an eighth of the ring is left as margin), checking as it
 * goes that the owner has not lapped the reader. */
static void ring_format(struct fmt *f)
{
    uint32_t n = LOAD(&S.ntracks);
    for (uint32_t i = 0; i < n; i++) {
        struct trace_buf *b = S.tracks[i];
        uint64_t cap = (uint64_t)b->mask + 1, margin = cap / 8;
        uint64_t h = LOAD(&b->head);
        uint64_t x = h > cap - margin ? h - (cap - margin) : 0;
        for (; x < h; x++) {
            if ((x & 255) == 0) {
                uint64_t now = LOAD(&b->head);
                if (now > x + cap - margin)
                    x = now - (cap - margin);
            }
            const struct trace_ev *s = &b->ev[x & b->mask];
            struct trace_ev e = {LOAD_RELAXED(&s->w0), LOAD_RELAXED(&s->a), LOAD_RELAXED(&s->b),
                                 LOAD_RELAXED(&s->c)};
            unsigned type = (unsigned)(e.w0 >> TRACE_TS_BITS);
            if (type == 0 || type >= TR_TYPES)
                continue;
            format_event(f, b, &f->trk[i + 1], &e);
        }
    }
}

/* Write the flight recorder to DIR/fern-ring.PID.N.json; the path goes to
 * out (size outsz). Async-signal-safe; returns 0, EBUSY if a dump runs,
 * EINVAL if no flight recorder runs, or open's or write's errno. */
static int ring_dump(char *out, size_t outsz)
{
    if (!LOAD(&trace_on) || !LOAD_RELAXED(&S.ring))
        return EINVAL;
    if (__atomic_exchange_n(&S.dumping, 1, __ATOMIC_ACQUIRE))
        return EBUSY;
    char *p = out;
    int pid = getpid();
    uint32_t k = __atomic_add_fetch(&S.dumps, 1, __ATOMIC_RELAXED);
    p += fmt_str(p, S.path, outsz - 64);
    p += fmt_str(p, "/fern-ring.", 16);
    p += fmt_u64(p, (uint64_t)pid);
    *p++ = '.';
    p += fmt_u64(p, k);
    p += fmt_str(p, ".json", 8);
    *p = 0;
    int r = 0;
    int fd = (int)sys_open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        r = -fd;
    } else {
        memset(ring_trk, 0, sizeof ring_trk);
        struct fmt f = {.fd = fd, .buf = ring_buf, .cap = sizeof ring_buf, .pid = pid, .trk = ring_trk,
                        .tnamed = ring_threads()};
        format_start(&f);
        ring_format(&f);
        touches_format(&f, true);
        format_end(&f, trace_clock(), 0);
        r = f.err;
        sys_close(fd);
    }
    __atomic_store_n(&S.dumping, 0, __ATOMIC_RELEASE);
    return r;
}

/* fern_dump and the deadlock report: one line on f. Takes no lock of the
 * tracer's (a deadlock report holds rt.boot_lock, which the writer takes
 * while fern_trace_stop holds S.mu and waits for it). */
void trace_report(FILE *f)
{
    if (!LOAD(&trace_on))
        return;
    if (!LOAD_RELAXED(&S.ring)) {
        fprintf(f, "fern: tracing to %s (%llu events dropped so far)\n", S.path,
                (unsigned long long)dropped_total());
        return;
    }
    char path[sizeof S.path + 64];
    int r = ring_dump(path, sizeof path);
    if (r == EINVAL)
        return;
    if (r)
        fprintf(f, "fern: flight recorder: cannot write %s: %s\n", path, strerror(r));
    else
        fprintf(f, "fern: flight recorder: the last events of every worker are in %s\n", path);
}

/* File mode's crash report: stop the writer after its last complete line
 * (it checks S.crashed at every event and before it sleeps; woken, and
 * waited for at most 200 ms), then append the events it had not drained, and close the
 * runs still open. The closing "]" is left out (optional in the format):
 * nothing may follow it, and the writer is only parked. Async-signal-safe
 * like ring_dump. Returns the events appended, -1 if none could be, -2 if
 * fern_trace_stop is completing the file. */
static int64_t file_crash(void)
{
    /* S.dumping stays set: the process is ending, and a second crash
     * report (another thread) skips. */
    if (__atomic_exchange_n(&S.dumping, 1, __ATOMIC_ACQUIRE))
        return -1;
    STORE(&S.crashed, 1);
    STORE(&S.wake, 1);
    futex_wake(&S.wake, 1); /* a system call: async-signal-safe */
    for (int i = 0; i < 200 && !LOAD(&S.writer_parked); i++) {
        struct timespec ms = {0, 1000000};
        arch_syscall6(SYS_nanosleep, (long)&ms, 0, 0, 0, 0, 0); /* not fern-hook's */
    }
    if (!LOAD(&S.writer_parked) && LOAD(&S.stop))
        return -2; /* the writer has ended: fern_trace_stop completes the file */
    /* The writer parked: its tracks' state (the runs it saw begin) is
     * where these events go on from. Else (it did not park in time) each
     * track starts afresh; lines stay whole either way. */
    if (LOAD(&S.writer_parked))
        memcpy(ring_trk, W_trk, sizeof ring_trk);
    else
        memset(ring_trk, 0, sizeof ring_trk);
    struct fmt f = {.fd = S.fd, .buf = ring_buf, .cap = sizeof ring_buf, .pid = getpid(),
                    .trk = ring_trk, .tnamed = ring_threads()};
    uint64_t got = 0, ts = trace_clock();
    uint32_t n = LOAD(&S.ntracks);
    for (uint32_t i = 0; i < n; i++) {
        struct trace_buf *b = S.tracks[i];
        uint64_t h = LOAD(&b->head);
        for (uint64_t x = LOAD(&b->tail); x < h; x++, got++) {
            const struct trace_ev *s = &b->ev[x & b->mask];
            struct trace_ev e = {LOAD_RELAXED(&s->w0), LOAD_RELAXED(&s->a), LOAD_RELAXED(&s->b),
                                 LOAD_RELAXED(&s->c)};
            format_event(&f, b, &f.trk[i + 1], &e);
        }
        if (b != LOAD_RELAXED(&S.outside))
            slice_close(&f, b, &f.trk[i + 1], ts > f.trk[i + 1].last ? ts : f.trk[i + 1].last,
                        NULL, 0);
    }
    touches_format(&f, false);
    out_flush(&f);
    return f.err ? -1 : (int64_t)got;
}

/* The crash report (a signal handler): the flight recorder's dump, or in
 * file mode the events not yet written (file_crash); a line on stderr
 * either way, with write(2). */
void trace_crash(void)
{
    if (LOAD(&trace_on) && LOAD_RELAXED(&S.writer_running) && !LOAD_RELAXED(&S.ring)) {
        int64_t got = file_crash();
        if (got == -2)
            return;
        char line[sizeof S.path + 128];
        size_t n = fmt_str(line, "fern: trace ", 16);
        n += fmt_str(line + n, S.path, sizeof S.path);
        if (got < 0) {
            n += fmt_str(line + n, ": cannot write the last events", 40);
        } else {
            n += fmt_str(line + n, ": the last ", 16);
            n += fmt_u64(line + n, (uint64_t)got);
            n += fmt_str(line + n, " events are written; the file opens as it is", 48);
        }
        line[n++] = '\n';
        sys_write(2, line, n);
        return;
    }
    char path[sizeof S.path + 64];
    int r = ring_dump(path, sizeof path);
    if (r == EINVAL || r == EBUSY)
        return;
    char line[sizeof path + 96];
    size_t n = fmt_str(line, "fern: flight recorder: ", 32);
    n += fmt_str(line + n, r ? "cannot write " : "the last events of every worker are in ", 48);
    n += fmt_str(line + n, path, sizeof path);
    line[n++] = '\n';
    sys_write(2, line, n);
}
