// SPDX-License-Identifier: MIT
/*
 * fern/cxx/select.hpp — part of fern.hpp:
 * fern::select and its cases (recv_case, send_case, readable_case,
 * writable_case, deadline_case, tick_case, timeout, timeout_at,
 * default_case), and fern::ticker.
 *
 * Programs include <fern/fern.hpp>, which includes every part; its opening
 * comment (model, errors, time) applies here. A part included on its own
 * is an error, so the C++20 check there stays the one place that reports.
 */
#ifndef FERN_CXX_SELECT_HPP
#define FERN_CXX_SELECT_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/select.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

#include <fern/cxx/chan.hpp>

namespace fern {

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
 *   fern::readable_case(fd, f) fd is readable (or hung up, or in error), as
 *   fern::writable_case(fd, f) poll(2) says / writable; f() then reads or
 *                              writes (the case transfers nothing). An fd
 *                              that is not open, or is closed with
 *                              fern_close while select waits, throws
 *                              std::system_error EBADF. The fd is made
 *                              O_NONBLOCK and registered as by every fern_*
 *                              I/O call (close it with fern_close).
 *   fern::deadline_case(d, f)  fires once d has passed (or the time point
 *   fern::deadline_case(tp, f) tp): a case of its own with its own index,
 *                              as Go's time.After; any number of them.
 *   fern::tick_case(t, f)      takes a tick of fern::ticker t; f(n) gets the
 *                              number of ticks since the one taken last (1
 *                              when keeping up; ticks are dropped, not
 *                              queued, for a slow taker), or f() takes none.
 *   fern::timeout(d, f)        fires if nothing else was ready within d
 *   fern::timeout_at(tp, f)    ... by the time point tp
 *   fern::default_case(f)      fires at once if nothing else is ready
 *                              (non-blocking select)
 * At most one of timeout / timeout_at / default_case; at most FERN_SELECT_MAX
 * other cases. Values, handlers and v are held by reference until select
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
 * case that can ever fire and no timeout: it could never return), and
 * ECANCELED (std::errc::operation_canceled) when the calling green thread
 * is cancelled (fern_cancel) while it would wait.
 *
 * A handler waiting for a socket, a control channel and a deadline at once:
 *
 *     auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
 *     switch (fern::select(fern::readable_case(fd, [] {}),
 *                          fern::recv_case(control, [&](std::optional<int> cmd) { ... }),
 *                          fern::deadline_case(until, [] {}))) {
 *     case 0: ... fern_read(fd, ...) ...; break;
 *     ...
 *     }
 *
 * fern::ticker (fern_ticker) ticks every period: ticker(period) starts it
 * (first tick a period from now; std::system_error EINVAL if period <= 0),
 * wait() takes the next tick (returns the tick count as tick_case does),
 * wait_for(d) / wait_until(tp) likewise or 0 if none came in time, reset(p)
 * restarts it with period p, stop() stops it until a reset. Destroying a
 * ticker that a thread waits on is a bug and aborts (as for channels). Not
 * copyable or movable.
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

template <class F> struct fd_case_t {
    int fd;
    fern_select_op op;
    F &&f;
    void prepare(fern_select_case &c)
    {
        c.fd = fd;
        c.op = op;
        c.elem = nullptr;
    }
    void fire(int result)
    {
        if (result)
            throw_errno(result, op == FERN_FD_READABLE ? "fern::select: readable_case"
                                                       : "fern::select: writable_case");
        std::invoke(std::forward<F>(f));
    }
    void discard() noexcept {}
};

template <class F> struct deadline_case_t {
    int64_t at;
    F &&f;
    void prepare(fern_select_case &c)
    {
        c.deadline = at;
        c.op = FERN_DEADLINE;
        c.elem = nullptr;
    }
    void fire(int) { std::invoke(std::forward<F>(f)); }
    void discard() noexcept {}
};

template <class F> struct tick_case_t {
    fern_ticker *t;
    F &&f;
    std::uint64_t ticks = 0;
    void prepare(fern_select_case &c)
    {
        c.ticker = t;
        c.op = FERN_TICK;
        c.elem = &ticks;
    }
    void fire(int)
    {
        if constexpr (std::is_invocable_v<F, std::uint64_t>)
            std::invoke(std::forward<F>(f), ticks);
        else
            std::invoke(std::forward<F>(f));
    }
    void discard() noexcept {}
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

/* A periodic timer for fern::select's tick_case and for waiting on it
 * alone (see above). */
class ticker {
  public:
    template <class Rep, class Period> explicit ticker(const std::chrono::duration<Rep, Period> &period)
    {
        detail::check(fern_ticker_create(&t_, detail::to_ns(period)), "fern::ticker");
    }
    ~ticker()
    {
        if (fern_ticker_destroy(t_) != 0) {
            std::fputs("fern::ticker destroyed while threads wait on it\n", stderr);
            std::abort();
        }
    }
    ticker(const ticker &) = delete;
    ticker &operator=(const ticker &) = delete;

    template <class Rep, class Period> void reset(const std::chrono::duration<Rep, Period> &period)
    {
        detail::check(fern_ticker_reset(t_, detail::to_ns(period)), "fern::ticker::reset");
    }
    void stop() noexcept { fern_ticker_stop(t_); }
    /* The next tick's count (>= 1). */
    std::uint64_t wait() { return take(FERN_FOREVER); }
    /* As wait(); 0 if no tick came in time. */
    template <class Rep, class Period> std::uint64_t wait_for(const std::chrono::duration<Rep, Period> &d)
    {
        return take(detail::deadline_after(d));
    }
    template <class Clock, class Dur> std::uint64_t wait_until(const std::chrono::time_point<Clock, Dur> &tp)
    {
        return take(detail::deadline_at(tp));
    }
    fern_ticker *native_handle() const noexcept { return t_; }

  private:
    std::uint64_t take(int64_t deadline)
    {
        std::uint64_t n = 0;
        int e = fern_ticker_wait(t_, &n, deadline);
        if (e == ETIMEDOUT)
            return 0;
        detail::check(e, "fern::ticker::wait");
        return n;
    }
    fern_ticker *t_ = nullptr;
};

/* Descriptor cases for fern::select (see above). */
template <class F = detail::noop> detail::fd_case_t<F> readable_case(int fd, F &&f = F())
{
    return {fd, FERN_FD_READABLE, std::forward<F>(f)};
}
template <class F = detail::noop> detail::fd_case_t<F> writable_case(int fd, F &&f = F())
{
    return {fd, FERN_FD_WRITABLE, std::forward<F>(f)};
}

/* A deadline case for fern::select (see above): after d, or at tp. */
template <class Rep, class Period, class F = detail::noop>
detail::deadline_case_t<F> deadline_case(const std::chrono::duration<Rep, Period> &d, F &&f = F())
{
    return {detail::deadline_after(d), std::forward<F>(f)};
}
template <class Clock, class Dur, class F = detail::noop>
detail::deadline_case_t<F> deadline_case(const std::chrono::time_point<Clock, Dur> &tp, F &&f = F())
{
    return {detail::deadline_at(tp), std::forward<F>(f)};
}

/* A tick case for fern::select (see above). */
template <class F = detail::noop> detail::tick_case_t<F> tick_case(ticker &t, F &&f = F())
{
    return {t.native_handle(), std::forward<F>(f)};
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
    static_assert(nchans <= FERN_SELECT_MAX, "fern::select: too many cases");
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

#endif /* FERN_CXX_SELECT_HPP */
