//! Which metadata shard a request goes to (placement in `weft_wire::shard`).
//!
//! A request on a path goes to the shard of its `(parent id, name)`. The
//! client knows a parent's id from a cache of directories it has seen
//! (made, listed, stat'ed, or named in a shard's `Route` answer); on a
//! miss it asks shard 0, which answers with the right shard and the
//! parent's id. The cache needs no invalidation for correctness: every
//! shard walks the path itself and sends a request that is not its own on
//! (a stale id costs one more round trip).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use weft_net::ClusterFile;
use weft_wire::shard::{entry_shard, home_shard};
use weft_wire::{FileId, MetaReq};

/// Directories remembered at most; the cache starts again past it.
const MAX_CACHED_DIRS: usize = 65_536;

pub(crate) struct ShardRouter {
    /// The shards' addresses, in shard order.
    pub(crate) addrs: Vec<SocketAddr>,
    /// Directory path (normalized, "" for the root) to its id.
    dirs: Mutex<HashMap<String, FileId>>,
}

/// `/a//b/./c/` as `a/b/c`; `None` for what the servers refuse anyway
/// (they report it).
fn normalized(path: &str) -> Option<Vec<&str>> {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    (path.starts_with('/') && !comps.contains(&"..")).then_some(comps)
}

impl ShardRouter {
    pub(crate) fn new(cluster: &ClusterFile) -> Self {
        ShardRouter { addrs: cluster.meta_shards().iter().map(|s| s.addr).collect(), dirs: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn count(&self) -> u32 {
        self.addrs.len() as u32
    }

    /// The shard to ask first for `op`.
    pub(crate) fn first(&self, op: &MetaReq) -> u32 {
        let k = self.count();
        if k == 1 {
            return 0;
        }
        match (op.file(), op.path()) {
            (Some(file), _) => home_shard(file, k),
            (None, Some(path)) => self.of_path(path),
            (None, None) => match op.untagged() {
                // Shared file pointers by their token.
                MetaReq::SharedPointer { token, .. } => (token % u64::from(k)) as u32,
                _ => 0,
            },
        }
    }

    fn of_path(&self, path: &str) -> u32 {
        let k = self.count();
        let Some(comps) = normalized(path) else { return 0 };
        let Some((name, parent)) = comps.split_last() else { return home_shard(weft_wire::FileId(1), k) };
        let dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        match dirs.get(&parent.join("/")).copied().or_else(|| parent.is_empty().then_some(FileId(1))) {
            Some(id) => entry_shard(id, name, k),
            None => 0,
        }
    }

    /// A shard said the parent directory of `path` has id `parent`.
    pub(crate) fn learn_parent(&self, path: &str, parent: FileId) {
        if let Some(comps) = normalized(path)
            && let Some((_, dir)) = comps.split_last()
        {
            self.remember(dir.join("/"), parent);
        }
    }

    /// Directory `path` has id `id`.
    pub(crate) fn learn_dir(&self, path: &str, id: FileId) {
        if let Some(comps) = normalized(path) {
            self.remember(comps.join("/"), id);
        }
    }

    /// Directory `path` and everything under it were renamed away.
    pub(crate) fn forget_tree(&self, path: &str) {
        let Some(comps) = normalized(path) else { return };
        let key = comps.join("/");
        let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        // Not a directory known here (a file's rename): nothing to scan.
        if dirs.remove(&key).is_none() {
            return;
        }
        dirs.retain(|k, _| !(k == &key || k.strip_prefix(key.as_str()).is_some_and(|rest| rest.starts_with('/'))));
    }

    fn remember(&self, key: String, id: FileId) {
        let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        if dirs.len() >= MAX_CACHED_DIRS {
            dirs.clear();
        }
        dirs.insert(key, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(k: u32) -> ShardRouter {
        ShardRouter { addrs: (0..k).map(|i| SocketAddr::from(([127, 0, 0, 1], 1000 + i as u16))).collect(), dirs: Mutex::new(HashMap::new()) }
    }

    #[test]
    fn paths_route_by_their_parent_once_it_is_known() {
        let r = router(4);
        // Under the root the parent is known from the start.
        assert_eq!(r.first(&MetaReq::Stat { path: "/x".into() }), entry_shard(FileId(1), "x", 4));
        // An unknown parent: shard 0, which routes it on.
        assert_eq!(r.first(&MetaReq::Stat { path: "/d/x".into() }), 0);
        r.learn_parent("/d//x", FileId(42));
        for name in ["x", "y", "zz"] {
            assert_eq!(r.first(&MetaReq::Unlink { path: format!("/d/./{name}") }), entry_shard(FileId(42), name, 4));
        }
        r.learn_dir("/d/e/", FileId(7));
        assert_eq!(r.first(&MetaReq::Open { path: "/d/e/f".into(), write: false }), entry_shard(FileId(7), "f", 4));
        assert_eq!(r.first(&MetaReq::StatId { file: FileId(7) }), home_shard(FileId(7), 4));
        assert_eq!(r.first(&MetaReq::Stat { path: "relative".into() }), 0);
        assert_eq!(router(1).first(&MetaReq::Stat { path: "/d/x".into() }), 0);
    }

    #[test]
    fn a_renamed_directory_is_forgotten_with_its_subtree_only() {
        let r = router(4);
        for (path, id) in [("/d", 2), ("/d/e", 3), ("/d/e/f", 4), ("/de", 5)] {
            r.learn_dir(path, FileId(id));
        }
        r.forget_tree("/d/");
        assert_eq!(r.first(&MetaReq::Stat { path: "/d/e/x".into() }), 0, "under the renamed directory: asked again");
        assert_eq!(r.first(&MetaReq::Stat { path: "/d/x".into() }), 0);
        assert_eq!(r.first(&MetaReq::Stat { path: "/de/x".into() }), entry_shard(FileId(5), "x", 4), "a sibling whose name begins alike stays");
    }
}
