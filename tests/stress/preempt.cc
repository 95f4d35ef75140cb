// SPDX-License-Identifier: MIT
// Long run of the preemption producer/consumer (tests/preempt_prodcons.h):
// half a million items per run (two runs) with a 100 us slice, one and two
// workers (about one preemption per ten items: a spinner shares each worker).
#include "../preempt_prodcons.h"

using namespace fern_test;

TEST(PreemptStress, ProdConsOneWorker) { run_preempt_prodcons(scaled(500000, 20000) & ~1L, 1); }
TEST(PreemptStress, ProdConsTwoWorkers) { run_preempt_prodcons(scaled(500000, 20000) & ~1L, 2); }
