//! Bars, one per label (keys refused, `retry_after` buckets, candidates), horizontal for long
//! labels such as keys: stacked parts, each bar's total written at its end, and a target as
//! a dashed line across. Each orientation has its axes and its bars drawn apart, as the two
//! differ only in which coordinate is the value.

use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordusize};
use plotters::prelude::*;

use super::{Drawn, HEIGHT, LEGEND, Level, WIDTH, color, legend, whole};

/// Bars along y (one segment per label), values along x.
type Horizontal<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, SegmentedCoord<RangedCoordusize>>>;
/// Bars along x (one segment per label), values up y.
type Vertical<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<SegmentedCoord<RangedCoordusize>, RangedCoordf64>>;

/// Bars, one per label, each with its number written at its end (horizontal when
/// `horizontal`, for long labels such as keys), as an SVG document.
pub fn bars(
    title: &str,
    value_label: &str,
    labels: &[String],
    values: &[u64],
    horizontal: bool,
) -> String {
    stacked(
        title,
        value_label,
        labels,
        &[(value_label, values.to_vec())],
        None,
        horizontal,
    )
}

/// Bars of stacked parts (`parts`: a name and a value per label), horizontal or not; each
/// bar's total written at its end; `level` a dashed line across (a target). The legend is
/// outside the data when there is more than one part or a level.
pub fn stacked(
    title: &str,
    value_label: &str,
    labels: &[String],
    parts: &[(&str, Vec<u64>)],
    level: Option<Level>,
    horizontal: bool,
) -> String {
    let mut svg = String::new();
    let stack = Stack::new(value_label, labels, parts, level);
    let height = if horizontal {
        (stack.n as u32 * 22 + 100).max(200)
    } else {
        HEIGHT
    };
    let with_legend = parts.len() > 1 || stack.level.is_some();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let drawn = (|| -> Drawn {
            root.fill(&WHITE)?;
            let root = root.titled(title, ("sans-serif", 22))?;
            let (plot, side) =
                root.split_horizontally(if with_legend { WIDTH - LEGEND } else { WIDTH });
            if horizontal {
                let mut chart = stack.horizontal_axes(&plot)?;
                stack.draw_horizontal(&mut chart)?;
            } else {
                let mut chart = stack.vertical_axes(&plot)?;
                stack.draw_vertical(&mut chart)?;
            }
            if with_legend {
                legend(&side, &stack.legend_entries())?;
            }
            root.present()?;
            Ok(())
        })();
        drawn.expect("drawing to a string cannot fail");
    }
    svg
}

/// What a bar chart draws: its labels, their parts and totals, the target, and the value
/// axis's top.
struct Stack<'d> {
    value_label: &'d str,
    labels: &'d [String],
    parts: &'d [(&'d str, Vec<u64>)],
    level: Option<Level>,
    /// Bars on the axis (at least one).
    n: usize,
    /// Each bar's parts summed.
    totals: Vec<u64>,
    /// The value axis's top: room above the longest bar or the level for its number.
    v_max: f64,
}

impl<'d> Stack<'d> {
    /// The bars' totals and the value axis's top.
    fn new(
        value_label: &'d str,
        labels: &'d [String],
        parts: &'d [(&'d str, Vec<u64>)],
        level: Option<Level>,
    ) -> Stack<'d> {
        let totals: Vec<u64> = (0..labels.len())
            .map(|i| {
                parts
                    .iter()
                    .map(|(_, v)| v.get(i).copied().unwrap_or(0))
                    .sum()
            })
            .collect();
        let top = totals
            .iter()
            .map(|&t| t as f64)
            .chain(level.iter().map(|l| l.at))
            .fold(1.0_f64, f64::max);
        Stack {
            value_label,
            labels,
            parts,
            level,
            n: labels.len().max(1),
            totals,
            v_max: (top * 1.15).ceil(),
        }
    }

    /// The label of the `i`-th bar.
    fn label_of(&self, i: usize) -> String {
        self.labels.get(i).cloned().unwrap_or_default()
    }

    /// Where part `p` of bar `i` starts and ends along the value axis.
    fn span(&self, p: usize, i: usize, v: u64) -> (f64, f64) {
        let below: u64 = self.parts[..p].iter().map(|(_, v)| v[i]).sum();
        (below as f64, (below + v) as f64)
    }

    /// The legend: a swatch per part, and the level.
    fn legend_entries(&self) -> Vec<(String, RGBColor, bool, bool)> {
        let mut entries: Vec<(String, RGBColor, bool, bool)> = self
            .parts
            .iter()
            .enumerate()
            .map(|(p, (name, _))| ((*name).to_owned(), color(p), false, false))
            .collect();
        if let Some(l) = &self.level {
            entries.push((l.label.clone(), BLACK, true, false));
        }
        entries
    }

    /// Horizontal bars' frame: labels down the left, values along the bottom.
    fn horizontal_axes<'a, 'b>(
        &self,
        plot: &DrawingArea<SVGBackend<'b>, Shift>,
    ) -> Drawn<Horizontal<'a, 'b>> {
        let n = self.n;
        let mut chart = ChartBuilder::on(plot)
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(280)
            .build_cartesian_2d(0.0..self.v_max, (0..n).into_segmented())?;
        chart
            .configure_mesh()
            .x_desc(self.value_label)
            .y_labels(n)
            .x_labels(if self.v_max <= 10.0 {
                self.v_max as usize + 1
            } else {
                8
            })
            .x_label_formatter(&whole)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => self.label_of(*i),
                _ => String::new(),
            })
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        Ok(chart)
    }

    /// Horizontal bars: each part's rectangles, each bar's total at its end, the level.
    fn draw_horizontal(&self, chart: &mut Horizontal<'_, '_>) -> Drawn {
        let number = ("sans-serif", 15).into_font().color(&BLACK);
        for (p, (_, values)) in self.parts.iter().enumerate() {
            let c = color(p);
            chart.draw_series(values.iter().enumerate().map(|(i, v)| {
                let (from, to) = self.span(p, i, *v);
                Rectangle::new(
                    [
                        (from, SegmentValue::Exact(i)),
                        (to, SegmentValue::Exact(i + 1)),
                    ],
                    c.filled(),
                )
            }))?;
        }
        chart.draw_series(self.totals.iter().enumerate().map(|(i, t)| {
            Text::new(
                t.to_string(),
                (*t as f64 + self.v_max * 0.01, SegmentValue::CenterOf(i)),
                number.clone(),
            )
        }))?;
        if let Some(l) = &self.level {
            chart.draw_series(DashedLineSeries::new(
                vec![
                    (l.at, SegmentValue::Exact(0)),
                    (l.at, SegmentValue::Exact(self.n)),
                ],
                8,
                4,
                BLACK.stroke_width(2),
            ))?;
        }
        Ok(())
    }

    /// Vertical bars' frame: labels along the bottom, values up the left.
    fn vertical_axes<'a, 'b>(
        &self,
        plot: &DrawingArea<SVGBackend<'b>, Shift>,
    ) -> Drawn<Vertical<'a, 'b>> {
        let n = self.n;
        let mut chart = ChartBuilder::on(plot)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((0..n).into_segmented(), 0.0..self.v_max)?;
        chart
            .configure_mesh()
            .y_desc(self.value_label)
            .x_labels(n)
            .y_labels(if self.v_max <= 10.0 {
                self.v_max as usize + 1
            } else {
                8
            })
            .y_label_formatter(&whole)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => self.label_of(*i),
                _ => String::new(),
            })
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        Ok(chart)
    }

    /// Vertical bars: each part's rectangles, each bar's total above it, the level.
    fn draw_vertical(&self, chart: &mut Vertical<'_, '_>) -> Drawn {
        let number = ("sans-serif", 15).into_font().color(&BLACK);
        for (p, (_, values)) in self.parts.iter().enumerate() {
            let c = color(p);
            chart.draw_series(values.iter().enumerate().map(|(i, v)| {
                let (from, to) = self.span(p, i, *v);
                Rectangle::new(
                    [
                        (SegmentValue::Exact(i), from),
                        (SegmentValue::Exact(i + 1), to),
                    ],
                    c.filled(),
                )
            }))?;
        }
        chart.draw_series(self.totals.iter().enumerate().map(|(i, t)| {
            Text::new(
                t.to_string(),
                (SegmentValue::CenterOf(i), *t as f64 + self.v_max * 0.03),
                number.clone(),
            )
        }))?;
        if let Some(l) = &self.level {
            chart.draw_series(DashedLineSeries::new(
                vec![
                    (SegmentValue::Exact(0), l.at),
                    (SegmentValue::Exact(self.n), l.at),
                ],
                8,
                4,
                BLACK.stroke_width(2),
            ))?;
        }
        Ok(())
    }
}
