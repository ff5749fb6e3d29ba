//! Non-contiguous I/O through file views and list I/O, on a running
//! cluster, against the same pattern done with positioned reads and writes
//! on a plain local file.

use weft_testkit::{pattern, TestCluster};
use proptest::prelude::*;
use std::os::unix::fs::FileExt;
use weft_client::{Client, ClientOptions, CreateOptions, Datatype, Distrib, Error, File, Order, Pattern, View, ViewError};


/// Writes `data` through `view` on Weft and, region by region, on `local`.
fn write_both(f: &File, local: &std::fs::File, view: &View, data: &[u8]) {
    assert_eq!(f.write_view(view, 0, data, &Datatype::byte(), data.len() as u64).unwrap(), data.len());
    let mut at = 0usize;
    for (o, l) in view.file_regions(0, data.len() as u64) {
        local.write_all_at(&data[at..at + l as usize], o).unwrap();
        at += l as usize;
    }
}

/// Reads the view's stream back from Weft and compares it with `data`.
fn read_back(f: &File, view: &View, data: &[u8]) {
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_view(view, 0, &mut back, &Datatype::byte(), data.len() as u64).unwrap(), data.len());
    assert!(back == data, "read through the view differs");
}

fn whole(f: &File, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    assert_eq!(f.read_at(0, &mut v).unwrap(), len);
    v
}

fn run_pattern(c: &Client, tc: &TestCluster, name: &str, p: &Pattern, procs: u64, stripe: u64) {
    let f = c.create(&format!("/{name}"), CreateOptions { stripe_size: stripe, ..CreateOptions::default() }).unwrap();
    let local = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(tc.scratch(name)).unwrap();
    if p.overlapping() {
        // Read-only pattern: fill the file, then every process reads its part.
        let all = pattern(7, p.file_size() as usize);
        f.write_at(0, &all).unwrap();
        for rank in 0..procs {
            let view = View::new(0, Datatype::byte(), p.filetype(procs, rank).unwrap()).unwrap();
            let want: Vec<u8> = view.file_regions(0, view.filetype().size()).flat_map(|(o, l)| all[o as usize..(o + l) as usize].to_vec()).collect();
            read_back(&f, &view, &want);
        }
        return;
    }
    let mut streams = Vec::new();
    for rank in 0..procs {
        let view = View::new(0, Datatype::byte(), p.filetype(procs, rank).unwrap()).unwrap();
        let data = pattern(rank + 100, view.filetype().size() as usize);
        write_both(&f, &local, &view, &data);
        streams.push((view, data));
    }
    let want = std::fs::read(tc.scratch(name)).unwrap();
    assert_eq!(want.len() as u64, p.file_size());
    assert!(whole(&f, want.len()) == want, "{name}: file differs from the local reference");
    for (view, data) in &streams {
        read_back(&f, view, data);
    }
}

#[test]
fn the_papers_patterns_match_a_local_file() {
    let tc = TestCluster::start("patterns", 4);
    let c = tc.client();
    let d2 = [Distrib::Block(None), Distrib::Cyclic(1)];
    // Pieces far smaller than a stripe: 8-byte records, 64 KiB stripes.
    run_pattern(&c, &tc, "hpf1d-8", &Pattern::Hpf1d { records: 20_000, record: 8, dist: Distrib::Cyclic(1) }, 4, 65536);
    run_pattern(&c, &tc, "hpf2d-8", &Pattern::Hpf2d { rows: 64, cols: 96, record: 8, dist: d2, grid: [2, 2] }, 4, 65536);
    run_pattern(&c, &tc, "hpf1d-8k", &Pattern::Hpf1d { records: 40, record: 8192, dist: Distrib::Cyclic(2) }, 3, 65536);
    // Pieces that straddle stripe boundaries: 3240-byte pieces, 4 KiB stripes.
    run_pattern(&c, &tc, "btio", &Pattern::btio(3, 3), 9, 4096);
    run_pattern(&c, &tc, "block3d", &Pattern::Block3d { n: 20, elem: 4 }, 8, 4096);
    run_pattern(&c, &tc, "tiles", &Pattern::Tiles { tile: [40, 64], grid: [2, 3], overlap: [8, 17], pixel: 3 }, 6, 4096);
}

#[test]
fn list_io_and_per_piece_requests_give_the_same_bytes() {
    let tc = TestCluster::start("perpiece", 3);
    // Both read through the servers: one request per server, or per piece.
    let slow = Client::with_options(tc.cluster(), ClientOptions { list_io: false, local_reads: false, ..ClientOptions::default() }).unwrap();
    let fast = tc.client_through_servers();
    let p = Pattern::Hpf1d { records: 3000, record: 8, dist: Distrib::Cyclic(1) };
    for (name, c) in [("list", &fast), ("piece", &slow)] {
        run_pattern(c, &tc, name, &p, 2, 4096);
    }
    let a = whole(&fast.open("/list", false).unwrap(), p.file_size() as usize);
    let b = whole(&fast.open("/piece", false).unwrap(), p.file_size() as usize);
    assert!(a == b);
}

/// A memory datatype with holes maps onto a strided view without packing:
/// only the memory type's bytes move, and they land where the view says.
#[test]
fn noncontiguous_memory_onto_noncontiguous_file() {
    let tc = TestCluster::start("memtype", 2);
    let c = tc.client();
    let f = c.create("/m", CreateOptions { stripe_size: 1000, ..CreateOptions::default() }).unwrap();
    let local = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(tc.scratch("m")).unwrap();
    let int = Datatype::int();
    // File: 5 ints every 7, from byte 13. Memory: 3 ints every 4 (holes between).
    let view = View::new(13, int.clone(), Datatype::vector(1, 5, 7, &int).and_then(|t| Datatype::resized(&t, 0, 28)).unwrap()).unwrap();
    let memtype = Datatype::vector(2, 3, 4, &int).unwrap();
    let count = 5u64; // 5 * 6 ints = 30 ints = 6 filetype tiles
    let buf = pattern(3, 4 * 8 * 5 + 64);
    assert_eq!(f.write_view(&view, 2, &buf, &memtype, count).unwrap(), 120);
    // Reference: memory bytes in typemap order, file bytes in view order.
    let mem: Vec<u8> = Datatype::contiguous(count as i64, &memtype).unwrap().regions(0).flat_map(|(o, l)| buf[o as usize..(o as usize + l as usize)].to_vec()).collect();
    let mut at = 0;
    for (o, l) in view.file_regions(2 * 4, 120) {
        local.write_all_at(&mem[at..at + l as usize], o).unwrap();
        at += l as usize;
    }
    let want = std::fs::read(tc.scratch("m")).unwrap();
    assert!(whole(&f, want.len()) == want);
    // Read back into a fresh buffer with the same memory type: the holes stay untouched.
    let mut back = vec![0xEEu8; buf.len()];
    assert_eq!(f.read_view(&view, 2, &mut back, &memtype, count).unwrap(), 120);
    for (o, l) in Datatype::contiguous(count as i64, &memtype).unwrap().regions(0) {
        assert_eq!(back[o as usize..(o as usize + l as usize)], buf[o as usize..(o as usize + l as usize)]);
    }
    assert_eq!(back[12..16], [0xEE; 4], "a hole of the memory type is not written");
}

#[test]
fn bad_views_and_accesses_are_refused() {
    let tc = TestCluster::start("badview", 2);
    let c = tc.client();
    let f = c.create("/b", CreateOptions::default()).unwrap();
    let int = Datatype::int();
    let dup = Datatype::hindexed(&[2, 1], &[0, 4], &int).unwrap();
    let v = View::new(0, int.clone(), dup).unwrap();
    assert!(matches!(f.write_view(&v, 0, &[0; 12], &Datatype::byte(), 12), Err(Error::View(ViewError::Overlapping(4)))));
    // Reading through an overlapping view is allowed.
    let mut buf = [0u8; 12];
    assert!(f.read_view(&v, 0, &mut buf, &Datatype::byte(), 12).is_ok());
    let plain = View::new(0, int.clone(), int.clone()).unwrap();
    assert!(matches!(f.write_view(&plain, 0, &[0; 6], &Datatype::byte(), 6), Err(Error::View(ViewError::PartialEtype { len: 6, etype: 4 }))));
    assert!(matches!(f.write_view(&plain, 0, &[0; 6], &int, 2), Err(Error::View(ViewError::OutsideBuffer { .. }))));
    let overlapping_mem = Datatype::hindexed(&[1, 1], &[0, 2], &int).unwrap();
    let mut buf = [0u8; 8];
    assert!(matches!(f.read_view(&plain, 0, &mut buf, &overlapping_mem, 1), Err(Error::View(ViewError::MemoryOverlap(_)))));
    assert!(View::new(-4, int.clone(), int.clone()).is_err());
    let three = Datatype::contiguous(3, &Datatype::byte()).unwrap();
    assert!(matches!(View::new(0, int, three), Err(ViewError::EtypeDoesNotDivide { .. })));
}

/// Random filetypes (strided, nested, subarrays, darrays) and memory types,
/// written and read through a cluster, equal a local file.
#[test]
fn random_views_match_a_local_file() {
    let tc = TestCluster::start("randview", 3);
    let c = tc.client();
    let case = std::cell::Cell::new(0);
    let strategy = (
        0i64..100,
        prop_oneof![
            (1i64..5, 1i64..4, 0i64..6).prop_map(|(n, bl, gap)| Datatype::vector(n, bl, bl + gap, &Datatype::double()).unwrap()),
            (2i64..6, 2i64..6, 1i64..3).prop_map(|(a, b, k)| Datatype::darray(2, 1, &[a, b], &[Distrib::Cyclic(k as u64), Distrib::None], &[2, 1], Order::C, &Datatype::int()).unwrap()),
            (3i64..7, 2i64..5, any::<bool>()).prop_map(|(a, b, f)| Datatype::subarray(&[a, b, 3], &[a - 1, b - 1, 2], &[1, 0, 1], if f { Order::Fortran } else { Order::C }, &Datatype::basic(2)).unwrap()),
            (1i64..4, 1i64..3, 1i64..4).prop_map(|(n, m, s)| {
                let inner = Datatype::vector(m, 1, 2, &Datatype::int()).unwrap();
                Datatype::hvector(n, 1, (m * 8 + s) * 2, &inner).unwrap()
            }),
        ],
        1u64..7,
        0u64..5,
        1u64..9,
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 40, ..ProptestConfig::default() });
    runner
        .run(&strategy, |(disp, filetype, tiles, offset, stripe_k)| {
            case.set(case.get() + 1);
            let name = format!("r{}", case.get());
            let stripe = stripe_k * 7 + 1;
            let f = c.create(&format!("/{name}"), CreateOptions { stripe_size: stripe, ..CreateOptions::default() }).unwrap();
            let local = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(tc.scratch(&name)).unwrap();
            let view = View::new(disp, Datatype::byte(), filetype).unwrap();
            let len = view.filetype().size() * tiles;
            let data = pattern(case.get(), len as usize);
            // Memory: each byte followed by a hole.
            let memtype = Datatype::resized(&Datatype::byte(), 0, 2).unwrap();
            let mut buf = vec![0u8; 2 * len as usize];
            for (i, b) in data.iter().enumerate() {
                buf[2 * i] = *b;
            }
            prop_assert_eq!(f.write_view(&view, offset, &buf, &memtype, len).unwrap(), len as usize);
            let mut at = 0usize;
            for (o, l) in view.file_regions(offset, len) {
                local.write_all_at(&data[at..at + l as usize], o).unwrap();
                at += l as usize;
            }
            let want = std::fs::read(tc.scratch(&name)).unwrap();
            prop_assert!(whole(&f, want.len()) == want);
            let mut back = vec![0u8; len as usize];
            prop_assert_eq!(f.read_view(&view, offset, &mut back, &Datatype::byte(), len).unwrap(), len as usize);
            prop_assert!(back == data);
            // Back into the holey memory type (tiny pieces: the packed path);
            // the holes stay untouched.
            let mut holey = vec![0xEEu8; 2 * len as usize];
            prop_assert_eq!(f.read_view(&view, offset, &mut holey, &memtype, len).unwrap(), len as usize);
            for (i, b) in data.iter().enumerate() {
                prop_assert_eq!(holey[2 * i], *b);
                prop_assert_eq!(holey[2 * i + 1], 0xEE);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn view_reads_stop_at_the_end_of_file() {
    let tc = TestCluster::start("vieweof", 2);
    let c = tc.client();
    let f = c.create("/e", CreateOptions { stripe_size: 16, ..CreateOptions::default() }).unwrap();
    f.write_at(0, &[1u8; 50]).unwrap();
    // Every other 4-byte int: stream bytes at 0..4, 8..12, ..., 48..52 (past EOF at 50).
    let view = View::new(0, Datatype::int(), Datatype::resized(&Datatype::int(), 0, 8).unwrap()).unwrap();
    let mut buf = vec![9u8; 40];
    // Ints at 0,8,...,48: 6 whole ints before 48, then 2 bytes of the 7th.
    assert_eq!(f.read_view(&view, 0, &mut buf, &Datatype::byte(), 40).unwrap(), 6 * 4 + 2);
}

/// Writers interleaving 8-byte records in the same stripes at the same time:
/// the servers sieve these writes (read, patch, write back an extent), and
/// no writer's records may be lost to another's write-back.
#[test]
fn concurrent_interleaved_small_writes_lose_nothing() {
    let tc = TestCluster::start("sievecc", 2);
    let procs = 4u64;
    let p = Pattern::Hpf1d { records: 64_000, record: 8, dist: Distrib::Cyclic(1) };
    let name = "/interleaved";
    tc.client().create(name, CreateOptions { stripe_size: 16384, ..CreateOptions::default() }).unwrap();
    std::thread::scope(|s| {
        for rank in 0..procs {
            let tc = &tc;
            let p = &p;
            s.spawn(move || {
                let c = tc.client();
                let f = c.open(name, true).unwrap();
                let view = View::new(0, Datatype::byte(), p.filetype(procs, rank).unwrap()).unwrap();
                let data = pattern(rank + 1, view.filetype().size() as usize);
                // Many small calls, so the ranks' requests really interleave.
                for chunk in (0..data.len()).step_by(4000) {
                    let end = (chunk + 4000).min(data.len());
                    f.write_view(&view, chunk as u64, &data[chunk..end], &Datatype::byte(), (end - chunk) as u64).unwrap();
                }
            });
        }
    });
    let f = tc.client().open(name, false).unwrap();
    let all = whole(&f, p.file_size() as usize);
    for rank in 0..procs {
        let data = pattern(rank + 1, (p.file_size() / procs) as usize);
        for (k, rec) in data.chunks(8).enumerate() {
            let at = ((k as u64 * procs + rank) * 8) as usize;
            assert_eq!(&all[at..at + 8], rec, "rank {rank} record {k} lost");
        }
    }
}
