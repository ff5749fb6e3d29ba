//! Dev only: what the integration tests of every crate share. Real parts,
//! never mocks: local clusters of `weft serve` processes ([`TestCluster`]),
//! real FUSE mounts ([`mount`]), the MPI-IO library built for each
//! installed MPI ([`mpi`]), clusters of several metadata shards
//! ([`shards`]), and raw frames for tests that speak the protocol by hand
//! ([`frames`]).
//!
//! The servers are this build's `weft` binary ([`weft`]), which the
//! testkit has cargo build (or find up to date) once per test process, so
//! `cargo test -p <crate>` never runs servers left from an older build.

mod binary;
mod children;
mod cluster;
mod counters;
pub mod frames;
mod http;
pub mod mount;
pub mod mpi;
mod pattern;
mod proxy;
pub mod shards;

pub use binary::{server_bin, target_dir, weft};
pub use children::run_children;
pub use cluster::TestCluster;
pub use counters::{data_servers_quiet, data_stats, meta_quiet, meta_requests, objects_when};
pub use frames::{cap_for, capped, meta_call, response};
pub use http::{get, try_get, value};
pub use pattern::pattern;
pub use proxy::recording_proxy;
