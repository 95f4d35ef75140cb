// SPDX-License-Identifier: MIT
/*
 * fern/cxx/chan.hpp — part of fern.hpp: channels: fern::channel<T>, fern::chan_status.
 *
 * Programs include <fern/fern.hpp>, which includes every part; its opening
 * comment (model, errors, time) applies here. A part included on its own
 * is an error, so the C++20 check there stays the one place that reports.
 */
#ifndef FERN_CXX_CHAN_HPP
#define FERN_CXX_CHAN_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/chan.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

#include <fern/cxx/base.hpp>

namespace fern {

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

} // namespace fern

#endif /* FERN_CXX_CHAN_HPP */
