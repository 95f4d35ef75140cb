/* SPDX-License-Identifier: MIT */
/*
 * thread/: green threads' lifecycle (thread.c): descriptors and their
 * allocator, spawn, exit, join, detach, names, thread-local keys, and the
 * registry walked by fern_dump and the deadlock detector. For watch/,
 * runtime/ and debug/.
 */
#ifndef FERN_THREAD_H
#define FERN_THREAD_H

#include "sync/sync.h"

fern_thread *thread_alloc(struct worker *w);
void thread_free(struct worker *w, fern_thread *t);
void threads_fini(uint64_t *abandoned);
void keys_run_dtors(struct keyval **vals);

int fern_join_body(fern_thread *t, void **ret);
/* Shutdown (cancel.c): cancel every thread that has not finished and is not
 * cancelled yet; returns how many have not finished. */
unsigned threads_cancel_all(void);
/* The canceller's steps (cancel.c): set t's request (true if this call set
 * it), the barrier between the requests and the looks at the waits (one
 * for a batch), claim t's cancellable wait if any; cancel_many does all
 * three for n threads with one barrier. cancel_fence_mode: the cfence of
 * a new descriptor. */
bool cancel_request(fern_thread *t);
void cancel_barrier(void);
void cancel_claim(fern_thread *t);
void cancel_many(fern_thread *const *v, size_t n);
uint8_t cancel_fence_mode(void);
/* One line per thread that has not finished (at most max, then a count);
 * returns how many. */
unsigned threads_report_unfinished(FILE *f, unsigned max);
/* fn(t) for every live thread (under the descriptor lock). */
void threads_walk(void (*fn)(fern_thread *t, void *arg), void *arg);
/* Call fn on up to `max` descriptor slots' live threads from *cur on, without
 * the registry's lock (fn must expect threads that come and go); true once
 * the walk is over (*cur then starts a new one). Monitor only. */
struct thread_cursor {
    struct thread_chunk *chunk;
    unsigned i;
};
bool threads_scan(struct thread_cursor *cur, unsigned max, void (*fn)(fern_thread *t));
int threads_dump(FILE *f);

#endif
