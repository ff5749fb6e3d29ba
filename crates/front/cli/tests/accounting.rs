//! What servers report of themselves in `weft status`: CPU time by kind of
//! request (issue 13) and disk space (what the FUSE mount's statfs shows).

mod common;

use common::TestCluster;
use weft_client::{Client, CreateOptions};

/// Servers account the CPU their requests take, by kind (issue 13): work
/// shows up where it was done, and only there.
#[test]
fn servers_count_cpu_by_kind_of_request() {
    let tc = TestCluster::start("cpu-accounting", 2);
    let client = tc.client();
    let cpu = |c: &Client| -> Vec<[u64; weft_wire::CPU_KINDS]> { c.status().into_iter().map(|s| s.stats.unwrap().cpu_ns).collect() };
    let before = cpu(&client);
    let f = client.create("/cpu", CreateOptions::default()).unwrap();
    let data = vec![7u8; 8 << 20];
    for _ in 0..4 {
        f.write_at(0, &data).unwrap();
    }
    let after = cpu(&client);
    let write = weft_wire::CpuKind::DataWrite as usize;
    let read = weft_wire::CpuKind::DataRead as usize;
    let grew = |k: usize| (0..after.len()).filter(|&s| after[s][k] > before[s][k]).count();
    assert!(grew(write) >= 2, "both data servers should have spent CPU on writes: {before:?} -> {after:?}");
    assert_eq!(grew(read), 0, "no reads were made: {before:?} -> {after:?}");
    let st = client.status().into_iter().find(|s| s.stats.as_ref().unwrap().services & 2 != 0).unwrap().stats.unwrap();
    assert!(st.disk_total > 0 && st.disk_free <= st.disk_total);
}
