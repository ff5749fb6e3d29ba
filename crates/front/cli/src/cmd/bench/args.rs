//! The arguments of `weft bench ...`: one subcommand per experiment.

use crate::cmd::parse_size;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub(super) which: Which,
}

#[derive(Args)]
pub(super) struct Common {
    /// Print one JSON object ({"rows": [...]}) instead of a table.
    #[arg(long)]
    pub(super) json: bool,
    /// Where to write the CSV of the results.
    #[arg(long)]
    pub(super) csv: Option<PathBuf>,
    /// Directory for a temporary cluster (default: the system temp dir).
    #[arg(long)]
    pub(super) dir: Option<PathBuf>,
    /// Run the temporary cluster emulated: each server in its own network
    /// namespace behind a capped link (root; see `weft up --emulate`).
    #[arg(long)]
    pub(super) emulate: bool,
    /// With --emulate: each server's link rate, both directions (e.g. 1gbit).
    #[arg(long, value_parser = weft_launch::emulate::parse_link_arg, requires = "emulate")]
    pub(super) link: Option<u64>,
    /// With --emulate: each server's disk rate in bytes per second (e.g. 100m).
    #[arg(long, value_parser = parse_size, requires = "emulate")]
    pub(super) disk: Option<u64>,
    /// With --emulate: client nodes, each a namespace behind a link like
    /// the servers'; the benchmark's worker processes run on them in turn
    /// (0: workers run in this namespace, their side of the link uncapped).
    #[arg(long, default_value_t = 4, requires = "emulate")]
    pub(super) client_nodes: usize,
}


impl Common {
    /// The benchmark's cluster: the given one, or a temporary one (emulated
    /// with --emulate).
    pub(super) fn cluster(&self, exe: &std::path::Path, given: Option<&std::path::Path>, servers: usize) -> anyhow::Result<weft_bench::BenchCluster> {
        self.cluster_with_env(exe, given, servers, Vec::new())
    }

    /// [`Common::cluster`], the servers of a temporary one with `env` set.
    pub(super) fn cluster_with_env(&self, exe: &std::path::Path, given: Option<&std::path::Path>, servers: usize, env: Vec<(String, String)>) -> anyhow::Result<weft_bench::BenchCluster> {
        let emulate = self.emulate.then_some(weft_launch::EmulateSpec { link_bps: self.link, disk_bps: self.disk, client_nodes: self.client_nodes });
        weft_bench::BenchCluster::get_emulated(exe, given, servers, self.dir.as_deref(), emulate, env)
    }

    /// [`Common::cluster`] with `meta_shards` metadata shards and metadata
    /// durable within `meta_sync_window_ms` (temporary).
    pub(super) fn cluster_sharded(&self, exe: &std::path::Path, given: Option<&std::path::Path>, servers: usize, meta_shards: usize, meta_sync_window_ms: u64) -> anyhow::Result<weft_bench::BenchCluster> {
        let emulate = self.emulate.then_some(weft_launch::EmulateSpec { link_bps: self.link, disk_bps: self.disk, client_nodes: self.client_nodes });
        let spec = weft_launch::ClusterSpec { data_servers: servers, emulate, meta_shards, meta_sync_window_ms, ..weft_launch::ClusterSpec::default() };
        weft_bench::BenchCluster::get_spec(exe, given, self.dir.as_deref(), spec)
    }
}

#[derive(Subcommand)]
pub(super) enum Which {
    /// Paper 002: P processes each write their own file; Weft vs the local file system.
    ConcurrentWrite {
        #[command(flatten)]
        common: Common,
        /// Process counts to sweep.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
        procs: Vec<usize>,
        /// Bytes each process writes.
        #[arg(long, default_value = "64m", value_parser = parse_size)]
        size: u64,
        /// Bytes per write call.
        #[arg(long, default_value = "1m", value_parser = parse_size)]
        transfer: u64,
        /// Which variants: `nofsync`, `fsync` or both.
        #[arg(long, value_delimiter = ',', default_value = "nofsync,fsync")]
        variants: Vec<String>,
        /// Runs per point (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
        /// Run paper 002 as written: an MPI program through MPI-IO (Weft's
        /// library on weft: files vs the MPI's own MPI-IO on local files).
        #[arg(long, value_parser = ["openmpi", "mpich"])]
        mpi: Option<String>,
    },
    /// The MPI-IO front end's cost: the same write_at/read_at pattern through MPI-IO and through the Rust API.
    MpiioCost {
        #[command(flatten)]
        common: Common,
        #[arg(long, value_parser = ["openmpi", "mpich"], default_value = "openmpi")]
        mpi: String,
        /// Process counts to sweep.
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        procs: Vec<usize>,
        /// Bytes each process writes and reads.
        #[arg(long, default_value = "64m", value_parser = parse_size)]
        size: u64,
        /// Bytes per write_at / read_at call.
        #[arg(long, default_value = "1m", value_parser = parse_size)]
        transfer: u64,
        #[arg(long, default_value_t = 5)]
        repeats: usize,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
        /// Instead: nonblocking transfers behind a computation as long as
        /// the I/O alone (time over the longer of the two; 1.0 is full overlap).
        #[arg(long)]
        overlap: bool,
    },
    /// Paper 000 figures 4-5: BTIO nested-strided collective write and read, two-phase vs independent, per heuristic and b.
    Btio {
        #[command(flatten)]
        common: Common,
        /// q^2 processes (ranks are threads, each with its own connections).
        #[arg(long, default_value_t = 3)]
        q: u64,
        /// Points per cell in the two scaled dimensions (pieces stay 3240 bytes).
        #[arg(long, default_value_t = 24)]
        cells: u64,
        #[arg(long, value_delimiter = ',', default_value = "first,random,hash")]
        strategies: Vec<String>,
        /// Schedule blocks b.
        #[arg(long, value_delimiter = ',', default_value = "4k,64k,1m,8m", value_parser = parse_size)]
        blocks: Vec<u64>,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Aggregators of two-phase I/O.
        #[arg(long, default_value_t = 4)]
        aggregators: usize,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
    },
    /// Metadata rates (issue 12, mdtest-like): creates, stats, unlinks per second, Weft vs a local directory.
    Md {
        #[command(flatten)]
        common: Common,
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        procs: Vec<usize>,
        /// Threads per process, sharing the process's one client (as a FUSE
        /// mount's request threads do); each list entry is a run.
        #[arg(long, value_delimiter = ',', default_value = "1")]
        threads: Vec<usize>,
        /// Also through a FUSE mount of the cluster (root): the same workers as plain POSIX programs.
        #[arg(long)]
        mount: bool,
        /// Files per process.
        #[arg(long, default_value_t = 1000)]
        files: u64,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
        /// Metadata shards of the temporary clusters, one cluster per
        /// entry (with --cluster: that cluster's own).
        #[arg(long, value_delimiter = ',', default_value = "1")]
        meta_shards: Vec<usize>,
        /// mdtest's shapes: `easy` (a directory per process), `hard` (one
        /// directory for all).
        #[arg(long, value_delimiter = ',', default_value = "easy")]
        shape: Vec<String>,
        /// Temporary clusters' metadata durability: `window` (within 10 ms,
        /// the default) or `op` (each change fsync'd before its answer).
        #[arg(long, default_value = "window")]
        meta_sync: String,
    },
    /// Streaming through the FUSE mount (issue 12): fio sequential writes (fsync'd at the end) and cold reads, 1 MiB blocks unless --bs, mount vs local, same run. Needs root and fio.
    Fuse {
        #[command(flatten)]
        common: Common,
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        jobs: Vec<usize>,
        /// Bytes per run, split among the jobs.
        #[arg(long, default_value = "512m", value_parser = parse_size)]
        size: u64,
        /// Bytes per write(2) and read(2): 512 to 16m, a multiple of 512 (1k for small writes).
        #[arg(long, default_value = "1m", value_parser = parse_size)]
        bs: u64,
        /// Also through a second mount with `--writeback-cache`, in turn with the others.
        #[arg(long = "writeback-cache")]
        writeback_cache: bool,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
    },
    /// Start and stop of a batch job's servers (issue 22): `weft job start` to every server answering, and `weft job stop`, at growing server counts (processes here, or --netns: each in a network namespace of its own, root).
    Job {
        #[command(flatten)]
        common: Common,
        #[arg(long, value_delimiter = ',', default_value = "4,8,16,64")]
        servers: Vec<usize>,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Each server in a network namespace of its own (root; at most 200).
        #[arg(long)]
        netns: bool,
        /// Start through Open MPI's mpiexec (its remote agent enters the nodes) instead of the ssh stand-in.
        #[arg(long)]
        mpiexec: bool,
    },
    /// Everyday work through the FUSE mount (issue 21): tar xf, git clone (file://), cold small-file reads, rm -rf of a source-like tree, each as a ratio to a local directory in the same run, with a plot. Needs root, tar and git.
    Everyday {
        #[command(flatten)]
        common: Common,
        /// Files in the generated tree (100 B to 64 KiB each).
        #[arg(long, default_value_t = 1500)]
        files: usize,
        /// A directory to use as the tree instead (copied once).
        #[arg(long)]
        tree: Option<std::path::PathBuf>,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
    },
    /// IO500-like shapes on the FUSE mount (issue 12): ior-easy, ior-hard, mdtest-easy, mdtest-hard, beside a local directory, scored as IO500 scores. Needs root.
    Io500 {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value_t = 4)]
        procs: usize,
        /// ior-easy bytes per process (1 MiB transfers).
        #[arg(long, default_value = "64m", value_parser = parse_size)]
        easy_size: u64,
        /// ior-hard 47,008-byte segments per process.
        #[arg(long, default_value_t = 1000)]
        hard_segments: u64,
        /// mdtest files per process (easy and hard each).
        #[arg(long, default_value_t = 1000)]
        files: u64,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
    },
    /// Paper 001's I/O-node experiment (issue 13): the share of the I/O nodes' CPU left to a compute probe while they serve its easy and hard patterns, by list I/O and by a traditional caching file system; data servers pinned to half the CPUs.
    Ionode {
        #[command(flatten)]
        common: Common,
        /// Length of each probe run.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Easy pattern (1-D CYCLIC, hpf1d-8k): that many 8 KiB records.
        #[arg(long, default_value_t = 2048)]
        easy_matrix: u64,
        /// Hard pattern (2-D BLOCK-CYCLIC, hpf2d-8): edge^2 8-byte records.
        #[arg(long, default_value_t = 256)]
        hard_matrix: u64,
        /// How the I/O nodes serve: listio (Weft), caching (paper 001's
        /// traditional caching file system), server (server-directed
        /// collective calls: paper 001's disk-directed I/O); each mode gets
        /// its own cluster.
        #[arg(long, value_delimiter = ',', default_value = "listio,caching,server", value_parser = ["listio", "caching", "server"])]
        modes: Vec<String>,
        #[arg(long, value_delimiter = ',', default_value = "write,read", value_parser = ["write", "read"])]
        ops: Vec<String>,
        /// `representative`: paper 001's four cases (tables 2 and 3);
        /// `all`: every HPF distribution (NONE, BLOCK, CYCLIC in one and two
        /// dimensions) with 8-byte and 8 KiB records (figures 2 and 3).
        #[arg(long, default_value = "representative", value_parser = ["representative", "all"])]
        patterns: String,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Data servers of each temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
    },
    /// (internal) the clients of `bench ionode`'s server-directed mode.
    IonodeColl {
        #[arg(long)]
        pattern: String,
        #[arg(long)]
        matrix: u64,
        #[arg(long)]
        op: String,
        #[arg(long)]
        path: String,
    },
    /// (internal) one compute probe of `bench ionode`.
    IonodeProbe {
        #[arg(long)]
        cpu: usize,
        #[arg(long)]
        seconds: f64,
        #[arg(long)]
        units_per_sync: u64,
        #[arg(long)]
        barrier: Option<std::path::PathBuf>,
    },
    /// (internal) one process of `bench io500`.
    Io500Worker {
        #[arg(long)]
        dir: std::path::PathBuf,
        #[arg(long)]
        phase: String,
        #[arg(long)]
        rank: usize,
        #[arg(long)]
        procs: usize,
        #[arg(long)]
        easy_bytes: u64,
        #[arg(long)]
        hard_segments: u64,
        #[arg(long)]
        files: u64,
    },
    /// (internal) one process of `bench md`.
    MdWorker {
        #[arg(long)]
        target: String,
        #[arg(long)]
        dir: String,
        #[arg(long)]
        files: u64,
        #[arg(long)]
        phase: String,
        /// Names are DIR/PREFIXf0, DIR/PREFIXf1, ...
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// Collective I/O (issue 10, ROMIO's coll_perf): a 3-D block darray through Weft's MPI-IO and the MPI's own, same run.
    Coll {
        #[command(flatten)]
        common: Common,
        #[arg(long, value_parser = ["openmpi", "mpich"], default_value = "openmpi")]
        mpi: String,
        /// MPI ranks (MPICH: at most the number of cores).
        #[arg(long, default_value_t = 8)]
        procs: usize,
        /// Array edges N: N^3 4-byte ints.
        #[arg(long, value_delimiter = ',', default_value = "128,256")]
        sizes: Vec<usize>,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
    },
    /// IOR's shapes through MPI-IO (issue 27): file per process, shared, strided and ior-hard (47,008 bytes), independent and collective, written (fsync'd) and read warm and cold; Weft's MPI-IO beside OMPIO and ROMIO on a local directory, same run, each MPI.
    Ior {
        #[command(flatten)]
        common: Common,
        /// MPIs to run under (MPICH with at most as many ranks as cores).
        #[arg(long, value_delimiter = ',', value_parser = ["openmpi", "mpich"], default_value = "openmpi,mpich")]
        mpi: Vec<String>,
        /// MPI ranks.
        #[arg(long, default_value_t = 4)]
        procs: usize,
        /// Bytes each rank writes and reads (whole transfers).
        #[arg(long, default_value = "16m", value_parser = parse_size)]
        block: u64,
        /// Shapes: fpp-1m, shared-1m, strided-1m, strided-1m-coll, hard, hard-coll, or all.
        #[arg(long, default_value = "all")]
        shapes: String,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Collective shapes also with weft_coll=server and two_phase forced.
        #[arg(long)]
        forced: bool,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
    },
    /// One server holding N connections, most idle, a few busy: rate, memory per connection, connect time.
    Conns {
        #[command(flatten)]
        common: Common,
        /// Connection counts to sweep (each on a fresh server; the first is measured again last).
        #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000")]
        counts: Vec<usize>,
        /// Clients sending round trips back to back.
        #[arg(long, default_value_t = 4)]
        busy: usize,
        /// Timed rounds per count (the median is reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds per timed round.
        #[arg(long = "round-seconds", default_value_t = 1.0)]
        round_seconds: f64,
    },
    /// Paper 003: message-layer round trip and streaming vs raw TCP.
    Net {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value_t = 20000)]
        pings: usize,
        /// Bytes streamed per round.
        #[arg(long, default_value = "512m", value_parser = parse_size)]
        stream: u64,
        /// Bytes per streamed message.
        #[arg(long, default_value = "1m", value_parser = parse_size)]
        message: u64,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Weft transports to measure, each beside raw TCP: tcp, shm.
        #[arg(long, value_delimiter = ',', default_value = "tcp,shm")]
        transport: Vec<String>,
        /// Also measure each transport with this many rails per server (a
        /// message of 512 KiB or more split over them; 1: not).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=8))]
        rails: u8,
        /// Count instructions per request instead, client and server side,
        /// each under callgrind (needs valgrind).
        #[arg(long)]
        icount: bool,
        /// With --icount: the extra pings whose cost is counted.
        #[arg(long, default_value_t = 2000, requires = "icount")]
        icount_small: usize,
        /// With --icount: the extra 1 MiB writes whose cost is counted.
        #[arg(long, default_value_t = 16, requires = "icount")]
        icount_bulk: usize,
    },
    /// Papers 000/001: non-contiguous patterns through views; list I/O vs one request per piece vs local pwrite/pread.
    Noncontig {
        #[command(flatten)]
        common: Common,
        /// Patterns: hpf2d-8 (2-D BLOCK-CYCLIC, 8-byte records), hpf1d-8k, btio.
        #[arg(long, value_delimiter = ',', default_value = "hpf2d-8,btio")]
        patterns: Vec<String>,
        /// Rows = columns of the 2-D matrix (records for hpf1d-8k).
        #[arg(long, default_value_t = 512)]
        matrix: u64,
        /// BTIO cell size in its two scaled dimensions (pieces stay 3240 bytes).
        #[arg(long = "btio-cells", default_value_t = 24)]
        btio_cells: u64,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Stripe size of the benchmark file (striping_unit).
        #[arg(long = "stripe-size", default_value = "64k", value_parser = parse_size)]
        stripe_size: u64,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 4)]
        servers: usize,
    },
    /// Paper 000: scheduling strategies x schedule block b, P clients writing then reading disjoint regions.
    Sched {
        #[command(flatten)]
        common: Common,
        /// Client processes.
        #[arg(long, default_value_t = 8)]
        procs: u32,
        /// Bytes each client writes and reads.
        #[arg(long, default_value = "32m", value_parser = parse_size)]
        size: u64,
        /// Schedule block sizes b to sweep.
        #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "4k,8k,16k,32k,64k,128k,256k,512k,1m,2m,4m,8m")]
        blocks: Vec<u64>,
        /// Strategies to sweep.
        #[arg(long, value_delimiter = ',', default_value = "first,random,hash,colour")]
        strategies: Vec<weft_sched::Strategy>,
        /// Requests in flight per client (weft_sched_window).
        #[arg(long)]
        window: Option<usize>,
        /// Stripe size of the file (striping_unit).
        #[arg(long = "stripe-size", default_value = "64k", value_parser = parse_size)]
        stripe_size: u64,
        #[arg(long, default_value_t = 1)]
        repeats: usize,
        /// Data servers of a temporary cluster.
        #[arg(long, default_value_t = 8)]
        servers: usize,
    },
    /// Paper 004: atomic mode with none / whole-file / byte-range / list locking on 3-D block, FLASH and tile workloads.
    Atomic {
        #[command(flatten)]
        common: Common,
        /// Workloads: block3d, flash, tile.
        #[arg(long, value_delimiter = ',', default_value = "block3d,flash,tile")]
        workloads: Vec<String>,
        /// Process counts of the 3-D block test (cubes; 64 if the machine copes).
        #[arg(long = "block3d-procs", value_delimiter = ',', default_value = "8,27")]
        block3d_procs: Vec<u64>,
        /// Edge of the 3-D array of 4-byte ints.
        #[arg(long = "block3d-n", default_value_t = 100)]
        block3d_n: u64,
        #[arg(long = "flash-procs", value_delimiter = ',', default_value = "8,27")]
        flash_procs: Vec<u64>,
        /// FLASH blocks per process (the paper: 80).
        #[arg(long = "flash-blocks", default_value_t = 80)]
        flash_blocks: u64,
        /// Frames the tile reader reads (the paper: 100).
        #[arg(long, default_value_t = 10)]
        frames: u64,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        #[arg(long, default_value_t = 4)]
        servers: usize,
    },
    /// Lock service throughput (acquire+release pairs/s) and latency, 1- and 64-range requests.
    Lock {
        #[command(flatten)]
        common: Common,
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
        clients: Vec<u64>,
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        ranges: Vec<u64>,
        /// Acquire+release pairs per client.
        #[arg(long, default_value_t = 2000)]
        ops: u64,
    },
    /// (internal) one atomic-mode worker.
    #[command(hide = true)]
    AtomicWorker {
        #[arg(long)]
        workload: String,
        #[arg(long)]
        procs: u64,
        #[arg(long)]
        rank: u64,
        #[arg(long)]
        mode: String,
        #[arg(long)]
        path: String,
        #[arg(long)]
        frames: u64,
        #[arg(long = "block3d-n")]
        block3d_n: u64,
        #[arg(long = "flash-blocks")]
        flash_blocks: u64,
    },
    /// (internal) one lock-benchmark client.
    #[command(hide = true)]
    LockWorker {
        #[arg(long)]
        path: String,
        #[arg(long)]
        rank: u64,
        #[arg(long)]
        ranges: u64,
        #[arg(long)]
        ops: u64,
    },
    /// (internal) one scheduling-benchmark client.
    #[command(hide = true)]
    SchedWorker {
        #[arg(long)]
        path: String,
        #[arg(long)]
        rank: u32,
        #[arg(long)]
        procs: u32,
        #[arg(long)]
        size: u64,
        #[arg(long)]
        strategy: weft_sched::Strategy,
        #[arg(long)]
        block: u64,
        #[arg(long)]
        window: usize,
        #[arg(long)]
        op: String,
    },
    /// (internal) one non-contiguous worker process.
    #[command(hide = true)]
    NoncontigWorker {
        #[arg(long)]
        pattern: String,
        #[arg(long)]
        matrix: u64,
        #[arg(long = "btio-cells")]
        btio_cells: u64,
        #[arg(long)]
        rank: u64,
        #[arg(long)]
        mode: String,
        #[arg(long)]
        op: String,
        #[arg(long)]
        path: String,
    },
    /// (internal) one concurrent-write worker process.
    #[command(hide = true)]
    CwWorker {
        #[arg(long)]
        target: String,
        #[arg(long)]
        path: String,
        #[arg(long)]
        size: u64,
        #[arg(long)]
        transfer: u64,
        #[arg(long)]
        fsync: bool,
        /// Read the (existing) file instead of writing it.
        #[arg(long)]
        read: bool,
    },
    /// (internal) the raw TCP peer of `bench net`.
    #[command(hide = true)]
    NetPeer,
    /// (internal) the counted client of `bench net --icount`.
    #[command(hide = true)]
    NetIcountClient {
        #[arg(long)]
        pings: usize,
        #[arg(long)]
        sinks: usize,
    },
}
