! A Fortran program (use mpi) that opens, writes and reads a file through
! MPI-IO, on weft: or local paths alike. Prints the bytes it read back, and
! what a Fortran error handler was called with.
! Usage: fortran PATH
module seen_by_handler
  implicit none
  integer :: seen_file = -1, seen_class = -1, calls = 0
end module seen_by_handler

! A file error handler: Fortran arguments (the file's Fortran handle and
! the error code, both INTEGER by reference).
subroutine on_error(file, code)
  use mpi
  use seen_by_handler
  implicit none
  integer :: file, code, ierr
  seen_file = file
  call MPI_Error_class(code, seen_class, ierr)
  calls = calls + 1
end subroutine on_error

program weft_fortran
  use mpi
  use seen_by_handler
  implicit none
  external :: on_error
  integer :: eh, request
  integer :: ierr, rank, nprocs, fh, i
  integer :: status(MPI_STATUS_SIZE)
  integer(kind=MPI_OFFSET_KIND) :: offset, fsize
  integer :: buf(100), back(100), count
  character(len=256) :: path
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  call get_command_argument(1, path)
  call MPI_File_open(MPI_COMM_WORLD, trim(path), MPI_MODE_CREATE + MPI_MODE_RDWR, MPI_INFO_NULL, fh, ierr)
  if (ierr /= MPI_SUCCESS) call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
  do i = 1, 100
    buf(i) = rank * 1000 + i
  end do
  offset = rank * 400
  call MPI_File_write_at_all(fh, offset, buf, 100, MPI_INTEGER, status, ierr)
  if (ierr /= MPI_SUCCESS) call MPI_Abort(MPI_COMM_WORLD, 3, ierr)
  call MPI_File_sync(fh, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  offset = mod(rank + 1, nprocs) * 400
  call MPI_File_read_at(fh, offset, back, 100, MPI_INTEGER, status, ierr)
  call MPI_Get_count(status, MPI_INTEGER, count, ierr)
  call MPI_File_get_size(fh, fsize, ierr)
  print '(A,I0,A,I0,A,I0,A,I0,A,I0)', 'rank ', rank, ' count ', count, ' first ', back(1), ' last ', back(100), ' size ', fsize
  ! Every rank has its size before any rank writes past it.
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  ! A nonblocking write and read, completed by Fortran's MPI_WAIT.
  offset = nprocs * 400 + rank * 40
  call MPI_File_iwrite_at(fh, offset, buf, 10, MPI_INTEGER, request, ierr)
  call MPI_Wait(request, status, ierr)
  call MPI_Get_count(status, MPI_INTEGER, count, ierr)
  call MPI_File_iread_at(fh, offset, back, 10, MPI_INTEGER, request, ierr)
  call MPI_Wait(request, status, ierr)
  print '(A,I0,A,I0,A,L1,A,L1)', 'rank ', rank, ' nonblocking count ', count, ' read back ', all(back(1:10) == buf(1:10)), &
    ' request null ', request == MPI_REQUEST_NULL
  call MPI_File_create_errhandler(on_error, eh, ierr)
  call MPI_File_set_errhandler(fh, eh, ierr)
  call MPI_Errhandler_free(eh, ierr)
  offset = -1
  call MPI_File_read_at(fh, offset, back, 1, MPI_INTEGER, status, ierr)
  print '(A,I0,A,I0,A,L1)', 'rank ', rank, ' handler calls ', calls, ' class MPI_ERR_ARG ', seen_class == MPI_ERR_ARG
  ! MPICH's own MPI-IO passes the handler a C handle: checked on weft: only.
  if (path(1:5) == 'weft:') print '(A,I0,A,L1)', 'weft-only rank ', rank, ' handler got its file ', seen_file == fh
  call MPI_File_close(fh, ierr)
  if (ierr /= MPI_SUCCESS) call MPI_Abort(MPI_COMM_WORLD, 4, ierr)
  call MPI_Finalize(ierr)
end program weft_fortran
