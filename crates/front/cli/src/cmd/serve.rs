//! `weft serve --cluster FILE --id K`, or `weft serve --bootstrap job
//! --rendezvous DIR` (one server of a batch job; see docs/job.md).

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weft_launch::job::file::StopMarker;
use weft_launch::job::serve::{bootstrap, Bootstrapped, Overrides, STOP_POLL};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use weft_net::ClusterFile;
use weft_services::Server;
use weft_wire::ServerId;

#[derive(Args)]
pub struct ServeArgs {
    /// This server's id in the cluster file.
    #[arg(long, required_unless_present = "bootstrap")]
    id: Option<u32>,
    /// `job`: find rank and peers through the launcher and the job
    /// directory (`--rendezvous`) instead of a cluster file.
    #[arg(long, value_enum, requires = "rendezvous")]
    bootstrap: Option<Bootstrap>,
    /// The job directory `weft job start` prepared (shared by every node).
    #[arg(long)]
    rendezvous: Option<PathBuf>,
    /// This node's data directory (default: the job's); the server keeps
    /// its data in DATA/rank<K>.
    #[arg(long, requires = "bootstrap")]
    data: Option<PathBuf>,
    /// The network interface whose IPv4 address to bind (default: the
    /// job's, else the first one up that is not loopback).
    #[arg(long, requires = "bootstrap")]
    iface: Option<String>,
    /// The port to listen on (default: the job's; 0: any free one).
    #[arg(long, requires = "bootstrap")]
    port: Option<u16>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Bootstrap {
    Job,
}

pub fn serve(cluster: Option<&Path>, a: ServeArgs) -> Result<()> {
    private_files();
    if let Some(Bootstrap::Job) = a.bootstrap {
        return serve_job(&a);
    }
    let id = a.id.ok_or_else(|| anyhow!("--id is needed without --bootstrap job"))?;
    let path = super::locate(cluster)?;
    let cf = ClusterFile::load(&path)?;
    let me = cf.server(ServerId(id)).with_context(|| format!("server id {id} is not in {}", path.display()))?.clone();
    let listener = TcpListener::bind(me.addr).with_context(|| format!("cannot listen on {}", me.addr))?;
    let metrics = me.metrics.and_then(|at| metrics_listener(at, id));
    run(&cf, id, listener, metrics)
}

fn run(cf: &ClusterFile, id: u32, listener: TcpListener, metrics: Option<TcpListener>) -> Result<()> {
    let server = Arc::new(Server::open(cf, ServerId(id), server_config()?)?);
    // SIGTERM (`weft down`, a restart) or Ctrl-C: the server drains (new
    // requests refused as not applied, those under way answered), makes
    // the metadata answered so far durable, and exits 0. A second signal
    // skips the drain.
    let shutdown = weft_services::Shutdown::new();
    let (on_signal, trigger) = (Arc::clone(&server), shutdown.clone());
    ctrlc::set_handler(move || {
        if trigger.is_triggered() {
            on_signal.flush_metadata_then(|ok| std::process::exit(if ok { 0 } else { 1 }));
        }
        trigger.trigger();
    })
    .context("cannot install the signal handler")?;
    // Made durable even when the loop failed.
    let served = run_server(cf, id, listener, metrics, Arc::clone(&server), shutdown);
    if let Err(e) = &served {
        eprintln!("weft: {e:#}");
    }
    server.flush_metadata_then(|ok| {
        let _ = out!("weft serve: server {id} stopped{}", if ok { "" } else { " (its metadata could not be made durable)" });
        std::process::exit(if ok && served.is_ok() { 0 } else { 1 })
    });
    Ok(())
}

/// Serves until `shutdown`; `metrics`, the metrics port, bound.
fn run_server(cf: &ClusterFile, id: u32, listener: TcpListener, metrics: Option<TcpListener>, server: Arc<Server>, shutdown: weft_services::Shutdown) -> Result<()> {
    let me = cf.server(ServerId(id)).context("no such server")?;
    let metrics = match metrics {
        Some(l) => {
            let at = l.local_addr()?;
            weft_services::serve_metrics(&server, l).context("cannot start the metrics thread")?;
            format!("; metrics at http://{at}/metrics")
        }
        None => String::new(),
    };
    let _ = out!("weft serve: server {id} listening on {} with {:?} in {}{metrics}", me.addr, me.services, me.dir.display());
    weft_services::run_until(server, listener, shutdown).context("the server's event loop failed")
}

/// The metrics port, if it can be had. Metrics are for operators: a port
/// taken (by another process, or as a client connection's local port
/// while this server was down) costs them, not the file service, which
/// starts anyway and says so.
fn metrics_listener(at: std::net::SocketAddr, id: u32) -> Option<TcpListener> {
    match TcpListener::bind(at) {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!("weft serve: server {id} serves no metrics: cannot listen on {at}: {e}");
            None
        }
    }
}

/// This server's settings, from its variables (read once, here).
fn server_config() -> Result<weft_services::ServerConfig> {
    weft_services::ServerConfig::from_vars(&weft_net::settings::Vars::env()).context("a server setting is wrong")
}

/// Everything a server creates (database, objects, their directories,
/// logs) is its user's alone: 0600 and 0700, whatever the umask it was
/// started with, in every authentication mode (a local user must not read
/// the stored bytes around the servers' checks).
#[allow(unsafe_code)]
fn private_files() {
    // SAFETY: umask(2) only sets this process's file creation mask.
    unsafe { libc::umask(0o077) };
}

#[allow(unsafe_code)]
fn stop_listening(l: &TcpListener) {
    use std::os::fd::AsRawFd;
    // SAFETY: shutdown(2) on a socket this process owns (the event loop
    // holds a duplicate of it; both refer to the one socket, which stops
    // accepting). No memory is touched.
    unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
}

fn serve_job(a: &ServeArgs) -> Result<()> {
    let dir = a.rendezvous.as_deref().context("--rendezvous DIR is needed with --bootstrap job")?;
    if a.id.is_some() {
        bail!("--id goes without --bootstrap job: a job's server takes its rank from the launcher");
    }
    let over = Overrides { data: a.data.clone(), iface: a.iface.clone(), port: a.port };
    let b = Arc::new(bootstrap(dir, &over, weft_net::settings::process_env)?);
    let _ = out!("weft serve: rank {} of {} ({})", b.rank, b.job.servers, dir.display());
    let server = match server_config().and_then(|config| Ok(Server::open(&b.cluster, ServerId(b.rank), config)?)) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            b.report_failure(&format!("{e:#}"));
            // A failed start: only data this start made goes.
            b.finish(Some(StopMarker { keep: true, failed_start: true }));
            return Err(e);
        }
    };
    // `weft job stop`'s marker, or a signal from the launcher: the server
    // drains as on SIGTERM (new requests refused as not applied, those
    // under way answered, for at most DRAIN_LIMIT), then makes its
    // metadata durable, removes its data unless kept, and exits. The
    // marker is the one seen when the drain began (stop may remove it
    // meanwhile). A second signal a second or more after the first skips
    // the drain (a launcher and its scheduler often send one each at once).
    let shutdown = weft_services::Shutdown::new();
    let seen: Arc<OnceLock<StopMarker>> = Arc::new(OnceLock::new());
    let (watcher, on_marker, marker_seen) = (Arc::clone(&b), shutdown.clone(), Arc::clone(&seen));
    std::thread::Builder::new().name("weft-job-stop".into()).spawn(move || loop {
        std::thread::sleep(STOP_POLL);
        if let Some(m) = watcher.stop_marker() {
            let _ = marker_seen.set(m);
            let _ = DRAIN_BEGAN.set(Instant::now());
            on_marker.trigger();
            return;
        }
    })?;
    let (on_signal, signalled, trigger, marker_seen) = (Arc::clone(&b), Arc::clone(&server), shutdown.clone(), Arc::clone(&seen));
    ctrlc::set_handler(move || {
        if let Some(m) = on_signal.stop_marker() {
            let _ = marker_seen.set(m);
        }
        if trigger.is_triggered() && DRAIN_BEGAN.get().is_some_and(|t| t.elapsed() >= Duration::from_secs(1)) {
            end(&on_signal, &signalled, marker_seen.get().copied(), false);
        }
        let _ = DRAIN_BEGAN.set(Instant::now());
        trigger.trigger();
    })
    .context("cannot install the signal handler")?;
    let listener = b.listener.try_clone().context("cannot use the listening socket")?;
    let metrics = b.metrics.as_ref().map(TcpListener::try_clone).transpose().context("cannot use the metrics socket")?;
    let served = run_server(&b.cluster, b.rank, listener, metrics, Arc::clone(&server), shutdown);
    if let Err(e) = &served {
        eprintln!("weft: server {} of the job in {}: {e:#}", b.rank, dir.display());
    }
    // A drain that ran out its time may leave requests running: their
    // data is not removed under them.
    if !server.wait_idle(Duration::from_secs(10)) {
        eprintln!("weft: server {}: requests still running after the drain; ending anyway", b.rank);
    }
    end(&b, &server, seen.get().copied().or_else(|| b.stop_marker()), served.is_ok())
}

/// When this job server's drain began (a second signal before a second
/// has passed is the same stop, not a hurry).
static DRAIN_BEGAN: OnceLock<Instant> = OnceLock::new();

/// Ends a job's server once (after its drain, or at a second signal):
/// stops listening (so `weft job stop` sees it stop serving and no client
/// starts anything new), makes its metadata durable, removes its data as
/// the marker says, tells stop it is done, exits (1 if it was not served
/// well). The main thread and a signal may both get here; the second
/// waits for the first to exit the process.
fn end(b: &Bootstrapped, server: &Server, marker: Option<StopMarker>, served_ok: bool) -> ! {
    static ENDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = ENDING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    stop_listening(&b.listener);
    // Nothing is answered between the flush and the exit.
    server.flush_metadata_then(|ok| {
        let removed = b.finish(marker);
        let _ = out!("weft serve: rank {} stopped{}", b.rank, if removed { ", data removed" } else { "" });
        std::process::exit(if ok && served_ok { 0 } else { 1 })
    });
    unreachable!("the process exits inside the flush")
}
