//! The shape every experiment of `weft bench` has, so that the command is
//! a dispatcher: an experiment runs and says what it found (rows, plots,
//! tables and notes for a reader); [`conduct`] does the rest the same way
//! for all: the CSV, the plots, and one JSON object or the tables.

use crate::report::{print_json, print_table, write_csv};
use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A table for a reader: a title, column names and rows of cells.
pub struct Table {
    pub title: String,
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

/// What a reader sees: tables, then lines of notes (the papers' figures
/// beside Weft's, targets, what was and was not synced).
#[derive(Default)]
pub struct Report {
    pub tables: Vec<Table>,
    pub notes: Vec<String>,
}

impl Report {
    /// A report of one table and its notes.
    pub fn table(title: String, header: &[&'static str], rows: Vec<Vec<String>>) -> Self {
        Report { tables: vec![Table { title, header: header.to_vec(), rows }], notes: Vec::new() }
    }

    pub fn note(mut self, line: impl Into<String>) -> Self {
        self.notes.push(line.into());
        self
    }
}

pub trait Experiment {
    /// One measurement, as the CSV and the JSON carry it.
    type Row: Serialize;

    /// Names its output: `bench-results/<name>.csv` unless told otherwise,
    /// the plots beside it, and its progress lines (`bench <name>: ...`).
    fn name(&self) -> &'static str;

    /// Runs it; `progress` tells a watching user what it is doing.
    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Self::Row>>;

    /// Fields the JSON object carries beside `rows`.
    fn summary(&self, _rows: &[Self::Row]) -> Result<serde_json::Map<String, serde_json::Value>> {
        Ok(Default::default())
    }

    /// The plots (PNG) it writes at `stem` (the CSV's path without its
    /// extension): `None` if it has none, an empty list if none could be
    /// drawn (no font).
    fn plots(&self, _stem: &Path, _rows: &[Self::Row]) -> Result<Option<Vec<PathBuf>>> {
        Ok(None)
    }

    /// The tables and notes a reader sees.
    fn report(&self, rows: &[Self::Row]) -> Report;
}

/// Where an experiment's results go.
pub struct Output {
    pub csv: PathBuf,
    /// One JSON object on standard output instead of the tables (and no
    /// progress lines).
    pub json: bool,
}

impl Output {
    /// `csv` if given, else `bench-results/<name>.csv`.
    pub fn new(csv: Option<PathBuf>, name: &str, json: bool) -> Self {
        Output { csv: csv.unwrap_or_else(|| PathBuf::from(format!("bench-results/{name}.csv"))), json }
    }
}

/// Runs `e`, writes its CSV and plots, and prints its JSON object or its
/// report followed by the files' names.
pub fn conduct<E: Experiment>(e: &mut E, out: &Output) -> Result<()> {
    let name = e.name();
    let json = out.json;
    let rows = e.run(&|what: &str| {
        if !json {
            eprintln!("bench {name}: {what}");
        }
    })?;
    write_csv(&out.csv, &rows)?;
    let plots = e.plots(&out.csv.with_extension(""), &rows)?;
    if json {
        return print_json(&rows, e.summary(&rows)?);
    }
    let report = e.report(&rows);
    for t in &report.tables {
        print_table(&t.title, &t.header, &t.rows);
    }
    for line in &report.notes {
        println!("{line}");
    }
    println!("CSV: {}", out.csv.display());
    match plots {
        Some(p) if p.is_empty() => println!("plots: none (no DejaVu font found)"),
        Some(p) => p.iter().for_each(|p| println!("plot: {}", p.display())),
        None => {}
    }
    Ok(())
}

/// A rate or a time with one decimal.
pub fn f1(v: f64) -> String {
    format!("{v:.1}")
}

/// Bytes as people read them: `512 B`, `1.5 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}
