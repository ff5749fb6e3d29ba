//! The endpoint's non-blocking calls (issue 24, item 3): post, test,
//! wait; a dropped handle withdraws its calls; a leaked one is withdrawn
//! when its scope ends.

mod peer;

use peer::{config, echo_reversed, next_request, pattern, peer, secret};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use weft_net::frame_io::write_frame;
use weft_net::{Call, Endpoint, NetError};
use weft_wire::FrameKind;

/// Tests until done, at most 10 s: `test` alone must carry the calls
/// through (nobody else drives this endpoint).
fn test_until_done(p: &mut weft_net::Posted<'_>) -> usize {
    let t = Instant::now();
    let mut tests = 1;
    while !p.test() {
        assert!(t.elapsed() < Duration::from_secs(10), "test() made no progress in 10 s");
        tests += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    tests
}

#[test]
fn posted_calls_complete_through_test_alone_and_wait_gives_them_back() {
    let sizes = [10usize, 300_000];
    let (addr, h) = echo_reversed(sizes.len());
    let ep = Endpoint::new(secret(), config()).unwrap();
    let sends: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(k, &n)| pattern(k as u8, n)).collect();
    let mut recvs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    ep.scope(|s| {
        let calls = sends
            .iter()
            .zip(recvs.iter_mut())
            .enumerate()
            .map(|(k, (send, recv))| {
                let mut c = Call::new(addr, vec![k as u8; 2]);
                c.send = vec![&send[..]];
                c.recv = vec![&mut recv[..]];
                c
            })
            .collect();
        let mut p = s.post(calls);
        // A rendezvous takes several steps (Rts, Cts, Data, Response): more
        // than one test, each returning at once.
        assert!(test_until_done(&mut p) > 1);
        let calls = p.wait();
        for (k, c) in calls.into_iter().enumerate() {
            let r = c.result.unwrap().unwrap();
            assert_eq!((r.body.into_vec(), r.payload_len), (vec![k as u8; 2], sizes[k]));
        }
    });
    for (k, r) in recvs.iter().enumerate() {
        let mut want = sends[k].clone();
        want.reverse();
        assert!(*r == want, "call {k}: payload");
    }
    assert_eq!(ep.batches_in_flight(), 0);
    h.join().unwrap();
}

#[test]
fn a_dropped_handle_withdraws_its_calls_and_the_connection_serves_the_next() {
    let (checked, wait_check) = std::sync::mpsc::channel::<()>();
    let (addr, h) = peer(move |s| {
        let mut rts = HashMap::new();
        let first = next_request(s, &mut rts);
        let second = next_request(s, &mut rts);
        // The first answer comes after its handle was dropped: read and
        // dropped by the endpoint, which keeps the connection.
        write_frame(s, FrameKind::Response, first.id, b"late", &[]).unwrap();
        write_frame(s, FrameKind::Response, second.id, b"second", &[]).unwrap();
        // Closing now would drop the connection before the test looks.
        let _ = wait_check.recv();
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    ep.scope(|s| {
        let mut p = s.post(vec![Call::new(addr, b"first".to_vec())]);
        assert!(!p.test(), "answered before the peer saw the second request");
        drop(p);
        assert_eq!(ep.batches_in_flight(), 0);
    });
    let r = ep.call(addr, b"second".to_vec()).unwrap();
    assert_eq!(r.body, b"second");
    assert_eq!(ep.stats().dropped_connections, 0);
    checked.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn a_leaked_handle_is_withdrawn_when_its_scope_ends() {
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        // Never answers the first call; answers the second.
        let _first = next_request(s, &mut rts);
        let second = next_request(s, &mut rts);
        write_frame(s, FrameKind::Response, second.id, b"ok", &[]).unwrap();
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    let mut buf = [0u8; 64];
    ep.scope(|s| {
        let mut c = Call::new(addr, b"first".to_vec());
        c.recv = vec![&mut buf[..]];
        let mut p = s.post(vec![c]);
        assert!(!p.test());
        std::mem::forget(p);
        assert_eq!(ep.batches_in_flight(), 1);
    });
    // The scope took the batch out before `buf` could be used again.
    assert_eq!(ep.batches_in_flight(), 0);
    buf.fill(1);
    assert_eq!(ep.call(addr, b"second".to_vec()).unwrap().body, b"ok");
    h.join().unwrap();
}

#[test]
fn an_empty_post_is_done_at_once_and_a_deadline_ends_a_test() {
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        let _never_answered = next_request(s, &mut rts);
        std::thread::sleep(Duration::from_millis(500));
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    ep.scope(|s| {
        let mut p = s.post(Vec::new());
        assert!(p.test());
        assert!(p.wait().is_empty());
        let mut p = s.post_within(vec![Call::new(addr, b"x".to_vec())], 1, Duration::from_millis(200));
        test_until_done(&mut p);
        let calls = p.wait();
        assert!(matches!(calls[0].result, Some(Err(NetError::Timeout { .. }))), "{:?}", calls[0].result);
    });
    h.join().unwrap();
}
