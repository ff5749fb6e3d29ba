//! Server-directed collective I/O (paper 001's disk-directed I/O): no data
//! moves between ranks. Every rank sends each data server it touches its
//! own pieces there (with their bytes, for a write), tagged with the
//! collective's id; each server waits for all of its members, merges and
//! sorts their pieces by object offset, and performs them as few large
//! disk operations in object order (the server side is
//! `weft_services::server::collectives`).
//!
//! One allgather agrees on the collective's id (rank 0's) and on which
//! ranks touch which server (a bitmap per rank): a server waits only for
//! the ranks that have pieces there. A server holds at most `window` bytes
//! of one collective at once: each rank sends a server at most
//! `window / participants` bytes per round, and its next round only after
//! the server answered the last. A rank that fails tells every server it
//! touches that it abandons the collective, so the others fail at once
//! instead of waiting for the server's timeout.
//!
//! A collective request the server may have taken is not sent again by
//! the recovery layer (a server that restarted knows none of its members'
//! pieces; one never sent, refused at connect, is), so a server going
//! away during one (killed, restarting) is ridden through here: every
//! rank learns whether any met that, and then all try the whole
//! collective again under a new id, until it goes through or the client's
//! recovery window passes (as rank 0 counts it, so all decide alike). Its
//! writes are of the same bytes at the same offsets, its reads read again,
//! so a part that landed the first time is written or read as it was.

use super::CollectiveHints;
use crate::comm::{allgather_u64, Communicator};
use crate::file::Chunk;
use crate::{File, Result};
use std::time::{Duration, Instant};
use weft_layout::Segment;
use weft_wire::limits::{MAX_BODY_LEN, MAX_PAYLOAD_LEN};
use weft_wire::{CollTag, DataReq, Request};

/// Most pieces in one collective request: its body must stay within
/// [`MAX_BODY_LEN`] even if no two pieces compact into one strided run
/// (28 bytes each).
const MOST_PIECES: usize = (MAX_BODY_LEN as usize - 128) / 28;

/// What every rank agreed on, and this rank's requests in rounds.
struct Agreed<'f> {
    id: u64,
    window: u64,
    /// Per server: (participants, this rank's index among them).
    members: Vec<(u32, u32)>,
    /// Per server: this rank's requests, one per round.
    rounds: Vec<Vec<Chunk>>,
    file: &'f File,
}

fn agree<'f>(file: &'f File, comm: &dyn Communicator, segments: &[Segment], hints: &CollectiveHints) -> Result<Agreed<'f>> {
    let servers = file.stripe_count();
    let window = hints.server_window.clamp(1, weft_wire::msg::coll::MAX_WINDOW);
    // Which servers this rank touches, and the id if it is rank 0. A rank
    // whose access is refused still takes part, touching nothing, so that
    // no server waits for it; it returns its error after the allgather.
    let planned = file.plan_capped(segments, u64::from(MAX_PAYLOAD_LEN), MOST_PIECES);
    let touched = planned.as_deref().unwrap_or(&[]);
    let id = if comm.rank() == 0 { fresh_id() } else { 0 };
    let map_len = servers.div_ceil(8);
    let mut mine = vec![0u8; 8 + map_len];
    mine[..8].copy_from_slice(&id.to_le_bytes());
    for c in touched {
        mine[8 + c.server / 8] |= 1 << (c.server % 8);
    }
    let all = comm.allgather(&mine)?;
    let touched = planned?;
    let rows: Vec<&[u8]> = all.chunks_exact(8 + map_len).collect();
    let id = u64::from_le_bytes(rows[0][..8].try_into().expect("8 bytes"));
    let has = |row: &[u8], s: usize| row[8 + s / 8] & (1 << (s % 8)) != 0;
    let me = comm.rank();
    let members: Vec<(u32, u32)> = (0..servers)
        .map(|s| {
            let participants = rows.iter().filter(|r| has(r, s)).count() as u32;
            let index = rows[..me].iter().filter(|r| has(r, s)).count() as u32;
            (participants, index)
        })
        .collect();
    // A round's size: the smallest share among this rank's servers.
    let block = touched.iter().map(|c| window.div_ceil(u64::from(members[c.server].0.max(1)))).min().unwrap_or(1).clamp(1, u64::from(MAX_PAYLOAD_LEN));
    // Cannot fail: the same segments passed the same checks above.
    let chunks = if block >= u64::from(MAX_PAYLOAD_LEN) { touched } else { file.plan_capped(segments, block, MOST_PIECES)? };
    let mut rounds: Vec<Vec<Chunk>> = (0..servers).map(|_| Vec::new()).collect();
    // `plan` gives chunks in file order, so each server's rounds go
    // forward through its object.
    for c in chunks {
        rounds[c.server].push(c);
    }
    Ok(Agreed { id, window, members, rounds, file })
}

/// A collective id no other collective on the file is likely to share.
fn fresh_id() -> u64 {
    crate::random_u64()
}

impl Agreed<'_> {
    fn tag(&self, server: usize, round: usize, abandon: bool) -> CollTag {
        let (participants, member) = self.members[server];
        let last = round + 1 >= self.rounds[server].len();
        CollTag { id: self.id, participants, member, round: round as u32, window: self.window, last, abandon }
    }

    fn rounds(&self) -> usize {
        self.rounds.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// This round's requests: (server, chunk, body).
    fn round(&self, r: usize, write: bool) -> Result<(Vec<&Chunk>, Vec<Vec<u8>>)> {
        let file = self.file.id();
        let cap = self.file.capability()?;
        let mut chunks = Vec::new();
        let mut bodies = Vec::new();
        for (s, rounds) in self.rounds.iter().enumerate() {
            if let Some(c) = rounds.get(r) {
                let (tag, pieces) = (self.tag(s, r, false), c.pieces.clone());
                let op = if write { DataReq::CollWrite { file, tag, pieces } } else { DataReq::CollRead { file, tag, pieces } };
                chunks.push(c);
                bodies.push(Request::data(cap, op).encode());
            }
        }
        Ok((chunks, bodies))
    }

    /// Tells every server this rank had round `from_round` or later for
    /// that it gives up (best effort: the answers are not needed). A server
    /// whose round went through is told too: its collective may still
    /// wait for this rank's later rounds, or be done (then nothing happens).
    fn abandon(&self, from_round: usize) {
        let file = self.file.id();
        // Without a capability the servers time the collective out instead.
        let Ok(cap) = self.file.capability() else { return };
        let bodies: Vec<(usize, Vec<u8>)> = (0..self.rounds.len())
            .filter(|&s| self.rounds[s].len() > from_round)
            .map(|s| (s, Request::data(cap, DataReq::CollWrite { file, tag: self.tag(s, from_round, true), pieces: Vec::new() }).encode()))
            .collect();
        self.file.notify_servers(bodies);
    }
}

/// Runs `attempt` (one whole collective) on every rank, again while any
/// rank's failed because a server went away that it may wait for
/// (`went_away`: one it reached before and has not given up on) and rank
/// 0's recovery `window` lasts, after a backoff (50 ms, doubling up to
/// 1 s, as the recovery layer's); returns this rank's last outcome.
fn riding_restarts<T>(window: Duration, comm: &dyn Communicator, went_away: impl Fn(&crate::Error) -> bool, mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
    const WENT_AWAY: u64 = 1;
    const WINDOW_OVER: u64 = 2;
    let began = Instant::now();
    let mut backoff = Duration::from_millis(50);
    loop {
        let outcome = attempt();
        let mut mine = match &outcome {
            Err(e) if went_away(e) => WENT_AWAY,
            _ => 0,
        };
        if began.elapsed() >= window {
            mine |= WINDOW_OVER;
        }
        let all = allgather_u64(comm, mine)?;
        let again = all.iter().any(|&c| c & WENT_AWAY != 0) && all[0] & WINDOW_OVER == 0;
        if !again {
            return outcome;
        }
        tracing::info!(target: "weft::client", "a data server went away during a server-directed collective: every rank tries it again");
        std::thread::sleep(backoff.min(window.saturating_sub(began.elapsed())));
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// This rank's part of a server-directed collective write.
pub(super) fn write(file: &File, comm: &dyn Communicator, segments: &[Segment], buf: &[u8], hints: &CollectiveHints) -> Result<()> {
    riding_restarts(file.recovery_window(), comm, |e| file.may_ride_through(e), || write_once(file, comm, segments, buf, hints))
}

fn write_once(file: &File, comm: &dyn Communicator, segments: &[Segment], buf: &[u8], hints: &CollectiveHints) -> Result<()> {
    let a = agree(file, comm, segments, hints)?;
    for r in 0..a.rounds() {
        if let Err(e) = a.round(r, true).and_then(|(chunks, bodies)| file.send_chunks(&chunks, bodies, buf, usize::MAX)) {
            a.abandon(r);
            return Err(e);
        }
    }
    Ok(())
}

/// This rank's part of a server-directed collective read; returns the
/// bytes of its stream before the end of the file.
pub(super) fn read(file: &File, comm: &dyn Communicator, segments: &[Segment], buf: &mut [u8], hints: &CollectiveHints) -> Result<u64> {
    riding_restarts(file.recovery_window(), comm, |e| file.may_ride_through(e), || read_once(file, comm, segments, buf, hints))
}

fn read_once(file: &File, comm: &dyn Communicator, segments: &[Segment], buf: &mut [u8], hints: &CollectiveHints) -> Result<u64> {
    let a = agree(file, comm, segments, hints)?;
    let mut known_end = 0;
    for r in 0..a.rounds() {
        match a.round(r, false).and_then(|(chunks, bodies)| file.fetch_chunks(&chunks, bodies, buf, usize::MAX, false)) {
            Ok(end) => known_end = known_end.max(end),
            Err(e) => {
                a.abandon(r);
                return Err(e);
            }
        }
    }
    file.count_before_end(segments, known_end).map(|n| n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::ThreadComm;
    use crate::Error;
    use weft_net::NetError;

    fn gone() -> Error {
        Error::Net(NetError::Unreachable { addr: "127.0.0.1:9".parse().unwrap(), source: std::io::Error::other("connection closed by server") })
    }

    /// Runs `riding_restarts` on three thread ranks, rank 1 failing its
    /// first `failures` tries with `error`; returns each rank's tries and outcome.
    fn run(window: Duration, failures: usize, error: fn() -> Error) -> Vec<(usize, std::result::Result<(), String>)> {
        let handles: Vec<_> = ThreadComm::group(3)
            .into_iter()
            .map(|comm| {
                std::thread::spawn(move || {
                    let mut tries = 0;
                    let r = riding_restarts(window, &comm, Error::server_went_away, || {
                        tries += 1;
                        if comm.rank() == 1 && tries <= failures { Err(error()) } else { Ok(()) }
                    });
                    (tries, r.map_err(|e| e.to_string()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn every_rank_tries_again_when_one_met_a_server_going_away() {
        let got = run(Duration::from_secs(60), 2, gone);
        assert!(got.iter().all(|(tries, r)| *tries == 3 && r.is_ok()), "{got:?}");
    }

    #[test]
    fn other_failures_and_a_window_run_out_are_not_tried_again() {
        let got = run(Duration::from_secs(60), 1, || Error::BadRequest("no".into()));
        assert!(got.iter().all(|(tries, _)| *tries == 1), "{got:?}");
        assert!(got[1].1.is_err() && got[0].1.is_ok());
        let got = run(Duration::ZERO, 1, gone);
        assert!(got.iter().all(|(tries, _)| *tries == 1), "{got:?}");
        assert!(got[1].1.as_ref().is_err_and(|e| e.contains("connection closed")));
    }
}
