/* Shared by the shim's files: compiled once per MPI (mpicc.openmpi,
 * mpicc.mpich), since MPI's handles and constants differ between them. */
#ifndef WEFT_SHIM_H
#define WEFT_SHIM_H
#include <mpi.h>
#include <stdint.h>
#include "weftio.h"

/* A Weft file: its handle is this record's address, recognised by
 * membership in the core's table (weftio_known), never by reading it. */
struct wfile {
    MPI_Comm comm;            /* duplicated at open */
    weftio_comm cc;           /* callbacks over comm, ctx = this record */
    int amode;                /* as the program gave it */
    MPI_Errhandler eh;
    MPI_Datatype etype, ftype; /* as set_view got them (dups if derived) */
    MPI_Offset disp;
    int split_active;         /* a split collective is between begin and end */
    MPI_Offset split_bytes;
};

/* The Weft file behind fh, or NULL if fh is the MPI library's. */
struct wfile *weft_file(MPI_File fh);
/* The next definition of a PMPI_ symbol: the MPI library's. */
void *weft_next(const char *name);

/* Error handling (errors.c): turns a core class (message from
 * weftio_last_error, or msg) into an MPI error code whose string carries
 * the message, runs f's error handler (the default file handler if f is
 * NULL) and returns the code. */
int weft_fail(struct wfile *f, int cls);
int weft_fail_msg(struct wfile *f, int cls, const char *msg);
void weft_note_errhandler(MPI_Errhandler eh, MPI_File_errhandler_function *fn);
/* A new reference to eh (predefined handlers need none). */
MPI_Errhandler weft_errhandler_retain(MPI_Errhandler eh);
/* Drops a reference taken by weft_errhandler_retain or a get. */
void weft_errhandler_release(MPI_Errhandler *eh);

/* Nonblocking accesses (requests.c): a generalized request in *req for
 * the posted access behind ticket, completed when the program waits for
 * or tests it after the access is done. */
int weft_post_request(struct wfile *f, const void *ticket, MPI_Request *req);
/* A status saying `bytes` bytes were moved (nothing if st is IGNORE). */
void weft_set_status(MPI_Status *st, MPI_Offset bytes);
/* A request already complete, for an access of `bytes` that ran in the call. */
int weft_completed_request(struct wfile *f, MPI_Offset bytes, MPI_Request *req);
/* At f's close: its requests' errors go to the default handler from now
 * on, and freed requests whose accesses are done are completed. */
void weft_forget_file(struct wfile *f);

/* Datatypes (types.c): the core's handle for an MPI datatype; *owned
 * says whether the caller must weftio_type_free it. */
int weft_type(MPI_Datatype t, void **out, int *owned);
int weft_is_named(MPI_Datatype t);

/* Forwards a call to the MPI library's PMPI_ version. */
#define WEFT_FORWARD(fn, ...)                                                          \
    do {                                                                               \
        static __typeof__(&fn) next_;                                                  \
        if (!next_) next_ = (__typeof__(&fn))weft_next("P" #fn);                       \
        return next_(__VA_ARGS__);                                                     \
    } while (0)

/* Defines PMPI_x as the same function as MPI_x. */
#define WEFT_ALIAS(fn) extern __typeof__(fn) P##fn __attribute__((alias(#fn)));

#endif
