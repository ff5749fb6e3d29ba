//! Stage-in and stage-out of a job (`weft job start --stage-in`, `weft job
//! stop --stage-out`): a local file or tree copied into Weft, or out of it,
//! several files at once, with progress.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use weft_client::{Client, CreateOptions};

/// Files copied at once.
const STREAMS: usize = 8;
/// Bytes per read or write call.
const BLOCK: usize = 4 << 20;
/// Deepest tree copied (a symlink loop cannot make the walk endless:
/// symlinks are not followed, and this bounds what remains).
const MAX_DEPTH: usize = 256;

/// One file to copy: source and destination, and its size.
struct Item {
    from: String,
    to: String,
    size: u64,
}

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

/// Copies the local file or tree `src` to `dst` in Weft. Returns bytes and files.
pub fn stage_in(c: &Client, src: &Path, dst: &str) -> Result<(u64, usize)> {
    let mut items = Vec::new();
    walk_local(c, src, dst, 0, &mut items)?;
    run(items, |it, bar| {
        let from = std::fs::File::open(&it.from).with_context(|| format!("cannot open {}", it.from))?;
        let f = c.create(&it.to, CreateOptions::default()).with_context(|| format!("cannot create weft:{}", it.to))?;
        f.truncate(0)?;
        let mut buf = vec![0u8; BLOCK.min(it.size as usize).max(1)];
        let mut off = 0;
        while off < it.size {
            let n = from.read_at(&mut buf, off)?;
            if n == 0 {
                break;
            }
            f.write_at(off, &buf[..n]).with_context(|| format!("writing weft:{}", it.to))?;
            off += n as u64;
            bar.inc(n as u64);
        }
        f.fsync()?;
        f.close()?;
        Ok(())
    })
}

fn walk_local(c: &Client, src: &Path, dst: &str, depth: usize, items: &mut Vec<Item>) -> Result<()> {
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
            walk_local(c, &p, &format!("{}/{name}", dst.trim_end_matches('/')), depth + 1, items)?;
        }
    } else if md.is_file() {
        items.push(Item { from: src.display().to_string(), to: dst.to_string(), size: md.len() });
    }
    // Symlinks and special files are skipped: staging copies data.
    Ok(())
}

/// Copies the Weft file or tree `src` to the local `dst`.
pub fn stage_out(c: &Client, src: &str, dst: &Path) -> Result<(u64, usize)> {
    let mut items = Vec::new();
    walk_weft(c, src, dst, 0, &mut items)?;
    run(items, |it, bar| {
        let f = c.open(&it.from, false).with_context(|| format!("cannot open weft:{}", it.from))?;
        let out = std::fs::File::create(&it.to).with_context(|| format!("cannot create {}", it.to))?;
        let mut buf = vec![0u8; BLOCK.min(it.size as usize).max(1)];
        let mut off = 0;
        while off < it.size {
            let n = f.read_at(off, &mut buf).with_context(|| format!("reading weft:{}", it.from))?;
            if n == 0 {
                break;
            }
            out.write_all_at(&buf[..n], off)?;
            off += n as u64;
            bar.inc(n as u64);
        }
        out.sync_all()?;
        Ok(())
    })
}

fn walk_weft(c: &Client, src: &str, dst: &Path, depth: usize, items: &mut Vec<Item>) -> Result<()> {
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
                walk_weft(c, &format!("{}/{}", src.trim_end_matches('/'), e.name), &dst.join(&e.name), depth + 1, items)?;
            }
        }
        weft_wire::FileKind::File => items.push(Item { from: src.to_string(), to: dst.display().to_string(), size }),
        _ => {}
    }
    Ok(())
}

/// Runs `copy` over the items, [`STREAMS`] at a time, with one progress bar.
fn run(items: Vec<Item>, copy: impl Fn(&Item, &ProgressBar) -> Result<()> + Sync) -> Result<(u64, usize)> {
    let total: u64 = items.iter().map(|i| i.size).sum();
    let bar = ProgressBar::new(total);
    bar.set_style(ProgressStyle::with_template("{bytes}/{total_bytes} [{wide_bar}] {bytes_per_sec} eta {eta}").expect("valid template"));
    let queue = Mutex::new(items.iter());
    let first_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..STREAMS.min(items.len()) {
            s.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next();
                let Some(it) = next else { break };
                if first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some() {
                    break;
                }
                if let Err(e) = copy(it, &bar) {
                    first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert(e);
                }
            });
        }
    });
    bar.finish_and_clear();
    match first_error.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner) {
        Some(e) => Err(e),
        None => Ok((total, items.len())),
    }
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
