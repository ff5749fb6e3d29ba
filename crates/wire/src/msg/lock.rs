//! Lock-service messages (paper 004's lock server, with sessions).
//!
//! # Wire format
//! `LockReq`: `op u8 | session u64 | ...`; `Acquire` (1) and `Reclaim` (6)
//! go on with `file u64 | cap | exclusive u8 | wait_ms u32` (Acquire) or
//! `lock u64 | seal[32]` (Reclaim) `| count u32 | extents`.
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
    /// Starts a session (or renews it, if live); the only request a
    /// session unknown to the service may make (any other is answered
    /// `LeaseExpired`: after a restart of the lock service, its clients'
    /// sessions are unknown, and their locks gone).
    Start { session: u64 },
    /// Releases every lock of the session and forgets it.
    End { session: u64 },
    /// Takes back lock `lock` that the session held before the lock
    /// service restarted, under its old id: granted only during the grace
    /// after a restart (when no other lock is granted), only with the
    /// `seal` the grant carried (see [`lock_seal`]: nobody reclaims a
    /// lock it was not granted), and only if no lock reclaimed before
    /// conflicts; else `LeaseExpired`. The session must have been started
    /// again (`Start`). `cap` as for `Acquire`.
    Reclaim { session: u64, file: FileId, cap: Capability, exclusive: bool, lock: u64, seal: [u8; 32], extents: Vec<WireExtent> },
}

impl LockReq {
    pub fn session(&self) -> u64 {
        match self {
            LockReq::Acquire { session, .. } | LockReq::Release { session, .. } | LockReq::Renew { session } | LockReq::End { session } | LockReq::Start { session } => *session,
            LockReq::Reclaim { session, .. } => *session,
        }
    }

    pub fn encode(&self, e: &mut Encoder) {
        match self {
            LockReq::Acquire { session, file, cap, exclusive, wait_ms, extents } => {
                e.u8(1).u64(*session).u64(file.0);
                cap.encode(e);
                e.bool(*exclusive).u32(*wait_ms);
                encode_extents(e, extents);
            }
            LockReq::Reclaim { session, file, cap, exclusive, lock, seal, extents } => {
                e.u8(6).u64(*session).u64(file.0);
                cap.encode(e);
                e.bool(*exclusive).u64(*lock).raw(seal);
                encode_extents(e, extents);
            }
            LockReq::Release { session, file, lock } => {
                e.u8(2).u64(*session).u64(file.0).u64(*lock);
            }
            LockReq::Renew { session } => {
                e.u8(3).u64(*session);
            }
            LockReq::Start { session } => {
                e.u8(5).u64(*session);
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
                LockReq::Acquire { session, file, cap, exclusive, wait_ms, extents: decode_extents(d)? }
            }
            6 => {
                let file = FileId(d.u64()?);
                let cap = Capability::decode(d)?;
                let exclusive = d.bool()?;
                let lock = d.u64()?;
                let seal = d.fixed()?;
                LockReq::Reclaim { session, file, cap, exclusive, lock, seal, extents: decode_extents(d)? }
            }
            2 => LockReq::Release { session, file: FileId(d.u64()?), lock: d.u64()? },
            3 => LockReq::Renew { session },
            4 => LockReq::End { session },
            5 => LockReq::Start { session },
            t => return Err(DecodeError::BadTag { what: "lock op", tag: t.into() }),
        })
    }
}

/// The seal of a granted lock, which a `Locked` answer carries and a
/// `Reclaim` must show: `blake3_keyed(key, "weft lock" | len u64 |
/// session u64 | file u64 | lock u64 | exclusive u8 | count u32 |
/// extents)`, the extents as the service checked them.
pub fn lock_seal(key: &crate::CapKey, session: u64, file: FileId, lock: u64, exclusive: bool, extents: &[WireExtent]) -> [u8; 32] {
    let mut e = Encoder::new();
    e.u64(session).u64(file.0).u64(lock).bool(exclusive);
    encode_extents(&mut e, extents);
    key.mac_of(b"weft lock", &e.finish())
}

fn encode_extents(e: &mut Encoder, extents: &[WireExtent]) {
    e.u32(extents.len() as u32);
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

fn decode_extents(d: &mut Decoder<'_>) -> Result<Vec<WireExtent>, DecodeError> {
    let n = d.count("lock extent list", MAX_LOCK_EXTENTS, 17)?;
    let mut extents = Vec::with_capacity(n);
    for _ in 0..n {
        extents.push(match d.u8()? {
            1 => WireExtent::Range { start: d.u64()?, end: d.u64()? },
            2 => WireExtent::Strided { offset: d.u64()?, len: d.u64()?, stride: d.u64()?, count: d.u64()? },
            t => return Err(DecodeError::BadTag { what: "lock extent", tag: t.into() }),
        });
    }
    Ok(extents)
}

/// Why a data server refuses a [`Lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseRefusal {
    /// Not sealed with the cluster's key (made up, or changed).
    Forged { session: u64 },
    /// Its time passed: the session's locks may be another client's now.
    RanOut { session: u64, ago_ms: u64 },
}

impl std::fmt::Display for LeaseRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseRefusal::Forged { session } => write!(f, "the lease of lock session {session:#x} was not issued by this cluster's lock service"),
            LeaseRefusal::RanOut { session, ago_ms } => write!(f, "the lease of lock session {session:#x} ran out {ago_ms} ms ago: its locks may be another client's now, so this write is refused"),
        }
    }
}

/// Proof that lock session `session`'s lease runs until `until_ms` (Unix
/// time in milliseconds, by the lock server's clock, less a margin):
/// issued by the lock server with every grant and renewal, sealed with
/// the servers' capability key, and carried by writes made under the
/// session's locks (`DataReq::LeasedWrite`). A data server refuses such a
/// write once `until_ms` has passed by its own clock: a client that was
/// paused past its lease (its locks since granted to others) cannot write
/// into their bytes (fencing).
///
/// Wire: `session u64 | until_ms u64 | mac[32]`, with `mac =
/// blake3_keyed(key, "weft lease" | len u64 | session | until_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub session: u64,
    pub until_ms: u64,
    pub mac: [u8; 32],
}

impl Lease {
    fn signed(session: u64, until_ms: u64) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&session.to_le_bytes());
        b[8..].copy_from_slice(&until_ms.to_le_bytes());
        b
    }

    /// A lease sealed with `key`.
    pub fn issue(key: &crate::CapKey, session: u64, until_ms: u64) -> Self {
        Lease { session, until_ms, mac: key.mac_of(b"weft lease", &Self::signed(session, until_ms)) }
    }

    /// Whether this lease was sealed with `key` and runs past `now_ms`.
    pub fn check(&self, key: &crate::CapKey, now_ms: u64) -> Result<(), LeaseRefusal> {
        let want = key.mac_of(b"weft lease", &Self::signed(self.session, self.until_ms));
        if blake3::Hash::from(want) != blake3::Hash::from(self.mac) {
            return Err(LeaseRefusal::Forged { session: self.session });
        }
        if now_ms >= self.until_ms {
            return Err(LeaseRefusal::RanOut { session: self.session, ago_ms: now_ms - self.until_ms });
        }
        Ok(())
    }

    pub fn encode(&self, e: &mut Encoder) {
        e.u64(self.session).u64(self.until_ms).raw(&self.mac);
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(Lease { session: d.u64()?, until_ms: d.u64()?, mac: d.fixed()? })
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CapKey, Secret};

    #[test]
    fn a_lease_holds_until_its_time_and_only_as_issued() {
        let key = CapKey::derive(&Secret::new(*b"0123456789abcdef"));
        let l = Lease::issue(&key, 7, 1_000);
        assert_eq!(l.check(&key, 999), Ok(()));
        assert_eq!(l.check(&key, 1_000), Err(LeaseRefusal::RanOut { session: 7, ago_ms: 0 }));
        let later = Lease { until_ms: 5_000, ..l };
        assert_eq!(later.check(&key, 2_000), Err(LeaseRefusal::Forged { session: 7 }), "a lease made longer by its holder");
        let other = Lease { session: 8, ..l };
        assert_eq!(other.check(&key, 0), Err(LeaseRefusal::Forged { session: 8 }), "another session's lease");
        let elsewhere = CapKey::derive(&Secret::new(*b"fedcba9876543210"));
        assert!(l.check(&elsewhere, 0).is_err(), "another cluster's");
        let mut e = Encoder::new();
        l.encode(&mut e);
        let b = e.finish();
        assert_eq!(Lease::decode(&mut Decoder::new(&b)).unwrap(), l);
    }
}
