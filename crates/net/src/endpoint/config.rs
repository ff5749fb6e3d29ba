//! An endpoint's settings: its deadlines, transport, shared-memory
//! polling, idle reuse and rails, from the front end's variables.

use super::rails;
use std::time::Duration;

/// Tunables of an endpoint.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Payloads up to this size travel in the request frame; larger ones use
    /// a rendezvous. 64 KiB: below it the extra round trip costs more than
    /// the receiver's buffering; above it the receiver should choose.
    pub eager_limit: usize,
    pub connect_timeout: Duration,
    /// Deadline for one batch of calls (`WEFT_TIMEOUT_MS`).
    pub op_timeout: Duration,
    /// How to reach a server (`WEFT_TRANSPORT`: `auto`, `tcp`, `shm`).
    pub transport: TransportChoice,
    /// Before blocking for answers on shared memory, look at the rings for
    /// this long (`WEFT_SHM_POLL_US`; 0, the default: block at once). Saves
    /// the wake-up at the cost of a busy core while waiting.
    pub shm_poll: Duration,
    /// A connection idle for longer is closed and opened again before its
    /// next call ([`IDLE_REUSE`]): servers close idle connections after
    /// `ConnLimits::idle_timeout`, and a call must never race that close.
    pub idle_reuse: Duration,
    /// The liveness watch (`WEFT_PING_AFTER_MS`, default 5 s; 0: off): a
    /// connection owed answers and quiet this long is pinged, its server
    /// asked for a hello's answer on a fresh connection if the ping brings
    /// nothing within as long again, and given up if that brings nothing
    /// within as long again (`liveness.rs`).
    pub ping_after: Duration,
    /// Connections per server over which a large payload is split
    /// (`WEFT_RAILS`, 1 to 8; 1, the default: no rails). See `rails.rs`.
    pub rails: u8,
}

/// How long a client reuses an idle connection (50 s): below the servers'
/// idle timeout (`link::server::IDLE_TIMEOUT`, 5 minutes) and the idle age
/// at which a full server may take a connection back (a minute).
pub const IDLE_REUSE: Duration = Duration::from_secs(50);

/// Which transport a connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportChoice {
    /// Shared memory when the server is on this node, else TCP.
    #[default]
    Auto,
    Tcp,
    /// Shared memory only: a server on another node is unreachable.
    Shm,
}

impl TransportChoice {
    /// `auto`, `tcp` or `shm`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(TransportChoice::Auto),
            "tcp" => Some(TransportChoice::Tcp),
            "shm" => Some(TransportChoice::Shm),
            _ => None,
        }
    }
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            eager_limit: 64 * 1024,
            connect_timeout: Duration::from_secs(3),
            op_timeout: Duration::from_secs(30),
            transport: TransportChoice::default(),
            shm_poll: Duration::ZERO,
            idle_reuse: IDLE_REUSE,
            rails: 1,
            ping_after: super::liveness::PING_AFTER,
        }
    }
}

impl EndpointConfig {
    /// The defaults, with `WEFT_TIMEOUT_MS`, `WEFT_TRANSPORT` and
    /// `WEFT_SHM_POLL_US` when set.
    pub fn from_vars(vars: &crate::settings::Vars<'_>) -> Result<Self, crate::settings::BadSetting> {
        let d = EndpointConfig::default();
        Ok(EndpointConfig {
            op_timeout: vars.millis("WEFT_TIMEOUT_MS")?.unwrap_or(d.op_timeout),
            transport: vars.choice("WEFT_TRANSPORT", "not auto, tcp or shm", TransportChoice::parse)?.unwrap_or(d.transport),
            shm_poll: crate::transport::shm::poll_budget(vars)?,
            ping_after: vars.millis("WEFT_PING_AFTER_MS")?.unwrap_or(d.ping_after),
            rails: vars.choice("WEFT_RAILS", "not a count of connections from 1 to 8", |v| v.trim().parse::<u8>().ok().filter(|n| (1..=rails::MAX_RAILS).contains(n)))?.unwrap_or(d.rails),
            ..d
        })
    }

    /// This configuration as `weft config` shows it.
    pub fn settings(&self, vars: &crate::settings::Vars<'_>) -> Vec<crate::settings::Setting> {
        use crate::settings::Setting;
        let transport = match self.transport {
            TransportChoice::Auto => "auto",
            TransportChoice::Tcp => "tcp",
            TransportChoice::Shm => "shm",
        };
        vec![
            Setting::new(vars, "WEFT_TIMEOUT_MS", format!("{} ms", self.op_timeout.as_millis()), "a call not answered within this fails (TimedOut)"),
            Setting::new(vars, "WEFT_TRANSPORT", transport, "auto: shared memory to servers on this node, TCP otherwise; tcp; shm"),
            Setting::new(vars, "WEFT_SHM_POLL_US", format!("{} us", self.shm_poll.as_micros()), "time a side polls its shared-memory rings before it blocks (at most 10 ms)"),
            Setting::new(vars, "WEFT_PING_AFTER_MS", format!("{} ms", self.ping_after.as_millis()), "a server quiet this long with calls owed is pinged, then asked for a hello's answer on a fresh connection, and given up if neither is answered within as long again each (0: off)"),
            Setting::new(vars, "WEFT_RAILS", self.rails, "connections per server a payload of 512 KiB or more is split over (1: none)"),
        ]
    }
}
