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
//! is read). Double buffering: before reading a run the server asks the
//! kernel to fetch the next one, so the disk works on run k + 1 while run k
//! is copied and sent; written runs start their write-back at once (the
//! data service's write-behind), so the disk writes run k while run k + 1
//! is copied in. Held requests keep no worker and no turn of their connection.
//!
//! Memory: a member's round carries at most `window / participants` bytes
//! (checked by the decoder), so a round holds at most the collective's
//! window, which may be at most a quarter of the server's memory budget;
//! every held byte stays charged to the budget, and so do the held piece
//! lists and each collective's member table (a request that cannot be
//! charged is refused as busy, and its collective fails).
//!
//! Failure: a member that abandons the collective, a round not complete
//! within the collective timeout (`WEFT_COLL_TIMEOUT_MS`, default 20 s,
//! below the clients' 30 s; counted from the end of the previous round's
//! disk work), or a failed disk operation fails it for every member with
//! an `Aborted` error naming why; the server frees what it held and
//! remembers the failure briefly, so later rounds fail at once. A held
//! request is answered exactly once: one dropped unanswered (a bug, a
//! panic) answers `Internal` as it goes.

use weft_net::budget::{Charge, MemoryBudget};
use weft_net::link::Payload;
use crate::data::coll_plan::{finishing, plan};
use crate::data::DataService;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use weft_wire::{CollTag, ErrorCode, FileId, Piece, Response};

/// Sends a held request's answer (and a read's bytes) to its connection.
pub type Reply = Box<dyn FnOnce(Response, Payload) + Send>;

/// Collectives one server holds at once; more are refused as busy.
const MAX_LIVE: usize = 256;

/// Collectives one proven user may have under way at one server (a
/// quarter: one user cannot refuse everyone else's).
const MAX_LIVE_PER_USER: usize = MAX_LIVE / 4;

/// Failed collectives remembered, so that their stragglers fail at once.
const REMEMBER_FAILED: usize = 1024;

type Key = (FileId, u64);

/// Budget drawn per held piece: the list itself and its share of the
/// round's planning (sort keys and run parts).
pub const BYTES_PER_PIECE: u64 = 96;

/// Budget drawn per member of a collective, for its table entry.
const BYTES_PER_MEMBER: u64 = std::mem::size_of::<Member>() as u64;

/// Most missing members a timeout message names.
const NAMED: usize = 16;

/// One member's held request.
pub struct Entry {
    pub pieces: Vec<Piece>,
    /// A write's bytes, or a read's answer buffer (charged at dispatch).
    pub buf: Payload,
    reply: Option<Reply>,
    /// The member's last round at this server.
    pub last: bool,
    /// The budget its piece list holds.
    _pieces_charge: Charge,
}

impl Entry {
    pub fn new(pieces: Vec<Piece>, buf: Payload, reply: Reply, last: bool, pieces_charge: Charge) -> Self {
        Entry { pieces, buf, reply: Some(reply), last, _pieces_charge: pieces_charge }
    }

    /// Sends the answer (once).
    pub fn answer(mut self, rsp: Response, payload: Payload) {
        if let Some(r) = self.reply.take() {
            r(rsp, payload);
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(r) = self.reply.take() {
            r(Response::error(ErrorCode::Internal, "the server dropped this collective request unanswered"), Payload::default());
        }
    }
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
    /// When the current round must be complete; none while a round's disk
    /// work runs.
    deadline: Option<Instant>,
    members: Vec<Member>,
    /// The budget the member table holds.
    _table: Charge,
    /// The proven user whose member started it (counted against its share).
    starter: Option<u32>,
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
    /// Collectives under way per proven user that started them.
    per_user: HashMap<u32, usize>,
    failed: VecDeque<(Key, String)>,
    /// Collectives failed since the server started.
    failed_total: u64,
    /// Collectives refused because the server's or a user's share was full.
    refused_total: u64,
}

/// The collectives in progress at one server.
pub struct Collectives {
    state: Mutex<State>,
    timeout: Duration,
    budget: Arc<MemoryBudget>,
}

fn aborted(why: &str) -> Response {
    Response::error(ErrorCode::Aborted, why)
}

impl State {
    /// Takes a collective out of the live ones, with its user's count.
    fn remove_live(&mut self, key: &Key) -> Option<Pending> {
        let p = self.live.remove(key)?;
        if let Some(uid) = p.starter
            && let Some(n) = self.per_user.get_mut(&uid)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_user.remove(&uid);
            }
        }
        Some(p)
    }
}

impl Collectives {
    pub fn new(timeout: Duration, budget: Arc<MemoryBudget>) -> Self {
        Collectives { state: Mutex::new(State::default()), timeout, budget }
    }

    /// The largest window a collective may ask for here.
    pub fn max_window(&self) -> u64 {
        self.budget.limit() / 4
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Collectives failed since the server started.
    pub fn failed(&self) -> u64 {
        self.state().failed_total
    }

    /// Collectives refused by their quota since the server started.
    pub fn refused(&self) -> u64 {
        self.state().refused_total
    }

    /// A member's round arrives from `user` (the proven user its
    /// connection counts for): answered now (an error), held, or the
    /// round it completes is returned for the caller to perform.
    pub fn join(&self, file: FileId, tag: CollTag, write: bool, entry: Entry, now: Instant, user: Option<u32>) -> Option<Round> {
        let key = (file, tag.id);
        let mut st = self.state();
        if let Some((_, why)) = st.failed.iter().find(|(k, _)| *k == key) {
            let why = why.clone();
            drop(st);
            entry.answer(aborted(&why), Payload::default());
            return None;
        }
        if tag.abandon {
            let why = format!("collective {:#x}: member {} abandoned it", tag.id, tag.member);
            drop(st);
            self.fail(key, &why);
            entry.answer(aborted(&why), Payload::default());
            return None;
        }
        if !st.live.contains_key(&key) {
            let mine = user.map_or(0, |u| st.per_user.get(&u).copied().unwrap_or(0));
            let full = st.live.len() >= MAX_LIVE || mine >= MAX_LIVE_PER_USER;
            st.refused_total += u64::from(full);
            let refusal = if st.live.len() >= MAX_LIVE {
                Some(Response::error(ErrorCode::Busy, format!("server holds {MAX_LIVE} collectives already")))
            } else if mine >= MAX_LIVE_PER_USER {
                Some(Response::error(ErrorCode::Busy, format!("uid {} has {mine} collectives under way at this server, the most one user may", user.unwrap_or(0))))
            } else if tag.window > self.max_window() {
                Some(Response::error(ErrorCode::BadRequest, format!("collective window {} exceeds this server's {}", tag.window, self.max_window())))
            } else {
                None
            };
            let table = if refusal.is_none() { self.budget.try_charge(u64::from(tag.participants) * BYTES_PER_MEMBER) } else { None };
            let table = match (refusal, table) {
                (None, Some(t)) => t,
                (refusal, _) => {
                    // The other members would wait for this one: fail it for all.
                    let rsp = refusal.unwrap_or_else(|| Response::error(ErrorCode::Busy, "server memory budget exhausted"));
                    drop(st);
                    self.fail(key, &format!("collective {:#x}: refused at this server", tag.id));
                    entry.answer(rsp, Payload::default());
                    return None;
                }
            };
            st.live.insert(
                key,
                Pending {
                    write,
                    participants: tag.participants,
                    window: tag.window,
                    round: 0,
                    deadline: Some(now + self.timeout),
                    members: (0..tag.participants).map(|_| Member::Waiting).collect(),
                    _table: table,
                    starter: user,
                },
            );
            if let Some(u) = user {
                *st.per_user.entry(u).or_default() += 1;
            }
        }
        let p = st.live.get_mut(&key).expect("live");
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
            entry.answer(Response::error(ErrorCode::BadRequest, why), Payload::default());
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
        p.deadline = None;
        let write = p.write;
        if p.members.iter().all(|m| matches!(m, Member::Done)) {
            st.remove_live(&key);
        }
        Some(Round { key, write, entries })
    }

    /// The round of `key` just performed: the next one must be complete
    /// within the timeout from now.
    pub fn resume(&self, key: Key, now: Instant) {
        if let Some(p) = self.state().live.get_mut(&key) {
            p.deadline = Some(now + self.timeout);
        }
    }

    /// Fails a collective: every held member is answered with `why`, and
    /// later rounds fail at once.
    pub fn fail(&self, key: Key, why: &str) {
        let held = {
            let mut st = self.state();
            let held = st.remove_live(&key).map(|p| p.members).unwrap_or_default();
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
                e.answer(aborted(why), Payload::default());
            }
        }
    }

    /// Fails the collectives whose round did not complete in time.
    pub fn expire(&self, now: Instant) {
        let late: Vec<(Key, Vec<usize>, usize, u32, u32)> = self
            .state()
            .live
            .iter()
            .filter(|(_, p)| p.deadline.is_some_and(|d| now >= d))
            .map(|(k, p)| {
                let missing = p.members.iter().enumerate().filter(|(_, m)| matches!(m, Member::Waiting)).map(|(i, _)| i);
                let count = missing.clone().count();
                (*k, missing.take(NAMED).collect(), count, p.participants, p.round)
            })
            .collect();
        for (key, named, count, participants, round) in late {
            let more = if count > named.len() { format!(" and {} more", count - named.len()) } else { String::new() };
            let why = format!("collective {:#x}: members {named:?}{more} of {participants} did not send round {round} within {:?}", key.1, self.timeout);
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
    let object_size = if write {
        0
    } else {
        match data.size(file) {
            Ok(n) => n,
            Err(e) => {
                let why = format!("server I/O for the collective failed: {e}");
                for e in answered.into_iter().flatten() {
                    e.answer(aborted(&why), Payload::default());
                }
                return Err(why);
            }
        }
    };
    let answer = |answered: &mut Vec<Option<Entry>>, m: usize| {
        if let Some(mut e) = answered[m].take() {
            let rsp = if write { Response::Written { bytes: totals[m] } } else { Response::Read { object_size } };
            let buf = if write { Payload::default() } else { Payload::new(std::mem::take(&mut e.buf.bytes), e.buf.charge.take()) };
            e.answer(rsp, buf);
        }
    };
    for &m in &idle {
        answer(&mut answered, m);
    }
    let mut moved = 0u64;
    for (k, (run, done)) in runs.iter().zip(&by_run).enumerate() {
        // Double buffering for reads: the disk fetches the next run while
        // this one is read (from the cache, mostly) and its answers go out.
        if !write && let Some(next) = runs.get(k + 1) {
            data.prefetch(file, next.offset, next.len);
        }
        let r = if write {
            let bufs: Vec<&[u8]> = run.parts.iter().map(|p| &answered[p.member].as_ref().expect("held").buf.data()[p.at..p.at + p.len]).collect();
            data.write_run(file, run.offset, &bufs)
        } else {
            read_into(data, file, run, &mut answered)
        };
        if let Err(e) = r {
            let why = format!("server I/O for the collective failed: {e}");
            for e in answered.into_iter().flatten() {
                e.answer(aborted(&why), Payload::default());
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A first member's round of a two-member collective (so it stays
    /// under way), answered into `answers`.
    fn first_member(c: &Collectives, budget: &Arc<MemoryBudget>, id: u64, user: Option<u32>, answers: &mpsc::Sender<Response>) {
        let tag = CollTag { id, participants: 2, member: 0, round: 0, window: 1 << 20, last: true, abandon: false };
        let tx = answers.clone();
        let entry = Entry::new(vec![Piece { offset: 0, len: 1 }], Payload::default(), Box::new(move |rsp, _| drop(tx.send(rsp))), true, budget.try_charge(96).unwrap());
        assert!(c.join(FileId(1), tag, false, entry, Instant::now(), user).is_none(), "held for the second member");
    }

    #[test]
    fn one_user_starts_a_quarter_of_the_collectives_at_most() {
        let budget = MemoryBudget::new(1 << 30);
        let c = Collectives::new(Duration::from_secs(60), budget.clone());
        let (tx, rx) = mpsc::channel();
        for id in 0..MAX_LIVE_PER_USER as u64 {
            first_member(&c, &budget, id, Some(1000), &tx);
        }
        assert!(rx.try_recv().is_err(), "all held");
        first_member(&c, &budget, 999, Some(1000), &tx);
        let answer = rx.recv_timeout(Duration::from_secs(5)).expect("the 65th collective of one user is refused at once");
        assert!(matches!(answer, Response::Error { code: ErrorCode::Busy, message } if message.contains("uid 1000")));
        // Another user, and peers not counted, still start theirs.
        first_member(&c, &budget, 2000, Some(1001), &tx);
        first_member(&c, &budget, 3000, None, &tx);
        assert!(rx.try_recv().is_err());
        // A failed one gives its place back.
        c.fail((FileId(1), 0), "gone");
        assert!(matches!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Response::Error { code: ErrorCode::Aborted, .. }));
        first_member(&c, &budget, 4000, Some(1000), &tx);
        assert!(rx.try_recv().is_err(), "held again");
    }
}
