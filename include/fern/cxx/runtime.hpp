// SPDX-License-Identifier: MIT
/*
 * fern/cxx/runtime.hpp — part of fern.hpp: the runtime: fern::init, fern::shutdown.
 *
 * Programs include <fern/fern.hpp>, which includes every part; its opening
 * comment (model, errors, time) applies here. A part included on its own
 * is an error, so the C++20 check there stays the one place that reports.
 */
#ifndef FERN_CXX_RUNTIME_HPP
#define FERN_CXX_RUNTIME_HPP

#ifndef FERN_FERN_HPP
#error "<fern/cxx/runtime.hpp> is a part of <fern/fern.hpp>: include <fern/fern.hpp>"
#endif

#include <fern/cxx/base.hpp>

namespace fern {

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

} // namespace fern

#endif /* FERN_CXX_RUNTIME_HPP */
