//! Small line charts as inline SVG, drawn on the server: no chart library, no script.

use maud::{Markup, html};

const WIDTH: f64 = 360.0;
const HEIGHT: f64 = 90.0;
const PAD: f64 = 4.0;

/// One series of a chart.
#[derive(Debug)]
pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    /// A CSS class naming its colour (`s0`, `s1`, ...).
    pub(crate) class: &'a str,
    /// The values, oldest first; `None` where there is no value.
    pub(crate) values: Vec<Option<f64>>,
}

/// A chart of `series` over the same points, titled `title`, its values in `unit`, with the
/// latest value of each series in the legend.
pub(crate) fn chart(id: &str, title: &str, unit: &str, series: &[Series<'_>]) -> Markup {
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    let top = nice_ceiling(max);
    let points = series.iter().map(|s| s.values.len()).max().unwrap_or(0);
    html! {
        figure.chart id=(id) {
            figcaption { (title) " " span.muted { "(max " (format_value(top)) " " (unit) ")" } }
            svg viewBox={"0 0 " (WIDTH) " " (HEIGHT)} role="img" aria-label=(title) {
                line.axis x1=(PAD) y1=(HEIGHT - PAD) x2=(WIDTH - PAD) y2=(HEIGHT - PAD) {}
                @for s in series {
                    @let path = polyline(&s.values, points, top);
                    @if !path.is_empty() {
                        polyline class=(s.class) points=(path) {}
                    }
                }
            }
            ul.legend {
                @for s in series {
                    li class=(s.class) {
                        (s.name) ": "
                        span.value data-series=(s.name) {
                            @match s.values.iter().rev().flatten().next() {
                                Some(v) => { (format_value(*v)) " " (unit) }
                                None => { "–" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The SVG points of `values` (gaps skipped) on a chart of `points` slots up to `top`.
fn polyline(values: &[Option<f64>], points: usize, top: f64) -> String {
    let step = if points > 1 {
        (WIDTH - 2.0 * PAD) / (points - 1) as f64
    } else {
        0.0
    };
    let offset = points.saturating_sub(values.len());
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let v = (*v)?;
            let x = PAD + (offset + i) as f64 * step;
            let y = HEIGHT - PAD - (v / top) * (HEIGHT - 2.0 * PAD);
            Some(format!("{x:.1},{y:.1}"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The smallest of 1, 2, 5 × 10^n at or above `max` (1 for nothing).
fn nice_ceiling(max: f64) -> f64 {
    if max.is_nan() || max <= 0.0 || max.is_infinite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|c| *c >= max)
        .unwrap_or(10.0 * magnitude)
}

/// A value for people: integers as such, small values with up to two decimals.
pub(crate) fn format_value(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_round_and_lines_skip_gaps() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(0.3), 0.5);
        let line = polyline(&[Some(0.0), None, Some(10.0)], 3, 10.0);
        assert_eq!(line, "4.0,86.0 356.0,4.0");
        assert_eq!(format_value(1234.6), "1235");
        assert_eq!(format_value(2.345), "2.35");
    }

    #[test]
    fn the_legend_shows_the_latest_value() {
        let svg = chart(
            "lag",
            "Lag",
            "records",
            &[Series {
                name: "lag",
                class: "s0",
                values: vec![Some(40.0), Some(0.0), None],
            }],
        )
        .into_string();
        assert!(
            svg.contains("lag: <span class=\"value\" data-series=\"lag\">0 records"),
            "{svg}"
        );
        assert!(svg.contains("<polyline"), "{svg}");
    }
}
