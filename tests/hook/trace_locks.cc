// SPDX-License-Identifier: MIT
// The tracer (docs/debugging.md, "Tracing") names what a green thread parked
// on when fern-hook parked it on a pthread lock: "pthread_mutex (fern-hook)",
// "pthread_cond (fern-hook)", "pthread_rwlock (fern-hook)" in the run's
// "on" (hook/lock.c, cond.c, rwlock.c over sync/lot.c). And beside
// fern-hook, the flight recorder's dumps from a green thread (fern_dump)
// and from a crash report's signal handler are written with raw system
// calls, never through the hooked open, write and close.
#include "lock_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <string>
#include <vector>

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
        static int turn;
        turn = 0; // again for each run of the test (--gtest_repeat)
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
        // In turn, last spawned first: all but one wait their turn. Not
        // under ThreadSanitizer, whose condition variables stay glibc's
        // (docs/hooks.md): there a wait would block the one worker.
        if (!kTsan)
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
                           kTsan ? "pthread_mutex (fern-hook)" : "pthread_cond (fern-hook)"})
        EXPECT_NE(std::string::npos, text.find(std::string("\"end\":\"park\",\"on\":\"") + on + "\""))
            << "no run parked on " << on;
}

std::vector<std::string> ring_files(const std::string &dir) {
    std::vector<std::string> out;
    if (DIR *d = opendir(dir.c_str())) {
        while (struct dirent *e = readdir(d))
            if (std::string(e->d_name).rfind("fern-ring.", 0) == 0) out.push_back(dir + "/" + e->d_name);
        closedir(d);
    }
    return out;
}

void clean(const std::string &dir) {
    for (auto &f : ring_files(dir)) unlink(f.c_str());
    rmdir(dir.c_str());
}

// fern_dump on a green thread, with fern-hook: the dump is written whole.
TEST(HookTrace, FlightRecorderDumpFromAGreenThread) {
    std::string dir = "/tmp/fern-hook-ring-" + std::to_string(getpid());
    clean(dir);
    ASSERT_EQ(0, mkdir(dir.c_str(), 0700));
    ASSERT_EQ(0, fern_trace_start(("ring:" + dir).c_str()));
    std::string out;
    {
        Workers w(2);
        static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        w.many(8, [&](int) {
            ASSERT_EQ(0, pthread_mutex_lock(&m));
            usleep(200);
            ASSERT_EQ(0, pthread_mutex_unlock(&m));
        });
        fern_thread *t = w.spawn([&] {
            char *buf = nullptr;
            size_t len = 0;
            FILE *f = open_memstream(&buf, &len);
            fern_dump(f);
            fclose(f);
            out.assign(buf, len);
            free(buf);
        });
        ASSERT_EQ(0, fern_join(t, nullptr));
    }
    ASSERT_EQ(0, fern_trace_stop());
    EXPECT_NE(std::string::npos, out.find("fern: flight recorder: the last events of every worker are in " + dir))
        << out;
    auto files = ring_files(dir);
    ASSERT_EQ(1u, files.size());
    std::string text = slurp(files[0].c_str());
    EXPECT_EQ("]\n", text.substr(text.size() - 2));
    EXPECT_NE(std::string::npos, text.find("\"on\":\"pthread_mutex (fern-hook)\""));
    clean(dir);
}

// A crash on a green thread, with fern-hook: the report's signal handler
// writes its line and the flight recorder's dump.
TEST(HookTraceDeathTest, CrashDumpsTheFlightRecorder) {
#ifdef FERN_TEST_EMULATED
    // qemu-user cannot fork this process once fern-hook's earlier tests
    // have left kernel threads in it (qemu's own assertions fail in the
    // child); the path is the same on every architecture and runs natively.
    GTEST_SKIP() << "a death test after threads: not under qemu-user";
#endif
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    std::string dir = "/tmp/fern-hook-crash-" + std::to_string(getuid());
    clean(dir);
    ASSERT_EQ(0, mkdir(dir.c_str(), 0700));
    EXPECT_EXIT(
        {
            if (fern_trace_start(("ring:" + dir).c_str())) _exit(90);
            Workers w(1);
            fern_thread *t = w.spawn([] {
                usleep(100); // a hooked park first
                abort();
            });
            fern_join(t, nullptr);
            _exit(91);
        },
        ::testing::KilledBySignal(SIGABRT),
        "SIGABRT in green thread [0-9]+ .*\nfern: flight recorder: the last events of every "
        "worker are in /tmp/fern-hook-crash-[0-9]+/fern-ring\\.[0-9]+\\.1\\.json");
    auto files = ring_files(dir);
    ASSERT_EQ(1u, files.size());
    std::string text = slurp(files[0].c_str());
    EXPECT_EQ("]\n", text.substr(text.size() - 2));
    EXPECT_NE(std::string::npos, text.find("\"on\":\"sleep\""));
    clean(dir);
}

} // namespace
