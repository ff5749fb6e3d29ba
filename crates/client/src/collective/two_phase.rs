//! Two-phase I/O (paper 000): the pieces of a collective call are
//! exchanged with a few aggregators, which read or write them as few large
//! list-I/O requests, one round of at most `cb_buffer_size` each at a time
//! (see [`super::plan`]), the next round's exchange overlapping the current
//! round's I/O. Data moves between ranks straight from and into the user's
//! buffers (`Communicator::alltoallv_iov`).

use super::plan::Domains;
use super::{aggregator_ranks, CollectiveHints};
use crate::comm::{exchange_counts, Communicator};
use crate::{Error, File, Result, Schedule};
use weft_layout::Segment;

/// Runs a helper thread's round with a panic turned into this round's
/// error: a scope whose thread panicked would panic again when the
/// exchange breaks off, and in the MPI-IO library a panic must not cross
/// into C.
fn contained<T>(round: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(round)).unwrap_or_else(|_| Err(Error::Comm("a collective round's I/O panicked".into())))
}

/// This rank's part of a two-phase write of `segments` from `buf`, in the
/// rounds of `d`. An aggregator writes round r in a helper thread while
/// the ranks exchange round r + 1 (double buffering); MPI is only called
/// from the caller's thread. The outer error is the communicator's (the
/// exchange broke off); the inner one this rank's outcome, for every rank
/// to agree on.
pub(super) fn write(file: &File, comm: &dyn Communicator, d: &Domains, segments: &[Segment], buf: &[u8], hints: &CollectiveHints) -> Result<Result<()>> {
    let (size, me) = (comm.size(), comm.rank());
    let agg_ranks = aggregator_ranks(hints, size);
    let my_agg = agg_ranks.contains(&me);
    let sched = &aggregator_schedule(file, &agg_ranks, me);
    let cells = d.split(segments);
    std::thread::scope(|s| -> Result<Result<()>> {
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
                writing = Some(s.spawn(move || contained(|| aggregate_write(file, &got, &got_counts, sched))));
            }
        }
        if let Some(h) = writing.take() {
            outcome = outcome.and(h.join().unwrap_or_else(|_| Err(Error::Comm("collective writer panicked".into()))));
        }
        Ok(outcome)
    })
}

/// This rank's part of a two-phase read into `segments` of `buf`: its
/// outcome (as for [`write`]) and whether the file ended inside one of its
/// aggregator's rounds.
pub(super) fn read(file: &File, comm: &dyn Communicator, d: &Domains, segments: &[Segment], buf: &mut [u8], hints: &CollectiveHints) -> Result<(Result<()>, bool)> {
    let (size, me) = (comm.size(), comm.rank());
    let agg_ranks = aggregator_ranks(hints, size);
    let my_agg = agg_ranks.contains(&me);
    let sched = &aggregator_schedule(file, &agg_ranks, me);
    let cells = d.split(segments);
    let round_bytes = d.round_bytes();
    let mut outcome = Ok(());
    let mut short = false;
    // Double buffering, as for writes: an aggregator reads round r in a
    // helper thread while the ranks exchange round r - 1's answers (MPI is
    // only called from the caller's thread).
    std::thread::scope(|s| -> Result<()> {
        let mut pending: Option<(usize, Option<std::thread::ScopedJoinHandle<'_, Result<Assembled>>>)> = None;
        for (i, row) in cells.iter().enumerate() {
            let heads = headers(row);
            let (got, got_counts) = exchange_scattered(comm, &scattered(size, &agg_ranks, row, None, &heads))?;
            let reading = (my_agg && outcome.is_ok()).then(|| {
                s.spawn(move || {
                    contained(|| {
                        let requests: Vec<&[u8]> = split_by(&got_counts).into_iter().map(|r| &got[r]).collect();
                        aggregate_read(file, &requests, round_bytes, sched)
                    })
                })
            });
            if let Some((j, h)) = pending.take() {
                answer_round(comm, buf, &agg_ranks, &cells[j], h, &mut outcome, &mut short)?;
            }
            pending = Some((i, reading));
        }
        if let Some((j, h)) = pending.take() {
            answer_round(comm, buf, &agg_ranks, &cells[j], h, &mut outcome, &mut short)?;
        }
        Ok(())
    })?;
    Ok((outcome, short))
}

/// The schedule of an aggregator (two-phase): its index among the
/// aggregators, who are the ones sending to the servers at once. (Colour
/// needs every sender's access; an aggregator's changes every round, so
/// colour orders like hash here.)
fn aggregator_schedule(file: &File, agg_ranks: &[usize], me: usize) -> Schedule {
    let index = agg_ranks.iter().position(|&r| r == me).unwrap_or(0);
    Schedule { rank: index as u32, group: agg_ranks.len().max(1) as u32, group_accesses: None, ..file.schedule().clone() }
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

/// An aggregator's read round: the assembled bytes, each rank's answer as
/// (position, length) parts of them, and whether the file ended inside.
type Assembled = (Vec<u8>, Vec<Vec<(usize, usize)>>, bool);

/// Sends round `row`'s answers once the aggregator's read of it (if this
/// rank aggregates) is done: slices of the assembled buffer that land in
/// the user's buffer, no copy on either side.
fn answer_round(
    comm: &dyn Communicator,
    buf: &mut [u8],
    agg_ranks: &[usize],
    row: &[Vec<Segment>],
    reading: Option<std::thread::ScopedJoinHandle<'_, Result<Assembled>>>,
    outcome: &mut Result<()>,
    short: &mut bool,
) -> Result<()> {
    let size = comm.size();
    let (mut asm, mut parts) = (Vec::new(), vec![Vec::new(); size]);
    if let Some(h) = reading {
        match h.join().unwrap_or_else(|_| Err(Error::Comm("collective reader panicked".into()))) {
            Ok((a, p, s)) => {
                (asm, parts) = (a, p);
                *short |= s;
            }
            Err(e) if outcome.is_ok() => *outcome = Err(e),
            Err(_) => {}
        }
    }
    let send: Vec<Vec<&[u8]>> = parts.iter().map(|ps: &Vec<(usize, usize)>| ps.iter().map(|&(p, l)| &asm[p..p + l]).collect()).collect();
    let send_counts: Vec<usize> = send.iter().map(|v| v.iter().map(|s| s.len()).sum()).collect();
    let recv_counts = exchange_counts(comm, &send_counts)?;
    let mut scratch = Vec::new();
    let mut recv = answer_slots(buf, agg_ranks, row, &recv_counts, &mut scratch, outcome);
    comm.alltoallv_iov(&send, &mut recv)
}

/// An aggregator's round of a read: read the union of the ranks' requests
/// as list I/O; returns the assembled bytes, each rank's answer as (position,
/// length) parts of them, and whether the file ended inside the union.
fn aggregate_read(file: &File, requests: &[&[u8]], max_round_bytes: u64, sched: &Schedule) -> Result<Assembled> {
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
    fn merged_runs_place_overlapping_pieces_once() {
        let mut p = vec![(10, 5), (0, 4), (12, 6), (4, 2), (30, 0)];
        let r = runs(&mut p);
        assert_eq!(r, [Segment { file: 0, mem: 0, len: 6 }, Segment { file: 10, mem: 6, len: 8 }]);
        assert_eq!(position(&r, 5), 5);
        assert_eq!(position(&r, 12), 8);
    }
}
