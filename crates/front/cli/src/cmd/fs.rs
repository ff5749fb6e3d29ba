//! Namespace commands: mkdir, ls, stat, rm, mv.

use super::{connect, human_bytes, mode_string, shown, weft_path};
use anyhow::{bail, Result};
use clap::Args;
use std::path::Path;
use weft_client::{Client, Error, FileKind};

#[derive(Args)]
pub struct PathArgs {
    /// weft:/path
    path: String,
}

#[derive(Args)]
pub struct MkdirArgs {
    /// Create missing parents; no error if it exists.
    #[arg(short, long)]
    parents: bool,
    /// Permission bits, octal.
    #[arg(short, long, default_value = "755", value_parser = parse_mode)]
    mode: u32,
    paths: Vec<String>,
}

#[derive(Args)]
pub struct LsArgs {
    /// Long listing: mode, owner, size, stripe size and count.
    #[arg(short = 'l')]
    long: bool,
    #[arg(default_value = "weft:/")]
    path: String,
}

#[derive(Args)]
pub struct RmArgs {
    /// Remove directories and their contents.
    #[arg(short, long)]
    recursive: bool,
    paths: Vec<String>,
}

#[derive(Args)]
pub struct MvArgs {
    from: String,
    to: String,
}

fn parse_mode(s: &str) -> std::result::Result<u32, String> {
    u32::from_str_radix(s, 8).ok().filter(|m| *m <= 0o7777).ok_or_else(|| format!("{s:?} is not an octal mode like 755"))
}

pub fn mkdir(cluster: Option<&Path>, a: MkdirArgs) -> Result<()> {
    if a.paths.is_empty() {
        bail!("mkdir needs at least one weft:/path");
    }
    let c = connect(cluster)?;
    for p in &a.paths {
        let path = weft_path(p)?;
        if a.parents {
            let mut cur = String::new();
            for comp in path.split('/').filter(|s| !s.is_empty()) {
                cur = format!("{cur}/{comp}");
                match c.mkdir(&cur, a.mode) {
                    Ok(_) | Err(Error::Exists(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        } else {
            c.mkdir(&path, a.mode)?;
        }
    }
    Ok(())
}

pub fn ls(cluster: Option<&Path>, a: LsArgs) -> Result<()> {
    let c = connect(cluster)?;
    let path = weft_path(&a.path)?;
    let (attr, size) = c.stat(&path)?;
    let listing_dir = attr.kind == FileKind::Dir;
    let entries = if listing_dir {
        c.readdir(&path)?.into_iter().map(|e| (e.name, e.attr)).collect()
    } else {
        vec![(path.rsplit('/').next().unwrap_or(&path).to_string(), attr)]
    };
    // Sizes come from the data servers; one that is down makes a size
    // unknown, which is shown as "?" and reported, never as 0.
    let mut unknown: Vec<String> = Vec::new();
    for (name, attr) in entries {
        if !a.long {
            out!("{}{}", shown(&name), if attr.kind == FileKind::Dir { "/" } else { "" })?;
            continue;
        }
        let full = if path.ends_with('/') { format!("{path}{name}") } else { format!("{path}/{name}") };
        let (size, layout) = match &attr.layout {
            Some(l) => {
                let sz = if !listing_dir {
                    size.to_string()
                } else {
                    match c.stat(&full) {
                        Ok((_, n)) => n.to_string(),
                        Err(e) => {
                            unknown.push(format!("{name}: {e}"));
                            "?".into()
                        }
                    }
                };
                (sz, format!("{:>9} x{:<3}", human_bytes(l.stripe_size), l.servers.len()))
            }
            None => ("0".into(), format!("{:>9} {:<3}", "-", "")),
        };
        // A link shows its target, as ls -l does (escaped like names).
        let target = match attr.kind {
            FileKind::Symlink => c.readlink(&if listing_dir { full } else { path.clone() }).map_or_else(|e| format!(" -> ? ({e})"), |t| format!(" -> {}", shown(&t))),
            _ => String::new(),
        };
        out!("{} {:>5} {:>5} {:>12} {layout} {}{target}", mode_string(attr.kind, attr.mode), attr.uid, attr.gid, size, shown(&name))?;
    }
    if let Some(first) = unknown.first() {
        bail!("size of {} file(s) unknown; first: {first}", unknown.len());
    }
    Ok(())
}

pub fn stat(cluster: Option<&Path>, a: PathArgs) -> Result<()> {
    let c = connect(cluster)?;
    let path = weft_path(&a.path)?;
    let (attr, size) = c.stat(&path)?;
    out!("  path: weft:{}", shown(&path))?;
    out!("    id: {}", attr.id.0)?;
    out!("  type: {}", match attr.kind {
        FileKind::Dir => "directory".to_string(),
        FileKind::File => "regular file".to_string(),
        FileKind::Symlink => format!("symbolic link to {}", shown(&c.readlink(&path)?)),
        FileKind::Fifo => "FIFO (named pipe)".to_string(),
        FileKind::Socket => "socket".to_string(),
    })?;
    out!(" links: {}", attr.nlink)?;
    out!("  mode: {:04o} ({})", attr.mode, mode_string(attr.kind, attr.mode))?;
    out!(" owner: uid {} gid {}", attr.uid, attr.gid)?;
    if let Some(l) = &attr.layout {
        out!("  size: {size} ({})", human_bytes(size))?;
        out!("stripe: {} bytes over {} servers: {:?}", l.stripe_size, l.servers.len(), l.servers.iter().map(|s| s.0).collect::<Vec<_>>())?;
    }
    out!(" mtime: {} ns since epoch", attr.mtime_ns)?;
    Ok(())
}

/// Threads removing files at once: the client runs them concurrently and
/// the metadata service commits them in groups.
const RM_THREADS: usize = 8;

/// Removes `path` and everything below it: every file by `RM_THREADS`
/// threads, then the directories, deepest first.
fn rm_tree(c: &Client, path: &str) -> Result<()> {
    let top = match path.trim_end_matches('/') {
        "" => "/".to_string(),
        p => p.to_string(),
    };
    let (mut dirs, mut files) = (vec![top], Vec::new());
    let mut k = 0;
    while k < dirs.len() {
        for e in c.readdir(&dirs[k])? {
            let child = format!("{}/{}", dirs[k].trim_end_matches('/'), e.name);
            if e.attr.kind == FileKind::Dir { dirs.push(child) } else { files.push(child) }
        }
        k += 1;
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..RM_THREADS.min(files.len()))
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    while let Some(f) = files.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        c.unlink(f)?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().map_err(|_| anyhow::anyhow!("a removal thread panicked"))?)
    })?;
    for d in dirs.iter().rev() {
        c.rmdir(d)?;
    }
    Ok(())
}

pub fn rm(cluster: Option<&Path>, a: RmArgs) -> Result<()> {
    if a.paths.is_empty() {
        bail!("rm needs at least one weft:/path");
    }
    let c = connect(cluster)?;
    for p in &a.paths {
        let path = weft_path(p)?;
        match c.unlink(&path) {
            Err(Error::IsDir(_)) if a.recursive => rm_tree(&c, &path)?,
            Err(Error::IsDir(_)) => bail!("{p} is a directory (use rm -r)"),
            r => r?,
        }
    }
    Ok(())
}

pub fn mv(cluster: Option<&Path>, a: MvArgs) -> Result<()> {
    let c = connect(cluster)?;
    c.rename(&weft_path(&a.from)?, &weft_path(&a.to)?)?;
    Ok(())
}
