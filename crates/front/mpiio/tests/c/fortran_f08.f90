! A Fortran 2008 program (use mpi_f08) that opens, writes and reads a file
! through MPI-IO, on weft: or local paths alike, and sets a file error
! handler made through the mpi_f08 module. Prints the bytes it read back
! and what the handler was called with.
! Usage: fortran_f08 PATH
module seen_by_f08_handler
  use mpi_f08
  implicit none
  type(MPI_File) :: seen_file
  integer :: seen_class = -1, calls = 0
contains
  ! A file error handler of the mpi_f08 module: the file as TYPE(MPI_File)
  ! and the code as INTEGER.
  subroutine on_error(file, code)
    type(MPI_File) :: file
    integer :: code
    seen_file = file
    call MPI_Error_class(code, seen_class)
    calls = calls + 1
  end subroutine on_error
end module seen_by_f08_handler

program weft_fortran_f08
  use mpi_f08
  use seen_by_f08_handler
  implicit none
  type(MPI_File) :: fh
  type(MPI_Errhandler) :: eh
  type(MPI_Status) :: status
  integer :: ierr, rank, nprocs, i, count
  integer(kind=MPI_OFFSET_KIND) :: offset
  integer :: buf(100), back(100)
  character(len=256) :: path
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  call get_command_argument(1, path)
  call MPI_File_open(MPI_COMM_WORLD, trim(path), MPI_MODE_CREATE + MPI_MODE_RDWR, MPI_INFO_NULL, fh, ierr)
  if (ierr /= MPI_SUCCESS) call MPI_Abort(MPI_COMM_WORLD, 2)
  do i = 1, 100
    buf(i) = rank * 1000 + i
  end do
  offset = rank * 400
  call MPI_File_write_at_all(fh, offset, buf, 100, MPI_INTEGER, status, ierr)
  if (ierr /= MPI_SUCCESS) call MPI_Abort(MPI_COMM_WORLD, 3)
  call MPI_File_sync(fh)
  call MPI_Barrier(MPI_COMM_WORLD)
  offset = mod(rank + 1, nprocs) * 400
  call MPI_File_read_at(fh, offset, back, 100, MPI_INTEGER, status, ierr)
  call MPI_Get_count(status, MPI_INTEGER, count)
  print '(A,I0,A,I0,A,I0,A,I0)', 'rank ', rank, ' count ', count, ' first ', back(1), ' last ', back(100)
  ! A handler made through mpi_f08 (IERROR left out), called on a bad offset.
  call MPI_File_create_errhandler(on_error, eh)
  call MPI_File_set_errhandler(fh, eh)
  call MPI_Errhandler_free(eh)
  offset = -1
  call MPI_File_read_at(fh, offset, back, 1, MPI_INTEGER, status, ierr)
  print '(A,I0,A,I0,A,L1)', 'rank ', rank, ' handler calls ', calls, ' class MPI_ERR_ARG ', seen_class == MPI_ERR_ARG
  ! MPICH's own MPI-IO passes the handler a C handle: checked on weft: only.
  if (path(1:5) == 'weft:') print '(A,I0,A,L1)', 'weft-only rank ', rank, ' handler got its file ', seen_file == fh
  call MPI_File_close(fh, ierr)
  if (ierr /= MPI_SUCCESS) call MPI_Abort(MPI_COMM_WORLD, 4)
  call MPI_Finalize()
end program weft_fortran_f08
