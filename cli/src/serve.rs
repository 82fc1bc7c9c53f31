//! `xtcp serve`: an iperf3 server (`iperf3 -c` tests against it) whose
//! control and data connections are carried by xtcp's own TCP on AF_XDP.

use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use xtcp_engine::app::iperf3::{
    Interval, Iperf3Server, Role as StreamRole, ServerConfig, TestOutcome,
};
use xtcp_engine::worker::{Role, SinkKind, run_app};

use crate::bulk::{EngineArgs, interrupt_flag};
use crate::client::interval_lines;

/// Arguments of `xtcp serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to serve on (default: the interface's IPv4 address).
    #[arg(short = 'B', long = "bind-address")]
    pub addr: Option<IpAddr>,
    /// Port (iperf3's default).
    #[arg(short, long, default_value_t = 5201)]
    pub port: u16,
    /// Serve one test, then exit (like `iperf3 -s -1`); its result is the
    /// exit status.
    #[arg(short = '1', long)]
    pub one_off: bool,
    /// Seconds between interval lines while a test runs (0: none).
    #[arg(short = 'i', long = "interval", default_value_t = 1.0)]
    pub interval: f64,
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

/// `xtcp serve`.
pub fn serve(a: &ServeArgs) -> anyhow::Result<()> {
    let cfg = a.engine.config()?;
    let flag = interrupt_flag()?;
    let one_off = a.one_off;
    let stop = flag.clone();
    let failed = Arc::new(AtomicBool::new(false));
    let failed2 = failed.clone();
    let mut server = Iperf3Server::new(
        ServerConfig::default(),
        (a.interval > 0.0).then(|| Duration::from_secs_f64(a.interval.clamp(0.1, 3600.0))),
        Box::new(|iv: &Interval| {
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
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", describe(o));
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
    eprintln!(
        "xtcp serve: listening on {}:{} ({}), iperf3 clients welcome; Ctrl-C stops",
        a.addr
            .map_or_else(|| "the interface's address".to_owned(), |x| x.to_string()),
        a.port,
        cfg.iface
    );
    let report = run_app(&cfg, role, &flag, |_| {}, Some(&mut server))
        .with_context(|| format!("xtcp serve on {}", cfg.iface))?;
    eprintln!(
        "xtcp serve: stopped; {} connections, CPU {:.2} s",
        report.workers.iter().map(|w| w.connections).sum::<u64>(),
        report.cpu_seconds
    );
    if failed.load(Ordering::Relaxed) {
        anyhow::bail!("the test failed");
    }
    Ok(())
}
