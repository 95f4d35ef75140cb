// SPDX-License-Identifier: MIT
/*
 * fern/cxx/stop.hpp — part of fern.hpp:
 * cancellation (docs/cancellation.md): fern::stop_token, fern::cancel_shield,
 * fern::this_thread::stop_requested.
 *
 * A stop request is fern_cancel: it wakes the thread from the fern wait it
 * is parked in and fails that wait and the ones after it with ECANCELED,
 * which the C++ calls throw as std::system_error with
 * std::errc::operation_canceled. A thread that computes asks its token (or
 * this_thread::stop_requested()) now and then.
 */
#ifndef FERN_CXX_STOP_HPP
#define FERN_CXX_STOP_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/stop.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

#include <fern/cxx/base.hpp>

namespace fern {

namespace detail {

// What a fern::thread's handle, the green thread and its stop tokens share:
// counted references (the last one deletes it) and the stop request, which
// outlives the thread (a token may be asked after the join).
struct stop_state {
    std::atomic<int> refs{2};
    std::atomic<bool> stop{false};
    virtual ~stop_state() = default;
    static void release(stop_state *s) noexcept
    {
        if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
            delete s;
    }
};

} // namespace detail

/* Whether a stop was requested of a fern::thread (request_stop), as
 * std::stop_token. Copyable, usable from any thread, valid after the
 * thread has ended. A default-constructed token has no thread:
 * stop_possible() is false. */
class stop_token {
  public:
    stop_token() noexcept = default;
    stop_token(const stop_token &o) noexcept : s_(o.s_)
    {
        if (s_)
            s_->refs.fetch_add(1, std::memory_order_relaxed);
    }
    stop_token(stop_token &&o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    stop_token &operator=(stop_token o) noexcept
    {
        std::swap(s_, o.s_);
        return *this;
    }
    ~stop_token()
    {
        if (s_)
            detail::stop_state::release(s_);
    }
    /* True once request_stop was called on the thread. */
    bool stop_requested() const noexcept { return s_ && s_->stop.load(std::memory_order_acquire); }
    /* True if the token belongs to a thread. */
    bool stop_possible() const noexcept { return s_ != nullptr; }
    friend bool operator==(const stop_token &a, const stop_token &b) noexcept { return a.s_ == b.s_; }

  private:
    template <class R> friend class thread;
    explicit stop_token(detail::stop_state *s) noexcept : s_(s)
    {
        s_->refs.fetch_add(1, std::memory_order_relaxed);
    }
    detail::stop_state *s_ = nullptr;
};

/* Shield the calling green thread's waits from its cancellation while it
 * lives (fern_cancel_shield): for cleanup that must wait. Nests; restores
 * the previous setting when destroyed. Does nothing on a plain thread. */
class cancel_shield {
  public:
    cancel_shield() noexcept : was_(fern_cancel_shield(1)) {}
    cancel_shield(const cancel_shield &) = delete;
    cancel_shield &operator=(const cancel_shield &) = delete;
    ~cancel_shield() { fern_cancel_shield(was_); }

  private:
    int was_;
};

namespace this_thread {

/* True if the calling green thread was cancelled (fern_cancelled: a
 * request_stop, a group's cancel, fern_shutdown); false on a plain thread. */
inline bool stop_requested() noexcept { return fern_cancelled() != 0; }

} // namespace this_thread

} // namespace fern

#endif /* FERN_CXX_STOP_HPP */
