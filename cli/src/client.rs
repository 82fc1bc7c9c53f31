//! `xtcp client`: an iperf3 client (against a stock `iperf3 -s`) whose
//! control and data connections are carried by xtcp's own TCP on AF_XDP.
//! Output like iperf3's: interval lines, then per-stream and summed
//! sender / receiver lines with retransmits, and CPU utilisation; `-J`
//! prints JSON with iperf3's field names.

use std::cell::RefCell;
use std::io::Write;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use xtcp_engine::app::iperf3::{
    ClientConfig, ClientOutcome, Cookie, Interval, Iperf3Client, Role as StreamRole, TestParams,
};
use xtcp_engine::tcp::{CloseReason, ConnectionError};
use xtcp_engine::worker::{Role, run_app};

use crate::args::{EngineArgs, parse_size};
use crate::bulk::{connect_timeout_message, interrupt_flag};
use crate::xdpstats::{EngineCounters, XdpSummary};

/// Arguments of `xtcp client`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// The iperf3 server.
    #[arg(short = 'c', long = "client")]
    pub host: std::net::IpAddr,
    /// Its port.
    #[arg(short, long, default_value_t = 5201,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Seconds to transmit (ignored with -n or -k).
    #[arg(short, long, default_value_t = 10)]
    pub time: u32,
    /// Bytes to transmit (e.g. 2G) instead of a time.
    #[arg(short = 'n', long = "bytes", value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Blocks to transmit instead of a time.
    #[arg(short = 'k', long = "blockcount")]
    pub blocks: Option<u64>,
    /// Parallel streams.
    #[arg(short = 'P', long, default_value_t = 1)]
    pub parallel: u32,
    /// Reverse: the server sends.
    #[arg(short = 'R', long)]
    pub reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    pub bidir: bool,
    /// Receive window of each data stream (e.g. 64K): xtcp's when it
    /// receives, and sent to the server for its side, like iperf3's `-w`
    /// (at most the engine's `--rcvbuf`).
    #[arg(short = 'w', long = "window", value_parser = parse_size)]
    pub window: Option<u64>,
    /// Block length (iperf3 counts -k in blocks of this size).
    #[arg(short = 'l', long = "length", value_parser = parse_size)]
    pub length: Option<u64>,
    /// Seconds at the start to leave out of the results.
    #[arg(short = 'O', long = "omit", default_value_t = 0)]
    pub omit: u32,
    /// Seconds between interval lines (0: none).
    #[arg(short = 'i', long = "interval", default_value_t = 1.0)]
    pub interval: f64,
    /// JSON output shaped like iperf3's, plus xtcp's `xdp` object (the
    /// run's XDP statistics: steered, dropped at the redirect, per queue).
    #[arg(short = 'J', long = "json", alias = "json-output")]
    pub json_output: bool,
    /// Give up when the server does not answer the connection request
    /// within this many milliseconds (iperf3's flag).
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub connect_timeout: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn entropy() -> [u8; 36] {
    use std::hash::{BuildHasher, Hasher};
    let mut out = [0u8; 36];
    for (i, c) in out.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let v = h.finish().to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
    out
}

fn human(bytes: f64) -> String {
    if bytes >= 1e9 * 1.024 {
        format!("{:.2} GBytes", bytes / f64::from(1u32 << 30))
    } else {
        format!("{:.1} MBytes", bytes / f64::from(1u32 << 20))
    }
}

fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e9
    } else {
        0.0
    }
}

/// Per stream: (id, sender bytes, receiver bytes, retransmits) as iperf3
/// shows them, from this side's counters and the server's results.
fn rows(o: &ClientOutcome) -> Vec<(u32, u64, u64, Option<u64>, bool)> {
    o.streams
        .iter()
        .map(|s| {
            let peer = o
                .peer
                .as_ref()
                .and_then(|p| p.streams.iter().find(|r| r.id == s.id.0));
            let peer_bytes = peer.map_or(0, |r| r.bytes);
            match s.role {
                // We sent: sender bytes are ours, receiver bytes the server's.
                StreamRole::Send => (s.id.0, s.counted_bytes(), peer_bytes, s.retransmits, true),
                StreamRole::Receive => (
                    s.id.0,
                    peer_bytes,
                    s.counted_bytes(),
                    peer.and_then(|r| u64::try_from(r.retransmits).ok()),
                    false,
                ),
            }
        })
        .collect()
}

/// `xtcp client`.
pub fn client(a: &ClientArgs) -> anyhow::Result<()> {
    let mut cfg = a.engine.config_to(a.host)?;
    let connect_timeout = Duration::from_millis(a.connect_timeout);
    cfg.tcp.connect_timeout = Some(connect_timeout);
    if a.parallel == 0 || a.parallel > 128 {
        bail!("-P must be between 1 and 128");
    }
    let params = TestParams {
        time_secs: if a.bytes.is_some() || a.blocks.is_some() {
            0
        } else {
            a.time
        },
        bytes: a.bytes.unwrap_or(0),
        blocks: a.blocks.unwrap_or(0),
        parallel: a.parallel,
        reverse: a.reverse,
        bidirectional: a.bidir,
        omit_secs: a.omit,
        block_len: match a.length {
            Some(l) => u32::try_from(l).context("-l is too large")?,
            None => TestParams::default().block_len,
        },
        window: match a.window {
            Some(w) => Some(
                u32::try_from(w)
                    .ok()
                    .filter(|&w| w > 0 && w as usize <= rcvbuf_limit(&cfg))
                    .with_context(|| {
                        format!(
                            "-w {w}: the window must be between 1 byte and the receive buffer \
                             ({} bytes; raise it with --rcvbuf)",
                            rcvbuf_limit(&cfg)
                        )
                    })?,
            ),
            None => None,
        },
        ..TestParams::default()
    };
    let config = ClientConfig {
        params,
        ..ClientConfig::default()
    };
    let count = Iperf3Client::connections(&config);
    let json_out = a.json_output;
    let intervals = Rc::new(RefCell::new(Vec::<Interval>::new()));
    let iv_store = intervals.clone();
    let print_iv = !json_out;
    let bidir = a.bidir;
    let mut app = Iperf3Client::new(
        config,
        Cookie::from_entropy(&entropy()),
        (a.interval > 0.0).then(|| Duration::from_secs_f64(a.interval.clamp(0.1, 3600.0))),
        Box::new(move |iv: &Interval| {
            if print_iv {
                let mut out = std::io::stdout().lock();
                for line in interval_lines(iv, bidir) {
                    let _ = writeln!(out, "{line}");
                }
                let _ = out.flush();
            }
            iv_store.borrow_mut().push(iv.clone());
        }),
    );
    let remote = SocketAddr::new(a.host, a.port);
    let flag = interrupt_flag()?;
    let role = Role::ConnectApp {
        remote,
        local: None,
        count,
    };
    // The engine reports progress once it is set up: the banner only then,
    // never before an error.
    let mut announced = json_out;
    let report = run_app(
        &cfg,
        role,
        &flag,
        |_| {
            if !announced {
                announced = true;
                println!(
                    "Connecting to host {}, port {} (xtcp on {})",
                    a.host, a.port, cfg.iface
                );
                println!("[ ID] Interval           Transfer     Bitrate         Retr  RTT");
            }
        },
        Some(&mut app),
    )
    .with_context(|| format!("xtcp client on {}", cfg.iface))?;
    if let Some(r) = report
        .connections
        .iter()
        .find(|r| r.reason == CloseReason::Error(ConnectionError::ConnectTimeout))
    {
        bail!("{}", connect_timeout_message(r, connect_timeout));
    }
    let Some(o) = app.outcome().cloned() else {
        bail!(
            "the test did not finish{}",
            if report.interrupted {
                " (interrupted)"
            } else {
                ""
            }
        );
    };
    if o.streams.is_empty() {
        if let Err(e) = o.result {
            bail!("the test failed: {e}");
        }
    }
    let rows = rows(&o);
    let secs = o.seconds;
    let sum_sent: u64 = rows.iter().map(|r| r.1).sum();
    let sum_recv: u64 = rows.iter().map(|r| r.2).sum();
    let retr: u64 = rows.iter().filter_map(|r| r.3).sum();
    // With --bidir, iperf3 sums each direction apart: what the client sends
    // in `sum_sent` / `sum_received`, what the server sends in
    // `sum_sent_bidir_reverse` / `sum_received_bidir_reverse`.
    let sums = |we_send: bool| {
        let r = rows.iter().filter(|r| !a.bidir || r.4 == we_send);
        let (mut s, mut rcv, mut re) = (0, 0, 0);
        for &(_, x, y, z, _) in r {
            s += x;
            rcv += y;
            re += z.unwrap_or(0);
        }
        (s, rcv, re)
    };
    let remote_cpu = o.peer.as_ref().map_or(0.0, |p| p.cpu_util_total);
    let xdp = XdpSummary::of(&report);
    if json_out {
        let side = |bytes: u64, retr: Option<u64>, sender: bool| {
            let mut v = json!({
                "start": 0.0, "end": secs, "seconds": secs, "bytes": bytes,
                "bits_per_second": bytes as f64 * 8.0 / secs.max(1e-9), "sender": sender,
            });
            if let Some(r) = retr {
                v["retransmits"] = json!(r);
            }
            v
        };
        let streams: Vec<_> = rows
            .iter()
            .zip(&o.rtt)
            .map(|(&(id, s, r, re, ours), rtt)| {
                let mut sender = json!({ "socket": id, "start": 0.0, "end": secs,
                    "seconds": secs, "bytes": s,
                    "bits_per_second": s as f64 * 8.0 / secs.max(1e-9),
                    "retransmits": re.unwrap_or(0), "sender": true });
                // Measured by this side, so only for streams it sent on
                // (iperf3 reports the sender's tcp_info RTT, in µs).
                if let Some(t) = rtt.filter(|_| ours) {
                    sender["min_rtt"] = json!(t.min.as_micros() as u64);
                    sender["max_rtt"] = json!(t.max.as_micros() as u64);
                    sender["mean_rtt"] = json!(t.mean().map_or(0, |m| m.as_micros() as u64));
                }
                json!({
                    "sender": sender,
                    "receiver": { "socket": id, "start": 0.0, "end": secs, "seconds": secs,
                                  "bytes": r, "bits_per_second": r as f64 * 8.0 / secs.max(1e-9),
                                  "sender": false },
                })
            })
            .collect();
        let ivs: Vec<_> = intervals.borrow().iter().map(interval_json).collect();
        let (fwd_sent, fwd_recv, fwd_retr) = sums(true);
        let mut v = json!({
            "start": {
                "connecting_to": { "host": a.host.to_string(), "port": a.port },
                "version": concat!("xtcp ", env!("CARGO_PKG_VERSION")),
                "test_start": { "protocol": "TCP", "num_streams": a.parallel,
                                "blksize": config_block(a), "omit": a.omit,
                                "duration": if a.bytes.is_some() || a.blocks.is_some() { 0 } else { a.time },
                                "bytes": a.bytes.unwrap_or(0), "blocks": a.blocks.unwrap_or(0),
                                "reverse": u8::from(a.reverse), "bidir": u8::from(a.bidir) },
            },
            "intervals": ivs,
            "end": {
                "streams": streams,
                "sum_sent": side(fwd_sent, Some(fwd_retr), true),
                "sum_received": side(fwd_recv, None, false),
                "cpu_utilization_percent": {
                    "host_total": o.cpu_util.total, "host_user": o.cpu_util.user,
                    "host_system": o.cpu_util.system,
                    "remote_total": remote_cpu,
                    "remote_user": o.peer.as_ref().map_or(0.0, |p| p.cpu_util_user),
                    "remote_system": o.peer.as_ref().map_or(0.0, |p| p.cpu_util_system),
                },
            },
        });
        if a.bidir {
            let (rev_sent, rev_recv, rev_retr) = sums(false);
            v["end"]["sum_sent_bidir_reverse"] = side(rev_sent, Some(rev_retr), true);
            v["end"]["sum_received_bidir_reverse"] = side(rev_recv, None, false);
        }
        // Not iperf3's: xtcp's own XDP statistics of the run.
        v["xdp"] = serde_json::to_value(&xdp)?;
        // Not iperf3's: xtcp's own drops by reason and full turns.
        v["engine"] = serde_json::to_value(EngineCounters::of(&report))?;
        if let Err(e) = &o.result {
            v["error"] = json!(e.to_string());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("- - - - - - - - - - - - - - - - - - - - - - - - -");
        println!("[ ID] Interval           Transfer     Bitrate         Retr");
        for &(id, s, r, re, _) in &rows {
            println!(
                "[{id:3}]   0.00-{secs:<6.2} sec  {:>12}  {:6.2} Gbits/sec  {:>5}  sender",
                human(s as f64),
                rate(s, secs),
                re.map_or_else(|| "-".to_owned(), |x| x.to_string())
            );
            println!(
                "[{id:3}]   0.00-{secs:<6.2} sec  {:>12}  {:6.2} Gbits/sec         receiver",
                human(r as f64),
                rate(r, secs)
            );
        }
        if rows.len() > 1 {
            println!(
                "[SUM]   0.00-{secs:<6.2} sec  {:>12}  {:6.2} Gbits/sec  {retr:>5}  sender",
                human(sum_sent as f64),
                rate(sum_sent, secs)
            );
            println!(
                "[SUM]   0.00-{secs:<6.2} sec  {:>12}  {:6.2} Gbits/sec         receiver",
                human(sum_recv as f64),
                rate(sum_recv, secs)
            );
        }
        println!(
            "CPU Utilization: local {:.1}%, remote {:.1}%",
            o.cpu_util.total, remote_cpu
        );
        for line in xdp.lines() {
            println!("{line}");
        }
        println!("\nxtcp client done.");
    }
    if let Err(e) = o.result {
        bail!("the test failed: {e}");
    }
    Ok(())
}

/// The largest `-w`: the engine's receive buffer.
fn rcvbuf_limit(cfg: &xtcp_engine::worker::EngineConfig) -> usize {
    cfg.tcp.recv_buffer
}

/// An interval as iperf3's `-J` writes it: per stream, and summed.
pub(crate) fn interval_json(iv: &Interval) -> serde_json::Value {
    let secs = iv.seconds();
    let streams: Vec<_> = iv
        .streams
        .iter()
        .map(|s| {
            let mut v = json!({ "socket": s.id.0, "start": iv.start, "end": iv.end,
                "seconds": secs, "bytes": s.bytes,
                "bits_per_second": rate(s.bytes, secs) * 1e9,
                "omitted": iv.omitted, "sender": s.role == StreamRole::Send });
            if s.role == StreamRole::Send {
                v["retransmits"] = json!(s.retransmits);
                if let Some(r) = s.rtt {
                    v["rtt"] = json!(r.as_micros() as u64);
                }
            }
            v
        })
        .collect();
    let b = iv.sent() + iv.received();
    json!({ "streams": streams, "sum": { "start": iv.start, "end": iv.end,
        "seconds": secs, "bytes": b, "bits_per_second": rate(b, secs) * 1e9,
        "retransmits": iv.retransmits(), "omitted": iv.omitted,
        "sender": iv.sent() > 0 || iv.received() == 0 } })
}

/// An interval as iperf3 prints it: a line per stream (`[  5]`; with
/// `--bidir` marked `[TX]`/`[RX]`), and a `[SUM]` line when there are
/// several streams. Sending streams show retransmits and the smoothed RTT.
pub(crate) fn interval_lines(iv: &Interval, bidir: bool) -> Vec<String> {
    let secs = iv.seconds();
    let omitted = if iv.omitted { "  (omitted)" } else { "" };
    let mut lines: Vec<String> = iv
        .streams
        .iter()
        .map(|s| {
            let tag = match (bidir, s.role) {
                (false, _) => "",
                (true, StreamRole::Send) => "[TX]",
                (true, StreamRole::Receive) => "[RX]",
            };
            let extra = match s.role {
                StreamRole::Send => format!(
                    "  {:>5}  {}",
                    s.retransmits,
                    s.rtt
                        .map_or_else(|| "-".to_owned(), |r| format!("{} us", r.as_micros()))
                ),
                StreamRole::Receive => String::new(),
            };
            format!(
                "[{:3}]{tag} {:6.2}-{:<6.2} sec  {:>12}  {:6.2} Gbits/sec{extra}{omitted}",
                s.id.0,
                iv.start,
                iv.end,
                human(s.bytes as f64),
                rate(s.bytes, secs)
            )
        })
        .collect();
    if iv.streams.len() > 1 {
        let b = iv.sent() + iv.received();
        lines.push(format!(
            "[SUM] {:6.2}-{:<6.2} sec  {:>12}  {:6.2} Gbits/sec  {:>5}{omitted}",
            iv.start,
            iv.end,
            human(b as f64),
            rate(b, secs),
            iv.retransmits()
        ));
    }
    lines
}

fn config_block(a: &ClientArgs) -> u64 {
    a.length
        .unwrap_or(u64::from(TestParams::default().block_len))
}
