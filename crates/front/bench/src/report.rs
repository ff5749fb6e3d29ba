//! Output of a benchmark: a readable table, one JSON object, a CSV file.

use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;

/// Prints `rows` as an aligned table under `title`.
pub fn print_table(title: &str, header: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    println!("\n{title}");
    let line = |cells: Vec<String>| cells.iter().enumerate().map(|(i, c)| format!("{:>1$}", c, w[i])).collect::<Vec<_>>().join("  ");
    println!("{}", line(header.iter().map(|s| s.to_string()).collect()));
    println!("{}", w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>().join("  "));
    for r in rows {
        println!("{}", line(r.clone()));
    }
}

/// Prints `{"rows": [...], ...summary}` on one line.
pub fn print_json<R: Serialize>(rows: &[R], summary: serde_json::Map<String, serde_json::Value>) -> Result<()> {
    let mut obj = serde_json::Map::new();
    obj.insert("rows".into(), serde_json::to_value(rows)?);
    obj.extend(summary);
    println!("{}", serde_json::Value::Object(obj));
    Ok(())
}

/// Writes `rows` (serialized to flat JSON objects) as CSV with a header line.
pub fn write_csv<R: Serialize>(path: &Path, rows: &[R]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let serde_json::Value::Object(m) = serde_json::to_value(r)? else { anyhow::bail!("CSV rows must be objects") };
        if i == 0 {
            out.push_str(&m.keys().cloned().collect::<Vec<_>>().join(","));
            out.push('\n');
        }
        out.push_str(&m.values().map(|v| v.to_string().trim_matches('"').to_string()).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))
}
