/* SPDX-License-Identifier: MIT */
/*
 * The program the gdb tests look at: green threads with names, parked on a
 * channel, a mutex and a sleep, plus "main" running. Once all three are
 * parked (read back from fern_dump) it stops itself with SIGTRAP, where the
 * debugger takes over. Each waiter parks from a function of its own, so a
 * backtrace can be checked for it. The trap is an int3 in an inlined
 * function: the kernel thread gdb stops in has an inlined frame 0, the case
 * where an unwinder that claims the first frame offered goes wrong.
 */
#define _GNU_SOURCE
#include <fern/fern.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fern_chan *ch;
static fern_mutex mu = FERN_MUTEX_INIT;

__attribute__((noinline)) static void *wait_on_channel(void *arg)
{
    int v;
    fern_chan_recv(ch, &v);
    __asm__ volatile("" ::: "memory"); /* keep this frame: no tail call */
    return NULL;
}

__attribute__((noinline)) static void *wait_on_mutex(void *arg)
{
    fern_mutex_lock(&mu);
    fern_mutex_unlock(&mu);
    return NULL;
}

__attribute__((noinline)) static void *wait_asleep(void *arg)
{
    fern_sleep_ns((int64_t)3600 * 1000000000);
    __asm__ volatile("" ::: "memory");
    return NULL;
}

/* How many threads fern_dump reports parked. */
static int parked_count(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f || fern_dump(f) < 0)
        abort();
    fclose(f);
    int n = 0;
    for (char *p = buf; (p = strstr(p, " parked")) != NULL; p++)
        n++;
    free(buf);
    return n;
}

static inline __attribute__((always_inline)) void stop_here(void)
{
    /* the debugger looks here; the nop keeps the pc inside this function */
    __asm__ volatile("int3\n\tnop" ::: "memory");
}

static void *main_green(void *arg)
{
    fern_chan_create(&ch, sizeof(int), 0);
    fern_mutex_lock(&mu);
    static const struct {
        const char *name;
        fern_fn fn;
    } w[] = {{"chan-waiter", wait_on_channel},
             {"mutex-waiter", wait_on_mutex},
             {"sleeper", wait_asleep}};
    for (int i = 0; i < 3; i++) {
        fern_attr a = {0, w[i].name, NULL, true};
        if (fern_spawn(NULL, &a, w[i].fn, NULL))
            abort();
    }
    for (int i = 0; i < 10000 && parked_count() < 3; i++)
        fern_sleep_ns(1000000);
    if (parked_count() < 3) {
        fprintf(stderr, "waiters did not park\n");
        abort();
    }
    stop_here();
    return NULL;
}

int main(void)
{
    fern_config c = {2, 0};
    if (fern_init(&c) || fern_run(main_green, NULL, NULL))
        return 1;
    return 0;
}
