//! The report's charts, drawn as SVG by `plotters` (its SVG backend only: text is left to the
//! browser, so no font is loaded or embedded).

use plotters::prelude::*;

/// Width and height of every chart, in px.
const SIZE: (u32, u32) = (880, 320);
/// At most this many points per line: a day of seconds is averaged into buckets.
const MAX_POINTS: usize = 1_500;

/// The colours of successive series.
const PALETTE: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// One line of a line chart: its name and its values, one per second from 0.
#[derive(Debug)]
pub struct Series<'a> {
    /// The legend's text.
    pub name: &'a str,
    /// A value per second.
    pub per_second: Vec<f64>,
}

/// Lines over time (x: seconds from the start), as an SVG document.
pub fn lines(title: &str, y_label: &str, series: &[Series<'_>]) -> String {
    let mut svg = String::new();
    let len = series
        .iter()
        .map(|s| s.per_second.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let step = len.div_ceil(MAX_POINTS);
    let points: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.per_second
                .chunks(step)
                .enumerate()
                .map(|(i, c)| ((i * step) as f64, c.iter().sum::<f64>() / c.len() as f64))
                .collect()
        })
        .collect();
    let y_max = points.iter().flatten().map(|p| p.1).fold(1.0_f64, f64::max) * 1.1;
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 18))
                .margin(10)
                .x_label_area_size(36)
                .y_label_area_size(56)
                .build_cartesian_2d(0.0..len as f64, 0.0..y_max)?;
            chart
                .configure_mesh()
                .x_desc("seconds from the start")
                .y_desc(y_label)
                .light_line_style(WHITE.mix(0.0))
                .draw()?;
            for (i, (s, pts)) in series.iter().zip(points).enumerate() {
                let color = PALETTE[i % PALETTE.len()];
                chart
                    .draw_series(LineSeries::new(pts, color.stroke_width(2)))?
                    .label(s.name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .position(SeriesLabelPosition::UpperRight)
                .draw()?;
            root.present()?;
            Ok(())
        })();
        drawn.expect("drawing to a string cannot fail");
    }
    svg
}

/// Bars, one per label (horizontal when `horizontal`, for long labels such as keys), as an
/// SVG document.
pub fn bars(
    title: &str,
    value_label: &str,
    labels: &[String],
    values: &[u64],
    horizontal: bool,
) -> String {
    let mut svg = String::new();
    let n = labels.len().max(1);
    let v_max = values.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.1;
    let height = if horizontal {
        (n as u32 * 22 + 90).max(200)
    } else {
        SIZE.1
    };
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0, height)).into_drawing_area();
        let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let color = PALETTE[0];
            if horizontal {
                let mut chart = ChartBuilder::on(&root)
                    .caption(title, ("sans-serif", 18))
                    .margin(10)
                    .x_label_area_size(36)
                    .y_label_area_size(260)
                    .build_cartesian_2d(0.0..v_max, (0..n).into_segmented())?;
                chart
                    .configure_mesh()
                    .x_desc(value_label)
                    .y_labels(n)
                    .y_label_formatter(&|v| match v {
                        SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                        _ => String::new(),
                    })
                    .light_line_style(WHITE.mix(0.0))
                    .draw()?;
                chart.draw_series(values.iter().enumerate().map(|(i, v)| {
                    Rectangle::new(
                        [
                            (0.0, SegmentValue::Exact(i)),
                            (*v as f64, SegmentValue::Exact(i + 1)),
                        ],
                        color.filled(),
                    )
                }))?;
            } else {
                let mut chart = ChartBuilder::on(&root)
                    .caption(title, ("sans-serif", 18))
                    .margin(10)
                    .x_label_area_size(36)
                    .y_label_area_size(56)
                    .build_cartesian_2d((0..n).into_segmented(), 0.0..v_max)?;
                chart
                    .configure_mesh()
                    .y_desc(value_label)
                    .x_labels(n)
                    .x_label_formatter(&|v| match v {
                        SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                        _ => String::new(),
                    })
                    .light_line_style(WHITE.mix(0.0))
                    .draw()?;
                chart.draw_series(values.iter().enumerate().map(|(i, v)| {
                    Rectangle::new(
                        [
                            (SegmentValue::Exact(i), 0.0),
                            (SegmentValue::Exact(i + 1), *v as f64),
                        ],
                        color.filled(),
                    )
                }))?;
            }
            root.present()?;
            Ok(())
        })();
        drawn.expect("drawing to a string cannot fail");
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_data() {
        let svg = lines(
            "t",
            "per second",
            &[Series {
                name: "admitted",
                per_second: vec![1.0, 5.0, 2.0],
            }],
        );
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{svg}"
        );
        assert!(svg.contains("admitted"));
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
    }
}
