//! The fixed 24-byte frame header.
//!
//! ```text
//!  0        4     5      6        8                16          20          24
//!  +--------+-----+------+--------+----------------+-----------+-----------+
//!  | magic  | ver | kind | flags  |     msg_id     | body_len  |  pay_len  |
//!  | u32 LE | u8  | u8   | u16 LE |     u64 LE     |  u32 LE   |  u32 LE   |
//!  +--------+-----+------+--------+----------------+-----------+-----------+
//! ```
//! The header is followed by `body_len` bytes of encoded message and then
//! `pay_len` bytes of bulk payload, except in a rendezvous `Rts` frame, whose
//! `pay_len` announces a payload that a later `Data` frame carries.

use crate::limits::{MAX_BODY_LEN, MAX_PAYLOAD_LEN};
use crate::{DecodeError, MsgId};

/// "WEFT" read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"WEFT");
/// Bumped on any incompatible change of header, handshake or message
/// encoding. 2: challenge-response handshake. 3: shared file pointers
/// (meta op 11, response 11), CPU and disk fields in server stats.
/// 4: symbolic links (file kind 3, meta ops 12-13, response 12), SetTimes
/// (meta op 14). 5: server-directed collectives. 6: capabilities on data
/// requests, the MUNGE handshake. 7: link counts in `FileAttr`, error
/// code 16 (TooLarge). 8: changes and stats by file id (meta ops 19-20),
/// FIFOs, sockets and hard links (file kinds 4-5, meta ops 21-22, error
/// code 17). 9: Sync (meta op 23). 10: metadata shards (meta ops 24-25,
/// response 17, error code 18). 11: Refused (response 18), Touch
/// (replica op 7). 12: directory renames on shards (replica ops 8-10).
/// 13: `Renew` carries the path the file was opened by. 14: error code
/// 19 (`Stopping`). 15: hard links across shards (replica ops 11-12,
/// a listing's entry kept by another shard). 16: leases with every lock
/// grant (`Locked`, response 19 `Leased`), lock op 5 `Start`, fenced
/// writes (data op 9). 17: requests, latency and quota refusals by kind,
/// queue depth and shared-memory connections in server stats.
/// 18: removals carry no capability (the metadata service deletes a
/// removed file's objects itself): `Unlink` is answered `Ok`, `Rename`
/// `Renamed` with none. 19: namespace changes tagged to be answered once
/// (meta op 26 `Once`). 20: `Measure` says whether the closing handle
/// was the file's sole writer. 21: rails: `Cts` carries the granting
/// connection's rail token, `Part` frames (kind 10) carry pieces of a
/// granted payload over any connection of the same identity. 22: a
/// regular file's `Change` is answered `Stat` (with its size when known).
/// 23: lock op 6 `Reclaim` (locks taken back after a lock service restart)
/// and the grant's seal in `Locked`. 24: a shared pointer's `FetchAdd`
/// tagged in `Once` (answered once by the pointer table). 25: data op 10
/// `Lend` (an object's descriptor lent to a client on the node). 26:
/// 1-8 changes in one `Change`; `Unlink` answered `Unlinked` (response 21)
/// with its directory's new time. 27: `Close` carries the size a sole
/// writer knows (no `Measure` and `SetSize` after it). 28: the shared
/// area (a place in `Cts`, `Placed` frames). 29: replica op 13 `Unlink`
/// (a rename over a name of a file another shard keeps).
pub const PROTOCOL_VERSION: u8 = 29;
/// Size of an encoded [`Header`].
pub const HEADER_LEN: usize = 24;

/// What a frame is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// First frame of a connection, client to server.
    Hello = 1,
    /// The server's fresh nonce, answering a valid `Hello`.
    Challenge = 2,
    /// An eager request: body and payload in this frame.
    Request = 3,
    /// The answer to a request: body and (for reads) payload.
    Response = 4,
    /// Rendezvous request-to-send: body now, `pay_len` bytes later.
    Rts = 5,
    /// Rendezvous clear-to-send: the receiver has room for the payload.
    Cts = 6,
    /// Rendezvous data: the payload announced by an earlier `Rts`.
    Data = 7,
    /// The client's proof over both nonces, answering the `Challenge`.
    Proof = 8,
    /// The server's proof: the handshake succeeded.
    Welcome = 9,
    /// Rails: a piece of a payload granted on another (or this)
    /// connection, named by its `Cts`'s rail token and message id.
    Part = 10,
    /// Rendezvous data placed in the connection's shared area where the
    /// `Cts` said (shared memory only): a header, no body, no bytes.
    Placed = 11,
}

impl FrameKind {
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            1 => Self::Hello,
            2 => Self::Challenge,
            3 => Self::Request,
            4 => Self::Response,
            5 => Self::Rts,
            6 => Self::Cts,
            7 => Self::Data,
            8 => Self::Proof,
            9 => Self::Welcome,
            10 => Self::Part,
            11 => Self::Placed,
            _ => return Err(DecodeError::BadKind(v)),
        })
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: FrameKind,
    /// Reserved; sent as zero.
    pub flags: u16,
    pub msg_id: MsgId,
    pub body_len: u32,
    pub pay_len: u32,
}

impl Header {
    pub fn new(kind: FrameKind, msg_id: MsgId, body_len: usize, pay_len: usize) -> Self {
        debug_assert!(body_len <= MAX_BODY_LEN as usize && pay_len <= MAX_PAYLOAD_LEN as usize);
        Header { kind, flags: 0, msg_id, body_len: body_len as u32, pay_len: pay_len as u32 }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = PROTOCOL_VERSION;
        b[5] = self.kind as u8;
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.msg_id.0.to_le_bytes());
        b[16..20].copy_from_slice(&self.body_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.pay_len.to_le_bytes());
        b
    }

    /// Decodes and checks a header: magic, version, kind and both limits.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < HEADER_LEN {
            return Err(DecodeError::Truncated { need: HEADER_LEN, have: b.len() });
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        if b[4] != PROTOCOL_VERSION {
            return Err(DecodeError::BadVersion { got: b[4], want: PROTOCOL_VERSION });
        }
        let kind = FrameKind::from_u8(b[5])?;
        let flags = u16::from_le_bytes([b[6], b[7]]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&b[8..16]);
        let body_len = u32_at(16);
        let pay_len = u32_at(20);
        if body_len > MAX_BODY_LEN {
            return Err(DecodeError::TooLong { what: "body", len: body_len.into(), limit: MAX_BODY_LEN.into() });
        }
        if pay_len > MAX_PAYLOAD_LEN {
            return Err(DecodeError::TooLong { what: "payload", len: pay_len.into(), limit: MAX_PAYLOAD_LEN.into() });
        }
        Ok(Header { kind, flags, msg_id: MsgId(u64::from_le_bytes(id)), body_len, pay_len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn header_round_trips(kind in 1u8..=9, id: u64, body in 0..=MAX_BODY_LEN, pay in 0..=MAX_PAYLOAD_LEN) {
            let h = Header::new(FrameKind::from_u8(kind).unwrap(), MsgId(id), body as usize, pay as usize);
            prop_assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Header::decode(&bytes);
        }
    }

    #[test]
    fn oversized_lengths_are_rejected() {
        let mut b = Header::new(FrameKind::Request, MsgId(1), 0, 0).encode();
        b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Header::decode(&b), Err(DecodeError::TooLong { what: "body", .. })));
        let mut b = Header::new(FrameKind::Request, MsgId(1), 0, 0).encode();
        b[20..24].copy_from_slice(&(MAX_PAYLOAD_LEN + 1).to_le_bytes());
        assert!(matches!(Header::decode(&b), Err(DecodeError::TooLong { what: "payload", .. })));
    }

    #[test]
    fn wrong_version_and_magic_are_rejected() {
        let mut b = Header::new(FrameKind::Hello, MsgId(0), 0, 0).encode();
        b[4] = PROTOCOL_VERSION + 1;
        assert_eq!(Header::decode(&b), Err(DecodeError::BadVersion { got: PROTOCOL_VERSION + 1, want: PROTOCOL_VERSION }));
        b[0] = b'X';
        assert!(matches!(Header::decode(&b), Err(DecodeError::BadMagic(_))));
    }
}
