//! `weft job` with real launchers: servers started through ssh (a local
//! stand-in, or one that enters network-namespace nodes), through both
//! MPIs' mpiexec into namespace nodes, and through a real Slurm (slurmctld
//! and one slurmd per namespace node, started here). Every start must
//! return only when the servers answer, every failure must name the node
//! and leave nothing running.

use weft_testkit::mpi::{library, sources, Mpi, MPICH, OPENMPI};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use weft_launch::emulate::Emulation;

/// This crate's `weft` binary, built by cargo for these tests.
const WEFT: &str = env!("CARGO_BIN_EXE_weft");

/// A scratch directory; on drop, every process still naming it (servers
/// and launchers this test started, whose command lines hold it) is
/// killed and the directory removed.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("weft-job-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn job(&self) -> PathBuf {
        self.path("job")
    }

    /// Processes whose command line names this directory.
    fn processes(&self) -> Vec<u32> {
        processes_naming(&self.0)
    }

    /// A script that takes ssh's place: skips ssh's options, then runs the
    /// command on "host" `NAME`: here (`local`), or inside the network
    /// namespace NAME (`netns`), with NAME as its host name (a UTS
    /// namespace of its own: Open MPI tells nodes apart by host name). Any host named `missing*` fails as an
    /// unknown host does; a host named `lost*` runs servers but loses the
    /// connection of a stage worker, and one named `blind*` runs stage
    /// workers that do not see the directory `$WEFT_TEST_HIDE` (a tmpfs
    /// over it in a mount namespace of their own). Commands start in `/`,
    /// as ssh's start in the home directory.
    fn agent(&self, netns: bool) -> PathBuf {
        let p = self.path(if netns { "agent-netns" } else { "agent-local" });
        let run = if netns { r#"exec nsenter --net=/run/netns/"$host" unshare --uts sh -c 'hostname "$0"; exec sh -c "$1"' "$host" "$*""# } else { r#"cd /; exec sh -c "$*""# };
        let script = format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do case \"$1\" in -o|-p|-l|-i) shift 2;; -*) shift;; *) break;; esac; done\nhost=$1; shift\ncase \"$host\" in missing*) echo \"ssh: Could not resolve hostname $host\" >&2; exit 255;; esac\ncase \"$host:$*\" in lost*stage-worker*) echo \"$host: connection lost\" >&2; exit 7;; blind*stage-worker*) [ -n \"$WEFT_TEST_HIDE\" ] && exec unshare --mount sh -c 'mount -t tmpfs none \"$0\" && exec sh -c \"$1\"' \"$WEFT_TEST_HIDE\" \"$*\";; esac\n{run}\n"
        );
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn hostfile(&self, hosts: &[String]) -> PathBuf {
        let p = self.path("hosts");
        std::fs::write(&p, hosts.iter().map(|h| format!("{h} slots=1\n")).collect::<String>()).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for p in self.processes() {
            // SAFETY: kill(2); p names this test's own scratch directory.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn processes_naming(dir: &Path) -> Vec<u32> {
    let needle = dir.as_os_str().as_encoded_bytes().to_vec();
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != me)
        .filter(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let zombie = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default().rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z'));
            !zombie && cmd.windows(needle.len()).any(|w| w == needle.as_slice())
        })
        .collect()
}

/// Runs `weft ARGS` (bounded: a hang fails the test).
fn weft(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new("timeout");
    c.arg("120").arg(WEFT).args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    // Rank variables of an enclosing launcher must not leak into the servers.
    for k in [
        "SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_PROCID", "SLURM_NTASKS", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "PMIX_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "WEFT_RANK",
        "WEFT_GROUP_SIZE",
    ] {
        if !env.iter().any(|(e, _)| *e == k) {
            c.env_remove(k);
        }
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn ok(o: &Output, what: &str) -> String {
    assert!(o.status.success(), "{what} failed ({}):\n{}", o.status, text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(o: &Output, what: &str) -> String {
    assert!(!o.status.success(), "{what} should have failed:\n{}", text(o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn hosts(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|k| format!("{prefix}{k}")).collect()
}

/// `weft job start` through the local ssh stand-in on `hosts`.
fn start_local(s: &Scratch, hosts: &[String], extra: &[&str]) -> Output {
    let hf = s.hostfile(hosts);
    let agent = s.agent(false);
    let data = s.path("data");
    let job = s.job();
    let mut args = vec!["job", "start", "--dir", job.to_str().unwrap(), "--hostfile", hf.to_str().unwrap(), "--launcher", "ssh", "--ssh", agent.to_str().unwrap()];
    if !extra.contains(&"--data") {
        args.extend(["--data", data.to_str().unwrap()]);
    }
    args.extend_from_slice(extra);
    weft(&args, &[])
}

fn stop(s: &Scratch, extra: &[&str]) -> Output {
    let job = s.job();
    let mut args = vec!["job", "stop", "--dir", job.to_str().unwrap()];
    args.extend_from_slice(extra);
    weft(&args, &[])
}

/// The rank files of the running job: (rank, pid, address, data dir).
fn ranks(s: &Scratch) -> Vec<weft_launch::job::file::RankRecord> {
    let job: weft_launch::job::file::JobFile = weft_launch::job::file::read(&weft_launch::job::file::job_path(&s.job())).unwrap().expect("a job file");
    weft_launch::job::rendezvous::read(&s.job(), &job).ranks.into_iter().map(|r| r.expect("every rank file")).collect()
}

/// Waits (bounded) until no process names the job directory (servers and
/// launchers do; a test's Slurm and munged do not).
fn nothing_left(s: &Scratch, what: &str) {
    let t = Instant::now();
    while !processes_naming(&s.job()).is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = processes_naming(&s.job());
    let cmds: Vec<String> = left.iter().map(|p| String::from_utf8_lossy(&std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default()).replace('\0', " ")).collect();
    assert!(left.is_empty(), "{what}: processes left running: {cmds:?}");
}

#[test]
fn a_job_starts_serves_stages_and_stops_leaving_nothing() {
    let s = Scratch::new("local");
    let input = s.path("input");
    std::fs::create_dir_all(input.join("sub")).unwrap();
    let big = weft_testkit::pattern(7, 3 << 20);
    std::fs::write(input.join("sub/big"), &big).unwrap();
    std::fs::write(input.join("small"), b"hello").unwrap();
    let stage_in = format!("{}:weft:/in", input.display());
    let out = ok(&start_local(&s, &hosts("node", 3), &["--stage-in", &stage_in, "--meta-shards", "2", "--stage-chunk", "1m"]), "start");
    assert!(out.contains("Weft job up: 3 servers") && out.contains("export WEFT_CLUSTER="), "{out}");
    // Spread: the 3 MiB file in 1 MiB pieces, one piece per node.
    assert!(out.contains("staged in 2 files, 3.0 MiB over 3 nodes (node0 1.0 MiB, node1 1.0 MiB, node2 1.0 MiB)"), "{out}");
    // Every rank on its own data directory, rank 0 with the metadata.
    let rs = ranks(&s);
    assert_eq!(rs.iter().map(|r| r.dir.clone()).collect::<Vec<_>>(), (0..3).map(|k| s.path("data").join(format!("rank{k}"))).collect::<Vec<_>>());
    let cluster = s.job().join("cluster.toml");
    let cf = weft_net::ClusterFile::load(&cluster).unwrap();
    assert_eq!(cf.data_servers().len(), 3, "every node stores data");
    assert_eq!(cf.meta_shards().iter().map(|s| s.id).collect::<Vec<_>>(), [0, 1], "ranks 0 and 1 keep the metadata");
    // The stage-in is there, byte for byte, striped over the servers.
    let c = weft_client::Client::connect(&cluster).unwrap();
    let f = c.open("/in/sub/big", false).unwrap();
    let mut got = vec![0u8; big.len()];
    assert_eq!(f.read_at(0, &mut got).unwrap(), big.len());
    assert!(got == big, "staged-in bytes differ");
    let st = ok(&weft(&["job", "status", "--dir", s.job().to_str().unwrap()], &[]), "status");
    assert_eq!(st.lines().filter(|l| l.ends_with(" up")).count(), 3, "{st}");
    // Each server serves metrics on its own address, named in the cluster
    // file; over them, the bytes written are the stage-in's.
    let mut written = 0.0;
    for srv in &cf.servers {
        let at = srv.metrics.expect("a job's servers serve metrics by default");
        assert_eq!(at.ip(), srv.addr.ip());
        let page = weft_testkit::get(at, "/metrics").1;
        written += weft_testkit::value(&page, &format!("weft_request_bytes_total{{server=\"{}\",kind=\"data-write\",direction=\"in\"}}", srv.id)).expect("a data server's series");
    }
    assert_eq!(written, (big.len() + 5) as f64, "bytes written over the servers");
    // A second job in the same directory is refused while this one runs.
    let e = fails(&start_local(&s, &hosts("node", 3), &[]), "a second start");
    assert!(e.contains("already running"), "{e}");
    let outdir = s.path("out");
    let so = format!("weft:/in:{}", outdir.display());
    let out = ok(&stop(&s, &["--stage-out", &so, "--stage-chunk", "1m"]), "stop");
    assert!(out.contains("stopped 3 servers"), "{out}");
    assert!(out.contains("staged out 2 files, 3.0 MiB over 3 nodes (node0 1.0 MiB, node1 1.0 MiB, node2 1.0 MiB)"), "{out}");
    assert!(!out.contains("ended by signal"), "every server must end on the stop marker:\n{out}");
    assert_eq!(std::fs::read(outdir.join("sub/big")).unwrap(), big);
    assert_eq!(std::fs::read(outdir.join("small")).unwrap(), b"hello");
    nothing_left(&s, "after stop");
    let left: Vec<_> = walkdir(&s.path("data"));
    assert!(left.is_empty(), "stop removes the servers' data; left: {left:?}");
    assert!(!cluster.exists(), "a stopped job's cluster file goes");
    // And the directory takes a new job (this one without metrics).
    ok(&start_local(&s, &hosts("node", 2), &["--no-metrics"]), "a start after the stop");
    assert!(weft_net::ClusterFile::load(&cluster).unwrap().servers.iter().all(|s| s.metrics.is_none()), "--no-metrics");
    ok(&stop(&s, &[]), "stop");
}

#[test]
fn a_stage_that_fails_on_one_node_names_it_and_the_job_goes_on() {
    let s = Scratch::new("stagefail");
    let input = s.path("input");
    std::fs::create_dir_all(&input).unwrap();
    let big = weft_testkit::pattern(9, 3 << 20);
    std::fs::write(input.join("big"), &big).unwrap();
    let stage_in = format!("{}:weft:/in", input.display());
    // A node whose launcher connection is lost during the stage.
    let e = fails(&start_local(&s, &["node0".into(), "node1".into(), "lost2".into()], &["--stage-in", &stage_in, "--stage-chunk", "1m"]), "a stage-in with a node that is lost");
    assert!(e.contains("stage-in") && e.contains("rank 2 (lost2)") && e.contains("lost2: connection lost") && e.contains("the servers keep running"), "{e}");
    // The servers run, the step's workers are gone, and the plan with them.
    let st = ok(&weft(&["job", "status", "--dir", s.job().to_str().unwrap()], &[]), "status");
    assert_eq!(st.lines().filter(|l| l.ends_with(" up")).count(), 3, "{st}");
    let workers = || processes_naming(&s.job()).into_iter().filter(|p| String::from_utf8_lossy(&std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default()).contains("stage-worker")).count();
    assert_eq!(workers(), 0, "a failed stage leaves no worker running");
    assert!(std::fs::read_dir(s.job().join("stage")).map_or(true, |mut d| d.next().is_none()), "a failed stage leaves no plan");
    // Relative names (the workers start in / as ssh's do), from this node.
    let out = Command::new("timeout").args(["60", WEFT, "job", "stop", "--dir", "job", "--stage-out", "weft:/in:out", "--stage-here"]).current_dir(&s.0).output().unwrap();
    let out = ok(&out, "stop with a stage-out from here");
    assert!(out.contains("staged out") && out.contains("from this node"), "{out}");
    nothing_left(&s, "after stop");
}

/// A node that does not see the source (a tmpfs over it in a mount
/// namespace of the worker's own).
#[test]
#[ignore = "needs root: mount namespaces (make test runs it as root)"]
fn a_stage_from_a_node_that_cannot_see_the_source_names_it() {
    let big = weft_testkit::pattern(9, 3 << 20);
    let s2 = Scratch::new("stageblind");
    let input = s2.path("input");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("big"), &big).unwrap();
    let hf = s2.hostfile(&["node0".into(), "blind1".into()]);
    let agent = s2.agent(false);
    let (job, data) = (s2.job(), s2.path("data"));
    let stage_in = format!("{}:weft:/in", input.display());
    let args = ["job", "start", "--dir", job.to_str().unwrap(), "--hostfile", hf.to_str().unwrap(), "--launcher", "ssh", "--ssh", agent.to_str().unwrap(), "--data", data.to_str().unwrap(), "--stage-in", &stage_in, "--stage-chunk", "1m"];
    let e = fails(&weft(&args, &[("WEFT_TEST_HIDE", input.to_str().unwrap())]), "a stage-in a node cannot see");
    assert!(e.contains("rank 1 (blind1) failed: cannot open") && e.contains("No such file") && e.contains("--stage-here"), "{e}");
    // Relative names, spread: resolved here, absolute for the workers (which start in /).
    let c = weft_client::Client::connect(&job.join("cluster.toml")).unwrap();
    let fresh = weft_testkit::pattern(4, (2 << 20) + 77);
    let f = c.create("/fresh", Default::default()).unwrap();
    f.write_at(0, &fresh).unwrap();
    f.close().unwrap();
    drop(c);
    let o = Command::new("timeout").args(["60", WEFT, "job", "stop", "--dir", "job", "--stage-out", "weft:/fresh:fresh.out", "--stage-chunk", "1m"]).current_dir(&s2.0).output().unwrap();
    let out = ok(&o, "a spread stage-out with relative names");
    assert!(out.contains("over 2 nodes (node0 1.0 MiB, blind1 1.0 MiB)"), "{out}");
    assert!(std::fs::read(s2.path("fresh.out")).unwrap() == fresh, "the staged-out file differs");
    nothing_left(&s2, "after stop");
}

#[test]
fn kept_data_is_served_again_by_the_next_start() {
    let s = Scratch::new("keep");
    ok(&start_local(&s, &hosts("node", 3), &[]), "start");
    let c = weft_client::Client::connect(&s.job().join("cluster.toml")).unwrap();
    let want = weft_testkit::pattern(3, 1 << 20);
    let f = c.create("/kept", Default::default()).unwrap();
    f.write_at(0, &want).unwrap();
    f.fsync().unwrap();
    f.close().unwrap();
    drop(c);
    ok(&stop(&s, &["--keep"]), "stop --keep");
    nothing_left(&s, "after stop --keep");
    ok(&start_local(&s, &hosts("node", 3), &[]), "restart");
    let c = weft_client::Client::connect(&s.job().join("cluster.toml")).unwrap();
    let mut got = vec![0u8; want.len()];
    c.open("/kept", false).unwrap().read_at(0, &mut got).unwrap();
    assert!(got == want, "a restart on kept data must map it the same way");
    ok(&stop(&s, &[]), "stop");
}

#[test]
fn stop_removes_only_what_weft_made_in_a_data_directory_the_user_named() {
    let s = Scratch::new("userdata");
    let data = s.path("mine");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("notes.txt"), b"the user's").unwrap();
    ok(&start_local(&s, &hosts("node", 2), &["--data", data.to_str().unwrap()]), "start");
    assert!(data.join("rank1").is_dir());
    ok(&stop(&s, &[]), "stop");
    nothing_left(&s, "after stop");
    assert_eq!(std::fs::read(data.join("notes.txt")).unwrap(), b"the user's");
    assert!(!data.join("rank0").exists() && !data.join("rank1").exists(), "the servers' own directories go");
    // A `rank0` the user made beforehand, without Weft's mark, stays.
    std::fs::create_dir_all(data.join("rank0")).unwrap();
    std::fs::write(data.join("rank0/precious"), b"x").unwrap();
    let e = fails(&start_local(&s, &hosts("node", 1), &["--data", data.to_str().unwrap()]), "a start on the user's own rank0");
    assert!(e.contains("is not a Weft data directory"), "{e}");
    nothing_left(&s, "after a refused start");
    assert!(data.join("rank0/precious").exists(), "only a directory Weft marked is used or removed");
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn stop_unmounts_the_jobs_mounts_after_their_last_writes() {
    let s = Scratch::new("mounts");
    ok(&start_local(&s, &hosts("node", 2), &[]), "start");
    let cluster = s.job().join("cluster.toml");
    let (point, log) = (s.path("mnt"), s.path("mount.log"));
    std::fs::create_dir_all(&point).unwrap();
    ok(&weft(&["--cluster", cluster.to_str().unwrap(), "mount", "--daemon", point.to_str().unwrap(), "--log", log.to_str().unwrap()], &[]), "mount");
    assert!(weft_testkit::mount::mounted(&point));
    let want = weft_testkit::pattern(5, (2 << 20) + 333);
    std::fs::write(point.join("through-the-mount"), &want).unwrap();
    // A second mount whose process was killed: its record is stale and
    // must not hold the stop up.
    let job: weft_launch::job::file::JobFile = weft_launch::job::file::read(&weft_launch::job::file::job_path(&s.job())).unwrap().unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = weft_launch::job::mounts::MountRecord { host: weft_launch::job::file::hostname(), pid: dead, mountpoint: s.path("elsewhere") };
    weft_launch::job::file::write(&weft_launch::job::mounts::mounts_dir(&s.job(), &job.start).join("stale"), &stale, false).unwrap();
    let t = Instant::now();
    let out = ok(&stop(&s, &["--keep"]), "stop");
    assert!(out.contains("unmounted 1 mount(s) of the job") && !out.contains("did not unmount"), "{out}\nmount log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    assert!(!weft_testkit::mount::mounted(&point), "stop must leave no mount behind");
    assert!(t.elapsed() < weft_launch::job::mounts::UNMOUNT_GRACE, "a dead mount's record must not hold the stop up");
    nothing_left(&s, "after stop");

    // A mount in use (a file held open, its bytes not yet flushed) cannot
    // go: a stop with a stage-out then copies and stops nothing, so the
    // bytes land once the holder closes, while the servers still run.
    ok(&start_local(&s, &hosts("node", 2), &[]), "restart on the kept data");
    ok(&weft(&["--cluster", cluster.to_str().unwrap(), "mount", "--daemon", point.to_str().unwrap(), "--log", log.to_str().unwrap()], &[]), "mount again");
    let mut holder = Command::new("sh").arg("-c").arg(format!("exec 3>{}/held; printf partial >&3; exec sleep 60", point.display())).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let so = format!("weft:/held:{}", s.path("held.out").display());
    let e = fails(&stop(&s, &["--stage-out", &so]), "a stop while a mount is in use");
    assert!(e.contains("did not unmount") && e.contains("nothing was copied out or stopped"), "{e}");
    assert!(!s.path("held.out").exists(), "nothing may be copied out while a mount still writes");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let out = ok(&stop(&s, &["--keep", "--stage-out", &so]), "stop after the holder closed");
    assert!(out.contains("staged out"), "{out}");
    assert_eq!(std::fs::read(s.path("held.out")).unwrap(), b"partial", "the held file's bytes, flushed at its close");
    nothing_left(&s, "after stop");
    // The mount's last writes landed before the servers stopped.
    ok(&start_local(&s, &hosts("node", 2), &[]), "restart on the kept data");
    let c = weft_client::Client::connect(&cluster).unwrap();
    let mut got = vec![0u8; want.len() + 1];
    let n = c.open("/through-the-mount", false).unwrap().read_at(0, &mut got).unwrap();
    assert!(n == want.len() && got[..n] == want[..], "the mount's file came back {n} bytes, wanted {}", want.len());
    drop(c);
    ok(&stop(&s, &[]), "stop");
}

/// A stop drains like SIGTERM: every change a client asked while the
/// job stopped is answered, applied, or refused as not applied (never cut
/// off without an answer), and every answered change is in the kept data.
#[test]
fn a_stop_answers_every_change_under_way_and_keeps_what_it_answered() {
    use weft_client::{ClientOptions, Error};
    use weft_net::NetError;
    let s = Scratch::new("drain");
    ok(&start_local(&s, &hosts("node", 2), &[]), "start");
    let cluster = weft_net::ClusterFile::load(&s.job().join("cluster.toml")).unwrap();
    // No riding through: the servers are not coming back.
    let options = ClientOptions { recovery: Duration::ZERO, ..ClientOptions::default() };
    let writers: Vec<_> = (0..4)
        .map(|k| {
            let c = weft_client::Client::with_options(cluster.clone(), options.clone()).unwrap();
            std::thread::spawn(move || {
                let mut done = Vec::new();
                for i in 0..100_000 {
                    let path = format!("/t{k}-{i}");
                    match c.create(&path, weft_client::CreateOptions { exclusive: true, ..Default::default() }) {
                        Ok(_) => done.push(path),
                        Err(e) => return (done, Some((path, e))),
                    }
                }
                (done, None)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let began = Instant::now();
    let out = ok(&stop(&s, &["--keep"]), "stop --keep while clients create");
    // The drain ends by itself: no launcher had to be ended by signal.
    assert!(began.elapsed() < Duration::from_secs(15) && !out.contains("ended by signal"), "{out}");
    let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    nothing_left(&s, "after stop --keep");
    ok(&start_local(&s, &hosts("node", 2), &[]), "restart on the kept data");
    let c = weft_client::Client::connect(&s.job().join("cluster.toml")).unwrap();
    for (done, failed) in results {
        assert!(!done.is_empty(), "each client created files before the stop");
        for p in &done {
            assert!(c.stat(p).is_ok(), "{p} was answered created but is not in the kept data");
        }
        let (path, e) = failed.expect("each client's creates end at the stop");
        // Not applied, and said so: the server's `Stopping` (an answer,
        // or its last word on the connection), or a connect refused.
        let definite = match &e {
            Error::Busy { message, .. } => message.contains("stopping") || message.contains("Stopping"),
            Error::Net(NetError::Stopping { .. }) => true,
            Error::Net(NetError::Unreachable { source, .. }) => source.kind() == std::io::ErrorKind::ConnectionRefused,
            _ => false,
        };
        assert!(definite, "{path}: a create under way at the stop got {e:?}, not an answer");
        assert!(matches!(c.stat(&path), Err(Error::NotFound(_))), "{path} was refused as not applied but exists");
    }
    ok(&stop(&s, &[]), "stop");
}

#[test]
fn a_stop_after_a_server_was_killed_stops_the_others_and_names_it() {
    let s = Scratch::new("killed");
    ok(&start_local(&s, &hosts("node", 3), &[]), "start");
    let victim = ranks(&s)[1].pid;
    // SAFETY: kill(2) of a server this test started.
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    let st = weft(&["job", "status", "--dir", s.job().to_str().unwrap()], &[]);
    assert!(fails(&st, "status with a dead server").contains("1 of 3 servers do not answer"));
    assert!(text(&st).contains("DOWN"));
    let out = ok(&stop(&s, &[]), "stop");
    assert!(out.contains("stopped 2 servers") && out.contains("server 1 on") && out.contains("was not running") && out.contains("rank1"), "{out}");
    nothing_left(&s, "after stop");
    assert!(s.path("data/rank1").exists() && !s.path("data/rank0").exists() && !s.path("data/rank2").exists(), "the dead server's data stays, the others' goes");
}

#[test]
fn a_server_that_cannot_start_is_named_and_nothing_is_left() {
    // Its port taken (one server, so only the taken port can collide).
    let s = Scratch::new("port");
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let t = Instant::now();
    let e = fails(&start_local(&s, &hosts("node", 1), &["--port", &port]), "start on a taken port");
    assert!(e.contains("could not start") && e.contains("cannot listen on") && e.contains(&port), "{e}");
    assert!(t.elapsed() < Duration::from_secs(20), "a failed server must end the start at once, not at its deadline");
    nothing_left(&s, "after a failed start");
    assert!(!s.job().join("job.toml").exists());
    assert!(!s.path("data/rank0").exists(), "a failed start removes the data directories it made");
    // Several servers on one port of one host: all but one fail, and the
    // one that bound is stopped with its fresh data removed too.
    let s = Scratch::new("port3");
    let free = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port().to_string();
    let e = fails(&start_local(&s, &hosts("node", 3), &["--port", &free]), "three servers on one port");
    assert!(e.contains("could not start") && e.contains("Address already in use"), "{e}");
    nothing_left(&s, "after a failed start");
    assert!((0..3).all(|k| !s.path(&format!("data/rank{k}")).exists()), "a failed start removes every data directory it made");

    // A data directory that cannot be made.
    let s = Scratch::new("data");
    std::fs::write(s.path("file"), b"").unwrap();
    let bad = s.path("file").join("data");
    let e = fails(&start_local(&s, &hosts("node", 2), &["--data", bad.to_str().unwrap()]), "start with a bad data directory");
    assert!(e.contains("cannot create the data directory"), "{e}");
    nothing_left(&s, "after a failed start");

    // A node the launcher cannot reach.
    let s = Scratch::new("missing");
    let mut hs = hosts("node", 2);
    hs.push("missing-node".into());
    let e = fails(&start_local(&s, &hs, &[]), "start with an unreachable node");
    assert!(e.contains("rank 2 (missing-node)") && e.contains("Could not resolve hostname"), "{e}");
    nothing_left(&s, "after a failed start");
}

#[test]
fn a_server_without_a_rank_refuses_to_start() {
    let s = Scratch::new("norank");
    std::fs::create_dir_all(s.job()).unwrap();
    let job = weft_launch::job::file::JobFile {
        start: "00000000000000a1".into(),
        launcher: None,
        data_default: false,
        servers: 4,
        meta_shards: 1,
        stripe_size: 65536,
        secret: weft_net::ClusterFile::random_secret(),
        data: s.path("data"),
        iface: None,
        metrics_port: None,
        port: 0,
        bootstrap_timeout_ms: 5000,
    };
    weft_launch::job::file::write(&weft_launch::job::file::job_path(&s.job()), &job, true).unwrap();
    let t = Instant::now();
    let e = fails(&weft(&["serve", "--bootstrap", "job", "--rendezvous", s.job().to_str().unwrap()], &[]), "a server with no rank");
    assert!(e.contains("4 servers but no launcher variable") && e.contains("refusing"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    // A launcher whose size disagrees with the job's.
    let e = fails(&weft(&["serve", "--bootstrap", "job", "--rendezvous", s.job().to_str().unwrap()], &[("PMI_RANK", "0"), ("PMI_SIZE", "2")]), "a server of a 2-rank launch");
    assert!(e.contains("Hydra started 2 servers") && e.contains("expects 4"), "{e}");
    assert!(!s.path("data").exists(), "a refused server makes nothing");
}

#[test]
fn bad_input_gets_one_clear_line_each() {
    let s = Scratch::new("input");
    let hf = s.hostfile(&hosts("node", 2));
    let dir = s.job();
    let d = dir.to_str().unwrap();
    let h = hf.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["job", "start", "--dir", d, "--hostfile", h, "--launcher", "mpiexec", "--mpiexec", "/nonexistent/mpiexec"], "is not in PATH"),
        (vec!["job", "start", "--dir", d, "--hostfile", "/nonexistent/hosts"], "cannot read the host file /nonexistent/hosts"),
        (vec!["job", "start", "--dir", "/proc/version/job", "--hostfile", h, "--launcher", "ssh", "--ssh", "true"], "cannot create the job directory"),
        (vec!["job", "start", "--dir", d, "--hostfile", h, "--meta-shards", "0"], "--meta-shards must be at least 1"),
        (vec!["job", "start", "--dir", d, "--hostfile", h, "--meta-shards", "3"], "--meta-shards 3"),
        (vec!["job", "start", "--dir", d], "not inside a Slurm allocation"),
        (vec!["job", "start", "--dir", d, "--launcher", "srun"], "needs a Slurm allocation"),
        (vec!["job", "stop", "--dir", d], "no job in"),
        (vec!["job", "start", "--dir", d, "--hostfile", h, "--stage-in", "/tmp/x"], "LOCAL:weft:/DEST"),
    ];
    let open_dir = s.path("open");
    std::fs::create_dir_all(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let open = open_dir.display().to_string();
    let mut cases = cases;
    cases.push((vec!["job", "start", "--dir", &open, "--hostfile", h, "--launcher", "ssh", "--ssh", "true"], "writable by no one else"));
    std::fs::write(s.path("evil"), "node1\n$(touch /tmp/pwned)\n").unwrap();
    let evil = s.path("evil");
    cases.push((vec!["job", "start", "--dir", d, "--hostfile", evil.to_str().unwrap(), "--launcher", "ssh"], "line 2"));
    for (args, want) in cases {
        let o = weft(&args, &[]);
        let e = fails(&o, &args.join(" "));
        assert!(e.contains(want), "{}: wanted {want:?} in:\n{e}", args.join(" "));
        assert_eq!(e.trim().lines().count(), 1, "{}: one line, got:\n{e}", args.join(" "));
    }
    nothing_left(&s, "after refused starts");
}

// ---- Namespaced nodes: servers and ranks on addresses of their own ----

/// The namespaced tests run one at a time: each runs a cluster and an MPI
/// job or a Slurm on two cores.
fn one_network_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `n` namespace nodes (root only: the tests that use them are ignored
/// unless `make test` runs as root).
fn namespaces(n: usize) -> Emulation {
    Emulation::create(n, None, None).expect("network namespaces (root)")
}

/// Checks that rank k's server bound node k's own address.
fn bound_node_addresses(s: &Scratch, emu: &Emulation, n: usize) {
    let rs = ranks(s);
    assert_eq!(rs.len(), n);
    for (k, r) in rs.iter().enumerate() {
        assert_eq!(r.addr.unwrap().ip(), std::net::IpAddr::V4(emu.addr(k)), "rank {k} must bind its node's address");
    }
}

/// Compiles `source` with `mpi` into the scratch directory.
fn compile(s: &Scratch, mpi: &Mpi, source: &str) -> PathBuf {
    let exe = s.path(&format!("{}-{}", source.replace('.', "-"), mpi.name));
    let out = Command::new(mpi.cc).arg("-O1").arg("-o").arg(&exe).arg(sources().join(source)).output().unwrap();
    assert!(out.status.success(), "{} failed:\n{}", mpi.cc, String::from_utf8_lossy(&out.stderr));
    exe
}

/// The launcher options that make `mpi`'s mpiexec reach namespace nodes
/// through `agent`.
fn into_namespaces(mpi: &Mpi, agent: &Path, emu: &Emulation) -> Vec<String> {
    if mpi.name == "openmpi" {
        // Every "node" is this machine: its daemons, writing the hardware
        // topology to one shared-memory hole at once, crash now and then
        // in hwloc_shmem_topology_write; `vmhole none` shares none. And
        // namespace names are not in DNS, so daemons route direct.
        ["--mca", "plm_rsh_agent", &agent.display().to_string(), "--mca", "routed", "direct", "--mca", "rtc_hwloc_vmhole", "none"].map(String::from).to_vec()
    } else {
        vec!["-launcher".into(), "ssh".into(), "-launcher-exec".into(), agent.display().to_string(), "-iface".into(), emu.bridge()]
    }
}

/// Starts a job on `n` namespace nodes through `mpi`'s mpiexec, runs an
/// MPI-IO program across the nodes on a weft: file, and compares its
/// output and bytes with the same program on a local file through the MPI
/// library's own MPI-IO.
fn mpiexec_job(mpi: &Mpi, n: usize) {
    let emu = namespaces(n);
    let s = Scratch::new(&format!("mpiexec-{}", mpi.name));
    let nodes: Vec<String> = (0..n).map(|k| emu.namespace(k)).collect();
    let hf = s.hostfile(&nodes);
    let agent = s.agent(true);
    let launcher_args = into_namespaces(mpi, &agent, &emu).join(" ");
    let data = s.path("data");
    let out = weft(
        &["job", "start", "--dir", s.job().to_str().unwrap(), "--hostfile", hf.to_str().unwrap(), "--launcher", "mpiexec", "--mpiexec", mpi.exec, "--launcher-args", &launcher_args, "--data", data.to_str().unwrap()],
        &[],
    );
    ok(&out, "weft job start through mpiexec");
    bound_node_addresses(&s, &emu, n);
    let cluster = s.job().join("cluster.toml");
    // The MPI program: one rank per node, the Weft library preloaded.
    let exe = compile(&s, mpi, "semantics.c");
    let lib = library(mpi);
    let run = |target: &str, across: bool| {
        let mut c = Command::new("timeout");
        c.args(["120", mpi.exec, "-n", &n.to_string()]);
        if mpi.name == "openmpi" {
            c.args(["--allow-run-as-root", "--oversubscribe", "--mca", "io", "romio321", "-x"]).arg(format!("LD_PRELOAD={}", lib.display())).args(["-x", "WEFT_CLUSTER"]);
        } else {
            c.arg("-genv").arg("LD_PRELOAD").arg(&lib).arg("-genv").arg("WEFT_CLUSTER").arg(&cluster);
        }
        if across {
            c.arg(if mpi.name == "openmpi" { "--host" } else { "-hosts" }).arg(nodes.join(","));
            c.args(into_namespaces(mpi, &agent, &emu));
        }
        c.arg(&exe).arg(target).env("WEFT_CLUSTER", &cluster);
        c.output().unwrap()
    };
    let local = s.path("local.dat");
    let reference = ok(&run(local.to_str().unwrap(), false), "the reference run on a local file");
    let on_weft = ok(&run("weft:/across.dat", true), "the run across the nodes");
    assert_eq!(on_weft, reference, "the program printed differently across the nodes on weft:");
    let c = weft_client::Client::connect(&cluster).unwrap();
    let want = std::fs::read(&local).unwrap();
    let f = c.open("/across.dat", false).unwrap();
    assert_eq!(f.size().unwrap(), want.len() as u64);
    let mut got = vec![0u8; want.len()];
    f.read_at(0, &mut got).unwrap();
    let first = got.iter().zip(&want).position(|(a, b)| a != b);
    assert!(first.is_none(), "files differ first at byte {first:?}");
    drop(c);
    // Staged out by every node through mpiexec: pieces small enough that each node copies some.
    let staged = s.path("staged.dat");
    let chunk = want.len().div_ceil(n).max(1).to_string();
    let out = ok(&stop(&s, &["--stage-out", &format!("weft:/across.dat:{}", staged.display()), "--stage-chunk", &chunk]), "stop");
    assert!(!out.contains("ended by signal"), "every server must end on the stop marker:\n{out}");
    assert!(out.contains(&format!("over {n} nodes")) && !out.contains(" 0 B"), "every node copies a part:\n{out}");
    assert!(std::fs::read(&staged).unwrap() == want, "the staged-out file differs");
    nothing_left(&s, "after stop");
}

#[test]
#[ignore = "needs root: network namespaces (make test runs it as root)"]
fn a_job_through_open_mpis_mpiexec_runs_an_mpi_program_across_four_nodes() {
    let _one = one_network_at_a_time();
    mpiexec_job(&OPENMPI, 4);
}

#[test]
#[ignore = "needs root: network namespaces (make test runs it as root)"]
fn a_job_through_mpichs_mpiexec_runs_an_mpi_program_across_two_nodes() {
    let _one = one_network_at_a_time();
    mpiexec_job(&MPICH, MPICH.ranks as usize);
}

/// A real Slurm on namespace nodes n0..n(N-1): its own munged, one
/// slurmctld on the launching side of the bridge, one slurmd inside each
/// node's namespace; all stopped on drop.
struct Slurm {
    conf: PathBuf,
    daemons: Vec<std::process::Child>,
    _munged: weft_launch::munged::Munged,
}

impl Slurm {
    fn start(s: &Scratch, emu: &Emulation, n: usize) -> Slurm {
        let dir = s.path("slurm");
        std::fs::create_dir_all(dir.join("state")).unwrap();
        std::fs::create_dir_all(dir.join("spool")).unwrap();
        let munged = weft_launch::munged::Munged::start(&dir, true).expect("munged");
        let socket = weft_launch::munged::socket_path(&dir);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
        let free_port = || std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
        let (ctld_port, slurmd_port) = (free_port(), free_port());
        let d = dir.display();
        let mut conf = format!(
            "ClusterName=weft\nSlurmctldHost={host}({gw})\nSlurmctldPort={ctld_port}\nSlurmdPort={slurmd_port}\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={socket}\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool/%n\nSlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             MpiDefault=none\nReturnToService=2\nSchedulerType=sched/builtin\nSelectType=select/linear\n",
            gw = emu.gateway(),
            socket = socket.display()
        );
        for k in 0..n {
            conf.push_str(&format!("NodeName=n{k} NodeAddr={} NodeHostname={host} CPUs=1 State=UNKNOWN\n", emu.addr(k)));
        }
        conf.push_str("PartitionName=weft Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n");
        let conf_path = dir.join("slurm.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let log = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
        let mut daemons = vec![Command::new("slurmctld").args(["-D", "-c", "-f"]).arg(&conf_path).stdout(log("slurmctld.out")).stderr(log("slurmctld.err")).spawn().expect("slurmctld (apt install slurm-wlm)")];
        for k in 0..n {
            // nsenter, not `ip netns exec`: that remounts /sys, and slurmd
            // then finds no cgroup file system.
            let netns = format!("--net=/run/netns/{}", emu.namespace(k));
            daemons.push(Command::new("nsenter").arg(netns).args(["slurmd", "-D", "-N", &format!("n{k}"), "-f"]).arg(&conf_path).stdout(log(&format!("slurmd-n{k}.out"))).stderr(log(&format!("slurmd-n{k}.err"))).spawn().unwrap());
        }
        let slurm = Slurm { conf: conf_path, daemons, _munged: munged };
        // Every node idle, within a bound.
        let t = Instant::now();
        loop {
            let o = Command::new("sinfo").args(["-h", "-N", "-o", "%T"]).env("SLURM_CONF", &slurm.conf).output().unwrap();
            let states = String::from_utf8_lossy(&o.stdout).into_owned();
            if states.lines().filter(|l| l.trim() == "idle").count() == n {
                break;
            }
            let logs = std::fs::read_to_string(dir.join("slurmctld.log")).unwrap_or_default();
            assert!(t.elapsed() < Duration::from_secs(60), "Slurm's nodes not idle after 60 s: {states:?}\n{logs}");
            std::thread::sleep(Duration::from_millis(200));
        }
        slurm
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            // SAFETY: kill(2) of a daemon this test started.
            unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
        }
        for d in &mut self.daemons {
            let t = Instant::now();
            while matches!(d.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

#[test]
#[ignore = "needs root: network namespaces (make test runs it as root)"]
fn a_job_under_a_real_slurm_starts_with_srun_serves_every_node_and_stops() {
    let _one = one_network_at_a_time();
    const N: usize = 4;
    let emu = namespaces(N);
    let s = Scratch::new("slurm");
    let slurm = Slurm::start(&s, &emu, N);
    // Each node's task writes its own part through the CLI; stop stages
    // everything out; the parts must come back byte for byte.
    let input = s.path("in");
    std::fs::create_dir_all(&input).unwrap();
    let parts: Vec<Vec<u8>> = (0..N).map(|k| weft_testkit::pattern(k as u64 + 11, (1 << 20) + k * 4099)).collect();
    for (k, p) in parts.iter().enumerate() {
        std::fs::write(input.join(format!("part-{k}")), p).unwrap();
    }
    let (job, data, out) = (s.job(), s.path("data"), s.path("out"));
    let script = format!(
        "set -e\n\
         {weft} job start --dir {job} --data {data}\n\
         export WEFT_CLUSTER={job}/cluster.toml\n\
         {weft} mkdir weft:/parts\n\
         srun -N{N} -n{N} sh -c '{weft} cp {input}/part-$SLURM_PROCID weft:/parts/part-$SLURM_PROCID'\n\
         {weft} job status --dir {job}\n\
         {weft} job stop --dir {job} --stage-out weft:/parts:{out}\n",
        weft = WEFT,
        job = job.display(),
        data = data.display(),
        input = input.display(),
        out = out.display()
    );
    let script_path = s.path("job.sh");
    std::fs::write(&script_path, script).unwrap();
    let o = Command::new("timeout").args(["300", "salloc", &format!("-N{N}"), "-t", "10", "sh"]).arg(&script_path).env("SLURM_CONF", &slurm.conf).output().unwrap();
    let all = text(&o);
    assert!(o.status.success(), "the Slurm job failed:\n{all}\nlauncher log:\n{}", std::fs::read_to_string(job.join("logs/launcher.log")).unwrap_or_default());
    assert!(all.contains(&format!("Weft job up: {N} servers")) && all.contains("with srun"), "{all}");
    // Each server on its own node's address, named as Slurm names it.
    for k in 0..N {
        assert!(all.lines().any(|l| l.contains(&format!("n{k} ")) && l.contains(&emu.addr(k).to_string())), "node n{k} at {}:\n{all}", emu.addr(k));
    }
    for (k, p) in parts.iter().enumerate() {
        let got = std::fs::read(out.join(format!("part-{k}"))).unwrap_or_default();
        assert!(got == *p, "part {k} came back different ({} bytes, wanted {})", got.len(), p.len());
    }
    assert!(all.contains(&format!("stopped {N} servers")) && !all.contains("ended by signal"), "{all}");
    assert!(all.contains(&format!("staged out {N} files")) && all.contains(&format!("over {N} nodes (n0 ")) && !all.contains(" 0 B"), "the stage-out is spread over the nodes by srun, each copying a part:\n{all}");
    nothing_left(&s, "after the Slurm job");
}

/// Every path under `dir` (none if it is gone).
fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            all.extend(walkdir(&p));
        }
        all.push(p);
    }
    all
}
