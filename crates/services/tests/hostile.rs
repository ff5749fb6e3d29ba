//! Bad input on the wire: every kind of malformed or hostile message sent
//! to the meta and to a data service is rejected, and the server goes on
//! serving a well-behaved client in the same test.

use weft_testkit::{response, TestCluster};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use weft_client::{Client, CreateOptions};
use weft_net::frame_io::{read_header, read_vec, write_frame};
use weft_net::handshake::client_handshake;
use weft_net::{Endpoint, EndpointConfig, NetError};
use weft_wire::{ErrorCode, FrameKind, Header, MsgId, Request, Response, Secret};

fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn handshaken(addr: SocketAddr, secret: &Secret) -> TcpStream {
    let mut s = raw(addr);
    client_handshake(&mut s, addr, secret, [1; 16]).unwrap();
    s
}

/// The server closed the connection (after at most one error frame).
fn assert_closed(mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    let mut total = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                total += n;
                assert!(total < 4096, "server kept talking instead of closing");
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("connection not closed: {e}"),
        }
    }
}

/// A well-behaved client does real work on the meta and data services.
fn still_serves(c: &Client, round: usize) {
    let f = c.create(&format!("/ok{round}"), CreateOptions::default()).unwrap();
    let data = weft_testkit::pattern(round as u64, 300_000);
    f.write_at(0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data);
}

#[test]
fn malformed_frames_are_rejected_and_others_keep_being_served() {
    let tc = TestCluster::start("hostile", 2);
    let cf = tc.cluster();
    let secret = cf.secret();
    let good = tc.client();
    still_serves(&good, 0);
    for (round, target) in (1..).zip([cf.meta_server().addr, cf.servers[1].addr]) {
        // Random bytes instead of a hello.
        let mut s = raw(target);
        s.write_all(&weft_testkit::pattern(9, 5000)).unwrap();
        assert_closed(s);
        // A truncated header, then the client goes away.
        let mut s = raw(target);
        s.write_all(&Header::new(FrameKind::Hello, MsgId(0), 48, 0).encode()[..10]).unwrap();
        drop(s);
        // Random bytes after a good handshake.
        let mut s = handshaken(target, &secret);
        s.write_all(&weft_testkit::pattern(10, 3000)).unwrap();
        assert_closed(s);
        // A huge body length: refused before anything is allocated.
        let mut s = handshaken(target, &secret);
        let mut h = Header::new(FrameKind::Request, MsgId(5), 0, 0).encode();
        h[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        s.write_all(&h).unwrap();
        let (_, r) = response(&mut s);
        assert!(matches!(r, Response::Error { code: ErrorCode::BadRequest, ref message } if message.contains("exceeds the limit")), "{r:?}");
        assert_closed(s);
        // A huge payload length likewise.
        let mut s = handshaken(target, &secret);
        let mut h = Header::new(FrameKind::Request, MsgId(5), 1, 0).encode();
        h[20..24].copy_from_slice(&(u32::MAX - 1).to_le_bytes());
        s.write_all(&h).unwrap();
        assert!(matches!(response(&mut s).1, Response::Error { code: ErrorCode::BadRequest, .. }));
        assert_closed(s);
        // A body that does not decode: an error answer, and the connection
        // stays usable because the framing was intact.
        let mut s = handshaken(target, &secret);
        write_frame(&mut s, FrameKind::Request, MsgId(7), &[0xFF, 1, 2], &[]).unwrap();
        let (h, r) = response(&mut s);
        assert_eq!(h.msg_id, MsgId(7));
        assert!(matches!(r, Response::Error { code: ErrorCode::BadRequest, .. }), "{r:?}");
        write_frame(&mut s, FrameKind::Request, MsgId(8), &Request::Ping.encode(), &[]).unwrap();
        assert_eq!(response(&mut s).1, Response::Ok);
        // Data for a rendezvous that was never granted.
        write_frame(&mut s, FrameKind::Data, MsgId(99), &[], &[b"sneaky"]).unwrap();
        assert_closed(s);
        // A frame kind only servers send.
        let mut s = handshaken(target, &secret);
        write_frame(&mut s, FrameKind::Challenge, MsgId(1), &[], &[]).unwrap();
        assert_closed(s);
        still_serves(&good, round);
    }
}

#[test]
fn wrong_secret_and_wrong_version_are_refused() {
    let tc = TestCluster::start("handshake", 1);
    let cf = tc.cluster();
    let good = tc.client();
    for target in [cf.meta_server().addr, cf.servers[1].addr] {
        let ep = Endpoint::new(Secret::new(*b"not the cluster secret"), EndpointConfig::default()).unwrap();
        match ep.call(target, Request::Ping.encode()) {
            Err(NetError::Handshake { reason, addr }) => {
                assert_eq!(addr, target);
                assert!(reason.contains("wrong cluster secret"), "{reason}");
            }
            other => panic!("wrong secret accepted: {other:?}"),
        }
        // A hello from a future protocol version.
        let mut s = raw(target);
        let mut h = Header::new(FrameKind::Hello, MsgId(0), weft_wire::Hello::LEN, 0).encode();
        h[4] = 99;
        s.write_all(&h).unwrap();
        s.write_all(&weft_wire::Hello { nonce: [2; 16], flags: 0 }.encode()).unwrap();
        let (_, r) = response(&mut s);
        assert!(matches!(r, Response::Error { ref message, .. } if message.contains("version 99")), "{r:?}");
        assert_closed(s);
        // Not even a Weft frame.
        let mut s = raw(target);
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_closed(s);
        // A client that connects and says nothing is dropped after the
        // handshake timeout; meanwhile others are served.
        let _silent = raw(target);
        still_serves(&good, target.port() as usize);
    }
}

#[test]
fn bad_data_requests_get_clear_errors() {
    let tc = TestCluster::start("baddata", 1);
    let cf = tc.cluster();
    let data = cf.servers[1].addr;
    let mut s = handshaken(data, &cf.secret());
    // Pieces that add up to more than the payload carries.
    let req = weft_testkit::capped(&cf.secret(), weft_wire::DataReq::Write { file: weft_wire::FileId(77), pieces: vec![weft_wire::Piece { offset: 0, len: 100 }] });
    write_frame(&mut s, FrameKind::Request, MsgId(1), &req.encode(), &[b"short"]).unwrap();
    assert!(matches!(response(&mut s).1, Response::Error { code: ErrorCode::BadRequest, ref message } if message.contains("payload")));
    // The same for a payload that came by rendezvous.
    let big = vec![3u8; 200_000];
    let req = weft_testkit::capped(&cf.secret(), weft_wire::DataReq::Write { file: weft_wire::FileId(77), pieces: vec![weft_wire::Piece { offset: 0, len: 100 }] });
    let r = rendezvous(&mut s, 11, &req, &big);
    assert!(matches!(r, Response::Error { code: ErrorCode::BadRequest, ref message } if message.contains("payload")), "{r:?}");
    // A valid large write on the same connection lands whole.
    let pieces = vec![weft_wire::Piece { offset: 10, len: 150_000 }, weft_wire::Piece { offset: 500_000, len: 50_000 }];
    let req = weft_testkit::capped(&cf.secret(), weft_wire::DataReq::Write { file: weft_wire::FileId(78), pieces: pieces.clone() });
    let data = weft_testkit::pattern(4, 200_000);
    assert_eq!(rendezvous(&mut s, 12, &req, &data), Response::Written { bytes: 200_000 });
    let req = weft_testkit::capped(&cf.secret(), weft_wire::DataReq::Read { file: weft_wire::FileId(78), pieces, order: Default::default() });
    write_frame(&mut s, FrameKind::Request, MsgId(13), &req.encode(), &[]).unwrap();
    let h = read_header(&mut s).map_err(|e| format!("{e:?}")).unwrap();
    let body = read_vec(&mut s, h.body_len as usize).unwrap();
    assert_eq!(Response::decode(&body).unwrap(), Response::Read { object_size: 550_000 });
    assert!(read_vec(&mut s, h.pay_len as usize).unwrap() == data, "the write landed at the pieces' offsets");
    // A read larger than one payload may carry.
    let req = weft_testkit::capped(&cf.secret(), weft_wire::DataReq::Read { file: weft_wire::FileId(77), pieces: vec![weft_wire::Piece { offset: 0, len: 1 << 40 }], order: Default::default() });
    write_frame(&mut s, FrameKind::Request, MsgId(2), &req.encode(), &[]).unwrap();
    assert!(matches!(response(&mut s).1, Response::Error { code: ErrorCode::BadRequest, .. }));
    // A meta request sent to a data server.
    let req = Request::Meta { cred: weft_wire::Cred::new(0, 0), op: weft_wire::MetaReq::Stat { path: "/".into() } };
    write_frame(&mut s, FrameKind::Request, MsgId(3), &req.encode(), &[]).unwrap();
    assert!(matches!(response(&mut s).1, Response::Error { code: ErrorCode::WrongService, .. }));
    // The connection is still good.
    write_frame(&mut s, FrameKind::Request, MsgId(4), &Request::Ping.encode(), &[]).unwrap();
    assert_eq!(response(&mut s).1, Response::Ok);
    // An eager frame larger than the eager limit breaks the protocol: an
    // error saying why, then the connection closes.
    let req = weft_testkit::capped(&cf.secret(), weft_wire::DataReq::Write { file: weft_wire::FileId(79), pieces: vec![weft_wire::Piece { offset: 0, len: 200_000 }] });
    let _ = write_frame(&mut s, FrameKind::Request, MsgId(5), &req.encode(), &[&big]);
    assert!(matches!(response(&mut s).1, Response::Error { code: ErrorCode::BadRequest, ref message } if message.contains("eager limit")));
    assert_closed(s);
}

/// Sends `req` with `payload` by rendezvous (`Rts`, wait for `Cts`, `Data`)
/// and returns the response. A response instead of `Cts` is returned as is.
fn rendezvous(s: &mut TcpStream, id: u64, req: &Request, payload: &[u8]) -> Response {
    let body = req.encode();
    let mut rts = Header::new(FrameKind::Rts, MsgId(id), body.len(), payload.len()).encode().to_vec();
    rts.extend_from_slice(&body);
    s.write_all(&rts).unwrap();
    let h = read_header(s).map_err(|e| format!("{e:?}")).unwrap();
    let body = read_vec(s, h.body_len as usize).unwrap();
    if h.kind == FrameKind::Response {
        return Response::decode(&body).unwrap();
    }
    assert_eq!((h.kind, h.msg_id), (FrameKind::Cts, MsgId(id)));
    write_frame(s, FrameKind::Data, MsgId(id), &[], &[payload]).unwrap();
    let (h, r) = response(s);
    assert_eq!(h.msg_id, MsgId(id));
    r
}

/// Issue 11: a client's handshake recorded once through a proxy was
/// replayed by a program without the secret, which then worked as uid 0.
/// With a server challenge per connection the replay fails at the proof.
#[test]
fn a_recorded_handshake_replayed_without_the_secret_is_refused() {
    let tc = TestCluster::start("replay", 1);
    let cf = tc.cluster();
    let meta = cf.meta_server().addr;
    // A recording proxy between a real client and the meta server.
    let (proxy, recorder) = weft_testkit::recording_proxy(meta);
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
    let stat = Request::Meta { cred: weft_wire::Cred::new(0, 0), op: weft_wire::MetaReq::Stat { path: "/".into() } };
    assert!(matches!(Response::decode(&ep.call(proxy, stat.encode()).unwrap().body).unwrap(), Response::Attr(_)), "the real client works through the proxy");
    drop(ep);
    let recorded = recorder.join().unwrap();
    assert!(recorded.len() > 2 * 24, "handshake and request recorded");
    // The replay: the same bytes, by a program that has no secret.
    let mut s = raw(meta);
    s.write_all(&recorded).unwrap();
    let h = read_header(&mut s).map_err(|e| format!("{e:?}")).unwrap();
    assert_eq!(h.kind, FrameKind::Challenge, "a fresh challenge");
    read_vec(&mut s, h.body_len as usize).unwrap();
    let (_, r) = response(&mut s);
    assert!(matches!(r, Response::Error { code: ErrorCode::Permission, .. }), "{r:?}");
    assert_closed(s);
}

/// Requests sent back to back in one write, more than a connection may
/// have unanswered (64): the server reads ahead, pauses with some of them
/// read (70 small requests: the read that passes the cap is the last,
/// short one), and must answer every one, in order, without any more
/// bytes from the client to wake it.
#[test]
fn pipelined_requests_past_the_unanswered_cap_are_all_answered_in_order() {
    let tc = TestCluster::start("pipelined", 1);
    let cf = tc.cluster();
    let addr = cf.servers[0].addr;
    let mut s = handshaken(addr, &cf.secret());
    // The first request is read exactly; the connection reads ahead after it.
    write_frame(&mut s, FrameKind::Request, MsgId(1), &Request::Sink.encode(), &[]).unwrap();
    assert_eq!(response(&mut s).0.msg_id, MsgId(1));
    let mut next = 2u64;
    for burst in [70, 66, 75, 90, 130, 300] {
        let first = next;
        let mut bytes = Vec::new();
        for id in first..first + burst {
            bytes.extend_from_slice(&Header::new(FrameKind::Request, MsgId(id), 1, 0).encode());
            bytes.extend_from_slice(&Request::Sink.encode());
        }
        next += burst;
        s.write_all(&bytes).unwrap();
        // (A read timeout of 10 s: a request left unread fails here.)
        let ids: Vec<u64> = (0..burst)
            .map(|_| {
                let (h, r) = response(&mut s);
                assert_eq!(r, Response::Ok);
                h.msg_id.0
            })
            .collect();
        assert_eq!(ids, (first..first + burst).collect::<Vec<_>>(), "a burst of {burst}");
    }
}
