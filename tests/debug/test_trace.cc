// SPDX-License-Identifier: MIT
// The tracer (src/debug/trace.c): fern_trace_start / fern_trace_stop and
// their errors, $FERN_TRACE and $FERN_TRACE_EVENTS, a full buffer dropping
// and counting instead of blocking, and the flight recorder's dumps on
// fern_dump, a deadlock report and a crash. The JSON itself is checked with
// Python's json module by debug/check_trace.py (ctest trace_json).
#include "fern_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>

using namespace fern_test;

namespace {

std::string slurp(const std::string &path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::string tmpdir() {
    char d[] = "/tmp/fern-trace-XXXXXX";
    EXPECT_NE(nullptr, mkdtemp(d));
    return d;
}

void rmtree(const std::string &dir) {
    if (DIR *d = opendir(dir.c_str())) {
        while (struct dirent *e = readdir(d))
            if (e->d_name[0] != '.') unlink((dir + "/" + e->d_name).c_str());
        closedir(d);
    }
    rmdir(dir.c_str());
}

// The files in dir whose names start with prefix.
std::vector<std::string> files_in(const std::string &dir, const std::string &prefix) {
    std::vector<std::string> out;
    if (DIR *d = opendir(dir.c_str())) {
        while (struct dirent *e = readdir(d))
            if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(dir + "/" + e->d_name);
        closedir(d);
    }
    return out;
}

// Two named threads handing a token back and forth n times.
void ping_pong(int n) {
    fern_chan *a, *b;
    ASSERT_EQ(0, fern_chan_create(&a, sizeof(int), 0));
    ASSERT_EQ(0, fern_chan_create(&b, sizeof(int), 0));
    fern_attr pa{}, pb{};
    pa.name = "tracer-ping";
    pb.name = "tracer-pong";
    fern_thread *t1, *t2;
    ASSERT_EQ(0, spawn(&t1, &pa, [&] {
                  for (int i = 0; i < n; i++) {
                      int v = i;
                      fern_chan_send(a, &v);
                      fern_chan_recv(b, &v);
                  }
              }));
    ASSERT_EQ(0, spawn(&t2, &pb, [&] {
                  for (int i = 0; i < n; i++) {
                      int v;
                      fern_chan_recv(a, &v);
                      fern_chan_send(b, &v);
                  }
              }));
    ASSERT_EQ(0, fern_join(t1, nullptr));
    ASSERT_EQ(0, fern_join(t2, nullptr));
    fern_chan_destroy(a);
    fern_chan_destroy(b);
}

// A complete file: the array's end, and its closing record.
void expect_complete(const std::string &text) {
    ASSERT_GE(text.size(), 4u);
    EXPECT_EQ("[\n", text.substr(0, 2));
    EXPECT_EQ("]\n", text.substr(text.size() - 2));
    EXPECT_NE(std::string::npos, text.find("\"name\":\"fern_trace\""));
}

// In a death test's child: start the runtime tracing to target, run
// ping_pong(50), then abort in a green thread named "crasher". Exit status 90:
// the runtime or the trace did not start; 91: the thread did not crash.
void crash_while_tracing(const char *target) {
    if (fern_init(nullptr) || fern_trace_start(target)) _exit(90);
    ping_pong(50);
    fern_attr a{};
    a.name = "crasher";
    fern_thread *t;
    spawn(&t, &a, [] { abort(); });
    fern_join(t, nullptr);
    _exit(91);
}

TEST(TraceDeathTest, CrashWritesTheFlightRecorder) {
    GTEST_FLAG_SET(death_test_style, death_style());
    // The child (re-executed) computes the same directory.
    std::string dir = "/tmp/fern-trace-crash-" + std::to_string(getuid());
    rmtree(dir);
    mkdir(dir.c_str(), 0700);
    EXPECT_EXIT(
        {
            crash_while_tracing(("ring:" + dir).c_str());
        },
        ::testing::KilledBySignal(SIGABRT),
        "SIGABRT in green thread [0-9]+ \"crasher\"\nfern: flight recorder: the last events of every "
        "worker are in /tmp/fern-trace-crash-[0-9]+/fern-ring\\.[0-9]+\\.1\\.json");
    auto files = files_in(dir, "fern-ring.");
    ASSERT_EQ(1u, files.size());
    std::string text = slurp(files[0]);
    expect_complete(text);
    EXPECT_NE(std::string::npos, text.find("\"name\":\"tracer-ping\""));
    EXPECT_NE(std::string::npos, text.find("\"name\":\"crasher\""));
    rmtree(dir);
}

// A crash while tracing to a file: the crash report appends what the
// writer had not drained (it drains every 0.25 to 100 ms), so the file ends
// with the crashing thread's last run, every line is whole, and the file
// opens without its closing "]".
TEST(TraceDeathTest, CrashWritesTheEventsNotYetWritten) {
    GTEST_FLAG_SET(death_test_style, death_style());
    std::string path = "/tmp/fern-trace-filecrash-" + std::to_string(getuid()) + ".json";
    unlink(path.c_str());
    EXPECT_EXIT(
        {
            crash_while_tracing(path.c_str());
        },
        ::testing::KilledBySignal(SIGABRT),
        "SIGABRT in green thread [0-9]+ \"crasher\"\nfern: trace /tmp/fern-trace-filecrash-[0-9]+\\.json: "
        "the last [0-9]+ events are written; the file opens as it is");
    std::string text = slurp(path);
    ASSERT_EQ("[\n", text.substr(0, 2));
    std::istringstream lines(text.substr(2));
    std::string line, crasher;
    size_t n = 0;
    while (std::getline(lines, line)) {
        n++;
        ASSERT_EQ("},", line.substr(line.size() - 2)) << "line " << n << ": " << line;
        ASSERT_EQ('{', line[0]) << "line " << n;
        if (line.find("\"ph\":\"X\"") != std::string::npos &&
            line.find("\"name\":\"crasher\"") != std::string::npos)
            crasher = line;
    }
    EXPECT_NE(std::string::npos, text.find("\"name\":\"tracer-ping\""));
    EXPECT_NE(std::string::npos, crasher.find("\"end\":\"trace stopped\"")) << crasher;
    unlink(path.c_str());
}

TEST(TraceDeathTest, DeadlockReportWritesTheFlightRecorder) {
    GTEST_FLAG_SET(death_test_style, death_style());
    std::string dir = "/tmp/fern-trace-deadlock-" + std::to_string(getuid());
    rmtree(dir);
    mkdir(dir.c_str(), 0700);
    EXPECT_EXIT(
        {
            if (fern_init(nullptr) || fern_trace_start(("ring:" + dir).c_str())) _exit(90);
            static fern_mutex m1;
            static fern_mutex m2;
            static std::atomic<int> held{0};
            fern_attr a{};
            a.detached = true;
            a.name = "locker-1";
            spawn(nullptr, &a, [] {
                fern_mutex_lock(&m1);
                held++;
                while (held < 2) fern_yield();
                fern_mutex_lock(&m2);
            });
            a.name = "locker-2";
            spawn(nullptr, &a, [] {
                fern_mutex_lock(&m2);
                held++;
                while (held < 2) fern_yield();
                fern_mutex_lock(&m1);
            });
            for (int i = 0; i < 1000; i++) {
                struct fern_stats s;
                fern_stats(&s);
                if (s.deadlocks_reported) _exit(0);
                usleep(10000);
            }
            _exit(91);
        },
        ::testing::ExitedWithCode(0),
        "fern: flight recorder: the last events of every worker are in "
        "/tmp/fern-trace-deadlock-[0-9]+/fern-ring\\.[0-9]+\\.1\\.json");
    auto files = files_in(dir, "fern-ring.");
    ASSERT_EQ(1u, files.size());
    std::string text = slurp(files[0]);
    expect_complete(text);
    EXPECT_NE(std::string::npos, text.find("\"name\":\"locker-1\""));
    EXPECT_NE(std::string::npos, text.find("\"on\":\"mutex\""));
    rmtree(dir);
}

class Trace : public ::testing::Test {
  protected:
    std::string dir;
    void SetUp() override {
        dir = tmpdir();
        ASSERT_EQ(0, fern_init(nullptr));
    }
    void TearDown() override {
        fern_trace_stop(); // if a test left one running
        if (runtime_running()) {
            ASSERT_EQ(0, fern_shutdown());
        }
        rmtree(dir);
    }
};

TEST_F(Trace, StopWithoutSessionIsEinval) { EXPECT_EQ(EINVAL, fern_trace_stop()); }

TEST_F(Trace, BadPathsAreRejected) {
    EXPECT_EQ(EINVAL, fern_trace_start(nullptr));
    EXPECT_EQ(EINVAL, fern_trace_start(""));
    EXPECT_EQ(ENOENT, fern_trace_start((dir + "/no/such/dir/t.json").c_str()));
    EXPECT_EQ(ENOENT, fern_trace_start(("ring:" + dir + "/missing").c_str()));
    std::string file = dir + "/plain";
    close(open(file.c_str(), O_CREAT | O_WRONLY, 0600));
    EXPECT_EQ(ENOTDIR, fern_trace_start(("ring:" + file).c_str()));
    EXPECT_EQ(EINVAL, fern_trace_start(std::string(5000, 'x').c_str()));
    // None of them started a session.
    EXPECT_EQ(EINVAL, fern_trace_stop());
}

TEST_F(Trace, SecondStartIsEbusyAndStopEndsTheFile) {
    std::string path = dir + "/t.json";
    ASSERT_EQ(0, fern_trace_start(path.c_str()));
    EXPECT_EQ(EBUSY, fern_trace_start((dir + "/other.json").c_str()));
    EXPECT_EQ(EBUSY, fern_trace_start("ring"));
    ping_pong(100);
    EXPECT_EQ(0, fern_trace_stop());
    EXPECT_EQ(EINVAL, fern_trace_stop());
    std::string text = slurp(path);
    expect_complete(text);
    EXPECT_NE(std::string::npos, text.find("\"name\":\"tracer-ping\""));
    EXPECT_NE(std::string::npos, text.find("\"name\":\"fern worker ")); // the workers that ran
    EXPECT_NE(std::string::npos, text.find("\"on\":\"chan "));
    // A second session truncates and rewrites the file.
    ASSERT_EQ(0, fern_trace_start(path.c_str()));
    EXPECT_EQ(0, fern_trace_stop());
    text = slurp(path);
    expect_complete(text);
    EXPECT_EQ(std::string::npos, text.find("tracer-ping"));
}

TEST_F(Trace, WriteErrorIsReportedByStop) {
    // /dev/full opens, and every write fails with ENOSPC: the session runs
    // on (the workers never wait), and stop reports the first error.
    ASSERT_EQ(0, fern_trace_start("/dev/full"));
    ping_pong(1000);
    EXPECT_EQ(ENOSPC, fern_trace_stop());
    EXPECT_EQ(EINVAL, fern_trace_stop());
    // The next session starts clean.
    std::string path = dir + "/after.json";
    ASSERT_EQ(0, fern_trace_start(path.c_str()));
    EXPECT_EQ(0, fern_trace_stop());
    expect_complete(slurp(path));
}

TEST_F(Trace, StartsBeforeTheRuntimeAndEndsAtShutdown) {
    ASSERT_EQ(0, fern_shutdown());
    std::string path = dir + "/early.json";
    ASSERT_EQ(0, fern_trace_start(path.c_str()));
    ASSERT_EQ(0, fern_init(nullptr));
    ping_pong(10);
    ASSERT_EQ(0, fern_shutdown()); // ends the session and completes the file
    EXPECT_EQ(EINVAL, fern_trace_stop());
    std::string text = slurp(path);
    expect_complete(text);
    EXPECT_NE(std::string::npos, text.find("\"name\":\"tracer-pong\""));
    ASSERT_EQ(0, fern_init(nullptr));
}

TEST_F(Trace, StartAndStopFromGreenThreadsOfSeveralWorkers) {
    // Sessions begin and end while other threads switch on every worker.
    std::atomic<bool> stop{false};
    std::vector<fern_thread *> ts;
    for (int i = 0; i < 4; i++) {
        fern_thread *t;
        ASSERT_EQ(0, spawn(&t, nullptr, [&] {
                      while (!stop) fern_yield();
                  }));
        ts.push_back(t);
    }
    std::string path = dir + "/busy.json";
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ(0, run_green([&] {
                      EXPECT_EQ(0, fern_trace_start(path.c_str()));
                      ping_pong(20);
                      EXPECT_EQ(0, fern_trace_stop());
                  }));
        expect_complete(slurp(path));
    }
    stop = true;
    for (auto t : ts) ASSERT_EQ(0, fern_join(t, nullptr));
}

TEST_F(Trace, FullBufferDropsAndCountsNeverBlocks) {
    ASSERT_EQ(0, fern_shutdown());
    setenv("FERN_TRACE_EVENTS", "1024", 1);
    std::string path = dir + "/small.json";
    setenv("FERN_TRACE", path.c_str(), 1);
    int rc = fern_init(nullptr);
    unsetenv("FERN_TRACE");
    unsetenv("FERN_TRACE_EVENTS");
    ASSERT_EQ(0, rc);
    // 100,000 round trips write some 800,000 events in well under a second:
    // far more than 1024 slots per worker drained every 2 ms can hold.
    int64_t t0 = fern_now_ns();
    ASSERT_EQ(0, run_green([] { ping_pong((int)scaled(100000, 20000)); }));
    int64_t took = fern_now_ns() - t0;
    ASSERT_EQ(0, fern_trace_stop());
    std::string text = slurp(path);
    expect_complete(text);
    size_t at = text.find("\"dropped\":");
    ASSERT_NE(std::string::npos, at);
    EXPECT_GT(std::stoull(text.substr(at + 10)), 0u) << text.substr(at, 40);
    EXPECT_LT(took, 60 * 1000000000ll); // it ran on instead of waiting for the writer
}

TEST_F(Trace, ForkedChildLeavesTheParentsFileAlone) {
    std::string path = dir + "/fork.json";
    ASSERT_EQ(0, fern_trace_start(path.c_str()));
    ping_pong(10);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // exit() runs the tracer's atexit handler: with no writer thread
        // here, it must neither wait for one nor end the parent's file.
        exit(fern_trace_stop() == EINVAL ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    ping_pong(10);
    ASSERT_EQ(0, fern_trace_stop());
    std::string text = slurp(path);
    expect_complete(text);
    EXPECT_EQ(1, std::count(text.begin(), text.end(), ']')) << "one end only";
}

TEST_F(Trace, EnvironmentIsChecked) {
    ASSERT_EQ(0, fern_shutdown());
    setenv("FERN_TRACE_EVENTS", "1000", 1);
    EXPECT_EQ(EINVAL, fern_init(nullptr));
    setenv("FERN_TRACE_EVENTS", "512", 1);
    EXPECT_EQ(EINVAL, fern_init(nullptr));
    unsetenv("FERN_TRACE_EVENTS");
    setenv("FERN_TRACE_THREADS", "2", 1);
    EXPECT_EQ(EINVAL, fern_init(nullptr));
    setenv("FERN_TRACE_THREADS", "yes", 1);
    EXPECT_EQ(EINVAL, fern_init(nullptr));
    unsetenv("FERN_TRACE_THREADS");
    setenv("FERN_TRACE", "ring:", 1);
    EXPECT_EQ(EINVAL, fern_init(nullptr));
    setenv("FERN_TRACE", (dir + "/no/such/t.json").c_str(), 1);
    EXPECT_EQ(ENOENT, fern_init(nullptr));
    EXPECT_FALSE(runtime_running());
    setenv("FERN_TRACE", ("ring:" + dir).c_str(), 1);
    EXPECT_EQ(0, fern_init(nullptr));
    unsetenv("FERN_TRACE");
    EXPECT_EQ(EBUSY, fern_trace_start((dir + "/x.json").c_str()));
    EXPECT_EQ(0, fern_trace_stop());
}

TEST_F(Trace, FernDumpWritesTheFlightRecorder) {
    ASSERT_EQ(0, fern_trace_start(("ring:" + dir).c_str()));
    ping_pong(200);
    char *out = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    ASSERT_GE(fern_dump(f), 0);
    fclose(f);
    std::string dump(out, len);
    free(out);
    EXPECT_NE(std::string::npos, dump.find("fern: flight recorder: the last events of every worker are in " +
                                           dir + "/fern-ring."))
        << dump;
    auto files = files_in(dir, "fern-ring.");
    ASSERT_EQ(1u, files.size());
    std::string text = slurp(files[0]);
    expect_complete(text);
    EXPECT_NE(std::string::npos, text.find("\"name\":\"tracer-pong\""));
    // Only the last events: a ring of 16384 per worker.
    EXPECT_LT(std::count(text.begin(), text.end(), '\n'), 4 * 16384 * 3);
    EXPECT_EQ(0, fern_trace_stop());
    // No session: fern_dump says nothing of the tracer.
    f = open_memstream(&out, &len);
    ASSERT_GE(fern_dump(f), 0);
    fclose(f);
    dump.assign(out, len);
    free(out);
    EXPECT_EQ(std::string::npos, dump.find("flight recorder")) << dump;
}

// FERN_TRACE_THREADS=1 draws each green thread's runs on a track of its own
// (check_trace.py checks a whole file); the flight recorder's dump has them
// too, and a session without it has none.
TEST_F(Trace, ThreadTracksWhenAskedFor) {
    ASSERT_EQ(0, fern_shutdown());
    setenv("FERN_TRACE_THREADS", "1", 1);
    int r = fern_init(nullptr);
    unsetenv("FERN_TRACE_THREADS");
    ASSERT_EQ(0, r);
    ASSERT_EQ(0, fern_trace_start(("ring:" + dir).c_str()));
    ping_pong(200);
    char *out = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    ASSERT_GE(fern_dump(f), 0);
    fclose(f);
    free(out);
    EXPECT_EQ(0, fern_trace_stop());
    auto files = files_in(dir, "fern-ring.");
    ASSERT_EQ(1u, files.size());
    std::string text = slurp(files[0]);
    expect_complete(text);
    EXPECT_NE(std::string::npos, text.find("\"args\":{\"name\":\"fern green threads (pid "));
    EXPECT_NE(std::string::npos, text.find("\"name\":\"thread_name\",\"args\":{\"name\":\"tracer-pong\"}"));
    EXPECT_NE(std::string::npos, text.find("\"cat\":\"thread\",\"args\":{\"end\":\"park\",\"on\":\"chan"));
    unlink(files[0].c_str());

    // The next session of a runtime started without it: none.
    ASSERT_EQ(0, fern_shutdown());
    ASSERT_EQ(0, fern_init(nullptr));
    ASSERT_EQ(0, fern_trace_start((dir + "/plain.json").c_str()));
    ping_pong(50);
    ASSERT_EQ(0, fern_trace_stop());
    text = slurp(dir + "/plain.json");
    expect_complete(text);
    EXPECT_EQ(std::string::npos, text.find("fern green threads"));
    EXPECT_EQ(std::string::npos, text.find("\"cat\":\"thread\""));
}

} // namespace
