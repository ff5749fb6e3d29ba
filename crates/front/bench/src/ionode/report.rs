//! Paper 001's experiment as `weft bench ionode` runs it: its plot (the
//! paper's figures 2 and 3) and tables (its tables 2 and 3 beside Weft's).

use super::{beside_paper, run, Mode, Params, Row};
use crate::experiment::{f1, Experiment, Report, Table};
use crate::plot::{Panel, Series};
use crate::BenchCluster;
use anyhow::Result;
use std::path::{Path, PathBuf};

pub struct IoNode<'a> {
    pub exe: &'a Path,
    /// The cluster each mode runs on (its servers' settings differ).
    pub cluster: &'a dyn Fn(Mode) -> Result<BenchCluster>,
    pub params: Params,
}

impl Experiment for IoNode<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "ionode"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params, progress)
    }

    /// Throughput against CPU available, a point per case, a series per
    /// mode and barrier.
    fn plots(&self, stem: &Path, rows: &[Row]) -> Result<Option<Vec<PathBuf>>> {
        let mut series: Vec<Series> = Vec::new();
        for r in rows {
            let name = format!("{}{}", r.mode, if r.barrier { ", 5 ms barrier" } else { "" });
            match series.iter_mut().find(|s| s.name == name) {
                Some(s) => s.points.push((r.cpu_available_pct, r.mb_s)),
                None => series.push(Series { name, points: vec![(r.cpu_available_pct, r.mb_s)] }),
            }
        }
        let panel = Panel { title: "I/O throughput vs CPU available on the I/O nodes".into(), x_label: "CPU available to the probe (%)".into(), y_label: "MB/s moved".into(), series };
        crate::plot::write_scatter(stem, &panel).map(Some)
    }

    fn report(&self, rows: &[Row]) -> Report {
        let p = &self.params;
        let table = rows
            .iter()
            .map(|r| vec![r.pattern.clone(), r.record_bytes.to_string(), r.op.clone(), r.mode.to_string(), if r.barrier { "5 ms".into() } else { "-".into() }, format!("{:.0}%", r.cpu_available_pct), f1(r.mb_s), format!("{:.4}", r.server_cpu_s_per_mb)])
            .collect();
        let mut report = Report::table(
            format!("CPU available on the I/O nodes (paper 001): a probe per I/O CPU, {} s runs, median of {}", p.seconds, p.repeats),
            &["pattern", "record B", "op", "mode", "barrier", "CPU available", "MB/s", "server CPU s/MB"],
            table,
        );
        let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}%"));
        let mbs = |v: Option<f64>| v.map_or("-".into(), f1);
        let beside: Vec<Vec<String>> = beside_paper(rows)
            .into_iter()
            .map(|b| vec![b.case, b.mode.to_string(), pct(b.cpu.0), pct(Some(b.cpu.1)), pct(b.cpu_barrier.0), pct(b.cpu_barrier.1), mbs(b.mb_s.0), mbs(Some(b.mb_s.1))])
            .collect();
        if !beside.is_empty() {
            report.tables.push(Table {
                title: "Paper 001's tables 2 and 3 beside Weft (caching = traditional caching, server = disk-directed I/O; the paper has no list I/O)".into(),
                header: vec!["case", "mode", "CPU paper", "CPU Weft", "5 ms barrier: paper", "Weft", "MB/s paper", "MB/s Weft"],
                rows: beside,
            });
        }
        report.note("(paper 001: 90-95% available for easy patterns, as little as 3.4% for hard ones; the 5 ms barrier costs more)")
    }
}
