// SPDX-License-Identifier: MIT
/*
 * fern.hpp — the C++20 interface to fern (header-only, over <fern/fern.h>).
 *
 * Model. Everything here is a thin RAII layer over the C API: a fern::thread
 * owns a fern_thread handle, fern::mutex is a fern_mutex, fern::channel<T> owns
 * a fern_chan. The types mirror their std:: counterparts (std::thread,
 * std::mutex, std::condition_variable, std::counting_semaphore, std::latch,
 * std::barrier) so they drop into code written against those, but they park
 * the calling *green* thread instead of blocking its worker. Like the C API,
 * every blocking call also works from a plain OS thread (it blocks it).
 *
 *     fern::thread t = fern::spawn([](int x) { return x * 2; }, 21);
 *     int r = t.join();                        // 42; rethrows if the body threw
 *
 *     fern::channel<std::unique_ptr<int>> ch(4);
 *     fern::go([&] { for (int i = 0; i < 3; i++) ch.send(std::make_unique<int>(i));
 *                    ch.close(); });
 *     for (auto &p : ch) use(*p);               // until closed and drained
 *
 * Errors. A C call that fails with an errno value becomes a std::system_error
 * whose code() is that value in std::generic_category(), e.g. unlocking a
 * mutex the caller does not hold throws std::errc::operation_not_permitted
 * (EPERM), sending on a closed channel std::errc::broken_pipe (EPIPE). Calls
 * whose *purpose* is to report an outcome (try_*, *_for, *_until) return it as
 * bool / std::optional / std::cv_status instead of throwing for "busy" or
 * "timed out"; misuse still throws.
 *
 * Time. fern's clock is CLOCK_MONOTONIC, which is the clock of
 * std::chrono::steady_clock on Linux (libstdc++ and libc++), so steady_clock
 * time points are passed to fern as absolute deadlines unchanged. Time points
 * of other clocks are converted to a steady deadline once, when the call
 * starts (a later change of that clock, e.g. a system_clock step, is not
 * followed). Durations are rounded up to whole nanoseconds; past deadlines
 * and negative durations mean "do not wait", huge ones saturate to "forever".
 *
 * C++ thread_local variables belong to the worker (kernel thread), not to the
 * green thread, and can change under a green thread whenever it blocks; use
 * fern::thread_local_ptr for per-green-thread data.
 *
 * Layout. This file is the one to include; it includes its parts, one
 * concept each, from fern/cxx/: base.hpp (the standard headers, errors and
 * time conversion), runtime.hpp (init, shutdown), stop.hpp (stop_token,
 * cancel_shield), thread.hpp (thread, jthread, spawn, go, this_thread),
 * mutex.hpp (mutex, shared_mutex, condition_variable),
 * sync.hpp (semaphores, wait_group, latch, barrier, call_once), local.hpp
 * (thread_local_ptr), chan.hpp (channel), select.hpp (select) and
 * group.hpp (group).
 *
 * Cancellation (docs/cancellation.md). thread::request_stop() cancels the
 * thread (fern_cancel): a fern wait it is parked in, and every later one,
 * throws std::system_error with std::errc::operation_canceled where the C
 * call returns ECANCELED.
 */
#ifndef FERN_FERN_HPP
#define FERN_FERN_HPP

/* One clear message instead of hundreds of errors from the concepts and
 * library parts below; the rest of the header is skipped. */
#if __cplusplus < 202002L
#error "fern.hpp needs C++20: compile with -std=c++20 (with CMake, link fern::cxx, which requires cxx_std_20)"
#else

/* The parts, in dependency order (each includes the ones it needs). */
#include <fern/cxx/base.hpp>
#include <fern/cxx/runtime.hpp>
#include <fern/cxx/stop.hpp>
#include <fern/cxx/thread.hpp>
#include <fern/cxx/mutex.hpp>
#include <fern/cxx/sync.hpp>
#include <fern/cxx/local.hpp>
#include <fern/cxx/chan.hpp>
#include <fern/cxx/select.hpp>
#include <fern/cxx/group.hpp>

#endif /* C++20 */
#endif /* FERN_FERN_HPP */
