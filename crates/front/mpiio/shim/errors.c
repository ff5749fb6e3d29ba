/* MPI error codes and error handlers for Weft files.
 *
 * Each core class maps to an MPI error class. So that MPI_Error_string
 * says what went wrong (which server, which path), each class gets one
 * error code of its own (MPI_Add_error_code), whose string is replaced by
 * the latest message (MPI_Add_error_string allows that for added codes). */
#include "shim.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int mpi_class(int cls) {
    switch (cls) {
    case WEFTIO_E_NO_SUCH_FILE: return MPI_ERR_NO_SUCH_FILE;
    case WEFTIO_E_FILE_EXISTS: return MPI_ERR_FILE_EXISTS;
    case WEFTIO_E_ACCESS: return MPI_ERR_ACCESS;
    case WEFTIO_E_AMODE: return MPI_ERR_AMODE;
    case WEFTIO_E_READ_ONLY: return MPI_ERR_READ_ONLY;
    case WEFTIO_E_NOT_SAME: return MPI_ERR_NOT_SAME;
    case WEFTIO_E_IO: return MPI_ERR_IO;
    case WEFTIO_E_NO_SPACE: return MPI_ERR_NO_SPACE;
    case WEFTIO_E_UNSUPPORTED_OPERATION: return MPI_ERR_UNSUPPORTED_OPERATION;
    case WEFTIO_E_UNSUPPORTED_DATAREP: return MPI_ERR_UNSUPPORTED_DATAREP;
    case WEFTIO_E_ARG: return MPI_ERR_ARG;
    case WEFTIO_E_COUNT: return MPI_ERR_COUNT;
    case WEFTIO_E_TYPE: return MPI_ERR_TYPE;
    case WEFTIO_E_BAD_FILE: return MPI_ERR_BAD_FILE;
    case WEFTIO_E_COMM: return MPI_ERR_COMM;
    case WEFTIO_E_INTERN: return MPI_ERR_INTERN;
    default: return MPI_ERR_OTHER;
    }
}

#define NCLASSES (WEFTIO_E_OTHER + 1)
static int codes[NCLASSES];
/* The message of each class's code, as last set: MPI_Error_string answers
 * our codes itself, since MPICH 4.0 prints its own error stack for a code
 * made by MPI_Add_error_code instead of the string added to it. */
static char texts[NCLASSES][MPI_MAX_ERROR_STRING];

/* An error code of class `cls` whose string is `msg`. */
static int code_for(int cls, const char *msg) {
    int mclass = mpi_class(cls);
    if (cls < 0 || cls >= NCLASSES) cls = WEFTIO_E_OTHER;
    pthread_mutex_lock(&lock);
    if (!codes[cls] && PMPI_Add_error_code(mclass, &codes[cls]) != MPI_SUCCESS) codes[cls] = 0;
    int code = codes[cls] ? codes[cls] : mclass;
    if (codes[cls]) {
        snprintf(texts[cls], sizeof texts[cls], "%s", msg && *msg ? msg : "weft: error");
        PMPI_Add_error_string(code, texts[cls]);
    }
    pthread_mutex_unlock(&lock);
    return code;
}

int MPI_Error_string(int code, char *string, int *len) {
    int ours = 0;
    pthread_mutex_lock(&lock);
    for (int c = 0; c < NCLASSES && !ours; c++) {
        if (codes[c] && codes[c] == code && texts[c][0]) {
            snprintf(string, MPI_MAX_ERROR_STRING, "%s", texts[c]);
            *len = (int)strlen(string);
            ours = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    if (ours) return MPI_SUCCESS;
    WEFT_FORWARD(MPI_Error_string, code, string, len);
}
WEFT_ALIAS(MPI_Error_string)

/* User handlers made by MPI_File_create_errhandler, so that they can be
 * called with a Weft handle (the MPI library cannot be asked to); those
 * made from Fortran take the file's Fortran handle and the code as
 * Fortran INTEGERs. */
struct handler {
    MPI_Errhandler eh;
    MPI_File_errhandler_function *fn;
    int fortran;
};
static struct handler *handlers;
static int nhandlers, cap;

static void note(MPI_Errhandler eh, MPI_File_errhandler_function *fn, int fortran) {
    pthread_mutex_lock(&lock);
    if (nhandlers == cap) {
        int n = cap ? 2 * cap : 16;
        struct handler *h = realloc(handlers, n * sizeof *h);
        if (h) {
            handlers = h;
            cap = n;
        }
    }
    if (nhandlers < cap) {
        handlers[nhandlers].eh = eh;
        handlers[nhandlers].fn = fn;
        handlers[nhandlers].fortran = fortran;
        nhandlers++;
    }
    pthread_mutex_unlock(&lock);
}

void weft_note_errhandler(MPI_Errhandler eh, MPI_File_errhandler_function *fn) { note(eh, fn, 0); }

/* The latest record of eh (MPICH's Fortran binding makes a handler through
 * the C call, then the Fortran wrapper below notes it again as Fortran). */
static struct handler handler_of(MPI_Errhandler eh) {
    struct handler found = {eh, NULL, 0};
    pthread_mutex_lock(&lock);
    for (int i = nhandlers - 1; i >= 0 && !found.fn; i--)
        if (handlers[i].eh == eh) found = handlers[i];
    pthread_mutex_unlock(&lock);
    return found;
}

/* Runs the handler for code on f (or on no file) and returns the code. */
static int dispatch(struct wfile *f, int code, const char *msg) {
    MPI_Errhandler eh;
    if (f) {
        eh = f->eh;
    } else {
        /* A reference of our own, dropped once the handler is known. */
        PMPI_File_get_errhandler(MPI_FILE_NULL, &eh);
    }
    MPI_Errhandler seen = eh;
    if (!f) weft_errhandler_release(&eh);
    if (seen == MPI_ERRORS_RETURN) return code;
    struct handler h = handler_of(seen);
    if (h.fn && h.fortran) {
        MPI_Fint fh = f ? weftio_c2f((uintptr_t)f) : PMPI_File_c2f(MPI_FILE_NULL), fcode = code;
        ((void (*)(MPI_Fint *, MPI_Fint *))(void (*)(void))h.fn)(&fh, &fcode);
        return code;
    }
    if (h.fn) {
        MPI_File fh = f ? (MPI_File)f : MPI_FILE_NULL;
        h.fn(&fh, &code);
        return code;
    }
    /* MPI_ERRORS_ARE_FATAL, or a handler we did not see created. */
    fprintf(stderr, "weft: fatal MPI-IO error: %s\n", msg && *msg ? msg : "error");
    PMPI_Abort(f ? f->comm : MPI_COMM_WORLD, code);
    return code;
}

int weft_fail_msg(struct wfile *f, int cls, const char *msg) {
    if (getenv("WEFT_MPIIO_TRACE")) fprintf(stderr, "weft: MPI-IO error (class %d): %s\n", cls, msg ? msg : "");
    return dispatch(f, code_for(cls, msg), msg);
}

int weft_fail(struct wfile *f, int cls) {
    return weft_fail_msg(f, cls, weftio_last_error());
}

/* MPI_File_call_errhandler on a Weft file runs its handler with the code. */
int MPI_File_call_errhandler(MPI_File fh, int errorcode) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_call_errhandler, fh, errorcode);
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (PMPI_Error_string(errorcode, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", errorcode);
    dispatch(f, errorcode, msg);
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_call_errhandler)

int MPI_File_create_errhandler(MPI_File_errhandler_function *fn, MPI_Errhandler *eh) {
    static __typeof__(&MPI_File_create_errhandler) next_;
    if (!next_) next_ = (__typeof__(&MPI_File_create_errhandler))weft_next("PMPI_File_create_errhandler");
    int rc = next_(fn, eh);
    if (rc == MPI_SUCCESS) weft_note_errhandler(*eh, fn);
    return rc;
}
WEFT_ALIAS(MPI_File_create_errhandler)

/* MPI_FILE_CREATE_ERRHANDLER from Fortran (mpif.h and `use mpi`, under
 * each name mangling the MPIs export): made by the MPI library's own
 * binding, then noted as a Fortran handler. Open MPI's binding makes it
 * without calling the C function, so it would go unseen otherwise. */
#define FORTRAN_CREATE_ERRHANDLER(name)                                                \
    void name(MPI_File_errhandler_function *fn, MPI_Fint *eh, MPI_Fint *ierr);         \
    void name(MPI_File_errhandler_function *fn, MPI_Fint *eh, MPI_Fint *ierr) {        \
        static void (*next_)(MPI_File_errhandler_function *, MPI_Fint *, MPI_Fint *);  \
        if (!next_) next_ = (void (*)(MPI_File_errhandler_function *, MPI_Fint *, MPI_Fint *))weft_next(#name); \
        next_(fn, eh, ierr);                                                           \
        if (*ierr == MPI_SUCCESS) note(PMPI_Errhandler_f2c(*eh), fn, 1);               \
    }
FORTRAN_CREATE_ERRHANDLER(mpi_file_create_errhandler)
FORTRAN_CREATE_ERRHANDLER(mpi_file_create_errhandler_)
FORTRAN_CREATE_ERRHANDLER(mpi_file_create_errhandler__)
FORTRAN_CREATE_ERRHANDLER(MPI_FILE_CREATE_ERRHANDLER)
FORTRAN_CREATE_ERRHANDLER(pmpi_file_create_errhandler)
FORTRAN_CREATE_ERRHANDLER(pmpi_file_create_errhandler_)
FORTRAN_CREATE_ERRHANDLER(pmpi_file_create_errhandler__)
FORTRAN_CREATE_ERRHANDLER(PMPI_FILE_CREATE_ERRHANDLER)

/* The same from the mpi_f08 module (both MPIs export these names). Its
 * handlers take TYPE(MPI_File) and INTEGER by reference: a record of one
 * INTEGER, so the same arguments as above. IERROR is OPTIONAL there: a
 * null pointer when the program leaves it out. */
#define FORTRAN08_CREATE_ERRHANDLER(name)                                              \
    void name(MPI_File_errhandler_function *fn, MPI_Fint *eh, MPI_Fint *ierr);         \
    void name(MPI_File_errhandler_function *fn, MPI_Fint *eh, MPI_Fint *ierr) {        \
        static void (*next_)(MPI_File_errhandler_function *, MPI_Fint *, MPI_Fint *);  \
        if (!next_) next_ = (void (*)(MPI_File_errhandler_function *, MPI_Fint *, MPI_Fint *))weft_next(#name); \
        /* Without IERROR a failure shows only as no handle made. */                  \
        *eh = PMPI_Errhandler_c2f(MPI_ERRHANDLER_NULL);                                \
        next_(fn, eh, ierr);                                                           \
        MPI_Errhandler made = PMPI_Errhandler_f2c(*eh);                                \
        if ((!ierr || *ierr == MPI_SUCCESS) && made != MPI_ERRHANDLER_NULL) note(made, fn, 1); \
    }
FORTRAN08_CREATE_ERRHANDLER(mpi_file_create_errhandler_f08_)
FORTRAN08_CREATE_ERRHANDLER(pmpi_file_create_errhandler_f08_)

/* Error handlers are reference-counted objects of the MPI library: a file
 * holds a reference to its handler (so the user may free theirs right
 * after MPI_File_set_errhandler), and MPI_File_get_errhandler hands out a
 * new one (which the user may free). The MPI has no call that only adds a
 * reference, so one is taken by setting the handler on MPI_FILE_NULL and
 * getting it back, then restoring MPI_FILE_NULL's own. (Not safe against
 * another thread changing MPI_FILE_NULL's handler at the same moment.) */
static int predefined(MPI_Errhandler eh) {
    return eh == MPI_ERRHANDLER_NULL || eh == MPI_ERRORS_RETURN || eh == MPI_ERRORS_ARE_FATAL;
}

MPI_Errhandler weft_errhandler_retain(MPI_Errhandler eh) {
    if (predefined(eh)) return eh;
    MPI_Errhandler saved, out = eh;
    PMPI_File_get_errhandler(MPI_FILE_NULL, &saved);
    if (PMPI_File_set_errhandler(MPI_FILE_NULL, eh) == MPI_SUCCESS) {
        PMPI_File_get_errhandler(MPI_FILE_NULL, &out);
        PMPI_File_set_errhandler(MPI_FILE_NULL, saved);
    }
    if (!predefined(saved)) PMPI_Errhandler_free(&saved);
    return out;
}

void weft_errhandler_release(MPI_Errhandler *eh) {
    if (!predefined(*eh)) PMPI_Errhandler_free(eh);
    *eh = MPI_ERRHANDLER_NULL;
}

int MPI_File_set_errhandler(MPI_File fh, MPI_Errhandler eh) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_set_errhandler, fh, eh);
    MPI_Errhandler old = f->eh;
    f->eh = weft_errhandler_retain(eh);
    weft_errhandler_release(&old);
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_set_errhandler)

int MPI_File_get_errhandler(MPI_File fh, MPI_Errhandler *eh) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_errhandler, fh, eh);
    *eh = weft_errhandler_retain(f->eh);
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_get_errhandler)
