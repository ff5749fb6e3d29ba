/* What the test and benchmark programs share: this rank and the number of
 * ranks; `check`, which ends the job on an MPI error, naming the call;
 * and `report`. */
#ifndef WEFT_TEST_CHECK_H
#define WEFT_TEST_CHECK_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

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

/* Prints one line per rank, in rank order, from rank 0 (the programs
 * compared against the MPI library's own MPI-IO print this way). */
__attribute__((unused)) static void report(const char *fmt, long long a, long long b) {
    long long mine[2] = {a, b}, *all = malloc(sizeof mine * nprocs);
    MPI_Gather(mine, 2, MPI_LONG_LONG, all, 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int r = 0; r < nprocs; r++) {
            printf("rank %d: ", r);
            printf(fmt, all[2 * r], all[2 * r + 1]);
            printf("\n");
        }
    free(all);
}

/* A check the reference MPI-IO gets wrong, printed on weft: alone, from
 * rank 0 for every rank ("weft-only rank R WHAT T" or "... F"): the tests
 * take these lines out of the comparison and require each to say T. */
__attribute__((unused)) static void weft_only(const char *what, int ok) {
    int *all = malloc(sizeof(int) * nprocs);
    MPI_Gather(&ok, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int r = 0; r < nprocs; r++) printf("weft-only rank %d %s %c\n", r, what, all[r] ? 'T' : 'F');
    free(all);
}

/* A checksum of n bytes, and a pattern of n bytes from a seed. */
__attribute__((unused)) static long long byte_sum(const unsigned char *b, long long n) {
    long long s = 0;
    for (long long i = 0; i < n; i++) s = (s * 31 + b[i]) % 1000000007;
    return s;
}

__attribute__((unused)) static void byte_fill(unsigned char *b, int n, int seed) {
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(seed * 7 + i * 13 + 1);
}

/* A token from the rank before to the rank after: MPI's synchronisation
 * without MPI_Barrier (at which Weft's library also sends held writes and
 * drops what it read ahead). */
__attribute__((unused)) static void ring(void) {
    int out = rank, in;
    MPI_Sendrecv(&out, 1, MPI_INT, (rank + 1) % nprocs, 7, &in, 1, MPI_INT, (rank + nprocs - 1) % nprocs, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

#endif
