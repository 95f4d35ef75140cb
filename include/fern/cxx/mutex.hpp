// SPDX-License-Identifier: MIT
/*
 * fern/cxx/mutex.hpp — part of fern.hpp:
 * mutexes: fern::mutex, fern::shared_mutex, fern::condition_variable.
 *
 * Programs include <fern/fern.hpp>, which includes every part; its opening
 * comment (model, errors, time) applies here. A part included on its own
 * is an error, so the C++20 check there stays the one place that reports.
 */
#ifndef FERN_CXX_MUTEX_HPP
#define FERN_CXX_MUTEX_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/mutex.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

#include <fern/cxx/base.hpp>

namespace fern {

/* Requirements of the standard (the C++ named requirements BasicLockable,
 * Lockable, TimedLockable, SharedLockable, SharedTimedLockable) as concepts;
 * the fern types are checked against them below. */
template <class M>
concept basic_lockable = requires(M &m) {
    m.lock();
    m.unlock();
};
template <class M>
concept lockable = basic_lockable<M> && requires(M &m) {
    { m.try_lock() } -> std::convertible_to<bool>;
};
template <class M>
concept timed_lockable = lockable<M> && requires(M &m) {
    { m.try_lock_for(std::chrono::milliseconds(1)) } -> std::convertible_to<bool>;
    { m.try_lock_until(std::chrono::steady_clock::now()) } -> std::convertible_to<bool>;
};
template <class M>
concept shared_lockable = requires(M &m) {
    m.lock_shared();
    m.unlock_shared();
    { m.try_lock_shared() } -> std::convertible_to<bool>;
};
template <class M>
concept shared_timed_lockable = shared_lockable<M> && requires(M &m) {
    { m.try_lock_shared_for(std::chrono::milliseconds(1)) } -> std::convertible_to<bool>;
    { m.try_lock_shared_until(std::chrono::steady_clock::now()) } -> std::convertible_to<bool>;
};

/* A mutex for green and plain threads (fern_mutex): std::mutex and
 * std::timed_mutex in one. Not recursive. Usable in constant initialisation
 * (constinit), never copied or moved. Destroying a locked mutex is undefined,
 * as for std::mutex.
 *
 * Fairness: a waiter that waited more than 1 ms switches the mutex to hand-off
 * mode, so no waiter starves.
 *
 * unlock() throws on misuse (see below); std::lock_guard / std::unique_lock
 * call it from their destructors, so misuse inside them ends in
 * std::terminate() — a loud failure rather than a corrupted lock. */
class mutex {
  public:
    using native_handle_type = fern_mutex *;

    constexpr mutex() noexcept = default;
    mutex(const mutex &) = delete;
    mutex &operator=(const mutex &) = delete;

    /* Lock, parking while another thread holds it. Throws std::system_error
     * EDEADLK if the caller already holds it. */
    void lock() { detail::check(fern_mutex_lock(&m_), "fern::mutex::lock"); }

    /* Lock if free; false if held (also when held by the caller). */
    bool try_lock() noexcept { return fern_mutex_trylock(&m_) == 0; }

    /* Lock, giving up after d / at tp: true if locked. Throws
     * std::system_error EDEADLK if the caller already holds it. */
    template <class Rep, class Period> bool try_lock_for(const std::chrono::duration<Rep, Period> &d)
    {
        return timed(detail::deadline_after(d));
    }
    template <class Clock, class Dur> bool try_lock_until(const std::chrono::time_point<Clock, Dur> &tp)
    {
        return timed(detail::deadline_at(tp));
    }

    /* Unlock. Throws std::system_error EPERM if the caller does not hold it. */
    void unlock() { detail::check(fern_mutex_unlock(&m_), "fern::mutex::unlock"); }

    native_handle_type native_handle() noexcept { return &m_; }

  private:
    bool timed(int64_t deadline)
    {
        int rc = fern_mutex_timedlock(&m_, deadline);
        if (rc == ETIMEDOUT)
            return false;
        detail::check(rc, "fern::mutex::try_lock_until");
        return true;
    }

    fern_mutex m_{};
};

/* fern::mutex already has the timed operations. */
using timed_mutex = mutex;

/* A reader-writer lock (fern_rwlock): std::shared_mutex and
 * std::shared_timed_mutex in one. Writer-preferring: once a writer waits, new
 * readers queue behind it — so a thread holding a shared lock must not take
 * another one while a writer may be waiting. A thread may hold at most
 * FERN_RWLOCK_READS_MAX shared locks at once (across all shared_mutexes).
 * unlock()/unlock_shared() throw on misuse (see fern::mutex). */
class shared_mutex {
  public:
    using native_handle_type = fern_rwlock *;

    constexpr shared_mutex() noexcept = default;
    shared_mutex(const shared_mutex &) = delete;
    shared_mutex &operator=(const shared_mutex &) = delete;

    /* Exclusive lock. Throws std::system_error EDEADLK if the caller holds it
     * (shared or exclusive). */
    void lock() { detail::check(fern_rwlock_wrlock(&rw_), "fern::shared_mutex::lock"); }
    /* False if it would wait (or the caller holds it). */
    bool try_lock() noexcept { return fern_rwlock_trywrlock(&rw_) == 0; }
    /* Exclusive lock with a limit; true if locked. Throws as lock(). */
    template <class Rep, class Period> bool try_lock_for(const std::chrono::duration<Rep, Period> &d)
    {
        return timed(fern_rwlock_timedwrlock, detail::deadline_after(d));
    }
    template <class Clock, class Dur> bool try_lock_until(const std::chrono::time_point<Clock, Dur> &tp)
    {
        return timed(fern_rwlock_timedwrlock, detail::deadline_at(tp));
    }
    /* Release the exclusive lock. Throws std::system_error EPERM if the caller
     * holds neither lock. */
    void unlock() { detail::check(fern_rwlock_unlock(&rw_), "fern::shared_mutex::unlock"); }

    /* Shared lock. Throws std::system_error EDEADLK if the caller holds the
     * exclusive lock; EAGAIN if it already holds FERN_RWLOCK_READS_MAX shared
     * locks. */
    void lock_shared() { detail::check(fern_rwlock_rdlock(&rw_), "fern::shared_mutex::lock_shared"); }
    /* False if it would wait; throws as lock_shared() for EDEADLK/EAGAIN. */
    bool try_lock_shared()
    {
        int rc = fern_rwlock_tryrdlock(&rw_);
        if (rc == EBUSY)
            return false;
        detail::check(rc, "fern::shared_mutex::try_lock_shared");
        return true;
    }
    /* Shared lock with a limit; true if locked. Throws as lock_shared(). */
    template <class Rep, class Period>
    bool try_lock_shared_for(const std::chrono::duration<Rep, Period> &d)
    {
        return timed(fern_rwlock_timedrdlock, detail::deadline_after(d));
    }
    template <class Clock, class Dur>
    bool try_lock_shared_until(const std::chrono::time_point<Clock, Dur> &tp)
    {
        return timed(fern_rwlock_timedrdlock, detail::deadline_at(tp));
    }
    /* Release one shared lock of the caller. Throws std::system_error EPERM if
     * the caller holds none. */
    void unlock_shared() { detail::check(fern_rwlock_unlock(&rw_), "fern::shared_mutex::unlock_shared"); }

    native_handle_type native_handle() noexcept { return &rw_; }

  private:
    bool timed(int (*op)(fern_rwlock *, int64_t), int64_t deadline)
    {
        int rc = op(&rw_, deadline);
        if (rc == ETIMEDOUT)
            return false;
        detail::check(rc, "fern::shared_mutex::try_lock_until");
        return true;
    }

    fern_rwlock rw_{};
};

/* fern::shared_mutex already has the timed operations. */
using shared_timed_mutex = shared_mutex;

static_assert(timed_lockable<mutex>);
static_assert(timed_lockable<shared_mutex> && shared_timed_lockable<shared_mutex>);

/* A condition variable (fern_cond) for std::unique_lock<fern::mutex>, with the
 * interface of std::condition_variable. Wake-ups can be spurious: use the
 * predicate overloads. Throws std::system_error EPERM if the lock's mutex is
 * not held by the caller (e.g. an unlocked unique_lock). */
class condition_variable {
  public:
    using native_handle_type = fern_cond *;

    constexpr condition_variable() noexcept = default;
    condition_variable(const condition_variable &) = delete;
    condition_variable &operator=(const condition_variable &) = delete;

    /* Wake one / all waiters. */
    void notify_one() noexcept { fern_cond_signal(&c_); }
    void notify_all() noexcept { fern_cond_broadcast(&c_); }

    /* Release lk's mutex, wait for a notification, lock it again. */
    void wait(std::unique_lock<mutex> &lk)
    {
        detail::check(fern_cond_wait(&c_, handle(lk)), "fern::condition_variable::wait");
    }
    /* while (!pred()) wait(lk); */
    template <class Pred> void wait(std::unique_lock<mutex> &lk, Pred pred)
    {
        while (!pred())
            wait(lk);
    }

    /* Wait until notified or tp; cv_status::timeout if tp passed (checked on
     * Clock). The mutex is held again either way. */
    template <class Clock, class Dur>
    std::cv_status wait_until(std::unique_lock<mutex> &lk, const std::chrono::time_point<Clock, Dur> &tp)
    {
        int rc = fern_cond_timedwait(&c_, handle(lk), detail::deadline_at(tp));
        if (rc != ETIMEDOUT)
            detail::check(rc, "fern::condition_variable::wait_until");
        return Clock::now() < tp ? std::cv_status::no_timeout : std::cv_status::timeout;
    }
    /* Wait until pred() or tp; returns pred() (false only on timeout). */
    template <class Clock, class Dur, class Pred>
    bool wait_until(std::unique_lock<mutex> &lk, const std::chrono::time_point<Clock, Dur> &tp, Pred pred)
    {
        while (!pred())
            if (wait_until(lk, tp) == std::cv_status::timeout)
                return pred();
        return true;
    }
    /* As wait_until(lk, steady_clock::now() + d [, pred]). */
    template <class Rep, class Period>
    std::cv_status wait_for(std::unique_lock<mutex> &lk, const std::chrono::duration<Rep, Period> &d)
    {
        int rc = fern_cond_timedwait(&c_, handle(lk), detail::deadline_after(d));
        if (rc == ETIMEDOUT)
            return std::cv_status::timeout;
        detail::check(rc, "fern::condition_variable::wait_for");
        return std::cv_status::no_timeout;
    }
    template <class Rep, class Period, class Pred>
    bool wait_for(std::unique_lock<mutex> &lk, const std::chrono::duration<Rep, Period> &d, Pred pred)
    {
        int64_t deadline = detail::deadline_after(d);
        while (!pred()) {
            int rc = fern_cond_timedwait(&c_, handle(lk), deadline);
            if (rc == ETIMEDOUT)
                return pred();
            detail::check(rc, "fern::condition_variable::wait_for");
        }
        return true;
    }

    native_handle_type native_handle() noexcept { return &c_; }

  private:
    static fern_mutex *handle(std::unique_lock<mutex> &lk)
    {
        if (!lk.mutex())
            detail::throw_errno(EPERM, "fern::condition_variable: no mutex");
        return lk.mutex()->native_handle();
    }

    fern_cond c_{};
};

} // namespace fern

#endif /* FERN_CXX_MUTEX_HPP */
