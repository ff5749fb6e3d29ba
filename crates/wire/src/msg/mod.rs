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
}

impl Request {
    /// A data request carrying `cap`.
    pub fn data(cap: Capability, op: DataReq) -> Self {
        Request::Data { cap, op }
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
    /// wrong size. Not: untagged creates, directory and name changes and
    /// deletions, closes (a second one would leave a writer uncounted),
    /// shared pointers, collectives, locks.
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
        let mut e = Encoder::new();
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
            t => return Err(DecodeError::BadTag { what: "response", tag: t.into() }),
        };
        d.finish()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::data::Piece;
    use crate::msg::meta::{AttrChange, FileKind, LayoutHint, PointerOp, StripeLayout};
    use crate::{FileId, ServerId};
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9_.é-]{0,20}"
    }

    fn attr() -> impl Strategy<Value = FileAttr> {
        (any::<u64>(), 0u8..5, any::<u32>(), any::<i64>(), 1u64..=crate::limits::MAX_STRIPE_SIZE, proptest::collection::vec(any::<u32>(), 1..8))
            .prop_map(|(id, k, mode, t, ss, srv)| FileAttr {
                id: FileId(id),
                kind: [FileKind::File, FileKind::Dir, FileKind::Symlink, FileKind::Fifo, FileKind::Socket][k as usize],
                mode,
                uid: mode / 3,
                gid: mode / 5,
                mtime_ns: t,
                ctime_ns: t / 2,
                nlink: mode % 7,
                layout: (k == 0).then(|| StripeLayout { stripe_size: ss, servers: srv.into_iter().map(ServerId).collect() }),
            })
    }

    fn cap() -> impl Strategy<Value = Capability> {
        (any::<u64>(), 0..=cap::rights::ALL, any::<u64>(), any::<[u8; 32]>()).prop_map(|(f, rights, expires, mac)| Capability { file: FileId(f), rights, expires, mac })
    }

    fn pieces() -> impl Strategy<Value = Vec<Piece>> {
        // Totals stay within one payload, as the decoder demands.
        proptest::collection::vec((0u64..1 << 50, 0u64..=u64::from(MAX_PAYLOAD_LEN) / 20).prop_map(|(offset, len)| Piece { offset, len }), 0..20)
    }

    /// Plain requests, and the changes among them tagged (`Once`).
    fn meta_req() -> impl Strategy<Value = MetaReq> {
        prop_oneof![
            4 => untagged_meta_req(),
            1 => (any::<u64>(), any::<u64>(), untagged_meta_req().prop_filter("a change", MetaReq::answered_once)).prop_map(|(client, seq, op)| MetaReq::Once { client, seq, op: Box::new(op) }),
        ]
    }

    fn untagged_meta_req() -> impl Strategy<Value = MetaReq> {
        prop_oneof![
            (name(), any::<u32>(), any::<bool>(), 0..=crate::limits::MAX_STRIPE_SIZE, 0..=crate::limits::MAX_STRIPE_COUNT as u32).prop_map(|(path, mode, exclusive, s, c)| {
                MetaReq::Create { path, mode, exclusive, hint: LayoutHint { stripe_size: s, stripe_count: c } }
            }),
            (name(), any::<u32>()).prop_map(|(path, mode)| MetaReq::Mkdir { path, mode }),
            name().prop_map(|path| MetaReq::Stat { path }),
            (name(), any::<bool>()).prop_map(|(path, write)| MetaReq::Open { path, write }),
            (name(), name(), 0u32..=MAX_DIR_PAGE as u32).prop_map(|(path, after, max)| MetaReq::Readdir { path, after, max }),
            name().prop_map(|path| MetaReq::Unlink { path }),
            name().prop_map(|path| MetaReq::Rmdir { path }),
            (name(), name()).prop_map(|(from, to)| MetaReq::Rename { from, to }),
            (name(), any::<u32>()).prop_map(|(path, mode)| MetaReq::Chmod { path, mode }),
            (name(), any::<u32>(), any::<u32>()).prop_map(|(path, uid, gid)| MetaReq::Chown { path, uid, gid }),
            (any::<u64>(), any::<u64>(), 0u8..3).prop_map(|(token, v, k)| MetaReq::SharedPointer {
                token,
                op: [PointerOp::Set(v), PointerOp::FetchAdd(v), PointerOp::Release][k as usize],
            }),
            (name(), "[ -~]{1,40}").prop_map(|(path, target)| MetaReq::Symlink { path, target }),
            name().prop_map(|path| MetaReq::Readlink { path }),
            (name(), any::<i64>()).prop_map(|(path, mtime_ns)| MetaReq::SetTimes { path, mtime_ns }),
            name().prop_map(|path| MetaReq::StatSize { path }),
            (any::<u64>(), any::<bool>()).prop_map(|(f, wrote)| MetaReq::Close { file: FileId(f), wrote }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(f, epoch, size)| MetaReq::SetSize { file: FileId(f), epoch, size }),
            (cap(), name()).prop_map(|(old, path)| MetaReq::Renew { old, path }),
            any::<u64>().prop_map(|f| MetaReq::StatId { file: FileId(f) }),
            (name(), any::<u32>(), any::<bool>()).prop_map(|(path, mode, fifo)| MetaReq::Mknod { path, mode, kind: if fifo { FileKind::Fifo } else { FileKind::Socket } }),
            (name(), name()).prop_map(|(from, to)| MetaReq::Link { from, to }),
            Just(MetaReq::Sync),
            (name(), name(), 0u32..=MAX_DIR_PAGE as u32, 1u32..64).prop_map(|(path, after, max, shards)| MetaReq::ReaddirShard { path, after, max, shards }),
            (any::<u32>(), any::<u64>(), any::<u64>(), any::<[u8; 32]>()).prop_map(|(coord, seq, dir, mac)| MetaReq::Replica { coord, seq, op: Box::new(replica::ReplicaOp::Mark { dir: FileId(dir) }), mac }),
            (any::<u64>(), 0u8..3, any::<u32>(), any::<i64>()).prop_map(|(f, k, v, t)| MetaReq::Change {
                file: FileId(f),
                change: [AttrChange::Mode(v), AttrChange::Owner { uid: v, gid: v / 3 }, AttrChange::Mtime(t)][k as usize],
            }),
        ]
    }

    fn request() -> impl Strategy<Value = Request> {
        prop_oneof![
            Just(Request::Ping),
            Just(Request::Status),
            Just(Request::Sink),
            (0..=MAX_PAYLOAD_LEN).prop_map(|len| Request::Source { len }),
            (any::<u32>(), any::<u32>(), proptest::collection::vec(any::<u32>(), 0..=crate::msg::meta::MAX_GROUPS), meta_req())
                .prop_map(|(uid, gid, groups, op)| Request::Meta { cred: Cred::with_groups(uid, gid, &groups), op }),
            (any::<u64>(), pieces(), cap()).prop_map(|(f, pieces, c)| Request::data(c, DataReq::Write { file: FileId(f), pieces })),
            (any::<u64>(), pieces(), cap(), any::<u64>()).prop_map(|(f, pieces, c, t)| Request::data(c, DataReq::LeasedWrite { file: FileId(f), pieces, lease: lock::Lease { session: f ^ t, until_ms: t, mac: [t as u8; 32] } })),
            (any::<u64>(), pieces(), any::<u8>(), 1u32..1000, any::<u32>()).prop_map(|(f, pieces, strategy, group, slot)| {
                let order = crate::msg::data::ReadOrder { strategy, rank: slot % group, group, slot };
                Request::data(Capability::none(FileId(0)), DataReq::Read { file: FileId(f), pieces, order })
            }),
            any::<u64>().prop_map(|f| Request::data(Capability::none(FileId(0)), DataReq::Size { file: FileId(f) })),
            (any::<u64>(), 0u64..1 << 62).prop_map(|(f, size)| Request::data(Capability::none(FileId(0)), DataReq::Truncate { file: FileId(f), size })),
            any::<u64>().prop_map(|f| Request::data(Capability::none(FileId(0)), DataReq::Fsync { file: FileId(f) })),
            any::<u64>().prop_map(|f| Request::data(Capability::none(FileId(0)), DataReq::Delete { file: FileId(f) })),
            (any::<u64>(), pieces(), any::<u64>(), 1u32..5000, any::<u32>(), any::<u32>(), any::<u8>()).prop_map(|(f, pieces, id, participants, member, round, flags)| {
                let tag = crate::CollTag { id, participants, member: member % participants, round, window: crate::msg::coll::MAX_WINDOW, last: flags & 1 != 0, abandon: flags & 2 != 0 };
                // Within the member's share, as the decoder demands.
                let pieces: Vec<_> = if pieces.iter().map(|p| p.len).sum::<u64>() <= tag.member_share() { pieces.into_iter().filter(|p| p.len > 0).collect() } else { Vec::new() };
                let file = FileId(f);
                Request::data(Capability::none(FileId(0)), if flags & 4 != 0 { DataReq::CollWrite { file, tag, pieces } } else { DataReq::CollRead { file, tag, pieces } })
            }),
            (any::<u64>(), any::<u64>(), any::<bool>(), any::<u32>(), proptest::collection::vec((any::<bool>(), any::<u64>(), any::<u64>()), 0..5)).prop_map(
                |(session, f, exclusive, wait_ms, xs)| {
                    let extents = xs
                        .into_iter()
                        .map(|(r, a, b)| if r { lock::WireExtent::Range { start: a, end: b } } else { lock::WireExtent::Strided { offset: a, len: b, stride: a ^ b, count: b / 3 } })
                        .collect();
                    if wait_ms % 3 == 0 {
                        Request::Lock(LockReq::Reclaim { session, file: FileId(f), cap: Capability::none(FileId(f)), exclusive, lock: u64::from(wait_ms) << 7, seal: [wait_ms as u8; 32], extents })
                    } else {
                        Request::Lock(LockReq::Acquire { session, file: FileId(f), cap: Capability::none(FileId(f)), exclusive, wait_ms, extents })
                    }
                }
            ),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(session, f, lock)| Request::Lock(LockReq::Release { session, file: FileId(f), lock })),
            any::<u64>().prop_map(|session| Request::Lock(LockReq::Renew { session })),
            any::<u64>().prop_map(|session| Request::Lock(LockReq::End { session })),
            any::<u64>().prop_map(|session| Request::Lock(LockReq::Start { session })),
        ]
    }

    fn response() -> impl Strategy<Value = Response> {
        prop_oneof![
            Just(Response::Ok),
            (0usize..ErrorCode::ALL.len(), "[ -~]{0,50}").prop_map(|(i, m)| Response::error(ErrorCode::ALL[i], m)),
            attr().prop_map(Response::Attr),
            (proptest::collection::vec((name(), attr()), 0..5), any::<bool>()).prop_map(|(v, more)| Response::Entries {
                entries: v.into_iter().map(|(name, attr)| DirEntry { size: attr.mtime_ns.is_positive().then_some(attr.id.0 >> 3), elsewhere: attr.mode & 1 == 1 && attr.mtime_ns <= 0, name, attr }).collect(),
                more
            }),
            proptest::option::of((attr(), cap())).prop_map(|replaced| Response::Renamed { replaced }),
            (attr(), cap()).prop_map(|(attr, cap)| Response::Granted { attr, cap }),
            cap().prop_map(Response::Cap),
            (1u32..64, any::<u32>(), any::<u64>()).prop_map(|(shards, s, p)| Response::Route { shard: s % shards, shards, parent: FileId(p) }),
            (0usize..ErrorCode::ALL.len(), "[ -~]{0,50}").prop_map(|(i, message)| Response::Refused { code: ErrorCode::ALL[i], message }),
            any::<u64>().prop_map(|bytes| Response::Written { bytes }),
            any::<u64>().prop_map(|object_size| Response::Read { object_size }),
            any::<u64>().prop_map(|object_size| Response::Size { object_size }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(lock, session, until_ms)| Response::Locked { lock, lease: lock::Lease { session, until_ms, mac: [session as u8; 32] }, seal: [lock as u8; 32] }),
            (any::<u64>(), any::<u64>()).prop_map(|(session, until_ms)| Response::Leased(lock::Lease { session, until_ms, mac: [until_ms as u8; 32] })),
            any::<u64>().prop_map(|value| Response::Pointer { value }),
            "[ -~]{1,40}".prop_map(|target| Response::Link { target }),
            (attr(), proptest::option::of(any::<u64>()), proptest::option::of(cap())).prop_map(|(attr, size, cap)| Response::Stat { attr, size, cap }),
            (any::<u64>(), any::<bool>()).prop_map(|(epoch, sole)| Response::Measure { epoch, sole }),
            (any::<u8>(), any::<u64>()).prop_map(|(services, n)| Response::Stats(Box::new(ServerStats {
                services,
                requests: n,
                bad_requests: n / 7,
                bytes_written: n / 2,
                bytes_read: n / 3,
                bytes_stored: n / 4,
                objects: n / 5,
                uptime_ms: n / 6,
                locks_held: n / 8,
                locks_waiting: n / 9,
                locks_granted: n / 10,
                lock_wait_us: n / 11,
                connections: n / 12,
                connection_limit: n / 13,
                memory_used: n / 14,
                memory_limit: n / 15,
                panics: n / 16,
                cpu_ns: [n / 17, n / 18, n / 19, n / 20, n / 21, n / 22],
                cpu_loop_ns: n / 23,
                disk_total: n / 24,
                disk_free: n / 25,
                coll_rounds: n / 26,
                coll_failed: n / 27,
                requests_by_kind: [n / 28, n / 29, n / 30, n / 31, n / 32, n / 33],
                latency_us_by_kind: [n / 34, n / 35, n / 36, n / 37, n / 38, n / 39],
                queue_depth: n / 40,
                quota_refusals: n / 41,
                shm_connections: n / 42,
            }))),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip(r in request()) {
            prop_assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }

        #[test]
        fn responses_round_trip(r in response()) {
            prop_assert_eq!(Response::decode(&r.encode()).unwrap(), r);
        }

        #[test]
        fn truncated_requests_are_errors_not_panics(r in request(), cut in any::<prop::sample::Index>()) {
            let b = r.encode();
            let n = cut.index(b.len());
            prop_assert!(Request::decode(&b[..n]).is_err());
        }

        #[test]
        fn random_bodies_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Request::decode(&b);
            let _ = Response::decode(&b);
        }
    }

    /// One mutation of an encoding: a byte changed, inserted or cut out, or
    /// four bytes made `u32::MAX` (a length or count gone huge).
    pub(crate) type Mutation = (prop::sample::Index, u8, u8);

    pub(crate) fn mutate(mut b: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
        for (at, byte, kind) in muts {
            match kind % 4 {
                0 if !b.is_empty() => {
                    let i = at.index(b.len());
                    b[i] ^= byte | 1;
                }
                1 => b.insert(at.index(b.len() + 1), *byte),
                2 if !b.is_empty() => {
                    b.remove(at.index(b.len()));
                }
                _ if b.len() >= 4 => {
                    let i = at.index(b.len() - 3);
                    b[i..i + 4].copy_from_slice(&u32::MAX.to_le_bytes());
                }
                _ => {}
            }
        }
        b
    }

    pub(crate) fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<u8>()), 1..6)
    }

    // Fuzzing by mutation (hostile input is normal input): valid encodings
    // of every message kind, changed. A decoder answers an error or a
    // message, never panics, and a message it decodes encodes to bytes that
    // decode to the same message. Bounded: a few thousand cases each.
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn mutated_requests_are_errors_or_messages(r in request(), muts in mutations()) {
            if let Ok(m) = Request::decode(&mutate(r.encode(), &muts)) {
                prop_assert_eq!(Request::decode(&m.encode()).unwrap(), m);
            }
        }

        #[test]
        fn mutated_responses_are_errors_or_messages(r in response(), muts in mutations()) {
            if let Ok(m) = Response::decode(&mutate(r.encode(), &muts)) {
                prop_assert_eq!(Response::decode(&m.encode()).unwrap(), m);
            }
        }
    }

    #[test]
    fn tags_only_wrap_namespace_changes_and_never_nest() {
        let cred = Cred::with_groups(1, 1, &[]);
        let tagged = |op: MetaReq| Request::Meta { cred, op: MetaReq::Once { client: 7, seq: 9, op: Box::new(op) } }.encode();
        let create = MetaReq::Create { path: "/a".into(), mode: 0o600, exclusive: true, hint: LayoutHint::default() };
        assert!(Request::decode(&tagged(create.clone())).is_ok());
        assert!(matches!(Request::decode(&tagged(MetaReq::Stat { path: "/a".into() })), Err(DecodeError::Invalid(_))));
        assert!(matches!(Request::decode(&tagged(MetaReq::Once { client: 1, seq: 2, op: Box::new(create) })), Err(DecodeError::Invalid(_))));
        // Deeply nested tags are refused at the second, not by recursing
        // through them all (which would overflow the stack).
        let mut body = Request::Meta { cred, op: MetaReq::Sync }.encode();
        let at = body.len() - 1;
        body.truncate(at);
        for _ in 0..200_000 {
            body.extend_from_slice(&[26]);
            body.extend_from_slice(&[0; 16]);
        }
        assert!(Request::decode(&body).is_err());
    }

    #[test]
    fn huge_piece_count_is_rejected_before_allocating() {
        let mut e = Encoder::new();
        e.u8(3);
        Capability::none(FileId(9)).encode(&mut e);
        e.u8(1).u64(9).u32(u32::MAX);
        assert!(matches!(Request::decode(&e.finish()), Err(DecodeError::TooLong { what: "piece list", .. })));
        let mut e = Encoder::new();
        e.u8(3);
        Capability::none(FileId(9)).encode(&mut e);
        e.u8(1).u64(9).u32(1000);
        assert!(matches!(Request::decode(&e.finish()), Err(DecodeError::Truncated { .. })));
    }

    /// Issue 8: lengths whose sum passes 2^64 wrapped in release builds and
    /// the server sliced past its buffer.
    #[test]
    fn piece_lengths_summing_past_the_payload_limit_are_rejected() {
        let huge = 1u64 << 61;
        let pieces = vec![Piece { offset: 0, len: huge }, Piece { offset: huge, len: huge }, Piece { offset: 0, len: huge }];
        for r in [
            Request::data(Capability::none(FileId(0)), DataReq::Write { file: FileId(1), pieces: pieces.clone() }),
            Request::data(Capability::none(FileId(0)), DataReq::Read { file: FileId(1), pieces, order: Default::default() }),
        ] {
            assert!(matches!(Request::decode(&r.encode()), Err(DecodeError::TooLong { what: "piece list total", .. })));
        }
        let just_over = vec![Piece { offset: 0, len: u64::from(MAX_PAYLOAD_LEN) }, Piece { offset: 0, len: 1 }];
        let r = Request::data(Capability::none(FileId(0)), DataReq::Write { file: FileId(1), pieces: just_over });
        assert!(Request::decode(&r.encode()).is_err());
    }

    #[test]
    fn overflowing_piece_is_rejected() {
        let r = Request::data(Capability::none(FileId(0)), DataReq::Write { file: FileId(1), pieces: vec![Piece { offset: u64::MAX - 1, len: 5 }] });
        assert!(matches!(Request::decode(&r.encode()), Err(DecodeError::Invalid(_))));
    }
}
