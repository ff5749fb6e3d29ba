/* MPI datatypes to the core's datatypes: each type is decoded with
 * MPI_Type_get_envelope/get_contents into a type program (grammar in
 * crates/front/mpiio/src/types.rs). The result is cached on a derived
 * type as an attribute, freed by MPI when the type is freed; named types
 * are cached in a small table of their own (they are never freed). */
#include "shim.h"
#include <pthread.h>
#include <stdlib.h>

struct prog {
    int64_t *w;
    size_t n, cap;
    int err; /* an MPI error class, or 0 */
};

/* Bounds what one type may make us build: MPI types are descriptions, a
 * program this long means a type listing millions of blocks. */
#define MAX_WORDS (64u << 20)

static void put(struct prog *p, int64_t v) {
    if (p->err) return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        int64_t *w = cap <= MAX_WORDS ? realloc(p->w, cap * sizeof *w) : NULL;
        if (!w) {
            p->err = MPI_ERR_NO_MEM;
            return;
        }
        p->w = w;
        p->cap = cap;
    }
    p->w[p->n++] = v;
}

int weft_is_named(MPI_Datatype t) {
    int ni, na, nd, comb;
    if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS) return 0;
    return comb == MPI_COMBINER_NAMED;
}

static MPI_Aint extent_of(MPI_Datatype t) {
    MPI_Aint lb, ext;
    PMPI_Type_get_extent(t, &lb, &ext);
    return ext;
}

static void encode(struct prog *p, MPI_Datatype t, int depth);

static void encode_named(struct prog *p, MPI_Datatype t) {
    int size;
    MPI_Aint lb, ext;
    PMPI_Type_size(t, &size);
    PMPI_Type_get_extent(t, &lb, &ext);
    if (t == MPI_SHORT_INT) { /* {short at 0, int at 4}: the one gapped pair */
        put(p, 3); put(p, 2); put(p, 1); put(p, 0); put(p, 1); put(p, 4);
        put(p, 0); put(p, sizeof(short)); put(p, 0); put(p, sizeof(int));
    } else if (lb == 0 && ext == size) {
        put(p, 0); put(p, size);
    } else { /* pairs such as MPI_DOUBLE_INT: data first, padding after */
        put(p, 4); put(p, lb); put(p, ext); put(p, 0); put(p, size);
    }
}

static int64_t map_distrib(int d) {
    return d == MPI_DISTRIBUTE_NONE ? 0 : d == MPI_DISTRIBUTE_BLOCK ? 1 : d == MPI_DISTRIBUTE_CYCLIC ? 2 : 99;
}

static void encode(struct prog *p, MPI_Datatype t, int depth) {
    int ni, na, nd, comb;
    if (p->err) return;
    if (depth > 64 || PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS) {
        p->err = MPI_ERR_TYPE;
        return;
    }
    if (comb == MPI_COMBINER_NAMED) {
        encode_named(p, t);
        return;
    }
    int *ints = malloc((ni + 1) * sizeof *ints);
    MPI_Aint *aints = malloc((na + 1) * sizeof *aints);
    MPI_Datatype *types = malloc((nd + 1) * sizeof *types);
    if (!ints || !aints || !types) {
        p->err = MPI_ERR_NO_MEM;
        goto out_nofree;
    }
    if (PMPI_Type_get_contents(t, ni, na, nd, ints, aints, types) != MPI_SUCCESS) {
        p->err = MPI_ERR_TYPE;
        goto out_nofree;
    }
    switch (comb) {
    case MPI_COMBINER_DUP:
        encode(p, types[0], depth + 1);
        break;
    case MPI_COMBINER_CONTIGUOUS:
        put(p, 1); put(p, ints[0]); put(p, 1); put(p, extent_of(types[0]));
        encode(p, types[0], depth + 1);
        break;
    case MPI_COMBINER_VECTOR:
        put(p, 1); put(p, ints[0]); put(p, ints[1]); put(p, (int64_t)ints[2] * extent_of(types[0]));
        encode(p, types[0], depth + 1);
        break;
    case MPI_COMBINER_HVECTOR:
#ifdef MPICH
    case MPI_COMBINER_HVECTOR_INTEGER:
#endif
        put(p, 1); put(p, ints[0]); put(p, ints[1]); put(p, aints[0]);
        encode(p, types[0], depth + 1);
        break;
    case MPI_COMBINER_INDEXED: {
        int n = ints[0];
        MPI_Aint e = extent_of(types[0]);
        put(p, 2); put(p, n);
        for (int i = 0; i < n; i++) { put(p, ints[1 + i]); put(p, (int64_t)ints[1 + n + i] * e); }
        encode(p, types[0], depth + 1);
        break;
    }
    case MPI_COMBINER_HINDEXED:
#ifdef MPICH
    case MPI_COMBINER_HINDEXED_INTEGER:
#endif
    {
        int n = ints[0];
        put(p, 2); put(p, n);
        for (int i = 0; i < n; i++) { put(p, ints[1 + i]); put(p, aints[i]); }
        encode(p, types[0], depth + 1);
        break;
    }
    case MPI_COMBINER_INDEXED_BLOCK: {
        int n = ints[0];
        MPI_Aint e = extent_of(types[0]);
        put(p, 2); put(p, n);
        for (int i = 0; i < n; i++) { put(p, ints[1]); put(p, (int64_t)ints[2 + i] * e); }
        encode(p, types[0], depth + 1);
        break;
    }
    case MPI_COMBINER_HINDEXED_BLOCK: {
        int n = ints[0];
        put(p, 2); put(p, n);
        for (int i = 0; i < n; i++) { put(p, ints[1]); put(p, aints[i]); }
        encode(p, types[0], depth + 1);
        break;
    }
    case MPI_COMBINER_STRUCT:
#ifdef MPICH
    case MPI_COMBINER_STRUCT_INTEGER:
#endif
    {
        int n = ints[0];
        put(p, 3); put(p, n);
        for (int i = 0; i < n; i++) { put(p, ints[1 + i]); put(p, aints[i]); }
        for (int i = 0; i < n; i++) encode(p, types[i], depth + 1);
        break;
    }
    case MPI_COMBINER_SUBARRAY: {
        int n = ints[0];
        put(p, 5); put(p, n); put(p, ints[1 + 3 * n] == MPI_ORDER_FORTRAN ? 1 : 0);
        for (int i = 0; i < 3 * n; i++) put(p, ints[1 + i]);
        encode(p, types[0], depth + 1);
        break;
    }
    case MPI_COMBINER_DARRAY: {
        int n = ints[2];
        put(p, 6); put(p, ints[0]); put(p, ints[1]); put(p, n);
        put(p, ints[3 + 4 * n] == MPI_ORDER_FORTRAN ? 1 : 0);
        for (int i = 0; i < n; i++) put(p, ints[3 + i]);
        for (int i = 0; i < n; i++) put(p, map_distrib(ints[3 + n + i]));
        for (int i = 0; i < n; i++) put(p, ints[3 + 2 * n + i] == MPI_DISTRIBUTE_DFLT_DARG ? -1 : ints[3 + 2 * n + i]);
        for (int i = 0; i < n; i++) put(p, ints[3 + 3 * n + i]);
        encode(p, types[0], depth + 1);
        break;
    }
    case MPI_COMBINER_RESIZED:
        put(p, 4); put(p, aints[0]); put(p, aints[1]);
        encode(p, types[0], depth + 1);
        break;
    case MPI_COMBINER_F90_REAL:
    case MPI_COMBINER_F90_COMPLEX:
    case MPI_COMBINER_F90_INTEGER:
        encode_named(p, t);
        break;
    default:
        p->err = MPI_ERR_TYPE;
    }
    for (int i = 0; i < nd; i++)
        if (!weft_is_named(types[i])) PMPI_Type_free(&types[i]);
out_nofree:
    free(ints);
    free(aints);
    free(types);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int keyval = MPI_KEYVAL_INVALID;

static int drop_cached(MPI_Datatype t, int kv, void *attr, void *extra) {
    (void)t; (void)kv; (void)extra;
    weftio_type_free(attr);
    return MPI_SUCCESS;
}

#define MAX_NAMED 128
static struct { MPI_Datatype t; void *h; } named[MAX_NAMED];
static int nnamed;

static int build(MPI_Datatype t, void **out) {
    struct prog p = {0};
    encode(&p, t, 0);
    int rc = p.err ? -p.err : weftio_type_build(p.w, (int64_t)p.n, out);
    free(p.w);
    return rc;
}

/* 0, a core class (> 0), or minus an MPI error class. */
int weft_type(MPI_Datatype t, void **out, int *owned) {
    *owned = 0;
    if (t == MPI_DATATYPE_NULL) return -MPI_ERR_TYPE;
    if (weft_is_named(t)) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < nnamed; i++)
            if (named[i].t == t) {
                *out = named[i].h;
                pthread_mutex_unlock(&lock);
                return 0;
            }
        int rc = build(t, out);
        if (rc == 0 && nnamed < MAX_NAMED) {
            named[nnamed].t = t;
            named[nnamed].h = *out;
            nnamed++;
        } else if (rc == 0) {
            *owned = 1;
        }
        pthread_mutex_unlock(&lock);
        return rc;
    }
    pthread_mutex_lock(&lock);
    if (keyval == MPI_KEYVAL_INVALID)
        PMPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, drop_cached, &keyval, NULL);
    pthread_mutex_unlock(&lock);
    int flag = 0;
    void *cached = NULL;
    if (keyval != MPI_KEYVAL_INVALID) PMPI_Type_get_attr(t, keyval, &cached, &flag);
    if (flag) {
        *out = cached;
        return 0;
    }
    int rc = build(t, out);
    if (rc != 0) return rc;
    if (keyval == MPI_KEYVAL_INVALID || PMPI_Type_set_attr(t, keyval, *out) != MPI_SUCCESS) *owned = 1;
    return 0;
}
