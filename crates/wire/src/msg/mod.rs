//! Every request and response body, one file per service family.
//!
//! # Wire format
//! A request body is `tag u8 | fields`; a response body likewise. Tags are
//! stable; new ones are appended.

pub mod cap;
pub mod coll;
pub mod data;
pub mod handshake;
pub mod lock;
pub mod meta;
pub mod rails;
pub mod replica;

use crate::limits::{MAX_DIR_PAGE, MAX_ERROR_MSG, MAX_NAME_LEN, MAX_PAYLOAD_LEN};
use cap::Capability;
use crate::{DataReq, DecodeError, Decoder, Encoder, ErrorCode, FileAttr, FileId, ServerStats};
use lock::LockReq;
use meta::{Cred, DirEntry, MetaReq};

/// A request, as carried by a `Request` or `Rts` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Answered with `Ok`; measures the message layer's round trip.
    Ping,
    Meta { cred: Cred, op: MetaReq },
    /// Every data request carries a capability for its file.
    Data { cap: Capability, op: DataReq },
    /// Answered with `Stats`.
    Status,
    /// The payload is read and dropped: measures streaming without a disk.
    Sink,
    /// Answered with `len` bytes of payload: streaming in the other direction.
    Source { len: u32 },
    Lock(LockReq),
}

/// A response, as carried by a `Response` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Ok,
    Error { code: ErrorCode, message: String },
    Attr(FileAttr),
    Entries { entries: Vec<DirEntry>, more: bool },
    /// A rename; `replaced` is the file the rename overwrote, whose objects
    /// the client then deletes (with the capability to).
    Renamed { replaced: Option<(FileAttr, Capability)> },
    Written { bytes: u64 },
    /// The payload holds the requested pieces; `object_size` lets the client
    /// find the end of file without another round trip.
    Read { object_size: u64 },
    Size { object_size: u64 },
    /// Boxed: the largest answer by far, and rare; every other answer
    /// moves through both sides' queues at its size.
    Stats(Box<ServerStats>),
    /// A granted lock, and the session's lease as it stands (writes under
    /// the lock carry it: see [`lock::Lease`]).
    /// `seal`: what a reclaim of the lock after a restart of the
    /// service shows ([`lock::lock_seal`]).
    Locked { lock: u64, lease: lock::Lease, seal: [u8; 32] },
    /// A lock session renewed: its lease as it stands now.
    Leased(lock::Lease),
    /// A shared file pointer's value before the operation.
    Pointer { value: u64 },
    /// A symbolic link's target.
    Link { target: String },
    /// Attributes and, when known without asking the data servers, the
    /// size; else (a file) a capability to ask them.
    Stat { attr: FileAttr, size: Option<u64>, cap: Option<Capability> },
    /// A close left no writer: measure the file's size and send it with
    /// `SetSize` and this epoch. `sole`: the closing handle's write open
    /// was the only one since the file last had no writer, so a handle
    /// that knows the size exactly (it made the file and saw every change)
    /// may send that instead of asking the data servers.
    Measure { epoch: u64, sole: bool },
    /// A file opened, created or removed, and the capability its data
    /// requests carry.
    Granted { attr: FileAttr, cap: Capability },
    /// A fresh capability (`MetaReq::Capability`).
    Cap(Capability),
    /// Not this metadata shard's: ask shard `shard` of `shards`; the
    /// path's parent directory has id `parent` (for the client's cache).
    Route { shard: u32, shards: u32, parent: FileId },
    /// A shard applied a pushed directory change by refusing it (a `Mark`
    /// of a directory it keeps entries of, an `Adopt` rename(2) would
    /// refuse): unlike `Error`, the change counts as taken.
    Refused { code: ErrorCode, message: String },
    /// A lend's descriptor was sent over the connection before this answer:
    /// it is of the object with this device and inode number (`fstat`), so
    /// the client takes that one whatever else came before it.
    Lent { dev: u64, ino: u64 },
    /// An unlink: the directory's times moved to `at_ns` (the service's
    /// clock), so a mount knows them without asking. `file` is the file
    /// whose last name it was, inside the service only (its objects are
    /// the service's to delete); a client is sent `None`.
    Unlinked { file: Option<FileAttr>, at_ns: i64 },
}

impl Request {
    /// A data request carrying `cap`.
    pub fn data(cap: Capability, op: DataReq) -> Self {
        Request::Data { cap, op }
    }

    /// Whether the server only copies this request's payload (into a file,
    /// or nowhere) and decides nothing on its bytes: only such a payload
    /// may be placed in a shared area the client can still change
    /// (`FrameKind::Placed`).
    pub fn payload_is_opaque(&self) -> bool {
        match self {
            Request::Sink => true,
            Request::Data { op, .. } => matches!(op, DataReq::Write { .. } | DataReq::LeasedWrite { .. } | DataReq::CollWrite { .. }),
            _ => false,
        }
    }

    /// Bytes the decoded request holds that its encoding did not: a
    /// collective's pieces, sent as compact runs, expand to up to
    /// `MAX_PIECES` of them (about 1 MiB) from a body of a few dozen
    /// bytes. Every other list decodes to about its encoded size. A server
    /// charges these to its memory budget.
    pub fn expanded_bytes(&self) -> usize {
        match self {
            Request::Data { op: DataReq::CollWrite { pieces, .. } | DataReq::CollRead { pieces, .. }, .. } => std::mem::size_of_val(pieces.as_slice()),
            _ => 0,
        }
    }

    /// Whether sending this request again, when its connection broke
    /// before the answer (the server may or may not have applied it),
    /// leaves what one send would: reads, positioned writes, truncates,
    /// attribute settings, read-only opens and renewals. A resend comes
    /// before the call returns, so a change another client made meanwhile
    /// was concurrent with it, and either order is one POSIX allows. A
    /// client riding through a server's restart resends only these (and
    /// requests that were never sent). Namespace changes are, when tagged
    /// (`MetaReq::Once`): the service answers a resend from the answer it
    /// kept. A write open is: applied twice it leaves one writer more
    /// counted, so stat asks the data servers (correct, slower), never a
    /// wrong size. A shared pointer's set, release and add of 0 (its
    /// position asked) are (a set creates the pointer a reboot forgot).
    /// Not: untagged creates, directory and name changes and deletions,
    /// closes (a second one would leave a writer uncounted), an untagged
    /// fetch-and-add of more than 0, collectives, locks.
    pub fn is_idempotent(&self) -> bool {
        match self {
            Request::Ping | Request::Status | Request::Sink | Request::Source { .. } => true,
            Request::Data { op, .. } => matches!(op, DataReq::Write { .. } | DataReq::LeasedWrite { .. } | DataReq::Read { .. } | DataReq::Size { .. } | DataReq::Truncate { .. } | DataReq::Fsync { .. }),
            Request::Meta { op, .. } => matches!(
                op,
                MetaReq::Stat { .. }
                    | MetaReq::StatSize { .. }
                    | MetaReq::StatId { .. }
                    | MetaReq::Open { .. }
                    | MetaReq::Readdir { .. }
                    | MetaReq::ReaddirShard { .. }
                    | MetaReq::Readlink { .. }
                    | MetaReq::Chmod { .. }
                    | MetaReq::Chown { .. }
                    | MetaReq::SetTimes { .. }
                    | MetaReq::Change { .. }
                    | MetaReq::SetSize { .. }
                    | MetaReq::Renew { .. }
                    | MetaReq::Sync
                    | MetaReq::Once { .. }
                    | MetaReq::SharedPointer { op: crate::PointerOp::Set(_) | crate::PointerOp::Release | crate::PointerOp::FetchAdd(0), .. }
            ),
            Request::Lock(_) => false,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        match self {
            Request::Ping => {
                e.u8(1);
            }
            Request::Meta { cred, op } => {
                e.u8(2);
                cred.encode(&mut e);
                op.encode(&mut e);
            }
            Request::Data { cap, op } => {
                e.u8(3);
                cap.encode(&mut e);
                op.encode(&mut e);
            }
            Request::Status => {
                e.u8(4);
            }
            Request::Sink => {
                e.u8(5);
            }
            Request::Source { len } => {
                e.u8(6).u32(*len);
            }
            Request::Lock(op) => {
                e.u8(7);
                op.encode(&mut e);
            }
        }
        e.finish()
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(b);
        let r = match d.u8()? {
            1 => Request::Ping,
            2 => {
                let cred = Cred::decode(&mut d)?;
                Request::Meta { cred, op: MetaReq::decode(&mut d)? }
            }
            3 => Request::Data { cap: Capability::decode(&mut d)?, op: DataReq::decode(&mut d)? },
            4 => Request::Status,
            5 => Request::Sink,
            6 => {
                let len = d.u32()?;
                if len > MAX_PAYLOAD_LEN {
                    return Err(DecodeError::TooLong { what: "source", len: len.into(), limit: MAX_PAYLOAD_LEN.into() });
                }
                Request::Source { len }
            }
            7 => Request::Lock(LockReq::decode(&mut d)?),
            t => return Err(DecodeError::BadTag { what: "request", tag: t.into() }),
        };
        d.finish()?;
        Ok(r)
    }
}

impl Response {
    /// An error response; the message is cut to [`MAX_ERROR_MSG`] bytes.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MAX_ERROR_MSG {
            let mut cut = MAX_ERROR_MSG;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        Response::Error { code, message }
    }

    pub fn encode(&self) -> Vec<u8> {
        self.encode_onto(Vec::new())
    }

    /// [`Response::encode`] appended to `buf`, which it returns.
    pub fn encode_onto(&self, buf: Vec<u8>) -> Vec<u8> {
        let mut e = Encoder::onto(buf);
        match self {
            Response::Ok => {
                e.u8(1);
            }
            Response::Error { code, message } => {
                e.u8(2).u16(*code as u16).str(message);
            }
            Response::Attr(a) => {
                e.u8(3);
                a.encode(&mut e);
            }
            Response::Entries { entries, more } => {
                e.u8(4).u32(entries.len() as u32);
                for ent in entries {
                    e.str(&ent.name);
                    ent.attr.encode(&mut e);
                    // 0: no size, 1: a size, 2: kept by another shard.
                    match (ent.size, ent.elsewhere) {
                        (_, true) => e.u8(2),
                        (Some(s), false) => e.u8(1).u64(s),
                        (None, false) => e.u8(0),
                    };
                }
                e.bool(*more);
            }
            Response::Renamed { replaced } => {
                e.u8(5);
                match replaced {
                    None => {
                        e.u8(0);
                    }
                    Some((a, cap)) => {
                        e.u8(1);
                        a.encode(&mut e);
                        cap.encode(&mut e);
                    }
                }
            }
            Response::Written { bytes } => {
                e.u8(6).u64(*bytes);
            }
            Response::Read { object_size } => {
                e.u8(7).u64(*object_size);
            }
            Response::Size { object_size } => {
                e.u8(8).u64(*object_size);
            }
            Response::Stats(s) => {
                e.u8(9);
                s.encode(&mut e);
            }
            Response::Locked { lock, lease, seal } => {
                e.u8(10).u64(*lock);
                lease.encode(&mut e);
                e.raw(seal);
            }
            Response::Leased(lease) => {
                e.u8(19);
                lease.encode(&mut e);
            }
            Response::Pointer { value } => {
                e.u8(11).u64(*value);
            }
            Response::Link { target } => {
                e.u8(12).str(target);
            }
            Response::Measure { epoch, sole } => {
                e.u8(14).u64(*epoch).bool(*sole);
            }
            Response::Stat { attr, size, cap } => {
                e.u8(13);
                attr.encode(&mut e);
                match size {
                    Some(s) => e.u8(1).u64(*s),
                    None => e.u8(0),
                };
                match cap {
                    Some(c) => {
                        e.u8(1);
                        c.encode(&mut e);
                    }
                    None => {
                        e.u8(0);
                    }
                }
            }
            Response::Granted { attr, cap } => {
                e.u8(15);
                attr.encode(&mut e);
                cap.encode(&mut e);
            }
            Response::Cap(cap) => {
                e.u8(16);
                cap.encode(&mut e);
            }
            Response::Route { shard, shards, parent } => {
                e.u8(17).u32(*shard).u32(*shards).u64(parent.0);
            }
            Response::Refused { code, message } => {
                e.u8(18).u16(*code as u16).str(message);
            }
            Response::Lent { dev, ino } => {
                e.u8(20).u64(*dev).u64(*ino);
            }
            Response::Unlinked { file, at_ns } => {
                e.u8(21).i64(*at_ns).bool(file.is_some());
                if let Some(a) = file {
                    a.encode(&mut e);
                }
            }
        }
        e.finish()
    }

    /// Whether the encoded response `body` is the error `Stopping` (read
    /// without decoding the rest: clients look at every answer for it).
    pub fn says_stopping(body: &[u8]) -> bool {
        let mut d = Decoder::new(body);
        d.u8() == Ok(2) && d.u16() == Ok(ErrorCode::Stopping as u16)
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(b);
        let r = match d.u8()? {
            1 => Response::Ok,
            2 => {
                let raw = d.u16()?;
                let code = ErrorCode::from_u16(raw).ok_or(DecodeError::BadTag { what: "error code", tag: raw.into() })?;
                Response::Error { code, message: d.str("error message", MAX_ERROR_MSG)? }
            }
            3 => Response::Attr(FileAttr::decode(&mut d)?),
            4 => {
                let n = d.count("directory page", MAX_DIR_PAGE, 8)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = d.str("name", MAX_NAME_LEN)?;
                    let attr = FileAttr::decode(&mut d)?;
                    let (size, elsewhere) = match d.u8()? {
                        0 => (None, false),
                        1 => (Some(d.u64()?), false),
                        2 => (None, true),
                        t => return Err(DecodeError::BadTag { what: "directory entry's size", tag: t.into() }),
                    };
                    entries.push(DirEntry { name, attr, size, elsewhere });
                }
                Response::Entries { entries, more: d.bool()? }
            }
            5 => Response::Renamed { replaced: if d.bool()? { Some((FileAttr::decode(&mut d)?, Capability::decode(&mut d)?)) } else { None } },
            6 => Response::Written { bytes: d.u64()? },
            7 => Response::Read { object_size: d.u64()? },
            8 => Response::Size { object_size: d.u64()? },
            9 => Response::Stats(Box::new(ServerStats::decode(&mut d)?)),
            10 => Response::Locked { lock: d.u64()?, lease: lock::Lease::decode(&mut d)?, seal: d.fixed()? },
            19 => Response::Leased(lock::Lease::decode(&mut d)?),
            11 => Response::Pointer { value: d.u64()? },
            12 => Response::Link { target: d.str("link target", crate::limits::MAX_LINK_TARGET_LEN)? },
            13 => {
                let attr = FileAttr::decode(&mut d)?;
                let size = if d.bool()? { Some(d.u64()?) } else { None };
                let cap = if d.bool()? { Some(Capability::decode(&mut d)?) } else { None };
                Response::Stat { attr, size, cap }
            }
            14 => Response::Measure { epoch: d.u64()?, sole: d.bool()? },
            15 => Response::Granted { attr: FileAttr::decode(&mut d)?, cap: Capability::decode(&mut d)? },
            16 => Response::Cap(Capability::decode(&mut d)?),
            17 => {
                let (shard, shards, parent) = (d.u32()?, d.u32()?, FileId(d.u64()?));
                if shards == 0 || shard >= shards {
                    return Err(DecodeError::Invalid("a route names a shard outside the shard count"));
                }
                Response::Route { shard, shards, parent }
            }
            18 => {
                let raw = d.u16()?;
                let code = ErrorCode::from_u16(raw).ok_or(DecodeError::BadTag { what: "error code", tag: raw.into() })?;
                Response::Refused { code, message: d.str("error message", MAX_ERROR_MSG)? }
            }
            20 => Response::Lent { dev: d.u64()?, ino: d.u64()? },
            21 => {
                let at_ns = d.i64()?;
                Response::Unlinked { at_ns, file: if d.bool()? { Some(FileAttr::decode(&mut d)?) } else { None } }
            }
            t => return Err(DecodeError::BadTag { what: "response", tag: t.into() }),
        };
        d.finish()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests;
