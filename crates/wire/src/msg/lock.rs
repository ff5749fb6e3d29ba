//! Lock-service messages (paper 004's lock server, with sessions).
//!
//! # Wire format
//! `LockReq`: `op u8 | session u64 | ...`.
//! An extent is `1 | start u64 | end u64` (a byte range) or
//! `2 | offset u64 | len u64 | stride u64 | count u64` (a strided run,
//! checked and stored as one item).

use crate::limits::MAX_LOCK_EXTENTS;
use crate::{Capability, DecodeError, Decoder, Encoder, FileId};

/// One locked region as it travels: a range or a strided run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireExtent {
    Range { start: u64, end: u64 },
    Strided { offset: u64, len: u64, stride: u64, count: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockReq {
    /// Waits until all `extents` are granted (or `wait_ms` passes); answered
    /// with `Locked { lock }`. `cap` must allow reading or writing `file`
    /// (checked by the server's gate: no one locks a file it cannot open).
    Acquire { session: u64, file: FileId, cap: Capability, exclusive: bool, wait_ms: u32, extents: Vec<WireExtent> },
    Release { session: u64, file: FileId, lock: u64 },
    /// Keeps the session's locks alive for another time to live.
    Renew { session: u64 },
    /// Releases every lock of the session and forgets it.
    End { session: u64 },
}

impl LockReq {
    pub fn session(&self) -> u64 {
        match self {
            LockReq::Acquire { session, .. } | LockReq::Release { session, .. } | LockReq::Renew { session } | LockReq::End { session } => *session,
        }
    }

    pub fn encode(&self, e: &mut Encoder) {
        match self {
            LockReq::Acquire { session, file, cap, exclusive, wait_ms, extents } => {
                e.u8(1).u64(*session).u64(file.0);
                cap.encode(e);
                e.bool(*exclusive).u32(*wait_ms).u32(extents.len() as u32);
                for x in extents {
                    match *x {
                        WireExtent::Range { start, end } => {
                            e.u8(1).u64(start).u64(end);
                        }
                        WireExtent::Strided { offset, len, stride, count } => {
                            e.u8(2).u64(offset).u64(len).u64(stride).u64(count);
                        }
                    }
                }
            }
            LockReq::Release { session, file, lock } => {
                e.u8(2).u64(*session).u64(file.0).u64(*lock);
            }
            LockReq::Renew { session } => {
                e.u8(3).u64(*session);
            }
            LockReq::End { session } => {
                e.u8(4).u64(*session);
            }
        }
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let op = d.u8()?;
        let session = d.u64()?;
        Ok(match op {
            1 => {
                let file = FileId(d.u64()?);
                let cap = Capability::decode(d)?;
                let exclusive = d.bool()?;
                let wait_ms = d.u32()?;
                let n = d.count("lock extent list", MAX_LOCK_EXTENTS, 17)?;
                let mut extents = Vec::with_capacity(n);
                for _ in 0..n {
                    extents.push(match d.u8()? {
                        1 => WireExtent::Range { start: d.u64()?, end: d.u64()? },
                        2 => WireExtent::Strided { offset: d.u64()?, len: d.u64()?, stride: d.u64()?, count: d.u64()? },
                        t => return Err(DecodeError::BadTag { what: "lock extent", tag: t.into() }),
                    });
                }
                LockReq::Acquire { session, file, cap, exclusive, wait_ms, extents }
            }
            2 => LockReq::Release { session, file: FileId(d.u64()?), lock: d.u64()? },
            3 => LockReq::Renew { session },
            4 => LockReq::End { session },
            t => return Err(DecodeError::BadTag { what: "lock op", tag: t.into() }),
        })
    }
}
