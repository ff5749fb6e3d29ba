#![allow(dead_code)] // each test binary uses some of the helpers
//! A scripted server peer for the endpoint's tests: a real handshake
//! (the server machine through its blocking wrapper), then raw frames.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use weft_net::frame_io::{read_header, read_vec, write_frame};
use weft_net::handshake::server_handshake;
use weft_net::EndpointConfig;
use weft_wire::{FrameKind, MsgId, Secret};

pub fn secret() -> Secret {
    Secret::new(vec![0x5A; 16])
}

pub fn config() -> EndpointConfig {
    EndpointConfig { eager_limit: 64 * 1024, connect_timeout: Duration::from_secs(5), op_timeout: Duration::from_secs(10), ..EndpointConfig::default() }
}

/// A one-connection peer: handshakes, then runs `script` on the stream.
pub fn peer(script: impl FnOnce(&mut TcpStream) + Send + 'static) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        server_handshake(&mut s, &secret(), rand::random()).map_err(|e| format!("{e:?}")).unwrap();
        script(&mut s);
    });
    (addr, h)
}

/// One request as the peer saw it: kind, id, body, payload.
pub struct Seen {
    pub id: MsgId,
    pub body: Vec<u8>,
    pub payload: Vec<u8>,
}

/// Reads the next complete request, eager or by rendezvous (answering
/// each `Rts` with `Cts` at once; its data may come after other frames).
pub fn next_request(s: &mut TcpStream, rts: &mut HashMap<u64, (Vec<u8>, u32)>) -> Seen {
    loop {
        let h = read_header(s).map_err(|e| format!("{e:?}")).unwrap();
        let body = read_vec(s, h.body_len as usize).unwrap();
        match h.kind {
            FrameKind::Request => return Seen { id: h.msg_id, body, payload: read_vec(s, h.pay_len as usize).unwrap() },
            FrameKind::Rts => {
                rts.insert(h.msg_id.0, (body, h.pay_len));
                write_frame(s, FrameKind::Cts, h.msg_id, &[], &[]).unwrap();
            }
            FrameKind::Data => {
                let (body, announced) = rts.remove(&h.msg_id.0).expect("data for an announced message");
                assert_eq!(announced, h.pay_len);
                return Seen { id: h.msg_id, body, payload: read_vec(s, h.pay_len as usize).unwrap() };
            }
            k => panic!("unexpected {k:?}"),
        }
    }
}

pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}


/// A peer that answers `n` requests, each with its body and its payload
/// reversed.
pub fn echo_reversed(n: usize) -> (SocketAddr, std::thread::JoinHandle<()>) {
    peer(move |s| {
        let mut rts = HashMap::new();
        for _ in 0..n {
            let r = next_request(s, &mut rts);
            let mut back = r.payload.clone();
            back.reverse();
            write_frame(s, FrameKind::Response, r.id, &r.body, &[&back]).unwrap();
        }
    })
}
