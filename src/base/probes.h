/* SPDX-License-Identifier: MIT */
/*
 * USDT probes (provider "fern"), for perf probe, bpftrace, systemtap, gdb.
 *
 *   fern:spawn   (id, name)          a thread was created
 *   fern:switch  (from id, to id)    a worker changes threads; id 0 is the
 *                                    worker's idle context
 *   fern:park    (id, what)          a thread stops running: `what` says
 *                                    on what (as in fern_dump), NULL for a
 *                                    yield-like stop
 *   fern:wake    (id)                a parked thread was made runnable
 *   fern:exit    (id)                a thread finished
 *   fern:steal   (id, thief, victim) a worker took a runnable thread from
 *                                    another (worker indices in the cluster)
 *
 * An unused probe is one nop plus its notes entry; its arguments are named
 * as operands (registers or memory the code already holds), never computed
 * for the probe alone. Built without sys/sdt.h, they vanish.
 */
#ifndef FERN_PROBES_H
#define FERN_PROBES_H

#ifdef FERN_USDT
#include <sys/sdt.h>
#define PROBE1(name, a)       DTRACE_PROBE1(fern, name, a)
#define PROBE2(name, a, b)    DTRACE_PROBE2(fern, name, a, b)
#define PROBE3(name, a, b, c) DTRACE_PROBE3(fern, name, a, b, c)
#else
#define PROBE1(name, a)       ((void)0)
#define PROBE2(name, a, b)    ((void)0)
#define PROBE3(name, a, b, c) ((void)0)
#endif

#endif
