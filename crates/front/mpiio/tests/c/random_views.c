/* Random file views and memory types through collective I/O. For each of
 * TRIALS trials the ranks agree (from a shared seed) on a frame of blocks of
 * random byte lengths, each owned by one rank, so ranks have unequal
 * shares (and in odd trials the last rank has none). A rank's file type is an
 * indexed type over its blocks, resized to the frame, and sometimes nested
 * once more (two frames as one tile); the view's displacement is random.
 * Its memory type is contiguous bytes, every other byte (a resized byte),
 * or one of five two-byte types with gaps: an indexed pair, a vector of
 * contiguous (nested), a 2-D subarray, a darray and a struct. Each trial writes with write_at_all, reads
 * back with read_at_all (same types) and with an independent contiguous
 * read_at, and then every rank reads the whole region, the same bytes as
 * every other rank, with read_at_all. Small collective buffers force many
 * rounds. Rank 0 prints per-trial sums; "wrong values N" counts bytes that
 * differ from what was written. Usage: random_views PATH [SEED [REPEATS]]:
 * with REPEATS (a test that kills a rank mid-collective), every rank first
 * prints its pid and the trials run REPEATS times. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRIALS 12
#define MAXBLOCKS 48

#include "check.h"

static unsigned long long next(unsigned long long *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static long long sum_bytes(const unsigned char *v, long n) {
    long long s = 0;
    for (long i = 0; i < n; i++) s = (s * 131 + v[i]) % 1000000007;
    return s;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 20261124;
    int repeats = argc > 3 ? atoi(argv[3]) : 1;
    if (argc > 3) {
        printf("pid %d\n", (int)getpid());
        fflush(stdout);
    }
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "cb_nodes", "2");
    MPI_Info_set(info, "cb_buffer_size", "1024");
    MPI_Info_set(info, "weft_coll_server_window", "8192");
    MPI_File fh;
    MPI_Status st;
    check(MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh), "open");
    long wrong = 0;
    for (int rep = 0; rep < repeats; rep++)
    for (int t = 0; t < TRIALS; t++) {
        unsigned long long shared = seed * 2654435761ULL + (unsigned long long)t * 97 + 1;
        unsigned long long own = shared ^ ((unsigned long long)(rank + 1) << 32);
        next(&shared);
        next(&own);
        int nblocks = 1 + (int)(next(&shared) % MAXBLOCKS);
        /* In odd trials the last rank owns nothing. No block is left
         * unowned: what the MPI libraries leave in a hole inside an access
         * is undefined (ROMIO's read-modify-write fills holes past the end
         * of file with stale buffer bytes), so files would not compare. */
        int owners = nprocs > 1 && t % 2 ? nprocs - 1 : nprocs;
        int lens[MAXBLOCKS], disps[MAXBLOCKS], mine = 0, frame = 0, bytes_per_frame = 0;
        int all_len[MAXBLOCKS], all_owner[MAXBLOCKS];
        for (int i = 0; i < nblocks; i++) {
            int len = 1 + (int)(next(&shared) % 300);
            int owner = (int)(next(&shared) % (unsigned long long)owners);
            all_len[i] = len;
            all_owner[i] = owner;
            if (owner == rank) {
                lens[mine] = len;
                disps[mine] = frame;
                mine++;
                bytes_per_frame += len;
            }
            frame += len;
        }
        int nested = next(&shared) % 2 == 0;
        int count = 1 + (int)(next(&shared) % 3);
        MPI_Offset disp = (MPI_Offset)t * (1 << 20) + (MPI_Offset)(next(&shared) % 5000);

        MPI_Datatype inner, tile, filetype;
        MPI_Type_indexed(mine, lens, disps, MPI_BYTE, &inner);
        MPI_Type_create_resized(inner, 0, frame, &tile);
        if (nested) {
            MPI_Datatype two;
            MPI_Type_contiguous(2, tile, &two);
            MPI_Type_create_resized(two, 0, 2 * (MPI_Aint)frame, &filetype);
            MPI_Type_free(&two);
            bytes_per_frame *= 2;
        } else {
            MPI_Type_dup(tile, &filetype);
        }
        MPI_Type_commit(&filetype);
        long bytes = (long)bytes_per_frame * count;

        /* The memory type: where each of this rank's stream bytes sits. */
        int mem_kind = (int)(next(&own) % 7);
        if (mem_kind >= 2 && bytes % 2) mem_kind = 1;
        /* Kinds 2-6 hold two bytes per element, at first[k] and second[k]
         * of an extent of ext[k]. */
        static const int ext[7] = {1, 2, 5, 7, 12, 6, 9}, first[7] = {0, 0, 0, 0, 6, 1, 2}, second[7] = {0, 0, 3, 4, 10, 4, 7};
        MPI_Datatype memtype, part;
        long mcount = mem_kind >= 2 ? bytes / 2 : bytes, span = ext[mem_kind] * mcount;
        if (mem_kind == 0) {
            MPI_Type_contiguous(1, MPI_BYTE, &memtype);
        } else if (mem_kind == 1) {
            MPI_Type_create_resized(MPI_BYTE, 0, 2, &memtype);
        } else if (mem_kind == 2) {
            int bl[2] = {1, 1}, dp[2] = {0, 3};
            MPI_Type_indexed(2, bl, dp, MPI_BYTE, &part);
        } else if (mem_kind == 3) {
            /* A vector of a contiguous type: bytes 0 and 4. */
            MPI_Datatype one;
            MPI_Type_contiguous(1, MPI_BYTE, &one);
            MPI_Type_create_hvector(2, 1, 4, one, &part);
            MPI_Type_free(&one);
        } else if (mem_kind == 4) {
            /* Column 2 of rows 1-2 of a 3 x 4 array: bytes 6 and 10. */
            int sizes[2] = {3, 4}, sub[2] = {2, 1}, starts[2] = {1, 2};
            MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_C, MPI_BYTE, &part);
        } else if (mem_kind == 5) {
            /* Process 1 of 3's share of 6 bytes dealt cyclically: 1 and 4. */
            int g[1] = {6}, d[1] = {MPI_DISTRIBUTE_CYCLIC}, da[1] = {1}, ps[1] = {3};
            MPI_Type_create_darray(3, 1, 1, g, d, da, ps, MPI_ORDER_C, MPI_BYTE, &part);
        } else {
            /* A struct of a byte and a one-byte contiguous: bytes 2 and 7. */
            MPI_Datatype one;
            MPI_Type_contiguous(1, MPI_BYTE, &one);
            int bl[2] = {1, 1};
            MPI_Aint dp[2] = {2, 7};
            MPI_Datatype ty[2] = {MPI_BYTE, one};
            MPI_Type_create_struct(2, bl, dp, ty, &part);
            MPI_Type_free(&one);
        }
        if (mem_kind >= 2) {
            MPI_Type_create_resized(part, 0, ext[mem_kind], &memtype);
            MPI_Type_free(&part);
        }
        MPI_Type_commit(&memtype);
        unsigned char *buf = calloc(span + 1, 1), *back = calloc(span + 1, 1), *stream = malloc(bytes + 1);
        long *where = malloc(sizeof(long) * (bytes + 1));
        for (long i = 0; i < bytes; i++) {
            where[i] = mem_kind < 2 ? ext[mem_kind] * i : ext[mem_kind] * (i / 2) + (i % 2 ? second[mem_kind] : first[mem_kind]);
            stream[i] = (unsigned char)(rank * 31 + i * 7 + t);
            buf[where[i]] = stream[i];
        }

        check(MPI_File_set_view(fh, disp, MPI_BYTE, filetype, "native", info), "set_view");
        check(MPI_File_write_at_all(fh, 0, buf, (int)mcount, memtype, &st), "write_at_all");
        check(MPI_File_sync(fh), "sync");
        MPI_Barrier(MPI_COMM_WORLD);
        check(MPI_File_read_at_all(fh, 0, back, (int)mcount, memtype, &st), "read_at_all");
        for (long i = 0; i < bytes; i++) wrong += back[where[i]] != stream[i];
        /* Independently, into a contiguous buffer. */
        memset(back, 0, span + 1);
        check(MPI_File_read_at(fh, 0, back, (int)bytes, MPI_BYTE, &st), "read_at");
        for (long i = 0; i < bytes; i++) wrong += back[i] != stream[i];

        /* Everyone reads the whole region: the same bytes at every rank. */
        long region = (long)frame * (nested ? 2 : 1) * count;
        unsigned char *all = calloc(region + 1, 1);
        check(MPI_File_set_view(fh, disp, MPI_BYTE, MPI_BYTE, "native", info), "set_view region");
        check(MPI_File_read_at_all(fh, 0, all, (int)region, MPI_BYTE, &st), "read_at_all region");
        int got;
        MPI_Get_count(&st, MPI_BYTE, &got);
        /* What the region must hold: every rank's stream is known. */
        unsigned char *want = calloc(region + 1, 1);
        long *at = calloc(nprocs, sizeof(long)), pos = 0, end = 0;
        for (int f = 0; f < count * (nested ? 2 : 1); f++)
            for (int i = 0; i < nblocks; i++)
                for (int k = 0; k < all_len[i]; k++, pos++)
                    if (all_owner[i] < nprocs) {
                        long j = at[all_owner[i]]++;
                        want[pos] = (unsigned char)(all_owner[i] * 31 + j * 7 + t);
                        end = pos + 1;
                    }
        for (long i = 0; i < region; i++) wrong += all[i] != want[i];
        free(want);
        free(at);
        long long sum = sum_bytes(all, region), sum0 = sum, total;
        MPI_Bcast(&sum0, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
        if (sum != sum0) wrong++;
        long long mine_sum = sum_bytes(stream, bytes);
        MPI_Allreduce(&mine_sum, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        /* A read at the end of the file counts the bytes before it (the
         * region's last written byte ends the file: nothing follows yet). */
        if (rank == 0 && rep == 0)
            printf("trial %d: frame %d blocks %d nested %d count %d region %ld written to %ld read %d sum %lld streams %lld\n", t, frame, nblocks, nested, count, region, end, got, sum, total);
        free(all);
        free(buf);
        free(back);
        free(stream);
        free(where);
        MPI_Type_free(&memtype);
        MPI_Type_free(&filetype);
        MPI_Type_free(&tile);
        MPI_Type_free(&inner);
    }
    long all_wrong;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("wrong values %ld\n", all_wrong);
    check(MPI_File_close(&fh), "close");
    MPI_Finalize();
    return 0;
}
