/* SPDX-License-Identifier: MIT */
/*
 * conn: one connection's buffers and its loop.
 *
 * Input: a fixed buffer of MC_IN_CAP bytes; the unread part is
 * in[in_off, in_len). A command line must fit in it (an ASCII line longer
 * than the buffer closes the connection). A value is never required to fit:
 * mc_read_exact copies what is buffered and receives the rest straight into
 * the item, so a 1 MiB set costs no buffer growth.
 *
 * Output: answers are appended to a fixed buffer and written when it is
 * full, when a large value goes out directly from its item, and before any
 * read that may wait. The last rule is what makes pipelining cheap (the
 * answers to a batch leave in one write) and deadlock-free (a client that
 * sends, then waits for answers before sending more, always gets them).
 *
 * Protocol: fixed per connection by its first byte (0x80 = binary), as
 * memcached does.
 */
#include "memcached.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define DIRECT_MIN (MC_OUT_CAP / 2) /* larger output blocks skip the buffer */

static bool send_all(struct mc_conn *c, const char *p, size_t n)
{
    size_t total = n;
    while (n) {
        ssize_t w = fern_send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            c->failed = true;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    __atomic_fetch_add(&mc_conn_stats.bytes_written, total, __ATOMIC_RELAXED);
    return true;
}

bool mc_out_flush(struct mc_conn *c)
{
    if (c->failed)
        return false;
    if (c->out_len == 0)
        return true;
    bool ok = send_all(c, c->out, c->out_len);
    c->out_len = 0;
    return ok;
}

char *mc_out_reserve(struct mc_conn *c, size_t n)
{
    if (c->out_len + n > MC_OUT_CAP && !mc_out_flush(c))
        return NULL;
    if (c->failed)
        return NULL;
    return c->out + c->out_len;
}

bool mc_out(struct mc_conn *c, const void *p, size_t n)
{
    if (n >= DIRECT_MIN)
        return mc_out_flush(c) && send_all(c, p, n);
    char *dst = mc_out_reserve(c, n);
    if (!dst)
        return false;
    memcpy(dst, p, n);
    c->out_len += n;
    return true;
}

/* Receive into p (at most n bytes), flushing answers first. false on end of
 * input or an error. */
static ssize_t recv_some(struct mc_conn *c, char *p, size_t n)
{
    if (!mc_out_flush(c))
        return -1;
    for (;;) {
        ssize_t r = fern_recv(c->fd, p, n, 0);
        if (r > 0) {
            __atomic_fetch_add(&mc_conn_stats.bytes_read, (uint64_t)r, __ATOMIC_RELAXED);
            return r;
        }
        if (r < 0 && errno == EINTR)
            continue;
        c->failed = true;
        return -1;
    }
}

/* Move unread input to the front and receive more behind it. */
static bool fill(struct mc_conn *c)
{
    if (c->in_off) {
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->in_off = 0;
    }
    if (c->in_len == MC_IN_CAP)
        return false; /* a full buffer the protocol could not use: give up */
    ssize_t r = recv_some(c, c->in + c->in_len, MC_IN_CAP - c->in_len);
    if (r < 0)
        return false;
    c->in_len += (size_t)r;
    return true;
}

bool mc_read_exact(struct mc_conn *c, void *dst, size_t n)
{
    char *d = dst;
    for (;;) {
        size_t have = c->in_len - c->in_off, take = have < n ? have : n;
        memcpy(d, c->in + c->in_off, take);
        c->in_off += take;
        d += take;
        n -= take;
        if (n == 0)
            return true;
        /* The buffer is empty. A large rest goes straight to its place; a
         * small one through the buffer, which may also bring the commands
         * that follow. */
        if (n >= MC_IN_CAP / 2) {
            ssize_t r = recv_some(c, d, n);
            if (r < 0)
                return false;
            d += r;
            n -= (size_t)r;
            if (n == 0)
                return true;
        } else if (!fill(c)) {
            return false;
        }
    }
}

bool mc_skip(struct mc_conn *c, uint64_t n)
{
    for (;;) {
        size_t have = c->in_len - c->in_off;
        size_t take = have < n ? have : (size_t)n;
        c->in_off += take;
        n -= take;
        if (n == 0)
            return true;
        if (!fill(c))
            return false;
    }
}

void mc_serve(int fd)
{
    struct mc_conn c = {.fd = fd};
    c.in = malloc(MC_IN_CAP);
    c.out = malloc(MC_OUT_CAP);
    if (!c.in || !c.out) {
        free(c.in);
        free(c.out);
        return;
    }
    if (__atomic_load_n(&mc_verbose, __ATOMIC_RELAXED) > 1)
        fprintf(stderr, "<%d new client connection\n", fd);
    bool first = true;
    for (;;) {
        int r = 0;
        while (c.in_off < c.in_len) {
            if (first) {
                c.binary = (uint8_t)c.in[c.in_off] == MC_BIN_REQ_MAGIC;
                first = false;
            }
            r = c.binary ? mc_binary_step(&c) : mc_ascii_step(&c);
            if (r <= 0 || c.failed)
                break;
        }
        if (r < 0 || c.failed || !fill(&c))
            break;
    }
    mc_out_flush(&c);
    if (__atomic_load_n(&mc_verbose, __ATOMIC_RELAXED) > 1)
        fprintf(stderr, "<%d connection closed\n", fd);
    free(c.in);
    free(c.out);
}
