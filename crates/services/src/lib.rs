//! Weft's server side (floor 6): the services one `weft serve` process hosts.
//!
//! * [`meta`]: the namespace in an embedded ACID database (redb) on disk.
//! * [`data`]: stripe objects as local files, positioned list I/O.
//! * [`lock`]: byte-range and list locks with leases, for atomic mode.
//! * [`server`]: accepting connections, the handshake, and the per-connection
//!   loop that routes requests to the hosted services.
//!
//! Uses `wire`, `net` and `layout`; never the client. See `docs/architecture.md`.
#![forbid(unsafe_code)]

pub mod config;
pub mod data;
pub mod lock;
pub mod meta;
pub mod server;

pub use config::ServerConfig;
pub use server::{run, run_until, serve_metrics, ServeError, Server, Shutdown};
