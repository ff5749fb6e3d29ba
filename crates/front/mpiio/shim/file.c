/* MPI_File_* for Weft files (names starting with "weft:"); every other
 * file goes to the MPI library's PMPI_File_* untouched. Each function is
 * defined under both names, MPI_ and PMPI_ (Open MPI's Fortran bindings
 * call PMPI_File_*, MPICH's call MPI_File_*). */
#define _GNU_SOURCE
#include "shim.h"
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <strings.h>
#include <time.h>

#define PREFIX "weft:"

void *weft_next(const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    if (!p) {
        fprintf(stderr, "weft: %s not found in the libraries loaded after libweft-mpiio (load it first: LD_PRELOAD)\n", name);
        abort();
    }
    return p;
}

struct wfile *weft_file(MPI_File fh) {
    if (fh == MPI_FILE_NULL) return NULL;
    return weftio_known((uintptr_t)fh) ? (struct wfile *)fh : NULL;
}

/* ---- the file's communicator, for the core's collective steps ---- */

/* Rust hands an empty buffer as address 1, which is Open MPI's
 * MPI_IN_PLACE: empty buffers go to MPI as this one instead. */
static char no_bytes[1];
#define REAL(p, len) ((len) > 0 ? (p) : (void *)no_bytes)

/* The MPI library's own barrier: this library's PMPI_Barrier (requests.c)
 * would send held writes of every file from inside a call on one. */
static int cb_barrier(void *ctx) { WEFT_FORWARD(MPI_Barrier, ((struct wfile *)ctx)->comm); }

static int cb_bcast(void *ctx, void *buf, int64_t len, int root) {
    for (int64_t at = 0; at < len; at += INT_MAX) {
        int n = len - at > INT_MAX ? INT_MAX : (int)(len - at);
        int rc = PMPI_Bcast((char *)buf + at, n, MPI_BYTE, root, ((struct wfile *)ctx)->comm);
        if (rc != MPI_SUCCESS) return rc;
    }
    return len == 0 ? PMPI_Bcast(no_bytes, 0, MPI_BYTE, root, ((struct wfile *)ctx)->comm) : MPI_SUCCESS;
}

#ifdef MPICH_VERSION
/* How long a rank waiting in an agreement spins before it yields. */
#define SPIN_NS 100000L

/* Waits for `r`, giving the CPU away once it has waited SPIN_NS: MPICH's
 * blocking collectives busy-poll, so a rank that finished its own I/O
 * first took a core from the servers the other ranks still waited on
 * (collective 1 MiB strided writes, 2 ranks on 2 cores: 66 -> 38 ms for
 * 16 MiB a rank). The spin keeps calls whose ranks arrive
 * together (ior-hard's held records) as fast as before. Open MPI yields
 * by itself when oversubscribed, and its nonblocking collectives were
 * slower (collective ior-hard reads 23 -> 34 ms): it keeps the blocking
 * call. */
static int wait_yielding(MPI_Request *r) {
    /* The MPI library's own test: this library's PMPI_Test (requests.c)
     * would settle Weft requests from inside a call on one file. */
    static __typeof__(&MPI_Test) test;
    if (!test) test = (__typeof__(&MPI_Test))weft_next("PMPI_Test");
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int done = 0;;) {
        int rc = test(r, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000000000L + (now.tv_nsec - t0.tv_nsec) > SPIN_NS) sched_yield();
    }
}
#endif

/* The collective calls' agreements (what each rank asks, and whether it
 * succeeded) are allgathers. */
static int cb_allgather(void *ctx, const void *send, int64_t len, void *recv) {
    if (len > INT_MAX) return MPI_ERR_COUNT;
#ifdef MPICH_VERSION
    MPI_Request r;
    int rc = PMPI_Iallgather(REAL(send, len), (int)len, MPI_BYTE, REAL(recv, len), (int)len, MPI_BYTE,
                             ((struct wfile *)ctx)->comm, &r);
    return rc != MPI_SUCCESS ? rc : wait_yielding(&r);
#else
    return PMPI_Allgather(REAL(send, len), (int)len, MPI_BYTE, REAL(recv, len), (int)len, MPI_BYTE,
                          ((struct wfile *)ctx)->comm);
#endif
}

/* Byte counts per rank; every count and displacement must fit an int
 * (collective buffers are far smaller). */
static int cb_alltoallv(void *ctx, const void *send, const int64_t *sc, void *recv, const int64_t *rc) {
    struct wfile *f = ctx;
    int n = f->cc.size, rcode = MPI_ERR_COUNT;
    int *s = malloc(4 * sizeof(int) * (size_t)n);
    if (!s) return MPI_ERR_NO_MEM;
    int *sd = s + n, *r = s + 2 * n, *rd = s + 3 * n;
    int64_t sat = 0, rat = 0;
    for (int i = 0; i < n; i++) {
        if (sc[i] < 0 || rc[i] < 0 || sc[i] > INT_MAX || rc[i] > INT_MAX || sat > INT_MAX || rat > INT_MAX) goto out;
        s[i] = (int)sc[i];
        sd[i] = (int)sat;
        r[i] = (int)rc[i];
        rd[i] = (int)rat;
        sat += sc[i];
        rat += rc[i];
    }
    if (getenv("WEFT_MPIIO_TRACE")) {
        char line[512];
        int at = snprintf(line, sizeof line, "weft: rank %d alltoallv send", f->cc.rank);
        for (int i = 0; i < n && at < 400; i++) at += snprintf(line + at, sizeof line - at, " %d", s[i]);
        at += snprintf(line + at, sizeof line - at, " recv");
        for (int i = 0; i < n && at < 480; i++) at += snprintf(line + at, sizeof line - at, " %d", r[i]);
        fprintf(stderr, "%s\n", line);
    }
    rcode = PMPI_Alltoallv(REAL(send, sat), s, sd, MPI_BYTE, REAL(recv, rat), r, rd, MPI_BYTE, f->comm);
out:
    free(s);
    return rcode;
}

/* One rank's segments as a type over MPI_BOTTOM (absolute addresses), or
 * none (count 0) when it has no bytes. */
static int segs_type(const int64_t *segs, int64_t n, MPI_Datatype *t, int *count) {
    *count = 0;
    *t = MPI_BYTE;
    if (n == 0) return MPI_SUCCESS;
    if (n < 0 || n > INT_MAX) return MPI_ERR_COUNT;
    int *bl = malloc(sizeof(int) * (size_t)n);
    MPI_Aint *dp = malloc(sizeof(MPI_Aint) * (size_t)n);
    int rc = MPI_ERR_NO_MEM;
    if (!bl || !dp) goto out;
    rc = MPI_ERR_COUNT;
    for (int64_t i = 0; i < n; i++) {
        if (segs[2 * i + 1] < 0 || segs[2 * i + 1] > INT_MAX) goto out;
        dp[i] = (MPI_Aint)segs[2 * i];
        bl[i] = (int)segs[2 * i + 1];
    }
    rc = PMPI_Type_create_hindexed((int)n, bl, dp, MPI_BYTE, t);
    if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(t);
    if (rc == MPI_SUCCESS) *count = 1;
out:
    free(bl);
    free(dp);
    return rc;
}

/* The two-phase exchange straight from and into the program's buffers:
 * one hindexed type per peer and direction, one MPI_Alltoallw. */
static int cb_alltoallv_iov(void *ctx, const int64_t *send_segs, const int64_t *send_n, const int64_t *recv_segs, const int64_t *recv_n) {
    struct wfile *f = ctx;
    int n = f->cc.size, rc = MPI_ERR_NO_MEM;
    MPI_Datatype *types = calloc(2 * (size_t)n, sizeof(MPI_Datatype));
    int *counts = calloc(4 * (size_t)n, sizeof(int));
    if (!types || !counts) goto out;
    for (int i = 0; i < 2 * n; i++) types[i] = MPI_BYTE;
    int *sc = counts, *rcnt = counts + n, *sd = counts + 2 * n, *rd = counts + 3 * n;
    for (int i = 0; i < n; i++) {
        rc = segs_type(send_segs, send_n[i], &types[i], &sc[i]);
        if (rc != MPI_SUCCESS) goto out;
        send_segs += 2 * send_n[i];
        rc = segs_type(recv_segs, recv_n[i], &types[n + i], &rcnt[i]);
        if (rc != MPI_SUCCESS) goto out;
        recv_segs += 2 * recv_n[i];
        sd[i] = rd[i] = 0;
    }
    rc = PMPI_Alltoallw(MPI_BOTTOM, sc, sd, types, MPI_BOTTOM, rcnt, rd, types + n, f->comm);
out:
    if (types)
        for (int i = 0; i < 2 * n; i++)
            if (types[i] != MPI_BYTE) PMPI_Type_free(&types[i]);
    free(types);
    free(counts);
    return rc;
}

/* ---- hints ---- */

struct pairs {
    char **keys, **vals;
    int n;
};

static void pairs_free(struct pairs *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->keys[i]);
        free(p->vals[i]);
    }
    free(p->keys);
    free(p->vals);
}

static struct pairs pairs_of(MPI_Info info) {
    struct pairs p = {0};
    int n = 0;
    if (info == MPI_INFO_NULL || PMPI_Info_get_nkeys(info, &n) != MPI_SUCCESS || n <= 0) return p;
    p.keys = calloc(n, sizeof *p.keys);
    p.vals = calloc(n, sizeof *p.vals);
    if (!p.keys || !p.vals) return p;
    for (int i = 0; i < n; i++) {
        char key[MPI_MAX_INFO_KEY + 1], *val = malloc(MPI_MAX_INFO_VAL + 1);
        int flag = 0;
        if (!val || PMPI_Info_get_nthkey(info, i, key) != MPI_SUCCESS ||
            PMPI_Info_get(info, key, MPI_MAX_INFO_VAL, val, &flag) != MPI_SUCCESS || !flag) {
            free(val);
            continue;
        }
        p.keys[p.n] = strdup(key);
        p.vals[p.n] = val;
        p.n++;
    }
    return p;
}

static int apply_info(struct wfile *f, MPI_Info info) {
    struct pairs p = pairs_of(info);
    int rc = weftio_set_info((uintptr_t)f, (const char *const *)p.keys, (const char *const *)p.vals, p.n);
    pairs_free(&p);
    return rc ? weft_fail(f, rc) : MPI_SUCCESS;
}

/* ---- open, close, delete ---- */

static uint32_t core_amode(int amode) {
    uint32_t m = 0;
    if (amode & MPI_MODE_RDONLY) m |= WEFTIO_RDONLY;
    if (amode & MPI_MODE_RDWR) m |= WEFTIO_RDWR;
    if (amode & MPI_MODE_WRONLY) m |= WEFTIO_WRONLY;
    if (amode & MPI_MODE_CREATE) m |= WEFTIO_CREATE;
    if (amode & MPI_MODE_EXCL) m |= WEFTIO_EXCL;
    if (amode & MPI_MODE_DELETE_ON_CLOSE) m |= WEFTIO_DELETE_ON_CLOSE;
    if (amode & MPI_MODE_UNIQUE_OPEN) m |= WEFTIO_UNIQUE_OPEN;
    if (amode & MPI_MODE_SEQUENTIAL) m |= WEFTIO_SEQUENTIAL;
    if (amode & MPI_MODE_APPEND) m |= WEFTIO_APPEND;
    int known = MPI_MODE_RDONLY | MPI_MODE_RDWR | MPI_MODE_WRONLY | MPI_MODE_CREATE | MPI_MODE_EXCL |
                MPI_MODE_DELETE_ON_CLOSE | MPI_MODE_UNIQUE_OPEN | MPI_MODE_SEQUENTIAL | MPI_MODE_APPEND;
    if (amode & ~known) m |= 1u << 31; /* refused by the core as a bad mode */
    return m;
}

static int is_weft(const char *name) { return name && strncmp(name, PREFIX, strlen(PREFIX)) == 0; }

int MPI_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh) {
    if (getenv("WEFT_MPIIO_TRACE")) fprintf(stderr, "weft: MPI_File_open(%s, amode %d)\n", filename ? filename : "(null)", amode);
    if (!is_weft(filename)) WEFT_FORWARD(MPI_File_open, comm, filename, amode, info, fh);
    int inter = 0;
    if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
        return weft_fail_msg(NULL, WEFTIO_E_COMM, "weft: MPI_File_open needs an intracommunicator");
    struct wfile *f = calloc(1, sizeof *f);
    if (!f) return weft_fail_msg(NULL, WEFTIO_E_INTERN, "weft: out of memory");
    if (PMPI_Comm_dup(comm, &f->comm) != MPI_SUCCESS) {
        free(f);
        return weft_fail_msg(NULL, WEFTIO_E_COMM, "weft: cannot duplicate the communicator");
    }
    PMPI_Comm_rank(f->comm, &f->cc.rank);
    PMPI_Comm_size(f->comm, &f->cc.size);
    f->cc.ctx = f;
    f->cc.barrier = cb_barrier;
    f->cc.bcast = cb_bcast;
    f->cc.allgather = cb_allgather;
    f->cc.alltoallv = cb_alltoallv;
    f->cc.alltoallv_iov = cb_alltoallv_iov;
    f->amode = amode;
    f->etype = f->ftype = MPI_BYTE;
    PMPI_File_get_errhandler(MPI_FILE_NULL, &f->eh);
    struct pairs p = pairs_of(info);
    int fortran = 0;
    int rc = weftio_open(&f->cc, filename + strlen(PREFIX), core_amode(amode), (const char *const *)p.keys,
                         (const char *const *)p.vals, p.n, (uintptr_t)f, &fortran);
    pairs_free(&p);
    if (rc) {
        int code = weft_fail(NULL, rc);
        weft_errhandler_release(&f->eh);
        PMPI_Comm_free(&f->comm);
        free(f);
        return code;
    }
    *fh = (MPI_File)f;
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_open)

static void drop_type(MPI_Datatype *t) {
    if (*t != MPI_DATATYPE_NULL && !weft_is_named(*t)) PMPI_Type_free(t);
    *t = MPI_BYTE;
}

int MPI_File_close(MPI_File *fh) {
    struct wfile *f = fh ? weft_file(*fh) : NULL;
    if (!f) WEFT_FORWARD(MPI_File_close, fh);
    int rc = weftio_close((uintptr_t)f);
    int code = rc ? weft_fail_msg(NULL, rc, weftio_last_error()) : MPI_SUCCESS;
    weft_forget_file(f);
    drop_type(&f->etype);
    drop_type(&f->ftype);
    weft_errhandler_release(&f->eh);
    PMPI_Comm_free(&f->comm);
    free(f);
    *fh = MPI_FILE_NULL;
    return code;
}
WEFT_ALIAS(MPI_File_close)

int MPI_File_delete(const char *filename, MPI_Info info) {
    if (!is_weft(filename)) WEFT_FORWARD(MPI_File_delete, filename, info);
    int rc = weftio_delete(filename + strlen(PREFIX));
    return rc ? weft_fail(NULL, rc) : MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_delete)

/* ---- size, mode, group, info ---- */

int MPI_File_set_size(MPI_File fh, MPI_Offset size) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_set_size, fh, size);
    int rc = weftio_set_size((uintptr_t)f, size, 0);
    return rc ? weft_fail(f, rc) : MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_set_size)

int MPI_File_preallocate(MPI_File fh, MPI_Offset size) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_preallocate, fh, size);
    int rc = weftio_set_size((uintptr_t)f, size, 1);
    return rc ? weft_fail(f, rc) : MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_preallocate)

int MPI_File_get_size(MPI_File fh, MPI_Offset *size) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_size, fh, size);
    if (!size) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    int64_t s = 0;
    int rc = weftio_get_size((uintptr_t)f, &s);
    if (rc) return weft_fail(f, rc);
    *size = s;
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_get_size)

int MPI_File_get_group(MPI_File fh, MPI_Group *group) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_group, fh, group);
    if (!group) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    return PMPI_Comm_group(f->comm, group);
}
WEFT_ALIAS(MPI_File_get_group)

int MPI_File_get_amode(MPI_File fh, int *amode) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_amode, fh, amode);
    if (!amode) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    *amode = f->amode;
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_get_amode)

int MPI_File_set_info(MPI_File fh, MPI_Info info) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_set_info, fh, info);
    return apply_info(f, info);
}
WEFT_ALIAS(MPI_File_set_info)

int MPI_File_get_info(MPI_File fh, MPI_Info *info) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_info, fh, info);
    if (!info) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    char *text = NULL;
    int rc = weftio_get_info((uintptr_t)f, &text);
    if (rc) return weft_fail(f, rc);
    PMPI_Info_create(info);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        PMPI_Info_set(*info, line, eq + 1);
    }
    weftio_string_free(text);
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_get_info)

/* ---- views ---- */

int MPI_File_set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype, const char *datarep,
                      MPI_Info info) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_set_view, fh, disp, etype, filetype, datarep, info);
    /* set_view is collective: a rank refusing its own arguments still
     * joins the core's collective steps (with no types), then fails. */
    if (!datarep || strcasecmp(datarep, "native") != 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "weft: data representation \"%s\" is not supported (only \"native\")",
                 datarep ? datarep : "(null)");
        weftio_set_view((uintptr_t)f, 0, NULL, NULL);
        return weft_fail_msg(f, WEFTIO_E_UNSUPPORTED_DATAREP, msg);
    }
    if (disp == MPI_DISPLACEMENT_CURRENT) {
        weftio_set_view((uintptr_t)f, 0, NULL, NULL);
        return weft_fail_msg(f, WEFTIO_E_UNSUPPORTED_OPERATION,
                             "weft: MPI_DISPLACEMENT_CURRENT needs MPI_MODE_SEQUENTIAL, which Weft does not support");
    }
    void *e, *t;
    int eo, to, rc = weft_type(etype, &e, &eo);
    if (rc) {
        weftio_set_view((uintptr_t)f, 0, NULL, NULL);
        return rc < 0 ? weft_fail_msg(f, WEFTIO_E_TYPE, "weft: bad etype") : weft_fail(f, rc);
    }
    rc = weft_type(filetype, &t, &to);
    if (rc) {
        if (eo) weftio_type_free(e);
        weftio_set_view((uintptr_t)f, 0, NULL, NULL);
        return rc < 0 ? weft_fail_msg(f, WEFTIO_E_TYPE, "weft: bad filetype") : weft_fail(f, rc);
    }
    rc = weftio_set_view((uintptr_t)f, disp, e, t);
    if (eo) weftio_type_free(e);
    if (to) weftio_type_free(t);
    if (rc) return weft_fail(f, rc);
    drop_type(&f->etype);
    drop_type(&f->ftype);
    if (!weft_is_named(etype)) PMPI_Type_dup(etype, &f->etype); else f->etype = etype;
    if (!weft_is_named(filetype)) PMPI_Type_dup(filetype, &f->ftype); else f->ftype = filetype;
    f->disp = disp;
    return apply_info(f, info);
}
WEFT_ALIAS(MPI_File_set_view)

int MPI_File_get_view(MPI_File fh, MPI_Offset *disp, MPI_Datatype *etype, MPI_Datatype *filetype, char *datarep) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_view, fh, disp, etype, filetype, datarep);
    if (!disp || !etype || !filetype || !datarep) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    *disp = f->disp;
    if (weft_is_named(f->etype)) *etype = f->etype; else PMPI_Type_dup(f->etype, etype);
    if (weft_is_named(f->ftype)) *filetype = f->ftype; else PMPI_Type_dup(f->ftype, filetype);
    strcpy(datarep, "native");
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_get_view)

int MPI_File_get_type_extent(MPI_File fh, MPI_Datatype datatype, MPI_Aint *extent) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_type_extent, fh, datatype, extent);
    if (!extent) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    MPI_Aint lb;
    return PMPI_Type_get_extent(datatype, &lb, extent); /* "native": as in memory */
}
WEFT_ALIAS(MPI_File_get_type_extent)

#if MPI_VERSION >= 4
int MPI_File_get_type_extent_c(MPI_File fh, MPI_Datatype datatype, MPI_Count *extent) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_type_extent_c, fh, datatype, extent);
    MPI_Count lb;
    return PMPI_Type_get_extent_x(datatype, &lb, extent);
}
WEFT_ALIAS(MPI_File_get_type_extent_c)
#endif

/* ---- file pointers ---- */

static int whence_of(int whence) {
    return whence == MPI_SEEK_SET ? 0 : whence == MPI_SEEK_CUR ? 1 : whence == MPI_SEEK_END ? 2 : -1;
}

int MPI_File_seek(MPI_File fh, MPI_Offset offset, int whence) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_seek, fh, offset, whence);
    int rc = weftio_seek((uintptr_t)f, offset, whence_of(whence), 0);
    return rc ? weft_fail(f, rc) : MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_seek)

int MPI_File_seek_shared(MPI_File fh, MPI_Offset offset, int whence) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_seek_shared, fh, offset, whence);
    int rc = weftio_seek((uintptr_t)f, offset, whence_of(whence), 1);
    return rc ? weft_fail(f, rc) : MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_seek_shared)

int MPI_File_get_position(MPI_File fh, MPI_Offset *offset) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_position, fh, offset);
    if (!offset) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    int64_t o = 0;
    int rc = weftio_position((uintptr_t)f, 0, &o);
    if (rc) return weft_fail(f, rc);
    *offset = o;
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_get_position)

int MPI_File_get_position_shared(MPI_File fh, MPI_Offset *offset) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_position_shared, fh, offset);
    if (!offset) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    int64_t o = 0;
    int rc = weftio_position((uintptr_t)f, 1, &o);
    if (rc) return weft_fail(f, rc);
    *offset = o;
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_get_position_shared)

int MPI_File_get_byte_offset(MPI_File fh, MPI_Offset offset, MPI_Offset *disp) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_byte_offset, fh, offset, disp);
    if (!disp) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    int64_t o = 0;
    int rc = weftio_byte_offset((uintptr_t)f, offset, &o);
    if (rc) return weft_fail(f, rc);
    *disp = o;
    return MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_get_byte_offset)

/* ---- consistency ---- */

int MPI_File_sync(MPI_File fh) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_sync, fh);
    int rc = weftio_sync((uintptr_t)f);
    return rc ? weft_fail(f, rc) : MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_sync)

int MPI_File_set_atomicity(MPI_File fh, int flag) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_set_atomicity, fh, flag);
    int rc = weftio_set_atomicity((uintptr_t)f, flag != 0);
    return rc ? weft_fail(f, rc) : MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_set_atomicity)

int MPI_File_get_atomicity(MPI_File fh, int *flag) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_get_atomicity, fh, flag);
    if (!flag) return weft_fail_msg(f, WEFTIO_E_ARG, "weft: NULL output argument");
    int rc = weftio_get_atomicity((uintptr_t)f, flag);
    return rc ? weft_fail(f, rc) : MPI_SUCCESS;
}
WEFT_ALIAS(MPI_File_get_atomicity)

/* ---- Fortran handles ---- */

MPI_Fint MPI_File_c2f(MPI_File fh) {
    struct wfile *f = weft_file(fh);
    if (!f) WEFT_FORWARD(MPI_File_c2f, fh);
    return weftio_c2f((uintptr_t)f);
}
WEFT_ALIAS(MPI_File_c2f)

MPI_File MPI_File_f2c(MPI_Fint fh) {
    uintptr_t key = weftio_f2c(fh);
    if (!key) WEFT_FORWARD(MPI_File_f2c, fh);
    return (MPI_File)key;
}
WEFT_ALIAS(MPI_File_f2c)
