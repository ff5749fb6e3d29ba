/* Requests of nonblocking independent accesses on Weft files.
 *
 * The core runs each such access in the file's worker thread (posted.rs)
 * while the program computes. Its MPI request is a generalized request
 * that this file completes in a thread of the program, never in the
 * worker: below MPI_THREAD_MULTIPLE nothing else may call MPI. So MPI_Wait,
 * MPI_Test and their kin are wrapped: each first completes the Weft
 * requests it is given whose accesses are done, waiting for them where
 * the call would wait, then hands the call to the MPI library. With no
 * Weft request alive (posted and not yet freed) they go straight through. An access's error is
 * raised on its file's error handler when its request completes, and
 * returned by the call that reports it (MPI_ERR_IN_STATUS with the code in
 * the status for the calls on several requests). */
#include "shim.h"
#include <pthread.h>
#include <stdlib.h>

struct op {
    const void *ticket;
    struct wfile *f;
    MPI_Request req;
    MPI_Offset bytes;
    int settled; /* given to MPI_Grequest_complete */
    int err;     /* then: MPI_SUCCESS, or the error code it raised */
};

/* Weft requests alive: from their start until MPI frees them (release),
 * so a settled request's error is still found when a later call reports
 * its completion. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct op **table;
static int used, room;
static int alive; /* == used; read without the lock for the fast path */

static int none_alive(void) { return __atomic_load_n(&alive, __ATOMIC_ACQUIRE) == 0; }

/* Takes op out of the table if it is there. */
static void forget(struct op *op) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < used; i++)
        if (table[i] == op) {
            table[i] = table[--used];
            break;
        }
    __atomic_store_n(&alive, used, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
}

void weft_set_status(MPI_Status *st, MPI_Offset bytes) {
    if (st == MPI_STATUS_IGNORE) return;
    PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)bytes);
    PMPI_Status_set_cancelled(st, 0);
}

static int query(void *extra, MPI_Status *st) {
    struct op *op = extra;
    if (st == MPI_STATUS_IGNORE) return MPI_SUCCESS;
    weft_set_status(st, op->bytes);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    /* Reported by the wrappers: an error returned here would go to the
     * communicator's handler (fatal by default), not the file's. */
    st->MPI_ERROR = MPI_SUCCESS;
    return MPI_SUCCESS;
}
static int release(void *extra) {
    struct op *op = extra;
    forget(op);
    weftio_ticket_free(op->ticket);
    free(op);
    return MPI_SUCCESS;
}
/* A posted access cannot be called back: it completes as usual. */
static int cancel(void *extra, int complete) {
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

int weft_post_request(struct wfile *f, const void *ticket, MPI_Request *req) {
    struct op *op = calloc(1, sizeof *op);
    if (!op) {
        weftio_ticket_wait(ticket, -1);
        weftio_ticket_free(ticket);
        return weft_fail_msg(f, WEFTIO_E_INTERN, "weft: out of memory");
    }
    op->ticket = ticket;
    op->f = f;
    int rc = PMPI_Grequest_start(query, release, cancel, op, req);
    if (rc != MPI_SUCCESS) {
        weftio_ticket_wait(ticket, -1);
        weftio_ticket_free(ticket);
        free(op);
        return rc;
    }
    op->req = *req;
    pthread_mutex_lock(&lock);
    if (used == room) {
        int more = room ? room * 2 : 16;
        struct op **t = realloc(table, (size_t)more * sizeof *t);
        if (!t) {
            pthread_mutex_unlock(&lock);
            /* Completed at once instead: the data is moved before return. */
            weftio_ticket_wait(ticket, -1);
            int64_t n = 0;
            int cls = weftio_ticket_result(ticket, &n);
            op->bytes = n;
            op->err = cls ? weft_fail(f, cls) : MPI_SUCCESS;
            op->settled = 1;
            PMPI_Grequest_complete(*req);
            return MPI_SUCCESS;
        }
        table = t;
        room = more;
    }
    table[used++] = op;
    __atomic_store_n(&alive, used, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    return MPI_SUCCESS;
}

int weft_completed_request(MPI_Offset bytes, MPI_Request *req) {
    struct op *op = calloc(1, sizeof *op);
    if (!op) return weft_fail_msg(NULL, WEFTIO_E_INTERN, "weft: out of memory");
    op->bytes = bytes;
    op->settled = 1;
    int rc = PMPI_Grequest_start(query, release, cancel, op, req);
    if (rc != MPI_SUCCESS) {
        free(op);
        return rc;
    }
    op->req = *req;
    return PMPI_Grequest_complete(*req);
}

/* The Weft operation behind req, or NULL. */
static struct op *find(MPI_Request req) {
    if (req == MPI_REQUEST_NULL || none_alive()) return NULL;
    struct op *found = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < used && !found; i++)
        if (table[i]->req == req) found = table[i];
    pthread_mutex_unlock(&lock);
    return found;
}

/* Completes op if its access is done (waiting for it if `block`): raises
 * its error on its file's handler and marks its request complete. 1 if it
 * is complete now. Only the program's threads call this, so a request
 * waited for in two of them at once (erroneous in MPI) is the only race:
 * the flag's exchange settles it once. */
static int settle(struct op *op, int block) {
    if (__atomic_load_n(&op->settled, __ATOMIC_ACQUIRE)) return 1;
    if (!weftio_ticket_wait(op->ticket, block ? -1 : 0)) return 0;
    if (__atomic_exchange_n(&op->settled, 1, __ATOMIC_ACQ_REL)) return 1;
    int64_t n = 0;
    int cls = weftio_ticket_result(op->ticket, &n);
    op->bytes = n;
    if (cls) op->err = weft_fail(weftio_known((uintptr_t)op->f) ? op->f : NULL, cls);
    PMPI_Grequest_complete(op->req);
    return 1;
}

/* For the calls on several requests: each request's Weft operation (or
 * NULL), settling those done (all of them, waiting, if `block`); the
 * error each settled one carries goes to errs. Returns how many are still
 * running; *ops is NULL (and nothing is Weft's) when the table is empty. */
static int survey(int n, MPI_Request reqs[], int block, struct op ***ops, int **errs) {
    *ops = NULL;
    *errs = NULL;
    if (none_alive() || n <= 0) return 0;
    *ops = calloc((size_t)n, sizeof **ops);
    *errs = calloc((size_t)n, sizeof **errs);
    if (!*ops || !*errs) {
        /* No memory to keep track: settle every Weft request, waiting. */
        free(*ops);
        free(*errs);
        *ops = NULL;
        *errs = NULL;
        for (int i = 0; i < n; i++) {
            struct op *op = find(reqs[i]);
            if (op) settle(op, 1);
        }
        return 0;
    }
    int running = 0;
    for (int i = 0; i < n; i++) {
        struct op *op = (*ops)[i] = find(reqs[i]);
        if (!op) continue;
        if (settle(op, block)) (*errs)[i] = op->err;
        else running++;
    }
    return running;
}

/* Puts the settled operations' errors in the statuses of the completed
 * indices; MPI_ERR_IN_STATUS if any, else rc. */
static int report(int rc, int *errs, int n, const int *idx, MPI_Status sts[]) {
    if (!errs || rc != MPI_SUCCESS) return rc;
    int bad = 0;
    for (int k = 0; k < n; k++)
        if (errs[idx ? idx[k] : k]) bad = 1;
    if (!bad) return rc;
    if (sts != MPI_STATUSES_IGNORE)
        for (int k = 0; k < n; k++) sts[k].MPI_ERROR = errs[idx ? idx[k] : k];
    return MPI_ERR_IN_STATUS;
}

#define NEXT(fn)                                                                       \
    ({                                                                                 \
        static __typeof__(&fn) next_;                                                  \
        if (!next_) next_ = (__typeof__(&fn))weft_next("P" #fn);                       \
        next_;                                                                         \
    })

int MPI_Wait(MPI_Request *req, MPI_Status *st) {
    struct op *op = find(*req);
    if (!op) return NEXT(MPI_Wait)(req, st);
    settle(op, 1);
    int err = op->err, rc = NEXT(MPI_Wait)(req, st);
    return rc == MPI_SUCCESS ? err : rc;
}
WEFT_ALIAS(MPI_Wait)

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *st) {
    struct op *op = find(*req);
    if (!op || !settle(op, 0)) return NEXT(MPI_Test)(req, flag, st);
    int err = op->err, rc = NEXT(MPI_Test)(req, flag, st);
    return rc == MPI_SUCCESS && *flag ? err : rc;
}
WEFT_ALIAS(MPI_Test)

int MPI_Request_get_status(MPI_Request req, int *flag, MPI_Status *st) {
    struct op *op = find(req);
    if (op) settle(op, 0);
    return NEXT(MPI_Request_get_status)(req, flag, st);
}
WEFT_ALIAS(MPI_Request_get_status)

/* A freed request's access still runs to its end, and its error is lost,
 * as MPI says; waited for here, since only a program's thread may
 * complete it. */
int MPI_Request_free(MPI_Request *req) {
    struct op *op = find(*req);
    if (op) settle(op, 1);
    return NEXT(MPI_Request_free)(req);
}
WEFT_ALIAS(MPI_Request_free)

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[]) {
    struct op **ops;
    int *errs;
    survey(n, reqs, 1, &ops, &errs);
    int rc = NEXT(MPI_Waitall)(n, reqs, sts);
    rc = report(rc, errs, n, NULL, sts);
    free(ops);
    free(errs);
    return rc;
}
WEFT_ALIAS(MPI_Waitall)

int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[]) {
    struct op **ops;
    int *errs;
    survey(n, reqs, 0, &ops, &errs);
    int rc = NEXT(MPI_Testall)(n, reqs, flag, sts);
    if (*flag) rc = report(rc, errs, n, NULL, sts);
    free(ops);
    free(errs);
    return rc;
}
WEFT_ALIAS(MPI_Testall)

int MPI_Testany(int n, MPI_Request reqs[], int *idx, int *flag, MPI_Status *st) {
    struct op **ops;
    int *errs;
    survey(n, reqs, 0, &ops, &errs);
    int rc = NEXT(MPI_Testany)(n, reqs, idx, flag, st);
    if (rc == MPI_SUCCESS && *flag && errs && *idx != MPI_UNDEFINED && errs[*idx]) rc = errs[*idx];
    free(ops);
    free(errs);
    return rc;
}
WEFT_ALIAS(MPI_Testany)

int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]) {
    struct op **ops;
    int *errs;
    survey(n, reqs, 0, &ops, &errs);
    int rc = NEXT(MPI_Testsome)(n, reqs, outcount, idx, sts);
    if (*outcount != MPI_UNDEFINED) rc = report(rc, errs, *outcount, idx, sts);
    free(ops);
    free(errs);
    return rc;
}
WEFT_ALIAS(MPI_Testsome)

/* Waits for any of reqs: while a Weft access among them still runs, the
 * MPI library's TEST_CALL (Testany or Testsome) looks at them all between
 * sleeps that end as soon as any Weft access finishes (or after 1 ms, for
 * MPI's own requests); once none runs, its WAIT_CALL does the waiting. */
#define WAIT_ANY(TEST_CALL, DONE, WAIT_CALL)                                           \
    do {                                                                               \
        for (;;) {                                                                     \
            uint64_t seen = weftio_finished();                                         \
            if (survey(n, reqs, 0, &ops, &errs) == 0) {                                \
                rc = WAIT_CALL;                                                        \
                break;                                                                 \
            }                                                                          \
            rc = TEST_CALL;                                                            \
            if (rc != MPI_SUCCESS || (DONE)) break;                                    \
            free(ops);                                                                 \
            free(errs);                                                                \
            ops = NULL;                                                                \
            errs = NULL;                                                               \
            weftio_wait_finished(seen, 1000);                                          \
        }                                                                              \
    } while (0)

int MPI_Waitany(int n, MPI_Request reqs[], int *idx, MPI_Status *st) {
    if (none_alive()) return NEXT(MPI_Waitany)(n, reqs, idx, st);
    struct op **ops = NULL;
    int *errs = NULL, rc, flag = 0;
    WAIT_ANY(NEXT(MPI_Testany)(n, reqs, idx, &flag, st), flag, NEXT(MPI_Waitany)(n, reqs, idx, st));
    if (rc == MPI_SUCCESS && errs && *idx != MPI_UNDEFINED && errs[*idx]) rc = errs[*idx];
    free(ops);
    free(errs);
    return rc;
}
WEFT_ALIAS(MPI_Waitany)

int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]) {
    if (none_alive()) return NEXT(MPI_Waitsome)(n, reqs, outcount, idx, sts);
    struct op **ops = NULL;
    int *errs = NULL, rc;
    WAIT_ANY(NEXT(MPI_Testsome)(n, reqs, outcount, idx, sts), *outcount != 0, NEXT(MPI_Waitsome)(n, reqs, outcount, idx, sts));
    if (rc == MPI_SUCCESS && *outcount != MPI_UNDEFINED) rc = report(rc, errs, *outcount, idx, sts);
    free(ops);
    free(errs);
    return rc;
}
WEFT_ALIAS(MPI_Waitsome)
