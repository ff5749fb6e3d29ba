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
    /// Personalized all-to-all: `send` holds `send_counts[r]` bytes for each
    /// rank r in rank order; returns what every rank sent to this one,
    /// concatenated in rank order (`recv_counts[r]` bytes from rank r).
    fn alltoallv(&self, send: &[u8], send_counts: &[usize], recv_counts: &[usize]) -> Result<Vec<u8>>;
    /// Personalized all-to-all between scattered buffers: `send[r]` are the
    /// slices for rank r, sent back to back; `recv[r]` the slices rank r's
    /// bytes fill, back to back (their total is what r sends here). This
    /// default stages through one buffer each way; the MPI-IO library
    /// moves the slices in place (`MPI_Alltoallw` over hindexed types).
    fn alltoallv_iov(&self, send: &[Vec<&[u8]>], recv: &mut [Vec<&mut [u8]>]) -> Result<()> {
        let send_counts: Vec<usize> = send.iter().map(|v| v.iter().map(|s| s.len()).sum()).collect();
        let recv_counts: Vec<usize> = recv.iter().map(|v| v.iter().map(|s| s.len()).sum()).collect();
        let mut flat = Vec::with_capacity(send_counts.iter().sum());
        for s in send.iter().flatten() {
            flat.extend_from_slice(s);
        }
        let got = self.alltoallv(&flat, &send_counts, &recv_counts)?;
        let mut at = 0;
        for s in recv.iter_mut().flatten() {
            s.copy_from_slice(&got[at..at + s.len()]);
            at += s.len();
        }
        Ok(())
    }

    /// Every rank's `mine`, of any length, in rank order (`MPI_Allgatherv`:
    /// the lengths first, then every message padded to the longest).
    fn allgatherv(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let lens = self.allgather(&(mine.len() as u64).to_le_bytes())?;
        let lens: Vec<usize> = lens.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize).collect();
        let longest = lens.iter().copied().max().unwrap_or(0);
        if longest.checked_mul(self.size()).is_none_or(|t| t > MAX_EXCHANGE) {
            return Err(crate::Error::Comm(format!("allgatherv of {longest} bytes per rank is too large")));
        }
        let mut padded = mine.to_vec();
        padded.resize(longest, 0);
        let all = self.allgather(&padded)?;
        Ok(lens.iter().enumerate().map(|(r, &l)| all[r * longest..r * longest + l].to_vec()).collect())
    }

    /// Combines every rank's `mine` (all of one length) element by element
    /// with `op`; `root` gets the result, the others `None` (`MPI_Reduce`).
    fn reduce_u64(&self, mine: &[u64], op: ReduceOp, root: usize) -> Result<Option<Vec<u64>>> {
        // The counts first, so that every rank refuses alike if they differ
        // (in MPI that is erroneous, and unchecked).
        let counts = self.allgather(&(mine.len() as u64).to_le_bytes())?;
        if counts.chunks_exact(8).any(|c| c != (mine.len() as u64).to_le_bytes()) {
            return Err(crate::Error::Comm("reduce: the ranks gave different numbers of values".into()));
        }
        let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
        let all = self.allgather(&bytes)?;
        if self.rank() != root {
            return Ok(None);
        }
        let rows: Vec<Vec<u64>> = all.chunks_exact(bytes.len().max(1)).map(|c| c.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).collect()).collect();
        let combine = |a: u64, b: u64| match op {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        };
        Ok(Some((0..mine.len()).map(|i| rows.iter().map(|r| r[i]).reduce(combine).unwrap_or(0)).collect()))
    }
}

/// How [`Communicator::reduce_u64`] combines the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
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
    Ok(allgather_u64s(comm, [mine])?.into_iter().map(|[v]| v).collect())
}

/// Every rank's `N` `u64`s, in rank order, in one allgather.
pub fn allgather_u64s<const N: usize>(comm: &dyn Communicator, mine: [u64; N]) -> Result<Vec<[u64; N]>> {
    let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
    let all = comm.allgather(&bytes)?;
    Ok(all.chunks_exact(8 * N).map(|rank| std::array::from_fn(|i| u64::from_le_bytes(rank[8 * i..8 * i + 8].try_into().expect("8-byte chunk")))).collect())
}

/// Sends `send_counts[r]` bytes of `send` (in rank order) to each rank r;
/// returns what every rank sent here, concatenated in rank order, and how
/// many bytes came from each. Sizes are exchanged first, so neither side
/// need know the other's.
///
/// MPI counts are ints: if any rank would send or receive more than
/// [`MAX_EXCHANGE`] bytes, every rank returns the same error instead of one
/// rank giving up inside the exchange while the others wait.
pub fn exchange(comm: &dyn Communicator, send: &[u8], send_counts: &[usize]) -> Result<(Vec<u8>, Vec<usize>)> {
    let recv_counts = exchange_counts(comm, send_counts)?;
    let all = comm.alltoallv(send, send_counts, &recv_counts)?;
    Ok((all, recv_counts))
}

/// The first step of [`exchange`]: every rank learns how many bytes each
/// rank will send it, and all fail alike if any step would be too large.
pub fn exchange_counts(comm: &dyn Communicator, send_counts: &[usize]) -> Result<Vec<usize>> {
    let n = comm.size();
    let sizes: Vec<u8> = send_counts.iter().flat_map(|&c| (c as u64).to_le_bytes()).collect();
    let got = comm.alltoallv(&sizes, &vec![8; n], &vec![8; n])?;
    let recv_counts: Vec<usize> = got.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize).collect();
    let fits = |counts: &[usize]| counts.iter().try_fold(0usize, |a, &c| a.checked_add(c)).is_some_and(|t| t <= MAX_EXCHANGE);
    let ok = allgather_u64(comm, u64::from(fits(send_counts) && fits(&recv_counts)))?;
    if let Some(r) = ok.iter().position(|&v| v == 0) {
        return Err(crate::Error::Comm(format!("collective exchange too large at rank {r} (over {MAX_EXCHANGE} bytes in one step): lower cb_buffer_size")));
    }
    Ok(recv_counts)
}

/// Most bytes one rank sends or receives in one exchange step (MPI's int counts).
pub const MAX_EXCHANGE: usize = i32::MAX as usize;

/// A communicator of threads in one process, for tests of collective
/// operations without MPI: `ThreadComm::group(n)` gives one per thread.
pub struct ThreadComm {
    rank: usize,
    shared: std::sync::Arc<ThreadShared>,
}

struct ThreadShared {
    size: usize,
    barrier: std::sync::Barrier,
    /// Per rank: what it sent to each rank in the current step.
    slots: std::sync::Mutex<Vec<Vec<Vec<u8>>>>,
}

impl ThreadComm {
    pub fn group(size: usize) -> Vec<ThreadComm> {
        let shared = std::sync::Arc::new(ThreadShared { size, barrier: std::sync::Barrier::new(size), slots: std::sync::Mutex::new(vec![Vec::new(); size]) });
        (0..size).map(|rank| ThreadComm { rank, shared: shared.clone() }).collect()
    }

    /// One step: every rank posts `to[r]` for each rank r, then takes what
    /// every rank posted for it, in rank order.
    fn step(&self, to: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        self.shared.slots.lock().expect("slots")[self.rank] = to;
        self.shared.barrier.wait();
        let got = self.shared.slots.lock().expect("slots").iter().map(|from| from.get(self.rank).cloned().unwrap_or_default()).collect();
        self.shared.barrier.wait();
        got
    }
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.shared.size
    }
    fn barrier(&self) -> Result<()> {
        self.shared.barrier.wait();
        Ok(())
    }
    fn broadcast(&self, buf: &mut [u8], root: usize) -> Result<()> {
        let to = if self.rank == root { vec![buf.to_vec(); self.size()] } else { Vec::new() };
        let got = self.step(to);
        buf.copy_from_slice(&got[root]);
        Ok(())
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<u8>> {
        Ok(self.step(vec![mine.to_vec(); self.size()]).concat())
    }
    fn alltoallv(&self, send: &[u8], send_counts: &[usize], recv_counts: &[usize]) -> Result<Vec<u8>> {
        let mut at = 0;
        let to = send_counts.iter().map(|&c| {
            let part = send[at..at + c].to_vec();
            at += c;
            part
        });
        let got = self.step(to.collect());
        // As MPI does, a count that does not match what was sent is an error.
        if let Some(r) = (0..got.len()).find(|&r| got[r].len() != recv_counts[r]) {
            return Err(crate::Error::Comm(format!("alltoallv: rank {r} sent {} bytes, {} expected", got[r].len(), recv_counts[r])));
        }
        Ok(got.concat())
    }
    /// One copy into each destination's message and one out of it, as a
    /// staged MPI exchange would do (the default trait method adds a third).
    fn alltoallv_iov(&self, send: &[Vec<&[u8]>], recv: &mut [Vec<&mut [u8]>]) -> Result<()> {
        let to: Vec<Vec<u8>> = send.iter().map(|v| v.concat()).collect();
        let got = self.step(to);
        for (r, (from, slots)) in got.iter().zip(recv.iter_mut()).enumerate() {
            let want: usize = slots.iter().map(|s| s.len()).sum();
            if from.len() != want {
                return Err(crate::Error::Comm(format!("alltoallv: rank {r} sent {} bytes, {want} expected", from.len())));
            }
            let mut at = 0;
            for s in slots.iter_mut() {
                s.copy_from_slice(&from[at..at + s.len()]);
                at += s.len();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on `n` thread ranks; their results in rank order.
    fn on_threads<T: Send>(n: usize, f: impl Fn(&ThreadComm) -> T + Sync) -> Vec<T> {
        let comms = ThreadComm::group(n);
        std::thread::scope(|s| {
            let hs: Vec<_> = comms.iter().map(|c| { let f = &f; s.spawn(move || f(c)) }).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn allgatherv_gathers_messages_of_every_length() {
        let got = on_threads(4, |c| c.allgatherv(&vec![c.rank() as u8; c.rank() * 3]).unwrap());
        let want: Vec<Vec<u8>> = (0..4).map(|r| vec![r as u8; r * 3]).collect();
        assert!(got.iter().all(|g| *g == want), "{got:?}");
    }

    #[test]
    fn reduce_combines_at_the_root_only() {
        let got = on_threads(3, |c| {
            let r = c.rank() as u64;
            [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min].map(|op| c.reduce_u64(&[r, 10 - r], op, 1).unwrap())
        });
        assert_eq!(got[1], [Some(vec![3, 27]), Some(vec![2, 10]), Some(vec![0, 8])]);
        assert!(got[0].iter().chain(&got[2]).all(Option::is_none));
        // Different numbers of values: every rank refuses, none panics.
        let got = on_threads(3, |c| c.reduce_u64(&vec![1; c.rank() + 1], ReduceOp::Sum, 2).is_err());
        assert_eq!(got, [true; 3]);
    }
}
