//! `xtcp serve`: an iperf3 server (`iperf3 -c` tests against it) whose
//! control and data connections are carried by xtcp's own TCP on AF_XDP.
//! Interval lines and a line per test, or with `-J` a JSON document per
//! test shaped like `iperf3 -s -J`'s.

use std::cell::RefCell;
use std::io::Write;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use xtcp_engine::app::iperf3::{
    Interval, Iperf3Server, Role as StreamRole, ServerConfig, TestOutcome,
};
use xtcp_engine::worker::{Role, SinkKind, run_app};

use crate::bulk::{EngineArgs, interrupt_flag};
use crate::client::{interval_json, interval_lines};
use crate::xdpstats::XdpSummary;
use xtcp_engine::tcp::ListenerStats;

/// Arguments of `xtcp serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to serve on (default: the interface's IPv4 address).
    #[arg(short = 'B', long = "bind-address")]
    pub addr: Option<IpAddr>,
    /// Port (iperf3's default).
    #[arg(short, long, default_value_t = 5201,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Serve one test, then exit (like `iperf3 -s -1`); its result is the
    /// exit status.
    #[arg(short = '1', long)]
    pub one_off: bool,
    /// Seconds between interval lines while a test runs (0: none).
    #[arg(short = 'i', long = "interval", default_value_t = 1.0)]
    pub interval: f64,
    /// JSON output shaped like `iperf3 -s -J`'s: one document per test;
    /// when the server stops, one more, `{"xdp": …, "listener": …,
    /// "refused": N}`: the run's XDP statistics (steered, dropped at the
    /// redirect, per queue), the listener's counters (SYNs taken and
    /// dropped, the most half-open at once), the connections refused
    /// beyond `--max-conns`, and per queue the connections it took and the
    /// segments it received and sent.
    #[arg(short = 'J', long = "json")]
    pub json: bool,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics over the
    /// kernel's TCP (e.g. 127.0.0.1:9100, [::1]:9100); bound before
    /// anything is attached.
    #[arg(long, value_name = "ADDR:PORT", value_parser = crate::metrics::parse_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn describe(o: &TestOutcome) -> String {
    let window = match o.params.as_ref().and_then(|p| p.window) {
        Some(w) => format!(", window {w} bytes (-w)"),
        None => String::new(),
    };
    let mode = match &o.params {
        Some(p) if p.bidirectional => "bidirectional",
        Some(p) if p.reverse => "reverse (xtcp sends)",
        Some(_) => "forward (xtcp receives)",
        None => "no parameters",
    };
    let gbps = |b: u64| {
        if o.seconds > 0.0 {
            b as f64 * 8.0 / o.seconds / 1e9
        } else {
            0.0
        }
    };
    let result = match &o.result {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("failed: {e}"),
    };
    format!(
        "xtcp serve: test from {}: {result}; {mode}, {} streams, {:.3} s, received {} bytes \
         ({:.2} Gbit/s), sent {} bytes ({:.2} Gbit/s){window}",
        o.client.remote,
        o.streams,
        o.seconds,
        o.received,
        gbps(o.received),
        o.sent,
        gbps(o.sent)
    )
}

/// A test as `iperf3 -s -J` writes it: how it started, its intervals, and
/// at the end what xtcp received (`sum_received`) and sent (`sum_sent`, or
/// with `--bidir` `sum_sent_bidir_reverse`), with xtcp's CPU use.
fn outcome_json(o: &TestOutcome, intervals: &[Interval]) -> serde_json::Value {
    let secs = o.seconds;
    let side = |bytes: u64, sender: bool| {
        json!({ "start": 0.0, "end": secs, "seconds": secs, "bytes": bytes,
                "bits_per_second": if secs > 0.0 { bytes as f64 * 8.0 / secs } else { 0.0 },
                "sender": sender })
    };
    let mut v = json!({
        "start": {
            "accepted_connection": { "host": o.client.remote.ip().to_string(),
                                     "port": o.client.remote.port() },
            "version": concat!("xtcp ", env!("CARGO_PKG_VERSION")),
        },
        "intervals": intervals.iter().map(interval_json).collect::<Vec<_>>(),
        "end": {
            "cpu_utilization_percent": {
                "host_total": o.cpu.total, "host_user": o.cpu.user, "host_system": o.cpu.system,
            },
        },
    });
    if let Some(p) = &o.params {
        v["start"]["test_start"] = json!({
            "protocol": "TCP", "num_streams": p.parallel, "blksize": p.block_len,
            "omit": p.omit_secs, "duration": p.time_secs, "bytes": p.bytes, "blocks": p.blocks,
            "reverse": u8::from(p.reverse), "bidir": u8::from(p.bidirectional),
        });
        let end = &mut v["end"];
        if !p.reverse || p.bidirectional {
            end["sum_received"] = side(o.received, false);
        }
        if p.bidirectional {
            end["sum_sent_bidir_reverse"] = side(o.sent, true);
        } else if p.reverse {
            end["sum_sent"] = side(o.sent, true);
        }
    }
    if let Err(e) = &o.result {
        v["error"] = json!(e.to_string());
    }
    v
}

/// `xtcp serve`.
pub fn serve(a: &ServeArgs) -> anyhow::Result<()> {
    let cfg = a.engine.config()?;
    if a.addr.is_none() {
        // The engine would listen on the interface's IPv4 address: say how
        // to choose another before anything is set up.
        if let Ok(None) = xtcp_engine::xsk::iface_ipv4(&cfg.iface) {
            bail!(
                "{} has no IPv4 address: give the address to serve on with -B ADDR \
                 (e.g. -B 2001:db8::1)",
                cfg.iface
            );
        }
    }
    // Metrics: bound now, so that a bad address fails before anything is
    // attached; fed by the test and progress callbacks below.
    let metrics_server = a
        .metrics
        .map(|at| crate::metrics::serve(at, &cfg.iface, cfg.queues))
        .transpose()?;
    let metrics = metrics_server.as_ref().map(|s| s.metrics());
    let test_metrics = metrics.clone();
    let flag = interrupt_flag()?;
    let one_off = a.one_off;
    let json_out = a.json;
    let stop = flag.clone();
    let failed = Arc::new(AtomicBool::new(false));
    let failed2 = failed.clone();
    let intervals = Rc::new(RefCell::new(Vec::<Interval>::new()));
    let iv_store = intervals.clone();
    let mut server = Iperf3Server::new(
        ServerConfig::default(),
        (a.interval > 0.0).then(|| Duration::from_secs_f64(a.interval.clamp(0.1, 3600.0))),
        Box::new(move |iv: &Interval| {
            if json_out {
                iv_store.borrow_mut().push(iv.clone());
                return;
            }
            let mut out = std::io::stdout().lock();
            // Tags per direction when the test has streams both ways.
            let bidir = iv.streams.iter().any(|s| s.role == StreamRole::Send)
                && iv.streams.iter().any(|s| s.role == StreamRole::Receive);
            for line in interval_lines(iv, bidir) {
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
        }),
        Box::new(move |o: &TestOutcome| {
            if let Some(m) = &test_metrics {
                let result = if o.result.is_ok() { "ok" } else { "failed" };
                m.test(result, None, o.received, o.sent);
            }
            let mut out = std::io::stdout().lock();
            if json_out {
                let ivs = std::mem::take(&mut *intervals.borrow_mut());
                let v = outcome_json(o, &ivs);
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&v).unwrap_or_default()
                );
            } else {
                let _ = writeln!(out, "{}", describe(o));
            }
            let _ = out.flush();
            if one_off {
                failed2.store(o.result.is_err(), Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
            }
        }),
    );
    let role = Role::Listen {
        addr: a.addr,
        port: a.port,
        sinks: SinkKind::App,
        keep_listening: true,
    };
    let where_ = a
        .addr
        .map_or_else(|| "the interface's address".to_owned(), |x| x.to_string());
    let mut announced = false;
    // The engine reports progress once it is set up and serving: the
    // banner only then, never before an error.
    let report = run_app(
        &cfg,
        role,
        &flag,
        |p| {
            if let Some(m) = &metrics {
                m.observe(p);
            }
            if !announced {
                announced = true;
                eprintln!(
                    "xtcp serve: listening on {where_}:{} ({}), iperf3 clients welcome; \
                     Ctrl-C stops",
                    a.port, cfg.iface
                );
            }
        },
        Some(&mut server),
    )
    .with_context(|| format!("xtcp serve on {}", cfg.iface))?;
    eprintln!(
        "xtcp serve: stopped; {} connections, CPU {:.2} s (user {:.2} s, system {:.2} s)",
        report.workers.iter().map(|w| w.connections).sum::<u64>(),
        report.cpu_seconds,
        report.cpu.user,
        report.cpu.system
    );
    let xdp = XdpSummary::of(&report);
    for line in xdp.lines() {
        eprintln!("xtcp serve: {line}");
    }
    let listener = listener_totals(&report);
    let refused: u64 = report.workers.iter().map(|w| w.refused).sum();
    eprintln!(
        "xtcp serve: listener: {} SYNs taken, {} dropped (half-open table full), at most {} \
         half-open at once; {} handshakes completed, {} connections refused (--max-conns)",
        listener.syns_accepted,
        listener.syns_dropped,
        listener.half_open_peak,
        listener.established,
        refused
    );
    if json_out {
        // After the tests' objects, one of the whole run's XDP statistics
        // and the listener's counters.
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "xdp": xdp,
                "listener": listener,
                "refused": refused,
                "queues": report.workers.iter().map(|w| json!({
                    "queue": w.queue,
                    "connections": w.connections,
                    "rx_segments": w.port.rx_segments,
                    "tx_packets": w.port.tx_packets,
                    "refused": w.refused,
                    "migrated_in": w.migrated_in,
                    "migrated_out": w.migrated_out,
                })).collect::<Vec<_>>(),
            }))?
        )?;
        out.flush()?;
    }
    if failed.load(Ordering::Relaxed) {
        bail!("the test failed");
    }
    Ok(())
}

/// The listeners' counters summed over the queues.
fn listener_totals(r: &xtcp_engine::worker::EngineReport) -> ListenerStats {
    let mut t = ListenerStats::default();
    for w in &r.workers {
        t.add(&w.listener);
    }
    t
}
