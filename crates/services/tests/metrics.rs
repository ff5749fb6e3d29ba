//! The metrics port (docs/operations.md): every server serves Prometheus
//! text that `promtool` accepts, whose counts match what was done; a
//! hostile scraper cannot hold it; a real Prometheus (Debian's, started
//! here) scrapes it; and every query of the Grafana dashboard in the repo
//! runs there and finds its series.

use weft_testkit::{get, pattern, try_get, value, TestCluster, weft};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use weft_client::CreateOptions;


fn scrape(addr: SocketAddr) -> String {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    body
}

/// `promtool check metrics` (the Prometheus project's linter) on a page.
fn promtool_accepts(page: &str) {
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; `make deps` installs it)");
    p.stdin.take().unwrap().write_all(page.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "promtool: {said}\n{page}");
}

#[test]
fn counts_match_what_was_done_and_promtool_accepts_the_page() {
    let tc = TestCluster::start("metrics-counts", 2);
    let cluster = tc.cluster();
    // Its read goes through the servers: bytes read from a lent object
    // are the client's, and no server counts them.
    let c = tc.client_through_servers();
    let data = pattern(7, (1 << 20) + 5);
    let f = c.create("/counted", CreateOptions::default()).unwrap();
    assert_eq!(f.write_at(0, &data).unwrap(), data.len());
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data);
    f.close().unwrap();
    // Reads the event loop answers itself are counted too.
    for _ in 0..5 {
        c.stat("/counted").unwrap();
    }

    let (mut written, mut read, mut stored) = (0.0, 0.0, 0.0);
    for s in &cluster.servers {
        let page = scrape(s.metrics.expect("weft up names a metrics port"));
        promtool_accepts(&page);
        let id = s.id;
        let series = |name: &str, labels: &str| value(&page, &format!("{name}{{server=\"{id}\",{labels}}}"));
        if s.services.contains(&weft_net::Service::Data) {
            written += series("weft_request_bytes_total", "kind=\"data-write\",direction=\"in\"").unwrap();
            read += series("weft_request_bytes_total", "kind=\"data-read\",direction=\"out\"").unwrap();
            stored += value(&page, &format!("weft_data_bytes_total{{server=\"{id}\",direction=\"written\"}}")).unwrap();
            assert!(series("weft_requests_total", "kind=\"data-write\"").unwrap() >= 1.0);
            let count = series("weft_request_duration_seconds_count", "kind=\"data-write\"").unwrap();
            assert_eq!(count, series("weft_request_duration_seconds_bucket", "kind=\"data-write\",le=\"+Inf\"").unwrap());
            assert_eq!(count, series("weft_requests_total", "kind=\"data-write\"").unwrap());
        } else {
            assert!(series("weft_requests_total", "kind=\"meta\"").unwrap() >= 7.0, "a create, a close and five stats at least:\n{page}");
            let count = series("weft_request_duration_seconds_count", "kind=\"meta\"").unwrap();
            assert_eq!(count, series("weft_requests_total", "kind=\"meta\"").unwrap());
            assert!(page.contains(&format!("weft_locks{{server=\"{id}\",state=\"held\"}} 0")), "{page}");
        }
        // This client's connection, over shared memory (a local server).
        assert!(series("weft_connections", "transport=\"shm\"").unwrap() >= 1.0, "{page}");
        assert_eq!(series("weft_quota_refusals_total", "table=\"connections\""), Some(0.0));
    }
    let len = data.len() as f64;
    assert_eq!((written, read, stored), (len, len, len), "payload bytes in and out, and bytes stored, over the data servers");
}

#[test]
fn a_hostile_scraper_cannot_hold_the_port() {
    let tc = TestCluster::start("metrics-hostile", 1);
    let addr = tc.cluster().servers[0].metrics.unwrap();
    // As many connections as scrapes served at once trickle a byte at a
    // time for longer than a connection's 5 s (into the head, and after
    // their 400 into the drain), then more stay silent.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tricklers: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
                let started = Instant::now();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && started.elapsed() < Duration::from_secs(20) {
                    if s.write_all(b"x").is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let started = Instant::now();
    let mut page = None;
    while page.is_none() && started.elapsed() < Duration::from_secs(9) {
        match try_get(addr, "/metrics") {
            Ok((status, body)) if status.contains("200") => page = Some(body),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(page.is_some_and(|p| p.contains("weft_server_info")), "no page within 9 s while 8 hostile connections were open");
    for t in tricklers {
        t.join().unwrap();
    }
    // The file service was never touched by them.
    tc.client().stat("/").unwrap();
    drop(idle);
    // A head past the cap is refused, whole as it is.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000)).as_bytes());
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    assert!(get(addr, "/x").0.contains("404"));
}

/// A Prometheus server, stopped (by its PID) when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: std::path::PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn start(dir: &std::path::Path, targets: &[SocketAddr]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: weft\n    static_configs:\n      - targets: [{}]\n", targets.join(", "))).unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // SAFETY: prctl(2) in the child before exec, async-signal-safe:
        // Prometheus dies with this test even if the test is killed.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("prometheus (Debian's prometheus package; `make deps` installs it)");
        Prometheus { child, addr: SocketAddr::from(([127, 0, 0, 1], port)), log: dir.join("prometheus.log") }
    }

    /// Fails the test at once if Prometheus exited (its port taken, say).
    fn still_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("prometheus exited ({status}): {}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }

    /// An instant query's result vector, or `None` while Prometheus is
    /// not answering yet. Panics on a query Prometheus refuses.
    fn query(&self, q: &str) -> Option<Vec<serde_json::Value>> {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET /api/v1/query?query={} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", percent(q)).ok()?;
        let mut all = String::new();
        s.read_to_string(&mut all).ok()?;
        let body = all.split_once("\r\n\r\n")?.1;
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        assert_eq!(v["status"], "success", "Prometheus refused {q}: {v}");
        v["data"]["result"].as_array().cloned()
    }
}

fn percent(q: &str) -> String {
    q.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

#[test]
fn a_real_prometheus_scrapes_every_server_and_runs_the_dashboard() {
    let tc = TestCluster::start("metrics-prometheus", 2);
    let cluster = tc.cluster();
    let c = tc.client();
    let data = pattern(9, 300_000);
    let f = c.create("/scraped", CreateOptions::default()).unwrap();
    f.write_at(0, &data).unwrap();
    f.close().unwrap();
    let targets: Vec<SocketAddr> = cluster.servers.iter().map(|s| s.metrics.unwrap()).collect();
    let dir = tc.scratch("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let mut p = Prometheus::start(&dir, &targets);

    // Every server is up for Prometheus, and the bytes it saw written are
    // the file's.
    let want = data.len().to_string();
    let started = Instant::now();
    loop {
        let up = p.query("sum(up{job=\"weft\"})").unwrap_or_default();
        let written = p.query("sum(weft_request_bytes_total{kind=\"data-write\",direction=\"in\"})").unwrap_or_default();
        let val = |r: &[serde_json::Value]| r.first().and_then(|x| x["value"][1].as_str().map(str::to_owned));
        if val(&up).as_deref() == Some(&targets.len().to_string()) && val(&written).as_deref() == Some(want.as_str()) {
            break;
        }
        p.still_running();
        assert!(started.elapsed() < Duration::from_secs(60), "Prometheus did not scrape every server within 60 s: up {up:?}, written {written:?}");
        std::thread::sleep(Duration::from_millis(500));
    }

    // Every query of the dashboard runs and finds series (rates once two
    // scrapes are in their window).
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/grafana/weft-dashboard.json")).unwrap()).unwrap();
    let exprs: Vec<String> = dashboard["panels"].as_array().unwrap().iter().flat_map(|p| p["targets"].as_array().unwrap().iter().map(|t| t["expr"].as_str().unwrap().to_owned())).collect();
    assert!(exprs.len() >= 10);
    for e in exprs {
        let started = Instant::now();
        while p.query(&e).is_none_or(|r| r.is_empty()) {
            assert!(started.elapsed() < Duration::from_secs(30), "the dashboard's query {e} finds no series");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

#[test]
fn status_watch_shows_rates_and_refuses_a_bad_interval() {
    let tc = TestCluster::start("metrics-watch", 1);
    let out = Command::new(weft()).args(["status", "--watch", "--interval", "0.2", "--count", "2"]).env("WEFT_CLUSTER", tc.lc.cluster_file()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.matches("rates over the last").count(), 2, "{text}");
    assert_eq!(text.lines().filter(|l| l.split_whitespace().nth(1) == Some("up")).count(), 4, "two servers, two reports:\n{text}");
    let bad = Command::new(weft()).args(["status", "--watch", "--interval", "0"]).env("WEFT_CLUSTER", tc.lc.cluster_file()).output().unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--interval"));
}

/// A metrics port someone else holds costs the operator the metrics, not
/// the users the file service: the server starts, serves, and says why it
/// has no metrics. (Before, it exited after binding its own port, and a
/// client mid-handshake saw the connection closed.)
#[test]
fn a_taken_metrics_port_leaves_the_file_service_up() {
    let tc = TestCluster::start("metrics-taken", 1);
    let mut cf = tc.cluster();
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let main = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = main.local_addr().unwrap();
    drop(main);
    // A second copy of server 1 (data) on a new port, its metrics port held.
    let dir = tc.scratch("taken");
    std::fs::create_dir_all(&dir).unwrap();
    cf.servers[1].addr = addr;
    cf.servers[1].dir = dir.join("srv");
    cf.servers[1].metrics = Some(holder.local_addr().unwrap());
    let path = dir.join("cluster.toml");
    cf.save(&path).unwrap();
    let log = std::fs::File::create(dir.join("log")).unwrap();
    let mut server = Command::new(weft()).args(["serve", "--cluster"]).arg(&path).args(["--id", "1"]).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
    let started = Instant::now();
    let ep = weft_net::Endpoint::new(cf.secret(), weft_net::EndpointConfig::default()).unwrap();
    let up = loop {
        if ep.call(addr, weft_wire::Request::Ping.encode()).is_ok() {
            break true;
        }
        if started.elapsed() > Duration::from_secs(10) || server.try_wait().unwrap().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let said = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    let _ = server.kill();
    let _ = server.wait();
    assert!(up, "the server did not serve with its metrics port taken:\n{said}");
    assert!(said.contains("serves no metrics"), "{said}");
}
