/* SPDX-License-Identifier: MIT */
/*
 * The thread queue (struct tqueue, worker.h): a FIFO of runnable threads
 * linked through t->link, under a spin lock. A worker's pinned list is one
 * (preempted threads, resumed where they were interrupted); the inbox's
 * overflow list uses tlist_append.
 */
#ifndef FERN_SCHED_TQUEUE_H
#define FERN_SCHED_TQUEUE_H

#include "sched/worker.h"


/* Append t to the list *head..*tail linked through t->link. */
static inline void tlist_append(fern_thread **head, fern_thread **tail, fern_thread *t)
{
    t->link = NULL;
    if (*tail)
        (*tail)->link = t;
    else
        *head = t;
    *tail = t;
}

static inline void tqueue_push(struct tqueue *q, fern_thread *t)
{
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    spin_lock(&q->lock);
    tlist_append(&q->head, &q->tail, t);
    STORE_RELAXED(&q->n, q->n + 1);
    spin_unlock(&q->lock);
}

static inline void tqueue_push_front(struct tqueue *q, fern_thread *t)
{
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    spin_lock(&q->lock);
    t->link = q->head;
    q->head = t;
    if (!q->tail)
        q->tail = t;
    STORE_RELAXED(&q->n, q->n + 1);
    spin_unlock(&q->lock);
}

static inline fern_thread *tqueue_pop(struct tqueue *q)
{
    if (tqueue_len(q) == 0)
        return NULL;
    spin_lock(&q->lock);
    fern_thread *t = q->head;
    if (t) {
        q->head = t->link;
        if (!q->head)
            q->tail = NULL;
        STORE_RELAXED(&q->n, q->n - 1);
    }
    spin_unlock(&q->lock);
    return t;
}

/* Empty q; returns its list (NULL if empty), *tail and *n set. */
static inline fern_thread *tqueue_take(struct tqueue *q, fern_thread **tail, uint32_t *n)
{
    spin_lock(&q->lock);
    fern_thread *head = q->head;
    *tail = q->tail;
    *n = q->n;
    q->head = q->tail = NULL;
    STORE_RELAXED(&q->n, 0);
    spin_unlock(&q->lock);
    return head;
}

#endif
