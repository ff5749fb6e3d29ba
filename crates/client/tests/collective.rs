//! Two-phase collective I/O (`weft_client::collective`) with threads as
//! ranks (`ThreadComm`) against a real cluster: interleaved patterns
//! written collectively read back byte for byte as the same pattern
//! written independently, in several rounds (small collective buffers),
//! whatever the mode; and gathering really does cut the servers' requests.

use weft_testkit::TestCluster;
use weft_client::collective::{read_all, write_all, CbMode, CollMethod, CollectiveHints};
use weft_client::comm::ThreadComm;
use weft_client::{Client, CreateOptions, Datatype, Pattern, Segment, View};

const RANKS: usize = 4;

/// Rank r's pieces of a 2-D block-cyclic pattern: blocks of `block` bytes,
/// every RANKS-th block is this rank's, `blocks` of them, plus a ragged tail.
fn pattern(rank: usize, block: u64, blocks: u64) -> Vec<Segment> {
    let mut mem = 0usize;
    let mut out = Vec::new();
    for i in 0..blocks {
        let len = if i == blocks - 1 { block / 2 + rank as u64 } else { block };
        out.push(Segment { file: (i * RANKS as u64 + rank as u64) * block, mem, len });
        mem += len as usize;
    }
    out
}

fn data_for(rank: usize, segs: &[Segment]) -> Vec<u8> {
    let n: usize = segs.iter().map(|s| s.len as usize).sum();
    (0..n).map(|i| ((i * 7 + rank * 31) % 251) as u8).collect()
}

/// Runs `f(rank, comm)` on RANKS threads; returns their results in rank order.
fn on_ranks<T: Send>(f: impl Fn(usize, &ThreadComm) -> T + Sync) -> Vec<T> {
    let comms = ThreadComm::group(RANKS);
    std::thread::scope(|s| {
        let handles: Vec<_> = comms.iter().enumerate().map(|(r, c)| { let f = &f; s.spawn(move || f(r, c)) }).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn requests(c: &Client) -> u64 {
    c.status().into_iter().map(|s| s.stats.unwrap().requests).sum()
}

/// Every mode, on a file striped over all four servers and on one on a
/// single server (where every aggregator and every server-directed round
/// meets the same server).
#[test]
fn collective_writes_and_reads_match_independent_ones_in_every_mode() {
    let tc = TestCluster::start("collective", 4);
    let client = tc.client();
    for stripe_count in [0, 1] {
        every_mode(&client, stripe_count);
    }
}

fn every_mode(client: &Client, stripe_count: u32) {
    // 7000-byte stripes against 1000-byte blocks: pieces straddle stripes.
    let opts = CreateOptions { stripe_size: 7000, stripe_count, ..Default::default() };
    let reference = client.create(&format!("/reference-{stripe_count}"), opts).unwrap();
    assert_eq!(reference.stripe_count(), if stripe_count == 1 { 1 } else { 4 });
    for r in 0..RANKS {
        let segs = pattern(r, 1000, 40);
        reference.write_pieces(&segs, &data_for(r, &segs)).unwrap();
    }
    let size = reference.size().unwrap();
    let mut want = vec![0u8; size as usize];
    reference.read_at(0, &mut want).unwrap();

    let server = |window| (CbMode::Automatic, CollMethod::Server, 4, 9000, window);
    let two = |mode, cb_nodes, cb_buffer| (mode, CollMethod::Auto, cb_nodes, cb_buffer, 1 << 20);
    for (name, (mode, method, cb_nodes, cb_buffer, server_window)) in [
        ("enable", two(CbMode::Enable, 4, 9000)),
        ("automatic", two(CbMode::Automatic, 2, 30000)),
        ("disable", two(CbMode::Disable, 4, 1 << 20)),
        ("one-agg", two(CbMode::Enable, 1, 7000)),
        // Server-directed: in one round, and in many (4 members share 4 KiB
        // per server: rounds of at most 1 KiB each).
        ("server", server(64 << 20)),
        ("server-rounds", server(4096)),
    ] {
        let path = format!("/coll-{name}-{stripe_count}");
        let name = format!("{name} over {} servers", reference.stripe_count());
        client.create(&path, opts).unwrap();
        let hints = CollectiveHints { cb_nodes, cb_buffer_size: cb_buffer, mode, node_of_rank: Vec::new(), method, server_window, small_alone: 0 };
        let before = requests(client);
        let wrote = on_ranks(|r, comm| {
            let f = client.open(&path, true).unwrap();
            let segs = pattern(r, 1000, 40);
            write_all(&f, comm, &segs, &data_for(r, &segs), &hints).unwrap()
        });
        let used = requests(client) - before;
        for (r, w) in wrote.iter().enumerate() {
            assert_eq!(*w, pattern(r, 1000, 40).iter().map(|s| s.len).sum::<u64>(), "{name}: rank {r}'s count");
        }
        let mut got = vec![0u8; size as usize];
        let f = client.open(&path, false).unwrap();
        assert_eq!(f.size().unwrap(), size, "{name}");
        f.read_at(0, &mut got).unwrap();
        assert!(got == want, "{name}: collective write differs from independent writes");
        // 160 pieces spread over 4 servers: independently at least one request
        // per rank and server touched; gathered, each aggregator sends a few.
        if mode == CbMode::Disable {
            assert!(used >= 4 * reference.stripe_count() as u64, "{name}: {used} requests");
        }
        // Read back collectively, each rank its own pieces.
        let back = on_ranks(|r, comm| {
            let f = client.open(&path, false).unwrap();
            let segs = pattern(r, 1000, 40);
            let mut buf = vec![0u8; segs.iter().map(|s| s.len as usize).sum()];
            let n = read_all(&f, comm, &segs, &mut buf, &hints).unwrap();
            (n, buf == data_for(r, &segs))
        });
        for (r, (n, same)) in back.iter().enumerate() {
            assert!(same, "{name}: rank {r} read other bytes than it wrote");
            assert_eq!(*n, pattern(r, 1000, 40).iter().map(|s| s.len).sum::<u64>(), "{name}: rank {r}'s read count");
        }
    }
}

#[test]
fn gathering_cuts_the_requests_the_servers_see() {
    let tc = TestCluster::start("collective-requests", 4);
    let client = tc.client();
    let opts = CreateOptions { stripe_size: 65536, ..Default::default() };
    let mut used = Vec::new();
    for (name, mode) in [("independent", CbMode::Disable), ("two-phase", CbMode::Enable), ("automatic", CbMode::Automatic)] {
        let path = format!("/req-{name}");
        client.create(&path, opts).unwrap();
        let hints = CollectiveHints { cb_nodes: 4, cb_buffer_size: 1 << 20, mode, node_of_rank: Vec::new(), ..Default::default() };
        // 8-byte records, round robin over the ranks: 16384 tiny pieces each,
        // over 8 stripes (2 per server).
        let files: Vec<_> = (0..RANKS).map(|_| client.open(&path, true).unwrap()).collect();
        let before = requests(&client);
        on_ranks(|r, comm| {
            let f = &files[r];
            let segs: Vec<Segment> = (0..16384u64).map(|i| Segment { file: (i * RANKS as u64 + r as u64) * 8, mem: i as usize * 8, len: 8 }).collect();
            let buf = vec![r as u8 + 1; 16384 * 8];
            write_all(f, comm, &segs, &buf, &hints).unwrap();
        });
        used.push(requests(&client) - before);
    }
    // Independently every rank sends a list request to every server (16);
    // gathered, aggregator k holds stripes k and k+4, both on server k, and
    // sends them as one request (4). The status calls count 4 each time.
    assert!(used[1] * 2 <= used[0], "two-phase used {} requests, independent {}", used[1], used[0]);
    // Automatic sends interleaved accesses server-directed: the servers
    // merged every rank's pieces in rounds of their own.
    let rounds: u64 = client.status().into_iter().filter_map(|s| s.stats.ok()).map(|s| s.coll_rounds).sum();
    assert_eq!(rounds, 4, "automatic: one server-directed round per server expected");
}

#[test]
fn collective_reads_past_the_end_count_only_bytes_before_it() {
    let tc = TestCluster::start("collective-eof", 2);
    let client = tc.client();
    let path = "/short";
    let f = client.create(path, CreateOptions { stripe_size: 4096, ..Default::default() }).unwrap();
    f.write_at(0, &vec![9u8; 10_000]).unwrap();
    let hints = CollectiveHints { cb_nodes: 2, cb_buffer_size: 4096, mode: CbMode::Enable, node_of_rank: Vec::new(), ..Default::default() };
    let counts = on_ranks(|r, comm| {
        let f = client.open(path, false).unwrap();
        // Rank r reads 3000-byte blocks r, r+4, r+8: the file ends at 10000.
        let segs = pattern(r, 3000, 3);
        let mut buf = vec![0u8; segs.iter().map(|s| s.len as usize).sum()];
        let n = read_all(&f, comm, &segs, &mut buf, &hints).unwrap();
        (n, buf)
    });
    // Independent reads are the reference for the counts.
    let want: Vec<u64> = (0..RANKS)
        .map(|r| {
            let segs = pattern(r, 3000, 3);
            let mut buf = vec![0u8; segs.iter().map(|s| s.len as usize).sum()];
            f.read_pieces(segs, &mut buf).unwrap() as u64
        })
        .collect();
    assert_eq!(counts.iter().map(|c| c.0).collect::<Vec<_>>(), want);
    // And the bytes: 9s before the end, zeros (untouched) after.
    for (r, (_, buf)) in counts.iter().enumerate() {
        let segs = pattern(r, 3000, 3);
        let mut at = 0;
        for s in &segs {
            for i in 0..s.len {
                let want = if s.file + i < 10_000 { 9 } else { 0 };
                assert_eq!(buf[at], want, "rank {r} byte at file offset {}", s.file + i);
                at += 1;
            }
        }
    }
}

/// Ranks whose hints disagree (MPI programs may pass different ones) still
/// take the same steps: rank 0's hints rule, nothing hangs, data is right.
#[test]
fn ranks_with_different_hints_agree_on_one_plan() {
    let tc = TestCluster::start("collective-hints", 2);
    let client = tc.client();
    client.create("/hints", CreateOptions { stripe_size: 5000, ..Default::default() }).unwrap();
    on_ranks(|r, comm| {
        let f = client.open("/hints", true).unwrap();
        let mode = [CbMode::Enable, CbMode::Disable, CbMode::Automatic, CbMode::Enable][r];
        let hints = CollectiveHints { cb_nodes: r + 1, cb_buffer_size: 4000 * (r as u64 + 1), mode, node_of_rank: Vec::new(), ..Default::default() };
        let segs = pattern(r, 1000, 30);
        write_all(&f, comm, &segs, &data_for(r, &segs), &hints).unwrap();
        let mut back = vec![0u8; segs.iter().map(|s| s.len as usize).sum()];
        read_all(&f, comm, &segs, &mut back, &hints).unwrap();
        assert!(back == data_for(r, &segs), "rank {r} read other bytes");
    });
}

#[test]
fn ranks_reading_the_same_bytes_each_get_them() {
    let tc = TestCluster::start("collective-same", 2);
    let client = tc.client();
    let f = client.create("/same", CreateOptions::default()).unwrap();
    f.write_at(0, b"0123456789").unwrap();
    let hints = CollectiveHints { cb_nodes: RANKS, cb_buffer_size: 1 << 20, mode: CbMode::Automatic, node_of_rank: Vec::new(), ..Default::default() };
    let got = on_ranks(|_, comm| {
        let f = client.open("/same", false).unwrap();
        let mut buf = [0u8; 7];
        let n = read_all(&f, comm, &[Segment { file: 0, mem: 0, len: 7 }], &mut buf, &hints).unwrap();
        (n, buf)
    });
    assert!(got.iter().all(|&(n, b)| n == 7 && &b == b"0123456"), "{got:?}");
}

/// In atomic mode a collective write is one operation: a reader in atomic
/// mode sees every rank's part of one round, never parts of two rounds.
/// (With each rank locking only its own part, it would.)
#[test]
fn an_atomic_collective_write_is_seen_whole_or_not_at_all() {
    let tc = TestCluster::start("collective-atomic", 4);
    let client = tc.client();
    let quarter = 256 * 1024usize;
    client.create("/atomic", CreateOptions { stripe_size: 65536, ..Default::default() }).unwrap().write_at(0, &vec![0u8; 4 * quarter]).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (mixed, reads) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let c = tc.client();
            let mut f = c.open("/atomic", false).unwrap();
            f.set_atomicity(true).unwrap();
            let (mut mixed, mut reads) = (0, 0);
            let mut buf = vec![0u8; 4 * quarter];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.read_at(0, &mut buf).unwrap();
                reads += 1;
                if buf.iter().any(|&b| b != buf[0]) {
                    mixed += 1;
                }
            }
            (mixed, reads)
        });
        for (mode, method) in [(CbMode::Enable, CollMethod::Auto), (CbMode::Disable, CollMethod::Auto), (CbMode::Automatic, CollMethod::Server)] {
            let hints = CollectiveHints { cb_nodes: 2, cb_buffer_size: 1 << 20, mode, node_of_rank: Vec::new(), method, ..Default::default() };
            for round in 1..=12u8 {
                on_ranks(|r, comm| {
                    let mut f = client.open("/atomic", true).unwrap();
                    f.set_atomicity(true).unwrap();
                    let segs = [Segment { file: (r * quarter) as u64, mem: 0, len: quarter as u64 }];
                    write_all(&f, comm, &segs, &vec![round; quarter], &hints).unwrap();
                });
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        reader.join().unwrap()
    });
    assert!(reads > 0);
    assert_eq!(mixed, 0, "{mixed} of {reads} atomic reads saw parts of two collective writes");
}

/// A data server killed while collective writes run: every rank gets an
/// error (none hangs, none returns success for bytes the dead server
/// never stored), within the operation timeout.
#[test]
fn a_data_server_dying_mid_collective_fails_every_rank() {
    server_dies_mid_collective("collective-kill", CollMethod::TwoPhase);
}

#[test]
fn a_data_server_dying_mid_server_directed_collective_fails_every_rank() {
    server_dies_mid_collective("collective-kill-sd", CollMethod::Server);
}

fn server_dies_mid_collective(name: &str, method: CollMethod) {
    let mut tc = TestCluster::start(name, 2);
    let client = tc.client();
    client.create("/victim", CreateOptions { stripe_size: 65536, ..Default::default() }).unwrap();
    let hints = CollectiveHints { cb_nodes: 2, cb_buffer_size: 128 * 1024, mode: CbMode::Enable, node_of_rank: Vec::new(), method, server_window: 256 * 1024, small_alone: 0 };
    let started = std::time::Instant::now();
    let clients: Vec<Client> = (0..RANKS).map(|_| tc.client_with_timeout(std::time::Duration::from_secs(5))).collect();
    let outcomes = std::thread::scope(|s| {
        let writers = s.spawn(|| {
            on_ranks(|r, comm| {
                let f = clients[r].open("/victim", true).unwrap();
                let segs = pattern(r, 4096, 256);
                let data = data_for(r, &segs);
                // Write until a collective fails (the server is killed below).
                for _ in 0..2000 {
                    if let Err(e) = write_all(&f, comm, &segs, &data, &hints) {
                        return Err(e.to_string());
                    }
                }
                Ok(())
            })
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        tc.lc.kill(2);
        writers.join().unwrap()
    });
    for (r, o) in outcomes.iter().enumerate() {
        assert!(o.is_err(), "rank {r} kept succeeding with a data server dead");
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "took {:?}", started.elapsed());
}

/// A rank whose own access is refused (here: past the largest offset)
/// still takes part in a server-directed collective: it touches no server,
/// so no server waits for it, and every rank returns an error at once.
#[test]
fn a_refused_rank_fails_a_server_directed_collective_everywhere_without_a_wait() {
    let tc = TestCluster::start("collective-refused", 2);
    let client = tc.client();
    client.create("/refused", CreateOptions { stripe_size: 4096, ..Default::default() }).unwrap();
    let hints = CollectiveHints { method: CollMethod::Server, ..Default::default() };
    let started = std::time::Instant::now();
    let outcomes = on_ranks(|r, comm| {
        let f = client.open("/refused", true).unwrap();
        let segs = if r == 2 { vec![Segment { file: u64::MAX - 10, mem: 0, len: 100 }] } else { pattern(r, 1000, 8) };
        let data = vec![1u8; segs.iter().map(|s| s.len as usize).sum()];
        write_all(&f, comm, &segs, &data, &hints).map_err(|e| e.to_string())
    });
    for (r, o) in outcomes.iter().enumerate() {
        assert!(o.is_err(), "rank {r} succeeded: {o:?}");
    }
    assert!(outcomes[0].as_ref().unwrap_err().contains("rank 2"), "{outcomes:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "took {:?}", started.elapsed());
}

/// BTIO's nested-strided views (paper 000; 9 ranks, 3240-byte pieces, at
/// a small size) written and read back under every algorithm: the file is
/// the one independent writes make, and every rank reads its own bytes.
#[test]
fn btio_views_round_trip_under_every_algorithm() {
    let tc = TestCluster::start("collective-btio", 3);
    let client = tc.client();
    let (q, cells) = (3u64, 4u64);
    let procs = (q * q) as usize;
    let pattern = Pattern::btio(q, cells);
    let views: Vec<View> = (0..procs as u64).map(|r| View::new(0, Datatype::byte(), pattern.filetype(procs as u64, r).unwrap()).unwrap()).collect();
    let data = |r: usize, len: usize| -> Vec<u8> { (0..len).map(|i| ((i * 13 + r * 71) % 253) as u8).collect() };
    let opts = CreateOptions { stripe_size: 16384, ..Default::default() };
    let reference = client.create("/btio-ref", opts).unwrap();
    for (r, v) in views.iter().enumerate() {
        let len = v.filetype().size() as usize;
        let segs = reference.view_segments(v, 0, len, &Datatype::byte(), len as u64).unwrap();
        reference.write_pieces(&segs, &data(r, len)).unwrap();
    }
    let size = reference.size().unwrap() as usize;
    assert_eq!(size as u64, pattern.file_size());
    let mut want = vec![0u8; size];
    reference.read_at(0, &mut want).unwrap();
    for (name, method, window) in [("two-phase", CollMethod::TwoPhase, 1 << 20), ("server", CollMethod::Server, 1 << 20), ("server-rounds", CollMethod::Server, 9 * 4096)] {
        let path = format!("/btio-{name}");
        client.create(&path, opts).unwrap();
        let hints = CollectiveHints { cb_nodes: 3, cb_buffer_size: 32768, method, server_window: window, ..Default::default() };
        let comms = ThreadComm::group(procs);
        let back: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .iter()
                .enumerate()
                .map(|(r, comm)| {
                    let (client, views, path, hints) = (&client, &views, &path, &hints);
                    s.spawn(move || {
                        let f = client.open(path, true).unwrap();
                        let len = views[r].filetype().size() as usize;
                        let segs = f.view_segments(&views[r], 0, len, &Datatype::byte(), len as u64).unwrap();
                        write_all(&f, comm, &segs, &data(r, len), hints).unwrap();
                        let mut buf = vec![0u8; len];
                        assert_eq!(read_all(&f, comm, &segs, &mut buf, hints).unwrap(), len as u64);
                        buf == data(r, len)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(back.iter().all(|&ok| ok), "{name}: ranks read other bytes: {back:?}");
        let mut got = vec![0u8; size];
        client.open(&path, false).unwrap().read_at(0, &mut got).unwrap();
        assert!(got == want, "{name}: the file differs from independent writes");
    }
}
