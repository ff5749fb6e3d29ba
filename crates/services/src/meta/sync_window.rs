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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// The flusher's state: when the oldest commit not yet durable was made.
#[derive(Default)]
pub struct Pending {
    since: Mutex<Option<Instant>>,
    wake: Condvar,
    /// Durable commits and losses so far (see [`Mark`]), and their signal.
    durable_commits: AtomicU64,
    losses: AtomicU64,
    flushed: Condvar,
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

    /// After a durable commit: it carried every earlier one to disk. (Also
    /// after a reopen, which [`Pending::note_lost`] reports first.)
    pub fn note_durable(&self) {
        let mut since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        *since = None;
        self.durable_commits.fetch_add(1, Ordering::Release);
        self.flushed.notify_all();
    }

    /// Where durability stands now: commits made before it are on disk
    /// once a durable commit follows it with no loss between.
    pub fn mark(&self) -> Mark {
        let _since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        Mark { durable_commits: self.durable_commits.load(Ordering::Acquire), losses: self.losses.load(Ordering::Acquire) }
    }

    /// Waits, at most `timeout`, for a durable commit after `mark`:
    /// `Some(true)` when one came and nothing was lost since (everything
    /// committed before the mark is durable), `Some(false)` when commits
    /// were lost since (a reopen: what was read before may be gone),
    /// `None` when neither happened in time.
    pub fn wait_durable_since(&self, mark: Mark, timeout: Duration) -> Option<bool> {
        let since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        let moved = |_: &mut Option<Instant>| self.durable_commits.load(Ordering::Acquire) == mark.durable_commits && self.losses.load(Ordering::Acquire) == mark.losses;
        let (_since, waited) = self.flushed.wait_timeout_while(since, timeout, moved).unwrap_or_else(PoisonError::into_inner);
        if self.losses.load(Ordering::Acquire) != mark.losses {
            return Some(false);
        }
        (!waited.timed_out() || self.durable_commits.load(Ordering::Acquire) != mark.durable_commits).then_some(true)
    }

    /// Whether the oldest commit not yet durable is older than `window`
    /// (under load the flusher may not get the turn: the batch then syncs).
    pub fn older_than(&self, window: Duration) -> bool {
        self.since.lock().unwrap_or_else(PoisonError::into_inner).is_some_and(|t| t.elapsed() >= window)
    }

    /// Answered changes were lost.
    pub fn note_lost(&self) {
        self.losses.fetch_add(1, Ordering::Release);
        self.lost.store(true, Ordering::Relaxed);
        self.replies.discard();
    }

    /// Whether a loss is unreported; the caller reports it.
    pub fn take_lost(&self) -> bool {
        self.lost.swap(false, Ordering::Relaxed)
    }

    /// Whether a commit is waiting to be made durable.
    pub fn is_pending(&self) -> bool {
        self.since.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }
}

/// A point in the history of durable commits and losses ([`Pending::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    durable_commits: u64,
    losses: u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_passed_by_a_later_durable_commit_and_spoilt_by_a_loss() {
        let p = Arc::new(Pending::default());
        p.note_nondurable();
        let mark = p.mark();
        assert_eq!(p.wait_durable_since(mark, Duration::ZERO), None, "nothing durable since the mark");
        assert_eq!(p.wait_durable_since(mark, Duration::from_millis(20)), None, "still nothing after a wait");
        // A flush on another thread ends the wait.
        let flusher = {
            let p = p.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                p.note_durable();
            })
        };
        assert_eq!(p.wait_durable_since(mark, Duration::from_secs(10)), Some(true));
        flusher.join().unwrap();
        assert_eq!(p.wait_durable_since(mark, Duration::ZERO), Some(true), "passed for good");
        // A loss (a reopen, which also notes a durable state) spoils a mark
        // taken before it: what was read then may be gone.
        p.note_nondurable();
        let mark = p.mark();
        p.note_lost();
        p.note_durable();
        assert_eq!(p.wait_durable_since(mark, Duration::from_secs(10)), Some(false));
        // A mark after the loss is passed by the next flush.
        let mark = p.mark();
        p.note_durable();
        assert_eq!(p.wait_durable_since(mark, Duration::ZERO), Some(true));
    }
}
