//! One line chart drawn to a PNG: titled axes, a legend, solid, dashed or marked lines, shaded
//! bands, and a log-scale y axis when the values span more than two decades.
//!
//! Drawing uses plotters' bitmap backend into memory and the `png` crate to write the file. Text
//! goes through ab_glyph with DejaVu Sans embedded in the binary (the `dejavu` crate), so charts
//! render the same on a bare machine with no system fonts or fontconfig.

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, Context};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// Width of every chart, in pixels.
pub const WIDTH: u32 = 1200;
/// Height of every chart, in pixels.
pub const HEIGHT: u32 = 700;

/// The font family name the embedded font is registered under.
const FONT: &str = "sans-serif";

/// Values whose positive part spans more than this many decades get a log-scale y axis.
const LOG_DECADES: f64 = 2.0;

/// About this many ticks on the y axis.
const Y_TICKS: usize = 10;

/// Distinct line colours (the common "tab10" set); a line's `color` indexes it, wrapping around.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// How a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stroke {
    /// A plain solid line.
    Solid,
    /// A dashed line.
    Dashed,
    /// A solid line with a dot at every point (for sparse series such as evals).
    Marked,
}

/// One labelled series.
#[derive(Debug, Clone)]
pub struct Line {
    /// Legend text.
    pub label: String,
    /// `(iteration, value)` points, drawn in order.
    pub points: Vec<(i64, f64)>,
    /// How it is drawn.
    pub stroke: Stroke,
    /// Index into the palette.
    pub color: usize,
}

/// A shaded region between a lower and an upper value per iteration (e.g. mean ± std).
#[derive(Debug, Clone)]
pub struct Band {
    /// Legend text.
    pub label: String,
    /// `(iteration, low, high)` points, in iteration order.
    pub points: Vec<(i64, f64, f64)>,
    /// Index into the palette.
    pub color: usize,
}

/// How the y axis is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YScale {
    /// Always linear.
    Linear,
    /// Logarithmic when the positive values span more than two decades, else linear.
    Auto,
}

/// Everything one chart shows.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Caption above the plot.
    pub title: String,
    /// X axis description.
    pub x_label: String,
    /// Y axis description.
    pub y_label: String,
    /// Lines, drawn in order over the bands.
    pub lines: Vec<Line>,
    /// Shaded bands, drawn first.
    pub bands: Vec<Band>,
    /// Y axis scaling.
    pub y_scale: YScale,
}

impl Chart {
    /// An empty chart with a title and axis descriptions.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Self {
        Self {
            title: title.to_string(),
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            lines: Vec::new(),
            bands: Vec::new(),
            y_scale: YScale::Linear,
        }
    }

    /// Whether there is nothing to draw.
    pub fn is_empty(&self) -> bool {
        self.lines.iter().all(|line| line.points.is_empty())
            && self.bands.iter().all(|band| band.points.is_empty())
    }

    /// Whether the y axis will be logarithmic.
    pub fn log_y(&self) -> bool {
        self.y_scale == YScale::Auto && spans_decades(self.y_values(), LOG_DECADES)
    }

    fn y_values(&self) -> impl Iterator<Item = f64> + '_ {
        let lines = self
            .lines
            .iter()
            .flat_map(|line| line.points.iter().map(|p| p.1));
        let bands = self
            .bands
            .iter()
            .flat_map(|band| band.points.iter().flat_map(|p| [p.1, p.2]));
        lines.chain(bands).filter(|value| value.is_finite())
    }

    /// Draws the chart and writes it to `path` as a PNG.
    pub fn write_png(&self, path: &Path) -> anyhow::Result<()> {
        register_font()?;
        let mut pixels = vec![0u8; WIDTH as usize * HEIGHT as usize * 3];
        self.draw(&mut pixels)
            .with_context(|| format!("cannot draw {}", path.display()))?;
        write_rgb_png(path, &pixels, WIDTH, HEIGHT)
    }

    fn draw(&self, pixels: &mut [u8]) -> anyhow::Result<()> {
        let root = BitMapBackend::with_buffer(pixels, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let x = self.x_range();
        let log = self.log_y();
        let y = self.y_range(log);
        if log {
            self.draw_on(&root, x, y.clone().log_scale(), y, true)?;
        } else {
            self.draw_on(&root, x, y.clone(), y, false)?;
        }
        root.present().map_err(drawing)
    }

    fn draw_on<Y>(
        &self,
        root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
        x: Range<i64>,
        y: Y,
        y_plain: Range<f64>,
        log: bool,
    ) -> anyhow::Result<()>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let corner = emptiest_corner(self, &x, &y_plain, log);
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, (FONT, 28, FontStyle::Bold))
            .margin(20)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(x.clone(), y)
            .map_err(drawing)?;
        let span = (x.end - x.start).max(1) as usize;
        let tick_step = if log {
            0.0
        } else {
            nice_step(y_plain.end - y_plain.start, Y_TICKS)
        };
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(if log {
                format!("{} (log scale)", self.y_label)
            } else {
                self.y_label.clone()
            })
            .x_labels(span.min(12) + 1)
            .y_labels(Y_TICKS)
            .y_label_formatter(&|value| tick_label(*value, tick_step))
            .axis_desc_style((FONT, 18))
            .label_style((FONT, 14))
            .bold_line_style(RGBColor(215, 215, 215))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(drawing)?;

        for band in &self.bands {
            let color = color(band.color);
            let mut outline: Vec<(i64, f64)> =
                band.points.iter().map(|&(x, _, high)| (x, high)).collect();
            outline.extend(band.points.iter().rev().map(|&(x, low, _)| (x, low)));
            let outline = visible(outline, log);
            let fill = color.mix(0.18).filled();
            chart
                .draw_series(std::iter::once(Polygon::new(outline, fill)))
                .map_err(drawing)?
                .label(&band.label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 24, y + 6)], fill));
        }
        for line in &self.lines {
            let points = visible(line.points.clone(), log);
            let style = color(line.color).stroke_width(2);
            let legend_style = style;
            let drawn = match line.stroke {
                Stroke::Solid => chart.draw_series(LineSeries::new(points, style)),
                Stroke::Marked => chart.draw_series(LineSeries::new(points, style).point_size(4)),
                Stroke::Dashed => chart.draw_series(DashedLineSeries::new(points, 10, 6, style)),
            }
            .map_err(drawing)?;
            drawn.label(&line.label);
            match line.stroke {
                Stroke::Dashed => drawn.legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 24, y)], 6, 4, legend_style)
                }),
                Stroke::Solid | Stroke::Marked => drawn.legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], legend_style)
                }),
            };
        }
        chart
            .configure_series_labels()
            .position(corner)
            .label_font((FONT, 16))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()
            .map_err(drawing)?;
        Ok(())
    }

    fn x_range(&self) -> Range<i64> {
        let xs = self
            .lines
            .iter()
            .flat_map(|line| line.points.iter().map(|p| p.0))
            .chain(
                self.bands
                    .iter()
                    .flat_map(|band| band.points.iter().map(|p| p.0)),
            );
        let (low, high) = xs.fold((i64::MAX, i64::MIN), |(low, high), x| {
            (low.min(x), high.max(x))
        });
        if low > high {
            0..1
        } else if low == high {
            low - 1..high + 1
        } else {
            low..high
        }
    }

    /// The y axis: the values with a margin, [`on_axis`] (a run's metrics may hold any finite
    /// number, and plotters never returns from an axis that ends at ±∞, or on a log scale at 0
    /// or with ends whose ratio overflows; points past the limits are drawn at the edge).
    fn y_range(&self, log: bool) -> Range<f64> {
        let values = self
            .y_values()
            .filter(|value| !log || *value > 0.0)
            .map(|value| on_axis(value, log));
        let (low, high) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), v| {
            (low.min(v), high.max(v))
        });
        if low > high {
            return if log { 0.1..10.0 } else { 0.0..1.0 };
        }
        if log {
            // In decades: a margin of 1.5× each way, at least one decade in all.
            let margin = 1.5f64.log10();
            let bottom = low.log10() - margin;
            let top = (high.log10() + margin).max(bottom + 1.0);
            return 10f64.powf(bottom)..10f64.powf(top);
        }
        if low == high {
            let pad = (low.abs() * 0.1).max(0.5);
            return low - pad..high + pad;
        }
        let pad = (high - low) * 0.05;
        low - pad..high + pad
    }
}

/// The largest magnitude a linear y axis spans, well inside f64's range so that its margins
/// and plotters' tick arithmetic stay finite.
const LINEAR_AXIS_LIMIT: f64 = 1e300;

/// A log y axis spans at most `1/LOG_AXIS_LIMIT..LOG_AXIS_LIMIT` (with its margins): plotters
/// divides the axis's ends, whose ratio must stay finite.
const LOG_AXIS_LIMIT: f64 = 1e150;

/// `value` moved inside its axis's limits ([`LINEAR_AXIS_LIMIT`], [`LOG_AXIS_LIMIT`]), where
/// the axis and every point drawn on it stay; plotters' pixel arithmetic overflows on points far
/// outside its axis.
fn on_axis(value: f64, log: bool) -> f64 {
    if log {
        value.clamp(LOG_AXIS_LIMIT.recip(), LOG_AXIS_LIMIT)
    } else {
        value.clamp(-LINEAR_AXIS_LIMIT, LINEAR_AXIS_LIMIT)
    }
}

/// Whether the positive values span more than `decades` powers of ten.
pub fn spans_decades(values: impl Iterator<Item = f64>, decades: f64) -> bool {
    let (low, high) = values
        .filter(|value| *value > 0.0 && value.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), v| {
            (low.min(v), high.max(v))
        });
    low <= high && (high / low).log10() > decades
}

/// The tick spacing a linear axis spanning `span` with about `ticks` ticks gets: 1, 2 or 5
/// times a power of ten (what plotters places ticks at).
pub fn nice_step(span: f64, ticks: usize) -> f64 {
    let raw = span.abs() / ticks.max(1) as f64;
    if !(raw.is_finite() && raw > 0.0) {
        return 0.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * power)
}

/// A tick label on a linear axis whose ticks are `step` apart (0: unknown, e.g. a log axis):
/// rounded to the step's decimals, so accumulated float error never shows (`-2.8e-17` is `0`).
pub fn tick_label(value: f64, step: f64) -> String {
    if step > 0.0 && step.is_finite() {
        if value.abs() < step / 2.0 {
            return "0".to_string();
        }
        let decimals = (-step.log10().floor()).max(0.0) as usize;
        if (1e-3..1e5).contains(&value.abs()) && decimals <= 4 {
            return format!("{value:.decimals$}");
        }
    }
    format_number(value)
}

/// A tick label: plain for ordinary magnitudes, scientific for tiny or huge ones.
pub fn format_number(value: f64) -> String {
    let magnitude = value.abs();
    if value == 0.0 {
        "0".to_string()
    } else if !(1e-3..1e5).contains(&magnitude) {
        format!("{value:.1e}")
    } else {
        let text = format!("{value:.4}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        text.to_string()
    }
}

/// The points a log axis can show (positive values); all of them on a linear axis; each
/// [`on_axis`].
fn visible(points: Vec<(i64, f64)>, log: bool) -> Vec<(i64, f64)> {
    points
        .into_iter()
        .filter(|(_, value)| value.is_finite() && (!log || *value > 0.0))
        .map(|(x, value)| (x, on_axis(value, log)))
        .collect()
}

/// The corner of the plot with the fewest points in it, for the legend.
fn emptiest_corner(
    chart: &Chart,
    x: &Range<i64>,
    y: &Range<f64>,
    log: bool,
) -> SeriesLabelPosition {
    let scale = |value: f64| {
        if log {
            value.max(f64::MIN_POSITIVE).log10()
        } else {
            value
        }
    };
    let (y_low, y_high) = (scale(y.start), scale(y.end));
    let x_mid = (x.start + x.end) as f64 / 2.0;
    let y_mid = (y_low + y_high) / 2.0;
    // Upper left, upper right, lower left, lower right.
    let mut counts = [0usize; 4];
    let points = chart
        .lines
        .iter()
        .flat_map(|line| line.points.iter().copied())
        .chain(
            chart
                .bands
                .iter()
                .flat_map(|band| band.points.iter().flat_map(|p| [(p.0, p.1), (p.0, p.2)])),
        );
    for (px, py) in visible(points.collect(), log) {
        let right = px as f64 > x_mid;
        let lower = scale(py) < y_mid;
        counts[usize::from(lower) * 2 + usize::from(right)] += 1;
    }
    let best = (0..4)
        .min_by_key(|&corner| (counts[corner], corner))
        .unwrap_or(1);
    match best {
        0 => SeriesLabelPosition::UpperLeft,
        1 => SeriesLabelPosition::UpperRight,
        2 => SeriesLabelPosition::LowerLeft,
        _ => SeriesLabelPosition::LowerRight,
    }
}

fn color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

fn drawing(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("plotting failed: {error}")
}

/// Registers the embedded DejaVu Sans (regular and bold) with plotters, once per process.
fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(anyhow!("the embedded DejaVu Sans font did not load"))
    }
}

/// Writes 8-bit RGB pixels as a PNG file.
fn write_rgb_png(path: &Path, pixels: &[u8], width: u32, height: u32) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder
        .write_header()
        .with_context(|| format!("cannot write {}", path.display()))?;
    writer
        .write_image_data(pixels)
        .with_context(|| format!("cannot write {}", path.display()))?;
    writer
        .finish()
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_scale_only_past_two_decades_of_positive_values() {
        assert!(!spans_decades([0.5, 1.0, 40.0].into_iter(), 2.0));
        assert!(spans_decades([0.05, 1.0, 40.0].into_iter(), 2.0));
        assert!(!spans_decades([0.0, 1.0, 50.0].into_iter(), 2.0));
        assert!(!spans_decades(std::iter::empty(), 2.0));
    }

    #[test]
    fn tick_labels_stay_short() {
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(format_number(12.0), "12");
        assert_eq!(format_number(0.12345), "0.1235");
        assert_eq!(format_number(0.0001), "1.0e-4");
        assert_eq!(format_number(250000.0), "2.5e5");
    }

    #[test]
    fn linear_ticks_are_clean_multiples_of_their_step() {
        assert_eq!(nice_step(0.3, 10), 0.05);
        assert_eq!(nice_step(1.0, 10), 0.1);
        assert_eq!(nice_step(7.0, 10), 1.0);
        assert_eq!(nice_step(0.0, 10), 0.0);
        assert_eq!(tick_label(-2.8e-17, 0.05), "0");
        assert_eq!(tick_label(0.15000000000000002, 0.05), "0.15");
        assert_eq!(tick_label(-0.1, 0.05), "-0.10");
        assert_eq!(tick_label(3.0000000000000004, 1.0), "3");
        assert_eq!(tick_label(0.7, 0.1), "0.7");
        // Unknown step (log axes): the plain label.
        assert_eq!(tick_label(0.0001, 0.0), "1.0e-4");
    }

    /// A run's metrics may hold any finite number (a plugin's reward of 1e308, a subnormal
    /// loss): every chart of them draws, on a finite axis, in bounded time (plotters' tick loop
    /// never ends on an axis that ends at ±∞, or at 0 on a log scale).
    #[test]
    fn charts_of_any_finite_values_draw_in_bounded_time() {
        let extremes = [
            f64::MAX,
            -f64::MAX,
            1e308,
            3.4e38,
            1.0,
            0.0,
            f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
        ];
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            register_font().expect("font");
            let mut pixels = vec![0u8; WIDTH as usize * HEIGHT as usize * 3];
            for a in extremes {
                for b in extremes {
                    for y_scale in [YScale::Linear, YScale::Auto] {
                        let mut chart = Chart::new("t", "x", "y");
                        chart.y_scale = y_scale;
                        chart.lines.push(Line {
                            label: "values".into(),
                            points: vec![(1, 1.0), (2, a), (3, b)],
                            stroke: Stroke::Solid,
                            color: 0,
                        });
                        let log = chart.log_y();
                        let y = chart.y_range(log);
                        assert!(
                            y.start.is_finite() && y.end.is_finite() && y.start < y.end,
                            "{a:e}, {b:e}: {y:?}"
                        );
                        assert!(
                            !log || (y.start > 0.0 && (y.end / y.start).is_finite()),
                            "{a:e}, {b:e}: {y:?}"
                        );
                        chart.draw(&mut pixels).expect("drawn");
                    }
                }
            }
            done.send(()).expect("the test waits");
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("162 charts drawn within a minute");
    }

    #[test]
    fn the_legend_goes_where_the_data_is_not() {
        let mut chart = Chart::new("t", "x", "y");
        chart.lines.push(Line {
            label: "rising".into(),
            points: (0..10).map(|i| (i, i as f64)).collect(),
            stroke: Stroke::Solid,
            color: 0,
        });
        let corner = emptiest_corner(&chart, &chart.x_range(), &chart.y_range(false), false);
        assert!(
            matches!(corner, SeriesLabelPosition::UpperLeft),
            "{corner:?}"
        );
    }
}
