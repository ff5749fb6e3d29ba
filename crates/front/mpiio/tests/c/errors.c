/* Error classes and handlers on weft: files, beyond what the comparison
 * program covers (where the MPI libraries' own answers differ or are not
 * errors at all). Rank 0 prints one line per check: "name ok" or
 * "name FAILED ...". Usage: errors PATH (a weft: path) */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int rank, failures;

static void expect(const char *name, int rc, int want_class) {
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    int ok = cls == want_class, all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!all_ok) failures++;
    if (rank == 0) {
        if (all_ok) printf("%s ok\n", name);
        else printf("%s FAILED: class %d, wanted %d\n", name, cls, want_class);
    }
}

static int handler_calls;
static MPI_File handler_file;
static void handler(MPI_File *fh, int *code, ...) {
    handler_calls++;
    handler_file = *fh;
    (void)code;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *path = argv[1];
    MPI_File fh;
    char buf[64] = {0};
    MPI_Status st;

    /* Ranks disagreeing on the access mode. */
    int amode = rank == 0 ? MPI_MODE_CREATE | MPI_MODE_RDWR : MPI_MODE_CREATE | MPI_MODE_WRONLY;
    expect("not_same", MPI_File_open(MPI_COMM_WORLD, path, amode, MPI_INFO_NULL, &fh), MPI_ERR_NOT_SAME);
    expect("sequential", MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY | MPI_MODE_SEQUENTIAL, MPI_INFO_NULL, &fh), MPI_ERR_UNSUPPORTED_OPERATION);
    expect("bad_file", MPI_File_open(MPI_COMM_WORLD, "weft:relative/name", MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), MPI_ERR_BAD_FILE);

    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "striping_unit", "131072");
    MPI_Info_set(info, "weft_sched", "no-such-strategy");
    expect("open", MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh), MPI_SUCCESS);
    MPI_Info_free(&info);
    MPI_Info got;
    MPI_File_get_info(fh, &got);
    char val[MPI_MAX_INFO_VAL + 1] = "";
    int flag = 0;
    MPI_Info_get(got, "striping_unit", MPI_MAX_INFO_VAL, val, &flag);
    expect("striping_unit_reported", flag && strcmp(val, "131072") == 0 ? MPI_SUCCESS : MPI_ERR_OTHER, MPI_SUCCESS);
    MPI_Info_get(got, "weft_sched", MPI_MAX_INFO_VAL, val, &flag);
    expect("bad_hint_ignored", flag && strcmp(val, "no-such-strategy") != 0 ? MPI_SUCCESS : MPI_ERR_OTHER, MPI_SUCCESS);
    /* Every rank runs on this one host: one aggregator by default. */
    MPI_Info_get(got, "cb_nodes", MPI_MAX_INFO_VAL, val, &flag);
    expect("cb_nodes_one_per_node", flag && strcmp(val, "1") == 0 ? MPI_SUCCESS : MPI_ERR_OTHER, MPI_SUCCESS);
    MPI_Info_free(&got);

    expect("read_write_only", MPI_File_read_at(fh, 0, buf, 1, MPI_BYTE, &st), MPI_ERR_ACCESS);
    expect("external32", MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "external32", MPI_INFO_NULL), MPI_ERR_UNSUPPORTED_DATAREP);
    expect("negative_count", MPI_File_write_at(fh, 0, buf, -1, MPI_BYTE, &st), MPI_ERR_COUNT);
    expect("negative_offset", MPI_File_write_at(fh, -8, buf, 1, MPI_BYTE, &st), MPI_ERR_ARG);
    expect("bad_whence", MPI_File_seek(fh, 0, 12345), MPI_ERR_ARG);
    expect("seek_before_start", MPI_File_seek(fh, -1, MPI_SEEK_SET), MPI_ERR_ARG);
    expect("null_datatype", MPI_File_write_at(fh, 0, buf, 1, MPI_DATATYPE_NULL, &st), MPI_ERR_TYPE);
    MPI_Datatype three;
    MPI_Type_contiguous(3, MPI_BYTE, &three);
    MPI_Type_commit(&three);
    MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
    expect("partial_etype", MPI_File_write_at(fh, 0, buf, 1, three, &st), MPI_ERR_ARG);
    /* A collective call that fails on one rank only must not leave the
     * others waiting for it. */
    expect("ordered_one_rank_refused", MPI_File_write_ordered(fh, buf, rank == 0 ? -1 : 4, MPI_BYTE, &st), rank == 0 ? MPI_ERR_COUNT : MPI_SUCCESS);
    expect("set_view_one_rank_refused", MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, rank == 0 ? "external32" : "native", MPI_INFO_NULL), rank == 0 ? MPI_ERR_UNSUPPORTED_DATAREP : MPI_SUCCESS);
    expect("split_end_without_begin", MPI_File_write_all_end(fh, buf, &st), MPI_ERR_OTHER);

    /* A user handler is called with the Weft handle; call_errhandler too. */
    /* Handlers are reference-counted: the file keeps its own reference
     * (ours is freed at once), and get_errhandler hands out a new one
     * (freed too, as the standard allows). Before, the second free was a
     * double free that aborted at MPI_Finalize. */
    MPI_Errhandler eh;
    MPI_File_create_errhandler(handler, &eh);
    MPI_File_set_errhandler(fh, eh);
    MPI_Errhandler made = eh;
    MPI_Errhandler_free(&eh);
    MPI_File_write_at(fh, -8, buf, 1, MPI_INT, &st);
    MPI_File_call_errhandler(fh, MPI_ERR_OTHER);
    expect("user_handler_called", handler_calls == 2 && handler_file == fh ? MPI_SUCCESS : MPI_ERR_OTHER, MPI_SUCCESS);
    MPI_Errhandler back;
    MPI_File_get_errhandler(fh, &back);
    expect("get_errhandler", back == made ? MPI_SUCCESS : MPI_ERR_OTHER, MPI_SUCCESS);
    MPI_Errhandler_free(&back);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    MPI_Type_free(&three);
    expect("close", MPI_File_close(&fh), MPI_SUCCESS);

    /* DELETE_ON_CLOSE removes the file; a later open finds nothing. */
    expect("open_delete_on_close", MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL, &fh), MPI_SUCCESS);
    expect("close_deletes", MPI_File_close(&fh), MPI_SUCCESS);
    expect("deleted", MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), MPI_ERR_NO_SUCH_FILE);
    expect("delete_missing", MPI_File_delete(path, MPI_INFO_NULL), MPI_ERR_NO_SUCH_FILE);
    if (rank == 0) printf("failures %d\n", failures);
    MPI_Finalize();
    return 0;
}
