//! Scheduling strategies on a running cluster: every block sent once, the
//! file equal to a reference, and the sending order as each strategy defines it.

use weft_testkit::{pattern, TestCluster};
use std::sync::Arc;
use weft_client::{CreateOptions, Schedule, Strategy};

const STRIPE: u64 = 4096;
const SERVERS: usize = 4;

fn sched(strategy: Strategy, block: u64, rank: u32, group: u32, accesses: Option<Arc<Vec<(u64, u64)>>>) -> Schedule {
    Schedule { strategy, block, window: 2, rank, group, group_accesses: accesses }
}

#[test]
fn every_strategy_writes_and_reads_back_the_reference_bytes() {
    let tc = TestCluster::start("schedbytes", SERVERS);
    let clients = 4u32;
    let region = 200_000u64; // not a multiple of the stripe or of b
    let accesses: Arc<Vec<(u64, u64)>> = Arc::new((0..u64::from(clients)).map(|i| (i * region, region)).collect());
    for (n, strategy) in Strategy::ALL.into_iter().enumerate() {
        for block in [STRIPE / 2, STRIPE, 3 * STRIPE + 5, 1 << 20] {
            let name = format!("/s-{n}-{block}");
            tc.client_through_servers().create(&name, CreateOptions { stripe_size: STRIPE, ..CreateOptions::default() }).unwrap();
            std::thread::scope(|s| {
                for rank in 0..clients {
                    let (tc, name, accesses) = (&tc, &name, accesses.clone());
                    s.spawn(move || {
                        let f = tc.client_through_servers().open(name, true).unwrap();
                        let sc = sched(strategy, block, rank, clients, Some(accesses));
                        let data = pattern(u64::from(rank) + 10 * block, region as usize);
                        f.write_at_with(u64::from(rank) * region, &data, &sc).unwrap();
                        let mut back = vec![0u8; region as usize];
                        assert_eq!(f.read_at_with(u64::from(rank) * region, &mut back, &sc).unwrap(), region as usize);
                        assert!(back == data, "{strategy} b={block}: rank {rank} reads back its bytes");
                    });
                }
            });
            let f = tc.client_through_servers().open(&name, false).unwrap();
            let mut all = vec![0u8; (u64::from(clients) * region) as usize];
            assert_eq!(f.read_at(0, &mut all).unwrap(), all.len());
            for rank in 0..u64::from(clients) {
                let want = pattern(rank + 10 * block, region as usize);
                assert!(all[(rank * region) as usize..((rank + 1) * region) as usize] == want[..], "{strategy} b={block}: region {rank}");
            }
        }
    }
}

#[test]
fn sending_order_follows_each_definition() {
    let tc = TestCluster::start("schedorder", SERVERS);
    let f = tc.client_through_servers().create("/o", CreateOptions { stripe_size: STRIPE, ..CreateOptions::default() }).unwrap();
    let len = 10 * STRIPE * SERVERS as u64 + 123;
    for rank in 0..3u32 {
        for block in [STRIPE, STRIPE / 4, 2 * STRIPE] {
            // Each block sent exactly once, whatever the strategy.
            let blocks = |o: Vec<(usize, u64, u64, u32)>| {
                let mut v: Vec<(usize, u64, u64)> = o.into_iter().map(|x| (x.0, x.1, x.2)).collect();
                v.sort_unstable_by_key(|x| x.1);
                v
            };
            let mut reference = blocks(f.send_order(0, len, &sched(Strategy::First, block, rank, 3, None)).unwrap());
            for strategy in Strategy::ALL {
                assert_eq!(blocks(f.send_order(0, len, &sched(strategy, block, rank, 3, None)).unwrap()), reference, "{strategy}: same blocks");
            }
            // first-IOS: file offset order.
            assert!(reference.windows(2).all(|w| w[0].1 < w[1].1));
            // hash-IOS: at step j, server (rank + j) mod n (a server with nothing left costs no step).
            let hash = f.send_order(0, len, &sched(Strategy::Hash, block, rank, 3, None)).unwrap();
            let mut left = [0usize; SERVERS];
            for b in &hash {
                left[b.0] += 1;
            }
            let mut j = 0usize;
            for b in &hash {
                while left[(rank as usize + j) % SERVERS] == 0 {
                    j += 1;
                }
                assert_eq!(b.0, (rank as usize + j) % SERVERS, "hash step {j}");
                left[b.0] -= 1;
                j += 1;
            }
            reference.clear();
        }
    }
}

#[test]
fn colour_slots_never_collide_across_the_group() {
    let tc = TestCluster::start("schedcolour", SERVERS);
    let f = tc.client_through_servers().create("/c", CreateOptions { stripe_size: STRIPE, ..CreateOptions::default() }).unwrap();
    let clients = 6u32;
    let region = 7 * STRIPE + 100;
    let acc: Arc<Vec<(u64, u64)>> = Arc::new((0..u64::from(clients)).map(|i| (i * region, region)).collect());
    // Position k of each client's colour order: no two clients at one server.
    let orders: Vec<Vec<(usize, u64, u64, u32)>> =
        (0..clients).map(|r| f.send_order(u64::from(r) * region, region, &sched(Strategy::Colour, STRIPE, r, clients, Some(acc.clone()))).unwrap()).collect();
    let hash: Vec<Vec<(usize, u64, u64, u32)>> =
        (0..clients).map(|r| f.send_order(u64::from(r) * region, region, &sched(Strategy::Hash, STRIPE, r, clients, None)).unwrap()).collect();
    // Same blocks as hash, only the order differs.
    for (c, h) in orders.iter().zip(&hash) {
        let strip = |o: &Vec<(usize, u64, u64, u32)>| {
            let mut v: Vec<(usize, u64, u64)> = o.iter().map(|x| (x.0, x.1, x.2)).collect();
            v.sort_unstable_by_key(|x| x.1);
            v
        };
        assert_eq!(strip(c), strip(h));
    }
    // A slot holds at most one block per client and per server, and slots
    // come in increasing order: the colouring is a unit-transfer schedule.
    let mut taken = std::collections::HashSet::new();
    let mut max_slot = 0;
    for (client, o) in orders.iter().enumerate() {
        assert!(o.windows(2).all(|w| w[0].3 < w[1].3), "client {client}: slots increase");
        for b in o {
            assert!(taken.insert((b.0, b.3)), "server {} has two blocks in slot {}", b.0, b.3);
            max_slot = max_slot.max(b.3);
        }
    }
    // The colouring uses max-degree slots: the busiest server's block count.
    let mut per_server = [0u32; SERVERS];
    for o in &orders {
        for b in o {
            per_server[b.0] += 1;
        }
    }
    let most_per_client = orders.iter().map(|o| o.len() as u32).max().unwrap();
    assert_eq!(max_slot + 1, per_server.iter().copied().max().unwrap().max(most_per_client));
    // An access other than the one listed for this rank falls back to hash order.
    let other = f.send_order(0, region, &sched(Strategy::Colour, STRIPE, 3, clients, Some(acc.clone()))).unwrap();
    let hash3 = f.send_order(0, region, &sched(Strategy::Hash, STRIPE, 3, clients, None)).unwrap();
    assert_eq!(other, hash3);
}
