//! Everyday work through the FUSE mount (issue 21): `tar xf` of a source
//! tree, `git clone` of it (file://), reading every file back cold, and
//! `rm -rf`, each timed on the mount and on a local directory of the same
//! disk, alternating which goes first, in the same run. Neither side is
//! synced (the local side's files may still be in its page cache; Weft's
//! metadata is durable when answered, its data in the servers' page
//! cache). Reads are cold on both sides (page cache dropped). Needs root
//! (the mount, the cache drop), tar and git.
//!
//! A third side, when `bindfs` is installed, is the floor of any FUSE file
//! system here: the same work through bindfs (a FUSE passthrough to a
//! local directory of the same disk, multithreaded), so a ratio is read
//! against what the kernel's round trips to a FUSE daemon cost alone.

use crate::fuse::Mounted;
use crate::{median, BenchCluster};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Params {
    /// Files in the generated tree.
    pub files: usize,
    /// Use this directory's tree instead of a generated one.
    pub tree: Option<PathBuf>,
    pub repeats: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `tar-xf`, `git-clone`, `read-cold` or `rm-rf`.
    pub op: &'static str,
    pub mount_s: f64,
    pub local_s: f64,
    /// Time on the mount over time on the local directory.
    pub ratio: f64,
    /// The same work through bindfs (FUSE passthrough to a local
    /// directory), when installed: the floor of a FUSE file system.
    pub fuse_floor_s: Option<f64>,
    /// `fuse_floor_s` over `local_s`: the least ratio a FUSE file system
    /// reaches here.
    pub floor_ratio: Option<f64>,
    /// Issue 21's goal for the ratio (none for small-file reads).
    pub goal: Option<f64>,
}

const OPS: [(&str, Option<f64>); 4] = [("tar-xf", Some(1.5)), ("git-clone", Some(1.5)), ("read-cold", None), ("rm-rf", Some(2.0))];

/// Deterministic sizes and bytes (xorshift), so every run has one tree.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A source-like tree: `files` files in nested directories (about 12 to
/// a directory), sizes spread from 100 bytes to 64 KiB as a code
/// checkout's are (most small).
fn make_tree(root: &Path, files: usize) -> Result<u64> {
    let mut d = Draw(0x5eed_2021);
    let mut bytes = 0u64;
    for k in 0..files {
        let dir = root.join(format!("m{}/s{}", k / 144, (k / 12) % 12));
        std::fs::create_dir_all(&dir)?;
        // 100 B .. 64 KiB, log-uniform.
        let len = (100.0 * 655.36f64.powf((d.next() % 1000) as f64 / 1000.0)) as usize;
        let body: Vec<u8> = (0..len).map(|_| b"abcdefghijklmnopqrstuvwxyz \n"[(d.next() % 28) as usize]).collect();
        std::fs::write(dir.join(format!("f{k}.rs")), &body)?;
        bytes += len as u64;
    }
    Ok(bytes)
}

fn run_cmd(dir: &Path, what: &str, cmd: &mut Command) -> Result<f64> {
    let t = Instant::now();
    let out = cmd.current_dir(dir).output().with_context(|| format!("cannot run {what}"))?;
    if !out.status.success() {
        bail!("{what} in {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Reads every file under `root`; returns the bytes read.
fn read_all(root: &Path) -> Result<u64> {
    let mut total = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else if e.file_type()?.is_file() {
                total += std::fs::read(e.path())?.len() as u64;
            }
        }
    }
    Ok(total)
}

/// One round on `side`: the four operations' times, in `OPS` order.
fn round(side: &Path, tar: &Path, repo: &Path, want_bytes: u64) -> Result<[f64; 4]> {
    let untarred = side.join("untarred");
    let cloned = side.join("cloned");
    std::fs::create_dir_all(&untarred)?;
    let tar_s = run_cmd(&untarred, "tar xf", Command::new("tar").arg("-xf").arg(tar))?;
    let clone_s = run_cmd(side, "git clone", Command::new("git").args(["clone", "-q"]).arg(format!("file://{}", repo.display())).arg(&cloned))?;
    if !crate::sched::drop_caches() {
        bail!("cold reads need root (to drop the page cache)");
    }
    let t = Instant::now();
    let got = read_all(&untarred)?;
    let read_s = t.elapsed().as_secs_f64();
    if got != want_bytes {
        bail!("read {got} bytes back from {}, the tree has {want_bytes}", untarred.display());
    }
    let rm_s = run_cmd(side, "rm -rf", Command::new("rm").arg("-rf").arg(&untarred).arg(&cloned))?;
    Ok([tar_s, clone_s, read_s, rm_s])
}

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.repeats == 0 || (p.tree.is_none() && p.files == 0) {
        bail!("repeats and files must be at least 1");
    }
    let work = bc.scratch.join("everyday");
    let _ = std::fs::remove_dir_all(&work);
    let src = work.join("src");
    std::fs::create_dir_all(&src)?;
    // The tree, its tarball and a git repository of it, made once.
    progress("making the tree");
    let tree_name = match &p.tree {
        Some(t) => {
            let name = t.file_name().context("--tree needs a directory with a name")?.to_owned();
            run_cmd(&src, "cp -a", Command::new("cp").arg("-a").arg(t).arg(&src))?;
            PathBuf::from(name)
        }
        None => {
            make_tree(&src.join("tree"), p.files)?;
            PathBuf::from("tree")
        }
    };
    let want_bytes = read_all(&src.join(&tree_name))?;
    let tar = work.join("tree.tar");
    run_cmd(&src, "tar cf", Command::new("tar").arg("-cf").arg(&tar).arg(&tree_name))?;
    let repo = src.join(&tree_name);
    let git = |args: &[&str]| -> Result<f64> { run_cmd(&repo, "git", Command::new("git").args(["-c", "user.name=bench", "-c", "user.email=bench@example.org"]).args(args)) };
    if !repo.join(".git").exists() {
        git(&["init", "-q", "-b", "main"])?;
        git(&["add", "-A"])?;
        git(&["commit", "-q", "-m", "tree"])?;
    }
    let mount = Mounted::new(weft_bin, bc)?;
    let floor = Bindfs::new(&work)?;
    let mut sides = vec![mount.0.join("everyday"), work.join("local")];
    if let Some(b) = &floor {
        sides.push(b.point.join("everyday"));
    }
    const NAMES: [&str; 3] = ["mount", "local", "bindfs"];
    let mut times: [[Vec<f64>; 3]; 4] = Default::default();
    for rep in 0..p.repeats {
        // Each side goes first in turn.
        for k in 0..sides.len() {
            let side = (rep + k) % sides.len();
            progress(&format!("round {}/{} {}", rep + 1, p.repeats, NAMES[side]));
            std::fs::create_dir_all(&sides[side])?;
            let t = round(&sides[side], &tar, &repo, want_bytes)?;
            for (k, s) in t.into_iter().enumerate() {
                times[k][side].push(s);
            }
        }
    }
    drop(floor);
    let _ = std::fs::remove_dir_all(&work);
    Ok(OPS
        .iter()
        .zip(times)
        .map(|(&(op, goal), [m, l, f])| {
            let (m, l) = (median(m), median(l));
            let floor = (!f.is_empty()).then(|| median(f));
            Row { op, mount_s: m, local_s: l, ratio: m / l, goal, fuse_floor_s: floor, floor_ratio: floor.map(|f| f / l) }
        })
        .collect())
}

/// A bindfs mount (FUSE passthrough) of a local directory under `work`,
/// unmounted on drop; `None` when bindfs is not installed.
struct Bindfs {
    point: PathBuf,
}

impl Bindfs {
    fn new(work: &Path) -> Result<Option<Self>> {
        if Command::new("bindfs").arg("--version").output().is_err() {
            return Ok(None);
        }
        let (backing, point) = (work.join("bindfs-backing"), work.join("bindfs"));
        std::fs::create_dir_all(&backing)?;
        std::fs::create_dir_all(&point)?;
        run_cmd(work, "bindfs", Command::new("bindfs").arg("--multithreaded").arg(&backing).arg(&point))?;
        Ok(Some(Bindfs { point }))
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        // Lazy: a shell still in it must not keep the mount for good.
        let _ = Command::new("umount").arg("-l").arg(&self.point).status();
    }
}

/// Everyday work through the mount as `weft bench everyday` runs it.
pub struct Everyday<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for Everyday<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "everyday"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params, progress)
    }

    fn plots(&self, stem: &Path, rows: &[Row]) -> Result<Option<Vec<PathBuf>>> {
        let mut bars: Vec<crate::plot::Bar> = Vec::new();
        for r in rows {
            bars.push(crate::plot::Bar { name: r.op.into(), value: r.ratio, goal: r.goal });
            if let Some(f) = r.floor_ratio {
                bars.push(crate::plot::Bar { name: format!("{} (bindfs)", r.op), value: f, goal: None });
            }
        }
        crate::plot::write_bars(stem, "Everyday work: time on the mount / time on a local directory", "mount time / local time", &bars, 1.0).map(Some)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        let goal = |g: Option<f64>| g.map_or("-".to_string(), |g| format!("<= {g:.1}"));
        let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        let table = rows
            .iter()
            .map(|r| vec![r.op.to_string(), format!("{:.3}", r.mount_s), format!("{:.3}", r.local_s), format!("{:.2}", r.ratio), goal(r.goal), opt(r.fuse_floor_s, 3), opt(r.floor_ratio, 2)])
            .collect();
        let p = &self.params;
        let tree = p.tree.as_ref().map_or(format!("a generated tree of {} files", p.files), |t| t.display().to_string());
        crate::experiment::Report::table(
            format!("Everyday work through the mount: {tree}, median of {} (not synced on either side; reads cold)", p.repeats),
            &["op", "mount s", "local s", "mount/local", "goal", "bindfs s", "bindfs/local"],
            table,
        )
        .note(match rows.first().is_some_and(|r| r.fuse_floor_s.is_some()) {
            true => "bindfs: the same work through a FUSE passthrough to a local directory of the same disk (multithreaded): what any FUSE file system pays here",
            false => "bindfs is not installed: no FUSE floor measured (apt install bindfs)",
        })
    }
}
