// SPDX-License-Identifier: MIT
// The tracer (docs/debugging.md, "Tracing") names what a green thread parked
// on when fern-hook parked it on a pthread lock: "pthread_mutex (fern-hook)",
// "pthread_cond (fern-hook)", "pthread_rwlock (fern-hook)" in the run's
// "on" (hook/lock.c, cond.c, rwlock.c over sync/lot.c).
#include "lock_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

using namespace lock_test;

FERN_WATCHDOG_EACH_TEST(120);

namespace {

std::string slurp(const char *path) {
    std::string text;
    FILE *f = fopen(path, "r");
    if (!f) return text;
    char buf[65536];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, k);
    fclose(f);
    return text;
}

TEST(HookTrace, PthreadLockParksAreNamed) {
    char path[] = "/tmp/fern-hook-trace-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    ASSERT_EQ(0, fern_trace_start(path));
    {
        Workers w(1);
        // One worker: while a holder sleeps (a hooked usleep parks it), the
        // others run and park on the mutex, the rwlock, the condition.
        static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
        static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
        static int turn = 0;
        w.many(8, [&](int) {
            ASSERT_EQ(0, pthread_mutex_lock(&m));
            usleep(300);
            ASSERT_EQ(0, pthread_mutex_unlock(&m));
        });
        w.many(8, [&](int) {
            ASSERT_EQ(0, pthread_rwlock_wrlock(&rw));
            usleep(300);
            ASSERT_EQ(0, pthread_rwlock_unlock(&rw));
        });
        // In turn, last spawned first: all but one wait their turn.
        w.many(8, [&](int i) {
            ASSERT_EQ(0, pthread_mutex_lock(&m));
            while (turn != 7 - i) pthread_cond_wait(&cv, &m);
            turn++;
            pthread_cond_broadcast(&cv);
            ASSERT_EQ(0, pthread_mutex_unlock(&m));
        });
    }
    ASSERT_EQ(0, fern_trace_stop());
    std::string text = slurp(path);
    unlink(path);
    ASSERT_FALSE(text.empty());
    for (const char *on : {"pthread_mutex (fern-hook)", "pthread_rwlock (fern-hook)",
                           "pthread_cond (fern-hook)"})
        EXPECT_NE(std::string::npos, text.find(std::string("\"end\":\"park\",\"on\":\"") + on + "\""))
            << "no run parked on " << on;
}

} // namespace
