//! MPI-IO shared file pointers (`MPI_File_read_shared`, `_ordered`, ...):
//! one counter per collective open, kept in memory by the metadata service
//! and changed by atomic fetch-and-add, so a job's ranks take disjoint
//! pieces of the file without a hidden file or a lock round trip.
//!
//! A pointer lives from its job's open (rank 0 sets it) to its close (rank
//! 0 releases it); a job that dies leaves it behind, so the table is
//! capped and pointers idle for an hour are dropped when it is full.
//!
//! Every change is logged before it is answered ([`pointer_log`]), so a
//! restarted server (its process killed, the machine up) has every
//! pointer where it was. A fetch-and-add comes tagged (`MetaReq::Once`),
//! and a pointer keeps each client's last answer (logged with it; up to
//! [`CLIENTS_KEPT`] clients a pointer, [`ANSWERS_KEPT`] in all): one
//! resent after its answer was lost in a restart is answered again, not
//! applied twice. A log that cannot be written is made void and the
//! pointers go on in memory, as they did before the log; after a reboot,
//! or with the log void, a restart loses them: the next access fails with
//! `NotFound` ("shared file pointer lost"), never a silent restart at 0.
//!
//! [`pointer_log`]: super::pointer_log

use super::pointer_log::{Entry, PointerLog};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weft_wire::{ErrorCode, PointerOp};

/// Most pointers held at once (a few dozen bytes each, and their answers).
pub const MAX_POINTERS: usize = 65_536;
/// Most pointers one user holds: a user who opens files collectively in a
/// loop without closing them fills their own share, not the table every
/// other user's MPI_File_open needs (64 users to fill it).
pub const MAX_POINTERS_PER_USER: usize = 1024;
/// Idle time after which a pointer may be dropped to make room.
const IDLE: Duration = Duration::from_secs(3600);
/// Clients whose last answer a pointer keeps: a job of more ranks may find
/// the answer of an early one gone when it resends (the oldest client's
/// goes first).
pub const CLIENTS_KEPT: usize = 1024;
/// Answers kept in all (about 50 bytes each): past it a pointer keeps new
/// clients' answers only in place of its oldest. With [`MAX_POINTERS`] it
/// bounds a rewrite of the log (8 MiB at most), which the server's event
/// loop may make (it answers pointer changes itself).
pub const ANSWERS_KEPT: usize = 1 << 16;
/// The log is rewritten once it holds this many records more than its
/// live pointers need.
const REWRITE_PAST: u64 = 16_384;

/// One pointer: its value, its owner, when it was last used, and each
/// client's last tagged fetch-and-add: client -> (seq, old value), with
/// the clients in the order they came.
struct Pointer {
    value: u64,
    uid: u32,
    used: Instant,
    answers: HashMap<u64, (u64, u64)>,
    clients: VecDeque<u64>,
}

impl Pointer {
    fn new(value: u64, uid: u32, used: Instant) -> Self {
        Pointer { value, uid, used, answers: HashMap::new(), clients: VecDeque::new() }
    }
}

#[derive(Default)]
struct Table {
    pointers: HashMap<u64, Pointer>,
    /// Sets refused because a user's share or the table was full.
    refused: u64,
    /// Pointers held per user.
    held: HashMap<u32, usize>,
    /// Answers kept by every pointer.
    answers: usize,
    /// Where changes are logged (none: pointers die with the process).
    log: Option<PointerLog>,
    /// The log could not be written nor made void: a restart would bring
    /// back old values, so no change is made any more.
    broken: bool,
    /// No rewrite is tried before the log holds this many records (a
    /// failed one waits for as many more).
    rewrite_at: u64,
}

fn wall_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Table {
    fn drop_idle(&mut self, now: Instant, only: Option<u32>) -> Result<(), (ErrorCode, String)> {
        let idle: Vec<u64> = self.pointers.iter().filter(|(_, p)| now.duration_since(p.used) >= IDLE && only.is_none_or(|u| u == p.uid)).map(|(&t, _)| t).collect();
        for token in idle {
            self.log(&Entry::Released { token })?;
            self.remove(token);
        }
        Ok(())
    }

    fn remove(&mut self, token: u64) -> Option<Pointer> {
        let p = self.pointers.remove(&token)?;
        self.answers -= p.answers.len();
        if let Some(n) = self.held.get_mut(&p.uid) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&p.uid);
            }
        }
        Some(p)
    }

    /// Keeps `client`'s answer `old` to its fetch-and-add `seq` on `token`.
    fn keep_answer(&mut self, token: u64, client: u64, seq: u64, old: u64) {
        let full = self.answers >= ANSWERS_KEPT;
        let Some(p) = self.pointers.get_mut(&token) else { return };
        if p.answers.insert(client, (seq, old)).is_some() {
            return;
        }
        p.clients.push_back(client);
        self.answers += 1;
        if (p.clients.len() > CLIENTS_KEPT || full)
            && let Some(gone) = p.clients.pop_front()
        {
            p.answers.remove(&gone);
            self.answers -= 1;
        }
    }

    /// Logs `e` before its change is made (and answered). A log that fails
    /// is made void and dropped: the change is made in memory alone.
    fn log(&mut self, e: &Entry) -> Result<(), (ErrorCode, String)> {
        if self.broken {
            return Err((ErrorCode::Io, "the shared file pointers' log could not be written nor made void: no pointer changes until the metadata server restarts".into()));
        }
        let Some(log) = &mut self.log else { return Ok(()) };
        let Err(e) = log.append(e) else { return Ok(()) };
        tracing::error!(target: "weft::meta", error = %e, "cannot log a shared file pointer's change: the log is made void, pointers will not outlive this process");
        let voided = log.make_void();
        self.log = None;
        voided.map_err(|v| {
            self.broken = true;
            (ErrorCode::Io, format!("cannot log the shared file pointer's change ({e}) nor make the log void ({v})"))
        })
    }

    /// Rewrites the log with the live pointers alone once it is long.
    fn compact(&mut self) {
        let live = (self.pointers.len() + self.answers) as u64;
        let Some(log) = &mut self.log else { return };
        let records = log.records();
        if records <= live.saturating_add(REWRITE_PAST) || records < self.rewrite_at {
            return;
        }
        let secs = wall_secs();
        let now = Instant::now();
        let entries: Vec<Entry> = self
            .pointers
            .iter()
            .flat_map(|(&token, p)| {
                let secs = secs.saturating_sub(now.duration_since(p.used).as_secs());
                let set = Entry::Set { token, uid: p.uid, value: p.value, secs };
                let answers = p.clients.iter().filter_map(move |c| p.answers.get(c).map(|&(seq, old)| Entry::Added { token, uid: p.uid, value: p.value, client: *c, seq, old, secs }));
                std::iter::once(set).chain(answers)
            })
            .collect();
        if let Err(e) = log.rewrite(&entries) {
            // The old log still holds every change: it only stays long.
            tracing::warn!(target: "weft::meta", error = %e, "could not rewrite the shared file pointers' log");
            self.rewrite_at = records.saturating_add(REWRITE_PAST);
        }
    }

    /// Replays logged changes (their order is the order they were made in).
    fn replay(&mut self, entries: Vec<Entry>) {
        let (now, secs_now) = (Instant::now(), wall_secs());
        // As idle as it was when logged (an hour at most).
        let at = |secs: u64| now.checked_sub(Duration::from_secs(secs_now.saturating_sub(secs)).min(IDLE)).unwrap_or(now);
        for e in entries {
            match e {
                Entry::Set { token, uid, value, secs } => match self.pointers.get_mut(&token) {
                    Some(p) => {
                        p.value = value;
                        p.used = at(secs);
                    }
                    None => {
                        self.pointers.insert(token, Pointer::new(value, uid, at(secs)));
                        *self.held.entry(uid).or_insert(0) += 1;
                    }
                },
                Entry::Added { token, value, client, seq, old, secs, .. } => {
                    if let Some(p) = self.pointers.get_mut(&token) {
                        p.value = value;
                        p.used = at(secs);
                        self.keep_answer(token, client, seq, old);
                    }
                }
                Entry::Released { token } => {
                    self.remove(token);
                }
            }
        }
    }
}

#[derive(Default)]
pub struct SharedPointers {
    table: Mutex<Table>,
}

impl SharedPointers {
    /// The table of a service in `dir`, with the pointers its log kept
    /// (see the module's documentation).
    pub fn open(dir: &Path) -> Self {
        let mut table = Table::default();
        match PointerLog::open(dir) {
            Ok((log, entries)) => {
                table.replay(entries);
                table.log = log;
                if !table.pointers.is_empty() {
                    tracing::info!(target: "weft::meta", pointers = table.pointers.len(), "shared file pointers taken back from their log");
                }
            }
            Err(e) => {
                // Not read, and perhaps not void: a later restart could
                // replay it, so no pointer changes are made.
                tracing::error!(target: "weft::meta", dir = %dir.display(), error = %e, "cannot open the shared file pointers' log: MPI-IO shared pointers are refused");
                table.broken = true;
            }
        }
        SharedPointers { table: Mutex::new(table) }
    }

    /// Sets refused for a full share or table since start (metrics).
    pub fn refused(&self) -> u64 {
        self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner).refused
    }

    /// Applies `op`, asked by user `uid`, to pointer `token`; returns its
    /// value before. A pointer is its creator's: another user's token
    /// reads as absent. `tag` (client, seq): a fetch-and-add answered
    /// under it before is answered the same again, not applied.
    pub fn apply(&self, uid: u32, token: u64, op: PointerOp, tag: Option<(u64, u64)>) -> Result<u64, (ErrorCode, String)> {
        let mut t = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let secs = wall_secs();
        if t.pointers.get(&token).is_some_and(|p| p.uid != uid) {
            return Err(lost());
        }
        let answer = match op {
            PointerOp::Set(v) => {
                if let Some(old) = t.pointers.get(&token).map(|p| p.value) {
                    t.log(&Entry::Set { token, uid, value: v, secs })?;
                    let p = t.pointers.get_mut(&token).expect("present");
                    p.used = now;
                    p.value = v;
                    Ok(old)
                } else {
                    if t.held.get(&uid).copied().unwrap_or(0) >= MAX_POINTERS_PER_USER {
                        t.drop_idle(now, Some(uid))?;
                        if t.held.get(&uid).copied().unwrap_or(0) >= MAX_POINTERS_PER_USER {
                            t.refused += 1;
                            return Err((ErrorCode::Busy, format!("uid {uid} holds {MAX_POINTERS_PER_USER} shared file pointers, the most one user may: close the files opened with MPI_File_open (pointers idle for an hour are dropped)")));
                        }
                    }
                    if t.pointers.len() >= MAX_POINTERS {
                        t.drop_idle(now, None)?;
                        if t.pointers.len() >= MAX_POINTERS {
                            t.refused += 1;
                            return Err((ErrorCode::Busy, format!("{MAX_POINTERS} shared file pointers in use")));
                        }
                    }
                    t.log(&Entry::Set { token, uid, value: v, secs })?;
                    t.pointers.insert(token, Pointer::new(v, uid, now));
                    *t.held.entry(uid).or_insert(0) += 1;
                    Ok(0)
                }
            }
            PointerOp::FetchAdd(n) => {
                let p = t.pointers.get(&token).ok_or_else(lost)?;
                if let Some((client, seq)) = tag
                    && let Some(&(kept, old)) = p.answers.get(&client)
                    && kept == seq
                {
                    return Ok(old);
                }
                let old = p.value;
                let value = old.checked_add(n).ok_or_else(|| (ErrorCode::BadRequest, format!("shared file pointer {old} + {n} overflows")))?;
                match tag {
                    Some((client, seq)) => t.log(&Entry::Added { token, uid, value, client, seq, old, secs })?,
                    // An untagged add of 0 (a position asked) changes nothing.
                    None if n == 0 => {}
                    None => t.log(&Entry::Set { token, uid, value, secs })?,
                }
                let p = t.pointers.get_mut(&token).expect("present");
                p.value = value;
                p.used = now;
                if let Some((client, seq)) = tag {
                    t.keep_answer(token, client, seq, old);
                }
                Ok(old)
            }
            PointerOp::Release => match t.pointers.contains_key(&token) {
                false => Ok(0),
                true => {
                    t.log(&Entry::Released { token })?;
                    Ok(t.remove(token).map_or(0, |p| p.value))
                }
            },
        };
        t.compact();
        answer
    }
}

fn lost() -> (ErrorCode, String) {
    (ErrorCode::NotFound, "shared file pointer lost (the metadata service restarted after a reboot, or the file was closed)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_add_hands_out_disjoint_ranges_and_needs_a_set_pointer() {
        let p = SharedPointers::default();
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(1), None).unwrap_err().0, ErrorCode::NotFound);
        assert_eq!(p.apply(1, 7, PointerOp::Set(100), None).unwrap(), 0);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(10), None).unwrap(), 100);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(5), None).unwrap(), 110);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(u64::MAX), None).unwrap_err().0, ErrorCode::BadRequest);
        assert_eq!(p.apply(1, 7, PointerOp::Release, None).unwrap(), 115);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(1), None).unwrap_err().0, ErrorCode::NotFound);
    }

    #[test]
    fn a_full_table_refuses_new_pointers_but_serves_old_ones() {
        let p = SharedPointers::default();
        // Many users, each within their share, fill the table.
        for k in 0..MAX_POINTERS as u64 {
            p.apply((k / MAX_POINTERS_PER_USER as u64) as u32, k, PointerOp::Set(k), None).unwrap();
        }
        assert_eq!(p.apply(9999, u64::MAX, PointerOp::Set(0), None).unwrap_err().0, ErrorCode::Busy);
        assert_eq!(p.apply(0, 3, PointerOp::FetchAdd(1), None).unwrap(), 3);
        assert_eq!(p.apply(0, 3, PointerOp::Set(0), None).unwrap(), 4);
    }

    #[test]
    fn one_user_fills_only_their_own_share_and_cannot_touch_anothers() {
        let p = SharedPointers::default();
        for k in 0..MAX_POINTERS_PER_USER as u64 {
            p.apply(1000, k, PointerOp::Set(0), None).unwrap();
        }
        let (code, msg) = p.apply(1000, 1 << 40, PointerOp::Set(0), None).unwrap_err();
        assert!(code == ErrorCode::Busy && msg.contains("uid 1000"), "{msg}");
        // Everyone else is served (before: the whole table was one pool).
        assert_eq!(p.apply(1001, 1 << 41, PointerOp::Set(5), None).unwrap(), 0);
        // Another user's token reads as absent, for every operation.
        assert_eq!(p.apply(1001, 3, PointerOp::FetchAdd(1), None).unwrap_err().0, ErrorCode::NotFound);
        assert_eq!(p.apply(1001, 3, PointerOp::Set(9), None).unwrap_err().0, ErrorCode::NotFound);
        assert_eq!(p.apply(1001, 3, PointerOp::Release, None).unwrap_err().0, ErrorCode::NotFound);
        assert_eq!(p.apply(1000, 3, PointerOp::FetchAdd(1), None).unwrap(), 0);
        // A release gives the share back.
        p.apply(1000, 3, PointerOp::Release, None).unwrap();
        assert_eq!(p.apply(1000, 1 << 40, PointerOp::Set(0), None).unwrap(), 0);
    }

    #[test]
    fn a_tagged_fetch_add_resent_is_answered_again_not_applied_twice() {
        let p = SharedPointers::default();
        p.apply(1, 7, PointerOp::Set(0), None).unwrap();
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(10), Some((5, 1))).unwrap(), 0);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(10), Some((6, 1))).unwrap(), 10);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(10), Some((5, 1))).unwrap(), 0, "the resend is answered as the first send was");
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(10), Some((5, 2))).unwrap(), 20);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(10), Some((6, 1))).unwrap(), 10, "another client's answer is kept beside");
        // Each client's last answer, for up to CLIENTS_KEPT clients: the
        // first of CLIENTS_KEPT + 1 more is gone, the second still kept.
        for client in 100..101 + CLIENTS_KEPT as u64 {
            p.apply(1, 7, PointerOp::FetchAdd(1), Some((client, 1))).unwrap();
        }
        let now = 30 + 1 + CLIENTS_KEPT as u64;
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(1), Some((101, 1))).unwrap(), 31, "a kept answer");
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(1), Some((100, 1))).unwrap(), now, "the oldest client's answer was not dropped");
        let t = p.table.lock().unwrap();
        assert_eq!(t.answers, CLIENTS_KEPT, "answers counted");
        assert!(t.pointers[&7].answers.len() == CLIENTS_KEPT && t.pointers[&7].clients.len() == CLIENTS_KEPT);
    }

    /// A table opened again in the same directory (a restarted process)
    /// has every pointer where it was, its owner, and its kept answers.
    #[test]
    fn pointers_and_their_answers_outlive_the_table_through_its_log() {
        let d = crate::meta::pointer_log::tests::dir("reopen");
        {
            let p = SharedPointers::open(&d);
            p.apply(1, 7, PointerOp::Set(100), None).unwrap();
            p.apply(1, 7, PointerOp::FetchAdd(10), Some((5, 1))).unwrap();
            p.apply(1, 7, PointerOp::FetchAdd(5), None).unwrap();
            p.apply(2, 8, PointerOp::Set(3), None).unwrap();
            p.apply(2, 9, PointerOp::Set(4), None).unwrap();
            p.apply(2, 9, PointerOp::Release, None).unwrap();
        }
        let p = SharedPointers::open(&d);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(10), Some((5, 1))).unwrap(), 100, "the kept answer");
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(0), None).unwrap(), 115);
        assert_eq!(p.apply(1, 8, PointerOp::FetchAdd(0), None).unwrap_err().0, ErrorCode::NotFound, "another user's");
        assert_eq!(p.apply(2, 8, PointerOp::FetchAdd(0), None).unwrap(), 3);
        assert_eq!(p.apply(2, 9, PointerOp::FetchAdd(0), None).unwrap_err().0, ErrorCode::NotFound, "released");
        // Many changes later the log is rewritten short, and still right.
        for k in 0..2 * REWRITE_PAST {
            p.apply(1, 7, PointerOp::FetchAdd(1), Some((6, k))).unwrap();
        }
        let log = d.join("shared-pointers.log");
        assert!(std::fs::metadata(&log).unwrap().len() < 64 * (REWRITE_PAST + 100), "the log was not rewritten");
        drop(p);
        let p = SharedPointers::open(&d);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(0), None).unwrap(), 115 + 2 * REWRITE_PAST);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(1), Some((6, 2 * REWRITE_PAST - 1))).unwrap(), 114 + 2 * REWRITE_PAST, "answers outlive a rewrite");
        let _ = std::fs::remove_dir_all(&d);
    }
}
