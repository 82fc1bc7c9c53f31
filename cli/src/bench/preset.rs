//! `xtcp bench --preset`: the five published measurements xtcp was built
//! from (shared/DESIGN.md, "Where the idea comes from"), each as a sweep
//! with its parameters, and its published figures to print beside ours
//! (docs/REPRODUCTIONS.md has the sources, our tables and the reading).
//!
//! A published figure and ours are put side by side in the same shape: a
//! row per series, a column per value of the experiment's axis, and the
//! last column over the first — the trend, which is what can carry over
//! from another machine, another kernel and another interface (lo, lo0,
//! ng_eiface, a NIC) to this veth.

use super::{BenchArgs, DIMENSIONS, PAIRS, Point, Sample, median_of, varying_dimensions};

/// A published experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// Linux "net: loopback: set default mtu to 64K": MTU 16436 vs 65535
    /// (65536 on lo; 65535 is veth's most), 63K writes.
    LoopbackMtu,
    /// FreeBSD lo0's MTU raised: MTU 16384/32768/65535 × send and receive
    /// space 32K/64K/128K × iperf3 --zerocopy on the kernel senders.
    Lo0Space,
    /// Linux 6.6 "small socket size" report: SO_RCVBUF 8K…64K and auto,
    /// 256-byte writes, TCP_NODELAY, 32 streams, MTU 1500.
    RcvbufSmall,
    /// FreeBSD "ng_eiface(4): Increase default TX queue size to 4096": the
    /// TX queue 64 → 4096 (xtcp's TX ring and a kernel pfifo queue of the
    /// same length), Gbit/s, retransmits and queueing delay, MTU 1500 and
    /// 9000.
    RingQueue,
    /// freebsd-net "tcp mss MCLBYTES restriction": MSS clipping off/on ×
    /// copy/zero-copy binding, MTU 9000, with CPU.
    MssClip,
}

/// A line of a table or a plot: its name and a value per axis value
/// (`None`: not measured).
pub type Line = (String, Vec<Option<f64>>);

/// What a table block shows of a sample.
type Metric = fn(&Sample) -> Option<f64>;

/// A published series: its name and (axis value, figure) pairs.
pub type Series = (&'static str, &'static [(&'static str, f64)]);

/// What was published.
pub struct Published {
    /// The source, named in words.
    pub source: &'static str,
    /// Where the figures here come from.
    pub provenance: &'static str,
    /// The published setup.
    pub setup: &'static str,
    /// The unit of the figures.
    pub unit: &'static str,
    /// The axis (index into the bench's dimensions).
    pub axis: usize,
    /// The figures.
    pub series: &'static [Series],
    /// A second published metric (retransmits, CPU %), if any.
    pub extra: Option<(&'static str, &'static [Series])>,
    /// Our points that correspond to the published series (the rest of
    /// the sweep is shown in the table only).
    pub headline: fn(&Point) -> bool,
}

const MTU: usize = 0;
const RCVBUF: usize = 1;
const RING: usize = 6;
const CLIP: usize = 9;

impl Preset {
    /// The preset's sweep, as the flags it stands for.
    pub fn args(self) -> BenchArgs {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut a = BenchArgs::default();
        match self {
            Preset::LoopbackMtu => {
                a.mtu = vec![16436, 65535];
                a.length = s(&["63K"]);
            }
            Preset::Lo0Space => {
                a.mtu = vec![16384, 32768, 65535];
                a.rcvbuf = s(&["32K", "64K", "128K"]);
                a.sndbuf = s(&["rcvbuf"]);
                a.kernel_zerocopy = s(&["off", "on"]);
            }
            Preset::RcvbufSmall => {
                a.mtu = vec![1500];
                a.rcvbuf = s(&["8K", "16K", "32K", "64K", "auto"]);
                a.length = s(&["256"]);
                a.nodelay = s(&["on"]);
                a.streams = vec![32];
            }
            Preset::RingQueue => {
                a.mtu = vec![1500, 9000];
                a.ring = vec![64, 128, 256, 512, 1024, 2048, 4096];
                a.kernel_txqueue = s(&["ring"]);
            }
            Preset::MssClip => {
                a.mtu = vec![9000];
                a.mss_clip = s(&["off", "on"]);
                a.bind = s(&["copy", "zerocopy"]);
            }
        }
        a
    }

    /// Its published figures.
    pub fn published(self) -> Published {
        match self {
            Preset::LoopbackMtu => Published {
                source: "Linux, \"net: loopback: set default mtu to 64K\" (Eric Dumazet, 2012)",
                provenance: "the commit message: \"Performance boost on bulk TCP transferts can be \
                             up to 30 %\"; it gives no table, so the figure is that ratio",
                setup: "lo, MTU 16436 (3 MSS of 16K per frame) vs 65536; bulk TCP",
                unit: "× MTU 16436",
                axis: MTU,
                series: &[("bulk TCP, up to", &[("16436", 1.0), ("65535", 1.3)])],
                extra: None,
                headline: |_| true,
            },
            Preset::Lo0Space => Published {
                source: "FreeBSD, the review raising lo0's MTU",
                provenance: "as quoted in xtcp's issue 16 and shared/DESIGN.md; the review itself \
                             could not be retrieved here",
                setup: "lo0, iperf3 --zerocopy, send and receive space 128K",
                unit: "Gbit/s",
                axis: MTU,
                series: &[(
                    "128K spaces, --zerocopy",
                    &[("16384", 52.9), ("32768", 93.0), ("65535", 101.0)],
                )],
                extra: None,
                headline: |p| p.rcvbuf == "128K" && p.kernel_zerocopy == "on",
            },
            Preset::RcvbufSmall => Published {
                source: "Linux, \"Network performance regression in Linux kernel 6.6 for small \
                         socket size test cases\" (Abdul Anshad Azeez, netdev, 28 Feb 2024)",
                provenance: "the report's table (TCP_STREAM_RECV, Gbit/s)",
                setup: "netperf TCP_STREAM, 256-byte messages, TCP_NODELAY, 32 streams, MTU \
                        1500, ConnectX-6 Dx 100G, Linux VM on ESXi",
                unit: "Gbit/s",
                axis: RCVBUF,
                series: &[
                    (
                        "Linux 6.5",
                        &[
                            ("8K", 8.4),
                            ("16K", 13.4),
                            ("32K", 19.1),
                            ("64K", 19.6),
                            ("auto", 19.7),
                        ],
                    ),
                    (
                        "Linux 6.6",
                        &[
                            ("8K", 5.9),
                            ("16K", 10.6),
                            ("32K", 16.3),
                            ("64K", 19.7),
                            ("auto", 19.6),
                        ],
                    ),
                ],
                extra: None,
                headline: |_| true,
            },
            Preset::RingQueue => Published {
                source: "FreeBSD, \"ng_eiface(4): Increase default TX queue size to 4096\"",
                provenance: "as quoted in xtcp's issue 16 and shared/DESIGN.md (TX queue 50 → \
                             4096; 50 is shown at 64, the nearest power of two); the review \
                             itself could not be retrieved here",
                setup: "ng_eiface, TX queue 50 (ifqmaxlen) vs 4096 packets",
                unit: "Gbit/s",
                axis: RING,
                series: &[("ng_eiface", &[("64", 6.0), ("4096", 8.6)])],
                extra: Some((
                    "retransmits",
                    &[("ng_eiface", &[("64", 95389.0), ("4096", 0.0)])],
                )),
                headline: |p| p.mtu == 1500,
            },
            Preset::MssClip => Published {
                source: "FreeBSD, the freebsd-net thread \"tcp mss MCLBYTES restriction\" (2004)",
                provenance: "as quoted in xtcp's issue 16 and shared/DESIGN.md; the thread itself \
                             could not be retrieved here, and which of the four myri figures is \
                             which cell is our reading of the summary (clipping helps both, \
                             most with zero-copy: 2.3 → 3.0 Gbit/s)",
                setup: "MTU 9000, em(4) and a Myricom NIC, copy and zero-copy sockets",
                unit: "Mbit/s",
                axis: CLIP,
                series: &[
                    ("em, copy", &[("off", 870.0), ("on", 900.0)]),
                    ("myri, copy", &[("off", 1972.0), ("on", 2609.0)]),
                    ("myri, zero-copy", &[("off", 2312.0), ("on", 3009.0)]),
                ],
                extra: Some(("CPU %", &[("myri", &[("off", 69.0), ("on", 52.3)])])),
                headline: |_| true,
            },
        }
    }
}

/// The values of `axis` in order of first appearance.
fn axis_values(samples: &[&Sample], axis: usize) -> Vec<String> {
    let mut xs: Vec<String> = Vec::new();
    for s in samples {
        let x = (DIMENSIONS[axis].2)(&s.point);
        if !xs.contains(&x) {
            xs.push(x);
        }
    }
    xs
}

/// Our series: per pair and the other varying axes, the median of
/// `metric` at each value of `axis` (`None` where not measured).
pub fn ours(samples: &[&Sample], axis: usize, metric: Metric) -> (Vec<String>, Vec<Line>) {
    let xs = axis_values(samples, axis);
    let points: Vec<Point> = samples.iter().map(|s| s.point.clone()).collect();
    // The other axes that vary, less those the axis and the ones kept
    // already decide (`--kernel-txqueue ring` follows the ring, `--sndbuf
    // rcvbuf` the receive buffer): they would split every series into
    // points of one value each.
    let mut others: Vec<usize> = Vec::new();
    for d in varying_dimensions(&points)
        .into_iter()
        .filter(|&d| d != axis)
    {
        let key = |p: &Point| {
            let mut k = vec![(DIMENSIONS[axis].2)(p)];
            k.extend(others.iter().map(|&o| (DIMENSIONS[o].2)(p)));
            k
        };
        let decided = points.iter().all(|p| {
            points
                .iter()
                .filter(|q| key(q) == key(p))
                .all(|q| (DIMENSIONS[d].2)(q) == (DIMENSIONS[d].2)(p))
        });
        if !decided {
            others.push(d);
        }
    }
    let mut groups: Vec<(String, String)> = Vec::new();
    for s in samples {
        let g = (s.pair.clone(), s.point.label_of(&others));
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    groups.sort_by_key(|(pair, _)| PAIRS.iter().position(|p| p == pair));
    let series = groups
        .into_iter()
        .map(|(pair, rest)| {
            let values = xs
                .iter()
                .map(|x| {
                    median_of(
                        samples
                            .iter()
                            .filter(|s| {
                                s.pair == pair
                                    && s.point.label_of(&others) == rest
                                    && (DIMENSIONS[axis].2)(&s.point) == *x
                            })
                            .map(|s| metric(s)),
                    )
                })
                .collect();
            let name = if rest.is_empty() {
                pair
            } else {
                format!("{pair} {rest}")
            };
            (name, values)
        })
        .collect();
    (xs, series)
}

/// How a block prints a value.
type Cell = fn(f64) -> String;

fn one_decimal(v: f64) -> String {
    format!("{v:.1}")
}

/// Rows `name  v1  v2 … last÷first` under a header of the axis values.
fn block(title: &str, xs: &[String], rows: &[Line], cell: Cell) -> Vec<String> {
    let wn = rows
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(0)
        .max(title.chars().count());
    let mut v = vec![format!(
        "{title:<wn$} {} {:>9}",
        xs.iter()
            .map(|x| format!("{x:>9}"))
            .collect::<Vec<_>>()
            .join(" "),
        format!(
            "{}÷{}",
            xs.last().map_or("", |s| s),
            xs.first().map_or("", |s| s)
        )
    )];
    for (name, vals) in rows {
        let ratio = match (
            vals.first().copied().flatten(),
            vals.last().copied().flatten(),
        ) {
            (Some(a), Some(b)) if a > 0.0 => format!("{:.2}", b / a),
            _ => "-".into(),
        };
        v.push(format!(
            "{name:<wn$} {} {ratio:>9}",
            vals.iter()
                .map(|x| x.map_or_else(|| "-".to_owned(), cell))
                .map(|x| format!("{x:>9}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    v
}

/// The published table and ours in the same shape, as lines to print.
pub fn compare(preset: Preset, samples: &[Sample]) -> Vec<String> {
    let p = preset.published();
    let all: Vec<&Sample> = samples.iter().collect();
    let axis = DIMENSIONS[p.axis].1;
    let mut out = vec![
        String::new(),
        format!("Published: {}", p.source),
        format!("  setup: {}", p.setup),
        format!("  figures: {}", p.provenance),
    ];
    let (xs, _) = ours(&all, p.axis, |s| Some(s.gbps));
    let published_rows = |series: &[Series]| -> Vec<Line> {
        series
            .iter()
            .map(|(name, pts)| {
                (
                    (*name).to_owned(),
                    xs.iter()
                        .map(|x| pts.iter().find(|(px, _)| px == x).map(|(_, v)| *v))
                        .collect(),
                )
            })
            .collect()
    };
    out.extend(block(
        &format!("{} by {axis}", p.unit),
        &xs,
        &published_rows(p.series),
        one_decimal,
    ));
    if let Some((metric, series)) = p.extra {
        out.extend(block(
            &format!("{metric} by {axis}"),
            &xs,
            &published_rows(series),
            one_decimal,
        ));
    }
    out.push(String::new());
    out.push("Ours (this machine; medians):".into());
    let blocks: [(&str, Metric, Cell); 5] = [
        ("Gbit/s", |s| Some(s.gbps), |v| format!("{v:.2}")),
        (
            "retransmits",
            |s| Some(s.retransmits as f64),
            super::count_cell,
        ),
        (
            "queueing delay µs",
            |s| s.queue_delay_us,
            |v| format!("{v:.0}"),
        ),
        ("CPU % sender", |s| Some(s.cpu_sender), one_decimal),
        ("CPU % receiver", |s| Some(s.cpu_receiver), one_decimal),
    ];
    for (name, metric, cell) in blocks {
        let (xs, rows) = ours(&all, p.axis, metric);
        out.extend(block(&format!("{name} by {axis}"), &xs, &rows, cell));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_sweeps_its_axis_and_has_its_figures_on_it() {
        use clap::ValueEnum;
        for &preset in Preset::value_variants() {
            let mut a = preset.args();
            (a.duration, a.repeat) = (1, 1);
            let w = super::super::sweep(&a);
            let pts = super::super::points(&w);
            let p = preset.published();
            let xs: Vec<String> = pts.iter().map(|q| (DIMENSIONS[p.axis].2)(q)).collect();
            assert!(
                xs.iter().collect::<std::collections::BTreeSet<_>>().len() > 1,
                "{preset:?} sweeps its axis"
            );
            for (name, figures) in p.series.iter().chain(p.extra.iter().flat_map(|e| e.1)) {
                for (x, _) in figures.iter() {
                    assert!(
                        xs.contains(&x.to_string()),
                        "{preset:?} {name}: {x} not swept"
                    );
                }
            }
            assert!(pts.iter().any(p.headline), "{preset:?}: a headline point");
            assert!(super::super::check_args(&a, &w).is_ok(), "{preset:?}");
        }
        // lo0-space: spaces tied (sndbuf = rcvbuf), not crossed.
        let w = super::super::sweep(&Preset::Lo0Space.args());
        let pts = super::super::points(&w);
        assert_eq!(pts.len(), 18);
        assert!(pts.iter().all(|p| p.sndbuf == p.rcvbuf));
        // ring-queue: the kernel's queue follows the ring.
        let w = super::super::sweep(&Preset::RingQueue.args());
        assert!(
            super::super::points(&w)
                .iter()
                .all(|p| p.kernel_txqueue == p.ring.to_string())
        );
    }

    #[test]
    fn a_series_is_not_split_by_an_axis_that_follows_another() {
        // ring-queue: the kernel's queue follows the ring; the MTU does not.
        let w = super::super::sweep(&Preset::RingQueue.args());
        let samples: Vec<Sample> = super::super::points(&w)
            .into_iter()
            .map(|point| Sample {
                point,
                pair: PAIRS[0].into(),
                gbps: 1.0,
                ..Sample::default()
            })
            .collect();
        let all: Vec<&Sample> = samples.iter().collect();
        let (xs, series) = ours(&all, RING, |s| Some(s.gbps));
        assert_eq!(xs.len(), 7);
        let names: Vec<&str> = series.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names, ["kernel → kernel 1500", "kernel → kernel 9000"]);
        assert!(series.iter().all(|s| s.1.iter().all(Option::is_some)));
    }

    #[test]
    fn comparison_puts_published_and_ours_in_one_shape() {
        let mk = |rcvbuf: &str, pair: &str, gbps: f64| Sample {
            point: Point {
                rcvbuf: rcvbuf.into(),
                streams: 32,
                ..Point::default()
            },
            pair: pair.into(),
            gbps,
            ..Sample::default()
        };
        let samples = vec![
            mk("8K", PAIRS[0], 2.0),
            mk("8K", PAIRS[1], 1.0),
            mk("auto", PAIRS[0], 8.0),
            mk("auto", PAIRS[1], 4.0),
        ];
        let lines = compare(Preset::RcvbufSmall, &samples).join("\n");
        assert!(lines.contains("Linux 6.6"), "{lines}");
        // Published 8K → auto for 6.6: 5.9 → 19.6, ratio 3.32.
        assert!(
            lines.lines().any(|l| l.starts_with("Linux 6.6")
                && l.contains("5.9")
                && l.trim_end().ends_with("3.32")),
            "{lines}"
        );
        // Ours: kernel → kernel 2 → 8 (4.00), xtcp → kernel 1 → 4.
        assert!(
            lines
                .lines()
                .any(|l| l.starts_with("kernel → kernel") && l.trim_end().ends_with("4.00")),
            "{lines}"
        );
    }
}
