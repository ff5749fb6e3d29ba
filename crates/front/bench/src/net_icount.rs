//! Instructions per request of the message layer, client and server side,
//! per transport (paper 003 counts about 2,000 instructions per small send
//! on BG/L).
//!
//! A server and a client each run under callgrind (valgrind), which counts
//! every user-space instruction a process executes, all threads included.
//! Three runs differ only in their traffic: a base (a few pings), the base
//! plus `small` pings, and the base plus `bulk` 1 MiB writes (`Sink`,
//! rendezvous). The differences divided by the extra requests (or KiB) are
//! the cost per request (or per KiB), with start-up and connection set-up
//! cancelled out. The server is a data server of its own (beside a
//! metadata server that is not counted); pings and sinks are served on its
//! event loop, so the server side is the message layer and nothing else.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use weft_net::cluster::{AuthMode, ServerEntry, Service, DEFAULT_META_SYNC_WINDOW_MS};
use weft_net::{Call, ClusterFile, Endpoint, EndpointConfig, TransportChoice};
use weft_wire::Request;

#[derive(Debug, Clone)]
pub struct Params {
    /// The client's transports, each counted on its own.
    pub transports: Vec<TransportChoice>,
    /// Extra small requests (pings) of the second run.
    pub small: usize,
    /// Extra 1 MiB writes of the third run.
    pub bulk: usize,
}

/// One measured cost.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `tcp` or `shm`.
    pub transport: &'static str,
    /// `client` or `server`.
    pub side: &'static str,
    /// `small_request` or `bulk_per_kib`.
    pub op: &'static str,
    pub instructions: f64,
}

/// Pings every run sends (connection set-up and warm-up).
const BASE_PINGS: usize = 50;
const BULK_BYTES: usize = 1 << 20;

/// Runs the three runs in `work` and returns the four costs.
pub fn run(weft_bin: &Path, work: &Path, p: &Params) -> Result<Vec<Row>> {
    if p.small == 0 || p.bulk == 0 {
        bail!("--icount needs at least one small request and one bulk write");
    }
    if Command::new("valgrind").arg("--version").output().is_err() {
        bail!("valgrind is not installed (Debian: apt install valgrind); --icount runs both sides under callgrind");
    }
    let mut rows = Vec::new();
    for &t in &p.transports {
        let name = crate::net::transport_name(t);
        let run = |what: &str, pings, sinks| counts(weft_bin, &work.join(format!("{name}-{what}")), name, pings, sinks);
        let base = run("base", BASE_PINGS, 0)?;
        let small = run("small", BASE_PINGS + p.small, 0)?;
        let bulk = run("bulk", BASE_PINGS, p.bulk)?;
        let per = |more: u64, less: u64, n: f64| more.saturating_sub(less) as f64 / n;
        let kib = (p.bulk * BULK_BYTES / 1024) as f64;
        rows.extend([
            Row { transport: name, side: "client", op: "small_request", instructions: per(small.client, base.client, p.small as f64) },
            Row { transport: name, side: "server", op: "small_request", instructions: per(small.server, base.server, p.small as f64) },
            Row { transport: name, side: "client", op: "bulk_per_kib", instructions: per(bulk.client, base.client, kib) },
            Row { transport: name, side: "server", op: "bulk_per_kib", instructions: per(bulk.server, base.server, kib) },
        ]);
    }
    Ok(rows)
}

struct Counts {
    client: u64,
    server: u64,
}

/// A port free now (the server binds it a moment later).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn callgrind(out: &Path) -> Command {
    let mut c = Command::new("valgrind");
    c.arg("--tool=callgrind").arg("-q").arg(format!("--callgrind-out-file={}", out.display()));
    c
}

/// Stops a server politely (so callgrind writes its counts), by force after 60 s.
fn stop(mut child: Child) -> Result<()> {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    bail!("the server under callgrind did not stop within 60 s of SIGTERM")
}

/// One run: a metadata server, a data server under callgrind and a client
/// under callgrind (over `transport`) sending `pings` pings and `sinks`
/// 1 MiB writes.
fn counts(weft_bin: &Path, dir: &Path, transport: &str, pings: usize, sinks: usize) -> Result<Counts> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let entry = |id: u32, services: Vec<Service>| -> Result<ServerEntry> {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        Ok(ServerEntry { id, addr, services, dir: dir.join(format!("s{id}")), metrics: None })
    };
    let cf = ClusterFile {
        auth: AuthMode::Secret,
        secret: ClusterFile::random_secret(),
        key_file: None,
        munge_socket: None,
        server_uid: 0,
        default_stripe_size: 64 * 1024,
        lock_ttl_ms: 10_000,
        root_squash: false,
        meta_sync_window_ms: DEFAULT_META_SYNC_WINDOW_MS,
        servers: vec![entry(0, vec![Service::Meta, Service::Lock])?, entry(1, vec![Service::Data])?],
    };
    let file = dir.join("cluster.toml");
    cf.save(&file)?;
    let log = |name: &str| -> Result<Stdio> { Ok(std::fs::File::create(dir.join(name))?.into()) };
    let serve = |id: u32| {
        let mut c = Command::new(weft_bin);
        c.args(["serve", "--cluster"]).arg(&file).args(["--id", &id.to_string()]);
        c
    };
    let meta = serve(0).stdout(log("meta.log")?).stderr(log("meta.err")?).spawn().context("cannot start the metadata server")?;
    let meta = ChildGuard(Some(meta));
    let server_out = dir.join("server.callgrind");
    let mut cmd = callgrind(&server_out);
    cmd.arg(weft_bin).args(serve(1).get_args());
    let data = cmd.stdout(log("data.log")?).stderr(log("data.err")?).spawn().context("cannot start valgrind")?;
    let mut data = ChildGuard(Some(data));
    let addr = cf.servers[1].addr;
    wait_ready(&cf, addr)?;
    let client_out = dir.join("client.callgrind");
    let st = callgrind(&client_out)
        .arg(weft_bin)
        .args(["bench", "net-icount-client", "--cluster"])
        .arg(&file)
        .args(["--pings", &pings.to_string(), "--sinks", &sinks.to_string()])
        .env("WEFT_TRANSPORT", transport)
        .stdout(log("client.log")?)
        .stderr(log("client.err")?)
        .status()
        .context("cannot run the client under valgrind")?;
    if !st.success() {
        bail!("the client under callgrind failed ({st}); see {}", dir.join("client.err").display());
    }
    stop(data.0.take().expect("running"))?;
    drop(meta);
    Ok(Counts { client: total(&client_out)?, server: total(&server_out)? })
}

/// Kills a child left running by an error.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until the data server (slow to start under valgrind) answers.
fn wait_ready(cf: &ClusterFile, addr: SocketAddr) -> Result<()> {
    let ep = Endpoint::new(cf.secret(), EndpointConfig { op_timeout: Duration::from_secs(10), ..EndpointConfig::default() })?;
    let t = Instant::now();
    loop {
        match ep.call(addr, Request::Ping.encode()) {
            Ok(_) => return Ok(()),
            Err(e) if t.elapsed() > Duration::from_secs(120) => bail!("the data server under callgrind did not answer within 120 s: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// The instruction total of a callgrind output file (`summary:` or `totals:`).
fn total(path: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("callgrind wrote no {}", path.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("summary:").or_else(|| l.strip_prefix("totals:")))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no instruction total in {}", path.display()))
}

/// The client process of a run (`weft bench net-icount-client`): `pings`
/// pings, then `sinks` 1 MiB writes, one at a time, to the data server.
pub fn client(cluster: &Path, pings: usize, sinks: usize) -> Result<()> {
    let cf = ClusterFile::load(cluster)?;
    let addr = cf.server(cf.data_servers()[0]).context("no data server")?.addr;
    // The transport the parent chose (WEFT_TRANSPORT), as every client reads it.
    let ep = Endpoint::new(cf.secret(), EndpointConfig::from_vars(&weft_net::settings::Vars::env())?)?;
    // One request body, sent again and again (a run hands it back): the
    // caller's allocation of a body is not the message layer's cost.
    let mut ping = [Call::new(addr, Request::Ping.encode())];
    let call = |ping: &mut [Call<'_>; 1]| -> Result<()> {
        ep.run(ping);
        ping[0].result.take().expect("filled")?;
        Ok(())
    };
    call(&mut ping)?;
    if ep.config().transport == TransportChoice::Shm && ep.stats().shm_connects == 0 {
        bail!("asked for shared memory, connected over TCP");
    }
    for _ in 0..pings {
        call(&mut ping)?;
    }
    let payload = vec![7u8; BULK_BYTES];
    for _ in 0..sinks {
        let mut c = [Call::new(addr, Request::Sink.encode())];
        c[0].send = vec![&payload];
        ep.run(&mut c);
        let [c] = c;
        c.result.expect("filled")?;
    }
    Ok(())
}

/// Where a bench keeps the runs' files.
pub fn work_dir(base: &Path) -> PathBuf {
    base.join(format!("weft-icount-{}", std::process::id()))
}

/// Instructions per request, as `weft bench net --icount` counts them; its
/// runs' files go in `work`, removed afterwards.
pub struct NetIcount<'a> {
    pub exe: &'a Path,
    pub work: PathBuf,
    pub params: Params,
}

impl crate::experiment::Experiment for NetIcount<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "net-icount"
    }

    fn run(&mut self, _progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        let rows = run(self.exe, &self.work, &self.params);
        // WEFT_ICOUNT_KEEP=1 keeps the callgrind files for callgrind_annotate.
        if std::env::var_os("WEFT_ICOUNT_KEEP").is_some_and(|v| v == "1") {
            eprintln!("callgrind files kept in {}", self.work.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.work);
        }
        rows
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        let paper = |r: &Row| match (r.side, r.op) {
            ("client", "small_request") => "about 2,000 (BG/L, one small send)",
            ("server", "small_request") => "goal <= 3,000",
            _ => "",
        };
        let table = rows.iter().map(|r| vec![r.transport.into(), r.side.into(), r.op.into(), format!("{:.0}", r.instructions), paper(r).into()]).collect();
        crate::experiment::Report::table(
            format!("Instructions of the message layer (callgrind, differences of runs: {} pings, {} writes of 1 MiB)", self.params.small, self.params.bulk),
            &["transport", "side", "op", "instructions", "paper 003"],
            table,
        )
    }
}
