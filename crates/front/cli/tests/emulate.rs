//! The emulated cluster (issue 13): servers in network namespaces of their
//! own behind rate-capped links, reached through a bridge; everything it
//! creates is gone when the cluster stops, and a dead run's leftovers are
//! removed by the next one. Needs root and iproute2 (CI has both).

mod common;

use common::TestCluster;
use std::process::Command;
use std::time::Instant;
use weft_client::CreateOptions;
use weft_launch::{ClusterSpec, EmulateSpec};

fn ours(prefix: &str) -> Vec<String> {
    // Names of one emulation: `weft-<pid>s<seq>-n<k>`.
    weft_launch::emulate::namespaces().into_iter().filter(|n| n.starts_with(prefix)).collect()
}

fn link_exists(name: &str) -> bool {
    Command::new("ip").args(["link", "show", name]).output().is_ok_and(|o| o.status.success())
}

#[test]
fn an_emulated_cluster_caps_its_links_and_leaves_nothing_behind() {
    // Leftovers of a run that died (an owner pid that cannot exist).
    let dead = "weft-4194305s0-n0";
    assert!(Command::new("ip").args(["netns", "add", dead]).status().unwrap().success());
    // 80 Mbit/s: 10 MB/s per node, both ways.
    let spec = ClusterSpec { data_servers: 1, emulate: Some(EmulateSpec { link_bps: Some(80_000_000), disk_bps: None, client_nodes: 0 }), ..ClusterSpec::default() };
    let tc = TestCluster::start_spec("emulate", spec);
    assert!(!weft_launch::emulate::namespaces().contains(&dead.to_string()), "a dead run's namespace was left");
    // Other tests of this process may run emulations of their own at the
    // same time: count only this cluster's (its tag).
    let tag = tc.lc.emulation().expect("an emulated cluster").tag();
    let prefix = format!("weft-{tag}-");
    assert_eq!(ours(&prefix).len(), 2, "one namespace per server: {:?}", ours(&prefix));
    for s in &tc.cluster().servers {
        assert!(s.addr.to_string().starts_with("198.18.0."), "server {} at {}", s.id, s.addr);
    }
    let c = tc.client();
    let f = c.create("/x", CreateOptions::default()).unwrap();
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    let t = Instant::now();
    f.write_at(0, &data).unwrap();
    let mb_s = data.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
    // Loopback moves GB/s; a capped link about 10 MB/s (3x margin).
    assert!(mb_s < 30.0, "4 MiB crossed the 80 Mbit/s link at {mb_s:.0} MB/s: not capped");
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data);
    drop(c);
    drop(tc);
    assert!(ours(&prefix).is_empty(), "namespaces left: {:?}", ours(&prefix));
    assert!(!link_exists(&format!("wb{tag}")), "the bridge was left");
}

/// A node's disk cap: fsync'd writes of a server in the emulated cluster
/// go no faster than the cap (the virtual disk takes GB/s), and its
/// cgroup goes with the cluster.
#[test]
fn an_emulated_disk_caps_fsynced_writes() {
    let spec = ClusterSpec { data_servers: 1, emulate: Some(EmulateSpec { link_bps: None, disk_bps: Some(10 << 20), client_nodes: 0 }), ..ClusterSpec::default() };
    let tc = TestCluster::start_spec("emulate-disk", spec);
    let c = tc.client();
    let f = c.create("/d", CreateOptions::default()).unwrap();
    let data = vec![5u8; 8 << 20];
    let t = Instant::now();
    f.write_at(0, &data).unwrap();
    f.fsync().unwrap();
    let mb_s = data.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
    assert!(mb_s < 31.0, "8 MiB written and fsync'd at {mb_s:.0} MB/s under a 10 MiB/s disk cap");
    let prefix = format!("weft-{}-", tc.lc.emulation().expect("an emulated cluster").tag());
    let cgroups = || std::fs::read_dir("/sys/fs/cgroup/blkio").unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).count();
    assert!(cgroups() >= 2, "a disk cgroup per server");
    drop(c);
    drop(tc);
    assert_eq!(cgroups(), 0, "disk cgroups left behind");
}

/// Client nodes: a client process run on one (`ip netns exec`) reaches the
/// servers through its own capped link, so a file striped over two servers
/// (each behind 10 MB/s) reaches it at no more than its node's 10 MB/s,
/// as on a cluster's compute node; the node goes with the cluster.
#[test]
fn a_client_node_has_its_own_capped_link() {
    let spec = ClusterSpec { data_servers: 2, emulate: Some(EmulateSpec { link_bps: Some(80_000_000), disk_bps: None, client_nodes: 1 }), ..ClusterSpec::default() };
    let tc = TestCluster::start_spec("emulate-client", spec);
    assert_eq!(tc.lc.client_nodes(), 1);
    let node = tc.lc.client_node(0);
    assert_eq!(node[..3], ["ip", "netns", "exec"]);
    let ns = node[3].clone();
    let qdisc = Command::new("ip").args(["netns", "exec", &ns, "tc", "qdisc", "show", "dev", "eth0"]).output().unwrap();
    assert!(String::from_utf8_lossy(&qdisc.stdout).contains("tbf"), "the client node's link is not capped");
    let src = tc.scratch("client-src");
    std::fs::write(&src, vec![7u8; 8 << 20]).unwrap();
    let t = Instant::now();
    let out = Command::new(&node[0])
        .args(&node[1..])
        .arg(common::WEFT)
        .args(["cp", "--stripe-count", "2"])
        .arg(&src)
        .arg("weft:/from-node")
        .env("WEFT_CLUSTER", tc.lc.cluster_file())
        .output()
        .unwrap();
    let mb_s = (8 << 20) as f64 / t.elapsed().as_secs_f64() / 1e6;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(mb_s < 15.0, "8 MiB left the 10 MB/s client node at {mb_s:.1} MB/s: its link is not the bound");
    assert_eq!(tc.client().stat("/from-node").unwrap().1, 8 << 20);
    drop(tc);
    assert!(!weft_launch::emulate::namespaces().contains(&ns), "the client node was left");
}
