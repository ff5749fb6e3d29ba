/* Collective I/O through its algorithms: a 3-D block darray of ints (the
 * coll_perf pattern, small) and a 2-D subarray read into a non-contiguous
 * memory type, with collective buffering forced on, 3 aggregators and a
 * 4 KiB collective buffer (many rounds), one rank with nothing to write.
 * Everything read back collectively and independently is checked; rank 0
 * prints checksums. Usage: collective PATH */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static long long sum_all(const int *v, int n) {
    long long s = 0, all;
    for (int i = 0; i < n; i++) s = (s * 31 + v[i]) % 1000000007;
    MPI_Allreduce(&s, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "cb_nodes", "3");
    MPI_Info_set(info, "cb_buffer_size", "4096");
    MPI_Info_set(info, "romio_cb_write", "enable");
    MPI_Info_set(info, "romio_cb_read", "enable");
    MPI_File fh;
    MPI_Status st;
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), "open");

    /* 1. 3-D block distribution of a 24^3 int array. */
    int dims[3] = {0, 0, 0}, gs[3] = {24, 24, 24}, ds[3], da[3], n = 1;
    MPI_Dims_create(nprocs, 3, dims);
    for (int i = 0; i < 3; i++) {
        ds[i] = MPI_DISTRIBUTE_BLOCK;
        da[i] = MPI_DISTRIBUTE_DFLT_DARG;
    }
    MPI_Datatype block;
    MPI_Type_create_darray(nprocs, rank, 3, gs, ds, da, dims, MPI_ORDER_C, MPI_INT, &block);
    MPI_Type_commit(&block);
    int bsize;
    MPI_Type_size(block, &bsize);
    n = bsize / (int)sizeof(int);
    int *mine = malloc(bsize), *back = malloc(bsize);
    for (int i = 0; i < n; i++) mine[i] = rank * 1000003 + i * 7;
    check(MPI_File_set_view(fh, 0, MPI_INT, block, "native", info), "set_view block");
    check(MPI_File_write_all(fh, mine, n, MPI_INT, &st), "write_all block");
    int count;
    MPI_Get_count(&st, MPI_INT, &count);
    check(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_sync(fh), "sync");
    memset(back, 0, bsize);
    check(MPI_File_read_at_all(fh, 0, back, n, MPI_INT, &st), "read_at_all block");
    int same = memcmp(mine, back, bsize) == 0, all_same;
    MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    long long whole = 0;
    check(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL), "set_view bytes");
    if (rank == 0) {
        int *file = malloc(24 * 24 * 24 * sizeof(int));
        check(MPI_File_read_at(fh, 0, file, 24 * 24 * 24, MPI_INT, &st), "read_at whole");
        for (int i = 0; i < 24 * 24 * 24; i++) whole = (whole * 31 + file[i]) % 1000000007;
        free(file);
    }
    MPI_Bcast(&whole, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("block: written back equal %d, file checksum %lld\n", all_same, whole);
    long long c = sum_all(&count, 1);
    if (rank == 0) printf("block: counts %lld\n", c);

    /* 2. Rows of a 2-D array by rank, round robin (interleaved), every
     * other int of memory; the last rank has nothing. */
    int rows = 16, cols = 20;
    MPI_Datatype rowtype, filetype, memtype;
    MPI_Type_vector(rows, cols, cols * nprocs, MPI_INT, &rowtype);
    MPI_Type_create_resized(rowtype, 0, (MPI_Aint)rows * cols * nprocs * sizeof(int), &filetype);
    MPI_Type_commit(&filetype);
    MPI_Type_vector(rows * cols, 1, 2, MPI_INT, &memtype);
    MPI_Type_commit(&memtype);
    int *sparse = calloc(2 * rows * cols, sizeof(int)), *sback = calloc(2 * rows * cols, sizeof(int));
    for (int i = 0; i < 2 * rows * cols; i++) sparse[i] = rank * 77 + i;
    int k = rank == nprocs - 1 ? 0 : 1;
    /* The rows the last rank leaves unwritten read as zeros, not as the
     * end of file (where the MPIs' counts differ from Weft's exact ones). */
    check(MPI_File_set_size(fh, 100000 + (MPI_Offset)rows * cols * nprocs * sizeof(int)), "set_size");
    check(MPI_File_set_view(fh, 100000 + rank * cols * sizeof(int), MPI_INT, filetype, "native", info), "set_view rows");
    check(MPI_File_write_all(fh, sparse, k, memtype, &st), "write_all rows");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_read_at_all(fh, 0, sback, 1, memtype, &st), "read_at_all rows");
    MPI_Get_count(&st, memtype, &count);
    int ok = 1;
    for (int i = 0; i < rows * cols; i++)
        if (sback[2 * i] != (k ? sparse[2 * i] : 0) || sback[2 * i + 1] != 0) ok = 0;
    int all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0) printf("rows: read back right %d, last count %d\n", all_ok, count);
    check(MPI_File_close(&fh), "close");
    MPI_Info_free(&info);
    MPI_Type_free(&block);
    MPI_Type_free(&rowtype);
    MPI_Type_free(&filetype);
    MPI_Type_free(&memtype);
    free(mine); free(back); free(sparse); free(sback);
    MPI_Finalize();
    return 0;
}
