//! `xtcp bench`: xtcp against the kernel's TCP, side by side, over a sweep,
//! on a test network of its own (two namespaces joined by a veth pair,
//! offloads off), removed afterwards.
//!
//! Each point of the sweep runs, interleaved, `--repeat` times:
//! kernel → kernel (stock iperf3 at both ends), xtcp client → kernel
//! `iperf3 -s`, kernel `iperf3 -c` → `xtcp serve`, and xtcp client →
//! `xtcp serve`. Every run is an iperf3 test; its `-J` output gives the
//! bytes, seconds, retransmits and both sides' CPU utilisation.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use xtcp_engine::testnet::{TestNet, TestNetConfig};

/// Arguments of `xtcp bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// MTUs to sweep.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1500,9000,16384,32768,65535"
    )]
    pub mtu: Vec<u32>,
    /// Receive buffers to sweep for xtcp (`auto` or sizes like 64K); the
    /// kernel's runs use iperf3's `-w` with the same size.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub rcvbuf: Vec<String>,
    /// MSS clipping to sweep (`on`, `off`).
    #[arg(long, value_delimiter = ',', default_value = "on")]
    pub mss_clip: Vec<String>,
    /// Parallel streams.
    #[arg(long, default_value_t = 1)]
    pub streams: u32,
    /// Seconds per test.
    #[arg(long, default_value_t = 5)]
    pub duration: u32,
    /// Repetitions of each point (medians are shown).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Write every sample as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw Gbit/s and CPU s/GiB against the MTU, xtcp beside the kernel, as SVG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// MTU of the link.
    pub mtu: u32,
    /// `--rcvbuf` value.
    pub rcvbuf: String,
    /// `--mss-clip` value.
    pub mss_clip: String,
    /// Repetition.
    pub repeat: u32,
    /// "kernel → kernel", "xtcp → kernel", "kernel → xtcp", "xtcp → xtcp".
    pub pair: &'static str,
    /// Receiver's Gbit/s.
    pub gbps: f64,
    /// Sender's retransmits.
    pub retransmits: u64,
    /// Sender CPU, percent of one core.
    pub cpu_sender: f64,
    /// Receiver CPU, percent of one core.
    pub cpu_receiver: f64,
    /// Both sides' CPU seconds per GiB moved.
    pub cpu_s_per_gib: f64,
    /// Gbit/s divided by the kernel → kernel run of the same repetition.
    pub ratio: Option<f64>,
}

struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const PAIRS: [&str; 4] = [
    "kernel → kernel",
    "xtcp → kernel",
    "kernel → xtcp",
    "xtcp → xtcp",
];

/// Options of an xtcp end; `core` pins its worker (the two ends of
/// xtcp → xtcp must not share a core).
fn xtcp_engine_args(iface: &str, rcvbuf: &str, clip: &str, core: usize) -> Vec<String> {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let core = (core % ncpu).to_string();
    [
        "--iface",
        iface,
        "--bind",
        "copy",
        "--rx-csum",
        "verify",
        "--rcvbuf",
        rcvbuf,
        "--mss-clip",
        clip,
        "--cores",
        &core,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs one iperf3 test for `pair`; returns the client's `-J` output.
fn run_pair(
    net: &TestNet,
    pair: &str,
    a: &BenchArgs,
    rcvbuf: &str,
    clip: &str,
) -> anyhow::Result<serde_json::Value> {
    let me = std::env::current_exe().context("finding the xtcp binary")?;
    let me = me.to_string_lossy().into_owned();
    let server_ip = net.b.ip4.to_string();
    let t = a.duration.to_string();
    let p = a.streams.to_string();
    // The server on side B.
    let kernel_server = pair.ends_with("kernel");
    let server = if kernel_server {
        net.b
            .ns
            .command("iperf3")
            .args(["-s", "-1", "-B", &server_ip])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting iperf3 -s (apt install iperf3)")?
    } else {
        let mut args = vec!["serve".to_string(), "-1".into()];
        args.extend(xtcp_engine_args(&net.b.iface, rcvbuf, clip, 1));
        net.b
            .ns
            .command(&me)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting xtcp serve")?
    };
    let mut server = Reap(server);
    std::thread::sleep(Duration::from_millis(if kernel_server {
        300
    } else {
        1200
    }));
    let out = if pair.starts_with("kernel") {
        let mut args = vec!["-c", &server_ip, "-t", &t, "-P", &p, "-J"];
        let w;
        if rcvbuf != "auto" {
            w = rcvbuf.to_string();
            args.extend(["-w", &w]);
        }
        net.a
            .ns
            .command("timeout")
            .arg((a.duration + 30).to_string())
            .arg("iperf3")
            .args(&args)
            .output()?
    } else {
        let mut args = vec!["client".to_string()];
        args.extend(xtcp_engine_args(&net.a.iface, rcvbuf, clip, 0));
        args.extend(
            ["-c", &server_ip, "-t", &t, "-P", &p, "-J"]
                .iter()
                .map(|s| s.to_string()),
        );
        net.a
            .ns
            .command("timeout")
            .arg((a.duration + 30).to_string())
            .arg(&me)
            .args(&args)
            .output()?
    };
    // `-1` servers exit after their test; give them a moment, then reap.
    let start = Instant::now();
    while server.0.try_wait()?.is_none() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut server_err = || {
        let _ = server.0.kill();
        let mut e = String::new();
        if let Some(mut s) = server.0.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut s, &mut e);
        }
        e
    };
    let v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(_) => bail!(
            "{pair}: no JSON from the client: {}; server: {}",
            String::from_utf8_lossy(&out.stderr),
            server_err()
        ),
    };
    if let Some(e) = v.get("error") {
        bail!("{pair}: {e}; server: {}", server_err());
    }
    Ok(v)
}

fn sample(v: &serde_json::Value, pair: &'static str) -> Sample {
    let e = &v["end"];
    let recv = e["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let secs = e["sum_received"]["seconds"].as_f64().unwrap_or(0.0);
    let cpu = &e["cpu_utilization_percent"];
    let host = cpu["host_total"].as_f64().unwrap_or(0.0);
    let remote = cpu["remote_total"].as_f64().unwrap_or(0.0);
    let gib = recv as f64 / f64::from(1u32 << 30);
    Sample {
        mtu: 0,
        rcvbuf: String::new(),
        mss_clip: String::new(),
        repeat: 0,
        pair,
        gbps: if secs > 0.0 {
            recv as f64 * 8.0 / secs / 1e9
        } else {
            0.0
        },
        retransmits: e["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
        cpu_sender: host,
        cpu_receiver: remote,
        cpu_s_per_gib: if gib > 0.0 {
            (host + remote) / 100.0 * secs / gib
        } else {
            0.0
        },
        ratio: None,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `xtcp bench`.
pub fn bench(a: &BenchArgs) -> anyhow::Result<()> {
    if a.duration == 0 || a.repeat == 0 || a.streams == 0 {
        bail!("--duration, --repeat and --streams must be at least 1");
    }
    for c in &a.mss_clip {
        if c != "on" && c != "off" {
            bail!("--mss-clip takes on and/or off, not `{c}`");
        }
    }
    let points: Vec<(u32, String, String)> = a
        .mtu
        .iter()
        .flat_map(|&m| {
            a.rcvbuf
                .iter()
                .flat_map(move |r| a.mss_clip.iter().map(move |c| (m, r.clone(), c.clone())))
        })
        .collect();
    let total = points.len() * a.repeat as usize * PAIRS.len();
    let mut done = 0;
    let mut samples: Vec<Sample> = Vec::new();
    println!(
        "{:>6} {:>7} {:>4} {:<16} {:>8} {:>6} {:>7} {:>7} {:>9} {:>8}",
        "MTU",
        "rcvbuf",
        "clip",
        "pair",
        "Gbit/s",
        "retr",
        "CPU tx%",
        "CPU rx%",
        "CPU s/GiB",
        "vs kernel"
    );
    for (mtu, rcvbuf, clip) in &points {
        let net = TestNet::new(TestNetConfig {
            mtu: *mtu,
            queues: 1,
            offloads: false,
        })
        .context("building the test network (xtcp bench runs as root)")?;
        let mut point: Vec<Sample> = Vec::new();
        for rep in 0..a.repeat {
            let mut kernel_gbps = None;
            for pair in PAIRS {
                done += 1;
                eprint!("\r[{done}/{total}] MTU {mtu} {pair} …            ");
                let _ = std::io::stderr().flush();
                let v = run_pair(&net, pair, a, rcvbuf, clip)
                    .with_context(|| format!("MTU {mtu}, {pair}"))?;
                let mut s = sample(&v, pair);
                s.mtu = *mtu;
                s.rcvbuf = rcvbuf.clone();
                s.mss_clip = clip.clone();
                s.repeat = rep;
                if pair == PAIRS[0] {
                    kernel_gbps = Some(s.gbps);
                } else if let Some(k) = kernel_gbps.filter(|k| *k > 0.0) {
                    s.ratio = Some(s.gbps / k);
                }
                point.push(s);
            }
        }
        eprint!("\r{:60}\r", "");
        for pair in PAIRS {
            let of: Vec<&Sample> = point.iter().filter(|s| s.pair == pair).collect();
            let m = |f: &dyn Fn(&Sample) -> f64| median(of.iter().map(|s| f(s)).collect());
            let ratio = if pair == PAIRS[0] {
                String::new()
            } else {
                format!("{:.2}", m(&|s| s.ratio.unwrap_or(0.0)))
            };
            println!(
                "{:>6} {:>7} {:>4} {:<16} {:>8.2} {:>6} {:>7.1} {:>7.1} {:>9.2} {:>8}",
                mtu,
                rcvbuf,
                clip,
                pair,
                m(&|s| s.gbps),
                m(&|s| s.retransmits as f64) as u64,
                m(&|s| s.cpu_sender),
                m(&|s| s.cpu_receiver),
                m(&|s| s.cpu_s_per_gib),
                ratio
            );
        }
        samples.extend(point);
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&samples)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.plot {
        std::fs::write(p, plot(&samples)).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// What a plot panel shows of a sample.
type Metric = fn(&Sample) -> f64;

/// Two panels (Gbit/s, CPU s/GiB) against the MTU, one line per pair
/// (medians).
fn plot(samples: &[Sample]) -> String {
    let mut mtus: Vec<u32> = samples.iter().map(|s| s.mtu).collect();
    mtus.sort_unstable();
    mtus.dedup();
    let colors = ["#444444", "#d62728", "#1f77b4", "#2ca02c"];
    let (w, h, pad) = (900.0, 360.0, 50.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n",
        2.0 * h
    );
    let panels: [(&str, Metric); 2] = [("Gbit/s", |s| s.gbps), ("CPU s/GiB", |s| s.cpu_s_per_gib)];
    for (pi, (label, f)) in panels.iter().enumerate() {
        let y0 = pi as f64 * h;
        let series: Vec<(usize, Vec<(u32, f64)>)> = PAIRS
            .iter()
            .enumerate()
            .map(|(ci, pair)| {
                let pts = mtus
                    .iter()
                    .map(|&m| {
                        let v: Vec<f64> = samples
                            .iter()
                            .filter(|s| s.mtu == m && s.pair == *pair)
                            .map(f)
                            .collect();
                        (m, median(v))
                    })
                    .collect();
                (ci, pts)
            })
            .collect();
        let ymax = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|x| x.1))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.1;
        let x_of = |i: usize| {
            pad + (w - 2.0 * pad)
                * if mtus.len() > 1 {
                    i as f64 / (mtus.len() - 1) as f64
                } else {
                    0.5
                }
        };
        let y_of = |v: f64| y0 + h - pad - (h - 2.0 * pad) * v / ymax;
        svg += &format!(
            "<text x=\"{pad}\" y=\"{}\" font-weight=\"bold\">{label} by MTU (median)</text>\n\
             <line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
             <line x1=\"{pad}\" y1=\"{}\" x2=\"{pad}\" y2=\"{}\" stroke=\"black\"/>\n\
             <text x=\"5\" y=\"{}\">{ymax:.1}</text>\n",
            y0 + 20.0,
            y0 + h - pad,
            w - pad,
            y0 + h - pad,
            y0 + pad,
            y0 + h - pad,
            y0 + pad + 4.0
        );
        for (i, m) in mtus.iter().enumerate() {
            svg += &format!(
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{m}</text>\n",
                x_of(i),
                y0 + h - pad + 16.0
            );
        }
        for (ci, pts) in &series {
            let poly: Vec<String> = pts
                .iter()
                .enumerate()
                .map(|(i, (_, v))| format!("{:.1},{:.1}", x_of(i), y_of(*v)))
                .collect();
            svg += &format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n\
                 <text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n",
                colors[*ci],
                poly.join(" "),
                w - pad - 150.0,
                y0 + pad + 16.0 * *ci as f64,
                colors[*ci],
                PAIRS[*ci].replace('→', "&#8594;")
            );
        }
    }
    svg += "</svg>\n";
    svg
}
