//! `xtcp client`: an iperf3 client (against a stock `iperf3 -s`) whose
//! control and data connections are carried by xtcp's own TCP on AF_XDP.
//! Output as iperf3's (`report`: its lines, `-V`, `-f`, `--logfile`,
//! `--forceflush`, `--timestamps`; `-J`'s document with every key iperf3
//! 3.12 writes, `--json-stream`'s events, `--get-server-output`), plus the
//! run's XDP statistics.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use xtcp_engine::app::iperf3::{ClientConfig, Cookie, Iperf3Client, TestParams};
use xtcp_engine::tcp::{CloseReason, ConnectionError};
use xtcp_engine::worker::{Role, run_app};

use crate::bulk::{EngineArgs, connect_timeout_message, interrupt_flag, parse_size};
use crate::xdpstats::XdpSummary;

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
    /// Output: -V, --logfile, --json-stream, --get-server-output, -f,
    /// --forceflush, --timestamps (cli/src/report.rs).
    #[command(flatten)]
    pub output: crate::report::ClientOutputArgs,
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

/// `xtcp client`.
pub fn client(a: &ClientArgs) -> anyhow::Result<()> {
    let mut cfg = a.engine.config()?;
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
        get_server_output: a.output.get_server_output,
        ..TestParams::default()
    };
    let config = ClientConfig {
        params,
        ..ClientConfig::default()
    };
    let count = Iperf3Client::connections(&config);
    let cookie = Cookie::from_entropy(&entropy());
    let run = crate::report::ClientRun::new(a, &cfg, &config.params, &cookie)?;
    let mut app = Iperf3Client::new(
        config,
        cookie,
        (a.interval > 0.0).then(|| Duration::from_secs_f64(a.interval.clamp(0.1, 3600.0))),
        run.on_interval(),
    );
    app.set_on_start(run.on_start());
    let remote = SocketAddr::new(a.host, a.port);
    let flag = interrupt_flag()?;
    let role = Role::ConnectApp {
        remote,
        local: None,
        count,
    };
    // The engine reports progress once it is set up: the banner only then,
    // never before an error.
    let mut announced = false;
    let report = run_app(
        &cfg,
        role,
        &flag,
        |_| {
            if !announced {
                announced = true;
                run.connecting();
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
    run.finish(&o, &XdpSummary::of(&report))?;
    if let Err(e) = o.result {
        bail!("the test failed: {e}");
    }
    Ok(())
}

/// The largest `-w`: the engine's receive buffer.
fn rcvbuf_limit(cfg: &xtcp_engine::worker::EngineConfig) -> usize {
    cfg.tcp.recv_buffer
}
