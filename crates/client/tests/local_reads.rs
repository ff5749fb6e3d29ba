//! Local reads (`file/local_reads.rs`): a client on the servers' node reads
//! their objects through lent descriptors. The bytes must be exactly those
//! a read through the servers gives (checked against a model of the file
//! and against a client with local reads off), and the servers must not
//! have served them (their read counters stay still).

use std::time::Duration;
use weft_client::{Client, ClientOptions, CreateOptions};
use weft_layout::Segment;
use weft_net::Endpoint;
use weft_testkit::{data_stats, pattern, TestCluster};
use weft_wire::{rights, CapKey, DataReq, ErrorCode, FileId, Request, Response};

const STRIPE: u64 = 4096;

fn bytes_read(c: &Client) -> u64 {
    data_stats(c).iter().map(|s| s.bytes_read).sum()
}

/// A small deterministic generator (xorshift), so a failure repeats.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// What reading `len` bytes at `off` of `model` gives: the bytes before
/// its end.
fn expected(model: &[u8], off: u64, len: usize) -> &[u8] {
    let start = (off as usize).min(model.len());
    &model[start..(start + len).min(model.len())]
}

/// Random reads (contiguous, and lists of pieces scattered in memory, some
/// of them tiny) through `a` and `b` must both give what `model` says.
/// Returns the bytes `b` asked for.
fn reads_agree(a: &weft_client::File, b: &weft_client::File, model: &[u8], seed: u64, rounds: usize) -> u64 {
    let mut rng = Rng(seed);
    let mut asked = 0;
    let end = model.len() as u64 + 3 * STRIPE;
    for round in 0..rounds {
        if round % 2 == 0 {
            let off = rng.below(end);
            let len = 1 + rng.below(6 * STRIPE) as usize;
            let (mut x, mut y) = (vec![0xEEu8; len], vec![0xDDu8; len]);
            let (nx, ny) = (a.read_at(off, &mut x).unwrap(), b.read_at(off, &mut y).unwrap());
            asked += len as u64;
            let want = expected(model, off, len);
            assert_eq!((nx, ny), (want.len(), want.len()), "round {round}: read of {len} at {off}: counts");
            assert!(x[..nx] == *want, "round {round}: read of {len} at {off}: local bytes differ from the file's");
            assert!(y[..ny] == *want, "round {round}: read of {len} at {off}: bytes through the servers differ");
        } else {
            // A list of pieces in file order, placed in memory back to
            // front; tiny ones make the client pack them.
            let n = 1 + rng.below(40) as usize;
            let mut file_at = rng.below(model.len() as u64);
            let mut pieces = Vec::new();
            for _ in 0..n {
                let len = if rng.below(2) == 0 { 1 + rng.below(64) } else { 1 + rng.below(2 * STRIPE) };
                pieces.push((file_at, len));
                file_at += len + rng.below(STRIPE);
            }
            let total: u64 = pieces.iter().map(|p| p.1).sum();
            let mut mem = total;
            let segments: Vec<Segment> = pieces
                .iter()
                .map(|&(file, len)| {
                    mem -= len;
                    Segment { file, mem: mem as usize, len }
                })
                .collect();
            let (mut x, mut y) = (vec![0xEEu8; total as usize], vec![0xDDu8; total as usize]);
            a.read_pieces(segments.clone(), &mut x).unwrap();
            b.read_pieces(segments.clone(), &mut y).unwrap();
            asked += total;
            for s in &segments {
                let got = &x[s.mem..s.mem + s.len as usize];
                let mut want = expected(model, s.file, s.len as usize).to_vec();
                // Past the end (inside the access): zeros, as a hole.
                want.resize(s.len as usize, 0);
                assert!(*got == want[..], "round {round}: piece of {} at {}: local bytes differ", s.len, s.file);
                assert!(y[s.mem..s.mem + s.len as usize] == want[..], "round {round}: piece of {} at {}: bytes through the servers differ", s.len, s.file);
            }
        }
    }
    asked
}

#[test]
fn reads_on_the_servers_node_skip_the_servers_and_give_their_bytes() {
    let tc = TestCluster::start("local-reads", 4);
    let local = Client::with_options(tc.cluster(), ClientOptions { local_reads: true, ..ClientOptions::default() }).unwrap();
    let through = Client::with_options(tc.cluster(), ClientOptions { local_reads: false, ..ClientOptions::default() }).unwrap();
    let opts = CreateOptions { stripe_size: STRIPE, stripe_count: 4, ..CreateOptions::default() };

    // A file with data on every server, a hole, and a tail.
    let w = local.create("/dense", opts).unwrap();
    let mut model = pattern(1, 100_000);
    w.write_at(0, &model).unwrap();
    let tail = pattern(2, 5_000);
    w.write_at(150_000, &tail).unwrap();
    model.resize(150_000, 0);
    model.extend_from_slice(&tail);
    w.close().unwrap();

    let a = local.open("/dense", false).unwrap();
    let b = through.open("/dense", false).unwrap();
    // Through the servers: their counters move.
    let before = bytes_read(&local);
    let mut y = vec![0u8; model.len()];
    assert_eq!(b.read_at(0, &mut y).unwrap(), model.len());
    assert!(y == model);
    assert!(bytes_read(&local) >= before + model.len() as u64, "a client with local reads off reads through the servers");
    // Locally: the same bytes, and no server reads them.
    let before = bytes_read(&local);
    let mut x = vec![0u8; model.len()];
    assert_eq!(a.read_at(0, &mut x).unwrap(), model.len());
    assert!(x == model, "a whole local read differs from the file");
    assert_eq!(bytes_read(&local), before, "the servers served a read the client could make itself");
    // Only `b`'s reads go through the servers: a local read that failed
    // and went through a server would show here.
    let before = bytes_read(&local);
    let asked = reads_agree(&a, &b, &model, 0x5eed, 200);
    assert_eq!(bytes_read(&local) - before, asked, "the servers served exactly the reads with local reads off");

    // One piece of an object filling more buffer ranges than one preadv
    // takes (IOV_MAX): 1 MiB of one server's stripe read into 2,048
    // ranges placed back to front.
    let big = local.create("/one-stripe", CreateOptions { stripe_size: 1 << 20, stripe_count: 1, ..CreateOptions::default() }).unwrap();
    let data = pattern(4, 1 << 20);
    big.write_at(0, &data).unwrap();
    big.close().unwrap();
    let big = local.open("/one-stripe", false).unwrap();
    let segments: Vec<Segment> = (0..2048u64).map(|k| Segment { file: k * 512, mem: ((2047 - k) * 512) as usize, len: 512 }).collect();
    let before = bytes_read(&local);
    let mut x = vec![0u8; 1 << 20];
    assert_eq!(big.read_pieces(segments, &mut x).unwrap(), 1 << 20);
    for k in 0..2048usize {
        assert!(x[(2047 - k) * 512..(2048 - k) * 512] == data[k * 512..(k + 1) * 512], "range {k} differs");
    }
    assert_eq!(bytes_read(&local), before, "2,048 buffer ranges of one piece were read locally");

    // A file with an object on one server only: the others have none to
    // lend yet. Once written there (by another handle), the same open
    // handle reads the new bytes (and then locally).
    let w = local.create("/sparse", opts).unwrap();
    w.write_at(3 * STRIPE + 10, b"tail").unwrap();
    let a = local.open("/sparse", false).unwrap();
    let mut x = vec![1u8; 4 * STRIPE as usize];
    assert_eq!(a.read_at(0, &mut x).unwrap(), 3 * STRIPE as usize + 14);
    assert!(x[..3 * STRIPE as usize + 10].iter().all(|&v| v == 0) && &x[3 * STRIPE as usize + 10..3 * STRIPE as usize + 14] == b"tail");
    let head = pattern(3, 3 * STRIPE as usize);
    w.write_at(0, &head).unwrap();
    w.close().unwrap();
    let mut x = vec![1u8; 3 * STRIPE as usize];
    assert_eq!(a.read_at(0, &mut x).unwrap(), x.len());
    assert!(x == head, "bytes written after the first read are read");
    let before = bytes_read(&local);
    let mut x = vec![1u8; 3 * STRIPE as usize];
    a.read_at(0, &mut x).unwrap();
    assert!(x == head);
    assert_eq!(bytes_read(&local), before, "objects made after the first read are read locally too");
}

/// The server lends only what the capability lets its holder read, only
/// over a shared-memory connection (a client on its node), and stays up
/// for everyone else.
#[test]
fn a_lend_needs_the_read_right_and_a_connection_on_the_node() {
    let tc = TestCluster::start("lend-refusals", 2);
    let c = tc.client();
    let cf = tc.cluster();
    let data: Vec<_> = cf.data_servers().into_iter().map(|s| cf.server(s).unwrap().addr).collect();
    // One server keeps the object (found by asking both).
    let f = c.create("/x", CreateOptions { stripe_count: 1, ..CreateOptions::default() }).unwrap();
    f.write_at(0, b"secret bytes").unwrap();
    f.close().unwrap();
    let id = c.stat("/x").unwrap().0.id;
    let endpoint = |transport| Endpoint::new(cf.secret(), weft_net::EndpointConfig { transport, op_timeout: Duration::from_secs(5), ..Default::default() }).unwrap();
    let (shm, tcp) = (endpoint(weft_net::TransportChoice::Shm), endpoint(weft_net::TransportChoice::Tcp));
    let ask = |ep: &Endpoint, server, file: FileId, rights: u8| {
        let cap = CapKey::derive(&cf.secret()).issue(file, rights, u64::MAX);
        let reply = ep.call(server, Request::data(cap, DataReq::Lend { file }).encode()).unwrap();
        Response::decode(&reply.body).unwrap()
    };
    let home = data.iter().copied().find(|&a| matches!(ask(&shm, a, id, rights::READ), Response::Lent { .. })).expect("the object's server lends it");
    drop(shm.take_lent(home));
    // Write right only: refused, and nothing comes.
    match ask(&shm, home, id, rights::WRITE | rights::SIZE) {
        Response::Error { code: ErrorCode::Permission, .. } => {}
        other => panic!("a lend without the read right: {other:?}"),
    }
    assert!(shm.take_lent(home).is_empty(), "a refused lend sent a descriptor");
    // Over TCP (a client that may be on another node): refused.
    match ask(&tcp, home, id, rights::READ) {
        Response::Error { code: ErrorCode::Io, .. } => {}
        other => panic!("a lend over TCP: {other:?}"),
    }
    // A file without an object there: not found.
    assert!(matches!(ask(&shm, home, FileId(id.0 + 1000), rights::READ), Response::Error { code: ErrorCode::NotFound, .. }));
    // The read right: the descriptor comes before the answer, which names
    // its object; it reads the object, and cannot write it.
    let Response::Lent { dev, ino } = ask(&shm, home, id, rights::READ) else { panic!("a lend with the read right refused") };
    let mut lent = shm.take_lent(home);
    assert_eq!(lent.len(), 1, "one descriptor per lend");
    let object = std::fs::File::from(lent.pop().unwrap());
    let st = nix::sys::stat::fstat(&object).unwrap();
    assert_eq!((st.st_dev, st.st_ino), (dev, ino), "the answer names the object lent");
    let mut b = [0u8; 12];
    std::os::unix::fs::FileExt::read_exact_at(&object, &mut b, 0).unwrap();
    assert_eq!(&b, b"secret bytes");
    assert!(std::os::unix::fs::FileExt::write_at(&object, b"x", 0).is_err(), "a lent descriptor writes");
    // Descriptors not taken wait in order: a later lend's answer names
    // its own object, so a client tells it from an earlier one's.
    let g = c.create("/y", CreateOptions { stripe_count: 2, stripe_size: 4096, ..CreateOptions::default() }).unwrap();
    g.write_at(0, &pattern(6, 8192)).unwrap();
    let gid = c.stat("/y").unwrap().0.id;
    drop(shm.take_lent(home));
    assert!(matches!(ask(&shm, home, id, rights::READ), Response::Lent { .. }));
    let Response::Lent { dev, ino } = ask(&shm, home, gid, rights::READ) else { panic!("the second file's lend refused") };
    let waiting = shm.take_lent(home);
    assert_eq!(waiting.len(), 2, "both lends' descriptors wait");
    let named: Vec<bool> = waiting.iter().map(|fd| nix::sys::stat::fstat(fd).is_ok_and(|st| (st.st_dev, st.st_ino) == (dev, ino))).collect();
    assert_eq!(named, [false, true], "the answer names the second file's object, not the first's");
    // Still serving; and a reader through the client gets the bytes
    // whichever way it reads them.
    let mut back = [0u8; 12];
    c.open("/x", false).unwrap().read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"secret bytes");
}

/// In caching mode a server's writes may not be in its objects yet: it
/// lends none, and a client reads through it.
#[test]
fn a_server_in_caching_mode_lends_nothing() {
    let env = vec![("WEFT_DATA_CACHE".into(), "64k".into()), ("WEFT_CACHE_BLOCK".into(), "4k".into())];
    let tc = TestCluster::start_spec("lend-cache", weft_launch::ClusterSpec { data_servers: 1, server_env: env, ..Default::default() });
    let c = Client::with_options(tc.cluster(), ClientOptions { local_reads: true, ..ClientOptions::default() }).unwrap();
    let f = c.create("/c", CreateOptions::default()).unwrap();
    let data = pattern(5, 20_000);
    f.write_at(0, &data).unwrap();
    let cf = tc.cluster();
    let server = cf.server(cf.data_servers()[0]).unwrap().addr;
    let ep = Endpoint::new(cf.secret(), weft_net::EndpointConfig { transport: weft_net::TransportChoice::Shm, ..Default::default() }).unwrap();
    let id = c.stat("/c").unwrap().0.id;
    let cap = CapKey::derive(&cf.secret()).issue(id, rights::READ, u64::MAX);
    let reply = ep.call(server, Request::data(cap, DataReq::Lend { file: id }).encode()).unwrap();
    assert!(matches!(Response::decode(&reply.body).unwrap(), Response::Error { code: ErrorCode::Io, .. }), "a server in caching mode lent its object");
    assert!(ep.take_lent(server).is_empty());
    let before = bytes_read(&c);
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "bytes still in the cache are read");
    assert!(bytes_read(&c) >= before + data.len() as u64, "the read went through the server");
}
