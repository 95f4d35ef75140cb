/* SPDX-License-Identifier: MIT */
/*
 * runtime/: the top of the library, where every layer is started and
 * stopped in order.
 *   runtime.c  fern_init (explicit or implicit), fern_shutdown, the runtime
 *              record rt
 *   config.c   fern_config and the environment, checked and loaded
 */
#ifndef FERN_RUNTIME_H
#define FERN_RUNTIME_H

#include "debug/debug.h"
#include "io/io.h"

/* Check cfg and the environment; fill *out, or print one line on stderr
 * naming the bad setting and return EINVAL. */
int config_load(const fern_config *cfg, struct config *out);

#endif
