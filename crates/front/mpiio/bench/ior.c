/* The MPI side of `weft bench ior`: IOR's shapes through MPI-IO, as IOR's
 * MPIIO back end runs them (explicit offsets: MPI_File_write_at /
 * read_at, or write_at_all / read_at_all when collective).
 *
 *   fpp      every rank its own file PATH.<rank> (on MPI_COMM_SELF),
 *            written from 0 in TRANSFER-byte calls;
 *   shared   one file; rank r's BLOCK bytes at r * BLOCK, in TRANSFER-byte
 *            calls;
 *   strided  one file; call i of rank r at (i * P + r) * TRANSFER (IOR's
 *            segments of one transfer; ior-hard with 47,008 bytes).
 *
 * Every rank moves BLOCK bytes (a whole number of transfers). A write ends
 * with MPI_File_sync (IOR's -e: the bytes are on the disk). A read checks
 * every byte it got against what the write put there, after the timing, so
 * a wrong read never passes as a fast one. The buffer is the rank's whole
 * BLOCK, made before the timing (TRANSFER a multiple of 8). The time runs
 * from a barrier to each rank's close; rank 0 prints the slowest
 * (MPI_Reduce MAX) as "elapsed_ns N".
 * HINT is "-" or one key=value set on the file's info.
 * Usage: ior w|r SHAPE PATH BLOCK TRANSFER COLL(0|1) HINT */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "ior: %s: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* The 8-byte word at file offset `off` (a multiple of 8) of file `file`. */
static uint64_t word(uint64_t file, uint64_t off) {
    return (off * 0x9E3779B97F4A7C15ull) ^ (file << 56) ^ 0x5eed;
}

/* Transfer i of a rank: its file offset. */
static long long offset_of(long long i, long long transfer, int fpp, int strided, int rank, int nprocs, long long block) {
    return fpp ? i * transfer : strided ? (i * nprocs + rank) * transfer : rank * block + i * transfer;
}

/* Fills (or checks) a rank's BLOCK bytes, transfer i at its file offset;
 * returns the bytes that differ. Word by word: TRANSFER and so every
 * offset is a multiple of 8. */
static long long pattern(uint64_t *buf, long long calls, long long transfer, uint64_t file, int fpp, int strided, int rank, int nprocs, long long block, int fill) {
    long long wrong = 0, words = transfer / 8;
    for (long long i = 0; i < calls; i++) {
        long long off = offset_of(i, transfer, fpp, strided, rank, nprocs, block);
        uint64_t *w = buf + i * words;
        for (long long k = 0; k < words; k++) {
            uint64_t want = word(file, (uint64_t)(off + 8 * k));
            if (fill)
                w[k] = want;
            else if (w[k] != want)
                wrong += 8;
        }
    }
    return wrong;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nprocs;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc != 8) {
        if (rank == 0) fprintf(stderr, "usage: ior w|r fpp|shared|strided PATH BLOCK TRANSFER COLL HINT\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int writing = argv[1][0] == 'w';
    const char *shape = argv[2];
    long long block = atoll(argv[4]), transfer = atoll(argv[5]);
    int coll = atoi(argv[6]);
    int fpp = strcmp(shape, "fpp") == 0, strided = strcmp(shape, "strided") == 0;
    if (transfer <= 0 || transfer % 8 != 0 || transfer > (1 << 30) || block < transfer || block % transfer != 0 || (!fpp && !strided && strcmp(shape, "shared") != 0)) {
        if (rank == 0) fprintf(stderr, "ior: BLOCK must be a positive multiple of TRANSFER, TRANSFER of 8; SHAPE fpp, shared or strided\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long long calls = block / transfer;
    char path[4096];
    if (fpp)
        snprintf(path, sizeof path, "%s.%d", argv[3], rank);
    else
        snprintf(path, sizeof path, "%s", argv[3]);
    uint64_t file = fpp ? (uint64_t)rank + 1 : 0;
    uint64_t *buf = malloc((size_t)block);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 4);
    if (writing)
        pattern(buf, calls, transfer, file, fpp, strided, rank, nprocs, block, 1);
    else
        memset(buf, 0, (size_t)block);
    MPI_Info info;
    MPI_Info_create(&info);
    if (strcmp(argv[7], "-") != 0) {
        char *eq = strchr(argv[7], '=');
        if (!eq) MPI_Abort(MPI_COMM_WORLD, 2);
        *eq = 0;
        MPI_Info_set(info, argv[7], eq + 1);
    }
    MPI_Comm comm = fpp ? MPI_COMM_SELF : MPI_COMM_WORLD;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_File fh;
    check(MPI_File_open(comm, path, writing ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY, info, &fh), "open");
    for (long long i = 0; i < calls; i++) {
        long long off = offset_of(i, transfer, fpp, strided, rank, nprocs, block);
        void *at = (char *)buf + i * transfer;
        if (writing && coll)
            check(MPI_File_write_at_all(fh, off, at, (int)transfer, MPI_BYTE, MPI_STATUS_IGNORE), "write_at_all");
        else if (writing)
            check(MPI_File_write_at(fh, off, at, (int)transfer, MPI_BYTE, MPI_STATUS_IGNORE), "write_at");
        else if (coll)
            check(MPI_File_read_at_all(fh, off, at, (int)transfer, MPI_BYTE, MPI_STATUS_IGNORE), "read_at_all");
        else
            check(MPI_File_read_at(fh, off, at, (int)transfer, MPI_BYTE, MPI_STATUS_IGNORE), "read_at");
    }
    if (writing) check(MPI_File_sync(fh), "sync");
    check(MPI_File_close(&fh), "close");
    double mine = MPI_Wtime() - t0, slowest;
    /* Checked after the timing (IOR checks in a phase of its own); a wrong
     * byte fails the run. */
    long long wrong = writing ? 0 : pattern(buf, calls, transfer, file, fpp, strided, rank, nprocs, block, 0);
    if (wrong) {
        fprintf(stderr, "ior: rank %d read %lld wrong bytes of %s\n", rank, wrong, path);
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
    free(buf);
    MPI_Finalize();
    return 0;
}
