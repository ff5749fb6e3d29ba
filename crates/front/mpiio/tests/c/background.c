/* A nonblocking write runs while the program goes on. The test holds a
 * lock on the bytes written (the file is in atomic mode, so the write
 * waits for it): a write done inside MPI_File_iwrite_at would never
 * return. Once the call has returned, the program creates MARKER (a local
 * file) and waits for the request; the test sees the marker, checks that
 * the bytes are not written yet, and lets the lock go. The program then
 * reads the bytes back. Usage: background PATH MARKER */
#include "check.h"
#include <stdlib.h>

#define LEN 65536

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 3) MPI_Abort(MPI_COMM_WORLD, 2);
    unsigned char *buf = malloc(LEN), *back = malloc(LEN);
    for (int i = 0; i < LEN; i++) buf[i] = (unsigned char)(i % 251 + 1);
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_SELF, argv[1], MPI_MODE_RDWR, MPI_INFO_NULL, &fh), "open");
    check(MPI_File_set_atomicity(fh, 1), "set_atomicity");
    MPI_Request req;
    MPI_Status st;
    check(MPI_File_iwrite_at(fh, 0, buf, LEN, MPI_BYTE, &req), "iwrite_at");
    FILE *m = fopen(argv[2], "w");
    if (!m || fclose(m) != 0) MPI_Abort(MPI_COMM_WORLD, 3);
    check(MPI_Wait(&req, &st), "wait");
    int n;
    MPI_Get_count(&st, MPI_BYTE, &n);
    check(MPI_File_read_at(fh, 0, back, LEN, MPI_BYTE, MPI_STATUS_IGNORE), "read_at");
    long wrong = 0;
    for (int i = 0; i < LEN; i++) wrong += back[i] != buf[i];
    printf("written %d, wrong values %ld\n", n, wrong);
    check(MPI_File_close(&fh), "close");
    free(buf);
    free(back);
    MPI_Finalize();
    return 0;
}
