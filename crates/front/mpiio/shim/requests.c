/* Requests of nonblocking independent accesses on Weft files.
 *
 * The core runs each such access in the file's worker thread (posted.rs)
 * while the program computes. Its MPI request is a generalized request
 * that this file completes in a thread of the program, never in the
 * worker: below MPI_THREAD_MULTIPLE nothing else may call MPI. So MPI_Wait,
 * MPI_Test and their kin are wrapped: each first completes the Weft
 * requests it is given whose accesses are done, then hands the call to the
 * MPI library. Where the call would block on a Weft access still running,
 * it sleeps until an access finishes, testing the MPI library's own
 * requests (which moves them on) at least every millisecond. With no Weft
 * request alive (posted and not yet freed) they go straight through.
 *
 * An access's error is raised on its file's handler when its request
 * completes, and returned by the call that reports it (MPI_ERR_IN_STATUS
 * with the code in the status for the calls on several requests). A
 * request the program frees before its access is done is completed and
 * freed later, by the next wrapped call, the file's close, or
 * MPI_Finalize (which waits for it).
 *
 * Each function exists as MPI_x and PMPI_x, each handing on to the next
 * library's function of its own name, so a profiling library loaded after
 * this one still sees the program's calls. */
#include "shim.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct op {
    const void *ticket;
    struct wfile *f; /* NULL once the file is closed */
    MPI_Request req;
    MPI_Offset bytes;
    int settled; /* given to MPI_Grequest_complete */
    int freed;   /* 1: the program freed it, to complete and free here; 2: done */
    int err;     /* once settled: MPI_SUCCESS, or the error code it raised */
};

/* Weft requests alive, from their start until MPI frees them (release),
 * so that a settled request's error is still found when a later call
 * reports its completion: a hash table by request handle (open
 * addressing, linear probing; `gone` marks a removed slot). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct op **slots;
static size_t nslots, used, filled; /* filled: used + gone slots */
static int alive;                   /* == used; read without the lock */
static int freed_waiting;           /* ops with freed == 1 */
static struct op gone_mark;
#define GONE (&gone_mark)

static int none_alive(void) { return __atomic_load_n(&alive, __ATOMIC_ACQUIRE) == 0; }

static size_t hash(MPI_Request req) {
    uint64_t k = 0;
    memcpy(&k, &req, sizeof req < sizeof k ? sizeof req : sizeof k);
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

/* The slot of req, or of the empty slot ending its probe (lock held). */
static size_t probe(MPI_Request req) {
    size_t i = hash(req) & (nslots - 1);
    while (slots[i] && (slots[i] == GONE || slots[i]->req != req)) i = (i + 1) & (nslots - 1);
    return i;
}

/* Adds op (lock held); 0 when there is no memory for it. */
static int put(struct op *op) {
    if ((filled + 1) * 2 > nslots) {
        size_t n = nslots ? nslots : 64;
        while ((used + 1) * 4 > n) n *= 2;
        struct op **old = slots, **fresh = calloc(n, sizeof *fresh);
        if (!fresh) return 0;
        size_t was = nslots;
        slots = fresh;
        nslots = n;
        filled = 0;
        for (size_t i = 0; i < was; i++)
            if (old[i] && old[i] != GONE) {
                slots[probe(old[i]->req)] = old[i];
                filled++;
            }
        free(old);
    }
    slots[probe(op->req)] = op;
    used++;
    filled++;
    __atomic_store_n(&alive, (int)used, __ATOMIC_RELEASE);
    return 1;
}

/* Takes op out of the table if it is there. */
static void forget(struct op *op) {
    pthread_mutex_lock(&lock);
    if (nslots) {
        size_t i = probe(op->req);
        if (slots[i] == op) {
            slots[i] = GONE;
            used--;
            __atomic_store_n(&alive, (int)used, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&lock);
}

/* The Weft operation behind req, or NULL. */
static struct op *find(MPI_Request req) {
    if (req == MPI_REQUEST_NULL || none_alive()) return NULL;
    pthread_mutex_lock(&lock);
    struct op *op = nslots ? slots[probe(req)] : NULL;
    pthread_mutex_unlock(&lock);
    return op;
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
    int rc = op ? PMPI_Grequest_start(query, release, cancel, op, req) : MPI_ERR_NO_MEM;
    if (rc == MPI_SUCCESS) {
        op->ticket = ticket;
        op->f = f;
        op->req = *req;
        pthread_mutex_lock(&lock);
        int kept = put(op);
        pthread_mutex_unlock(&lock);
        if (kept) return MPI_SUCCESS;
        /* No memory to track it: completed and freed at once; the access
         * has run when this returns, and the call fails. */
        op->settled = 1;
        PMPI_Grequest_complete(*req);
        PMPI_Request_free(req);
        op = NULL;
        ticket = NULL;
    }
    free(op);
    if (ticket) weftio_ticket_wait(ticket, -1);
    weftio_ticket_free(ticket);
    *req = MPI_REQUEST_NULL;
    return weft_fail_msg(f, WEFTIO_E_INTERN, "weft: out of memory for a nonblocking request (the access ran)");
}

int weft_completed_request(struct wfile *f, MPI_Offset bytes, MPI_Request *req) {
    struct op *op = calloc(1, sizeof *op);
    if (!op) return weft_fail_msg(f, WEFTIO_E_INTERN, "weft: out of memory");
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
    if (cls) op->err = weft_fail(op->f, cls);
    PMPI_Grequest_complete(op->req);
    return 1;
}

/* The requests the program freed whose accesses are done (all of them,
 * waiting, if `block`): completed and freed. */
static void sweep_freed(int block) {
    while (__atomic_load_n(&freed_waiting, __ATOMIC_ACQUIRE) > 0) {
        struct op *found = NULL;
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < nslots && !found; i++) {
            struct op *op = slots[i];
            if (op && op != GONE && op->freed == 1 && (block || weftio_ticket_wait(op->ticket, 0))) found = op;
        }
        if (found) {
            found->freed = 2;
            __atomic_sub_fetch(&freed_waiting, 1, __ATOMIC_ACQ_REL);
        }
        pthread_mutex_unlock(&lock);
        if (!found) return;
        settle(found, 1);
        MPI_Request r = found->req;
        PMPI_Request_free(&r); /* MPI releases it (release): found is gone */
    }
}

void weft_forget_file(struct wfile *f) {
    sweep_freed(0);
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nslots; i++)
        if (slots[i] && slots[i] != GONE && slots[i]->f == f) slots[i]->f = NULL;
    pthread_mutex_unlock(&lock);
}

/* For the calls on several requests: settles the Weft requests among reqs
 * whose accesses are done (all of them, waiting, if `block`), noting each
 * settled one's error in errs (NULL when nothing is Weft's). Returns how
 * many Weft accesses still run; *others: whether reqs holds requests of
 * the MPI library's own still active (not MPI_REQUEST_NULL). */
static int survey(int n, MPI_Request reqs[], int block, int **errs, int *others) {
    *errs = NULL;
    *others = 0;
    sweep_freed(0);
    if (none_alive() || n <= 0 || !reqs) {
        *others = n > 0;
        return 0;
    }
    *errs = calloc((size_t)n, sizeof **errs);
    int running = 0;
    for (int i = 0; i < n; i++) {
        struct op *op = find(reqs[i]);
        if (!op) {
            *others |= reqs[i] != MPI_REQUEST_NULL;
            continue;
        }
        /* Without memory for errs, wait for each (errors still raised on
         * the files' handlers). */
        if (settle(op, block || !*errs)) {
            if (*errs) (*errs)[i] = op->err;
        } else {
            running++;
        }
    }
    return running;
}

/* After the MPI library's call: the settled operations' errors go in the
 * statuses of the completed indices (idx, or 0..n-1 if NULL);
 * MPI_ERR_IN_STATUS if any (or if the library said so), else rc. */
static int report(int rc, const int *errs, int n, const int *idx, MPI_Status sts[]) {
    if (!errs || (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) || n == MPI_UNDEFINED) return rc;
    int bad = 0;
    for (int k = 0; k < n; k++)
        if (errs[idx ? idx[k] : k]) bad = 1;
    if (!bad) return rc;
    if (sts != MPI_STATUSES_IGNORE)
        for (int k = 0; k < n; k++) {
            int e = errs[idx ? idx[k] : k];
            if (e) sts[k].MPI_ERROR = e;
            else if (rc == MPI_SUCCESS) sts[k].MPI_ERROR = MPI_SUCCESS;
        }
    return MPI_ERR_IN_STATUS;
}

#define COMMA ,

#define NEXT_AS(fn, name)                                                              \
    ({                                                                                 \
        static __typeof__(&fn) next_;                                                  \
        if (!next_) next_ = (__typeof__(&fn))weft_next(name);                          \
        next_;                                                                         \
    })

/* Defines MPI_fn and PMPI_fn over body_fn(next, args...), `next` being the
 * next library's function of the same name. */
#define BOTH(ret, fn, params, args)                                                    \
    ret MPI_##fn params { return body_##fn(NEXT_AS(MPI_##fn, "MPI_" #fn), args); }     \
    ret PMPI_##fn params { return body_##fn(NEXT_AS(MPI_##fn, "PMPI_" #fn), args); }

typedef int wait_fn(MPI_Request *, MPI_Status *);
typedef int test_fn(MPI_Request *, int *, MPI_Status *);
typedef int waitall_fn(int, MPI_Request[], MPI_Status[]);
typedef int testall_fn(int, MPI_Request[], int *, MPI_Status[]);
typedef int waitany_fn(int, MPI_Request[], int *, MPI_Status *);
typedef int testany_fn(int, MPI_Request[], int *, int *, MPI_Status *);
typedef int waitsome_fn(int, MPI_Request[], int *, int[], MPI_Status[]);
typedef int testsome_fn(int, MPI_Request[], int *, int[], MPI_Status[]);

static int body_Wait(wait_fn *next, MPI_Request *req, MPI_Status *st) {
    struct op *op = req ? find(*req) : NULL;
    sweep_freed(0);
    if (!op) return next(req, st);
    /* Sleep until it is done, moving the MPI library's requests on. */
    for (;;) {
        uint64_t seen = weftio_finished();
        if (settle(op, 0)) break;
        int flag = 0;
        MPI_Request r = *req;
        NEXT_AS(MPI_Test, "PMPI_Test")(&r, &flag, MPI_STATUS_IGNORE);
        weftio_wait_finished(seen, 1000);
    }
    int err = op->err, rc = next(req, st);
    return rc == MPI_SUCCESS ? err : rc;
}
BOTH(int, Wait, (MPI_Request * req, MPI_Status *st), req COMMA st)

static int body_Test(test_fn *next, MPI_Request *req, int *flag, MPI_Status *st) {
    struct op *op = req ? find(*req) : NULL;
    sweep_freed(0);
    if (!op || !settle(op, 0)) return next(req, flag, st);
    int err = op->err, rc = next(req, flag, st);
    return rc == MPI_SUCCESS && *flag ? err : rc;
}
BOTH(int, Test, (MPI_Request * req, int *flag, MPI_Status *st), req COMMA flag COMMA st)

typedef int get_status_fn(MPI_Request, int *, MPI_Status *);
static int body_Request_get_status(get_status_fn *next, MPI_Request req, int *flag, MPI_Status *st) {
    struct op *op = find(req);
    sweep_freed(0);
    if (!op || !settle(op, 0)) return next(req, flag, st);
    int err = op->err, rc = next(req, flag, st);
    return rc == MPI_SUCCESS && *flag ? err : rc;
}
BOTH(int, Request_get_status, (MPI_Request req, int *flag, MPI_Status *st), req COMMA flag COMMA st)

/* A freed request's access still runs to its end, and its error is lost,
 * as MPI says: completed and freed once it is done (sweep_freed), since
 * MPI may free a generalized request at once, before it is complete. */
typedef int free_fn(MPI_Request *);
static int body_Request_free(free_fn *next, MPI_Request *req) {
    struct op *op = req ? find(*req) : NULL;
    if (!op || settle(op, 0)) return next(req);
    pthread_mutex_lock(&lock);
    op->freed = 1;
    __atomic_add_fetch(&freed_waiting, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&lock);
    *req = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
}
BOTH(int, Request_free, (MPI_Request * req), req)

/* Before MPI ends: the freed requests' accesses run to their end, and
 * held writes of files left open are sent. */
typedef int finalize_fn(void);
static int body_Finalize(finalize_fn *next, int unused) {
    (void)unused;
    sweep_freed(1);
    /* Files the program never closed: their held writes are sent. */
    weftio_at_barrier();
    return next();
}
int MPI_Finalize(void) { return body_Finalize(NEXT_AS(MPI_Finalize, "MPI_Finalize"), 0); }
int PMPI_Finalize(void) { return body_Finalize(NEXT_AS(MPI_Finalize, "PMPI_Finalize"), 0); }

/* MPI_Barrier: the small writes Weft files hold (weft_write_behind) are
 * sent first, and what they read ahead (weft_read_ahead) is dropped. MPI
 * promises a write to other processes only after the writer's
 * MPI_File_sync or close and the reader's sync, but programs that write,
 * meet at a barrier and read each other's bytes work on POSIX file
 * systems, so they work here too. */
typedef int barrier_fn(MPI_Comm);
static int body_Barrier(barrier_fn *next, MPI_Comm comm) {
    weftio_at_barrier();
    int rc = next(comm);
    /* Again after: a read of this process's worker may have fetched ahead
     * while the others were still sending. */
    weftio_at_barrier();
    return rc;
}
BOTH(int, Barrier, (MPI_Comm comm), comm)

/* Blocks like a wait on several requests: while a Weft access among them
 * still runs, TEST_CALL (the library's Testall, Testany or Testsome) looks
 * at them all between sleeps that end as soon as any Weft access finishes
 * (or after 1 ms, for MPI's own requests); once none runs, WAIT_CALL does
 * the waiting. A list of Weft requests alone just sleeps until each is
 * done when DONE needs them all. */
#define WAIT_LOOP(TEST_CALL, DONE, WAIT_CALL)                                          \
    do {                                                                               \
        for (;;) {                                                                     \
            uint64_t seen = weftio_finished();                                         \
            int others;                                                                \
            if (survey(n, reqs, 0, &errs, &others) == 0) {                             \
                rc = WAIT_CALL;                                                        \
                break;                                                                 \
            }                                                                          \
            rc = TEST_CALL;                                                            \
            if (rc != MPI_SUCCESS || (DONE)) break;                                    \
            free(errs);                                                                \
            errs = NULL;                                                               \
            weftio_wait_finished(seen, 1000);                                          \
        }                                                                              \
    } while (0)

static int body_Waitall(waitall_fn *next, int n, MPI_Request reqs[], MPI_Status sts[]) {
    if (none_alive()) return next(n, reqs, sts);
    int *errs = NULL, rc, flag = 0;
    WAIT_LOOP(NEXT_AS(MPI_Testall, "PMPI_Testall")(n, reqs, &flag, sts), flag, next(n, reqs, sts));
    rc = report(rc, errs, n, NULL, sts);
    free(errs);
    return rc;
}
BOTH(int, Waitall, (int n, MPI_Request reqs[], MPI_Status sts[]), n COMMA reqs COMMA sts)

static int body_Testall(testall_fn *next, int n, MPI_Request reqs[], int *flag, MPI_Status sts[]) {
    int *errs, others;
    survey(n, reqs, 0, &errs, &others);
    int rc = next(n, reqs, flag, sts);
    if (*flag) rc = report(rc, errs, n, NULL, sts);
    free(errs);
    return rc;
}
BOTH(int, Testall, (int n, MPI_Request reqs[], int *flag, MPI_Status sts[]), n COMMA reqs COMMA flag COMMA sts)

/* The error of the request a Testany/Waitany returned, if it failed. */
static int one_of(int rc, const int *errs, int flag, const int *idx) {
    if (rc == MPI_SUCCESS && flag && errs && *idx != MPI_UNDEFINED && errs[*idx]) return errs[*idx];
    return rc;
}

static int body_Testany(testany_fn *next, int n, MPI_Request reqs[], int *idx, int *flag, MPI_Status *st) {
    int *errs, others;
    survey(n, reqs, 0, &errs, &others);
    int rc = one_of(next(n, reqs, idx, flag, st), errs, *flag, idx);
    free(errs);
    return rc;
}
BOTH(int, Testany, (int n, MPI_Request reqs[], int *idx, int *flag, MPI_Status *st), n COMMA reqs COMMA idx COMMA flag COMMA st)

static int body_Testsome(testsome_fn *next, int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]) {
    int *errs, others;
    survey(n, reqs, 0, &errs, &others);
    int rc = next(n, reqs, outcount, idx, sts);
    rc = report(rc, errs, *outcount, idx, sts);
    free(errs);
    return rc;
}
BOTH(int, Testsome, (int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]), n COMMA reqs COMMA outcount COMMA idx COMMA sts)

static int body_Waitany(waitany_fn *next, int n, MPI_Request reqs[], int *idx, MPI_Status *st) {
    if (none_alive()) return next(n, reqs, idx, st);
    int *errs = NULL, rc, flag = 0;
    WAIT_LOOP(NEXT_AS(MPI_Testany, "PMPI_Testany")(n, reqs, idx, &flag, st), flag, (flag = 1, next(n, reqs, idx, st)));
    rc = one_of(rc, errs, flag, idx);
    free(errs);
    return rc;
}
BOTH(int, Waitany, (int n, MPI_Request reqs[], int *idx, MPI_Status *st), n COMMA reqs COMMA idx COMMA st)

static int body_Waitsome(waitsome_fn *next, int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]) {
    if (none_alive()) return next(n, reqs, outcount, idx, sts);
    int *errs = NULL, rc;
    WAIT_LOOP(NEXT_AS(MPI_Testsome, "PMPI_Testsome")(n, reqs, outcount, idx, sts), *outcount != 0, next(n, reqs, outcount, idx, sts));
    rc = report(rc, errs, *outcount, idx, sts);
    free(errs);
    return rc;
}
BOTH(int, Waitsome, (int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]), n COMMA reqs COMMA outcount COMMA idx COMMA sts)
