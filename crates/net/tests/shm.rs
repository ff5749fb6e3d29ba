//! The shared-memory transport (issue 24, item 2) between two real
//! endpoints of an abstract Unix socket: bytes both ways across the rings'
//! wrap, end of stream, offers a client must refuse, and payloads placed
//! in the shared area.

use std::io::{IoSlice, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};
use weft_net::budget::MemoryBudget;
use weft_net::transport::shm::{socket_addr, ShmTransport, AREA_LEN, RING_CAP};
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

/// A peer that rings and closes before the other side drains its
/// doorbell: one poll event says both (readable, closed), and no other
/// comes. The drain must read on past the doorbell byte to the end of
/// stream, or the bytes are read and then the ring answers `WouldBlock`
/// for ever (the peer's close unseen).
#[test]
fn a_doorbell_then_a_close_in_one_event_reads_as_the_bytes_then_the_end() {
    let (mut client, mut server, _budget) = with_area();
    let mut buf = [0u8; 16];
    // The server reads an empty ring: it now waits for a doorbell.
    assert_eq!(server.read(&mut buf).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    assert_eq!(client.write_vectored(&[IoSlice::new(b"bye")]).unwrap(), 3);
    drop(client);
    server.on_event(true, true, true);
    assert_eq!(server.read(&mut buf).unwrap(), 3);
    assert_eq!(&buf[..3], b"bye");
    assert_eq!(server.read(&mut buf).unwrap(), 0, "the close that came with the doorbell is the end of stream");
}

/// A read that gives less than it asked for has emptied the ring and
/// asked for a doorbell (`short_read_drains`: the reader then waits for a
/// poll event without reading again to hear `WouldBlock`), so bytes
/// written after it wake a poller.
#[test]
fn a_short_read_asks_for_a_doorbell() {
    let (mut client, mut server, _budget) = with_area();
    assert!(client.short_read_drains() && server.short_read_drains());
    let mut poll = mio::Poll::new().unwrap();
    poll.registry().register(client.source(), mio::Token(0), mio::Interest::READABLE).unwrap();
    let mut events = mio::Events::with_capacity(4);
    let mut buf = [0u8; 16];
    // The first wait is asked for as ever: by reading an empty ring.
    assert_eq!(client.read(&mut buf).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    for round in 0..3 {
        // Doorbells rung so far are taken, as at a poll event.
        poll.poll(&mut events, Some(Duration::ZERO)).unwrap();
        client.on_event(true, false, false);
        assert_eq!(server.write_vectored(&[IoSlice::new(b"bytes")]).unwrap(), 5);
        poll.poll(&mut events, Some(Duration::from_secs(5))).unwrap();
        assert!(!events.is_empty(), "round {round}: bytes after a short read ring the doorbell");
        assert_eq!(client.read(&mut buf).unwrap(), 5, "a short read");
    }
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
            t.on_event(true, true, false);
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

/// A memfd sealed at `len` bytes, as a server makes it.
fn sealed(len: i64) -> std::os::fd::OwnedFd {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create("t", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
    nix::unistd::ftruncate(&fd, len).unwrap();
    fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL)).unwrap();
    fd
}

#[test]
fn an_offer_whose_memory_does_not_hold_its_area_is_refused() {
    let rings = 2 * (256 + RING_CAP) as i64;
    let offer = |area: u32| {
        let mut o = b"WEFTSHM2".to_vec();
        o.extend_from_slice(&(RING_CAP as u32).to_le_bytes());
        o.extend_from_slice(&area.to_le_bytes());
        o
    };
    // The same sealed memory: right for rings alone, too short for an area.
    for (area, ok) in [(0, true), (1 << 20, false)] {
        let a = addr();
        let l = listen(a);
        let fd = sealed(rings);
        let bytes = offer(area);
        let server = std::thread::spawn(move || {
            let (bell, _) = l.accept().unwrap();
            offer_raw(&bell, &bytes, &fd);
            std::thread::sleep(Duration::from_millis(200));
        });
        let got = ShmTransport::connect(a, Duration::from_secs(5), &[0, nix::unistd::geteuid().as_raw()]);
        match (ok, got) {
            (true, Ok(t)) => assert!(!t.has_area()),
            (false, Err(e)) => assert!(e.to_string().contains("sealed at its size"), "{e}"),
            (ok, got) => panic!("area {area}: expected ok={ok}, got {:?}", got.err()),
        }
        server.join().unwrap();
    }
}

/// A client and a server connected with a shared area whose high-water
/// mark is drawn from the returned budget (64 MiB).
fn with_area() -> (ShmTransport, ShmTransport, std::sync::Arc<MemoryBudget>) {
    let a = addr();
    let l = listen(a);
    let budget = MemoryBudget::new(64 << 20);
    let b2 = budget.clone();
    let server = std::thread::spawn(move || {
        let (bell, _) = l.accept().unwrap();
        ShmTransport::offer(bell, RING_CAP, Some((AREA_LEN, b2))).unwrap()
    });
    let client = ShmTransport::connect(a, Duration::from_secs(5), &[0, nix::unistd::geteuid().as_raw()]).unwrap();
    (client, server.join().unwrap(), budget)
}

#[test]
fn a_placed_payload_is_what_the_client_copied_and_outlives_the_connection() {
    let (mut client, server, budget) = with_area();
    assert!(client.has_area());
    let area = server.area().expect("an area was offered");
    let first = area.place(100_000).unwrap();
    let slot = area.place(3 << 20).unwrap();
    let data = pattern(3, 3 << 20);
    // In three pieces, as a payload of several buffers.
    let (x, rest) = data.split_at(1000);
    let (y, z) = rest.split_at(2 << 20);
    client.place(slot.at(), data.len(), &mut [x, y, z].into_iter()).unwrap();
    assert!(slot.bytes() == &data[..], "the server sees what the client placed");
    // A place past the area, or a payload shorter than its place, is refused.
    let e = client.place(AREA_LEN as u64 - 10, 11, &mut std::iter::once(&[0u8; 11][..])).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    assert!(client.place(u64::MAX, 1, &mut std::iter::once(&[0u8; 1][..])).is_err());
    assert!(client.place(0, 10, &mut std::iter::once(&[0u8; 5][..])).is_err());
    assert!(budget.used() >= 4 << 20, "the area's high-water mark is drawn: {}", budget.used());
    // The connection goes, both sides; a request still holding its place
    // reads it intact (the pages go only when it is done).
    drop(client);
    let mut server = server;
    // The server sees the client gone (its rings' pages then go at once).
    let mut buf = [0u8; 16];
    server.on_event(true, true, false);
    assert_eq!(server.read(&mut buf).unwrap(), 0, "end of stream");
    drop(server);
    drop(first);
    assert!(slot.bytes() == &data[..], "the place was punched under a request holding it");
    drop(slot);
    drop(area);
    assert_eq!(budget.used(), 0, "the area's charge goes back with it");
}

#[test]
fn an_area_gives_its_pages_back_when_idle_and_when_its_last_place_goes() {
    use weft_net::transport::area::IDLE_TRIM;
    let (mut client, server, budget) = with_area();
    let area = server.area().unwrap();
    let place = |client: &mut ShmTransport, at: u64, byte: u8, len: usize| client.place(at, len, &mut std::iter::once(&vec![byte; len][..])).unwrap();
    // Idle: the pages are punched (the client reads zeros) and the charge goes.
    let s = area.place(8192).unwrap();
    place(&mut client, s.at(), 7, 8192);
    assert_eq!(client.area_copy(s.at(), 8192).unwrap(), vec![7; 8192]);
    let at = s.at();
    drop(s);
    assert_eq!(area.trim(Instant::now()), 0, "not yet idle long enough");
    assert_eq!(client.area_copy(at, 8192).unwrap(), vec![7; 8192]);
    assert!(area.trim(Instant::now() + IDLE_TRIM * 2) > 0);
    assert_eq!(client.area_copy(at, 8192).unwrap(), vec![0; 8192], "an idle area's pages are punched");
    assert_eq!(budget.used(), 0);
    // A place held past the connection's end: its bytes stay until it goes,
    // then the area's pages go with the mapping.
    let s = area.place(8192).unwrap();
    place(&mut client, s.at(), 9, 8192);
    drop(server);
    assert_eq!(client.area_copy(s.at(), 8192).unwrap(), vec![9; 8192]);
    assert_eq!(s.bytes(), &[9; 8192][..]);
    let at = s.at();
    drop(s);
    drop(area);
    assert_eq!(client.area_copy(at, 8192).unwrap(), vec![0; 8192], "the area's pages go with its last place");
    assert!(client.area_copy(AREA_LEN as u64 - 1, 2).is_none());
}
