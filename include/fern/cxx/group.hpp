// SPDX-License-Identifier: MIT
/*
 * fern/cxx/group.hpp — part of fern.hpp:
 * fern::group, structured concurrency over fern_group (docs/cancellation.md).
 *
 * Programs include <fern/fern.hpp>, which includes every part; its opening
 * comment (model, errors, time) applies here. A part included on its own
 * is an error, so the C++20 check there stays the one place that reports.
 */
#ifndef FERN_CXX_GROUP_HPP
#define FERN_CXX_GROUP_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/group.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

#include <fern/cxx/thread.hpp>

namespace fern {

/* A group of green threads that cannot outlive it: the destructor waits
 * for every member (cancelling them first if the group's scope is left by
 * an exception). A member that throws has failed: with fail_fast the group
 * is cancelled by the first failure, and wait() rethrows the first
 * exception a member threw (any group). A member stopped by the group's
 * cancel throws std::system_error operation_canceled from its fern wait;
 * that does not count as a failure once the group is cancelled. Subgroups
 * (a parent given) are cancelled with their parent and waited for by its
 * wait(). Not copyable or movable (members refer to it). */
class group {
  public:
    struct fail_fast_t {};
    static constexpr fail_fast_t fail_fast{};

    /* Throws std::system_error: ENOMEM, or EINVAL if parent is being
     * destroyed. */
    explicit group(group *parent = nullptr) { create(parent, 0); }
    explicit group(fail_fast_t, group *parent = nullptr) { create(parent, FERN_GROUP_FAILFAST); }
    group(const group &) = delete;
    group &operator=(const group &) = delete;

    /* Waits for the members (cancelled first while an exception unwinds
     * the scope), then frees the group; what the wait would throw is
     * dropped. Destroy subgroups first (they are members of its scope). */
    ~group()
    {
        if (std::uncaught_exceptions() > unwinding_)
            fern_group_cancel(g_);
        {
            cancel_shield keep; // the destructor must wait, cancelled or not
            fern_group_wait(g_);
        }
        fern_group_destroy(g_);
    }

    /* Run f(args...) as a member (decayed copies, as fern::go). An
     * exception it throws is the member's failure. Throws
     * std::system_error as fern_group_spawn. */
    template <class F, class... Args>
        requires detail::spawnable<F, Args...>
    void spawn(F &&f, Args &&...args) { spawn(attr{}, std::forward<F>(f), std::forward<Args>(args)...); }

    template <class F, class... Args>
        requires detail::spawnable<F, Args...>
    void spawn(const attr &options, F &&f, Args &&...args)
    {
        auto *b = new body<std::decay_t<F>, std::decay_t<Args>...>{
            this, {std::forward<F>(f), std::forward<Args>(args)...}};
        fern_attr a = detail::to_c_attr(options, true);
        int rc = fern_group_spawn(g_, nullptr, &a, &body<std::decay_t<F>, std::decay_t<Args>...>::entry, b);
        if (rc != 0) {
            delete b;
            detail::throw_errno(rc, "fern::group::spawn");
        }
    }

    /* Cancel every member and subgroup (fern_group_cancel). */
    void cancel() noexcept { fern_group_cancel(g_); }

    /* Cancel the group at tp, or after d (fern_group_set_deadline). Throws
     * std::system_error EBUSY if it has a deadline already. */
    template <class Clock, class Dur> void cancel_at(const std::chrono::time_point<Clock, Dur> &tp)
    {
        detail::check(fern_group_set_deadline(g_, detail::deadline_at(tp)), "fern::group::cancel_at");
    }
    template <class Rep, class Period> void cancel_after(const std::chrono::duration<Rep, Period> &d)
    {
        detail::check(fern_group_set_deadline(g_, detail::deadline_after(d)), "fern::group::cancel_after");
    }

    /* Wait until every member (subgroups' too) has ended. Rethrows the
     * first exception a member threw; throws std::system_error timed_out
     * if the deadline cancelled the group, operation_canceled if the
     * caller was cancelled (the members have ended by then too). */
    void wait()
    {
        int rc = fern_group_wait(g_);
        std::exception_ptr e;
        {
            std::lock_guard<std::mutex> l(first_mu_);
            e = first_;
        }
        if (e)
            std::rethrow_exception(e);
        detail::check(rc, "fern::group::wait");
    }

    /* The C handle (valid while the group lives). */
    fern_group *native_handle() const noexcept { return g_; }

  private:
    template <class F, class... Args> struct body {
        group *g;
        std::tuple<F, Args...> call;
        static void *entry(void *p)
        {
            std::unique_ptr<body> self(static_cast<body *>(p));
            group *g = self->g;
            try {
                std::apply([](auto &&...a) { std::invoke(std::move(a)...); }, std::move(self->call));
                return nullptr;
            } catch (const std::system_error &e) {
                // Stopped by the group's (or the thread's) cancel: an end,
                // not a failure.
                if (e.code() == std::errc::operation_canceled && fern_cancelled())
                    return nullptr;
                g->keep(std::current_exception());
                return (void *)(intptr_t)(e.code().value() ? e.code().value() : EIO);
            } catch (...) {
                g->keep(std::current_exception());
                return (void *)(intptr_t)EIO; // the C group's failure value
            }
        }
    };

    void create(group *parent, unsigned flags)
    {
        unwinding_ = std::uncaught_exceptions();
        detail::check(fern_group_create(&g_, parent ? parent->g_ : nullptr, flags), "fern::group");
    }
    void keep(std::exception_ptr e)
    {
        std::lock_guard<std::mutex> l(first_mu_);
        if (!first_)
            first_ = std::move(e);
    }

    fern_group *g_ = nullptr;
    int unwinding_ = 0;
    std::mutex first_mu_; // a plain std::mutex: held for a pointer copy only
    std::exception_ptr first_;
};

} // namespace fern

#endif /* FERN_CXX_GROUP_HPP */
