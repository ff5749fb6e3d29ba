//! Answers kept for tagged namespace changes (`MetaReq::Once`), so that a
//! client resending one after its connection broke (this server restarted,
//! say) gets the answer it missed instead of the change applied again: a
//! resent create would say "exists", a resent rename "not found".
//!
//! The answer is durable exactly when the change is (in the change's own
//! commit if that is durable, else with the next durable commit, see
//! below): after a crash a resend finds either both or neither (and then
//! the change is made now, once). It is kept under the
//! caller's uid and the client's tag (its random number and its count),
//! with the request it answered: only the same identity sending the same
//! request gets it (a tag reused for anything else is refused), and
//! another user's tags never meet it. A create's answer is checked again
//! when replayed (`MetaService::replayed_create`): the capability the
//! answer then carries follows the file as it is now, not as it was.
//!
//! Answers are kept [`KEEP_SECONDS`] (a resend comes within the client's
//! recovery window, a minute by default) and at most [`KEPT`] of them: a
//! sweep every [`SWEEP_EVERY`] answers drops the expired ones, and the
//! oldest beyond the cap (a client flooding the service with tagged
//! changes shortens everyone's keeping; see docs/security.md).
//!
//! A table written by every commit costs it pages of its own (a quarter
//! of the create rate, measured), so answers given by commits that are not
//! durable wait in memory ([`Unflushed`]) and go to the table with the next
//! durable commit, which is what makes their changes durable too: a crash
//! loses a change and its answer together, or keeps both.

use super::tables::{err, Result};
use redb::{ReadableTable, ReadableTableMetadata, Table, TableDefinition, WriteTransaction};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};
use weft_wire::{Cred, Decoder, Encoder, ErrorCode, MetaReq, Response};

/// (uid, client, seq) -> second kept u32 | uid u32 | request's hash [16] | answer.
const REPLIES: TableDefinition<(u64, u64, u64), &[u8]> = TableDefinition::new("replies");

/// How long an answer is kept at least (unless [`KEPT`] is reached).
pub(super) const KEEP_SECONDS: u32 = 600;
/// Answers kept, at most (about 200 bytes each).
pub(super) const KEPT: u64 = 65_536;
/// Answers kept between two sweeps.
pub(super) const SWEEP_EVERY: u64 = 4096;

/// Answers kept since the last sweep (by any service of this process).
static SINCE_SWEEP: AtomicU64 = AtomicU64::new(0);

/// (uid, client, seq): where an answer is kept.
type Key = (u64, u64, u64);

/// Answers of commits not yet durable, for the next durable commit to
/// write (see the module's documentation).
#[derive(Default)]
pub struct Unflushed(Mutex<HashMap<Key, Vec<u8>>>);

impl Unflushed {
    fn get(&self, key: Key) -> Option<Vec<u8>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned()
    }

    /// Writes the waiting answers into `tx`, a durable commit's, and
    /// sweeps when due.
    pub(super) fn flush(&self, tx: &WriteTransaction) -> Result<()> {
        let waiting = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        if waiting.is_empty() {
            return Ok(());
        }
        let mut table = tx.open_table(REPLIES)?;
        for (key, v) in &waiting {
            table.insert(*key, v.as_slice())?;
        }
        if SINCE_SWEEP.fetch_add(waiting.len() as u64, Ordering::Relaxed) + waiting.len() as u64 >= SWEEP_EVERY {
            SINCE_SWEEP.store(0, Ordering::Relaxed);
            sweep(&mut table)?;
        }
        Ok(())
    }

    /// The answers of a commit just made, not durable.
    pub(super) fn add(&self, answers: Vec<(Key, Vec<u8>)>) {
        if !answers.is_empty() {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).extend(answers);
        }
    }

    /// Drops the waiting answers: their commits were lost (a reopen).
    pub fn discard(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

/// The kept answers as one batch sees them: the table, those waiting in
/// memory, and the batch's own (handed over by [`Replies::done`]).
pub(super) struct Replies<'t> {
    table: Table<'t, Key, &'static [u8]>,
    unflushed: &'t Unflushed,
    mine: Vec<(Key, Vec<u8>)>,
}

fn request_hash(op: &MetaReq) -> [u8; 16] {
    let mut e = Encoder::new();
    op.encode(&mut e);
    let mut h = [0u8; 16];
    h.copy_from_slice(&blake3::hash(&e.finish()).as_bytes()[..16]);
    h
}

fn second_now() -> u32 {
    u32::try_from(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())).unwrap_or(u32::MAX)
}

/// (second kept, uid, request's hash, answer) of a stored value.
fn parse(v: &[u8]) -> Option<(u32, u32, [u8; 16], Response)> {
    let mut d = Decoder::new(v);
    Some((d.u32().ok()?, d.u32().ok()?, d.fixed().ok()?, Response::decode(d.rest()).ok()?))
}

/// The second a stored value was kept (its first field alone).
fn kept_at(v: &[u8]) -> u32 {
    v.get(..4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

impl<'t> Replies<'t> {
    pub(super) fn open(tx: &'t WriteTransaction, unflushed: &'t Unflushed) -> Result<Self> {
        Ok(Replies { table: tx.open_table(REPLIES)?, unflushed, mine: Vec::new() })
    }

    /// The answer kept for tag (client, seq), if any, when `cred` sends
    /// `op` under it; an error if the tag answered another request.
    pub(super) fn kept(&self, client: u64, seq: u64, cred: Cred, op: &MetaReq) -> Result<Option<Response>> {
        let key = (u64::from(cred.uid), client, seq);
        let v = match self.mine.iter().rev().find(|(k, _)| *k == key) {
            Some((_, v)) => Some(v.clone()),
            None => match self.unflushed.get(key) {
                Some(v) => Some(v),
                None => self.table.get(key)?.map(|v| v.value().to_vec()),
            },
        };
        let Some(v) = v else { return Ok(None) };
        let (at, uid, request, answer) = parse(&v).ok_or_else(|| err(ErrorCode::Internal, "a kept answer does not decode"))?;
        // Past its time even if no sweep came since.
        if at < second_now().saturating_sub(KEEP_SECONDS) {
            return Ok(None);
        }
        if uid != cred.uid || request != request_hash(op) {
            return Err(err(ErrorCode::BadRequest, "this request tag was used for another request: tags are never reused"));
        }
        Ok(Some(answer))
    }

    /// Keeps `answer` to `cred`'s `op` under tag (client, seq), with the
    /// batch (see [`Replies::done`]).
    pub(super) fn keep(&mut self, client: u64, seq: u64, cred: Cred, op: &MetaReq, answer: &Response) {
        let mut e = Encoder::new();
        e.u32(second_now()).u32(cred.uid).raw(&request_hash(op));
        let mut v = e.finish();
        v.extend_from_slice(&answer.encode());
        self.mine.push(((u64::from(cred.uid), client, seq), v));
    }

    /// Before the batch's commit: into the table if the commit is durable
    /// (with every answer waiting), else returned, for
    /// [`Unflushed::add`] once the commit is made.
    pub(super) fn done(mut self, durable: bool) -> Result<Vec<(Key, Vec<u8>)>> {
        if !durable {
            return Ok(std::mem::take(&mut self.mine));
        }
        for (key, v) in &self.mine {
            self.table.insert(*key, v.as_slice())?;
        }
        Ok(Vec::new())
    }
}

/// Drops the answers kept longer than [`KEEP_SECONDS`], then the oldest
/// until at most [`KEPT`] are left (those of the same second as the last
/// one dropped go too). Returns how many are left.
fn sweep(table: &mut Table<'_, Key, &'static [u8]>) -> Result<u64> {
    let cutoff = second_now().saturating_sub(KEEP_SECONDS);
    let mut seconds = Vec::new();
    for item in table.iter()? {
        let (_, v) = item?;
        seconds.push(kept_at(v.value()));
    }
    seconds.sort_unstable();
    let over = seconds.len().saturating_sub(KEPT as usize);
    let mut drop_before = cutoff;
    if over > 0 {
        drop_before = drop_before.max(seconds[over - 1].saturating_add(1));
    }
    table.retain(|_, v| kept_at(v) >= drop_before)?;
    Ok(table.len()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_wire::LayoutHint;

    /// Stores an answer kept at `second` (as `keep` would have then).
    fn stored(r: &mut Replies<'_>, client: u64, seq: u64, second: u32, op: &MetaReq) {
        let mut e = Encoder::new();
        e.u32(second).u32(0).raw(&request_hash(op));
        let mut v = e.finish();
        v.extend_from_slice(&Response::Ok.encode());
        r.table.insert((0, client, seq), v.as_slice()).unwrap();
    }

    #[test]
    fn a_sweep_drops_expired_answers_then_the_oldest_past_the_cap() {
        let path = std::env::temp_dir().join(format!("weft-replies-{}.redb", rand::random::<u64>()));
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        let unflushed = Unflushed::default();
        let mut r = Replies::open(&tx, &unflushed).unwrap();
        let op = MetaReq::Create { path: "/f".into(), mode: 0o644, exclusive: true, hint: LayoutHint::default() };
        let now = second_now();
        // Expired, kept well within the time, and the newest.
        for seq in 0..10 {
            stored(&mut r, 1, seq, now - KEEP_SECONDS - 5, &op);
            stored(&mut r, 2, seq, now - 100, &op);
        }
        assert_eq!(sweep(&mut r.table).unwrap(), 10);
        assert!(r.kept(1, 3, Cred::new(0, 0), &op).unwrap().is_none(), "an expired answer was kept");
        assert_eq!(r.kept(2, 3, Cred::new(0, 0), &op).unwrap(), Some(Response::Ok));
        // Past the cap: the oldest go first, the newest stay.
        for seq in 0..KEPT + 500 {
            stored(&mut r, 3, seq, now - 50 + (seq * 40 / KEPT) as u32, &op);
        }
        let left = sweep(&mut r.table).unwrap();
        assert!(left <= KEPT && left > KEPT - 2000, "{left} kept");
        assert!(r.kept(2, 3, Cred::new(0, 0), &op).unwrap().is_none(), "the oldest stayed");
        assert!(r.kept(3, KEPT + 499, Cred::new(0, 0), &op).unwrap().is_some(), "the newest went");
        // Only the same identity and request get an answer.
        assert!(r.kept(3, KEPT + 499, Cred::new(1001, 1001), &op).unwrap().is_none(), "another uid's tags met this one's");
        assert!(r.kept(3, KEPT + 499, Cred::new(0, 0), &MetaReq::Unlink { path: "/f".into() }).is_err());
        drop(r);
        drop(tx);
        let _ = std::fs::remove_file(path);
    }
}
