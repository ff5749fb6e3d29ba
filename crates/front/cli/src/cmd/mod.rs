//! One module per subcommand, plus the helpers they share.

/// `println!` that returns the write's error instead of panicking, so
/// `weft ls | head` ends quietly when `head` exits (see `main`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

pub mod bench;
pub mod config;
pub mod cp;
pub mod fs;
pub mod fuzz;
pub mod job;
pub mod mount;
pub mod mpiio_lib;
pub mod serve;
pub mod sim;
pub mod stage;
pub mod status;
pub mod up;
pub mod watch;

use anyhow::{bail, Context, Result};
use std::path::Path;
use weft_client::{Client, ClientOptions};
use weft_net::settings::Vars;
use weft_net::ClusterFile;

/// The prefix that marks a path inside Weft.
pub const PREFIX: &str = "weft:";

/// Connects to the cluster named by `--cluster` or `WEFT_CLUSTER`.
pub fn connect(cluster: Option<&Path>) -> Result<Client> {
    client_of(&locate(cluster)?)
}

/// The cluster file: `--cluster`, else `WEFT_CLUSTER`.
pub fn locate(cluster: Option<&Path>) -> Result<std::path::PathBuf> {
    Ok(ClusterFile::locate(cluster, &Vars::env())?)
}

/// A client of the cluster file at `path`, with the client variables of
/// this process (read here, once: the layers below never read them).
pub fn client_of(path: &Path) -> Result<Client> {
    let options = ClientOptions::from_vars(&Vars::env())?;
    let cf = ClusterFile::load(path).with_context(|| format!("cannot use cluster file {}", path.display()))?;
    Client::with_options(cf, options).with_context(|| format!("cannot use cluster file {}", path.display()))
}

/// `weft:/a/b` -> `/a/b`; a bare absolute path is accepted where only Weft
/// paths make sense.
pub fn weft_path(arg: &str) -> Result<String> {
    let p = arg.strip_prefix(PREFIX).unwrap_or(arg);
    if !p.starts_with('/') {
        bail!("{arg:?} is not a Weft path: write weft:/dir/file");
    }
    Ok(p.to_string())
}

/// `rwxr-x---` for permission bits, with a leading `d` or `-`.
pub fn mode_string(kind: weft_wire::FileKind, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        weft_wire::FileKind::Dir => 'd',
        weft_wire::FileKind::Symlink => 'l',
        weft_wire::FileKind::File => '-',
        weft_wire::FileKind::Fifo => 'p',
        weft_wire::FileKind::Socket => 's',
    });
    for shift in [6, 3, 0] {
        let b = mode >> shift;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// Parses sizes like `65536`, `64k`, `64KiB`, `1m`, `2G`.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (examples: 4096, 64k, 1MiB)"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("unknown size unit in {s:?} (use k, m or g)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

/// `1.5 MiB`-style rendering of a byte count.
pub use weft_bench::experiment::human_bytes;

/// A name as printed: control characters, backslashes and the Unicode
/// direction controls (U+202A-U+202E, U+2066-U+2069, U+200E/F) escaped as
/// `\n`, `\\`, `\u{202e}`, so a name cannot forge lines or reorder what a
/// terminal shows (as GNU ls does on a terminal).
pub fn shown(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}') => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_cannot_forge_lines_or_reverse_text() {
        assert_eq!(super::shown("plain-name.h5"), "plain-name.h5");
        assert_eq!(super::shown("a\nb"), "a\\nb");
        assert_eq!(super::shown("x\u{202e}fdp.exe"), "x\\u{202e}fdp.exe");
        assert_eq!(super::shown("back\\slash\u{7}"), "back\\\\slash\\u{7}");
        assert_eq!(super::shown("caf\u{e9}"), "caf\u{e9}");
    }
}
