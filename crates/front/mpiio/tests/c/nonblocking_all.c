/* Nonblocking collective accesses under MPI_THREAD_MULTIPLE, which Weft
 * runs in the background (below it they run inside the call). Run by the
 * tests on a weft: file and on a local file through the MPI library's own
 * MPI-IO: both runs must print the same lines and leave the same bytes.
 * Interleaved views, several collectives posted before any wait, a
 * blocking collective after posted ones (it must come after them on every
 * rank), and reads checked against what was written.
 * Usage: nonblocking_all PATH */
#include "check.h"
#include <stdlib.h>
#include <string.h>

#define BLOCK 512
#define ROUNDS 6

static int value(int r, int k, int i) { return r * 1000000 + k * 1000 + i; }

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc != 2) MPI_Abort(MPI_COMM_WORLD, 2);
    report("MPI_THREAD_MULTIPLE provided %lld, %lld", provided == MPI_THREAD_MULTIPLE, 0);
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh), "open");
    /* Each rank's blocks of BLOCK ints, interleaved round-robin. */
    MPI_Datatype strided, mine;
    MPI_Type_vector(ROUNDS, BLOCK, BLOCK * nprocs, MPI_INT, &strided);
    /* Tiled every ROUNDS rounds: the next tile is the next rounds'. */
    MPI_Type_create_resized(strided, 0, (MPI_Aint)sizeof(int) * BLOCK * nprocs * ROUNDS, &mine);
    MPI_Type_commit(&mine);
    MPI_Type_free(&strided);
    check(MPI_File_set_view(fh, (MPI_Offset)rank * BLOCK * sizeof(int), MPI_INT, mine, "native", MPI_INFO_NULL), "set_view");
    int *out = malloc(sizeof(int) * BLOCK * ROUNDS), *back = calloc(BLOCK * ROUNDS, sizeof(int));
    for (int k = 0; k < ROUNDS; k++)
        for (int i = 0; i < BLOCK; i++) out[k * BLOCK + i] = value(rank, k, i);
    /* Two collectives posted (explicit offset, then individual pointer),
     * completed together with a message of MPI's own. */
    MPI_Request reqs[3];
    MPI_Status sts[3];
    check(MPI_File_iwrite_at_all(fh, 0, out, BLOCK * 3, MPI_INT, &reqs[0]), "iwrite_at_all");
    check(MPI_File_seek(fh, BLOCK * 3, MPI_SEEK_SET), "seek");
    check(MPI_File_iwrite_all(fh, out + BLOCK * 3, BLOCK * 3, MPI_INT, &reqs[1]), "iwrite_all");
    MPI_Offset pos;
    check(MPI_File_get_position(fh, &pos), "get_position");
    int token = rank, got = -1;
    MPI_Irecv(&got, 1, MPI_INT, (rank + nprocs - 1) % nprocs, 3, MPI_COMM_WORLD, &reqs[2]);
    MPI_Send(&token, 1, MPI_INT, (rank + 1) % nprocs, 3, MPI_COMM_WORLD);
    check(MPI_Waitall(3, reqs, sts), "waitall");
    int n0, n1;
    MPI_Get_count(&sts[0], MPI_INT, &n0);
    MPI_Get_count(&sts[1], MPI_INT, &n1);
    report("posted collective writes: %lld ints, pointer after posting %lld", n0 + n1, pos);
    report("message from the previous rank %lld, %lld", got, 0);
    /* A read posted, then a blocking collective write (after it, on every
     * rank), then the wait. */
    MPI_Request r;
    MPI_Status st;
    check(MPI_File_iread_at_all(fh, 0, back, BLOCK * ROUNDS, MPI_INT, &r), "iread_at_all");
    check(MPI_File_write_at_all(fh, BLOCK * ROUNDS, out, BLOCK, MPI_INT, &st), "write_at_all");
    check(MPI_Wait(&r, &st), "wait");
    long long wrong = 0;
    for (int i = 0; i < BLOCK * ROUNDS; i++) wrong += back[i] != out[i];
    int n;
    MPI_Get_count(&st, MPI_INT, &n);
    report("posted collective read: %lld ints, wrong values %lld", n, wrong);
    /* Read back everyone's blocks through a plain view, tested to completion. */
    check(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL), "set_view");
    int total = BLOCK * (ROUNDS + 1) * nprocs;
    int *all = calloc((size_t)total, sizeof(int));
    check(MPI_File_iread_all(fh, all, total, MPI_INT, &r), "iread_all");
    int flag = 0;
    while (!flag) check(MPI_Test(&r, &flag, &st), "test");
    wrong = 0;
    for (int k = 0; k < ROUNDS; k++)
        for (int q = 0; q < nprocs; q++)
            for (int i = 0; i < BLOCK; i++) wrong += all[(k * nprocs + q) * BLOCK + i] != value(q, k, i);
    report("whole file read back: %lld, wrong values %lld", total, wrong);
    check(MPI_File_close(&fh), "close");
    MPI_Type_free(&mine);
    free(out);
    free(back);
    free(all);
    MPI_Finalize();
    return 0;
}
