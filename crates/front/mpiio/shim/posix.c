/* POSIX calls on weft: names (issue 27 item 8), interposed like the
 * MPI_File_* calls: a name that starts with "weft:", or a descriptor or
 * directory stream this file handed out, goes to the Rust core
 * (src/posix.rs); everything else to the C library, found with
 * dlsym(RTLD_NEXT), unchanged. A descriptor is a real one reserved by
 * opening /dev/null, so its number is the kernel's and never collides;
 * which descriptors are Weft's is a table of flags, one load per call.
 *
 * Covered: open, open64, openat (a weft: name), creat, creat64, close,
 * read, write, pread, pread64, pwrite, pwrite64, lseek, lseek64, fsync,
 * fdatasync, ftruncate, ftruncate64, stat, stat64, lstat, lstat64, fstat,
 * fstat64, statvfs, statvfs64, mkdir, rmdir, unlink, rename, access,
 * opendir, readdir, readdir64, closedir. Not: stdio (fopen), mmap, dup,
 * fcntl, statx, *at calls other than openat (docs/mpiio.md). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
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
int weftio_posix_stat(const char *name, weft_stat *out);
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

static int is_weft(const char *p) { return p && strncmp(p, "weft:", 5) == 0; }

/* Which descriptors are Weft's. */
#define MAX_FD 65536
static _Atomic unsigned char ours[MAX_FD];
static int is_ours(int fd) { return fd >= 0 && fd < MAX_FD && atomic_load_explicit(&ours[fd], memory_order_acquire); }

/* A core answer: >= 0 passes, -errno sets errno and gives -1. */
static long answer(long r) {
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

static int weft_open(const char *name, int flags, mode_t mode) {
    int fd = get_open()("/dev/null", O_RDONLY | O_CLOEXEC);
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
    int r = weftio_posix_close(fd);
    get_close()(fd);
    return (int)answer(r);
}

ssize_t read(int fd, void *buf, size_t len) {
    if (!is_ours(fd)) return get_read()(fd, buf, len);
    return answer(weftio_posix_read(fd, buf, len, -1));
}

ssize_t write(int fd, const void *buf, size_t len) {
    if (!is_ours(fd)) return get_write()(fd, buf, len);
    return answer(weftio_posix_write(fd, buf, len, -1));
}

/* An explicit offset must not be negative (EINVAL, as the kernel's). */
#define AT(off) ((off) < 0 ? (errno = EINVAL, -1) : 0)

ssize_t pread(int fd, void *buf, size_t len, off_t off) {
    if (!is_ours(fd)) return get_pread()(fd, buf, len, off);
    if (AT(off)) return -1;
    return answer(weftio_posix_read(fd, buf, len, off));
}

ssize_t pread64(int fd, void *buf, size_t len, off64_t off) {
    if (!is_ours(fd)) return get_pread64()(fd, buf, len, off);
    if (AT(off)) return -1;
    return answer(weftio_posix_read(fd, buf, len, off));
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off) {
    if (!is_ours(fd)) return get_pwrite()(fd, buf, len, off);
    if (AT(off)) return -1;
    return answer(weftio_posix_write(fd, buf, len, off));
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off64_t off) {
    if (!is_ours(fd)) return get_pwrite64()(fd, buf, len, off);
    if (AT(off)) return -1;
    return answer(weftio_posix_write(fd, buf, len, off));
}

off_t lseek(int fd, off_t off, int whence) {
    if (!is_ours(fd)) return get_lseek()(fd, off, whence);
    return answer(weftio_posix_lseek(fd, off, whence));
}

off64_t lseek64(int fd, off64_t off, int whence) {
    if (!is_ours(fd)) return get_lseek64()(fd, off, whence);
    return answer(weftio_posix_lseek(fd, off, whence));
}

int fsync(int fd) {
    if (!is_ours(fd)) return get_fsync()(fd);
    return (int)answer(weftio_posix_fsync(fd));
}

int fdatasync(int fd) {
    if (!is_ours(fd)) return get_fdatasync()(fd);
    return (int)answer(weftio_posix_fsync(fd));
}

int ftruncate(int fd, off_t len) {
    if (!is_ours(fd)) return get_ftruncate()(fd, len);
    return (int)answer(weftio_posix_ftruncate(fd, len));
}

int ftruncate64(int fd, off64_t len) {
    if (!is_ours(fd)) return get_ftruncate64()(fd, len);
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

#define STAT_BY_NAME(fn, type)                                        \
    int fn(const char *name, type *st) {                              \
        if (!is_weft(name)) return get_##fn()(name, st);              \
        weft_stat w;                                                  \
        int r = weftio_posix_stat(name, &w);                          \
        if (r < 0) return (int)answer(r);                             \
        FILL_STAT(st, w);                                             \
        return 0;                                                     \
    }

STAT_BY_NAME(stat, struct stat)
STAT_BY_NAME(stat64, struct stat64)
STAT_BY_NAME(lstat, struct stat)
STAT_BY_NAME(lstat64, struct stat64)

#define STAT_BY_FD(fn, type)                                          \
    int fn(int fd, type *st) {                                        \
        if (!is_ours(fd)) return get_##fn()(fd, st);                  \
        weft_stat w;                                                  \
        int r = weftio_posix_fstat(fd, &w);                           \
        if (r < 0) return (int)answer(r);                             \
        FILL_STAT(st, w);                                             \
        return 0;                                                     \
    }

STAT_BY_FD(fstat, struct stat)
STAT_BY_FD(fstat64, struct stat64)

#define STATVFS(fn, type)                                             \
    int fn(const char *name, type *s) {                               \
        if (!is_weft(name)) return get_##fn()(name, s);               \
        weft_statvfs w;                                               \
        int r = weftio_posix_statvfs(name, &w);                       \
        if (r < 0) return (int)answer(r);                             \
        memset(s, 0, sizeof *s);                                      \
        s->f_bsize = s->f_frsize = 4096;                              \
        s->f_blocks = w.total / 4096;                                 \
        s->f_bfree = s->f_bavail = w.free / 4096;                     \
        s->f_files = w.files;                                         \
        s->f_ffree = s->f_favail = UINT32_MAX;                        \
        s->f_fsid = 0x77656674;                                       \
        s->f_namemax = 255;                                           \
        return 0;                                                     \
    }

STATVFS(statvfs, struct statvfs)
STATVFS(statvfs64, struct statvfs64)

int mkdir(const char *name, mode_t mode) {
    if (!is_weft(name)) return get_mkdir()(name, mode);
    return (int)answer(weftio_posix_mkdir(name, mode));
}

int rmdir(const char *name) {
    if (!is_weft(name)) return get_rmdir()(name);
    return (int)answer(weftio_posix_rmdir(name));
}

int unlink(const char *name) {
    if (!is_weft(name)) return get_unlink()(name);
    return (int)answer(weftio_posix_unlink(name));
}

int rename(const char *from, const char *to) {
    int a = is_weft(from), b = is_weft(to);
    if (!a && !b) return get_rename()(from, to);
    if (a != b) {
        errno = EXDEV;
        return -1;
    }
    return (int)answer(weftio_posix_rename(from, to));
}

int access(const char *name, int amode) {
    if (!is_weft(name)) return get_access()(name, amode);
    return (int)answer(weftio_posix_access(name, amode));
}

/* A Weft directory stream: handed out as a DIR *, known by membership in
 * the table below, never by reading it. */
struct wdir {
    uint64_t handle;
    struct dirent ent;
    struct dirent64 ent64;
};
#define MAX_DIRS 1024
static struct wdir *dirs[MAX_DIRS];
static pthread_mutex_t dirs_lock = PTHREAD_MUTEX_INITIALIZER;

static struct wdir *weft_dir(DIR *d) {
    struct wdir *found = NULL;
    pthread_mutex_lock(&dirs_lock);
    for (int i = 0; i < MAX_DIRS && !found; i++)
        if (dirs[i] == (struct wdir *)d) found = dirs[i];
    pthread_mutex_unlock(&dirs_lock);
    return found;
}

DIR *opendir(const char *name) {
    if (!is_weft(name)) return get_opendir()(name);
    struct wdir *w = calloc(1, sizeof *w);
    if (!w) {
        errno = ENOMEM;
        return NULL;
    }
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
    if (slot >= 0) dirs[slot] = w;
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

int closedir(DIR *d) {
    struct wdir *w = NULL;
    pthread_mutex_lock(&dirs_lock);
    for (int i = 0; i < MAX_DIRS && !w; i++)
        if (dirs[i] == (struct wdir *)d) {
            w = dirs[i];
            dirs[i] = NULL;
        }
    pthread_mutex_unlock(&dirs_lock);
    if (!w) return get_closedir()(d);
    int r = weftio_posix_closedir(w->handle);
    free(w);
    return (int)answer(r);
}
