/* SPDX-License-Identifier: MIT */
/*
 * Green-thread-local keys (fern_key_*, fern_getspecific, fern_setspecific):
 * FERN_KEYS_MAX slots, values per green thread (t->keys) or, for a plain
 * thread, per OS thread, destructors run when the thread ends.
 *
 * Memory ordering. Key slots: the destructor is stored (relaxed) before the
 * word with its generation (release), and readers load the word with
 * acquire before the destructor.
 */
#include "thread/thread.h"

#include <pthread.h>

struct keyval {
    uint32_t gen;
    void *v;
};

/* A key is (generation << 8 | slot). A slot's word is (generation << 1 |
 * in-use); deleting and re-creating a key bumps the generation, so values
 * stored under the old key read as unset. */
static struct {
    uint32_t lock;
    uint32_t word[FERN_KEYS_MAX];
    void (*dtor[FERN_KEYS_MAX])(void *);
} K;

static __thread struct keyval *plain_keys;
static pthread_key_t plain_pkey;
/* Made once, by the first plain thread that sets a key. Not pthread_once:
 * fern-hook interposes it (base/base.h says why the runtime's own locks
 * are plocks); a plain thread may sleep on the plock in the kernel. */
static struct plock plain_once_lock = PLOCK_INIT;
static bool plain_once_done;

static void plain_keys_exit(void *p)
{
    struct keyval *v = p;
    plain_keys = NULL;
    keys_run_dtors(&v);
}

static void plain_once(void)
{
    if (LOAD(&plain_once_done))
        return;
    plock_lock(&plain_once_lock);
    if (!plain_once_done) {
        pthread_key_create(&plain_pkey, plain_keys_exit);
        STORE(&plain_once_done, true);
    }
    plock_unlock(&plain_once_lock);
}

int fern_key_create(fern_key *key, void (*dtor)(void *))
{
    if (!key)
        return EINVAL;
    spin_lock(&K.lock);
    for (unsigned i = 0; i < FERN_KEYS_MAX; i++) {
        uint32_t w = K.word[i];
        if (w & 1)
            continue;
        uint32_t gen = ((w >> 1) + 1) & 0xffffff;
        if (gen == 0)
            gen = 1;
        STORE_RELAXED(&K.dtor[i], dtor);
        STORE(&K.word[i], gen << 1 | 1);
        spin_unlock(&K.lock);
        *key = gen << 8 | i;
        return 0;
    }
    spin_unlock(&K.lock);
    return EAGAIN;
}

static bool key_valid(fern_key key)
{
    unsigned i = key & 0xff;
    return i < FERN_KEYS_MAX && LOAD(&K.word[i]) == ((key >> 8) << 1 | 1);
}

int fern_key_delete(fern_key key)
{
    unsigned i = key & 0xff;
    spin_lock(&K.lock);
    if (!key_valid(key)) {
        spin_unlock(&K.lock);
        return EINVAL;
    }
    STORE(&K.word[i], K.word[i] & ~1u);
    spin_unlock(&K.lock);
    return 0;
}

static struct keyval **keys_slot(void)
{
    fern_thread *t = thread_current();
    return t ? &t->keys : &plain_keys;
}

void *fern_getspecific(fern_key key)
{
    if (!key_valid(key))
        return NULL;
    struct keyval *v = *keys_slot();
    unsigned i = key & 0xff;
    return v && v[i].gen == key >> 8 ? v[i].v : NULL;
}

int fern_setspecific(fern_key key, const void *value)
{
    if (!key_valid(key))
        return EINVAL;
    struct keyval **slot = keys_slot();
    if (!*slot) {
        struct keyval *v = calloc(FERN_KEYS_MAX, sizeof *v);
        if (!v)
            return ENOMEM;
        *slot = v;
        if (slot == &plain_keys) {
            plain_once();
            pthread_setspecific(plain_pkey, v);
        }
    }
    unsigned i = key & 0xff;
    (*slot)[i].gen = key >> 8;
    (*slot)[i].v = (void *)value;
    return 0;
}

void keys_run_dtors(struct keyval **pv)
{
    struct keyval *v = *pv;
    for (int round = 0; round < 4; round++) {
        bool again = false;
        for (unsigned i = 0; i < FERN_KEYS_MAX; i++) {
            if (!v[i].v)
                continue;
            uint32_t w = LOAD(&K.word[i]);
            void (*d)(void *) = LOAD_RELAXED(&K.dtor[i]);
            void *val = v[i].v;
            v[i].v = NULL;
            if ((w & 1) && (w >> 1) == v[i].gen && d) {
                d(val);
                again = true;
            }
        }
        if (!again)
            break;
    }
    free(v);
    *pv = NULL;
}
