//! Paper 001's traditional caching mode of the data service (issue 13,
//! `WEFT_DATA_CACHE`): through a small block cache (so blocks are evicted
//! and written back all the time), every byte written by list I/O and by
//! one request per piece reads back as a local file written the same way
//! holds it; and what was fsync'd survives the data servers being killed.

use weft_testkit::{pattern, TestCluster};
use std::os::unix::fs::FileExt;
use weft_client::{Client, ClientOptions, CreateOptions, Segment};
use weft_launch::ClusterSpec;

#[test]
fn the_caching_mode_keeps_every_byte_and_fsync_makes_it_durable() {
    let env = vec![("WEFT_DATA_CACHE".into(), "64k".into()), ("WEFT_CACHE_BLOCK".into(), "4k".into())];
    let mut tc = TestCluster::start_spec("data-cache", ClusterSpec { data_servers: 2, server_env: env, ..ClusterSpec::default() });
    let local = tc.scratch("reference");
    let reference = std::fs::File::create(&local).unwrap();
    let opts = CreateOptions { stripe_size: 16 << 10, ..Default::default() };
    for list_io in [true, false] {
        let c = Client::with_options(tc.cluster(), ClientOptions { list_io, ..ClientOptions::default() }).unwrap();
        let f = c.create("/cached", opts).unwrap();
        // Records of 8 B and 3 KiB strided over 600 KiB, then an overwrite
        // across stripe and block edges, then a hole and a tail.
        for (k, (record, stride)) in [(8u64, 1000u64), (3000, 7000)].into_iter().enumerate() {
            let segs: Vec<Segment> = (0..80u64).map(|i| Segment { file: i * stride + k as u64 * 13, mem: (i * record) as usize, len: record }).collect();
            let buf = pattern(k as u64 + list_io as u64 * 10, (80 * record) as usize);
            f.write_pieces(&segs, &buf).unwrap();
            for s in &segs {
                reference.write_all_at(&buf[s.mem..s.mem + s.len as usize], s.file).unwrap();
            }
        }
        let over = pattern(99, 70_000);
        f.write_at(12_345, &over).unwrap();
        reference.write_all_at(&over, 12_345).unwrap();
        f.write_at(900_000, b"tail").unwrap();
        reference.write_all_at(b"tail", 900_000).unwrap();
        let want = std::fs::read(&local).unwrap();
        let mut back = vec![0u8; want.len()];
        assert_eq!(f.read_at(0, &mut back).unwrap(), want.len());
        assert!(back == want, "the cached file differs from the reference (list I/O {list_io})");
        assert_eq!(f.size().unwrap(), want.len() as u64);
        // The last write sits in the cache (the read above evicted the
        // others) until the fsync writes it back.
        let last = pattern(7 + list_io as u64, 5000);
        f.write_at(450_000, &last).unwrap();
        reference.write_all_at(&last, 450_000).unwrap();
        f.fsync().unwrap();
        f.close().unwrap();
    }
    // Killed without warning: what was fsync'd is on disk.
    let want = std::fs::read(&local).unwrap();
    for id in 1..=2 {
        tc.lc.restart(id).unwrap();
    }
    let f = tc.client().open("/cached", false).unwrap();
    let mut back = vec![0u8; want.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), want.len());
    assert!(back == want, "fsync'd data lost when the caching servers were killed");
}

/// Every HPF pattern of paper 001 (`Pattern::hpf`: NONE, BLOCK, CYCLIC in
/// one and two dimensions, 8-byte and 8 KiB records), four processes'
/// views written one request per piece through a cache far smaller than
/// the file, then read back by views and whole: a local file written by
/// the same views holds the same bytes. Reads past the end of the file
/// (prefetch of the block after the last) stop at its size.
#[test]
fn the_caching_mode_keeps_every_hpf_pattern() {
    use weft_client::{Datatype, Pattern, View};
    let env = vec![("WEFT_DATA_CACHE".into(), "32k".into()), ("WEFT_CACHE_BLOCK".into(), "8k".into())];
    let tc = TestCluster::start_spec("data-cache-hpf", ClusterSpec { data_servers: 2, server_env: env, ..ClusterSpec::default() });
    let c = Client::with_options(tc.cluster(), ClientOptions { list_io: false, ..ClientOptions::default() }).unwrap();
    for dims in Pattern::HPF_ALL {
        for (record, edge) in [(8u64, if dims.len() == 1 { 1000 } else { 40 }), (8192, if dims.len() == 1 { 20 } else { 5 })] {
            let pat = Pattern::hpf(dims, record, edge).unwrap();
            let path = format!("/hpf-{dims}-{record}");
            let f = c.create(&path, CreateOptions { stripe_size: 16 << 10, ..Default::default() }).unwrap();
            let mut want = vec![0u8; pat.file_size() as usize];
            let views: Vec<View> = (0..4).map(|r| View::new(0, Datatype::byte(), pat.filetype(4, r).unwrap()).unwrap()).collect();
            for (r, view) in views.iter().enumerate() {
                let len = view.filetype().size() as usize;
                let buf = pattern(r as u64 + record, len);
                assert_eq!(f.write_view(view, 0, &buf, &Datatype::byte(), len as u64).unwrap(), len);
                let mut at = 0;
                for (o, l) in view.file_regions(0, len as u64) {
                    want[o as usize..(o + l) as usize].copy_from_slice(&buf[at..at + l as usize]);
                    at += l as usize;
                }
            }
            let name = Pattern::hpf_name(dims);
            for (r, view) in views.iter().enumerate() {
                let len = view.filetype().size() as usize;
                let mut back = vec![0u8; len];
                assert_eq!(f.read_view(view, 0, &mut back, &Datatype::byte(), len as u64).unwrap(), len);
                assert!(back == pattern(r as u64 + record, len), "{name} {record} B: rank {r} read other bytes");
            }
            let mut whole = vec![0u8; want.len() + 10_000];
            assert_eq!(f.read_at(0, &mut whole).unwrap(), want.len(), "{name} {record} B: a read past the end stops at the size");
            assert!(whole[..want.len()] == want[..], "{name} {record} B: the file differs from the reference");
        }
    }
}
