// SPDX-License-Identifier: MIT
// fern-hook, files (issue 32, item 2): reads, writes, syncs, opens, closes,
// the stat family and the directory calls from green threads give libc's
// answers and do not block their worker; a page-cache hit is served on the
// worker (RWF_NOWAIT), a miss goes to io_uring or, with FERN_IO_URING=0
// (ctest's test_hook_files_pool), to the blocking pool. fern_pread and
// fern_pwrite take the same path.
#include "hook_test.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>

using namespace hook_test;

namespace {

// Whether the kernel (or qemu-user, which lacks it) has preadv2: without it
// there is no page-cache hit on the worker, every call goes off it.
bool have_preadv2() {
    char c;
    struct iovec v = {&c, 1};
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    long r = syscall(SYS_preadv2, fd, &v, 1, 0L, 0L, 0L);
    int e = errno;
    close(fd);
    return r >= 0 || e != ENOSYS;
}

struct Workers {
    fern_cluster *c = nullptr;
    explicit Workers(int n) { EXPECT_EQ(fern_cluster_create(&c, n), 0); }
    ~Workers() {
        if (c) {
            EXPECT_EQ(fern_cluster_destroy(c), 0);
        }
    }
    template <class F> fern_thread *spawn(F &&f) {
        fern_thread *t = nullptr;
        EXPECT_EQ(spawn_on(&t, c, std::forward<F>(f)), 0);
        return t;
    }
    template <class F> void run(F &&f) { join(spawn(std::forward<F>(f))); }
    static void join(fern_thread *t) { EXPECT_EQ(fern_join(t, nullptr), 0); }
};

bool pool_forced() {
    const char *v = getenv("FERN_IO_URING");
    return v && strcmp(v, "0") == 0;
}

// No io_uring at all (qemu-user answers ENOSYS): the runtime's probe falls
// back to the pool, as it must.
bool no_uring() {
    long r = syscall(SYS_io_uring_setup, 0, nullptr);
    return r < 0 && errno == ENOSYS;
}
bool pool_expected() { return pool_forced() || no_uring(); }

struct fern_stats stats() {
    struct fern_stats s{};
    EXPECT_EQ(fern_stats(&s), 0);
    return s;
}

std::string scratch(const char *what) {
    return std::string("/tmp/fern-file-") + what + "-" + std::to_string(getpid());
}

// Every family, with its results and errors, from the calling thread.
void every_call(const std::string &dir) {
    ASSERT_EQ(mkdir(dir.c_str(), 0700), 0) << strerror(errno);
    EXPECT_EQ(mkdir(dir.c_str(), 0700), -1);
    EXPECT_EQ(get_errno(), EEXIST);
    std::string f = dir + "/a", g = dir + "/b";
    int fd = open(f.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    ASSERT_GE(fd, 0) << strerror(errno);
    EXPECT_FALSE(fcntl(fd, F_GETFL) & O_NONBLOCK);
    EXPECT_EQ(write(fd, "hello ", 6), 6);
    struct iovec wv[2] = {{(void *)"wor", 3}, {(void *)"ld", 2}};
    EXPECT_EQ(writev(fd, wv, 2), 5);
    EXPECT_EQ(pwrite(fd, "W", 1, 6), 1);
    EXPECT_EQ(fsync(fd), 0);
    EXPECT_EQ(fdatasync(fd), 0);
    EXPECT_EQ(sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE), 0);
    char buf[32] = {};
    EXPECT_EQ(pread(fd, buf, sizeof buf, 0), 11);
    EXPECT_STREQ(buf, "hello World");
    EXPECT_EQ(lseek(fd, 6, SEEK_SET), 6);
    memset(buf, 0, sizeof buf);
    EXPECT_EQ(read(fd, buf, 5), 5); // at the file position, which moves
    EXPECT_STREQ(buf, "World");
    EXPECT_EQ(lseek(fd, 0, SEEK_CUR), 11);
    char a[5] = {}, b[6] = {};
    struct iovec rv[2] = {{a, 5}, {b, 6}};
    EXPECT_EQ(preadv(fd, rv, 2, 0), 11);
    EXPECT_EQ(memcmp(a, "hello", 5), 0);
    EXPECT_EQ(pread(fd, buf, sizeof buf, 100), 0); // end of file
    EXPECT_EQ(fallocate(fd, 0, 0, 8192), 0);
    struct stat st1, st2;
    EXPECT_EQ(fstat(fd, &st1), 0);
    EXPECT_EQ(st1.st_size, 8192);
    EXPECT_EQ(ftruncate(fd, 3), 0);
    EXPECT_EQ(stat(f.c_str(), &st2), 0);
    EXPECT_EQ(st2.st_size, 3);
    EXPECT_EQ(st2.st_ino, st1.st_ino);
    EXPECT_EQ(st2.st_dev, st1.st_dev);
    EXPECT_EQ(st2.st_mode, st1.st_mode);
    EXPECT_EQ(st2.st_nlink, 1u);
    EXPECT_EQ(st2.st_mtim.tv_sec, st2.st_mtim.tv_sec);
    struct statx sx;
    EXPECT_EQ(statx(AT_FDCWD, f.c_str(), 0, STATX_SIZE, &sx), 0);
    EXPECT_EQ(sx.stx_size, 3u);
    EXPECT_EQ(symlink(f.c_str(), g.c_str()), 0);
    EXPECT_EQ(lstat(g.c_str(), &st2), 0);
    EXPECT_TRUE(S_ISLNK(st2.st_mode));
    EXPECT_EQ(fstatat(AT_FDCWD, g.c_str(), &st2, 0), 0);
    EXPECT_TRUE(S_ISREG(st2.st_mode));
    EXPECT_EQ(unlink(g.c_str()), 0);
    EXPECT_EQ(rename(f.c_str(), g.c_str()), 0);
    EXPECT_EQ(stat(f.c_str(), &st2), -1);
    EXPECT_EQ(get_errno(), ENOENT);
    EXPECT_EQ(close(fd), 0);
    EXPECT_EQ(pread(fd, buf, 1, 0), -1);
    EXPECT_EQ(get_errno(), EBADF);
    EXPECT_EQ(close(fd), -1);
    EXPECT_EQ(get_errno(), EBADF);
    EXPECT_EQ(open(f.c_str(), O_RDONLY), -1);
    EXPECT_EQ(get_errno(), ENOENT);
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(dfd, 0);
    EXPECT_EQ(read(dfd, buf, 1), -1);
    EXPECT_EQ(get_errno(), EISDIR);
    int rfd = openat(dfd, "b", O_RDONLY);
    EXPECT_GE(rfd, 0);
    EXPECT_EQ(read(rfd, buf, sizeof buf), 3);
    EXPECT_EQ(close(rfd), 0);
    EXPECT_EQ(renameat(dfd, "b", dfd, "c"), 0);
    EXPECT_EQ(unlinkat(dfd, "c", 0), 0);
    EXPECT_EQ(mkdirat(dfd, "d", 0700), 0);
    EXPECT_EQ(unlinkat(dfd, "d", AT_REMOVEDIR), 0);
    EXPECT_EQ(close(dfd), 0);
    EXPECT_EQ(rmdir(dir.c_str()), 0);
    EXPECT_EQ(rmdir(dir.c_str()), -1);
    EXPECT_EQ(get_errno(), ENOENT);
}

// Drop path's pages from the page cache: per file (clean pages go without
// privileges), then, if some stay and we are root (CI is), the whole cache.
// Returns the fraction still resident (mincore).
double drop_cached(const std::string &path) {
    auto resident = [&] {
        int fd = open(path.c_str(), O_RDONLY);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb)) return 1.0;
        size_t pages = ((size_t)sb.st_size + 4095) / 4096;
        void *m = mmap(nullptr, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED) return 1.0;
        std::vector<unsigned char> v(pages);
        size_t in = 0;
        if (mincore(m, (size_t)sb.st_size, v.data()) == 0)
            for (unsigned char c : v) in += c & 1;
        munmap(m, (size_t)sb.st_size);
        return (double)in / (double)pages;
    };
    int fd = open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    double r = resident();
    if (r >= 0.1 && geteuid() == 0) {
        sync();
        int d = open("/proc/sys/vm/drop_caches", O_WRONLY);
        if (d >= 0) {
            EXPECT_EQ(write(d, "1", 1), 1);
            close(d);
        }
        r = resident();
    }
    return r;
}

class HookFile : public ::testing::TestWithParam<int> {};

TEST_P(HookFile, EveryCallAsLibc) {
    Workers w(GetParam());
    struct fern_stats before = stats();
    w.run([&] { every_call(scratch("green") + std::to_string(GetParam())); });
    struct fern_stats after = stats();
    // The calls with no cache to ask went off the worker, where the probe
    // (or FERN_IO_URING=0) said.
    EXPECT_EQ(after.file_io, pool_expected() ? FERN_FILE_IO_POOL : FERN_FILE_IO_URING);
    uint64_t off = pool_expected() ? after.file_pool_ops - before.file_pool_ops
                                 : after.file_uring_ops - before.file_uring_ops;
    EXPECT_GE(off, 20u);
    if (have_preadv2()) {
        EXPECT_GT(after.file_nowait_hits, before.file_nowait_hits);
    }
    // A plain thread: the plain system calls.
    every_call(scratch("plain") + std::to_string(GetParam()));
    EXPECT_EQ(stats().file_uring_ops, after.file_uring_ops);
}

// fern_dump says which way file calls go.
TEST_P(HookFile, DumpSaysWhich) {
    Workers w(GetParam()); // the runtime runs
    char *buf = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ASSERT_NE(f, nullptr);
    ASSERT_GE(fern_dump(f), 0);
    fclose(f);
    std::string out(buf, len);
    free(buf);
    EXPECT_NE(out.find(pool_forced() ? "file I/O: blocking pool ($FERN_IO_URING=0)"
                       : no_uring()   ? "file I/O: blocking pool ("
                                     : "file I/O: io_uring"),
              std::string::npos)
        << out;
}

// A file read with its pages out of the cache: 64 green threads on the
// workers make random 4 KiB preads while a 1 ms ticker runs beside them.
// The misses go off the worker (the counters say so), and the ticker keeps
// ticking: on the old hook each miss blocked the worker for the disk's time.
TEST_P(HookFile, ColdCacheReadsLeaveWorkerFree) {
    std::string path = scratch("cold") + std::to_string(GetParam());
    const size_t kSize = 64u << 20, kBlock = 4096;
    {
        int fd = open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
        ASSERT_GE(fd, 0);
        std::vector<char> chunk(1 << 20);
        for (size_t i = 0; i < chunk.size(); i++) chunk[i] = (char)(i * 7);
        for (size_t off = 0; off < kSize; off += chunk.size())
            ASSERT_EQ(pwrite(fd, chunk.data(), chunk.size(), (off_t)off), (ssize_t)chunk.size());
        ASSERT_EQ(fsync(fd), 0);
        close(fd);
    }
    ASSERT_LT(drop_cached(path), 0.1) << "the file's pages stay in the page cache";
    int fd = open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    Workers w(GetParam());
    struct fern_stats before = stats();
    std::atomic<long> reads{0}, bad{0};
    int64_t late;
    {
        Ticker tick(w);
        std::vector<fern_thread *> ts;
        for (int i = 0; i < 64; i++) {
            ts.push_back(w.spawn([&, i] {
                std::mt19937_64 rng(i);
                char buf[4096];
                for (int k = 0; k < 16; k++) {
                    off_t off = (off_t)(rng() % (kSize / kBlock)) * kBlock;
                    ssize_t r = (k & 1) ? fern_pread(fd, buf, kBlock, off)
                                        : pread(fd, buf, kBlock, off);
                    if (r != (ssize_t)kBlock || buf[1] != (char)(((off + 1) % (1 << 20)) * 7))
                        bad++;
                    reads++;
                }
            }));
        }
        for (auto *t : ts) Workers::join(t);
        late = tick.late_ns.load();
    }
    struct fern_stats after = stats();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(reads.load(), 64 * 16);
    uint64_t async = after.file_uring_ops - before.file_uring_ops + after.file_pool_ops -
                     before.file_pool_ops;
    // Every read was either served by the cache on the worker or went off
    // it (a worker that made them itself, as the old hook did with pread,
    // counts neither: with FERN_HOOK=0 the sum is half the reads), and
    // the file was cold, so some missed. (How many varies from run to run,
    // from ~250 to ~1000 of the 1024 here, once 15: the cache was checked
    // empty before the reads, and what brings pages back in meanwhile is
    // not this test's to decide.)
    uint64_t hits = after.file_nowait_hits - before.file_nowait_hits;
    EXPECT_EQ(async + hits, 64u * 16);
    EXPECT_GT(async, 0u) << "hits " << hits;
    EXPECT_LT(late, kLateLimit);
    printf("cold reads: %ld, %llu off the worker, ticker %.1f ms late at worst\n", reads.load(),
           (unsigned long long)async, (double)late / 1e6);
    close(fd);
    unlink(path.c_str());
}

// The kernel's count of this process's write system calls (/proc/self/io).
long syscw() {
    FILE *f = fopen("/proc/self/io", "r");
    if (!f) return -1;
    char line[128];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "syscw:", 6) == 0) v = atol(line + 6);
    fclose(f);
    return v;
}

// A file system that refuses RWF_NOWAIT for buffered writes (ext4 does):
// the hook asks once per descriptor, then sends every write straight off
// the worker, where before each write cost a refused pwritev2 and an fstat
// first. The kernel's own count of write calls says which: with io_uring
// the writes themselves are no system calls of ours, so ~1 call for all;
// on the pool each is one pwrite64, so ~kWrites, not 2 x kWrites. The hint
// goes with the descriptor to its copy (dup) and goes away with F_SETFL.
TEST_P(HookFile, RefusedNowaitWriteAskedOnce) {
    std::string path = scratch("wonce") + std::to_string(GetParam());
    int fd = open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    struct iovec v = {(void *)"x", 1};
    bool refused = have_preadv2() && syscall(SYS_pwritev2, fd, &v, 1, 0L, 0L, (long)RWF_NOWAIT) < 0 &&
                   errno == EOPNOTSUPP;
    if (syscw() < 0) refused = false; // no /proc/self/io: results only
    const int kWrites = 200;
    Workers w(GetParam());
    long calls = 0, calls_dup = 0;
    w.run([&] {
        char buf[64];
        long before = syscw();
        for (int i = 0; i < kWrites; i++) {
            snprintf(buf, sizeof buf, "%08d", i);
            ASSERT_EQ(pwrite(fd, buf, 8, (off_t)i * 8), 8);
        }
        calls = syscw() - before;
        int d = dup(fd);
        ASSERT_GE(d, 0);
        ASSERT_EQ(lseek(d, 0, SEEK_END), (off_t)kWrites * 8);
        before = syscw();
        for (int i = 0; i < kWrites; i++) ASSERT_EQ(write(d, "y", 1), 1); // at the file position
        calls_dup = syscw() - before;
        EXPECT_EQ(fcntl(d, F_SETFL, O_APPEND), 0); // asks again, and still right
        EXPECT_EQ(write(d, "z", 1), 1);
        EXPECT_EQ(close(d), 0);
        for (int i = 0; i < kWrites; i++) {
            snprintf(buf, sizeof buf, "%08d", i);
            char got[8];
            ASSERT_EQ(pread(fd, got, 8, (off_t)i * 8), 8);
            ASSERT_EQ(memcmp(got, buf, 8), 0) << i;
        }
    });
    struct stat sb;
    ASSERT_EQ(fstat(fd, &sb), 0);
    EXPECT_EQ(sb.st_size, (off_t)kWrites * 9 + 1);
    printf("write calls: %ld for %d pwrites, %ld for %d writes\n", calls, kWrites, calls_dup, kWrites);
    if (refused) {
        // Measured: 1 and 0 calls on one worker, 52-89 on two (the
        // runtime's own wake-ups write eventfds); 200-266 before, each.
        // The pool: 201 and 200, 400 before.
        long limit = pool_expected() ? kWrites * 3 / 2 : kWrites * 3 / 4;
        EXPECT_LT(calls, limit) << "write system calls for " << kWrites << " pwrites";
        EXPECT_LT(calls_dup, limit) << "write system calls for " << kWrites << " writes of a dup";
    }
    close(fd);
    unlink(path.c_str());
}

// A hint outlives its descriptor when the close is one the hook does not
// see (libc's fclose, a raw system call): the next holder of the number,
// here a pipe, still gets the kernel's answers from every path. pread of a
// pipe is ESPIPE at once (a file's page-cache streak, which makes plain
// preads, never waits on it), and a read of the empty pipe parks until a
// green writer on the same worker has written.
TEST_P(HookFile, StaleHintKeepsAnswers) {
    std::string path = scratch("stale") + std::to_string(GetParam());
    int fd = open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    std::vector<char> data(64 << 10, 'h');
    ASSERT_EQ(pwrite(fd, data.data(), data.size(), 0), (ssize_t)data.size());
    Workers w(GetParam());
    w.run([&] {
        char buf[4096];
        for (int i = 0; i < 2000; i++) // cached: earns the streak
            ASSERT_EQ(pread(fd, buf, sizeof buf, (off_t)(i % 16) * 4096), 4096);
        EXPECT_EQ(buf[4095], 'h');
    });
    ASSERT_EQ(syscall(SYS_close, fd), 0); // behind the hook's back
    int p[2];
    ASSERT_EQ(syscall(SYS_pipe2, p, 0), 0);
    ASSERT_EQ(p[0], fd) << "the pipe did not take the file's number";
    w.run([&] {
        char c;
        EXPECT_EQ(pread(p[0], &c, 1, 0), -1);
        EXPECT_EQ(get_errno(), ESPIPE);
        fern_thread *wr = w.spawn([&] {
            fern_sleep_ns(20 * 1000 * 1000);
            EXPECT_EQ(write(p[1], "q", 1), 1);
        });
        EXPECT_EQ(read(p[0], &c, 1), 1);
        EXPECT_EQ(c, 'q');
        Workers::join(wr);
    });
    EXPECT_EQ(close(p[0]), 0);
    EXPECT_EQ(close(p[1]), 0);
    unlink(path.c_str());
}

// A file opened O_DIRECT never tries the cache on the worker.
TEST_P(HookFile, DirectGoesOffWorker) {
    std::string path = scratch("direct") + std::to_string(GetParam());
    int fd = open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) GTEST_SKIP() << "no O_DIRECT on /tmp";
    ASSERT_GE(fd, 0);
    void *buf = nullptr;
    ASSERT_EQ(posix_memalign(&buf, 4096, 4096), 0);
    memset(buf, 'd', 4096);
    Workers w(GetParam());
    struct fern_stats before = stats();
    w.run([&] {
        EXPECT_EQ(pwrite(fd, buf, 4096, 0), 4096);
        memset(buf, 0, 4096);
        EXPECT_EQ(pread(fd, buf, 4096, 0), 4096);
        EXPECT_EQ(((char *)buf)[4095], 'd');
        int d = dup(fd);
        EXPECT_EQ(pread(d, buf, 4096, 0), 4096);
        close(d);
    });
    struct fern_stats after = stats();
    EXPECT_EQ(after.file_nowait_hits, before.file_nowait_hits);
    free(buf);
    close(fd);
    unlink(path.c_str());
}

// close from a green thread goes off the worker; a descriptor io_uring
// refuses to close (an io_uring ring) is still closed.
TEST_P(HookFile, CloseOfARing) {
    Workers w(GetParam());
    w.run([&] {
        struct io_params {
            uint32_t a[30];
        } p = {};
        int ring = (int)syscall(SYS_io_uring_setup, 2, &p);
        if (ring < 0) return; // no io_uring here: nothing to check
        EXPECT_EQ(close(ring), 0);
        EXPECT_EQ(fcntl(ring, F_GETFD), -1);
        EXPECT_EQ(get_errno(), EBADF);
    });
}

// fern_pread / fern_pwrite: results and errors, green and plain.
TEST_P(HookFile, FernPreadPwrite) {
    std::string path = scratch("fp") + std::to_string(GetParam());
    int fd = open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    Workers w(GetParam());
    auto check = [&] {
        char b[8] = {};
        EXPECT_EQ(fern_pwrite(fd, "abcdef", 6, 2), 6);
        EXPECT_EQ(fern_pread(fd, b, sizeof b, 0), 8);
        EXPECT_EQ(memcmp(b + 2, "abcdef", 6), 0);
        EXPECT_EQ(fern_pread(fd, b, 1, 100), 0);
        EXPECT_EQ(fern_pread(fd, b, 1, -1), -1);
        EXPECT_EQ(get_errno(), EINVAL);
        EXPECT_EQ(fern_pwrite(fd, b, 1, -5), -1);
        EXPECT_EQ(get_errno(), EINVAL);
        EXPECT_EQ(fern_pread(-1, b, 1, 0), -1);
        EXPECT_EQ(get_errno(), EBADF);
        EXPECT_EQ(fern_pread(fd, nullptr, 1, 0), -1);
        EXPECT_EQ(get_errno(), EFAULT);
    };
    w.run(check);
    check();
    close(fd);
    unlink(path.c_str());
}

// A userfaultfd region whose pages are filled `delay_ms` after a first
// touch (the kernel's own copy into them included): a read into one holds
// its caller that long, cache hit or not. Needs the privilege to catch
// kernel-mode faults (root, or vm.unprivileged_userfaultfd=1).
struct SlowPages {
    int uffd = -1;
    char *mem = nullptr;
    size_t len = 0;
    std::thread filler;
    bool open(size_t pages, int delay_ms) {
        uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
        if (uffd < 0)
            return false;
        struct uffdio_api api = {};
        api.api = UFFD_API;
        if (ioctl(uffd, UFFDIO_API, &api))
            return false;
        len = pages * 4096;
        mem = (char *)mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
            return false;
        struct uffdio_register reg = {};
        reg.range.start = (uintptr_t)mem;
        reg.range.len = len;
        reg.mode = UFFDIO_REGISTER_MODE_MISSING;
        if (ioctl(uffd, UFFDIO_REGISTER, &reg))
            return false;
        filler = std::thread([this, pages, delay_ms] {
            static char zero[4096];
            for (size_t n = 0; n < pages; n++) {
                struct pollfd p = {uffd, POLLIN, 0};
                if (poll(&p, 1, 10000) != 1)
                    return;
                struct uffd_msg m;
                if (read(uffd, &m, sizeof m) != (ssize_t)sizeof m ||
                    m.event != UFFD_EVENT_PAGEFAULT)
                    return;
                usleep((useconds_t)delay_ms * 1000);
                struct uffdio_copy c = {};
                c.dst = m.arg.pagefault.address & ~(uint64_t)4095;
                c.src = (uintptr_t)zero;
                c.len = 4096;
                ioctl(uffd, UFFDIO_COPY, &c);
            }
        });
        return true;
    }
    ~SlowPages() {
        if (filler.joinable())
            filler.join();
        if (mem && mem != MAP_FAILED)
            munmap(mem, len);
        if (uffd >= 0)
            close(uffd);
    }
};

// The page-cache streak (hook/file.c): once the cache has served a
// descriptor's preads 64 times in a row, a green thread's pread is the
// plain pread64 on the worker, timed (file_streak_reads counts each, and
// nothing goes off the worker); one that holds the worker too long (here
// its buffer is a userfaultfd page filled 5 ms later) ends the streak
// (file_streak_ends), the reads after it try RWF_NOWAIT again until the
// streak is earned anew, and one that ends a streak just earned doubles
// its price; a miss before it is earned goes off the worker and starts the
// count again. Every answer is the file's throughout.
TEST_P(HookFile, PageCacheStreak) {
    if (!have_preadv2())
        GTEST_SKIP() << "no preadv2 (qemu-user): no page-cache hit on the worker, no streak";
#if !defined(__x86_64__) && !defined(__aarch64__)
    GTEST_SKIP() << "no cycle counter the streak knows";
#endif
    std::string path = scratch("streak") + std::to_string(GetParam());
    const int kBlocks = 16;
    int fd = open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    for (int b = 0; b < kBlocks; b++) {
        std::vector<char> blk(4096, (char)('a' + b));
        ASSERT_EQ(pwrite(fd, blk.data(), 4096, (off_t)b * 4096), 4096);
    }
    ASSERT_EQ(fdatasync(fd), 0); // clean pages: posix_fadvise can drop one below
    // and no readahead brings it back before it is read
    ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
    SlowPages slow;
    bool have_slow = slow.open(3, 5);
    Workers w(GetParam());
    w.run([&] {
        char buf[4096];
        long bad = 0, i = 0;
        auto rd = [&](char *into) {
            int b = (int)(i++ % kBlocks);
            if (pread(fd, into, 4096, (off_t)b * 4096) != 4096 || into[0] != 'a' + b ||
                into[4095] != 'a' + b)
                bad++;
        };
        // Earned: the first reads try RWF_NOWAIT (and the clock calibrates
        // over the first 2 ms), then the streak starts. earn() reads until
        // a read was the streak's and did not end it.
        int64_t until = fern_now_ns() + 10 * 1000 * 1000 * 1000LL;
        auto earn = [&] {
            for (;;) {
                struct fern_stats x = stats();
                rd(buf);
                struct fern_stats y = stats();
                if (y.file_streak_reads > x.file_streak_reads && y.file_streak_ends == x.file_streak_ends)
                    return true;
                if (fern_now_ns() > until)
                    return false;
            }
        };
        ASSERT_TRUE(earn()) << "no streak after " << i << " reads";
        // On it, every read is a streak read: none off the worker. A
        // loaded host can hold one read past the limit and end the streak
        // (its jitter: once per few hundred reads at a load of 20 on 2
        // CPUs): then the round is made again.
        bool clean = false;
        for (int round = 0; round < 50 && !clean && earn(); round++) {
            struct fern_stats a = stats();
            for (int k = 0; k < 200; k++)
                rd(buf);
            struct fern_stats b = stats();
            EXPECT_EQ(b.file_uring_ops + b.file_pool_ops, a.file_uring_ops + a.file_pool_ops);
            if (b.file_streak_ends != a.file_streak_ends)
                continue;
            EXPECT_EQ(b.file_streak_reads - a.file_streak_reads, 200u);
            EXPECT_EQ(b.file_nowait_hits - a.file_nowait_hits, 200u);
            clean = true;
        }
        EXPECT_TRUE(clean) << "every round of 200 streak reads had one slower than 100 us";
        if (!have_slow) {
            printf("no userfaultfd here (%s): the slow read is not made\n", strerror(errno));
        } else {
            // A slow read ends it; the reads after it until the streak is
            // on again: 64 << k of them, k the price's exponent.
            auto reads_to_earn = [&] {
                uint64_t s = stats().file_streak_reads;
                long n = 0;
                while (stats().file_streak_reads == s && n < (64L << 11)) {
                    rd(buf);
                    n++;
                }
                return n - 1; // the last one was the first of the new streak
            };
            struct fern_stats a = stats();
            i = 3; // block 3 into the slow page
            rd(slow.mem);
            struct fern_stats b = stats();
            EXPECT_EQ(b.file_streak_reads - a.file_streak_reads, 1u);
            EXPECT_EQ(b.file_streak_ends - a.file_streak_ends, 1u);
            long n1 = reads_to_earn();
            EXPECT_TRUE(n1 >= 64 && n1 <= (64L << 10) && (n1 & (n1 - 1)) == 0) << n1;
            // One more slow read, the second of this streak: a streak that
            // ends so soon costs twice as many hits to earn again (up to
            // 64 << 10). A jittered read in between voids the check.
            struct fern_stats c = stats();
            rd(slow.mem + 4096);
            struct fern_stats d = stats();
            EXPECT_EQ(d.file_streak_ends - c.file_streak_ends, 1u);
            long n2 = reads_to_earn();
            if (c.file_streak_ends == b.file_streak_ends) { // the resuming read was not jittered
                EXPECT_EQ(n2, n1 < (64L << 10) ? 2 * n1 : n1);
            }
            // A miss before the streak is earned: off the worker, and the
            // count starts again. A third slow read ends the streak (at
            // p3 = twice n2's price, as above); block 7's page is dropped
            // (clean: it can be), so of the reads after it, blocks 0-6
            // hit, 7 misses and goes off the worker, and p3 more hits earn
            // the streak again: 8 + p3 reads.
            struct fern_stats g = stats();
            rd(slow.mem + 8192);
            EXPECT_EQ(stats().file_streak_ends - g.file_streak_ends, 1u);
            // (A page another CPU's LRU batch still holds is not dropped
            // at once: asked again until mincore says it is out.)
            void *map = mmap(nullptr, kBlocks * 4096, PROT_READ, MAP_SHARED, fd, 0);
            ASSERT_NE(map, MAP_FAILED);
            unsigned char vec[kBlocks];
            bool out = false;
            for (int t = 0; t < 200 && !out; t++) {
                ASSERT_EQ(posix_fadvise(fd, 7 * 4096, 4096, POSIX_FADV_DONTNEED), 0);
                ASSERT_EQ(mincore(map, kBlocks * 4096, vec), 0);
                out = !(vec[7] & 1);
                if (!out)
                    fern_sleep_ns(1000 * 1000);
            }
            munmap(map, kBlocks * 4096);
            ASSERT_TRUE(out) << "block 7 stayed in the page cache";
            i = 0;
            struct fern_stats h = stats();
            long n3 = reads_to_earn();
            struct fern_stats k = stats();
            uint64_t off = k.file_uring_ops + k.file_pool_ops - h.file_uring_ops - h.file_pool_ops;
            // (RWF_NOWAIT's miss starts the disk read, and a fast device
            // can finish it before the kernel looks again: a hit after
            // all, seen once in 16 runs on a VM's disk.)
            EXPECT_LE(off, 1u) << "one block was dropped";
            long p3 = n2 < (64L << 10) ? 2 * n2 : n2;
            if (d.file_streak_ends == c.file_streak_ends + 1 && g.file_streak_ends == d.file_streak_ends) {
                EXPECT_EQ(n3, off ? 8 + p3 : p3) << n1 << " " << n2 << " " << off;
            }
            printf("streak earned again after %ld, %ld and %ld reads (the third: a miss among them)\n",
                   n1, n2, n3);
        }
        EXPECT_EQ(bad, 0) << "of " << i << " reads";
    });
    close(fd);
    unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Workers, HookFile, ::testing::Values(1, 2),
                         [](const auto &i) { return std::to_string(i.param) + "w"; });

}  // namespace
