/* The MPI side of `weft bench coll` (ROMIO's coll_perf pattern): an N^3
 * array of 4-byte ints in a 3-D block distribution (MPI_Type_create_darray)
 * over all ranks, written with MPI_File_write_all then MPI_File_sync, or
 * read with MPI_File_read_all. ROMIO_CB sets romio_cb_write/read (enable,
 * disable, automatic, or "-" for none; "server" sets Weft's weft_coll=server
 * instead). The time runs from a barrier to
 * each rank's close; rank 0 prints the slowest as "elapsed_ns N".
 * Usage: coll_perf w|r PATH N ROMIO_CB */
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
        fprintf(stderr, "coll_perf: %s: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nprocs;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc != 5) MPI_Abort(MPI_COMM_WORLD, 2);
    int write = argv[1][0] == 'w', n = atoi(argv[3]);
    int dims[3] = {0, 0, 0}, gs[3] = {n, n, n}, ds[3], da[3];
    MPI_Dims_create(nprocs, 3, dims);
    for (int i = 0; i < 3; i++) {
        ds[i] = MPI_DISTRIBUTE_BLOCK;
        da[i] = MPI_DISTRIBUTE_DFLT_DARG;
    }
    MPI_Datatype block;
    MPI_Type_create_darray(nprocs, rank, 3, gs, ds, da, dims, MPI_ORDER_C, MPI_INT, &block);
    MPI_Type_commit(&block);
    int bytes;
    MPI_Type_size(block, &bytes);
    int count = bytes / (int)sizeof(int);
    int *buf = malloc(bytes > 0 ? bytes : 1);
    for (int i = 0; i < count; i++) buf[i] = rank * 1000003 + i;
    MPI_Info info;
    MPI_Info_create(&info);
    if (strcmp(argv[4], "server") == 0) {
        /* Weft's server-directed collective I/O. */
        MPI_Info_set(info, "weft_coll", "server");
    } else if (strcmp(argv[4], "-") != 0) {
        MPI_Info_set(info, "romio_cb_write", argv[4]);
        MPI_Info_set(info, "romio_cb_read", argv[4]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_WORLD, argv[2], write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY, info, &fh), "open");
    check(MPI_File_set_view(fh, 0, MPI_INT, block, "native", info), "set_view");
    if (write) {
        check(MPI_File_write_all(fh, buf, count, MPI_INT, MPI_STATUS_IGNORE), "write_all");
        check(MPI_File_sync(fh), "sync");
    } else {
        check(MPI_File_read_all(fh, buf, count, MPI_INT, MPI_STATUS_IGNORE), "read_all");
    }
    check(MPI_File_close(&fh), "close");
    double mine = MPI_Wtime() - t0, slowest;
    if (!write) /* a wrong read must not pass as a fast one */
        for (int i = 0; i < count; i++)
            if (buf[i] != rank * 1000003 + i) {
                fprintf(stderr, "coll_perf: rank %d read a wrong value at %d\n", rank, i);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
    /* Finished ranks wait sleeping, not polling (see iorate.c). */
    MPI_Request done_req;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &done_req);
    while (!done) {
        MPI_Test(&done_req, &done, MPI_STATUS_IGNORE);
        if (!done) usleep(200);
    }
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("elapsed_ns %.0f\n", slowest * 1e9);
    MPI_Info_free(&info);
    MPI_Type_free(&block);
    free(buf);
    MPI_Finalize();
    return 0;
}
