//! Unit tests of the client's connection machine (`client.rs`): frames in
//! and out with plain buffers, no sockets.

use super::*;

fn feed(c: &mut ClientConn<u32>, bytes: &[u8], room: usize) -> Result<Vec<Completion<u32>>, String> {
    let mut got = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let n = match c.rx() {
            ClientRx::Header(h) => {
                let w = h.window();
                let n = w.len().min(bytes.len() - at);
                w[..n].copy_from_slice(&bytes[at..at + n]);
                n
            }
            ClientRx::Body { body, .. } => {
                let w = body.window();
                let n = w.len().min(bytes.len() - at);
                w[..n].copy_from_slice(&bytes[at..at + n]);
                n
            }
            ClientRx::Payload { total, done, .. } => (*total - *done).min(bytes.len() - at),
        };
        at += n;
        got.extend(c.received(n, |_| room)?);
    }
    Ok(got)
}

fn frame(kind: FrameKind, id: u64, body: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = Header::new(kind, MsgId(id), body.len(), payload.len()).encode().to_vec();
    v.extend_from_slice(body);
    v.extend_from_slice(payload);
    v
}

/// Whole answers read ahead complete their calls with no state of
/// their own; anything else is left to the part-by-part path.
#[test]
fn whole_answers_read_ahead_complete_their_calls() {
    let mut c = ClientConn::<u32>::default();
    c.post(5, 50, b"req", 0, true);
    c.post(6, 60, b"req", 0, true);
    sent_kinds(&mut c);
    let mut bytes = frame(FrameKind::Response, 6, b"six", &[]);
    bytes.extend(frame(FrameKind::Response, 5, b"five", &[]));
    let mut done = Vec::new();
    let (k, six) = c.whole_response(&bytes).unwrap();
    let (k2, five) = c.whole_response(&bytes[k..]).unwrap();
    assert_eq!(k + k2, bytes.len());
    done.extend([six, five]);
    let reply = |b: &[u8]| Reply { body: Body::copy_of(b), payload_len: 0 };
    assert_eq!(done, [(60, reply(b"six")), (50, reply(b"five"))]);
    assert!(c.is_idle());
    c.post(7, 70, b"req", 0, true);
    sent_kinds(&mut c);
    let seven = frame(FrameKind::Response, 7, b"seven", &[]);
    assert!(c.whole_response(&seven[..seven.len() - 1]).is_none(), "not whole");
    assert!(c.whole_response(&frame(FrameKind::Response, 7, b"seven", &[1, 2])).is_none(), "a payload");
    assert!(c.whole_response(&frame(FrameKind::Cts, 7, &[], &[])).is_none(), "not an answer");
    assert!(c.whole_response(&frame(FrameKind::Response, 9, b"x", &[])).is_none(), "owed to no call");
    assert_eq!(done.len(), 2);
    // The part-by-part path refuses what is wrong with it.
    assert!(feed(&mut c, &frame(FrameKind::Response, 9, b"x", &[]), 0).is_err());
}

fn sent_kinds(c: &mut ClientConn<u32>) -> Vec<(FrameKind, u64)> {
    let kinds = c.queued().collect();
    let n: usize = c.tx_slices(64, |_, _| std::iter::once(&[0u8; 8][..])).iter().map(|s| s.len()).sum();
    c.sent(n);
    assert!(!c.has_output());
    kinds
}

/// Fuzz target (issue 25; `cargo bolero test` runs it under
/// libFuzzer): whatever a server sends to a client with calls in
/// flight (raw bytes, or valid answers overwritten and cut where the
/// input says), the machine completes calls or reports a violation,
/// never panics, and completes each call at most once.
#[test]
fn fuzz_what_a_server_sends() {
    let mut valid = frame(FrameKind::Response, 1, b"one", &[]);
    valid.extend(frame(FrameKind::Cts, 2, &[], &[]));
    valid.extend(frame(FrameKind::Response, 2, b"two", &[]));
    valid.extend(frame(FrameKind::Response, 3, b"three", &[9; 40]));
    bolero::check!().with_iterations(20_000).with_test_time(std::time::Duration::from_secs(5)).for_each(|input: &[u8]| {
        let bytes = match input {
            [first, rest @ ..] if first % 2 == 1 => {
                let mut b = valid.clone();
                for pair in rest.chunks_exact(2) {
                    let at = usize::from(pair[0]) % b.len();
                    b[at] = pair[1];
                }
                if let Some(&cut) = rest.last() {
                    b.truncate(b.len() - usize::from(cut) % 8 * (b.len() / 8));
                }
                b
            }
            _ => input.to_vec(),
        };
        let mut c = ClientConn::default();
        c.post(1, 10u32, b"a", 0, true);
        c.post(2, 20u32, b"b", 100, false);
        c.post(3, 30u32, b"c", 0, true);
        sent_kinds(&mut c);
        if let Ok(done) = feed(&mut c, &bytes, 64) {
            let mut calls: Vec<u32> = done.iter().map(|d| d.0).collect();
            calls.sort_unstable();
            calls.dedup();
            assert_eq!(calls.len(), done.len(), "a call completed twice");
        }
    });
}

/// Sends what the outbox sends for `c`, taking payloads from `pay`.
fn drain_out(c: &mut ClientConn<u32>, pay: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while c.has_output() {
        let slices = c.tx_slices(64, |_, range| {
            let (o, l) = range.map_or((0, pay.len()), |(o, l)| (o as usize, l));
            std::iter::once(&pay[o..o + l])
        });
        let n = slices.iter().map(|s| s.len()).sum();
        out.extend(slices.iter().flat_map(|s| s.iter().copied()));
        c.sent(n);
    }
    out
}

proptest::proptest! {
    /// A frame written directly in part (any split, eager or not) and
    /// then posted sends the rest from the queue: the bytes on the wire
    /// are those of the same call posted the usual way, and the call
    /// is owed its answer either way.
    #[test]
    fn a_frame_written_in_part_is_finished_from_the_queue(body_len in 0usize..40, pay_len in 0usize..40, eager: bool, cut in 0usize..200) {
        let body: Vec<u8> = (0..body_len).map(|i| i as u8).collect();
        let pay: Vec<u8> = (0..pay_len).map(|i| 100 + i as u8).collect();
        let mut usual = ClientConn::<u32>::default();
        usual.post(7, 70, &body, pay_len, eager);
        let want = drain_out(&mut usual, &pay);
        let mut direct = ClientConn::<u32>::default();
        let head = direct.direct_head(7, body_len, pay_len, eager).unwrap();
        let mut frame = head.to_vec();
        frame.extend_from_slice(&body);
        if eager {
            frame.extend_from_slice(&pay);
        }
        let written = cut.min(frame.len());
        direct.post_written(7, 70, &body, pay_len, eager, written);
        let mut got = frame[..written].to_vec();
        got.extend(drain_out(&mut direct, &pay));
        proptest::prop_assert_eq!(got, want);
        proptest::prop_assert_eq!(direct.owed().collect::<Vec<_>>(), vec![70]);
        proptest::prop_assert_eq!(direct.hold(|&t| t == 70), usual.hold(|&t| t == 70));
        // Not while another frame is queued: bytes keep their order.
        direct.post(8, 80, b"x", 0, true);
        proptest::prop_assert!(direct.direct_head(9, 0, 0, true).is_none());
    }
}

#[test]
fn a_rendezvous_sends_its_data_only_after_cts() {
    let mut c = ClientConn::default();
    c.post(5, 50u32, b"body", 8, false);
    assert_eq!(sent_kinds(&mut c), [(FrameKind::Rts, 5)]);
    assert!(feed(&mut c, &frame(FrameKind::Cts, 5, &[], &[]), 0).unwrap().is_empty());
    assert_eq!(sent_kinds(&mut c), [(FrameKind::Data, 5)]);
    let done = feed(&mut c, &frame(FrameKind::Response, 5, b"ok", &[]), 0).unwrap();
    assert_eq!(done, [(50, Reply { body: Body::copy_of(b"ok"), payload_len: 0 })]);
    assert!(c.is_idle());
}

#[test]
fn a_place_in_the_area_is_handed_to_the_owner_and_answered_placed() {
    let mut c = ClientConn::default();
    c.post(5, 50u32, b"body", 8, false);
    sent_kinds(&mut c);
    let grant = Grant { token: RailToken([1; RAIL_TOKEN_LEN]), area_at: Some(4096) }.encode();
    assert!(feed(&mut c, &frame(FrameKind::Cts, 5, &grant, &[]), 0).unwrap().is_empty());
    // Nothing goes out until the owner copied the payload; the server
    // waits for it, so the call holds the connection.
    assert!(!c.has_output());
    assert_eq!(c.hold(|&t| t == 50), Hold::MidFrame);
    let p: Vec<_> = c.take_placements().collect();
    assert_eq!(p, [Placement { id: 5, call: 50, at: 4096, pay_len: 8 }]);
    c.push_placed(p[0]);
    assert_eq!(c.hold(|&t| t == 50), Hold::MidFrame, "a Placed frame queued");
    assert_eq!(sent_kinds(&mut c), [(FrameKind::Placed, 5)]);
    assert_eq!(feed(&mut c, &frame(FrameKind::Response, 5, b"ok", &[]), 0).unwrap().len(), 1);
    assert!(c.is_idle());
    // A grant body of the wrong length is a violation.
    let mut c = ClientConn::default();
    c.post(5, 50u32, b"body", 8, false);
    assert!(feed(&mut c, &frame(FrameKind::Cts, 5, &[0; 20], &[]), 0).unwrap_err().contains("bad Cts"));
}

#[test]
fn a_response_before_cts_refuses_the_data() {
    let mut c = ClientConn::default();
    c.post(5, 50u32, b"", 8, false);
    sent_kinds(&mut c);
    assert_eq!(feed(&mut c, &frame(FrameKind::Response, 5, b"no", &[]), 0).unwrap().len(), 1);
    // A late Cts for it is a violation, and no Data went out.
    assert!(feed(&mut c, &frame(FrameKind::Cts, 5, &[], &[]), 0).unwrap_err().contains("Cts for unknown"));
    assert!(!c.has_output());
}

#[test]
fn violations_are_reported() {
    let mut c = ClientConn::default();
    c.post(1, 10u32, b"", 0, true);
    assert!(feed(&mut c, &frame(FrameKind::Response, 2, b"", &[]), 0).unwrap_err().contains("unknown message 2"));
    let mut c = ClientConn::default();
    c.post(1, 10u32, b"", 0, true);
    assert!(feed(&mut c, &frame(FrameKind::Response, 1, b"", &[1, 2, 3]), 2).unwrap_err().contains("exceeds the 2 bytes"));
    let mut c = ClientConn::default();
    assert!(feed(&mut c, &frame(FrameKind::Request, 1, b"", &[]), 0).unwrap_err().contains("unexpected"));
    let mut c: ClientConn<u32> = ClientConn::default();
    assert!(feed(&mut c, &[0xFF; 40], 0).unwrap_err().contains("bad frame header"));
    // The server's closing word (message id 0) is passed on as it said it.
    let mut c = ClientConn::default();
    c.post(1, 10u32, b"", 0, true);
    let word = Response::error(weft_wire::ErrorCode::Busy, "uid 7 holds 3 connections").encode();
    assert_eq!(feed(&mut c, &frame(FrameKind::Response, 0, &word, &[]), 0).unwrap_err(), format!("{CLOSED_BY_SERVER}10 uid 7 holds 3 connections"));
}

#[test]
fn withdrawn_calls_answers_are_dropped_and_unsent_frames_never_go() {
    let mut c = ClientConn::default();
    c.post(1, 1u32, b"a", 0, true);
    sent_kinds(&mut c);
    c.post(2, 1u32, b"b", 0, true);
    c.post(3, 2u32, b"c", 0, true);
    assert_eq!(c.hold(|&t| t == 1), Hold::Withdrawable);
    c.withdraw(|&t| t == 1);
    assert_eq!(c.hold(|&t| t == 1), Hold::Nothing);
    assert_eq!(sent_kinds(&mut c), [(FrameKind::Request, 3)]);
    // The answer to 1 (sent before the withdrawal) is read and dropped.
    assert!(feed(&mut c, &frame(FrameKind::Response, 1, b"x", &[9, 9]), 0).unwrap().is_empty());
    assert_eq!(feed(&mut c, &frame(FrameKind::Response, 3, b"y", &[]), 0).unwrap().len(), 1);
    assert!(c.is_idle());
}

#[test]
fn an_rts_sent_without_cts_holds_the_connection() {
    let mut c = ClientConn::default();
    c.post(1, 1u32, b"", 100, false);
    assert_eq!(c.hold(|&t| t == 1), Hold::Withdrawable);
    sent_kinds(&mut c);
    assert_eq!(c.hold(|&t| t == 1), Hold::MidFrame);
}
