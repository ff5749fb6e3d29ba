/* POSIX calls on weft: names (issue 27 item 8), interposed like the
 * MPI_File_* calls: a name that starts with "weft:", or a descriptor or
 * directory stream this file handed out, goes to the Rust core
 * (src/posix.rs); everything else to the C library, found with
 * dlsym(RTLD_NEXT), unchanged. A descriptor is a real one reserved by
 * opening "/" with O_PATH, so its number is the kernel's and never
 * collides, and a call not covered here fails on it (EBADF) rather than
 * acting on something else; which descriptors are Weft's is a table of
 * flags, one load per call.
 *
 * Covered: open, open64, openat, openat64 (a weft: name), the fortified
 * __open_2 family, creat, creat64, close, read, write, pread(64),
 * pwrite(64), readv, writev, preadv, pwritev, the fortified __read_chk and
 * __pread(64)_chk, lseek(64), fsync, fdatasync, ftruncate(64), stat(64),
 * lstat(64), fstat(64), the __xstat family, statvfs(64), mkdir, rmdir,
 * unlink, rename, access, opendir, readdir(64), closedir, rewinddir,
 * telldir, seekdir, dirfd, dup, dup2, dup3, fopen, fopen64 (a stream
 * over the descriptor). Not: freopen, fdopen, mmap, fcntl, statx, other
 * *at calls (docs/mpiio.md).
 *
 * After fork, the child's Weft descriptors and streams are dead (EIO):
 * the client's connections and files are the parent's. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#include "shim.h"

/* The core's side (src/posix.rs): 0 or a byte count, else -errno. */
typedef struct { uint64_t ino; uint32_t mode, nlink, uid, gid; uint64_t size, blksize; int64_t mtime_ns, ctime_ns; } weft_stat;
typedef struct { uint64_t total, free, files; } weft_statvfs;
int weftio_posix_open(const char *name, int flags, uint32_t mode, int fd);
int weftio_posix_close(int fd);
ssize_t weftio_posix_read(int fd, void *buf, size_t len, int64_t offset);
ssize_t weftio_posix_write(int fd, const void *buf, size_t len, int64_t offset);
int64_t weftio_posix_lseek(int fd, int64_t offset, int whence);
int weftio_posix_fsync(int fd);
int weftio_posix_ftruncate(int fd, int64_t len);
int weftio_posix_stat(const char *name, int follow, weft_stat *out);
int weftio_posix_fstat(int fd, weft_stat *out);
int weftio_posix_statvfs(const char *name, weft_statvfs *out);
int weftio_posix_mkdir(const char *name, uint32_t mode);
int weftio_posix_rmdir(const char *name);
int weftio_posix_unlink(const char *name);
int weftio_posix_rename(const char *from, const char *to);
int weftio_posix_access(const char *name, int amode);
int weftio_posix_opendir(const char *name, uint64_t *handle);
int weftio_posix_readdir(uint64_t handle, char *name, size_t cap, unsigned char *type, uint64_t *ino);
int weftio_posix_closedir(uint64_t handle);
int weftio_posix_dup(int from, int to);
int64_t weftio_posix_seekdir(uint64_t handle, int64_t to);

/* The C library's definition of name (resolved once, thread-safely: a
 * racing second resolution stores the same pointer). */
#define REAL(ret, name, params)                                        \
    static ret (*_Atomic real_##name) params;                          \
    static ret (*get_##name(void)) params {                            \
        ret (*f) params = atomic_load(&real_##name);                   \
        if (!f) {                                                      \
            f = (ret (*) params)weft_next(#name);                      \
            atomic_store(&real_##name, f);                             \
        }                                                              \
        return f;                                                      \
    }

REAL(int, open, (const char *, int, ...))
REAL(int, open64, (const char *, int, ...))
REAL(int, openat, (int, const char *, int, ...))
REAL(int, openat64, (int, const char *, int, ...))
REAL(int, __open_2, (const char *, int))
REAL(int, __open64_2, (const char *, int))
REAL(int, __openat_2, (int, const char *, int))
REAL(int, __openat64_2, (int, const char *, int))
REAL(ssize_t, readv, (int, const struct iovec *, int))
REAL(ssize_t, writev, (int, const struct iovec *, int))
REAL(ssize_t, preadv, (int, const struct iovec *, int, off_t))
REAL(ssize_t, pwritev, (int, const struct iovec *, int, off_t))
REAL(ssize_t, __read_chk, (int, void *, size_t, size_t))
REAL(ssize_t, __pread_chk, (int, void *, size_t, off_t, size_t))
REAL(ssize_t, __pread64_chk, (int, void *, size_t, off64_t, size_t))
REAL(int, __xstat, (int, const char *, struct stat *))
REAL(int, __lxstat, (int, const char *, struct stat *))
REAL(int, __fxstat, (int, int, struct stat *))
REAL(int, __xstat64, (int, const char *, struct stat64 *))
REAL(int, __lxstat64, (int, const char *, struct stat64 *))
REAL(int, __fxstat64, (int, int, struct stat64 *))
REAL(int, creat, (const char *, mode_t))
REAL(int, creat64, (const char *, mode_t))
REAL(int, close, (int))
REAL(ssize_t, read, (int, void *, size_t))
REAL(ssize_t, write, (int, const void *, size_t))
REAL(ssize_t, pread, (int, void *, size_t, off_t))
REAL(ssize_t, pread64, (int, void *, size_t, off64_t))
REAL(ssize_t, pwrite, (int, const void *, size_t, off_t))
REAL(ssize_t, pwrite64, (int, const void *, size_t, off64_t))
REAL(off_t, lseek, (int, off_t, int))
REAL(off64_t, lseek64, (int, off64_t, int))
REAL(int, fsync, (int))
REAL(int, fdatasync, (int))
REAL(int, ftruncate, (int, off_t))
REAL(int, ftruncate64, (int, off64_t))
REAL(int, stat, (const char *, struct stat *))
REAL(int, stat64, (const char *, struct stat64 *))
REAL(int, lstat, (const char *, struct stat *))
REAL(int, lstat64, (const char *, struct stat64 *))
REAL(int, fstat, (int, struct stat *))
REAL(int, fstat64, (int, struct stat64 *))
REAL(int, statvfs, (const char *, struct statvfs *))
REAL(int, statvfs64, (const char *, struct statvfs64 *))
REAL(int, mkdir, (const char *, mode_t))
REAL(int, rmdir, (const char *))
REAL(int, unlink, (const char *))
REAL(int, rename, (const char *, const char *))
REAL(int, access, (const char *, int))
REAL(DIR *, opendir, (const char *))
REAL(struct dirent *, readdir, (DIR *))
REAL(struct dirent64 *, readdir64, (DIR *))
REAL(int, closedir, (DIR *))
REAL(FILE *, fopen, (const char *, const char *))
REAL(FILE *, fopen64, (const char *, const char *))
REAL(int, dup, (int))
REAL(int, dup2, (int, int))
REAL(int, dup3, (int, int, int))
REAL(void, rewinddir, (DIR *))
REAL(long, telldir, (DIR *))
REAL(void, seekdir, (DIR *, long))
REAL(int, dirfd, (DIR *))

static int is_weft(const char *p) { return p && strncmp(p, "weft:", 5) == 0; }

/* Which descriptors are Weft's. */
#define MAX_FD 65536
static _Atomic unsigned char ours[MAX_FD];
static int is_ours(int fd) { return fd >= 0 && fd < MAX_FD && atomic_load_explicit(&ours[fd], memory_order_acquire); }

/* Set in a forked child: the client (its connections, its files) is the
 * parent's, so the child's Weft calls fail and its closes only release
 * the reserved numbers. */
static atomic_int forked;
static int dead(void) {
    if (!atomic_load_explicit(&forked, memory_order_relaxed)) return 0;
    errno = EIO;
    return 1;
}

static pthread_mutex_t dirs_lock = PTHREAD_MUTEX_INITIALIZER;
static void before_fork(void) { pthread_mutex_lock(&dirs_lock); }
static void in_parent(void) { pthread_mutex_unlock(&dirs_lock); }
static void in_child(void) {
    pthread_mutex_unlock(&dirs_lock);
    atomic_store(&forked, 1);
}

/* Every definition resolved at load, so the first call of one (say, in a
 * signal handler) never runs dlsym. */
__attribute__((constructor)) static void resolve_all(void) {
    get_open(); get_open64(); get_openat(); get_openat64(); get_creat(); get_creat64(); get_close();
    get_read(); get_write(); get_pread(); get_pread64(); get_pwrite(); get_pwrite64();
    get_readv(); get_writev(); get_preadv(); get_pwritev(); get_lseek(); get_lseek64();
    get_fsync(); get_fdatasync(); get_ftruncate(); get_ftruncate64();
    get_stat(); get_stat64(); get_lstat(); get_lstat64(); get_fstat(); get_fstat64();
    get_statvfs(); get_statvfs64(); get_mkdir(); get_rmdir(); get_unlink(); get_rename(); get_access();
    get_opendir(); get_readdir(); get_readdir64(); get_closedir();
    get_fopen(); get_fopen64(); get_dup(); get_dup2(); get_dup3(); get_rewinddir(); get_telldir(); get_seekdir(); get_dirfd();
    pthread_atfork(before_fork, in_parent, in_child);
}

/* A core answer: >= 0 passes, -errno sets errno and gives -1. */
static long answer(long r) {
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

static int weft_open(const char *name, int flags, mode_t mode) {
    if (dead()) return -1;
    int fd = get_open()("/", O_PATH | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fd >= MAX_FD) {
        get_close()(fd);
        errno = EMFILE;
        return -1;
    }
    int r = weftio_posix_open(name, flags, (uint32_t)mode, fd);
    if (r < 0) {
        get_close()(fd);
        errno = -r;
        return -1;
    }
    atomic_store_explicit(&ours[fd], 1, memory_order_release);
    return fd;
}

/* open(2)'s mode argument is there only with O_CREAT or O_TMPFILE. */
#define MODE_ARG(flags, mode)                                 \
    do {                                                      \
        if ((flags) & O_CREAT || ((flags) & O_TMPFILE) == O_TMPFILE) { \
            va_list ap;                                       \
            va_start(ap, flags);                              \
            mode = (mode_t)va_arg(ap, int);                   \
            va_end(ap);                                       \
        }                                                     \
    } while (0)

int open(const char *name, int flags, ...) {
    mode_t mode = 0;
    MODE_ARG(flags, mode);
    if (is_weft(name)) return weft_open(name, flags, mode);
    return get_open()(name, flags, mode);
}

int open64(const char *name, int flags, ...) {
    mode_t mode = 0;
    MODE_ARG(flags, mode);
    if (is_weft(name)) return weft_open(name, flags, mode);
    return get_open64()(name, flags, mode);
}

int openat(int dirfd, const char *name, int flags, ...) {
    mode_t mode = 0;
    MODE_ARG(flags, mode);
    if (is_weft(name)) return weft_open(name, flags, mode);
    return get_openat()(dirfd, name, flags, mode);
}

int openat64(int dirfd, const char *name, int flags, ...) {
    mode_t mode = 0;
    MODE_ARG(flags, mode);
    if (is_weft(name)) return weft_open(name, flags, mode);
    return get_openat64()(dirfd, name, flags, mode);
}

/* _FORTIFY_SOURCE's opens: without a mode (their flags need none). */
int __open_2(const char *name, int flags) {
    if (is_weft(name)) return weft_open(name, flags, 0);
    return get___open_2()(name, flags);
}

int __open64_2(const char *name, int flags) {
    if (is_weft(name)) return weft_open(name, flags, 0);
    return get___open64_2()(name, flags);
}

int __openat_2(int dirfd, const char *name, int flags) {
    if (is_weft(name)) return weft_open(name, flags, 0);
    return get___openat_2()(dirfd, name, flags);
}

int __openat64_2(int dirfd, const char *name, int flags) {
    if (is_weft(name)) return weft_open(name, flags, 0);
    return get___openat64_2()(dirfd, name, flags);
}

/* A duplicate of Weft descriptor `fd` as `to` (a real duplicate of its
 * reserved number, made by `dup_real`), sharing its position. */
static int weft_dup(int fd, int to) {
    if (to < 0) return -1;
    if (to >= MAX_FD) {
        get_close()(to);
        errno = EMFILE;
        return -1;
    }
    int r = weftio_posix_dup(fd, to);
    if (r < 0) {
        get_close()(to);
        errno = -r;
        return -1;
    }
    atomic_store_explicit(&ours[to], 1, memory_order_release);
    return to;
}

int dup(int fd) {
    if (!is_ours(fd)) return get_dup()(fd);
    if (dead()) return -1;
    return weft_dup(fd, get_dup()(fd));
}

/* dup2/dup3 onto a Weft descriptor close it first, as the kernel would. */
int dup2(int fd, int to) {
    if (!is_ours(fd) && !is_ours(to)) return get_dup2()(fd, to);
    if (fd == to) return is_ours(fd) || fcntl(fd, F_GETFD) >= 0 ? to : -1;
    if (is_ours(to)) close(to);
    if (!is_ours(fd)) return get_dup2()(fd, to);
    if (dead()) return -1;
    return weft_dup(fd, get_dup2()(fd, to));
}

int dup3(int fd, int to, int flags) {
    if (!is_ours(fd) && !is_ours(to)) return get_dup3()(fd, to, flags);
    if (fd == to) {
        errno = EINVAL;
        return -1;
    }
    if (is_ours(to)) close(to);
    if (!is_ours(fd)) return get_dup3()(fd, to, flags);
    if (dead()) return -1;
    return weft_dup(fd, get_dup3()(fd, to, flags));
}

/* stdio on a weft: name: a stream whose reads, writes, seeks and close
 * go through the Weft descriptor (fopencookie), buffered by stdio as
 * any stream. */
static ssize_t cookie_read(void *c, char *buf, size_t len) {
    ssize_t r = read((int)(intptr_t)c, buf, len);
    return r < 0 ? -1 : r;
}

static ssize_t cookie_write(void *c, const char *buf, size_t len) {
    ssize_t r = write((int)(intptr_t)c, buf, len);
    /* stdio takes 0 for an error. */
    return r < 0 ? 0 : r;
}

static int cookie_seek(void *c, off64_t *at, int whence) {
    off64_t r = lseek64((int)(intptr_t)c, *at, whence);
    if (r < 0) return -1;
    *at = r;
    return 0;
}

static int cookie_close(void *c) { return close((int)(intptr_t)c); }

static FILE *weft_fopen(const char *name, const char *mode) {
    int flags;
    switch (mode[0]) {
    case 'r': flags = strchr(mode, '+') ? O_RDWR : O_RDONLY; break;
    case 'w': flags = (strchr(mode, '+') ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC; break;
    case 'a': flags = (strchr(mode, '+') ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND; break;
    default: errno = EINVAL; return NULL;
    }
    if (strchr(mode, 'x')) flags |= O_EXCL;
    int fd = weft_open(name, flags, 0666);
    if (fd < 0) return NULL;
    cookie_io_functions_t io = {cookie_read, cookie_write, cookie_seek, cookie_close};
    FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);
    if (!f) close(fd);
    return f;
}

FILE *fopen(const char *name, const char *mode) {
    if (is_weft(name)) return weft_fopen(name, mode);
    return get_fopen()(name, mode);
}

FILE *fopen64(const char *name, const char *mode) {
    if (is_weft(name)) return weft_fopen(name, mode);
    return get_fopen64()(name, mode);
}

int creat(const char *name, mode_t mode) {
    if (is_weft(name)) return weft_open(name, O_CREAT | O_WRONLY | O_TRUNC, mode);
    return get_creat()(name, mode);
}

int creat64(const char *name, mode_t mode) {
    if (is_weft(name)) return weft_open(name, O_CREAT | O_WRONLY | O_TRUNC, mode);
    return get_creat64()(name, mode);
}

int close(int fd) {
    if (!is_ours(fd)) return get_close()(fd);
    atomic_store_explicit(&ours[fd], 0, memory_order_release);
    int r = atomic_load(&forked) ? 0 : weftio_posix_close(fd);
    get_close()(fd);
    return (int)answer(r);
}

ssize_t read(int fd, void *buf, size_t len) {
    if (!is_ours(fd)) return get_read()(fd, buf, len);
    if (dead()) return -1;
    return answer(weftio_posix_read(fd, buf, len, -1));
}

ssize_t write(int fd, const void *buf, size_t len) {
    if (!is_ours(fd)) return get_write()(fd, buf, len);
    if (dead()) return -1;
    return answer(weftio_posix_write(fd, buf, len, -1));
}

/* Vectored I/O on a Weft descriptor: one piece after another (at `off`,
 * or at the position when off < 0), short at the first short piece. */
static ssize_t weft_iov(int fd, const struct iovec *iov, int n, int64_t off, int writing) {
    if (dead()) return -1;
    if (n < 0 || n > IOV_MAX) {
        errno = EINVAL;
        return -1;
    }
    ssize_t total = 0;
    for (int i = 0; i < n; i++) {
        if (iov[i].iov_len == 0) continue;
        /* Lengths are the caller's: the position must stay an offset. */
        if (iov[i].iov_len > (size_t)(INT64_MAX - total) || (off >= 0 && off > INT64_MAX - total - (int64_t)iov[i].iov_len)) {
            if (total > 0) return total;
            errno = EINVAL;
            return -1;
        }
        int64_t at = off < 0 ? -1 : off + total;
        ssize_t r = writing ? weftio_posix_write(fd, iov[i].iov_base, iov[i].iov_len, at) : weftio_posix_read(fd, iov[i].iov_base, iov[i].iov_len, at);
        if (r < 0) return total > 0 ? total : answer(r);
        total += r;
        if ((size_t)r < iov[i].iov_len) break;
    }
    return total;
}

ssize_t readv(int fd, const struct iovec *iov, int n) {
    if (!is_ours(fd)) return get_readv()(fd, iov, n);
    return weft_iov(fd, iov, n, -1, 0);
}

ssize_t writev(int fd, const struct iovec *iov, int n) {
    if (!is_ours(fd)) return get_writev()(fd, iov, n);
    return weft_iov(fd, iov, n, -1, 1);
}

ssize_t preadv(int fd, const struct iovec *iov, int n, off_t off) {
    if (!is_ours(fd)) return get_preadv()(fd, iov, n, off);
    if (off < 0) return errno = EINVAL, -1;
    return weft_iov(fd, iov, n, off, 0);
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off) {
    if (!is_ours(fd)) return get_pwritev()(fd, iov, n, off);
    if (off < 0) return errno = EINVAL, -1;
    return weft_iov(fd, iov, n, off, 1);
}

/* _FORTIFY_SOURCE's reads: the buffer's size is checked first. */
ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen) {
    if (!is_ours(fd)) return get___read_chk()(fd, buf, len, buflen);
    if (len > buflen) abort();
    return read(fd, buf, len);
}

/* An explicit offset must not be negative (EINVAL, as the kernel's). */
#define AT(off) ((off) < 0 ? (errno = EINVAL, -1) : 0)

ssize_t pread(int fd, void *buf, size_t len, off_t off) {
    if (!is_ours(fd)) return get_pread()(fd, buf, len, off);
    if (dead() || AT(off)) return -1;
    return answer(weftio_posix_read(fd, buf, len, off));
}

ssize_t pread64(int fd, void *buf, size_t len, off64_t off) {
    if (!is_ours(fd)) return get_pread64()(fd, buf, len, off);
    if (dead() || AT(off)) return -1;
    return answer(weftio_posix_read(fd, buf, len, off));
}

ssize_t __pread_chk(int fd, void *buf, size_t len, off_t off, size_t buflen) {
    if (!is_ours(fd)) return get___pread_chk()(fd, buf, len, off, buflen);
    if (len > buflen) abort();
    return pread(fd, buf, len, off);
}

ssize_t __pread64_chk(int fd, void *buf, size_t len, off64_t off, size_t buflen) {
    if (!is_ours(fd)) return get___pread64_chk()(fd, buf, len, off, buflen);
    if (len > buflen) abort();
    return pread64(fd, buf, len, off);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off) {
    if (!is_ours(fd)) return get_pwrite()(fd, buf, len, off);
    if (dead() || AT(off)) return -1;
    return answer(weftio_posix_write(fd, buf, len, off));
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off64_t off) {
    if (!is_ours(fd)) return get_pwrite64()(fd, buf, len, off);
    if (dead() || AT(off)) return -1;
    return answer(weftio_posix_write(fd, buf, len, off));
}

off_t lseek(int fd, off_t off, int whence) {
    if (!is_ours(fd)) return get_lseek()(fd, off, whence);
    if (dead()) return -1;
    return answer(weftio_posix_lseek(fd, off, whence));
}

off64_t lseek64(int fd, off64_t off, int whence) {
    if (!is_ours(fd)) return get_lseek64()(fd, off, whence);
    if (dead()) return -1;
    return answer(weftio_posix_lseek(fd, off, whence));
}

int fsync(int fd) {
    if (!is_ours(fd)) return get_fsync()(fd);
    if (dead()) return -1;
    return (int)answer(weftio_posix_fsync(fd));
}

int fdatasync(int fd) {
    if (!is_ours(fd)) return get_fdatasync()(fd);
    if (dead()) return -1;
    return (int)answer(weftio_posix_fsync(fd));
}

int ftruncate(int fd, off_t len) {
    if (!is_ours(fd)) return get_ftruncate()(fd, len);
    if (dead()) return -1;
    return (int)answer(weftio_posix_ftruncate(fd, len));
}

int ftruncate64(int fd, off64_t len) {
    if (!is_ours(fd)) return get_ftruncate64()(fd, len);
    if (dead()) return -1;
    return (int)answer(weftio_posix_ftruncate(fd, len));
}

/* struct stat and struct stat64 from the core's answer (same fields). */
#define FILL_STAT(st, w)                                              \
    do {                                                              \
        memset((st), 0, sizeof *(st));                                \
        (st)->st_dev = 0x77656674; /* "weft" */                       \
        (st)->st_ino = (w).ino;                                       \
        (st)->st_mode = (w).mode;                                     \
        (st)->st_nlink = (w).nlink;                                   \
        (st)->st_uid = (w).uid;                                       \
        (st)->st_gid = (w).gid;                                       \
        (st)->st_size = (off_t)(w).size;                              \
        (st)->st_blksize = (blksize_t)(w).blksize;                    \
        (st)->st_blocks = (blkcnt_t)(((w).size + 511) / 512);         \
        (st)->st_mtim.tv_sec = (w).mtime_ns / 1000000000;             \
        (st)->st_mtim.tv_nsec = (w).mtime_ns % 1000000000;            \
        (st)->st_atim = (st)->st_mtim;                                \
        (st)->st_ctim.tv_sec = (w).ctime_ns / 1000000000;             \
        (st)->st_ctim.tv_nsec = (w).ctime_ns % 1000000000;            \
    } while (0)

/* A Weft stat by name: follow says whether symbolic links are followed. */
#define WEFT_STAT(name, follow, st)                                   \
    do {                                                              \
        if (dead()) return -1;                                        \
        weft_stat w;                                                  \
        int r = weftio_posix_stat(name, follow, &w);                  \
        if (r < 0) return (int)answer(r);                             \
        FILL_STAT(st, w);                                             \
        return 0;                                                     \
    } while (0)

#define STAT_BY_NAME(fn, type, follow)                                \
    int fn(const char *name, type *st) {                              \
        if (!is_weft(name)) return get_##fn()(name, st);              \
        WEFT_STAT(name, follow, st);                                  \
    }

STAT_BY_NAME(stat, struct stat, 1)
STAT_BY_NAME(stat64, struct stat64, 1)
STAT_BY_NAME(lstat, struct stat, 0)
STAT_BY_NAME(lstat64, struct stat64, 0)

/* glibc before 2.33 compiled stat calls as these. */
#define XSTAT_BY_NAME(fn, type, follow)                               \
    int fn(int ver, const char *name, type *st) {                     \
        if (!is_weft(name)) return get_##fn()(ver, name, st);         \
        WEFT_STAT(name, follow, st);                                  \
    }

XSTAT_BY_NAME(__xstat, struct stat, 1)
XSTAT_BY_NAME(__xstat64, struct stat64, 1)
XSTAT_BY_NAME(__lxstat, struct stat, 0)
XSTAT_BY_NAME(__lxstat64, struct stat64, 0)

#define WEFT_FSTAT(fd, st)                                            \
    do {                                                              \
        if (dead()) return -1;                                        \
        weft_stat w;                                                  \
        int r = weftio_posix_fstat(fd, &w);                           \
        if (r < 0) return (int)answer(r);                             \
        FILL_STAT(st, w);                                             \
        return 0;                                                     \
    } while (0)

int fstat(int fd, struct stat *st) {
    if (!is_ours(fd)) return get_fstat()(fd, st);
    WEFT_FSTAT(fd, st);
}

int fstat64(int fd, struct stat64 *st) {
    if (!is_ours(fd)) return get_fstat64()(fd, st);
    WEFT_FSTAT(fd, st);
}

int __fxstat(int ver, int fd, struct stat *st) {
    if (!is_ours(fd)) return get___fxstat()(ver, fd, st);
    WEFT_FSTAT(fd, st);
}

int __fxstat64(int ver, int fd, struct stat64 *st) {
    if (!is_ours(fd)) return get___fxstat64()(ver, fd, st);
    WEFT_FSTAT(fd, st);
}

#define STATVFS(fn, type)                                             \
    int fn(const char *name, type *s) {                               \
        if (!is_weft(name)) return get_##fn()(name, s);               \
        if (dead()) return -1;                                        \
        weft_statvfs w;                                               \
        int r = weftio_posix_statvfs(name, &w);                       \
        if (r < 0) return (int)answer(r);                             \
        memset(s, 0, sizeof *s);                                      \
        s->f_bsize = s->f_frsize = 4096;                              \
        s->f_blocks = w.total / 4096;                                 \
        s->f_bfree = s->f_bavail = w.free / 4096;                     \
        s->f_ffree = s->f_favail = UINT32_MAX;                        \
        s->f_files = w.files + UINT32_MAX;                            \
        s->f_fsid = 0x77656674;                                       \
        s->f_namemax = 255;                                           \
        return 0;                                                     \
    }

STATVFS(statvfs, struct statvfs)
STATVFS(statvfs64, struct statvfs64)

int mkdir(const char *name, mode_t mode) {
    if (!is_weft(name)) return get_mkdir()(name, mode);
    if (dead()) return -1;
    return (int)answer(weftio_posix_mkdir(name, mode));
}

int rmdir(const char *name) {
    if (!is_weft(name)) return get_rmdir()(name);
    if (dead()) return -1;
    return (int)answer(weftio_posix_rmdir(name));
}

int unlink(const char *name) {
    if (!is_weft(name)) return get_unlink()(name);
    if (dead()) return -1;
    return (int)answer(weftio_posix_unlink(name));
}

int rename(const char *from, const char *to) {
    int a = is_weft(from), b = is_weft(to);
    if (!a && !b) return get_rename()(from, to);
    if (a != b) {
        errno = EXDEV;
        return -1;
    }
    if (dead()) return -1;
    return (int)answer(weftio_posix_rename(from, to));
}

int access(const char *name, int amode) {
    if (!is_weft(name)) return get_access()(name, amode);
    if (dead()) return -1;
    return (int)answer(weftio_posix_access(name, amode));
}

/* A Weft directory stream: handed out as a DIR *, known by membership in
 * the table below, never by reading it. It starts as glibc's own stream
 * does, with a descriptor (-1) and zeros, so a call not covered here
 * (dirfd, rewinddir, telldir, readdir_r) that reads it as glibc's finds
 * no descriptor and fails (EBADF) instead of acting on another one. */
struct wdir {
    int fd;
    char glibc_header[60];
    uint64_t handle;
    struct dirent ent;
    struct dirent64 ent64;
};
#define MAX_DIRS 1024
static struct wdir *dirs[MAX_DIRS];
/* Weft streams open now: none (the common case) skips the table. */
static atomic_int live_dirs;

static struct wdir *weft_dir(DIR *d) {
    if (!atomic_load_explicit(&live_dirs, memory_order_acquire)) return NULL;
    struct wdir *found = NULL;
    pthread_mutex_lock(&dirs_lock);
    for (int i = 0; i < MAX_DIRS && !found; i++)
        if (dirs[i] == (struct wdir *)d) found = dirs[i];
    pthread_mutex_unlock(&dirs_lock);
    return found;
}

DIR *opendir(const char *name) {
    if (!is_weft(name)) return get_opendir()(name);
    if (dead()) return NULL;
    struct wdir *w = calloc(1, sizeof *w);
    if (!w) {
        errno = ENOMEM;
        return NULL;
    }
    w->fd = -1;
    int r = weftio_posix_opendir(name, &w->handle);
    if (r < 0) {
        free(w);
        errno = -r;
        return NULL;
    }
    pthread_mutex_lock(&dirs_lock);
    int slot = -1;
    for (int i = 0; i < MAX_DIRS && slot < 0; i++)
        if (!dirs[i]) slot = i;
    if (slot >= 0) {
        dirs[slot] = w;
        atomic_fetch_add(&live_dirs, 1);
    }
    pthread_mutex_unlock(&dirs_lock);
    if (slot < 0) {
        weftio_posix_closedir(w->handle);
        free(w);
        errno = EMFILE;
        return NULL;
    }
    return (DIR *)w;
}

/* The next entry into buf's name, type and inode; NULL at the end (errno
 * untouched) or on an error (errno set). */
#define READDIR(fn, ent_field)                                                        \
    __typeof__(((struct wdir *)0)->ent_field) *fn(DIR *d) {                           \
        struct wdir *w = weft_dir(d);                                                 \
        if (!w) return get_##fn()(d);                                                 \
        if (dead()) return NULL;                                                      \
        unsigned char type = 0;                                                       \
        uint64_t ino = 0;                                                             \
        int r = weftio_posix_readdir(w->handle, w->ent_field.d_name, sizeof w->ent_field.d_name, &type, &ino); \
        if (r <= 0) {                                                                 \
            if (r < 0) errno = -r;                                                    \
            return NULL;                                                              \
        }                                                                             \
        w->ent_field.d_ino = ino;                                                     \
        w->ent_field.d_type = type;                                                   \
        w->ent_field.d_reclen = sizeof w->ent_field;                                  \
        w->ent_field.d_off = 0;                                                       \
        return &w->ent_field;                                                         \
    }

READDIR(readdir, ent)
READDIR(readdir64, ent64)

void rewinddir(DIR *d) {
    struct wdir *w = weft_dir(d);
    if (!w) {
        get_rewinddir()(d);
        return;
    }
    if (!atomic_load(&forked)) weftio_posix_seekdir(w->handle, 0);
}

long telldir(DIR *d) {
    struct wdir *w = weft_dir(d);
    if (!w) return get_telldir()(d);
    if (dead()) return -1;
    return (long)answer(weftio_posix_seekdir(w->handle, -1));
}

void seekdir(DIR *d, long at) {
    struct wdir *w = weft_dir(d);
    if (!w) {
        get_seekdir()(d, at);
        return;
    }
    if (at >= 0 && !atomic_load(&forked)) weftio_posix_seekdir(w->handle, at);
}

/* A Weft stream has no descriptor of its own. */
int dirfd(DIR *d) {
    struct wdir *w = weft_dir(d);
    if (!w) return get_dirfd()(d);
    errno = ENOTSUP;
    return -1;
}

int closedir(DIR *d) {
    struct wdir *w = NULL;
    if (atomic_load_explicit(&live_dirs, memory_order_acquire)) {
        pthread_mutex_lock(&dirs_lock);
        for (int i = 0; i < MAX_DIRS && !w; i++)
            if (dirs[i] == (struct wdir *)d) {
                w = dirs[i];
                dirs[i] = NULL;
                atomic_fetch_sub(&live_dirs, 1);
            }
        pthread_mutex_unlock(&dirs_lock);
    }
    if (!w) return get_closedir()(d);
    int r = atomic_load(&forked) ? 0 : weftio_posix_closedir(w->handle);
    free(w);
    return (int)answer(r);
}
