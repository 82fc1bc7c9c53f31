//! `xtcp bench`: xtcp against the kernel's TCP, side by side, over a sweep
//! of MTU, receive buffer, ring size, frame size and MSS clipping, on a test
//! network of its own (two namespaces joined by a veth pair, offloads off),
//! removed afterwards — or, with `--iface A,B`, on two existing interfaces
//! moved into those namespaces for the run and handed back afterwards.
//!
//! Each point of the sweep first pings the idle path (shown for reference),
//! then runs, interleaved, `--repeat` times: kernel → kernel (stock iperf3
//! at both ends), xtcp client → kernel `iperf3 -s`, kernel `iperf3 -c` →
//! `xtcp serve`, and xtcp client → `xtcp serve`. Every run is an iperf3
//! test; the client's `-J` output gives the bytes, seconds, retransmits,
//! both sides' CPU utilisation and the sender's own RTT figures. The
//! queueing delay is the sender's mean RTT less its minimum RTT in the same
//! run: both come from the same TCP sender's RTT estimator on the same
//! connection, so wake-up latency that an idle ping pays and a busy
//! connection does not cannot make it negative (docs/BENCHMARKS.md).

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
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
    /// xtcp's RX/TX ring entries to sweep (powers of two, 64..=16384;
    /// default: xtcp's 2048). On the veth test network only the xtcp ends
    /// have rings: the kernel pairs run the same at every ring size. With
    /// --iface, a --ring given also sets the NICs' RX/TX rings (`ethtool
    /// -G`) for all four pairs, and puts the old sizes back afterwards.
    #[arg(long, value_delimiter = ',', value_parser = crate::args::parse_ring)]
    pub ring: Vec<u32>,
    /// xtcp's UMEM frame sizes to sweep (2048, 4096); the kernel pairs have
    /// no frames and run the same at every size.
    #[arg(long, value_delimiter = ',', default_value = "4096")]
    pub frame_size: Vec<u32>,
    /// xtcp's TX bursts to sweep (`--tx-burst`: TX frames one connection
    /// queues per loop turn, ahead of the ACKs queued after them; xtcp's
    /// default is 64). The kernel pairs run the same at every value.
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub tx_burst: Vec<u32>,
    /// MSS clipping to sweep (`on`, `off`).
    #[arg(long, value_delimiter = ',', default_value = "on")]
    pub mss_clip: Vec<String>,
    /// xtcp's transmit layouts to sweep (`chained`, `single`, `auto`; see
    /// `xtcp send --help`). On veth, whose `tx off` also turns off
    /// scatter-gather, the kernel copies a chained segment's pieces into
    /// one buffer; `single` costs smaller segments instead (at most a frame).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub tx_layout: Vec<String>,
    /// Run on two existing interfaces A,B (two NIC ports cabled back to
    /// back, or the ends of a veth pair) instead of a veth pair of bench's
    /// own. bench takes them over for the run: it moves them into its two
    /// namespaces, which flushes their addresses (not put back), sets its
    /// test addresses, the MTU and offloads, and afterwards — also on error
    /// or Ctrl-C — moves them back here with their MTU, offloads, rings and
    /// up/down state as they were. An interface with this host's default
    /// route is refused.
    #[arg(long, value_parser = parse_iface_pair, value_name = "A,B")]
    pub iface: Option<(String, String)>,
    /// Parallel streams.
    #[arg(
        short = 'P',
        long = "parallel",
        alias = "streams",
        value_name = "PARALLEL",
        default_value_t = 1
    )]
    pub streams: u32,
    /// Seconds per test.
    #[arg(
        short = 't',
        long = "time",
        alias = "duration",
        value_name = "SECS",
        default_value_t = 5
    )]
    pub duration: u32,
    /// Repetitions of each point (medians are shown).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Write every sample as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw Gbit/s, CPU s/GiB and (where measured) RTT under load against
    /// the swept parameter, xtcp beside the kernel, as SVG.
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
    /// xtcp's RX/TX ring entries (and the NICs', with `--iface` and `--ring`).
    pub ring: u32,
    /// xtcp's UMEM frame size.
    pub frame_size: u32,
    /// xtcp's `--tx-burst`.
    pub tx_burst: u32,
    /// `--mss-clip` value.
    pub mss_clip: String,
    /// `--tx-layout` value.
    pub tx_layout: String,
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
    /// Round-trip time of the idle path, µs (ping before the point's runs;
    /// for reference: it includes the wake-up of an idle receiver).
    pub ping_rtt_us: Option<f64>,
    /// The sender's least RTT in the run, µs, averaged over streams (the
    /// client's `end.streams[].sender.min_rtt`): the path without queueing.
    pub min_rtt_us: Option<f64>,
    /// The sender's mean RTT under load, µs, averaged over streams (the
    /// client's `end.streams[].sender.mean_rtt`); `None` where the client
    /// does not report it.
    pub rtt_us: Option<f64>,
    /// `rtt_us` less `min_rtt_us`: the delay the load adds, µs (never
    /// negative; `None` where either is not reported).
    pub queue_delay_us: Option<f64>,
    /// XDP statistics of the xtcp client end (xtcp → kernel, xtcp → xtcp;
    /// `None` for a kernel client): the `xdp` object of `xtcp client -J`,
    /// with `steered` (packets the steering program redirected to xtcp),
    /// `dropped_at_redirect` (lost before xtcp saw them: the driver's
    /// count where it has one, veth's `rx_queue_N_drops`, else the
    /// sockets' `rx_ring_full + rx_dropped`; `drops_source` says which),
    /// `drop_percent`, the sockets' `XDP_STATISTICS` summed (`rx_dropped`,
    /// `rx_ring_full`, `rx_fill_ring_empty_descs`, `rx_invalid_descs`,
    /// `tx_invalid_descs`, `tx_ring_empty_descs`), the driver's count
    /// (`driver`, `driver_counter`, `driver_drops`, or `driver_note` where
    /// the driver has none) and the same per queue in `queues`.
    pub xdp_client: Option<serde_json::Value>,
    /// The same for the xtcp server end (kernel → xtcp, xtcp → xtcp;
    /// `None` for a kernel server): the closing `{"xdp": …}` object of
    /// `xtcp serve -J`. Where xtcp receives the data, these are the
    /// interesting ones.
    pub xdp_server: Option<serde_json::Value>,
    /// Redirect drops ÷ steered packets, percent, of the xtcp end that
    /// receives the data: the server in kernel → xtcp and xtcp → xtcp, the
    /// client (which receives the ACKs) in xtcp → kernel; `None` for
    /// kernel → kernel (the table's "drop %" column).
    pub drop_pct: Option<f64>,
}

/// One point of the sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Point {
    mtu: u32,
    rcvbuf: String,
    ring: u32,
    frame_size: u32,
    tx_burst: u32,
    mss_clip: String,
    tx_layout: String,
}

impl Point {
    /// `9000/auto/2048/4096/64/on/auto`: MTU/rcvbuf/ring/frame size/TX
    /// burst/MSS clip/TX layout.
    fn label(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}/{}/{}",
            self.mtu,
            self.rcvbuf,
            self.ring,
            self.frame_size,
            self.tx_burst,
            self.mss_clip,
            self.tx_layout
        )
    }
}

impl Sample {
    fn point(&self) -> Point {
        Point {
            mtu: self.mtu,
            rcvbuf: self.rcvbuf.clone(),
            ring: self.ring,
            frame_size: self.frame_size,
            tx_burst: self.tx_burst,
            mss_clip: self.mss_clip.clone(),
            tx_layout: self.tx_layout.clone(),
        }
    }
}

fn parse_iface_pair(s: &str) -> Result<(String, String), String> {
    match s.split(',').map(str::trim).collect::<Vec<_>>()[..] {
        [a, b] if !a.is_empty() && !b.is_empty() => Ok((a.to_owned(), b.to_owned())),
        _ => Err(format!("--iface takes two interfaces as A,B, not `{s}`")),
    }
}

/// xtcp's default ring size, used when `--ring` is not given.
const DEFAULT_RING: u32 = 2048;
/// xtcp's default UMEM frames per queue.
const DEFAULT_FRAMES: u32 = 16384;

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
fn xtcp_engine_args(iface: &str, p: &Point, core: usize) -> Vec<String> {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let core = (core % ncpu).to_string();
    let ring = p.ring.to_string();
    let frame_size = p.frame_size.to_string();
    let tx_burst = p.tx_burst.to_string();
    // The engine wants at least four frames per ring entry.
    let frames = DEFAULT_FRAMES.max(4 * p.ring).to_string();
    [
        "--iface",
        iface,
        "--bind",
        "copy",
        "--rx-csum",
        "verify",
        "--rcvbuf",
        &p.rcvbuf,
        "--ring",
        &ring,
        "--frames",
        &frames,
        "--frame-size",
        &frame_size,
        "--tx-burst",
        &tx_burst,
        "--mss-clip",
        &p.mss_clip,
        "--tx-layout",
        &p.tx_layout,
        "--cores",
        &core,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// What one run printed: the client's `-J` output and, for an xtcp
/// server, the `xdp` object `xtcp serve -J` prints when it stops.
struct PairOutput {
    client: serde_json::Value,
    server_xdp: Option<serde_json::Value>,
}

/// The `xdp` object of the documents `xtcp serve -J` printed.
fn serve_xdp(stdout: &str) -> Option<serde_json::Value> {
    serde_json::Deserializer::from_str(stdout)
        .into_iter::<serde_json::Value>()
        .filter_map(Result::ok)
        .filter_map(|mut v| v.get_mut("xdp").map(serde_json::Value::take))
        .last()
}

/// Runs one iperf3 test for `pair`.
fn run_pair(net: &TestNet, pair: &str, a: &BenchArgs, point: &Point) -> anyhow::Result<PairOutput> {
    let rcvbuf = point.rcvbuf.as_str();
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
        let mut args = vec!["serve".to_string(), "-1".into(), "-J".into()];
        args.extend(xtcp_engine_args(&net.b.iface, point, 1));
        net.b
            .ns
            .command(&me)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting xtcp serve")?
    };
    let mut server = Reap(server);
    // xtcp serve's standard error, collected as it comes: its banner says
    // when it is set up, the rest explains a failure.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = server.0.stderr.take().map(|mut pipe| {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut pipe, &mut buf) {
                if let Ok(mut l) = log.lock() {
                    l.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        })
    });
    let log_text = || log.lock().map(|l| l.clone()).unwrap_or_default();
    // Its standard output (xtcp serve -J: the test's document, then the
    // XDP statistics), read as it comes so that it never blocks.
    let stdout_reader = server.0.stdout.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut pipe, &mut s);
            s
        })
    });
    // The client starts once the server is ready: the kernel's listening
    // socket, or xtcp's banner (printed once it is set up).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = if kernel_server {
            net.b
                .ns
                .command("ss")
                .args(["-Hltn", "sport = :5201"])
                .output()
                .is_ok_and(|o| !o.stdout.is_empty())
        } else {
            log_text().contains("listening on")
        };
        if ready {
            break;
        }
        if let Some(st) = server.0.try_wait()? {
            bail!(
                "{pair}: the server exited ({st}) before it was ready: {}",
                log_text()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{pair}: the server was not ready within 60 s: {}",
                log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
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
        args.extend(xtcp_engine_args(&net.a.iface, point, 0));
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
    // `-1` servers exit after their test (xtcp after its grace period and
    // its closing statistics); give them a moment, then reap.
    let start = Instant::now();
    let patience = Duration::from_secs(if kernel_server { 5 } else { 20 });
    while server.0.try_wait()?.is_none() && start.elapsed() < patience {
        std::thread::sleep(Duration::from_millis(20));
    }
    let server_exited = server.0.try_wait()?.is_some();
    let server_err = || {
        let _ = server.0.kill();
        let _ = server.0.wait();
        if let Some(r) = reader {
            let _ = r.join();
        }
        log_text()
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
    let server_xdp = if kernel_server {
        None
    } else {
        if !server_exited {
            bail!(
                "{pair}: xtcp serve -1 did not exit within {patience:?} after its test: {}",
                server_err()
            );
        }
        let out = stdout_reader
            .and_then(|r| r.join().ok())
            .unwrap_or_default();
        match serve_xdp(&out) {
            Some(x) => Some(x),
            None => bail!(
                "{pair}: xtcp serve -J printed no XDP statistics: {out}; {}",
                server_err()
            ),
        }
    };
    if !pair.starts_with("kernel") && v.get("xdp").is_none() {
        bail!("{pair}: xtcp client -J printed no XDP statistics");
    }
    Ok(PairOutput {
        client: v,
        server_xdp,
    })
}

/// The sender's `field` RTT (`mean_rtt`, `min_rtt`) in µs, averaged over
/// the streams that report it (iperf3's `end.streams[].sender`).
fn sender_rtt_us(v: &serde_json::Value, field: &str) -> Option<f64> {
    let rtts: Vec<f64> = v["end"]["streams"]
        .as_array()?
        .iter()
        .filter_map(|s| s["sender"][field].as_f64())
        .collect();
    (!rtts.is_empty()).then(|| rtts.iter().sum::<f64>() / rtts.len() as f64)
}

/// Mean less minimum RTT of the same sender: the delay the load adds.
/// `None` if either is missing, or if the figures contradict each other
/// (a minimum above the mean is not a measurement).
fn queue_delay_us(mean: Option<f64>, min: Option<f64>) -> Option<f64> {
    let d = mean? - min?;
    (d >= 0.0).then_some(d)
}

/// The idle round-trip time from A to B in µs: the average of `ping -c 5`.
fn ping_rtt_us(net: &TestNet) -> anyhow::Result<f64> {
    let out = net
        .a
        .ns
        .command("ping")
        .args(["-c", "5", "-i", "0.2", "-w", "10", "-q"])
        .arg(net.b.ip4.to_string())
        .stdin(Stdio::null())
        .output()
        .context("running ping (apt install iputils-ping)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_ping_avg_us(&text).with_context(|| {
        format!(
            "no round-trip time from `ping {}`: {} {}",
            net.b.ip4,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// The average of ping's `rtt min/avg/max/mdev = 0.031/0.045/0.060/0.010 ms`, in µs.
fn parse_ping_avg_us(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains("min/avg/max"))?;
    let (_, values) = line.split_once('=')?;
    let mut words = values.split_whitespace();
    let avg: f64 = words.next()?.split('/').nth(1)?.parse().ok()?;
    let scale = match words.next()? {
        "ms" => 1e3,
        "us" | "µs" => 1.0,
        "s" => 1e6,
        _ => return None,
    };
    Some(avg * scale)
}

fn sample(out: &PairOutput, pair: &'static str) -> Sample {
    let v = &out.client;
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
        ring: 0,
        frame_size: 0,
        tx_burst: 0,
        mss_clip: String::new(),
        tx_layout: String::new(),
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
        ping_rtt_us: None,
        min_rtt_us: sender_rtt_us(v, "min_rtt"),
        rtt_us: sender_rtt_us(v, "mean_rtt"),
        queue_delay_us: queue_delay_us(sender_rtt_us(v, "mean_rtt"), sender_rtt_us(v, "min_rtt")),
        xdp_client: v.get("xdp").cloned(),
        xdp_server: out.server_xdp.clone(),
        drop_pct: None,
    }
    .with_drop_pct()
}

impl Sample {
    /// Sets `drop_pct` from the xtcp end that receives the data: the
    /// server if it is xtcp, else the client if it is xtcp.
    fn with_drop_pct(mut self) -> Sample {
        self.drop_pct = self
            .xdp_server
            .as_ref()
            .or(self.xdp_client.as_ref())
            .and_then(|x| x["drop_percent"].as_f64());
        self
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

/// The median of the values present; `None` if there are none.
fn median_of(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.flatten().collect();
    (!v.is_empty()).then(|| median(v))
}

/// `12.3`, or `-` for a value not measured.
fn or_dash(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// The sweep: every combination, MTU outermost, MSS clipping innermost.
fn points(a: &BenchArgs) -> Vec<Point> {
    let rings = if a.ring.is_empty() {
        vec![DEFAULT_RING]
    } else {
        a.ring.clone()
    };
    let mut v = Vec::new();
    for &mtu in &a.mtu {
        for rcvbuf in &a.rcvbuf {
            for &ring in &rings {
                for &frame_size in &a.frame_size {
                    for &tx_burst in &a.tx_burst {
                        for mss_clip in &a.mss_clip {
                            for tx_layout in &a.tx_layout {
                                v.push(Point {
                                    mtu,
                                    rcvbuf: rcvbuf.clone(),
                                    ring,
                                    frame_size,
                                    tx_burst,
                                    mss_clip: mss_clip.clone(),
                                    tx_layout: tx_layout.clone(),
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    v
}

fn check_args(a: &BenchArgs) -> anyhow::Result<()> {
    if a.duration == 0 || a.repeat == 0 || a.streams == 0 {
        bail!("-t (--time), --repeat and -P (--parallel) must be at least 1");
    }
    if a.mtu.is_empty() || a.rcvbuf.is_empty() || a.frame_size.is_empty() || a.mss_clip.is_empty() {
        bail!("--mtu, --rcvbuf, --frame-size and --mss-clip need at least one value");
    }
    for c in &a.mss_clip {
        if c != "on" && c != "off" {
            bail!("--mss-clip takes on and/or off, not `{c}`");
        }
    }
    if a.tx_layout.is_empty() {
        bail!("--tx-layout needs at least one value");
    }
    for l in &a.tx_layout {
        if !["auto", "chained", "single"].contains(&l.as_str()) {
            bail!("--tx-layout takes auto, chained and/or single, not `{l}`");
        }
    }
    if a.tx_burst.is_empty() {
        bail!("--tx-burst needs at least one value");
    }
    for &b in &a.tx_burst {
        if !(1..=65536).contains(&b) {
            bail!("--tx-burst takes 1..=65536 frames, not {b}");
        }
    }
    for &f in &a.frame_size {
        if f != 2048 && f != 4096 {
            bail!("--frame-size takes 2048 and/or 4096, not {f}");
        }
    }
    Ok(())
}

/// Builds the network: a veth pair of its own, or the `--iface` pair taken
/// over; checks that the interfaces take every MTU and ring size of the
/// sweep. Returns whether the NICs' rings follow `--ring`.
fn network(a: &BenchArgs) -> anyhow::Result<(TestNet, bool)> {
    let config = TestNetConfig {
        mtu: a.mtu.iter().copied().min().unwrap_or(1500),
        queues: 1,
        offloads: false,
    };
    let net = match &a.iface {
        None => {
            TestNet::new(config).context("building the test network (xtcp bench runs as root)")?
        }
        Some((x, y)) => {
            TestNet::adopt(x, y, config).with_context(|| format!("taking over {x} and {y}"))?
        }
    };
    if let Some(max) = net.max_mtu()? {
        if let Some(m) = a.mtu.iter().find(|&&m| m > max) {
            bail!(
                "--mtu {m}: {} and {} take at most {max}",
                net.a.iface,
                net.b.iface
            );
        }
    }
    let mut nic_rings = false;
    if net.is_adopted() && !a.ring.is_empty() {
        let rings = net.rings()?;
        if rings.iter().any(Option::is_none) {
            eprintln!(
                "xtcp bench: {} / {} have no ring sizes to set (veth?): --ring applies to the \
                 xtcp ends only",
                net.a.iface, net.b.iface
            );
        } else {
            for (iface, r) in [&net.a.iface, &net.b.iface]
                .into_iter()
                .zip(rings.iter().flatten())
            {
                if let Some(n) = a.ring.iter().find(|&&n| n > r.rx_max || n > r.tx_max) {
                    bail!(
                        "--ring {n}: {iface} takes at most rx {} tx {} (ethtool -g {iface})",
                        r.rx_max,
                        r.tx_max
                    );
                }
            }
            nic_rings = true;
        }
    }
    Ok((net, nic_rings))
}

/// `xtcp bench`.
pub fn bench(a: &BenchArgs) -> anyhow::Result<()> {
    check_args(a)?;
    let points = points(a);
    let total = points.len() * a.repeat as usize * PAIRS.len();
    // Ctrl-C ends the runs (iperf3 gets it too) and unwinds, so that the
    // interfaces and namespaces are cleaned up.
    let interrupted = crate::bulk::interrupt_flag()?;
    let (mut net, nic_rings) = network(a)?;
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed}] {msg}")
            .context("progress bar template")?,
    );
    let mut samples: Vec<Sample> = Vec::new();
    bar.suspend(|| {
        println!(
            "{:>6} {:>7} {:>5} {:>5} {:>5} {:>4} {:>7} {:<16} {:>8} {:>6} {:>7} {:>7} {:>9} {:>9} {:>8} {:>10} {:>8} {:>9} {:>7}",
            "MTU",
            "rcvbuf",
            "ring",
            "frame",
            "burst",
            "clip",
            "layout",
            "pair",
            "Gbit/s",
            "retr",
            "CPU tx%",
            "CPU rx%",
            "CPU s/GiB",
            "vs kernel",
            "ping µs",
            "min RTT µs",
            "RTT µs",
            "qdelay µs",
            "drop %"
        )
    });
    for p in &points {
        let label = p.label();
        if net.config.mtu != p.mtu {
            net.set_mtu(p.mtu)
                .with_context(|| format!("setting MTU {}", p.mtu))?;
            net.wait_carrier(Duration::from_secs(10), "the MTU change")?;
        }
        if nic_rings {
            net.set_ring(p.ring)
                .with_context(|| format!("setting the NICs' rings to {}", p.ring))?;
            net.wait_carrier(Duration::from_secs(10), "ethtool -G")?;
        }
        bar.set_message(format!("{label}: idle RTT"));
        let ping = ping_rtt_us(&net).with_context(|| format!("{label}: idle RTT"))?;
        let mut point: Vec<Sample> = Vec::new();
        for rep in 0..a.repeat {
            let mut kernel_gbps = None;
            for pair in PAIRS {
                if interrupted.load(Ordering::Relaxed) {
                    bail!("interrupted");
                }
                bar.set_message(format!("{label}: {pair} (run {}/{})", rep + 1, a.repeat));
                let v = match run_pair(&net, pair, a, p) {
                    // Ctrl-C reached iperf3 too: say why the run failed.
                    Err(_) if interrupted.load(Ordering::Relaxed) => bail!("interrupted"),
                    r => r.with_context(|| format!("{label}, {pair}"))?,
                };
                let mut s = sample(&v, pair);
                s.mtu = p.mtu;
                s.rcvbuf = p.rcvbuf.clone();
                s.ring = p.ring;
                s.frame_size = p.frame_size;
                s.tx_burst = p.tx_burst;
                s.mss_clip = p.mss_clip.clone();
                s.tx_layout = p.tx_layout.clone();
                s.repeat = rep;
                s.ping_rtt_us = Some(ping);
                if pair == PAIRS[0] {
                    kernel_gbps = Some(s.gbps);
                } else if let Some(k) = kernel_gbps.filter(|k| *k > 0.0) {
                    s.ratio = Some(s.gbps / k);
                }
                bar.inc(1);
                if bar.is_hidden() {
                    eprintln!(
                        "[{}/{total}] {label} {pair}: {:.2} Gbit/s, RTT {} µs",
                        bar.position(),
                        s.gbps,
                        or_dash(s.rtt_us, 0)
                    );
                }
                point.push(s);
            }
        }
        for pair in PAIRS {
            let of: Vec<&Sample> = point.iter().filter(|s| s.pair == pair).collect();
            let m = |f: &dyn Fn(&Sample) -> f64| median(of.iter().map(|s| f(s)).collect());
            let o = |f: &dyn Fn(&Sample) -> Option<f64>| median_of(of.iter().map(|s| f(s)));
            let ratio = if pair == PAIRS[0] {
                String::new()
            } else {
                or_dash(o(&|s| s.ratio), 2)
            };
            let line = format!(
                "{:>6} {:>7} {:>5} {:>5} {:>5} {:>4} {:>7} {:<16} {:>8.2} {:>6} {:>7.1} {:>7.1} {:>9.2} {:>9} {:>8.0} {:>10} {:>8} {:>9} {:>7}",
                p.mtu,
                p.rcvbuf,
                p.ring,
                p.frame_size,
                p.tx_burst,
                p.mss_clip,
                p.tx_layout,
                pair,
                m(&|s| s.gbps),
                m(&|s| s.retransmits as f64) as u64,
                m(&|s| s.cpu_sender),
                m(&|s| s.cpu_receiver),
                m(&|s| s.cpu_s_per_gib),
                ratio,
                ping,
                or_dash(o(&|s| s.min_rtt_us), 0),
                or_dash(o(&|s| s.rtt_us), 0),
                or_dash(o(&|s| s.queue_delay_us), 0),
                or_dash(o(&|s| s.drop_pct), 2),
            );
            bar.suspend(|| println!("{line}"));
        }
        samples.extend(point);
    }
    bar.finish_and_clear();
    drop(net);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&samples)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.plot {
        std::fs::write(p, plot(&samples)).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// What a plot panel shows of a sample (`None`: not measured).
type Metric = fn(&Sample) -> Option<f64>;

/// A swept parameter's value at a point, as text.
type Dimension = fn(&Point) -> String;

/// The swept parameters: name, and value.
const DIMENSIONS: [(&str, Dimension); 7] = [
    ("MTU", |p| p.mtu.to_string()),
    ("rcvbuf", |p| p.rcvbuf.clone()),
    ("ring", |p| p.ring.to_string()),
    ("frame size", |p| p.frame_size.to_string()),
    ("TX burst", |p| p.tx_burst.to_string()),
    ("MSS clip", |p| p.mss_clip.clone()),
    ("TX layout", |p| p.tx_layout.clone()),
];

/// Panels of Gbit/s, CPU s/GiB and, where any run measured it, the RTT
/// under load (with the idle RTT dashed), one line per pair (medians),
/// against the swept parameter; if several vary, against the points,
/// labelled MTU/rcvbuf/ring/frame size/TX burst/MSS clip/TX layout.
fn plot(samples: &[Sample]) -> String {
    let mut xs: Vec<Point> = Vec::new();
    for s in samples {
        let p = s.point();
        if !xs.contains(&p) {
            xs.push(p);
        }
    }
    let varying: Vec<usize> = (0..DIMENSIONS.len())
        .filter(|&d| {
            let mut v: Vec<String> = xs.iter().map(DIMENSIONS[d].1).collect();
            v.sort();
            v.dedup();
            v.len() > 1
        })
        .collect();
    let (axis, x_label): (&str, Dimension) = match varying[..] {
        [] => (DIMENSIONS[0].0, DIMENSIONS[0].1),
        [d] => (DIMENSIONS[d].0, DIMENSIONS[d].1),
        _ => (
            "point (MTU/rcvbuf/ring/frame size/TX burst/MSS clip/TX layout)",
            Point::label,
        ),
    };
    let slanted = varying.len() > 1;
    let colors = ["#444444", "#d62728", "#1f77b4", "#2ca02c"];
    let (w, h, pad) = (900.0, 360.0, 50.0);
    let bottom = if slanted { 100.0 } else { pad };
    let mut panels: Vec<(&str, Metric)> = vec![
        ("Gbit/s", |s| Some(s.gbps)),
        ("CPU s/GiB", |s| Some(s.cpu_s_per_gib)),
    ];
    if samples.iter().any(|s| s.rtt_us.is_some()) {
        panels.push(("RTT under load, µs", |s| s.rtt_us));
    }
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n",
        panels.len() as f64 * h
    );
    let x_of = |i: usize| {
        pad + (w - 2.0 * pad)
            * if xs.len() > 1 {
                i as f64 / (xs.len() - 1) as f64
            } else {
                0.5
            }
    };
    for (pi, (label, f)) in panels.iter().enumerate() {
        let y0 = pi as f64 * h;
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
                                .filter(|s| s.pair == *pair && s.point() == *x)
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
                            .filter(|s| s.point() == *x)
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
            // One polyline per run of consecutive measured points.
            for run in pts
                .iter()
                .enumerate()
                .collect::<Vec<_>>()
                .split(|(_, v)| v.is_none())
                .filter(|r| !r.is_empty())
            {
                let poly: Vec<String> = run
                    .iter()
                    .filter_map(|(i, v)| v.map(|v| format!("{:.1},{:.1}", x_of(*i), y_of(v))))
                    .collect();
                svg += &format!(
                    "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{} points=\"{}\"/>\n",
                    if *dashed {
                        " stroke-dasharray=\"6 4\""
                    } else {
                        ""
                    },
                    poly.join(" ")
                );
            }
            for (i, v) in pts.iter().enumerate() {
                if let Some(v) = v {
                    svg += &format!(
                        "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>\n",
                        x_of(i),
                        y_of(*v)
                    );
                }
            }
            svg += &format!(
                "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}{}</text>\n",
                w - pad - 170.0,
                y0 + pad + 16.0 * si as f64,
                if measured { "" } else { " (not measured)" }
            );
        }
    }
    svg += "</svg>\n";
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_sweep_values_are_named() {
        #[derive(clap::Parser)]
        struct W {
            #[command(flatten)]
            a: BenchArgs,
        }
        use clap::Parser;
        let err = |args: &[&str]| {
            let w =
                W::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).unwrap();
            check_args(&w.a).unwrap_err().to_string()
        };
        assert!(
            err(&["--tx-layout", "chained,twisted"])
                .contains("--tx-layout takes auto, chained and/or single, not `twisted`"),
            "{}",
            err(&["--tx-layout", "twisted"])
        );
        assert!(err(&["--mss-clip", "maybe"]).contains("--mss-clip takes on and/or off"));
        let ok = W::try_parse_from(["bench", "--tx-layout", "single,auto"]).unwrap();
        assert!(check_args(&ok.a).is_ok());
    }

    #[test]
    fn ping_average_in_microseconds() {
        let out = "--- 198.18.0.2 ping statistics ---\n\
                   5 packets transmitted, 5 received, 0% packet loss, time 816ms\n\
                   rtt min/avg/max/mdev = 0.031/0.045/0.060/0.010 ms\n";
        assert_eq!(parse_ping_avg_us(out), Some(45.0));
        assert_eq!(parse_ping_avg_us("100% packet loss"), None);
    }

    #[test]
    fn sender_rtts_are_averaged_over_streams_and_absent_when_unreported() {
        let v = serde_json::json!({ "end": { "streams": [
            { "sender": { "mean_rtt": 100, "min_rtt": 60 } },
            { "sender": { "mean_rtt": 300, "min_rtt": 80 } },
        ] } });
        assert_eq!(sender_rtt_us(&v, "mean_rtt"), Some(200.0));
        assert_eq!(sender_rtt_us(&v, "min_rtt"), Some(70.0));
        let v = serde_json::json!({ "end": { "streams": [ { "sender": { "bytes": 1 } } ] } });
        assert_eq!(sender_rtt_us(&v, "mean_rtt"), None);
    }

    #[test]
    fn queueing_delay_is_mean_less_minimum_and_never_negative() {
        assert_eq!(queue_delay_us(Some(150.0), Some(50.0)), Some(100.0));
        assert_eq!(queue_delay_us(Some(50.0), Some(50.0)), Some(0.0));
        assert_eq!(queue_delay_us(Some(40.0), Some(50.0)), None);
        assert_eq!(queue_delay_us(None, Some(50.0)), None);
        assert_eq!(queue_delay_us(Some(40.0), None), None);
    }

    fn sample_at(ring: u32, mtu: u32, pair: &'static str, rtt: Option<f64>) -> Sample {
        Sample {
            mtu,
            rcvbuf: "auto".into(),
            ring,
            frame_size: 4096,
            tx_burst: 64,
            mss_clip: "on".into(),
            tx_layout: "auto".into(),
            repeat: 0,
            pair,
            gbps: 10.0,
            retransmits: 0,
            cpu_sender: 50.0,
            cpu_receiver: 50.0,
            cpu_s_per_gib: 0.1,
            ratio: None,
            ping_rtt_us: Some(40.0),
            min_rtt_us: rtt.map(|r| r / 2.0),
            rtt_us: rtt,
            queue_delay_us: rtt.map(|r| r / 2.0),
            xdp_client: None,
            xdp_server: None,
            drop_pct: None,
        }
    }

    #[test]
    fn drop_share_is_the_receiving_xtcp_ends() {
        let x = |pct: f64| serde_json::json!({ "drop_percent": pct });
        let mut s = sample_at(2048, 1500, PAIRS[3], None);
        s.xdp_client = Some(x(0.5));
        s.xdp_server = Some(x(2.0));
        assert_eq!(
            s.with_drop_pct().drop_pct,
            Some(2.0),
            "xtcp → xtcp: the server's"
        );
        let mut s = sample_at(2048, 1500, PAIRS[1], None);
        s.xdp_client = Some(x(0.5));
        assert_eq!(
            s.with_drop_pct().drop_pct,
            Some(0.5),
            "xtcp → kernel: the client's"
        );
        let s = sample_at(2048, 1500, PAIRS[0], None);
        assert_eq!(s.with_drop_pct().drop_pct, None, "kernel → kernel: none");
        let out = "{\"start\": {}}\n{\"end\": {}}\n{\n  \"xdp\": {\"steered\": 5}\n}\n";
        assert_eq!(serve_xdp(out), Some(serde_json::json!({ "steered": 5 })));
        assert_eq!(serve_xdp("{\"start\": {}}"), None);
    }

    #[test]
    fn plot_uses_the_one_varying_parameter_or_point_labels() {
        let one: Vec<Sample> = [256, 2048]
            .iter()
            .flat_map(|&r| PAIRS.map(|p| sample_at(r, 9000, p, None)))
            .collect();
        let svg = plot(&one);
        assert!(svg.contains("Gbit/s by ring (median)"), "{svg}");
        assert!(!svg.contains("RTT"), "no RTT panel without RTTs");
        let two: Vec<Sample> = [(256, 1500), (2048, 9000)]
            .iter()
            .flat_map(|&(r, m)| PAIRS.map(|p| sample_at(r, m, p, Some(90.0))))
            .collect();
        let svg = plot(&two);
        assert!(
            svg.contains("by point (MTU/rcvbuf/ring/frame size/TX burst/MSS clip/TX layout)"),
            "{svg}"
        );
        assert!(svg.contains(">9000/auto/2048/4096/64/on/auto<"), "{svg}");
        assert!(svg.contains("RTT under load"), "{svg}");
    }
}
