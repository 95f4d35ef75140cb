// SPDX-License-Identifier: MIT
// fern-hook, signal masks of ppoll, pselect and epoll_pwait (hook/poll.c
// header comment, docs/hooks.md). The pattern programs rely on: a signal
// blocked in every thread stays pending until a wait whose mask lets it in;
// that wait then ends with EINTR and the handler runs. Every thread of this
// binary blocks SIGUSR2 from the start (a constructor runs before any thread
// exists; threads inherit their creator's mask), so a process-directed
// SIGUSR2 has nowhere to go but such a wait.
#include "hook_test.h"

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include <thread>

using namespace hook_test;

namespace {

constexpr int kSig = SIGUSR2;

__attribute__((constructor)) void block_everywhere() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, kSig);
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

std::atomic<int> handled{0};
void on_sig(int) { handled++; }

bool blocked_here() {
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, nullptr, &cur);
    return sigismember(&cur, kSig);
}

// The calling thread's mask without kSig, and with it.
sigset_t mask_open() {
    sigset_t m;
    pthread_sigmask(SIG_BLOCK, nullptr, &m);
    sigdelset(&m, kSig);
    return m;
}
sigset_t mask_closed() {
    sigset_t m;
    pthread_sigmask(SIG_BLOCK, nullptr, &m);
    sigaddset(&m, kSig);
    return m;
}

// Installs the handler for one test; takes any kSig left pending.
struct Handler {
    struct sigaction old;
    Handler() {
        struct sigaction sa = {};
        sa.sa_handler = on_sig;
        EXPECT_EQ(sigaction(kSig, &sa, &old), 0);
        handled = 0;
        EXPECT_TRUE(blocked_here()) << "the constructor's mask did not reach this thread";
    }
    ~Handler() {
        drain();
        sigaction(kSig, &old, nullptr);
    }
    static bool drain() {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, kSig);
        struct timespec zero = {0, 0};
        return sigtimedwait(&s, nullptr, &zero) == kSig;
    }
};

// Sends kSig to the process after `delay`.
std::thread send_later(int64_t delay) {
    return std::thread([delay] {
        std::this_thread::sleep_for(std::chrono::nanoseconds(delay));
        EXPECT_EQ(kill(getpid(), kSig), 0);
    });
}

// Under ThreadSanitizer a handler runs at the thread's next intercepted
// call, so it may run just after the interrupted call returned.
bool handler_ran() {
    for (int i = 0; i < 2000 && handled.load() == 0; i++) usleep(1000);
    return handled.load() == 1;
}

enum Kind { kPselect, kPpoll, kEpoll };
const char *name(Kind k) { return k == kPselect ? "pselect" : k == kPpoll ? "ppoll" : "epoll_pwait"; }

// One wait of `kind` on a pipe nobody writes to (pselect with no
// descriptors: the signal-waiting sleep), up to `timeout_ms`.
struct Waits {
    int p[2];
    int ep;
    Waits() {
        EXPECT_EQ(pipe(p), 0);
        ep = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = {};
        ev.events = EPOLLIN;
        EXPECT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev), 0);
    }
    ~Waits() {
        close(ep);
        close(p[0]);
        close(p[1]);
    }
    int wait(Kind kind, int timeout_ms, const sigset_t *mask) {
        struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
        switch (kind) {
        case kPselect: return pselect(0, nullptr, nullptr, nullptr, &ts, mask);
        case kPpoll: {
            struct pollfd f = {p[0], POLLIN, 0};
            return ppoll(&f, 1, &ts, mask);
        }
        case kEpoll: {
            struct epoll_event out;
            return epoll_pwait(ep, &out, 1, timeout_ms, mask);
        }
        }
        return -2;
    }
};

// A green thread's mask that lets the signal in: EINTR promptly, the
// handler runs, and the worker's mask (shared by its other green threads)
// never changes: a second green thread on the same worker watches it.
TEST(HookSigmask, GreenWaitLetsTheSignalIn) {
    Handler h;
    Waits ws;
    OneWorker w;
    for (Kind kind : {kPselect, kPpoll, kEpoll}) {
        SCOPED_TRACE(name(kind));
        handled = 0;
        std::atomic<bool> done{false};
        std::atomic<int> open_seen{0};
        int64_t late;
        {
            Ticker tick(w);
            fern_thread *watcher = w.spawn([&] {
                while (!done.load()) {
                    open_seen += !blocked_here();
                    usleep(1000);
                }
            });
            w.run([&] {
                sigset_t open = mask_open();
                std::thread killer = send_later(ms(100));
                int64_t t0 = fern_now_ns();
                EXPECT_EQ(ws.wait(kind, 5000, &open), -1);
                EXPECT_EQ(get_errno(), EINTR);
                EXPECT_LT(fern_now_ns() - t0, ms(100) + kLateLimit);
                killer.join();
                EXPECT_TRUE(blocked_here());
            });
            done = true;
            OneWorker::join(watcher);
            late = tick.late_ns.load();
        }
        EXPECT_TRUE(handler_ran());
        EXPECT_EQ(open_seen.load(), 0);
        EXPECT_LT(late, kLateLimit);
        EXPECT_FALSE(Handler::drain());
    }
}

// A signal already pending when the wait starts: the first check, made
// with the mask, ends the call at once.
TEST(HookSigmask, GreenWaitTakesAPendingSignal) {
    Handler h;
    Waits ws;
    OneWorker w;
    for (Kind kind : {kPselect, kPpoll, kEpoll}) {
        SCOPED_TRACE(name(kind));
        handled = 0;
        ASSERT_EQ(kill(getpid(), kSig), 0);
        w.run([&] {
            sigset_t open = mask_open();
            int64_t t0 = fern_now_ns();
            EXPECT_EQ(ws.wait(kind, 5000, &open), -1);
            EXPECT_EQ(get_errno(), EINTR);
            EXPECT_LT(fern_now_ns() - t0, kLateLimit);
            EXPECT_TRUE(blocked_here());
        });
        EXPECT_TRUE(handler_ran());
        EXPECT_FALSE(Handler::drain());
    }
}

// A mask that keeps the signal blocked: the wait runs its full time, the
// handler does not run, and the signal is still pending afterwards.
TEST(HookSigmask, GreenWaitKeepsABlockedSignalOut) {
    Handler h;
    Waits ws;
    OneWorker w;
    for (Kind kind : {kPselect, kPpoll, kEpoll}) {
        SCOPED_TRACE(name(kind));
        handled = 0;
        int64_t late;
        {
            Ticker tick(w);
            w.run([&] {
                sigset_t closed = mask_closed();
                std::thread killer = send_later(ms(20));
                int64_t t0 = fern_now_ns();
                EXPECT_EQ(ws.wait(kind, 200, &closed), 0);
                EXPECT_GE(fern_now_ns() - t0, ms(190));
                killer.join();
            });
            late = tick.late_ns.load();
        }
        EXPECT_LT(late, kLateLimit);
        EXPECT_EQ(handled.load(), 0);
        EXPECT_TRUE(Handler::drain()) << "the signal was lost";
    }
}

// Plain threads: the kernel's own behaviour, the mask applied atomically.
TEST(HookSigmask, PlainThreadIsLibc) {
    Handler h;
    Waits ws;
    for (Kind kind : {kPselect, kPpoll, kEpoll}) {
        SCOPED_TRACE(name(kind));
        handled = 0;
        std::thread t([&] {
            sigset_t open = mask_open(), closed = mask_closed();
            std::thread killer = send_later(ms(50));
            EXPECT_EQ(ws.wait(kind, 5000, &open), -1);
            EXPECT_EQ(get_errno(), EINTR);
            killer.join();
            EXPECT_TRUE(handler_ran());
            handled = 0;
            killer = send_later(ms(10));
            EXPECT_EQ(ws.wait(kind, 100, &closed), 0);
            killer.join();
            EXPECT_EQ(handled.load(), 0);
            EXPECT_TRUE(Handler::drain());
        });
        t.join();
    }
}

}  // namespace
