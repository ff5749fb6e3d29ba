/* An MPI program that goes on while the test kills Weft's servers with -9
 * and starts them again: each round creates a file, writes it (each rank
 * its own block, then a collective write of a strided view, then two
 * ordered writes through the shared file pointer), syncs, closes, reads
 * it back (collectively too) and checks every byte, and deletes
 * the file of the round before. Any error ends the job (`check`); none
 * may reach the program while a server restarts within the recovery
 * window.
 *
 * usage: restarts weft:/dir started-marker stop-file
 * Rank 0 makes `started-marker` (a local file) after the first round, and
 * the rounds go on until `stop-file` exists (at most 2,000 rounds). */
#include "check.h"
#include <string.h>
#include <unistd.h>

#define BLOCK 65536
#define STRIDED 4096
#define COUNT 16
#define ROUNDS 2000
#define RECORD 1000

static void fill(unsigned char *b, int n, int round, int part) {
    byte_fill(b, n, round * 131 + rank * 17 + part);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc != 4) {
        if (rank == 0) fprintf(stderr, "usage: restarts weft:/dir started-marker stop-file\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    unsigned char *own = malloc(BLOCK), *back = malloc(BLOCK);
    unsigned char *strided = malloc(STRIDED * COUNT), *strided_back = malloc(STRIDED * COUNT);
    unsigned char record[RECORD], record_back[RECORD];
    /* Blocks of STRIDED bytes, one per rank in turn, after the own blocks. */
    MPI_Datatype vec, view;
    MPI_Type_vector(COUNT, STRIDED, STRIDED * nprocs, MPI_BYTE, &vec);
    MPI_Type_create_resized(vec, 0, (MPI_Aint)STRIDED * nprocs * COUNT, &view);
    MPI_Type_commit(&view);
    MPI_Offset strided_at = (MPI_Offset)BLOCK * nprocs + (MPI_Offset)STRIDED * rank;
    /* Two ordered writes of RECORD bytes per rank, after the strided part. */
    MPI_Offset ordered_at = (MPI_Offset)BLOCK * nprocs + (MPI_Offset)STRIDED * nprocs * COUNT;
    long long wrong = 0;
    int round = 0, stop = 0;
    char name[4096], previous[4096] = "";
    for (; round < ROUNDS && !stop; round++) {
        snprintf(name, sizeof name, "%s/round-%d", argv[1], round);
        MPI_File fh;
        check(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh), "open for writing");
        fill(own, BLOCK, round, 0);
        fill(strided, STRIDED * COUNT, round, 1);
        check(MPI_File_write_at(fh, (MPI_Offset)BLOCK * rank, own, BLOCK, MPI_BYTE, MPI_STATUS_IGNORE), "write_at");
        check(MPI_File_set_view(fh, strided_at, MPI_BYTE, view, "native", MPI_INFO_NULL), "set_view");
        check(MPI_File_write_at_all(fh, 0, strided, STRIDED * COUNT, MPI_BYTE, MPI_STATUS_IGNORE), "write_at_all");
        check(MPI_File_set_view(fh, ordered_at, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL), "set_view for ordered writes");
        for (int k = 0; k < 2; k++) {
            fill(record, RECORD, round, 2 + k);
            check(MPI_File_write_ordered(fh, record, RECORD, MPI_BYTE, MPI_STATUS_IGNORE), "write_ordered");
        }
        check(MPI_File_sync(fh), "sync");
        check(MPI_File_close(&fh), "close after writing");
        check(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), "open for reading");
        /* The next rank's block: bytes another process wrote. */
        int next = (rank + 1) % nprocs;
        check(MPI_File_read_at(fh, (MPI_Offset)BLOCK * next, back, BLOCK, MPI_BYTE, MPI_STATUS_IGNORE), "read_at");
        int saved = rank;
        rank = next;
        fill(own, BLOCK, round, 0);
        rank = saved;
        for (int i = 0; i < BLOCK; i++) wrong += back[i] != own[i];
        /* The next rank's ordered records: in rank order, the second after
         * every rank's first. */
        for (int k = 0; k < 2; k++) {
            MPI_Offset at = ordered_at + (MPI_Offset)RECORD * (k * nprocs + next);
            check(MPI_File_read_at(fh, at, record_back, RECORD, MPI_BYTE, MPI_STATUS_IGNORE), "read_at of an ordered record");
            rank = next;
            fill(record, RECORD, round, 2 + k);
            rank = saved;
            for (int i = 0; i < RECORD; i++) wrong += record_back[i] != record[i];
        }
        check(MPI_File_set_view(fh, strided_at, MPI_BYTE, view, "native", MPI_INFO_NULL), "set_view for reading");
        check(MPI_File_read_at_all(fh, 0, strided_back, STRIDED * COUNT, MPI_BYTE, MPI_STATUS_IGNORE), "read_at_all");
        for (int i = 0; i < STRIDED * COUNT; i++) wrong += strided_back[i] != strided[i];
        check(MPI_File_close(&fh), "close after reading");
        if (previous[0] && rank == 0) check(MPI_File_delete(previous, MPI_INFO_NULL), "delete");
        strcpy(previous, name);
        if (rank == 0) {
            if (round == 0) fclose(fopen(argv[2], "w"));
            stop = access(argv[3], F_OK) == 0;
            usleep(20000);
        }
        MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    long long all = 0;
    MPI_Reduce(&wrong, &all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("rounds %s, wrong bytes %lld\n", stop ? "until told" : "ran out", all);
    MPI_Type_free(&view);
    MPI_Type_free(&vec);
    free(own);
    free(back);
    free(strided);
    free(strided_back);
    MPI_Finalize();
    return 0;
}
