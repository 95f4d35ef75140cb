// SPDX-License-Identifier: MIT
/*
 * fern/cxx/thread.hpp — part of fern.hpp:
 * green threads: fern::attr, fern::thread_id, fern::thread, fern::jthread,
 * fern::spawn, fern::go, fern::this_thread.
 *
 * Programs include <fern/fern.hpp>, which includes every part; its opening
 * comment (model, errors, time) applies here. A part included on its own
 * is an error, so the C++20 check there stays the one place that reports.
 */
#ifndef FERN_CXX_THREAD_HPP
#define FERN_CXX_THREAD_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/thread.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

#include <fern/cxx/base.hpp>
#include <fern/cxx/stop.hpp>

namespace fern {

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

// Shared by the fern::thread handle, the green thread and its stop tokens
// (stop_state: the references, the last of which deletes it; the handle's
// goes at join/detach, the thread's at exit).
template <class R> struct thread_state : stop_state {
    std::exception_ptr error;
    result_box<R> result;

    virtual void run() noexcept = 0;

    static void release(thread_state *s) noexcept { stop_state::release(s); }
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

    /* Ask the thread to stop (fern_cancel, docs/cancellation.md): the fern
     * wait it is parked in, and every one it starts afterwards, throws
     * std::system_error with std::errc::operation_canceled (returns
     * ECANCELED in C); its tokens say stop_requested(). Returns false if
     * not joinable (nothing to stop), else true. */
    bool request_stop() noexcept
    {
        if (!t_)
            return false;
        s_->stop.store(true, std::memory_order_release);
        fern_cancel(t_);
        return true;
    }

    /* A token that tells whether request_stop was called; a token without
     * a thread if not joinable. */
    stop_token get_stop_token() const noexcept { return s_ ? stop_token(s_) : stop_token(); }

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

/* A fern::thread that joins when destroyed, as std::jthread: its destructor
 * (and move assignment over a joinable one) calls request_stop() and then
 * join(), whose result is discarded; an exception that escaped the body
 * then calls std::terminate() (call join() to receive it). A callable that
 * takes a fern::stop_token first gets the thread's. */
template <class R> class jthread : public thread<R> {
  public:
    using thread<R>::thread;
    jthread() noexcept = default;
    jthread(thread<R> &&t) noexcept : thread<R>(std::move(t)) {}
    jthread(jthread &&) noexcept = default;
    jthread &operator=(jthread &&o) noexcept
    {
        stop_and_join();
        thread<R>::operator=(std::move(o));
        return *this;
    }
    ~jthread() { stop_and_join(); }

  private:
    void stop_and_join() noexcept
    {
        if (this->joinable()) {
            this->request_stop();
            this->join();
        }
    }
};

template <class F, class... Args>
    requires detail::spawnable<F, Args...> && (!std::is_same_v<std::remove_cvref_t<F>, attr>)
jthread(F &&, Args &&...) -> jthread<typename detail::spawn_result<F, Args...>::type>;
template <class F, class... Args>
    requires detail::spawnable<F, Args...>
jthread(const attr &, F &&, Args &&...) -> jthread<typename detail::spawn_result<F, Args...>::type>;

/* Spawn f(args...) as a fern::jthread; if f can be called with a
 * fern::stop_token first, it receives the thread's. Throws as spawn. */
template <class F, class... Args>
    requires detail::spawnable<F, Args...> || std::is_invocable_v<std::decay_t<F>, stop_token, std::decay_t<Args>...>
[[nodiscard]] auto spawn_joining(F &&f, Args &&...args)
{
    if constexpr (std::is_invocable_v<std::decay_t<F>, stop_token, std::decay_t<Args>...>) {
        // The token is the thread's own, which exists once the thread does:
        // the new thread yields until the spawner has handed it over.
        using R = detail::thread_result_t<
            std::invoke_result_t<std::decay_t<F>, stop_token, std::decay_t<Args>...>>;
        auto slot = std::make_shared<std::atomic<stop_token *>>(nullptr);
        auto body = [slot, g = std::decay_t<F>(std::forward<F>(f))](std::decay_t<Args>... a) mutable -> R {
            stop_token *st;
            while (!(st = slot->load(std::memory_order_acquire)))
                fern_yield();
            stop_token mine = *st;
            delete st;
            return std::invoke(std::move(g), std::move(mine), std::move(a)...);
        };
        jthread<R> t(thread<R>(std::move(body), std::forward<Args>(args)...));
        slot->store(new stop_token(t.get_stop_token()), std::memory_order_release);
        return t;
    } else {
        return jthread<detail::spawn_result_t<F, Args...>>(
            spawn(std::forward<F>(f), std::forward<Args>(args)...));
    }
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

} // namespace fern

template <> struct std::hash<fern::thread_id> {
    std::size_t operator()(fern::thread_id id) const noexcept { return std::hash<uint64_t>{}(id.value()); }
};

#endif /* FERN_CXX_THREAD_HPP */
