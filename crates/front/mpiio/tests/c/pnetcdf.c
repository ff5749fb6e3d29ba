/* PnetCDF over MPI-IO: define a 2-D variable and attributes, write it with
 * put_vara_all (rows split between ranks, one rank writing nothing),
 * reopen, read another rank's rows with get_vara_all and check them.
 * Usage: pnetcdf PATH (PATH may start with weft:) */
#include <mpi.h>
#include <pnetcdf.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 29
#define COLS 41

static int rank, nprocs;

static void check(int err, const char *what) {
    if (err != NC_NOERR) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, ncmpi_strerror(err));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    int nc, dims[2], var;
    check(ncmpi_create(MPI_COMM_WORLD, argv[1], NC_CLOBBER | NC_64BIT_DATA, MPI_INFO_NULL, &nc), "create");
    check(ncmpi_def_dim(nc, "y", (MPI_Offset)ROWS * nprocs, &dims[0]), "def_dim y");
    check(ncmpi_def_dim(nc, "x", COLS, &dims[1]), "def_dim x");
    check(ncmpi_def_var(nc, "field", NC_INT, 2, dims, &var), "def_var");
    check(ncmpi_put_att_text(nc, var, "units", 6, "meters"), "put_att");
    int version = 3;
    check(ncmpi_put_att_int(nc, NC_GLOBAL, "version", NC_INT, 1, &version), "put_att global");
    check(ncmpi_enddef(nc), "enddef");
    int *mine = malloc(sizeof(int) * ROWS * COLS);
    for (int i = 0; i < ROWS * COLS; i++) mine[i] = rank * 100000 + i;
    /* The last rank writes nothing: a zero-length collective access. */
    MPI_Offset start[2] = {(MPI_Offset)ROWS * rank, 0}, count[2] = {rank == nprocs - 1 ? 0 : ROWS, COLS};
    check(ncmpi_put_vara_int_all(nc, var, start, count, mine), "put_vara_all");
    check(ncmpi_close(nc), "close");

    check(ncmpi_open(MPI_COMM_WORLD, argv[1], NC_NOWRITE, MPI_INFO_NULL, &nc), "open");
    check(ncmpi_inq_varid(nc, "field", &var), "inq_varid");
    int peer = (rank + 1) % nprocs;
    int *back = calloc(ROWS * COLS, sizeof(int));
    MPI_Offset pstart[2] = {(MPI_Offset)ROWS * peer, 0}, pcount[2] = {ROWS, COLS};
    check(ncmpi_get_vara_int_all(nc, var, pstart, pcount, back), "get_vara_all");
    long bad = 0;
    for (int i = 0; i < ROWS * COLS; i++)
        if (back[i] != (peer == nprocs - 1 ? 0 : peer * 100000 + i)) bad++;
    char units[16] = "";
    check(ncmpi_get_att_text(nc, var, "units", units), "get_att");
    MPI_Offset ylen;
    int ydim;
    check(ncmpi_inq_dimid(nc, "y", &ydim), "inq_dimid");
    check(ncmpi_inq_dimlen(nc, ydim, &ylen), "inq_dimlen");
    check(ncmpi_close(nc), "close");
    long all_bad;
    MPI_Reduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("y %lld, units %s, wrong values %ld\n", (long long)ylen, units, all_bad);
    free(mine);
    free(back);
    MPI_Finalize();
    return 0;
}
