/* SPDX-License-Identifier: MIT */
/*
 * What chan.c shares with fern_select (io/select.c): the channel's layout
 * and the two attempts made under its lock. They stay static inline so that
 * chan.c's own operations get them inlined exactly as before.
 */
#ifndef FERN_SYNC_CHAN_H
#define FERN_SYNC_CHAN_H

#include "sync/sync.h"

struct fern_chan {
    uint32_t lock;
    uint32_t bias_; /* see bias.c */
    uint32_t closed;
    size_t elem_size, cap;
    size_t head, count;
    fern_waitq recvq, sendq;
    char *buf;
};

static inline char *slot(fern_chan *ch, size_t i) { return ch->buf + (i % ch->cap) * ch->elem_size; }

/* Copy one element; the common small sizes without a call. */
static inline void elem_copy(fern_chan *ch, void *dst, const void *src)
{
    switch (ch->elem_size) {
    case 8:
        memcpy(dst, src, 8);
        break;
    case 4:
        memcpy(dst, src, 4);
        break;
    case 16:
        memcpy(dst, src, 16);
        break;
    default:
        memcpy(dst, src, ch->elem_size);
    }
}

static inline void copy_out(fern_chan *ch, void *dst, const void *src)
{
    if (dst)
        elem_copy(ch, dst, src);
}

/* Under the lock: try to send now. Returns 0 (sent), EPIPE (closed) or
 * EAGAIN (would wait). *wake is a claimed receiver to release after unlock. */
static inline __attribute__((always_inline)) int try_send_locked(fern_chan *ch, const void *elem, struct waiter **wake)
{
    if (ch->closed)
        return EPIPE;
    struct waiter *r = waitq_claim_one(&ch->recvq);
    if (r) {
        copy_out(ch, r->data, elem);
        *wake = r;
        return 0;
    }
    if (ch->count < ch->cap) {
        elem_copy(ch, slot(ch, ch->head + ch->count), elem);
        ch->count++;
        return 0;
    }
    return EAGAIN;
}

/* Under the lock: try to receive now. Returns 0, EPIPE (closed and drained)
 * or EAGAIN. *wake is a claimed sender to release after unlock. */
static inline __attribute__((always_inline)) int try_recv_locked(fern_chan *ch, void *elem, struct waiter **wake)
{
    if (ch->count > 0) {
        copy_out(ch, elem, slot(ch, ch->head));
        ch->head = (ch->head + 1) % ch->cap;
        ch->count--;
        struct waiter *s = waitq_claim_one(&ch->sendq);
        if (s) {
            elem_copy(ch, slot(ch, ch->head + ch->count), s->data);
            ch->count++;
            *wake = s;
        }
        return 0;
    }
    struct waiter *s = waitq_claim_one(&ch->sendq);
    if (s) {
        copy_out(ch, elem, s->data);
        *wake = s;
        return 0;
    }
    return ch->closed ? EPIPE : EAGAIN;
}

#endif
