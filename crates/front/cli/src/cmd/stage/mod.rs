//! Stage-in and stage-out of a job (`weft job start --stage-in`, `weft job
//! stop --stage-out`): local files or trees copied into Weft, or out of
//! it, with progress. On a job of several nodes the copy is spread over
//! them ([`spread`]); `--stage-here` (or a one-node job) copies from the
//! node that runs the command, several files at once.
//!
//! Both ways share the walk (which makes the directories and lists the
//! files), the plan (`weft_launch::job::stage_plan`: files cut into
//! pieces) and the piece copier.

pub mod spread;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use weft_client::{Client, CreateOptions};
use weft_launch::job::stage_plan::{self, Piece, StageItem};

/// Pieces copied at once by one process.
const STREAMS: usize = 8;
/// Bytes per read or write call.
const BLOCK: usize = 4 << 20;
/// Deepest tree copied (a symlink loop cannot make the walk endless:
/// symlinks are not followed, and this bounds what remains).
const MAX_DEPTH: usize = 256;

/// `SRC:weft:/DST` (stage-in) or `weft:/SRC:DST` (stage-out) split in two.
pub fn split_pair(arg: &str, into_weft: bool) -> Result<(String, String)> {
    let (a, b) = if into_weft {
        let i = arg.find(":weft:/").with_context(|| format!("{arg:?}: write LOCAL:weft:/DEST"))?;
        (arg[..i].to_string(), arg[i + 6..].to_string())
    } else {
        let rest = arg.strip_prefix("weft:/").with_context(|| format!("{arg:?}: write weft:/SOURCE:LOCAL"))?;
        let i = rest.find(':').with_context(|| format!("{arg:?}: write weft:/SOURCE:LOCAL"))?;
        (format!("/{}", &rest[..i]), rest[i + 1..].to_string())
    };
    if a.is_empty() || b.is_empty() {
        bail!("{arg:?}: both sides are needed");
    }
    Ok((a, b))
}

/// What a stage moved.
#[derive(Debug, Default)]
pub struct Staged {
    pub bytes: u64,
    pub files: usize,
    /// Bytes each node copied (empty when copied from here).
    pub by_node: Vec<(String, u64)>,
}

/// Walks every pair's source, making the destination's directories, and
/// lists the files to copy; files over `chunk` are split, and their
/// destinations made empty now, so that pieces only write ranges.
fn collect(c: &Client, pairs: &[(String, String)], into_weft: bool, chunk: u64) -> Result<Vec<StageItem>> {
    let mut items = Vec::new();
    for (src, dst) in pairs {
        // Absolute: the workers on other nodes start in other directories.
        let local = |p: &str| std::path::absolute(p).with_context(|| format!("cannot resolve {p}"));
        if into_weft {
            walk_local(c, &local(src)?, dst, 0, chunk, &mut items)?;
        } else {
            walk_weft(c, src, &local(dst)?, 0, chunk, &mut items)?;
        }
        if items.len() > stage_plan::MAX_ITEMS {
            bail!("more than {} files to stage: stage fewer at a time", stage_plan::MAX_ITEMS);
        }
    }
    // Pieces of one destination from two sources would race each other.
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = items.iter().find(|it| !seen.insert(it.to.as_str())) {
        bail!("two sources stage to {}{}: name each destination once", if into_weft { "weft:" } else { "" }, dup.to);
    }
    let sizes: Vec<u64> = items.iter().map(|i| i.size).collect();
    if stage_plan::piece_count(&sizes, chunk).is_none() {
        bail!("--stage-chunk {chunk} cuts these {} files into more than {} pieces: give a larger chunk", items.len(), stage_plan::MAX_PIECES);
    }
    for it in items.iter().filter(|it| it.split) {
        if into_weft {
            let f = c.create(&it.to, CreateOptions::default()).with_context(|| format!("cannot create weft:{}", it.to))?;
            f.truncate(0)?;
            f.close()?;
        } else {
            std::fs::File::create(&it.to).with_context(|| format!("cannot create {}", it.to))?;
        }
    }
    Ok(items)
}

fn walk_local(c: &Client, src: &Path, dst: &str, depth: usize, chunk: u64, items: &mut Vec<StageItem>) -> Result<()> {
    let md = std::fs::symlink_metadata(src).with_context(|| format!("cannot stage in {}", src.display()))?;
    if md.is_dir() {
        if depth > MAX_DEPTH {
            bail!("{} is nested deeper than {MAX_DEPTH} directories", src.display());
        }
        match c.mkdir(dst, 0o755) {
            Ok(_) => {}
            Err(e) if c.stat(dst).is_ok_and(|(a, _)| a.kind == weft_wire::FileKind::Dir) => drop(e),
            Err(e) => return Err(e).with_context(|| format!("cannot create weft:{dst}")),
        }
        let mut names: Vec<PathBuf> = std::fs::read_dir(src)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
        names.sort();
        for p in names {
            let name = p.file_name().and_then(|n| n.to_str()).with_context(|| format!("{} is not a UTF-8 name", p.display()))?;
            walk_local(c, &p, &format!("{}/{name}", dst.trim_end_matches('/')), depth + 1, chunk, items)?;
        }
    } else if md.is_file() {
        let from = src.to_str().with_context(|| format!("{} is not a UTF-8 name", src.display()))?;
        items.push(StageItem { from: from.to_string(), to: dst.to_string(), size: md.len(), split: stage_plan::is_split(md.len(), chunk) });
    }
    // Symlinks and special files are skipped: staging copies data.
    Ok(())
}

fn walk_weft(c: &Client, src: &str, dst: &Path, depth: usize, chunk: u64, items: &mut Vec<StageItem>) -> Result<()> {
    let (attr, size) = c.stat(src).with_context(|| format!("cannot stage out weft:{src}"))?;
    match attr.kind {
        weft_wire::FileKind::Dir => {
            if depth > MAX_DEPTH {
                bail!("weft:{src} is nested deeper than {MAX_DEPTH} directories");
            }
            std::fs::create_dir_all(dst).with_context(|| format!("cannot create {}", dst.display()))?;
            for e in c.readdir(src)? {
                if e.name.is_empty() || e.name.contains(['/', '\0']) || e.name == "." || e.name == ".." {
                    bail!("weft:{src} lists a name that is not a plain name: {:?}", e.name);
                }
                walk_weft(c, &format!("{}/{}", src.trim_end_matches('/'), e.name), &dst.join(&e.name), depth + 1, chunk, items)?;
            }
        }
        weft_wire::FileKind::File => {
            let to = dst.to_str().with_context(|| format!("{} is not a UTF-8 name", dst.display()))?;
            items.push(StageItem { from: src.to_string(), to: to.to_string(), size, split: stage_plan::is_split(size, chunk) });
        }
        _ => {}
    }
    Ok(())
}

/// Copies one piece, made durable (fsync) before it counts as done.
/// `moved` is told of every block.
fn copy_piece(c: &Client, into_weft: bool, it: &StageItem, p: &Piece, moved: &(dyn Fn(u64) + Sync), stop: &AtomicBool) -> Result<()> {
    let stopped = || if stop.load(Ordering::Relaxed) { Err(anyhow::anyhow!("the stage was ended")) } else { Ok(()) };
    let mut buf = vec![0u8; BLOCK.min(p.len as usize).max(1)];
    let end = p.offset + p.len;
    if into_weft {
        let from = std::fs::File::open(&it.from).with_context(|| format!("cannot open {}", it.from))?;
        let f = if it.split {
            c.open(&it.to, true).with_context(|| format!("cannot open weft:{}", it.to))?
        } else {
            let f = c.create(&it.to, CreateOptions::default()).with_context(|| format!("cannot create weft:{}", it.to))?;
            f.truncate(0)?;
            f
        };
        let mut off = p.offset;
        while off < end {
            stopped()?;
            let want = buf.len().min((end - off) as usize);
            let n = from.read_at(&mut buf[..want], off).with_context(|| format!("reading {}", it.from))?;
            if n == 0 {
                bail!("{} ended at byte {off}: it shrank while being staged", it.from);
            }
            f.write_at(off, &buf[..n]).with_context(|| format!("writing weft:{}", it.to))?;
            off += n as u64;
            moved(n as u64);
        }
        f.fsync().with_context(|| format!("fsync of weft:{}", it.to))?;
        f.close()?;
    } else {
        let f = c.open(&it.from, false).with_context(|| format!("cannot open weft:{}", it.from))?;
        let out = if it.split { std::fs::OpenOptions::new().write(true).open(&it.to) } else { std::fs::File::create(&it.to) }.with_context(|| format!("cannot create {}", it.to))?;
        let mut off = p.offset;
        while off < end {
            stopped()?;
            let want = buf.len().min((end - off) as usize);
            let n = f.read_at(off, &mut buf[..want]).with_context(|| format!("reading weft:{}", it.from))?;
            if n == 0 {
                bail!("weft:{} ended at byte {off}: it shrank while being staged", it.from);
            }
            out.write_all_at(&buf[..n], off).with_context(|| format!("writing {}", it.to))?;
            off += n as u64;
            moved(n as u64);
        }
        out.sync_all().with_context(|| format!("fsync of {}", it.to))?;
    }
    Ok(())
}

/// Copies `pieces` of `items`, [`STREAMS`] at a time; stops at the first
/// error, or between blocks once `stop` is set.
fn copy_pieces(c: &Client, into_weft: bool, items: &[StageItem], pieces: &[Piece], moved: &(dyn Fn(u64) + Sync), done: &(dyn Fn() + Sync), stop: &AtomicBool) -> Result<()> {
    let queue = Mutex::new(pieces.iter());
    let first_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let failed = |m: &Mutex<Option<anyhow::Error>>| m.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some();
    std::thread::scope(|s| {
        for _ in 0..STREAMS.min(pieces.len()) {
            s.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next();
                let Some(p) = next else { break };
                if failed(&first_error) {
                    break;
                }
                match copy_piece(c, into_weft, &items[p.item as usize], p, moved, stop) {
                    Ok(()) => done(),
                    Err(e) => drop(first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert(e)),
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A progress bar of bytes.
fn bytes_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(ProgressStyle::with_template("{bytes}/{total_bytes} [{wide_bar}] {bytes_per_sec} eta {eta}").expect("valid template"));
    bar
}

/// Copies every pair from this node (`into_weft`: local to Weft, else
/// Weft to local).
pub fn stage_here(c: &Client, pairs: &[(String, String)], into_weft: bool, chunk: u64) -> Result<Staged> {
    let items = collect(c, pairs, into_weft, chunk)?;
    let sizes: Vec<u64> = items.iter().map(|i| i.size).collect();
    let pieces = stage_plan::plan(&sizes, 1, chunk).pop().unwrap_or_default();
    let bytes = sizes.iter().sum();
    let bar = bytes_bar(bytes);
    let r = copy_pieces(c, into_weft, &items, &pieces, &|n| bar.inc(n), &|| {}, &AtomicBool::new(false));
    bar.finish_and_clear();
    r.map(|()| Staged { bytes, files: items.len(), by_node: Vec::new() })
}

#[cfg(test)]
mod tests {
    #[test]
    fn pairs_split_at_the_weft_side() {
        assert_eq!(super::split_pair("/in/data:weft:/run/in", true).unwrap(), ("/in/data".into(), "/run/in".into()));
        assert_eq!(super::split_pair("weft:/run/out:/home/u/out", false).unwrap(), ("/run/out".into(), "/home/u/out".into()));
        assert!(super::split_pair("/in/data", true).is_err());
        assert!(super::split_pair(":weft:/x", true).is_err());
        assert!(super::split_pair("/run/out:/x", false).is_err());
    }
}
