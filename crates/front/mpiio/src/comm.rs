//! The file's communicator as C callbacks: the shim implements each with a
//! `PMPI_*` collective on the communicator it duplicated at open.

use std::ffi::{c_int, c_void};
use weft_client::{Communicator, Error, Result};

/// Callbacks over one duplicated communicator; each returns 0 or an MPI
/// error code.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CComm {
    pub ctx: *mut c_void,
    pub rank: c_int,
    pub size: c_int,
    pub barrier: extern "C" fn(ctx: *mut c_void) -> c_int,
    pub bcast: extern "C" fn(ctx: *mut c_void, buf: *mut c_void, len: i64, root: c_int) -> c_int,
    /// `recv` holds `size * len` bytes.
    pub allgather: extern "C" fn(ctx: *mut c_void, send: *const c_void, len: i64, recv: *mut c_void) -> c_int,
    /// Counts are per rank, in bytes; `recv` holds their sum.
    pub alltoallv: extern "C" fn(ctx: *mut c_void, send: *const c_void, send_counts: *const i64, recv: *mut c_void, recv_counts: *const i64) -> c_int,
    /// Per rank `send_n[r]` (address, length) pairs in `send_segs`, sent
    /// back to back; likewise received into `recv_segs`.
    pub alltoallv_iov: extern "C" fn(ctx: *mut c_void, send_segs: *const i64, send_n: *const i64, recv_segs: *const i64, recv_n: *const i64) -> c_int,
}

// SAFETY: `ctx` is the shim's per-file communicator record, which lives
// until the file is closed and is used only through these callbacks; MPI
// lets any thread call collectives on it (the program's thread level is
// the program's contract with MPI, as with any MPI call).
unsafe impl Send for CComm {}
// SAFETY: shared between threads only inside an open file
// (`registry::Shared`), and called by one thread at a time: by the file's
// nonblocking worker for the collectives posted to it (one job at a time,
// and only when the program has MPI_THREAD_MULTIPLE), or by a call of the
// program holding the file's write lock, which first lets the worker run
// everything posted (`ffi::settled`: every call that may take collective
// steps does). Posting and independent accesses never call them.
unsafe impl Sync for CComm {}

fn check(what: &str, rc: c_int) -> Result<()> {
    if rc == 0 { Ok(()) } else { Err(Error::Comm(format!("{what} failed with MPI error {rc}"))) }
}

impl Communicator for CComm {
    fn rank(&self) -> usize {
        self.rank as usize
    }
    fn size(&self) -> usize {
        self.size as usize
    }
    fn barrier(&self) -> Result<()> {
        check("MPI_Barrier", (self.barrier)(self.ctx))
    }
    fn broadcast(&self, buf: &mut [u8], root: usize) -> Result<()> {
        check("MPI_Bcast", (self.bcast)(self.ctx, buf.as_mut_ptr().cast(), buf.len() as i64, root as c_int))
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<u8>> {
        let mut all = vec![0u8; mine.len() * self.size()];
        check("MPI_Allgather", (self.allgather)(self.ctx, mine.as_ptr().cast(), mine.len() as i64, all.as_mut_ptr().cast()))?;
        Ok(all)
    }
    fn alltoallv(&self, send: &[u8], send_counts: &[usize], recv_counts: &[usize]) -> Result<Vec<u8>> {
        let n = self.size();
        if send_counts.len() != n || recv_counts.len() != n || send_counts.iter().sum::<usize>() != send.len() {
            return Err(Error::Comm("alltoallv counts do not match the communicator".into()));
        }
        let sc: Vec<i64> = send_counts.iter().map(|&c| c as i64).collect();
        let rc: Vec<i64> = recv_counts.iter().map(|&c| c as i64).collect();
        let mut all = vec![0u8; recv_counts.iter().sum()];
        check("MPI_Alltoallv", (self.alltoallv)(self.ctx, send.as_ptr().cast(), sc.as_ptr(), all.as_mut_ptr().cast(), rc.as_ptr()))?;
        Ok(all)
    }
    /// MPI gathers and scatters the slices itself (`MPI_Alltoallw` over
    /// hindexed types): no staging copy either way.
    fn alltoallv_iov(&self, send: &[Vec<&[u8]>], recv: &mut [Vec<&mut [u8]>]) -> Result<()> {
        let n = self.size();
        if send.len() != n || recv.len() != n {
            return Err(Error::Comm("alltoallv_iov lists do not match the communicator".into()));
        }
        // Empty slices are left out: MPI gets no zero-length blocks.
        let send_segs: Vec<i64> = send.iter().flatten().filter(|s| !s.is_empty()).flat_map(|s| [s.as_ptr() as i64, s.len() as i64]).collect();
        let send_n: Vec<i64> = send.iter().map(|v| v.iter().filter(|s| !s.is_empty()).count() as i64).collect();
        let recv_segs: Vec<i64> = recv.iter_mut().flatten().filter(|s| !s.is_empty()).flat_map(|s| [s.as_mut_ptr() as i64, s.len() as i64]).collect();
        let recv_n: Vec<i64> = recv.iter().map(|v| v.iter().filter(|s| !s.is_empty()).count() as i64).collect();
        check("MPI_Alltoallw", (self.alltoallv_iov)(self.ctx, send_segs.as_ptr(), send_n.as_ptr(), recv_segs.as_ptr(), recv_n.as_ptr()))
    }
}
