//! Decentralized parallel I/O scheduling (floor 4, pure), after paper 000:
//! the order in which each client sends its blocks to the servers (and each
//! server serves reads), chosen by each party alone, without a central
//! coordinator.
//!
//! * [`strategy`]: first-IOS, random-IOS and hash-IOS exactly as the paper
//!   defines them, and Weft's own `colour`, which follows an edge colouring
//!   of the whole transfer graph and so reaches the max-degree lower bound.
//! * [`colour`]: König edge colouring of a bipartite multigraph.
//! * [`sim`]: the paper's unit-transfer model, to compare strategies at
//!   thousands of clients.
//!
//! No sockets, threads or clocks; randomness comes from a seed.
//! See `docs/scheduling.md`.
#![forbid(unsafe_code)]

pub mod colour;
pub mod sim;
pub mod strategy;

pub use colour::edge_colouring;
pub use sim::{lower_bound, simulate, Workload};
pub use strategy::{order, ParseStrategyError, Strategy};
