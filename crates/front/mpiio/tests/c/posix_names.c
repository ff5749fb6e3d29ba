#define _GNU_SOURCE
/* POSIX calls on the names under ROOT (argv[1]): run once on weft:/...
 * (the preloaded library serves them) and once on a local directory; the
 * two outputs must be identical. Each rank works in ROOT/r<rank>, then
 * rank 0 prints every rank's lines in order. Uses what IOR's POSIX back
 * end and mdtest use: open/creat/close, read/write/pread/pwrite, lseek,
 * fsync, ftruncate, stat/fstat/lstat, statvfs, access, mkdir/rmdir,
 * unlink, rename, opendir/readdir/closedir. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#define OUT 16384
static char out[OUT];
static size_t used;

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + used, OUT - used, fmt, ap);
    va_end(ap);
    if (n > 0) used += (size_t)n < OUT - used ? (size_t)n : OUT - used - 1;
}

/* A call's result: "ok" or the errno's name. */
static const char *res(int r) {
    static char buf[64];
    if (r >= 0) return "ok";
    snprintf(buf, sizeof buf, "%s", strerrorname_np(errno) ? strerrorname_np(errno) : "?");
    return buf;
}

static unsigned char pat(long i) { return (unsigned char)(i * 7 + 3); }

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names of dir (without . and ..), sorted, with their types. */
static void list(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        say("opendir %s\n", res(-1));
        return;
    }
    /* Read it all, rewind, and read it again from a remembered place. */
    int first = 0;
    while (readdir(d)) first++;
    rewinddir(d);
    long mark = telldir(d);
    int again = 0;
    while (readdir(d)) again++;
    seekdir(d, mark);
    int third = 0;
    while (readdir(d)) third++;
    say("rewound: %d\n", first == again && again == third);
    rewinddir(d);
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *s = malloc(strlen(e->d_name) + 3);
        sprintf(s, "%s%s", e->d_name, e->d_type == DT_DIR ? "/" : e->d_type == DT_REG ? "" : "?");
        names[n++] = s;
    }
    say("closedir %s\n", res(closedir(d)));
    qsort(names, n, sizeof names[0], cmp);
    say("listing (%d):", n);
    for (int i = 0; i < n; i++) {
        say(" %s", names[i]);
        free(names[i]);
    }
    say("\n");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2) MPI_Abort(MPI_COMM_WORLD, 2);
    const char *root = argv[1];
    umask(022);
    if (rank == 0) {
        mkdir(root, 0755);
        say("mkdir root again: %s\n", res(mkdir(root, 0755)));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    char d[4096], a[4200], b[4200], c[4200], sub[4200], p[4300];
    snprintf(d, sizeof d, "%s/r%d", root, rank);
    snprintf(a, sizeof a, "%s/a", d);
    snprintf(b, sizeof b, "%s/b", d);
    snprintf(c, sizeof c, "%s/c", d);
    snprintf(sub, sizeof sub, "%s/sub", d);
    struct stat st;
    say("mkdir: %s\n", res(mkdir(d, 0755)));
    /* One call per statement: C leaves the order of arguments open. */
    int rc = stat(d, &st);
    say("stat dir: %s isdir %d mode %o\n", res(rc), S_ISDIR(st.st_mode), st.st_mode & 07777);

    /* Write 100,000 bytes in odd pieces. */
    int fd = open(a, O_CREAT | O_EXCL | O_WRONLY, 0644);
    say("create: %s\n", res(fd));
    static unsigned char buf[100000], back[100000];
    for (long i = 0; i < 100000; i++) buf[i] = pat(i);
    long done = 0;
    while (done < 100000) {
        long n = 100000 - done < 7777 ? 100000 - done : 7777;
        ssize_t w = write(fd, buf + done, (size_t)n);
        if (w <= 0) break;
        done += w;
    }
    say("written %ld\n", done);
    rc = fstat(fd, &st);
    say("fstat: %s size %lld regular %d\n", res(rc), (long long)st.st_size, S_ISREG(st.st_mode));
    say("close: %s\n", res(close(fd)));
    say("create again: %s\n", res(open(a, O_CREAT | O_EXCL | O_WRONLY, 0644)));

    fd = open(a, O_RDWR);
    say("open rdwr: %s\n", res(fd));
    ssize_t r = pread(fd, back, 5000, 1234);
    say("pread %zd same %d\n", r, r == 5000 && !memcmp(back, buf + 1234, 5000));
    say("lseek end %lld\n", (long long)lseek(fd, 0, SEEK_END));
    say("write at end %zd\n", write(fd, "0123456789", 10));
    say("lseek back %lld\n", (long long)lseek(fd, -20, SEEK_CUR));
    memset(back, 0, 20);
    r = read(fd, back, 20);
    say("read %zd same %d\n", r, r == 20 && !memcmp(back, buf + 99990, 10) && !memcmp(back + 10, "0123456789", 10));
    say("read at eof %zd\n", read(fd, back, 20));
    say("pwrite %zd\n", pwrite(fd, "XY", 2, 200000));
    fstat(fd, &st);
    say("fstat size %lld (past a hole)\n", (long long)st.st_size);
    r = pread(fd, back, 10, 150000);
    say("hole reads %zd zeros %d\n", r, r == 10 && !back[0] && !back[9]);
    say("ftruncate: %s\n", res(ftruncate(fd, 50000)));
    fstat(fd, &st);
    say("fstat size %lld\n", (long long)st.st_size);
    say("fsync: %s\n", res(fsync(fd)));
    say("lseek negative: %s\n", res((int)lseek(fd, -1, SEEK_SET)));
    say("close: %s\n", res(close(fd)));
    memset(back, 0, sizeof back);
    fd = open(a, O_RDONLY);
    r = read(fd, back, sizeof back);
    say("read back %zd same %d\n", r, r == 50000 && !memcmp(back, buf, 50000));
    say("write on read-only: %s\n", res((int)write(fd, "x", 1)));
    close(fd);

    fd = open(a, O_WRONLY | O_APPEND);
    say("append %zd\n", write(fd, "abc", 3));
    close(fd);
    stat(a, &st);
    say("stat size %lld\n", (long long)st.st_size);
    fd = open(a, O_WRONLY | O_TRUNC);
    close(fd);
    stat(a, &st);
    say("truncated size %lld\n", (long long)st.st_size);

    fd = creat(b, 0666);
    ssize_t wrote = write(fd, "hello", 5);
    say("creat %s, write %zd\n", res(fd), wrote);
    close(fd);
    rc = stat(b, &st);
    say("stat b: %s mode %o size %lld\n", res(rc), st.st_mode & 07777, (long long)st.st_size);
    memset(&st, 0, sizeof st);
    rc = lstat(b, &st);
    say("lstat b: %s size %lld\n", res(rc), (long long)st.st_size);
    rc = access(b, R_OK | W_OK);
    say("access rw: %s\n", res(rc));
    rc = access(c, F_OK);
    say("access missing: %s\n", res(rc));
    rc = rename(b, c);
    say("rename: %s\n", res(rc));
    rc = stat(b, &st);
    say("old name: %s\n", res(rc));
    rc = stat(c, &st);
    say("new name: %s size %lld\n", res(rc), (long long)st.st_size);
    /* Vectored I/O, openat, a directory's descriptor, trailing slashes. */
    char v[4300];
    snprintf(v, sizeof v, "%s/v", d);
    fd = openat(AT_FDCWD, v, O_CREAT | O_WRONLY, 0644);
    struct iovec out2[2] = {{"abc", 3}, {"defgh", 5}};
    ssize_t vw = writev(fd, out2, 2);
    say("openat %s, writev %zd\n", res(fd), vw);
    close(fd);
    char x[4] = {0}, y[10] = {0};
    struct iovec in2[2] = {{x, 4}, {y, 10}};
    fd = open(v, O_RDONLY);
    ssize_t vr = readv(fd, in2, 2);
    say("readv %zd: %.4s|%.4s\n", vr, x, y);
    close(fd);
    /* A duplicate shares the position, as the kernel's do. */
    fd = open(v, O_RDWR);
    int fd2 = dup(fd);
    ssize_t d1 = write(fd, "12", 2);
    ssize_t d2 = write(fd2, "34", 2);
    off_t at = lseek(fd, 0, SEEK_CUR);
    int fd3 = dup2(fd2, 200);
    memset(x, 0, sizeof x);
    ssize_t d3 = pread(fd3, x, 4, 0);
    say("dup: %s, writes %zd %zd, position %lld, dup2 %d, reads %zd: %.4s\n", fd2 >= 0 ? "ok" : res(-1), d1, d2, (long long)at, fd3, d3, x);
    close(fd3);
    close(fd2);
    rc = close(fd);
    say("close after dups: %s\n", res(rc));
    rc = unlink(v);
    say("unlink v: %s\n", res(rc));
    int dfd = open(d, O_RDONLY | O_DIRECTORY);
    say("open dir: %s\n", res(dfd));
    rc = fsync(dfd);
    say("fsync dir: %s\n", res(rc));
    rc = fstat(dfd, &st);
    say("fstat dir: %s isdir %d\n", res(rc), S_ISDIR(st.st_mode));
    rc = close(dfd);
    say("close dir: %s\n", res(rc));
    snprintf(p, sizeof p, "%s/", c);
    rc = stat(p, &st);
    say("file with a slash: %s\n", res(rc));
    rc = open(c, O_RDONLY | O_DIRECTORY);
    say("O_DIRECTORY on a file: %s\n", res(rc));
    /* stdio: written with fprintf, appended, read back with fgets. */
    FILE *sf = fopen(v, "w");
    int pr = sf ? fprintf(sf, "line %d\n", 1) : -1;
    say("fopen w: %s, fprintf %d, fclose %s\n", sf ? "ok" : res(-1), pr, sf ? res(fclose(sf)) : "-");
    sf = fopen(v, "a");
    if (sf) {
        fputs("line 2\n", sf);
        fclose(sf);
    }
    char l1[32] = "", l2[32] = "", l3[32] = "";
    sf = fopen(v, "r");
    if (sf) {
        if (!fgets(l1, sizeof l1, sf)) l1[0] = 0;
        if (!fgets(l2, sizeof l2, sf)) l2[0] = 0;
        if (!fgets(l3, sizeof l3, sf)) strcpy(l3, "eof");
        fseek(sf, 5, SEEK_SET);
        int ch = fgetc(sf);
        say("fgets: %s%s%s; fseek 5: %c\n", l1, l2, l3, ch);
        fclose(sf);
    }
    unlink(v);
    errno = 0;
    sf = fopen(v, "r");
    say("fopen missing: %s\n", sf ? "ok" : res(-1));
    say("mkdir sub: %s\n", res(mkdir(sub, 0700)));
    say("rmdir full: %s\n", res(rmdir(d)));
    list(d);

    /* mdtest's shape: many small files, created, stated, listed, removed. */
    int made = 0, stated = 0, removed = 0;
    for (int i = 0; i < 40; i++) {
        snprintf(p, sizeof p, "%s/f.%d", sub, i);
        int f = open(p, O_CREAT | O_WRONLY, 0644);
        if (f >= 0 && write(f, "z", 1) == 1 && close(f) == 0) made++;
    }
    for (int i = 0; i < 40; i++) {
        snprintf(p, sizeof p, "%s/f.%d", sub, i);
        if (stat(p, &st) == 0 && st.st_size == 1) stated++;
    }
    DIR *dd = opendir(sub);
    int listed = 0;
    while (dd && readdir(dd)) listed++;
    if (dd) closedir(dd);
    for (int i = 0; i < 40; i++) {
        snprintf(p, sizeof p, "%s/f.%d", sub, i);
        if (unlink(p) == 0) removed++;
    }
    say("small files: made %d stated %d listed %d removed %d\n", made, stated, listed - 2 * (listed > 40), removed);

    rc = unlink(a);
    say("unlink a: %s\n", res(rc));
    rc = unlink(c);
    say("unlink c: %s\n", res(rc));
    rc = unlink(c);
    say("unlink c again: %s\n", res(rc));
    rc = rmdir(sub);
    say("rmdir sub: %s\n", res(rc));
    rc = rmdir(d);
    say("rmdir dir: %s\n", res(rc));
    rc = stat(d, &st);
    say("stat gone: %s\n", res(rc));
    say("open missing: %s\n", res(open(a, O_RDONLY)));
    /* Left for the test to read through the weft command. */
    if (rank == 0) {
        snprintf(p, sizeof p, "%s/keep.bin", root);
        int k = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        for (long off = 0; off < 70000; off += 6007) pwrite(k, buf + off, (size_t)(70000 - off < 6007 ? 70000 - off : 6007), off);
        say("keep: %s\n", res(close(k)));
    }
    struct statvfs vfs;
    int vf = statvfs(root, &vfs);
    say("statvfs: %s sane %d\n", res(vf), vf == 0 && vfs.f_bsize > 0 && vfs.f_blocks > 0 && vfs.f_bfree <= vfs.f_blocks);
    say("close bad fd: %s\n", res(close(100000)));

    /* Rank 0 prints every rank's lines, in rank order. */
    char *all = rank == 0 ? malloc((size_t)OUT * size) : NULL;
    MPI_Gather(out, OUT, MPI_CHAR, all, OUT, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int i = 0; i < size; i++) printf("--- rank %d\n%s", i, all + (size_t)i * OUT);
        free(all);
        rmdir(root);
    }
    MPI_Finalize();
    return 0;
}
