//! Line plots of benchmark results, as PNG and SVG. Text needs a TrueType
//! font (DejaVu, which `scripts/install-deps.sh` installs); without one no
//! plot is drawn and the caller says so.

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// One line: a name and its (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One chart of a figure; its x axis is logarithmic (sizes from bytes to MiB).
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const FONTS: [&str; 3] =
    ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf", "/usr/share/fonts/dejavu/DejaVuSans.ttf"];

/// Registers a font for the bitmap backend once; false if none was found.
fn font_ready() -> bool {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READY.get_or_init(|| {
        FONTS.iter().find_map(|p| std::fs::read(p).ok()).is_some_and(|bytes| {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        })
    })
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, panels: &[Panel]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, p) in areas.into_iter().zip(panels) {
        let xs = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0));
        let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let y1 = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.1)).fold(0.0f64, f64::max) * 1.1 + 1e-9;
        if x0 > x1 {
            continue;
        }
        // Ticks at the measured x values (powers of two), not powers of ten.
        let mut keys: Vec<f64> = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0)).collect();
        keys.sort_by(f64::total_cmp);
        keys.dedup();
        let mut chart = ChartBuilder::on(&area)
            .caption(&p.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((x0..x1).log_scale().with_key_points(keys), 0.0..y1)
            .map_err(|e| anyhow!("{e}"))?;
        let label = |x: &f64| {
            let v = *x as u64;
            if v >= 1 << 20 { format!("{}M", v >> 20) } else if v >= 1 << 10 { format!("{}K", v >> 10) } else { v.to_string() }
        };
        chart
            .configure_mesh()
            .x_desc(&p.x_label)
            .y_desc(&p.y_label)
            .x_label_formatter(&label)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        for (i, s) in p.series.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), colour.stroke_width(2)))
                .map_err(|e| anyhow!("{e}"))?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
            chart.draw_series(s.points.iter().map(|&q| Circle::new(q, 3, colour.filled()))).map_err(|e| anyhow!("{e}"))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// Writes `base.png` and `base.svg`; returns the files written (none if
/// no font was found).
pub fn write(base: &Path, panels: &[Panel]) -> Result<Vec<PathBuf>> {
    if !font_ready() {
        return Ok(Vec::new());
    }
    if let Some(dir) = base.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let size = (640 * panels.len().max(1) as u32, 480);
    let png = base.with_extension("png");
    draw(BitMapBackend::new(&png, size).into_drawing_area(), panels)?;
    let svg = base.with_extension("svg");
    draw(SVGBackend::new(&svg, size).into_drawing_area(), panels)?;
    Ok(vec![png, svg])
}

/// One point per case of each series, x linear from 0 to 100 (a share in
/// percent), y on a log scale (rates that span orders of magnitude), as
/// paper 001's figures 2 and 3 plot throughput against CPU available.
fn draw_scatter<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, p: &Panel) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let ys = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.1)).filter(|y| *y > 0.0);
    let (y0, y1) = ys.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    if y0 > y1 {
        return Ok(());
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(&p.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..100.0, (y0 / 2.0..y1 * 2.0).log_scale())
        .map_err(|e| anyhow!("{e}"))?;
    chart.configure_mesh().x_desc(&p.x_label).y_desc(&p.y_label).draw().map_err(|e| anyhow!("{e}"))?;
    for (i, s) in p.series.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        chart
            .draw_series(s.points.iter().filter(|q| q.1 > 0.0).map(|&(x, y)| Circle::new((x, y), 5, colour.filled())))
            .map_err(|e| anyhow!("{e}"))?
            .label(&s.name)
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, colour.filled()));
    }
    // Lower right: a busy I/O node moving little is where no case lands.
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// [`write`] for one scatter panel (see [`draw_scatter`]): `base`.png and
/// `base`.svg; none when no font is found.
pub fn write_scatter(base: &Path, panel: &Panel) -> Result<Vec<PathBuf>> {
    if !font_ready() {
        return Ok(Vec::new());
    }
    if let Some(dir) = base.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let png = base.with_extension("png");
    draw_scatter(BitMapBackend::new(&png, (800, 560)).into_drawing_area(), panel)?;
    let svg = base.with_extension("svg");
    draw_scatter(SVGBackend::new(&svg, (800, 560)).into_drawing_area(), panel)?;
    Ok(vec![png, svg])
}

/// One bar of [`write_bars`]: a name, a value, and a goal drawn across it.
pub struct Bar {
    pub name: String,
    pub value: f64,
    pub goal: Option<f64>,
}

/// Horizontal bars, one row per name (first at the top), their values on
/// a log scale, a grey line at `reference` (1.0: even with the baseline)
/// and a red mark at each bar's goal. Rows rather than columns: names like
/// "hard-coll read-cold openmpi" stay readable at any count.
fn draw_bars<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, title: &str, value_label: &str, bars: &[Bar], reference: f64) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    // A log scale: ratios from well below to far above the reference.
    let values = || bars.iter().flat_map(|b| [Some(b.value), b.goal]).flatten().filter(|v| *v > 0.0);
    let top = values().fold(reference, f64::max) * 1.5;
    let bottom = values().fold(reference, f64::min) / 1.5;
    let n = bars.len().max(1) as f64;
    let widest = bars.iter().map(|b| b.name.len()).max().unwrap_or(0) as u32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(20 + 7 * widest)
        .build_cartesian_2d((bottom..top).log_scale(), -0.5..n - 0.5)
        .map_err(|e| anyhow!("{e}"))?;
    // Row of bar k: the first bar on top.
    let row = move |k: usize| n - 1.0 - k as f64;
    let names: Vec<String> = bars.iter().map(|b| b.name.clone()).collect();
    let label = move |y: &f64| {
        let k = (n - 1.0 - y).round();
        if (n - 1.0 - y - k).abs() < 0.01 && k >= 0.0 { names.get(k as usize).cloned().unwrap_or_default() } else { String::new() }
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(bars.len() * 4 + 1)
        .y_label_formatter(&label)
        .x_label_formatter(&|v: &f64| if *v >= 10.0 { format!("{v:.0}") } else if *v >= 1.0 { format!("{v:.1}") } else { format!("{v:.2}") })
        .x_desc(value_label)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(k, b)| Rectangle::new([(bottom, row(k) - 0.3), (b.value.max(bottom), row(k) + 0.3)], BLUE.mix(0.7).filled())))
        .map_err(|e| anyhow!("{e}"))?;
    chart.draw_series(std::iter::once(PathElement::new(vec![(reference, -0.5), (reference, n - 0.5)], BLACK.mix(0.5).stroke_width(1)))).map_err(|e| anyhow!("{e}"))?;
    chart
        .draw_series(bars.iter().enumerate().filter_map(|(k, b)| b.goal.map(|g| PathElement::new(vec![(g, row(k) - 0.4), (g, row(k) + 0.4)], RED.stroke_width(3)))))
        .map_err(|e| anyhow!("{e}"))?
        .label("goal")
        .legend(|(x, y)| PathElement::new(vec![(x, y - 6), (x, y + 6)], RED.stroke_width(3)));
    chart.configure_series_labels().position(SeriesLabelPosition::LowerRight).border_style(BLACK).background_style(WHITE.mix(0.8)).draw().map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// A bar chart (see [`draw_bars`]) as `base`.png and `base`.svg; none
/// when no font is found.
pub fn write_bars(base: &Path, title: &str, value_label: &str, bars: &[Bar], reference: f64) -> Result<Vec<PathBuf>> {
    if !font_ready() {
        return Ok(Vec::new());
    }
    if let Some(dir) = base.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    // A row of 24 pixels per bar.
    let size = (900, 120 + 24 * bars.len().max(1) as u32);
    let png = base.with_extension("png");
    draw_bars(BitMapBackend::new(&png, size).into_drawing_area(), title, value_label, bars, reference)?;
    let svg = base.with_extension("svg");
    draw_bars(SVGBackend::new(&svg, size).into_drawing_area(), title, value_label, bars, reference)?;
    Ok(vec![png, svg])
}
