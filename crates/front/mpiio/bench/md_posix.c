/* mdtest-like rates through POSIX calls: N files created (open O_CREAT +
 * close), stat'ed, unlinked, in DIR; prints ops/s for each phase. On a
 * weft: name the preloaded MPI-IO library serves the calls (docs/mpiio.md,
 * "POSIX calls on weft: names"):
 *   mpicc.openmpi -O2 -o md_posix md_posix.c
 *   mpiexec -n 1 -x LD_PRELOAD=$(weft mpiio-lib) -x WEFT_CLUSTER ./md_posix weft:/md 2000
 *   mpiexec -n 1 -x LD_PRELOAD=$(weft mpiio-lib) ./md_posix /tmp/md 2000 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *dir = argv[1];
    int n = atoi(argv[2]);
    char p[4096];
    mkdir(dir, 0755);
    double t0 = now();
    for (int i = 0; i < n; i++) { snprintf(p, sizeof p, "%s/f.%d", dir, i); int fd = open(p, O_CREAT | O_WRONLY, 0644); if (fd < 0) { perror(p); return 1; } close(fd); }
    double t1 = now();
    struct stat st;
    for (int i = 0; i < n; i++) { snprintf(p, sizeof p, "%s/f.%d", dir, i); if (stat(p, &st)) { perror(p); return 1; } }
    double t2 = now();
    for (int i = 0; i < n; i++) { snprintf(p, sizeof p, "%s/f.%d", dir, i); if (unlink(p)) { perror(p); return 1; } }
    double t3 = now();
    rmdir(dir);
    printf("%s create %.0f/s stat %.0f/s unlink %.0f/s\n", dir, n / (t1 - t0), n / (t2 - t1), n / (t3 - t2));
    MPI_Finalize();
    return 0;
}
