//! `weft bench ...`: the papers' experiments against Weft.

mod args;

pub use args::BenchArgs;
use args::{Common, Which};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use weft_bench::report::{print_json, print_table, write_csv};
use weft_bench::{atomic, btio, coll, md, concurrent_write as cw, conns, everyday, fuse, io500, jobstart, ionode, mpiio_cost, net, net_icount, noncontig as nc, sched};

/// The CSV file of a benchmark: `--csv`, else `bench-results/<name>.csv`.
fn csv_path(common: &Common, name: &str) -> PathBuf {
    common.csv.clone().unwrap_or_else(|| PathBuf::from(format!("bench-results/{name}.csv")))
}

/// Writes the rows as CSV and, with `--json`, prints them (with `summary`)
/// as one JSON object; returns true when the caller should print its table.
fn emit<R: serde::Serialize>(common: &Common, csv: &Path, rows: &[R], summary: serde_json::Map<String, serde_json::Value>) -> Result<bool> {
    write_csv(csv, rows)?;
    if common.json {
        print_json(rows, summary)?;
        return Ok(false);
    }
    Ok(true)
}

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

fn f1(v: f64) -> String {
    format!("{v:.1}")
}

pub fn bench(cluster: Option<&Path>, a: BenchArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the weft binary")?;
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
            let bc = common.cluster(&exe, cluster, servers)?;
            let through = mpi.as_ref().map_or(String::new(), |m| format!(" through {m}'s MPI-IO"));
            let rows = cw::run(&exe, &bc, &cw::Params { procs, size, transfer, fsync, repeats, mpi })?;
            let csv = csv_path(&common, "concurrent-write");
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| vec![r.procs.to_string(), super::human_bytes(r.size_bytes), r.fsync.to_string(), f1(r.weft_mb_s), f1(r.local_mb_s), format!("{:.2}", r.ratio)])
                    .collect();
                print_table(
                    &format!("Concurrent write, file per process (paper 002){through}, transfers of {}, median of {repeats}", super::human_bytes(transfer)),
                    &["procs", "size/proc", "fsync", "weft MB/s", "local MB/s", "weft/local"],
                    &table,
                );
                out!("(paper 002 saw 416-980 MB/s on NAS and Panasas and ~4 GB/s on Lustre at 32-768 procs)\nCSV: {}", csv.display())?;
            }
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
            let quiet = common.json;
            let mut rows = Vec::new();
            for &k in &meta_shards {
                let bc = common.cluster_sharded(&exe, cluster, servers, k, window)?;
                let params = md::Params { procs: procs.clone(), threads: threads.clone(), mount, files, repeats, shapes: shapes.clone() };
                rows.extend(md::run(&exe, &bc, &params, &|what| {
                    if !quiet {
                        eprintln!("bench md: {what}");
                    }
                })?);
            }
            let bc_file = cluster.map(std::path::Path::to_path_buf);
            let csv = csv_path(&common, "md");
            // Rate against processes, a series per shard count and shape.
            let panels: Vec<weft_bench::plot::Panel> = ["create", "stat", "list", "unlink"]
                .iter()
                .map(|op| {
                    let mut series: Vec<weft_bench::plot::Series> = Vec::new();
                    for r in rows.iter().filter(|r| r.op == *op && r.threads == threads[0]) {
                        let name = format!("K={} {}", r.meta_shards, r.shape);
                        match series.iter_mut().find(|s| s.name == name) {
                            Some(s) => s.points.push((r.procs as f64, r.weft_ops_s)),
                            None => series.push(weft_bench::plot::Series { name, points: vec![(r.procs as f64, r.weft_ops_s)] }),
                        }
                    }
                    weft_bench::plot::Panel { title: format!("{op}s per second through the API"), x_label: "processes".into(), y_label: "ops/s".into(), series }
                })
                .collect();
            let plots = weft_bench::plot::write(&csv.with_extension(""), &panels)?;
            if emit(&common, &csv, &rows, Default::default())? {
                let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or_else(|| "-".to_string(), f);
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| {
                        vec![
                            r.meta_shards.to_string(),
                            r.shape.to_string(),
                            r.procs.to_string(),
                            r.threads.to_string(),
                            r.op.to_string(),
                            f1(r.weft_ops_s),
                            f1(r.local_ops_s),
                            format!("{:.2}", r.ratio),
                            opt(r.mount_ops_s, &f1),
                            opt(r.mount_over_api, &|x| format!("{x:.2}")),
                        ]
                    })
                    .collect();
                let window = bc_file.map_or(window, |f| weft_net::ClusterFile::load(&f).map_or(0, |c| c.meta_sync_window_ms));
                let durability = if window == 0 { "Weft's creates durable when answered".to_string() } else { format!("Weft's creates durable within {window} ms, as a journal's") };
                print_table(
                    &format!("Metadata rates, {files} files per process, median of {repeats} ({durability}; local ones not fsync'd)"),
                    &["K", "shape", "procs", "threads", "op", "api ops/s", "local ops/s", "api/local", "mount ops/s", "mount/api"],
                    &table,
                );
                out!("(GekkoFS reports ~73k creates/s per node; issue 12 measured 1.6k/s at 1 process, ~4.8k/s at 4)\nCSV: {}", csv.display())?;
                for p in &plots {
                    out!("Plot: {}", p.display())?;
                }
            }
        }
        Which::Fuse { common, jobs, size, repeats, servers } => {
            let bc = common.cluster(&exe, cluster, servers)?;
            let quiet = common.json;
            let rows = fuse::run(&exe, &bc, &fuse::Params { jobs, size, repeats }, &|what| {
                if !quiet {
                    eprintln!("bench fuse: {what}");
                }
            })?;
            let csv = csv_path(&common, "fuse");
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> =
                    rows.iter().map(|r| vec![r.jobs.to_string(), r.op.to_string(), f1(r.mount_mb_s), f1(r.local_mb_s), format!("{:.2}", r.ratio)]).collect();
                print_table(
                    &format!("Streaming through the mount: fio, 1 MiB blocks, {} per run, median of {repeats} (writes fsync'd at the end, reads cold)", super::human_bytes(size)),
                    &["jobs", "op", "mount MB/s", "local MB/s", "mount/local"],
                    &table,
                );
                out!("(issue 12's targets: writes >= 0.8x local, cold reads >= 0.7x; a libfuse passthrough file system reached 0.44x here)\nCSV: {}", csv.display())?;
            }
        }
        Which::Job { common, servers, repeats, netns, mpiexec } => {
            if servers.is_empty() || servers.iter().any(|&n| n == 0 || n > 200) || repeats == 0 {
                anyhow::bail!("--servers takes counts from 1 to 200 and --repeats at least 1");
            }
            let quiet = common.json;
            let dir = common.dir.clone().unwrap_or_else(std::env::temp_dir).join(format!("weft-bench-job-{}", std::process::id()));
            let p = jobstart::Params { servers, repeats, netns, mpiexec, dir: dir.clone() };
            let rows = jobstart::run(&exe, &p, &|what| {
                if !quiet {
                    eprintln!("bench job: {what}");
                }
            });
            let _ = std::fs::remove_dir_all(&dir);
            let rows = rows?;
            let csv = csv_path(&common, "job");
            let bars: Vec<weft_bench::plot::Bar> = rows.iter().map(|r| weft_bench::plot::Bar { name: format!("{} servers", r.servers), value: r.ready_s, goal: None }).collect();
            let plots = weft_bench::plot::write_bars(&csv.with_extension(""), "weft job start: seconds until every server answers", "seconds", &bars, 1.0)?;
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| vec![r.servers.to_string(), r.placement.to_string(), r.launcher.to_string(), format!("{:.3}", r.ready_s), format!("{:.3}", r.after_last_bind_s), format!("{:.3}", r.stop_s)])
                    .collect();
                print_table(
                    &format!("weft job start and stop, median of {repeats}"),
                    &["servers", "placement", "launcher", "ready s", "after last bind s", "stop s"],
                    &table,
                );
                out!("(issue 22's targets: ready within 2 s of the last server binding; stop within 5 s)\nCSV: {}", csv.display())?;
                for p in plots {
                    out!("plot: {}", p.display())?;
                }
            }
        }
        Which::Everyday { common, files, tree, repeats, servers } => {
            let bc = common.cluster(&exe, cluster, servers)?;
            let quiet = common.json;
            let rows = everyday::run(&exe, &bc, &everyday::Params { files, tree: tree.clone(), repeats }, &|what| {
                if !quiet {
                    eprintln!("bench everyday: {what}");
                }
            })?;
            let csv = csv_path(&common, "everyday");
            let bars: Vec<weft_bench::plot::Bar> = rows.iter().map(|r| weft_bench::plot::Bar { name: r.op.into(), value: r.ratio, goal: r.goal }).collect();
            let plots = weft_bench::plot::write_bars(&csv.with_extension(""), "Everyday work: time on the mount / time on a local directory", "mount time / local time", &bars, 1.0)?;
            if emit(&common, &csv, &rows, Default::default())? {
                let goal = |g: Option<f64>| g.map_or("-".to_string(), |g| format!("<= {g:.1}"));
                let table: Vec<Vec<String>> =
                    rows.iter().map(|r| vec![r.op.to_string(), format!("{:.3}", r.mount_s), format!("{:.3}", r.local_s), format!("{:.2}", r.ratio), goal(r.goal)]).collect();
                let tree = tree.as_ref().map_or(format!("a generated tree of {files} files"), |t| t.display().to_string());
                print_table(
                    &format!("Everyday work through the mount: {tree}, median of {repeats} (not synced on either side; reads cold)"),
                    &["op", "mount s", "local s", "mount/local", "goal"],
                    &table,
                );
                out!("CSV: {}", csv.display())?;
                for p in plots {
                    out!("plot: {}", p.display())?;
                }
            }
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
            let quiet = common.json;
            let p = ionode::Params { seconds, easy_matrix, hard_matrix, modes, all_patterns: patterns == "all", ops, repeats };
            let rows = ionode::run(&exe, &|mode| common.cluster_with_env(&exe, cluster, servers, mode.server_env()), &p, &|what| {
                if !quiet {
                    eprintln!("bench ionode: {what}");
                }
            })?;
            let csv = csv_path(&common, "ionode");
            // Paper 001's figures 2 and 3: throughput against CPU available,
            // a point per case, a series per mode and barrier.
            let mut series: Vec<weft_bench::plot::Series> = Vec::new();
            for r in &rows {
                let name = format!("{}{}", r.mode, if r.barrier { ", 5 ms barrier" } else { "" });
                match series.iter_mut().find(|s| s.name == name) {
                    Some(s) => s.points.push((r.cpu_available_pct, r.mb_s)),
                    None => series.push(weft_bench::plot::Series { name, points: vec![(r.cpu_available_pct, r.mb_s)] }),
                }
            }
            let panel = weft_bench::plot::Panel { title: "I/O throughput vs CPU available on the I/O nodes".into(), x_label: "CPU available to the probe (%)".into(), y_label: "MB/s moved".into(), series };
            let plots = weft_bench::plot::write_scatter(&csv.with_extension(""), &panel)?;
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| vec![r.pattern.clone(), r.record_bytes.to_string(), r.op.clone(), r.mode.to_string(), if r.barrier { "5 ms".into() } else { "-".into() }, format!("{:.0}%", r.cpu_available_pct), f1(r.mb_s), format!("{:.4}", r.server_cpu_s_per_mb)])
                    .collect();
                print_table(
                    &format!("CPU available on the I/O nodes (paper 001): a probe per I/O CPU, {seconds} s runs, median of {repeats}"),
                    &["pattern", "record B", "op", "mode", "barrier", "CPU available", "MB/s", "server CPU s/MB"],
                    &table,
                );
                // Paper 001's tables 2 and 3, its figures beside Weft's.
                let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}%"));
                let mbs = |v: Option<f64>| v.map_or("-".into(), f1);
                let beside: Vec<Vec<String>> = ionode::beside_paper(&rows)
                    .into_iter()
                    .map(|b| vec![b.case, b.mode.to_string(), pct(b.cpu.0), pct(Some(b.cpu.1)), pct(b.cpu_barrier.0), pct(b.cpu_barrier.1), mbs(b.mb_s.0), mbs(Some(b.mb_s.1))])
                    .collect();
                if !beside.is_empty() {
                    print_table(
                        "Paper 001's tables 2 and 3 beside Weft (caching = traditional caching, server = disk-directed I/O; the paper has no list I/O)",
                        &["case", "mode", "CPU paper", "CPU Weft", "5 ms barrier: paper", "Weft", "MB/s paper", "MB/s Weft"],
                        &beside,
                    );
                }
                out!("(paper 001: 90-95% available for easy patterns, as little as 3.4% for hard ones; the 5 ms barrier costs more)\nCSV: {}", csv.display())?;
                for p in &plots {
                    out!("plot: {}", p.display())?;
                }
            }
        }
        Which::Io500 { common, procs, easy_size, hard_segments, files, repeats, servers } => {
            let bc = common.cluster(&exe, cluster, servers)?;
            let quiet = common.json;
            let p = io500::Params { procs, easy_bytes: easy_size, hard_segments, files, repeats };
            let rows = io500::run(&exe, &bc, &p, &|what| {
                if !quiet {
                    eprintln!("bench io500: {what}");
                }
            })?;
            let csv = csv_path(&common, "io500");
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows.iter().map(|r| vec![r.phase.to_string(), r.unit.to_string(), format!("{:.3}", r.mount), format!("{:.3}", r.local), format!("{:.2}", r.ratio)]).collect();
                print_table(
                    &format!("IO500-like shapes, {procs} processes, median of {repeats} (mount vs a local directory of the same disk; ior writes fsync'd, reads cold)"),
                    &["phase", "unit", "mount", "local", "mount/local"],
                    &table,
                );
                out!("(IO500's formula: geometric means of the ior phases (GiB/s) and of the mdtest phases (kIOPS), total = sqrt(bw * md))\nCSV: {}", csv.display())?;
            }
        }
        Which::Btio { common, q, cells, strategies, blocks, repeats, aggregators, servers } => {
            let bc = common.cluster(&exe, cluster, servers)?;
            let quiet = common.json;
            let p = btio::Params { q, cell_yz: cells, strategies, blocks: blocks.clone(), repeats, aggregators };
            let rows = btio::run(&bc, &p, &|what| {
                if !quiet {
                    eprintln!("bench btio: {what}");
                }
            })?;
            let csv = csv_path(&common, "btio");
            let panels: Vec<weft_bench::plot::Panel> = ["write", "read"]
                .iter()
                .map(|op| weft_bench::plot::Panel {
                    title: format!("BTIO {op}, {} ranks: seconds by schedule block b", q * q),
                    x_label: "schedule block b (bytes)".into(),
                    y_label: "seconds".into(),
                    series: {
                        let mut keys: Vec<(&str, String)> = Vec::new();
                        for r in &rows {
                            let k = (r.implementation, r.strategy.clone());
                            if !keys.contains(&k) {
                                keys.push(k);
                            }
                        }
                        keys.into_iter()
                            .map(|(im, st)| weft_bench::plot::Series {
                                name: format!("{} {st}", im.trim_start_matches("weft-")),
                                // Server-directed I/O has no b: a level line across them.
                                points: rows
                                    .iter()
                                    .filter(|r| r.op == *op && r.implementation == im && r.strategy == st)
                                    .flat_map(|r| if r.block_bytes == 0 { blocks.iter().map(|&b| (b as f64, r.seconds)).collect() } else { vec![(r.block_bytes as f64, r.seconds)] })
                                    .collect(),
                            })
                            .collect()
                    },
                })
                .collect();
            let plots = weft_bench::plot::write(&csv.with_extension(""), &panels)?;
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| vec![r.op.to_string(), r.implementation.to_string(), r.strategy.clone(), super::human_bytes(r.block_bytes), format!("{:.3}", r.seconds), f1(r.mb_s)])
                    .collect();
                print_table(
                    &format!("BTIO (paper 000 figs. 4-5), {} ranks, {} per phase, median of {repeats}; writes fsync'd", q * q, super::human_bytes(weft_client::Pattern::btio(q, cells).file_size())),
                    &["op", "impl", "strategy", "b", "seconds", "MB/s"],
                    &table,
                );
                for im in ["weft-two-phase", "weft-independent"] {
                    out!("{im}: spread {:.0}% write, {:.0}% read", btio::spread(&rows, im, "write") * 100.0, btio::spread(&rows, im, "read") * 100.0)?;
                }
                for op in ["write", "read"] {
                    let best = |im: &str| rows.iter().filter(|r| r.op == op && r.implementation == im).map(|r| r.seconds).fold(f64::MAX, f64::min);
                    let server = best("weft-server");
                    out!(
                        "{op}: server-directed {server:.3} s; best two-phase {:.3} s ({:.2}x), best independent {:.3} s ({:.2}x) (x > 1: server-directed faster)",
                        best("weft-two-phase"),
                        best("weft-two-phase") / server,
                        best("weft-independent"),
                        best("weft-independent") / server
                    )?;
                }
                out!("{}", btio::PAPER)?;
                let plots = if plots.is_empty() { "none (no DejaVu font found)".to_string() } else { plots.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") };
                out!("CSV: {}; plots: {plots}", csv.display())?;
            }
        }
        Which::Coll { common, mpi, procs, sizes, repeats, servers } => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if mpi == "mpich" && procs > cores {
                anyhow::bail!("MPICH busy-polls: use --procs up to the {cores} cores (or --mpi openmpi)");
            }
            let bc = common.cluster(&exe, cluster, servers)?;
            let quiet = common.json;
            let p = coll::Params { mpi, procs, sizes, repeats };
            let rows = coll::run(&exe, &bc, &p, &|what| {
                if !quiet {
                    eprintln!("bench coll: {what}");
                }
            })?;
            let csv = csv_path(&common, "coll");
            let panels: Vec<weft_bench::plot::Panel> = ["write", "read"]
                .iter()
                .map(|op| weft_bench::plot::Panel {
                    title: format!("coll_perf {op} ({} ranks, {})", p.procs, p.mpi),
                    x_label: "array edge N (N^3 ints)".into(),
                    y_label: "MB/s".into(),
                    series: {
                        let mut names: Vec<&str> = Vec::new();
                        for r in &rows {
                            if !names.contains(&r.implementation) {
                                names.push(r.implementation);
                            }
                        }
                        names
                            .into_iter()
                            .map(|im| weft_bench::plot::Series {
                                name: im.to_string(),
                                points: rows.iter().filter(|r| r.op == *op && r.implementation == im).map(|r| (r.workload.trim_start_matches("coll_perf-").parse::<f64>().unwrap_or(0.0), r.mb_s)).collect(),
                            })
                            .collect()
                    },
                })
                .collect();
            let plots = weft_bench::plot::write(&csv.with_extension(""), &panels)?;
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows.iter().map(|r| vec![r.workload.clone(), r.procs.to_string(), r.op.to_string(), r.implementation.to_string(), f1(r.mb_s), if r.op == "read" { if r.cold { "cold" } else { "warm" }.to_string() } else { "fsync'd".to_string() }]).collect();
                print_table(
                    &format!("Collective I/O, 3-D block darray (coll_perf), {} ranks of {}, median of {repeats}", p.procs, p.mpi),
                    &["workload", "procs", "op", "impl", "MB/s", "kind"],
                    &table,
                );
                let plots = if plots.is_empty() { "none (no DejaVu font found)".to_string() } else { plots.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") };
                out!("CSV: {}; plots: {plots}", csv.display())?;
            }
        }
        Which::MpiioCost { common, mpi, procs, size, transfer, repeats, servers, overlap: true } => {
            let bc = common.cluster(&exe, cluster, servers)?;
            let quiet = common.json;
            let p = mpiio_cost::Params { mpi, procs, size, transfer, repeats };
            let rows = mpiio_cost::overlap(&exe, &bc, &p, false, &|what| {
                if !quiet {
                    eprintln!("bench mpiio-cost: {what}");
                }
            })?;
            let csv = csv_path(&common, "mpiio-overlap");
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| vec![r.procs.to_string(), r.op.to_string(), format!("{:.3}", r.io_s), format!("{:.3}", r.compute_s), format!("{:.3}", r.both_s), format!("{:.2}", r.ratio), format!("{:.2}", r.no_overlap), format!("{:.0}%", r.hidden * 100.0), format!("{:.2}", r.cpu_floor)])
                    .collect();
                print_table(
                    &format!("Nonblocking MPI-IO ({}) behind computation, file per process, {} each in {} calls posted at once, writes not fsync'd, reads warm, median of {repeats}", p.mpi, super::human_bytes(size), super::human_bytes(transfer)),
                    &["procs", "op", "I/O s", "compute s", "both s", "both/longer", "no overlap", "hidden", "CPU floor"],
                    &table,
                );
                out!("CSV: {}", csv.display())?;
            }
        }
        Which::MpiioCost { common, mpi, procs, size, transfer, repeats, servers, overlap: false } => {
            let bc = common.cluster(&exe, cluster, servers)?;
            let quiet = common.json;
            let p = mpiio_cost::Params { mpi, procs, size, transfer, repeats };
            let rows = mpiio_cost::run(&exe, &bc, &p, &|what| {
                if !quiet {
                    eprintln!("bench mpiio-cost: {what}");
                }
            })?;
            let csv = csv_path(&common, "mpiio-cost");
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> =
                    rows.iter().map(|r| vec![r.procs.to_string(), r.op.to_string(), f1(r.mpiio_mb_s), f1(r.rust_mb_s), format!("{:.2}", r.ratio)]).collect();
                print_table(
                    &format!("MPI-IO front end ({}) vs Rust API, file per process, {} each in {} calls, fsync'd writes, warm reads, median of {repeats}", p.mpi, super::human_bytes(size), super::human_bytes(transfer)),
                    &["procs", "op", "MPI-IO MB/s", "Rust API MB/s", "MPI-IO/Rust"],
                    &table,
                );
                out!("CSV: {}", csv.display())?;
            }
        }
        Which::Conns { common, counts, busy, rounds, round_seconds } => {
            if cluster.is_some() {
                anyhow::bail!("bench conns starts its own servers (it reads their memory from /proc); run it without --cluster");
            }
            if counts.is_empty() || busy == 0 || round_seconds.is_nan() || round_seconds <= 0.0 {
                anyhow::bail!("--counts, --busy and --round-seconds must be positive");
            }
            let p = conns::Params { counts, busy, rounds, round_time: std::time::Duration::from_secs_f64(round_seconds) };
            let quiet = common.json;
            let rows = conns::run(&exe, common.dir.as_deref(), &p, &|what| {
                if !quiet {
                    eprintln!("bench conns: {what}");
                }
            })?;
            let csv = csv_path(&common, "conns");
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| {
                        vec![
                            r.connections.to_string(),
                            f1(r.connect_all_s),
                            super::human_bytes(r.server_rss_bytes),
                            format!("{:.0}", r.bytes_per_connection),
                            format!("{:.0}", r.busy_requests_per_s),
                            format!("{:.2}", r.rate_vs_smallest),
                        ]
                    })
                    .collect();
                print_table(
                    &format!("Connections held by one server, {busy} busy clients (ping round trips), median of {rounds} rounds; each count on a fresh server"),
                    &["connections", "connect s", "server RSS", "bytes/conn", "busy req/s", "vs first"],
                    &table,
                );
                out!("targets: <= 65536 bytes per connection at 10,000; busy rate at 10,000 within 10% of the first count\nCSV: {}", csv.display())?;
            }
        }
        Which::Net { common, icount: true, icount_small, icount_bulk, transport, .. } => {
            let transports = transports(&transport)?;
            let work = net_icount::work_dir(&common.dir.clone().unwrap_or_else(std::env::temp_dir));
            let rows = net_icount::run(&exe, &work, &net_icount::Params { transports, small: icount_small, bulk: icount_bulk });
            let _ = std::fs::remove_dir_all(&work);
            let rows = rows?;
            let csv = csv_path(&common, "net-icount");
            if emit(&common, &csv, &rows, Default::default())? {
                let paper = |r: &net_icount::Row| match (r.side, r.op) {
                    ("client", "small_request") => "about 2,000 (BG/L, one small send)",
                    ("server", "small_request") => "goal <= 3,000",
                    _ => "",
                };
                let table: Vec<Vec<String>> = rows.iter().map(|r| vec![r.transport.into(), r.side.into(), r.op.into(), format!("{:.0}", r.instructions), paper(r).into()]).collect();
                print_table(
                    &format!("Instructions of the message layer (callgrind, differences of runs: {icount_small} pings, {icount_bulk} writes of 1 MiB)"),
                    &["transport", "side", "op", "instructions", "paper 003"],
                    &table,
                );
                out!("CSV: {}", csv.display())?;
            }
        }
        Which::Net { common, pings, stream, message, rounds, transport, .. } => {
            let transports = transports(&transport)?;
            let bc = common.cluster(&exe, cluster, 1)?;
            let rows = net::run(&exe, &bc, &net::Params { pings, stream_bytes: stream, message: message as usize, rounds, transports })?;
            let csv = csv_path(&common, "net");
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| {
                        let value = match (r.rtt_us, r.mb_s) {
                            (Some(us), _) => format!("{us:.2} us"),
                            (_, Some(mb)) => format!("{mb:.1} MB/s"),
                            _ => String::new(),
                        };
                        let cpu = r.server_cpu_ms_per_gib.map_or(String::new(), |ms| format!("{ms:.0}"));
                        vec![r.transport.into(), r.op.into(), super::human_bytes(r.size as u64), value, format!("{:.2}", r.ratio), cpu]
                    })
                    .collect();
                print_table(
                    &format!("Message layer vs raw TCP (paper 003), median of {rounds} rounds, alternating order"),
                    &["transport", "op", "message", "value", "vs raw tcp", "server CPU ms/GiB"],
                    &table,
                );
                out!("CSV: {}", csv.display())?;
            }
        }
        Which::Noncontig { common, patterns, matrix, btio_cells, repeats, stripe_size, servers } => {
            let bc = common.cluster(&exe, cluster, servers)?;
            let params = nc::Params { patterns, matrix, btio_cells, repeats, stripe_size };
            let rows = nc::run(&exe, &bc, &params)?;
            let csv = csv_path(&common, "noncontig");
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| {
                        vec![
                            r.pattern.clone(),
                            r.op.clone(),
                            super::human_bytes(r.bytes),
                            r.pieces_per_proc.to_string(),
                            f1(r.listio_mb_s),
                            f1(r.perpiece_mb_s),
                            f1(r.local_mb_s),
                            f1(r.local_sieve_mb_s),
                            format!("{:.1}", r.listio_vs_perpiece),
                            format!("{:.2}", r.listio_vs_local),
                            format!("{:.2}", r.listio_vs_local_sieve),
                        ]
                    })
                    .collect();
                print_table(
                    &format!("Non-contiguous access through views, {} processes, median of {repeats}", nc::PROCS),
                    &["pattern", "op", "file", "pieces/proc", "list I/O MB/s", "per-piece MB/s", "local MB/s", "local sieve MB/s", "list/piece", "list/local", "list/sieve"],
                    &table,
                );
                out!("local: one pread/pwrite per piece; local sieve: what an MPI-IO library does on a local file (4 MiB read / 512 KiB locked write windows); no fsync, reads after writes (page cache) on every side\nCSV: {}", csv.display())?;
            }
        }
        Which::Sched { common, procs, size, blocks, strategies, window, stripe_size, repeats, servers } => {
            let window = match window {
                Some(w) => w,
                None => weft_client::Schedule::from_vars(&weft_net::settings::Vars::env())?.window,
            };
            let bc = common.cluster(&exe, cluster, servers)?;
            let params = sched::Params { procs, size, stripe_size, blocks, strategies: strategies.clone(), window, repeats };
            let (rows, summary) = sched::run(&exe, &bc, &params)?;
            let csv = csv_path(&common, "sched");
            let plots = sched::plot(&csv.with_extension(""), &rows, &strategies)?;
            let serde_json::Value::Object(m) = serde_json::to_value(&summary)? else { unreachable!("a struct serializes to an object") };
            if emit(&common, &csv, &rows, m)? {
                let mut table = Vec::new();
                for &b in &params.blocks {
                    for s in &strategies {
                        let get = |op: &str| rows.iter().find(|r| r.op == op && r.strategy == s.name() && r.block_bytes == b).map_or(0.0, |r| r.mb_s);
                        table.push(vec![sched::human(b), s.name().to_string(), f1(get("write")), f1(get("read"))]);
                    }
                }
                print_table(
                    &format!("Scheduling (paper 000): {procs} clients x {}, {servers} servers, stripe {}, window {window}", super::human_bytes(size), super::human_bytes(stripe_size)),
                    &["b", "strategy", "write MB/s", "read MB/s"],
                    &table,
                );
                let show = |name: &str, x: &(String, u64, f64)| format!("{name} {:.1} MB/s ({}, b = {})", x.2, x.0, sched::human(x.1));
                out!("\n{}; {}; spread {:.0}%", show("write best", &summary.write_best), show("worst", &summary.write_worst), (summary.write_best.2 / summary.write_worst.2 - 1.0) * 100.0)?;
                out!("{}; {}; spread {:.0}%", show("read best", &summary.read_best), show("worst", &summary.read_worst), (summary.read_best.2 / summary.read_worst.2 - 1.0) * 100.0)?;
                out!(
                    "default ({}, b = {}) in paired re-runs against the top {} of the sweep: {:.2} of the best write ({} b = {}), {:.2} of the best read ({} b = {}); above 1: the default won",
                    summary.default_strategy,
                    sched::human(summary.default_block_bytes),
                    3,
                    summary.write_default_vs_best,
                    summary.write_paired_best.0,
                    sched::human(summary.write_paired_best.1),
                    summary.read_default_vs_best,
                    summary.read_paired_best.0,
                    sched::human(summary.read_paired_best.1)
                )?;
                out!(
                    "writes timed through fsync; reads {}",
                    if summary.reads_cold { "cold (page cache dropped before each run)" } else { "WARM: dropping the page cache needs root, so reads may come from memory" }
                )?;
                out!("{}", sched::PAPER)?;
                let plots = if plots.is_empty() { "none (no DejaVu font found)".to_string() } else { plots.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") };
                out!("CSV: {}; plots: {plots}", csv.display())?;
            }
        }
        Which::Atomic { common, workloads, block3d_procs, block3d_n, flash_procs, flash_blocks, frames, repeats, servers } => {
            let bc = common.cluster(&exe, cluster, servers)?;
            let params = atomic::Params { workloads, block3d_procs, block3d_n, flash_procs, flash_blocks, frames, repeats };
            let rows = atomic::run(&exe, &bc, &params)?;
            let csv = csv_path(&common, "atomic");
            let panels: Vec<weft_bench::plot::Panel> = ["block3d", "flash"]
                .iter()
                .filter(|w| rows.iter().any(|r| r.workload == **w))
                .map(|w| weft_bench::plot::Panel {
                    title: format!("{w}: MB/s by locking mode"),
                    x_label: "processes".into(),
                    y_label: "MB/s".into(),
                    series: atomic::MODES
                        .iter()
                        .map(|m| weft_bench::plot::Series { name: m.to_string(), points: rows.iter().filter(|r| r.workload == *w && r.mode == *m).map(|r| (r.procs as f64, r.mb_s)).collect() })
                        .collect(),
                })
                .collect();
            let plots = weft_bench::plot::write(&csv.with_extension(""), &panels)?;
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| vec![r.workload.clone(), r.procs.to_string(), r.mode.clone(), f1(r.mb_s), format!("{:.0}%", r.ratio_to_none * 100.0), r.locks_per_client.to_string(), r.max_concurrency.to_string()])
                    .collect();
                print_table(
                    &format!("Atomic mode (paper 004), median of {repeats}"),
                    &["workload", "procs", "locking", "MB/s", "of none", "locks/client", "max concurrency"],
                    &table,
                );
                out!("{}", atomic::PAPER)?;
                let plots = if plots.is_empty() { "none (no DejaVu font found)".to_string() } else { plots.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") };
                out!("CSV: {}; plots: {plots}", csv.display())?;
            }
        }
        Which::Lock { common, clients, ranges, ops } => {
            let bc = common.cluster(&exe, cluster, 1)?;
            let rows = atomic::run_lock(&exe, &bc, &clients, &ranges, ops)?;
            let csv = csv_path(&common, "lock");
            if emit(&common, &csv, &rows, Default::default())? {
                let table: Vec<Vec<String>> =
                    rows.iter().map(|r| vec![r.ranges.to_string(), r.clients.to_string(), format!("{:.0}", r.pairs_per_s), format!("{:.1}", r.median_us), format!("{:.1}", r.p99_us)]).collect();
                print_table(&format!("Lock service: exclusive acquire+release pairs, {ops} per client"), &["ranges", "clients", "pairs/s", "median us", "p99 us"], &table);
                out!("CSV: {}", csv.display())?;
            }
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
