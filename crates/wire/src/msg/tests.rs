//! Round trips of every request and response through the codec
//! (property tests over generated messages), and the decoders' refusals.

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
        (any::<u64>(), any::<bool>(), proptest::option::of(any::<u64>())).prop_map(|(f, wrote, size)| MetaReq::Close { file: FileId(f), wrote, size }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(f, epoch, size)| MetaReq::SetSize { file: FileId(f), epoch, size }),
        (cap(), name()).prop_map(|(old, path)| MetaReq::Renew { old, path }),
        any::<u64>().prop_map(|f| MetaReq::StatId { file: FileId(f) }),
        (name(), any::<u32>(), any::<bool>()).prop_map(|(path, mode, fifo)| MetaReq::Mknod { path, mode, kind: if fifo { FileKind::Fifo } else { FileKind::Socket } }),
        (name(), name()).prop_map(|(from, to)| MetaReq::Link { from, to }),
        Just(MetaReq::Sync),
        (name(), name(), 0u32..=MAX_DIR_PAGE as u32, 1u32..64).prop_map(|(path, after, max, shards)| MetaReq::ReaddirShard { path, after, max, shards }),
        (any::<u32>(), any::<u64>(), any::<u64>(), any::<[u8; 32]>()).prop_map(|(coord, seq, dir, mac)| MetaReq::Replica { coord, seq, op: Box::new(replica::ReplicaOp::Mark { dir: FileId(dir) }), mac }),
        (any::<u64>(), proptest::collection::vec((0u8..3, any::<u32>(), any::<i64>()), 1..=crate::msg::meta::MAX_ATTR_CHANGES)).prop_map(|(f, changes)| MetaReq::Change {
            file: FileId(f),
            changes: changes.into_iter().map(|(k, v, t)| [AttrChange::Mode(v), AttrChange::Owner { uid: v, gid: v / 3 }, AttrChange::Mtime(t)][k as usize]).collect(),
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
        any::<u64>().prop_map(|f| Request::data(Capability::none(FileId(0)), DataReq::Lend { file: FileId(f) })),
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
        (any::<u64>(), any::<u64>()).prop_map(|(dev, ino)| Response::Lent { dev, ino }),
        (proptest::option::of(attr()), any::<i64>()).prop_map(|(file, at_ns)| Response::Unlinked { file, at_ns }),
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
    // A shared pointer's fetch-and-add is tagged too (the pointer table
    // keeps its answer); its set, safe to apply twice, is not.
    assert!(Request::decode(&tagged(MetaReq::SharedPointer { token: 3, op: PointerOp::FetchAdd(8) })).is_ok());
    assert!(matches!(Request::decode(&tagged(MetaReq::SharedPointer { token: 3, op: PointerOp::Set(8) })), Err(DecodeError::Invalid(_))));
    assert!(matches!(Request::decode(&tagged(MetaReq::SharedPointer { token: 3, op: PointerOp::FetchAdd(0) })), Err(DecodeError::Invalid(_))));
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

/// What a client riding through a restart may send again: a shared
/// pointer's set, release and add of 0 (the set recreates a pointer a
/// reboot forgot), never an untagged fetch-and-add of more (two would skip
/// a range), nor an untagged create or a lock request.
#[test]
fn only_requests_safe_to_apply_twice_are_idempotent() {
    let cred = Cred::with_groups(1, 1, &[]);
    let meta = |op: MetaReq| Request::Meta { cred, op }.is_idempotent();
    assert!(meta(MetaReq::SharedPointer { token: 5, op: PointerOp::Set(0) }));
    assert!(meta(MetaReq::SharedPointer { token: 5, op: PointerOp::Release }));
    assert!(!meta(MetaReq::SharedPointer { token: 5, op: PointerOp::FetchAdd(8) }));
    assert!(meta(MetaReq::SharedPointer { token: 5, op: PointerOp::FetchAdd(0) }));
    assert!(meta(MetaReq::Stat { path: "/a".into() }));
    let create = MetaReq::Create { path: "/a".into(), mode: 0o600, exclusive: true, hint: LayoutHint::default() };
    assert!(!meta(create.clone()));
    assert!(meta(MetaReq::Once { client: 7, seq: 9, op: Box::new(create) }));
    assert!(!Request::Lock(LockReq::Renew { session: 1 }).is_idempotent());
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
