/* Small writes that Weft holds to send together (weft_write_behind) keep
 * MPI's order and what programs expect to see, compared against the MPI
 * library's own MPI-IO on a local file:
 *   1. strided small records (ior-hard's shape, odd sizes) read back;
 *   2. a record held, then overwritten by the same rank in a two-phase
 *      collective whose aggregator is another rank: the collective's bytes
 *      win (the held write is sent before the collective's);
 *   3. records held past the size a collective MPI_File_set_size then
 *      sets: the size is the one set;
 *   4. a record written, a barrier, the peer reads it (no sync);
 *   5. MPI_File_get_size after a rank's own held write;
 *   6. MPI_File_sync, a message, sync, then another rank reads;
 *   7. weft_write_behind=0: written, a message, another rank reads (a
 *      write that went at once, as on a POSIX file system; MPI asks for
 *      sync).
 * Usage: write_behind PATH */
#include "check.h"
#include <stdlib.h>
#include <string.h>

#define STRIPE 65536
#define REC 4700 /* odd-sized records: pieces cross stripes */
#define NREC 40

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    int peer = (rank + 1) % nprocs;
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "striping_unit", "65536");
    MPI_File fh;
    MPI_Status st;
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), "open");
    unsigned char rec[REC], back[REC];

    /* 1. strided records, read back by the writer. */
    for (int i = 0; i < NREC; i++) {
        byte_fill(rec, REC, rank * 1000 + i);
        check(MPI_File_write_at(fh, (MPI_Offset)(i * nprocs + rank) * REC, rec, REC, MPI_BYTE, &st), "record");
    }
    long long s = 0;
    for (int i = 0; i < NREC; i++) {
        check(MPI_File_read_at(fh, (MPI_Offset)(i * nprocs + rank) * REC, back, REC, MPI_BYTE, &st), "record back");
        s = (s * 17 + byte_sum(back, REC)) % 1000000007;
    }
    report("strided records read back sum %lld of %lld", s, NREC);

    /* 2. rank 0's record in the second stripe of a region past the records,
     *    held; then a two-phase collective in which rank 0 writes that
     *    record again. Stripe k goes to aggregator k mod cb_nodes, so the
     *    second stripe is aggregator 1's: another rank's. */
    MPI_Offset base = 16 * STRIPE * 4;
    if (rank == 0) {
        memset(rec, 'x', 100);
        check(MPI_File_write_at(fh, base + STRIPE, rec, 100, MPI_BYTE, &st), "held record");
    }
    MPI_Info coll;
    MPI_Info_create(&coll);
    MPI_Info_set(coll, "romio_cb_write", "enable");
    char nodes[16];
    snprintf(nodes, sizeof nodes, "%d", nprocs);
    MPI_Info_set(coll, "cb_nodes", nodes);
    check(MPI_File_set_info(fh, coll), "set_info");
    /* Rank 0 writes 600 KiB of 'A' from the held record on (more than a
     * rank writes alone in a collective: this one goes two-phase), the
     * others 100 bytes each far beyond. */
    int mine = rank == 0 ? 600 * 1024 : 100;
    unsigned char *big = malloc(mine);
    memset(big, 'A' + rank, mine);
    check(MPI_File_write_at_all(fh, base + (rank == 0 ? STRIPE : (MPI_Offset)(20 + rank) * STRIPE), big, mine, MPI_BYTE, &st), "collective over the record");
    free(big);
    check(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_read_at(fh, base + STRIPE, back, 100, MPI_BYTE, &st), "read the record");
    report("the collective's bytes win: first byte %lld (A is %lld)", back[0], 'A');

    /* 3. records past the size set next, then a collective set_size. */
    MPI_Offset cut = base + 8 * STRIPE;
    byte_fill(rec, 64, rank);
    check(MPI_File_write_at(fh, cut + 1000 + rank * 64, rec, 64, MPI_BYTE, &st), "record past the cut");
    check(MPI_File_set_size(fh, cut), "set_size");
    MPI_Offset size;
    check(MPI_File_get_size(fh, &size), "get_size");
    report("size after set_size %lld (set %lld)", size, cut);

    /* 4. written, a barrier, read by the peer. */
    MPI_Offset four = base + 2 * STRIPE + 200;
    byte_fill(rec, 50, 500 + rank);
    check(MPI_File_write_at(fh, four + rank * 50, rec, 50, MPI_BYTE, &st), "record for the peer");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_read_at(fh, four + peer * 50, back, 50, MPI_BYTE, &st), "the peer's record");
    report("after a barrier the peer's record sum %lld count %lld", byte_sum(back, 50), 50);

    /* 5. a rank's own held write counts in the size it asks for. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == nprocs - 1) {
        byte_fill(rec, 10, 9);
        check(MPI_File_write_at(fh, cut + 5000, rec, 10, MPI_BYTE, &st), "record at the end");
        check(MPI_File_get_size(fh, &size), "get_size after own write");
    } else {
        size = cut + 5010;
    }
    report("own write in the size %lld (want %lld)", size, cut + 5010);
    MPI_Barrier(MPI_COMM_WORLD);

    /* 6. rank 0 writes and syncs, a message, rank 1 syncs and reads. One
     *    writer, one reader: a reader with writes of its own would send
     *    them first and so give the writer time to send its own. */
    int writer = rank == 0, reader = rank == 1;
    long long got = 0, want = 0;
    MPI_Offset six = base + 3 * STRIPE;
    byte_fill(rec, 80, 600);
    if (writer) check(MPI_File_write_at(fh, six, rec, 80, MPI_BYTE, &st), "record before sync");
    check(MPI_File_sync(fh), "sync 6");
    ring(); /* not a barrier: the sync alone must have sent the record */
    check(MPI_File_sync(fh), "sync 6 again");
    if (reader) {
        check(MPI_File_read_at(fh, six, back, 80, MPI_BYTE, &st), "rank 0's synced record");
        got = byte_sum(back, 80);
        want = byte_sum(rec, 80);
    }
    report("rank 1 reads rank 0's synced record %lld (want %lld)", got, want);

    /* 7. write-behind off: rank 0 writes, a message, rank 1 reads (the
     *    write went at once, as on a POSIX file system; MPI asks for sync). */
    MPI_Info off;
    MPI_Info_create(&off);
    MPI_Info_set(off, "weft_write_behind", "0");
    check(MPI_File_set_info(fh, off), "set_info off");
    MPI_Offset seven = base + 4 * STRIPE;
    byte_fill(rec, 30, 700);
    if (writer) check(MPI_File_write_at(fh, seven, rec, 30, MPI_BYTE, &st), "record, write-behind off");
    ring(); /* not a barrier: the write itself must have sent it */
    if (reader) {
        check(MPI_File_read_at(fh, seven, back, 30, MPI_BYTE, &st), "rank 0's record, write-behind off");
        got = byte_sum(back, 30);
        want = byte_sum(rec, 30);
    }
    report("write-behind off: rank 1 reads rank 0's record %lld (want %lld)", got, want);

    check(MPI_File_close(&fh), "close");
    MPI_Info_free(&off);
    MPI_Info_free(&coll);
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}
