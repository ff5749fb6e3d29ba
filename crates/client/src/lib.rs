//! Weft's client library (floor 7): namespace operations and striped file I/O.
//!
//! A [`Client`] reads the cluster file and talks to the metadata service and
//! the data servers through one message-layer [`weft_net::Endpoint`]. A
//! [`File`] reads and writes at offsets: a large access is split by the
//! file's striping into one extent per data server, each extent into bounded
//! requests, and all of them are in flight at once; payloads go from and to
//! the caller's buffer with no staging copy.
//!
//! No client cache: servers are the truth, so a read after a completed write
//! sees it. Uses `wire`, `net` and `layout`; never the services.
//! See `docs/architecture.md` and `docs/semantics.md`.
#![forbid(unsafe_code)]

mod atomic;
mod lock_session;
mod client;
pub mod collective;
pub mod comm;
mod random;
pub mod recovery;
mod error;
mod file;
mod options;
mod schedule;
mod session;
mod shard_route;

pub use atomic::LockGranularity;
pub use lock_session::LockGuard;
pub use comm::Communicator;
pub use client::{Client, CreateOptions, ServerStatus};
pub use options::ClientOptions;
pub use weft_lock::Extent;
pub use error::{Error, Result};
pub use file::{File, MOST_READ_AHEAD, MOST_WRITE_BEHIND};
pub use random::random_u64;
pub use schedule::Schedule;
pub use weft_sched::Strategy;
pub use weft_layout::{sort_and_coalesce, Datatype, Distrib, Order, Pattern, Segment, View, ViewError};
pub use weft_wire::limits;
pub use weft_wire::{AttrChange, Cred, DirEntry, FileAttr, FileId, FileKind, PointerOp, ServerStats, KEEP_ID, MAX_ATTR_CHANGES, TIME_NOW};

// The layout floor repeats the wire's striping limits (it does not depend on
// wire); the client, which uses both, checks they agree.
const _: () = assert!(weft_layout::stripe::MAX_STRIPE_SIZE == weft_wire::limits::MAX_STRIPE_SIZE);
const _: () = assert!(weft_layout::stripe::MAX_STRIPE_COUNT == weft_wire::limits::MAX_STRIPE_COUNT);
