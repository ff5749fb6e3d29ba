//! Byte-exact striped I/O against a reference local file written with the
//! same pattern, at sizes and offsets around stripe boundaries.

use weft_testkit::{pattern, TestCluster};
use proptest::prelude::*;
use std::os::unix::fs::FileExt;
use weft_client::CreateOptions;

const STRIPE: u64 = 4096;

fn opts(count: u32) -> CreateOptions {
    CreateOptions { stripe_size: STRIPE, stripe_count: count, ..CreateOptions::default() }
}

/// Reads the whole Weft file and the whole reference file and compares them.
fn assert_same(f: &weft_client::File, reference: &std::fs::File) {
    let want = std::fs::read(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(reference))).unwrap();
    assert_eq!(f.size().unwrap(), want.len() as u64, "size");
    let mut got = vec![0xAAu8; want.len() + 100];
    let n = f.read_at(0, &mut got).unwrap();
    assert_eq!(n, want.len(), "read returns the file size");
    assert!(got[..n] == want[..], "contents differ from the reference");
}

#[test]
fn sizes_around_stripe_boundaries_round_trip() {
    let tc = TestCluster::start("sizes", 3);
    let c = tc.client();
    let s = STRIPE as usize;
    let sizes = [0, 1, s - 1, s, s + 1, 3 * s - 1, 3 * s, 3 * s + 1, 10 * s + 17, 70_000, 1 << 20, (3 << 20) + 5];
    for (i, &len) in sizes.iter().enumerate() {
        for &off in &[0u64, 1, STRIPE - 1, STRIPE, 5 * STRIPE + 123] {
            let path = format!("/f-{i}-{off}");
            let f = c.create(&path, opts(0)).unwrap();
            let data = pattern(i as u64 * 1000 + off, len);
            assert_eq!(f.write_at(off, &data).unwrap(), len);
            let mut back = vec![0u8; len];
            let n = f.read_at(off, &mut back).unwrap();
            assert_eq!(n, len, "len {len} at {off}");
            assert!(back == data, "len {len} at {off}: bytes differ");
            let expect_size = if len == 0 { 0 } else { off + len as u64 };
            assert_eq!(f.size().unwrap(), expect_size, "len {len} at {off}: size");
            // The bytes before `off` are a hole and read as zeros.
            if off > 0 && len > 0 {
                let mut head = vec![1u8; off as usize];
                assert_eq!(f.read_at(0, &mut head).unwrap(), off as usize);
                assert!(head.iter().all(|&b| b == 0), "hole reads as zeros");
            }
        }
    }
}

#[test]
fn reads_past_the_end_are_short_and_holes_inside_are_zero() {
    let tc = TestCluster::start("eof", 4);
    let c = tc.client();
    let f = c.create("/sparse", opts(0)).unwrap();
    // Only the stripe on server 3 is written: servers 0..2 hold nothing of it.
    f.write_at(3 * STRIPE + 10, b"tail").unwrap();
    let end = 3 * STRIPE + 14;
    let mut buf = vec![9u8; 10 * STRIPE as usize];
    assert_eq!(f.read_at(0, &mut buf).unwrap() as u64, end);
    assert!(buf[..(3 * STRIPE + 10) as usize].iter().all(|&b| b == 0));
    assert_eq!(&buf[(3 * STRIPE + 10) as usize..end as usize], b"tail");
    assert_eq!(f.read_at(end, &mut buf).unwrap(), 0, "read at EOF");
    assert_eq!(f.read_at(end + 5 * STRIPE, &mut buf).unwrap(), 0, "read past EOF");
    // A read of a hole that ends before EOF is full length.
    let mut small = vec![5u8; 100];
    assert_eq!(f.read_at(STRIPE, &mut small).unwrap(), 100);
    assert!(small.iter().all(|&b| b == 0));
}

#[test]
fn truncate_shrinks_and_extends_like_a_local_file() {
    let tc = TestCluster::start("trunc", 3);
    let c = tc.client();
    let reference = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(tc.scratch("ref")).unwrap();
    let f = c.create("/t", opts(0)).unwrap();
    let data = pattern(7, 9 * STRIPE as usize + 5);
    f.write_at(0, &data).unwrap();
    reference.write_all_at(&data, 0).unwrap();
    for size in [5 * STRIPE + 3, 2 * STRIPE, 0, 11 * STRIPE + 1, 1] {
        f.truncate(size).unwrap();
        reference.set_len(size).unwrap();
        assert_same(&f, &reference);
    }
    // Writing after a shrink leaves zeros between the old end and the write.
    f.write_at(4 * STRIPE, b"xyz").unwrap();
    reference.write_all_at(b"xyz", 4 * STRIPE).unwrap();
    assert_same(&f, &reference);
}

/// Random sequences of writes at random offsets and lengths, on random
/// layouts, equal the same writes on a local file.
#[test]
fn random_writes_match_a_local_file() {
    let tc = TestCluster::start("prop", 4);
    let c = tc.client();
    let case = std::cell::Cell::new(0);
    let strategy = (1u32..=4, proptest::collection::vec((0u64..40_000, 0usize..30_000, any::<u64>()), 1..12));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 32, ..ProptestConfig::default() });
    runner
        .run(&strategy, |(count, writes)| {
            case.set(case.get() + 1);
            let ref_path = tc.scratch(&format!("ref-{}", case.get()));
            let reference = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(&ref_path).unwrap();
            let f = c.create(&format!("/p-{}", case.get()), opts(count)).unwrap();
            for (off, len, seed) in writes {
                let data = pattern(seed, len);
                f.write_at(off, &data).unwrap();
                reference.write_all_at(&data, off).unwrap();
            }
            assert_same(&f, &reference);
            // Unaligned sub-range reads agree too.
            let want = std::fs::read(&ref_path).unwrap();
            for (a, b) in [(1usize, 5000usize), (4095, 4097), (want.len() / 3, want.len())] {
                if a < b && b <= want.len() {
                    let mut got = vec![0u8; b - a];
                    prop_assert_eq!(f.read_at(a as u64, &mut got).unwrap(), b - a);
                    prop_assert!(got[..] == want[a..b]);
                }
            }
            Ok(())
        })
        .unwrap();
}
