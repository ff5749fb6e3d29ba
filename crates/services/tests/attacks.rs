//! The attacks of issue 8, scaled to stay quick, against running servers.
//! In each, a well-behaved client in the same test is served while the
//! attack runs, the server's memory stays bounded, and the server is alive
//! afterwards. Each test fails on the defect it guards (noted per test).

use weft_testkit::{response, TestCluster};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions};
use weft_launch::{ClusterSpec, LocalCluster};
use weft_net::frame_io::{read_header, read_vec, write_frame};
use weft_net::handshake::client_handshake;
use weft_wire::{DataReq, ErrorCode, FileId, FrameKind, Header, LockReq, MsgId, Piece, Request, Response, Secret, WireExtent};

fn handshaken(addr: SocketAddr, secret: &Secret) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    client_handshake(&mut s, addr, secret, rand::random()).unwrap();
    s
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")?.split_whitespace().next()?.parse().ok()).expect("VmRSS in /proc/<pid>/status");
    kib * 1024
}

/// Real work on the meta and data services, with a bounded deadline (the
/// client's operation timeout): a server that is stalled or out of slots
/// fails it.
fn served(c: &Client, name: &str) {
    let f = c.create(&format!("/{name}"), CreateOptions::default()).unwrap();
    let data = weft_testkit::pattern(name.len() as u64, 200_000);
    f.write_at(0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data);
}

fn cluster(name: &str, env: &[(&str, &str)]) -> (LocalCluster, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("weft-test-attack-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let spec = ClusterSpec { data_servers: 1, server_env: env.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(), ..ClusterSpec::default() };
    (LocalCluster::start(&weft_testkit::server_bin(), &dir, &spec).unwrap(), dir)
}

fn client(lc: &LocalCluster, timeout: Duration) -> Client {
    let mut o = weft_client::ClientOptions::default();
    o.endpoint.op_timeout = timeout;
    o.endpoint.connect_timeout = timeout;
    Client::with_options(lc.cluster().clone(), o).unwrap()
}

/// Before the fix: piece lengths summing past 2^64 wrapped, the serving
/// thread panicked and never returned its connection slot; 1,024 of them
/// took the data server down for good.
#[test]
fn overflowing_piece_lengths_are_refused_and_the_server_lives() {
    let tc = TestCluster::start("overflow", 1);
    let cf = tc.cluster();
    let data = cf.servers[1].addr;
    let good = tc.client_with_timeout(Duration::from_secs(10));
    let mut s = handshaken(data, &cf.secret());
    for k in 0..1_500u64 {
        // Each piece is valid alone (ends at 2^62); four of them sum to
        // 2^64, so with the last the total wraps to 3, the payload's length.
        let mut pieces = vec![Piece { offset: 0, len: 1 << 62 }; 4];
        pieces.push(Piece { offset: 0, len: 3 });
        let req = if k % 2 == 0 { weft_testkit::capped(&cf.secret(), DataReq::Write { file: FileId(5), pieces }) } else { weft_testkit::capped(&cf.secret(), DataReq::Read { file: FileId(5), pieces, order: Default::default() }) };
        // Encoded by hand: the client library would never build this.
        write_frame(&mut s, FrameKind::Request, MsgId(k), &req.encode(), &[b"abc"]).unwrap();
        let (h, r) = response(&mut s);
        assert_eq!(h.msg_id, MsgId(k));
        assert!(matches!(r, Response::Error { code: ErrorCode::BadRequest, .. }), "{r:?}");
        if k % 500 == 0 {
            served(&good, &format!("overflow{k}"));
        }
    }
    served(&good, "overflow-after");
}

/// Before the fix: each connection was a thread, the handshake timeout was
/// per read call, and sockets trickling a byte every few seconds held every
/// one of the 1,024 slots: no client got in. Here an attacker opens up to
/// 2,000 such sockets (this machine's loopback admits ~150-300 new
/// connections a second) while fresh clients connect and work; the server
/// cuts every trickling socket off at the absolute handshake deadline (3 s
/// here) however often it sends a byte.
#[test]
fn slowloris_sockets_neither_lock_clients_out_nor_stay() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (lc, dir) = cluster("slowloris", &[("WEFT_HANDSHAKE_DEADLINE_MS", "3000")]);
    let data = lc.cluster().servers[1].addr;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let attacker = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let hello = Header::new(FrameKind::Hello, MsgId(0), weft_wire::Hello::LEN, 0).encode();
            let mut socks: Vec<(TcpStream, usize, Instant)> = Vec::new();
            let (mut cut_off, mut opened) = (0, 0);
            let until = Instant::now() + Duration::from_secs(30);
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                let round = Instant::now();
                while socks.len() < 2_000 && round.elapsed() < Duration::from_millis(300) {
                    let Ok(s) = TcpStream::connect_timeout(&data, Duration::from_millis(300)) else { continue };
                    s.set_nonblocking(true).unwrap();
                    socks.push((s, 0, Instant::now()));
                    opened += 1;
                }
                socks.retain_mut(|(s, sent, _)| {
                    let mut b = [0u8; 256];
                    // One byte of a valid header at a time; never all 24.
                    let closed = matches!(s.read(&mut b), Ok(0)) || s.write(&hello[*sent % 20..*sent % 20 + 1]).is_err();
                    *sent += 1;
                    if closed {
                        cut_off += 1;
                    }
                    !closed
                });
                std::thread::sleep(Duration::from_millis(200));
            }
            let oldest = socks.iter().map(|s| s.2.elapsed()).max().unwrap_or_default();
            (opened, cut_off, oldest)
        }
    });
    // Let the attack build up past the old 1,024 slots, then connect.
    std::thread::sleep(Duration::from_secs(8));
    for round in 0..3 {
        // A fresh client: it must get a connection of its own now.
        served(&client(&lc, Duration::from_secs(5)), &format!("slowloris{round}"));
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    let (opened, cut_off, oldest) = attacker.join().unwrap();
    assert!(opened > 1_024, "the attack opened only {opened} sockets");
    assert!(cut_off * 2 >= opened, "{cut_off} of {opened} trickling sockets were cut off");
    assert!(oldest < Duration::from_secs(5), "a trickling socket lived {oldest:?}");
    served(&client(&lc, Duration::from_secs(5)), "slowloris-after");
    drop(lc);
    let _ = std::fs::remove_dir_all(dir);
}

/// Before the fix: one connection announcing 4,096 rendezvous sends of
/// 65,000-piece bodies and never sending them grew the server by 4.2 GB.
/// Now announced-but-unsent requests are capped per connection (the peer
/// that passes the cap is cut off) and their bodies drawn from the budget.
#[test]
fn announced_rendezvous_that_never_come_cannot_grow_the_server() {
    // A budget whose per-connection share (an eighth) covers the 64
    // announced bodies the cap allows (about 1 MB each), so it is the cap,
    // not memory, that stops each connection.
    let (lc, dir) = cluster("rendezvous", &[("WEFT_SERVER_MEMORY", "1g")]);
    let cf = lc.cluster().clone();
    let data = cf.servers[1].addr;
    let pid = lc.pids()[1];
    let good = client(&lc, Duration::from_secs(10));
    served(&good, "rdv-before");
    let before = rss(pid);
    let pieces: Vec<Piece> = (0..65_000u64).map(|k| Piece { offset: k * 256, len: 256 }).collect();
    let body = weft_testkit::capped(&cf.secret(), DataReq::Write { file: FileId(9), pieces }).encode();
    let mut conns = Vec::new();
    for _ in 0..3 {
        let mut s = handshaken(data, &cf.secret());
        let mut cut_off = false;
        for id in 0..4_096u64 {
            let mut f = Header::new(FrameKind::Rts, MsgId(id), body.len(), 65_000 * 256).encode().to_vec();
            f.extend_from_slice(&body);
            if s.write_all(&f).is_err() {
                cut_off = true;
                break;
            }
        }
        // The server reads until the cap, then says why and closes.
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        assert!(cut_off || !all.is_empty());
        assert!(String::from_utf8_lossy(&all).contains("rendezvous requests announced and not sent"));
        conns.push(s);
    }
    served(&good, "rdv-during");
    let grown = rss(pid).saturating_sub(before);
    assert!(grown < 300 << 20, "server grew by {grown} bytes");
    drop(lc);
    let _ = std::fs::remove_dir_all(dir);
}

/// Before the fix: a reader taking its response one byte at a time kept
/// the server's only read turn (and the read's object) for as long as it
/// liked. Now the turn covers the disk read only, and the slow reader is
/// cut off at the send deadline.
#[test]
fn a_slow_reader_holds_no_read_turn_and_is_cut_off() {
    let (lc, dir) = cluster("slowreader", &[("WEFT_SEND_DEADLINE_MS", "3000")]);
    let cf = lc.cluster().clone();
    let good = client(&lc, Duration::from_secs(10));
    let f = good.create("/shared", CreateOptions { stripe_size: 1 << 20, ..Default::default() }).unwrap();
    let data = weft_testkit::pattern(7, 8 << 20);
    f.write_at(0, &data).unwrap();
    let file = f.attr().id;
    let server = cf.servers[1].addr;
    let order = weft_wire::ReadOrder { strategy: weft_sched::Strategy::First.code(), rank: 0, group: 2, slot: 0 };
    let mut slow = handshaken(server, &cf.secret());
    let req = weft_testkit::capped(&cf.secret(), DataReq::Read { file, pieces: vec![Piece { offset: 0, len: 8 << 20 }], order });
    write_frame(&mut slow, FrameKind::Request, MsgId(1), &req.encode(), &[]).unwrap();
    let mut b = [0u8; 1];
    slow.read_exact(&mut b).unwrap();
    // Another ordered read of the same object is served while the slow
    // reader sits on its 8 MiB response.
    let mut other = handshaken(server, &cf.secret());
    let order2 = weft_wire::ReadOrder { rank: 1, ..order };
    let req = weft_testkit::capped(&cf.secret(), DataReq::Read { file, pieces: vec![Piece { offset: 0, len: 4096 }], order: order2 });
    write_frame(&mut other, FrameKind::Request, MsgId(2), &req.encode(), &[]).unwrap();
    let h = read_header(&mut other).map_err(|e| format!("{e:?}")).unwrap();
    let _ = read_vec(&mut other, h.body_len as usize).unwrap();
    assert!(read_vec(&mut other, h.pay_len as usize).unwrap() == data[..4096]);
    // The slow reader is cut off at the send deadline.
    slow.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    std::thread::sleep(Duration::from_millis(3_500));
    let mut rest = Vec::new();
    // Cut off: the stream ends (or is reset) before the 8 MiB are in; a
    // timeout would mean the server kept the connection.
    match slow.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the slow reader was not cut off: {e} after {} bytes", rest.len()),
    }
    assert!(rest.len() < 8 << 20, "the whole response was still delivered");
    served(&good, "slowreader-after");
    drop(lc);
    let _ = std::fs::remove_dir_all(dir);
}

/// The unseeded treap priority (splitmix64 of the key), as the lock table
/// used before the fix.
fn old_priority(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Before the fix: ~25,000 range starts ordered by the (fixed) priority
/// hash made the treap a chain; the recursive operations overflowed the
/// stack and aborted the metadata+lock process. Two strided requests of
/// 2^32 blocks each stalled every lock client for 37 s.
#[test]
fn crafted_lock_requests_neither_crash_nor_stall_the_lock_service() {
    let tc = TestCluster::start("lockattack", 1);
    let cf = tc.cluster();
    let meta = cf.meta_server().addr;
    let good = tc.client_with_timeout(Duration::from_secs(10));
    let f = good.create("/locked", CreateOptions::default()).unwrap();
    let g = good.create("/other", CreateOptions::default()).unwrap();
    let file = f.attr().id;
    drop(g);
    let mut s = handshaken(meta, &cf.secret());
    let mut keys: Vec<u64> = (0..30_000).collect();
    keys.sort_by_key(|&k| old_priority(k));
    let mut starts = vec![0u64; keys.len()];
    for (rank, &k) in keys.iter().enumerate() {
        starts[k as usize] = rank as u64 * 2;
    }
    let extents = starts.iter().map(|&st| WireExtent::Range { start: st, end: st + 1 }).collect();
    for (id, session) in [(100u64, 77u64), (101, 78)] {
        write_frame(&mut s, FrameKind::Request, MsgId(id), &Request::Lock(LockReq::Start { session }).encode(), &[]).unwrap();
        assert!(matches!(response(&mut s).1, Response::Leased(_)));
    }
    let req = Request::Lock(LockReq::Acquire { session: 77, file, cap: weft_testkit::cap_for(&cf.secret(), file), exclusive: true, wait_ms: 100, extents });
    write_frame(&mut s, FrameKind::Request, MsgId(1), &req.encode(), &[]).unwrap();
    assert!(matches!(response(&mut s).1, Response::Locked { .. }));
    // Two interleaved strided runs of 2^32 blocks: they never overlap, so
    // both are granted, and answered at once.
    let n = 1u64 << 32;
    for (id, offset) in [(2u64, 1u64 << 40), (3, (1 << 40) + 8)] {
        let extents = vec![WireExtent::Strided { offset, len: 8, stride: 16, count: n }];
        let req = Request::Lock(LockReq::Acquire { session: 78, file, cap: weft_testkit::cap_for(&cf.secret(), file), exclusive: true, wait_ms: 100, extents });
        write_frame(&mut s, FrameKind::Request, MsgId(id), &req.encode(), &[]).unwrap();
        assert!(matches!(response(&mut s).1, Response::Locked { .. }));
    }
    // A lock on an unrelated file, through the client library with its 10 s
    // deadline, and ordinary I/O, go on.
    let h = std::thread::spawn({
        let c = tc.client_with_timeout(Duration::from_secs(10));
        move || {
            let mut f = c.open("/other", true).unwrap();
            f.set_atomicity(true).unwrap();
            f.write_at(0, b"still served").unwrap();
        }
    });
    h.join().unwrap();
    served(&good, "lockattack-after");
}

/// Before the fix: renewals timed out after 30 s on a 10 s lease and their
/// failures were only logged, so a client whose lease lapsed went on
/// writing in atomic mode over bytes the lock service had given to others.
/// Now a write under a lapsed lease is refused (`atomic.rs`, fencing), and
/// an access that begins after the lapse, when no lock of the old session
/// is held, is locked in a new session (the old one is never used again).
#[test]
fn after_a_lapsed_lease_the_next_access_gets_a_new_session() {
    let dir = std::env::temp_dir().join(format!("weft-test-attack-lease-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let spec = ClusterSpec { data_servers: 1, lock_ttl_ms: 1_000, ..ClusterSpec::default() };
    let mut lc = LocalCluster::start(&weft_testkit::server_bin(), &dir, &spec).unwrap();
    let c = client(&lc, Duration::from_secs(10));
    let mut f = c.create("/atomic", CreateOptions::default()).unwrap();
    f.set_atomicity(true).unwrap();
    f.write_at(0, b"first").unwrap();
    // The lock service stops answering for longer than the lease.
    lc.pause(0, true);
    std::thread::sleep(Duration::from_millis(1_600));
    lc.pause(0, false);
    f.write_at(0, b"second").unwrap();
    let mut back = [0u8; 6];
    f.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"second");
    drop(lc);
    let _ = std::fs::remove_dir_all(dir);
}

/// A server at its connection limit says so: the client gets a typed
/// `Busy` naming the limit, not a reset, and is served once a slot frees.
#[test]
fn a_server_at_its_connection_limit_answers_busy() {
    let (lc, dir) = cluster("limit", &[("WEFT_MAX_CONNECTIONS", "3")]);
    let cf = lc.cluster().clone();
    let data = cf.servers[1].addr;
    let held: Vec<TcpStream> = (0..3).map(|_| handshaken(data, &cf.secret())).collect();
    let ep = weft_net::Endpoint::new(cf.secret(), weft_net::EndpointConfig::default()).unwrap();
    match ep.call(data, Request::Ping.encode()) {
        Err(weft_net::NetError::Busy { addr, reason }) => {
            assert_eq!(addr, data);
            assert!(reason.contains("connection limit (3)"), "{reason}");
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    drop(held);
    let t = Instant::now();
    loop {
        match ep.call(data, Request::Ping.encode()) {
            Ok(_) => break,
            Err(weft_net::NetError::Busy { .. }) if t.elapsed() < Duration::from_secs(5) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("not served after the slots were freed: {e}"),
        }
    }
    drop(lc);
    let _ = std::fs::remove_dir_all(dir);
}

/// Issue 25: with the shared secret, objects were created 0644 in 0755
/// directories, so any local user read every stored byte around the
/// servers' checks. Everything under a server's directory is its user's.
#[test]
fn the_servers_files_are_readable_by_their_user_only() {
    use std::os::unix::fs::PermissionsExt;
    let tc = TestCluster::start("private-files", 2);
    let c = tc.client();
    let f = c.create("/secret.dat", weft_client::CreateOptions::default()).unwrap();
    f.write_at(0, &[7u8; 300_000]).unwrap();
    f.fsync().unwrap();
    f.close().unwrap();
    fn walk(p: &std::path::Path, seen: &mut Vec<(std::path::PathBuf, u32)>) {
        let md = std::fs::symlink_metadata(p).unwrap();
        seen.push((p.to_path_buf(), md.permissions().mode() & 0o777));
        if md.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                walk(&e.unwrap().path(), seen);
            }
        }
    }
    let mut seen = Vec::new();
    for s in &tc.cluster().servers {
        walk(&s.dir, &mut seen);
    }
    assert!(seen.len() > 4, "the servers' files: {seen:?}");
    let open: Vec<_> = seen.iter().filter(|(_, m)| m & 0o077 != 0).collect();
    assert!(open.is_empty(), "readable by others: {open:?}");
}

/// Issue 24: a local client that breaks the shared-memory rings' rules
/// loses its connection, and the server lives, panics nowhere, and serves
/// a well-behaved client over shared memory. Two breaks: a client-to-server
/// tail a ring and a half past the server's head; and a server-to-client
/// head far ahead of the server's tail, before a hello whose challenge the
/// server must then write. Fails without the rings' position checks (the
/// second computed its room by an underflowing subtraction: a contained
/// panic here, writes past the mapping in a release build).
#[test]
fn a_client_that_breaks_the_shared_rings_loses_only_its_connection() {
    use weft_net::transport::ring::HEADER;
    use weft_net::transport::shm::RING_CAP;
    let (lc, dir) = cluster("shm-ring", &[]);
    let data = lc.cluster().servers.iter().find(|s| s.services.contains(&weft_net::Service::Data)).unwrap().addr;
    let hello = {
        let body = weft_wire::Hello { nonce: [1; 16], flags: 0 }.encode();
        let mut f = Header::new(FrameKind::Hello, MsgId(0), body.len(), 0).encode().to_vec();
        f.extend_from_slice(&body);
        f
    };
    for case in ["client tail past the ring", "server head ahead of its tail"] {
        let (mut bell, base) = shm_rings(data);
        // SAFETY: offsets within the mapping, 8-aligned (ring.rs's layout).
        unsafe {
            if case.starts_with("client") {
                std::ptr::write_volatile(base as *mut u64, (RING_CAP + RING_CAP / 2) as u64);
            } else {
                std::ptr::write_volatile(base.add(HEADER + RING_CAP + 64) as *mut u64, 1 << 63);
                std::ptr::copy_nonoverlapping(hello.as_ptr(), base.add(HEADER), hello.len());
                std::ptr::write_volatile(base as *mut u64, hello.len() as u64);
            }
        }
        bell.write_all(&[1]).unwrap();
        let mut b = [0u8; 16];
        let closed = loop {
            match bell.read(&mut b) {
                Ok(0) | Err(_) => break true,
                Ok(_) => continue,
            }
        };
        assert!(closed, "{case}: the server kept the connection");
    }
    let c = client(&lc, Duration::from_secs(10));
    served(&c, "after-broken-rings");
    for st in c.status() {
        assert_eq!(st.stats.unwrap().panics, 0, "a request or connection panicked");
    }
    drop(lc);
    let _ = std::fs::remove_dir_all(dir);
}

/// Asks `addr`'s server for shared-memory rings as a client would, and maps
/// them: the doorbell socket and the mapping's base.
fn shm_rings(addr: SocketAddr) -> (std::os::unix::net::UnixStream, *mut u8) {
    use nix::sys::mman::{mmap, MapFlags, ProtFlags};
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use weft_net::transport::shm::{mapping_len, socket_addr, RING_CAP};
    let bell = std::os::unix::net::UnixStream::connect_addr(&socket_addr(addr).unwrap()).unwrap();
    bell.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut offer = [0u8; 12];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let mut iov = [std::io::IoSliceMut::new(&mut offer)];
    let msg = recvmsg::<UnixAddr>(bell.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::empty()).unwrap();
    let raw = msg.cmsgs().unwrap().find_map(|c| if let ControlMessageOwned::ScmRights(f) = c { f.first().copied() } else { None }).expect("the offer carries its memory");
    // SAFETY: the descriptor the kernel just passed us.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let len = std::num::NonZeroUsize::new(mapping_len(RING_CAP)).unwrap();
    // SAFETY: a shared mapping of the memfd, left mapped for the test.
    let base = unsafe { mmap(None, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, &fd, 0) }.unwrap().as_ptr() as *mut u8;
    (bell, base)
}
