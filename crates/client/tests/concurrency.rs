//! Eight client processes at once, each writing its own disjoint region of
//! one shared file and a whole file of its own; every byte checked after.
//! And eight threads of one client at once, over one connection per server.

use weft_testkit::{pattern, TestCluster};
use weft_client::{Client, CreateOptions};

const PROCS: usize = 8;
/// Region per process: deliberately not a multiple of the stripe size.
const REGION: usize = (3 << 20) + 4099;
/// Write calls of an odd size, so they straddle stripes and regions' edges.
const TRANSFER: usize = 100_003;
const STRIPE: u64 = 65536;

/// The body of one child process (run only when spawned by the parent).
#[test]
#[ignore = "run as a child process by eight_processes_write_disjoint_regions_and_own_files"]
fn child_writer() {
    let Ok(rank) = std::env::var("WEFT_TEST_RANK") else { return };
    let rank: usize = rank.parse().unwrap();
    let c = Client::connect(std::path::Path::new(&std::env::var("WEFT_CLUSTER").unwrap())).unwrap();
    let shared = c.open("/shared", true).unwrap();
    let own = c.create(&format!("/own{rank}"), CreateOptions { stripe_size: STRIPE, ..CreateOptions::default() }).unwrap();
    let region = pattern(rank as u64, REGION);
    let mine = pattern(1000 + rank as u64, REGION);
    let base = (rank * REGION) as u64;
    // Interleave the two files' writes so both are in flight across processes.
    for start in (0..REGION).step_by(TRANSFER) {
        let end = (start + TRANSFER).min(REGION);
        shared.write_at(base + start as u64, &region[start..end]).unwrap();
        own.write_at(start as u64, &mine[start..end]).unwrap();
    }
}

#[test]
fn eight_processes_write_disjoint_regions_and_own_files() {
    let tc = TestCluster::start("conc", 4);
    let c = tc.client();
    c.create("/shared", CreateOptions { stripe_size: STRIPE, ..CreateOptions::default() }).unwrap();
    weft_testkit::run_children("child_writer", PROCS as u64, &tc.lc.cluster_file(), &[]);
    let shared = c.open("/shared", false).unwrap();
    assert_eq!(shared.size().unwrap(), (PROCS * REGION) as u64);
    let mut all = vec![0u8; PROCS * REGION];
    assert_eq!(shared.read_at(0, &mut all).unwrap(), all.len());
    for rank in 0..PROCS {
        assert!(all[rank * REGION..(rank + 1) * REGION] == pattern(rank as u64, REGION)[..], "region of rank {rank} differs");
        let own = c.open(&format!("/own{rank}"), false).unwrap();
        let mut buf = vec![0u8; REGION + 1];
        assert_eq!(own.read_at(0, &mut buf).unwrap(), REGION);
        assert!(buf[..REGION] == pattern(1000 + rank as u64, REGION)[..], "own file of rank {rank} differs");
    }
}

/// Threads of one client share its connections: files, namespace calls
/// and the atomic-mode lock session (issue 8: it used to open two more
/// connections to the lock server, so ~340 atomic clients filled it).
#[test]
fn threads_of_one_client_share_one_connection_per_server() {
    const THREADS: usize = 8;
    const LEN: usize = (1 << 20) + 777;
    let tc = TestCluster::start("threads", 4);
    let c = tc.client();
    let opts = CreateOptions { stripe_size: STRIPE, ..CreateOptions::default() };
    c.create("/atomic", opts).unwrap().write_at(0, &vec![0u8; THREADS * 4096]).unwrap();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let c = &c;
            scope.spawn(move || {
                let own = c.create(&format!("/t{t}"), opts).unwrap();
                let mut shared = c.open("/atomic", true).unwrap();
                shared.set_atomicity(true).unwrap();
                let data = pattern(t as u64, LEN);
                for (k, start) in (0..LEN).step_by(TRANSFER).enumerate() {
                    let end = (start + TRANSFER).min(LEN);
                    own.write_at(start as u64, &data[start..end]).unwrap();
                    shared.write_at((t * 4096 + k % 4096) as u64, &[t as u8 + 1]).unwrap();
                    c.stat(&format!("/t{t}")).unwrap();
                }
                let mut back = vec![0u8; LEN];
                assert_eq!(own.read_at(0, &mut back).unwrap(), LEN);
                assert!(back == data, "thread {t}: its file holds other bytes");
            });
        }
    });
    let mut back = vec![0u8; THREADS * 4096];
    c.open("/atomic", false).unwrap().read_at(0, &mut back).unwrap();
    let writes = LEN.div_ceil(TRANSFER);
    for t in 0..THREADS {
        assert!(back[t * 4096..t * 4096 + writes].iter().all(|&b| b == t as u8 + 1), "thread {t}'s atomic writes");
    }
    // Each server counts the connections it holds: this client's only.
    for s in c.status() {
        let st = s.stats.unwrap();
        assert_eq!(st.connections, 1, "server {} ({:?}) holds {} connections from one client", s.server.id, s.server.services, st.connections);
    }
    assert_eq!(c.connections(), 5);
}
