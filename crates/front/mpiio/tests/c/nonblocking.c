/* Nonblocking independent accesses, completed through every kind of MPI
 * wait and test, mixed with the MPI library's own requests. Run by the
 * tests on a weft: file and on a local file through the MPI library's own
 * MPI-IO: both runs must print the same lines and leave the same bytes.
 * On weft: the accesses run in the background, so this checks that each
 * completes once, with its byte count, its file pointer moved at posting,
 * and its bytes in place. Usage: nonblocking PATH */
#include "check.h"
#include <stdlib.h>
#include <string.h>

#define CHUNK 4096
#define PER_RANK 12

static unsigned char pattern(int r, long long i) { return (unsigned char)((i * 7 + r * 13 + i / 251) % 253 + 1); }

static long long count_of(MPI_Status *st) {
    int c;
    MPI_Get_count(st, MPI_BYTE, &c);
    return c;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc != 2) MPI_Abort(MPI_COMM_WORLD, 2);
    int peer = (rank + 1) % nprocs, from = (rank + nprocs - 1) % nprocs;
    int weft = strncmp(argv[1], "weft:", 5) == 0;
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh), "open");

    /* 1. Chunks interleaved between ranks, all posted before any wait;
     * completed by one Waitall together with a message to the next rank. */
    unsigned char *out = malloc((size_t)PER_RANK * CHUNK);
    for (long long i = 0; i < (long long)PER_RANK * CHUNK; i++) out[i] = pattern(rank, i);
    MPI_Request reqs[PER_RANK + 2];
    MPI_Status sts[PER_RANK + 2];
    for (int k = 0; k < PER_RANK; k++) {
        MPI_Offset at = ((MPI_Offset)k * nprocs + rank) * CHUNK;
        check(MPI_File_iwrite_at(fh, at, out + (size_t)k * CHUNK, CHUNK, MPI_BYTE, &reqs[k]), "iwrite_at");
    }
    int token = rank * 1000, got = -1;
    MPI_Irecv(&got, 1, MPI_INT, from, 7, MPI_COMM_WORLD, &reqs[PER_RANK]);
    MPI_Isend(&token, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, &reqs[PER_RANK + 1]);
    check(MPI_Waitall(PER_RANK + 2, reqs, sts), "waitall");
    long long bytes = 0;
    for (int k = 0; k < PER_RANK; k++) bytes += count_of(&sts[k]);
    int nulls = 0;
    for (int k = 0; k < PER_RANK + 2; k++) nulls += reqs[k] == MPI_REQUEST_NULL;
    report("waitall: bytes %lld, freed requests %lld", bytes, nulls);
    report("waitall: message from the previous rank %lld, %lld", got, 0);

    /* 2. A strided memory type (every other int) written nonblocking. */
    int ints[64];
    for (int i = 0; i < 64; i++) ints[i] = rank * 100 + i;
    MPI_Datatype every_other;
    MPI_Type_vector(32, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    MPI_Request one;
    MPI_Status st;
    MPI_Offset base = (MPI_Offset)PER_RANK * nprocs * CHUNK;
    check(MPI_File_iwrite_at(fh, base + rank * 128, ints, 1, every_other, &one), "iwrite_at strided memory");
    /* The type may be freed while the access runs (MPI allows it). */
    MPI_Type_free(&every_other);
    int flag = 0;
    while (!flag) check(MPI_Test(&one, &flag, &st), "test");
    report("strided memory: bytes %lld, request freed %lld", count_of(&st), one == MPI_REQUEST_NULL);
    MPI_Request pair[2];
    check(MPI_File_iwrite_at(fh, base + rank * 128 + 4, ints + 2, 1, MPI_INT, &pair[0]), "iwrite_at");
    check(MPI_File_iwrite_at(fh, base + rank * 128 + 12, ints + 6, 1, MPI_INT, &pair[1]), "iwrite_at");
    flag = 0;
#ifdef MPICH_VERSION
    /* MPICH's own MPI-IO (4.0) fails an assertion in Testall on its requests. */
    if (!weft) flag = MPI_Waitall(2, pair, sts) == MPI_SUCCESS;
#endif
    while (!flag) check(MPI_Testall(2, pair, &flag, sts), "testall");
    report("testall: bytes %lld, both freed %lld", count_of(&sts[0]) + count_of(&sts[1]), pair[0] == MPI_REQUEST_NULL && pair[1] == MPI_REQUEST_NULL);

    /* 3. The individual pointer moves at posting, before any wait. */
    MPI_Offset region = base + nprocs * 128;
    check(MPI_File_seek(fh, region + rank * 300, MPI_SEEK_SET), "seek");
    MPI_Request two[2];
    check(MPI_File_iwrite(fh, out, 100, MPI_BYTE, &two[0]), "iwrite");
    MPI_Offset after_one, after_two;
    MPI_File_get_position(fh, &after_one);
    check(MPI_File_iwrite(fh, out + 100, 150, MPI_BYTE, &two[1]), "iwrite");
    MPI_File_get_position(fh, &after_two);
    report("individual pointer after posting: %lld then %lld", after_one - region - rank * 300, after_two - region - rank * 300);
    /* With a message from the previous rank among them (MPI's own). */
    MPI_Request three[3] = {two[0], two[1], MPI_REQUEST_NULL};
    int idx, seen[3] = {0, 0, 0}, got2 = -1, token2 = rank + 7;
    MPI_Irecv(&got2, 1, MPI_INT, from, 8, MPI_COMM_WORLD, &three[2]);
    MPI_Send(&token2, 1, MPI_INT, peer, 8, MPI_COMM_WORLD);
    long long any_bytes = 0;
    for (int k = 0; k < 3; k++) {
        check(MPI_Waitany(3, three, &idx, &st), "waitany");
        seen[idx]++;
        if (idx < 2) any_bytes += count_of(&st);
    }
    check(MPI_Waitany(3, three, &idx, &st), "waitany on nothing");
    report("waitany: each once %lld, bytes %lld", seen[0] == 1 && seen[1] == 1 && seen[2] == 1, any_bytes);
    report("waitany: message %lld, %lld", got2, 0);
    report("waitany on finished requests gives MPI_UNDEFINED: %lld, %lld", idx == MPI_UNDEFINED, 0);

    /* 4. Shared pointer records, posted together; each lands once. */
    MPI_Offset records = region + nprocs * 300;
    check(MPI_File_seek_shared(fh, records, MPI_SEEK_SET), "seek_shared");
    MPI_Request rec_reqs[3];
    char recs[3][16];
    char flat[45];
    for (int k = 0; k < 3; k++) {
        snprintf(recs[k], sizeof recs[k], "r%02d-k%d-record\n", rank, k);
        check(MPI_File_iwrite_shared(fh, recs[k], 15, MPI_CHAR, &rec_reqs[k]), "iwrite_shared");
    }
    int done = 0, outcount, indices[3];
    long long rec_bytes = 0;
    while (done < 3) {
        check(MPI_Testsome(3, rec_reqs, &outcount, indices, sts), "testsome");
        if (outcount == MPI_UNDEFINED) break;
        for (int k = 0; k < outcount; k++) rec_bytes += count_of(&sts[k]);
        done += outcount;
    }
    report("testsome: completed %lld, bytes %lld", done, rec_bytes);
    /* The order between ranks is free: check each record is there once,
     * then rewrite the region in rank order so the bytes compare. */
    MPI_Barrier(MPI_COMM_WORLD);
    char *all_recs = calloc((size_t)nprocs * 3, 15);
    check(MPI_File_read_at(fh, records, all_recs, nprocs * 3 * 15, MPI_CHAR, &st), "read records");
    long long once = 0;
    for (int r = 0; r < nprocs; r++)
        for (int k = 0; k < 3; k++) {
            char want[16];
            snprintf(want, sizeof want, "r%02d-k%d-record\n", r, k);
            int n = 0;
            for (int j = 0; j < nprocs * 3; j++) n += memcmp(all_recs + j * 15, want, 15) == 0;
            once += n == 1;
        }
    free(all_recs);
    report("shared records each found once: %lld of %lld", once, nprocs * 3);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < 3; k++) memcpy(flat + k * 15, recs[k], 15);
    check(MPI_File_write_at(fh, records + rank * 45, flat, 45, MPI_CHAR, &st), "rewrite records");

    /* 5. A freed request still writes its bytes. */
    MPI_Offset tail = records + (MPI_Offset)nprocs * 3 * 15;
    MPI_Request gone;
    check(MPI_File_iwrite_at(fh, tail + rank * 64, out + 500, 64, MPI_BYTE, &gone), "iwrite_at then free");
#ifdef MPICH_VERSION
    /* MPICH's own MPI-IO (4.0) drops the write of a freed request: its
     * reference run waits instead, to give the bytes Weft must match. */
    if (!weft) check(MPI_Wait(&gone, MPI_STATUS_IGNORE), "wait");
    else
#endif
        check(MPI_Request_free(&gone), "request_free");
    report("freed request is null %lld, %lld", gone == MPI_REQUEST_NULL, 0);
    check(MPI_File_sync(fh), "sync");
    MPI_Barrier(MPI_COMM_WORLD);
    check(MPI_File_sync(fh), "sync");

    /* 6. Reads of the previous rank's chunks, completed by Waitsome,
     * checked against the pattern. */
    unsigned char *back = calloc((size_t)PER_RANK, CHUNK);
    for (int k = 0; k < PER_RANK; k++) {
        MPI_Offset at = ((MPI_Offset)k * nprocs + from) * CHUNK;
        check(MPI_File_iread_at(fh, at, back + (size_t)k * CHUNK, CHUNK, MPI_BYTE, &reqs[k]), "iread_at");
    }
    /* With a message from the previous rank among them (MPI's own). */
    int got3 = -1, token3 = rank + 9;
    MPI_Irecv(&got3, 1, MPI_INT, from, 9, MPI_COMM_WORLD, &reqs[PER_RANK]);
    MPI_Send(&token3, 1, MPI_INT, peer, 9, MPI_COMM_WORLD);
    int left = PER_RANK + 1, all_idx[PER_RANK + 1];
    MPI_Status all_sts[PER_RANK + 1];
    while (left > 0) {
        check(MPI_Waitsome(PER_RANK + 1, reqs, &outcount, all_idx, all_sts), "waitsome");
        if (outcount == MPI_UNDEFINED) break;
        for (int k = 0; k < outcount; k++)
            if (all_idx[k] < PER_RANK) sts[all_idx[k]] = all_sts[k];
        left -= outcount;
    }
    report("waitsome: message %lld, left %lld", got3, left);
    long long wrong = 0;
    bytes = 0;
    for (int k = 0; k < PER_RANK; k++) bytes += count_of(&sts[k]);
    for (long long i = 0; i < (long long)PER_RANK * CHUNK; i++) wrong += back[i] != pattern(from, i);
    report("waitsome reads: bytes %lld, wrong values %lld", bytes, wrong);

    /* 7. A read past the end is short (seen by Request_get_status); an iread of the strided ints and of
     * the freed request's bytes. */
    MPI_Offset size;
    check(MPI_File_get_size(fh, &size), "get_size");
    check(MPI_File_iread_at(fh, size - 10, back, 100, MPI_BYTE, &one), "iread_at past the end");
    /* Bounded: MPICH's own MPI-IO requests never complete by it alone. */
    flag = 0;
    for (int i = 0; i < 100000 && !flag; i++) check(MPI_Request_get_status(one, &flag, &st), "request_get_status");
    check(MPI_Wait(&one, flag ? MPI_STATUS_IGNORE : &st), "wait");
    /* ROMIO reports the bytes asked for; Weft the bytes read (10). */
    report("read past the end: bytes 10 or 100 %lld, %lld", count_of(&st) == 10 || count_of(&st) == 100, 0);
    if (weft) weft_only("read past the end gives the bytes read", count_of(&st) == 10);
    int ints_back[32];
    check(MPI_File_iread_at(fh, base + from * 128, ints_back, 32, MPI_INT, &one), "iread_at ints");
    check(MPI_Wait(&one, &st), "wait");
    wrong = 0;
    for (int i = 0; i < 32; i++) wrong += ints_back[i] != from * 100 + 2 * i;
    report("strided ints read back: %lld, wrong values %lld", 32, wrong);

    /* 8. On weft: alone (the reference fails such an access in the call):
     * an access that fails in the background, waited for with a good one,
     * gives MPI_ERR_IN_STATUS with the error in its own status only. */
    if (weft) {
        MPI_Request pair2[2];
        MPI_Status sts2[2];
        /* Its own chunk 0 again, same bytes: no other rank's reads or file depend on timing. */
        check(MPI_File_iwrite_at(fh, (MPI_Offset)rank * CHUNK, out, 16, MPI_BYTE, &pair2[0]), "iwrite_at");
        int rc = MPI_File_iwrite_at(fh, (MPI_Offset)0x7ffffffffffffff0LL, out, 100, MPI_BYTE, &pair2[1]);
        if (rc == MPI_SUCCESS) rc = MPI_Waitall(2, pair2, sts2);
        int cls = -1;
        if (rc == MPI_ERR_IN_STATUS) MPI_Error_class(sts2[1].MPI_ERROR, &cls);
        weft_only("failing access in a waitall gives MPI_ERR_IN_STATUS", rc == MPI_ERR_IN_STATUS);
        weft_only("and the good access's status says success", rc == MPI_ERR_IN_STATUS && sts2[0].MPI_ERROR == MPI_SUCCESS);
        weft_only("and the failing one's an error", cls > 0 && cls != MPI_SUCCESS);
    }

    /* The freed request's bytes, after close (MPICH's own MPI-IO may hold
     * them until then). */
    check(MPI_File_close(&fh), "close");
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), "reopen");
    check(MPI_File_iread_at(fh, tail + from * 64, back, 64, MPI_BYTE, &one), "iread_at freed bytes");
    check(MPI_Wait(&one, &st), "wait");
    wrong = 0;
    for (int i = 0; i < 64; i++) wrong += back[i] != pattern(from, 500 + i);
    report("bytes of a freed request: %lld, wrong values %lld", 64, wrong);
    check(MPI_File_close(&fh), "close");
    free(out);
    free(back);
    MPI_Finalize();
    return 0;
}
