/* SPDX-License-Identifier: MIT */
/*
 * Names: getaddrinfo, getnameinfo, gethostbyname, gethostbyname_r.
 *
 * The resolver cannot be made non-blocking from outside (it opens its own
 * sockets through libc's internal entry points, which no interposer sees),
 * so on a green thread each call runs libc's own function on fern's blocking
 * pool while the green thread is parked. libc's functions are found once, in
 * the constructor (core.c), with dlsym(RTLD_NEXT): never inside a malloc path
 * and never on a call. A call that arrives before the constructor ran (from
 * another library's constructor) resolves them then. gethostbyname's h_errno
 * is per kernel thread: the pool's value is copied back to the caller.
 */
#include "hook.h"

#include <dlfcn.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>

static int (*real_getaddrinfo)(const char *, const char *, const struct addrinfo *,
                               struct addrinfo **);
static int (*real_getnameinfo)(const struct sockaddr *, socklen_t, char *, socklen_t, char *,
                               socklen_t, int);
static struct hostent *(*real_gethostbyname)(const char *);
static int (*real_gethostbyname_r)(const char *, struct hostent *, char *, size_t,
                                   struct hostent **, int *);

static void *must(const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p) {
        fprintf(stderr, "fern-hook: libc's %s not found: %s\n", name, dlerror());
        abort();
    }
    return p;
}

void hk_names_resolve(void)
{
    if (__atomic_load_n(&real_gethostbyname_r, __ATOMIC_ACQUIRE))
        return;
    __atomic_store_n(&real_getaddrinfo, must("getaddrinfo"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_getnameinfo, must("getnameinfo"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_gethostbyname, must("gethostbyname"), __ATOMIC_RELAXED);
    __atomic_store_n(&real_gethostbyname_r, must("gethostbyname_r"), __ATOMIC_RELEASE);
}

struct name_job {
    int kind;
    const void *a;
    const void *b;
    const void *c;
    void *d;
    size_t n1, n2;
    void *e;
    socklen_t servlen;
    int flags;
    long r;
    int err, herr;
    void *ptr;
};

static void *name_run(void *arg)
{
    struct name_job *j = arg;
    switch (j->kind) {
    case 0:
        j->r = real_getaddrinfo(j->a, j->b, j->c, j->d);
        break;
    case 1:
        j->r = real_getnameinfo(j->a, (socklen_t)j->n1, j->d, (socklen_t)j->n2, j->e, j->servlen,
                                j->flags);
        break;
    case 2:
        j->ptr = real_gethostbyname(j->a);
        break;
    default:
        j->r = real_gethostbyname_r(j->a, (struct hostent *)j->c, j->d, j->n1, j->e,
                                    (int *)j->b);
        break;
    }
    j->err = errno;
    j->herr = h_errno;
    return NULL;
}

/* Run the job on the pool from a green thread, restoring errno/h_errno. */
static void name_offload(struct name_job *j)
{
    HK_TSAN_ENTER();
    hk_offload(name_run, j);
    HK_TSAN_LEAVE();
    hk_set_errno(j->err);
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    hk_names_resolve();
    if (HK_LIKELY(!hk_green()))
        return real_getaddrinfo(node, service, hints, res);
    struct name_job j = {.kind = 0, .a = node, .b = service, .c = hints, .d = res};
    name_offload(&j);
    return (int)j.r;
}

int getnameinfo(const struct sockaddr *sa, socklen_t salen, char *host, socklen_t hostlen,
                char *serv, socklen_t servlen, int flags)
{
    hk_names_resolve();
    if (HK_LIKELY(!hk_green()))
        return real_getnameinfo(sa, salen, host, hostlen, serv, servlen, flags);
    struct name_job j = {.kind = 1, .a = sa, .n1 = salen, .d = host, .n2 = hostlen, .e = serv,
                         .servlen = servlen, .flags = flags};
    name_offload(&j);
    return (int)j.r;
}

static __attribute__((noinline)) void set_h_errno(int e) { h_errno = e; }

struct hostent *gethostbyname(const char *name)
{
    hk_names_resolve();
    if (HK_LIKELY(!hk_green()))
        return real_gethostbyname(name);
    struct name_job j = {.kind = 2, .a = name};
    name_offload(&j);
    set_h_errno(j.herr);
    return j.ptr;
}

int gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t buflen,
                    struct hostent **result, int *h_errnop)
{
    hk_names_resolve();
    if (HK_LIKELY(!hk_green()))
        return real_gethostbyname_r(name, ret, buf, buflen, result, h_errnop);
    struct name_job j = {.kind = 3, .a = name, .c = ret, .d = buf, .n1 = buflen, .e = result,
                         .b = h_errnop};
    name_offload(&j);
    return (int)j.r;
}
