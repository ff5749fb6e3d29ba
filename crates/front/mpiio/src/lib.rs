//! The Rust core of Weft's MPI-IO library (floor 8, front end).
//!
//! MPI programs reach Weft through `MPI_File_*` calls on `weft:/path`
//! names. The interposer is two parts: a C shim (`shim/`), compiled once per
//! MPI because MPI's handles and constants differ between MPICH and Open
//! MPI, which owns everything typed by `mpi.h` (handles, statuses, requests,
//! error handlers, info objects) and forwards every non-Weft file to the
//! MPI library's `PMPI_*`; and this crate, which owns every Weft decision
//! through plain C types: opening, views, file pointers, reads and writes,
//! hints. The C side decodes MPI datatypes into a flat program
//! ([`types`]) that becomes a `weft-layout` datatype here.
//!
//! Collective calls run over the file's duplicated communicator through
//! callbacks the shim provides ([`comm::CComm`], the client's
//! [`weft_client::Communicator`]). See `docs/mpiio.md`.
//!
//! This crate is one of the few where `unsafe` is allowed: it reads C
//! pointers handed over by the shim; each use says why it holds.
#![allow(unsafe_code)]

mod access;
pub mod comm;
pub mod errors;
mod ffi;
pub mod file;
pub mod hints;
pub mod memory;
pub mod posix;
mod posted;
pub mod registry;
pub mod types;

pub use errors::{Class, Fail};
