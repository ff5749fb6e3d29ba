//! The communicator that collective operations run over (DESIGN §3, floor
//! 7): rank, size and the few collectives they need, as a trait so the
//! client stays free of MPI. The MPI-IO library implements it with
//! `PMPI_*` calls on the file's duplicated communicator; unit tests can
//! implement it with threads.
//!
//! Every method is collective: all ranks of the communicator call it, in
//! the same order. A failure is an [`crate::Error::Comm`].

use crate::Result;

/// A group of processes that take part in collective file operations.
pub trait Communicator {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> usize;
    /// Number of processes.
    fn size(&self) -> usize;
    /// Returns once every rank has entered.
    fn barrier(&self) -> Result<()>;
    /// `root`'s `buf` lands in every rank's `buf`; all ranks pass the same length.
    fn broadcast(&self, buf: &mut [u8], root: usize) -> Result<()>;
    /// Every rank's `mine` (all of one length), concatenated in rank order.
    fn allgather(&self, mine: &[u8]) -> Result<Vec<u8>>;
}

/// Broadcasts a message whose length only `root` knows: the length first.
pub fn broadcast_vec(comm: &dyn Communicator, msg: &mut Vec<u8>, root: usize) -> Result<()> {
    let mut len = (msg.len() as u64).to_le_bytes();
    comm.broadcast(&mut len, root)?;
    msg.resize(u64::from_le_bytes(len) as usize, 0);
    comm.broadcast(msg, root)
}

/// Every rank's `u64`, in rank order.
pub fn allgather_u64(comm: &dyn Communicator, mine: u64) -> Result<Vec<u64>> {
    let all = comm.allgather(&mine.to_le_bytes())?;
    Ok(all.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk"))).collect())
}
