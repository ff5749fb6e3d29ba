//! Byte-range and list locks for MPI-IO atomic mode (floor 5, pure), after
//! paper 004 and beyond it (its future work: compact strided requests and
//! stale-lock expiry).
//!
//! * [`extent`]: what a lock covers: a byte range or a strided run
//!   (offset, block length, stride, count) kept and checked as one item.
//! * [`interval_tree`]: a balanced (treap) interval tree with max-end
//!   augmentation: overlap queries in O(log n + k).
//! * [`table`]: one file's locks: all-or-nothing grants of a list, shared
//!   and exclusive modes, first-come first-served among conflicting
//!   requests, release by lock id.
//! * [`lease`]: sessions with a time to live; the caller passes `now`.
//!
//! No sockets, threads or clocks. See `docs/locking.md`.
#![forbid(unsafe_code)]

pub mod extent;
pub mod interval_tree;
pub mod lease;
pub mod table;

pub use extent::{coalesce, Extent, ExtentError};
pub use interval_tree::IntervalTree;
pub use lease::{LeaseState, Leases};
pub use table::{Grant, LockError, LockId, LockTable, Mode, Owner};
