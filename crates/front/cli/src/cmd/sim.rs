//! `weft sim sched`: schedule lengths of each strategy under paper 000's
//! unit-transfer model, and the lower bound, at any scale.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use weft_bench::report::{print_json, print_table};
use weft_sched::{lower_bound, simulate, Strategy, Workload};

#[derive(Args)]
pub struct SimArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// Schedule lengths of first/random/hash/colour for writes and reads.
    Sched {
        #[arg(long, default_value_t = 1000)]
        clients: usize,
        #[arg(long, default_value_t = 8)]
        servers: usize,
        /// Blocks each client sends.
        #[arg(long, default_value_t = 4)]
        blocks: usize,
        /// contiguous: client i's blocks follow each other in a round-robin
        /// striped file (the synthetic benchmark); random: each block to a
        /// random server.
        #[arg(long, default_value = "contiguous")]
        pattern: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        json: bool,
    },
}

#[derive(serde::Serialize)]
struct Row {
    strategy: String,
    write_steps: usize,
    read_steps: usize,
    lower_bound: usize,
    write_vs_bound: f64,
    read_vs_bound: f64,
}

pub fn sim(a: SimArgs) -> Result<()> {
    let Which::Sched { clients, servers, blocks, pattern, seed, json } = a.which;
    if clients == 0 || servers == 0 {
        bail!("--clients and --servers must be at least 1");
    }
    let w = match pattern.as_str() {
        "contiguous" => Workload::contiguous(clients, servers, blocks),
        "random" => {
            let mut x = seed | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            Workload { senders: (0..clients).map(|_| (0..blocks).map(|_| (next() % servers as u64) as usize).collect()).collect(), receivers: servers }
        }
        o => bail!("unknown pattern {o:?}: use contiguous or random"),
    };
    let reads = w.transposed();
    let lb = lower_bound(&w);
    let rows: Vec<Row> = Strategy::ALL
        .iter()
        .map(|&s| {
            let (ws, rs) = (simulate(&w, s, seed), simulate(&reads, s, seed));
            Row { strategy: s.name().into(), write_steps: ws, read_steps: rs, lower_bound: lb, write_vs_bound: ws as f64 / lb.max(1) as f64, read_vs_bound: rs as f64 / lb.max(1) as f64 }
        })
        .collect();
    if json {
        return print_json(&rows, Default::default());
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| vec![r.strategy.clone(), r.write_steps.to_string(), r.read_steps.to_string(), r.lower_bound.to_string(), format!("{:.2}", r.write_vs_bound), format!("{:.2}", r.read_vs_bound)])
        .collect();
    print_table(
        &format!("Unit-transfer schedule lengths: {clients} clients x {blocks} blocks, {servers} servers, {pattern} pattern"),
        &["strategy", "write steps", "read steps", "lower bound", "write/bound", "read/bound"],
        &table,
    );
    Ok(())
}
