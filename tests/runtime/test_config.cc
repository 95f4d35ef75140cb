// SPDX-License-Identifier: MIT
// Configuration (src/config.c, docs/configuration.md): every environment
// variable and fern_config field, valid values taking effect (size suffixes
// included) and each invalid value failing with EINVAL and exactly one line
// on stderr naming the setting, the value and what is accepted.
#include "fern_test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <sys/socket.h>

#include <algorithm>
#include <string>

using namespace fern_test;

namespace {

const char *const kVars[] = {"FERN_WORKERS", "FERN_STACK_SIZE",   "FERN_BIAS",
                             "FERN_BLOCKING_MAX", "FERN_GUARD", "FERN_GUARD_BUDGET",
                             "FERN_DUMP_SIGNAL", "FERN_IO_URING",
                             "FERN_HIBERNATE", "FERN_HIBERNATE_US", "FERN_MEMBARRIER"};

// Every test starts with the runtime stopped and no FERN_ variable set, and
// leaves the environment as it found it.
class Config : public ::testing::Test {
  protected:
    std::string saved[std::size(kVars)];
    bool had[std::size(kVars)] = {};
    void SetUp() override {
        stop();
        for (size_t i = 0; i < std::size(kVars); i++) {
            const char *v = getenv(kVars[i]);
            had[i] = v != nullptr;
            if (v) saved[i] = v;
            unsetenv(kVars[i]);
        }
    }
    void TearDown() override {
        stop();
        for (size_t i = 0; i < std::size(kVars); i++) {
            if (had[i]) {
                setenv(kVars[i], saved[i].c_str(), 1);
            } else {
                unsetenv(kVars[i]);
            }
        }
    }
    static void stop() {
        if (runtime_running()) {
            ASSERT_EQ(0, fern_shutdown());
        }
    }
};

// fern_init(cfg) with stderr captured: returns what it printed.
std::string init_stderr(const fern_config *cfg, int *rc) {
    char path[] = "/tmp/fern-config-XXXXXX";
    int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    *rc = fern_init(cfg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string out;
    char buf[512];
    ssize_t n;
    lseek(fd, 0, SEEK_SET);
    while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, (size_t)n);
    close(fd);
    return out;
}

// Setting NAME=VALUE makes fern_init fail with EINVAL and print exactly
// `fern: NAME="VALUE" is not valid: expected ACCEPTED`.
void expect_rejected(const char *name, const char *value, const char *accepted) {
    setenv(name, value, 1);
    int rc = -1;
    std::string err = init_stderr(nullptr, &rc);
    EXPECT_EQ(EINVAL, rc) << name << "=" << value;
    EXPECT_FALSE(runtime_running());
    EXPECT_EQ(std::string("fern: ") + name + "=\"" + value + "\" is not valid: expected " + accepted + "\n",
              err);
    unsetenv(name);
}

// The default stack size in force, read from fern_dump's line for a thread.
size_t default_stack_seen() {
    size_t size = 0;
    EXPECT_EQ(0, run_green([&] {
        char *text = nullptr;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        fern_dump(f);
        fclose(f);
        const char *p = strstr(text, " stack ");
        if (p) size = strtoull(p + 7, nullptr, 10);
        free(text);
    }));
    return size;
}

constexpr const char *kWorkers = "a whole number from 0 (one worker per CPU) to 256";
constexpr const char *kStack = "a size from 16k to 1g (bytes, or with a k, m or g suffix)";

TEST_F(Config, ValidValuesPrintNothing) {
    setenv("FERN_WORKERS", "2", 1);
    setenv("FERN_STACK_SIZE", "64k", 1);
    setenv("FERN_BIAS", "1", 1);
    setenv("FERN_BLOCKING_MAX", "8", 1);
    setenv("FERN_GUARD", "auto", 1);
    setenv("FERN_GUARD_BUDGET", "100", 1);
    setenv("FERN_DUMP_SIGNAL", "SIGUSR2", 1);
    int rc = -1;
    EXPECT_EQ("", init_stderr(nullptr, &rc));
    ASSERT_EQ(0, rc);
    EXPECT_EQ(2u, fern_cluster_workers(fern_cluster_default()));
}

TEST_F(Config, EmptyVariableMeansDefault) {
    setenv("FERN_WORKERS", "", 1);
    setenv("FERN_STACK_SIZE", "", 1);
    int rc = -1;
    EXPECT_EQ("", init_stderr(nullptr, &rc));
    ASSERT_EQ(0, rc);
    EXPECT_EQ(FERN_STACK_DEFAULT, default_stack_seen());
}

TEST_F(Config, StackSizeSuffixes) {
    const struct {
        const char *text;
        size_t bytes;
    } cases[] = {{"64k", 64 << 10}, {"64K", 64 << 10}, {"1m", 1 << 20}, {"2M", 2 << 20},
                 {"32768", 32768}, {"1g", (size_t)1 << 30}, {"1G", (size_t)1 << 30}};
    for (auto &c : cases) {
        setenv("FERN_STACK_SIZE", c.text, 1);
        int rc = -1;
        EXPECT_EQ("", init_stderr(nullptr, &rc)) << c.text;
        ASSERT_EQ(0, rc) << c.text;
        EXPECT_EQ(c.bytes, default_stack_seen()) << c.text;
        stop();
    }
}

TEST_F(Config, WorkersRejected) {
    expect_rejected("FERN_WORKERS", "abc", kWorkers);
    expect_rejected("FERN_WORKERS", "1000", kWorkers);
    expect_rejected("FERN_WORKERS", "-1", kWorkers);
    expect_rejected("FERN_WORKERS", " 2", kWorkers);
    expect_rejected("FERN_WORKERS", "2 ", kWorkers);
    expect_rejected("FERN_WORKERS", "4k", kWorkers);
    expect_rejected("FERN_WORKERS", "99999999999999999999999", kWorkers);
}

TEST_F(Config, StackSizeRejected) {
    expect_rejected("FERN_STACK_SIZE", "64x", kStack);
    expect_rejected("FERN_STACK_SIZE", "8k", kStack);     // below FERN_STACK_MIN
    expect_rejected("FERN_STACK_SIZE", "2g", kStack);     // above FERN_STACK_MAX
    expect_rejected("FERN_STACK_SIZE", "1024", kStack);
    expect_rejected("FERN_STACK_SIZE", "k", kStack);
    expect_rejected("FERN_STACK_SIZE", "64kb", kStack);
    expect_rejected("FERN_STACK_SIZE", "-64k", kStack);
    expect_rejected("FERN_STACK_SIZE", "18446744073709551615k", kStack);  // overflows
}

TEST_F(Config, OtherVariablesRejected) {
    expect_rejected("FERN_BIAS", "yes", "0 (off) or 1 (on, the default)");
    expect_rejected("FERN_BIAS", "2", "0 (off) or 1 (on, the default)");
    expect_rejected("FERN_BLOCKING_MAX", "0", "a whole number from 1 to 99999 (default 64)");
    expect_rejected("FERN_BLOCKING_MAX", "many", "a whole number from 1 to 99999 (default 64)");
    expect_rejected("FERN_GUARD", "page", "auto (the default), madvise, mprotect or canary");
    const char *uring = "0 (file calls use the blocking pool) or 1 (io_uring where the kernel "
                        "allows it, the default)";
    expect_rejected("FERN_IO_URING", "on", uring);
    expect_rejected("FERN_IO_URING", "2", uring);
    expect_rejected("FERN_GUARD_BUDGET", "12e3", "a whole number from 0 to 1000000 (default 12000)");
    const char *sig = "a signal name (QUIT, USR1, SIGUSR2, HUP, ...) or number, or off (0)";
    expect_rejected("FERN_DUMP_SIGNAL", "USR3", sig);
    expect_rejected("FERN_DUMP_SIGNAL", "-1", sig);
    expect_rejected("FERN_DUMP_SIGNAL", "999", sig);
    expect_rejected("FERN_DUMP_SIGNAL", "12x", sig);
    const char *mb = "0 (act as if the kernel had no membarrier) or 1 (the default: use it "
                     "where the kernel has it)";
    expect_rejected("FERN_MEMBARRIER", "no", mb);
    expect_rejected("FERN_MEMBARRIER", "2", mb);
}

TEST_F(Config, HibernateRejected) {
    const char *us = "a whole number of microseconds from 0 (at once, for testing) to 3600000000 "
                     "(default 1000000)";
    expect_rejected("FERN_HIBERNATE", "2", "0 (off, the default) or 1 (on)");
    expect_rejected("FERN_HIBERNATE", "on", "0 (off, the default) or 1 (on)");
    expect_rejected("FERN_HIBERNATE_US", "1s", us);
    expect_rejected("FERN_HIBERNATE_US", "-1", us);
    expect_rejected("FERN_HIBERNATE_US", "3600000001", us);
    fern_config cfg{};
    cfg.hibernate_us = -2;
    int rc = -1;
    EXPECT_EQ("fern: fern_config.hibernate_us=\"-2\" is not valid: expected 0 (the default: "
              "$FERN_HIBERNATE and $FERN_HIBERNATE_US), FERN_HIBERNATE_OFF (-1) or 1 to "
              "3600000000 microseconds\n",
              init_stderr(&cfg, &rc));
    EXPECT_EQ(EINVAL, rc);
    EXPECT_FALSE(runtime_running());
}

// Off by default; on with FERN_HIBERNATE=1 or a positive hibernate_us;
// FERN_HIBERNATE_OFF wins over the variable (fern_stats says which, where
// this kernel can hibernate at all).
TEST_F(Config, HibernateTakesEffect) {
    auto on = [] {
        struct fern_stats s{};
        EXPECT_EQ(0, fern_stats(&s));
        return s.hibernate;
    };
    int rc = -1;
    EXPECT_EQ("", init_stderr(nullptr, &rc));
    ASSERT_EQ(0, rc);
    EXPECT_FALSE(on());
    stop();
    setenv("FERN_HIBERNATE", "1", 1);
    std::string err = init_stderr(nullptr, &rc);
#if defined(__x86_64__)
    constexpr bool refused = kTsan;
#else
    constexpr bool refused = true;
#endif
    if (refused) { // see test_hibernate's HibernateRefused
        EXPECT_EQ(EINVAL, rc);
        unsetenv("FERN_HIBERNATE");
        return;
    }
    ASSERT_EQ(0, rc);
    bool can = on();
    if (!can) {
        EXPECT_NE(std::string::npos, err.find("stack hibernation needs")) << err;
    } else {
        EXPECT_EQ("", err);
    }
    stop();
    fern_config cfg{};
    cfg.hibernate_us = FERN_HIBERNATE_OFF;
    init_stderr(&cfg, &rc);
    ASSERT_EQ(0, rc);
    EXPECT_FALSE(on());
    stop();
    unsetenv("FERN_HIBERNATE");
    cfg.hibernate_us = 5000;
    init_stderr(&cfg, &rc);
    ASSERT_EQ(0, rc);
    EXPECT_EQ(can, on());
}

TEST_F(Config, ConfigFieldsRejected) {
    fern_config cfg{1000, 0, 0};
    int rc = -1;
    EXPECT_EQ("fern: fern_config.workers=\"1000\" is not valid: expected 0 (the default: "
              "$FERN_WORKERS or one per CPU) or 1 to 256\n",
              init_stderr(&cfg, &rc));
    EXPECT_EQ(EINVAL, rc);
    cfg = {1, 1024, 0};
    EXPECT_EQ("fern: fern_config.stack_size=\"1024\" is not valid: expected 0 (the default: "
              "$FERN_STACK_SIZE or 128 KiB) or 16384 to 1073741824\n",
              init_stderr(&cfg, &rc));
    EXPECT_EQ(EINVAL, rc);
    EXPECT_FALSE(runtime_running());
}

// FERN_WORKERS and FERN_STACK_SIZE are read only where fern_config leaves
// the setting at 0: an explicit configuration ignores them, even bad ones.
TEST_F(Config, ExplicitConfigIgnoresThoseVariables) {
    setenv("FERN_WORKERS", "abc", 1);
    setenv("FERN_STACK_SIZE", "64x", 1);
    fern_config cfg{2, 65536, 0};
    int rc = -1;
    EXPECT_EQ("", init_stderr(&cfg, &rc));
    ASSERT_EQ(0, rc);
    EXPECT_EQ(2u, fern_cluster_workers(fern_cluster_default()));
    EXPECT_EQ((size_t)65536, default_stack_seen());
}

// fern_run (which starts the runtime implicitly) reports the same error.
TEST_F(Config, ImplicitStartReportsTheSameLine) {
    setenv("FERN_WORKERS", "abc", 1);
    char path[] = "/tmp/fern-config-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    int rc = run_green([] {});
    dup2(saved, 2);
    close(saved);
    char buf[512] = {};
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    EXPECT_EQ(EINVAL, rc);
    EXPECT_EQ(std::string("fern: FERN_WORKERS=\"abc\" is not valid: expected ") + kWorkers + "\n",
              std::string(buf, n > 0 ? (size_t)n : 0));
}

TEST_F(Config, GuardModeAndBudgetTakeEffect) {
    setenv("FERN_GUARD", "canary", 1);
    ASSERT_EQ(0, fern_init(nullptr));
    struct fern_stats s;
    fern_stats(&s);
    EXPECT_EQ(FERN_GUARD_CANARY, s.guard_mode);
    stop();
    setenv("FERN_GUARD", "mprotect", 1);
    setenv("FERN_GUARD_BUDGET", "0", 1);  // no mprotect guards allowed: canaries
    ASSERT_EQ(0, fern_init(nullptr));
    fern_stats(&s);
    EXPECT_EQ(FERN_GUARD_CANARY, s.guard_mode);
}

// A successful fern_init leaves errno as the caller had it: its probes
// (RWF_NOWAIT's preadv2 on a bad descriptor, io_uring) fail on purpose.
// Both the io_uring path and the pool are started.
TEST_F(Config, SuccessfulInitKeepsErrno) {
    for (const char *uring : {"1", "0"}) {
        setenv("FERN_IO_URING", uring, 1);
        errno = ENOTRECOVERABLE;
        ASSERT_EQ(0, fern_init(nullptr));
        EXPECT_EQ(ENOTRECOVERABLE, errno) << "FERN_IO_URING=" << uring;
        stop();
    }
}

}  // namespace

namespace {

// fern_init after an implicit start fails with EBUSY and says which call
// started the runtime; after an explicit fern_init, EBUSY alone.
TEST_F(Config, InitAfterImplicitStartSaysWhy) {
    fern_thread *t = nullptr;
    ASSERT_EQ(0, fern_spawn(&t, nullptr, [](void *) -> void * { return nullptr; }, nullptr));
    ASSERT_EQ(0, fern_join(t, nullptr));
    fern_config cfg{1, 0, 0};
    int rc = -1;
    EXPECT_EQ("fern: fern_init: the runtime is already running: fern_spawn (or fern_go) started it "
              "with the default configuration; call fern_init before the first such call\n",
              init_stderr(&cfg, &rc));
    EXPECT_EQ(EBUSY, rc);
    stop();

    // An I/O call from a plain thread starts it too.
    int sv[2];
    ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    EXPECT_EQ(1, fern_write(sv[0], "x", 1));
    std::string err = init_stderr(&cfg, &rc);
    EXPECT_EQ(EBUSY, rc);
    EXPECT_NE(std::string::npos, err.find("already running: an I/O call (fern_read, fern_write"))
        << err;
    EXPECT_EQ(1u, (size_t)std::count(err.begin(), err.end(), '\n')) << err;
    fern_close(sv[0]);
    fern_close(sv[1]);
    stop();

    ASSERT_EQ(0, fern_init(&cfg));
    EXPECT_EQ("", init_stderr(&cfg, &rc));
    EXPECT_EQ(EBUSY, rc);
    stop();

    // After a shutdown, an explicit fern_init applies its configuration.
    ASSERT_EQ(0, run_green([] {}));
    stop();
    EXPECT_EQ("", init_stderr(&cfg, &rc));
    EXPECT_EQ(0, rc);
    EXPECT_EQ(1u, fern_cluster_workers(fern_cluster_default()));
}

// FERN_PREEMPT_LIBS / fern_config.preempt_libs (docs/preemption.md, "What
// is interrupted"): a valid list is taken and shown by fern_dump with the
// listed libraries found loaded; a malformed list, or one naming a library
// that is never preempted, is rejected with one line.
TEST_F(Config, PreemptLibs) {
    setenv("FERN_PREEMPT_LIBS", "libm:libnotloaded.so.1:/opt/x/libbar.so", 1);
    int rc = -1;
    EXPECT_EQ("", init_stderr(nullptr, &rc));
    ASSERT_EQ(0, rc);
    char *text = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fern_dump(f);
    fclose(f);
    std::string dump(text);
    free(text);
    if (dump.find("preemption off") == std::string::npos) { // off under Valgrind
        // libstdc++ needs libm, so it is loaded; the other two are not.
        EXPECT_NE(std::string::npos,
                  dump.find("; of the listed libraries (libm:libnotloaded.so.1:/opt/x/libbar.so): "
                            "libm.so.6\n"))
            << dump;
    }
    stop();
    unsetenv("FERN_PREEMPT_LIBS");

    const char *syntax = "a colon-separated list of shared library file names (libfoo.so.1, or "
                         "libfoo for any libfoo.so*) or absolute paths, without spaces or empty "
                         "entries, at most 1023 bytes";
    const char *runtime = "libraries other than libc, the loader, libpthread, libdl, librt, "
                          "libstdc++, libgcc_s, the sanitizer runtimes and fern's own (whose code "
                          "is never preempted)";
    expect_rejected("FERN_PREEMPT_LIBS", "libfoo::libbar", syntax);
    expect_rejected("FERN_PREEMPT_LIBS", "libfoo:", syntax);
    expect_rejected("FERN_PREEMPT_LIBS", "libfoo libbar", syntax);
    expect_rejected("FERN_PREEMPT_LIBS", "lib/libfoo.so", syntax);
    expect_rejected("FERN_PREEMPT_LIBS", "/opt/lib/", syntax);
    expect_rejected("FERN_PREEMPT_LIBS", std::string(1100, 'a').c_str(), syntax);
    expect_rejected("FERN_PREEMPT_LIBS", "libfoo:libc", runtime);
    expect_rejected("FERN_PREEMPT_LIBS", "libc.so.6", runtime);
    expect_rejected("FERN_PREEMPT_LIBS", "/lib/x86_64-linux-gnu/libc.so.6", runtime);
    expect_rejected("FERN_PREEMPT_LIBS", "libstdc++", runtime);
    expect_rejected("FERN_PREEMPT_LIBS", "ld-linux-x86-64.so.2", runtime);
    expect_rejected("FERN_PREEMPT_LIBS", "libfern-hook", runtime);
    expect_rejected("FERN_PREEMPT_LIBS", "libtsan.so.2", runtime);

    // The field, when set, is used instead of the variable ("" = none).
    fern_config cfg{1, 0, 0, "libgcc_s.so.1"};
    EXPECT_EQ(std::string("fern: fern_config.preempt_libs=\"libgcc_s.so.1\" is not valid: expected ") +
                  runtime + "\n",
              init_stderr(&cfg, &rc));
    EXPECT_EQ(EINVAL, rc);
    setenv("FERN_PREEMPT_LIBS", "bad list", 1);
    cfg.preempt_libs = "";
    EXPECT_EQ("", init_stderr(&cfg, &rc));
    EXPECT_EQ(0, rc);
    stop();
    unsetenv("FERN_PREEMPT_LIBS");
}

}  // namespace
