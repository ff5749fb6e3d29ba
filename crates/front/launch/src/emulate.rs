//! An emulated cluster on one machine (issue 13): each server gets its own
//! network namespace, joined to a bridge in the launching namespace by a
//! veth pair whose two ends are rate-capped with `tc tbf`, so links, not
//! loopback's memory copy, bound what crosses them, as on the papers'
//! machines. Addresses come from the benchmarking range 198.18.0.0/15 and
//! exist only inside namespaces this module creates: each emulation takes
//! a /24 of its own (198.18.S.0, S the first not held by another live
//! emulation's bridge), whose .1 its bridge holds, so processes of the
//! launching namespace reach every node
//! through it. Client nodes (namespaces after the servers', behind the same
//! links) let client processes run as on a cluster's compute nodes, each
//! node's traffic through its own capped link.
//!
//! A node's disk can be capped too: each server process is put in a
//! cgroup of its own whose throttle limits its reads and writes on the
//! device under the cluster directory: the v1 blkio controller's
//! `blkio.throttle.*_bps_device` where it is mounted, else cgroup v2's
//! `io.max`. The v1 controller throttles I/O the process submits itself:
//! direct I/O, fsync'd writes (and the data service's early write-back),
//! cold reads; not the kernel's own background write-back (v2 also
//! throttles that).
//!
//! Names carry the creating process's pid and a sequence number
//! (`weft-<pid>s<seq>-n<k>`, bridge `wb<pid>s<seq>`): everything is
//! removed by [`Emulation::destroy`] (also on
//! drop), and leftovers of a process that died are removed by
//! [`clean_stale`], which every new emulation runs first. Needs root.

use std::net::Ipv4Addr;
use std::process::Command;

/// Prefix of every namespace and cgroup this module creates.
const PREFIX: &str = "weft-";

/// The v1 block I/O controller's hierarchy.
const BLKIO: &str = "/sys/fs/cgroup/blkio";

/// The v2 unified hierarchy.
const UNIFIED: &str = "/sys/fs/cgroup";

/// Which block I/O controller caps the disks here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DiskController {
    /// cgroup v1 `blkio` at [`BLKIO`].
    V1,
    /// cgroup v2 `io` at [`UNIFIED`].
    V2,
}

impl DiskController {
    /// The one this machine has, v1 first (where both are, v1's `blkio`
    /// holds the disk controller).
    fn detect() -> Option<Self> {
        let root = std::path::Path::new(BLKIO);
        if root.join("blkio.throttle.read_bps_device").exists() {
            return Some(DiskController::V1);
        }
        let controllers = std::fs::read_to_string(std::path::Path::new(UNIFIED).join("cgroup.controllers")).unwrap_or_default();
        controllers.split_whitespace().any(|c| c == "io").then_some(DiskController::V2)
    }

    fn root(self) -> &'static str {
        match self {
            DiskController::V1 => BLKIO,
            DiskController::V2 => UNIFIED,
        }
    }

    /// The files and lines that cap `dev` at `bps` bytes/s each way.
    fn limits(self, dev: &str, bps: u64) -> Vec<(&'static str, String)> {
        match self {
            DiskController::V1 => vec![("blkio.throttle.read_bps_device", format!("{dev} {bps}")), ("blkio.throttle.write_bps_device", format!("{dev} {bps}"))],
            DiskController::V2 => vec![("io.max", format!("{dev} rbps={bps} wbps={bps}"))],
        }
    }
}

use crate::LaunchError as EmulateError;

fn fail(msg: String) -> EmulateError {
    EmulateError(format!("emulated cluster: {msg}"))
}

/// One emulated cluster's network.
#[derive(Debug)]
pub struct Emulation {
    /// The creating process.
    owner: u32,
    /// Which of its emulations (a process may run several at once).
    seq: u32,
    nodes: usize,
    /// Its /24: 198.18.`subnet`.0.
    subnet: u8,
    /// Link rate of every node, in bits per second (`None`: uncapped).
    link_bps: Option<u64>,
    /// Disk cap of every node: the device (`major:minor`) and bytes per second.
    disk: Option<(String, u64)>,
    controller: DiskController,
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
        format!("{PREFIX}{}-n{k}", self.tag())
    }

    /// `<pid>s<seq>`: unique among live emulations.
    pub fn tag(&self) -> String {
        format!("{}s{}", self.owner, self.seq)
    }

    /// How many nodes (namespaces) it has.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Node `k`'s address (198.18.S.10 and up).
    pub fn addr(&self, k: usize) -> Ipv4Addr {
        // At most 200 nodes: 198.18.S.10 to 198.18.S.209.
        Ipv4Addr::new(198, 18, self.subnet, (10 + k) as u8)
    }

    /// The bridge's address, the nodes' gateway.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.subnet, 1)
    }

    /// The bridge joining the nodes (the launching namespace's interface
    /// to them: what Hydra's `-iface` needs).
    pub fn bridge(&self) -> String {
        format!("wb{}", self.tag())
    }

    fn host_end(&self, k: usize) -> String {
        format!("wv{}n{k}", self.tag())
    }

    /// Creates `nodes` namespaces on one bridge, links capped at
    /// `link_bps` (both directions). Leftovers of dead processes go first.
    pub fn create(nodes: usize, link_bps: Option<u64>, disk: Option<(String, u64)>) -> Result<Self, EmulateError> {
        if !is_root() {
            return Err(fail("needs root (network namespaces, veth, tc): run as root, or without --emulate".into()));
        }
        if nodes == 0 || nodes > 200 {
            return Err(fail(format!("{nodes} nodes: between 1 and 200")));
        }
        clean_stale();
        let controller = DiskController::detect();
        if disk.is_some() && controller.is_none() {
            return Err(fail(format!("disk caps need a block I/O controller: cgroup v1 blkio at {BLKIO} or v2 io at {UNIFIED}")));
        }
        if let (Some(DiskController::V2), Some(_)) = (controller, &disk) {
            // Children of the root get the io controller only if asked.
            let control = std::path::Path::new(UNIFIED).join("cgroup.subtree_control");
            std::fs::write(&control, "+io").map_err(|e| fail(format!("cannot enable the io controller in {}: {e}", control.display())))?;
        }
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Picking a subnet and taking it (the bridge's address) is one
        // step among every process's emulations: a mutex for this
        // process's threads, a file lock for other processes.
        static PICK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _picking = PICK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _locked = lock_picking()?;
        let subnet = free_subnet()?;
        let mut emu = Emulation { owner: std::process::id(), seq, nodes, subnet, link_bps, disk, controller: controller.unwrap_or(DiskController::V1), live: true };
        if let Err(e) = emu.build() {
            emu.destroy();
            return Err(e);
        }
        Ok(emu)
    }

    fn build(&mut self) -> Result<(), EmulateError> {
        let br = self.bridge();
        run(&["ip", "link", "add", &br, "type", "bridge"])?;
        run(&["ip", "addr", "add", &format!("{}/24", self.gateway()), "dev", &br])?;
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
            run(&["ip", "-n", &ns, "route", "add", "default", "via", &self.gateway().to_string()])?;
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

    fn cgroup(&self, k: usize) -> std::path::PathBuf {
        std::path::Path::new(self.controller.root()).join(self.namespace(k))
    }

    /// Puts process `pid` (node `k`'s server) under the node's disk cap.
    pub fn confine(&self, k: usize, pid: u32) -> Result<(), EmulateError> {
        let Some((dev, bps)) = &self.disk else { return Ok(()) };
        let cg = self.cgroup(k);
        let write = |file: &str, v: String| std::fs::write(cg.join(file), v).map_err(|e| fail(format!("cannot write {}: {e}", cg.join(file).display())));
        if !cg.exists() {
            std::fs::create_dir(&cg).map_err(|e| fail(format!("cannot create {}: {e}", cg.display())))?;
            for (file, line) in self.controller.limits(dev, *bps) {
                write(file, line)?;
            }
        }
        write("cgroup.procs", pid.to_string())
    }

    /// The command prefix that runs a program inside node `k`.
    pub fn exec_in(&self, k: usize) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.namespace(k)]
    }

    /// Removes every namespace, link, cgroup and the bridge (idempotent).
    pub fn destroy(&mut self) {
        if !self.live {
            return;
        }
        self.live = false;
        destroy_tagged(&self.tag());
    }
}

impl Drop for Emulation {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Removes what the emulation tagged `tag` created (deleting a namespace
/// removes its veth pair, and the host end with it).
fn destroy_tagged(tag: &str) {
    let mine = |n: &String| tag_of(n) == Some(tag);
    for ns in namespaces().into_iter().filter(mine) {
        let _ = run(&["ip", "netns", "del", &ns]);
    }
    let _ = run(&["ip", "link", "del", &format!("wb{tag}")]);
    // A cgroup goes once its processes have. The servers are stopped
    // first; after a crash, any still in it (a dead run's servers, which
    // die with their parent but may not be gone yet) are ended here: only
    // processes this module put there.
    for (root, cg) in cgroups().into_iter().filter(|(_, n)| mine(n)) {
        let dir = std::path::Path::new(root).join(cg);
        let start = std::time::Instant::now();
        loop {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            let pids: Vec<i32> = procs.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.is_empty() || start.elapsed() > std::time::Duration::from_secs(3) {
                break;
            }
            for pid in pids {
                let _ = crate::stop::signal(pid as u32, libc::SIGKILL);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir(&dir);
    }
}


/// Disk cgroups this module may have created, under either hierarchy.
fn cgroups() -> Vec<(&'static str, String)> {
    [BLKIO, UNIFIED]
        .into_iter()
        .flat_map(|root| {
            std::fs::read_dir(root)
                .map(|rd| rd.flatten().filter_map(|e| e.file_name().into_string().ok()).filter(|n| n.starts_with(PREFIX)).map(|n| (root, n)).collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect()
}

/// The whole disk (`major:minor`) under `path`: a partition's parent disk,
/// since the throttle applies to disks.
pub fn disk_of(path: &std::path::Path) -> Result<String, EmulateError> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).map_err(|e| fail(format!("{}: {e}", path.display())))?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let sys = std::path::PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    if !sys.exists() {
        return Err(fail(format!("{} is not on a block device ({major}:{minor}): no disk to cap", path.display())));
    }
    if sys.join("partition").exists() {
        let parent = std::fs::read_to_string(sys.join("../dev")).map_err(|e| fail(format!("the disk of {major}:{minor}: {e}")))?;
        return Ok(parent.trim().to_owned());
    }
    Ok(format!("{major}:{minor}"))
}

/// Takes the machine-wide lock that makes picking a subnet and giving
/// the bridge its address one step (released when the file closes).
#[allow(unsafe_code)]
fn lock_picking() -> Result<std::fs::File, EmulateError> {
    use std::os::fd::AsRawFd;
    let path = std::path::Path::new("/run/weft-emulate.lock");
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(|e| fail(format!("cannot open {}: {e}", path.display())))?;
    // SAFETY: flock(2) on a descriptor this function owns; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(fail(format!("cannot lock {}: {}", path.display(), std::io::Error::last_os_error())));
    }
    Ok(f)
}

/// The first 198.18.S.0/24 no interface of this namespace has an address
/// in (another emulation's bridge, or anything else using the range).
fn free_subnet() -> Result<u8, EmulateError> {
    let out = Command::new("ip").args(["-4", "-o", "addr", "show"]).output().map_err(|e| fail(format!("cannot run ip: {e} (install iproute2)")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let taken: Vec<u8> = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("198.18."))
        .filter_map(|rest| rest.split('.').next()?.parse().ok())
        .collect();
    (0..=255u8).find(|s| !taken.contains(s)).ok_or_else(|| fail("every /24 of 198.18.0.0/16 is in use".into()))
}

/// Removes emulations whose creating process is gone (a crash, a kill).
pub fn clean_stale() {
    let cgs: Vec<String> = cgroups().into_iter().map(|(_, n)| n).collect();
    let mut tags: Vec<String> = namespaces().iter().chain(cgs.iter()).filter_map(|n| tag_of(n)).map(str::to_owned).collect();
    tags.sort_unstable();
    tags.dedup();
    for t in tags {
        if owner_of(&t).is_some_and(|o| !std::path::Path::new(&format!("/proc/{o}")).exists()) {
            destroy_tagged(&t);
        }
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

/// `<pid>s<seq>` of a name `weft-<pid>s<seq>-n<k>`.
fn tag_of(name: &str) -> Option<&str> {
    name.strip_prefix(PREFIX)?.split('-').next()
}

/// The creating pid of a tag (or of a name's tag).
fn owner_of(tag: &str) -> Option<u32> {
    let tag = tag_of(tag).unwrap_or(tag);
    tag.split('s').next()?.parse().ok()
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
        assert_eq!(owner_of("weft-123s2-n4"), Some(123));
        assert_eq!(tag_of("weft-123s2-n4"), Some("123s2"));
        assert_eq!(tag_of("other-123s0-n4"), None);
    }

    #[test]
    fn disk_caps_are_written_in_each_controllers_format() {
        assert_eq!(
            DiskController::V1.limits("8:0", 1000),
            vec![("blkio.throttle.read_bps_device", "8:0 1000".to_string()), ("blkio.throttle.write_bps_device", "8:0 1000".to_string())]
        );
        assert_eq!(DiskController::V2.limits("259:0", 5), vec![("io.max", "259:0 rbps=5 wbps=5".to_string())]);
    }
}
