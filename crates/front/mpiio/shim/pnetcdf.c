/* PnetCDF 1.12's ncmpi_open first asks ncmpi_inq_file_format for the
 * file's format, which reads the header with POSIX open() on the name with
 * its "prefix:" removed, a path that does not exist for a weft: file. For
 * weft: names this definition reads the header through MPI-IO instead;
 * every other name goes to PnetCDF's own function. (Defined in every
 * build; it is only ever called by programs that use PnetCDF.) */
#include "shim.h"
#include <string.h>

/* PnetCDF's values (pnetcdf.h), so that this file needs no PnetCDF headers. */
#define NC_NOERR 0
#define NC_ENOTNC (-51)
#define NC_EFILE (-204)
#define NC_ENOENT (-220)
#define NC_EACCESS (-208)
#define NC_FORMAT_UNKNOWN (-1)

int ncmpi_inq_file_format(const char *filename, int *formatp) {
    if (!filename || strncmp(filename, "weft:", 5) != 0) {
        static __typeof__(&ncmpi_inq_file_format) next_;
        if (!next_) next_ = (__typeof__(&ncmpi_inq_file_format))weft_next("ncmpi_inq_file_format");
        return next_(filename, formatp);
    }
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_SELF, filename, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
        int cls;
        PMPI_Error_class(rc, &cls);
        return cls == MPI_ERR_NO_SUCH_FILE ? NC_ENOENT : cls == MPI_ERR_ACCESS ? NC_EACCESS : NC_EFILE;
    }
    unsigned char magic[8] = {0};
    MPI_Status st;
    rc = MPI_File_read_at(fh, 0, magic, sizeof magic, MPI_BYTE, &st);
    MPI_File_close(&fh);
    if (rc != MPI_SUCCESS) return NC_EFILE;
    int format = NC_FORMAT_UNKNOWN;
    if (memcmp(magic, "CDF", 3) == 0 && (magic[3] == 1 || magic[3] == 2 || magic[3] == 5)) format = magic[3];
    else if (memcmp(magic, "\x89HDF\r\n\x1a\n", 8) == 0) format = 3; /* NC_FORMAT_NETCDF4 */
    if (formatp) *formatp = format;
    return format == NC_FORMAT_UNKNOWN ? NC_ENOTNC : NC_NOERR;
}
