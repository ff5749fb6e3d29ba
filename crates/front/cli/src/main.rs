//! `weft`: the operator's and user's command (floor 8, front end).
//!
//! Parses arguments and calls the library that does the work; each
//! subcommand lives in `cmd/`. Paths inside Weft are written `weft:/a/b`.

#[macro_use]
mod cmd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "weft", version, about = "Weft: a striped parallel file system with MPI-IO semantics")]
struct Cli {
    /// Cluster file (default: $WEFT_CLUSTER).
    #[arg(long, global = true, env = "WEFT_CLUSTER")]
    cluster: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a local cluster: one meta/lock server and N data servers on 127.0.0.1.
    Up(cmd::up::UpArgs),
    /// Stop a cluster started with `weft up --detach`.
    Down(cmd::up::DownArgs),
    /// Run one server of a cluster (what a job script runs on each node).
    Serve(cmd::serve::ServeArgs),
    /// Weft on the nodes of a batch job: start (srun, mpiexec or ssh), status, stop.
    Job(cmd::job::JobArgs),
    /// Create a directory.
    Mkdir(cmd::fs::MkdirArgs),
    /// List a directory (-l: mode, owner, size, stripe size and count).
    Ls(cmd::fs::LsArgs),
    /// Show a file's or directory's attributes and layout.
    Stat(cmd::fs::PathArgs),
    /// Remove files (-r: directories and their contents).
    Rm(cmd::fs::RmArgs),
    /// Rename or move a file or directory.
    Mv(cmd::fs::MvArgs),
    /// Copy between a local file and weft:/path (either way), or weft to weft.
    Cp(cmd::cp::CpArgs),
    /// Mount Weft as a POSIX file system (FUSE) until Ctrl-C.
    Mount(cmd::mount::MountArgs),
    /// Unmount a `weft mount`.
    Umount(cmd::mount::UmountArgs),
    /// Print the path of the MPI-IO library to LD_PRELOAD for an MPI.
    MpiioLib(cmd::mpiio_lib::MpiioLibArgs),
    /// Each server: up or down, requests served, bytes and objects stored.
    Status(cmd::status::StatusArgs),
    /// The settings in effect: the cluster file's, and what this process's
    /// WEFT_* variables give a client and a server.
    Config(cmd::config::ConfigArgs),
    /// Benchmarks that re-run the papers' experiments against Weft.
    Bench(cmd::bench::BenchArgs),
    /// Fuzz the decoders and live servers with structured hostile input.
    Fuzz(cmd::fuzz::FuzzArgs),
    /// Simulators: compare strategies far beyond one machine.
    Sim(cmd::sim::SimArgs),
}

fn main() {
    tracing_subscriber::fmt()
        // fuser warns of the unmount an external `umount` already did.
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG").unwrap_or_else(|_| "warn,fuser=error".into()))
        .with_writer(std::io::stderr)
        // A log on a full disk must not take a server down: by default a
        // failed log write is reported with eprintln!, which panics.
        .log_internal_errors(false)
        .init();
    let cli = Cli::parse();
    let cluster = cli.cluster.as_deref();
    let r = match cli.cmd {
        Cmd::Up(a) => cmd::up::up(a),
        Cmd::Down(a) => cmd::up::down(a),
        Cmd::Serve(a) => cmd::serve::serve(cluster, a),
        Cmd::Job(a) => cmd::job::job(a),
        Cmd::Mkdir(a) => cmd::fs::mkdir(cluster, a),
        Cmd::Ls(a) => cmd::fs::ls(cluster, a),
        Cmd::Stat(a) => cmd::fs::stat(cluster, a),
        Cmd::Rm(a) => cmd::fs::rm(cluster, a),
        Cmd::Mv(a) => cmd::fs::mv(cluster, a),
        Cmd::Cp(a) => cmd::cp::cp(cluster, a),
        Cmd::MpiioLib(a) => cmd::mpiio_lib::mpiio_lib(a),
        Cmd::Mount(a) => cmd::mount::mount(cluster, a),
        Cmd::Umount(a) => cmd::mount::umount(a),
        Cmd::Status(a) => cmd::status::run(cluster, a),
        Cmd::Config(a) => cmd::config::config(cluster, a),
        Cmd::Bench(a) => cmd::bench::bench(cluster, a),
        Cmd::Sim(a) => cmd::sim::sim(a),
        Cmd::Fuzz(a) => cmd::fuzz::fuzz(cluster, a),
    };
    if let Err(e) = r {
        // The reader of our output went away (`weft ls | head`): not an error.
        if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) {
            std::process::exit(0);
        }
        eprintln!("weft: error: {e:#}");
        std::process::exit(1);
    }
}
