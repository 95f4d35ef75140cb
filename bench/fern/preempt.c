/* SPDX-License-Identifier: MIT */
/* preempt, fern: what preemption and the monitor buy, on one worker, in the
 * default configuration (10 ms slice). Targets (issue 11):
 *   late_app_ms      worst lateness of a thread sleeping 1 ms at a time beside
 *                    two threads spinning in pure arithmetic       <= 25 ms
 *   late_libc_ms     the same beside two threads spinning in memchr <= 40 ms
 *   late_syscall_ms  the same beside a thread blocked 400 ms in a raw
 *                    read(2) on a pipe                              <= 40 ms
 *   late_stuck2_ms   two workers, preemption off, eight 1 ms sleepers, one
 *                    thread blocked 1 s in a raw read(2)            <= 40 ms
 *   share_min_pct, share_max_pct  four spinners for 1.5 s of the worker's
 *                    CPU time (not wall: on a loaded machine the worker
 *                    gets less CPU per second and the phase would hold
 *                    too few slices): each one's share of the work  20-30%
 *   slice_{min,p50,max}_ms  in that phase, the CPU time each spinner ran
 *                    between switches (the slice granted; independent of
 *                    the machine's load)
 *   late_libc_deferred  preemptions that found a spinner inside memchr and
 *                    were retried at the worker's next tick
 *   loop_alone_loss_pct  one CPU-bound loop of fixed work alone on one
 *                    worker: process CPU time with preemption on vs off
 *                    (nothing to preempt: what the ticks and the monitor
 *                    cost), best of 3 interleaved pairs             <= 1%
 *   loop_loss_pct    two such loops on one worker, on vs off. Not the same
 *                    schedule: on, they share the worker in 10 ms slices;
 *                    off, the monitor counts the worker stuck after two
 *                    slices and a spare runs the second loop on another
 *                    kernel thread. Best of 3 interleaved pairs.
 * (late_*_p50_ms: the median lateness of the same phase.)
 * argv[1]: milliseconds per lateness phase (default 1000). */
#include "bench_common.h"

#include <fern/fern.h>
#include <sys/syscall.h>
#include <unistd.h>

static long run_ms;
static volatile int stop;
static int64_t worst;
static int64_t lates[20000];
static int nlates;
static uint64_t deferred; /* preemptions_deferred of the last lateness phase */
static char buf[1 << 20];

static void restart(long preempt_us)
{
    if (fern_cluster_default())
        fern_shutdown();
    fern_config c = {.workers = 1, .preempt_us = preempt_us};
    int rc = fern_init(&c);
    if (rc)
        bench_die("fern_init", rc);
}

static void *spin_arith(void *arg)
{
    uint64_t x = 88172645463325252ull;
    while (!stop) {
        for (int i = 0; i < 1000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    }
    return (void *)(uintptr_t)x;
}

static void *spin_libc(void *arg)
{
    size_t hits = 0;
    while (!stop) {
        /* buf "may change": else the compiler calls memchr once, hoisted
         * out of the loop, and this spins in its own code. */
        __asm__ volatile("" : : "r"(buf) : "memory");
        hits += memchr(buf, 'b', sizeof buf) != NULL;
    }
    return (void *)hits;
}

static int pipefd[2];
static void *block_read(void *arg)
{
    char c;
    syscall(SYS_read, pipefd[0], &c, 1);
    return NULL;
}

static void *sleeper(void *arg)
{
    fern_sleep_ns(30000000);
    int64_t end = bench_now_ns() + run_ms * 1000000;
    while (bench_now_ns() < end) {
        int64_t t0 = bench_now_ns();
        fern_sleep_ns(1000000);
        int64_t late = bench_now_ns() - t0 - 1000000;
        if (late > worst)
            worst = late;
        if (nlates < (int)(sizeof lates / sizeof *lates))
            lates[nlates++] = late;
    }
    stop = 1;
    return NULL;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median lateness of the last phase, in ms. */
static double median(void)
{
    qsort(lates, (size_t)nlates, sizeof *lates, cmp64);
    return nlates ? (double)lates[nlates / 2] / 1e6 : 0;
}

static double lateness(fern_fn other, int n)
{
    restart(0);
    stop = 0;
    worst = 0;
    nlates = 0;
    fern_thread *t[4], *s;
    for (int i = 0; i < n; i++)
        fern_spawn(&t[i], NULL, other, NULL);
    fern_spawn(&s, NULL, sleeper, NULL);
    fern_join(s, NULL);
    for (int i = 0; i < n; i++)
        fern_join(t[i], NULL);
    struct fern_stats st;
    deferred = fern_stats(&st) == 0 ? st.preemptions_deferred : 0;
    return (double)worst / 1e6;
}

static double late_syscall(void)
{
    restart(0);
    worst = 0;
    nlates = 0;
    if (pipe(pipefd))
        bench_die("pipe", 1);
    fern_thread *b, *s;
    fern_spawn(&s, NULL, sleeper, NULL);
    fern_sleep_ns(50000000);
    fern_spawn(&b, NULL, block_read, NULL);
    fern_sleep_ns(400000000);
    if (write(pipefd[1], "x", 1) != 1)
        bench_die("write", 1);
    fern_join(b, NULL);
    fern_join(s, NULL);
    close(pipefd[0]);
    close(pipefd[1]);
    return (double)worst / 1e6;
}

/* Issue 17's case: two workers, preemption off, eight 1 ms sleepers, one
 * thread blocked 1 s in a raw read(2): whichever worker it blocks, no
 * sleeper waits for it. */
static double late_stuck2(void)
{
    if (fern_cluster_default())
        fern_shutdown();
    fern_config c = {.workers = 2, .preempt_us = FERN_PREEMPT_OFF};
    int rc = fern_init(&c);
    if (rc)
        bench_die("fern_init", rc);
    worst = 0;
    nlates = 0;
    if (pipe(pipefd))
        bench_die("pipe", 1);
    long saved = run_ms;
    run_ms = 1200;
    fern_thread *b, *s[8];
    for (int i = 0; i < 8; i++)
        fern_spawn(&s[i], NULL, sleeper, NULL);
    fern_sleep_ns(50000000);
    fern_spawn(&b, NULL, block_read, NULL);
    fern_sleep_ns(1000000000);
    if (write(pipefd[1], "x", 1) != 1)
        bench_die("write", 1);
    fern_join(b, NULL);
    for (int i = 0; i < 8; i++)
        fern_join(s[i], NULL);
    run_ms = saved;
    close(pipefd[0]);
    close(pipefd[1]);
    return (double)worst / 1e6;
}

static volatile uint64_t work[4];
/* The slices granted, in the worker's CPU time: a spinner that finds it
 * was not the last to run starts a new run and closes the previous one
 * (one worker: these are written by one kernel thread). Independent of the
 * machine's load, unlike wall-clock lateness. */
static int last_runner = -1;
static int64_t run_start, run_last, share_cpu0;
static int64_t slices[4000];
static int nslices;

static int64_t thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *share_spin(void *arg)
{
    int me = (int)(intptr_t)arg;
    uint64_t x = 1, n = 0;
    while (!stop) {
        for (int k = 0; k < 1000; k++)
            x = x * 6364136223846793005ull + 1;
        work[me] = ++n;
        if (n & 63)
            continue; /* the clock is a system call: a sample per ~0.1 ms */
        int64_t now = thread_cpu();
        if (!share_cpu0)
            share_cpu0 = now;
        else if (now - share_cpu0 >= 1500000000)
            stop = 1; /* 1.5 s of the worker's CPU: as many slices, whatever the load */
        if (last_runner != me) {
            if (last_runner >= 0 && nslices < (int)(sizeof slices / sizeof *slices))
                slices[nslices++] = run_last - run_start;
            last_runner = me;
            run_start = now;
        }
        run_last = now;
    }
    return (void *)(uintptr_t)x;
}

static void shares(double *lo, double *hi)
{
    restart(0);
    stop = 0;
    last_runner = -1;
    nslices = 0;
    share_cpu0 = 0;
    fern_thread *t[4];
    for (int i = 0; i < 4; i++)
        fern_spawn(&t[i], NULL, share_spin, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++)
        fern_join(t[i], NULL);
    double total = 0;
    for (int i = 0; i < 4; i++)
        total += (double)work[i];
    *lo = 100, *hi = 0;
    for (int i = 0; i < 4; i++) {
        double p = 100.0 * (double)work[i] / total;
        *lo = p < *lo ? p : *lo;
        *hi = p > *hi ? p : *hi;
    }
}

static void *fixed_loop(void *arg)
{
    uint64_t x = 1;
    for (long i = 0; i < 300000000; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (void *)(uintptr_t)x;
}

static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Process CPU time (workers, monitor, signal handling), not wall time: on a
 * shared machine the wall time of a CPU-bound loop mostly measures the
 * neighbours. */
static double loops(long preempt_us, int n)
{
    restart(preempt_us);
    int64_t t0 = cpu_ns();
    fern_thread *t[2];
    for (int i = 0; i < n; i++)
        fern_spawn(&t[i], NULL, fixed_loop, NULL);
    for (int i = 0; i < n; i++)
        fern_join(t[i], NULL);
    return (double)(cpu_ns() - t0);
}

/* Interleaved off/on pairs of n loops; the best of each, as a percentage. */
static double loop_loss(int n)
{
    double off = 1e30, on = 1e30;
    for (int i = 0; i < 3; i++) {
        double a = loops(FERN_PREEMPT_OFF, n), b = loops(0, n);
        off = a < off ? a : off;
        on = b < on ? b : on;
    }
    return 100.0 * (on - off) / off;
}

int main(int argc, char **argv)
{
    run_ms = bench_arg(argc, argv, 1000);
    bench_print("preempt", "fern", "late_app_ms", lateness(spin_arith, 2), "ms");
    bench_print("preempt", "fern", "late_app_p50_ms", median(), "ms");
    bench_print("preempt", "fern", "late_libc_ms", lateness(spin_libc, 2), "ms");
    bench_print("preempt", "fern", "late_libc_deferred", (double)deferred, "count");
    bench_print("preempt", "fern", "late_libc_p50_ms", median(), "ms");
    bench_print("preempt", "fern", "late_syscall_ms", late_syscall(), "ms");
    bench_print("preempt", "fern", "late_syscall_p50_ms", median(), "ms");
    bench_print("preempt", "fern", "late_stuck2_ms", late_stuck2(), "ms");
    double lo, hi;
    shares(&lo, &hi);
    bench_print("preempt", "fern", "share_min_pct", lo, "%");
    bench_print("preempt", "fern", "share_max_pct", hi, "%");
    /* Slices granted (the first, begun before the others were queued,
     * left out). */
    if (nslices > 1) {
        qsort(slices + 1, (size_t)nslices - 1, sizeof *slices, cmp64);
        bench_print("preempt", "fern", "slice_min_ms", (double)slices[1] / 1e6, "ms");
        bench_print("preempt", "fern", "slice_p50_ms", (double)slices[1 + (nslices - 1) / 2] / 1e6, "ms");
        bench_print("preempt", "fern", "slice_max_ms", (double)slices[nslices - 1] / 1e6, "ms");
    }
    bench_print("preempt", "fern", "loop_alone_loss_pct", loop_loss(1), "%");
    bench_print("preempt", "fern", "loop_loss_pct", loop_loss(2), "%");
    fern_shutdown();
    return 0;
}
