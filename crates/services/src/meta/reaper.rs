//! Deleting removed files' objects: the metadata service's own job.
//!
//! A file's last name removed (unlink, or a rename over it) leaves its
//! objects on the data servers. The transaction that removes it also
//! records it in `orphans` (file id -> the data servers of its layout), and
//! a thread of the metadata service deletes the objects and then the
//! record. So:
//! * no answer carries the right to delete data: an unlink is answered
//!   like a create, within the sync window, and a client that dies, or
//!   whose answer was lost, leaves nothing behind;
//! * objects are deleted only once their file's removal is durable (the
//!   thread waits for the window's flush, or makes one if it is late): a
//!   crash can bring back a name removed
//!   within the window, never a name whose data is gone;
//! * a data server that is down keeps its records until it answers (a
//!   deletion is idempotent: deleting an object twice is fine), and a
//!   restart picks the records up again.

use super::group_commit::GroupCommit;
use super::store::Store;
use super::sync_window::{durable_empty_commit, Pending};
use super::tables::Result;
use redb::{TableDefinition, WriteTransaction};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use weft_net::{Call, ClientAuth, Endpoint, EndpointConfig};
use weft_wire::{rights, CapKey, DataReq, FileAttr, FileId, FileKind, Request, Response, ServerId};

/// Removed files whose objects are still to be deleted: file id -> the
/// ids of its layout's data servers (u32 little-endian each).
pub(super) const ORPHANS: TableDefinition<u64, &[u8]> = TableDefinition::new("orphans");

/// Orphans taken per round (one durable commit, one batch of deletions).
const ROUND: usize = 256;

/// Deletions in flight at once.
const WINDOW: usize = 64;

/// How long one round's deletions may take before the unanswered ones
/// wait for the next round.
const DELETE_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest the thread waits for the window's own flush before it makes
/// one (a long window would hold deletions, and the space, for as long).
const FLUSH_WAIT: Duration = Duration::from_millis(100);

/// How often the thread looks without being woken (to retry servers that
/// were down, and to notice the service has gone).
const POLL: Duration = Duration::from_millis(500);

/// A data server that failed a deletion is skipped this long at first,
/// doubling up to [`MAX_BACKOFF`] while it keeps failing.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Records, in the transaction removing it, that file `attr`'s objects are
/// to be deleted (a regular file with a layout; others have none).
pub(super) fn orphan(tx: &WriteTransaction, attr: &FileAttr) -> Result<()> {
    if attr.kind != FileKind::File {
        return Ok(());
    }
    let Some(layout) = &attr.layout else { return Ok(()) };
    tx.open_table(ORPHANS)?.insert(attr.id.0, record_of(&layout.servers).as_slice())?;
    Ok(())
}

/// A record naming `servers`.
fn record_of(servers: &[ServerId]) -> Vec<u8> {
    servers.iter().flat_map(|s| s.0.to_le_bytes()).collect()
}

/// The data servers of a record (a damaged one names none: it is dropped).
fn servers_of(record: &[u8]) -> Vec<ServerId> {
    if !record.len().is_multiple_of(4) {
        return Vec::new();
    }
    record.chunks_exact(4).map(|b| ServerId(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))).collect()
}

/// Where the deletions go, and as whom.
pub struct ReapPlace {
    /// Every data server of the cluster, by id.
    pub servers: HashMap<ServerId, SocketAddr>,
    /// The servers' own credentials.
    pub auth: ClientAuth,
    pub endpoint: EndpointConfig,
}

/// Wakes the thread when a commit recorded orphans; tells the service
/// how many wait.
#[derive(Default)]
pub struct Wake {
    due: Mutex<bool>,
    cond: Condvar,
    /// Records in `orphans` as of the thread's last look (metrics).
    waiting: std::sync::atomic::AtomicU64,
}

impl Wake {
    /// Removed files whose objects still wait to be deleted, as of the
    /// thread's last round.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn notify(&self) {
        *self.due.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cond.notify_all();
    }

    fn wait(&self, timeout: Duration) {
        let due = self.due.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut due, _) = self.cond.wait_timeout_while(due, timeout, |d| !*d).unwrap_or_else(PoisonError::into_inner);
        *due = false;
    }
}

/// Starts the thread; it ends once the service is gone.
pub fn start<R: Send + Sync + 'static, T: Send + 'static>(store: &Arc<Store>, commits: &Arc<GroupCommit<R, T>>, pending: &Arc<Pending>, window: Option<Duration>, key: CapKey, place: ReapPlace, wake: Arc<Wake>) -> std::io::Result<()> {
    let endpoint = Endpoint::new(place.auth.clone(), EndpointConfig { op_timeout: DELETE_TIMEOUT, ..place.endpoint.clone() })?;
    let reaper = Reaper { store: Arc::downgrade(store), commits: Arc::downgrade(commits), pending: pending.clone(), window, key, servers: place.servers, endpoint };
    std::thread::Builder::new().name("weft-meta-reap".into()).spawn(move || reaper.run(&wake)).map(|_| ())
}

struct Reaper<R, T> {
    store: Weak<Store>,
    commits: Weak<GroupCommit<R, T>>,
    pending: Arc<Pending>,
    /// Commits may be answered before they are durable, within this.
    window: Option<Duration>,
    key: CapKey,
    servers: HashMap<ServerId, SocketAddr>,
    endpoint: Endpoint,
}

/// Where the rounds stand: the next record to take, and the servers that
/// failed lately (skipped until their time, so one that stays down holds
/// up neither the others nor the records after its own).
#[derive(Default)]
struct Progress {
    next: u64,
    backoff: HashMap<ServerId, (Instant, Duration)>,
}

/// What a round did with one record.
enum Outcome {
    /// Deleted on every server: the record goes.
    Done,
    /// Deleted on some: the record names the others from now on.
    Left(Vec<ServerId>),
    Untouched,
}

impl<R, T> Reaper<R, T> {
    fn run(&self, wake: &Wake) {
        let mut progress = Progress::default();
        loop {
            let more = match self.round(&mut progress, wake) {
                Ok(Some(more)) => more,
                // The service is gone.
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(target: "weft::meta", error = %e, "could not delete removed files' objects this round; trying again");
                    false
                }
            };
            if !more {
                wake.wait(POLL);
            }
        }
    }

    /// Runs `f` in the group commit's turn (every commit runs in it), with
    /// the store; `None` once the service is gone. A storage failure
    /// reopens the database as the flusher does (redb refuses everything
    /// after a failed commit until reopened).
    fn in_turn<X>(&self, f: impl FnOnce(&Store) -> Result<X>) -> Result<Option<X>> {
        let (Some(store), Some(commits)) = (self.store.upgrade(), self.commits.upgrade()) else { return Ok(None) };
        commits.exclusive(|| match f(&store) {
            Err(e) if e.storage => {
                tracing::error!(target: "weft::meta", error = %e, "deleting removed files' objects hit a storage error: reopening the database");
                if self.pending.is_pending() {
                    self.pending.note_lost();
                }
                store.recover(false);
                self.pending.note_durable();
                Err(e)
            }
            r => r.map(Some),
        })
    }

    /// One round: `Some(true)` if it took a full round (more may wait).
    fn round(&self, progress: &mut Progress, wake: &Wake) -> Result<Option<bool>> {
        // In the turn: the records read, with where durability stood. A
        // record may be of a removal inside the window: before any
        // deletion, a durable commit must follow with no loss between (a
        // reopen after a failed commit drops undurable removals with their
        // records). The window's own flush is waited for, so a stream of
        // removals costs no flush of its own; only one that does not come
        // in time (twice the window, at most FLUSH_WAIT) is made here.
        let Some((orphans, mark)) = self.in_turn(|store| {
            let taken = {
                let db = store.db()?;
                let tx = db.begin_read()?;
                let table = match tx.open_table(ORPHANS) {
                    Ok(t) => t,
                    Err(redb::TableError::TableDoesNotExist(_)) => {
                        wake.waiting.store(0, std::sync::atomic::Ordering::Relaxed);
                        return Ok((Vec::new(), None));
                    }
                    Err(e) => return Err(e.into()),
                };
                wake.waiting.store(redb::ReadableTableMetadata::len(&table)?, std::sync::atomic::Ordering::Relaxed);
                let read = |r: std::result::Result<(redb::AccessGuard<'_, u64>, redb::AccessGuard<'_, &[u8]>), redb::StorageError>| r.map(|(k, v)| (k.value(), servers_of(v.value())));
                let mut taken: Vec<(u64, Vec<ServerId>)> = table.range(progress.next..)?.take(ROUND).map(read).collect::<std::result::Result<_, _>>()?;
                if taken.len() < ROUND && progress.next > 0 {
                    // Round the table: from its start again.
                    let more: Vec<(u64, Vec<ServerId>)> = table.range(..progress.next)?.take(ROUND - taken.len()).map(read).collect::<std::result::Result<_, _>>()?;
                    taken.extend(more);
                }
                taken
            };
            let undurable = !taken.is_empty() && self.window.is_some() && self.pending.is_pending();
            Ok((taken, undurable.then(|| self.pending.mark())))
        })?
        else {
            return Ok(None);
        };
        if let (Some(mark), Some(window)) = (mark, self.window) {
            match self.pending.wait_durable_since(mark, window.saturating_mul(2).min(FLUSH_WAIT)) {
                Some(true) => {}
                // Lost: the records read may be gone. Read them again.
                Some(false) => return Ok(Some(true)),
                None => {
                    let flushed = self.in_turn(|store| {
                        if self.pending.wait_durable_since(mark, Duration::ZERO) == Some(false) {
                            return Ok(false);
                        }
                        if self.pending.is_pending() {
                            durable_empty_commit(store, &self.pending)?;
                            self.pending.note_durable();
                        }
                        Ok(true)
                    })?;
                    match flushed {
                        None => return Ok(None),
                        Some(false) => return Ok(Some(true)),
                        Some(true) => {}
                    }
                }
            }
        }
        let full = orphans.len() == ROUND;
        progress.next = match orphans.last() {
            Some((id, _)) if full => id.saturating_add(1),
            _ => 0,
        };
        if orphans.is_empty() {
            return Ok(Some(false));
        }
        let outcomes = self.delete(&orphans, &mut progress.backoff);
        if outcomes.iter().all(|o| matches!(o, Outcome::Untouched)) {
            return Ok(Some(false));
        }
        let written = self.in_turn(|store| {
            // On a nearly full disk every commit is durable (sync_window).
            let durable = self.window.is_none() || store.space_low();
            let db = store.db()?;
            let mut tx = db.begin_write()?;
            if !durable {
                tx.set_durability(redb::Durability::None);
            }
            {
                let mut table = tx.open_table(ORPHANS)?;
                for ((id, _), outcome) in orphans.iter().zip(&outcomes) {
                    match outcome {
                        Outcome::Done => {
                            table.remove(id)?;
                        }
                        Outcome::Left(servers) => {
                            table.insert(id, record_of(servers).as_slice())?;
                        }
                        Outcome::Untouched => {}
                    }
                }
            }
            tx.commit()?;
            if durable {
                self.pending.note_durable();
            } else {
                // Made durable with the window's next flush; lost, a
                // record only makes its deletions run again.
                self.pending.note_nondurable();
            }
            let done = outcomes.iter().filter(|o| matches!(o, Outcome::Done)).count() as u64;
            let _ = wake.waiting.fetch_update(std::sync::atomic::Ordering::Relaxed, std::sync::atomic::Ordering::Relaxed, |n| Some(n.saturating_sub(done)));
            Ok(())
        })?;
        Ok(written.map(|()| full))
    }

    /// Deletes the orphans' objects on every server not in its backoff.
    fn delete(&self, orphans: &[(u64, Vec<ServerId>)], backoff: &mut HashMap<ServerId, (Instant, Duration)>) -> Vec<Outcome> {
        let now = Instant::now();
        let resting: std::collections::HashSet<ServerId> = backoff.iter().filter(|(_, (until, _))| now < *until).map(|(s, _)| *s).collect();
        let mut sent: Vec<Call<'_>> = Vec::new();
        let mut which = Vec::new();
        let mut deleted = vec![Vec::new(); orphans.len()];
        for (k, (id, servers)) in orphans.iter().enumerate() {
            let cap = self.key.issue(FileId(*id), rights::DELETE, u64::MAX);
            let body = Request::data(cap, DataReq::Delete { file: FileId(*id) }).encode();
            for s in servers.iter().filter(|s| !resting.contains(s)) {
                match self.servers.get(s) {
                    Some(&addr) => {
                        sent.push(Call::new(addr, body.clone()));
                        which.push((k, *s));
                    }
                    // A server no longer in the cluster file: nothing to
                    // delete there (counted as done).
                    None => {
                        tracing::warn!(target: "weft::meta", file = id, server = s.0, "a removed file's data server is not in the cluster file; its object there is left");
                        deleted[k].push(*s);
                    }
                }
            }
        }
        self.endpoint.run_within(&mut sent, WINDOW, DELETE_TIMEOUT);
        let mut failed_servers = std::collections::HashSet::new();
        for (call, (k, s)) in sent.into_iter().zip(which) {
            let ok = match &call.result {
                Some(Ok(reply)) => match Response::decode(&reply.body) {
                    Ok(Response::Ok) => true,
                    answer => {
                        tracing::debug!(target: "weft::meta", file = orphans[k].0, server = %call.peer, ?answer, "a removed file's objects were not deleted; trying again later");
                        false
                    }
                },
                Some(Err(e)) => {
                    tracing::debug!(target: "weft::meta", file = orphans[k].0, server = %call.peer, error = %e, "a removed file's data server did not answer; trying again later");
                    false
                }
                None => false,
            };
            if ok {
                deleted[k].push(s);
            } else {
                failed_servers.insert(s);
            }
        }
        let now = Instant::now();
        for s in self.servers.keys() {
            if failed_servers.contains(s) {
                let wait = backoff.get(s).map_or(FIRST_BACKOFF, |&(_, w)| (w * 2).min(MAX_BACKOFF));
                backoff.insert(*s, (now + wait, wait));
            } else if !resting.contains(s) {
                backoff.remove(s);
            }
        }
        orphans
            .iter()
            .zip(deleted)
            .map(|((_, servers), done)| {
                let left: Vec<ServerId> = servers.iter().filter(|s| !done.contains(s)).copied().collect();
                if left.is_empty() {
                    Outcome::Done
                } else if left.len() == servers.len() {
                    Outcome::Untouched
                } else {
                    Outcome::Left(left)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_name_their_servers_and_damaged_ones_none() {
        let ids = [ServerId(1), ServerId(7), ServerId(u32::MAX)];
        let record = record_of(&ids);
        assert_eq!(servers_of(&record), ids);
        assert!(servers_of(&record[..5]).is_empty());
        assert!(servers_of(&[]).is_empty());
    }
}
