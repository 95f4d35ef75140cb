/* SPDX-License-Identifier: MIT */
/*
 * A deadlock for the report's frame-pointer walk (tests/tools/check.py
 * deadlock): "transfer" takes accounts_lock then ledger_lock, "audit" the
 * other way round, each from a function of its own. Built with frame
 * pointers against fern_fp (fern built with them too) and linked with
 * no_libunwind.c's library, whose soname is libunwind.so.8: the report's
 * dlopen("libunwind.so.8") finds that one, without libunwind's functions,
 * so the report falls back to frame pointers, as on a machine without
 * libunwind. Run with FERN_DEADLOCK=fatal, it ends by SIGABRT.
 */
#include <fern/fern.h>

#include <stdlib.h>

static fern_mutex accounts_lock = FERN_MUTEX_INIT;
static fern_mutex ledger_lock = FERN_MUTEX_INIT;
static fern_sem both;

/* Defined in the fake library: referenced so the link keeps it. */
int fern_test_no_libunwind(void);

__attribute__((noinline)) static void *transfer(void *arg)
{
    fern_mutex_lock(&accounts_lock);
    fern_sem_post(&both);
    fern_sleep_ns(20000000);
    fern_mutex_lock(&ledger_lock);
    __asm__ volatile("" ::: "memory"); /* keep this frame: no tail call */
    return arg;
}

__attribute__((noinline)) static void *audit(void *arg)
{
    fern_mutex_lock(&ledger_lock);
    fern_sem_post(&both);
    fern_sleep_ns(20000000);
    fern_mutex_lock(&accounts_lock);
    __asm__ volatile("" ::: "memory");
    return arg;
}

static void *main_green(void *arg)
{
    fern_thread *a, *b;
    fern_attr at = {0, "transfer", NULL, false};
    fern_sem_init(&both, 0);
    if (fern_spawn(&a, &at, transfer, NULL))
        abort();
    at.name = "audit";
    if (fern_spawn(&b, &at, audit, NULL))
        abort();
    fern_join(a, NULL);
    return arg;
}

int main(void)
{
    if (fern_test_no_libunwind() != 8)
        return 2;
    return fern_run(main_green, NULL, NULL) ? 1 : 0;
}
