//! Where a file's bytes live (floor 3, pure): striping of file offsets over
//! stripe objects; MPI-style datatypes and their flattening; file views.
//!
//! No sockets, threads or clocks; imports no other Weft crate. See
//! `docs/architecture.md` and `docs/datatypes.md`.
#![forbid(unsafe_code)]

pub mod datatype;
pub mod distribution;
pub mod flatten;
pub mod patterns;
pub mod stripe;
pub mod view;

pub use datatype::{Datatype, TypeError};
pub use distribution::{Distrib, Order};
pub use flatten::{sort_and_coalesce, Regions, Run, Runs};
pub use patterns::Pattern;
pub use stripe::{ObjectExtent, Striping, StripingError};
pub use view::{pair, Segment, View, ViewError, ViewRegions};
