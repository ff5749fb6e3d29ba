//! Changes served on the server's event loop: a metadata change whose
//! commit does not wait for the disk is made on the loop's own thread when
//! no other commit runs or waits, which saves the two thread wake-ups of a
//! hand-off to a worker and back (a chmod through the mount: 225 -> 175 us).
//! Everything else goes to the workers, where concurrent changes share
//! commits: a change another commit is ahead of, one whose commit must be
//! durable (no window, the window's flush overdue, the id ceiling moving,
//! a nearly full disk), one that fails on the storage (a worker reopens
//! the database), and anything on a sharded service (its steps may wait
//! for other shards).

use super::*;

impl MetaService {
    /// Whether the event loop may try change `op` itself
    /// ([`MetaService::try_change_now`]): a plain change of this shard's
    /// alone, within a window, over paths short enough to walk on the loop.
    pub fn changes_on_the_loop(&self, op: &MetaReq) -> bool {
        let plain = matches!(
            op.untagged(),
            MetaReq::Create { .. }
                | MetaReq::Mkdir { .. }
                | MetaReq::Unlink { .. }
                | MetaReq::Rmdir { .. }
                | MetaReq::Rename { .. }
                | MetaReq::Change { .. }
                | MetaReq::Chmod { .. }
                | MetaReq::Chown { .. }
                | MetaReq::SetTimes { .. }
                | MetaReq::Symlink { .. }
                | MetaReq::Link { .. }
                | MetaReq::Mknod { .. }
        );
        plain && self.window.is_some() && !self.shards.sharded() && self.store.at_hand() && reads::bounded_walk(op)
    }

    /// Change `op` (one [`MetaService::changes_on_the_loop`] allows),
    /// committed on the calling thread at once; `None` when another commit
    /// runs or waits, or its commit would wait for the disk (see above):
    /// nothing was changed, and a worker serves it.
    pub fn try_change_now(&self, cred: Cred, op: &MetaReq) -> Option<Response> {
        if self.window.is_none_or(|w| self.pending.older_than(w)) {
            return None;
        }
        let failed = |_: &(Cred, MetaReq)| Err(err(ErrorCode::Internal, "the metadata commit of this change failed inside the server (a bug; see its log): the change was not made"));
        let r = self.commits.try_now((cred, op.clone()), |change| self.commit_inline(change), failed).ok()?;
        Some(self.answer_change(cred, op, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(window: Option<Duration>) -> (MetaService, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("weft-inline-{}", rand::random::<u64>()));
        let key = weft_wire::CapKey::derive(&weft_wire::Secret::new(*b"0123456789abcdef"));
        (MetaService::open(&dir, vec![ServerId(1)], 65536, key, window, ShardPlace::alone()).unwrap(), dir)
    }

    fn create(path: &str) -> MetaReq {
        MetaReq::Create { path: path.into(), mode: 0o644, exclusive: true, hint: LayoutHint::default() }
    }

    #[test]
    fn a_change_is_made_at_once_only_if_its_commit_need_not_be_durable() {
        let (m, dir) = service(Some(Duration::from_secs(60)));
        let root = Cred::new(0, 0);
        // The first create raises the durable ceiling of file ids: not on
        // the loop, and nothing was made.
        assert!(m.changes_on_the_loop(&create("/a")));
        assert!(m.try_change_now(root, &create("/a")).is_none());
        assert!(matches!(m.handle(root, MetaReq::Stat { path: "/a".into() }), Response::Error { code: ErrorCode::NotFound, .. }));
        // Made by the usual path (durable), the next ones are made at once.
        assert!(matches!(m.handle(root, create("/a")), Response::Granted { .. }));
        let durable_before = m.pending.mark();
        assert!(matches!(m.try_change_now(root, &create("/b")), Some(Response::Granted { .. })));
        assert!(matches!(m.try_change_now(root, &MetaReq::Chmod { path: "/b".into(), mode: 0o600 }), Some(Response::Attr(a)) if a.mode & 0o7777 == 0o600));
        assert!(matches!(m.try_change_now(root, &create("/b")), Some(Response::Error { code: ErrorCode::Exists, .. })), "checked as on a worker");
        assert_eq!(m.pending.wait_durable_since(durable_before, Duration::ZERO), None, "no durable commit on the loop");
        // Another commit under way: given back.
        m.commits.exclusive(|| assert!(m.try_change_now(root, &create("/c")).is_none()));
        // Neither requests that are not plain changes nor long paths.
        assert!(!m.changes_on_the_loop(&MetaReq::Sync));
        assert!(!m.changes_on_the_loop(&MetaReq::Stat { path: "/b".into() }));
        assert!(!m.changes_on_the_loop(&create(&"/d".repeat(100))));
        drop(m);
        let _ = std::fs::remove_dir_all(&dir);
        // Without a window every commit is durable: never on the loop.
        let (m, dir) = service(None);
        assert!(!m.changes_on_the_loop(&create("/a")));
        assert!(matches!(m.handle(root, create("/a")), Response::Granted { .. }));
        assert!(m.try_change_now(root, &create("/b")).is_none());
        drop(m);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
