//! Where a file's bytes live (floor 3, pure): striping of file offsets over
//! stripe objects on data servers.
//!
//! No sockets, threads or clocks; imports no other Weft crate. See
//! `docs/architecture.md`.
#![forbid(unsafe_code)]

pub mod stripe;

pub use stripe::{ObjectExtent, Striping, StripingError};
