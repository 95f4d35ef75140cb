/* SPDX-License-Identifier: MIT */
/*
 * A user program built against an installed (cross-compiled) fern and run
 * on the target, under qemu-user for aarch64 (tests/cross/check.sh). Each
 * part checks its own result and the program exits nonzero, naming the part,
 * on the first wrong answer:
 *   spawn/join   results come back from a tree of threads
 *   parked       N threads (argv[1], default 100000) park on one condition
 *                variable at once, all wake on a broadcast, all are joined
 *   channels     a pipeline of unbuffered and buffered channels carries every
 *                value exactly once, then close ends it
 *   prodcons     mutex + condition variable bounded buffer, 4 producers and
 *                4 consumers on all workers: sum and count exact
 *   preempt      8 threads spin in this file's code (calling nothing) on the
 *                4 workers while one sleeps 1 ms 100 times: the spinners are
 *                preempted (fern_stats counts it), in the program linked with
 *                libfern.so and in the one linked with libfern.a (whose
 *                fern code sits in its fern_nopreempt section)
 */
#include <fern/fern.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CHECK(part, cond)                                                  \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "cross prog: %s: %s failed (line %d)\n", part, \
                    #cond, __LINE__);                                      \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

/* ---- spawn/join: a binary tree of depth d returns 2^d ---- */
static void *tree(void *arg)
{
    long d = (long)arg;
    if (d == 0)
        return (void *)1L;
    fern_thread *l, *r;
    void *a = NULL, *b = NULL;
    CHECK("spawn", fern_spawn(&l, NULL, tree, (void *)(d - 1)) == 0);
    CHECK("spawn", fern_spawn(&r, NULL, tree, (void *)(d - 1)) == 0);
    CHECK("join", fern_join(l, &a) == 0 && fern_join(r, &b) == 0);
    return (void *)((long)a + (long)b);
}

/* ---- parked: everyone waits for `open` ---- */
static fern_mutex park_mu = FERN_MUTEX_INIT;
static fern_cond park_cv = FERN_COND_INIT, park_all_in = FERN_COND_INIT;
static long park_n, park_waiting, park_open;

static void *parker(void *arg)
{
    fern_mutex_lock(&park_mu);
    park_waiting++;
    if (park_waiting == park_n)
        fern_cond_signal(&park_all_in);
    while (!park_open)
        fern_cond_wait(&park_cv, &park_mu);
    fern_mutex_unlock(&park_mu);
    return arg;
}

static void *parked(void *arg)
{
    long n = (long)arg;
    fern_thread **t = malloc(sizeof *t * (size_t)n);
    CHECK("parked", t != NULL);
    park_n = n;
    fern_attr a = {.stack_size = FERN_STACK_MIN};
    for (long i = 0; i < n; i++)
        CHECK("parked", fern_spawn(&t[i], &a, parker, (void *)i) == 0);
    fern_mutex_lock(&park_mu);
    while (park_waiting < n)
        fern_cond_wait(&park_all_in, &park_mu);
    struct fern_stats st;
    CHECK("parked", fern_stats(&st) == 0 && st.threads_live >= (uint64_t)n);
    park_open = 1;
    fern_cond_broadcast(&park_cv);
    fern_mutex_unlock(&park_mu);
    for (long i = 0; i < n; i++) {
        void *r = NULL;
        CHECK("parked", fern_join(t[i], &r) == 0 && (long)r == i);
    }
    free(t);
    return NULL;
}

/* ---- channels: source -> doubler -> sink ---- */
#define CHAN_N 20000L
struct stage {
    fern_chan *in, *out;
};

static void *source(void *arg)
{
    fern_chan *c = arg;
    for (long i = 1; i <= CHAN_N; i++)
        CHECK("channels", fern_chan_send(c, &i) == 0);
    CHECK("channels", fern_chan_close(c) == 0);
    return NULL;
}

static void *doubler(void *arg)
{
    struct stage *p = arg;
    long v;
    while (fern_chan_recv(p->in, &v) == 0) {
        v *= 2;
        CHECK("channels", fern_chan_send(p->out, &v) == 0);
    }
    CHECK("channels", fern_chan_close(p->out) == 0);
    return NULL;
}

static void *channels(void *arg)
{
    fern_chan *a, *b;
    CHECK("channels", fern_chan_create(&a, sizeof(long), 0) == 0);
    CHECK("channels", fern_chan_create(&b, sizeof(long), 64) == 0);
    struct stage p = {a, b};
    fern_thread *s, *d;
    CHECK("channels", fern_spawn(&s, NULL, source, a) == 0);
    CHECK("channels", fern_spawn(&d, NULL, doubler, &p) == 0);
    long v, sum = 0, count = 0, last = 0;
    int e;
    while ((e = fern_chan_recv(b, &v)) == 0) {
        CHECK("channels", v == last + 2); /* one sender per channel: in order */
        last = v;
        sum += v;
        count++;
    }
    CHECK("channels", e == EPIPE);
    CHECK("channels", count == CHAN_N && sum == CHAN_N * (CHAN_N + 1));
    CHECK("channels", fern_join(s, NULL) == 0 && fern_join(d, NULL) == 0);
    CHECK("channels", fern_chan_destroy(a) == 0 && fern_chan_destroy(b) == 0);
    return arg;
}

/* ---- producer/consumer on a mutex and two condition variables ---- */
#define PC_CAP 16
#define PC_PER 25000L
#define PC_SIDES 4
static fern_mutex pc_mu = FERN_MUTEX_INIT;
static fern_cond pc_notfull = FERN_COND_INIT, pc_notempty = FERN_COND_INIT;
static long pc_buf[PC_CAP], pc_head, pc_len, pc_done;

static void *producer(void *arg)
{
    long base = (long)arg * PC_PER;
    for (long i = 1; i <= PC_PER; i++) {
        fern_mutex_lock(&pc_mu);
        while (pc_len == PC_CAP)
            fern_cond_wait(&pc_notfull, &pc_mu);
        pc_buf[(pc_head + pc_len++) % PC_CAP] = base + i;
        fern_cond_signal(&pc_notempty);
        fern_mutex_unlock(&pc_mu);
    }
    return NULL;
}

struct tally {
    long sum, count;
};

static void *consumer(void *arg)
{
    struct tally *t = arg;
    for (;;) {
        fern_mutex_lock(&pc_mu);
        while (pc_len == 0 && !pc_done)
            fern_cond_wait(&pc_notempty, &pc_mu);
        if (pc_len == 0) {
            fern_mutex_unlock(&pc_mu);
            return NULL;
        }
        long v = pc_buf[pc_head];
        pc_head = (pc_head + 1) % PC_CAP;
        pc_len--;
        fern_cond_signal(&pc_notfull);
        fern_mutex_unlock(&pc_mu);
        t->sum += v;
        t->count++;
    }
}

static void *prodcons(void *arg)
{
    fern_thread *p[PC_SIDES], *c[PC_SIDES];
    struct tally t[PC_SIDES] = {{0, 0}};
    for (long i = 0; i < PC_SIDES; i++) {
        CHECK("prodcons", fern_spawn(&c[i], NULL, consumer, &t[i]) == 0);
        CHECK("prodcons", fern_spawn(&p[i], NULL, producer, (void *)i) == 0);
    }
    for (int i = 0; i < PC_SIDES; i++)
        CHECK("prodcons", fern_join(p[i], NULL) == 0);
    fern_mutex_lock(&pc_mu);
    pc_done = 1;
    fern_cond_broadcast(&pc_notempty);
    fern_mutex_unlock(&pc_mu);
    long sum = 0, count = 0, n = PC_SIDES * PC_PER;
    for (int i = 0; i < PC_SIDES; i++) {
        CHECK("prodcons", fern_join(c[i], NULL) == 0);
        sum += t[i].sum;
        count += t[i].count;
    }
    CHECK("prodcons", count == n && sum == n * (n + 1) / 2);
    return arg;
}

/* ---- preempt: spinners beside a sleeper ---- */
#define SPINNERS 8
static atomic_bool spin_stop;

static __attribute__((noinline)) void *spin(void *arg)
{
    uint64_t x = (uintptr_t)arg | 1;
    while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
        for (int i = 0; i < 1000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    return (void *)(uintptr_t)x;
}

/* A plain thread: without preemption the spinners keep the sleeper out
 * for good (or until compensation gets to it); fail, do not hang. */
static void *preempt_watchdog(void *arg)
{
    (void)arg;
    for (int i = 0; i < 600 && !atomic_load(&spin_stop); i++)
        usleep(100000);
    CHECK("preempt", atomic_load(&spin_stop)); /* the sleeper finished in 60 s */
    return NULL;
}

static void *preempt(void *arg)
{
    struct fern_stats st;
    CHECK("preempt", fern_stats(&st) == 0);
    uint64_t before = st.preemptions;
    fern_thread *t[SPINNERS];
    for (long i = 0; i < SPINNERS; i++)
        CHECK("preempt", fern_spawn(&t[i], NULL, spin, (void *)i) == 0);
    for (int i = 0; i < 100; i++)
        CHECK("preempt", fern_sleep_ns(1000000) == 0);
    atomic_store(&spin_stop, true);
    for (int i = 0; i < SPINNERS; i++)
        CHECK("preempt", fern_join(t[i], NULL) == 0);
    CHECK("preempt", fern_stats(&st) == 0);
    CHECK("preempt", st.preemptions > before);
    return arg;
}

int main(int argc, char **argv)
{
    long nparked = argc > 1 ? atol(argv[1]) : 100000;
    fern_config cfg = {.workers = 4};
    CHECK("init", fern_init(&cfg) == 0);
    void *r = NULL;
    CHECK("spawn/join", fern_run(tree, (void *)10L, &r) == 0 && (long)r == 1024);
    CHECK("parked", fern_run(parked, (void *)nparked, NULL) == 0);
    CHECK("channels", fern_run(channels, NULL, NULL) == 0);
    CHECK("prodcons", fern_run(prodcons, NULL, NULL) == 0);
    pthread_t wd;
    CHECK("preempt", pthread_create(&wd, NULL, preempt_watchdog, NULL) == 0);
    CHECK("preempt", fern_run(preempt, NULL, NULL) == 0);
    CHECK("preempt", pthread_join(wd, NULL) == 0);
    CHECK("shutdown", fern_shutdown() == 0);
    printf("cross prog ok: spawn/join, %ld parked, channels, producer/consumer, preempt\n",
           nparked);
    return 0;
}
