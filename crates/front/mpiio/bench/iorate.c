/* The MPI side of `weft bench concurrent-write --mpi` and `weft bench
 * mpiio-cost` (paper 002's file-per-process pattern): every rank opens its
 * own file PREFIX<rank> on MPI_COMM_SELF and writes (or reads) SIZE bytes
 * with MPI_File_write_at (read_at) calls of TRANSFER bytes, with
 * MPI_File_sync before close if FSYNC is 1. The time runs from a barrier
 * to each rank's close; rank 0 prints the slowest (MPI_Reduce MAX) as
 * "elapsed_ns N". Usage: iorate w|r PREFIX SIZE TRANSFER FSYNC */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "iorate: %s: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 6 || (argv[1][0] != 'w' && argv[1][0] != 'r')) {
        if (rank == 0) fprintf(stderr, "usage: iorate w|r PREFIX SIZE TRANSFER FSYNC\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int write = argv[1][0] == 'w';
    long long size = atoll(argv[3]), transfer = atoll(argv[4]);
    int fsync = atoi(argv[5]);
    if (size <= 0 || transfer <= 0 || transfer > (1LL << 30)) MPI_Abort(MPI_COMM_WORLD, 2);
    char path[4096];
    snprintf(path, sizeof path, "%s%d", argv[2], rank);
    char *buf = malloc(transfer);
    for (long long i = 0; i < transfer; i++) buf[i] = (char)(i % 251 + 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_SELF, path, write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), "open");
    for (long long off = 0; off < size; off += transfer) {
        int n = (int)(size - off < transfer ? size - off : transfer);
        if (write) check(MPI_File_write_at(fh, off, buf, n, MPI_BYTE, MPI_STATUS_IGNORE), "write_at");
        else check(MPI_File_read_at(fh, off, buf, n, MPI_BYTE, MPI_STATUS_IGNORE), "read_at");
    }
    if (write && fsync) check(MPI_File_sync(fh), "sync");
    check(MPI_File_close(&fh), "close");
    double mine = MPI_Wtime() - t0, slowest;
    /* Ranks that finish first wait sleeping, not spinning in MPI (both MPIs
     * poll while waiting), so they leave the CPU to the ranks and servers
     * still working; then the reduction finds everyone there. */
    MPI_Request all_done;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &all_done);
    while (!done) {
        MPI_Test(&all_done, &done, MPI_STATUS_IGNORE);
        if (!done) usleep(200);
    }
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("elapsed_ns %.0f\n", slowest * 1e9);
    free(buf);
    MPI_Finalize();
    return 0;
}
