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

use crate::comm::{allgather_u64, exchange, exchange_counts, Communicator};
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
}

impl Default for CollectiveHints {
    fn default() -> Self {
        CollectiveHints { cb_nodes: 1, cb_buffer_size: 16 << 20, mode: CbMode::Automatic, node_of_rank: Vec::new(), method: CollMethod::Auto, server_window: DEFAULT_SERVER_WINDOW }
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
const ROW: usize = 72;

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
    for v in [lo, hi, bytes, hints.cb_nodes as u64, hints.cb_buffer_size, mode, u64::from(file.atomicity()), method, hints.server_window] {
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
    };
    Ok(Agreed { extents: rows.iter().map(|c| (word(c, 0), word(c, 1), word(c, 2))).collect(), hints, atomic: rows.iter().any(|c| word(c, 6) != 0) })
}

/// Whether the agreed hints and ranges pick server-directed I/O.
fn server_directed(hints: &CollectiveHints, all: &[(u64, u64, u64)]) -> bool {
    let ranges: Vec<(u64, u64)> = all.iter().map(|&(lo, hi, _)| (lo, hi)).collect();
    choose(hints, &ranges) == CollMethod::Server
}

/// The plan, or `None` when each rank should do its own I/O.
fn plan(file: &File, comm: &dyn Communicator, all: &[(u64, u64, u64)], hints: &CollectiveHints) -> Option<Domains> {
    let ranges: Vec<(u64, u64)> = all.iter().map(|&(lo, hi, _)| (lo, hi)).collect();
    let gather = choose(hints, &ranges) == CollMethod::TwoPhase;
    let used: Vec<&(u64, u64)> = ranges.iter().filter(|(lo, hi)| hi > lo).collect();
    if !gather || used.is_empty() {
        return None;
    }
    let lo = used.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = used.iter().map(|r| r.1).max().unwrap_or(0);
    let aggregators = hints.cb_nodes.clamp(1, comm.size());
    Some(Domains::new(lo, hi, file.stripe_size(), aggregators, hints.cb_buffer_size))
}

/// Appends a message header to `m`: `n u64 | (file u64, len u64) * n`
/// (a write's message then carries the pieces' bytes).
fn encode_pieces(m: &mut Vec<u8>, pieces: &[Segment]) {
    m.extend_from_slice(&(pieces.len() as u64).to_le_bytes());
    for p in pieces {
        m.extend_from_slice(&p.file.to_le_bytes());
        m.extend_from_slice(&p.len.to_le_bytes());
    }
}

/// A round's messages, one per aggregator rank, without copying data:
/// `send[r]` is the header of rank r's aggregator's pieces, then, for a
/// write, the pieces' bytes as slices of the user's buffer.
fn scattered<'a>(size: usize, agg_ranks: &[usize], row: &[Vec<Segment>], data: Option<&'a [u8]>, headers: &'a [Vec<u8>]) -> Vec<Vec<&'a [u8]>> {
    let mut send: Vec<Vec<&[u8]>> = vec![Vec::new(); size];
    for (a, &r) in agg_ranks.iter().enumerate() {
        assert!(send[r].is_empty(), "aggregator ranks are distinct");
        send[r].push(&headers[a]);
        if let Some(buf) = data {
            send[r].extend(row[a].iter().map(|p| &buf[p.mem..p.mem + p.len as usize]));
        }
    }
    send
}

/// Sends each rank its slices (sizes first, see [`exchange_counts`]);
/// returns what every rank sent here, in rank order, and how much each sent.
fn exchange_scattered(comm: &dyn Communicator, send: &[Vec<&[u8]>]) -> Result<(Vec<u8>, Vec<usize>)> {
    let counts: Vec<usize> = send.iter().map(|v| v.iter().map(|s| s.len()).sum()).collect();
    let got_counts = exchange_counts(comm, &counts)?;
    let mut got = vec![0u8; got_counts.iter().sum()];
    comm.alltoallv_iov(send, &mut split_counts(&mut got, &got_counts))?;
    Ok((got, got_counts))
}

/// Each aggregator's header: `n u64 | (file u64, len u64) * n`.
fn headers(row: &[Vec<Segment>]) -> Vec<Vec<u8>> {
    row.iter()
        .map(|pieces| {
            let mut m = Vec::with_capacity(8 + 16 * pieces.len());
            encode_pieces(&mut m, pieces);
            m
        })
        .collect()
}

/// Splits `buf` into one slice per count, in order.
fn split_counts<'a>(mut buf: &'a mut [u8], counts: &[usize]) -> Vec<Vec<&'a mut [u8]>> {
    counts
        .iter()
        .map(|&c| {
            let (head, tail) = std::mem::take(&mut buf).split_at_mut(c);
            buf = tail;
            vec![head]
        })
        .collect()
}

/// Where each sender's message lies in a received buffer.
fn split_by(counts: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut at = 0;
    counts.iter().map(|&c| { let r = at..at + c; at += c; r }).collect()
}

/// (file offset, length) pieces of a message, and where its data starts.
fn decode_pieces(m: &[u8]) -> Result<(Vec<(u64, u64)>, usize)> {
    let bad = || Error::Comm("malformed collective message".into());
    let word = |at: usize| m.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).ok_or_else(bad);
    let n = usize::try_from(word(0)?).map_err(|_| bad())?;
    let end = n.checked_mul(16).and_then(|b| b.checked_add(8)).filter(|&e| e <= m.len()).ok_or_else(bad)?;
    let pieces = (0..n).map(|i| Ok((word(8 + 16 * i)?, word(16 + 16 * i)?))).collect::<Result<Vec<_>>>()?;
    Ok((pieces, end))
}

/// Sorted, merged file runs covering `pieces`, each with its offset in one
/// assembled buffer: what an aggregator sends to the servers.
fn runs(pieces: &mut [(u64, u64)]) -> Vec<Segment> {
    pieces.sort_unstable();
    let mut out: Vec<Segment> = Vec::new();
    let mut at = 0usize;
    for &(file, len) in pieces.iter().filter(|p| p.1 > 0) {
        match out.last_mut() {
            Some(last) if file <= last.file + last.len => {
                let end = (file + len).max(last.file + last.len);
                at += (end - (last.file + last.len)) as usize;
                last.len = end - last.file;
            }
            _ => {
                out.push(Segment { file, mem: at, len });
                at += len as usize;
            }
        }
    }
    out
}

/// Where file byte `file` sits in the assembled buffer of `runs`.
fn position(runs: &[Segment], file: u64) -> usize {
    let i = runs.partition_point(|r| r.file + r.len <= file);
    runs[i].mem + (file - runs[i].file) as usize
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
    let accesses: Vec<(u64, u64)> = all.iter().map(|&(lo, hi, _)| (lo, hi.saturating_sub(lo))).collect();
    Schedule { rank: comm.rank() as u32, group: comm.size().max(1) as u32, group_accesses: Some(std::sync::Arc::new(accesses)), ..file.schedule().clone() }
}

/// The schedule of an aggregator (two-phase): its index among the
/// aggregators, who are the ones sending to the servers at once. (Colour
/// needs every sender's access; an aggregator's changes every round, so
/// colour orders like hash here.)
fn aggregator_schedule(file: &File, agg_ranks: &[usize], me: usize) -> Schedule {
    let index = agg_ranks.iter().position(|&r| r == me).unwrap_or(0);
    Schedule { rank: index as u32, group: agg_ranks.len().max(1) as u32, group_accesses: None, ..file.schedule().clone() }
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
    if server_directed(hints, &all) {
        let own = server::write(file, comm, segments, buf, hints);
        union_unlock(comm, guard, atomic, refused.and(own))?;
        return Ok(mine);
    }
    let Some(d) = plan(file, comm, &all, hints) else {
        let own = file.write_pieces_unlocked(segments, buf, &every_rank_schedule(file, comm, &all)).map(|_| ());
        union_unlock(comm, guard, atomic, refused.and(own))?;
        return Ok(mine);
    };
    let (size, me) = (comm.size(), comm.rank());
    let agg_ranks = aggregator_ranks(hints, size);
    let my_agg = agg_ranks.contains(&me);
    let sched = &aggregator_schedule(file, &agg_ranks, me);
    let cells = d.split(segments);
    let outcome = std::thread::scope(|s| -> Result<Result<()>> {
        let mut outcome = Ok(());
        let mut writing: Option<std::thread::ScopedJoinHandle<'_, Result<()>>> = None;
        for row in &cells {
            // Headers and data in one message per aggregator, the data
            // gathered from the user's buffer by the exchange itself.
            let heads = headers(row);
            let (got, got_counts) = exchange_scattered(comm, &scattered(size, &agg_ranks, row, Some(buf), &heads))?;
            if let Some(h) = writing.take() {
                outcome = outcome.and(h.join().unwrap_or_else(|_| Err(Error::Comm("collective writer panicked".into()))));
            }
            if my_agg && outcome.is_ok() {
                writing = Some(s.spawn(move || aggregate_write(file, &got, &got_counts, sched)));
            }
        }
        if let Some(h) = writing.take() {
            outcome = outcome.and(h.join().unwrap_or_else(|_| Err(Error::Comm("collective writer panicked".into()))));
        }
        Ok(outcome)
    })?;
    union_unlock(comm, guard, atomic, refused.and(outcome))?;
    Ok(mine)
}

/// An aggregator's round of a write: every rank's pieces, written as list
/// I/O straight from the received buffer (no assembly copy).
fn aggregate_write(file: &File, got: &[u8], counts: &[usize], sched: &Schedule) -> Result<()> {
    let mut segs: Vec<Segment> = Vec::new();
    for r in split_by(counts).into_iter().filter(|r| !r.is_empty()) {
        let (pieces, data) = decode_pieces(&got[r.clone()])?;
        let mut at = r.start + data;
        for (file_off, len) in pieces {
            let end = usize::try_from(len).ok().and_then(|l| at.checked_add(l));
            if end.is_none_or(|e| e > r.end) || file_off.checked_add(len).is_none() {
                return Err(Error::Comm("collective message shorter than its pieces".into()));
            }
            if len > 0 {
                segs.push(Segment { file: file_off, mem: at, len });
            }
            at += len as usize;
        }
    }
    // In file order, so that list I/O sees runs; ranks' pieces do not
    // overlap unless the program wrote a byte twice (undefined in MPI).
    segs.sort_unstable_by_key(|s| s.file);
    if !segs.is_empty() {
        file.write_pieces_unlocked(&segs, got, sched)?;
    }
    Ok(())
}

/// Collective read into this rank's `segments` of `buf`; returns the bytes
/// of its stream before the end of the file.
pub fn read_all(file: &File, comm: &dyn Communicator, segments: &[Segment], buf: &mut [u8], hints: &CollectiveHints) -> Result<u64> {
    let (segments, refused) = admit(segments, buf.len());
    let Agreed { extents: all, hints, atomic } = agree_first(comm, file, segments, hints)?;
    let hints = &hints;
    let guard = union_lock(file, comm, segments, false, atomic)?;
    if server_directed(hints, &all) {
        let own = server::read(file, comm, segments, buf, hints);
        let n = own.as_ref().map_or(0, |&n| n);
        union_unlock(comm, guard, atomic, refused.and(own.map(|_| ())))?;
        return Ok(n);
    }
    let Some(d) = plan(file, comm, &all, hints) else {
        let own = file.read_pieces_unlocked(segments.to_vec(), buf, &every_rank_schedule(file, comm, &all));
        let n = own.as_ref().map_or(0, |&n| n as u64);
        union_unlock(comm, guard, atomic, refused.and(own.map(|_| ())))?;
        return Ok(n);
    };
    let (size, me) = (comm.size(), comm.rank());
    let agg_ranks = aggregator_ranks(hints, size);
    let my_agg = agg_ranks.contains(&me);
    let sched = aggregator_schedule(file, &agg_ranks, me);
    let cells = d.split(segments);
    let mut outcome = Ok(());
    let mut short = false;
    for row in &cells {
        let heads = headers(row);
        let (got, got_counts) = exchange_scattered(comm, &scattered(size, &agg_ranks, row, None, &heads))?;
        let requests: Vec<&[u8]> = split_by(&got_counts).into_iter().map(|r| &got[r]).collect();
        let mut asm = Vec::new();
        let mut parts: Vec<Vec<(usize, usize)>> = vec![Vec::new(); size];
        if my_agg && outcome.is_ok() {
            match aggregate_read(file, &requests, d.round_bytes(), &sched) {
                Ok((a, p, s)) => {
                    (asm, parts) = (a, p);
                    short |= s;
                }
                Err(e) => outcome = Err(e),
            }
        }
        // Answers go out as slices of the assembled buffer and land in the
        // user's buffer: no copy on either side.
        let send: Vec<Vec<&[u8]>> = parts.iter().map(|ps| ps.iter().map(|&(p, l)| &asm[p..p + l]).collect()).collect();
        let send_counts: Vec<usize> = send.iter().map(|v| v.iter().map(|s| s.len()).sum()).collect();
        let recv_counts = exchange_counts(comm, &send_counts)?;
        let mut scratch = Vec::new();
        let mut recv = answer_slots(buf, &agg_ranks, row, &recv_counts, &mut scratch, &mut outcome);
        comm.alltoallv_iov(&send, &mut recv)?;
    }
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

/// An aggregator's round of a read: read the union of the ranks' requests
/// as list I/O; returns the assembled bytes, each rank's answer as (position,
/// length) parts of them, and whether the file ended inside the union.
#[allow(clippy::type_complexity)]
fn aggregate_read(file: &File, requests: &[&[u8]], max_round_bytes: u64, sched: &Schedule) -> Result<(Vec<u8>, Vec<Vec<(usize, usize)>>, bool)> {
    let mut all: Vec<(u64, u64)> = Vec::new();
    let mut per_rank = Vec::with_capacity(requests.len());
    for m in requests {
        let pieces = if m.is_empty() { Vec::new() } else { decode_pieces(m)?.0 };
        all.extend(pieces.iter().copied());
        per_rank.push(pieces);
    }
    if all.iter().any(|&(o, l)| o.checked_add(l).is_none()) {
        return Err(Error::Comm("collective read request past the largest offset".into()));
    }
    let runs = runs(&mut all);
    let total = runs.last().map_or(0, |r| r.mem + r.len as usize);
    // The union of one round's requests lies in this aggregator's domain for
    // the round, at most cb_buffer_size (or one stripe) bytes: more means
    // malformed requests, not a buffer to allocate.
    if total as u64 > max_round_bytes {
        return Err(Error::Comm(format!("collective read requests of {total} bytes exceed the round's {max_round_bytes}")));
    }
    let mut asm = vec![0u8; total];
    let got = if runs.is_empty() { 0 } else { file.read_pieces_unlocked(runs.clone(), &mut asm, sched)? };
    let parts = per_rank.iter().map(|pieces| pieces.iter().filter(|p| p.1 > 0).map(|&(off, len)| (position(&runs, off), len as usize)).collect()).collect();
    Ok((asm, parts, got < total))
}

/// Where each aggregator's answer lands in a read round: straight in the
/// user's buffer when it holds exactly the bytes this rank asked for (the
/// pieces, in order), else in `scratch` (an aggregator that failed sends
/// nothing: the outcome records it). Pieces whose memory overlaps cannot
/// all land in place: then everything goes to scratch, as an error.
fn answer_slots<'a>(buf: &'a mut [u8], agg_ranks: &[usize], row: &[Vec<Segment>], counts: &[usize], scratch: &'a mut Vec<u8>, outcome: &mut Result<()>) -> Vec<Vec<&'a mut [u8]>> {
    let size = counts.len();
    let mut in_place = vec![false; size];
    let mut places: Vec<(usize, usize, usize, usize)> = Vec::new();
    for (a, &r) in agg_ranks.iter().enumerate() {
        let want: usize = row[a].iter().map(|p| p.len as usize).sum();
        if counts[r] == want {
            in_place[r] = true;
            places.extend(row[a].iter().enumerate().filter(|(_, p)| p.len > 0).map(|(k, p)| (p.mem, p.len as usize, r, k)));
        } else if outcome.is_ok() {
            *outcome = Err(Error::Comm(format!("collective read: aggregator rank {r} answered {} bytes, {want} asked", counts[r])));
        }
    }
    places.sort_unstable();
    if places.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
        in_place = vec![false; size];
        if outcome.is_ok() {
            *outcome = Err(Error::Comm("collective read into overlapping memory".into()));
        }
    }
    let elsewhere: usize = (0..size).filter(|&r| !in_place[r]).map(|r| counts[r]).sum();
    scratch.resize(elsewhere, 0);
    let mut recv: Vec<Vec<&mut [u8]>> = (0..size).map(|_| Vec::new()).collect();
    let mut spare: &mut [u8] = scratch;
    for r in (0..size).filter(|&r| !in_place[r]) {
        let (head, tail) = std::mem::take(&mut spare).split_at_mut(counts[r]);
        recv[r].push(head);
        spare = tail;
    }
    // Disjoint pieces of `buf`, front to back, then put in each
    // aggregator's piece order.
    let mut slots: Vec<Vec<Option<&mut [u8]>>> = (0..size).map(|_| Vec::new()).collect();
    for (a, &r) in agg_ranks.iter().enumerate() {
        if in_place[r] {
            slots[r] = (0..row[a].len()).map(|_| None).collect();
        }
    }
    let mut rest: &mut [u8] = buf;
    let mut at = 0;
    for &(mem, len, r, k) in places.iter().filter(|p| in_place[p.2]) {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(mem - at);
        let (piece, tail) = tail.split_at_mut(len);
        slots[r][k] = Some(piece);
        rest = tail;
        at = mem + len;
    }
    for r in (0..size).filter(|&r| in_place[r]) {
        recv[r] = std::mem::take(&mut slots[r]).into_iter().flatten().collect();
    }
    recv
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn merged_runs_place_overlapping_pieces_once() {
        let mut p = vec![(10, 5), (0, 4), (12, 6), (4, 2), (30, 0)];
        let r = runs(&mut p);
        assert_eq!(r, [Segment { file: 0, mem: 0, len: 6 }, Segment { file: 10, mem: 6, len: 8 }]);
        assert_eq!(position(&r, 5), 5);
        assert_eq!(position(&r, 12), 8);
    }
}
