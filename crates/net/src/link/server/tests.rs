//! Unit tests of the server's connection machine (`server/`): bytes
//! in, frames and events out, with plain buffers and no sockets.

use super::*;
use crate::budget::MemoryBudget;
use std::time::Duration;
use weft_wire::{rights, CapKey, Capability, CollTag, DataReq, FileId, Piece, Proof, Secret, HEADER_LEN, MAX_PARTS};

pub(super) type Conn = ServerConn;

/// The services' gate in small: data requests need a valid capability.
struct Gate {
    secret: Secret,
    caps: CapKey,
}

impl Gate {
    fn cap_key(&self) -> &CapKey {
        &self.caps
    }
}

impl Admission for Gate {
    fn secret(&self) -> &Secret {
        &self.secret
    }
    fn admit(&self, req: &mut Request, _: &Identity) -> Result<(), String> {
        match req {
            Request::Data { cap, op } => self.caps.check(cap, op.file(), rights::READ | rights::WRITE, 0).map_err(|why| why.to_string()),
            _ => Ok(()),
        }
    }
}

fn secret() -> Secret {
    Secret::new(vec![7u8; 16])
}

fn gate() -> Gate {
    Gate { caps: CapKey::derive(&secret()), secret: secret() }
}

fn conn(limits: ConnLimits, budget: u64) -> Conn {
    Conn::new(Instant::now(), Arc::new(limits), MemoryBudget::new(budget), SERVER_NONCE)
}

/// Feeds `bytes` through the windows the connection offers, like the
/// event loop's reads; returns how many bytes it took.
pub(super) fn feed(c: &mut Conn, mut bytes: &[u8], events: &mut Vec<Event>) -> usize {
    let total = bytes.len();
    c.pump(Instant::now(), &gate(), events);
    while !bytes.is_empty() {
        let Some(w) = c.rx_window() else { break };
        let n = w.len().min(bytes.len());
        w[..n].copy_from_slice(&bytes[..n]);
        bytes = &bytes[n..];
        c.received(n, Instant::now(), &gate(), events);
    }
    total - bytes.len()
}

pub(super) fn frame(kind: FrameKind, id: u64, body: &[u8], pay_len: usize, payload: &[u8]) -> Vec<u8> {
    let mut v = Header::new(kind, MsgId(id), body.len(), pay_len).encode().to_vec();
    v.extend_from_slice(body);
    v.extend_from_slice(payload);
    v
}

/// Everything queued for sending, as (kind, id, body, payload) frames.
pub(super) fn drain(c: &mut Conn) -> Vec<(FrameKind, u64, Vec<u8>, Vec<u8>)> {
    let mut bytes = Vec::new();
    while c.has_output() {
        let s: Vec<u8> = c.tx_slices(64).iter().flat_map(|s| s.iter().copied()).collect();
        c.sent(s.len(), Instant::now());
        bytes.extend(s);
    }
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let h = Header::decode(&bytes[at..]).unwrap();
        let b = at + HEADER_LEN;
        let p = b + h.body_len as usize;
        out.push((h.kind, h.msg_id.0, bytes[b..p].to_vec(), bytes[p..p + h.pay_len as usize].to_vec()));
        at = p + h.pay_len as usize;
    }
    out
}

const SERVER_NONCE: [u8; 16] = [0x5E; 16];
const HELLO: Hello = Hello { nonce: [3; 16], flags: 0 };

/// Runs the client's side of the handshake with `key`; returns the frames
/// the server sent back (challenge, then welcome or an error).
fn handshake(c: &mut Conn, key: &Secret, ev: &mut Vec<Event>) -> Vec<(FrameKind, u64, Vec<u8>, Vec<u8>)> {
    feed(c, &frame(FrameKind::Hello, 0, &HELLO.encode(), 0, &[]), ev);
    let mut out = drain(c);
    assert_eq!(out[0].0, FrameKind::Challenge);
    let challenge = Challenge::decode(&out[0].2).unwrap();
    assert_eq!(challenge.nonce, SERVER_NONCE);
    feed(c, &frame(FrameKind::Proof, 0, &key.client_proof(&HELLO, &challenge).encode(), 0, &[]), ev);
    out.extend(drain(c));
    out
}

pub(super) fn ready(limits: ConnLimits, budget: u64) -> Conn {
    let mut c = conn(limits, budget);
    let mut ev = Vec::new();
    let out = handshake(&mut c, &secret(), &mut ev);
    assert!(matches!(ev[..], [Event::Ready]));
    assert_eq!(out[1].0, FrameKind::Welcome);
    let challenge = Challenge { nonce: SERVER_NONCE };
    assert!(secret().verify_server_proof(&HELLO, &challenge, &Proof::decode(&out[1].2).unwrap()), "the server proves the secret too");
    c
}

pub(super) fn write_req(len: u64) -> Vec<u8> {
    let cap = gate().cap_key().issue(FileId(1), rights::WRITE, u64::MAX);
    Request::data(cap, DataReq::Write { file: FileId(1), pieces: vec![Piece { offset: 0, len }] }).encode()
}

#[test]
fn a_wrong_secret_gets_an_error_and_a_close() {
    let mut c = conn(ConnLimits::default(), 1 << 20);
    let mut ev = Vec::new();
    let out = handshake(&mut c, &Secret::new(vec![9u8; 16]), &mut ev);
    assert!(ev.is_empty() && c.closing().is_some());
    assert!(matches!(Response::decode(&out[1].2), Ok(Response::Error { code: ErrorCode::Permission, .. })));
    assert!(c.wants_close());
}

/// Issue 11: a hello and proof recorded from one connection, replayed on
/// another (whose server nonce differs), must not open it.
#[test]
fn a_replayed_proof_fails_on_a_new_connection() {
    let recorded = secret().client_proof(&HELLO, &Challenge { nonce: [0x11; 16] });
    let mut c = conn(ConnLimits::default(), 1 << 20);
    let mut ev = Vec::new();
    feed(&mut c, &frame(FrameKind::Hello, 0, &HELLO.encode(), 0, &[]), &mut ev);
    drain(&mut c);
    feed(&mut c, &frame(FrameKind::Proof, 0, &recorded.encode(), 0, &[]), &mut ev);
    assert!(ev.is_empty() && c.closing().is_some() && !c.is_ready());
}

#[test]
fn reserved_fields_and_sizes_of_the_handshake_are_checked() {
    let mut ev = Vec::new();
    // Non-zero flags in the hello body.
    let mut flagged = HELLO.encode();
    flagged[16] = 2;
    let mut c = conn(ConnLimits::default(), 1 << 20);
    feed(&mut c, &frame(FrameKind::Hello, 0, &flagged, 0, &[]), &mut ev);
    assert!(c.closing().is_some());
    // Non-zero flags in a header.
    let mut c = conn(ConnLimits::default(), 1 << 20);
    let mut f = frame(FrameKind::Hello, 0, &HELLO.encode(), 0, &[]);
    f[6] = 1;
    feed(&mut c, &f, &mut ev);
    assert!(c.closing().is_some());
    // A hello with a message id, or a proof before the hello.
    let mut c = conn(ConnLimits::default(), 1 << 20);
    feed(&mut c, &frame(FrameKind::Hello, 7, &HELLO.encode(), 0, &[]), &mut ev);
    assert!(c.closing().is_some());
    let mut c = conn(ConnLimits::default(), 1 << 20);
    feed(&mut c, &frame(FrameKind::Proof, 0, &[0; 32], 0, &[]), &mut ev);
    assert!(c.closing().is_some());
    assert!(ev.is_empty());
}

#[test]
fn a_hello_of_the_wrong_size_is_refused_before_its_body_is_read() {
    let mut c = conn(ConnLimits::default(), 1 << 30);
    let mut ev = Vec::new();
    // Issue 8: a 1 MiB handshake body used to be read (and held) first.
    let taken = feed(&mut c, &frame(FrameKind::Hello, 0, &vec![0; 1 << 20], 0, &[]), &mut ev);
    assert_eq!(taken, HEADER_LEN, "not one byte of the body is read");
    assert!(c.closing().is_some());
    assert_eq!(c.memory(), 0);
}

#[test]
fn eager_requests_come_out_whole_and_frames_are_not_over_read() {
    let mut c = ready(ConnLimits::default(), 1 << 30);
    let mut ev = Vec::new();
    let mut bytes = frame(FrameKind::Request, 5, &write_req(3), 3, b"abc");
    bytes.extend(frame(FrameKind::Request, 6, &Request::Ping.encode(), 0, &[]));
    assert_eq!(feed(&mut c, &bytes, &mut ev), bytes.len());
    assert_eq!(ev.len(), 2);
    let Event::Request { id, payload, .. } = &ev[0] else { panic!() };
    assert_eq!((id.0, &payload.bytes[..]), (5, &b"abc"[..]));
    assert!(matches!(&ev[1], Event::Request { id: MsgId(6), req, .. } if matches!(**req, Request::Ping)));
    assert!(c.memory() > 0, "payload memory is held while the request is served");
    ev.clear();
    assert_eq!(c.memory(), 0, "returned when the request's buffers are dropped");
}

#[test]
fn an_eager_frame_past_the_eager_limit_is_a_violation() {
    let mut c = ready(ConnLimits::default(), 1 << 30);
    let mut ev = Vec::new();
    feed(&mut c, &frame(FrameKind::Request, 5, &write_req(100_000), 100_000, &[]), &mut ev);
    assert!(ev.is_empty() && c.closing().is_some());
    assert_eq!(c.memory(), 0);
}

#[test]
fn rendezvous_grants_stay_within_the_window_and_the_budget() {
    let limits = ConnLimits { rendezvous_window: 250, ..ConnLimits::default() };
    let mut c = ready(limits, 1 << 20);
    let mut ev = Vec::new();
    for id in 1..=3 {
        feed(&mut c, &frame(FrameKind::Rts, id, &write_req(100), 100, &[]), &mut ev);
    }
    let cts: Vec<u64> = drain(&mut c).into_iter().filter(|f| f.0 == FrameKind::Cts).map(|f| f.1).collect();
    assert_eq!(cts, [1, 2], "the third waits for the window");
    assert!(c.memory() >= 200, "grants hold their payload's memory");
    // Data for an ungranted id is a violation; for a granted one, a request.
    feed(&mut c, &frame(FrameKind::Data, 1, &[], 100, &[1; 100]), &mut ev);
    assert!(matches!(&ev[..], [Event::Request { id: MsgId(1), .. }]));
    let cts: Vec<u64> = drain(&mut c).into_iter().filter(|f| f.0 == FrameKind::Cts).map(|f| f.1).collect();
    assert_eq!(cts, [3]);
    feed(&mut c, &frame(FrameKind::Data, 9, &[], 100, &[1; 100]), &mut ev);
    assert!(c.closing().is_some());
}

#[test]
fn a_connection_without_memory_stops_reading_until_some_is_returned() {
    let budget = MemoryBudget::new(1000);
    let hog = budget.try_charge(990).unwrap();
    let mut c = Conn::new(Instant::now(), Arc::new(ConnLimits::default()), budget.clone(), SERVER_NONCE);
    let mut ev = Vec::new();
    let bytes = frame(FrameKind::Hello, 0, &HELLO.encode(), 0, &[]);
    assert_eq!(feed(&mut c, &bytes, &mut ev), HEADER_LEN, "the body waits for memory");
    assert!(c.is_stalled() && c.rx_window().is_none());
    drop(hog);
    c.retry(Instant::now(), &gate(), &mut ev);
    assert_eq!(feed(&mut c, &bytes[HEADER_LEN..], &mut ev), Hello::LEN);
    assert_eq!(drain(&mut c)[0].0, FrameKind::Challenge);
}

#[test]
fn too_many_unanswered_requests_pause_reading() {
    let mut c = ready(ConnLimits { max_queued: 2, ..ConnLimits::default() }, 1 << 30);
    let mut ev = Vec::new();
    let ping = frame(FrameKind::Request, 1, &Request::Ping.encode(), 0, &[]);
    let three: Vec<u8> = ping.iter().chain(&ping).chain(&ping).copied().collect();
    let requests = |ev: &[Event]| ev.iter().filter(|e| matches!(e, Event::Request { .. })).count();
    // All three are read (ahead, in one read), two handed out.
    assert_eq!(feed(&mut c, &three, &mut ev), 3 * ping.len());
    assert_eq!(requests(&ev), 2, "the third waits for an answer to go");
    assert!(c.rx_window().is_none(), "and nothing more is read meanwhile");
    c.respond(MsgId(1), &Response::Ok, Payload::default(), Instant::now());
    assert_eq!(feed(&mut c, &ping, &mut ev), 0, "the third comes first, and fills the queue again");
    assert_eq!(requests(&ev), 3);
    c.respond(MsgId(1), &Response::Ok, Payload::default(), Instant::now());
    drain(&mut c);
    assert_eq!(feed(&mut c, &ping, &mut ev), ping.len());
    assert_eq!(requests(&ev), 4);
}

/// Review of issue 8: refused requests queue error answers that carry
/// no budget; a peer that never reads them must not grow the queue.
#[test]
fn a_peer_that_does_not_read_its_answers_stops_being_read() {
    let limits = ConnLimits { max_queued: 8, ..ConnLimits::default() };
    let mut c = ready(limits, 1 << 30);
    let mut ev = Vec::new();
    let bad = frame(FrameKind::Request, 1, &[0xFF], 0, &[]);
    let many: Vec<u8> = bad.iter().copied().cycle().take(bad.len() * 100).collect();
    let taken = feed(&mut c, &many, &mut ev);
    assert!(taken <= bad.len() * 8 + Stage::LEN, "reading stops once 8 answers wait: {taken} bytes read");
    assert_eq!(drain(&mut c).len(), 8);
    assert!(c.has_staged() && c.rx_window().is_none(), "the rest waits in the stage, and nothing more is read");
    feed(&mut c, &many[taken..], &mut ev);
    assert_eq!(drain(&mut c).len(), 8, "and resumes once they are taken");
}

#[test]
fn a_granted_rendezvous_whose_data_never_comes_is_cut_off() {
    let mut c = ready(ConnLimits::default(), 1 << 30);
    let mut ev = Vec::new();
    let t0 = Instant::now();
    feed(&mut c, &frame(FrameKind::Rts, 1, &write_req(1 << 20), 1 << 20, &[]), &mut ev);
    assert!(drain(&mut c).iter().any(|f| f.0 == FrameKind::Cts));
    assert!(c.memory() >= 1 << 20, "the grant holds the payload's memory");
    assert!(c.overdue(t0 + Duration::from_secs(29)).is_none());
    assert!(c.overdue(t0 + Duration::from_secs(31)).is_some_and(|why| why.contains("rendezvous")));
}

#[test]
fn deadlines_are_absolute() {
    let t0 = Instant::now();
    let limits = Arc::new(ConnLimits::default());
    let mut c = Conn::new(t0, limits.clone(), MemoryBudget::new(1 << 20), SERVER_NONCE);
    assert!(c.overdue(t0 + Duration::from_secs(4)).is_none());
    // Trickling a byte at a time does not extend the handshake deadline.
    let hello = frame(FrameKind::Hello, 0, &HELLO.encode(), 0, &[]);
    let mut ev = Vec::new();
    for (k, b) in hello[..10].iter().enumerate() {
        let w = c.rx_window().unwrap();
        w[0] = *b;
        c.received(1, t0 + Duration::from_millis(400 * k as u64), &gate(), &mut ev);
    }
    assert!(c.overdue(t0 + limits.handshake_deadline).is_some());
    // A response not taken within the send deadline closes the connection.
    let mut c = ready(ConnLimits::default(), 1 << 20);
    let now = Instant::now();
    c.queued = 1;
    c.respond(MsgId(1), &Response::Ok, Payload::new(vec![0; 100], None), now);
    c.sent(50, now + Duration::from_secs(20));
    assert!(c.overdue(now + Duration::from_secs(29)).is_none());
    assert!(c.overdue(now + limits.send_deadline).is_some(), "partial progress does not extend it");
}

/// Issue 25: a ready connection that does nothing is closed after the
/// idle timeout, counted from the last byte either way; one with a
/// request under way is not idle, however long it takes.
#[test]
fn a_connection_idle_past_the_timeout_is_closed() {
    let limits = ConnLimits { idle_timeout: Duration::from_secs(60), ..ConnLimits::default() };
    let mut c = ready(limits, 1 << 20);
    drain(&mut c);
    let since = c.idle_since().expect("ready and idle");
    assert!(c.overdue(since + Duration::from_secs(59)).is_none());
    assert!(c.overdue(since + Duration::from_secs(60)).is_some_and(|why| why.contains("idle")));
    let mut ev = Vec::new();
    feed(&mut c, &frame(FrameKind::Request, 1, &Request::Ping.encode(), 0, &[]), &mut ev);
    assert!(c.idle_since().is_none(), "a request under way");
    assert!(c.overdue(since + Duration::from_secs(600)).is_none(), "a long request is not idleness");
    c.respond(MsgId(1), &Response::Ok, Payload::default(), Instant::now());
    drain(&mut c);
    assert!(c.idle_since().is_some_and(|t| t > since), "idleness counts again from the answer");
    // Before its handshake a connection is held to the handshake deadline only.
    assert!(conn(ConnLimits::default(), 1 << 20).idle_since().is_none());
}

/// Issue 11: a write refused by the gate (no valid capability) is
/// answered before any `Cts`, so its data is never sent or held; the
/// connection goes on.
#[test]
fn a_rendezvous_without_a_valid_capability_is_answered_before_its_data() {
    let mut c = ready(ConnLimits::default(), 1 << 30);
    let mut ev = Vec::new();
    let len = 1u64 << 20;
    let body = Request::data(Capability::none(FileId(1)), DataReq::Write { file: FileId(1), pieces: vec![Piece { offset: 0, len }] }).encode();
    feed(&mut c, &frame(FrameKind::Rts, 7, &body, len as usize, &[]), &mut ev);
    let out = drain(&mut c);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].0, out[0].1), (FrameKind::Response, 7), "answered, no Cts");
    assert!(matches!(Response::decode(&out[0].2), Ok(Response::Error { code: ErrorCode::Permission, .. })));
    assert!(matches!(ev[..], [Event::Refused]));
    assert!(c.closing().is_none());
    // The same request with a capability gets its `Cts`.
    feed(&mut c, &frame(FrameKind::Rts, 8, &write_req(len), len as usize, &[]), &mut ev);
    assert_eq!(drain(&mut c)[0].0, FrameKind::Cts);
}

/// A MUNGE proof is handed out to be checked off the loop; the `Welcome`
/// waits for the outcome, and a frame sent meanwhile closes the connection.
#[test]
fn a_munge_proof_is_checked_off_the_loop() {
    let munge_hello = Hello { nonce: [3; 16], flags: Hello::MUNGE };
    let open = |ev: &mut Vec<Event>| {
        let mut c = conn(ConnLimits::default(), 1 << 20);
        feed(&mut c, &frame(FrameKind::Hello, 0, &munge_hello.encode(), 0, &[]), ev);
        drain(&mut c);
        feed(&mut c, &frame(FrameKind::Proof, 0, b"MUNGE:credential", 0, &[]), ev);
        assert!(drain(&mut c).is_empty(), "nothing before the outcome");
        c
    };
    let mut ev = Vec::new();
    let mut c = open(&mut ev);
    assert!(matches!(&ev[..], [Event::Verify { cred, .. }] if cred == b"MUNGE:credential"));
    ev.clear();
    let who = Identity::Verified { uid: 1000, gid: 100, groups: vec![100] };
    c.verified(Ok((who, b"server credential".to_vec())), Instant::now(), &mut ev);
    let out = drain(&mut c);
    assert_eq!((out[0].0, &out[0].2[..]), (FrameKind::Welcome, &b"server credential"[..]));
    assert!(matches!(ev[..], [Event::Ready]));
    // Refused: an error, then the close.
    let mut ev = Vec::new();
    let mut c = open(&mut ev);
    c.verified(Err((ErrorCode::Permission, "credential refused: replayed".into())), Instant::now(), &mut ev);
    assert!(matches!(Response::decode(&drain(&mut c)[0].2), Ok(Response::Error { code: ErrorCode::Permission, .. })));
    assert!(c.closing().is_some());
    // A request before the `Welcome`: closed, and a late outcome is ignored.
    let mut ev = Vec::new();
    let mut c = open(&mut ev);
    feed(&mut c, &frame(FrameKind::Request, 1, &Request::Ping.encode(), 0, &[]), &mut ev);
    assert!(c.closing().is_some());
    c.verified(Ok((Identity::Trusted, Vec::new())), Instant::now(), &mut ev);
    assert!(!drain(&mut c).iter().any(|f| f.0 == FrameKind::Welcome));
}

const TOKEN: [u8; RAIL_TOKEN_LEN] = [9; RAIL_TOKEN_LEN];

/// A ready connection that takes parts, with message 1 (a write of `len`
/// bytes) announced and granted.
fn granted(len: u64) -> Conn {
    let mut c = ready(ConnLimits::default(), 64 << 20).with_rail_token(TOKEN);
    let mut ev = Vec::new();
    feed(&mut c, &frame(FrameKind::Rts, 1, &write_req(len), len as usize, &[]), &mut ev);
    let cts: Vec<_> = drain(&mut c).into_iter().filter(|f| f.0 == FrameKind::Cts).collect();
    assert_eq!(cts.len(), 1);
    assert_eq!(cts[0].2, TOKEN, "the Cts names the connection's rail token");
    c
}

fn part(offset: u64, bytes: &[u8]) -> Vec<u8> {
    frame(FrameKind::Part, 1, &PartHead { token: RailToken(TOKEN), offset }.encode(), bytes.len(), bytes)
}

#[test]
fn parts_in_any_order_make_one_request_with_the_whole_payload() {
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut c = granted(1000);
    let mut ev = Vec::new();
    // Out of order, one sent twice (a client resends a lost rail's parts).
    for (o, l) in [(600, 400), (0, 300), (600, 400), (300, 300)] {
        assert!(ev.is_empty(), "handed out before the payload was whole");
        feed(&mut c, &part(o, &payload[o as usize..(o + l) as usize]), &mut ev);
    }
    match &ev[..] {
        [Event::Request { id: MsgId(1), payload: p, .. }] => assert_eq!(p.bytes, payload),
        other => panic!("{other:?}"),
    }
    assert!(c.closing().is_none());
}

#[test]
fn a_part_from_another_connection_is_put_together_by_its_owner() {
    let mut c = granted(8);
    let mut other = ready(ConnLimits::default(), 1 << 20).with_rail_token([3; RAIL_TOKEN_LEN]);
    let mut ev = Vec::new();
    // Read on `other`, it names `c`: handed to the owner, not applied there.
    feed(&mut other, &part(4, b"5678"), &mut ev);
    let Some(Event::Part { token, id, offset, payload }) = ev.pop() else { panic!("{ev:?}") };
    assert_eq!((token, id, offset), (RailToken(TOKEN), MsgId(1), 4));
    c.part(id, offset, payload, Instant::now(), &mut ev).unwrap();
    feed(&mut c, &part(0, b"1234"), &mut ev);
    match &ev[..] {
        [Event::Request { payload: p, .. }] => assert_eq!(p.bytes, b"12345678"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn parts_that_do_not_fit_fail_the_connection() {
    let bad: [(&str, Vec<u8>); 3] = [
        ("past the end", part(996, &[1; 8])),
        ("for a message never granted", frame(FrameKind::Part, 2, &PartHead { token: RailToken(TOKEN), offset: 0 }.encode(), 4, &[1; 4])),
        ("with an empty payload", frame(FrameKind::Part, 1, &PartHead { token: RailToken(TOKEN), offset: 0 }.encode(), 0, &[])),
    ];
    for (what, f) in bad {
        let mut c = granted(1000);
        let mut ev = Vec::new();
        feed(&mut c, &f, &mut ev);
        assert!(c.closing().is_some(), "a part {what} was taken");
    }
    // Overlapping an applied part (not the same one again).
    let mut c = granted(1000);
    let mut ev = Vec::new();
    feed(&mut c, &part(0, &[1; 500]), &mut ev);
    feed(&mut c, &part(400, &[1; 200]), &mut ev);
    assert!(c.closing().is_some(), "an overlapping part was taken");
    // A Data frame for a message being put together from parts.
    let mut c = granted(1000);
    feed(&mut c, &part(0, &[1; 500]), &mut ev);
    feed(&mut c, &frame(FrameKind::Data, 1, &[], 1000, &[1; 1000]), &mut ev);
    assert!(c.closing().is_some(), "data after parts was taken");
    // A connection without a rail token takes no parts, even naming zero.
    let mut c = ready(ConnLimits::default(), 1 << 20);
    feed(&mut c, &frame(FrameKind::Rts, 1, &write_req(8), 8, &[]), &mut ev);
    feed(&mut c, &frame(FrameKind::Part, 1, &PartHead { token: RailToken([0; RAIL_TOKEN_LEN]), offset: 0 }.encode(), 8, &[1; 8]), &mut ev);
    assert!(c.closing().is_some(), "a connection without rails took a part");
}

#[test]
fn more_parts_than_the_cap_fail_the_connection() {
    let mut c = granted(1000);
    let mut ev = Vec::new();
    for k in 0..MAX_PARTS as u64 {
        feed(&mut c, &part(k, &[1]), &mut ev);
    }
    assert!(c.closing().is_none());
    feed(&mut c, &part(MAX_PARTS as u64, &[1]), &mut ev);
    assert!(c.closing().is_some(), "part {} of a message was taken", MAX_PARTS + 1);
}

#[test]
fn a_part_after_its_message_was_put_together_is_dropped_not_an_error() {
    let mut c = granted(8);
    let mut ev = Vec::new();
    feed(&mut c, &part(0, b"1234"), &mut ev);
    feed(&mut c, &part(4, b"5678"), &mut ev);
    assert_eq!(ev.len(), 1, "the request, once");
    // The client lost the rail that carried the second part and sends it again.
    feed(&mut c, &part(4, b"5678"), &mut ev);
    assert!(c.closing().is_none(), "a late copy closed the connection");
    assert_eq!(ev.len(), 1, "a late copy made a second request");
}

#[test]
fn a_part_for_a_message_whose_data_is_arriving_is_refused() {
    let mut c = granted(1000);
    let mut ev = Vec::new();
    // The Data frame's header and some of its payload are in.
    let data = frame(FrameKind::Data, 1, &[], 1000, &[7; 1000]);
    feed(&mut c, &data[..HEADER_LEN + 10], &mut ev);
    let stray = Payload::new(vec![1; 10], None);
    assert!(c.part(MsgId(1), 0, stray, Instant::now(), &mut ev).is_err());
    // The Data frame still completes the request, with its own bytes.
    feed(&mut c, &data[HEADER_LEN + 10..], &mut ev);
    match &ev[..] {
        [Event::Request { payload: p, .. }] => assert_eq!(p.bytes, vec![7; 1000]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_part_at_the_end_of_the_offsets_is_refused_not_wrapped() {
    let mut c = granted(1000);
    let mut ev = Vec::new();
    feed(&mut c, &part(u64::MAX - 1, &[1; 4]), &mut ev);
    assert!(c.closing().is_some());
}

/// Fuzz target (issue 25; `cargo bolero test` runs it under libFuzzer):
/// whatever bytes follow a good handshake, raw or a valid stream of frames
/// (an eager request, a rendezvous and its data, a ping) overwritten and
/// cut where the input says, the machine takes them without panicking,
/// holds no more memory than its budget, and everything it sends back is
/// well-formed frames.
#[test]
fn fuzz_bytes_after_the_handshake() {
    let mut valid = frame(FrameKind::Request, 1, &write_req(10), 10, &[5; 10]);
    valid.extend(frame(FrameKind::Rts, 2, &write_req(300), 300, &[]));
    valid.extend(frame(FrameKind::Data, 2, &[], 300, &[6; 300]));
    valid.extend(frame(FrameKind::Request, 3, &Request::Ping.encode(), 0, &[]));
    let budget = 64 * 1024;
    bolero::check!().with_iterations(20_000).with_test_time(Duration::from_secs(5)).for_each(|input: &[u8]| {
        let bytes = match input {
            [first, rest @ ..] if first % 2 == 1 => {
                let mut b = valid.clone();
                for pair in rest.chunks_exact(3) {
                    let at = usize::from(u16::from_le_bytes([pair[0], pair[1]])) % b.len();
                    b[at] = pair[2];
                }
                if let Some(&cut) = rest.last() {
                    b.truncate(b.len() - usize::from(cut) % 16 * (b.len() / 16));
                }
                b
            }
            _ => input.to_vec(),
        };
        let mut c = ready(ConnLimits { rendezvous_window: 1024, ..ConnLimits::default() }, budget);
        let mut ev = Vec::new();
        feed(&mut c, &bytes, &mut ev);
        let out = drain(&mut c);
        assert!(c.memory() <= budget, "{} bytes held of a budget of {budget}", c.memory());
        assert!(out.iter().all(|(k, ..)| matches!(k, FrameKind::Response | FrameKind::Cts)), "{:?}", out.iter().map(|o| o.0).collect::<Vec<_>>());
    });
}

/// Several small requests read at once (and one cut off by the read's
/// end) come out whole and in order, their payloads intact.
#[test]
fn requests_read_ahead_come_out_whole_and_in_order() {
    let mut c = ready(ConnLimits::default(), 1 << 30);
    let mut ev = Vec::new();
    let ping = |id| frame(FrameKind::Request, id, &Request::Ping.encode(), 0, &[]);
    // A connection that has sent no request holds no stage: its first
    // frame is read exactly.
    assert!(!c.stage.is_made() && c.rx_window().unwrap().len() == HEADER_LEN);
    feed(&mut c, &ping(0), &mut ev);
    assert!(c.stage.is_made());
    ev.clear();
    let pay: Vec<u8> = (0..100u8).collect();
    let mut bytes = ping(1);
    bytes.extend(frame(FrameKind::Request, 2, &write_req(100), 100, &pay));
    bytes.extend(ping(3));
    let cut = bytes.len() - 3;
    // One read: what the stage takes.
    let w = c.rx_window().unwrap();
    assert!(w.len() >= cut, "a read at a frame boundary takes several small frames");
    w[..cut].copy_from_slice(&bytes[..cut]);
    c.received(cut, Instant::now(), &gate(), &mut ev);
    let ids = |ev: &[Event]| ev.iter().filter_map(|e| if let Event::Request { id, .. } = e { Some(id.0) } else { None }).collect::<Vec<_>>();
    assert_eq!(ids(&ev), [1, 2]);
    let Event::Request { payload, .. } = &ev[1] else { unreachable!() };
    assert_eq!(payload.bytes, pay);
    assert!(c.memory() >= 100, "its payload holds its memory");
    // The rest of the third arrives exactly into its header.
    assert_eq!(feed(&mut c, &bytes[cut..], &mut ev), 3);
    assert_eq!(ids(&ev), [1, 2, 3]);
    assert!(c.closing().is_none());
}

/// A ready connection that has made its stage (one ping read), on a
/// budget of 1 MiB whose every byte the returned charge holds.
fn staged_with_budget_spent() -> (Conn, crate::budget::Charge) {
    let budget = MemoryBudget::new(1 << 20);
    let mut c = Conn::new(Instant::now(), Arc::new(ConnLimits::default()), budget.clone(), SERVER_NONCE);
    let mut ev = Vec::new();
    handshake(&mut c, &secret(), &mut ev);
    feed(&mut c, &frame(FrameKind::Request, 9, &Request::Ping.encode(), 0, &[]), &mut ev);
    // The ping's memory back first.
    drop(ev);
    let hog = budget.try_charge(budget.limit() - budget.used()).unwrap();
    (c, hog)
}

/// Requests read ahead while memory is short wait in the stage (nothing
/// more is read), and come out once memory is returned.
#[test]
fn requests_read_ahead_wait_for_memory() {
    let (mut c, hog) = staged_with_budget_spent();
    let mut ev = Vec::new();
    let pay = [7u8; 10];
    let mut bytes = frame(FrameKind::Request, 1, &write_req(10), 10, &pay);
    bytes.extend(frame(FrameKind::Request, 2, &Request::Ping.encode(), 0, &[]));
    assert_eq!(feed(&mut c, &bytes, &mut ev), bytes.len());
    assert!(ev.is_empty() && c.is_stalled() && c.rx_window().is_none());
    drop(hog);
    c.retry(Instant::now(), &gate(), &mut ev);
    let got: Vec<(u64, Vec<u8>)> = ev.iter().filter_map(|e| if let Event::Request { id, payload, .. } = e { Some((id.0, payload.bytes.clone())) } else { None }).collect();
    assert_eq!(got, [(1, pay.to_vec()), (2, vec![])]);
    assert!(c.rx_window().is_some());
}

/// A served request's box is the next request's (no allocation per small
/// request), and holds that next request, not the one served.
#[test]
fn a_recycled_request_box_takes_the_next_request() {
    let mut c = ready(ConnLimits::default(), 1 << 30);
    let mut ev = Vec::new();
    feed(&mut c, &frame(FrameKind::Request, 1, &Request::Ping.encode(), 0, &[]), &mut ev);
    let Some(Event::Request { req, .. }) = ev.pop() else { panic!("a request") };
    let at: *const Request = &*req;
    c.recycle(req);
    assert!(c.spare_req.is_some(), "kept");
    // An allocation of the same size in between: a new box would not get
    // the freed one back by chance.
    let other = Box::new(Request::Ping);
    feed(&mut c, &frame(FrameKind::Request, 2, &Request::Status.encode(), 0, &[]), &mut ev);
    let Some(Event::Request { id, req, .. }) = ev.pop() else { panic!("a request") };
    assert_eq!(id, MsgId(2));
    assert!(matches!(*req, Request::Status), "{req:?}");
    assert!(std::ptr::eq(&*req, at), "decoded into the recycled box");
    assert!(c.spare_req.is_none(), "taken");
    drop(other);
}

/// A small request without payload draws nothing from the budget while it
/// waits for its answer (it is bounded by count, `max_queued`); a larger
/// body, or any payload, is charged.
#[test]
fn only_small_requests_without_payload_go_uncharged() {
    let mut c = ready(ConnLimits::default(), 1 << 30);
    let mut ev = Vec::new();
    // The first request makes the stage, through which the rest come.
    feed(&mut c, &frame(FrameKind::Request, 0, &Request::Ping.encode(), 0, &[]), &mut ev);
    ev.clear();
    let before = c.memory();
    feed(&mut c, &frame(FrameKind::Request, 1, &Request::Ping.encode(), 0, &[]), &mut ev);
    assert_eq!(ev.len(), 1);
    assert_eq!(c.memory(), before, "a ping is not charged");
    let cap = gate().cap_key().issue(FileId(1), rights::WRITE, u64::MAX);
    let large = Request::data(cap, DataReq::Write { file: FileId(1), pieces: vec![Piece { offset: 0, len: 0 }; 30] }).encode();
    assert!(large.len() > UNCHARGED_BODY);
    feed(&mut c, &frame(FrameKind::Request, 2, &large, 0, &[]), &mut ev);
    assert_eq!(ev.len(), 2);
    assert_eq!(c.memory(), before + large.len() as u64, "a large body is charged");
    feed(&mut c, &frame(FrameKind::Request, 3, &write_req(10), 10, &[5; 10]), &mut ev);
    assert_eq!(ev.len(), 3);
    assert_eq!(c.memory(), before + (large.len() + write_req(10).len() + 10) as u64, "a payload is charged with its body");
    // The bound itself: a body of exactly `UNCHARGED_BODY` bytes goes
    // uncharged, one byte more is charged.
    let stat = |len: usize| {
        let bare = Request::Meta { cred: weft_wire::Cred::new(1, 1), op: weft_wire::MetaReq::Stat { path: String::new() } }.encode().len();
        let body = Request::Meta { cred: weft_wire::Cred::new(1, 1), op: weft_wire::MetaReq::Stat { path: "a".repeat(len - bare) } }.encode();
        assert_eq!(body.len(), len);
        body
    };
    ev.clear();
    let before = c.memory();
    feed(&mut c, &frame(FrameKind::Request, 4, &stat(UNCHARGED_BODY), 0, &[]), &mut ev);
    assert_eq!((ev.len(), c.memory()), (1, before), "at the bound: not charged");
    feed(&mut c, &frame(FrameKind::Request, 5, &stat(UNCHARGED_BODY + 1), 0, &[]), &mut ev);
    assert_eq!((ev.len(), c.memory()), (2, before + UNCHARGED_BODY as u64 + 1), "past it: charged");
}

/// A collective's pieces come as compact runs: a body of a few dozen bytes
/// decodes to up to 65,000 pieces (about 1 MiB). What the decoded request
/// holds is charged, however short its body, and a connection over its
/// share reads nothing more (else 64 queued such requests held 64 MiB a
/// connection, unseen by the budget).
#[test]
fn a_collective_requests_expanded_pieces_are_charged() {
    let mut c = ready(ConnLimits { memory_share: 512 << 10, ..ConnLimits::default() }, 1 << 30);
    let mut ev = Vec::new();
    feed(&mut c, &frame(FrameKind::Request, 0, &Request::Ping.encode(), 0, &[]), &mut ev);
    ev.clear();
    let before = c.memory();
    let cap = gate().cap_key().issue(FileId(1), rights::READ, u64::MAX);
    let tag = CollTag { id: 1, participants: 1, member: 0, round: 0, window: 1 << 20, last: true, abandon: false };
    let pieces: Vec<Piece> = (0..65_000u64).map(|i| Piece { offset: 2 * i, len: 1 }).collect();
    let body = Request::data(cap, DataReq::CollRead { file: FileId(1), tag, pieces }).encode();
    assert!(body.len() <= UNCHARGED_BODY, "a short body: {} bytes", body.len());
    feed(&mut c, &frame(FrameKind::Request, 1, &body, 0, &[]), &mut ev);
    assert_eq!(ev.len(), 1);
    let Event::Request { req, .. } = &ev[0] else { panic!("a request") };
    assert_eq!(req.expanded_bytes(), 65_000 * std::mem::size_of::<Piece>());
    assert!(c.memory() >= before + 65_000 * 16 - body.len() as u64, "charged: {}", c.memory());
    assert!(!c.may_read() && c.rx_window().is_none(), "over its share, the connection reads nothing more");
    ev.clear();
    assert_eq!(c.memory(), before, "returned once the request is gone");
    assert!(c.may_read());
}

/// While the budget is spent, a small request without payload waits for
/// memory like any other (else requests that decode to more than their
/// body, drawn past the limits, would keep coming in over a full budget).
#[test]
fn small_requests_wait_while_the_budget_is_spent() {
    let (mut c, hog) = staged_with_budget_spent();
    let mut ev = Vec::new();
    feed(&mut c, &frame(FrameKind::Request, 1, &Request::Ping.encode(), 0, &[]), &mut ev);
    assert!(ev.is_empty() && c.is_stalled(), "a ping over a spent budget waits");
    drop(hog);
    c.retry(Instant::now(), &gate(), &mut ev);
    assert!(matches!(ev[..], [Event::Request { id: MsgId(1), .. }]));
}
