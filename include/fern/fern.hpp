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
 */
#ifndef FERN_FERN_HPP
#define FERN_FERN_HPP

/* One clear message instead of hundreds of errors from the concepts and
 * library parts below; the rest of the header is skipped. */
#if __cplusplus < 202002L
#error "fern.hpp needs C++20: compile with -std=c++20 (with CMake, link fern::cxx, which requires cxx_std_20)"
#else

#include <fern/fern.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <ostream>
#include <shared_mutex>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

namespace fern {

/* ------------------------------------------------------------------------ */
/* Internals: errors and time conversion                                     */
/* ------------------------------------------------------------------------ */

namespace detail {

[[noreturn]] inline void throw_errno(int err, const char *what)
{
    throw std::system_error(err, std::generic_category(), what);
}

inline void check(int rc, const char *what)
{
    if (rc != 0)
        throw_errno(rc, what);
}

// A duration as nanoseconds for fern: rounded up, <= 0 -> 0, saturated to
// FERN_FOREVER.
template <class Rep, class Period> int64_t to_ns(const std::chrono::duration<Rep, Period> &d)
{
    using namespace std::chrono;
    if (d <= d.zero())
        return 0;
    if (duration<long double, std::nano>(d).count() >= static_cast<long double>(FERN_FOREVER))
        return FERN_FOREVER;
    return ceil<nanoseconds>(d).count();
}

// Absolute fern deadline for "d from now".
template <class Rep, class Period>
int64_t deadline_after(const std::chrono::duration<Rep, Period> &d)
{
    int64_t rel = to_ns(d);
    if (rel == 0)
        return fern_now_ns();
    int64_t now = fern_now_ns();
    return rel >= FERN_FOREVER - now ? FERN_FOREVER : now + rel;
}

// Absolute fern deadline for a time point (see "Time" above).
template <class Clock, class Dur>
int64_t deadline_at(const std::chrono::time_point<Clock, Dur> &tp)
{
    using namespace std::chrono;
    if constexpr (std::is_same_v<Clock, steady_clock>) {
        auto since = tp.time_since_epoch();
        if (since <= since.zero())
            return 0;
        return to_ns(since);
    } else {
        return deadline_after(tp - Clock::now());
    }
}

} // namespace detail

/* ------------------------------------------------------------------------ */
/* Runtime                                                                   */
/* ------------------------------------------------------------------------ */

/* Start the runtime with `workers` workers in the default cluster and a
 * default stack size (0 = $FERN_WORKERS / $FERN_STACK_SIZE or the built-in
 * default). Optional: spawning starts the runtime with the defaults.
 * Throws std::system_error: EBUSY if already running, EINVAL for bad values,
 * EAGAIN/ENOMEM if workers or memory could not be had. */
inline void init(unsigned workers = 0, std::size_t stack_size = 0)
{
    fern_config cfg{}; // every other field 0: its default
    cfg.workers = workers;
    cfg.stack_size = stack_size;
    detail::check(fern_init(&cfg), "fern::init");
}

/* Stop the runtime (fern_shutdown): call from a plain thread once the green
 * threads are done. Throws std::system_error: EPERM from a green thread,
 * EINVAL if the runtime is not running. */
inline void shutdown()
{
    detail::check(fern_shutdown(), "fern::shutdown");
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */
/* ------------------------------------------------------------------------ */

/* Options for a new green thread (a fern_attr without `detached`). The name
 * is copied at spawn, so a temporary string is fine; designated initialisers
 * read well: fern::attr{.stack_size = 64 << 10, .name = "reader"}. */
struct attr {
    std::size_t stack_size = 0;       // 0 = the runtime default
    const char *name = nullptr;       // first 31 bytes are kept
    fern_cluster *cluster = nullptr;  // nullptr = the current or the default cluster
};

/* A green thread's identity: fern_thread_id(), unique and never reused in the
 * life of the process. A default-constructed id means "no green thread" (an
 * empty or joined fern::thread, or this_thread::get_id() on a plain thread).
 * Totally ordered, hashable and printable. */
class thread_id {
  public:
    constexpr thread_id() noexcept = default;
    constexpr explicit thread_id(uint64_t v) noexcept : v_(v) {}
    /* The numeric id (0 for "no green thread"). */
    constexpr uint64_t value() const noexcept { return v_; }
    friend constexpr bool operator==(thread_id, thread_id) noexcept = default;
    friend constexpr auto operator<=>(thread_id, thread_id) noexcept = default;
    template <class C, class Tr>
    friend std::basic_ostream<C, Tr> &operator<<(std::basic_ostream<C, Tr> &os, thread_id id)
    {
        return os << id.v_;
    }

  private:
    uint64_t v_ = 0;
};

namespace detail {

// What join() returns for a callable returning R: lvalue references are kept,
// anything else is returned by value.
template <class R>
using thread_result_t =
    std::conditional_t<std::is_lvalue_reference_v<R>, R, std::remove_cv_t<std::remove_reference_t<R>>>;

template <class F, class... Args> struct spawn_result {}; // not invocable: no type
template <class F, class... Args>
    requires std::is_invocable_v<std::decay_t<F>, std::decay_t<Args>...>
struct spawn_result<F, Args...> {
    using type = thread_result_t<std::invoke_result_t<std::decay_t<F>, std::decay_t<Args>...>>;
};
template <class F, class... Args> using spawn_result_t = typename spawn_result<F, Args...>::type;

template <class R>
using result_slot_t = std::conditional_t<std::is_lvalue_reference_v<R>,
                                         std::reference_wrapper<std::remove_reference_t<R>>, R>;

template <class R> struct result_box {
    std::optional<result_slot_t<R>> value;
};
template <> struct result_box<void> {};

// Shared by the fern::thread handle and the green thread; two references, the
// last one to let go deletes it (the handle at join/detach, the thread at exit).
template <class R> struct thread_state {
    std::atomic<int> refs{2};
    std::exception_ptr error;
    result_box<R> result;

    virtual void run() noexcept = 0;
    virtual ~thread_state() = default;

    static void release(thread_state *s) noexcept
    {
        if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
            delete s;
    }
    static void *entry(void *p)
    {
        auto *s = static_cast<thread_state *>(p);
        s->run();
        release(s);
        return nullptr;
    }
};

template <class R, class F, class... Args> struct thread_state_impl final : thread_state<R> {
    // Decayed copies, as std::thread makes; destroyed in the green thread
    // right after the call.
    std::optional<std::tuple<F, Args...>> call;

    template <class... U> explicit thread_state_impl(U &&...u) : call(std::in_place, std::forward<U>(u)...)
    {
    }

    void run() noexcept override
    {
        try {
            if constexpr (std::is_void_v<R>) {
                std::apply([](auto &&...a) { std::invoke(std::move(a)...); }, std::move(*call));
            } else {
                this->result.value.emplace(std::apply(
                    [](auto &&...a) -> R { return std::invoke(std::move(a)...); }, std::move(*call)));
            }
            call.reset();
        } catch (...) {
            this->error = std::current_exception();
            call.reset();
        }
    }
};

// Body of a detached (fern::go) thread: owns the call; an escaping exception
// reaches the noexcept boundary and calls std::terminate.
template <class F, class... Args> struct detached_call {
    std::tuple<F, Args...> call;
    static void *entry(void *p)
    {
        std::unique_ptr<detached_call> self(static_cast<detached_call *>(p));
        run(*self);
        return nullptr;
    }
    static void run(detached_call &self) noexcept
    {
        std::apply([](auto &&...a) { std::invoke(std::move(a)...); }, std::move(self.call));
    }
};

inline fern_attr to_c_attr(const attr &a, bool detached)
{
    fern_attr c{};
    c.stack_size = a.stack_size;
    c.name = a.name;
    c.cluster = a.cluster;
    c.detached = detached;
    return c;
}

template <class F, class... Args>
concept spawnable = std::is_invocable_v<std::decay_t<F>, std::decay_t<Args>...> &&
                    std::is_constructible_v<std::decay_t<F>, F> &&
                    (std::is_constructible_v<std::decay_t<Args>, Args> && ...);

} // namespace detail

/* A joinable green thread: the green counterpart of std::thread, plus a result.
 *
 * thread<R> runs a callable f(args...) (decayed copies of f and args, invoked
 * as rvalues, destroyed in the new thread after the call) on a green thread.
 * join() waits for it and returns what f returned (R; void for void
 * callables; lvalue references are returned as references), or rethrows the
 * exception that escaped f. R is the callable's result type; let it be
 * deduced: `fern::thread t(f, 1, 2);` or `auto t = fern::spawn(f, 1, 2);`
 * (a thread of a void callable is a fern::thread<void>; spelling another R
 * than the callable's does not compile).
 *
 * Move-only. Like std::thread, a thread that is still joinable when it is
 * destroyed or assigned to calls std::terminate(): join() or detach() it
 * first. Once detached, the result and any exception are discarded.
 */
// R has no default: a default would let the constructors' implicit deduction
// guides (R = void) compete with the guides below, and clang 14 prefers them.
template <class R> class thread {
  public:
    using id = thread_id;
    using native_handle_type = fern_thread *;
    using result_type = R;

    /* Not a thread (not joinable). */
    thread() noexcept = default;

    /* Spawn f(args...) with default options. Throws std::system_error with
     * fern_spawn's error (EAGAIN when stacks or memory run out, or an error of
     * starting the runtime), and whatever copying f/args throws. */
    template <class F, class... Args>
        requires detail::spawnable<F, Args...> &&
                 (!std::is_same_v<std::remove_cvref_t<F>, attr>) &&
                 std::is_same_v<R, detail::spawn_result_t<F, Args...>>
    explicit thread(F &&f, Args &&...args)
    {
        start(attr{}, std::forward<F>(f), std::forward<Args>(args)...);
    }

    /* As above with options (stack size, name, cluster). Also EINVAL if the
     * stack size is outside [FERN_STACK_MIN, FERN_STACK_MAX] or the cluster is
     * being destroyed. */
    template <class F, class... Args>
        requires detail::spawnable<F, Args...> &&
                 std::is_same_v<R, detail::spawn_result_t<F, Args...>>
    thread(const attr &options, F &&f, Args &&...args)
    {
        start(options, std::forward<F>(f), std::forward<Args>(args)...);
    }

    thread(const thread &) = delete;
    thread &operator=(const thread &) = delete;
    thread(thread &&o) noexcept
        : t_(std::exchange(o.t_, nullptr)), s_(std::exchange(o.s_, nullptr))
    {
    }
    /* std::terminate() if *this is joinable (as std::thread). */
    thread &operator=(thread &&o) noexcept
    {
        if (joinable())
            std::terminate();
        t_ = std::exchange(o.t_, nullptr);
        s_ = std::exchange(o.s_, nullptr);
        return *this;
    }
    /* std::terminate() if still joinable (as std::thread). */
    ~thread()
    {
        if (joinable())
            std::terminate();
    }

    /* True until join() or detach(). */
    bool joinable() const noexcept { return t_ != nullptr; }

    /* Wait for the thread to finish; return its result or rethrow the
     * exception that escaped it. Works from green and plain threads. Throws
     * std::system_error: EINVAL if not joinable, EDEADLK if it is the calling
     * thread (the thread stays joinable then). After it returns or rethrows,
     * joinable() is false. */
    R join()
    {
        if (!t_)
            detail::throw_errno(EINVAL, "fern::thread::join");
        detail::check(fern_join(t_, nullptr), "fern::thread::join");
        t_ = nullptr;
        std::unique_ptr<state, deleter> s(std::exchange(s_, nullptr));
        if (s->error)
            std::rethrow_exception(s->error);
        if constexpr (std::is_lvalue_reference_v<R>)
            return s->result.value->get();
        else if constexpr (!std::is_void_v<R>)
            return std::move(*s->result.value);
    }

    /* Let the thread run on its own; its resources are freed when it ends and
     * its result or exception is discarded. Throws std::system_error EINVAL if
     * not joinable. */
    void detach()
    {
        if (!t_)
            detail::throw_errno(EINVAL, "fern::thread::detach");
        detail::check(fern_detach(t_), "fern::thread::detach");
        t_ = nullptr;
        state::release(std::exchange(s_, nullptr));
    }

    /* The thread's id; id() if not joinable. */
    id get_id() const noexcept { return t_ ? id(fern_thread_id(t_)) : id(); }

    /* The C handle (nullptr if not joinable); valid until join/detach. Do not
     * fern_join or fern_detach it yourself. */
    native_handle_type native_handle() const noexcept { return t_; }

    void swap(thread &o) noexcept
    {
        std::swap(t_, o.t_);
        std::swap(s_, o.s_);
    }
    friend void swap(thread &a, thread &b) noexcept { a.swap(b); }

  private:
    using state = detail::thread_state<R>;
    struct deleter {
        void operator()(state *s) const noexcept { state::release(s); }
    };

    template <class F, class... Args> void start(const attr &options, F &&f, Args &&...args)
    {
        using impl = detail::thread_state_impl<R, std::decay_t<F>, std::decay_t<Args>...>;
        auto *s = new impl(std::forward<F>(f), std::forward<Args>(args)...);
        fern_attr a = detail::to_c_attr(options, false);
        fern_thread *t = nullptr;
        int rc = fern_spawn(&t, &a, &state::entry, static_cast<state *>(s));
        if (rc != 0) {
            delete s;
            detail::throw_errno(rc, "fern::thread");
        }
        t_ = t;
        s_ = s;
    }

    fern_thread *t_ = nullptr;
    state *s_ = nullptr;
};

// (The guides name the result through a class template, not the alias
// spawn_result_t: clang 14 mixes up alias-template results between guides.)
template <class F, class... Args>
    requires detail::spawnable<F, Args...> && (!std::is_same_v<std::remove_cvref_t<F>, attr>)
thread(F &&, Args &&...) -> thread<typename detail::spawn_result<F, Args...>::type>;
template <class F, class... Args>
    requires detail::spawnable<F, Args...>
thread(const attr &, F &&, Args &&...) -> thread<typename detail::spawn_result<F, Args...>::type>;

/* Spawn f(args...) on a new green thread and return its handle; the result
 * type is deduced. Throws as thread's constructor. */
template <class F, class... Args>
    requires detail::spawnable<F, Args...>
[[nodiscard]] thread<detail::spawn_result_t<F, Args...>> spawn(F &&f, Args &&...args)
{
    return thread<detail::spawn_result_t<F, Args...>>(std::forward<F>(f),
                                                      std::forward<Args>(args)...);
}

/* As spawn(f, args...) with options. */
template <class F, class... Args>
    requires detail::spawnable<F, Args...>
[[nodiscard]] thread<detail::spawn_result_t<F, Args...>> spawn(const attr &options, F &&f,
                                                               Args &&...args)
{
    return thread<detail::spawn_result_t<F, Args...>>(options, std::forward<F>(f),
                                                      std::forward<Args>(args)...);
}

/* Fire and forget: run f(args...) on a new detached green thread. Its result
 * is discarded; an exception escaping f calls std::terminate() (as in a
 * std::thread: nobody could receive it). Throws std::system_error as spawn. */
template <class F, class... Args>
    requires detail::spawnable<F, Args...>
void go(const attr &options, F &&f, Args &&...args)
{
    using body = detail::detached_call<std::decay_t<F>, std::decay_t<Args>...>;
    auto *b = new body{{std::forward<F>(f), std::forward<Args>(args)...}};
    fern_attr a = detail::to_c_attr(options, true);
    int rc = fern_spawn(nullptr, &a, &body::entry, b);
    if (rc != 0) {
        delete b;
        detail::throw_errno(rc, "fern::go");
    }
}

/* go() with default options. */
template <class F, class... Args>
    requires detail::spawnable<F, Args...> && (!std::is_same_v<std::remove_cvref_t<F>, attr>)
void go(F &&f, Args &&...args)
{
    go(attr{}, std::forward<F>(f), std::forward<Args>(args)...);
}

/* The calling thread. */
namespace this_thread {

/* Let the other runnable green threads of this worker run (sched_yield on a
 * plain thread). */
inline void yield() noexcept { fern_yield(); }

/* Sleep at least d (parks a green thread; blocks a plain one). d <= 0 returns
 * at once. */
template <class Rep, class Period> void sleep_for(const std::chrono::duration<Rep, Period> &d)
{
    int64_t ns = detail::to_ns(d);
    if (ns > 0)
        detail::check(fern_sleep_ns(ns), "fern::this_thread::sleep_for");
}

/* Sleep until tp (see "Time" at the top for clocks other than steady_clock). */
template <class Clock, class Dur> void sleep_until(const std::chrono::time_point<Clock, Dur> &tp)
{
    detail::check(fern_sleep_until(detail::deadline_at(tp)), "fern::this_thread::sleep_until");
}

/* The calling green thread's id; thread_id() (value 0) on a plain thread. */
inline thread_id get_id() noexcept { return thread_id(fern_thread_id(nullptr)); }

/* True on a green thread. */
inline bool is_green() noexcept { return fern_is_green(); }

/* Name the calling green thread (first 31 bytes). Throws std::system_error
 * EPERM on a plain thread. */
inline void set_name(const char *name) { detail::check(fern_set_name(name), "fern::this_thread::set_name"); }

/* The calling green thread's name ("" if none or on a plain thread). */
inline const char *name() noexcept { return fern_thread_name(nullptr); }

} // namespace this_thread

/* ------------------------------------------------------------------------ */
/* Mutexes                                                                   */
/* ------------------------------------------------------------------------ */

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

/* ------------------------------------------------------------------------ */
/* Semaphore, latch, barrier, wait group, once                               */
/* ------------------------------------------------------------------------ */

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

/* ------------------------------------------------------------------------ */
/* Green-thread-local storage                                                */
/* ------------------------------------------------------------------------ */

/* A pointer with one value per thread (green or plain), over a fern_key.
 * Each thread sees its own value (nullptr until it sets one); when a thread
 * ends, its non-null value is destroyed with Deleter (stateless,
 * default-constructed per call). Destroying the thread_local_ptr deletes the
 * key: values still set in other threads are then not destroyed (as
 * pthread_key_delete), so reset() them first. At most FERN_KEYS_MAX keys exist
 * at once. Threads still parked at fern_shutdown do not run the deleter. */
template <class T, class Deleter = std::default_delete<T>> class thread_local_ptr {
    static_assert(std::is_empty_v<Deleter> && std::is_default_constructible_v<Deleter>,
                  "fern::thread_local_ptr: the deleter must be stateless");

  public:
    /* Throws std::system_error EAGAIN if FERN_KEYS_MAX keys exist. */
    thread_local_ptr() { detail::check(fern_key_create(&key_, &destroy), "fern::thread_local_ptr"); }
    thread_local_ptr(const thread_local_ptr &) = delete;
    thread_local_ptr &operator=(const thread_local_ptr &) = delete;
    ~thread_local_ptr() { fern_key_delete(key_); }

    /* The calling thread's value. */
    T *get() const noexcept { return static_cast<T *>(fern_getspecific(key_)); }
    T *operator->() const noexcept { return get(); }
    std::add_lvalue_reference_t<T> operator*() const noexcept { return *get(); }
    explicit operator bool() const noexcept { return get() != nullptr; }

    /* Replace the calling thread's value with p, destroying the old one (if
     * different). Throws std::system_error ENOMEM if the thread's value table
     * cannot be allocated (p is then destroyed, the old value kept). */
    void reset(T *p = nullptr)
    {
        T *old = get();
        if (old == p)
            return;
        int rc = fern_setspecific(key_, p);
        if (rc != 0) {
            if (p)
                Deleter{}(p);
            detail::throw_errno(rc, "fern::thread_local_ptr::reset");
        }
        if (old)
            Deleter{}(old);
    }
    /* Give up the calling thread's value without destroying it. */
    [[nodiscard]] T *release() noexcept
    {
        T *old = get();
        if (old)
            fern_setspecific(key_, nullptr);
        return old;
    }

    fern_key native_handle() const noexcept { return key_; }

  private:
    static void destroy(void *p) { Deleter{}(static_cast<T *>(p)); }
    fern_key key_ = 0;
};

/* ------------------------------------------------------------------------ */
/* Channels                                                                  */
/* ------------------------------------------------------------------------ */

/* Why a try_recv / recv_for / recv_until returned no value. */
enum class chan_status {
    ok,      // a value was received
    timeout, // nothing was ready (try_*) or the deadline passed
    closed,  // the channel is closed and drained
};

template <class T> class channel;

namespace detail {

// Trivially copyable elements travel by value through the C channel (it
// copies bytes, which is a valid copy for them). Anything else is moved into
// a heap object whose pointer travels: exactly one party owns it at any time
// — the sender until fern_chan_* reports success, then the receiver (or the
// channel's destructor, for elements still buffered).
template <class T> inline constexpr bool chan_by_value = std::is_trivially_copyable_v<T>;

template <class T> struct chan_ops {
    static constexpr std::size_t elem_size = chan_by_value<T> ? sizeof(T) : sizeof(T *);

    // A value ready to be handed to the C channel; until commit(), the source
    // can be given back.
    template <class U> class outgoing {
      public:
        explicit outgoing(U &&src) : src_(std::addressof(src))
        {
            if constexpr (!chan_by_value<T>)
                p_ = new T(std::forward<U>(src));
        }
        outgoing(const outgoing &) = delete;
        outgoing &operator=(const outgoing &) = delete;
        ~outgoing() { give_back(); }

        const void *elem() const noexcept
        {
            if constexpr (chan_by_value<T>)
                return static_cast<const void *>(src_);
            else
                return static_cast<const void *>(&p_);
        }
        // The channel took it.
        void commit() noexcept { p_ = nullptr; }
        // Not sent: move the value back into the source when it was an rvalue
        // (and T is move-assignable), then free the heap copy. Idempotent.
        void give_back() noexcept
        {
            if constexpr (!chan_by_value<T>) {
                if (!p_)
                    return;
                if constexpr (std::is_rvalue_reference_v<U> && std::is_move_assignable_v<T>)
                    *src_ = std::move(*p_);
                delete p_;
                p_ = nullptr;
            }
        }

      private:
        std::remove_reference_t<U> *src_;
        T *p_ = nullptr;
    };

    // Storage the C channel receives into.
    struct incoming {
        alignas(chan_by_value<T> ? alignof(T) : alignof(T *))
            unsigned char buf[chan_by_value<T> ? sizeof(T) : sizeof(T *)];
        void *elem() noexcept { return buf; }
        // The received value (call once, after a successful receive).
        T take()
        {
            if constexpr (chan_by_value<T>) {
                // The C channel copied the bytes of a T in here, which (T being
                // trivially copyable, hence implicit-lifetime) created one.
                return *std::launder(reinterpret_cast<T *>(buf));
            } else {
                T *p;
                std::memcpy(&p, buf, sizeof p);
                std::unique_ptr<T> owner(p);
                return std::move(*p);
            }
        }
    };
};

} // namespace detail

/* A typed channel (fern_chan) of T: Go's chan T for green and plain threads.
 *
 * capacity 0 makes it unbuffered (a send waits for a receiver). T may be
 * move-only (std::unique_ptr<int>); it must be move-constructible. Values are
 * never copied by the channel: trivially copyable T travel by value, any
 * other T is moved into a heap object whose ownership passes to the receiver
 * (one allocation per element). No element is leaked: the destructor
 * destroys what is still buffered.
 *
 * Sending:
 *   send(v)                 waits; throws std::system_error EPIPE if the
 *                           channel is closed (before or while waiting)
 *   try_send / send_for /   false if it would wait / timed out; EPIPE throws
 *   send_until
 * A send that does not happen (false or a throw) leaves an rvalue argument
 * as it was — ch.try_send(std::move(p)) keeps p if it returns false (for
 * non-trivially-copyable T this needs T to be move-assignable).
 *
 * Receiving:
 *   recv()                  waits; std::nullopt once closed and drained
 *   try_recv / recv_for /   std::nullopt if nothing came; the chan_status&
 *   recv_until              overloads say whether it timed out or is closed
 *   for (auto &v : ch)      receives until closed and drained
 *
 * close() ends sending (receivers drain what is buffered). The channel must
 * outlive every thread that uses it; destroying a channel that threads are
 * blocked on is a bug and aborts. Not copyable or movable (share it by
 * reference or through a shared_ptr). */
template <class T> class channel {
    static_assert(std::is_object_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T> &&
                      !std::is_array_v<T>,
                  "fern::channel<T>: T must be a non-const, non-array object type");
    static_assert(std::is_move_constructible_v<T>, "fern::channel<T>: T must be move-constructible");
    using ops = detail::chan_ops<T>;

  public:
    using value_type = T;
    using native_handle_type = fern_chan *;

    /* Throws std::system_error ENOMEM if the buffer cannot be allocated,
     * EINVAL if capacity is absurdly large. */
    explicit channel(std::size_t capacity = 0)
    {
        detail::check(fern_chan_create(&ch_, ops::elem_size, capacity), "fern::channel");
    }
    channel(const channel &) = delete;
    channel &operator=(const channel &) = delete;

    /* Destroys the elements still buffered, then the channel. Aborts (no
     * exception can leave a destructor) if threads still wait on it. */
    ~channel()
    {
        if constexpr (!detail::chan_by_value<T>) {
            T *p = nullptr;
            while (fern_chan_tryrecv(ch_, &p) == 0)
                delete p;
        }
        if (fern_chan_destroy(ch_) != 0) {
            std::fputs("fern::channel destroyed while threads wait on it\n", stderr);
            std::abort();
        }
    }

    /* Send v, waiting for room or a receiver. Throws std::system_error EPIPE
     * if the channel is closed (v is then left as it was, see above). */
    void send(const T &v) { put(v, blocking{}, "fern::channel::send"); }
    void send(T &&v) { put(std::move(v), blocking{}, "fern::channel::send"); }
    /* Construct a T from args and send it. */
    template <class... Args> void emplace(Args &&...args) { send(T(std::forward<Args>(args)...)); }

    /* Send without waiting: false if it would wait (v then unchanged). Throws
     * std::system_error EPIPE if closed. */
    bool try_send(const T &v) { return put(v, nonblocking{}, "fern::channel::try_send"); }
    bool try_send(T &&v) { return put(std::move(v), nonblocking{}, "fern::channel::try_send"); }

    /* Send, waiting at most d / until tp: false on timeout (v then unchanged).
     * Throws std::system_error EPIPE if closed. */
    template <class Rep, class Period> bool send_for(T &&v, const std::chrono::duration<Rep, Period> &d)
    {
        return put(std::move(v), detail::deadline_after(d), "fern::channel::send_for");
    }
    template <class Rep, class Period>
    bool send_for(const T &v, const std::chrono::duration<Rep, Period> &d)
    {
        return put(v, detail::deadline_after(d), "fern::channel::send_for");
    }
    template <class Clock, class Dur> bool send_until(T &&v, const std::chrono::time_point<Clock, Dur> &tp)
    {
        return put(std::move(v), detail::deadline_at(tp), "fern::channel::send_until");
    }
    template <class Clock, class Dur>
    bool send_until(const T &v, const std::chrono::time_point<Clock, Dur> &tp)
    {
        return put(v, detail::deadline_at(tp), "fern::channel::send_until");
    }

    /* Receive, waiting for a value; std::nullopt once the channel is closed
     * and drained. */
    std::optional<T> recv()
    {
        chan_status st;
        return get(blocking{}, st);
    }
    /* Receive without waiting; std::nullopt if nothing is ready or the
     * channel is closed and drained (the overload with `why` says which). */
    std::optional<T> try_recv()
    {
        chan_status st;
        return get(nonblocking{}, st);
    }
    std::optional<T> try_recv(chan_status &why) { return get(nonblocking{}, why); }
    /* Receive, waiting at most d / until tp; std::nullopt on timeout or once
     * closed and drained (`why` says which). */
    template <class Rep, class Period> std::optional<T> recv_for(const std::chrono::duration<Rep, Period> &d)
    {
        chan_status st;
        return get(detail::deadline_after(d), st);
    }
    template <class Rep, class Period>
    std::optional<T> recv_for(const std::chrono::duration<Rep, Period> &d, chan_status &why)
    {
        return get(detail::deadline_after(d), why);
    }
    template <class Clock, class Dur> std::optional<T> recv_until(const std::chrono::time_point<Clock, Dur> &tp)
    {
        chan_status st;
        return get(detail::deadline_at(tp), st);
    }
    template <class Clock, class Dur>
    std::optional<T> recv_until(const std::chrono::time_point<Clock, Dur> &tp, chan_status &why)
    {
        return get(detail::deadline_at(tp), why);
    }

    /* No more sends: blocked senders fail with EPIPE, receivers drain the
     * buffer and then see the end. Throws std::system_error EPIPE if already
     * closed. */
    void close() { detail::check(fern_chan_close(ch_), "fern::channel::close"); }

    /* Buffered elements now (a snapshot) / the capacity. */
    std::size_t size() const noexcept { return fern_chan_len(ch_); }
    std::size_t capacity() const noexcept { return fern_chan_cap(ch_); }

    native_handle_type native_handle() const noexcept { return ch_; }

    /* An input iterator receiving from the channel: each increment is a
     * recv(); equal to std::default_sentinel once the channel is closed and
     * drained. Move-only when T is. */
    class iterator {
      public:
        using iterator_concept = std::input_iterator_tag;
        using value_type = T;
        using difference_type = std::ptrdiff_t;

        iterator() = default;
        T &operator*() const noexcept { return *cur_; }
        T *operator->() const noexcept { return std::addressof(*cur_); }
        iterator &operator++()
        {
            cur_ = ch_->recv();
            return *this;
        }
        void operator++(int) { ++*this; }
        friend bool operator==(const iterator &it, std::default_sentinel_t) noexcept
        {
            return !it.cur_;
        }

      private:
        friend class channel;
        explicit iterator(channel *ch) : ch_(ch), cur_(ch->recv()) {}
        channel *ch_ = nullptr;
        mutable std::optional<T> cur_;
    };

    /* Receives the first value (waits). */
    iterator begin() { return iterator(this); }
    std::default_sentinel_t end() const noexcept { return {}; }

  private:
    struct blocking {};
    struct nonblocking {};

    static int c_send(fern_chan *ch, const void *e, blocking) { return fern_chan_send(ch, e); }
    static int c_send(fern_chan *ch, const void *e, nonblocking) { return fern_chan_trysend(ch, e); }
    static int c_send(fern_chan *ch, const void *e, int64_t deadline)
    {
        return fern_chan_timedsend(ch, e, deadline);
    }
    static int c_recv(fern_chan *ch, void *e, blocking) { return fern_chan_recv(ch, e); }
    static int c_recv(fern_chan *ch, void *e, nonblocking) { return fern_chan_tryrecv(ch, e); }
    static int c_recv(fern_chan *ch, void *e, int64_t deadline)
    {
        return fern_chan_timedrecv(ch, e, deadline);
    }

    // true if sent, false if it would wait / timed out; throws otherwise.
    template <class U, class Mode> bool put(U &&v, Mode mode, const char *what)
    {
        typename ops::template outgoing<U &&> out(std::forward<U>(v));
        int rc = c_send(ch_, out.elem(), mode);
        if (rc == 0) {
            out.commit();
            return true;
        }
        out.give_back();
        if (rc == EAGAIN || rc == ETIMEDOUT)
            return false;
        detail::throw_errno(rc, what);
    }

    template <class Mode> std::optional<T> get(Mode mode, chan_status &why)
    {
        typename ops::incoming in;
        int rc = c_recv(ch_, in.elem(), mode);
        switch (rc) {
        case 0:
            why = chan_status::ok;
            return std::optional<T>(in.take());
        case EAGAIN:
        case ETIMEDOUT:
            why = chan_status::timeout;
            return std::nullopt;
        case EPIPE:
            why = chan_status::closed;
            return std::nullopt;
        default:
            detail::throw_errno(rc, "fern::channel::recv");
        }
    }

    fern_chan *ch_ = nullptr;
};

static_assert(std::input_iterator<channel<int>::iterator>);
static_assert(std::input_iterator<channel<std::unique_ptr<int>>::iterator>);
static_assert(std::sentinel_for<std::default_sentinel_t, channel<int>::iterator>);

/* ------------------------------------------------------------------------ */
/* Select                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * fern::select(case...) waits until one of the cases can proceed, performs
 * exactly that one (Go's select; among cases ready together one is picked at
 * random), runs its handler, and returns the case's position in the argument
 * list (0-based). Cases:
 *
 *   fern::recv_case(ch, f)     receive from ch. f(std::optional<T>) gets the
 *                              value, or std::nullopt if ch is closed and
 *                              drained (that makes the case ready, as in Go).
 *                              f may instead take T: then it is called only
 *                              for a value, and a closed channel fires the
 *                              case without calling it.
 *   fern::send_case(ch, v [, f])
 *                              send v on ch, then run f(). v is moved only if
 *                              this case fires: send_case(ch, std::move(p))
 *                              keeps p when another case fires (for
 *                              non-trivially-copyable T this needs T to be
 *                              move-assignable); an lvalue is copied. Do
 *                              not pass one object to two send cases.
 *                              Firing on a closed channel throws
 *                              std::system_error EPIPE (as send()).
 *   fern::timeout(d, f)        fires if nothing else was ready within d
 *   fern::timeout_at(tp, f)    ... by the time point tp
 *   fern::default_case(f)      fires at once if nothing else is ready
 *                              (non-blocking select)
 * At most one of timeout / timeout_at / default_case; at most FERN_SELECT_MAX
 * channel cases. Values, handlers and v are held by reference until select
 * returns, so build the cases inside the call:
 *
 *     auto p = std::make_unique<int>(7);
 *     std::size_t which = fern::select(
 *         fern::recv_case(in, [&](std::optional<std::string> s) { ... }),
 *         fern::send_case(out, std::move(p), [] { ... }),   // p moved only if sent
 *         fern::timeout(std::chrono::milliseconds(5), [] { ... }));
 *
 * An exception from a handler propagates (after every unsent value has been
 * given back). Throws std::system_error EINVAL for an impossible select (no
 * channel case and no timeout: it could never return).
 */
namespace detail {

template <class T, class F> struct recv_case_t {
    channel<T> &ch;
    F &&f;
    typename chan_ops<T>::incoming in{};

    void prepare(fern_select_case &c)
    {
        c.chan = ch.native_handle();
        c.op = FERN_RECV;
        c.elem = in.elem();
    }
    void fire(int result)
    {
        if constexpr (std::is_invocable_v<F, std::optional<T>>) {
            if (result == EPIPE)
                std::invoke(std::forward<F>(f), std::optional<T>());
            else
                std::invoke(std::forward<F>(f), std::optional<T>(in.take()));
        } else {
            static_assert(std::is_invocable_v<F, T>,
                          "fern::recv_case: the handler must take std::optional<T> or T");
            if (result != EPIPE)
                std::invoke(std::forward<F>(f), in.take());
        }
    }
    void discard() noexcept {}
};

template <class T, class U, class F> struct send_case_t {
    channel<T> &ch;
    U &&v;
    F &&f;
    std::optional<typename chan_ops<T>::template outgoing<U &&>> out{};

    void prepare(fern_select_case &c)
    {
        out.emplace(std::forward<U>(v));
        c.chan = ch.native_handle();
        c.op = FERN_SEND;
        c.elem = const_cast<void *>(out->elem());
    }
    void fire(int result)
    {
        if (result == EPIPE) {
            out->give_back();
            throw_errno(EPIPE, "fern::select: send on a closed channel");
        }
        out->commit();
        std::invoke(std::forward<F>(f));
    }
    void discard() noexcept
    {
        if (out)
            out->give_back();
    }
};

template <class F> struct timeout_case_t {
    int64_t deadline; // absolute; 0 for default_case
    F &&f;
    void fire() { std::invoke(std::forward<F>(f)); }
};

template <class C> struct is_timeout_case : std::false_type {};
template <class F> struct is_timeout_case<timeout_case_t<F>> : std::true_type {};
template <class C> inline constexpr bool is_timeout_case_v = is_timeout_case<std::remove_cvref_t<C>>::value;

struct noop {
    void operator()() const noexcept {}
};

// For each select argument: is it the timeout case, and its slot among the
// channel cases.
template <class... Cases> struct select_slots {
    static constexpr std::array<bool, sizeof...(Cases)> timeout{is_timeout_case_v<Cases>...};
    static constexpr std::array<std::size_t, sizeof...(Cases)> slot = [] {
        std::array<std::size_t, sizeof...(Cases)> s{};
        std::size_t k = 0;
        for (std::size_t i = 0; i < sizeof...(Cases); i++)
            s[i] = timeout[i] ? sizeof...(Cases) : k++;
        return s;
    }();
};

template <class F> struct scope_exit {
    F f;
    bool armed = true;
    ~scope_exit()
    {
        if (armed)
            f();
    }
};

} // namespace detail

/* A receive case for fern::select (see above). */
template <class T, class F> detail::recv_case_t<T, F> recv_case(channel<T> &ch, F &&f)
{
    return {ch, std::forward<F>(f)};
}

/* A send case for fern::select (see above). */
template <class T, class U, class F = detail::noop>
    requires std::is_same_v<std::remove_cvref_t<U>, T>
detail::send_case_t<T, U, F> send_case(channel<T> &ch, U &&v, F &&f = F())
{
    return {ch, std::forward<U>(v), std::forward<F>(f)};
}

/* A timeout case for fern::select (see above). */
template <class Rep, class Period, class F = detail::noop>
detail::timeout_case_t<F> timeout(const std::chrono::duration<Rep, Period> &d, F &&f = F())
{
    return {detail::deadline_after(d), std::forward<F>(f)};
}
template <class Clock, class Dur, class F = detail::noop>
detail::timeout_case_t<F> timeout_at(const std::chrono::time_point<Clock, Dur> &tp, F &&f = F())
{
    return {detail::deadline_at(tp), std::forward<F>(f)};
}
/* A default case for fern::select (see above). */
template <class F = detail::noop> detail::timeout_case_t<F> default_case(F &&f = F())
{
    return {0, std::forward<F>(f)};
}

/* Wait for one of the cases, perform it, run its handler; returns its
 * argument position. See the comment above detail::recv_case_t. */
template <class... Cases> std::size_t select(Cases &&...cases)
{
    constexpr std::size_t n = sizeof...(Cases);
    constexpr std::size_t ntimeouts =
        (std::size_t(0) + ... + std::size_t(detail::is_timeout_case_v<Cases>));
    constexpr std::size_t nchans = n - ntimeouts;
    static_assert(ntimeouts <= 1, "fern::select: at most one timeout / default case");
    static_assert(nchans <= FERN_SELECT_MAX, "fern::select: too many channel cases");
    using slots = detail::select_slots<Cases...>;

    std::array<fern_select_case, nchans + 1> cs{};
    int64_t deadline = FERN_FOREVER;
    auto refs = std::forward_as_tuple(cases...);
    auto each = [&](auto &&fn) {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (fn(std::integral_constant<std::size_t, I>()), ...);
        }(std::make_index_sequence<n>());
    };
    // Gives unsent values back if anything below throws before the cases are
    // settled.
    auto discard_all = [&]() noexcept {
        each([&](auto i) {
            if constexpr (!slots::timeout[i])
                std::get<i>(refs).discard();
        });
    };
    detail::scope_exit<decltype(discard_all)> cleanup{discard_all};

    each([&](auto i) {
        if constexpr (slots::timeout[i])
            deadline = std::get<i>(refs).deadline;
        else
            std::get<i>(refs).prepare(cs[slots::slot[i]]);
    });

    int r = fern_select(cs.data(), nchans, deadline);
    if (r < 0 && r != -ETIMEDOUT)
        detail::throw_errno(-r, "fern::select");

    std::size_t fired = n;
    each([&](auto i) {
        if constexpr (slots::timeout[i]) {
            if (r == -ETIMEDOUT)
                fired = i;
        } else if (r >= 0 && slots::slot[i] == static_cast<std::size_t>(r)) {
            fired = i;
        } else {
            std::get<i>(refs).discard();
        }
    });
    cleanup.armed = false;

    each([&](auto i) {
        if (i != fired)
            return;
        if constexpr (slots::timeout[i])
            std::get<i>(refs).fire();
        else
            std::get<i>(refs).fire(cs[slots::slot[i]].result);
    });
    return fired;
}

} // namespace fern

template <> struct std::hash<fern::thread_id> {
    std::size_t operator()(fern::thread_id id) const noexcept { return std::hash<uint64_t>{}(id.value()); }
};

#endif /* C++20 */
#endif /* FERN_FERN_HPP */
