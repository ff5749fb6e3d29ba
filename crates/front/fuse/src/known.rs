//! The inodes the kernel knows, and the path each has now.
//!
//! The metadata service names entries by path, the kernel by inode: this
//! table maps one to the other. Each inode counts the kernel's references
//! (every entry the mount answers with, from lookup, create, mkdir,
//! symlink and readdirplus, is one), and goes when the kernel forgets them
//! all, so the table holds what the kernel caches, not every file ever
//! seen. A reverse map (path -> inode, ordered) finds the inode at a path
//! and every entry below a directory without a scan.

use std::collections::{BTreeMap, HashMap};

/// The root directory's inode (FUSE's and Weft's).
pub(crate) const ROOT: u64 = 1;

#[derive(Debug)]
struct Entry {
    /// Where it is now; none once removed or moved away by another client.
    path: Option<String>,
    /// The kernel's references.
    lookups: u64,
}

#[derive(Debug)]
pub(crate) struct Known {
    by_ino: HashMap<u64, Entry>,
    by_path: BTreeMap<String, u64>,
}

impl Known {
    pub(crate) fn new() -> Self {
        let mut k = Known { by_ino: HashMap::new(), by_path: BTreeMap::new() };
        k.by_ino.insert(ROOT, Entry { path: Some("/".into()), lookups: 1 });
        k.by_path.insert("/".into(), ROOT);
        k
    }

    pub(crate) fn path(&self, ino: u64) -> Option<&str> {
        self.by_ino.get(&ino).and_then(|e| e.path.as_deref())
    }

    pub(crate) fn ino_at(&self, path: &str) -> Option<u64> {
        self.by_path.get(path).copied()
    }

    /// The kernel was given an entry for `ino` at `path`: one more
    /// reference.
    pub(crate) fn counted(&mut self, ino: u64, path: &str) {
        self.by_ino.entry(ino).or_insert(Entry { path: None, lookups: 0 }).lookups += 1;
        self.set_path(ino, path);
    }

    /// `ino` is at `path` now, if the kernel knows it.
    pub(crate) fn moved(&mut self, ino: u64, path: &str) {
        if self.by_ino.contains_key(&ino) {
            self.set_path(ino, path);
        }
    }

    fn set_path(&mut self, ino: u64, path: &str) {
        let Some(e) = self.by_ino.get_mut(&ino) else { return };
        if e.path.as_deref() == Some(path) {
            return;
        }
        if let Some(old) = e.path.replace(path.to_string()) {
            self.by_path.remove(&old);
        }
        // Whatever was there before is not there now.
        if let Some(other) = self.by_path.insert(path.to_string(), ino)
            && other != ino
            && let Some(o) = self.by_ino.get_mut(&other)
        {
            o.path = None;
        }
    }

    /// The kernel dropped `n` references to `ino`.
    pub(crate) fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let Some(e) = self.by_ino.get_mut(&ino) else { return };
        e.lookups = e.lookups.saturating_sub(n);
        if e.lookups == 0
            && let Some(e) = self.by_ino.remove(&ino)
            && let Some(p) = e.path
        {
            self.by_path.remove(&p);
        }
    }

    /// Every entry at `path` and below it is gone (removed or replaced):
    /// their inodes keep their references but have no path.
    pub(crate) fn gone(&mut self, path: &str) {
        for (_, ino) in self.take_subtree(path) {
            if let Some(e) = self.by_ino.get_mut(&ino) {
                e.path = None;
            }
        }
    }

    /// `ino`'s path is no longer known (another client moved it).
    pub(crate) fn lost(&mut self, ino: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(p) = self.by_ino.get_mut(&ino).and_then(|e| e.path.take()) {
            self.by_path.remove(&p);
        }
    }

    /// `from` (and everything below it) is at `to` now; what was at `to`
    /// is gone.
    pub(crate) fn renamed(&mut self, from: &str, to: &str) {
        self.gone(to);
        for (p, ino) in self.take_subtree(from) {
            let now = format!("{to}{}", &p[from.len()..]);
            if let Some(e) = self.by_ino.get_mut(&ino) {
                e.path = Some(now.clone());
            }
            self.by_path.insert(now, ino);
        }
    }

    /// Removes and returns the reverse entries of `path` and below it.
    fn take_subtree(&mut self, path: &str) -> Vec<(String, u64)> {
        if path == "/" {
            return Vec::new();
        }
        let below = format!("{path}/");
        let mut out: Vec<(String, u64)> = self.by_path.range(below.clone()..).take_while(|(p, _)| p.starts_with(&below)).map(|(p, &i)| (p.clone(), i)).collect();
        if let Some(i) = self.by_path.get(path) {
            out.push((path.to_string(), *i));
        }
        for (p, _) in &out {
            self.by_path.remove(p);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn renames_move_subtrees_and_forgets_drop_entries() {
        let mut k = Known::new();
        k.counted(2, "/a");
        k.counted(3, "/a/b");
        k.counted(4, "/a/b/c");
        k.counted(5, "/ab");
        k.renamed("/a", "/x");
        assert_eq!((k.path(2), k.path(3), k.path(4), k.path(5)), (Some("/x"), Some("/x/b"), Some("/x/b/c"), Some("/ab")), "/ab is not below /a");
        assert_eq!(k.ino_at("/x/b/c"), Some(4));
        assert_eq!(k.ino_at("/a/b"), None);
        k.counted(6, "/y");
        k.renamed("/x/b", "/y");
        assert_eq!((k.path(6), k.path(3), k.path(4)), (None, Some("/y"), Some("/y/c")), "the replaced inode has no path");
        k.counted(3, "/y");
        k.forget(3, 1);
        assert_eq!(k.path(3), Some("/y"), "one reference left");
        k.forget(3, 1);
        assert_eq!((k.path(3), k.ino_at("/y")), (None, None));
        k.gone("/x");
        assert_eq!(k.path(2), None);
        k.forget(ROOT, 100);
        assert_eq!(k.path(ROOT), Some("/"), "the root stays");
        k.moved(99, "/z");
        assert_eq!(k.path(99), None, "an inode the kernel does not know is not kept");
    }

    proptest! {
        /// Whatever happens, the two maps agree, and a forgotten inode
        /// leaves nothing.
        #[test]
        fn both_maps_agree(ops in proptest::collection::vec((0u8..6, 2u64..8, 0usize..6, 0usize..6), 1..60)) {
            let names = ["/a", "/b", "/a/c", "/b/c", "/a/c/d", "/e"];
            let mut k = Known::new();
            for (op, ino, p, q) in ops {
                match op {
                    0 => k.counted(ino, names[p]),
                    1 => k.forget(ino, 1),
                    2 => k.gone(names[p]),
                    3 if !names[q].starts_with(&format!("{}/", names[p])) && names[p] != names[q] => k.renamed(names[p], names[q]),
                    4 => k.lost(ino),
                    _ => k.moved(ino, names[p]),
                }
                for (p, &i) in &k.by_path {
                    prop_assert_eq!(k.path(i), Some(p.as_str()));
                }
                for (&i, e) in &k.by_ino {
                    if let Some(p) = &e.path {
                        prop_assert_eq!(k.ino_at(p), Some(i));
                    }
                    prop_assert!(e.lookups > 0 || i == ROOT);
                }
            }
        }
    }
}
