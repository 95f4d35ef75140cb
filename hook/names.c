/* SPDX-License-Identifier: MIT */
/*
 * Names: getaddrinfo, getnameinfo, gethostbyname, gethostbyname_r; the
 * user and group look-ups (getpwnam, getpwuid, getgrnam, getgrgid, their _r
 * forms, getgrouplist: NSS may ask LDAP or sssd over a socket); the
 * resolver's res_query, res_search (and glibc's __res_* names, which
 * <resolv.h> maps them to). libc's system, popen and pclose are found here
 * too, for proc.c.
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
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>

static int (*real_getaddrinfo)(const char *, const char *, const struct addrinfo *,
                               struct addrinfo **);
static int (*real_getnameinfo)(const struct sockaddr *, socklen_t, char *, socklen_t, char *,
                               socklen_t, int);
static struct hostent *(*real_gethostbyname)(const char *);
static int (*real_gethostbyname_r)(const char *, struct hostent *, char *, size_t,
                                   struct hostent **, int *);

int (*hk_real_system)(const char *);
FILE *(*hk_real_popen)(const char *, const char *);
int (*hk_real_pclose)(FILE *);
static struct passwd *(*real_getpwnam)(const char *);
static struct passwd *(*real_getpwuid)(uid_t);
static int (*real_getpwnam_r)(const char *, struct passwd *, char *, size_t, struct passwd **);
static int (*real_getpwuid_r)(uid_t, struct passwd *, char *, size_t, struct passwd **);
static struct group *(*real_getgrnam)(const char *);
static struct group *(*real_getgrgid)(gid_t);
static int (*real_getgrnam_r)(const char *, struct group *, char *, size_t, struct group **);
static int (*real_getgrgid_r)(gid_t, struct group *, char *, size_t, struct group **);
static int (*real_getgrouplist)(const char *, gid_t, gid_t *, int *);
/* The resolver's: libc's since glibc 2.34, libresolv's before; may be
 * absent (resolved again at each call until found). */
static int (*real_res_query)(const char *, int, int, unsigned char *, int);
static int (*real_res_search)(const char *, int, int, unsigned char *, int);

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
    hk_real_system = must("system");
    hk_real_popen = must("popen");
    hk_real_pclose = must("pclose");
    real_getpwnam = must("getpwnam");
    real_getpwuid = must("getpwuid");
    real_getpwnam_r = must("getpwnam_r");
    real_getpwuid_r = must("getpwuid_r");
    real_getgrnam = must("getgrnam");
    real_getgrgid = must("getgrgid");
    real_getgrnam_r = must("getgrnam_r");
    real_getgrgid_r = must("getgrgid_r");
    real_getgrouplist = must("getgrouplist");
    __atomic_store_n(&real_gethostbyname_r, must("gethostbyname_r"), __ATOMIC_RELEASE);
}

static void res_resolve(void)
{
    if (!__atomic_load_n(&real_res_query, __ATOMIC_ACQUIRE)) {
        void *q = dlsym(RTLD_NEXT, "__res_query"), *s = dlsym(RTLD_NEXT, "__res_search");
        if (!q)
            q = dlsym(RTLD_NEXT, "res_query");
        if (!s)
            s = dlsym(RTLD_NEXT, "res_search");
        __atomic_store_n(&real_res_search, (int (*)(const char *, int, int, unsigned char *, int))s,
                         __ATOMIC_RELAXED);
        __atomic_store_n(&real_res_query, (int (*)(const char *, int, int, unsigned char *, int))q,
                         __ATOMIC_RELEASE);
    }
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
    case 3:
        j->r = real_gethostbyname_r(j->a, (struct hostent *)j->c, j->d, j->n1, j->e,
                                    (int *)j->b);
        break;
    case 4: /* getpwnam / getpwuid */
        j->ptr = j->a ? (void *)real_getpwnam(j->a) : (void *)real_getpwuid((uid_t)j->n1);
        break;
    case 5: /* getpwnam_r / getpwuid_r */
        j->r = j->a ? real_getpwnam_r(j->a, j->d, j->e, j->n2, (struct passwd **)j->ptr)
                    : real_getpwuid_r((uid_t)j->n1, j->d, j->e, j->n2, (struct passwd **)j->ptr);
        break;
    case 6: /* getgrnam / getgrgid */
        j->ptr = j->a ? (void *)real_getgrnam(j->a) : (void *)real_getgrgid((gid_t)j->n1);
        break;
    case 7: /* getgrnam_r / getgrgid_r */
        j->r = j->a ? real_getgrnam_r(j->a, j->d, j->e, j->n2, (struct group **)j->ptr)
                    : real_getgrgid_r((gid_t)j->n1, j->d, j->e, j->n2, (struct group **)j->ptr);
        break;
    case 8:
        j->r = real_getgrouplist(j->a, (gid_t)j->n1, j->d, (int *)j->e);
        break;
    default: /* res_query (9) / res_search (10) */
        j->r = (j->kind == 9 ? real_res_query : real_res_search)(j->a, (int)j->n1, j->flags,
                                                                  j->d, (int)j->n2);
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

/* ---- users and groups ---- */

/* The job on the pool from a green thread (errno carried back), or NULL. */
static struct name_job *nss_green(struct name_job *j)
{
    if (HK_LIKELY(!hk_green()))
        return NULL;
    name_offload(j);
    return j;
}

struct passwd *getpwnam(const char *name)
{
    hk_names_resolve();
    struct name_job j = {.kind = 4, .a = name};
    return nss_green(&j) ? j.ptr : real_getpwnam(name);
}

struct passwd *getpwuid(uid_t uid)
{
    hk_names_resolve();
    struct name_job j = {.kind = 4, .n1 = uid};
    return nss_green(&j) ? j.ptr : real_getpwuid(uid);
}

int getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t n, struct passwd **res)
{
    hk_names_resolve();
    struct name_job j = {.kind = 5, .a = name, .d = pw, .e = buf, .n2 = n, .ptr = res};
    return nss_green(&j) ? (int)j.r : real_getpwnam_r(name, pw, buf, n, res);
}

int getpwuid_r(uid_t uid, struct passwd *pw, char *buf, size_t n, struct passwd **res)
{
    hk_names_resolve();
    struct name_job j = {.kind = 5, .n1 = uid, .d = pw, .e = buf, .n2 = n, .ptr = res};
    return nss_green(&j) ? (int)j.r : real_getpwuid_r(uid, pw, buf, n, res);
}

struct group *getgrnam(const char *name)
{
    hk_names_resolve();
    struct name_job j = {.kind = 6, .a = name};
    return nss_green(&j) ? j.ptr : real_getgrnam(name);
}

struct group *getgrgid(gid_t gid)
{
    hk_names_resolve();
    struct name_job j = {.kind = 6, .n1 = gid};
    return nss_green(&j) ? j.ptr : real_getgrgid(gid);
}

int getgrnam_r(const char *name, struct group *gr, char *buf, size_t n, struct group **res)
{
    hk_names_resolve();
    struct name_job j = {.kind = 7, .a = name, .d = gr, .e = buf, .n2 = n, .ptr = res};
    return nss_green(&j) ? (int)j.r : real_getgrnam_r(name, gr, buf, n, res);
}

int getgrgid_r(gid_t gid, struct group *gr, char *buf, size_t n, struct group **res)
{
    hk_names_resolve();
    struct name_job j = {.kind = 7, .n1 = gid, .d = gr, .e = buf, .n2 = n, .ptr = res};
    return nss_green(&j) ? (int)j.r : real_getgrgid_r(gid, gr, buf, n, res);
}

int getgrouplist(const char *user, gid_t group, gid_t *groups, int *ngroups)
{
    hk_names_resolve();
    struct name_job j = {.kind = 8, .a = user, .n1 = group, .d = groups, .e = ngroups};
    return nss_green(&j) ? (int)j.r : real_getgrouplist(user, group, groups, ngroups);
}

/* ---- the resolver ---- */

static int res_call(int kind, const char *name, int cls, int type, unsigned char *ans, int len)
{
    res_resolve();
    int (*f)(const char *, int, int, unsigned char *, int) =
        kind == 9 ? __atomic_load_n(&real_res_query, __ATOMIC_ACQUIRE) : real_res_search;
    if (!f) {
        set_h_errno(NO_RECOVERY);
        hk_set_errno(ENOSYS);
        return -1;
    }
    if (HK_LIKELY(!hk_green()))
        return f(name, cls, type, ans, len);
    struct name_job j = {.kind = kind, .a = name, .n1 = (size_t)cls, .flags = type, .d = ans,
                         .n2 = (size_t)len};
    name_offload(&j);
    set_h_errno(j.herr);
    return (int)j.r;
}

int __res_query(const char *name, int cls, int type, unsigned char *ans, int len)
{
    return res_call(9, name, cls, type, ans, len);
}
int res_query(const char *name, int cls, int type, unsigned char *ans, int len)
{
    return res_call(9, name, cls, type, ans, len);
}
int __res_search(const char *name, int cls, int type, unsigned char *ans, int len)
{
    return res_call(10, name, cls, type, ans, len);
}
int res_search(const char *name, int cls, int type, unsigned char *ans, int len)
{
    return res_call(10, name, cls, type, ans, len);
}
