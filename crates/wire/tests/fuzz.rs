//! Fuzz targets, one per decoder of bytes a peer controls (issue 25):
//! whatever the bytes, a decoder returns a value or a typed error, never
//! panics, and a value it returns encodes to bytes that decode to the same
//! value (so nothing is read that the writer could not have meant).
//!
//! Under `cargo test` each target runs bolero's random engine for a
//! bounded number of inputs (`BOLERO_RANDOM_ITERATIONS` raises it); `cargo
//! bolero test fuzz_requests --sanitizer address` (nightly, `cargo install
//! cargo-bolero`) runs the same target under libFuzzer, coverage-guided,
//! for as long as wanted. Besides raw bytes, each input also mutates a
//! valid encoding (chosen by the first byte: positions overwritten, cut
//! short), so that inputs reach past the first tag into every field.

use std::time::Duration;
use weft_wire::{
    rights, CapKey, Capability, Challenge, Cred, DataReq, FileId, Header, Hello, LockReq, MetaReq, PartHead, Piece, Proof, RailToken, ReadOrder, Request, Response, Secret, WireExtent,
};

/// Inputs each target runs under `cargo test`, and at most this long.
const ITERATIONS: usize = 200_000;
const TIME: Duration = Duration::from_secs(5);

/// Valid encodings to mutate.
fn request_samples() -> Vec<Vec<u8>> {
    let cap = CapKey::derive(&Secret::new(vec![1; 16])).issue(FileId(7), rights::ALL, 99);
    let pieces = vec![Piece { offset: 0, len: 10 }, Piece { offset: 100, len: 5 }];
    let cred = Cred::with_groups(1000, 1000, &[4, 5]);
    [
        Request::Ping,
        Request::Status,
        Request::data(cap, DataReq::Write { file: FileId(7), pieces: pieces.clone() }),
        Request::data(cap, DataReq::Read { file: FileId(7), pieces, order: ReadOrder { strategy: 1, rank: 2, group: 3, slot: 4 } }),
        Request::Meta { cred, op: MetaReq::Stat { path: "/a/b".into() } },
        Request::Lock(LockReq::Acquire { session: 9, file: FileId(7), cap, exclusive: true, wait_ms: 10, extents: vec![WireExtent::Range { start: 0, end: 10 }, WireExtent::Strided { offset: 0, len: 4, stride: 8, count: 3 }] }),
        Request::Lock(LockReq::Reclaim { session: 9, file: FileId(7), cap, exclusive: false, lock: 3, seal: [2; 32], extents: vec![WireExtent::Range { start: 0, end: 10 }] }),
    ]
    .iter()
    .map(Request::encode)
    .collect()
}

fn response_samples() -> Vec<Vec<u8>> {
    let cap = Capability::none(FileId(3));
    [
        Response::Ok,
        Response::Error { code: weft_wire::ErrorCode::NotFound, message: "no".into() },
        Response::Cap(cap),
        Response::Written { bytes: 12 },
        Response::Link { target: "/x".into() },
        Response::Measure { epoch: 4, sole: true },
        Response::Locked { lock: 5, lease: weft_wire::Lease { session: 1, until_ms: 2, mac: [3; 32] }, seal: [4; 32] },
    ]
    .iter()
    .map(Response::encode)
    .collect()
}

/// The bytes an input stands for: itself, or (first byte odd) a sample
/// chosen by its second byte, overwritten at the positions the next pairs
/// of bytes name and cut at the length the last byte says.
fn mutated(input: &[u8], samples: &[Vec<u8>]) -> Vec<u8> {
    let [first, pick, rest @ ..] = input else { return input.to_vec() };
    if first % 2 == 0 {
        return input.to_vec();
    }
    let mut b = samples[*pick as usize % samples.len()].clone();
    for pair in rest.chunks_exact(2) {
        let at = pair[0] as usize % b.len().max(1);
        if let Some(x) = b.get_mut(at) {
            *x = pair[1];
        }
    }
    if let Some(&cut) = rest.last()
        && cut % 3 == 0
    {
        b.truncate(cut as usize % (b.len() + 1));
    }
    b
}

/// Runs a target over raw and mutated `samples`: whatever decodes must
/// encode to bytes that decode to the same value.
fn round_trips<T: PartialEq + std::fmt::Debug>(samples: &[Vec<u8>], decode: fn(&[u8]) -> Result<T, weft_wire::DecodeError>, encode: fn(&T) -> Vec<u8>) {
    bolero::check!().with_iterations(ITERATIONS).with_test_time(TIME).for_each(|input: &[u8]| {
        let b = mutated(input, samples);
        if let Ok(v) = decode(&b) {
            assert_eq!(decode(&encode(&v)).as_ref(), Ok(&v), "from {b:?}");
        }
    });
}

#[test]
fn fuzz_requests() {
    round_trips(&request_samples(), Request::decode, Request::encode);
}

#[test]
fn fuzz_responses() {
    round_trips(&response_samples(), Response::decode, Response::encode);
}

#[test]
fn fuzz_frame_headers() {
    let sample = vec![Header { kind: weft_wire::FrameKind::Request, flags: 0, msg_id: weft_wire::MsgId(5), body_len: 20, pay_len: 0 }.encode().to_vec()];
    bolero::check!().with_iterations(ITERATIONS).with_test_time(TIME).for_each(|input: &[u8]| {
        let b = mutated(input, &sample);
        if let Ok(h) = Header::decode(&b) {
            assert_eq!(Header::decode(&h.encode()), Ok(h));
            assert!(h.body_len <= weft_wire::limits::MAX_BODY_LEN && h.pay_len <= weft_wire::limits::MAX_PAYLOAD_LEN, "{h:?}");
        }
    });
}

#[test]
fn fuzz_handshakes_and_rail_heads() {
    bolero::check!().with_iterations(ITERATIONS).with_test_time(TIME).for_each(|b: &[u8]| {
        if let Ok(h) = Hello::decode(b) {
            assert_eq!(Hello::decode(&h.encode()), Ok(h));
        }
        if let Ok(c) = Challenge::decode(b) {
            assert_eq!(Challenge::decode(&c.encode()), Ok(c));
        }
        if let Ok(p) = Proof::decode(b) {
            assert_eq!(Proof::decode(&p.encode()), Ok(p));
        }
        if let Ok(p) = PartHead::decode(b) {
            assert_eq!(PartHead::decode(&p.encode()), Ok(p));
        }
        let _ = RailToken::decode(b);
    });
}
