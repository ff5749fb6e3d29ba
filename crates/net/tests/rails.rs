//! Rails (issue 24): a payload large enough is split over the client's
//! connections to a server and put together by message id; a rail that
//! fails costs no call: its parts go again on the server's own
//! connection. Against a scripted peer that speaks the frames itself.

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, TcpListener};
use std::sync::mpsc;
use std::time::Duration;
use weft_net::frame_io::{read_header, read_vec, write_frame};
use weft_net::handshake::server_handshake;
use weft_net::{Call, Endpoint, EndpointConfig};
use weft_wire::{FrameKind, Header, PartHead};

mod peer;
use peer::{config, pattern, secret};

const TOKEN: [u8; 16] = [0x42; 16];

enum Seen {
    Frame { conn: usize, head: Header, body: Vec<u8>, payload: Vec<u8> },
    Closed,
}

/// What the peer put together (each payload), and which connection
/// carried each part.
type Received = (Vec<Vec<u8>>, Vec<usize>);

/// A message being put together: the connection that granted it, its
/// request body, its length, its bytes, the bytes received.
struct Assembling {
    granted_on: usize,
    body: Vec<u8>,
    len: usize,
    bytes: Vec<u8>,
    got: usize,
    /// (offset, length) of the parts applied: the same part again counts once.
    parts: Vec<(usize, usize)>,
}

/// A peer taking `conns` connections; each is read by a thread of its
/// own. `close_rails`: a connection that sends a part before any request
/// (a rail) is closed at its first part's header, the part unread.
/// Answers each rendezvous `Cts` (naming `TOKEN`), puts parts together by
/// message id, and answers the whole payload's request with its body and
/// the payload's length; reports which connections carried parts.
fn rail_peer(conns: usize, messages: usize, close_rails: bool) -> (std::net::SocketAddr, std::thread::JoinHandle<Received>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (tx, rx) = mpsc::channel();
        let mut writers = Vec::new();
        for conn in 0..conns {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            server_handshake(&mut s, &secret(), rand::random()).map_err(|e| format!("{e:?}")).unwrap();
            writers.push(s.try_clone().unwrap());
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut primary = false;
                while let Ok(head) = read_header(&mut s) {
                    primary |= head.kind == FrameKind::Rts || head.kind == FrameKind::Request;
                    if close_rails && !primary && head.kind == FrameKind::Part {
                        let _ = s.shutdown(Shutdown::Both);
                        break;
                    }
                    let body = read_vec(&mut s, head.body_len as usize).unwrap();
                    let pay = if head.kind == FrameKind::Rts { 0 } else { head.pay_len as usize };
                    let payload = read_vec(&mut s, pay).unwrap();
                    if tx.send(Seen::Frame { conn, head, body, payload }).is_err() {
                        break;
                    }
                }
                let _ = tx.send(Seen::Closed);
            });
        }
        drop(tx);
        let mut open: HashMap<u64, Assembling> = HashMap::new();
        let mut done = Vec::new();
        let mut carried = Vec::new();
        while done.len() < messages {
            match rx.recv_timeout(Duration::from_secs(20)).expect("the client stopped sending") {
                Seen::Closed => {}
                Seen::Frame { conn, head, body, payload } => match head.kind {
                    FrameKind::Rts => {
                        let len = head.pay_len as usize;
                        open.insert(head.msg_id.0, Assembling { granted_on: conn, body, len, bytes: vec![0; len], got: 0, parts: Vec::new() });
                        write_frame(&mut writers[conn], FrameKind::Cts, head.msg_id, &TOKEN, &[]).unwrap();
                    }
                    FrameKind::Part | FrameKind::Data => {
                        let m = open.get_mut(&head.msg_id.0).expect("bytes for an announced message");
                        let offset = if head.kind == FrameKind::Part {
                            let p = PartHead::decode(&body).unwrap();
                            assert_eq!(p.token.0, TOKEN, "a part names the granting connection");
                            carried.push(conn);
                            p.offset as usize
                        } else {
                            0
                        };
                        if m.parts.contains(&(offset, payload.len())) {
                            continue;
                        }
                        m.parts.push((offset, payload.len()));
                        m.bytes[offset..offset + payload.len()].copy_from_slice(&payload);
                        m.got += payload.len();
                        if m.got >= m.len {
                            let m = open.remove(&head.msg_id.0).unwrap();
                            let mut w = &writers[m.granted_on];
                            write_frame(&mut w, FrameKind::Response, head.msg_id, &m.body, &[]).unwrap();
                            w.flush().unwrap();
                            done.push(m.bytes);
                        }
                    }
                    FrameKind::Request => write_frame(&mut writers[conn], FrameKind::Response, head.msg_id, &body, &[]).unwrap(),
                    k => panic!("unexpected {k:?}"),
                },
            }
        }
        (done, carried)
    });
    (addr, h)
}

fn rails_config(rails: u8) -> EndpointConfig {
    EndpointConfig { rails, op_timeout: Duration::from_secs(15), ..config() }
}

#[test]
fn a_large_payload_goes_in_parts_over_every_rail_and_comes_together() {
    let (addr, h) = rail_peer(4, 3, false);
    // No liveness watch: a grant left unsplit would wait out the deadline.
    let ep = Endpoint::new(secret(), EndpointConfig { ping_after: Duration::ZERO, ..rails_config(4) }).unwrap();
    let (a, b) = (pattern(1, 3 << 20), pattern(2, (1 << 20) + 12_345));
    let mut calls = [Call::new(addr, b"first".to_vec()), Call::new(addr, b"second".to_vec())];
    calls[0].send = vec![&a[..1000], &a[1000..]];
    calls[1].send = vec![&b];
    ep.run(&mut calls);
    for c in &mut calls {
        c.result.take().unwrap().unwrap();
    }
    // A call alone on the rails now open goes the short way (`solo.rs`),
    // which must leave the split of its grant to the general driver.
    let c = pattern(3, 2 << 20);
    let mut alone = [Call::new(addr, b"alone".to_vec())];
    alone[0].send = vec![&c];
    ep.run(&mut alone);
    alone[0].result.take().unwrap().unwrap();
    let (got, carried) = h.join().unwrap();
    assert!(got.contains(&a) && got.contains(&b) && got.contains(&c), "the payloads came together byte for byte");
    let mut rails: Vec<usize> = carried.clone();
    rails.sort_unstable();
    rails.dedup();
    assert_eq!(rails.len(), 4, "parts went over all four connections: {carried:?}");
    let st = ep.stats();
    assert_eq!((st.rail_connects, st.rail_resends), (3, 0));
    assert!(st.rail_parts >= 3, "{st:?}");
}

#[test]
fn a_rail_that_fails_costs_no_call_its_parts_go_again() {
    let (addr, h) = rail_peer(3, 1, true);
    let ep = Endpoint::new(secret(), rails_config(3)).unwrap();
    let a = pattern(3, 4 << 20);
    let mut calls = [Call::new(addr, b"write".to_vec())];
    calls[0].send = vec![&a];
    ep.run(&mut calls);
    let [c] = calls;
    assert_eq!(c.result.unwrap().unwrap().body, b"write");
    let (got, _) = h.join().unwrap();
    assert_eq!(got, [a], "the payload came together after its rails failed");
    let st = ep.stats();
    assert_eq!(st.rail_resends, 2, "each lost rail's part was sent again once: {st:?}");
    assert_eq!(st.rail_connects, 2);
}

/// One payload of `len` bytes through an endpoint with `rails`, to a peer
/// that takes one connection: it must come whole, in a `Data` frame.
fn goes_whole(rails: u8, len: usize) {
    let (addr, h) = rail_peer(1, 1, false);
    let ep = Endpoint::new(secret(), rails_config(rails)).unwrap();
    let a = pattern(rails, len);
    let mut calls = [Call::new(addr, b"x".to_vec())];
    calls[0].send = vec![&a];
    ep.run(&mut calls);
    calls[0].result.take().unwrap().unwrap();
    let (got, carried) = h.join().unwrap();
    assert_eq!((got, carried.len()), (vec![a], 0), "{rails} rails, {len} bytes");
    assert_eq!(ep.stats().rail_connects, 0);
}

#[test]
fn small_payloads_and_one_rail_go_as_before() {
    // One rail: no extra connection, the payload in a Data frame.
    goes_whole(1, 2 << 20);
    // Rails on, a payload under the split size: whole, no rail opened.
    goes_whole(4, 300 << 10);
}

#[test]
fn rails_are_read_from_the_environment_within_bounds() {
    let vars = |v: &'static str| move |name: &str| (name == "WEFT_RAILS").then(|| v.to_string());
    let get = vars("4");
    assert_eq!(EndpointConfig::from_vars(&weft_net::settings::Vars::new(&get)).unwrap().rails, 4);
    for bad in ["0", "9", "many"] {
        let get = vars(bad);
        assert!(EndpointConfig::from_vars(&weft_net::settings::Vars::new(&get)).is_err(), "WEFT_RAILS={bad} was taken");
    }
}
