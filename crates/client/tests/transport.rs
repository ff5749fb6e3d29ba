//! Issue 24: the transports under real servers. A client on the servers'
//! node reaches them over shared memory, and over TCP when told to; both
//! move the same bytes as a local file written with the same pattern,
//! also when both sides poll their rings before blocking
//! (`WEFT_SHM_POLL_US`), and a TCP client of a polling server is served.
//! Over shared memory, large writes are placed in the connection's shared
//! area (the bytes cross once) and read back right.

use weft_testkit::TestCluster;
use std::time::Duration;
use weft_client::{Client, ClientOptions, CreateOptions};
use weft_launch::ClusterSpec;
use weft_net::TransportChoice;

fn client(tc: &TestCluster, transport: TransportChoice, poll: Duration) -> Client {
    let mut o = ClientOptions::default();
    o.endpoint.transport = transport;
    o.endpoint.shm_poll = poll;
    o.endpoint.op_timeout = Duration::from_secs(20);
    Client::with_options(tc.cluster(), o).unwrap()
}

/// Writes a file in pieces of odd sizes (eager and rendezvous), reads it
/// back whole and in pieces, and compares with the same pattern in a local
/// file written the same way.
fn round_trip(c: &Client, tc: &TestCluster, name: &str) {
    let data = weft_testkit::pattern(name.len() as u64, 3 << 20);
    let local = tc.scratch(name);
    let f = c.create(&format!("/{name}"), CreateOptions::default()).unwrap();
    let mut at = 0;
    for (k, len) in [1usize, 4095, 65_536, 65_537, 1 << 20, 7, 300_001].iter().cycle().enumerate() {
        if at >= data.len() {
            break;
        }
        let end = (at + len).min(data.len());
        f.write_at(at as u64, &data[at..end]).unwrap();
        at = end;
        assert!(k < 10_000);
    }
    std::fs::write(&local, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == std::fs::read(&local).unwrap(), "{name}: the file differs from the local copy");
    let mut piece = vec![0u8; 12_345];
    assert_eq!(f.read_at(1_000_003, &mut piece).unwrap(), piece.len());
    assert!(piece[..] == data[1_000_003..1_000_003 + piece.len()], "{name}: a piece differs");
}

#[test]
fn both_transports_move_the_same_bytes_also_when_polling() {
    let spec = ClusterSpec { data_servers: 2, server_env: vec![("WEFT_SHM_POLL_US".into(), "200".into())], ..ClusterSpec::default() };
    let tc = TestCluster::start_spec("transport-poll", spec);
    let shm = client(&tc, TransportChoice::Shm, Duration::from_micros(200));
    round_trip(&shm, &tc, "over-shm-polling");
    let data = tc.cluster().servers.iter().find(|s| s.services.contains(&weft_net::Service::Data)).unwrap().addr;
    assert_eq!(shm.transport_of(data), Some("shm"));
    // Each write past the eager limit (65,537, 1 MiB and 300,001 bytes,
    // cut at stripe ends) is placed in the area.
    let st = shm.endpoint_stats();
    assert!(st.placed >= 6 && st.placed == st.rendezvous, "rendezvous payloads are placed: {st:?}");
    // A TCP client of the same (polling) servers is served too.
    let tcp = client(&tc, TransportChoice::Tcp, Duration::ZERO);
    round_trip(&tcp, &tc, "over-tcp");
    assert_eq!(tcp.transport_of(data), Some("tcp"));
    assert_eq!(tcp.endpoint_stats().placed, 0);
    // And a blocking shared-memory client.
    let blocking = client(&tc, TransportChoice::Shm, Duration::ZERO);
    round_trip(&blocking, &tc, "over-shm-blocking");
    assert!(blocking.endpoint_stats().placed >= 6);
}

/// Rails (issue 24): with `WEFT_RAILS=4` a client's large requests go in
/// parts over four connections to each data server, which put each
/// payload together by message id before writing it; the file reads back
/// as the local copy, over TCP and over shared memory. Over shared memory
/// the payloads are placed in the shared area instead, and no rails are
/// opened (one copy beats splitting it over rails of the same memory).
#[test]
fn rails_split_large_writes_and_the_servers_put_them_together() {
    let tc = TestCluster::start("rails", 2);
    for (transport, name) in [(TransportChoice::Tcp, "rails-over-tcp"), (TransportChoice::Shm, "rails-over-shm")] {
        let mut o = ClientOptions::default();
        o.endpoint.transport = transport;
        o.endpoint.rails = 4;
        o.endpoint.op_timeout = Duration::from_secs(20);
        let c = Client::with_options(tc.cluster(), o).unwrap();
        // Stripes of 4 MiB: each server's part of a large write is a
        // request of a whole schedule block (1 MiB), split into parts.
        let data = weft_testkit::pattern(7, 12 << 20);
        let f = c.create(&format!("/{name}"), CreateOptions { stripe_size: 4 << 20, ..CreateOptions::default() }).unwrap();
        f.write_at(0, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
        assert!(back == data, "{name}: the file differs from what was written");
        let st = c.endpoint_stats();
        if transport == TransportChoice::Shm {
            assert!(st.rail_connects == 0 && st.placed == st.rendezvous && st.placed >= 12, "{name}: payloads placed, no rails: {st:?}");
        } else {
            assert_eq!(st.rail_connects, 6, "{name}: three rails to each of the two data servers: {st:?}");
            assert!(st.rail_parts >= 12 && st.placed == 0, "{name}: parts went over the rails: {st:?}");
        }
        assert_eq!(st.rail_resends, 0, "{name}: {st:?}");
        // Writes of odd sizes (some split, some not) through the same rails.
        round_trip(&c, &tc, &format!("{name}-odd"));
    }
}
