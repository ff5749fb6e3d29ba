//! MPI atomic mode through the lock service: sequential consistency of
//! overlapping strided writers, lease expiry of a killed client, and bad
//! lock requests.

use weft_testkit::{TestCluster, weft};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions, Datatype, Extent, LockGranularity, View};
use weft_launch::{ClusterSpec, LocalCluster};
use weft_net::{Endpoint, EndpointConfig};
use weft_wire::{ErrorCode, FileId, LockReq, Request, Response, WireExtent};

const PROCS: u64 = 8;
const ITERS: u64 = 24;
const FILE: u64 = 48 * 1024;

/// Blocks of 96 bytes every 256 in one write: 32 KiB, eight 4 KiB stripes.
const BLOCKS: i64 = 128;

/// The bytes write (p, i) covers: BLOCKS blocks of 96 bytes every 256, from
/// an offset that moves with p and i, so writes of all processes overlap.
fn region(p: u64, i: u64) -> (u64, View) {
    let start = (p * 331 + i * 977) % 4096;
    let ft = Datatype::resized(&Datatype::vector(BLOCKS, 96, 256, &Datatype::byte()).unwrap(), 0, FILE as i64).unwrap();
    (start, View::new(start as i64, Datatype::byte(), ft).unwrap())
}

fn stamp(p: u64, i: u64) -> u8 {
    (p * ITERS + i) as u8 + 1
}

/// One writer process (run only when spawned by the parent). With
/// `WEFT_TEST_NONATOMIC=1` in the environment it writes without atomic
/// mode, and the parent test then fails on torn writes: the check can fail.
#[test]
#[ignore = "run as a child process by atomic_writes_are_sequentially_consistent"]
fn atomic_child() {
    let Ok(p) = std::env::var("WEFT_TEST_RANK") else { return };
    let p: u64 = p.parse().unwrap();
    // With the variables the parent gave (WEFT_SCHED_WINDOW), as a front end reads them.
    let options = weft_client::ClientOptions::from_vars(&weft_net::settings::Vars::env()).unwrap();
    assert_eq!(options.schedule.window, 1);
    let c = Client::with_options(weft_net::ClusterFile::load(Path::new(&std::env::var("WEFT_CLUSTER").unwrap())).unwrap(), options).unwrap();
    let mut f = c.open("/atomic", true).unwrap();
    f.set_atomicity(std::env::var("WEFT_TEST_NONATOMIC").is_err()).unwrap();
    f.set_lock_granularity(LockGranularity::List);
    for i in 0..ITERS {
        let (_, view) = region(p, i);
        let data = vec![stamp(p, i); BLOCKS as usize * 96];
        f.write_view(&view, 0, &data, &Datatype::byte(), data.len() as u64).unwrap();
    }
}

#[test]
fn atomic_writes_are_sequentially_consistent() {
    let tc = TestCluster::start("atomic", 4);
    let c = tc.client();
    c.create("/atomic", CreateOptions { stripe_size: 4096, ..CreateOptions::default() }).unwrap().write_at(0, &vec![0u8; FILE as usize]).unwrap();
    // One request at a time: a write's stripes go out one by one, so
    // writers interleave (and would tear without locks).
    weft_testkit::run_children("atomic_child", PROCS, &tc.lc.cluster_file(), &[("WEFT_SCHED_WINDOW", "1")]);
    let f = c.open("/atomic", false).unwrap();
    let mut file = vec![0u8; FILE as usize];
    f.read_at(0, &mut file).unwrap();
    // Which writes cover each byte.
    let n = (PROCS * ITERS) as usize;
    let mut covers: Vec<Vec<usize>> = vec![Vec::new(); FILE as usize];
    for p in 0..PROCS {
        for i in 0..ITERS {
            let (_, view) = region(p, i);
            for (o, l) in view.file_regions(0, BLOCKS as u64 * 96) {
                for b in o..o + l {
                    covers[b as usize].push((stamp(p, i) - 1) as usize);
                }
            }
        }
    }
    // The last writer of each byte came after every other writer of it;
    // each process's writes came in program order. A serial order exists
    // iff these constraints have no cycle.
    let mut after: Vec<std::collections::BTreeSet<usize>> = vec![Default::default(); n];
    for (b, ws) in covers.iter().enumerate() {
        if ws.is_empty() {
            assert_eq!(file[b], 0, "byte {b} was written by no one");
            continue;
        }
        let last = file[b] as usize;
        assert!(last >= 1 && ws.contains(&(last - 1)), "byte {b} holds stamp {last}, not from a write covering it");
        for &w in ws {
            if w != last - 1 {
                after[w].insert(last - 1);
            }
        }
    }
    for p in 0..PROCS as usize {
        for i in 0..ITERS as usize - 1 {
            after[p * ITERS as usize + i].insert(p * ITERS as usize + i + 1);
        }
    }
    // Kahn's algorithm: everything sorts iff there is no cycle (a torn write makes one).
    let mut indeg = vec![0usize; n];
    for s in &after {
        for &t in s {
            indeg[t] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&w| indeg[w] == 0).collect();
    let mut sorted = 0;
    while let Some(w) = ready.pop() {
        sorted += 1;
        for &t in &after[w] {
            indeg[t] -= 1;
            if indeg[t] == 0 {
                ready.push(t);
            }
        }
    }
    assert_eq!(sorted, n, "no serial order of the writes yields the file: some write was torn");
}

#[test]
fn a_killed_clients_locks_expire_and_waiters_proceed() {
    let dir = std::env::temp_dir().join(format!("weft-test-lease-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ttl = 3000;
    let lc = LocalCluster::start(Path::new(weft()), &dir, &ClusterSpec { data_servers: 1, lock_ttl_ms: ttl, ..ClusterSpec::default() }).unwrap();
    let c = Client::connect(&lc.cluster_file()).unwrap();
    let f = c.create("/leased", CreateOptions::default()).unwrap();
    // A child process takes the lock and hangs on to it.
    let me = std::env::current_exe().unwrap();
    let mut holder = Command::new(&me)
        .args(["--exact", "lock_holder_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env("WEFT_TEST_HOLD", "1")
        .env("WEFT_CLUSTER", lc.cluster_file())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("locked") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "holder exited before locking");
    }
    // While the holder lives (and renews), the lock stays taken.
    let started = Instant::now();
    let blocked = std::thread::scope(|s| {
        let h = s.spawn(|| c.lock(&f, true, &[Extent::range(50, 60).unwrap()]).map(|g| (g, Instant::now())));
        std::thread::sleep(Duration::from_millis(2 * ttl));
        assert!(!h.is_finished(), "lock granted while its holder is alive and renewing");
        let killed = Instant::now();
        holder.kill().unwrap();
        holder.wait().unwrap();
        let (guard, granted) = h.join().unwrap().unwrap();
        guard.release().unwrap();
        granted - killed
    });
    assert!(started.elapsed() >= Duration::from_millis(2 * ttl));
    assert!(blocked <= Duration::from_millis(ttl) + Duration::from_secs(3), "waiter proceeded {blocked:?} after the kill (TTL {ttl} ms)");
    drop(lc);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "run as a child process by a_killed_clients_locks_expire_and_waiters_proceed"]
fn lock_holder_child() {
    if std::env::var("WEFT_TEST_HOLD").is_err() {
        return;
    }
    let c = Client::connect(Path::new(&std::env::var("WEFT_CLUSTER").unwrap())).unwrap();
    let f = c.open("/leased", true).unwrap();
    let _g = c.lock(&f, true, &[Extent::range(0, 100).unwrap()]).unwrap();
    println!("locked");
    std::thread::sleep(Duration::from_secs(120));
}

fn lock_call(ep: &Endpoint, addr: std::net::SocketAddr, req: LockReq) -> Response {
    Response::decode(&ep.call(addr, Request::Lock(req).encode()).unwrap().body).unwrap()
}

#[test]
fn bad_lock_requests_are_refused_and_disturb_no_holder() {
    let tc = TestCluster::start("badlock", 1);
    let cf = tc.cluster();
    let addr = cf.lock_server().unwrap().addr;
    let c = tc.client();
    let f = c.create("/held", CreateOptions::default()).unwrap();
    let id = f.attr().id;
    let guard = c.lock(&f, true, &[Extent::range(0, 10).unwrap()]).unwrap();
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
    // A session the service does not know is started by Start only.
    let unknown = LockReq::Acquire { session: 42, file: id, cap: weft_testkit::cap_for(&cf.secret(), id), exclusive: true, wait_ms: 100, extents: vec![WireExtent::Range { start: 20, end: 30 }] };
    assert!(matches!(lock_call(&ep, addr, unknown), Response::Error { code: ErrorCode::LeaseExpired, .. }));
    assert!(matches!(lock_call(&ep, addr, LockReq::Renew { session: 42 }), Response::Error { code: ErrorCode::LeaseExpired, .. }));
    assert!(matches!(lock_call(&ep, addr, LockReq::Start { session: 42 }), Response::Leased(_)));
    let acquire = |extents: Vec<WireExtent>, file: FileId| LockReq::Acquire { session: 42, file, cap: weft_testkit::cap_for(&cf.secret(), file), exclusive: true, wait_ms: 100, extents };
    let is_err = |r: &Response, code: ErrorCode, text: &str| matches!(r, Response::Error { code: c, message } if *c == code && message.contains(text));
    // No one locks a file it could not open: a capability is needed.
    let uncapped = LockReq::Acquire { session: 42, file: id, cap: weft_wire::Capability::none(id), exclusive: false, wait_ms: 100, extents: vec![WireExtent::Range { start: 20, end: 30 }] };
    let r = lock_call(&ep, addr, uncapped);
    assert!(is_err(&r, ErrorCode::Permission, "lock on file"), "{r:?}");
    let r = lock_call(&ep, addr, acquire(vec![WireExtent::Range { start: 9, end: 3 }], id));
    assert!(is_err(&r, ErrorCode::BadRequest, "inverted"), "{r:?}");
    let r = lock_call(&ep, addr, acquire(vec![WireExtent::Range { start: 0, end: u64::MAX }], id));
    assert!(is_err(&r, ErrorCode::BadRequest, "2^63"), "{r:?}");
    let r = lock_call(&ep, addr, acquire(vec![WireExtent::Strided { offset: 0, len: 8, stride: 4, count: 3 }], id));
    assert!(is_err(&r, ErrorCode::BadRequest, "stride"), "{r:?}");
    let r = lock_call(&ep, addr, acquire(vec![], id));
    assert!(is_err(&r, ErrorCode::BadRequest, "at least one"), "{r:?}");
    let r = lock_call(&ep, addr, acquire(vec![WireExtent::Range { start: 0, end: 5 }], FileId(987_654)));
    assert!(is_err(&r, ErrorCode::NotFound, "987654"), "{r:?}");
    let r = lock_call(&ep, addr, LockReq::Release { session: 42, file: id, lock: guard.id() });
    assert!(is_err(&r, ErrorCode::Permission, "not this session"), "{r:?}");
    let r = lock_call(&ep, addr, LockReq::Release { session: 42, file: id, lock: 999_999 });
    assert!(is_err(&r, ErrorCode::BadRequest, "999999"), "{r:?}");
    // A conflicting request waits its wait_ms (the timer may be late under
    // load, never early) and is refused as busy.
    let r = lock_call(&ep, addr, acquire(vec![WireExtent::Range { start: 5, end: 6 }], id));
    let waited = match &r {
        Response::Error { code: ErrorCode::Busy, message } => message.strip_prefix("lock not granted within ").and_then(|m| m.strip_suffix(" ms")).and_then(|m| m.parse::<u64>().ok()),
        _ => None,
    };
    assert!(waited.is_some_and(|ms| ms >= 100), "{r:?}");
    // The holder still holds: a non-conflicting request is granted, and the
    // holder's release works.
    assert!(matches!(lock_call(&ep, addr, acquire(vec![WireExtent::Range { start: 10, end: 20 }], id)), Response::Locked { .. }));
    guard.release().unwrap();
    let r = lock_call(&ep, addr, acquire(vec![WireExtent::Range { start: 0, end: 10 }], id));
    assert!(matches!(r, Response::Locked { .. }), "{r:?}");
}

/// Fencing (issue 25): a client paused past its lease, whose bytes were
/// granted to another client meanwhile, has its delayed write refused by
/// the data server, not applied over the other client's.
#[test]
fn a_write_under_a_lapsed_lease_is_refused_not_applied() {
    let tc = TestCluster::start_spec("fence", ClusterSpec { data_servers: 1, lock_ttl_ms: 1_000, ..ClusterSpec::default() });
    let cf = tc.cluster();
    let c = tc.client();
    let f = c.create("/fenced", CreateOptions::default()).unwrap();
    f.write_at(0, &[b'o'; 100]).unwrap();
    let id = f.attr().id;
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
    let data = cf.server(cf.data_servers()[0]).unwrap().addr;
    // The client to be paused: a raw session that locks the bytes and
    // then never renews.
    assert!(matches!(lock_call(&ep, cf.lock_server().unwrap().addr, LockReq::Start { session: 77 }), Response::Leased(_)));
    let acquire = LockReq::Acquire { session: 77, file: id, cap: weft_testkit::cap_for(&cf.secret(), id), exclusive: true, wait_ms: 100, extents: vec![WireExtent::Range { start: 0, end: 100 }] };
    let Response::Locked { lease, .. } = lock_call(&ep, cf.lock_server().unwrap().addr, acquire) else { panic!("not locked") };
    let write = |lease: weft_wire::Lease, bytes: &[u8]| {
        let body = weft_testkit::capped(&cf.secret(), weft_wire::DataReq::LeasedWrite { file: id, pieces: vec![weft_wire::Piece { offset: 0, len: bytes.len() as u64 }], lease }).encode();
        let mut calls = [weft_net::Call { send: vec![bytes], ..weft_net::Call::new(data, body) }];
        ep.run(&mut calls);
        let [call] = calls;
        Response::decode(&call.result.unwrap().unwrap().body).unwrap()
    };
    assert_eq!(write(lease, b"AAAA"), Response::Written { bytes: 4 }, "within its lease the write lands");
    // Another client's atomic write waits for the lease to run out, then
    // lands (its own writes carry its own lease).
    let mut other = c.open("/fenced", true).unwrap();
    other.set_atomicity(true).unwrap();
    other.write_at(0, b"BBBB").unwrap();
    // The paused client wakes and sends its delayed write.
    let r = write(lease, b"AAAA");
    assert!(matches!(&r, Response::Error { code: ErrorCode::LeaseExpired, message } if message.contains("ran out")), "{r:?}");
    let mut back = [0u8; 8];
    f.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"BBBBoooo", "the other client's bytes stand");
    // A lease its holder made longer is not the lock service's.
    let stretched = weft_wire::Lease { until_ms: lease.until_ms + 3_600_000, ..lease };
    assert!(matches!(write(stretched, b"AAAA"), Response::Error { code: ErrorCode::Permission, .. }));
    f.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"BBBBoooo");
}

/// The client's writes under atomic mode's lock carry the lock session's
/// lease (what the data servers fence by); other writes do not.
#[test]
fn atomic_writes_carry_their_locks_lease() {
    let tc = TestCluster::start_spec("lease-carried", ClusterSpec { data_servers: 1, ..ClusterSpec::default() });
    let mut cf = tc.cluster();
    let target = cf.server(cf.data_servers()[0]).unwrap().addr;
    let (proxy, recorder) = weft_testkit::recording_proxy(target);
    cf.servers.iter_mut().filter(|s| s.addr == target).for_each(|s| s.addr = proxy);
    let c = Client::with_options(cf, weft_client::ClientOptions::default()).unwrap();
    let mut f = c.create("/carried", CreateOptions::default()).unwrap();
    f.set_atomicity(true).unwrap();
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    f.write_at(0, b"atomic").unwrap();
    f.set_atomicity(false).unwrap();
    f.write_at(100, b"plain").unwrap();
    drop(f);
    drop(c);
    let recorded = recorder.join().unwrap();
    let mut r = std::io::Cursor::new(recorded);
    let (mut leased, mut plain) = (Vec::new(), 0);
    while let Ok(h) = weft_net::frame_io::read_header(&mut r) {
        let body = weft_net::frame_io::read_vec(&mut r, h.body_len as usize).unwrap();
        if h.kind == weft_wire::FrameKind::Request {
            weft_net::frame_io::read_vec(&mut r, h.pay_len as usize).unwrap();
            match Request::decode(&body) {
                Ok(Request::Data { op: weft_wire::DataReq::LeasedWrite { lease, .. }, .. }) => leased.push(lease),
                Ok(Request::Data { op: weft_wire::DataReq::Write { .. }, .. }) => plain += 1,
                _ => {}
            }
        }
    }
    assert_eq!((leased.len(), plain), (1, 1), "the atomic write is leased, the other plain");
    // A lease of the lock's session, running some way past the write.
    assert!(leased[0].until_ms > before, "{:?}", leased[0]);
}

/// Fencing across a restart of the lock service: its old sessions are
/// unknown to the new one (their renewals are refused, so their clients
/// learn that their locks are gone), and it grants no lock for one lease
/// time, while writes under leases it gave before may still arrive.
#[test]
fn a_restarted_lock_service_waits_out_the_old_leases() {
    let ttl = Duration::from_millis(2_000);
    let mut tc = TestCluster::start_spec("fence-restart", ClusterSpec { data_servers: 1, lock_ttl_ms: ttl.as_millis() as u64, ..ClusterSpec::default() });
    let cf = tc.cluster();
    let c = tc.client();
    let id = c.create("/held", CreateOptions::default()).unwrap().attr().id;
    let addr = cf.lock_server().unwrap().addr;
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
    let acquire_within = |session: u64, wait_ms: u32| LockReq::Acquire { session, file: id, cap: weft_testkit::cap_for(&cf.secret(), id), exclusive: true, wait_ms, extents: vec![WireExtent::Range { start: 0, end: 100 }] };
    let acquire = |session: u64| acquire_within(session, 20_000);
    assert!(matches!(lock_call(&ep, addr, LockReq::Start { session: 77 }), Response::Leased(_)));
    assert!(matches!(lock_call(&ep, addr, acquire(77)), Response::Locked { .. }));
    let before_restart = Instant::now();
    tc.lc.restart(0).unwrap();
    assert!(matches!(lock_call(&ep, addr, LockReq::Renew { session: 77 }), Response::Error { code: ErrorCode::LeaseExpired, .. }), "the old session is gone with the old service");
    assert!(matches!(lock_call(&ep, addr, LockReq::Start { session: 79 }), Response::Leased(_)));
    // A try-lock (no wait) is told at once, not held through the grace.
    let asked = Instant::now();
    let r = lock_call(&ep, addr, acquire_within(79, 0));
    assert!(matches!(&r, Response::Error { code: ErrorCode::Busy, message } if message.contains("restarted")), "{r:?}");
    assert!(asked.elapsed() < ttl / 2, "answered after {:?}", asked.elapsed());
    // Session 79 is renewed while its acquire waits, as a client's keeper
    // does (else its lease, begun a moment after the grace, could end
    // before the grant the grace's end makes).
    let waiting = std::sync::atomic::AtomicBool::new(true);
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            let renewer = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
            while waiting.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(ttl / 4);
                lock_call(&renewer, addr, LockReq::Renew { session: 79 });
            }
        });
        let r = lock_call(&ep, addr, acquire(79));
        waiting.store(false, std::sync::atomic::Ordering::Relaxed);
        r
    });
    let granted = before_restart.elapsed();
    assert!(matches!(r, Response::Locked { .. }), "{r:?}");
    assert!(granted >= ttl, "granted {granted:?} after the restart began, within one lease time ({ttl:?})");
}

/// A lock held across a restart of the lock service is taken back by its
/// client during the grace, under its id: another client cannot take its
/// bytes after the grace (without the reclaim it could), its release
/// works, and then the bytes are free.
#[test]
fn a_lock_held_across_a_lock_service_restart_is_taken_back() {
    // The restart must be over within the lease less a renewal period (the
    // holder reclaims only while its lease runs): 4 s leaves about 2.5 s.
    let ttl = Duration::from_millis(4_000);
    let mut tc = TestCluster::start_spec("reclaim", ClusterSpec { data_servers: 1, lock_ttl_ms: ttl.as_millis() as u64, ..ClusterSpec::default() });
    let a = tc.client();
    let b = tc.client();
    let fa = a.create("/held", CreateOptions::default()).unwrap();
    let fb = b.open("/held", true).unwrap();
    let mine = a.lock(&fa, true, &[Extent::range(0, 100).unwrap()]).unwrap();
    tc.lc.restart(0).unwrap();
    // Past the grace: A's keeper found the restart within a third of a
    // lease and took its lock back; every other acquire was held until now.
    std::thread::sleep(ttl * 2);
    let r = b.lock_within(&fb, true, &[Extent::range(50, 150).unwrap()], Duration::ZERO);
    assert!(matches!(r, Err(weft_client::Error::Busy { .. })), "another client took bytes locked before the restart: {:?}", r.map(|g| g.id()));
    // Bytes nobody held are free.
    b.lock_within(&fb, true, &[Extent::range(100, 150).unwrap()], Duration::ZERO).unwrap().release().unwrap();
    // A write under the reclaimed lock carries a lease that runs; the
    // release (of the lock's old id) is answered.
    let lease = mine.lease().expect("a lease");
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    assert!(lease.until_ms > now_ms, "{lease:?}");
    mine.release().unwrap();
    b.lock_within(&fb, true, &[Extent::range(50, 150).unwrap()], Duration::ZERO).expect("free once released").release().unwrap();
}

/// An atomic-mode write held up at its data server while the lock service
/// restarts: the holder takes its lock back during the grace, the data
/// server then refuses the write's pieces under the old lease (it ran out
/// while they waited), and the write is sent again whole under the new
/// lease and lands: no error reaches the writer.
#[test]
fn an_atomic_write_refused_under_the_old_lease_is_sent_again_under_the_new() {
    let ttl = Duration::from_millis(4_000);
    let mut tc = TestCluster::start_spec("reclaim-resend", ClusterSpec { data_servers: 1, lock_ttl_ms: ttl.as_millis() as u64, ..ClusterSpec::default() });
    // The data server is stopped for longer than a lease: the liveness
    // watch would give it up (that is another test's subject).
    let mut o = weft_client::ClientOptions::default();
    o.endpoint.ping_after = Duration::ZERO;
    let a = Client::with_options(tc.cluster(), o).unwrap();
    let mut fa = a.create("/resent", CreateOptions::default()).unwrap();
    fa.write_at(0, &[b'o'; 8192]).unwrap();
    fa.set_atomicity(true).unwrap();
    tc.lc.pause(1, true);
    let started = Instant::now();
    let writer = std::thread::spawn(move || {
        let r = fa.write_at(0, &[b'A'; 4096]);
        (r.map_err(|e| e.to_string()), fa)
    });
    // The lock is granted (another client's try-lock is refused: else the
    // write could be granted only after the restart, under a fresh lease,
    // and nothing would be refused) and the write waits in the data
    // server's socket; then the lock service restarts, and the writer's
    // keeper reclaims.
    let b = tc.client();
    let fb = b.open("/resent", true).unwrap();
    loop {
        match b.lock_within(&fb, true, &[Extent::range(0, 4096).unwrap()], Duration::ZERO) {
            Err(weft_client::Error::Busy { .. }) => break,
            Ok(g) => g.release().unwrap(),
            Err(e) => panic!("try-lock: {e}"),
        }
        assert!(started.elapsed() < ttl / 2, "the writer did not get its lock in time");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    tc.lc.restart(0).unwrap();
    // Past the old lease as the data server counts it (a quarter TTL short
    // of the service's), and within the new one.
    std::thread::sleep((ttl + Duration::from_millis(500)).saturating_sub(started.elapsed()));
    tc.lc.pause(1, false);
    let (r, fa) = writer.join().unwrap();
    assert_eq!(r, Ok(4096), "the write refused under the old lease was not sent again");
    drop(fa);
    let mut back = vec![0u8; 8192];
    assert_eq!(b.open("/resent", false).unwrap().read_at(0, &mut back).unwrap(), 8192);
    assert!(back[..4096].iter().all(|&x| x == b'A') && back[4096..].iter().all(|&x| x == b'o'), "the write's bytes are not there");
}

/// The service's side of a reclaim: refused when it did not restart (a
/// client paused past its lease must not get its bytes back that way);
/// after a restart, granted under the old id during the grace, refused to
/// a second session whose lock conflicts, under an id in use, without the
/// grant's seal (nobody reclaims what it was not granted), and once the
/// grace is over.
#[test]
fn reclaims_are_granted_only_in_the_grace_after_a_restart() {
    let ttl = Duration::from_millis(3_000);
    let mut tc = TestCluster::start_spec("reclaim-raw", ClusterSpec { data_servers: 1, lock_ttl_ms: ttl.as_millis() as u64, ..ClusterSpec::default() });
    let cf = tc.cluster();
    let c = tc.client();
    let id = c.create("/held", CreateOptions::default()).unwrap().attr().id;
    let addr = cf.lock_server().unwrap().addr;
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
    let key = weft_wire::CapKey::derive(&cf.secret());
    let forged = |session: u64, lock: u64, start: u64, seal: Option<[u8; 32]>| {
        let extents = vec![WireExtent::Range { start, end: start + 100 }];
        let seal = seal.unwrap_or_else(|| weft_wire::lock_seal(&key, session, id, lock, true, &extents));
        LockReq::Reclaim { session, file: id, cap: weft_testkit::cap_for(&cf.secret(), id), exclusive: true, lock, seal, extents }
    };
    let reclaim = |session: u64, lock: u64, start: u64| forged(session, lock, start, None);
    let refused = |r: &Response| matches!(r, Response::Error { code: ErrorCode::LeaseExpired, .. });
    assert!(matches!(lock_call(&ep, addr, LockReq::Start { session: 90 }), Response::Leased(_)));
    let r = lock_call(&ep, addr, reclaim(90, 7, 0));
    assert!(refused(&r), "a reclaim without a restart: {r:?}");
    tc.lc.restart(0).unwrap();
    let began = Instant::now();
    assert!(matches!(lock_call(&ep, addr, LockReq::Start { session: 91 }), Response::Leased(_)));
    let r = lock_call(&ep, addr, reclaim(91, 7, 0));
    assert!(matches!(r, Response::Locked { lock: 7, .. }), "{r:?}");
    // Asked again (an answer lost): the same answer, not a refusal.
    let r = lock_call(&ep, addr, reclaim(91, 7, 0));
    assert!(matches!(r, Response::Locked { lock: 7, .. }), "a reclaim asked again: {r:?}");
    assert!(matches!(lock_call(&ep, addr, LockReq::Start { session: 92 }), Response::Leased(_)));
    let r = lock_call(&ep, addr, reclaim(92, 8, 50));
    assert!(refused(&r), "a conflicting reclaim: {r:?}");
    let r = lock_call(&ep, addr, reclaim(92, 7, 200));
    assert!(refused(&r), "a reclaim under an id in use: {r:?}");
    let r = lock_call(&ep, addr, forged(92, 9, 200, Some([0; 32])));
    assert!(matches!(r, Response::Error { code: ErrorCode::Permission, .. }), "a reclaim without the grant's seal: {r:?}");
    let r = lock_call(&ep, addr, forged(92, 9, 200, Some(weft_wire::lock_seal(&key, 91, id, 9, true, &[WireExtent::Range { start: 200, end: 300 }]))));
    assert!(matches!(r, Response::Error { code: ErrorCode::Permission, .. }), "a reclaim with another session's seal: {r:?}");
    assert!(matches!(lock_call(&ep, addr, reclaim(92, 9, 200)), Response::Locked { lock: 9, .. }));
    assert!(began.elapsed() < ttl, "the grace ended before the checks ({:?})", began.elapsed());
    // Both sessions renewed halfway, so they outlive the grace.
    std::thread::sleep(ttl / 2);
    for session in [91, 92] {
        assert!(matches!(lock_call(&ep, addr, LockReq::Renew { session }), Response::Leased(_)));
    }
    std::thread::sleep(ttl / 2 + Duration::from_millis(100));
    let r = lock_call(&ep, addr, reclaim(92, 10, 400));
    assert!(refused(&r), "a reclaim after the grace: {r:?}");
    // The reclaimed lock is held: a normal acquire waits for its release.
    let acquire = LockReq::Acquire { session: 92, file: id, cap: weft_testkit::cap_for(&cf.secret(), id), exclusive: true, wait_ms: 0, extents: vec![WireExtent::Range { start: 0, end: 10 }] };
    assert!(matches!(lock_call(&ep, addr, acquire.clone()), Response::Error { code: ErrorCode::Busy, .. }));
    assert!(matches!(lock_call(&ep, addr, LockReq::Release { session: 91, file: id, lock: 7 }), Response::Ok));
    assert!(matches!(lock_call(&ep, addr, acquire), Response::Locked { .. }));
}
