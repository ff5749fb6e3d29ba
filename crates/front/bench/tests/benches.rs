//! Benchmarks that check something while they measure, run at a tiny
//! size (the numbers are not looked at: timing is not a test).

use std::process::Command;

/// Runs `weft bench ARGS --json` in a directory of its own; its rows, and
/// the names of the files it left beside its CSV (`out.*`).
fn bench_rows(name: &str, args: &[&str]) -> (Vec<serde_json::Value>, Vec<String>) {
    let dir = std::env::temp_dir().join(format!("weft-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(weft_testkit::weft()).arg("bench").args(args).args(["--json", "--csv"]).arg(dir.join("out.csv")).current_dir(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    let _ = std::fs::remove_dir_all(&dir);
    (v["rows"].as_array().unwrap().clone(), files)
}

/// `weft bench everyday` (issue 21): tar xf, git clone, cold reads (whose
/// byte count is checked against the tree) and rm -rf on a real mount
/// and a local directory; a row per operation, both times and their
/// ratio, and the plot. Needs root, /dev/fuse, tar and git.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn everyday_work_runs_on_the_mount_and_plots_its_ratios() {
    let (rows, files) = bench_rows("everyday", &["everyday", "--files", "40", "--repeats", "1", "--servers", "2"]);
    let ops: Vec<&str> = rows.iter().map(|r| r["op"].as_str().unwrap()).collect();
    assert_eq!(ops, ["tar-xf", "git-clone", "read-cold", "rm-rf"]);
    for r in &rows {
        for k in ["mount_s", "local_s", "ratio"] {
            let x = r[k].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{r}");
        }
    }
    assert!(files.iter().any(|f| f == "out.png") && files.iter().any(|f| f == "out.svg"), "{files:?}");
}

/// `weft bench io500` (issue 12): every IO500 phase runs on a real mount
/// and on a local directory, each read checks the bytes it gets
/// (interleaved 47,008-byte segments of several processes in one file,
/// 3,901-byte files in one shared directory), and the scores come out. A
/// mount that loses or mixes bytes fails it. Needs root and /dev/fuse.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn io500_shapes_run_on_the_mount_and_their_reads_check_out() {
    let (rows, _) = bench_rows("io500", &["io500", "--procs", "3", "--easy-size", "1m", "--hard-segments", "40", "--files", "30", "--repeats", "1", "--servers", "2"]);
    let phases: Vec<&str> = rows.iter().map(|r| r["phase"].as_str().unwrap()).collect();
    assert_eq!(phases.len(), 14, "{phases:?}");
    for p in ["ior-easy-write", "ior-hard-read", "mdtest-easy-stat", "mdtest-hard-read", "mdtest-hard-delete", "score-bandwidth", "score-metadata", "score"] {
        assert!(phases.contains(&p), "{p} missing: {phases:?}");
    }
    for r in rows {
        for side in ["mount", "local"] {
            let x = r[side].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{r}");
        }
    }
}

/// `weft bench btio` (paper 000 figures 4-5): BTIO's nested-strided views
/// move collectively under two-phase, independent and server-directed
/// I/O, each configuration a row with the fields, and the plot
/// comes out. A collective that fails or hangs fails it.
#[test]
fn btio_runs_every_implementation_strategy_and_block() {
    let (rows, files) = bench_rows("btio", &["btio", "--q", "2", "--cells", "4", "--strategies", "first,random,hash", "--blocks", "4k,64k", "--repeats", "1", "--aggregators", "2", "--servers", "2"]);
    assert!(files.iter().any(|f| f == "out.png"), "{files:?}");
    // (two-phase, independent) x 3 strategies x 2 blocks + server, x 2 ops.
    assert_eq!(rows.len(), (2 * 3 * 2 + 1) * 2, "{rows:?}");
    for imp in ["weft-two-phase", "weft-independent", "weft-server"] {
        for op in ["write", "read"] {
            assert!(rows.iter().any(|r| r["impl"] == imp && r["op"] == op), "{imp} {op} missing");
        }
    }
    for r in &rows {
        assert_eq!(r["workload"], "btio");
        assert_eq!(r["procs"], 4);
        assert!(r["strategy"].is_string() && r["block_bytes"].is_u64(), "{r}");
        assert!(r["mb_s"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// `weft bench ionode --patterns all`: every HPF distribution of paper
/// 001's figure 1 (NONE, BLOCK, CYCLIC in one and two dimensions, a NONE
/// giving ranks no data), with 8-byte and 8 KiB records, moves all of its
/// bytes (each worker checks) and gets a row under its HPF name.
#[test]
fn the_io_node_experiment_runs_every_hpf_pattern() {
    let (rows, _) = bench_rows("ionode-all", &["ionode", "--patterns", "all", "--modes", "server", "--ops", "read", "--seconds", "0.2", "--repeats", "1", "--easy-matrix", "16", "--hard-matrix", "16", "--servers", "2"]);
    let names = ["NONE", "BLOCK", "CYCLIC", "NONE/BLOCK", "NONE/CYCLIC", "BLOCK/NONE", "BLOCK/BLOCK", "BLOCK/CYCLIC", "CYCLIC/NONE", "CYCLIC/BLOCK", "CYCLIC/CYCLIC"];
    assert_eq!(rows.len(), names.len() * 2 * 2, "11 patterns x 2 record sizes x 2 barriers: {rows:?}");
    for name in names {
        for record in [8, 8192] {
            assert!(rows.iter().any(|r| r["pattern"] == name && r["record_bytes"] == record), "{name} {record} missing");
        }
    }
    assert!(rows.iter().all(|r| r["mb_s"].as_f64().unwrap() > 0.0 && r["op"] == "read"));
}

/// `weft bench ionode` (issue 13): the probes run beside the data servers
/// (pinned to the same CPUs) while clients write and read paper 001's
/// cases, in every mode (list I/O; the traditional caching servers with a
/// request per piece; server-directed collective calls), each worker
/// checking it moved every byte, and the
/// data servers' CPU per MB is counted: every figure is there and positive.
#[test]
fn the_io_node_experiment_runs_every_mode_and_both_ops() {
    let (rows, files) = bench_rows("ionode", &["ionode", "--seconds", "0.3", "--repeats", "1", "--easy-matrix", "64", "--hard-matrix", "32", "--servers", "2"]);
    // Paper 001's figures: throughput against CPU available.
    assert!(files.iter().any(|f| f == "out.png") && files.iter().any(|f| f == "out.svg"), "{files:?}");
    // 3 modes x 2 barriers x (easy, hard) x (write, read).
    assert_eq!(rows.len(), 24, "{rows:?}");
    for mode in ["listio", "caching", "server"] {
        for case in ["easy-write", "easy-read", "hard-write", "hard-read"] {
            assert!(rows.iter().any(|r| r["mode"] == mode && r["pattern"] == case), "{mode} {case} missing");
        }
    }
    for r in &rows {
        for k in ["cpu_available_pct", "mb_s", "idle_units_s", "io_units_s", "server_cpu_s_per_mb"] {
            let x = r[k].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{k} in {r}");
        }
    }
}

/// `weft bench md --meta-shards` (issue 23): one temporary cluster per
/// shard count, both shapes, every phase (a listing that finds fewer
/// entries than were made fails the run); a row per K, shape, process
/// count and phase, and the plot.
#[test]
fn metadata_rates_run_on_each_shard_count_and_shape() {
    let (rows, files) = bench_rows("md", &["md", "--meta-shards", "1,2", "--shape", "easy,hard", "--procs", "1,2", "--files", "20", "--repeats", "1", "--servers", "1"]);
    let mut keys: Vec<(u64, String, u64, String)> = rows.iter().map(|r| (r["meta_shards"].as_u64().unwrap(), r["shape"].as_str().unwrap().to_owned(), r["procs"].as_u64().unwrap(), r["op"].as_str().unwrap().to_owned())).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 2 * 2 * 2 * 4, "{keys:?}");
    assert!(rows.iter().all(|r| r["weft_ops_s"].as_f64().is_some_and(|x| x.is_finite() && x > 0.0)), "{rows:?}");
    assert!(files.iter().any(|f| f == "out.png"), "{files:?}");
}

/// `weft bench net` (issue 24): each transport beside raw TCP, in the
/// issue's row format; the shm rows exist only if the endpoint really
/// connected over shared memory (the bench fails otherwise).
#[test]
fn net_measures_each_transport_beside_raw_tcp() {
    let (rows, _) = bench_rows("net", &["net", "--pings", "200", "--stream", "8m", "--message", "1m", "--rounds", "1", "--transport", "tcp,shm"]);
    let key = |r: &serde_json::Value| (r["transport"].as_str().unwrap().to_string(), r["op"].as_str().unwrap().to_string());
    let keys: Vec<(String, String)> = rows.iter().map(key).collect();
    for t in ["raw-tcp", "tcp", "shm"] {
        for op in ["rtt", "stream"] {
            assert!(keys.contains(&(t.into(), op.into())), "no {t} {op} row: {keys:?}");
        }
    }
    for r in &rows {
        let v = r["rtt_us"].as_f64().or(r["mb_s"].as_f64()).unwrap();
        assert!(v.is_finite() && v > 0.0 && r["ratio"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// `weft bench mpiio-cost --overlap` (issue 27): nonblocking transfers of
/// Weft's MPI-IO behind a computation, under a real `mpiexec`; the read
/// pass checks every byte it gets (a wrong byte fails the bench).
#[test]
fn nonblocking_overlap_runs_under_mpi_and_its_reads_check_out() {
    // The bench runs the MPI-IO library built beside the binary.
    weft_testkit::mpi::library(&weft_testkit::mpi::OPENMPI);
    let (rows, _) = bench_rows("overlap", &["mpiio-cost", "--overlap", "--procs", "1", "--size", "4m", "--transfer", "256k", "--repeats", "1", "--servers", "2"]);
    let ops: Vec<&str> = rows.iter().map(|r| r["op"].as_str().unwrap()).collect();
    assert_eq!(ops, ["write", "read"]);
    for r in &rows {
        for k in ["io_s", "compute_s", "both_s", "ratio", "cpu_floor"] {
            let x = r[k].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{r}");
        }
    }
}

/// `weft bench ior` (issue 27): IOR's shapes under both MPIs, Weft's
/// MPI-IO beside the MPI's own, forced collective algorithms too; every
/// read checks its bytes against the pattern written (a wrong byte aborts
/// the MPI job and fails the bench), and each row names what it compares.
#[test]
fn ior_shapes_run_under_both_mpis_and_their_reads_check_out() {
    weft_testkit::mpi::library(&weft_testkit::mpi::OPENMPI);
    weft_testkit::mpi::library(&weft_testkit::mpi::MPICH);
    let (rows, files) = bench_rows("ior", &["ior", "--mpi", "openmpi,mpich", "--procs", "2", "--block", "1m", "--shapes", "fpp-1m,hard-coll", "--forced", "--repeats", "1", "--servers", "2"]);
    let keys: Vec<String> = rows.iter().map(|r| format!("{} {} {}", r["mpi"].as_str().unwrap(), r["shape"].as_str().unwrap(), r["op"].as_str().unwrap())).collect();
    let mut want = Vec::new();
    for mpi in ["openmpi", "mpich"] {
        for shape in ["fpp-1m", "hard-coll"] {
            for op in ["write", "read-warm", "read-cold"] {
                want.push(format!("{mpi} {shape} {op}"));
            }
        }
    }
    assert_eq!(keys, want);
    for r in &rows {
        for k in ["weft_mb_s", "romio_mb_s", "ratio"] {
            let x = r[k].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{r}");
        }
        // OMPIO is Open MPI's only; the forced algorithms run on collective shapes.
        assert_eq!(r["ompio_mb_s"].is_null(), r["mpi"] == "mpich", "{r}");
        assert_eq!(r["weft_server_mb_s"].is_null(), r["shape"] == "fpp-1m", "{r}");
        assert_eq!(r["weft_two_phase_mb_s"].is_null(), r["shape"] == "fpp-1m", "{r}");
    }
    assert!(files.iter().any(|f| f == "out.png"), "{files:?}");
}
