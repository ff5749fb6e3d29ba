//! `weft cp`: local file <-> weft:/path, or weft to weft.

use super::{connect, parse_size, weft_path, PREFIX};
use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File as LocalFile;
use std::os::unix::fs::FileExt;
use std::path::Path;
use weft_client::{Client, CreateOptions};

/// Copies move this many bytes per read/write call.
const BLOCK: usize = 8 << 20;
/// Copies larger than this show a progress bar.
const PROGRESS_ABOVE: u64 = 32 << 20;

#[derive(Args)]
pub struct CpArgs {
    src: String,
    dst: String,
    /// Stripe size of a created Weft file (striping_unit), e.g. 64k, 1m.
    #[arg(long = "stripe-size", value_parser = parse_size)]
    stripe_size: Option<u64>,
    /// Number of data servers a created Weft file spans (striping_factor).
    #[arg(long = "stripe-count")]
    stripe_count: Option<u32>,
}

enum Src<'a> {
    Local(LocalFile),
    Weft(Box<weft_client::File>, &'a str),
}

pub fn cp(cluster: Option<&Path>, a: CpArgs) -> Result<()> {
    let src_weft = a.src.starts_with(PREFIX);
    let dst_weft = a.dst.starts_with(PREFIX);
    if !src_weft && !dst_weft {
        bail!("neither {} nor {} is a weft: path; use the system's cp", a.src, a.dst);
    }
    if a.stripe_size == Some(0) {
        bail!("--stripe-size must be at least 1 byte");
    }
    let c: Client = connect(cluster)?;
    let (src, size) = if src_weft {
        let p = weft_path(&a.src)?;
        let f = c.open(&p, false)?;
        let size = f.size()?;
        (Src::Weft(Box::new(f), &a.src), size)
    } else {
        let f = LocalFile::open(&a.src).with_context(|| format!("cannot open {}", a.src))?;
        let size = f.metadata()?.len();
        (Src::Local(f), size)
    };
    let bar = if size > PROGRESS_ABOVE {
        let b = ProgressBar::new(size);
        b.set_style(ProgressStyle::with_template("{bytes}/{total_bytes} [{wide_bar}] {bytes_per_sec} eta {eta}").expect("valid template"));
        b
    } else {
        ProgressBar::hidden()
    };
    let mut buf = vec![0u8; BLOCK.min(size as usize).max(1)];
    let read = |off: u64, buf: &mut [u8]| -> Result<usize> {
        Ok(match &src {
            Src::Local(f) => f.read_at(buf, off)?,
            Src::Weft(f, name) => f.read_at(off, buf).with_context(|| format!("reading {name}"))?,
        })
    };
    if dst_weft {
        let p = weft_path(&a.dst)?;
        let opts = CreateOptions { stripe_size: a.stripe_size.unwrap_or(0), stripe_count: a.stripe_count.unwrap_or(0), ..CreateOptions::default() };
        let f = c.create(&p, opts)?;
        // Truncating the destination would destroy the source (issue 8).
        if let Src::Weft(sf, _) = &src
            && sf.attr().id == f.attr().id
        {
            bail!("{} and {} are the same file", a.src, a.dst);
        }
        f.truncate(0)?;
        let mut off = 0;
        while off < size {
            let n = read(off, &mut buf)?;
            if n == 0 {
                break;
            }
            f.write_at(off, &buf[..n])?;
            off += n as u64;
            bar.set_position(off);
        }
        f.fsync()?;
        // Tells the metadata service the size (stat then answers alone).
        f.close()?;
    } else {
        if a.stripe_size.is_some() || a.stripe_count.is_some() {
            bail!("--stripe-size and --stripe-count apply only when the destination is weft:");
        }
        let out = LocalFile::create(&a.dst).with_context(|| format!("cannot create {}", a.dst))?;
        let mut off = 0;
        while off < size {
            let n = read(off, &mut buf)?;
            if n == 0 {
                break;
            }
            out.write_all_at(&buf[..n], off)?;
            off += n as u64;
            bar.set_position(off);
        }
    }
    bar.finish_and_clear();
    Ok(())
}
