//! Paper 001's tables 2 and 3, and Weft's figures beside them.

use super::{Mode, Row};

/// Paper 001's tables 2 and 3: case, file system (`caching`: traditional
/// caching; `server`: disk-directed I/O), percent of CPU available without
/// and with the 5 ms barrier, and I/O MB/s.
pub const PAPER: [(&str, Mode, f64, f64, f64); 8] = [
    ("easy-read", Mode::Caching, 95.0, 92.0, 32.2),
    ("easy-write", Mode::Caching, 90.0, 87.0, 32.4),
    ("hard-read", Mode::Caching, 60.0, 11.0, 2.2),
    ("hard-write", Mode::Caching, 87.0, 7.1, 0.7),
    ("easy-read", Mode::Server, 95.0, 93.0, 33.5),
    ("easy-write", Mode::Server, 95.0, 93.0, 32.2),
    ("hard-read", Mode::Server, 3.4, 2.4, 16.2),
    ("hard-write", Mode::Server, 5.1, 3.4, 14.2),
];

/// One line of the comparison with paper 001's tables: Weft's figures for
/// a representative case and mode, the paper's where it measured the mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Beside {
    pub case: String,
    pub mode: &'static str,
    /// (paper, Weft) percent of CPU available, without the barrier.
    pub cpu: (Option<f64>, f64),
    /// The same with the 5 ms barrier (Weft's `None` if not run).
    pub cpu_barrier: (Option<f64>, Option<f64>),
    pub mb_s: (Option<f64>, f64),
}

/// The representative case a row is (`easy-read`, ...), if it is one: by
/// name, or as the HPF pattern it stands for (easy: CYCLIC of 8 KiB
/// records; hard: BLOCK/CYCLIC of 8-byte records).
fn representative(r: &Row) -> Option<String> {
    match (r.pattern.as_str(), r.record_bytes) {
        (p, _) if p.starts_with("easy-") || p.starts_with("hard-") => Some(p.to_owned()),
        ("CYCLIC", 8192) => Some(format!("easy-{}", r.op)),
        ("BLOCK/CYCLIC", 8) => Some(format!("hard-{}", r.op)),
        _ => None,
    }
}

/// Weft's rows of the representative cases beside paper 001's tables 2
/// and 3, in the paper's order, then list I/O (which the paper lacks).
pub fn beside_paper(rows: &[Row]) -> Vec<Beside> {
    let mut out = Vec::new();
    for mode in [Mode::Caching, Mode::Server, Mode::ListIo] {
        for case in ["easy-read", "easy-write", "hard-read", "hard-write"] {
            let find = |barrier: bool| rows.iter().find(|r| r.mode == mode.name() && r.barrier == barrier && representative(r).as_deref() == Some(case));
            let Some(plain) = find(false) else { continue };
            let paper = PAPER.iter().find(|(c, m, ..)| *c == case && *m == mode);
            out.push(Beside {
                case: case.to_owned(),
                mode: mode.name(),
                cpu: (paper.map(|p| p.2), plain.cpu_available_pct),
                cpu_barrier: (paper.map(|p| p.3), find(true).map(|r| r.cpu_available_pct)),
                mb_s: (paper.map(|p| p.4), plain.mb_s),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pattern: &str, record: u64, op: &str, mode: Mode, barrier: bool, cpu: f64) -> Row {
        Row { pattern: pattern.into(), record_bytes: record, op: op.into(), mode: mode.name(), barrier, cpu_available_pct: cpu, mb_s: cpu / 10.0, idle_units_s: 1.0, io_units_s: 1.0, server_cpu_s_per_mb: 0.0 }
    }

    #[test]
    fn representative_rows_go_beside_the_papers_figures() {
        let rows = vec![
            row("hard-read", 8, "read", Mode::Server, false, 70.0),
            row("hard-read", 8, "read", Mode::Server, true, 60.0),
            // The full set: BLOCK/CYCLIC of 8-byte records is the hard case,
            // of 8 KiB records it is not.
            row("BLOCK/CYCLIC", 8, "write", Mode::Caching, false, 20.0),
            row("BLOCK/CYCLIC", 8192, "write", Mode::Caching, false, 99.0),
            row("CYCLIC", 8192, "read", Mode::ListIo, false, 80.0),
        ];
        let b = beside_paper(&rows);
        assert_eq!(b.len(), 3, "{b:?}");
        assert_eq!(b[0], Beside { case: "hard-write".into(), mode: "caching", cpu: (Some(87.0), 20.0), cpu_barrier: (Some(7.1), None), mb_s: (Some(0.7), 2.0) });
        assert_eq!(b[1], Beside { case: "hard-read".into(), mode: "server", cpu: (Some(3.4), 70.0), cpu_barrier: (Some(2.4), Some(60.0)), mb_s: (Some(16.2), 7.0) });
        assert_eq!(b[2], Beside { case: "easy-read".into(), mode: "listio", cpu: (None, 80.0), cpu_barrier: (None, None), mb_s: (None, 8.0) });
    }
}
