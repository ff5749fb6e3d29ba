//! `weft bench ...`: the papers' experiments against Weft. Each is an
//! [`Experiment`] of the bench crate; this file turns the arguments into
//! one, checks what the bench crate cannot know (the cluster given), and
//! hands it to [`conduct`].

mod args;

pub use args::BenchArgs;
use args::{Common, Which};
use anyhow::{Context, Result};
use std::path::Path;
use weft_bench::experiment::{conduct, Experiment, Output};
use weft_bench::{atomic, btio, coll, md, concurrent_write as cw, conns, everyday, fuse, io500, ior, jobstart, ionode, mpiio_cost, net, net_icount, noncontig as nc, sched};

/// `tcp`, `shm` (as `--transport` lists them).
fn transports(names: &[String]) -> Result<Vec<weft_net::TransportChoice>> {
    names
        .iter()
        .map(|n| match weft_net::TransportChoice::parse(n) {
            Some(t) if t != weft_net::TransportChoice::Auto => Ok(t),
            _ => anyhow::bail!("unknown transport {n:?}: use tcp, shm"),
        })
        .collect()
}

/// Runs `e` with its output where `common` says.
fn run<E: Experiment>(common: &Common, mut e: E) -> Result<()> {
    let out = Output::new(common.csv.clone(), e.name(), common.json);
    conduct(&mut e, &out)
}

pub fn bench(cluster: Option<&Path>, a: BenchArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the weft binary")?;
    let exe = exe.as_path();
    match a.which {
        Which::ConcurrentWrite { common, procs, size, transfer, variants, repeats, servers, mpi } => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if mpi.as_deref() == Some("mpich") && procs.iter().any(|&p| p > cores) {
                anyhow::bail!("MPICH busy-polls: with more ranks than the {cores} cores its waiting ranks starve the writers; use --procs up to {cores} (or --mpi openmpi)");
            }
            let fsync = variants
                .iter()
                .map(|v| match v.as_str() {
                    "nofsync" => Ok(false),
                    "fsync" => Ok(true),
                    o => anyhow::bail!("unknown variant {o:?}: use nofsync, fsync"),
                })
                .collect::<Result<Vec<_>>>()?;
            let bc = common.cluster(exe, cluster, servers)?;
            run(&common, cw::ConcurrentWrite { exe, cluster: &bc, params: cw::Params { procs, size, transfer, fsync, repeats, mpi } })?;
        }
        Which::Md { common, procs, threads, mount, files, repeats, servers, meta_shards, shape, meta_sync } => {
            let window = match meta_sync.as_str() {
                "window" => weft_net::cluster::DEFAULT_META_SYNC_WINDOW_MS,
                "op" => 0,
                other => anyhow::bail!("--meta-sync {other:?}: window or op"),
            };
            let shapes = shape.iter().map(|s| md::Shape::parse(s)).collect::<anyhow::Result<Vec<_>>>()?;
            if cluster.is_some() && meta_shards != [1] {
                anyhow::bail!("--meta-shards starts temporary clusters: leave out --cluster (a given cluster has its own)");
            }
            if meta_shards.is_empty() || meta_shards.iter().any(|&k| k == 0 || k > 64) {
                anyhow::bail!("--meta-shards: each count from 1 to 64");
            }
            // A given cluster's own window is what its creates pay.
            let sync_window_ms = cluster.map_or(window, |f| weft_net::ClusterFile::load(f).map_or(0, |c| c.meta_sync_window_ms));
            let shard_counts = meta_shards.iter().map(|&k| k as u32).collect();
            let make = |k: u32| common.cluster_sharded(exe, cluster, servers, k as usize, window);
            let params = md::Params { procs, threads, mount, files, repeats, shapes };
            run(&common, md::MdRates { exe, cluster: &make, shard_counts, params, sync_window_ms })?;
        }
        Which::Fuse { common, jobs, size, bs, writeback_cache, repeats, servers } => {
            let bc = common.cluster(exe, cluster, servers)?;
            run(&common, fuse::FuseStreaming { exe, cluster: &bc, params: fuse::Params { jobs, size, block: bs, writeback_cache, repeats } })?;
        }
        Which::Job { common, servers, repeats, netns, mpiexec } => {
            if servers.is_empty() || servers.iter().any(|&n| n == 0 || n > 200) || repeats == 0 {
                anyhow::bail!("--servers takes counts from 1 to 200 and --repeats at least 1");
            }
            let dir = common.dir.clone().unwrap_or_else(std::env::temp_dir).join(format!("weft-bench-job-{}", std::process::id()));
            run(&common, jobstart::JobStart { exe, params: jobstart::Params { servers, repeats, netns, mpiexec, dir } })?;
        }
        Which::Everyday { common, files, tree, repeats, servers } => {
            let bc = common.cluster(exe, cluster, servers)?;
            run(&common, everyday::Everyday { exe, cluster: &bc, params: everyday::Params { files, tree, repeats } })?;
        }
        Which::Ionode { common, seconds, easy_matrix, hard_matrix, modes, ops, patterns, repeats, servers } => {
            let modes: Vec<ionode::Mode> = modes
                .iter()
                .map(|m| match m.as_str() {
                    "caching" => ionode::Mode::Caching,
                    "server" => ionode::Mode::Server,
                    _ => ionode::Mode::ListIo,
                })
                .collect();
            let params = ionode::Params { seconds, easy_matrix, hard_matrix, modes, all_patterns: patterns == "all", ops, repeats };
            let make = |mode: ionode::Mode| common.cluster_with_env(exe, cluster, servers, mode.server_env());
            run(&common, ionode::IoNode { exe, cluster: &make, params })?;
        }
        Which::Io500 { common, procs, easy_size, hard_segments, files, repeats, servers } => {
            let bc = common.cluster(exe, cluster, servers)?;
            run(&common, io500::Io500 { exe, cluster: &bc, params: io500::Params { procs, easy_bytes: easy_size, hard_segments, files, repeats } })?;
        }
        Which::Btio { common, q, cells, strategies, blocks, repeats, aggregators, servers } => {
            let bc = common.cluster(exe, cluster, servers)?;
            run(&common, btio::Btio { cluster: &bc, params: btio::Params { q, cell_yz: cells, strategies, blocks, repeats, aggregators } })?;
        }
        Which::Coll { common, mpi, procs, sizes, repeats, servers } => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if mpi == "mpich" && procs > cores {
                anyhow::bail!("MPICH busy-polls: use --procs up to the {cores} cores (or --mpi openmpi)");
            }
            let bc = common.cluster(exe, cluster, servers)?;
            run(&common, coll::Coll { exe, cluster: &bc, params: coll::Params { mpi, procs, sizes, repeats } })?;
        }
        Which::Ior { common, mpi, procs, block, shapes, repeats, forced, servers } => {
            let bc = common.cluster(exe, cluster, servers)?;
            let params = ior::Params { mpis: mpi, procs, block, shapes: ior::shapes(&shapes)?, repeats, forced };
            run(&common, ior::Ior { exe, cluster: &bc, params })?;
        }
        Which::MpiioCost { common, mpi, procs, size, transfer, repeats, servers, overlap } => {
            let bc = common.cluster(exe, cluster, servers)?;
            let params = mpiio_cost::Params { mpi, procs, size, transfer, repeats };
            if overlap {
                run(&common, mpiio_cost::MpiioOverlap { exe, cluster: &bc, params })?;
            } else {
                run(&common, mpiio_cost::MpiioCost { exe, cluster: &bc, params })?;
            }
        }
        Which::Conns { common, counts, busy, rounds, round_seconds } => {
            if cluster.is_some() {
                anyhow::bail!("bench conns starts its own servers (it reads their memory from /proc); run it without --cluster");
            }
            if counts.is_empty() || busy == 0 || round_seconds.is_nan() || round_seconds <= 0.0 {
                anyhow::bail!("--counts, --busy and --round-seconds must be positive");
            }
            let params = conns::Params { counts, busy, rounds, round_time: std::time::Duration::from_secs_f64(round_seconds) };
            run(&common, conns::Conns { exe, base: common.dir.as_deref(), params })?;
        }
        Which::Net { common, icount: true, icount_small, icount_bulk, transport, .. } => {
            let transports = transports(&transport)?;
            let work = net_icount::work_dir(&common.dir.clone().unwrap_or_else(std::env::temp_dir));
            run(&common, net_icount::NetIcount { exe, work, params: net_icount::Params { transports, small: icount_small, bulk: icount_bulk } })?;
        }
        Which::Net { common, pings, stream, message, rounds, transport, rails, .. } => {
            let transports = transports(&transport)?;
            let bc = common.cluster(exe, cluster, 1)?;
            run(&common, net::Net { exe, cluster: &bc, params: net::Params { pings, stream_bytes: stream, message: message as usize, rounds, transports, rails } })?;
        }
        Which::Noncontig { common, patterns, matrix, btio_cells, repeats, stripe_size, servers } => {
            let bc = common.cluster(exe, cluster, servers)?;
            run(&common, nc::Noncontig { exe, cluster: &bc, params: nc::Params { patterns, matrix, btio_cells, repeats, stripe_size } })?;
        }
        Which::Sched { common, procs, size, blocks, strategies, window, stripe_size, repeats, servers } => {
            let window = match window {
                Some(w) => w,
                None => weft_client::Schedule::from_vars(&weft_net::settings::Vars::env())?.window,
            };
            let bc = common.cluster(exe, cluster, servers)?;
            let params = sched::Params { procs, size, stripe_size, blocks, strategies, window, repeats };
            run(&common, sched::Sched { exe, cluster: &bc, params, servers, summary: None })?;
        }
        Which::Atomic { common, workloads, block3d_procs, block3d_n, flash_procs, flash_blocks, frames, repeats, servers } => {
            let bc = common.cluster(exe, cluster, servers)?;
            run(&common, atomic::Atomic { exe, cluster: &bc, params: atomic::Params { workloads, block3d_procs, block3d_n, flash_procs, flash_blocks, frames, repeats } })?;
        }
        Which::Lock { common, clients, ranges, ops } => {
            let bc = common.cluster(exe, cluster, 1)?;
            run(&common, atomic::LockRate { exe, cluster: &bc, clients, ranges, ops })?;
        }
        Which::AtomicWorker { workload, procs, rank, mode, path, frames, block3d_n, flash_blocks } => {
            let params = atomic::Params { workloads: vec![], block3d_procs: vec![], block3d_n, flash_procs: vec![], flash_blocks, frames, repeats: 1 };
            atomic::worker(&atomic::Worker { workload, procs, rank, mode, path, frames, params })?;
        }
        Which::LockWorker { path, rank, ranges, ops } => atomic::lock_worker(&path, rank, ranges, ops)?,
        Which::SchedWorker { path, rank, procs, size, strategy, block, window, op } => {
            sched::worker(&sched::Worker { path, rank, procs, size, strategy, block, window, op })?;
        }
        Which::NoncontigWorker { pattern, matrix, btio_cells, rank, mode, op, path } => {
            let params = nc::Params { patterns: vec![], matrix, btio_cells, repeats: 1, stripe_size: 0 };
            nc::worker(&pattern, &params, rank, &mode, &op, &path)?;
        }
        Which::CwWorker { target, path, size, transfer, fsync, read } => {
            let t = if target == "weft" { cw::Target::Weft } else { cw::Target::Local };
            cw::worker(t, &path, size, transfer, fsync, read)?;
        }
        Which::NetPeer => net::peer()?,
        Which::NetIcountClient { pings, sinks } => {
            let cf = cluster.context("--cluster is required")?;
            net_icount::client(cf, pings, sinks)?
        }
        Which::MdWorker { target, dir, files, phase, threads, prefix } => md::worker(&target, &dir, &prefix, files, &phase, threads)?,
        Which::IonodeColl { pattern, matrix, op, path } => ionode::coll_worker(&pattern, matrix, &op, &path)?,
        Which::IonodeProbe { cpu, seconds, units_per_sync, barrier } => ionode::worker(cpu, seconds, units_per_sync, barrier.as_deref())?,
        Which::Io500Worker { dir, phase, rank, procs, easy_bytes, hard_segments, files } => io500::worker(&dir, &phase, rank, procs, easy_bytes, hard_segments, files)?,
    }
    Ok(())
}
