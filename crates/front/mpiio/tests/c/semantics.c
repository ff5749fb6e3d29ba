/* One MPI-IO program run twice by the tests: on a weft: file and on a
 * local file through the MPI library's own MPI-IO. Both runs must print
 * the same lines and leave the same bytes. It uses every kind of access:
 * explicit offsets, individual and shared pointers, ordered, nonblocking,
 * split collectives, views of vector/subarray/darray/indexed/struct types
 * with non-contiguous memory types, zero-count ranks, and error classes.
 * Usage: semantics PATH (PATH may start with weft:) */
#include "check.h"
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ != MPI_SUCCESS) {                                                    \
            char s_[MPI_MAX_ERROR_STRING];                                           \
            int l_;                                                                  \
            MPI_Error_string(rc_, s_, &l_);                                          \
            fprintf(stderr, "rank %d: %s failed at line %d: %s\n", rank, #call, __LINE__, s_); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                            \
        }                                                                            \
    } while (0)

static unsigned long long sum(const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned long long s = 0;
    for (size_t i = 0; i < n; i++) s = s * 31 + b[i];
    return s;
}

static int count_of(MPI_Status *st, MPI_Datatype t) {
    int c;
    MPI_Get_count(st, t, &c);
    return c;
}

static int err_class(int rc) {
    int c;
    MPI_Error_class(rc, &c);
    return c;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2) MPI_Abort(MPI_COMM_WORLD, 2);
    const char *path = argv[1];
    MPI_File fh;
    MPI_Status st;
    MPI_File_delete(path, MPI_INFO_NULL);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Errors: a missing file, EXCL on an existing one, bad mode. */
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    report("open missing -> class ok=%lld no_such_file=%lld", rc == MPI_SUCCESS, err_class(rc) == MPI_ERR_NO_SUCH_FILE);
    CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    int amode, atomic0;
    CHECK(MPI_File_get_amode(fh, &amode));
    CHECK(MPI_File_get_atomicity(fh, &atomic0));
    report("amode matches %lld, atomic %lld", amode == (MPI_MODE_CREATE | MPI_MODE_RDWR), atomic0);
    report("fortran handle round trip %lld, %lld", MPI_File_f2c(MPI_File_c2f(fh)) == fh, 0);

    /* 1. Explicit offsets: each rank writes 1000 ints at its block. */
    int n = 1000, *buf = malloc(sizeof(int) * 4 * n), *back = malloc(sizeof(int) * 4 * n);
    for (int i = 0; i < 4 * n; i++) buf[i] = rank * 100000 + i;
    CHECK(MPI_File_write_at(fh, (MPI_Offset)rank * n * sizeof(int), buf, n, MPI_INT, &st));
    report("write_at count %lld elements %lld", count_of(&st, MPI_INT), 0);
    CHECK(MPI_File_sync(fh));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_File_sync(fh));
    int peer = (rank + 1) % nprocs;
    CHECK(MPI_File_read_at_all(fh, (MPI_Offset)peer * n * sizeof(int), back, n, MPI_INT, &st));
    report("read_at_all peer block sum %lld count %lld", (long long)(sum(back, n * sizeof(int)) % 1000000007), count_of(&st, MPI_INT));

    /* 2. Reads past the end are short; status says how short. */
    MPI_Offset size;
    CHECK(MPI_File_get_size(fh, &size));
    CHECK(MPI_File_read_at(fh, size - 10, back, 100, MPI_BYTE, &st));
    report("size %lld, short read got %lld bytes", size, count_of(&st, MPI_BYTE));
    CHECK(MPI_File_read_at(fh, size - 10, back, 3, MPI_INT, &st));
    int elems;
    MPI_Get_elements(&st, MPI_INT, &elems);
    report("partial ints: count undefined %lld elements %lld", count_of(&st, MPI_INT) == MPI_UNDEFINED, elems);

    /* 3. A vector view, with a non-contiguous memory type: rank r owns
     * every nprocs-th block of 3 ints after a 4 KiB header. */
    MPI_Datatype ftype, mtype;
    MPI_Type_vector(50, 3, 3 * nprocs, MPI_INT, &ftype);
    MPI_Type_commit(&ftype);
    MPI_Type_vector(150, 1, 2, MPI_INT, &mtype); /* every other int of buf */
    MPI_Type_commit(&mtype);
    CHECK(MPI_File_set_view(fh, 4096 + rank * 3 * sizeof(int), MPI_INT, ftype, "native", MPI_INFO_NULL));
    CHECK(MPI_File_write_all(fh, buf, 1, mtype, &st));
    MPI_Offset pos, byte;
    CHECK(MPI_File_get_position(fh, &pos));
    CHECK(MPI_File_get_byte_offset(fh, pos, &byte));
    report("vector view: position %lld byte offset %lld", pos, byte);
    CHECK(MPI_File_seek(fh, 10, MPI_SEEK_SET));
    memset(back, 0, sizeof(int) * 4 * n);
    CHECK(MPI_File_read(fh, back, 20, MPI_INT, &st));
    report("seek+read sum %lld count %lld", (long long)(sum(back, 20 * sizeof(int)) % 1000000007), count_of(&st, MPI_INT));
    MPI_Barrier(MPI_COMM_WORLD); /* the end of file is every rank's writes */
    CHECK(MPI_File_seek(fh, -5, MPI_SEEK_END));
    CHECK(MPI_File_get_position(fh, &pos));
    report("seek end-5 -> %lld, %lld", pos, 0);
    MPI_Datatype get_e, get_f;
    char rep[MPI_MAX_DATAREP_STRING];
    MPI_Offset disp;
    CHECK(MPI_File_get_view(fh, &disp, &get_e, &get_f, rep));
    int fsize;
    MPI_Type_size(get_f, &fsize);
    report("get_view disp %lld filetype size %lld", disp, fsize);
    if (get_f != MPI_INT && get_f != MPI_BYTE) MPI_Type_free(&get_f);
    /* get_view hands out duplicates: freeing them leaves the view intact. */
    CHECK(MPI_File_get_view(fh, &disp, &get_e, &get_f, rep));
    MPI_Type_free(&get_f);
    CHECK(MPI_File_read_at(fh, 3, back, 5, MPI_INT, &st));
    report("view after freeing get_view's types: sum %lld count %lld", (long long)(sum(back, 5 * sizeof(int)) % 1000000007), count_of(&st, MPI_INT));

    /* 4. A 2-D subarray (C order) and a darray (cyclic, Fortran order). */
    int gs[2] = {8 * nprocs, 16}, ss[2] = {8, 16}, st0[2] = {8 * rank, 0};
    MPI_Datatype sub;
    MPI_Type_create_subarray(2, gs, ss, st0, MPI_ORDER_C, MPI_DOUBLE, &sub);
    MPI_Type_commit(&sub);
    double *d = malloc(sizeof(double) * 8 * 16 * 2);
    for (int i = 0; i < 8 * 16 * 2; i++) d[i] = rank + i / 1000.0;
    CHECK(MPI_File_set_view(fh, 65536, MPI_DOUBLE, sub, "native", MPI_INFO_NULL));
    CHECK(MPI_File_write_at_all(fh, 0, d, 8 * 16, MPI_DOUBLE, &st));
    report("subarray write count %lld, %lld", count_of(&st, MPI_DOUBLE), 0);
    /* Read it back into the middle of a Fortran-order array in memory. */
    int mg[2] = {12, 20}, ms[2] = {8, 16}, mst[2] = {2, 3};
    MPI_Datatype fsub;
    MPI_Type_create_subarray(2, mg, ms, mst, MPI_ORDER_FORTRAN, MPI_DOUBLE, &fsub);
    MPI_Type_commit(&fsub);
    double *big = calloc(12 * 20, sizeof(double));
    CHECK(MPI_File_read_at_all(fh, 0, big, 1, fsub, &st));
    report("fortran-order subarray read: sum %lld count %lld", (long long)(sum(big, 12 * 20 * sizeof(double)) % 1000000007), count_of(&st, fsub));
    MPI_Type_free(&fsub);
    free(big);
    int dg[2] = {10, 4 * nprocs}, dd[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_BLOCK}, da[2] = {2, MPI_DISTRIBUTE_DFLT_DARG}, dp[2] = {1, nprocs};
    MPI_Datatype darr;
    MPI_Type_create_darray(nprocs, rank, 2, dg, dd, da, dp, MPI_ORDER_FORTRAN, MPI_FLOAT, &darr);
    MPI_Type_commit(&darr);
    CHECK(MPI_File_set_view(fh, 131072, MPI_FLOAT, darr, "native", MPI_INFO_NULL));
    float *fl = malloc(sizeof(float) * 40);
    for (int i = 0; i < 40; i++) fl[i] = rank * 1000 + i;
    CHECK(MPI_File_write_all(fh, fl, 40, MPI_FLOAT, &st));
    report("darray write count %lld, %lld", count_of(&st, MPI_FLOAT), 0);

    /* 5. Indexed filetype and a struct memory type with a resized extent.
     * The view leaves holes: zero them first, since ROMIO's data sieving
     * writes whatever its buffer held into holes past the end of file. */
    int *zeros = calloc(48 * nprocs, sizeof(int)); /* the 3 tiles of the view written, and one more */
    CHECK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    if (rank == 0) CHECK(MPI_File_write_at(fh, 200000, zeros, 48 * nprocs, MPI_INT, &st));
    free(zeros);
    MPI_Barrier(MPI_COMM_WORLD);
    int bl[3] = {2, 1, 3}, ds[3] = {0, 5, 9};
    MPI_Datatype idx;
    MPI_Type_indexed(3, bl, ds, MPI_INT, &idx);
    MPI_Type_commit(&idx);
    int sbl[2] = {1, 1};
    MPI_Aint sds[2] = {0, 8};
    MPI_Datatype sty[2] = {MPI_INT, MPI_INT}, str, strr;
    MPI_Type_create_struct(2, sbl, sds, sty, &str);
    MPI_Type_create_resized(str, 0, 16, &strr);
    MPI_Type_commit(&strr);
    MPI_Datatype idx_r;
    MPI_Type_create_resized(idx, 0, 12 * sizeof(int) * nprocs, &idx_r);
    MPI_Type_commit(&idx_r);
    CHECK(MPI_File_set_view(fh, 200000 + rank * 12 * sizeof(int), MPI_INT, idx_r, "native", MPI_INFO_NULL));
    CHECK(MPI_File_write_at(fh, 0, buf, 9, strr, &st));
    report("struct memory write count %lld, %lld", count_of(&st, strr), 0);
    memset(back, 0, sizeof(int) * 4 * n);
    CHECK(MPI_File_read_at(fh, 0, back, 9, strr, &st));
    report("struct read back sum %lld count %lld", (long long)(sum(back, 9 * 16) % 1000000007), count_of(&st, strr));

    /* 5b. MPI_BOTTOM and a struct type of absolute addresses: the pieces
     * lie in two separate allocations (stack and heap), far apart, and the
     * memory between them is not the program's to touch. */
    CHECK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    {
        int on_stack[5], stack_back[5] = {0};
        double *on_heap = malloc(7 * sizeof(double)), *heap_back = calloc(7, sizeof(double));
        for (int i = 0; i < 5; i++) on_stack[i] = rank * 100 + i;
        for (int i = 0; i < 7; i++) on_heap[i] = rank + i / 4.0;
        int abl[2] = {5, 7};
        MPI_Aint addr[2];
        MPI_Datatype aty[2] = {MPI_INT, MPI_DOUBLE}, out_t, in_t;
        MPI_Get_address(on_stack, &addr[0]);
        MPI_Get_address(on_heap, &addr[1]);
        MPI_Type_create_struct(2, abl, addr, aty, &out_t);
        MPI_Type_commit(&out_t);
        MPI_Get_address(stack_back, &addr[0]);
        MPI_Get_address(heap_back, &addr[1]);
        MPI_Type_create_struct(2, abl, addr, aty, &in_t);
        MPI_Type_commit(&in_t);
        CHECK(MPI_File_write_at(fh, 250000 + rank * 128, MPI_BOTTOM, 1, out_t, &st));
        report("MPI_BOTTOM write count %lld, %lld", count_of(&st, out_t), 0);
        MPI_Barrier(MPI_COMM_WORLD);
        CHECK(MPI_File_read_at(fh, 250000 + peer * 128, MPI_BOTTOM, 1, in_t, &st));
        report("MPI_BOTTOM read of the peer's sum %lld count %lld", (long long)((sum(stack_back, sizeof stack_back) * 7 + sum(heap_back, 7 * sizeof(double))) % 1000000007), count_of(&st, in_t));
        MPI_Type_free(&out_t);
        MPI_Type_free(&in_t);
        free(on_heap);
        free(heap_back);
    }

    /* 6. Zero-count ranks in collectives, nonblocking and split forms. */
    CHECK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    int cnt = rank % 2 ? 0 : 64;
    MPI_Status_set_elements(&st, MPI_BYTE, 99); /* ROMIO leaves a zero-count status as it was */
    CHECK(MPI_File_write_at_all(fh, 300000 + rank * 64, buf, cnt, MPI_BYTE, &st));
    int zc = count_of(&st, MPI_BYTE);
    report("zero-count ranks: count %lld, %lld", cnt ? zc : (zc == 0 || zc == 99) ? 0 : zc, 0);
    MPI_Request req;
    CHECK(MPI_File_iwrite_at(fh, 310000 + rank * 100, buf, 100, MPI_BYTE, &req));
    CHECK(MPI_Wait(&req, &st));
    report("iwrite_at waited count %lld, %lld", count_of(&st, MPI_BYTE), 0);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_File_iread_at(fh, 310000 + peer * 100, back, 100, MPI_BYTE, &req));
    int flag = 0;
    while (!flag) CHECK(MPI_Test(&req, &flag, &st));
    report("iread_at tested count %lld sum %lld", count_of(&st, MPI_BYTE), (long long)(sum(back, 100) % 1000000007));
    CHECK(MPI_File_write_at_all_begin(fh, 320000 + rank * 10, buf, 10, MPI_BYTE));
    CHECK(MPI_File_write_at_all_end(fh, buf, &st));
    report("split write count %lld, %lld", count_of(&st, MPI_BYTE), 0);
    CHECK(MPI_File_read_all_begin(fh, back, 7, MPI_BYTE));
    CHECK(MPI_File_read_all_end(fh, back, &st));
    report("split read count %lld sum %lld", count_of(&st, MPI_BYTE), (long long)(sum(back, 7) % 1000000007));

    /* 7. Shared pointers: ordered is in rank order; shared gives each
     * record once (order between ranks is free, so only the set is printed). */
    CHECK(MPI_File_seek_shared(fh, 400000, MPI_SEEK_SET));
    char rec[32];
    snprintf(rec, sizeof rec, "ordered record of rank %02d\n", rank);
    CHECK(MPI_File_write_ordered(fh, rec, (int)strlen(rec), MPI_CHAR, &st));
    CHECK(MPI_File_get_position_shared(fh, &pos));
    report("after ordered: shared position %lld count %lld", pos, count_of(&st, MPI_CHAR));
    CHECK(MPI_File_seek_shared(fh, 8, MPI_SEEK_CUR));
    CHECK(MPI_File_get_position_shared(fh, &pos));
    report("seek_shared cur+8: %lld, %lld", pos, 0);
    CHECK(MPI_File_seek_shared(fh, 500000, MPI_SEEK_SET));
    long long mine = 7000 + rank;
    CHECK(MPI_File_write_shared(fh, &mine, 1, MPI_LONG_LONG, &st));
    MPI_Barrier(MPI_COMM_WORLD);
    long long *recs = malloc(sizeof(long long) * nprocs);
    CHECK(MPI_File_read_at(fh, 500000, recs, nprocs, MPI_LONG_LONG, &st));
    long long seen = 0;
    for (int i = 0; i < nprocs; i++) seen |= 1LL << (recs[i] - 7000);
    report("shared records all present %lld count %lld", seen == (1LL << nprocs) - 1, count_of(&st, MPI_LONG_LONG));
    /* Put them in rank order so both runs leave the same bytes (after
     * every rank has read them). */
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_File_write_at_all(fh, 500000 + rank * 8, &mine, 1, MPI_LONG_LONG, &st));
    CHECK(MPI_File_seek_shared(fh, 400000, MPI_SEEK_SET));
    CHECK(MPI_File_read_ordered(fh, back, (int)strlen(rec), MPI_CHAR, &st));
    report("read_ordered matches %lld count %lld", memcmp(back, rec, strlen(rec)) == 0, count_of(&st, MPI_CHAR));

    /* 8. Atomicity flag, set_size, preallocate, read-only errors. */
    CHECK(MPI_File_set_atomicity(fh, 1));
    int atom;
    CHECK(MPI_File_get_atomicity(fh, &atom));
    CHECK(MPI_File_set_atomicity(fh, 0));
    CHECK(MPI_File_preallocate(fh, 600000));
    CHECK(MPI_File_get_size(fh, &size));
    report("atomic %lld, size after preallocate %lld", atom, size);
    CHECK(MPI_File_set_size(fh, 550000));
    CHECK(MPI_File_get_size(fh, &size));
    report("size after set_size %lld, %lld", size, 0);
    MPI_Group g;
    int gsize;
    CHECK(MPI_File_get_group(fh, &g));
    MPI_Group_size(g, &gsize);
    MPI_Group_free(&g);
    report("group size %lld, fortran handle nonzero %lld", gsize, MPI_File_c2f(fh) != 0);
    CHECK(MPI_File_close(&fh));
    report("closed handle is null %lld, %lld", fh == MPI_FILE_NULL, 0);

    CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    rc = MPI_File_write_at(fh, 0, buf, 1, MPI_INT, &st);
    report("write on read-only: read_only class %lld, %lld", err_class(rc) == MPI_ERR_READ_ONLY, 0);
    /* Reads where some ranks select nothing, on a read-only file. */
    int zr = rank % 2 ? 0 : 16;
    CHECK(MPI_File_read_at_all(fh, 64 * rank, back, zr, MPI_BYTE, &st));
    report("read-only zero-count read_at_all: count %lld sum %lld", zr ? count_of(&st, MPI_BYTE) : 0, zr ? (long long)(sum(back, 16) % 1000000007) : 0);
    CHECK(MPI_File_close(&fh));

    /* Append: both pointers start at the end; ordered records land there. */
    CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_WRONLY | MPI_MODE_APPEND, MPI_INFO_NULL, &fh));
    MPI_Offset ind, shr;
    CHECK(MPI_File_get_position(fh, &ind));
    CHECK(MPI_File_get_position_shared(fh, &shr));
    report("append: individual %lld shared %lld", ind, shr);
    CHECK(MPI_File_write_ordered(fh, rec, (int)strlen(rec), MPI_CHAR, &st));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_File_get_size(fh, &size));
    report("append: size after ordered records %lld, %lld", size, 0);
    CHECK(MPI_File_close(&fh));
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    report("exclusive create of existing: file_exists %lld, %lld", err_class(rc) == MPI_ERR_FILE_EXISTS, 0);
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    report("rdonly|wronly: amode class %lld, %lld", err_class(rc) == MPI_ERR_AMODE, 0);

    MPI_Type_free(&ftype);
    MPI_Type_free(&mtype);
    MPI_Type_free(&sub);
    MPI_Type_free(&darr);
    MPI_Type_free(&idx);
    MPI_Type_free(&idx_r);
    MPI_Type_free(&str);
    MPI_Type_free(&strr);
    free(buf); free(back); free(d); free(fl); free(recs);
    MPI_Finalize();
    return 0;
}
