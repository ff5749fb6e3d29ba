//! A client machine and a server machine talking through memory: the
//! handshake, eager and rendezvous requests and responses with payloads,
//! with the byte streams cut at arbitrary points. Both sides are the
//! machines the endpoint and `weft serve` run.

use super::client::{ClientConn, ClientRx, Reply};
use super::frames::{Filling, HeaderRx};
use super::hello::{ClientHello, HelloStep};
use super::server::{ConnLimits, Event, Payload, ServerConn};
use crate::budget::MemoryBudget;
use crate::handshake::ClientAuth;
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Instant;
use weft_wire::{FrameKind, Header, MsgId, Request, Response, Secret};

const EAGER: usize = 1000;

fn secret() -> Secret {
    Secret::new(vec![9u8; 32])
}

fn pattern(call: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k * 31 + call * 7) as u8).collect()
}

/// Moves at most `cut` bytes from the server's output to the client's
/// bytes-in-flight, and the client's to the server.
struct Wire {
    to_client: Vec<u8>,
    to_server: Vec<u8>,
}

fn server_out(s: &mut ServerConn, wire: &mut Wire, cut: usize) {
    let bytes: Vec<u8> = s.tx_slices(4).iter().flat_map(|x| x.iter().copied()).take(cut).collect();
    s.sent(bytes.len(), Instant::now());
    wire.to_client.extend(bytes);
}

fn server_in(s: &mut ServerConn, wire: &mut Wire, cut: usize, events: &mut Vec<Event>) {
    let mut budget = cut;
    s.pump(Instant::now(), &secret(), events);
    while budget > 0 && !wire.to_server.is_empty() {
        let Some(w) = s.rx_window() else { return };
        let n = w.len().min(budget).min(wire.to_server.len());
        w[..n].copy_from_slice(&wire.to_server[..n]);
        wire.to_server.drain(..n);
        budget -= n;
        s.received(n, Instant::now(), &secret(), events);
    }
}

/// Reads whole frames for the handshake machine from `bytes`.
fn take_frame(bytes: &mut Vec<u8>) -> Option<(Header, Vec<u8>)> {
    let mut rx = HeaderRx::default();
    if bytes.len() < weft_wire::HEADER_LEN {
        return None;
    }
    let n = rx.window().len();
    rx.window().copy_from_slice(&bytes[..n]);
    let head = rx.received(n).unwrap().unwrap();
    let end = n + head.body_len as usize;
    if bytes.len() < end {
        return None;
    }
    let mut body = Filling::new(vec![0; head.body_len as usize]);
    body.window().copy_from_slice(&bytes[n..end]);
    assert!(body.received(head.body_len as usize));
    bytes.drain(..end);
    Some((head, body.buf))
}

fn frame(kind: FrameKind, body: &[u8]) -> Vec<u8> {
    let mut v = Header::new(kind, MsgId(0), body.len(), 0).encode().to_vec();
    v.extend_from_slice(body);
    v
}

/// Runs the handshake through memory, `cut` bytes at a time.
fn handshake(s: &mut ServerConn, wire: &mut Wire, cut: usize) {
    let (mut hello, first) = ClientHello::new(&ClientAuth::Secret(secret()), "127.0.0.1:1".parse().unwrap(), [4; 16]);
    wire.to_server.extend(frame(FrameKind::Hello, &first));
    let mut events = Vec::new();
    for _ in 0..10_000 {
        server_in(s, wire, cut, &mut events);
        server_out(s, wire, cut);
        while let Some((head, body)) = take_frame(&mut wire.to_client) {
            match hello.frame(&head, &body).unwrap() {
                HelloStep::Send(kind, body) => wire.to_server.extend(frame(kind, &body)),
                HelloStep::Done => {
                    assert!(matches!(events[..], [Event::Ready]));
                    return;
                }
            }
        }
    }
    panic!("handshake did not finish");
}

/// A call: `Sink` with a payload of `up` bytes, or `Source` of `down` bytes.
#[derive(Debug, Clone, Copy)]
enum Op {
    Up(usize),
    Down(usize),
}

fn run(ops: &[Op], cuts: &[usize]) -> Vec<Reply> {
    let limits = ConnLimits { eager_limit: EAGER as u32, ..ConnLimits::default() };
    let mut s = ServerConn::new(Instant::now(), Arc::new(limits), MemoryBudget::new(64 << 20), [5; 16]);
    let mut wire = Wire { to_client: Vec::new(), to_server: Vec::new() };
    handshake(&mut s, &mut wire, cuts[0]);
    let mut c: ClientConn<usize> = ClientConn::default();
    let sends: Vec<Vec<u8>> = ops.iter().enumerate().map(|(i, op)| if let Op::Up(n) = op { pattern(i, *n) } else { Vec::new() }).collect();
    let mut recvs: Vec<Vec<u8>> = ops.iter().map(|op| vec![0; if let Op::Down(n) = op { *n } else { 0 }]).collect();
    for (i, op) in ops.iter().enumerate() {
        let (req, len) = match *op {
            Op::Up(n) => (Request::Sink, n),
            Op::Down(n) => (Request::Source { len: n as u32 }, 0),
        };
        c.post(i as u64 + 1, i, &req.encode(), len, len <= EAGER);
    }
    let mut replies: Vec<Option<Reply>> = vec![None; ops.len()];
    let mut events = Vec::new();
    for step in 0..100_000 {
        let cut = cuts[step % cuts.len()];
        // Client out.
        let bytes: Vec<u8> = c.tx_slices(4, |i, _| std::iter::once(&sends[i][..])).iter().flat_map(|x| x.iter().copied()).take(cut).collect();
        c.sent(bytes.len());
        wire.to_server.extend(bytes);
        // Server in, serve, out.
        server_in(&mut s, &mut wire, cut, &mut events);
        for e in events.drain(..) {
            let Event::Request { id, req, payload } = e else { panic!("unexpected event {e:?}") };
            let i = id.0 as usize - 1;
            match *req {
                Request::Sink => {
                    assert_eq!(payload.bytes, sends[i], "call {i}'s payload arrived intact");
                    s.respond(id, &Response::Written { bytes: payload.bytes.len() as u64 }, Payload::default(), Instant::now());
                }
                Request::Source { len } => {
                    let p = Payload::new(pattern(i, len as usize), None);
                    s.respond(id, &Response::Read { object_size: u64::from(len) }, p, Instant::now());
                }
                r => panic!("unexpected request {r:?}"),
            }
        }
        server_out(&mut s, &mut wire, cut);
        // Client in.
        let mut budget = cut;
        while budget > 0 && !wire.to_client.is_empty() {
            let avail = budget.min(wire.to_client.len());
            let n = match c.rx() {
                ClientRx::Header(h) => {
                    let w = h.window();
                    let n = w.len().min(avail);
                    w[..n].copy_from_slice(&wire.to_client[..n]);
                    n
                }
                ClientRx::Body { body, .. } => {
                    let w = body.window();
                    let n = w.len().min(avail);
                    w[..n].copy_from_slice(&wire.to_client[..n]);
                    n
                }
                ClientRx::Payload { to, total, done, .. } => {
                    let n = (*total - *done).min(avail);
                    let dst = &mut recvs[to.expect("no call was abandoned")][*done..*done + n];
                    dst.copy_from_slice(&wire.to_client[..n]);
                    n
                }
            };
            wire.to_client.drain(..n);
            budget -= n;
            let room = |i: usize| recvs[i].len();
            for (i, r) in c.received(n, room).unwrap() {
                assert!(replies[i].replace(r).is_none(), "call {i} answered twice");
            }
        }
        if replies.iter().all(Option::is_some) {
            assert!(c.is_idle() && s.is_idle());
            for (i, op) in ops.iter().enumerate() {
                if let Op::Down(n) = op {
                    assert_eq!(recvs[i], pattern(i, *n), "call {i}'s response payload");
                }
            }
            return replies.into_iter().map(Option::unwrap).collect();
        }
    }
    panic!("calls did not complete: {replies:?}");
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![(0usize..3000).prop_map(Op::Up), (0usize..3000).prop_map(Op::Down)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever the mix of eager and rendezvous calls and however the
    /// streams are cut, every call gets its own answer and payloads arrive
    /// intact in both directions.
    #[test]
    fn every_call_gets_its_answer(ops in proptest::collection::vec(op(), 1..12), cuts in proptest::collection::vec(1usize..700, 1..16)) {
        let replies = run(&ops, &cuts);
        for (op, r) in ops.iter().zip(&replies) {
            let rsp = Response::decode(&r.body).unwrap();
            match *op {
                Op::Up(n) => prop_assert_eq!(rsp, Response::Written { bytes: n as u64 }),
                Op::Down(n) => {
                    prop_assert_eq!(rsp, Response::Read { object_size: n as u64 });
                    prop_assert_eq!(r.payload_len, n);
                }
            }
        }
    }
}
