//! Server-directed collective I/O at one data server (paper 001's
//! disk-directed I/O; Clusterfile's server-side collective in paper 000).
//!
//! Each member of a collective sends this server one request per round:
//! its pieces here (and, for a write, their bytes). Requests are held, not
//! served, until every member still in the collective has sent its round;
//! the worker that brings the last one then performs the whole round in
//! object order ([`crate::data::coll_plan`]): few large vectored disk
//! operations instead of every member's small ones, each member answered as
//! soon as its last piece is done (a read's bytes go out while the next run
//! is read). Held requests keep no worker and no turn of their connection.
//!
//! Memory: a member's round carries at most `window / participants` bytes
//! (checked by the decoder), so a round holds at most the collective's
//! window; every held byte also stays charged to the server's budget.
//!
//! Failure: a member that abandons the collective, a round not complete
//! within the collective timeout (`WEFT_COLL_TIMEOUT_MS`, default 20 s,
//! below the clients' 30 s), or a failed disk operation fails it for every
//! member with an `Aborted` error naming why; the server frees what it held
//! and remembers the failure briefly, so later rounds fail at once.

use super::conn::Payload;
use crate::data::coll_plan::{finishing, plan};
use crate::data::DataService;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use weft_wire::{CollTag, ErrorCode, FileId, Piece, Response};

/// Sends a held request's answer (and a read's bytes) to its connection.
pub type Reply = Box<dyn FnOnce(Response, Payload) + Send>;

/// Collectives one server holds at once; more are refused as busy.
const MAX_LIVE: usize = 256;

/// Failed collectives remembered, so that their stragglers fail at once.
const REMEMBER_FAILED: usize = 1024;

type Key = (FileId, u64);

/// One member's held request.
pub struct Entry {
    pub pieces: Vec<Piece>,
    /// A write's bytes, or a read's answer buffer (charged at dispatch).
    pub buf: Payload,
    pub reply: Reply,
    /// The member's last round at this server.
    pub last: bool,
}

enum Member {
    Waiting,
    Arrived(Entry),
    /// Sent its last round here.
    Done,
}

struct Pending {
    write: bool,
    participants: u32,
    window: u64,
    round: u32,
    deadline: Instant,
    members: Vec<Member>,
}

/// A complete round, to perform outside the registry's lock.
pub struct Round {
    pub key: Key,
    pub write: bool,
    pub entries: Vec<Entry>,
}

#[derive(Default)]
struct State {
    live: HashMap<Key, Pending>,
    failed: VecDeque<(Key, String)>,
    /// Collectives failed since the server started.
    failed_total: u64,
}

/// The collectives in progress at one server.
pub struct Collectives {
    state: Mutex<State>,
    timeout: Duration,
}

fn aborted(why: &str) -> Response {
    Response::error(ErrorCode::Aborted, why)
}

impl Collectives {
    pub fn new(timeout: Duration) -> Self {
        Collectives { state: Mutex::new(State::default()), timeout }
    }

    /// `WEFT_COLL_TIMEOUT_MS`, default 20 s.
    pub fn timeout_from_env() -> Duration {
        Duration::from_millis(std::env::var("WEFT_COLL_TIMEOUT_MS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(20_000))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Collectives failed since the server started.
    pub fn failed(&self) -> u64 {
        self.state().failed_total
    }

    /// A member's round arrives: answered now (an error), held, or the
    /// round it completes is returned for the caller to perform.
    pub fn join(&self, file: FileId, tag: CollTag, write: bool, entry: Entry, now: Instant) -> Option<Round> {
        let key = (file, tag.id);
        let mut st = self.state();
        if let Some((_, why)) = st.failed.iter().find(|(k, _)| *k == key) {
            let why = why.clone();
            drop(st);
            (entry.reply)(aborted(&why), Payload::default());
            return None;
        }
        if tag.abandon {
            let why = format!("collective {:#x}: member {} abandoned it", tag.id, tag.member);
            drop(st);
            self.fail(key, &why);
            (entry.reply)(aborted(&why), Payload::default());
            return None;
        }
        if !st.live.contains_key(&key) && st.live.len() >= MAX_LIVE {
            drop(st);
            (entry.reply)(Response::error(ErrorCode::Busy, format!("server holds {MAX_LIVE} collectives already")), Payload::default());
            return None;
        }
        let timeout = self.timeout;
        let p = st.live.entry(key).or_insert_with(|| Pending {
            write,
            participants: tag.participants,
            window: tag.window,
            round: 0,
            deadline: now + timeout,
            members: (0..tag.participants).map(|_| Member::Waiting).collect(),
        });
        let refuse = if p.write != write || p.participants != tag.participants || p.window != tag.window {
            Some("does not match the collective's operation, participants or window")
        } else if tag.round != p.round || !matches!(p.members[tag.member as usize], Member::Waiting) {
            Some("is not the collective's current round for this member")
        } else {
            None
        };
        if let Some(what) = refuse {
            // A member that breaks the collective's rules fails it for all:
            // the others would otherwise wait for a round that never comes.
            let why = format!("collective {:#x}: member {} round {} {what}", tag.id, tag.member, tag.round);
            drop(st);
            self.fail(key, &why);
            (entry.reply)(Response::error(ErrorCode::BadRequest, why), Payload::default());
            return None;
        }
        p.members[tag.member as usize] = Member::Arrived(entry);
        if p.members.iter().any(|m| matches!(m, Member::Waiting)) {
            return None;
        }
        let mut entries = Vec::with_capacity(p.members.len());
        for m in &mut p.members {
            match std::mem::replace(m, Member::Done) {
                Member::Arrived(e) => {
                    if !e.last {
                        *m = Member::Waiting;
                    }
                    entries.push(e);
                }
                Member::Done | Member::Waiting => {}
            }
        }
        p.round += 1;
        p.deadline = now + timeout;
        let write = p.write;
        if p.members.iter().all(|m| matches!(m, Member::Done)) {
            st.live.remove(&key);
        }
        Some(Round { key, write, entries })
    }

    /// Fails a collective: every held member is answered with `why`, and
    /// later rounds fail at once.
    pub fn fail(&self, key: Key, why: &str) {
        let held = {
            let mut st = self.state();
            let held = st.live.remove(&key).map(|p| p.members).unwrap_or_default();
            if !st.failed.iter().any(|(k, _)| *k == key) {
                if st.failed.len() >= REMEMBER_FAILED {
                    st.failed.pop_front();
                }
                st.failed.push_back((key, why.to_owned()));
                st.failed_total += 1;
            }
            held
        };
        for m in held {
            if let Member::Arrived(e) = m {
                (e.reply)(aborted(why), Payload::default());
            }
        }
    }

    /// Fails the collectives whose round did not complete in time.
    pub fn expire(&self, now: Instant) {
        let late: Vec<(Key, String)> = self
            .state()
            .live
            .iter()
            .filter(|(_, p)| now >= p.deadline)
            .map(|(k, p)| {
                let missing: Vec<usize> = p.members.iter().enumerate().filter(|(_, m)| matches!(m, Member::Waiting)).map(|(i, _)| i).collect();
                (*k, format!("collective {:#x}: members {missing:?} of {} did not send round {} within {:?}", k.1, p.participants, p.round, self.timeout))
            })
            .collect();
        for (key, why) in late {
            tracing::info!(target: "weft::server", %why, "collective timed out");
            self.fail(key, &why);
        }
    }
}

/// Performs a complete round on `data`, answering each member as soon as
/// its last piece is done. Returns the bytes moved, or the error that
/// failed the round (every member not yet answered gets it).
pub fn perform(data: &DataService, file: FileId, round: Round) -> Result<u64, String> {
    let Round { write, mut entries, .. } = round;
    let pieces: Vec<&[Piece]> = entries.iter().map(|e| &e.pieces[..]).collect();
    let runs = plan(&pieces);
    let (idle, by_run) = finishing(&runs, entries.len());
    let totals: Vec<u64> = entries.iter().map(|e| e.pieces.iter().map(|p| p.len).sum()).collect();
    if !write {
        for (e, &t) in entries.iter_mut().zip(&totals) {
            e.buf.bytes.clear();
            e.buf.bytes.resize(t as usize, 0);
        }
    }
    let mut answered: Vec<Option<Entry>> = entries.into_iter().map(Some).collect();
    let object_size = if write { 0 } else { data.size(file).map_err(|e| e.to_string())? };
    let answer = |answered: &mut Vec<Option<Entry>>, m: usize| {
        if let Some(mut e) = answered[m].take() {
            let rsp = if write { Response::Written { bytes: totals[m] } } else { Response::Read { object_size } };
            let buf = if write { Payload::default() } else { Payload { bytes: std::mem::take(&mut e.buf.bytes), charge: e.buf.charge.take() } };
            (e.reply)(rsp, buf);
        }
    };
    for &m in &idle {
        answer(&mut answered, m);
    }
    let mut moved = 0u64;
    for (run, done) in runs.iter().zip(&by_run) {
        let r = if write {
            let bufs: Vec<&[u8]> = run.parts.iter().map(|p| &answered[p.member].as_ref().expect("held").buf.bytes[p.at..p.at + p.len]).collect();
            data.write_run(file, run.offset, &bufs)
        } else {
            read_into(data, file, run, &mut answered)
        };
        if let Err(e) = r {
            let why = format!("server I/O for the collective failed: {e}");
            for e in answered.into_iter().flatten() {
                (e.reply)(aborted(&why), Payload::default());
            }
            return Err(why);
        }
        moved += run.len;
        for &m in done {
            answer(&mut answered, m);
        }
    }
    Ok(moved)
}

/// Reads one run straight into the held members' answer buffers.
fn read_into(data: &DataService, file: FileId, run: &crate::data::coll_plan::IoRun, held: &mut [Option<Entry>]) -> std::io::Result<()> {
    // Each member's buffer lent out in the pieces this run needs: a
    // member's pieces occupy disjoint ranges of its buffer.
    let mut wanted: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); held.len()];
    for (k, p) in run.parts.iter().enumerate() {
        wanted[p.member].push((p.at, p.len, k));
    }
    let mut slots: Vec<Option<&mut [u8]>> = (0..run.parts.len()).map(|_| None).collect();
    for (e, want) in held.iter_mut().zip(&mut wanted) {
        let Some(e) = e.as_mut() else { continue };
        want.sort_unstable();
        let mut rest: &mut [u8] = &mut e.buf.bytes;
        let mut at = 0;
        for &(pos, len, k) in want.iter() {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(pos - at);
            let (piece, tail) = tail.split_at_mut(len);
            slots[k] = Some(piece);
            rest = tail;
            at = pos + len;
        }
    }
    let mut bufs: Vec<&mut [u8]> = slots.into_iter().map(|s| s.expect("every part placed")).collect();
    data.read_run(file, run.offset, &mut bufs).map(|_| ())
}
