/* Reads and writes: explicit offsets, individual and shared file pointers;
 * blocking, nonblocking, split collective, and MPI-4's large-count (_c)
 * forms where the MPI has them. A nonblocking access is posted to the core,
 * which moves its bytes in the background while the program computes; its
 * request is completed by requests.c. The nonblocking collective forms are
 * posted so only when the program has MPI_THREAD_MULTIPLE (their steps
 * talk MPI, which a background thread may not below it); otherwise they
 * run inside the call and return a request already complete. Collective forms (_all, split,
 * ordered) tell the core so: it runs them through two-phase I/O
 * (crates/client/src/collective). */
#include "shim.h"
#include <stdlib.h>

/* One access; returns MPI_SUCCESS or the (handled) error code. */
static int run(struct wfile *f, int write, int pos, int coll, MPI_Offset offset, const void *buf, MPI_Count count,
               MPI_Datatype dt, MPI_Offset *bytes) {
    *bytes = 0;
    void *t;
    int owned, rc = weft_type(dt, &t, &owned);
    if (rc) {
        /* A collective access is joined anyway, moving nothing. */
        if (pos == WEFTIO_ORDERED || coll) weftio_access((uintptr_t)f, write, pos, coll, 0, NULL, 0, NULL, NULL);
        return rc < 0 ? weft_fail_msg(f, WEFTIO_E_TYPE, "weft: bad datatype") : weft_fail(f, rc);
    }
    int64_t n = 0;
    rc = weftio_access((uintptr_t)f, write, pos, coll, offset, (void *)buf, count, t, &n);
    if (owned) weftio_type_free(t);
    if (rc) return weft_fail(f, rc);
    *bytes = n;
    return MPI_SUCCESS;
}

/* Whether the program has MPI_THREAD_MULTIPLE (asked once). */
static int thread_multiple(void) {
    static int level = -1;
    if (level < 0) {
        int provided = MPI_THREAD_SINGLE;
        PMPI_Query_thread(&provided);
        level = provided == MPI_THREAD_MULTIPLE;
    }
    return level;
}

/* Posts a nonblocking access; *req completes when it is done. A collective
 * one whose own arguments are refused still takes part (with nothing). */
static int post(struct wfile *f, int write, int pos, int coll, MPI_Offset offset, const void *buf, MPI_Count count,
                MPI_Datatype dt, MPI_Request *req) {
    void *t;
    int owned, rc = weft_type(dt, &t, &owned);
    const void *ticket = NULL;
    if (rc) {
        if (coll) weftio_post((uintptr_t)f, write, pos, coll, 0, NULL, 0, NULL, &ticket);
        return rc < 0 ? weft_fail_msg(f, WEFTIO_E_TYPE, "weft: bad datatype") : weft_fail(f, rc);
    }
    rc = weftio_post((uintptr_t)f, write, pos, coll, offset, (void *)buf, count, t, &ticket);
    if (owned) weftio_type_free(t);
    if (rc) return weft_fail(f, rc);
    return weft_post_request(f, ticket, req);
}

static int split_begin(struct wfile *f, int write, int pos, MPI_Offset offset, const void *buf, MPI_Count count,
                       MPI_Datatype dt) {
    const int coll = 1;
    if (f->split_active)
        return weft_fail_msg(f, WEFTIO_E_OTHER, "weft: a split collective is already active on this file");
    MPI_Offset n;
    int rc = run(f, write, pos, coll, offset, buf, count, dt, &n);
    if (rc == MPI_SUCCESS) {
        f->split_active = 1;
        f->split_bytes = n;
    }
    return rc;
}

static int split_end(struct wfile *f, MPI_Status *st) {
    if (!f->split_active)
        return weft_fail_msg(f, WEFTIO_E_OTHER, "weft: split collective end without its begin");
    f->split_active = 0;
    weft_set_status(st, f->split_bytes);
    return MPI_SUCCESS;
}

#define BUF_0 void *
#define BUF_1 const void *
#define BUF(w) BUF_##w

/* name(fh, offset, buf, count, datatype, status) */
#define AT_BLOCKING(name, W, COLL, CT)                                                                   \
    int name(MPI_File fh, MPI_Offset offset, BUF(W) buf, CT count, MPI_Datatype dt, MPI_Status *st) { \
        struct wfile *f = weft_file(fh);                                                           \
        if (!f) WEFT_FORWARD(name, fh, offset, buf, count, dt, st);                                \
        MPI_Offset n;                                                                              \
        int rc = run(f, W, WEFTIO_AT, COLL, offset, buf, count, dt, &n);                                 \
        if (rc == MPI_SUCCESS) weft_set_status(st, n);                                                  \
        return rc;                                                                                 \
    }                                                                                              \
    WEFT_ALIAS(name)

/* name(fh, buf, count, datatype, status) */
#define PTR_BLOCKING(name, W, POS, COLL, CT)                                                             \
    int name(MPI_File fh, BUF(W) buf, CT count, MPI_Datatype dt, MPI_Status *st) {                 \
        struct wfile *f = weft_file(fh);                                                           \
        if (!f) WEFT_FORWARD(name, fh, buf, count, dt, st);                                        \
        MPI_Offset n;                                                                              \
        int rc = run(f, W, POS, COLL, 0, buf, count, dt, &n);                                            \
        if (rc == MPI_SUCCESS) weft_set_status(st, n);                                                  \
        return rc;                                                                                 \
    }                                                                                              \
    WEFT_ALIAS(name)

/* name(fh, offset, buf, count, datatype, request) */
#define AT_NONBLOCKING(name, W, COLL, CT)                                                                \
    int name(MPI_File fh, MPI_Offset offset, BUF(W) buf, CT count, MPI_Datatype dt, MPI_Request *req) { \
        struct wfile *f = weft_file(fh);                                                           \
        if (!f) WEFT_FORWARD(name, fh, offset, buf, count, dt, req);                               \
        if (!COLL || thread_multiple()) return post(f, W, WEFTIO_AT, COLL, offset, buf, count, dt, req); \
        MPI_Offset n;                                                                              \
        int rc = run(f, W, WEFTIO_AT, COLL, offset, buf, count, dt, &n);                                 \
        return rc == MPI_SUCCESS ? weft_completed_request(f, n, req) : rc;                              \
    }                                                                                              \
    WEFT_ALIAS(name)

/* name(fh, buf, count, datatype, request) */
#define PTR_NONBLOCKING(name, W, POS, COLL, CT)                                                          \
    int name(MPI_File fh, BUF(W) buf, CT count, MPI_Datatype dt, MPI_Request *req) {               \
        struct wfile *f = weft_file(fh);                                                           \
        if (!f) WEFT_FORWARD(name, fh, buf, count, dt, req);                                       \
        if (!COLL || thread_multiple()) return post(f, W, POS, COLL, 0, buf, count, dt, req);     \
        MPI_Offset n;                                                                              \
        int rc = run(f, W, POS, COLL, 0, buf, count, dt, &n);                                            \
        return rc == MPI_SUCCESS ? weft_completed_request(f, n, req) : rc;                              \
    }                                                                                              \
    WEFT_ALIAS(name)

/* name(fh, offset, buf, count, datatype) */
#define AT_BEGIN(name, W, CT)                                                                      \
    int name(MPI_File fh, MPI_Offset offset, BUF(W) buf, CT count, MPI_Datatype dt) {              \
        struct wfile *f = weft_file(fh);                                                           \
        if (!f) WEFT_FORWARD(name, fh, offset, buf, count, dt);                                    \
        return split_begin(f, W, WEFTIO_AT, offset, buf, count, dt);                               \
    }                                                                                              \
    WEFT_ALIAS(name)

/* name(fh, buf, count, datatype) */
#define PTR_BEGIN(name, W, POS, CT)                                                                \
    int name(MPI_File fh, BUF(W) buf, CT count, MPI_Datatype dt) {                                 \
        struct wfile *f = weft_file(fh);                                                           \
        if (!f) WEFT_FORWARD(name, fh, buf, count, dt);                                            \
        return split_begin(f, W, POS, 0, buf, count, dt);                                          \
    }                                                                                              \
    WEFT_ALIAS(name)

/* name(fh, buf, status) */
#define END(name, W)                                                                               \
    int name(MPI_File fh, BUF(W) buf, MPI_Status *st) {                                            \
        struct wfile *f = weft_file(fh);                                                           \
        if (!f) WEFT_FORWARD(name, fh, buf, st);                                                   \
        (void)buf;                                                                                 \
        return split_end(f, st);                                                                   \
    }                                                                                              \
    WEFT_ALIAS(name)

/* Every access function, in one count type (int, or MPI_Count with _c). */
#define ACCESS_FUNCTIONS(SUFFIX, CT)                                                               \
    AT_BLOCKING(MPI_File_read_at##SUFFIX, 0, 0, CT)                                                \
    AT_BLOCKING(MPI_File_write_at##SUFFIX, 1, 0, CT)                                               \
    AT_BLOCKING(MPI_File_read_at_all##SUFFIX, 0, 1, CT)                                            \
    AT_BLOCKING(MPI_File_write_at_all##SUFFIX, 1, 1, CT)                                           \
    PTR_BLOCKING(MPI_File_read##SUFFIX, 0, WEFTIO_INDIVIDUAL, 0, CT)                               \
    PTR_BLOCKING(MPI_File_write##SUFFIX, 1, WEFTIO_INDIVIDUAL, 0, CT)                              \
    PTR_BLOCKING(MPI_File_read_all##SUFFIX, 0, WEFTIO_INDIVIDUAL, 1, CT)                           \
    PTR_BLOCKING(MPI_File_write_all##SUFFIX, 1, WEFTIO_INDIVIDUAL, 1, CT)                          \
    PTR_BLOCKING(MPI_File_read_shared##SUFFIX, 0, WEFTIO_SHARED, 0, CT)                            \
    PTR_BLOCKING(MPI_File_write_shared##SUFFIX, 1, WEFTIO_SHARED, 0, CT)                           \
    PTR_BLOCKING(MPI_File_read_ordered##SUFFIX, 0, WEFTIO_ORDERED, 1, CT)                          \
    PTR_BLOCKING(MPI_File_write_ordered##SUFFIX, 1, WEFTIO_ORDERED, 1, CT)                         \
    AT_NONBLOCKING(MPI_File_iread_at##SUFFIX, 0, 0, CT)                                            \
    AT_NONBLOCKING(MPI_File_iwrite_at##SUFFIX, 1, 0, CT)                                           \
    AT_NONBLOCKING(MPI_File_iread_at_all##SUFFIX, 0, 1, CT)                                        \
    AT_NONBLOCKING(MPI_File_iwrite_at_all##SUFFIX, 1, 1, CT)                                       \
    PTR_NONBLOCKING(MPI_File_iread##SUFFIX, 0, WEFTIO_INDIVIDUAL, 0, CT)                           \
    PTR_NONBLOCKING(MPI_File_iwrite##SUFFIX, 1, WEFTIO_INDIVIDUAL, 0, CT)                          \
    PTR_NONBLOCKING(MPI_File_iread_all##SUFFIX, 0, WEFTIO_INDIVIDUAL, 1, CT)                       \
    PTR_NONBLOCKING(MPI_File_iwrite_all##SUFFIX, 1, WEFTIO_INDIVIDUAL, 1, CT)                      \
    PTR_NONBLOCKING(MPI_File_iread_shared##SUFFIX, 0, WEFTIO_SHARED, 0, CT)                        \
    PTR_NONBLOCKING(MPI_File_iwrite_shared##SUFFIX, 1, WEFTIO_SHARED, 0, CT)                       \
    AT_BEGIN(MPI_File_read_at_all_begin##SUFFIX, 0, CT)                                            \
    AT_BEGIN(MPI_File_write_at_all_begin##SUFFIX, 1, CT)                                           \
    PTR_BEGIN(MPI_File_read_all_begin##SUFFIX, 0, WEFTIO_INDIVIDUAL, CT)                           \
    PTR_BEGIN(MPI_File_write_all_begin##SUFFIX, 1, WEFTIO_INDIVIDUAL, CT)                          \
    PTR_BEGIN(MPI_File_read_ordered_begin##SUFFIX, 0, WEFTIO_ORDERED, CT)                          \
    PTR_BEGIN(MPI_File_write_ordered_begin##SUFFIX, 1, WEFTIO_ORDERED, CT)

ACCESS_FUNCTIONS(, int)
#if MPI_VERSION >= 4
ACCESS_FUNCTIONS(_c, MPI_Count)
#endif

END(MPI_File_read_at_all_end, 0)
END(MPI_File_write_at_all_end, 1)
END(MPI_File_read_all_end, 0)
END(MPI_File_write_all_end, 1)
END(MPI_File_read_ordered_end, 0)
END(MPI_File_write_ordered_end, 1)
