/* The MPI side of `weft bench concurrent-write --mpi` and `weft bench
 * mpiio-cost` (paper 002's file-per-process pattern): every rank opens its
 * own file PREFIX<rank> on MPI_COMM_SELF and writes (or reads) SIZE bytes
 * with MPI_File_write_at (read_at) calls of TRANSFER bytes, with
 * MPI_File_sync before close if FSYNC is 1. The time runs from a barrier
 * to each rank's close; rank 0 prints the slowest (MPI_Reduce MAX) as
 * "elapsed_ns N". Usage: iorate w|r PREFIX SIZE TRANSFER FSYNC
 *
 * `weft bench mpiio-cost --overlap` runs it as `iorate ow|or ...`: each
 * rank posts all its transfers at once (MPI_File_iwrite_at / iread_at)
 * and waits for them, once untimed (a warm-up: the file exists, the worker
 * runs) and once timed (the I/O alone), computes for as long (the compute
 * alone: a loop calibrated to that time, calling no MPI), then posts the
 * same transfers, computes the same loop and waits (both). Rank 0 prints
 * the slowest rank's "io_ns", "compute_ns" and "both_ns"; the I/O alone is
 * timed before and after the overlapped run, and the mean taken. It also
 * prints the CPU time all ranks' processes spent in the first I/O alone
 * ("io_cpu_ns", every thread) and in the compute ("compute_cpu_ns"), and
 * how many bytes the overlapped read pass got wrong ("wrong_bytes"; the
 * bench reads the files its write run left, so this checks those too). With
 * FSYNC 1 a write phase ends with MPI_File_sync in all three. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "iorate: %s: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* The compute: dependent floating-point steps the compiler must keep. */
static double compute(long long steps) {
    volatile double x = 1.0;
    for (long long i = 0; i < steps; i++) x = x * 1.0000001 + 1e-9;
    return x;
}

/* Posts every transfer of the file, then (after `steps` of compute) waits. */
static double post_compute_wait(MPI_File fh, int write, char *buf, long long size, long long transfer, int fsync, long long steps) {
    long long n = (size + transfer - 1) / transfer;
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)n);
    if (!write) memset(buf, 0, (size_t)size); /* so the check below sees what was read */
    double t0 = MPI_Wtime();
    for (long long k = 0; k < n; k++) {
        long long off = k * transfer;
        int len = (int)(size - off < transfer ? size - off : transfer);
        /* Each transfer its own part of the buffer (as MPI requires of
         * pending reads). */
        char *b = buf + off;
        if (write) check(MPI_File_iwrite_at(fh, off, b, len, MPI_BYTE, &reqs[k]), "iwrite_at");
        else check(MPI_File_iread_at(fh, off, b, len, MPI_BYTE, &reqs[k]), "iread_at");
    }
    compute(steps);
    check(MPI_Waitall((int)n, reqs, MPI_STATUSES_IGNORE), "waitall");
    if (write && fsync) check(MPI_File_sync(fh), "sync");
    free(reqs);
    return MPI_Wtime() - t0;
}

/* This process's CPU seconds so far, all threads. */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Prints the slowest rank's value (MPI_MAX) or all ranks' sum (MPI_SUM),
 * times `scale`. */
static void reduce_print(const char *name, double mine, MPI_Op how, double scale) {
    double worst;
    MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, how, 0, MPI_COMM_WORLD);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) printf("%s %.0f\n", name, worst * scale);
}

static int overlap(int write, const char *prefix, long long size, long long transfer, int fsync) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char path[4096];
    snprintf(path, sizeof path, "%s%d", prefix, rank);
    char *buf = malloc((size_t)size);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 2);
    for (long long i = 0; i < size; i++) buf[i] = (char)(i % 251 + 1);
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_SELF, path, write ? MPI_MODE_CREATE | MPI_MODE_RDWR : MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), "open");
    post_compute_wait(fh, write, buf, size, transfer, fsync, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    double cpu0 = cpu_s();
    double io1 = post_compute_wait(fh, write, buf, size, transfer, fsync, 0);
    double io_cpu = cpu_s() - cpu0;
    /* Calibrate the loop to the I/O's time, in rounds of 2^16 steps. */
    long long steps = 0;
    double c0 = MPI_Wtime();
    while (MPI_Wtime() - c0 < io1) {
        compute(1 << 16);
        steps += 1 << 16;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double c1 = MPI_Wtime();
    cpu0 = cpu_s();
    compute(steps);
    double comp = MPI_Wtime() - c1, comp_cpu = cpu_s() - cpu0;
    MPI_Barrier(MPI_COMM_WORLD);
    double both = post_compute_wait(fh, write, buf, size, transfer, fsync, steps);
    long long wrong = 0;
    for (long long i = 0; i < size; i++) wrong += buf[i] != (char)(i % 251 + 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double io2 = post_compute_wait(fh, write, buf, size, transfer, fsync, 0);

    check(MPI_File_close(&fh), "close");
    reduce_print("io_ns", (io1 + io2) / 2, MPI_MAX, 1e9);
    reduce_print("compute_ns", comp, MPI_MAX, 1e9);
    reduce_print("both_ns", both, MPI_MAX, 1e9);
    reduce_print("io_cpu_ns", io_cpu, MPI_SUM, 1e9);
    reduce_print("compute_cpu_ns", comp_cpu, MPI_SUM, 1e9);
    reduce_print("wrong_bytes", (double)wrong, MPI_SUM, 1);
    free(buf);
    MPI_Finalize();
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *op = argc == 6 ? argv[1] : "";
    int plain = !strcmp(op, "w") || !strcmp(op, "r"), overlapped = !strcmp(op, "ow") || !strcmp(op, "or");
    if (!plain && !overlapped) {
        if (rank == 0) fprintf(stderr, "usage: iorate w|r|ow|or PREFIX SIZE TRANSFER FSYNC\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int write = op[strlen(op) - 1] == 'w';
    long long size = atoll(argv[3]), transfer = atoll(argv[4]);
    int fsync = atoi(argv[5]);
    if (size <= 0 || transfer <= 0 || transfer > (1LL << 30)) MPI_Abort(MPI_COMM_WORLD, 2);
    if (overlapped) return overlap(write, argv[2], size, transfer, fsync);
    char path[4096];
    snprintf(path, sizeof path, "%s%d", argv[2], rank);
    char *buf = malloc(transfer);
    for (long long i = 0; i < transfer; i++) buf[i] = (char)(i % 251 + 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_File fh;
    check(MPI_File_open(MPI_COMM_SELF, path, write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), "open");
    for (long long off = 0; off < size; off += transfer) {
        int n = (int)(size - off < transfer ? size - off : transfer);
        if (write) check(MPI_File_write_at(fh, off, buf, n, MPI_BYTE, MPI_STATUS_IGNORE), "write_at");
        else check(MPI_File_read_at(fh, off, buf, n, MPI_BYTE, MPI_STATUS_IGNORE), "read_at");
    }
    if (write && fsync) check(MPI_File_sync(fh), "sync");
    check(MPI_File_close(&fh), "close");
    double mine = MPI_Wtime() - t0, slowest;
    /* Ranks that finish first wait sleeping, not spinning in MPI (both MPIs
     * poll while waiting), so they leave the CPU to the ranks and servers
     * still working; then the reduction finds everyone there. */
    MPI_Request all_done;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &all_done);
    while (!done) {
        MPI_Test(&all_done, &done, MPI_STATUS_IGNORE);
        if (!done) usleep(200);
    }
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("elapsed_ns %.0f\n", slowest * 1e9);
    free(buf);
    MPI_Finalize();
    return 0;
}
