//! Metadata durable within a window (issue 23): with a window set, a
//! mutation is committed without waiting for the disk and answered at
//! once; a flusher thread makes every such commit durable (one fsync for
//! all of them) at most `window` after the first, and `MetaReq::Sync`
//! (a client's fsync or fsyncdir) makes them durable before it is
//! answered. As on a local file system: answers come in order, the
//! database is crash-consistent (redb commits are atomic), and a crash or
//! power cut loses at most the changes of the last window, never one an
//! fsync covered and never half of one.
//!
//! Removals are answered within the window too: a removed file's objects
//! are deleted by the service itself, and only once the removal is
//! durable (see `reaper`), so a crash can never bring back a name whose
//! data is gone.
//!
//! Every commit, the flusher's included, runs under the group commit's
//! turn, so "pending" always describes the database's real state.
//!
//! On a nearly full disk (less free than the space reserve) every commit
//! is durable before its answer again, and changes still pending are made
//! durable first with the reserve released: a failed durable commit needs
//! the database reopened, which would drop them.

use super::group_commit::GroupCommit;
use super::store::Store;
use super::tables::MetaError;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// The flusher's state: when the oldest commit not yet durable was made.
#[derive(Default)]
pub struct Pending {
    since: Mutex<Option<Instant>>,
    wake: Condvar,
    /// Answered changes were lost (a reopen) and no Sync has reported it.
    lost: std::sync::atomic::AtomicBool,
    /// Answers of tagged changes whose commits are not durable yet: every
    /// durable commit writes them ([`durable_empty_commit`] does).
    pub replies: super::replies::Unflushed,
}

impl Pending {
    /// After a commit that was not made durable.
    pub fn note_nondurable(&self) {
        let mut s = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        if s.is_none() {
            *s = Some(Instant::now());
            self.wake.notify_all();
        }
    }

    /// After a durable commit: it carried every earlier one to disk.
    pub fn note_durable(&self) {
        *self.since.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Whether the oldest commit not yet durable is older than `window`
    /// (under load the flusher may not get the turn: the batch then syncs).
    pub fn older_than(&self, window: Duration) -> bool {
        self.since.lock().unwrap_or_else(PoisonError::into_inner).is_some_and(|t| t.elapsed() >= window)
    }

    /// Answered changes were lost.
    pub fn note_lost(&self) {
        self.lost.store(true, std::sync::atomic::Ordering::Relaxed);
        self.replies.discard();
    }

    /// Whether a loss is unreported; the caller reports it.
    pub fn take_lost(&self) -> bool {
        self.lost.swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a commit is waiting to be made durable.
    pub fn is_pending(&self) -> bool {
        self.since.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }
}

/// Starts the flusher: a thread that ends once the service is gone.
pub fn start<R: Send + Sync + 'static, T: Send + 'static>(store: &Arc<Store>, commits: &Arc<GroupCommit<R, T>>, pending: &Arc<Pending>, window: Duration) -> std::io::Result<()> {
    let (store, commits, pending) = (Arc::downgrade(store), Arc::downgrade(commits), Arc::clone(pending));
    std::thread::Builder::new().name("weft-meta-sync".into()).spawn(move || flusher(store, commits, pending, window)).map(|_| ())
}

fn flusher<R, T>(store: Weak<Store>, commits: Weak<GroupCommit<R, T>>, pending: Arc<Pending>, window: Duration) {
    loop {
        // Wait for a pending commit (waking now and then to notice the
        // service has gone), then until its window ends.
        let due = {
            let mut since = pending.since.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                if let Some(t) = *since {
                    break t + window;
                }
                if store.strong_count() == 0 {
                    return;
                }
                since = pending.wake.wait_timeout(since, Duration::from_secs(1)).unwrap_or_else(PoisonError::into_inner).0;
            }
        };
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (Some(store), Some(commits)) = (store.upgrade(), commits.upgrade()) else { return };
        commits.exclusive(|| {
            if !pending.is_pending() {
                return;
            }
            match durable_empty_commit(&store, &pending) {
                Ok(()) => pending.note_durable(),
                Err(e) => {
                    let e = e.message;
                    // redb refuses everything after a failed commit until
                    // reopened; the changes of the window are lost with it.
                    tracing::error!(target: "weft::meta", error = %e, "cannot make metadata changes durable: reopening the database; the changes of the last window are lost");
                    store.recover(false);
                    pending.note_lost();
                    pending.note_durable();
                }
            }
        });
    }
}

/// A durable commit of nothing: it carries every earlier non-durable
/// commit to disk (redb persists the whole current state). On a nearly
/// full disk the space reserve goes first: a failed commit would leave
/// redb needing a reopen, which drops the changes already answered.
pub fn durable_empty_commit(store: &Store, pending: &Pending) -> Result<(), MetaError> {
    if store.space_low() {
        store.release_reserve();
    }
    let db = store.db()?;
    let tx = db.begin_write()?;
    pending.replies.flush(&tx)?;
    tx.commit()?;
    Ok(())
}
