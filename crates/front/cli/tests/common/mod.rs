//! Shared by the integration tests: a real local cluster of `weft serve`
//! processes in a temporary directory, removed when dropped.
#![allow(dead_code)]

pub mod mount;
pub mod mpi;
pub mod shards;

use std::path::{Path, PathBuf};
use std::time::Duration;
use weft_client::{Client, ClientOptions};
use weft_launch::{ClusterSpec, LocalCluster};
use weft_net::ClusterFile;

pub const WEFT: &str = env!("CARGO_BIN_EXE_weft");

/// The `weft` binary that runs the servers: this build's, or
/// `WEFT_TEST_SERVER_BIN` to run the tests against another build (an older
/// one shows which tests catch its defects).
pub fn server_bin() -> PathBuf {
    std::env::var_os("WEFT_TEST_SERVER_BIN").map_or_else(|| PathBuf::from(WEFT), PathBuf::from)
}

pub struct TestCluster {
    pub lc: LocalCluster,
    dir: PathBuf,
}

impl TestCluster {
    pub fn start(name: &str, data_servers: usize) -> Self {
        Self::start_spec(name, ClusterSpec { data_servers, ..ClusterSpec::default() })
    }

    pub fn start_spec(name: &str, spec: ClusterSpec) -> Self {
        let dir = std::env::temp_dir().join(format!("weft-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let lc = LocalCluster::start(&server_bin(), &dir, &spec).expect("cluster starts");
        TestCluster { lc, dir }
    }

    pub fn cluster(&self) -> ClusterFile {
        ClusterFile::load(&self.lc.cluster_file()).unwrap()
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.lc.cluster_file()).unwrap()
    }

    /// A client whose operations give up after `timeout`, and at once
    /// when a server went away (no riding through restarts).
    pub fn client_with_timeout(&self, timeout: Duration) -> Client {
        self.client_with(timeout, Duration::ZERO)
    }

    /// A client whose operations give up after `timeout`, and ride through
    /// a server's restart for `recovery`.
    pub fn client_with(&self, timeout: Duration, recovery: Duration) -> Client {
        let mut o = ClientOptions { recovery, ..ClientOptions::default() };
        o.endpoint.op_timeout = timeout;
        o.endpoint.connect_timeout = timeout;
        Client::with_options(self.cluster(), o).unwrap()
    }

    pub fn scratch(&self, name: &str) -> PathBuf {
        let p = self.dir.join("scratch");
        std::fs::create_dir_all(&p).unwrap();
        p.join(name)
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.lc.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `ranks` copies of the ignored test `child` of this test binary as
/// separate processes (rank in `WEFT_TEST_RANK`, the cluster in
/// `WEFT_CLUSTER`, plus `env`), all at once, and asserts they all succeed.
pub fn run_children(child: &str, ranks: u64, cluster_file: &Path, env: &[(&str, &str)]) {
    let me = std::env::current_exe().unwrap();
    let kids: Vec<_> = (0..ranks)
        .map(|rank| {
            std::process::Command::new(&me)
                .args(["--exact", child, "--ignored", "--test-threads=1"])
                .env("WEFT_TEST_RANK", rank.to_string())
                .env("WEFT_CLUSTER", cluster_file)
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        // libtest reports a child's panic on its standard output.
        let said = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = said.lines().collect();
        let why = lines.iter().position(|l| l.contains("panicked at")).map_or(String::new(), |i| lines[i..lines.len().min(i + 3)].join("\n"));
        assert!(out.status.success(), "child process {child} failed:\n{why}");
    }
}

/// Deterministic bytes that differ per (seed, position).
/// Asks server `addr` for namespace request `op` as `cred`, alone (no
/// routing, no riding through restarts); the decoded answer.
pub fn meta_call(ep: &weft_net::Endpoint, addr: std::net::SocketAddr, cred: weft_wire::Cred, op: weft_wire::MetaReq) -> weft_wire::Response {
    let reply = ep.call(addr, weft_wire::Request::Meta { cred, op }.encode()).unwrap();
    weft_wire::Response::decode(&reply.body).unwrap()
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Reads one response frame from a raw connection and decodes it.
pub fn response(s: &mut std::net::TcpStream) -> (weft_wire::Header, weft_wire::Response) {
    let h = weft_net::frame_io::read_header(s).map_err(|e| format!("{e:?}")).unwrap();
    assert_eq!(h.kind, weft_wire::FrameKind::Response);
    let body = weft_net::frame_io::read_vec(s, h.body_len as usize).unwrap();
    let _payload = weft_net::frame_io::read_vec(s, h.pay_len as usize).unwrap();
    (h, weft_wire::Response::decode(&body).unwrap())
}

/// A data request with a capability for its file and every right, minted
/// with the servers' key (which a holder of the secret can derive).
pub fn capped(secret: &weft_wire::Secret, op: weft_wire::DataReq) -> weft_wire::Request {
    weft_wire::Request::data(cap_for(secret, op.file()), op)
}

/// A capability for `file` with every right, never expiring.
pub fn cap_for(secret: &weft_wire::Secret, file: weft_wire::FileId) -> weft_wire::Capability {
    weft_wire::CapKey::derive(secret).issue(file, weft_wire::rights::ALL, u64::MAX)
}

/// A proxy to `target` for one connection that records what the client
/// sent; the thread returns the bytes once the client hangs up.
pub fn recording_proxy(target: std::net::SocketAddr) -> (std::net::SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = l.local_addr().unwrap();
    let recorder = std::thread::spawn(move || {
        let (mut client, _) = l.accept().unwrap();
        let mut server = std::net::TcpStream::connect(target).unwrap();
        let mut back = server.try_clone().unwrap();
        let mut to_client = client.try_clone().unwrap();
        let pump = std::thread::spawn(move || {
            let _ = std::io::copy(&mut back, &mut to_client);
        });
        let mut recorded = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match client.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    recorded.extend_from_slice(&buf[..n]);
                    server.write_all(&buf[..n]).unwrap();
                }
            }
        }
        let _ = server.shutdown(std::net::Shutdown::Both);
        pump.join().unwrap();
        recorded
    });
    (proxy, recorder)
}

/// `GET path` on `addr`: the status line and the body.
pub fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    try_get(addr, path).expect("an answer within 10 s")
}

/// [`get`], or the error that cut it (a port serving its most scrapes
/// closes further connections unanswered).
pub fn try_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut all = String::new();
    s.read_to_string(&mut all)?;
    let (head, body) = all.split_once("\r\n\r\n").ok_or_else(|| std::io::Error::other("no blank line after the head"))?;
    Ok((head.lines().next().unwrap_or("").to_owned(), body.to_owned()))
}

/// The value of the sample `series` (name and labels exactly as written)
/// in a Prometheus page.
pub fn value(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The counters of every data server that answers.
pub fn data_stats(c: &weft_client::Client) -> Vec<weft_wire::ServerStats> {
    c.status().into_iter().filter(|s| s.server.services.contains(&weft_net::Service::Data)).filter_map(|s| s.stats.ok()).collect()
}

/// Data objects on every data server, once `done` holds of their count or
/// after 10 s (the count then): the metadata service deletes a removed
/// file's objects shortly after the removal, not before its answer.
pub fn objects_when(c: &weft_client::Client, done: impl Fn(u64) -> bool) -> u64 {
    let count = || -> u64 { data_stats(c).iter().map(|s| s.objects).sum() };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = count();
        if done(n) || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Returns once the data servers received nothing for 600 ms (longer than
/// the metadata service's deletion rounds' poll) but the status requests
/// asking (at most 10 s): its deletions of removed files' objects are done.
pub fn data_servers_quiet(c: &weft_client::Client) {
    let count = || -> (u64, u64) {
        let data = data_stats(c);
        (data.iter().map(|s| s.requests).sum(), data.len() as u64)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (mut last, _) = count();
    let mut quiet = 0;
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (now, servers) = count();
        quiet = if now == last + servers { quiet + 1 } else { 0 };
        if quiet == 6 {
            return;
        }
        last = now;
    }
}
