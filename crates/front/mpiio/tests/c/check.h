/* What the test and benchmark programs share: this rank and the number of
 * ranks, and `check`, which ends the job on an MPI error, naming the call. */
#ifndef WEFT_TEST_CHECK_H
#define WEFT_TEST_CHECK_H
#include <mpi.h>
#include <stdio.h>

static int rank, nprocs;

static void check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int l;
        MPI_Error_string(rc, s, &l);
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, s);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}
#endif
