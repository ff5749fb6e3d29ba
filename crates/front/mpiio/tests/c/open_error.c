/* Opening a weft: file when the cluster cannot be used must fail with an
 * error class a program can act on, at once, on every rank; a local file
 * still opens. Prints "class io|no_such_file|other" and the error string
 * from rank 0. Usage: open_error PATH LOCALPATH */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    int cls = 0, len = 0, all;
    char msg[MPI_MAX_ERROR_STRING] = "";
    if (rc != MPI_SUCCESS) {
        MPI_Error_class(rc, &cls);
        MPI_Error_string(rc, msg, &len);
    }
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int local = MPI_File_open(MPI_COMM_WORLD, argv[2], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    if (local == MPI_SUCCESS) MPI_File_close(&fh);
    if (rank == 0) {
        printf("class %s\n", cls == MPI_ERR_IO ? "io" : cls == MPI_ERR_NO_SUCH_FILE ? "no_such_file" : rc == MPI_SUCCESS ? "none" : "other");
        printf("every rank failed %d\n", all != MPI_SUCCESS);
        printf("local open ok %d\n", local == MPI_SUCCESS);
        printf("message %s\n", msg);
    }
    MPI_Finalize();
    return 0;
}
