/* SPDX-License-Identifier: MIT */
/*
 * fern-memcached: a memcached-compatible cache server on fern green threads.
 *
 * One green thread per connection, written as plain blocking code: read a
 * command, run it against the store, append the answer, and write the
 * answers out once no complete command is left in the input (so pipelined
 * commands leave in one write). The pieces, one file each:
 *
 *   cmdline.c  memcached's flags, the open-file limit
 *   store.c    items, hash table, LRU, memory accounting, expiry, CAS
 *   ascii.c    the ASCII protocol (parsing in ascii_parse.c)
 *   binary.c   the binary protocol (framing in binary_parse.c)
 *   conn.c     a connection's buffers and its loop
 *   stats.c    counters and the `stats` answers
 *   main.c     listening, accepting, stopping
 *
 * Threads: the store is shared by every connection on every worker and
 * guarded by one fern mutex (store.c explains why one lock is enough);
 * connection-level counters are atomics.
 */
#ifndef FERN_MC_MEMCACHED_H
#define FERN_MC_MEMCACHED_H

#include "ascii_parse.h"
#include "binary_parse.h"

#include <fern/fern.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_VERSION "1.6.0-fern"

/* ---- cmdline.c ---- */

struct mc_config {
    const char *addr;   /* -l, default 127.0.0.1 */
    int port;           /* -p, 0 = any free port */
    unsigned workers;   /* -t, 0 = one per CPU */
    uint64_t mem_limit; /* -m, bytes */
    unsigned maxconns;  /* -c */
    uint32_t item_max;  /* -I, bytes */
    int verbose;        /* -v count */
};

/* Parse memcached's flags; prints usage and exits on a bad one. */
void mc_config_parse(int argc, char **argv, struct mc_config *cfg);

/* Raise RLIMIT_NOFILE's soft limit to what maxconns connections need, or to
 * the hard limit if that is lower (then says so on stderr). */
void mc_raise_fd_limit(unsigned maxconns);

/* ---- store.c ---- */

typedef struct mc_item {
    struct mc_item *hnext;       /* hash chain */
    struct mc_item *prev, *next; /* LRU, most recent first */
    uint64_t cas;
    uint32_t exptime; /* unix seconds; 0 = never */
    uint32_t time;    /* unix seconds of the store (for delayed flush_all) */
    uint32_t flags;
    uint32_t nbytes; /* value length, without the "\r\n" kept after it */
    uint32_t hash;
    uint32_t refs; /* the store's reference while linked + readers' */
    uint8_t nkey;
    bool linked;
    bool active; /* read since it was stored or last passed the LRU tail (store.c) */
    char data[]; /* key, value, "\r\n" */
} mc_item;

static inline char *mc_item_value(mc_item *it)
{
    return it->data + it->nkey;
}

enum mc_result {
    MC_OK = 0,
    MC_STORED,
    MC_NOT_STORED,
    MC_EXISTS,
    MC_NOT_FOUND,
    MC_NON_NUMERIC,
    MC_TOO_LARGE,
    MC_NOMEM,
};

enum mc_store_op { MC_SET, MC_ADD, MC_REPLACE, MC_APPEND, MC_PREPEND, MC_CAS };

/* Counters kept under the store's lock (a snapshot is taken for stats). */
struct mc_store_counters {
    uint64_t cmd_get, cmd_set, cmd_flush, cmd_touch;
    uint64_t get_hits, get_misses, get_expired, get_flushed;
    uint64_t delete_hits, delete_misses, incr_hits, incr_misses, decr_hits, decr_misses;
    uint64_t cas_hits, cas_misses, cas_badval, touch_hits, touch_misses;
    uint64_t evictions, reclaimed, total_items;
    uint64_t curr_items, bytes; /* not reset by "stats reset" */
    uint64_t hash_buckets;
};

void mc_store_init(uint64_t mem_limit, uint32_t item_max);
void mc_store_destroy(void);

/* Unix time in seconds, as the store sees it. */
uint32_t mc_now(void);
/* memcached's exptime rule: 0 never, negative already past, up to 30 days
 * relative to now, beyond that an absolute unix time. */
uint32_t mc_exptime(int64_t raw);

/* A new, unlinked item holding the key and room for nbytes of value (the
 * "\r\n" after it is written here). Returns MC_OK and *out (one reference,
 * the caller's), MC_TOO_LARGE when it would exceed the -I limit, MC_NOMEM
 * when nothing more can be evicted. */
int mc_item_alloc(const char *key, size_t nkey, uint32_t flags, uint32_t exptime, uint32_t nbytes,
                  mc_item **out);
void mc_item_release(mc_item *it);

/* Store a complete item by op (cas_in is compared for MC_CAS, and for the
 * others when non-zero, as the binary protocol does). Returns MC_STORED,
 * MC_NOT_STORED, MC_EXISTS, MC_NOT_FOUND or MC_NOMEM (append/prepend);
 * *cas_out gets the stored item's CAS. The caller keeps its reference. */
int mc_store_item(mc_item *it, int op, uint64_t cas_in, uint64_t *cas_out);

/* Look up a live item and take a reference (NULL on a miss). touch: also set
 * its expiry to exptime (gat/gats/touch). Counts hits and misses. */
mc_item *mc_get(const char *key, size_t nkey, bool touch, uint32_t exptime);
/* Touch only: MC_OK or MC_NOT_FOUND. */
int mc_touch(const char *key, size_t nkey, uint32_t exptime);
/* Remove: MC_OK, MC_NOT_FOUND, or MC_EXISTS when cas_in is non-zero and
 * differs. */
int mc_delete(const char *key, size_t nkey, uint64_t cas_in);
/* Forget a key without counting (a failed set must not leave the old value). */
void mc_unlink_key(const char *key, size_t nkey);
/* incr/decr: 64-bit, incr wraps, decr stops at 0. A missing key gets
 * `initial` when create is set (binary protocol). Returns MC_OK with *value
 * and *cas, MC_NOT_FOUND, MC_NON_NUMERIC, MC_EXISTS (cas_in mismatch), or
 * MC_NOMEM. */
int mc_arith(const char *key, size_t nkey, bool incr, uint64_t delta, bool create, uint64_t initial,
             uint32_t exptime, uint64_t cas_in, uint64_t *value, uint64_t *cas);
/* flush_all: delay 0 drops every item now; otherwise items stored before
 * the (memcached-style) time mc_exptime(delay) disappear at that time. */
void mc_flush(int64_t delay);
void mc_store_snapshot(struct mc_store_counters *out);
void mc_store_reset_counters(void);
uint64_t mc_store_limit(void);
uint32_t mc_store_item_max(void);

/* ---- stats.c ---- */

struct mc_conn_counters {
    uint64_t curr_connections, total_connections, rejected_connections;
    uint64_t bytes_read, bytes_written;
};
extern struct mc_conn_counters mc_conn_stats; /* atomics (relaxed) */
extern int mc_verbose;                        /* -v, the verbosity command */
extern unsigned mc_maxconns, mc_workers;

void mc_stats_init(void);

/* One stats line: name and its value as text. */
struct mc_stat {
    const char *name;
    char value[40];
};
/* Fill out[] with the group `args` names ("" = general, "settings");
 * "reset" resets the counters and returns 0 with *reset set. Returns the
 * number of entries, or -1 for an unknown group. */
int mc_stats_collect(mc_span args, struct mc_stat *out, size_t max, bool *reset);
#define MC_STATS_MAX 64

/* ---- conn.c ---- */

#define MC_IN_CAP  16384u /* also the longest command line */
#define MC_OUT_CAP 16384u

struct mc_conn {
    int fd;
    bool binary; /* decided by the first byte of the connection */
    bool failed; /* a read or write failed: stop */
    char *in;    /* unread input is in[in_off, in_len) */
    size_t in_off, in_len;
    char *out;
    size_t out_len;
};

/* Append to the output, writing it out first when full; a large block is
 * sent directly. false if the connection failed. */
bool mc_out(struct mc_conn *c, const void *p, size_t n);
/* n (<= MC_OUT_CAP) bytes of output space to fill, then mc_out_commit. */
char *mc_out_reserve(struct mc_conn *c, size_t n);
static inline void mc_out_commit(struct mc_conn *c, size_t n)
{
    c->out_len += n;
}
bool mc_out_flush(struct mc_conn *c);
/* Consume exactly n input bytes into dst (n may exceed the buffer). */
bool mc_read_exact(struct mc_conn *c, void *dst, size_t n);
/* Consume and drop n input bytes. */
bool mc_skip(struct mc_conn *c, uint64_t n);

/* Serve one accepted connection until it ends (the caller closes fd). */
void mc_serve(int fd);

/* One protocol step on the buffered input: 1 a command was handled, 0 more
 * input is needed, -1 close the connection. */
int mc_ascii_step(struct mc_conn *c);
int mc_binary_step(struct mc_conn *c);

#endif
