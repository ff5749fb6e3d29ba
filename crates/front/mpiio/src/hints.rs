//! MPI-IO hints (`MPI_Info` keys) Weft reads, and the values in effect
//! that `MPI_File_get_info` reports.
//!
//! | key | when | meaning |
//! |---|---|---|
//! | `striping_unit` | create | bytes per stripe (the file's real one is reported) |
//! | `striping_factor` | create | data servers to stripe over |
//! | `cb_buffer_size` | any | collective buffer per aggregator (collective I/O) |
//! | `cb_nodes` | any | aggregators for collective I/O (default: one per node) |
//! | `romio_cb_write`, `romio_cb_read` | any | `enable`, `disable`, `automatic` |
//! | `weft_coll` | any | `two_phase`, `server`, `independent`, `auto` (default `WEFT_COLL`, else `auto`) |
//! | `weft_coll_server_window` | any | bytes a server holds of one server-directed collective (64 MiB) |
//! | `weft_sched`, `weft_sched_block`, `weft_sched_window` | any | request order and size (paper 000) |
//! | `weft_lock_granularity` | any | what atomic mode locks (`list`, `range`, `file`) |
//! | `weft_write_behind` | any | bytes of small independent writes a rank holds to send together (default `WEFT_MPIIO_WRITE_BEHIND`, else 4 MiB; 0: off; at most 256 MiB) |
//! | `weft_coll_alone` | any | largest rank's access of a collective call that goes each rank's own way when every rank's is one range apart from the others' (default `WEFT_COLL_ALONE`, else `auto`: an eighth of `weft_write_behind` / `weft_read_ahead`; 0: never) |
//! | `weft_read_ahead` | any | bytes a rank fetches ahead of small sequential or strided reads (default `WEFT_MPIIO_READ_AHEAD`, else 4 MiB; 0: off; at most 256 MiB) |
//!
//! Unknown keys are ignored and invalid values keep the previous value, as
//! MPI asks of hints; neither is an error.

use std::collections::BTreeMap;
use weft_client::collective::{CbMode, CollMethod, CollectiveHints, DEFAULT_SERVER_WINDOW};
use weft_client::File;

/// Default collective buffer per aggregator, ROMIO's.
pub const DEFAULT_CB_BUFFER_SIZE: u64 = 16 << 20;

/// Default bytes of small writes a rank holds per file
/// (`weft_write_behind`): ior-hard's records sent 89 to a list request.
pub const DEFAULT_WRITE_BEHIND: u64 = 4 << 20;

/// Default bytes fetched ahead of small steady reads (`weft_read_ahead`).
pub const DEFAULT_READ_AHEAD: u64 = 4 << 20;

/// Hints in effect for one open file.
#[derive(Debug, Clone)]
pub struct Hints {
    /// Keys Weft keeps for collective I/O (validated), by name.
    kept: BTreeMap<&'static str, String>,
    /// Each rank's host (a hash of its name), for placing aggregators.
    node_of_rank: Vec<u64>,
}

const CB_MODES: [&str; 3] = ["enable", "disable", "automatic"];

/// A byte count's default from the environment variable `name` (at most
/// `most`), else `default`; a value that does not parse is said once per
/// process and not used (not an error: the ranks must agree on failing an
/// open, and each reads its own environment).
fn bytes_from_env(name: &'static str, default: u64, most: u64) -> u64 {
    static SAID: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    match std::env::var(name).ok().filter(|v| !v.trim().is_empty()) {
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) => n.min(most),
            Err(_) => {
                let mut said = SAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if !said.contains(&name) {
                    said.push(name);
                    eprintln!("weft: {name}={v:?} is not a number of bytes: using {default}");
                }
                default
            }
        },
        None => default,
    }
}

impl Hints {
    /// Defaults for a file opened by ranks on these hosts: one aggregator
    /// per node, as ROMIO does.
    pub fn new(node_of_rank: Vec<u64>) -> Self {
        let mut nodes = node_of_rank.clone();
        nodes.sort_unstable();
        nodes.dedup();
        let mut kept = BTreeMap::new();
        kept.insert("cb_buffer_size", DEFAULT_CB_BUFFER_SIZE.to_string());
        kept.insert("cb_nodes", nodes.len().max(1).to_string());
        kept.insert("romio_cb_write", "automatic".into());
        kept.insert("romio_cb_read", "automatic".into());
        let method = match std::env::var("WEFT_COLL").ok().filter(|v| !v.trim().is_empty()) {
            Some(v) if CollMethod::parse(&v).is_some() => v,
            Some(v) => {
                // Not an error: the ranks must agree on failing an open, and
                // each reads its own environment. Said once per process.
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| eprintln!("weft: WEFT_COLL={v:?} is not two_phase, server, independent or auto: using auto"));
                "auto".into()
            }
            None => "auto".into(),
        };
        kept.insert("weft_coll", method);
        kept.insert("weft_coll_server_window", DEFAULT_SERVER_WINDOW.to_string());
        kept.insert("weft_write_behind", bytes_from_env("WEFT_MPIIO_WRITE_BEHIND", DEFAULT_WRITE_BEHIND, weft_client::MOST_WRITE_BEHIND).to_string());
        kept.insert("weft_read_ahead", bytes_from_env("WEFT_MPIIO_READ_AHEAD", DEFAULT_READ_AHEAD, weft_client::MOST_READ_AHEAD).to_string());
        let alone = std::env::var("WEFT_COLL_ALONE").ok().filter(|v| !v.trim().is_empty()).map_or(Ok("auto".to_string()), |v| v.trim().parse::<u64>().map(|n| n.to_string()).map_err(|_| v));
        kept.insert("weft_coll_alone", alone.unwrap_or_else(|v| {
            eprintln!("weft: WEFT_COLL_ALONE={v:?} is not a number of bytes: using auto");
            "auto".into()
        }));
        Hints { kept, node_of_rank }
    }

    /// The largest rank's access of a collective call that goes each
    /// rank's own way when all are contiguous and apart (`weft_coll_alone`:
    /// bytes, or `auto`: what a rank holds of its writes or reads ahead of,
    /// an eighth of `weft_write_behind` / `weft_read_ahead`).
    fn small_alone(&self, write: bool) -> u64 {
        match self.get("weft_coll_alone").and_then(|v| v.parse::<u64>().ok()) {
            Some(n) => n,
            None => (if write { self.write_behind() } else { self.read_ahead() }) / 8,
        }
    }

    /// `weft_write_behind` and `weft_read_ahead` in effect (bytes).
    pub fn write_behind(&self) -> u64 {
        self.get("weft_write_behind").and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_WRITE_BEHIND)
    }

    pub fn read_ahead(&self) -> u64 {
        self.get("weft_read_ahead").and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_READ_AHEAD)
    }

    /// Layout wishes at create: (stripe size, stripe count), 0 for default.
    pub fn layout(pairs: &[(String, String)]) -> (u64, u32) {
        let get = |k: &str| pairs.iter().rev().find(|(key, _)| key == k).and_then(|(_, v)| v.trim().parse::<u64>().ok());
        let unit = get("striping_unit").unwrap_or(0);
        let factor = get("striping_factor").and_then(|f| u32::try_from(f).ok()).unwrap_or(0);
        (unit, factor)
    }

    /// Applies hints to the file and to what is kept; bad values are skipped.
    pub fn apply(&mut self, file: &mut File, pairs: &[(String, String)]) {
        for (k, v) in pairs {
            let v = v.trim();
            match k.as_str() {
                "cb_buffer_size" | "cb_nodes" | "weft_coll_server_window" => {
                    if v.parse::<u64>().is_ok_and(|n| n > 0) {
                        let key = ["cb_buffer_size", "cb_nodes", "weft_coll_server_window"].into_iter().find(|key| key == k).expect("matched");
                        self.kept.insert(key, v.to_string());
                    }
                }
                "weft_write_behind" => {
                    // Changing it sends what is held; a failure of that send
                    // is reported by the next sync or close.
                    if let Ok(n) = v.parse::<u64>() {
                        let n = n.min(weft_client::MOST_WRITE_BEHIND);
                        let _ = file.set_write_behind(n);
                        self.kept.insert("weft_write_behind", n.to_string());
                    }
                }
                "weft_read_ahead" => {
                    if let Ok(n) = v.parse::<u64>() {
                        let n = n.min(weft_client::MOST_READ_AHEAD);
                        file.set_read_ahead(n);
                        self.kept.insert("weft_read_ahead", n.to_string());
                    }
                }
                "weft_coll_alone" => {
                    if v == "auto" || v.parse::<u64>().is_ok() {
                        self.kept.insert("weft_coll_alone", v.to_string());
                    }
                }
                "weft_coll" => {
                    if CollMethod::parse(v).is_some() {
                        self.kept.insert("weft_coll", v.to_string());
                    }
                }
                "romio_cb_write" | "romio_cb_read" => {
                    if CB_MODES.contains(&v) {
                        let key = if k == "romio_cb_write" { "romio_cb_write" } else { "romio_cb_read" };
                        self.kept.insert(key, v.to_string());
                    }
                }
                _ => {
                    // Weft's own keys; anything else is not ours.
                    let _ = file.set_hint(k, v);
                }
            }
        }
    }

    /// Every hint in effect, for `MPI_File_get_info`.
    pub fn in_effect(&self, file: &File) -> Vec<(String, String)> {
        let s = file.schedule();
        let mut all: Vec<(String, String)> = vec![
            ("striping_unit".into(), file.stripe_size().to_string()),
            ("striping_factor".into(), file.stripe_count().to_string()),
            ("weft_sched".into(), s.strategy.name().into()),
            ("weft_sched_block".into(), s.block.to_string()),
            ("weft_sched_window".into(), s.window.to_string()),
            ("weft_lock_granularity".into(), file.lock_granularity().name().into()),
        ];
        all.extend(self.kept.iter().map(|(k, v)| (k.to_string(), v.clone())));
        all
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.kept.get(key).map(String::as_str)
    }

    /// What collective reads (`write` false) or writes run with.
    pub fn collective(&self, write: bool) -> CollectiveHints {
        let num = |k: &str, d: u64| self.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
        let mode = self.get(if write { "romio_cb_write" } else { "romio_cb_read" }).and_then(CbMode::parse).unwrap_or(CbMode::Automatic);
        CollectiveHints {
            cb_nodes: num("cb_nodes", 1) as usize,
            cb_buffer_size: num("cb_buffer_size", DEFAULT_CB_BUFFER_SIZE),
            mode,
            node_of_rank: self.node_of_rank.clone(),
            method: self.get("weft_coll").and_then(CollMethod::parse).unwrap_or(CollMethod::Auto),
            server_window: num("weft_coll_server_window", DEFAULT_SERVER_WINDOW),
            small_alone: self.small_alone(write),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ROMIO's default: one aggregator per node, the nodes told apart by
    /// their host names' hashes (exchanged at open), placed on different
    /// nodes first.
    #[test]
    fn cb_nodes_defaults_to_one_aggregator_per_node() {
        let h = Hints::new(vec![7, 7, 9, 9, 9, 4]);
        assert_eq!(h.get("cb_nodes"), Some("3"));
        let c = h.collective(true);
        assert_eq!(c.cb_nodes, 3);
        assert_eq!(weft_client::collective::aggregator_ranks(&c, 6), [0, 2, 5]);
        assert_eq!(Hints::new(vec![1; 4]).get("cb_nodes"), Some("1"));
        assert_eq!(Hints::new(Vec::new()).get("cb_nodes"), Some("1"));
    }
}
