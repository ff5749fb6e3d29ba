//! The data servers' side of server-directed collective I/O, spoken to on
//! the wire: a member that never arrives, breaks the rounds, abandons the
//! collective or sends more than its share fails the collective for every
//! member with a clear error (within the collective timeout, never a hang),
//! and the server lets go of everything it held.

use weft_testkit::TestCluster;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use weft_client::CreateOptions;
use weft_launch::ClusterSpec;
use weft_net::{Call, Endpoint, EndpointConfig};
use weft_wire::{CollTag, DataReq, ErrorCode, Piece, Request, Response};

const TIMEOUT_MS: u64 = 1500;

fn tag(id: u64, participants: u32, member: u32, round: u32) -> CollTag {
    CollTag { id, participants, member, round, window: 1 << 20, last: true, abandon: false }
}

fn write_call<'a>(addr: SocketAddr, f: &weft_client::File, tag: CollTag, offset: u64, data: &'a [u8]) -> Call<'a> {
    let pieces = if data.is_empty() { Vec::new() } else { vec![Piece { offset, len: data.len() as u64 }] };
    let mut c = Call::new(addr, Request::data(f.capability().unwrap(), DataReq::CollWrite { file: f.id(), tag, pieces }).encode());
    c.send = vec![data];
    c
}

fn answer(c: Call<'_>) -> Response {
    let reply = c.result.expect("ran").expect("the server answers");
    weft_wire::Response::decode(&reply.body).unwrap()
}

fn aborted(r: &Response, text: &str) -> bool {
    matches!(r, Response::Error { code: ErrorCode::Aborted, message } if message.contains(text))
}

fn memory_used(tc: &TestCluster) -> u64 {
    tc.client().status().into_iter().filter_map(|s| s.stats.ok()).map(|s| s.memory_used).sum()
}

#[test]
fn broken_collectives_fail_every_member_and_free_the_server() {
    let spec = ClusterSpec { data_servers: 1, server_env: vec![("WEFT_COLL_TIMEOUT_MS".into(), TIMEOUT_MS.to_string())], ..ClusterSpec::default() };
    let tc = TestCluster::start_spec("server-coll", spec);
    let cf = tc.cluster();
    let addr = cf.server(cf.data_servers()[0]).unwrap().addr;
    let client = tc.client();
    let f = client.create("/coll", CreateOptions::default()).unwrap();
    let file = f.id();
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default()).unwrap();
    let idle = memory_used(&tc);
    let data = vec![7u8; 256 * 1024];

    // Member 1 of 2 never comes: member 0 hears so after the timeout.
    let started = Instant::now();
    let mut calls = [write_call(addr, &f, tag(1, 2, 0, 0), 0, &data)];
    ep.run(&mut calls);
    let [c] = calls;
    let r = answer(c);
    assert!(aborted(&r, "members [1] of 2 did not send round 0"), "{r:?}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(TIMEOUT_MS) && waited < Duration::from_millis(TIMEOUT_MS + 3000), "answered after {waited:?}");
    // The straggler arriving later fails at once: the failure is remembered.
    let started = Instant::now();
    let mut calls = [write_call(addr, &f, tag(1, 2, 1, 0), 4096, &data[..10])];
    ep.run(&mut calls);
    let [c] = calls;
    assert!(aborted(&answer(c), "members [1]"));
    assert!(started.elapsed() < Duration::from_millis(TIMEOUT_MS / 2));

    // A member sending the wrong round fails the collective for both, at once.
    let started = Instant::now();
    let mut calls = [write_call(addr, &f, tag(2, 2, 0, 0), 0, &data), write_call(addr, &f, tag(2, 2, 1, 3), 4096, &data[..10])];
    ep.run(&mut calls);
    let [a, b] = calls;
    let (a, b) = (answer(a), answer(b));
    assert!(matches!(&b, Response::Error { code: ErrorCode::BadRequest, message } if message.contains("current round")) || aborted(&b, "round 3"), "{b:?}");
    assert!(aborted(&a, "round 3"), "{a:?}");
    assert!(started.elapsed() < Duration::from_millis(TIMEOUT_MS / 2), "waited {:?}", started.elapsed());

    // A member that abandons fails the one waiting.
    let mut give_up = tag(3, 2, 1, 0);
    give_up.abandon = true;
    let mut calls = [write_call(addr, &f, tag(3, 2, 0, 0), 0, &data), write_call(addr, &f, give_up, 0, &[])];
    ep.run(&mut calls);
    let [a, _] = calls;
    let a = answer(a);
    assert!(aborted(&a, "member 1 abandoned"), "{a:?}");

    // More than its share of the window (1 MiB / 8 members) is refused
    // before anything is held.
    let big = vec![1u8; (1 << 17) + 1];
    let mut calls = [write_call(addr, &f, tag(4, 8, 0, 0), 0, &big)];
    ep.run(&mut calls);
    let [c] = calls;
    let r = answer(c);
    assert!(matches!(&r, Response::Error { code: ErrorCode::BadRequest, message } if message.contains("collective round")), "{r:?}");

    // An empty piece is refused: it moves nothing but would be held.
    let mut c = Call::new(addr, Request::data(f.capability().unwrap(), DataReq::CollRead { file, tag: tag(6, 2, 0, 0), pieces: vec![Piece { offset: 0, len: 0 }; 1000] }).encode());
    ep.run(std::slice::from_mut(&mut c));
    let r = answer(c);
    assert!(matches!(&r, Response::Error { code: ErrorCode::BadRequest, message } if message.contains("empty piece")), "{r:?}");
    // A window past a quarter of the server's memory budget is refused.
    let mut huge = tag(7, 2, 0, 0);
    huge.window = weft_wire::msg::coll::MAX_WINDOW;
    let mut calls = [write_call(addr, &f, huge, 0, &data[..10])];
    ep.run(&mut calls);
    let [c] = calls;
    let r = answer(c);
    assert!(matches!(&r, Response::Error { code: ErrorCode::BadRequest, message } if message.contains("exceeds this server")), "{r:?}");

    // A held request's piece list and its collective's member table are
    // charged to the server's budget while held (65536 members, 2000 pieces).
    let (held, r) = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let pieces: Vec<Piece> = (0..2000).map(|i| Piece { offset: 10 * i, len: 1 }).collect();
            let wide = CollTag { window: 1 << 28, ..tag(8, 65536, 0, 0) };
            let mut c = Call::new(addr, Request::data(f.capability().unwrap(), DataReq::CollRead { file, tag: wide, pieces }).encode());
            ep.run(std::slice::from_mut(&mut c));
            answer(c)
        });
        std::thread::sleep(Duration::from_millis(TIMEOUT_MS / 3));
        (memory_used(&tc), waiter.join().unwrap())
    });
    assert!(aborted(&r, "and 65519 more"), "{r:?}");
    assert!(held >= idle + 65536 * 16 + 2000 * 16, "held collective charged only {} bytes", held - idle);

    // None of it reached the object, and the held memory came back.
    assert_eq!(client.open("/coll", false).unwrap().size().unwrap(), 0, "a failed collective wrote data");
    let deadline = Instant::now() + Duration::from_secs(5);
    while memory_used(&tc) > idle && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(memory_used(&tc) <= idle, "server holds {} bytes, {} when idle", memory_used(&tc), idle);

    // A complete collective of three members, in two rounds each, writes
    // what they sent.
    let parts: Vec<Vec<u8>> = (0..3u8).map(|m| vec![b'a' + m; 1000]).collect();
    for round in 0..2u32 {
        let mut calls: Vec<Call<'_>> = (0..3u32)
            .map(|m| {
                let t = CollTag { id: 5, participants: 3, member: m, round, window: 1 << 20, last: round == 1, abandon: false };
                write_call(addr, &f, t, u64::from(round * 3 + m) * 1000, &parts[m as usize])
            })
            .collect();
        ep.run(&mut calls);
        for c in calls {
            assert_eq!(answer(c), Response::Written { bytes: 1000 });
        }
    }
    let mut back = vec![0u8; 6000];
    assert_eq!(f.read_at(0, &mut back).unwrap(), 6000);
    let want: Vec<u8> = (0..6).flat_map(|k| vec![b'a' + (k % 3) as u8; 1000]).collect();
    assert!(back == want, "server-directed rounds wrote other bytes");
}
