/* The Rust core's entry points (crates/front/mpiio/src/ffi.rs): plain C
 * types only, so one core serves every MPI. Each returns 0 or a
 * WEFTIO_E_* class; weftio_last_error() gives the message. */
#ifndef WEFTIO_H
#define WEFTIO_H
#include <stdint.h>

enum {
    WEFTIO_E_NO_SUCH_FILE = 1, WEFTIO_E_FILE_EXISTS, WEFTIO_E_ACCESS, WEFTIO_E_AMODE,
    WEFTIO_E_READ_ONLY, WEFTIO_E_NOT_SAME, WEFTIO_E_IO, WEFTIO_E_NO_SPACE,
    WEFTIO_E_UNSUPPORTED_OPERATION, WEFTIO_E_UNSUPPORTED_DATAREP, WEFTIO_E_ARG,
    WEFTIO_E_COUNT, WEFTIO_E_TYPE, WEFTIO_E_BAD_FILE, WEFTIO_E_COMM, WEFTIO_E_INTERN,
    WEFTIO_E_OTHER
};

/* Access-mode bits of the core (the shim maps MPI_MODE_*). */
enum {
    WEFTIO_RDONLY = 1, WEFTIO_RDWR = 2, WEFTIO_WRONLY = 4, WEFTIO_CREATE = 8,
    WEFTIO_EXCL = 16, WEFTIO_DELETE_ON_CLOSE = 32, WEFTIO_UNIQUE_OPEN = 64,
    WEFTIO_SEQUENTIAL = 128, WEFTIO_APPEND = 256
};

/* Where an access starts. */
enum { WEFTIO_AT = 0, WEFTIO_INDIVIDUAL = 1, WEFTIO_SHARED = 2, WEFTIO_ORDERED = 3 };

typedef struct {
    void *ctx;
    int rank, size;
    int (*barrier)(void *ctx);
    int (*bcast)(void *ctx, void *buf, int64_t len, int root);
    int (*allgather)(void *ctx, const void *send, int64_t len, void *recv);
    int (*alltoallv)(void *ctx, const void *send, const int64_t *send_counts, void *recv, const int64_t *recv_counts);
    /* Scattered buffers: per rank, send_n[r] (address, length) pairs in
     * send_segs (all ranks' back to back), sent back to back; likewise
     * received into recv_segs. */
    int (*alltoallv_iov)(void *ctx, const int64_t *send_segs, const int64_t *send_n, const int64_t *recv_segs, const int64_t *recv_n);
} weftio_comm;

const char *weftio_last_error(void);
int weftio_known(uintptr_t key);
void weftio_at_barrier(void);
int weftio_open(const weftio_comm *comm, const char *path, uint32_t amode, const char *const *keys,
                const char *const *vals, int nhints, uintptr_t key, int *fortran);
int weftio_close(uintptr_t key);
int weftio_delete(const char *path);
int weftio_type_build(const int64_t *prog, int64_t len, void **out);
void weftio_type_free(void *t);
int weftio_set_view(uintptr_t key, int64_t disp, const void *etype, const void *filetype);
int weftio_access(uintptr_t key, int write, int pos, int coll, int64_t offset, void *buf, int64_t count,
                  const void *memtype, int64_t *bytes);
/* Nonblocking independent accesses, run by the file's worker thread. */
int weftio_post(uintptr_t key, int write, int pos, int coll, int64_t offset, void *buf, int64_t count, const void *memtype,
                const void **ticket);
int weftio_ticket_wait(const void *t, int64_t timeout_us);
int weftio_ticket_result(const void *t, int64_t *bytes);
void weftio_ticket_free(const void *t);
uint64_t weftio_finished(void);
void weftio_wait_finished(uint64_t seen, uint64_t timeout_us);
int weftio_seek(uintptr_t key, int64_t offset, int whence, int shared);
int weftio_position(uintptr_t key, int shared, int64_t *out);
int weftio_byte_offset(uintptr_t key, int64_t offset, int64_t *out);
int weftio_get_size(uintptr_t key, int64_t *out);
int weftio_set_size(uintptr_t key, int64_t size, int grow_only);
int weftio_sync(uintptr_t key);
int weftio_set_atomicity(uintptr_t key, int on);
int weftio_get_atomicity(uintptr_t key, int *out);
int weftio_set_info(uintptr_t key, const char *const *keys, const char *const *vals, int n);
int weftio_get_info(uintptr_t key, char **out);
void weftio_string_free(char *s);
int weftio_c2f(uintptr_t key);
uintptr_t weftio_f2c(int fh);

#endif
