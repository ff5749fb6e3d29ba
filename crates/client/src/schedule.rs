//! Scheduling of an access's requests (paper 000): how large a block each
//! request carries (`b`), in which order a client sends its blocks to the
//! servers, and how many are in flight at once. Set per client
//! (`ClientOptions::schedule`, from the environment), per file
//! (`File::set_hint`) and per operation (`File::write_at_with`).
//!
//! | hint | variable | meaning | default |
//! |---|---|---|---|
//! | `weft_sched` | `WEFT_SCHED` | first, random, hash, colour | hash |
//! | `weft_sched_block` | `WEFT_SCHED_BLOCK` | bytes per request (b) | 1 MiB |
//! | `weft_sched_window` | `WEFT_SCHED_WINDOW` | requests in flight per client | 4 |
//! | - | `WEFT_RANK`, `PMI_RANK`, `OMPI_COMM_WORLD_RANK` | this client's rank | 0 |
//! | - | `WEFT_GROUP_SIZE`, `PMI_SIZE`, `OMPI_COMM_WORLD_SIZE` | clients in the group | 1 |
//!
//! The defaults are the best choice measured by `weft bench sched` (see
//! `docs/benchmarks.md`).

use crate::{Error, Result};
use std::sync::Arc;
use weft_net::settings::{BadSetting, Setting, Vars};
use weft_sched::Strategy;
use weft_wire::limits::MAX_PAYLOAD_LEN;

/// How an access's requests are cut, ordered and paced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub strategy: Strategy,
    /// Schedule block b: the most payload bytes in one request.
    pub block: u64,
    /// Most requests of one access in flight at once.
    pub window: usize,
    /// This client's rank in its group (hash-IOS: step j goes to server (rank + j) mod n).
    pub rank: u32,
    pub group: u32,
    /// Every group member's access (offset, length), indexed by rank, for
    /// the colour strategy; all members must give the same list.
    pub group_accesses: Option<Arc<Vec<(u64, u64)>>>,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule { strategy: Strategy::Hash, block: 1 << 20, window: 4, rank: 0, group: 1, group_accesses: None }
    }
}

impl Schedule {
    /// The defaults, with `WEFT_SCHED`, `WEFT_SCHED_BLOCK`,
    /// `WEFT_SCHED_WINDOW`, and the rank and group size from `WEFT_RANK`
    /// and `WEFT_GROUP_SIZE` or the MPI launchers' variables.
    pub fn from_vars(vars: &Vars<'_>) -> std::result::Result<Self, BadSetting> {
        let d = Schedule::default();
        let first = |names: [&'static str; 3]| -> std::result::Result<Option<u64>, BadSetting> {
            for n in names {
                if let Some(v) = vars.u64(n)? {
                    return Ok(Some(v));
                }
            }
            Ok(None)
        };
        let group = first(["WEFT_GROUP_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"])?.filter(|&g| g > 0).map_or(d.group, |g| g.min(u64::from(u32::MAX)) as u32);
        Ok(Schedule {
            strategy: vars.choice("WEFT_SCHED", "not a scheduling strategy (hash, random, colour, ...)", |v| v.parse().ok())?.unwrap_or(d.strategy),
            block: vars.choice("WEFT_SCHED_BLOCK", "not 1 to 16777216 bytes", |v| v.parse().ok().filter(|&b: &u64| b > 0 && b <= u64::from(MAX_PAYLOAD_LEN)))?.unwrap_or(d.block),
            window: vars.count("WEFT_SCHED_WINDOW")?.map_or(d.window, |w| w.min(1 << 16) as usize),
            rank: first(["WEFT_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"])?.map_or(0, |r| r.min(u64::from(group - 1)) as u32),
            group,
            group_accesses: None,
        })
    }

    /// This schedule as `weft config` shows it.
    pub fn settings(&self, vars: &Vars<'_>) -> Vec<Setting> {
        vec![
            Setting::new(vars, "WEFT_SCHED", format!("{:?}", self.strategy).to_lowercase(), "the order of an access's requests over the servers (paper 000)"),
            Setting::new(vars, "WEFT_SCHED_BLOCK", format!("{} bytes", self.block), "the most payload bytes in one request"),
            Setting::new(vars, "WEFT_SCHED_WINDOW", self.window, "requests of one access in flight at once"),
            Setting { set: ["WEFT_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"].iter().any(|n| vars.text(n).is_some()), ..Setting::new(vars, "WEFT_RANK", self.rank, "this client's rank in its group (or PMI_RANK, OMPI_COMM_WORLD_RANK)") },
            Setting { set: ["WEFT_GROUP_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"].iter().any(|n| vars.text(n).is_some()), ..Setting::new(vars, "WEFT_GROUP_SIZE", self.group, "its group's size (or PMI_SIZE, OMPI_COMM_WORLD_SIZE)") },
        ]
    }
}

impl Schedule {
    /// Applies one MPI-style hint. Unknown keys are not ours: `Ok(false)`.
    pub fn set_hint(&mut self, key: &str, value: &str) -> Result<bool> {
        let bad = |why: String| Err(Error::BadRequest(format!("hint {key}={value:?}: {why}")));
        match key {
            "weft_sched" => match value.parse() {
                Ok(s) => self.strategy = s,
                Err(e) => return bad(format!("{e}")),
            },
            "weft_sched_block" => match value.trim().parse::<u64>() {
                Ok(b) if b > 0 && b <= u64::from(MAX_PAYLOAD_LEN) => self.block = b,
                _ => return bad(format!("must be 1..={MAX_PAYLOAD_LEN} bytes")),
            },
            "weft_sched_window" => match value.trim().parse::<usize>() {
                Ok(w) if w > 0 => self.window = w,
                _ => return bad("must be at least 1".into()),
            },
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_set_and_refuse() {
        let mut s = Schedule::default();
        assert!(s.set_hint("weft_sched", "random").unwrap());
        assert_eq!(s.strategy, Strategy::Random);
        assert!(s.set_hint("weft_sched_block", "65536").unwrap());
        assert_eq!(s.block, 65536);
        assert!(s.set_hint("weft_sched_window", "1").unwrap());
        assert!(!s.set_hint("romio_cb_write", "enable").unwrap());
        assert!(s.set_hint("weft_sched", "fastest").is_err());
        assert!(s.set_hint("weft_sched_block", "0").is_err());
        assert!(s.set_hint("weft_sched_block", "999999999999").is_err());
        assert!(s.set_hint("weft_sched_window", "0").is_err());
    }
}
