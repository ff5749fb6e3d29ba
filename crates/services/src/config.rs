//! A server's settings, read once when `weft serve` starts (from the
//! variables it is given; see `weft_net::settings`) and held by the
//! [`crate::Server`]: no service reads the environment. The cluster file
//! holds the settings a whole cluster shares (stripe size, lock lease,
//! metadata sync window); these are one server's resources and bounds.

use crate::lock::LockLimits;
use std::time::Duration;
use weft_net::link::ConnLimits;
use weft_net::settings::{BadSetting, Setting, Vars};

/// Default memory budget for requests and answers.
pub const DEFAULT_MEMORY: u64 = weft_net::budget::DEFAULT_MEMORY_BUDGET;
/// Default memory for shared-memory rings: 128 connections of 2 MiB.
pub const DEFAULT_SHM_MEMORY: u64 = 256 << 20;

/// Paper 001's traditional caching mode: a block cache in the data
/// service, off by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataCache {
    pub bytes: u64,
    pub block: u64,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Worker threads (requests run there, off the event loop).
    pub threads: usize,
    /// Requests of one connection served at once.
    pub conn_parallel: usize,
    /// Reads a data server serves at once when clients ask for ordering.
    pub read_slots: usize,
    /// The most connections (`None`: as many as descriptors allow).
    pub max_connections: Option<usize>,
    /// The most one proven user holds (`None`: half the server's).
    pub max_connections_per_user: Option<usize>,
    pub conn_limits: ConnLimits,
    /// The memory budget of requests and answers, and of shared-memory rings.
    pub memory: u64,
    pub shm_memory: u64,
    pub shm_poll: Duration,
    /// How it reaches other servers (metadata shards' pushes): the client
    /// variables `WEFT_TRANSPORT` and `WEFT_SHM_POLL_US` given to the server.
    pub peer_endpoint: weft_net::EndpointConfig,
    /// A server-directed collective round not complete within this fails.
    pub coll_timeout: Duration,
    pub lock_limits: LockLimits,
    /// Lifetime of the capabilities the metadata service signs.
    pub cap_lifetime: Duration,
    pub data_cache: Option<DataCache>,
    /// Whether the data service may answer writes before they reach its
    /// files' page cache in full (write-behind).
    pub write_behind: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig::from_vars(&Vars::none()).expect("the defaults parse")
    }
}

impl ServerConfig {
    pub fn from_vars(vars: &Vars<'_>) -> Result<Self, BadSetting> {
        let threads = vars.count("WEFT_SERVER_THREADS")?.map_or(8, |n| n.min(1024) as usize);
        // Checked even when the cache is off: a bad value is an error.
        let block = vars.size("WEFT_CACHE_BLOCK")?.unwrap_or(64 << 10).clamp(512, 16 << 20);
        let data_cache = vars.size("WEFT_DATA_CACHE")?.filter(|&b| b > 0).map(|bytes| DataCache { bytes, block });
        let d = LockLimits::default();
        Ok(ServerConfig {
            threads,
            conn_parallel: vars.count("WEFT_CONN_PARALLEL")?.map_or((threads / 2).max(1), |n| n as usize),
            read_slots: vars.count("WEFT_READ_SLOTS")?.map_or(1, |n| n as usize),
            max_connections: vars.count("WEFT_MAX_CONNECTIONS")?.map(|n| n as usize),
            max_connections_per_user: vars.count("WEFT_MAX_CONNECTIONS_PER_USER")?.map(|n| n as usize),
            conn_limits: ConnLimits::from_vars(vars)?,
            memory: vars.size("WEFT_SERVER_MEMORY")?.unwrap_or(DEFAULT_MEMORY),
            shm_memory: vars.size("WEFT_SHM_MEMORY")?.unwrap_or(DEFAULT_SHM_MEMORY),
            shm_poll: weft_net::transport::shm::poll_budget(vars)?,
            peer_endpoint: weft_net::EndpointConfig::from_vars(vars)?,
            coll_timeout: vars.millis("WEFT_COLL_TIMEOUT_MS")?.unwrap_or(Duration::from_secs(20)),
            lock_limits: LockLimits {
                max_locks: vars.count("WEFT_MAX_LOCKS")?.unwrap_or(d.max_locks),
                max_locks_per_user: vars.count("WEFT_MAX_LOCKS_PER_USER")?.unwrap_or(d.max_locks_per_user),
                max_sessions_per_user: vars.count("WEFT_MAX_LOCK_SESSIONS_PER_USER")?.map_or(d.max_sessions_per_user, |n| n as usize),
            },
            cap_lifetime: Duration::from_secs(vars.count("WEFT_CAP_LIFETIME_S")?.unwrap_or(600)),
            data_cache,
            write_behind: vars.flag("WEFT_WRITE_BEHIND")?.unwrap_or(true),
        })
    }

    /// Every setting as `weft config` shows it.
    pub fn settings(&self, vars: &Vars<'_>) -> Vec<Setting> {
        let size = |b: u64| format!("{b} bytes");
        let or = |v: Option<usize>, none: &str| v.map_or_else(|| none.to_owned(), |n| n.to_string());
        let mut all = vec![
            Setting::new(vars, "WEFT_SERVER_THREADS", self.threads, "worker threads (requests run there, off the event loop)"),
            Setting::new(vars, "WEFT_CONN_PARALLEL", self.conn_parallel, "requests of one connection served at once (default: half the workers)"),
            Setting::new(vars, "WEFT_READ_SLOTS", self.read_slots, "reads a data server serves at once when clients ask for ordering"),
            Setting::new(vars, "WEFT_MAX_CONNECTIONS", or(self.max_connections, "by descriptors"), "the most connections a server accepts"),
            Setting::new(vars, "WEFT_MAX_CONNECTIONS_PER_USER", or(self.max_connections_per_user, "half"), "the most connections one proven user holds"),
            Setting::new(vars, "WEFT_SERVER_MEMORY", size(self.memory), "memory budget of buffered requests and answers"),
            Setting::new(vars, "WEFT_SHM_MEMORY", size(self.shm_memory), "memory for shared-memory rings (2 MiB a connection)"),
            Setting::new(vars, "WEFT_COLL_TIMEOUT_MS", format!("{} ms", self.coll_timeout.as_millis()), "a server-directed collective round not complete within this fails"),
            Setting::new(vars, "WEFT_MAX_LOCKS", self.lock_limits.max_locks, "locks held or waiting, in all"),
            Setting::new(vars, "WEFT_MAX_LOCKS_PER_USER", self.lock_limits.max_locks_per_user, "locks held or waiting, per proven user"),
            Setting::new(vars, "WEFT_MAX_LOCK_SESSIONS_PER_USER", self.lock_limits.max_sessions_per_user, "lock sessions per proven user"),
            Setting::new(vars, "WEFT_CAP_LIFETIME_S", format!("{} s", self.cap_lifetime.as_secs()), "lifetime of the capabilities the metadata service signs"),
            Setting::new(vars, "WEFT_DATA_CACHE", self.data_cache.map_or_else(|| "off".into(), |c| size(c.bytes)), "traditional caching mode: a block cache of this size in each data server"),
            Setting::new(vars, "WEFT_CACHE_BLOCK", self.data_cache.map_or_else(|| "-".into(), |c| size(c.block)), "the block cache's block"),
            Setting::new(vars, "WEFT_WRITE_BEHIND", u8::from(self.write_behind), "data servers answer writes before their pages reach the disk (fsync still waits)"),
        ];
        all.extend(self.conn_limits.settings(vars));
        all.push(Setting::new(vars, "WEFT_SHM_POLL_US", format!("{} us", self.shm_poll.as_micros()), "time a side polls its shared-memory rings before it blocks (at most 10 ms; the shards' pushes to each other too)"));
        all.extend(self.peer_endpoint.settings(vars).into_iter().filter(|s| s.name == "WEFT_TRANSPORT").map(|s| Setting { doc: "how metadata shards reach each other (auto, tcp, shm)", ..s }));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_set_what_they_name_and_a_bad_one_is_an_error() {
        let get = |k: &str| match k {
            "WEFT_SERVER_THREADS" => Some("4".to_owned()),
            "WEFT_DATA_CACHE" => Some("64m".into()),
            "WEFT_MAX_LOCKS" => Some("1000".into()),
            "WEFT_IDLE_TIMEOUT_MS" => Some("8000".into()),
            _ => None,
        };
        let c = ServerConfig::from_vars(&Vars::new(&get)).unwrap();
        assert_eq!((c.threads, c.conn_parallel), (4, 2), "per connection follows the workers");
        assert_eq!(c.data_cache, Some(DataCache { bytes: 64 << 20, block: 64 << 10 }));
        assert_eq!(c.lock_limits.max_locks, 1000);
        assert_eq!(c.conn_limits.idle_timeout, Duration::from_secs(8));
        let shown = c.settings(&Vars::new(&get));
        assert!(shown.iter().any(|s| s.name == "WEFT_SERVER_THREADS" && s.set && s.value == "4"));
        assert!(shown.iter().any(|s| s.name == "WEFT_READ_SLOTS" && !s.set && s.value == "1"));
        let bad = |k: &str| (k == "WEFT_READ_SLOTS").then(|| "many".to_owned());
        assert_eq!(ServerConfig::from_vars(&Vars::new(&bad)).unwrap_err().name, "WEFT_READ_SLOTS");
        assert!(ServerConfig::default().write_behind);
    }
}
