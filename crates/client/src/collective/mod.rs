//! Collective reads and writes (paper 000's two-phase I/O) over a
//! [`Communicator`]: every rank of the communicator calls with its own
//! pieces; the pieces are gathered at a few aggregators, which then issue
//! few large list-I/O requests, each to as few servers as the layout allows
//! (see [`plan`]). Reads are the mirror image.
//!
//! Whether to gather at all is decided like ROMIO's `automatic`: only when
//! the ranks' accesses interleave (some rank's range overlaps another's);
//! otherwise each rank's own list I/O is already as good. `enable` and
//! `disable` force either. Every rank reaches the same decision from the
//! same allgathered numbers.
//!
//! In atomic mode a collective call is one serializable operation: rank 0
//! gathers every rank's regions and takes one list lock for their union
//! before anyone moves data, and releases it after everyone is done.
//!
//! Data moves between ranks straight from and into the user's buffers
//! (`Communicator::alltoallv_iov`: MPI gathers and scatters the pieces).
//! Server-directed I/O (paper 001) is in [`server`]: no exchange at all.

pub mod plan;
mod server;
mod two_phase;

use crate::comm::{allgather_u64, exchange, Communicator};
use crate::{Error, File, LockGuard, Result, Schedule};
use plan::{interleaved, Domains};
use weft_layout::Segment;

/// `romio_cb_write` / `romio_cb_read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CbMode {
    Enable,
    Disable,
    Automatic,
}

impl CbMode {
    pub fn parse(v: &str) -> Option<Self> {
        match v {
            "enable" => Some(CbMode::Enable),
            "disable" => Some(CbMode::Disable),
            "automatic" => Some(CbMode::Automatic),
            _ => None,
        }
    }
}

/// Which algorithm a collective call uses (`weft_coll`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollMethod {
    /// Gather at aggregators (two-phase I/O).
    TwoPhase,
    /// Send each server its pieces; servers merge them (disk-directed I/O).
    Server,
    /// Every rank its own list I/O.
    Independent,
    /// Decided per call: see [`choose`].
    Auto,
}

impl CollMethod {
    pub fn parse(v: &str) -> Option<Self> {
        match v {
            "two_phase" => Some(CollMethod::TwoPhase),
            "server" => Some(CollMethod::Server),
            "independent" => Some(CollMethod::Independent),
            "auto" => Some(CollMethod::Auto),
            _ => None,
        }
    }

    const ALL: [CollMethod; 4] = [CollMethod::TwoPhase, CollMethod::Server, CollMethod::Independent, CollMethod::Auto];
}

/// Collective calls this process made, by the path they took: two-phase,
/// server-directed, each rank its own I/O (see [`calls_taken`]).
static TAKEN: [std::sync::atomic::AtomicU64; 3] = [const { std::sync::atomic::AtomicU64::new(0) }; 3];

fn took(path: CollMethod) {
    let k = match path {
        CollMethod::TwoPhase => 0,
        CollMethod::Server => 1,
        _ => 2,
    };
    TAKEN[k].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// How many of this process's collective reads and writes went two-phase,
/// server-directed and independent, so far (the MPI-IO library prints it
/// at close under `WEFT_COLL_REPORT`).
pub fn calls_taken() -> [u64; 3] {
    TAKEN.each_ref().map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
}

/// Default memory a server may hold for one server-directed collective.
pub const DEFAULT_SERVER_WINDOW: u64 = 64 << 20;

/// The hints collective I/O reads.
#[derive(Debug, Clone)]
pub struct CollectiveHints {
    /// Aggregators (`cb_nodes`); capped by the number of ranks.
    pub cb_nodes: usize,
    /// Bytes one aggregator handles per round (`cb_buffer_size`).
    pub cb_buffer_size: u64,
    pub mode: CbMode,
    /// Which node each rank runs on (any value naming the host), so that
    /// aggregators go to different nodes first; empty: every rank its own.
    pub node_of_rank: Vec<u64>,
    /// `weft_coll`.
    pub method: CollMethod,
    /// Bytes a server holds of one server-directed collective at once
    /// (`weft_coll_server_window`).
    pub server_window: u64,
    /// A call in which every rank's bytes are one range, apart from the
    /// others', and at most this many, is each rank's own I/O whatever the
    /// algorithm asked for (see [`small_and_apart`]); 0: never. The MPI-IO
    /// library sets it to what a rank holds of small writes, or reads
    /// ahead of small reads.
    pub small_alone: u64,
}

impl Default for CollectiveHints {
    fn default() -> Self {
        CollectiveHints { cb_nodes: 1, cb_buffer_size: 16 << 20, mode: CbMode::Automatic, node_of_rank: Vec::new(), method: CollMethod::Auto, server_window: DEFAULT_SERVER_WINDOW, small_alone: 0 }
    }
}

/// What a collective call does, from the agreed hints and every rank's
/// range: `weft_coll` when it names an algorithm; under `auto`,
/// `romio_cb_write`/`romio_cb_read` `enable` asks for collective buffering
/// (two-phase) and `disable` for none (independent), as in ROMIO; under
/// `automatic`, interleaved accesses go server-directed and the others
/// independent (each rank's list I/O is then already one request per
/// server). docs/collective.md gives the measurements behind the rule:
/// server-directed beat two-phase and both MPI libraries' collective I/O
/// on BTIO and coll_perf alike.
pub fn choose(hints: &CollectiveHints, ranges: &[(u64, u64)]) -> CollMethod {
    match (hints.method, hints.mode) {
        (CollMethod::Auto, CbMode::Enable) => CollMethod::TwoPhase,
        (CollMethod::Auto, CbMode::Disable) => CollMethod::Independent,
        (CollMethod::Auto, CbMode::Automatic) if interleaved(ranges) => CollMethod::Server,
        (CollMethod::Auto, CbMode::Automatic) => CollMethod::Independent,
        (m, _) => m,
    }
}

/// Whether every rank's access is one range (its bytes fill it), apart
/// from every other rank's, and at most `small_alone` bytes: nothing to
/// merge, and each rank's small I/O is held (writes) or read ahead (reads)
/// across calls, which no algorithm can beat: ior-hard's collective calls
/// of one 47,008-byte record per rank took 2-9x as long forced through
/// server-directed or two-phase I/O (docs/benchmarks.md).
pub fn small_and_apart(hints: &CollectiveHints, all: &[(u64, u64, u64)]) -> bool {
    let ranges: Vec<(u64, u64)> = all.iter().map(|&(lo, hi, _)| (lo, hi)).collect();
    hints.small_alone > 0 && all.iter().all(|&(lo, hi, bytes)| bytes <= hints.small_alone && hi.saturating_sub(lo) == bytes) && !interleaved(&ranges)
}

/// The ranks that aggregate, `cb_nodes` of them: the first rank of each
/// node, then the second of each, and so on (ROMIO places them alike).
pub fn aggregator_ranks(hints: &CollectiveHints, size: usize) -> Vec<usize> {
    if size == 0 {
        return Vec::new();
    }
    let want = hints.cb_nodes.clamp(1, size);
    if hints.node_of_rank.len() != size {
        return (0..want).collect();
    }
    // Ranks grouped by node, nodes in order of their first rank.
    let mut nodes: Vec<(u64, Vec<usize>)> = Vec::new();
    for (r, &n) in hints.node_of_rank.iter().enumerate() {
        match nodes.iter_mut().find(|(id, _)| *id == n) {
            Some((_, ranks)) => ranks.push(r),
            None => nodes.push((n, vec![r])),
        }
    }
    let mut out = Vec::with_capacity(want);
    for depth in 0.. {
        for (_, ranks) in &nodes {
            if let Some(&r) = ranks.get(depth) {
                out.push(r);
                if out.len() == want {
                    return out;
                }
            }
        }
    }
    out
}

/// What the ranks tell each other first: their range and byte count, and
/// what must be the same everywhere, taken from rank 0 (hints may differ
/// between ranks, and atomic mode is on if any rank has it on), so that
/// every rank plans the same rounds and takes the same steps.
struct Agreed {
    extents: Vec<(u64, u64, u64)>,
    hints: CollectiveHints,
    atomic: bool,
}

/// Bytes of each rank's row in the first allgather.
const ROW: usize = 80;

fn agree_first(comm: &dyn Communicator, file: &File, segments: &[Segment], hints: &CollectiveHints) -> Result<Agreed> {
    let lo = segments.iter().filter(|s| s.len > 0).map(|s| s.file).min().unwrap_or(0);
    let hi = segments.iter().filter(|s| s.len > 0).map(|s| s.file + s.len).max().unwrap_or(0);
    let bytes: u64 = segments.iter().map(|s| s.len).sum();
    let mode = match hints.mode {
        CbMode::Enable => 0,
        CbMode::Disable => 1,
        CbMode::Automatic => 2,
    };
    let method = CollMethod::ALL.iter().position(|&m| m == hints.method).unwrap_or(3) as u64;
    let mut mine = Vec::with_capacity(ROW);
    for v in [lo, hi, bytes, hints.cb_nodes as u64, hints.cb_buffer_size, mode, u64::from(file.atomicity()), method, hints.server_window, hints.small_alone] {
        mine.extend_from_slice(&v.to_le_bytes());
    }
    let all = comm.allgather(&mine)?;
    let word = |c: &[u8], i: usize| u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let rows: Vec<&[u8]> = all.chunks_exact(ROW).collect();
    let r0 = rows[0];
    let hints = CollectiveHints {
        cb_nodes: word(r0, 3).min(comm.size() as u64).max(1) as usize,
        // A buffer too large for one exchange is cut to what MPI's counts allow.
        cb_buffer_size: word(r0, 4).clamp(1, 1 << 30),
        mode: [CbMode::Enable, CbMode::Disable, CbMode::Automatic][word(r0, 5).min(2) as usize],
        node_of_rank: hints.node_of_rank.clone(),
        method: CollMethod::ALL[word(r0, 7).min(3) as usize],
        server_window: word(r0, 8).clamp(1, weft_wire::msg::coll::MAX_WINDOW),
        small_alone: word(r0, 9),
    };
    Ok(Agreed { extents: rows.iter().map(|c| (word(c, 0), word(c, 1), word(c, 2))).collect(), hints, atomic: rows.iter().any(|c| word(c, 6) != 0) })
}

/// Whether the agreed hints and ranges pick server-directed I/O.
fn server_directed(hints: &CollectiveHints, all: &[(u64, u64, u64)]) -> bool {
    let ranges: Vec<(u64, u64)> = all.iter().map(|&(lo, hi, _)| (lo, hi)).collect();
    !small_and_apart(hints, all) && choose(hints, &ranges) == CollMethod::Server
}

/// The plan, or `None` when each rank should do its own I/O.
fn plan(file: &File, comm: &dyn Communicator, all: &[(u64, u64, u64)], hints: &CollectiveHints) -> Option<Domains> {
    let ranges: Vec<(u64, u64)> = all.iter().map(|&(lo, hi, _)| (lo, hi)).collect();
    let gather = !small_and_apart(hints, all) && choose(hints, &ranges) == CollMethod::TwoPhase;
    let used: Vec<&(u64, u64)> = ranges.iter().filter(|(lo, hi)| hi > lo).collect();
    if !gather || used.is_empty() {
        return None;
    }
    let lo = used.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = used.iter().map(|r| r.1).max().unwrap_or(0);
    let aggregators = hints.cb_nodes.clamp(1, comm.size());
    Some(Domains::new(lo, hi, file.stripe_size(), aggregators, hints.cb_buffer_size))
}

/// Agrees on the outcome: every rank fails if one did (its own error, or a
/// note naming the failing rank).
fn agree(comm: &dyn Communicator, mine: Result<()>) -> Result<()> {
    let oks = allgather_u64(comm, u64::from(mine.is_ok()))?;
    mine?;
    match oks.iter().position(|&ok| ok == 0) {
        Some(r) => Err(Error::Comm(format!("collective I/O failed at rank {r}"))),
        None => Ok(()),
    }
}

/// In atomic mode, rank 0 takes one lock over the union of every rank's
/// regions (what it returns); every rank learns whether it got it.
fn union_lock(file: &File, comm: &dyn Communicator, segments: &[Segment], exclusive: bool, atomic: bool) -> Result<Option<LockGuard>> {
    if !atomic {
        return Ok(None);
    }
    // This rank's regions, adjacent ones joined, to rank 0.
    let mut regions: Vec<(u64, u64)> = Vec::new();
    for s in segments.iter().filter(|s| s.len > 0) {
        match regions.last_mut() {
            Some((o, l)) if *o + *l == s.file => *l += s.len,
            _ => regions.push((s.file, s.len)),
        }
    }
    let mut send: Vec<u8> = Vec::with_capacity(16 * regions.len());
    for (o, l) in &regions {
        send.extend_from_slice(&o.to_le_bytes());
        send.extend_from_slice(&l.to_le_bytes());
    }
    let mut counts = vec![0; comm.size()];
    counts[0] = send.len();
    let (got, _) = exchange(comm, &send, &counts)?;
    let mine = if comm.rank() == 0 {
        let all: Vec<(u64, u64)> = got.chunks_exact(16).map(|c| (u64::from_le_bytes(c[..8].try_into().expect("8")), u64::from_le_bytes(c[8..].try_into().expect("8")))).collect();
        file.lock_regions(exclusive, &all)
    } else {
        Ok(None)
    };
    let ok = allgather_u64(comm, u64::from(mine.is_ok()))?;
    if ok[0] == 0 {
        return Err(mine.err().unwrap_or_else(|| Error::Comm("rank 0 could not lock the collective's regions".into())));
    }
    mine
}

/// After every rank is done (the first agreement), rank 0 releases the
/// union lock, and every rank learns whether that worked (the second), so
/// all ranks leave with the same outcome and take the same steps.
fn union_unlock(comm: &dyn Communicator, guard: Option<LockGuard>, atomic: bool, outcome: Result<()>) -> Result<()> {
    let outcome = agree(comm, outcome);
    if !atomic {
        return outcome;
    }
    let released = guard.map_or(Ok(()), LockGuard::release);
    let released = agree(comm, released);
    outcome.and(released)
}

/// This rank's segments if they are valid (no offset past 2^63, every
/// piece inside the buffer); otherwise none, and the error it returns once
/// the others are done: a refused rank still takes part, moving nothing,
/// so that no one waits for it, and every rank then fails alike.
fn admit(segments: &[Segment], buf_len: usize) -> (&[Segment], Result<()>) {
    let bad = segments.iter().find(|s| {
        s.file.checked_add(s.len).is_none_or(|end| end > i64::MAX as u64) || usize::try_from(s.len).ok().and_then(|l| s.mem.checked_add(l)).is_none_or(|end| end > buf_len)
    });
    match bad {
        Some(s) => (&[], Err(Error::BadRequest(format!("collective access of {} bytes at file offset {} (buffer offset {}) is out of range", s.len, s.file, s.mem)))),
        None => (segments, Ok(())),
    }
}

/// The schedule (paper 000's heuristics) of a rank doing its own I/O in a
/// collective call: the file's strategy and block, with the rank and size
/// of the communicator (not the job's world rank from the environment,
/// wrong for sub-communicators and for threads as ranks), and every
/// rank's access range for the colour strategy.
fn every_rank_schedule(file: &File, comm: &dyn Communicator, all: &[(u64, u64, u64)]) -> Schedule {
    let sched = file.schedule();
    // Colour needs each rank's access as one range: only when every
    // rank's is contiguous (its bytes fill its range); else hash's order.
    let contiguous = all.iter().all(|&(lo, hi, bytes)| hi.saturating_sub(lo) == bytes);
    let accesses = (sched.strategy == crate::Strategy::Colour && contiguous).then(|| std::sync::Arc::new(all.iter().map(|&(lo, hi, _)| (lo, hi.saturating_sub(lo))).collect::<Vec<_>>()));
    Schedule { rank: comm.rank() as u32, group: comm.size().max(1) as u32, group_accesses: accesses, ..sched.clone() }
}

/// Collective write of this rank's `segments` from `buf`; returns its bytes.
/// An aggregator writes round r in a helper thread while the ranks
/// exchange round r + 1 (double buffering); MPI is only called from the
/// caller's thread.
pub fn write_all(file: &File, comm: &dyn Communicator, segments: &[Segment], buf: &[u8], hints: &CollectiveHints) -> Result<u64> {
    // Whichever rank's handle moves the bytes, each rank's close reports
    // that its file changed.
    file.note_write();
    let (segments, refused) = admit(segments, buf.len());
    let Agreed { extents: all, hints, atomic } = agree_first(comm, file, segments, hints)?;
    let hints = &hints;
    let guard = union_lock(file, comm, segments, true, atomic)?;
    let mine: u64 = all[comm.rank()].2;
    let plan = plan(file, comm, &all, hints);
    let to_servers = server_directed(hints, &all);
    // Writes this rank holds (`File::set_write_behind`) land before the
    // collective's: another rank may write this rank's bytes for it. A rank
    // doing its own I/O keeps holding: its bytes stay its own to send.
    let alone = plan.is_none() && !to_servers;
    let refused = if alone { refused } else { refused.and(file.flush_writes()) };
    if to_servers {
        took(CollMethod::Server);
        let own = server::write(file, comm, segments, buf, hints);
        union_unlock(comm, guard, atomic, refused.and(own))?;
        return Ok(mine);
    }
    let Some(d) = plan else {
        took(CollMethod::Independent);
        let own = file.write_own_pieces_unlocked(segments, buf, &every_rank_schedule(file, comm, &all), atomic).map(|_| ());
        union_unlock(comm, guard, atomic, refused.and(own))?;
        return Ok(mine);
    };
    took(CollMethod::TwoPhase);
    let outcome = two_phase::write(file, comm, &d, segments, buf, hints)?;
    union_unlock(comm, guard, atomic, refused.and(outcome))?;
    Ok(mine)
}

/// Collective read into this rank's `segments` of `buf`; returns the bytes
/// of its stream before the end of the file.
pub fn read_all(file: &File, comm: &dyn Communicator, segments: &[Segment], buf: &mut [u8], hints: &CollectiveHints) -> Result<u64> {
    // This rank's held writes land first: the read must see them, whoever
    // reads its bytes for it.
    let flushed = file.flush_writes();
    let (segments, refused) = admit(segments, buf.len());
    let refused = refused.and(flushed);
    let Agreed { extents: all, hints, atomic } = agree_first(comm, file, segments, hints)?;
    let hints = &hints;
    let guard = union_lock(file, comm, segments, false, atomic)?;
    if server_directed(hints, &all) {
        took(CollMethod::Server);
        let own = server::read(file, comm, segments, buf, hints);
        let n = own.as_ref().map_or(0, |&n| n);
        union_unlock(comm, guard, atomic, refused.and(own.map(|_| ())))?;
        return Ok(n);
    }
    let Some(d) = plan(file, comm, &all, hints) else {
        took(CollMethod::Independent);
        let own = file.read_own_pieces_unlocked(segments.to_vec(), buf, &every_rank_schedule(file, comm, &all), atomic);
        let n = own.as_ref().map_or(0, |&n| n as u64);
        union_unlock(comm, guard, atomic, refused.and(own.map(|_| ())))?;
        return Ok(n);
    };
    let me = comm.rank();
    took(CollMethod::TwoPhase);
    let (outcome, short) = two_phase::read(file, comm, &d, segments, buf, hints)?;
    union_unlock(comm, guard, atomic, refused.and(outcome))?;
    // Somewhere the file ended inside the access: count this rank's bytes
    // before the end, as an independent read would.
    let any_short = allgather_u64(comm, u64::from(short))?.contains(&1);
    if !any_short {
        return Ok(all[me].2);
    }
    // Rank 0 asks; u64::MAX tells the others it could not.
    let size = if me == 0 { file.size() } else { Ok(0) };
    let mut size_le = size.as_ref().map_or(u64::MAX, |&s| s).to_le_bytes();
    comm.broadcast(&mut size_le, 0)?;
    let eof = match u64::from_le_bytes(size_le) {
        u64::MAX => return Err(size.err().unwrap_or_else(|| Error::Comm("rank 0 could not get the file's size".into()))),
        v => v,
    };
    Ok(crate::file::bytes_before(segments, eof))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_contiguous_accesses_apart_go_alone_whatever_the_hint() {
        let h = CollectiveHints { method: CollMethod::Server, small_alone: 100, ..Default::default() };
        // (lo, hi, bytes): ior-hard's records, one per rank.
        let records = [(0, 100, 100), (100, 200, 100), (200, 300, 100)];
        assert!(small_and_apart(&h, &records));
        // One rank's bytes do not fill its range (a strided view): merged.
        assert!(!small_and_apart(&h, &[(0, 100, 50), (100, 200, 100)]));
        // Ranges that overlap: merged.
        assert!(!small_and_apart(&h, &[(0, 150, 100), (100, 200, 100)]));
        // A rank over the limit: merged.
        assert!(!small_and_apart(&h, &[(0, 101, 101), (200, 300, 100)]));
        // Off.
        assert!(!small_and_apart(&CollectiveHints { small_alone: 0, ..h.clone() }, &records));
        // Ranks with nothing: still alone.
        assert!(small_and_apart(&h, &[(0, 0, 0), (5, 5, 0), (0, 100, 100)]));
    }

    #[test]
    fn aggregators_go_to_different_nodes_first() {
        let h = |cb_nodes, nodes: Vec<u64>| CollectiveHints { cb_nodes, cb_buffer_size: 1, mode: CbMode::Enable, node_of_rank: nodes, ..Default::default() };
        // Ranks 0-3 on node 7, ranks 4-7 on node 9.
        let two_nodes = vec![7, 7, 7, 7, 9, 9, 9, 9];
        assert_eq!(aggregator_ranks(&h(2, two_nodes.clone()), 8), [0, 4]);
        assert_eq!(aggregator_ranks(&h(3, two_nodes.clone()), 8), [0, 4, 1]);
        assert_eq!(aggregator_ranks(&h(1, two_nodes), 8), [0]);
        assert_eq!(aggregator_ranks(&h(20, vec![1, 2, 1]), 3), [0, 1, 2]);
        assert_eq!(aggregator_ranks(&h(2, Vec::new()), 4), [0, 1]);
    }
}
