// SPDX-License-Identifier: MIT
/*
 * fern/cxx/base.hpp — part of fern.hpp:
 * internals shared by every part: <fern/fern.h>, the standard headers the
 * parts use, and detail:: errors (errno to std::system_error) and time
 * conversion (durations and time points to fern deadlines).
 *
 * Programs include <fern/fern.hpp>, which includes every part; its opening
 * comment (model, errors, time) applies here. A part included on its own
 * is an error, so the C++20 check there stays the one place that reports.
 */
#ifndef FERN_CXX_BASE_HPP
#define FERN_CXX_BASE_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/base.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

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

} // namespace fern

#endif /* FERN_CXX_BASE_HPP */
