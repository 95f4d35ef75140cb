// SPDX-License-Identifier: MIT
// Long run of the preemption producer/consumer (tests/preempt_prodcons.h):
// two million items per run (two runs) with a 100 us slice, one and two workers.
#include "../preempt_prodcons.h"

using namespace fern_test;

TEST(PreemptStress, ProdConsOneWorker) { run_preempt_prodcons(scaled(2000000, 20000) & ~1L, 1); }
TEST(PreemptStress, ProdConsTwoWorkers) { run_preempt_prodcons(scaled(2000000, 20000) & ~1L, 2); }
