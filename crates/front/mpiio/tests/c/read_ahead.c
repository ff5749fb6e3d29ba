/* Small steady reads that Weft serves from records it fetched ahead
 * (weft_read_ahead) read what a plain read would, compared against the MPI
 * library's own MPI-IO on a local file:
 *   1. strided records (ior-hard's shape) and sequential small reads;
 *   2. strided reads that run past the end of the file (short, then 0);
 *   3. a record fetched ahead, then rewritten by the reader: read anew;
 *   4. a record fetched ahead, then rewritten by another rank with sync,
 *      message, sync (MPI's rule), and with a barrier alone: read anew;
 *   5. strided reads over a hole read zeros.
 * Usage: read_ahead PATH */
#include "check.h"
#include <string.h>

#define REC 1000
#define NREC 48

/* Record i of rank r in the strided layout. */
static MPI_Offset at(int i, int r) { return (MPI_Offset)(i * nprocs + r) * REC; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    int peer = (rank + 1) % nprocs;
    MPI_File fh;
    MPI_Status st;
    int n;
    unsigned char rec[REC], back[REC];
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh), "open");
    for (int i = 0; i < NREC; i++) {
        byte_fill(rec, REC, rank * 100 + i);
        check(MPI_File_write_at(fh, at(i, rank), rec, REC, MPI_BYTE, &st), "record");
    }
    check(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_sync(fh), "sync");

    /* 1. the peer's records, strided; then the whole file sequentially in
     *    small reads. */
    long long s = 0;
    for (int i = 0; i < NREC; i++) {
        check(MPI_File_read_at(fh, at(i, peer), back, REC, MPI_BYTE, &st), "strided read");
        s = (s * 17 + byte_sum(back, REC)) % 1000000007;
    }
    report("strided reads of the peer's records sum %lld of %lld", s, NREC);
    s = 0;
    for (MPI_Offset o = 0; o < (MPI_Offset)NREC * nprocs * REC; o += 700) {
        check(MPI_File_read_at(fh, o, back, 700, MPI_BYTE, &st), "sequential read");
        MPI_Get_count(&st, MPI_BYTE, &n);
        s = (s * 17 + byte_sum(back, n)) % 1000000007;
    }
    report("sequential 700-byte reads sum %lld", s, 0);

    /* 2. past the end: the file ends inside the last rank's last record
     *    once cut. */
    MPI_Offset end = at(NREC - 1, nprocs - 1) + REC / 2;
    /* Reads that fetch ahead through the end first: every rank must drop
     * them at set_size, not rank 0 alone (the last rank's last record is
     * cut in half). */
    for (int i = NREC - 12; i < NREC - 8; i++) check(MPI_File_read_at(fh, at(i, rank), back, REC, MPI_BYTE, &st), "read ahead to the end");
    check(MPI_File_set_size(fh, end), "set_size");
    long long counts = 0;
    for (int i = NREC - 8; i < NREC + 4; i++) {
        memset(back, 0, REC);
        check(MPI_File_read_at(fh, at(i, rank), back, REC, MPI_BYTE, &st), "read near the end");
        MPI_Get_count(&st, MPI_BYTE, &n);
        counts = counts * 3 + n;
        s = (s * 17 + byte_sum(back, REC)) % 1000000007;
    }
    report("reads past the end: counts %lld sum %lld", counts % 1000000007, s);

    /* 3. fetched ahead, then rewritten by the reader. */
    for (int i = 0; i < 3; i++) check(MPI_File_read_at(fh, at(i, rank), back, REC, MPI_BYTE, &st), "read ahead");
    byte_fill(rec, REC, 3000 + rank);
    check(MPI_File_write_at(fh, at(5, rank), rec, REC, MPI_BYTE, &st), "rewrite own");
    for (int i = 3; i < 6; i++) check(MPI_File_read_at(fh, at(i, rank), back, REC, MPI_BYTE, &st), "read after own rewrite");
    report("own rewrite read back %lld (want %lld)", byte_sum(back, REC), byte_sum(rec, REC));

    /* 4. fetched ahead by rank 1, rewritten by rank 0 (a reader that
     *    wrote would drop what it fetched by its own write): sync, a
     *    message, sync (MPI's rule, with a message for the barrier); then
     *    a barrier alone. */
    int reader = rank == 1, writer = rank == 0;
    long long got = 0, want = 0;
    if (reader)
        for (int i = 6; i < 9; i++) check(MPI_File_read_at(fh, at(i, 1), back, REC, MPI_BYTE, &st), "read ahead again");
    ring();
    byte_fill(rec, REC, 4000);
    if (writer) check(MPI_File_write_at(fh, at(10, 1), rec, REC, MPI_BYTE, &st), "rewrite rank 1's record");
    check(MPI_File_sync(fh), "sync 4");
    ring();
    check(MPI_File_sync(fh), "sync 4 again");
    if (reader) {
        for (int i = 9; i < 11; i++) check(MPI_File_read_at(fh, at(i, 1), back, REC, MPI_BYTE, &st), "read after the synced rewrite");
        got = byte_sum(back, REC);
        want = byte_sum(rec, REC);
    }
    report("rank 1 reads rank 0's synced rewrite %lld (want %lld)", got, want);
    if (reader)
        for (int i = 12; i < 15; i++) check(MPI_File_read_at(fh, at(i, 1), back, REC, MPI_BYTE, &st), "read ahead a third time");
    ring();
    byte_fill(rec, REC, 5000);
    if (writer) check(MPI_File_write_at(fh, at(16, 1), rec, REC, MPI_BYTE, &st), "rewrite rank 1's record, no sync");
    MPI_Barrier(MPI_COMM_WORLD);
    if (reader) {
        for (int i = 15; i < 17; i++) check(MPI_File_read_at(fh, at(i, 1), back, REC, MPI_BYTE, &st), "read after a barrier");
        got = byte_sum(back, REC);
        want = byte_sum(rec, REC);
    }
    report("rank 1 reads rank 0's rewrite after a barrier %lld (want %lld)", got, want);

    /* 5. a hole: records far past the end, every other one written. */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Offset hole = (MPI_Offset)NREC * nprocs * REC * 4;
    byte_fill(rec, REC, 6000 + rank);
    check(MPI_File_write_at(fh, hole + at(8, rank), rec, REC, MPI_BYTE, &st), "record after the hole");
    check(MPI_File_sync(fh), "sync 5");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_sync(fh), "sync 5 again");
    s = 0;
    for (int i = 0; i < 9; i++) {
        memset(back, 0xee, REC);
        check(MPI_File_read_at(fh, hole + at(i, rank), back, REC, MPI_BYTE, &st), "read over the hole");
        MPI_Get_count(&st, MPI_BYTE, &n);
        s = (s * 17 + byte_sum(back, REC) + n) % 1000000007;
    }
    report("strided reads over a hole sum %lld", s, 0);

    check(MPI_File_close(&fh), "close");
    MPI_Finalize();
    return 0;
}
