/* The C API against a running cluster (WEFT_CLUSTER), compared byte for
 * byte with the same accesses on a local file: contiguous writes and reads
 * around stripe boundaries, list I/O of strided regions, sizes, truncate,
 * and the error codes a program acts on. Exits 0 when everything matches. */
#define _XOPEN_SOURCE 700
#include "weft.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;
#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) {                                                \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                             \
            fprintf(stderr, " (last error: %s)\n", weft_last_error()); \
            failures++;                                               \
        }                                                             \
    } while (0)

static void pattern(unsigned char *b, size_t n, unsigned seed) {
    unsigned x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        b[i] = (unsigned char)x;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s LOCAL_REFERENCE_FILE\n", argv[0]);
        return 2;
    }
    int local = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(local >= 0, "open the local reference");
    WeftClient *c = NULL;
    CHECK(weft_connect(NULL, &c) == WEFT_OK, "connect");
    if (!c) return 1;
    CHECK(weft_mkdir(c, "weft:/capi", 0755) == WEFT_OK, "mkdir");

    WeftFile *f = NULL;
    CHECK(weft_create(c, "weft:/capi/data", 4096, 2, 0644, 1, &f) == WEFT_OK, "create");
    if (!f) return 1;

    /* Contiguous: 300,000 bytes at offset 1000 (crosses many 4 KiB stripes). */
    size_t n = 300000;
    unsigned char *a = malloc(n), *b = malloc(n);
    pattern(a, n, 1);
    CHECK(weft_pwrite(f, a, n, 1000) == (int64_t)n, "pwrite");
    CHECK(pwrite(local, a, n, 1000) == (ssize_t)n, "local pwrite");

    /* List I/O: 200 regions of 10 bytes every 37 bytes from 400,000. */
    enum { R = 200 };
    uint64_t offs[R], lens[R];
    for (int i = 0; i < R; i++) { offs[i] = 400000 + 37u * i; lens[i] = 10; }
    unsigned char lw[R * 10], lr[R * 10];
    pattern(lw, sizeof lw, 2);
    CHECK(weft_write_list(f, R, offs, lens, lw) == (int64_t)sizeof lw, "write_list");
    for (int i = 0; i < R; i++) CHECK(pwrite(local, lw + 10 * i, 10, offs[i]) == 10, "local list pwrite");
    CHECK(weft_read_list(f, R, offs, lens, lr) == (int64_t)sizeof lr, "read_list");
    CHECK(memcmp(lw, lr, sizeof lw) == 0, "list read back");

    CHECK(weft_fsync(f) == WEFT_OK, "fsync");
    uint64_t size = 0;
    CHECK(weft_size(f, &size) == WEFT_OK, "size");
    off_t lsize = lseek(local, 0, SEEK_END);
    CHECK(size == (uint64_t)lsize, "size %llu vs local %lld", (unsigned long long)size, (long long)lsize);

    /* The whole file, byte for byte against the local reference. */
    unsigned char *whole = malloc(size + 100), *ref = malloc(size + 100);
    CHECK(weft_pread(f, whole, size + 100, 0) == (int64_t)size, "pread whole (short at the end)");
    CHECK(pread(local, ref, size, 0) == (ssize_t)size, "local pread");
    CHECK(memcmp(whole, ref, size) == 0, "whole file differs from the local reference");
    CHECK(weft_pread(f, whole, 10, size + 5) == 0, "read past the end is 0");

    WeftStat st;
    CHECK(weft_stat(c, "weft:/capi/data", &st) == WEFT_OK, "stat");
    CHECK(st.size == size && st.kind == 1 && st.stripe_size == 4096 && st.stripe_count == 2 && st.mode == 0644, "stat fields");

    CHECK(weft_truncate(f, 5000) == WEFT_OK, "truncate");
    CHECK(weft_size(f, &size) == WEFT_OK && size == 5000, "size after truncate");
    CHECK(weft_close(f) == WEFT_OK, "close");

    /* Errors a program can act on. */
    WeftFile *g = NULL;
    CHECK(weft_open(c, "weft:/capi/missing", 0, &g) == WEFT_ERR_NOT_FOUND, "open missing");
    CHECK(strstr(weft_last_error(), "missing") != NULL, "message names the path: %s", weft_last_error());
    CHECK(weft_create(c, "/capi/data", 0, 0, 0644, 1, &g) == WEFT_ERR_EXISTS, "exclusive create of an existing file");
    CHECK(weft_open(c, NULL, 0, &g) == WEFT_ERR_INVALID_ARGUMENT, "NULL path");
    CHECK(weft_pwrite(NULL, a, 1, 0) == WEFT_ERR_INVALID_ARGUMENT, "NULL file");
    CHECK(weft_create(c, "/capi/wide", (uint64_t)1 << 40, 0, 0644, 1, &g) == WEFT_ERR_BAD_REQUEST, "stripe size past 4 GiB");
    uint64_t back[2] = {100, 50}, blen[2] = {10, 10};
    CHECK(weft_open(c, "/capi/data", 1, &g) == WEFT_OK, "reopen");
    CHECK(weft_write_list(g, 2, back, blen, lw) == WEFT_ERR_INVALID_ARGUMENT, "decreasing list refused");
    CHECK(weft_close(g) == WEFT_OK, "close");
    CHECK(weft_unlink(c, "weft:/capi/data") == WEFT_OK, "unlink");
    CHECK(weft_stat(c, "/capi/data", &st) == WEFT_ERR_NOT_FOUND, "gone");
    weft_disconnect(c);
    CHECK(weft_connect("/nonexistent/cluster.toml", &c) == WEFT_ERR_CLUSTER, "missing cluster file");

    free(a); free(b); free(whole); free(ref);
    close(local);
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
