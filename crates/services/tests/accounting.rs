//! What servers report of themselves in `weft status`: CPU time by kind of
//! request (issue 13) and disk space (what the FUSE mount's statfs shows).

use weft_testkit::TestCluster;
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

/// A process's CPU time (user + system, all its threads, living or not).
fn process_cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
    let f: Vec<u64> = stat.rsplit(')').next().unwrap().split_whitespace().skip(11).take(2).map(|v| v.parse().unwrap()).collect();
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    (f[0] + f[1]) * 1_000_000_000 / hz
}

/// The CPU a server reports by kind, plus its event loop's, is all of its
/// CPU time (issue 13: "CPU accounting sums to the process's total within
/// a few percent"): work done outside a request's handler (taking jobs,
/// answering, checking credentials) is counted too, so the figure a
/// benchmark reads per MB is the server's real cost.
#[test]
fn cpu_accounting_adds_up_to_the_servers_own_cpu_time() {
    let tc = TestCluster::start("cpu-sum", 2);
    // Reads the servers serve (a local read would cost the client, not them).
    let client = tc.client_through_servers();
    let f = client.create("/many", CreateOptions::default()).unwrap();
    // Many small requests from several threads: per-request costs dominate.
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let f = &f;
            s.spawn(move || {
                let mut buf = [t as u8; 64];
                for k in 0..4000u64 {
                    let at = (k * 4 + t) * 64;
                    f.write_at(at, &buf).unwrap();
                    f.read_at(at, &mut buf).unwrap();
                }
            });
        }
    });
    for (k, pid) in tc.lc.pids().into_iter().enumerate() {
        let st = client.status().into_iter().find(|s| s.server.id == k as u32).unwrap().stats.unwrap();
        let proc_ns = process_cpu_ns(pid);
        let counted: u64 = st.cpu_ns.iter().sum::<u64>() + st.cpu_loop_ns;
        // Enough work that the 5% below means something (each data server
        // takes 290-400 ms of CPU for this on the 2-core CI machine; 300 ms
        // was once missed by 10).
        if st.services & 2 != 0 {
            assert!(proc_ns > 150_000_000, "data server {k} should have worked: {proc_ns} ns");
        }
        eprintln!("server {k}: counted {counted} ns, process {proc_ns} ns");
        // Within 5%, plus the clock's 10 ms ticks and what the status call
        // and threads outside the accounting (a lock timer) take.
        let slack = proc_ns / 20 + 40_000_000;
        assert!(counted.abs_diff(proc_ns) <= slack, "server {k}: counted {counted} ns of CPU, the process used {proc_ns} ns ({:.1}%)", 100.0 * counted as f64 / proc_ns as f64);
    }
}
