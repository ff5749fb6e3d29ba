/* Atomic mode (MPI_File_set_atomicity): every rank repeatedly writes one
 * shared region, which spans several stripes and servers, filled with its
 * own rank's byte, and reads it back. With atomicity on, a read must see
 * one write whole, never a mix of two. Prints "torn N" (reads that saw a
 * mix) and "reads N". Usage: atomic PATH ON(0|1) ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, nprocs;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 4) MPI_Abort(MPI_COMM_WORLD, 2);
    int on = atoi(argv[2]), rounds = atoi(argv[3]);
    const int len = 1 << 20; /* 16 stripes of 64 KiB: every server, several times */
    MPI_File fh;
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "striping_unit", "65536");
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_Info_free(&info);
    if (MPI_File_set_atomicity(fh, on) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 4);
    char *w = malloc(len), *r = malloc(len);
    memset(w, 'a' + rank, len);
    long torn = 0, reads = 0;
    for (int i = 0; i < rounds; i++) {
        if (MPI_File_write_at(fh, 0, w, len, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 5);
        MPI_Status st;
        if (MPI_File_read_at(fh, 0, r, len, MPI_BYTE, &st) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 6);
        int n;
        MPI_Get_count(&st, MPI_BYTE, &n);
        reads++;
        for (int k = 1; k < n; k++)
            if (r[k] != r[0]) {
                torn++;
                break;
            }
    }
    long all_torn, all_reads;
    MPI_Reduce(&torn, &all_torn, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&reads, &all_reads, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("torn %ld\nreads %ld\n", all_torn, all_reads);
    MPI_File_close(&fh);
    free(w);
    free(r);
    MPI_Finalize();
    return 0;
}
