//! The report's charts, drawn as SVG by `plotters` (its SVG backend only: text is left to the
//! browser, so no font is loaded or embedded, and the page needs no script).
//!
//! Charts a person reads: time runs along the x axis as clock time (UTC), counts are whole
//! numbers in bins of a stated length (a second, or the limit's period when the log is long
//! enough for it, so that the limit can be drawn as the line a bin must stay under), the
//! legend sits outside the data, and the palette keeps 16 series apart.
//!
//! This module holds what every chart shares (the palette, the bins, the legend); the two
//! kinds of chart are drawn beside it: lines over clock time in `lines.rs`, bars (stacked or
//! not) in `bars.rs`.

mod bars;
mod clock_axis;
mod lines;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

pub use bars::{bars, stacked};
pub use lines::lines;

/// Width of every chart, in px.
pub const WIDTH: u32 = 1_000;
/// Height of a line chart, in px.
const HEIGHT: u32 = 340;
/// The legend's column, right of the data.
const LEGEND: u32 = 290;
/// At most this many bins per line: a longer log is binned coarser.
pub const MAX_POINTS: usize = 1_500;

/// The colours of successive series: 16 that stay apart (Tableau's ten, then six darker).
pub const PALETTE: [RGBColor; 16] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x00, 0x00, 0x80),
    RGBColor(0x80, 0x00, 0x00),
    RGBColor(0x00, 0x64, 0x00),
    RGBColor(0x80, 0x80, 0x00),
    RGBColor(0x00, 0x80, 0x80),
    RGBColor(0xc0, 0x00, 0xc0),
];

/// The `i`-th series' colour (past 16, the palette again; such series are drawn dashed).
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// One line: its name and a value per bin.
#[derive(Debug, Clone)]
pub struct Series<'a> {
    /// The legend's text.
    pub name: &'a str,
    /// A value per bin, from the axis's start.
    pub values: Vec<f64>,
    /// Drawn dashed (refusals beside requests, in the same colour).
    pub dashed: bool,
    /// Its colour's index in [`PALETTE`] (by default its position).
    pub color: Option<usize>,
}

impl<'a> Series<'a> {
    /// A solid line in the next colour.
    pub fn new(name: &'a str, values: Vec<f64>) -> Series<'a> {
        Series {
            name,
            values,
            dashed: false,
            color: None,
        }
    }
}

/// The x axis: bins of `bin_s` seconds from `start_us` (µs since the epoch, a whole second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeAxis {
    /// The first bin's start.
    pub start_us: u64,
    /// Each bin's length, in seconds.
    pub bin_s: u64,
}

/// A horizontal line: a limit, in the chart's units.
#[derive(Debug, Clone)]
pub struct Level {
    /// Its height.
    pub at: f64,
    /// Its legend text (`limit: 100 per 1m`).
    pub label: String,
}

/// A vertical line at a time: a window's edge.
#[derive(Debug, Clone)]
pub struct Mark {
    /// When, µs since the epoch.
    pub at_us: u64,
    /// Its legend text.
    pub label: String,
}

/// The bin for a series of `seconds` seconds: the limit's `period` when that gives between
/// 8 and [`MAX_POINTS`] bins (the limit is then a line the bins must stay under), else the
/// shortest of 1 s, 2 s, 5 s, 10 s, 15 s, 30 s, 1 min … 1 day giving at most [`MAX_POINTS`].
pub fn bin_seconds(seconds: usize, period_s: Option<u64>) -> u64 {
    if let Some(p) = period_s.filter(|&p| p >= 1) {
        let bins = (seconds as u64).div_ceil(p);
        if (8..=MAX_POINTS as u64).contains(&bins) {
            return p;
        }
    }
    const NICE: [u64; 17] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 21_600, 43_200, 86_400,
    ];
    NICE.iter()
        .copied()
        .find(|&b| (seconds as u64).div_ceil(b) <= MAX_POINTS as u64)
        .unwrap_or(86_400)
}

/// Sums a per-second series into bins of `bin_s` seconds.
pub fn rebin<T: Copy + Into<u64>>(per_second: &[T], bin_s: u64) -> Vec<f64> {
    per_second
        .chunks(bin_s.max(1) as usize)
        .map(|c| c.iter().map(|&v| v.into()).sum::<u64>() as f64)
        .collect()
}

/// "per second", "per 10 s", "per minute", "per 5 min".
pub fn per_bin(bin_s: u64) -> String {
    match bin_s {
        1 => "per second".into(),
        60 => "per minute".into(),
        3_600 => "per hour".into(),
        s if s % 3_600 == 0 => format!("per {} h", s / 3_600),
        s if s % 60 == 0 => format!("per {} min", s / 60),
        s => format!("per {s} s"),
    }
}

/// A whole number as an axis shows it; nothing between whole numbers (no `2.5 requests`).
fn whole(v: &f64) -> String {
    if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

/// `hh:mm:ss` (UTC) of µs since the epoch.
fn clock(us: u64) -> String {
    let s = us / 1_000_000 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3_600, s / 60 % 60, s % 60)
}

/// What drawing returns: nothing, or the backend's error (drawing to a string cannot fail).
type Drawn<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The legend, in its column: a sample of each entry's line and its text.
fn legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    entries: &[(String, RGBColor, bool, bool)],
) -> Drawn {
    for (i, (text, color, dashed, vertical)) in entries.iter().enumerate() {
        let y = 30 + i as i32 * 20;
        let style = color.stroke_width(3);
        if *vertical {
            area.draw(&PathElement::new(vec![(15, y - 7), (15, y + 7)], style))?;
        } else if *dashed {
            area.draw(&DashedPathElement::new(vec![(6, y), (30, y)], 5, 3, style))?;
        } else {
            area.draw(&PathElement::new(vec![(6, y), (30, y)], style))?;
        }
        let shown: String = text.chars().take(36).collect();
        area.draw(&Text::new(
            shown,
            (38, y - 7),
            ("sans-serif", 15).into_font().color(&BLACK),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_data() {
        let svg = lines(
            "t",
            "requests",
            TimeAxis {
                start_us: 1_791_640_536_000_000,
                bin_s: 1,
            },
            &[Series::new("admitted", vec![1.0, 5.0, 2.0])],
            &[Level {
                at: 3.0,
                label: "limit: 3 per 1s".into(),
            }],
            &[],
        );
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{svg}"
        );
        assert!(svg.contains("admitted") && svg.contains("limit: 3 per 1s"));
        // Clock time on the x axis, whole numbers on the y axis.
        assert!(svg.contains("13:55:36"), "{svg}");
        assert!(
            !svg.contains(">\n0.5\n") && !svg.contains(">\n2.5\n") && svg.contains(">\n3\n"),
            "{svg}"
        );
        let svg = bars(
            "k",
            "refused",
            &["user=a".into(), "user=b".into()],
            &[3, 1],
            true,
        );
        assert!(
            svg.contains("user=a") && svg.matches("<rect").count() >= 3,
            "{svg}"
        );
        // The numbers on the bars.
        assert!(
            svg.contains(">\n3\n</text>") && svg.contains(">\n1\n</text>"),
            "{svg}"
        );
    }

    #[test]
    fn bins_follow_the_limit_period_when_they_can() {
        assert_eq!(bin_seconds(3_600, Some(60)), 60);
        assert_eq!(bin_seconds(3_600, Some(3_600)), 5, "one bin is not a chart");
        assert_eq!(bin_seconds(86_400, Some(1)), 60);
        assert_eq!(bin_seconds(100, None), 1);
        assert_eq!(rebin(&[1_u32, 2, 3, 4, 5], 2), vec![3.0, 7.0, 5.0]);
        assert_eq!(per_bin(600), "per 10 min");
    }

    #[test]
    fn sixteen_colours_all_different() {
        for (i, a) in PALETTE.iter().enumerate() {
            for (j, b) in PALETTE[..i].iter().enumerate() {
                let d = (i32::from(a.0) - i32::from(b.0)).abs()
                    + (i32::from(a.1) - i32::from(b.1)).abs()
                    + (i32::from(a.2) - i32::from(b.2)).abs();
                assert!(d > 90, "{i} and {j} are too close");
            }
        }
    }
}
