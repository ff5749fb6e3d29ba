/* The string of an MPI-IO error code on a weft: file: two opens of files
 * that do not exist, each printing its class check and the code's string.
 * Usage: error_string (run with the Weft library preloaded) */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *paths[2] = {"weft:/nope/missing", "weft:/other-missing"};
    for (int k = 0; k < 2; k++) {
        MPI_File fh;
        char text[MPI_MAX_ERROR_STRING];
        int len = 0, cls = 0;
        int rc = MPI_File_open(MPI_COMM_WORLD, paths[k], MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
        MPI_Error_class(rc, &cls);
        MPI_Error_string(rc, text, &len);
        printf("%s: class %s: %s\n", paths[k], cls == MPI_ERR_NO_SUCH_FILE ? "ok" : "WRONG", text);
    }
    MPI_Finalize();
    return 0;
}
