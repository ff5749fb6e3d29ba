/* A nonblocking write runs while the program goes on. The test holds a
 * lock on the bytes written (the file is in atomic mode, so the write
 * waits for it): a write done inside MPI_File_iwrite_at would never
 * return. Once the call has returned, the program creates MARKER (a local
 * file) and waits for the request; the test sees the marker, checks that
 * the bytes are not written yet, and lets the lock go. The program then
 * reads the bytes back. Behind the held write it posts two more, by the
 * individual and the shared file pointer, and reports where each pointer
 * stands before any of them could run: MPI moves them at the call.
 * With `all`, under MPI_THREAD_MULTIPLE, the held write is the collective
 * MPI_File_iwrite_at_all (on one rank) and the shared pointer is left out
 * (its seek is collective: it waits for the posted collective).
 * Usage: background PATH MARKER [all] */
#include "check.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEN 65536

int main(int argc, char **argv) {
    int all = argc == 4 && strcmp(argv[3], "all") == 0, provided = MPI_THREAD_SINGLE;
    if (all) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    else MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 3 && !all) MPI_Abort(MPI_COMM_WORLD, 2);
    if (all && provided != MPI_THREAD_MULTIPLE) {
        printf("no MPI_THREAD_MULTIPLE\n");
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    unsigned char *buf = malloc(3 * LEN), *back = malloc(3 * LEN);
    for (int i = 0; i < 3 * LEN; i++) buf[i] = (unsigned char)(i % 251 + 1);
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_SELF, argv[1], MPI_MODE_RDWR, MPI_INFO_NULL, &fh), "open");
    check(MPI_File_set_atomicity(fh, 1), "set_atomicity");
    MPI_Request req[3];
    MPI_Status st[3];
    if (all) check(MPI_File_iwrite_at_all(fh, 0, buf, LEN, MPI_BYTE, &req[0]), "iwrite_at_all");
    else check(MPI_File_iwrite_at(fh, 0, buf, LEN, MPI_BYTE, &req[0]), "iwrite_at");
    /* Let the held write's worker start (and wait for the lock): the calls
     * below must not wait for it (a seek once took the file's write lock,
     * which the running access holds shared: a minute's wait in CI). */
    usleep(300000);
    check(MPI_File_seek(fh, LEN, MPI_SEEK_SET), "seek");
    check(MPI_File_iwrite(fh, buf + LEN, LEN, MPI_BYTE, &req[1]), "iwrite");
    MPI_Offset individual, shared = 3 * LEN;
    if (all) {
        check(MPI_File_iwrite_at(fh, 2 * LEN, buf + 2 * LEN, LEN, MPI_BYTE, &req[2]), "iwrite_at");
    } else {
        check(MPI_File_seek_shared(fh, 2 * LEN, MPI_SEEK_SET), "seek_shared");
        check(MPI_File_iwrite_shared(fh, buf + 2 * LEN, LEN, MPI_BYTE, &req[2]), "iwrite_shared");
        check(MPI_File_get_position_shared(fh, &shared), "get_position_shared");
    }
    check(MPI_File_get_position(fh, &individual), "get_position");
    FILE *m = fopen(argv[2], "w");
    if (!m || fclose(m) != 0) MPI_Abort(MPI_COMM_WORLD, 3);
    check(MPI_Waitall(3, req, st), "waitall");
    printf("pointers at posting: individual %lld, shared %lld\n", (long long)individual, (long long)shared);
    int n[3];
    for (int k = 0; k < 3; k++) MPI_Get_count(&st[k], MPI_BYTE, &n[k]);
    check(MPI_File_read_at(fh, 0, back, 3 * LEN, MPI_BYTE, MPI_STATUS_IGNORE), "read_at");
    long wrong = 0;
    for (int i = 0; i < 3 * LEN; i++) wrong += back[i] != buf[i];
    printf("written %d, wrong values %ld\n", n[0] + n[1] + n[2], wrong);
    check(MPI_File_close(&fh), "close");
    free(buf);
    free(back);
    MPI_Finalize();
    return 0;
}
