//! A stage-in or stage-out spread over the job's nodes: the plan (which
//! node copies which bytes of which file) and each node's progress record.
//!
//! ```text
//! DIR/stage/<id>/plan.json   the items and every rank's pieces (0600)
//! DIR/stage/<id>/rank-K      rank K's progress, rewritten every 250 ms
//! ```
//!
//! A file larger than the chunk is cut into chunk-sized pieces, so one
//! large file is copied by every node at once; the pieces go to the node
//! with the fewest bytes so far, largest first (LPT), so no node copies
//! more than an even share plus one piece. [`plan`] is pure.

use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use super::file;
use crate::{fail, LaunchError};

/// The default piece size: large enough that a piece's open and fsync
/// cost little beside its bytes, small enough to spread a file of a few
/// hundred MiB over tens of nodes.
pub const DEFAULT_CHUNK: u64 = 64 << 20;

/// The most files one plan holds.
pub const MAX_ITEMS: usize = 500_000;

/// The most pieces one plan holds (24 bytes each in memory): a small
/// `--stage-chunk` over large files is refused before it is planned.
pub const MAX_PIECES: u64 = 2_000_000;

/// The largest plan file written or read (500,000 files with paths of
/// 100 bytes take about 120 MB).
const MAX_PLAN_BYTES: u64 = 256 << 20;

/// How many pieces `plan` cuts `sizes` into, or `None` past [`MAX_PIECES`].
pub fn piece_count(sizes: &[u64], chunk: u64) -> Option<u64> {
    let chunk = chunk.max(1);
    let mut n: u64 = 0;
    for &size in sizes {
        n = n.checked_add(size.div_ceil(chunk).max(1))?;
        if n > MAX_PIECES {
            return None;
        }
    }
    Some(n)
}

/// One file to copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageItem {
    pub from: String,
    pub to: String,
    pub size: u64,
    /// Copied in several pieces: the coordinator made the destination
    /// before the step, and each piece writes its range into it.
    pub split: bool,
}

/// Bytes `[offset, offset + len)` of item `item`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    pub item: u32,
    pub offset: u64,
    pub len: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagePlan {
    /// 16 hex digits: names the step's directory.
    pub id: String,
    /// Into Weft (stage-in) or out of it.
    pub into_weft: bool,
    pub items: Vec<StageItem>,
    /// Rank k's pieces.
    pub parts: Vec<Vec<Piece>>,
}

/// A worker's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRecord {
    pub rank: u32,
    pub host: String,
    pub bytes: u64,
    pub pieces: u64,
    pub done: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Cuts the items of `sizes` into pieces of at most `chunk` bytes (an
/// empty file is one empty piece, so it is still made) and spreads them
/// over `workers` (at least one).
pub fn plan(sizes: &[u64], workers: usize, chunk: u64) -> Vec<Vec<Piece>> {
    let workers = workers.max(1);
    let chunk = chunk.max(1);
    let mut pieces = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let mut offset = 0;
        loop {
            let len = (size - offset).min(chunk);
            pieces.push(Piece { item: i as u32, offset, len });
            offset += len;
            if offset >= size {
                break;
            }
        }
    }
    // Largest first, then in file order (a stable, reproducible plan).
    pieces.sort_by_key(|p| (Reverse(p.len), p.item, p.offset));
    let mut parts = vec![Vec::new(); workers];
    // (bytes so far, pieces so far, rank): the least loaded first; among
    // equals, fewer pieces (empty files spread too), then the lower rank.
    let mut load: BinaryHeap<Reverse<(u64, usize, usize)>> = (0..workers).map(|k| Reverse((0, 0, k))).collect();
    for p in pieces {
        let Reverse((bytes, n, k)) = load.pop().expect("one entry per worker");
        parts[k].push(p);
        load.push(Reverse((bytes + p.len, n + 1, k)));
    }
    parts
}

/// Whether item `size` is split into several pieces by `chunk`.
pub fn is_split(size: u64, chunk: u64) -> bool {
    size > chunk.max(1)
}

impl StagePlan {
    /// What a plan must hold before a worker copies by it.
    pub fn validate(&self) -> Result<(), String> {
        if self.id.len() != 16 || !self.id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("id {:?} is not 16 hex digits", self.id));
        }
        if self.items.len() > MAX_ITEMS {
            return Err(format!("{} items: at most {MAX_ITEMS}", self.items.len()));
        }
        if self.parts.is_empty() || self.parts.len() > super::rank::MAX_SERVERS as usize {
            return Err(format!("{} parts: from 1 to {}", self.parts.len(), super::rank::MAX_SERVERS));
        }
        for p in self.parts.iter().flatten() {
            let item = self.items.get(p.item as usize).ok_or_else(|| format!("a piece names item {} of {}", p.item, self.items.len()))?;
            let end = p.offset.checked_add(p.len).ok_or("a piece's end overflows")?;
            if end > item.size || (!item.split && (p.offset != 0 || p.len != item.size)) {
                return Err(format!("a piece [{}, {end}) does not fit {} ({} bytes{})", p.offset, item.from, item.size, if item.split { ", split" } else { "" }));
            }
        }
        Ok(())
    }
}

pub fn stage_dir(dir: &Path, id: &str) -> PathBuf {
    dir.join("stage").join(id)
}

pub fn plan_path(dir: &Path, id: &str) -> PathBuf {
    stage_dir(dir, id).join("plan.json")
}

pub fn record_path(dir: &Path, id: &str, rank: u32) -> PathBuf {
    stage_dir(dir, id).join(format!("rank-{rank}"))
}

/// Writes the plan (0600: it names the user's files) into a new step directory.
pub fn save(dir: &Path, plan: &StagePlan) -> Result<(), LaunchError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let sd = stage_dir(dir, &plan.id);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&sd).map_err(|e| fail(format!("cannot create {}: {e}", sd.display())))?;
    let path = plan_path(dir, &plan.id);
    let text = serde_json::to_vec(plan).map_err(|e| fail(format!("cannot encode the stage plan: {e}")))?;
    if text.len() as u64 > MAX_PLAN_BYTES {
        return Err(fail(format!("the stage plan takes {} MiB, more than {} MiB: stage fewer files at a time", text.len() >> 20, MAX_PLAN_BYTES >> 20)));
    }
    let err = |e: std::io::Error| fail(format!("cannot write {}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).map_err(err)?;
    f.write_all(&text).and_then(|()| f.sync_all()).map_err(err)
}

/// Reads and checks plan `id` of the job in `dir`.
pub fn load(dir: &Path, id: &str) -> Result<StagePlan, LaunchError> {
    use std::io::Read;
    if id.len() != 16 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(fail(format!("--plan {id:?} is not 16 hex digits")));
    }
    let path = plan_path(dir, id);
    let f = std::fs::File::open(&path).map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
    let mut text = Vec::new();
    f.take(MAX_PLAN_BYTES + 1).read_to_end(&mut text).map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
    if text.len() as u64 > MAX_PLAN_BYTES {
        return Err(fail(format!("{} is larger than a plan may be ({} MiB)", path.display(), MAX_PLAN_BYTES >> 20)));
    }
    let plan: StagePlan = serde_json::from_slice(&text).map_err(|e| fail(format!("{} is not a stage plan: {e}", path.display())))?;
    if plan.id != id {
        return Err(fail(format!("{} is plan {}, not {id}", path.display(), plan.id)));
    }
    plan.validate().map_err(|why| fail(format!("{}: {why}", path.display())))?;
    Ok(plan)
}

/// Rank `rank`'s progress, if it wrote any.
pub fn read_record(dir: &Path, id: &str, rank: u32) -> Option<StageRecord> {
    file::read::<StageRecord>(&record_path(dir, id, rank)).ok().flatten().filter(|r| r.rank == rank)
}

pub fn write_record(dir: &Path, id: &str, rec: &StageRecord) -> Result<(), LaunchError> {
    file::write(&record_path(dir, id, rec.rank), rec, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_byte_is_copied_once_and_no_node_takes_more_than_its_share(
            sizes in prop::collection::vec(prop_oneof![Just(0u64), 1u64..5_000, 5_000u64..200_000], 0..60),
            workers in 1usize..9,
            chunk in 1u64..70_000,
        ) {
            let parts = plan(&sizes, workers, chunk);
            prop_assert_eq!(parts.len(), workers);
            // Coverage: each item's pieces tile [0, size) exactly.
            let mut by_item: Vec<Vec<(u64, u64)>> = vec![Vec::new(); sizes.len()];
            for p in parts.iter().flatten() {
                prop_assert!(p.len <= chunk);
                by_item[p.item as usize].push((p.offset, p.len));
            }
            for (i, ranges) in by_item.iter_mut().enumerate() {
                ranges.sort_unstable();
                prop_assert!(!ranges.is_empty(), "item {} has no piece", i);
                let mut at = 0;
                for &(off, len) in ranges.iter() {
                    prop_assert_eq!(off, at);
                    at += len;
                }
                prop_assert_eq!(at, sizes[i]);
                prop_assert_eq!(ranges.len() > 1, is_split(sizes[i], chunk));
            }
            // Balance (LPT): no worker above an even share plus one piece.
            let total: u64 = sizes.iter().sum();
            let largest = sizes.iter().map(|&s| s.min(chunk)).max().unwrap_or(0);
            for part in &parts {
                let load: u64 = part.iter().map(|p| p.len).sum();
                prop_assert!(load <= total / workers as u64 + largest, "{} > {} / {} + {}", load, total, workers, largest);
            }
            // A plan made of these parts passes its own check.
            let items = sizes.iter().map(|&size| StageItem { from: "a".into(), to: "b".into(), size, split: is_split(size, chunk) }).collect();
            let sp = StagePlan { id: "0123456789abcdef".into(), into_weft: true, items, parts };
            prop_assert_eq!(sp.validate(), Ok(()));
        }
    }

    #[test]
    fn too_many_pieces_are_counted_before_they_are_made() {
        assert_eq!(piece_count(&[0, 1, 10], 4), Some(1 + 1 + 3));
        assert_eq!(piece_count(&[10 << 30], 1), None, "a 1-byte chunk over 10 GiB");
        assert_eq!(piece_count(&[u64::MAX, u64::MAX], 1), None, "no overflow");
        assert_eq!(piece_count(&[MAX_PIECES], 1), Some(MAX_PIECES));
    }

    #[test]
    fn a_large_file_goes_to_every_node_and_bad_plans_are_refused() {
        let parts = plan(&[10 << 20], 4, 1 << 20);
        assert!(parts.iter().all(|p| p.len() >= 2), "{parts:?}");
        let item = StageItem { from: "a".into(), to: "b".into(), size: 100, split: false };
        let mut sp = StagePlan { id: "0123456789abcdef".into(), into_weft: true, items: vec![item], parts: vec![vec![Piece { item: 0, offset: 0, len: 100 }]] };
        assert_eq!(sp.validate(), Ok(()));
        sp.parts[0][0] = Piece { item: 0, offset: 50, len: 50 };
        assert!(sp.validate().is_err(), "a whole item copied in part");
        sp.items[0].split = true;
        sp.parts[0][0] = Piece { item: 0, offset: u64::MAX, len: 2 };
        assert!(sp.validate().unwrap_err().contains("overflows"));
        sp.parts[0][0] = Piece { item: 1, offset: 0, len: 1 };
        assert!(sp.validate().is_err(), "an item that is not there");
        sp.parts.clear();
        assert!(sp.validate().is_err(), "no parts");
    }
}
