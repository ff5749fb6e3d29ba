//! A group commit's batch (see [`super::group_commit`]): every change of
//! the group applied in one write transaction, durable together or within
//! the window; a storage failure reopens the database and runs the group
//! once more.

use super::*;

impl MetaService {
    /// One group of mutations in one durable commit (see [`group_commit`]).
    /// A storage failure reopens the database; the group then runs once
    /// more, with the space reserve released if it frees space (so a
    /// delete on a full disk succeeds).
    pub(super) fn commit_batch(&self, batch: &[&(Cred, MetaReq)]) -> Vec<Result<Response>> {
        // Never `None` when not inline.
        let all = |r: Result<Option<Vec<Result<Response>>>>| r.map(|r| r.unwrap_or_default());
        match all(self.try_batch(batch, false)) {
            Ok(r) => self.report_loss(batch, r),
            Err(e) if e.storage => {
                let frees = batch.iter().any(|(_, op)| matches!(op.untagged(), MetaReq::Unlink { .. } | MetaReq::Rmdir { .. } | MetaReq::Rename { .. }));
                self.reopen(frees && e.code == ErrorCode::NoSpace);
                all(self.try_batch(batch, false)).map(|r| self.report_loss(batch, r)).unwrap_or_else(|e| {
                    // Reads must keep working: redb refuses everything
                    // after a failed commit until reopened.
                    if e.storage {
                        self.reopen(false);
                    }
                    batch.iter().map(|_| Err(e.duplicate())).collect()
                })
            }
            Err(e) => batch.iter().map(|_| Err(e.duplicate())).collect(),
        }
    }

    /// One change committed at once on the calling thread (the event
    /// loop's, see `inline`), or `None` if its commit would wait for the
    /// disk (durable: the window's flush overdue, the id ceiling moved, the
    /// disk nearly full) or failed: then it is aborted, and a worker's
    /// batch makes it (reopening the database after a storage error).
    pub(super) fn commit_inline(&self, change: &(Cred, MetaReq)) -> Option<Result<Response>> {
        let r = self.try_batch(&[change], true).ok()??;
        self.report_loss(&[change], r).into_iter().next()
    }

    /// A Sync after answered changes were lost (a reopen after a storage
    /// error) fails once, as fsync(2) reports a lost write-back: the first
    /// Sync to come takes the report.
    fn report_loss(&self, batch: &[&(Cred, MetaReq)], results: Vec<Result<Response>>) -> Vec<Result<Response>> {
        batch
            .iter()
            .zip(results)
            .map(|((_, op), r)| match op {
                MetaReq::Sync if self.pending.take_lost() => Err(err(ErrorCode::Io, "metadata changes answered before a storage error may have been lost when the database was reopened")),
                _ => r,
            })
            .collect()
    }

    /// The batch's results; `None` only `inline`, for a commit that would
    /// wait for the disk or a database to reopen (nothing is then changed).
    fn try_batch(&self, batch: &[&(Cred, MetaReq)], inline: bool) -> Result<Option<Vec<Result<Response>>>> {
        // Nearly full: answered changes go to disk first, and this batch's
        // are durable before their answers (see [`sync_window`]).
        let low = self.window.is_some() && self.store.space_low();
        // Nor a database closed after a storage error: opening it is a
        // worker's (`Store::db` reopens).
        if inline && (low || self.window.is_none() || !self.store.at_hand()) {
            return Ok(None);
        }
        if low && self.pending.is_pending() {
            sync_window::durable_empty_commit(&self.store, &self.pending)?;
            self.pending.note_durable();
        }
        let db = self.store.db()?;
        let mut tx = db.begin_write()?;
        self.ceiling_moved.store(false, Ordering::Relaxed);
        self.logged.store(false, Ordering::Relaxed);
        let mut results = Vec::with_capacity(batch.len());
        let (mut created, mut replayed) = (Vec::new(), Vec::new());
        tables::CHANGED_DIRS.with(|c| c.borrow_mut().clear());
        // Opened once for the batch: each table a change touches costs the
        // commit pages of its own.
        let mut kept = match batch.iter().any(|(_, op)| matches!(op, MetaReq::Once { .. })) {
            true => Some(replies::Replies::open(&tx, &self.pending.replies)?),
            false => None,
        };
        for (cred, op) in batch {
            // Every mutation checks everything before it writes, so one that
            // fails leaves nothing for the others to see (at most an id
            // counter moved on: ids are never reused anyway).
            let before = tables::CHANGED_DIRS.with(|c| c.borrow().len());
            let r = self.apply(&tx, *cred, op, kept.as_mut());
            // A pushed directory change moved its parent's times on every
            // shard already; a file taken from another shard (Adopt) or a
            // name made or dropped for one (Name, Unname) did not.
            if matches!(op, MetaReq::Replica { op, .. } if !matches!(**op, weft_wire::ReplicaOp::Adopt { .. } | weft_wire::ReplicaOp::Name { .. } | weft_wire::ReplicaOp::Unname { .. })) {
                tables::CHANGED_DIRS.with(|c| c.borrow_mut().truncate(before));
            }
            match &r {
                Ok((_, Outcome::Created)) => created.push(results.len()),
                Ok((_, Outcome::Replayed)) => replayed.push(results.len()),
                _ => {}
            }
            let r = r.map(|(rsp, _)| rsp);
            if let Err(e) = &r
                && e.storage
            {
                return Err(e.duplicate());
            }
            results.push(r);
        }
        let overdue = self.window.is_some_and(|w| self.pending.older_than(w));
        let durable = self.window.is_none() || low || overdue || self.ceiling_moved.load(Ordering::Relaxed) || self.logged.load(Ordering::Relaxed) || batch.iter().any(|(_, op)| must_be_durable(op));
        if inline && durable {
            // Dropped uncommitted: the transaction is aborted.
            return Ok(None);
        }
        // The batch's kept answers: in this commit if it is durable (with
        // all that wait), else in memory once it is made.
        let answers = kept.map(|k| k.done(durable)).transpose()?.unwrap_or_default();
        if durable {
            self.pending.replies.flush(&tx)?;
        } else {
            tx.set_durability(redb::Durability::None);
        }
        tx.commit()?;
        self.pending.replies.add(answers);
        let changed = tables::CHANGED_DIRS.with(|c| std::mem::take(&mut *c.borrow_mut()));
        self.shards.touched(changed);
        if durable {
            self.pending.note_durable();
            // Under the turn and with nothing pending: the reserve is not
            // taken back from under a flush that needs it.
            if !self.store.space_low() {
                self.store.restore_reserve();
            }
        } else {
            self.pending.note_nondurable();
        }
        // Committed now: what the size table learns from it.
        for (k, ((_, op), r)) in batch.iter().zip(&results).enumerate() {
            // A kept answer replayed: its change was learnt from when made.
            if replayed.contains(&k) {
                continue;
            }
            match (op.untagged(), r) {
                (MetaReq::Create { .. }, Ok(Response::Attr(a))) => self.sizes.opened(a.id, created.contains(&k)),
                (MetaReq::Unlink { .. }, Ok(Response::Unlinked { file: Some(a), .. })) | (MetaReq::Rename { .. }, Ok(Response::Renamed { replaced: Some((a, _)) })) => {
                    self.sizes.forget(a.id);
                    self.reap.notify();
                }
                _ => {}
            }
        }
        Ok(Some(results))
    }
}
