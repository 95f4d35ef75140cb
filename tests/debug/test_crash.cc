// SPDX-License-Identifier: MIT
// Crash reports (src/crash.c): a fatal signal in a green thread names the
// thread and still kills with that signal; handlers installed before fern's
// run first; the dump signal prints fern_dump and the process goes on.
#include "fern_test.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

// The sanitizers' own SIGSEGV/SIGBUS/SIGILL/SIGFPE handlers would report
// first and exit; these tests are about fern's.
extern "C" const char *__asan_default_options()
{
    return "handle_segv=0:handle_sigbus=0:handle_sigill=0:handle_sigfpe=0";
}
extern "C" const char *__tsan_default_options()
{
    return "handle_segv=0:handle_sigbus=0:handle_sigill=0:handle_sigfpe=0";
}

namespace
{

using fern_test::ms;

// Address 0x10, out of the compiler's sight (no -Warray-bounds).
__attribute__((noipa)) volatile int *bad_address()
{
    return (volatile int *)(uintptr_t)16;
}

// Run f in a green thread named `name` and join it.
template <class F> void in_green_thread(const char *name, F f)
{
    if (fern_init(nullptr) != 0)
        _exit(90);
    fern_attr a{};
    a.name = name;
    fern_thread *t;
    if (fern_test::spawn(&t, &a, f) != 0)
        _exit(91);
    fern_join(t, nullptr);
    _exit(92); // not reached: f dies
}

TEST(CrashDeathTest, SegvNamesTheGreenThreadAndStillDiesOfSegv)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(in_green_thread("crasher", [] { *bad_address() = 1; }),
                ::testing::KilledBySignal(SIGSEGV),
                "fern: SIGSEGV in green thread [0-9]+ \"crasher\" at address 0x10\n");
}

TEST(CrashDeathTest, Sigbus)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(in_green_thread("buser",
                                [] {
                                    // A page of a file mapped past its end.
                                    FILE *f = tmpfile();
                                    char *p = (char *)mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                                                           MAP_SHARED, fileno(f), 0);
                                    if (p == MAP_FAILED)
                                        _exit(93);
                                    p[0] = 1;
                                }),
                ::testing::KilledBySignal(SIGBUS),
                "fern: SIGBUS in green thread [0-9]+ \"buser\" at address 0x[0-9a-f]+\n");
}

TEST(CrashDeathTest, Sigill)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    // An undefined instruction (__builtin_trap is brk, SIGTRAP, on aarch64).
#if defined(__aarch64__)
    EXPECT_EXIT(in_green_thread("iller", [] { __asm__ volatile("udf #0"); }),
#else
    EXPECT_EXIT(in_green_thread("iller", [] { __builtin_trap(); }),
#endif
                ::testing::KilledBySignal(SIGILL),
                "fern: SIGILL in green thread [0-9]+ \"iller\" at instruction 0x[0-9a-f]+\n");
}

// x86_64 only: on aarch64 an integer division by zero gives 0 and FP
// exceptions do not trap, so no instruction raises SIGFPE there.
#if defined(__x86_64__)
TEST(CrashDeathTest, Sigfpe)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    // An integer division by zero in assembly: UBSan would catch a C one.
    EXPECT_EXIT(in_green_thread("divider",
                                [] {
                                    __asm__ volatile("xorl %%ecx, %%ecx\n\tmovl $1, %%eax\n\t"
                                                     "cltd\n\tidivl %%ecx" ::
                                                         : "eax", "ecx", "edx");
                                }),
                ::testing::KilledBySignal(SIGFPE),
                "fern: SIGFPE in green thread [0-9]+ \"divider\" at instruction 0x[0-9a-f]+\n");
}
#endif

TEST(CrashDeathTest, AbortNamesTheThreadAndStillAborts)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(in_green_thread("aborter", [] { abort(); }), ::testing::KilledBySignal(SIGABRT),
                "fern: SIGABRT in green thread [0-9]+ \"aborter\"\n");
}

// A signal sent with kill() is not lost by the handler's return: the
// default action still happens.
TEST(CrashDeathTest, SentSignalStillKills)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(in_green_thread("target",
                                [] {
                                    raise(SIGSEGV); // sent to this kernel thread, as abort() does
                                    fern_sleep_ns(ms(5000));
                                    _exit(94);
                                }),
                ::testing::KilledBySignal(SIGSEGV),
                "fern: SIGSEGV in green thread [0-9]+ \"target\"");
}

// A fault cannot be ignored: with SIGSEGV ignored before fern_init, the
// report and the death still happen; a sent signal that is ignored stays
// ignored.
TEST(CrashDeathTest, IgnoredSignals)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(
        {
            signal(SIGSEGV, SIG_IGN);
            signal(SIGABRT, SIG_IGN);
            in_green_thread("ignorer", [] {
                raise(SIGABRT); // sent and ignored: nothing happens
                *bad_address() = 1;
            });
        },
        ::testing::KilledBySignal(SIGSEGV),
        "fern: SIGSEGV in green thread [0-9]+ \"ignorer\" at address 0x10\n");
}

// stderr goes to a pipe until restored; read_err returns what arrived.
struct ErrCapture {
    int fds[2];
    int saved;
    ErrCapture()
    {
        if (pipe2(fds, O_NONBLOCK) != 0)
            _exit(80);
        saved = dup(2);
        dup2(fds[1], 2);
    }
    std::string read_err()
    {
        std::string s;
        char buf[4096];
        ssize_t n;
        while ((n = read(fds[0], buf, sizeof buf)) > 0)
            s.append(buf, (size_t)n);
        return s;
    }
    // Wait (up to tries * 10 ms) until `what` appears.
    bool wait_for(const char *what, std::string &got, int tries = 1000)
    {
        for (int i = 0; i < tries; i++) {
            got += read_err();
            if (got.find(what) != std::string::npos)
                return true;
            usleep(10000);
        }
        return false;
    }
    ~ErrCapture() { dup2(saved, 2); }
};

ErrCapture *cap;

void earlier_handler(int, siginfo_t *, void *)
{
    // Called before any report: stderr has no fern line yet.
    std::string s = cap->read_err();
    _exit(s.find("fern:") == std::string::npos ? 7 : 8);
}

TEST(CrashDeathTest, EarlierHandlerRunsInsteadOfTheReport)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(
        {
            cap = new ErrCapture;
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_sigaction = earlier_handler;
            sa.sa_flags = SA_SIGINFO;
            sigaction(SIGSEGV, &sa, nullptr);
            in_green_thread("crasher", [] { *bad_address() = 1; });
        },
        ::testing::ExitedWithCode(7), "");
}

// Parks a thread named "dumpee", sends `sig`, and exits 0 once its name
// shows up on stderr (the dump) with the process still alive.
void dump_child(int sig)
{
    alarm(60);
    int r = fern_init(nullptr);
    if (r != 0 && r != EBUSY)
        _exit(90);
    fern_attr a{};
    a.name = "dumpee";
    a.detached = true;
    if (fern_test::spawn(nullptr, &a, [] { fern_sleep_ns(ms(60000)); }) != 0)
        _exit(91);
    ErrCapture c;
    std::string got;
    kill(getpid(), sig);
    if (!c.wait_for("thread 1 \"dumpee\"", got))
        _exit(20);
    // Each signal gives a dump: the dumper keeps serving, and soon shows
    // the thread parked.
    for (int i = 0; i < 100; i++) {
        got.clear();
        kill(getpid(), sig);
        if (c.wait_for("\"dumpee\" parked on sleep", got, 10))
            _exit(0);
    }
    _exit(21);
}

TEST(DumpSignalDeathTest, SigquitDumpsAndTheProcessGoesOn)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(
        {
            unsetenv("FERN_DUMP_SIGNAL");
            dump_child(SIGQUIT);
        },
        ::testing::ExitedWithCode(0), "");
}

TEST(DumpSignalDeathTest, FernDumpSignalChoosesTheSignal)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(
        {
            setenv("FERN_DUMP_SIGNAL", "USR2", 1);
            if (fern_init(nullptr) != 0)
                _exit(90);
            struct sigaction q;
            sigaction(SIGQUIT, nullptr, &q);
            if (q.sa_handler != SIG_DFL)
                _exit(30); // SIGQUIT left alone
            dump_child(SIGUSR2);
        },
        ::testing::ExitedWithCode(0), "");
}

TEST(DumpSignalDeathTest, OffAndTakenSignalsAreLeftAlone)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(
        {
            struct sigaction q;
            setenv("FERN_DUMP_SIGNAL", "off", 1);
            if (fern_init(nullptr) != 0)
                _exit(90);
            sigaction(SIGQUIT, nullptr, &q);
            if (q.sa_handler != SIG_DFL)
                _exit(31);
            fern_shutdown();
            // The program's own handler is kept.
            unsetenv("FERN_DUMP_SIGNAL");
            signal(SIGQUIT, SIG_IGN);
            if (fern_init(nullptr) != 0)
                _exit(90);
            sigaction(SIGQUIT, nullptr, &q);
            if (q.sa_handler != SIG_IGN)
                _exit(32);
            fern_shutdown();
            // Shutdown gives the signal back.
            signal(SIGQUIT, SIG_DFL);
            if (fern_init(nullptr) != 0)
                _exit(90);
            sigaction(SIGQUIT, nullptr, &q);
            if (q.sa_handler == SIG_DFL)
                _exit(33);
            fern_shutdown();
            sigaction(SIGQUIT, nullptr, &q);
            _exit(q.sa_handler == SIG_DFL ? 0 : 34);
        },
        ::testing::ExitedWithCode(0), "");
}

// Started with SIGQUIT ignored, as a shell script's background job is:
// fern_init leaves it ignored and says so once on stderr, with the way
// out; a second fern_init in the same process says nothing more.
TEST(DumpSignalDeathTest, IgnoredAtStartSaysSoOnce)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(
        {
            unsetenv("FERN_DUMP_SIGNAL");
            signal(SIGQUIT, SIG_IGN);
            ErrCapture c;
            if (fern_init(nullptr) != 0)
                _exit(90);
            std::string got = c.read_err();
            const std::string line =
                "fern: SIGQUIT is ignored (as in a shell script's background job), so kill -QUIT "
                "will not print fern_dump; FERN_DUMP_SIGNAL=QUIT takes it anyway, "
                "FERN_DUMP_SIGNAL=USR2 (or another signal) uses another, FERN_DUMP_SIGNAL=off "
                "turns this off\n";
            if (got != line) {
                dup2(c.saved, 2);
                fprintf(stderr, "got: [%s]\n", got.c_str());
                _exit(40);
            }
            struct sigaction q;
            sigaction(SIGQUIT, nullptr, &q);
            if (q.sa_handler != SIG_IGN)
                _exit(41); // left ignored
            fern_shutdown();
            if (fern_init(nullptr) != 0)
                _exit(90);
            if (!c.read_err().empty())
                _exit(42); // once per process
            fern_shutdown();
            _exit(0);
        },
        ::testing::ExitedWithCode(0), "");
}

// FERN_DUMP_SIGNAL=QUIT names the ignored signal explicitly: fern takes it
// (no line), dumps on it, and fern_shutdown gives SIG_IGN back.
TEST(DumpSignalDeathTest, ExplicitSettingTakesAnIgnoredSignal)
{
    GTEST_FLAG_SET(death_test_style, fern_test::death_style());
    EXPECT_EXIT(
        {
            setenv("FERN_DUMP_SIGNAL", "QUIT", 1);
            signal(SIGQUIT, SIG_IGN);
            {
                ErrCapture c;
                if (fern_init(nullptr) != 0)
                    _exit(90);
                if (c.read_err().find("is ignored") != std::string::npos)
                    _exit(43);
                fern_shutdown();
                struct sigaction q;
                sigaction(SIGQUIT, nullptr, &q);
                if (q.sa_handler != SIG_IGN)
                    _exit(44); // given back ignored
            }
            dump_child(SIGQUIT); // exits 0 once the dump shows the thread
        },
        ::testing::ExitedWithCode(0), "");
}

// What BackgroundJobOfAScriptIsToldWhy runs in the background of a shell:
// not run otherwise (DISABLED_).
TEST(DumpSignalBackground, DISABLED_Child)
{
    unsetenv("FERN_DUMP_SIGNAL");
    struct sigaction q;
    sigaction(SIGQUIT, nullptr, &q);
    fprintf(stderr, "child: SIGQUIT %s\n", q.sa_handler == SIG_IGN ? "ignored" : "not ignored");
    ASSERT_EQ(0, fern_init(nullptr));
    ASSERT_EQ(0, fern_shutdown());
}

// The real case: `prog &` in a script. The shell starts the job with
// SIGQUIT ignored, and fern says so on stderr.
TEST(DumpSignalBackground, BackgroundJobOfAScriptIsToldWhy)
{
#ifdef FERN_TEST_EMULATED
    GTEST_SKIP() << "the shell cannot execute the emulated test binary itself";
#endif
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT_GT(n, 0);
    self[n] = 0;
    std::string cmd = std::string("sh -c '\"$0\" --gtest_filter=DumpSignalBackground.DISABLED_Child "
                                  "--gtest_also_run_disabled_tests 2>&1 & wait' '") +
                      self + "'";
    FILE *p = popen(cmd.c_str(), "r");
    ASSERT_NE(nullptr, p);
    std::string out;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, p)) > 0)
        out.append(buf, got);
    EXPECT_EQ(0, pclose(p)) << out;
    EXPECT_NE(std::string::npos, out.find("child: SIGQUIT ignored")) << out;
    EXPECT_NE(std::string::npos,
              out.find("fern: SIGQUIT is ignored (as in a shell script's background job), so "
                       "kill -QUIT will not print fern_dump; FERN_DUMP_SIGNAL=QUIT takes it anyway"))
        << out;
}

} // namespace
