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
fn reads_agree(a: &weft_client::File, b: &weft_client::File, model: &[u8], seed: u64, rounds: usize) {
    let mut rng = Rng(seed);
    let end = model.len() as u64 + 3 * STRIPE;
    for round in 0..rounds {
        if round % 2 == 0 {
            let off = rng.below(end);
            let len = 1 + rng.below(6 * STRIPE) as usize;
            let (mut x, mut y) = (vec![0xEEu8; len], vec![0xDDu8; len]);
            let (nx, ny) = (a.read_at(off, &mut x).unwrap(), b.read_at(off, &mut y).unwrap());
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
}

#[test]
fn reads_on_the_servers_node_skip_the_servers_and_give_their_bytes() {
    let tc = TestCluster::start("local-reads", 4);
    let local = tc.client();
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
    let before_through = bytes_read(&local);
    reads_agree(&a, &b, &model, 0x5eed, 200);
    let served = bytes_read(&local) - before_through;
    // Only `b`'s reads went through the servers (the random reads move
    // at least one byte each).
    assert!(served > 0, "the reads through the servers were counted");

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

/// The server lends only what the capability lets its holder read, only to
/// a mailbox on its node, and stays up for everyone else.
#[test]
fn a_lend_needs_the_read_right_and_a_mailbox_on_the_node() {
    let tc = TestCluster::start("lend-refusals", 1);
    let c = tc.client();
    let f = c.create("/x", CreateOptions::default()).unwrap();
    f.write_at(0, b"secret bytes").unwrap();
    f.close().unwrap();
    let cf = tc.cluster();
    let data = cf.server(cf.data_servers()[0]).unwrap().addr;
    let ep = Endpoint::new(cf.secret(), weft_net::EndpointConfig { op_timeout: Duration::from_secs(5), ..Default::default() }).unwrap();
    let id = c.stat("/x").unwrap().0.id;
    let mailbox = weft_net::transport::lend::Mailbox::bind().unwrap();
    let ask = |rights: u8, to: [u8; 16], nonce: u64| {
        let cap = CapKey::derive(&cf.secret()).issue(id, rights, u64::MAX);
        let reply = ep.call(data, Request::data(cap, DataReq::Lend { file: id, to, nonce }).encode()).unwrap();
        Response::decode(&reply.body).unwrap()
    };
    let trusted = [0, nix::unistd::geteuid().as_raw()];
    let quick = Duration::from_millis(300);
    // Write right only: refused, and nothing arrives.
    match ask(rights::WRITE | rights::SIZE, *mailbox.id(), 7) {
        Response::Error { code: ErrorCode::Permission, .. } => {}
        other => panic!("a lend without the read right: {other:?}"),
    }
    assert!(mailbox.take(&[7], &trusted, quick).unwrap()[0].is_none(), "a refused lend sent a descriptor");
    // No mailbox of that name on this node: an error, not a hang.
    match ask(rights::READ, [9; 16], 8) {
        Response::Error { code: ErrorCode::Io, .. } => {}
        other => panic!("a lend to no mailbox: {other:?}"),
    }
    // A file without an object here: not found.
    let cap = CapKey::derive(&cf.secret()).issue(FileId(id.0 + 1000), rights::READ, u64::MAX);
    let reply = ep.call(data, Request::data(cap, DataReq::Lend { file: FileId(id.0 + 1000), to: *mailbox.id(), nonce: 9 }).encode()).unwrap();
    assert!(matches!(Response::decode(&reply.body).unwrap(), Response::Error { code: ErrorCode::NotFound, .. }));
    // The read right: the descriptor arrives with its nonce, reads the
    // object, and cannot write it.
    assert!(matches!(ask(rights::READ, *mailbox.id(), 11), Response::Ok));
    let fd = mailbox.take(&[11], &trusted, quick).unwrap().pop().unwrap().expect("the lent descriptor arrives");
    let object = std::fs::File::from(fd);
    let mut b = [0u8; 12];
    std::os::unix::fs::FileExt::read_exact_at(&object, &mut b, 0).unwrap();
    assert_eq!(&b, b"secret bytes");
    assert!(std::os::unix::fs::FileExt::write_at(&object, b"x", 0).is_err(), "a lent descriptor writes");
    // A lend whose nonce nobody waits for is dropped on the way to the
    // one waited for.
    assert!(matches!(ask(rights::READ, *mailbox.id(), 12), Response::Ok));
    assert!(matches!(ask(rights::READ, *mailbox.id(), 13), Response::Ok));
    let got = mailbox.take(&[13], &trusted, quick).unwrap();
    assert!(got[0].is_some(), "the awaited descriptor behind another one");
    // Still serving.
    let mut back = [0u8; 12];
    c.open("/x", false).unwrap().read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"secret bytes");
}
