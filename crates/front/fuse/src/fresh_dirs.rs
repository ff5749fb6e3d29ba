//! Directories this mount made moments ago, and the names asked to be made
//! in them since: a lookup of any other name there is answered "no such
//! entry" without a round trip to the metadata service. `tar xf` and `git
//! clone` look up every name they are about to create, in directories they
//! just made; that lookup was one round trip of the six or so per file.
//!
//! What it relaxes: a name another client makes in such a directory is not
//! seen here until `entry_timeout` after the directory was made (1 s by
//! default), as a name another client removes stays visible here for as
//! long (the kernel's entry cache). A create of that name here still
//! fails with EEXIST (the metadata service checks), and nothing made
//! through this mount is ever hidden: a name is recorded before its
//! request is sent, and kept whatever the answer (a failed or lost request
//! may have made it). Bounded: at most `MAX_DIRS` directories,
//! `MAX_NAMES` names each and `MAX_ALL_NAMES` in all; a directory dropped
//! from the table is asked about as any other.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Directories tracked at once (the oldest go first).
const MAX_DIRS: usize = 256;
/// Names tracked per directory; past it the directory is asked about.
const MAX_NAMES: usize = 8192;
/// Names tracked in all (the directories holding most go first).
const MAX_ALL_NAMES: usize = 65536;

struct Fresh {
    made: Instant,
    names: HashSet<String>,
}

pub(crate) struct FreshDirs {
    dirs: HashMap<u64, Fresh>,
    /// Names recorded since the count was last made (at least those held).
    names: usize,
    /// How long after its making a directory's listing is trusted.
    trust: Duration,
}

impl FreshDirs {
    pub(crate) fn new(trust: Duration) -> Self {
        FreshDirs { dirs: HashMap::new(), names: 0, trust }
    }

    /// Directory `ino` was just made here: it is empty.
    pub(crate) fn made(&mut self, ino: u64, now: Instant) {
        if self.trust.is_zero() {
            return;
        }
        if self.dirs.len() >= MAX_DIRS {
            let trust = self.trust;
            self.dirs.retain(|_, f| now.saturating_duration_since(f.made) < trust);
            if self.dirs.len() >= MAX_DIRS
                && let Some(oldest) = self.dirs.iter().min_by_key(|(_, f)| f.made).map(|(&k, _)| k)
            {
                self.dirs.remove(&oldest);
            }
        }
        self.dirs.insert(ino, Fresh { made: now, names: HashSet::new() });
    }

    /// A request that may make `name` in directory `dir` is about to be
    /// sent: from now on that name is asked about.
    pub(crate) fn naming(&mut self, dir: u64, name: &str, now: Instant) {
        let Some(f) = self.dirs.get_mut(&dir) else { return };
        if f.names.len() >= MAX_NAMES || now.saturating_duration_since(f.made) >= self.trust {
            self.dirs.remove(&dir);
            return;
        }
        f.names.insert(name.to_string());
        self.names += 1;
        if self.names > MAX_ALL_NAMES {
            let trust = self.trust;
            self.dirs.retain(|_, f| now.saturating_duration_since(f.made) < trust);
            while self.dirs.values().map(|f| f.names.len()).sum::<usize>() > MAX_ALL_NAMES / 2
                && let Some(most) = self.dirs.iter().max_by_key(|(_, f)| f.names.len()).map(|(&k, _)| k)
            {
                self.dirs.remove(&most);
            }
            self.names = self.dirs.values().map(|f| f.names.len()).sum();
        }
    }

    /// Whether `name` is surely not in directory `dir`: the directory was
    /// made here within the trusted time and nothing named so here since.
    pub(crate) fn surely_absent(&mut self, dir: u64, name: &str, now: Instant) -> bool {
        let Some(f) = self.dirs.get(&dir) else { return false };
        if now.saturating_duration_since(f.made) >= self.trust {
            self.dirs.remove(&dir);
            return false;
        }
        !f.names.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_never_asked_for_in_a_fresh_directory_are_absent() {
        let t0 = Instant::now();
        let mut f = FreshDirs::new(Duration::from_secs(1));
        assert!(!f.surely_absent(7, "a", t0), "a directory not made here is asked about");
        f.made(7, t0);
        assert!(f.surely_absent(7, "a", t0));
        f.naming(7, "a", t0);
        assert!(!f.surely_absent(7, "a", t0), "a name asked for may exist");
        assert!(f.surely_absent(7, "b", t0 + Duration::from_millis(999)));
        assert!(!f.surely_absent(7, "b", t0 + Duration::from_secs(1)), "trusted for a while only");
        assert!(!f.surely_absent(7, "b", t0), "and forgotten after");
        // Off: nothing is trusted.
        let mut off = FreshDirs::new(Duration::ZERO);
        off.made(1, t0);
        assert!(!off.surely_absent(1, "x", t0));
    }

    #[test]
    fn bounded_in_directories_and_names() {
        let t0 = Instant::now();
        let mut f = FreshDirs::new(Duration::from_secs(1));
        for d in 0..(MAX_DIRS as u64 + 10) {
            f.made(d, t0 + Duration::from_nanos(d));
        }
        assert!(f.dirs.len() <= MAX_DIRS);
        assert!(!f.surely_absent(0, "x", t0), "the oldest went first");
        let last = MAX_DIRS as u64 + 9;
        assert!(f.surely_absent(last, "x", t0));
        for i in 0..MAX_NAMES {
            f.naming(last, &format!("n{i}"), t0);
        }
        f.naming(last, "one more", t0);
        assert!(!f.surely_absent(last, "x", t0), "past the names' cap the directory is asked about");
        // In all: directories holding the most names go.
        let mut f = FreshDirs::new(Duration::from_secs(1));
        for d in 0..20u64 {
            f.made(d, t0);
            for i in 0..(MAX_NAMES - 1) {
                f.naming(d, &format!("n{i}"), t0);
            }
        }
        assert!(f.dirs.values().map(|d| d.names.len()).sum::<usize>() <= MAX_ALL_NAMES);
        // A stale directory takes no more names: it is dropped.
        let mut f = FreshDirs::new(Duration::from_secs(1));
        f.made(3, t0);
        f.naming(3, "late", t0 + Duration::from_secs(2));
        assert!(f.dirs.is_empty());
    }
}
