//! Weft's wire format: frame header, codec and every message (floor 1, pure).
//!
//! This crate reads and writes bytes, never sockets, threads or clocks, so every
//! decoder can be round-tripped and fuzzed. It imports no other Weft crate.
//! Bad bytes give a typed [`DecodeError`], never a panic; every length is checked
//! against [`limits`] before anything is allocated.
//!
//! See `docs/protocol.md` for the byte layouts and the message exchanges.
#![forbid(unsafe_code)]

pub mod codec;
pub mod error;
pub mod header;
pub mod limits;
pub mod msg;
pub mod shard;

pub use codec::{Decoder, Encoder};
pub use error::{DecodeError, ErrorCode};
pub use header::{FrameKind, Header, HEADER_LEN, MAGIC, PROTOCOL_VERSION};
pub use msg::cap::{rights, CapKey, CapRefusal, Capability};
pub use msg::coll::{CollTag, Run};
pub use msg::data::{CpuKind, DataReq, Piece, ReadOrder, ServerStats, CPU_KINDS};
pub use msg::handshake::{Challenge, Hello, Proof, Secret};
pub use msg::lock::{lock_seal, Lease, LeaseRefusal, LockReq, WireExtent};
pub use msg::rails::{Grant, PartHead, RailToken, MAX_PARTS, RAIL_TOKEN_LEN};
pub use msg::replica::{DirMove, ReplicaOp};
pub use msg::meta::{AttrChange, Cred, DirEntry, FileAttr, FileKind, LayoutHint, MetaReq, PointerOp, StripeLayout, KEEP_ID, MAX_ATTR_CHANGES, MAX_GROUPS, TIME_NOW};
pub use msg::{Request, Response};

/// Identifies a file (a directory or a regular file) for its whole life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u64);

/// Identifies one server of a cluster (its index in the cluster file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId(pub u32);

/// Matches a response (or a rendezvous step) to the request that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgId(pub u64);
