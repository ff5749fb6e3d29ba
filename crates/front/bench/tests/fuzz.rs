//! A short slice of `weft fuzz` (the full run is `weft fuzz`, 1,000,000
//! inputs): structured hostile input against live meta and data servers;
//! no decoder panics, every framed input answered or its connection closed,
//! well-behaved clients served throughout, no request panicked, and the
//! servers' memory budgets back to idle at the end.

use weft_testkit::TestCluster;
use std::time::Duration;
use weft_bench::fuzz::{run, FuzzConfig};

#[test]
fn twenty_thousand_structured_hostile_inputs_leave_the_servers_serving() {
    let tc = TestCluster::start("fuzz", 2);
    for seed in [7, 8] {
        let cfg = FuzzConfig { inputs: 10_000, seed, connections: 3, check_every: 2_500, answer_timeout: Duration::from_secs(10) };
        let r = run(&tc.cluster(), &cfg, &|_| {}).unwrap();
        assert_eq!(r.server_panics, 0);
        assert!(r.decode_errors > 1_000 && r.decoded_ok > 1_000, "the generator must reach both outcomes: {r:?}");
        assert!(r.answered > 1_000 && r.error_answers > 100, "{r:?}");
        assert_eq!(r.checks_passed, 5);
    }
}
