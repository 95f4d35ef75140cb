// SPDX-License-Identifier: MIT
/*
 * fern/cxx/sync.hpp — part of fern.hpp:
 * counting_semaphore, wait_group, latch, barrier, once_flag and call_once.
 *
 * Programs include <fern/fern.hpp>, which includes every part; its opening
 * comment (model, errors, time) applies here. A part included on its own
 * is an error, so the C++20 check there stays the one place that reports.
 */
#ifndef FERN_CXX_SYNC_HPP
#define FERN_CXX_SYNC_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/sync.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

#include <fern/cxx/mutex.hpp>

namespace fern {

/* A counting semaphore (fern_sem) with the interface of
 * std::counting_semaphore. LeastMaxValue is at most FERN_SEM_VALUE_MAX;
 * max() is LeastMaxValue (fern itself allows values up to
 * FERN_SEM_VALUE_MAX; as with std, releasing beyond max() is a
 * precondition violation). release() hands units straight to waiters. */
template <std::ptrdiff_t LeastMaxValue = FERN_SEM_VALUE_MAX> class counting_semaphore {
    static_assert(LeastMaxValue >= 0 && LeastMaxValue <= std::ptrdiff_t(FERN_SEM_VALUE_MAX),
                  "fern::counting_semaphore: LeastMaxValue out of range");

  public:
    using native_handle_type = fern_sem *;

    static constexpr std::ptrdiff_t max() noexcept { return LeastMaxValue; }

    /* Throws std::system_error EINVAL unless 0 <= desired <= max(). */
    constexpr explicit counting_semaphore(std::ptrdiff_t desired)
        : s_(fern_sem FERN_SEM_INIT(static_cast<uint32_t>(desired)))
    {
        if (desired < 0 || desired > max())
            detail::throw_errno(EINVAL, "fern::counting_semaphore");
    }
    counting_semaphore(const counting_semaphore &) = delete;
    counting_semaphore &operator=(const counting_semaphore &) = delete;

    /* Add `update` units. Throws std::system_error EINVAL if update < 0,
     * EOVERFLOW if the value would pass FERN_SEM_VALUE_MAX (the units added
     * before that stay). */
    void release(std::ptrdiff_t update = 1)
    {
        if (update < 0)
            detail::throw_errno(EINVAL, "fern::counting_semaphore::release");
        for (; update > 0; update--)
            detail::check(fern_sem_post(&s_), "fern::counting_semaphore::release");
    }
    /* Take one unit, waiting while there is none. */
    void acquire() { detail::check(fern_sem_wait(&s_), "fern::counting_semaphore::acquire"); }
    /* Take one unit if there is one. */
    bool try_acquire() noexcept { return fern_sem_trywait(&s_) == 0; }
    /* Take one unit, waiting at most d / until tp; true if taken. */
    template <class Rep, class Period> bool try_acquire_for(const std::chrono::duration<Rep, Period> &d)
    {
        return timed(detail::deadline_after(d));
    }
    template <class Clock, class Dur> bool try_acquire_until(const std::chrono::time_point<Clock, Dur> &tp)
    {
        return timed(detail::deadline_at(tp));
    }
    /* The current value (a snapshot). */
    std::ptrdiff_t value() noexcept { return static_cast<std::ptrdiff_t>(fern_sem_value(&s_)); }

    native_handle_type native_handle() noexcept { return &s_; }

  private:
    bool timed(int64_t deadline)
    {
        int rc = fern_sem_timedwait(&s_, deadline);
        if (rc == ETIMEDOUT)
            return false;
        detail::check(rc, "fern::counting_semaphore::try_acquire_until");
        return true;
    }

    fern_sem s_;
};

/* std::binary_semaphore's counterpart. */
using binary_semaphore = counting_semaphore<1>;

/* A wait group (fern_wg, Go's sync.WaitGroup): a counter, and waiters for it
 * to reach 0. add() before starting the work, done() when a piece finishes. */
class wait_group {
  public:
    using native_handle_type = fern_wg *;

    wait_group() noexcept = default;
    wait_group(const wait_group &) = delete;
    wait_group &operator=(const wait_group &) = delete;

    /* Add delta (may be negative); at 0 all waiters wake. Throws
     * std::system_error EINVAL if the counter would go below 0 (unchanged). */
    void add(int64_t delta = 1) { detail::check(fern_wg_add(&wg_, delta), "fern::wait_group::add"); }
    /* add(-1). */
    void done() { detail::check(fern_wg_done(&wg_), "fern::wait_group::done"); }
    /* Wait for the counter to be 0. */
    void wait() { detail::check(fern_wg_wait(&wg_), "fern::wait_group::wait"); }
    /* Wait at most d / until tp; true if the counter reached 0. */
    template <class Rep, class Period> bool wait_for(const std::chrono::duration<Rep, Period> &d)
    {
        return timed(detail::deadline_after(d));
    }
    template <class Clock, class Dur> bool wait_until(const std::chrono::time_point<Clock, Dur> &tp)
    {
        return timed(detail::deadline_at(tp));
    }

    native_handle_type native_handle() noexcept { return &wg_; }

  private:
    bool timed(int64_t deadline)
    {
        int rc = fern_wg_timedwait(&wg_, deadline);
        if (rc == ETIMEDOUT)
            return false;
        detail::check(rc, "fern::wait_group::wait_until");
        return true;
    }

    fern_wg wg_ = FERN_WG_INIT;
};

/* A single-use countdown (std::latch), on a fern_wg. */
class latch {
  public:
    static constexpr std::ptrdiff_t max() noexcept { return PTRDIFF_MAX; }

    /* Throws std::system_error EINVAL if expected < 0. */
    explicit latch(std::ptrdiff_t expected)
    {
        if (expected < 0)
            detail::throw_errno(EINVAL, "fern::latch");
        detail::check(fern_wg_add(&wg_, expected), "fern::latch");
    }
    latch(const latch &) = delete;
    latch &operator=(const latch &) = delete;

    /* Decrement by n; at 0 the waiters wake. Throws std::system_error EINVAL
     * if n < 0 or n exceeds the remaining count (nothing changes then). */
    void count_down(std::ptrdiff_t n = 1)
    {
        if (n < 0)
            detail::throw_errno(EINVAL, "fern::latch::count_down");
        detail::check(fern_wg_add(&wg_, -static_cast<int64_t>(n)), "fern::latch::count_down");
    }
    /* True if the count is 0 (never waits). */
    bool try_wait() const noexcept { return fern_wg_timedwait(&wg_, 0) == 0; }
    /* Wait for the count to reach 0. */
    void wait() const { detail::check(fern_wg_wait(&wg_), "fern::latch::wait"); }
    /* count_down(n); wait(); */
    void arrive_and_wait(std::ptrdiff_t n = 1)
    {
        count_down(n);
        wait();
    }

  private:
    mutable fern_wg wg_ = FERN_WG_INIT;
};

namespace detail {
struct noop_completion {
    void operator()() noexcept {}
};
} // namespace detail

/* A reusable barrier (std::barrier) for `expected` participants per phase,
 * with an optional completion function run once per phase by the last thread
 * to arrive, before any waiter is released. As for std::barrier the
 * completion must be invocable without throwing (declare the lambda
 * noexcept). Built on fern::mutex and fern::condition_variable (fern_barrier
 * cannot run a completion before releasing the waiters, nor drop
 * participants). */
template <class CompletionFunction = detail::noop_completion> class barrier {
    static_assert(std::is_nothrow_invocable_v<CompletionFunction &>,
                  "fern::barrier: the completion function must be noexcept-invocable");

  public:
    /* Returned by arrive(); pass it to wait(). */
    class arrival_token {
        friend class barrier;
        explicit arrival_token(uint64_t phase) noexcept : phase_(phase) {}
        uint64_t phase_;
    };

    static constexpr std::ptrdiff_t max() noexcept { return PTRDIFF_MAX; }

    /* Throws std::system_error EINVAL if expected < 1. */
    explicit barrier(std::ptrdiff_t expected, CompletionFunction f = CompletionFunction())
        : expected_(expected), remaining_(expected), completion_(std::move(f))
    {
        if (expected < 1)
            detail::throw_errno(EINVAL, "fern::barrier");
    }
    barrier(const barrier &) = delete;
    barrier &operator=(const barrier &) = delete;

    /* Arrive n times at the current phase without waiting. Throws
     * std::system_error EINVAL if n < 1 or n exceeds the arrivals the phase
     * still expects. */
    [[nodiscard]] arrival_token arrive(std::ptrdiff_t n = 1)
    {
        std::unique_lock<mutex> lk(m_);
        if (n < 1 || n > remaining_)
            detail::throw_errno(EINVAL, "fern::barrier::arrive");
        uint64_t phase = phase_;
        remaining_ -= n;
        if (remaining_ == 0)
            complete();
        return arrival_token(phase);
    }
    /* Wait for the phase of the token to complete. */
    void wait(arrival_token &&t) const
    {
        std::unique_lock<mutex> lk(m_);
        cv_.wait(lk, [&] { return phase_ != t.phase_; });
    }
    /* wait(arrive()). */
    void arrive_and_wait() { wait(arrive()); }
    /* Arrive at this phase and leave: later phases expect one fewer. */
    void arrive_and_drop()
    {
        std::unique_lock<mutex> lk(m_);
        expected_--;
        if (--remaining_ == 0)
            complete();
    }

  private:
    void complete() noexcept
    {
        completion_();
        phase_++;
        remaining_ = expected_;
        cv_.notify_all();
    }

    mutable mutex m_;
    mutable condition_variable cv_;
    std::ptrdiff_t expected_, remaining_;
    uint64_t phase_ = 0;
    CompletionFunction completion_;
};

/* std::once_flag's counterpart for fern::call_once. */
class once_flag {
  public:
    constexpr once_flag() noexcept = default;
    once_flag(const once_flag &) = delete;
    once_flag &operator=(const once_flag &) = delete;

  private:
    template <class F, class... Args> friend void call_once(once_flag &, F &&, Args &&...);
    std::atomic<bool> done_{false};
    mutex m_;
};

/* Call f(args...) once per flag (std::call_once): callers arriving while it
 * runs park until it finishes. If f throws, the exception propagates to its
 * caller and the flag stays unset (the next caller runs f). Throws
 * std::system_error EDEADLK if f itself calls call_once on the same flag.
 * (Not on fern_once: its function takes no argument, so it cannot carry a
 * closure.) */
template <class F, class... Args> void call_once(once_flag &flag, F &&f, Args &&...args)
{
    if (flag.done_.load(std::memory_order_acquire))
        return;
    std::lock_guard<mutex> lk(flag.m_);
    if (flag.done_.load(std::memory_order_relaxed))
        return;
    std::invoke(std::forward<F>(f), std::forward<Args>(args)...);
    flag.done_.store(true, std::memory_order_release);
}

} // namespace fern

#endif /* FERN_CXX_SYNC_HPP */
