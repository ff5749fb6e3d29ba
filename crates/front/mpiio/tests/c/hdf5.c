/* Parallel HDF5 over MPI-IO: a 2-D dataset of doubles written by hyperslab
 * per rank (rows split between ranks), once contiguous and once chunked,
 * with attributes; then the file is reopened, read back and checked.
 * Object times are not tracked, so the file's bytes are reproducible.
 * Prints the checks. Usage: hdf5 PATH (PATH may start with weft:) */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS_PER_RANK 37
#define COLS 53

static int rank, nprocs;

static void die(const char *what) {
    fprintf(stderr, "rank %d: %s failed\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static hid_t fapl(void) {
    hid_t p = H5Pcreate(H5P_FILE_ACCESS);
    if (H5Pset_fapl_mpio(p, MPI_COMM_WORLD, MPI_INFO_NULL) < 0) die("H5Pset_fapl_mpio");
    return p;
}

static void write_dataset(hid_t file, const char *name, int chunked, const double *mine) {
    hsize_t dims[2] = {(hsize_t)ROWS_PER_RANK * nprocs, COLS};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0);
    if (chunked) {
        hsize_t chunk[2] = {16, 16};
        H5Pset_chunk(dcpl, 2, chunk);
    }
    hid_t ds = H5Dcreate2(file, name, H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0) die("H5Dcreate2");
    hsize_t start[2] = {(hsize_t)ROWS_PER_RANK * rank, 0}, count[2] = {ROWS_PER_RANK, COLS};
    hid_t fs = H5Dget_space(ds);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t ms = H5Screate_simple(2, count, NULL);
    hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
    if (H5Dwrite(ds, H5T_NATIVE_DOUBLE, ms, fs, xfer, mine) < 0) die("H5Dwrite");
    int attr_val[3] = {7, chunked, nprocs};
    hsize_t adims = 3;
    hid_t as = H5Screate_simple(1, &adims, NULL);
    hid_t attr = H5Acreate2(ds, "meta", H5T_NATIVE_INT, as, H5P_DEFAULT, H5P_DEFAULT);
    if (attr < 0 || H5Awrite(attr, H5T_NATIVE_INT, attr_val) < 0) die("H5Awrite");
    H5Aclose(attr);
    H5Sclose(as);
    H5Pclose(xfer);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
}

static void check_dataset(hid_t file, const char *name) {
    hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
    if (ds < 0) die("H5Dopen2");
    hsize_t dims[2];
    hid_t fs = H5Dget_space(ds);
    H5Sget_simple_extent_dims(fs, dims, NULL);
    /* Each rank reads the next rank's rows: data written by another process. */
    int peer = (rank + 1) % nprocs;
    hsize_t start[2] = {(hsize_t)ROWS_PER_RANK * peer, 0}, count[2] = {ROWS_PER_RANK, COLS};
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t ms = H5Screate_simple(2, count, NULL);
    double *back = malloc(sizeof(double) * ROWS_PER_RANK * COLS);
    hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
    if (H5Dread(ds, H5T_NATIVE_DOUBLE, ms, fs, xfer, back) < 0) die("H5Dread");
    long bad = 0;
    for (int r = 0; r < ROWS_PER_RANK; r++)
        for (int c = 0; c < COLS; c++)
            if (back[r * COLS + c] != (ROWS_PER_RANK * peer + r) * 1000.0 + c) bad++;
    int attr_val[3] = {0};
    hid_t attr = H5Aopen(ds, "meta", H5P_DEFAULT);
    H5Aread(attr, H5T_NATIVE_INT, attr_val);
    H5Aclose(attr);
    long all_bad;
    MPI_Reduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: dims %llux%llu, attribute %d %d %d, wrong values %ld\n", name, (unsigned long long)dims[0],
               (unsigned long long)dims[1], attr_val[0], attr_val[1], attr_val[2], all_bad);
    free(back);
    H5Pclose(xfer);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(ds);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2) die("usage");
    double *mine = malloc(sizeof(double) * ROWS_PER_RANK * COLS);
    for (int r = 0; r < ROWS_PER_RANK; r++)
        for (int c = 0; c < COLS; c++) mine[r * COLS + c] = (ROWS_PER_RANK * rank + r) * 1000.0 + c;

    hid_t p = fapl();
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, fcpl, p);
    if (file < 0) die("H5Fcreate");
    write_dataset(file, "contiguous", 0, mine);
    write_dataset(file, "chunked", 1, mine);
    if (H5Fclose(file) < 0) die("H5Fclose");

    file = H5Fopen(argv[1], H5F_ACC_RDONLY, p);
    if (file < 0) die("H5Fopen");
    check_dataset(file, "contiguous");
    check_dataset(file, "chunked");
    H5Fclose(file);
    H5Pclose(fcpl);
    H5Pclose(p);
    free(mine);
    MPI_Finalize();
    return 0;
}
