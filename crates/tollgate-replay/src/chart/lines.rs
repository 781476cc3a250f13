//! Lines over clock time: the x axis is UTC from the first bin, the y axis whole requests per
//! bin; limits are drawn as dashed levels across, instants (a window's edge) as vertical
//! marks, and each line, level and mark has its entry in the legend.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::clock_axis::ClockAxis;
use super::{
    Drawn, HEIGHT, LEGEND, Level, Mark, PALETTE, Series, TimeAxis, WIDTH, clock, color, legend,
    per_bin, whole,
};

/// A chart of seconds since the axis's start (ticks on round clock times) against counts.
type TimeChart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<ClockAxis, RangedCoordf64>>;

/// A legend's entries: text, colour, dashed, vertical.
type Entries = Vec<(String, RGBColor, bool, bool)>;

/// Lines over clock time, as an SVG document: `series` (one value per bin of `axis`),
/// `levels` as horizontal dashed lines (limits), `marks` as vertical lines.
pub fn lines(
    title: &str,
    y_label: &str,
    axis: TimeAxis,
    series: &[Series<'_>],
    levels: &[Level],
    marks: &[Mark],
) -> String {
    let mut svg = String::new();
    let bins = series
        .iter()
        .map(|s| s.values.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let span_s = (bins as u64 * axis.bin_s) as f64;
    let y_top = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .chain(levels.iter().map(|l| l.at))
        .fold(1.0_f64, f64::max);
    let y_max = (y_top * 1.1).ceil().max(2.0);
    let mut entries: Entries = Vec::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        let drawn = (|| -> Drawn {
            root.fill(&WHITE)?;
            let root = root.titled(title, ("sans-serif", 22))?;
            let (plot, side) = root.split_horizontally(WIDTH - LEGEND);
            let mut chart = time_chart(&plot, y_label, axis, span_s, y_max)?;
            draw_series(&mut chart, series, axis.bin_s, &mut entries)?;
            draw_levels(&mut chart, levels, span_s, &mut entries)?;
            draw_marks(&mut chart, marks, axis.start_us, y_max, &mut entries)?;
            legend(&side, &entries)?;
            root.present()?;
            Ok(())
        })();
        drawn.expect("drawing to a string cannot fail");
    }
    svg
}

/// The chart's frame on `plot`: clock time along x (UTC, from the axis's start), whole
/// counts per bin up y.
fn time_chart<'a, 'b>(
    plot: &DrawingArea<SVGBackend<'b>, Shift>,
    y_label: &str,
    axis: TimeAxis,
    span_s: f64,
    y_max: f64,
) -> Drawn<TimeChart<'a, 'b>> {
    let mut chart = ChartBuilder::on(plot)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(ClockAxis::new(axis.start_us, span_s), 0.0..y_max)?;
    let start = axis.start_us;
    chart
        .configure_mesh()
        .x_desc(format!(
            "time (UTC) from {}",
            crate::utc::utc(axis.start_us)
        ))
        .y_desc(format!("{y_label} {}", per_bin(axis.bin_s)))
        .y_labels(if y_max <= 10.0 { y_max as usize + 1 } else { 8 })
        .x_label_formatter(&|x| clock(start + (*x * 1e6) as u64))
        .y_label_formatter(&whole)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 15))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    Ok(chart)
}

/// Each series as steps (a bin's count holds for its whole length), in its colour, dashed
/// when asked or past the palette.
fn draw_series(
    chart: &mut TimeChart<'_, '_>,
    series: &[Series<'_>],
    bin_s: u64,
    entries: &mut Entries,
) -> Drawn {
    let bin = bin_s as f64;
    for (i, s) in series.iter().enumerate() {
        let c = color(s.color.unwrap_or(i));
        let dashed = s.dashed || i >= PALETTE.len();
        // A step per bin: the count holds for the bin's whole length.
        let pts: Vec<(f64, f64)> = s
            .values
            .iter()
            .enumerate()
            .flat_map(|(b, &v)| [(b as f64 * bin, v), ((b + 1) as f64 * bin, v)])
            .collect();
        // Earlier lines wider, so that a line under another equal to it still shows
        // at its edges.
        let width = 4 - i.min(2) as u32;
        if dashed {
            chart.draw_series(DashedLineSeries::new(pts, 6, 3, c.stroke_width(2)))?;
        } else {
            chart.draw_series(LineSeries::new(pts, c.stroke_width(width)))?;
        }
        entries.push((s.name.to_owned(), c, dashed, false));
    }
    Ok(())
}

/// Each level (a limit) as a black dashed line across.
fn draw_levels(
    chart: &mut TimeChart<'_, '_>,
    levels: &[Level],
    span_s: f64,
    entries: &mut Entries,
) -> Drawn {
    for l in levels {
        let c = BLACK;
        chart.draw_series(DashedLineSeries::new(
            vec![(0.0, l.at), (span_s, l.at)],
            8,
            4,
            c.stroke_width(2),
        ))?;
        entries.push((l.label.clone(), c, true, false));
    }
    Ok(())
}

/// Each mark (an instant) as a grey vertical line.
fn draw_marks(
    chart: &mut TimeChart<'_, '_>,
    marks: &[Mark],
    start_us: u64,
    y_max: f64,
    entries: &mut Entries,
) -> Drawn {
    for m in marks {
        let x = m.at_us.saturating_sub(start_us) as f64 / 1e6;
        let c = RGBColor(0x55, 0x55, 0x55);
        chart.draw_series(LineSeries::new(
            vec![(x, 0.0), (x, y_max)],
            c.stroke_width(2),
        ))?;
        entries.push((m.label.clone(), c, false, true));
    }
    Ok(())
}
