//! The challenge-response handshake from the client's side, against
//! scripted peers (issue 11): mutual authentication, exact sizes.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use weft_net::frame_io::{read_header, read_vec, write_frame};
use weft_net::handshake::{client_handshake, server_handshake};
use weft_net::NetError;
use weft_wire::{Challenge, FrameKind, Hello, MsgId, Secret};

fn peer(script: impl FnOnce(TcpStream) + Send + 'static) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        script(s);
    });
    (addr, h)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn both_sides_with_the_secret_complete_the_handshake() {
    let secret = Secret::new(vec![1; 16]);
    let theirs = secret.clone();
    let (addr, h) = peer(move |mut s| server_handshake(&mut s, &theirs, [4; 16]).map_err(|e| format!("{e:?}")).unwrap());
    client_handshake(&mut connect(addr), addr, &secret, [2; 16]).unwrap();
    h.join().unwrap();
}

/// Mutual authentication: a server that does not hold the secret (here it
/// answers the challenge step properly but cannot make the final proof)
/// is refused by the client.
#[test]
fn a_client_refuses_a_server_that_cannot_prove_the_secret() {
    let (addr, h) = peer(|mut s| {
        let head = read_header(&mut s).map_err(|e| format!("{e:?}")).unwrap();
        let _hello = Hello::decode(&read_vec(&mut s, head.body_len as usize).unwrap()).unwrap();
        write_frame(&mut s, FrameKind::Challenge, MsgId(0), &Challenge { nonce: [6; 16] }.encode(), &[]).unwrap();
        let head = read_header(&mut s).map_err(|e| format!("{e:?}")).unwrap();
        assert_eq!(head.kind, FrameKind::Proof);
        let _ = read_vec(&mut s, head.body_len as usize).unwrap();
        // An impostor's proof: made with another key.
        let fake = Secret::new(vec![9; 16]).server_proof(&Hello { nonce: [0; 16], flags: 0 }, &Challenge { nonce: [6; 16] });
        write_frame(&mut s, FrameKind::Welcome, MsgId(0), &fake.encode(), &[]).unwrap();
    });
    match client_handshake(&mut connect(addr), addr, Secret::new(vec![1; 16]), [2; 16]) {
        Err(NetError::Handshake { reason, .. }) => assert!(reason.contains("does not know the cluster secret"), "{reason}"),
        other => panic!("an impostor server was accepted: {other:?}"),
    }
    h.join().unwrap();
}

#[test]
fn a_challenge_of_the_wrong_size_is_a_violation() {
    let (addr, h) = peer(|mut s| {
        let head = read_header(&mut s).map_err(|e| format!("{e:?}")).unwrap();
        let _ = read_vec(&mut s, head.body_len as usize).unwrap();
        write_frame(&mut s, FrameKind::Challenge, MsgId(0), &[0; 17], &[]).unwrap();
    });
    let r = client_handshake(&mut connect(addr), addr, Secret::new(vec![1; 16]), [2; 16]);
    assert!(matches!(r, Err(NetError::Violation { .. })), "{r:?}");
    h.join().unwrap();
}
