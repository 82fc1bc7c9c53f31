//! `xtcp bench --plot`: SVG panels. With a preset, first its published
//! figure beside ours on the same axis values — published, ours, and both
//! relative to the axis's first value on one scale, where the trends can be
//! compared at a glance — then, for every sweep, Gbit/s, CPU s/GiB and
//! (where measured) the RTT under load against the swept parameter, one
//! line per pair.

use super::preset::{self, Line, Preset};
use super::{DIMENSIONS, PAIRS, Point, Sample, median_of, varying_dimensions};

const COLORS: [&str; 8] = [
    "#444444", "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
];

/// XML text: `&`, `<`, `>` escaped, `→` as a character reference.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('→', "&#8594;")
}

/// One series: `values` at the x positions of their index, joined by a
/// line (one per run of measured points when `split`, else across the
/// gaps), a dot on each, dashed if asked.
fn series_svg(
    values: &[Option<f64>],
    x_of: impl Fn(usize) -> f64,
    y_of: impl Fn(f64) -> f64,
    color: &str,
    dashed: bool,
    split: bool,
) -> String {
    let points: Vec<(usize, f64)> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i, v)))
        .collect();
    let runs: Vec<&[(usize, f64)]> = if split {
        points.chunk_by(|a, b| b.0 == a.0 + 1).collect()
    } else {
        vec![&points[..]]
    };
    let dash = if dashed {
        " stroke-dasharray=\"6 4\""
    } else {
        ""
    };
    let mut svg = String::new();
    for run in runs.into_iter().filter(|r| !r.is_empty()) {
        let poly: Vec<String> = run
            .iter()
            .map(|&(i, v)| format!("{:.1},{:.1}", x_of(i), y_of(v)))
            .collect();
        svg += &format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>\n",
            poly.join(" ")
        );
    }
    for &(i, v) in &points {
        svg += &format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>\n",
            x_of(i),
            y_of(v)
        );
    }
    svg
}

/// A line panel at (x0, y0) of size w × h: `series` (name, values at
/// `xs`) against the categories `xs`, from 0 to `ymax`.
#[allow(clippy::too_many_arguments)]
fn panel(
    x0: f64,
    y0: f64,
    w: f64,
    h: f64,
    title: &str,
    xs: &[String],
    series: &[Line],
    ymax: Option<f64>,
) -> String {
    let pad = 40.0;
    let ymax = ymax.unwrap_or_else(|| {
        series
            .iter()
            .flat_map(|s| s.1.iter().flatten())
            .fold(0.0f64, |m, v| m.max(*v))
            .max(1e-9)
            * 1.15
    });
    let x_of = |i: usize| {
        x0 + pad
            + (w - 2.0 * pad)
                * if xs.len() > 1 {
                    i as f64 / (xs.len() - 1) as f64
                } else {
                    0.5
                }
    };
    let bottom = y0 + h - pad;
    let y_of = |v: f64| bottom - (h - 2.0 * pad) * v.max(0.0) / ymax;
    let mut svg = format!(
        "<text x=\"{x0:.1}\" y=\"{:.1}\" font-weight=\"bold\">{}</text>\n\
         <line x1=\"{:.1}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\" stroke=\"black\"/>\n\
         <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\" stroke=\"black\"/>\n\
         <text x=\"{x0:.1}\" y=\"{:.1}\">{ymax:.2}</text>\n",
        y0 + 16.0,
        esc(title),
        x0 + pad,
        x0 + w - pad,
        x0 + pad,
        y0 + pad,
        x0 + pad,
        y0 + pad + 4.0,
    );
    for (i, x) in xs.iter().enumerate() {
        svg += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            x_of(i),
            bottom + 16.0,
            esc(x)
        );
    }
    let mut published = 0;
    for (si, (name, vals)) in series.iter().enumerate() {
        // A pair keeps its colour in every panel; published series take
        // the other colours, dashed.
        let dashed = name.starts_with("published");
        let color = match PAIRS.iter().position(|p| name.starts_with(p)) {
            Some(i) => COLORS[i],
            None => {
                published += 1;
                COLORS[(3 + published) % COLORS.len()]
            }
        };
        // Published figures are few and far apart: joined across gaps.
        svg += &series_svg(vals, x_of, y_of, color, dashed, false);
        svg += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\" font-size=\"11\">{}</text>\n",
            x0 + pad + 6.0,
            y0 + pad + 14.0 * si as f64,
            esc(name)
        );
    }
    svg
}

/// Each series over its first measured value.
fn relative(series: &[Line]) -> Vec<Line> {
    series
        .iter()
        .map(|(n, v)| {
            let first = v.iter().flatten().next().copied().filter(|f| *f > 0.0);
            (n.clone(), v.iter().map(|x| Some((*x)? / first?)).collect())
        })
        .collect()
}

/// The preset's row: published | ours | both relative to the first value.
fn comparison(p: Preset, samples: &[Sample]) -> (String, f64) {
    let pubd = p.published();
    let headline: Vec<&Sample> = samples
        .iter()
        .filter(|s| (pubd.headline)(&s.point))
        .collect();
    let (xs, ours) = preset::ours(&headline, pubd.axis, |s| Some(s.gbps));
    let published: Vec<Line> = pubd
        .series
        .iter()
        .map(|(name, pts)| {
            (
                format!("published: {name}"),
                xs.iter()
                    .map(|x| pts.iter().find(|(px, _)| px == x).map(|(_, v)| *v))
                    .collect(),
            )
        })
        .collect();
    let axis = DIMENSIONS[pubd.axis].1;
    let (w, h) = (420.0, 320.0);
    let mut svg = panel(
        0.0,
        0.0,
        w,
        h,
        &format!("published, {} by {axis}", pubd.unit),
        &xs,
        &published,
        None,
    );
    svg += &panel(
        w,
        0.0,
        w,
        h,
        &format!("ours, Gbit/s by {axis}"),
        &xs,
        &ours,
        None,
    );
    let mut both = relative(&published);
    both.extend(relative(&ours));
    svg += &panel(
        2.0 * w,
        0.0,
        w,
        h,
        &format!("both, relative to {axis} {}", xs.first().map_or("", |s| s)),
        &xs,
        &both,
        None,
    );
    (svg, h)
}

/// What a plot panel shows of a sample (`None`: not measured).
type Metric = fn(&Sample) -> Option<f64>;

/// Panels of Gbit/s, CPU s/GiB and, where any run measured it, the RTT
/// under load (with the idle RTT dashed), one line per pair (medians),
/// against the swept parameter; if several vary, against the points,
/// labelled MTU/rcvbuf/ring/frame size/TX burst/MSS clip/TX layout.
fn sweep_panels(samples: &[Sample], y_start: f64) -> (String, f64) {
    let mut xs: Vec<Point> = Vec::new();
    for s in samples {
        if !xs.contains(&s.point) {
            xs.push(s.point.clone());
        }
    }
    let varying = varying_dimensions(&xs);
    let axis = match varying[..] {
        [] => DIMENSIONS[0].1.to_owned(),
        [d] => DIMENSIONS[d].1.to_owned(),
        _ => format!(
            "point ({})",
            varying
                .iter()
                .map(|&d| DIMENSIONS[d].1)
                .collect::<Vec<_>>()
                .join("/")
        ),
    };
    let label_dims = if varying.is_empty() {
        vec![0]
    } else {
        varying.clone()
    };
    let x_label = |p: &Point| p.label_of(&label_dims);
    let slanted = varying.len() > 1;
    let colors = ["#444444", "#d62728", "#1f77b4", "#2ca02c"];
    let (w, h, pad) = (900.0, 360.0, 50.0);
    let bottom = if slanted { 100.0 } else { pad };
    let mut panels: Vec<(&str, Metric)> = vec![
        ("Gbit/s", |s| Some(s.gbps)),
        ("CPU s/GiB", |s| s.cpu_s_per_gib),
    ];
    if samples.iter().any(|s| s.rtt_us.is_some()) {
        panels.push(("RTT under load, µs", |s| s.rtt_us));
    }
    let mut svg = String::new();
    let x_of = |i: usize| {
        pad + (w - 2.0 * pad)
            * if xs.len() > 1 {
                i as f64 / (xs.len() - 1) as f64
            } else {
                0.5
            }
    };
    for (pi, (label, f)) in panels.iter().enumerate() {
        let y0 = y_start + pi as f64 * h;
        // Per pair, the median at each x; None where no run measured it.
        let mut series: Vec<(String, &str, Vec<Option<f64>>, bool)> = PAIRS
            .iter()
            .enumerate()
            .map(|(ci, pair)| {
                let pts = xs
                    .iter()
                    .map(|x| {
                        median_of(
                            samples
                                .iter()
                                .filter(|s| s.pair == *pair && s.point == *x)
                                .map(f),
                        )
                    })
                    .collect();
                (pair.replace('→', "&#8594;"), colors[ci], pts, false)
            })
            .collect();
        if pi == 2 {
            let base = xs
                .iter()
                .map(|x| {
                    median_of(
                        samples
                            .iter()
                            .filter(|s| s.point == *x)
                            .map(|s| s.ping_rtt_us),
                    )
                })
                .collect();
            series.push(("idle (ping)".to_owned(), "#7f7f7f", base, true));
        }
        let ymax = series
            .iter()
            .flat_map(|s| s.2.iter().flatten())
            .fold(0.0f64, |m, v| m.max(*v))
            .max(1e-9)
            * 1.1;
        let y_of = |v: f64| y0 + h - bottom - (h - pad - bottom) * v.max(0.0) / ymax;
        svg += &format!(
            "<text x=\"{pad}\" y=\"{}\" font-weight=\"bold\">{label} by {axis} (median)</text>\n\
             <line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
             <line x1=\"{pad}\" y1=\"{}\" x2=\"{pad}\" y2=\"{}\" stroke=\"black\"/>\n\
             <text x=\"5\" y=\"{}\">{ymax:.1}</text>\n",
            y0 + 20.0,
            y0 + h - bottom,
            w - pad,
            y0 + h - bottom,
            y0 + pad,
            y0 + h - bottom,
            y0 + pad + 4.0
        );
        for (i, x) in xs.iter().enumerate() {
            let (tx, ty) = (x_of(i), y0 + h - bottom + 16.0);
            svg += &if slanted {
                format!(
                    "<text x=\"{tx:.1}\" y=\"{ty:.1}\" transform=\"rotate(30 {tx:.1} {ty:.1})\">{}</text>\n",
                    x_label(x)
                )
            } else {
                format!(
                    "<text x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\">{}</text>\n",
                    x_label(x)
                )
            };
        }
        for (si, (name, color, pts, dashed)) in series.iter().enumerate() {
            let measured = pts.iter().any(Option::is_some);
            // One line per run of consecutive measured points.
            svg += &series_svg(pts, x_of, y_of, color, *dashed, true);
            svg += &format!(
                "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}{}</text>\n",
                w - pad - 170.0,
                y0 + pad + 16.0 * si as f64,
                if measured { "" } else { " (not measured)" }
            );
        }
    }
    (svg, panels.len() as f64 * h)
}

/// The SVG: the preset's comparison (if any), then the sweep's panels.
pub fn plot(preset: Option<Preset>, samples: &[Sample]) -> String {
    let (head, head_h) = match preset {
        Some(p) => comparison(p, samples),
        None => (String::new(), 0.0),
    };
    let (body, body_h) = sweep_panels(samples, head_h);
    let width = if preset.is_some() { 1260.0 } else { 900.0 };
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n{head}{body}</svg>\n",
        head_h + body_h
    )
}
