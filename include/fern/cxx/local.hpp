// SPDX-License-Identifier: MIT
/*
 * fern/cxx/local.hpp — part of fern.hpp: green-thread-local storage: fern::thread_local_ptr.
 *
 * Programs include <fern/fern.hpp>, which includes every part; its opening
 * comment (model, errors, time) applies here. A part included on its own
 * is an error, so the C++20 check there stays the one place that reports.
 */
#ifndef FERN_CXX_LOCAL_HPP
#define FERN_CXX_LOCAL_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/local.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

#include <fern/cxx/base.hpp>

namespace fern {

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

} // namespace fern

#endif /* FERN_CXX_LOCAL_HPP */
