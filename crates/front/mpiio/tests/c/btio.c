/* BTIO's nested-strided views (paper 000): a 3-D array of 40-byte points
 * in q^3 cells, each of the q^2 ranks owning q cells on a diagonal
 * (multi-partition), a contiguous piece being one cell row of 81 points
 * (3240 bytes) nested two deep. Every rank writes its cells with
 * write_all, then reads them back with read_all and checks them, and rank
 * 0 reads the whole file independently and prints its sum; small
 * collective buffers force many rounds. Usage: btio PATH (q^2 ranks). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POINT 40
#define CELL_X 81
#define CELL_YZ 3

#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    int q = 1;
    while ((q + 1) * (q + 1) <= nprocs) q++;
    if (q * q != nprocs || q > 16) {
        if (rank == 0) fprintf(stderr, "btio needs a square number of ranks, at most 256\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int a = rank / q, b = rank % q;
    MPI_Datatype point, cells[16], filetype, all;
    MPI_Type_contiguous(POINT, MPI_BYTE, &point);
    int sizes[3] = {q * CELL_YZ, q * CELL_YZ, q * CELL_X}, sub[3] = {CELL_YZ, CELL_YZ, CELL_X};
    int bl[16];
    MPI_Aint dp[16];
    for (int k = 0; k < q; k++) {
        int ci = (a + k) % q, cj = (b + k) % q;
        int starts[3] = {k * CELL_YZ, cj * CELL_YZ, ci * CELL_X};
        MPI_Type_create_subarray(3, sizes, sub, starts, MPI_ORDER_C, point, &cells[k]);
        bl[k] = 1;
        dp[k] = 0;
    }
    MPI_Type_create_struct(q, bl, dp, cells, &all);
    MPI_Aint file_bytes = (MPI_Aint)sizes[0] * sizes[1] * sizes[2] * POINT;
    MPI_Type_create_resized(all, 0, file_bytes, &filetype);
    MPI_Type_commit(&filetype);
    int size;
    MPI_Type_size(filetype, &size);

    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "cb_buffer_size", "8192");
    MPI_Info_set(info, "weft_coll_server_window", "65536");
    MPI_File fh;
    MPI_Status st;
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), "open");
    check(MPI_File_set_view(fh, 0, MPI_BYTE, filetype, "native", info), "set_view");
    unsigned char *mine = malloc(size), *back = calloc(size, 1);
    for (int i = 0; i < size; i++) mine[i] = (unsigned char)(rank * 37 + i * 11 + i / 3240);
    check(MPI_File_write_all(fh, mine, size, MPI_BYTE, &st), "write_all");
    check(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_read_at_all(fh, 0, back, size, MPI_BYTE, &st), "read_at_all");
    long wrong = 0, all_wrong;
    for (int i = 0; i < size; i++) wrong += back[i] != mine[i];
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    /* set_view is collective: every rank, then rank 0 reads alone. */
    check(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", info), "set_view whole");
    if (rank == 0) {
        unsigned char *whole = malloc(file_bytes);
        check(MPI_File_read_at(fh, 0, whole, (int)file_bytes, MPI_BYTE, &st), "read_at whole");
        long long sum = 0;
        for (MPI_Aint i = 0; i < file_bytes; i++) sum = (sum * 131 + whole[i]) % 1000000007;
        printf("btio q %d bytes per rank %d file %ld sum %lld\n", q, size, (long)file_bytes, sum);
        printf("wrong values %ld\n", all_wrong);
        free(whole);
    }
    check(MPI_File_close(&fh), "close");
    free(mine);
    free(back);
    for (int k = 0; k < q; k++) MPI_Type_free(&cells[k]);
    MPI_Type_free(&all);
    MPI_Type_free(&filetype);
    MPI_Type_free(&point);
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}
