//! The Prometheus text exposition format (version 0.0.4), written: a
//! family's `# HELP` and `# TYPE` lines, then its samples, one per line,
//! `name{label="value",...} number`. Only what a server's metrics need;
//! `promtool check metrics` checks the output in `tests/metrics.rs`.

use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
}

impl MetricType {
    fn name(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        }
    }
}

/// A page of metrics being written.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts a family: every sample of `name` must follow before the next.
    pub fn family(&mut self, name: &str, ty: MetricType, help: &str) {
        debug_assert!(valid_name(name), "{name}");
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {}", ty.name());
    }

    /// One sample of the current family (or of a histogram's `_bucket`,
    /// `_sum`, `_count`).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (k, (label, v)) in labels.iter().enumerate() {
                debug_assert!(valid_name(label) && !label.contains(':'), "{label}");
                if k > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{label}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(&number(value));
        self.out.push('\n');
    }

    /// A histogram's samples: `counts` per bucket (not cumulative), one per
    /// bound and then the `+Inf` bucket; `sum` in the bounds' unit.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], bounds: &[f64], counts: &[u64], sum: f64) {
        debug_assert_eq!(counts.len(), bounds.len() + 1);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (k, &c) in counts.iter().enumerate() {
            cumulative = cumulative.saturating_add(c);
            let le = bounds.get(k).map_or_else(|| "+Inf".to_owned(), |&b| number(b));
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, cumulative as f64);
        }
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, cumulative as f64);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// A sample value: integers without a fraction, `+Inf`/`-Inf`/`NaN` as
/// the format spells them.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// A label value: backslash, double quote and newline escaped.
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// HELP text: backslash and newline escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The format's unescaping of a label value (what Prometheus reads).
    fn unescape(v: &str) -> String {
        let mut out = String::new();
        let mut chars = v.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('n') => out.push('\n'),
                    Some(o) => out.push(o),
                    None => out.push('\\'),
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn a_family_writes_help_type_and_samples() {
        let mut e = Exposition::default();
        e.family("weft_requests_total", MetricType::Counter, "Requests served.\nBy kind.");
        e.sample("weft_requests_total", &[("kind", "meta"), ("server", "0")], 12.0);
        e.sample("weft_requests_total", &[], 0.5);
        assert_eq!(e.finish(), "# HELP weft_requests_total Requests served.\\nBy kind.\n# TYPE weft_requests_total counter\nweft_requests_total{kind=\"meta\",server=\"0\"} 12\nweft_requests_total 0.5\n");
    }

    #[test]
    fn a_histogram_is_cumulative_and_ends_with_inf_sum_and_count() {
        let mut e = Exposition::default();
        e.histogram("lat", &[("kind", "lock")], &[0.001, 0.01], &[2, 0, 3], 1.25);
        assert_eq!(e.finish(), "lat_bucket{kind=\"lock\",le=\"0.001\"} 2\nlat_bucket{kind=\"lock\",le=\"0.01\"} 2\nlat_bucket{kind=\"lock\",le=\"+Inf\"} 5\nlat_sum{kind=\"lock\"} 1.25\nlat_count{kind=\"lock\"} 5\n");
    }

    #[test]
    fn special_values_are_spelled_as_the_format_wants() {
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(1e20), "100000000000000000000");
        assert_eq!(number(5e-5), "0.00005");
    }

    proptest! {
        /// Any label value stays on its sample's line and reads back as it was.
        #[test]
        fn label_values_read_back_and_never_break_a_line(v in "\\PC*|[\\\\\"\n]{0,8}") {
            let mut e = Exposition::default();
            e.sample("m", &[("l", &v)], 1.0);
            let page = e.finish();
            prop_assert_eq!(page.lines().count(), 1);
            let inner = page.strip_prefix("m{l=\"").unwrap().strip_suffix("\"} 1\n").unwrap();
            prop_assert_eq!(unescape(inner), v);
        }
    }
}
