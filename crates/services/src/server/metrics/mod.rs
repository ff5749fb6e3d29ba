//! What a server tells operators: Prometheus text on the metrics port the
//! cluster file names (`metrics = "host:port"` in a server's entry), the
//! same numbers `weft status --watch` shows. See `docs/operations.md` for
//! the list of series and the Grafana dashboard.
//!
//! - [`requests`]: per-kind counters and latency histograms the workers
//!   add to as they answer;
//! - [`exposition`]: the text format;
//! - [`http`]: the port.

pub mod exposition;
pub mod http;
pub mod requests;

use super::Server;
use exposition::{Exposition, MetricType};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use weft_wire::CpuKind;

/// Pages made at most once per [`PAGE_AGE`]: a scrape costs the server a
/// `Status` (a walk of its objects and lock tables), and the port is open
/// to any peer.
pub const PAGE_AGE: Duration = Duration::from_secs(1);

pub struct PageCache {
    server: Arc<Server>,
    last: Mutex<Option<(Instant, Arc<str>)>>,
}

impl PageCache {
    pub fn new(server: Arc<Server>) -> Self {
        PageCache { server, last: Mutex::new(None) }
    }

    /// The page made within [`PAGE_AGE`], or a new one. Scrapes that
    /// arrive together wait for one page rather than each make theirs.
    pub fn page(&self) -> String {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        match &*last {
            Some((made, p)) if made.elapsed() < PAGE_AGE => p.to_string(),
            _ => {
                let p: Arc<str> = page(&self.server).into();
                *last = Some((Instant::now(), p.clone()));
                p.to_string()
            }
        }
    }
}

/// The metrics page of `server` now.
pub fn page(server: &Server) -> String {
    let st = server.stats();
    let id = server.id.to_string();
    let mut e = Exposition::default();
    let services: Vec<&str> = [(1u8, "meta"), (2, "data"), (4, "lock")].iter().filter(|(bit, _)| st.services & bit != 0).map(|&(_, n)| n).collect();
    e.family("weft_server_info", MetricType::Gauge, "The server's id, services and protocol version (always 1).");
    e.sample("weft_server_info", &[("server", &id), ("services", &services.join(",")), ("protocol", &weft_wire::PROTOCOL_VERSION.to_string())], 1.0);

    let kinds: Vec<(CpuKind, requests::KindSnapshot)> = CpuKind::ALL.iter().map(|&k| (k, server.requests.snapshot(k))).collect();
    e.family("weft_requests_total", MetricType::Counter, "Requests answered, by kind (pings, sinks and sources, answered on the event loop, are not counted; metadata reads answered there are).");
    for (k, s) in &kinds {
        e.sample("weft_requests_total", &[("server", &id), ("kind", k.name())], s.requests as f64);
    }
    e.family("weft_request_bytes_total", MetricType::Counter, "Payload bytes of requests (in) and of their answers (out), by kind.");
    for (k, s) in &kinds {
        e.sample("weft_request_bytes_total", &[("server", &id), ("kind", k.name()), ("direction", "in")], s.bytes_in as f64);
        e.sample("weft_request_bytes_total", &[("server", &id), ("kind", k.name()), ("direction", "out")], s.bytes_out as f64);
    }
    e.family("weft_request_duration_seconds", MetricType::Histogram, "Time from a request's arrival to its answer (waiting for a worker included; lock waits answered later are not), by kind.");
    let bounds: Vec<f64> = requests::BUCKETS_US.iter().map(|&us| us as f64 / 1e6).collect();
    for (k, s) in &kinds {
        e.histogram("weft_request_duration_seconds", &[("server", &id), ("kind", k.name())], &bounds, &s.buckets, s.latency_us as f64 / 1e6);
    }
    e.family("weft_cpu_seconds_total", MetricType::Counter, "CPU time of the server's threads, by the kind of request served; kind=\"event_loop\" is the event loop's own.");
    for k in CpuKind::ALL {
        e.sample("weft_cpu_seconds_total", &[("server", &id), ("kind", k.name())], st.cpu_ns[k as usize] as f64 / 1e9);
    }
    e.sample("weft_cpu_seconds_total", &[("server", &id), ("kind", "event_loop")], st.cpu_loop_ns as f64 / 1e9);

    let mut p = Page { e: &mut e, id: &id };
    p.one("weft_uptime_seconds", MetricType::Gauge, "Seconds since the server started.", st.uptime_ms as f64 / 1e3);
    p.one("weft_queue_depth", MetricType::Gauge, "Requests waiting for a worker now.", server.requests.queue_depth() as f64);
    p.one("weft_bad_requests_total", MetricType::Counter, "Requests refused as malformed, and requests that failed inside the server.", st.bad_requests as f64);
    p.one("weft_panics_total", MetricType::Counter, "Requests that failed inside the server (each is a bug; see the server's log).", st.panics as f64);
    p.split("weft_memory_budget_bytes", MetricType::Gauge, "The memory budget every buffered request and answer is drawn from: bytes in use and the limit.", "state", &[("used", st.memory_used as f64), ("limit", st.memory_limit as f64)]);
    let refusals = server.quota_refusals().map(|(table, n)| (table, n as f64));
    p.split("weft_quota_refusals_total", MetricType::Counter, "Connections and requests refused because a user's share or a server-wide table was full, by table.", "table", &refusals);
    p.split("weft_connections", MetricType::Gauge, "Connections open now, by transport.", "transport", &[("tcp", st.connections.saturating_sub(st.shm_connections) as f64), ("shm", st.shm_connections as f64)]);
    p.one("weft_connection_limit", MetricType::Gauge, "The most connections the server accepts.", st.connection_limit as f64);
    p.split("weft_data_bytes_total", MetricType::Counter, "Bytes written to and read from this server's objects.", "direction", &[("written", st.bytes_written as f64), ("read", st.bytes_read as f64)]);
    p.one("weft_stored_bytes", MetricType::Gauge, "Bytes stored in this server's objects.", st.bytes_stored as f64);
    p.one("weft_objects", MetricType::Gauge, "Objects (data) and files and directories (metadata) this server keeps.", st.objects as f64);
    p.split("weft_disk_bytes", MetricType::Gauge, "The file system under the server's directory: total and free bytes.", "state", &[("total", st.disk_total as f64), ("free", st.disk_free as f64)]);
    if st.services & 4 != 0 {
        p.split("weft_locks", MetricType::Gauge, "Byte-range locks held and waiting now.", "state", &[("held", st.locks_held as f64), ("waiting", st.locks_waiting as f64)]);
        p.one("weft_locks_granted_total", MetricType::Counter, "Locks granted since start.", st.locks_granted as f64);
        p.one("weft_lock_wait_seconds_total", MetricType::Counter, "Total time granted locks waited (divide by grants for the mean).", st.lock_wait_us as f64 / 1e6);
    }
    if let Some(m) = &server.meta {
        p.one("weft_meta_orphans", MetricType::Gauge, "Removed files whose objects still wait to be deleted on their data servers (a data server that is down keeps them; as of the deleting thread's last round).", m.orphans_waiting() as f64);
    }
    if st.services & 2 != 0 {
        p.split("weft_collective_rounds_total", MetricType::Counter, "Server-directed collective rounds performed, and collectives failed.", "outcome", &[("done", st.coll_rounds as f64), ("failed", st.coll_failed as f64)]);
    }
    e.finish()
}

/// Families of one server's series (each labelled with its id).
struct Page<'a> {
    e: &'a mut Exposition,
    id: &'a str,
}

impl Page<'_> {
    /// A family of one series.
    fn one(&mut self, name: &str, ty: MetricType, help: &str, v: f64) {
        self.e.family(name, ty, help);
        self.e.sample(name, &[("server", self.id)], v);
    }

    /// A family of one series per value of `label`.
    fn split(&mut self, name: &str, ty: MetricType, help: &str, label: &str, values: &[(&str, f64)]) {
        self.e.family(name, ty, help);
        for &(l, v) in values {
            self.e.sample(name, &[("server", self.id), (label, l)], v);
        }
    }
}
