/* SPDX-License-Identifier: MIT */
/*
 * store: the cache itself. Items, a chained hash table, one LRU list with
 * second chances, memory accounting against -m, expiry, CAS values,
 * flush_all.
 *
 * Model. An item is one malloc'd block: header, key, value, "\r\n" (kept so
 * an ASCII answer is one copy). Every item counts its whole block size
 * against the limit from the moment it is allocated (an in-flight set
 * counts: that memory is real) until it is freed. There are no slab classes:
 * malloc does the size classes, and the accounting is by bytes, so -m is
 * honoured whatever the value sizes (memcached's slabs can strand memory in
 * one class; this cannot, but pays malloc's own per-block overhead, which
 * the memory-per-item benchmark measures).
 *
 * Lifetime. refs counts the store's reference (while linked) plus one per
 * reader (a connection sending the value). Unlinking drops the store's
 * reference; the block is freed by whoever drops the last one, so a value
 * being written to a slow client is never freed under it. refs is atomic
 * because a reader releases without the lock.
 *
 * LRU with second chances. A store puts the item at the head of the list; a
 * read only sets its `active` mark (a byte in a header the read touches
 * anyway), instead of relinking it, which would write to both list
 * neighbours and the old head: two or three cache misses per get on a cache
 * larger than the CPU's, the price of a get's whole hash lookup again.
 * Eviction, walking from the tail, gives a marked item its second chance:
 * the mark is cleared and the item goes to the head, as if it had been read
 * just then. So an item read since it last passed the tail survives one
 * more trip through the list, which is the order memcached's own LRU (it
 * bumps an item at most once a minute, and moves active items out of its
 * cold queue when they reach the tail) keeps in spirit. The walk is
 * amortised: every mark it clears was set by one read.
 *
 * Expiry is lazy: an expired or flushed item is removed when a lookup finds
 * it, or when eviction reaches it at the LRU tail (counted as reclaimed,
 * not evicted). Eviction walks from the tail and skips items a reader holds,
 * at most EVICT_TRIES of them (second chances are not counted: each clears a
 * mark, so they are bounded by the item count), then gives up (SERVER_ERROR out of memory).
 *
 * Locking. One fern mutex guards everything but refs and `used`. Every
 * critical section is a few pointer operations and never parks (the socket
 * I/O happens outside with the item referenced), so with one worker it is
 * never contended, and with several it is held for well under a
 * microsecond; memcached's per-bucket locks would buy nothing measurable at
 * these core counts. The exceptions are flush_all 0, which unlinks every
 * item, and the hash table's doubling, which rehashes every item once; both
 * hold the lock for time proportional to the item count.
 */
#include "memcached.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INITIAL_BUCKETS 65536u
#define EVICT_TRIES     64
#define RELATIVE_MAX    (60 * 60 * 24 * 30) /* memcached's 30-day rule */

static struct {
    fern_mutex lock;
    mc_item **buckets;
    size_t mask; /* buckets - 1 */
    size_t count;
    mc_item *head, *tail; /* LRU: head most recently used */
    uint64_t used;        /* bytes of all allocated items (atomic) */
    uint64_t limit;
    uint32_t item_max;
    uint64_t next_cas;
    uint32_t flush_at; /* delayed flush_all time, 0 = none */
    struct mc_store_counters ctr;
} S;

uint32_t mc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (uint32_t)ts.tv_sec;
}

uint32_t mc_exptime(int64_t raw)
{
    if (raw == 0)
        return 0;
    if (raw < 0)
        return 1; /* long past */
    if (raw <= RELATIVE_MAX)
        return mc_now() + (uint32_t)raw;
    return raw > UINT32_MAX ? UINT32_MAX : (uint32_t)raw;
}

static uint32_t hash_key(const char *k, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, k, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        k += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, k, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    return (uint32_t)h;
}

static size_t item_size(size_t nkey, size_t nbytes)
{
    return sizeof(mc_item) + nkey + nbytes + 2;
}

static size_t size_of(const mc_item *it)
{
    return item_size(it->nkey, it->nbytes);
}

void mc_store_init(uint64_t mem_limit, uint32_t item_max)
{
    /* Items come from malloc, called on the workers. glibc gives each new
     * thread its own arena, grown a few pages at a time by mprotect: under
     * a stream of sets that was one mprotect per ~3 KiB stored (677 calls in
     * a 2 s memcaslap run). One arena grown 1 MiB at a time and trimmed only
     * past 16 MiB of free top makes growth rare; the workers are few, so
     * sharing the arena's lock costs little. Called before the workers
     * start, as mallopt must be. */
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_TOP_PAD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 16 << 20);
    fern_mutex_init(&S.lock);
    S.buckets = calloc(INITIAL_BUCKETS, sizeof *S.buckets);
    if (!S.buckets)
        abort();
    S.mask = INITIAL_BUCKETS - 1;
    S.limit = mem_limit;
    S.item_max = item_max;
    S.ctr.hash_buckets = INITIAL_BUCKETS;
}

void mc_store_destroy(void)
{
    for (mc_item *it = S.head, *next; it; it = next) {
        next = it->next;
        free(it);
    }
    free(S.buckets);
    fern_mutex_destroy(&S.lock);
    memset(&S, 0, sizeof S);
}

uint64_t mc_store_limit(void)
{
    return S.limit;
}

uint32_t mc_store_item_max(void)
{
    return S.item_max;
}

void mc_item_release(mc_item *it)
{
    if (__atomic_sub_fetch(&it->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        __atomic_fetch_sub(&S.used, size_of(it), __ATOMIC_RELAXED);
        free(it);
    }
}

static bool alive(const mc_item *it, uint32_t now)
{
    if (it->exptime && it->exptime <= now)
        return false;
    return !(S.flush_at && S.flush_at <= now && it->time < S.flush_at);
}

static void lru_remove(mc_item *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else
        S.head = it->next;
    if (it->next)
        it->next->prev = it->prev;
    else
        S.tail = it->prev;
}

static void lru_push(mc_item *it)
{
    it->prev = NULL;
    it->next = S.head;
    if (S.head)
        S.head->prev = it;
    else
        S.tail = it;
    S.head = it;
}

static void unlink_locked(mc_item *it)
{
    mc_item **pp = &S.buckets[it->hash & S.mask];
    while (*pp != it)
        pp = &(*pp)->hnext;
    *pp = it->hnext;
    lru_remove(it);
    it->linked = false;
    S.count--;
    S.ctr.curr_items--;
    S.ctr.bytes -= size_of(it);
    mc_item_release(it);
}

static void grow_locked(void)
{
    size_t n = (S.mask + 1) * 2;
    mc_item **b = calloc(n, sizeof *b);
    if (!b)
        return; /* keep the longer chains; still correct */
    for (size_t i = 0; i <= S.mask; i++)
        for (mc_item *it = S.buckets[i], *next; it; it = next) {
            next = it->hnext;
            it->hnext = b[it->hash & (n - 1)];
            b[it->hash & (n - 1)] = it;
        }
    free(S.buckets);
    S.buckets = b;
    S.mask = n - 1;
    S.ctr.hash_buckets = n;
}

static void link_locked(mc_item *it, uint32_t now)
{
    mc_item **b = &S.buckets[it->hash & S.mask];
    it->hnext = *b;
    *b = it;
    lru_push(it);
    it->linked = true;
    it->cas = ++S.next_cas;
    it->time = now;
    __atomic_fetch_add(&it->refs, 1, __ATOMIC_RELAXED);
    S.count++;
    S.ctr.curr_items++;
    S.ctr.total_items++;
    S.ctr.bytes += size_of(it);
    if (S.count > (S.mask + 1) + (S.mask + 1) / 2)
        grow_locked();
}

/* The live item for key, or NULL; a dead one found on the way is removed
 * and reported in *why (1 expired, 2 flushed). */
static mc_item *find_locked(const char *key, size_t nkey, uint32_t hash, uint32_t now, int *why)
{
    *why = 0;
    for (mc_item *it = S.buckets[hash & S.mask]; it; it = it->hnext) {
        if (it->hash != hash || it->nkey != nkey || memcmp(it->data, key, nkey) != 0)
            continue;
        if (alive(it, now))
            return it;
        *why = it->exptime && it->exptime <= now ? 1 : 2;
        unlink_locked(it);
        return NULL;
    }
    return NULL;
}

/* Make room for size bytes and count them as used. */
static bool reserve_locked(size_t size, uint32_t now)
{
    mc_item *it = S.tail;
    int tries = 0;
    while (it && tries < EVICT_TRIES && __atomic_load_n(&S.used, __ATOMIC_RELAXED) + size > S.limit) {
        mc_item *prev = it->prev;
        if (it->active && alive(it, now)) {
            /* Its second chance (header comment). Past the head the walk
             * starts again at the tail, now with this item's mark cleared:
             * a cache of marked items still makes room. */
            it->active = false;
            lru_remove(it);
            lru_push(it);
            if (!prev)
                prev = S.tail;
        } else {
            tries++;
            if (__atomic_load_n(&it->refs, __ATOMIC_ACQUIRE) == 1) {
                if (alive(it, now))
                    S.ctr.evictions++;
                else
                    S.ctr.reclaimed++;
                unlink_locked(it);
            }
        }
        it = prev;
    }
    if (__atomic_load_n(&S.used, __ATOMIC_RELAXED) + size > S.limit)
        return false;
    __atomic_fetch_add(&S.used, size, __ATOMIC_RELAXED);
    return true;
}

static mc_item *new_item_locked(const char *key, size_t nkey, uint32_t hash, uint32_t flags,
                                uint32_t exptime, uint32_t nbytes, uint32_t now)
{
    size_t size = item_size(nkey, nbytes);
    if (!reserve_locked(size, now))
        return NULL;
    mc_item *it = malloc(size);
    if (!it) {
        __atomic_fetch_sub(&S.used, size, __ATOMIC_RELAXED);
        return NULL;
    }
    it->hnext = it->prev = it->next = NULL;
    it->cas = 0;
    it->exptime = exptime;
    it->time = now;
    it->flags = flags;
    it->nbytes = nbytes;
    it->hash = hash;
    it->refs = 1;
    it->nkey = (uint8_t)nkey;
    it->linked = false;
    it->active = false;
    memcpy(it->data, key, nkey);
    memcpy(it->data + nkey + nbytes, "\r\n", 2);
    return it;
}

int mc_item_alloc(const char *key, size_t nkey, uint32_t flags, uint32_t exptime, uint32_t nbytes,
                  mc_item **out)
{
    if (item_size(nkey, nbytes) > S.item_max)
        return MC_TOO_LARGE;
    uint32_t hash = hash_key(key, nkey);
    uint32_t now = mc_now();
    fern_mutex_lock(&S.lock);
    mc_item *it = new_item_locked(key, nkey, hash, flags, exptime, nbytes, now);
    fern_mutex_unlock(&S.lock);
    *out = it;
    return it ? MC_OK : MC_NOMEM;
}

static void replace_locked(mc_item *old, mc_item *it, uint32_t now)
{
    if (old)
        unlink_locked(old);
    link_locked(it, now);
}

/* append/prepend: a new item holding both values, in place of old. */
static int concat_locked(mc_item *old, mc_item *it, bool append, uint32_t now)
{
    uint64_t n = (uint64_t)old->nbytes + it->nbytes;
    if (item_size(old->nkey, n) > S.item_max)
        return MC_NOT_STORED;
    /* Pinned, so that making room cannot evict the item being extended. */
    __atomic_fetch_add(&old->refs, 1, __ATOMIC_RELAXED);
    mc_item *both = new_item_locked(old->data, old->nkey, old->hash, old->flags, old->exptime,
                                    (uint32_t)n, now);
    mc_item_release(old);
    if (!both)
        return MC_NOMEM;
    mc_item *first = append ? old : it, *second = append ? it : old;
    memcpy(mc_item_value(both), mc_item_value(first), first->nbytes);
    memcpy(mc_item_value(both) + first->nbytes, mc_item_value(second), second->nbytes);
    replace_locked(old, both, now);
    it->cas = both->cas;
    mc_item_release(both);
    return MC_STORED;
}

int mc_store_item(mc_item *it, int op, uint64_t cas_in, uint64_t *cas_out)
{
    uint32_t now = mc_now();
    int why, r;
    fern_mutex_lock(&S.lock);
    S.ctr.cmd_set++;
    mc_item *old = find_locked(it->data, it->nkey, it->hash, now, &why);
    if (op == MC_CAS) {
        if (!old) {
            S.ctr.cas_misses++;
            r = MC_NOT_FOUND;
        } else if (old->cas != cas_in) {
            S.ctr.cas_badval++;
            r = MC_EXISTS;
        } else {
            S.ctr.cas_hits++;
            replace_locked(old, it, now);
            r = MC_STORED;
        }
    } else if (op == MC_ADD) {
        if (old) {
            old->active = true; /* as memcached: a failed add refreshes the item */
            r = MC_NOT_STORED;
        } else {
            replace_locked(NULL, it, now);
            r = MC_STORED;
        }
    } else if (cas_in && !old) {
        r = MC_NOT_FOUND;
    } else if (cas_in && old->cas != cas_in) {
        r = MC_EXISTS;
    } else if (op == MC_SET) {
        replace_locked(old, it, now);
        r = MC_STORED;
    } else if (!old) {
        r = MC_NOT_STORED; /* replace, append, prepend need an item */
    } else if (op == MC_REPLACE) {
        replace_locked(old, it, now);
        r = MC_STORED;
    } else {
        r = concat_locked(old, it, op == MC_APPEND, now);
    }
    *cas_out = it->cas;
    fern_mutex_unlock(&S.lock);
    return r;
}

mc_item *mc_get(const char *key, size_t nkey, bool touch, uint32_t exptime)
{
    uint32_t hash = hash_key(key, nkey), now = mc_now();
    int why;
    fern_mutex_lock(&S.lock);
    S.ctr.cmd_get++;
    if (touch)
        S.ctr.cmd_touch++;
    mc_item *it = find_locked(key, nkey, hash, now, &why);
    if (it) {
        __atomic_fetch_add(&it->refs, 1, __ATOMIC_RELAXED);
        it->active = true;
        if (touch) {
            it->exptime = exptime;
            S.ctr.touch_hits++;
        }
        S.ctr.get_hits++;
    } else {
        S.ctr.get_misses++;
        S.ctr.get_expired += why == 1;
        S.ctr.get_flushed += why == 2;
        if (touch)
            S.ctr.touch_misses++;
    }
    fern_mutex_unlock(&S.lock);
    return it;
}

int mc_touch(const char *key, size_t nkey, uint32_t exptime)
{
    uint32_t hash = hash_key(key, nkey), now = mc_now();
    int why;
    fern_mutex_lock(&S.lock);
    S.ctr.cmd_touch++;
    mc_item *it = find_locked(key, nkey, hash, now, &why);
    if (it) {
        it->exptime = exptime;
        S.ctr.touch_hits++;
    } else {
        S.ctr.touch_misses++;
    }
    fern_mutex_unlock(&S.lock);
    return it ? MC_OK : MC_NOT_FOUND;
}

int mc_delete(const char *key, size_t nkey, uint64_t cas_in)
{
    uint32_t hash = hash_key(key, nkey), now = mc_now();
    int why, r = MC_OK;
    fern_mutex_lock(&S.lock);
    mc_item *it = find_locked(key, nkey, hash, now, &why);
    if (!it) {
        S.ctr.delete_misses++;
        r = MC_NOT_FOUND;
    } else if (cas_in && it->cas != cas_in) {
        r = MC_EXISTS;
    } else {
        S.ctr.delete_hits++;
        unlink_locked(it);
    }
    fern_mutex_unlock(&S.lock);
    return r;
}

void mc_unlink_key(const char *key, size_t nkey)
{
    uint32_t hash = hash_key(key, nkey), now = mc_now();
    int why;
    fern_mutex_lock(&S.lock);
    mc_item *it = find_locked(key, nkey, hash, now, &why);
    if (it)
        unlink_locked(it);
    fern_mutex_unlock(&S.lock);
}

/* A counter value: 1 to 20 decimal digits within 64 bits; spaces around
 * them are allowed, as memcached's strtoull-based reading allows them. */
static bool parse_counter(const char *p, size_t n, uint64_t *v)
{
    while (n && *p == ' ')
        p++, n--;
    while (n && p[n - 1] == ' ')
        n--;
    if (n == 0 || n > 20)
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        unsigned d = (unsigned)(p[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    *v = x;
    return true;
}

static size_t format_u64(char *buf, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

/* Link a new item holding the decimal text of v in place of old (which may
 * be NULL), keeping old's flags and expiry. */
static mc_item *put_counter_locked(mc_item *old, const char *key, size_t nkey, uint32_t hash,
                                   uint32_t flags, uint32_t exptime, uint64_t v, uint32_t now)
{
    char digits[20];
    size_t n = format_u64(digits, v);
    if (old && old->nbytes == n && __atomic_load_n(&old->refs, __ATOMIC_ACQUIRE) == 1) {
        memcpy(mc_item_value(old), digits, n); /* nobody reads it: rewrite in place */
        old->cas = ++S.next_cas;
        return old;
    }
    if (old) /* pinned while room is made, as in concat_locked */
        __atomic_fetch_add(&old->refs, 1, __ATOMIC_RELAXED);
    mc_item *it = new_item_locked(key, nkey, hash, flags, exptime, (uint32_t)n, now);
    if (old)
        mc_item_release(old);
    if (!it)
        return NULL;
    memcpy(mc_item_value(it), digits, n);
    replace_locked(old, it, now);
    mc_item_release(it);
    return it;
}

int mc_arith(const char *key, size_t nkey, bool incr, uint64_t delta, bool create, uint64_t initial,
             uint32_t exptime, uint64_t cas_in, uint64_t *value, uint64_t *cas)
{
    uint32_t hash = hash_key(key, nkey), now = mc_now();
    int why, r = MC_OK;
    fern_mutex_lock(&S.lock);
    mc_item *old = find_locked(key, nkey, hash, now, &why);
    uint64_t v = 0;
    if (!old) {
        if (incr)
            S.ctr.incr_misses++;
        else
            S.ctr.decr_misses++;
        r = MC_NOT_FOUND;
        if (create) {
            mc_item *it = put_counter_locked(NULL, key, nkey, hash, 0, exptime, initial, now);
            r = it ? MC_OK : MC_NOMEM;
            v = initial;
            if (it)
                *cas = it->cas;
        }
    } else if (cas_in && old->cas != cas_in) {
        r = MC_EXISTS;
    } else if (!parse_counter(mc_item_value(old), old->nbytes, &v)) {
        r = MC_NON_NUMERIC;
    } else {
        if (incr) {
            v += delta; /* wraps at 2^64, as memcached */
            S.ctr.incr_hits++;
        } else {
            v = delta > v ? 0 : v - delta;
            S.ctr.decr_hits++;
        }
        mc_item *it = put_counter_locked(old, key, nkey, hash, old->flags, old->exptime, v, now);
        r = it ? MC_OK : MC_NOMEM;
        if (it)
            *cas = it->cas;
    }
    *value = v;
    fern_mutex_unlock(&S.lock);
    return r;
}

void mc_flush(int64_t delay)
{
    fern_mutex_lock(&S.lock);
    S.ctr.cmd_flush++;
    if (delay <= 0) {
        while (S.head)
            unlink_locked(S.head);
        S.flush_at = 0;
    } else {
        S.flush_at = mc_exptime(delay);
    }
    fern_mutex_unlock(&S.lock);
}

void mc_store_snapshot(struct mc_store_counters *out)
{
    fern_mutex_lock(&S.lock);
    *out = S.ctr;
    fern_mutex_unlock(&S.lock);
}

void mc_store_reset_counters(void)
{
    fern_mutex_lock(&S.lock);
    struct mc_store_counters keep = S.ctr;
    memset(&S.ctr, 0, sizeof S.ctr);
    S.ctr.curr_items = keep.curr_items;
    S.ctr.bytes = keep.bytes;
    S.ctr.hash_buckets = keep.hash_buckets;
    fern_mutex_unlock(&S.lock);
}
