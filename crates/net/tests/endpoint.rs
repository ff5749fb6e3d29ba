//! The client `Endpoint` against a scripted peer on loopback: eager and
//! rendezvous calls, many in flight answered out of order, a peer that
//! closes mid-frame, and responses shorter than the buffers posted for them
//! (issue 8: the endpoint's readv could read past the end of the frame),
//! and several threads sharing one endpoint over one connection; idle
//! connections replaced before reuse, and a server's closing word.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use weft_net::frame_io::{read_header, write_frame};
use weft_net::handshake::server_handshake;
use weft_net::{Call, Endpoint, EndpointConfig, NetError};
use weft_wire::{FrameKind, Header, MsgId};

mod peer;
use peer::{config, echo_reversed, next_request, pattern, peer, secret, Seen};

#[test]
fn eager_and_rendezvous_calls_carry_their_payloads_both_ways() {
    let sizes = [0usize, 1, 1000, 64 * 1024, 64 * 1024 + 1, 300_000];
    let (addr, h) = echo_reversed(sizes.len());
    let ep = Endpoint::new(secret(), config()).unwrap();
    let sends: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(k, &n)| pattern(k as u8, n)).collect();
    let mut recvs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    let mut calls: Vec<Call<'_>> = sends
        .iter()
        .zip(recvs.iter_mut())
        .enumerate()
        .map(|(k, (send, recv))| {
            let mut c = Call::new(addr, vec![k as u8; 3]);
            // Sent and received in two pieces each: vectored both ways.
            let (a, b) = send.split_at(send.len() / 3);
            c.send = vec![a, b];
            let (x, y) = recv.split_at_mut(send.len() / 2);
            c.recv = vec![x, y];
            c
        })
        .collect();
    ep.run(&mut calls);
    for (k, c) in calls.iter_mut().enumerate() {
        let reply = c.result.take().unwrap().unwrap();
        assert_eq!((reply.body.into_vec(), reply.payload_len), (vec![k as u8; 3], sizes[k]));
    }
    drop(calls);
    for (k, r) in recvs.iter().enumerate() {
        let mut want = sends[k].clone();
        want.reverse();
        assert!(*r == want, "call {k}: payload mismatch");
    }
    let st = ep.stats();
    assert_eq!((st.eager, st.rendezvous), (4, 2));
    h.join().unwrap();
}

/// Each call alone on a connection already open goes the short way
/// (`solo.rs`): eager and rendezvous (whose `Cts` lets the payload go
/// only after a read), with the liveness watch off so that nothing but the
/// call's own progress ends a wait.
#[test]
fn calls_alone_on_an_open_connection_carry_their_payloads_both_ways() {
    let sizes = [0usize, 1, 1000, 64 * 1024, 64 * 1024 + 1, 300_000, 3 << 20];
    let (addr, h) = echo_reversed(1 + sizes.len());
    let ep = Endpoint::new(secret(), EndpointConfig { ping_after: Duration::ZERO, ..config() }).unwrap();
    assert_eq!(ep.call(addr, b"open".to_vec()).unwrap().body, b"open");
    for (k, &n) in sizes.iter().enumerate() {
        let send = pattern(k as u8, n);
        let mut recv = vec![0u8; n];
        let mut c = Call::new(addr, vec![k as u8; 3]);
        let (a, b) = send.split_at(n / 3);
        c.send = vec![a, b];
        let (x, y) = recv.split_at_mut(n / 2);
        c.recv = vec![x, y];
        let mut calls = [c];
        ep.run(&mut calls);
        let [c] = calls;
        let reply = c.result.unwrap().unwrap_or_else(|e| panic!("{n} bytes alone: {e}"));
        assert_eq!((reply.body.into_vec(), reply.payload_len), (vec![k as u8; 3], n));
        let mut want = send.clone();
        want.reverse();
        assert!(recv == want, "{n} bytes alone: payload mismatch");
    }
    let st = ep.stats();
    assert_eq!((st.connects, st.eager, st.rendezvous, st.solo), (1, 5, 3, 7), "each call after the first went the short way");
    h.join().unwrap();
}

#[test]
fn many_calls_in_flight_are_matched_when_answered_out_of_order() {
    const N: usize = 300;
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        let seen: Vec<Seen> = (0..N).map(|_| next_request(s, &mut rts)).collect();
        for r in seen.iter().rev() {
            write_frame(s, FrameKind::Response, r.id, &r.body, &[&r.payload[..r.payload.len().min(8)]]).unwrap();
        }
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    let payloads: Vec<Vec<u8>> = (0..N).map(|k| pattern(k as u8, 8 + k)).collect();
    let mut recvs = vec![[0u8; 8]; N];
    let mut calls: Vec<Call<'_>> = payloads
        .iter()
        .zip(recvs.iter_mut())
        .enumerate()
        .map(|(k, (p, r))| {
            let mut c = Call::new(addr, (k as u32).to_le_bytes().to_vec());
            c.send = vec![p];
            c.recv = vec![&mut r[..]];
            c
        })
        .collect();
    ep.run(&mut calls);
    for (k, c) in calls.iter_mut().enumerate() {
        let reply = c.result.take().unwrap().unwrap();
        assert_eq!(reply.body, (k as u32).to_le_bytes());
    }
    drop(calls);
    for (k, r) in recvs.iter().enumerate() {
        assert_eq!(r[..], payloads[k][..8]);
    }
    h.join().unwrap();
}

#[test]
fn a_response_shorter_than_its_buffers_does_not_swallow_the_next_frame() {
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        let a = next_request(s, &mut rts);
        let b = next_request(s, &mut rts);
        // Both responses in one write, so they arrive together.
        let mut bytes = Vec::new();
        for (r, p) in [(&a, &b"short"[..]), (&b, &b"second answer"[..])] {
            bytes.extend_from_slice(&Header::new(FrameKind::Response, r.id, r.body.len(), p.len()).encode());
            bytes.extend_from_slice(&r.body);
            bytes.extend_from_slice(p);
        }
        s.write_all(&bytes).unwrap();
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    let (mut r1, mut r2) = (vec![0u8; 4096], vec![0u8; 4096]);
    let mut c1 = Call::new(addr, b"one".to_vec());
    c1.recv = vec![&mut r1[..]];
    let mut c2 = Call::new(addr, b"two".to_vec());
    c2.recv = vec![&mut r2[..]];
    let mut calls = [c1, c2];
    ep.run(&mut calls);
    let [c1, c2] = calls;
    let (a, b) = (c1.result.unwrap().unwrap(), c2.result.unwrap().unwrap());
    assert_eq!((&a.body[..], a.payload_len), (&b"one"[..], 5));
    assert_eq!((&b.body[..], b.payload_len), (&b"two"[..], 13));
    assert_eq!(&r1[..5], b"short");
    assert_eq!(&r2[..13], b"second answer");
    h.join().unwrap();
}

#[test]
fn a_peer_that_closes_mid_frame_fails_the_call_and_the_next_call_reconnects() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let mut rts = HashMap::new();
        // First connection: half a response, then gone.
        let (mut s, _) = l.accept().unwrap();
        server_handshake(&mut s, &secret(), rand::random()).map_err(|e| format!("{e:?}")).unwrap();
        let r = next_request(&mut s, &mut rts);
        let head = Header::new(FrameKind::Response, r.id, 100, 0).encode();
        s.write_all(&head).unwrap();
        s.write_all(&[7u8; 10]).unwrap();
        drop(s);
        // Second connection: a proper answer.
        let (mut s, _) = l.accept().unwrap();
        server_handshake(&mut s, &secret(), rand::random()).map_err(|e| format!("{e:?}")).unwrap();
        let r = next_request(&mut s, &mut rts);
        write_frame(&mut s, FrameKind::Response, r.id, b"fine", &[]).unwrap();
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    match ep.call(addr, b"first".to_vec()) {
        Err(NetError::Unreachable { addr: a, .. }) => assert_eq!(a, addr),
        other => panic!("expected a closed-connection error, got {other:?}"),
    }
    assert_eq!(ep.call(addr, b"second".to_vec()).unwrap().body, b"fine");
    assert_eq!(ep.stats().connects, 2);
    h.join().unwrap();
}

#[test]
fn a_response_longer_than_its_buffers_is_a_violation_not_an_overflow() {
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        let r = next_request(s, &mut rts);
        write_frame(s, FrameKind::Response, r.id, &[], &[&[1u8; 100]]).unwrap();
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    let mut buf = [0u8; 10];
    let mut c = Call::new(addr, b"x".to_vec());
    c.recv = vec![&mut buf[..]];
    let mut calls = [c];
    ep.run(&mut calls);
    let [c] = calls;
    assert!(matches!(c.result.unwrap(), Err(NetError::Violation { .. })));
    h.join().unwrap();
}

#[test]
fn threads_share_one_connection_and_each_gets_its_own_answers() {
    const THREADS: usize = 8;
    const CALLS: usize = 40;
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        for _ in 0..THREADS * CALLS {
            let r = next_request(s, &mut rts);
            let mut back = r.payload.clone();
            back.reverse();
            write_frame(s, FrameKind::Response, r.id, &r.body, &[&back]).unwrap();
        }
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let ep = &ep;
            scope.spawn(move || {
                for k in 0..CALLS {
                    // Eager and rendezvous payloads interleave on the connection.
                    let len = if k % 5 == 0 { 100_000 + t } else { 1 + t * 13 + k };
                    let send = pattern((t * CALLS + k) as u8, len);
                    let mut recv = vec![0u8; len];
                    let body = format!("{t}/{k}").into_bytes();
                    let mut c = Call::new(addr, body.clone());
                    c.send = vec![&send];
                    c.recv = vec![&mut recv];
                    let mut calls = [c];
                    ep.run(&mut calls);
                    let [c] = calls;
                    let reply = c.result.unwrap().unwrap();
                    assert_eq!((reply.body.into_vec(), reply.payload_len), (body, len));
                    let mut want = send.clone();
                    want.reverse();
                    assert!(recv == want, "thread {t} call {k}: another call's bytes");
                }
            });
        }
    });
    let st = ep.stats();
    assert_eq!((st.connects, st.eager + st.rendezvous), (1, (THREADS * CALLS) as u64));
    h.join().unwrap();
}

#[test]
fn a_thread_waiting_for_a_slow_answer_does_not_hold_up_the_others() {
    const QUICK: usize = 20;
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        let mut slow = None;
        let mut answered = 0;
        // The slow call is answered only after every quick one: an endpoint
        // that served one thread at a time would never send them.
        while answered < QUICK + 1 || slow.is_none() {
            let r = next_request(s, &mut rts);
            if r.body == b"slow" {
                slow = Some(r.id);
            } else {
                write_frame(s, FrameKind::Response, r.id, &r.body, &[]).unwrap();
                answered += 1;
            }
        }
        write_frame(s, FrameKind::Response, slow.unwrap(), b"at last", &[]).unwrap();
    });
    // No liveness watch: nothing but the others' coming may end the slow
    // call's wait (a watch would hand over after a ping's time).
    let ep = Endpoint::new(secret(), EndpointConfig { ping_after: Duration::ZERO, ..config() }).unwrap();
    // Connected first, so the slow call is a call alone on an idle
    // connection (the short way, `solo.rs`), which must hand the driving
    // on when the others come.
    assert_eq!(ep.call(addr, b"warm".to_vec()).unwrap().body, b"warm");
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| ep.call(addr, b"slow".to_vec()).unwrap().body);
        std::thread::sleep(Duration::from_millis(50));
        for k in 0..QUICK {
            let body = format!("quick {k}").into_bytes();
            assert_eq!(ep.call(addr, body.clone()).unwrap().body, body);
        }
        assert_eq!(slow.join().unwrap(), b"at last");
    });
    assert_eq!(ep.stats().connects, 1);
    h.join().unwrap();
}

/// A call alone waits in poll on its connection (the short way,
/// `solo.rs`) when another thread posts a batch (to another server,
/// without waiting for it yet), and then the answer comes: the poll
/// reports the answer once (edge-triggered), and the driver that takes
/// over must still read it. Nothing else would wake that connection: the
/// other batch's server is never sent anything meanwhile, and the
/// liveness watch is off.
#[test]
fn an_answer_that_comes_as_another_thread_posts_is_read() {
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        let warm = next_request(s, &mut rts);
        write_frame(s, FrameKind::Response, warm.id, &warm.body, &[]).unwrap();
        let r = next_request(s, &mut rts);
        std::thread::sleep(Duration::from_millis(300));
        write_frame(s, FrameKind::Response, r.id, b"answered", &[]).unwrap();
    });
    let (other, h2) = echo_reversed(1);
    let ep = Endpoint::new(secret(), EndpointConfig { ping_after: Duration::ZERO, op_timeout: Duration::from_secs(10), ..config() }).unwrap();
    assert_eq!(ep.call(addr, b"warm".to_vec()).unwrap().body, b"warm");
    std::thread::scope(|scope| {
        let alone = scope.spawn(|| {
            let t = std::time::Instant::now();
            let r = ep.call(addr, b"alone".to_vec());
            (r.map(|r| r.body), t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        ep.scope(|s| {
            let posted = s.post(vec![Call::new(other, b"later".to_vec())]);
            let (body, took) = alone.join().unwrap();
            assert_eq!(body.unwrap(), b"answered");
            assert!(took < Duration::from_secs(3), "the answer waited {took:?} for another event");
            let calls = posted.wait();
            assert!(calls[0].result.as_ref().unwrap().is_ok());
        });
    });
    h.join().unwrap();
    h2.join().unwrap();
}

#[test]
fn an_answer_that_comes_after_its_call_timed_out_is_dropped_and_the_connection_kept() {
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        let late = next_request(s, &mut rts);
        std::thread::sleep(Duration::from_millis(600));
        // 100 KiB of payload nobody waits for any more, then the next call.
        write_frame(s, FrameKind::Response, late.id, b"too late", &[&[9u8; 100_000]]).unwrap();
        let r = next_request(s, &mut rts);
        write_frame(s, FrameKind::Response, r.id, &r.body, &[b"ok"]).unwrap();
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    let mut big = vec![0u8; 100_000];
    let mut c = Call::new(addr, b"late".to_vec());
    c.recv = vec![&mut big];
    let mut calls = [c];
    ep.run_within(&mut calls, 1, Duration::from_millis(300));
    let [c] = calls;
    assert!(matches!(c.result.unwrap(), Err(NetError::Timeout { .. })));
    assert!(big.iter().all(|&b| b == 0), "a timed-out call's buffer was written after run returned");
    let mut small = [0u8; 2];
    let mut c = Call::new(addr, b"next".to_vec());
    c.recv = vec![&mut small];
    let mut calls = [c];
    ep.run(&mut calls);
    let [c] = calls;
    assert_eq!(c.result.unwrap().unwrap().body, b"next");
    assert_eq!(&small, b"ok");
    // Still the first connection (the peer accepts no other).
    assert_eq!(ep.stats().connects, 1);
    h.join().unwrap();
}

#[test]
fn a_call_too_large_for_the_protocol_fails_alone_and_the_connection_stays() {
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        let r = next_request(s, &mut rts);
        write_frame(s, FrameKind::Response, r.id, &r.body, &[]).unwrap();
    });
    let ep = Endpoint::new(secret(), config()).unwrap();
    let huge = vec![0u8; weft_wire::limits::MAX_PAYLOAD_LEN as usize + 1];
    let mut big = Call::new(addr, b"too big".to_vec());
    big.send = vec![&huge];
    let mut calls = [big, Call::new(addr, b"fine".to_vec())];
    ep.run(&mut calls);
    let [big, fine] = calls;
    assert!(matches!(big.result.unwrap(), Err(NetError::Violation { .. })));
    assert_eq!(fine.result.unwrap().unwrap().body, b"fine");
    assert_eq!(ep.stats().connects, 1);
    h.join().unwrap();
}

#[test]
fn calls_to_a_server_that_never_answers_the_handshake_fail_together() {
    // Accepted by the kernel's backlog, never handshaken.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = silent.local_addr().unwrap();
    let (live, h) = peer(|s| {
        let mut rts = HashMap::new();
        let r = next_request(s, &mut rts);
        write_frame(s, FrameKind::Response, r.id, &r.body, &[]).unwrap();
    });
    let cfg = EndpointConfig { connect_timeout: Duration::from_millis(500), ..config() };
    let ep = Endpoint::new(secret(), cfg).unwrap();
    let mut calls: Vec<Call<'_>> = (0..6).map(|k| Call::new(dead, vec![k])).collect();
    calls.push(Call::new(live, b"live".to_vec()));
    let t0 = std::time::Instant::now();
    ep.run(&mut calls);
    // One connect attempt for the dead server, not one per call (6 x 0.5 s).
    assert!(t0.elapsed() < Duration::from_millis(1500), "took {:?}", t0.elapsed());
    let live_reply = calls.pop().unwrap().result.unwrap().unwrap();
    assert_eq!(live_reply.body, b"live");
    for c in calls {
        let e = c.result.unwrap().unwrap_err();
        assert_eq!(e.addr(), dead, "{e}");
    }
    drop(silent);
    h.join().unwrap();
}

/// A peer that takes `conns` connections one after another and runs
/// `script` on each after the handshake.
fn serial_peer(conns: usize, script: impl Fn(&mut TcpStream) + Send + 'static) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        for _ in 0..conns {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            server_handshake(&mut s, &secret(), rand::random()).map_err(|e| format!("{e:?}")).unwrap();
            script(&mut s);
        }
    });
    (addr, h)
}

/// Issue 25: servers close idle connections; a client never posts on one
/// idle for longer than its reuse limit (it opens a new one), so a call
/// never races the server's close.
#[test]
fn a_connection_idle_past_the_reuse_limit_is_replaced_before_its_next_call() {
    // Each connection answers one request, then waits for the client to go.
    let (addr, h) = serial_peer(2, |s| {
        let r = next_request(s, &mut HashMap::new());
        write_frame(s, FrameKind::Response, r.id, b"ok", &[]).unwrap();
        let _ = read_header(s);
    });
    let ep = Endpoint::new(secret(), EndpointConfig { idle_reuse: Duration::from_millis(100), ..config() }).unwrap();
    assert_eq!(ep.call(addr, b"one".to_vec()).unwrap().body, b"ok");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ep.call(addr, b"two".to_vec()).unwrap().body, b"ok", "the second call went on a new connection");
    assert_eq!(ep.stats().connects, 2);
    drop(ep);
    h.join().unwrap();
}

/// A server that takes the handshake and then closes with a word (a
/// user past its share of connections): the call fails with that word at
/// once, and is not retried on new connections until its deadline.
#[test]
fn a_server_that_closes_with_a_word_fails_the_call_with_it() {
    let (addr, h) = serial_peer(1, |s| {
        let word = weft_wire::Response::error(weft_wire::ErrorCode::Busy, "uid 7 holds its share").encode();
        write_frame(s, FrameKind::Response, MsgId(0), &word, &[]).unwrap();
    });
    let ep = Endpoint::new(secret(), EndpointConfig { op_timeout: Duration::from_secs(5), ..config() }).unwrap();
    let t0 = std::time::Instant::now();
    match ep.call(addr, b"ping".to_vec()) {
        Err(NetError::Busy { reason, .. }) => assert_eq!(reason, "uid 7 holds its share"),
        other => panic!("{other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(4), "the call waited out its deadline");
    assert_eq!(ep.stats().connects, 1, "no new connection was tried for the same call");
    h.join().unwrap();
}

/// A server that answers one call and then, in the same write, sends a
/// frame the client must refuse (an answer to a message never posted):
/// the answered call keeps its answer (it does not wait out its deadline),
/// the other fails at once with the violation, and the connection goes.
/// (The endpoint reads frame by frame, so the answer is taken before the
/// bad frame is read; answers decoded in the read that fails are kept too.)
#[test]
fn an_answer_read_together_with_a_bad_frame_is_kept() {
    let (addr, h) = peer(|s| {
        let mut rts = HashMap::new();
        let a = next_request(s, &mut rts);
        let _b = next_request(s, &mut rts);
        let mut bytes = Header::new(FrameKind::Response, a.id, a.body.len(), 0).encode().to_vec();
        bytes.extend_from_slice(&a.body);
        bytes.extend_from_slice(&Header::new(FrameKind::Response, MsgId(u64::MAX - 1), 2, 0).encode());
        bytes.extend_from_slice(b"no");
        s.write_all(&bytes).unwrap();
    });
    let ep = Endpoint::new(secret(), EndpointConfig { op_timeout: Duration::from_secs(20), ..config() }).unwrap();
    let mut calls = [Call::new(addr, b"one".to_vec()), Call::new(addr, b"two".to_vec())];
    let t0 = std::time::Instant::now();
    ep.run(&mut calls);
    let [c1, c2] = calls;
    assert_eq!(c1.result.unwrap().unwrap().body, b"one", "the call answered before the bad frame");
    assert!(matches!(c2.result.unwrap(), Err(NetError::Violation { .. })));
    assert!(t0.elapsed() < Duration::from_secs(10), "a call waited out its deadline");
    h.join().unwrap();
}

/// The liveness watch (issue 25; `ping_after`, on by default): a server
/// that takes a request and then says nothing, not even to a ping or to a
/// fresh connection's handshake, fails the call after two to three times
/// `ping_after`, well before its deadline; one that answers the ping but
/// not (yet) the request is waited for. With the watch off the silent one
/// is waited for.
#[test]
fn a_silent_server_is_pinged_and_given_up_before_the_deadline() {
    use weft_wire::Request;
    // Silent: reads everything, answers nothing (a fresh connection waits
    // in its listener's backlog, unanswered).
    // The first request is answered, so the silent one is a call alone on
    // an idle connection (the short way, `solo.rs`, which must leave the
    // watch its turn).
    let (addr, h) = peer(|s| {
        let warm = next_request(s, &mut HashMap::new());
        write_frame(s, FrameKind::Response, warm.id, &warm.body, &[]).unwrap();
        let _ = next_request(s, &mut HashMap::new());
        std::thread::sleep(Duration::from_secs(21));
    });
    let watched = EndpointConfig { op_timeout: Duration::from_secs(30), ..config() };
    assert_eq!(watched.ping_after, weft_net::PING_AFTER, "the watch is on by default");
    let ep = Endpoint::new(secret(), watched.clone()).unwrap();
    assert_eq!(ep.call(addr, b"warm".to_vec()).unwrap().body, b"warm");
    let t0 = std::time::Instant::now();
    let r = ep.call(addr, b"work".to_vec());
    let took = t0.elapsed();
    assert!(matches!(r, Err(NetError::Timeout { .. })), "{r:?}");
    // Quiet, ping, probe: three watch times (two without the probe).
    assert!(took >= 3 * weft_net::PING_AFTER - Duration::from_secs(1) && took < 3 * weft_net::PING_AFTER + Duration::from_secs(4), "took {took:?}");
    h.join().unwrap();
    // Off: the same silence is waited for (the peer closes after 12 s).
    let (addr, h) = peer(|s| {
        let _ = next_request(s, &mut HashMap::new());
        std::thread::sleep(Duration::from_secs(12));
    });
    let ep = Endpoint::new(secret(), EndpointConfig { op_timeout: Duration::from_secs(30), ping_after: Duration::ZERO, ..config() }).unwrap();
    let t0 = std::time::Instant::now();
    let r = ep.call(addr, b"work".to_vec());
    assert!(t0.elapsed() >= Duration::from_secs(11), "the call gave up with the watch off: {r:?}");
    h.join().unwrap();
    // Busy: answers pings at once, the request only after 12 s.
    let (addr, h) = peer(|s| {
        let work = next_request(s, &mut HashMap::new());
        let t0 = std::time::Instant::now();
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        while t0.elapsed() < Duration::from_secs(12) {
            if let Ok(h) = read_header(s) {
                let body = weft_net::frame_io::read_vec(s, h.body_len as usize).unwrap();
                assert!(matches!(Request::decode(&body), Ok(Request::Ping)), "only pings come meanwhile");
                write_frame(s, FrameKind::Response, h.msg_id, &weft_wire::Response::Ok.encode(), &[]).unwrap();
            }
        }
        write_frame(s, FrameKind::Response, work.id, b"done", &[]).unwrap();
    });
    let ep = Endpoint::new(secret(), watched).unwrap();
    let r = ep.call(addr, b"work".to_vec());
    assert_eq!(r.unwrap().body, b"done", "a server that answered its pings was given up");
    h.join().unwrap();
}

/// The watch asks a server whose connection went quiet, ping included,
/// for a handshake on a fresh connection before giving it up: a server
/// that stopped reading that connection (as one does for a user past its
/// share of memory) but answers new ones is alive, and its answer, 17 s
/// later, is waited for. Without the probe the call fails after about
/// 10 s.
#[test]
fn a_server_that_stops_reading_a_connection_but_answers_a_new_one_is_waited_for() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (accepted, answering) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        // Later connections (the probes) are answered at once: the
        // handshake's challenge (the probe goes no further).
        accepted
            .send(std::thread::spawn(move || {
                l.set_nonblocking(true).unwrap();
                let mut probes = 0;
                let t0 = std::time::Instant::now();
                while t0.elapsed() < Duration::from_secs(19) {
                    match l.accept() {
                        Ok((mut p, _)) => {
                            p.set_nonblocking(false).unwrap();
                            p.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                            let _ = server_handshake(&mut p, &secret(), rand::random());
                            probes += 1;
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
                probes
            }))
            .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        server_handshake(&mut s, &secret(), rand::random()).unwrap();
        let work = next_request(&mut s, &mut HashMap::new());
        // Reads nothing more (pings included) for 17 s, then answers.
        std::thread::sleep(Duration::from_secs(17));
        write_frame(&mut s, FrameKind::Response, work.id, b"done", &[]).unwrap();
        std::thread::sleep(Duration::from_millis(500));
    });
    let ep = Endpoint::new(secret(), EndpointConfig { op_timeout: Duration::from_secs(30), ..config() }).unwrap();
    let t0 = std::time::Instant::now();
    let r = ep.call(addr, b"work".to_vec());
    assert_eq!(r.map(|r| r.body.into_vec()).map_err(|e| format!("{e} after {:?}", t0.elapsed())), Ok(b"done".to_vec()), "a server alive but not reading was given up");
    h.join().unwrap();
    assert!(answering.recv().unwrap().join().unwrap() >= 1, "no probe came");
}
