//! Eight client processes at once, each writing its own disjoint region of
//! one shared file and a whole file of its own; every byte checked after.

mod common;

use common::{pattern, TestCluster};
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
    common::run_children("child_writer", PROCS as u64, &tc.lc.cluster_file(), &[]);
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
