//! An emulated cluster on one machine (issue 13): each server gets its own
//! network namespace, joined to a bridge in the launching namespace by a
//! veth pair whose two ends are rate-capped with `tc tbf`, so links, not
//! loopback's memory copy, bound what crosses them, as on the papers'
//! machines. Addresses come from the benchmarking range 198.18.0.0/15 and
//! exist only inside namespaces this module creates; the bridge holds
//! 198.18.0.1, so processes of the launching namespace (clients) reach
//! every node through it.
//!
//! Names carry the creating process's pid (`weft-<pid>-n<k>`, bridge
//! `wb<pid>`): everything is removed by [`Emulation::destroy`] (also on
//! drop), and leftovers of a process that died are removed by
//! [`clean_stale`], which every new emulation runs first. Needs root.

use std::net::Ipv4Addr;
use std::process::Command;

/// Prefix of every namespace this module creates.
const PREFIX: &str = "weft-";

use crate::LaunchError as EmulateError;

fn fail(msg: String) -> EmulateError {
    EmulateError(format!("emulated cluster: {msg}"))
}

/// One emulated cluster's network.
#[derive(Debug)]
pub struct Emulation {
    owner: u32,
    nodes: usize,
    /// Link rate of every node, in bits per second (`None`: uncapped).
    link_bps: Option<u64>,
    live: bool,
}

fn run(args: &[&str]) -> Result<(), EmulateError> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| fail(format!("cannot run {}: {e} (install iproute2)", args[0])))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(fail(format!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())))
    }
}

/// A rate like `1gbit`, `100mbit`, `500kbit` or a number of bits per second.
pub fn parse_rate(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mul) = [("gbit", 1_000_000_000u64), ("mbit", 1_000_000), ("kbit", 1_000), ("bit", 1)]
        .iter()
        .find_map(|(suffix, m)| s.strip_suffix(suffix).map(|n| (n.to_owned(), *m)))
        .unwrap_or((s.clone(), 1));
    num.trim().parse::<u64>().ok().and_then(|n| n.checked_mul(mul)).filter(|&r| r >= 8_000)
}

/// [`parse_rate`] with the message a command line shows.
pub fn parse_link_arg(s: &str) -> Result<u64, String> {
    parse_rate(s).ok_or_else(|| format!("{s:?} is not a link rate: use e.g. 1gbit, 100mbit, 500kbit (at least 8kbit)"))
}

impl Emulation {
    /// The namespace of node `k`.
    pub fn namespace(&self, k: usize) -> String {
        format!("{PREFIX}{}-n{k}", self.owner)
    }

    /// Node `k`'s address (198.18.0.10 and up).
    pub fn addr(&self, k: usize) -> Ipv4Addr {
        // At most 200 nodes: 198.18.0.10 to 198.18.0.209.
        Ipv4Addr::new(198, 18, 0, (10 + k) as u8)
    }

    fn bridge(&self) -> String {
        format!("wb{}", self.owner)
    }

    fn host_end(&self, k: usize) -> String {
        format!("wv{}n{k}", self.owner)
    }

    /// Creates `nodes` namespaces on one bridge, links capped at
    /// `link_bps` (both directions). Leftovers of dead processes go first.
    pub fn create(nodes: usize, link_bps: Option<u64>) -> Result<Self, EmulateError> {
        if !is_root() {
            return Err(fail("needs root (network namespaces, veth, tc): run as root, or without --emulate".into()));
        }
        if nodes == 0 || nodes > 200 {
            return Err(fail(format!("{nodes} nodes: between 1 and 200")));
        }
        clean_stale();
        let mut emu = Emulation { owner: std::process::id(), nodes, link_bps, live: true };
        if let Err(e) = emu.build() {
            emu.destroy();
            return Err(e);
        }
        Ok(emu)
    }

    fn build(&mut self) -> Result<(), EmulateError> {
        let br = self.bridge();
        run(&["ip", "link", "add", &br, "type", "bridge"])?;
        run(&["ip", "addr", "add", "198.18.0.1/24", "dev", &br])?;
        run(&["ip", "link", "set", &br, "up"])?;
        for k in 0..self.nodes {
            let ns = self.namespace(k);
            let host = self.host_end(k);
            run(&["ip", "netns", "add", &ns])?;
            run(&["ip", "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            run(&["ip", "link", "set", &host, "master", &br, "up"])?;
            let addr = format!("{}/24", self.addr(k));
            run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            run(&["ip", "-n", &ns, "route", "add", "default", "via", "198.18.0.1"])?;
            if let Some(bps) = self.link_bps {
                let rate = format!("{bps}bit");
                // A burst of ~4 ms at the rate (at least 64 KiB): enough for
                // the timer, small enough that the cap holds per request.
                let burst = format!("{}b", (bps / 8 / 250).max(64 * 1024));
                let tbf = |dev: &str, ns: Option<&str>| -> Result<(), EmulateError> {
                    let mut a: Vec<&str> = Vec::new();
                    if let Some(ns) = ns {
                        a.extend(["ip", "netns", "exec", ns]);
                    }
                    a.extend(["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate, "burst", &burst, "latency", "50ms"]);
                    run(&a)
                };
                // Out of the node, and into it.
                tbf("eth0", Some(&ns))?;
                tbf(&host, None)?;
            }
        }
        Ok(())
    }

    /// The command prefix that runs a program inside node `k`.
    pub fn exec_in(&self, k: usize) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.namespace(k)]
    }

    /// A name recording this emulation, for [`destroy_owned_by`].
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// Removes every namespace, link and the bridge (idempotent).
    pub fn destroy(&mut self) {
        if !self.live {
            return;
        }
        self.live = false;
        destroy_owned_by(self.owner);
    }
}

impl Drop for Emulation {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Removes what the emulation of process `owner` created (deleting a
/// namespace removes its veth pair, and the host ends with it).
pub fn destroy_owned_by(owner: u32) {
    for ns in namespaces().into_iter().filter(|n| owner_of(n) == Some(owner)) {
        let _ = run(&["ip", "netns", "del", &ns]);
    }
    let _ = run(&["ip", "link", "del", &format!("wb{owner}")]);
}

/// Removes emulations whose creating process is gone (a crash, a kill).
pub fn clean_stale() {
    let mut owners: Vec<u32> = namespaces().iter().filter_map(|n| owner_of(n)).collect();
    owners.sort_unstable();
    owners.dedup();
    for o in owners.into_iter().filter(|&o| !std::path::Path::new(&format!("/proc/{o}")).exists()) {
        destroy_owned_by(o);
    }
}

#[allow(unsafe_code)]
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Namespaces this module may have created.
pub fn namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    out.lines().filter_map(|l| l.split_whitespace().next()).filter(|n| n.starts_with(PREFIX)).map(str::to_owned).collect()
}

fn owner_of(ns: &str) -> Option<u32> {
    ns.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_like_tc() {
        assert_eq!(parse_rate("1gbit"), Some(1_000_000_000));
        assert_eq!(parse_rate("100mbit"), Some(100_000_000));
        assert_eq!(parse_rate("64000"), Some(64_000));
        assert_eq!(parse_rate("1bit"), None, "below 8 kbit/s is a mistake");
        assert_eq!(parse_rate("fast"), None);
        assert_eq!(parse_rate("99999999999gbit"), None, "overflow");
        assert_eq!(owner_of("weft-123-n4"), Some(123));
        assert_eq!(owner_of("other-123-n4"), None);
    }
}
