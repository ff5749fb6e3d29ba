//! The shared-memory transport (issue 24, item 2) between two real
//! endpoints of an abstract Unix socket: bytes both ways across the rings'
//! wrap, end of stream, and offers a client must refuse.

use std::io::{IoSlice, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};
use weft_net::transport::shm::{socket_addr, ShmTransport, RING_CAP};
use weft_net::transport::Transport;

/// A fake server address (its shm name) no other test uses.
fn addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 7], 20_000 + (std::process::id() % 20_000) as u16 + rand::random::<u16>() % 5_000))
}

fn listen(a: SocketAddr) -> UnixListener {
    UnixListener::bind_addr(&socket_addr(a).unwrap()).unwrap()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

#[test]
fn bytes_cross_both_ways_through_many_ring_lengths() {
    let a = addr();
    let l = listen(a);
    let n = 5 * RING_CAP + 12_345;
    let server = std::thread::spawn(move || {
        let (bell, _) = l.accept().unwrap();
        let mut t = ShmTransport::offer(bell, RING_CAP, None).unwrap();
        let mut b = t.blocking(Instant::now() + Duration::from_secs(30));
        let mut got = vec![0u8; n];
        b.read_exact(&mut got).unwrap();
        assert!(got == pattern(1, n), "client -> server bytes");
        b.write_all(&pattern(2, n)).unwrap();
    });
    let mut t = ShmTransport::connect(a, Duration::from_secs(5), &[0, nix::unistd::geteuid().as_raw()]).unwrap();
    assert_eq!(t.kind(), "shm");
    let mut b = t.blocking(Instant::now() + Duration::from_secs(30));
    // Written in odd pieces, vectored.
    let out = pattern(1, n);
    let mut at = 0;
    while at < n {
        let k = (n - at).min(77_777);
        let (x, y) = out[at..at + k].split_at(k / 3);
        at += b.write_vectored(&[IoSlice::new(x), IoSlice::new(y)]).unwrap();
    }
    let mut back = vec![0u8; n];
    b.read_exact(&mut back).unwrap();
    assert!(back == pattern(2, n), "server -> client bytes");
    server.join().unwrap();
}

#[test]
fn a_closed_peer_reads_as_end_of_stream_after_its_last_bytes() {
    let a = addr();
    let l = listen(a);
    let server = std::thread::spawn(move || {
        let (bell, _) = l.accept().unwrap();
        let mut t = ShmTransport::offer(bell, RING_CAP, None).unwrap();
        t.blocking(Instant::now() + Duration::from_secs(10)).write_all(b"last words").unwrap();
        // Dropped: the socket closes.
    });
    let mut t = ShmTransport::connect(a, Duration::from_secs(5), &[0, nix::unistd::geteuid().as_raw()]).unwrap();
    server.join().unwrap();
    let mut b = t.blocking(Instant::now() + Duration::from_secs(10));
    let mut got = Vec::new();
    b.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"last words");
    assert!(!t.idle_is_healthy());
    assert!(t.write_vectored(&[IoSlice::new(b"x")]).is_err(), "writing to a closed peer");
}

#[test]
fn no_server_on_this_node_is_not_found() {
    let e = ShmTransport::connect(addr(), Duration::from_secs(1), &[0]).err().expect("nobody listens");
    assert!(matches!(e.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound), "{e}");
}

/// Sends an offer as a squatter would: `fd` with `bytes`.
fn offer_raw(bell: &std::os::unix::net::UnixStream, bytes: &[u8], fd: &impl AsRawFd) {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
    let fds = [fd.as_raw_fd()];
    sendmsg::<UnixAddr>(bell.as_raw_fd(), &[IoSlice::new(bytes)], &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None).unwrap();
}

#[test]
fn offers_that_could_hurt_the_client_are_refused() {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let mut offer = b"WEFTSHM2".to_vec();
    offer.extend_from_slice(&(RING_CAP as u32).to_le_bytes());
    offer.extend_from_slice(&0u32.to_le_bytes());
    let len = 2 * (256 + RING_CAP) as i64;
    // Unsealed memory: the offerer could shrink it under the client (SIGBUS).
    let unsealed = memfd_create("t", MFdFlags::MFD_CLOEXEC).unwrap();
    nix::unistd::ftruncate(&unsealed, len).unwrap();
    // Rings of an absurd size.
    let mut huge = b"WEFTSHM2".to_vec();
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    huge.extend_from_slice(&0u32.to_le_bytes());
    // An area past what a client maps, or not of whole pages.
    let area = |n: u32| {
        let mut o = b"WEFTSHM2".to_vec();
        o.extend_from_slice(&(RING_CAP as u32).to_le_bytes());
        o.extend_from_slice(&n.to_le_bytes());
        o
    };
    for (what, bytes, want) in [
        ("unsealed", offer.clone(), "sealed at its size"),
        ("wrong magic", b"NOTWEFT!\0\0\x10\0\0\0\0\0".to_vec(), "not a Weft"),
        ("huge rings", huge, "rings of"),
        ("huge area", area(u32::MAX - 4095), "shared area of"),
        ("ragged area", area(4097), "shared area of"),
        // A size that does not cover the area offered: refused before mapping.
        ("area not in the memory", area(1 << 20), "sealed at its size"),
    ] {
        let a = addr();
        let l = listen(a);
        let fd = unsealed.try_clone().unwrap();
        let server = std::thread::spawn(move || {
            let (bell, _) = l.accept().unwrap();
            offer_raw(&bell, &bytes, &fd);
            std::thread::sleep(Duration::from_millis(200));
        });
        let e = ShmTransport::connect(a, Duration::from_secs(5), &[0, nix::unistd::geteuid().as_raw()]).err().unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(e.to_string().contains(want), "{what}: {e}");
        server.join().unwrap();
    }
}

#[test]
fn only_trusted_uids_may_offer_rings_and_remote_addresses_are_not_tried() {
    let a = addr();
    let l = listen(a);
    let server = std::thread::spawn(move || {
        let _ = l.accept();
    });
    // This process is not uid 12345: a process of another user offering
    // rings could relay the handshake and sit in the middle.
    let e = ShmTransport::connect(a, Duration::from_secs(5), &[12345]).err().expect("an untrusted offerer");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    server.join().unwrap();
    // An address of no interface here: no server of it can be on this
    // node, so its name (anyone's to take) is never asked.
    let remote = SocketAddr::from(([198, 51, 100, 1], 4000));
    let l = listen(remote);
    let e = ShmTransport::connect(remote, Duration::from_secs(1), &[0, nix::unistd::geteuid().as_raw()]).err().expect("a remote address");
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    drop(l);
}

#[test]
fn a_peer_flooding_the_doorbell_breaks_its_connection() {
    use nix::sys::socket::{recvmsg, MsgFlags, UnixAddr};
    let a = addr();
    let l = listen(a);
    let server = std::thread::spawn(move || {
        let (bell, _) = l.accept().unwrap();
        let mut t = ShmTransport::offer(bell, RING_CAP, None).unwrap();
        let t0 = Instant::now();
        loop {
            // What the server's loop does on each readiness event.
            t.on_event(true, true);
            let mut b = [0u8; 8];
            match Transport::read(&mut t, &mut b) {
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return,
                r => assert!(t0.elapsed() < Duration::from_secs(10), "still serving a flooding peer: {r:?}"),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    // A raw client: takes the offer, then writes doorbells without end.
    let mut bell = std::os::unix::net::UnixStream::connect_addr(&socket_addr(a).unwrap()).unwrap();
    let mut offer = [0u8; 12];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
    recvmsg::<UnixAddr>(bell.as_raw_fd(), &mut [std::io::IoSliceMut::new(&mut offer)], Some(&mut space), MsgFlags::empty()).unwrap();
    bell.set_nonblocking(true).unwrap();
    let junk = [1u8; 65536];
    while !server.is_finished() {
        let _ = bell.write(&junk);
    }
    server.join().unwrap();
}
