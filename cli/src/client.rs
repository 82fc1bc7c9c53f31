//! `xtcp client`: an iperf3 client (against a stock `iperf3 -s`) whose
//! control and data connections are carried by xtcp's own TCP on AF_XDP.
//! Output like iperf3's: interval lines, then per-stream and summed
//! sender / receiver lines with retransmits, and CPU utilisation; `-J`
//! prints JSON with iperf3's field names.

use std::cell::RefCell;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use xtcp_engine::app::iperf3::{
    ClientConfig, ClientOutcome, Cookie, Interval, Iperf3Client, Role as StreamRole, TestParams,
};
use xtcp_engine::tcp::{CloseReason, CongestionAlgorithm, ConnectionError};
use xtcp_engine::worker::{Payload, Role, run_app};

use crate::args::{EngineArgs, parse_size};
use crate::bulk::{connect_timeout_message, interrupt_flag};
use crate::xdpstats::{EngineCounters, XdpSummary};

/// Arguments of `xtcp client`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// The iperf3 server: an address, or a name resolved (to the family
    /// `-4`/`-6` ask for).
    #[arg(short = 'c', long = "client")]
    pub host: String,
    /// Only IPv4: the host's IPv4 address (an IPv6 literal is refused).
    #[arg(short = '4', long = "version4", conflicts_with = "version6")]
    pub version4: bool,
    /// Only IPv6: the host's IPv6 address (an IPv4 literal is refused).
    #[arg(short = '6', long = "version6")]
    pub version6: bool,
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
    /// Zero-copy sender: the send buffer's frames are filled with zeros
    /// once and re-sent as they are, no per-byte work (without -Z the
    /// streams send a block of pseudo-random bytes copied in over and over,
    /// as iperf3 writes its buffer).
    #[arg(short = 'Z', long = "zerocopy")]
    pub zerocopy: bool,
    /// Pin xtcp's worker to core N (one queue); `,M` asks the server to
    /// run on core M (iperf3's `server_affinity`).
    #[arg(short = 'A', long = "affinity", value_name = "N[,M]", value_parser = parse_affinity)]
    pub affinity: Option<(usize, Option<u32>)>,
    /// Congestion control of xtcp's connections, also asked of the server
    /// for the streams it sends: cubic, reno or newreno (`reno` is xtcp's
    /// NewReno, as Linux's `reno` is).
    #[arg(short = 'C', long = "congestion", value_name = "ALGO", value_parser = parse_congestion)]
    pub congestion: Option<CongestionAlgorithm>,
    /// MSS of the data connections (announced, and the most xtcp sends;
    /// also sent to the server, as iperf3's TCP_MAXSEG).
    #[arg(short = 'M', long = "set-mss", value_name = "BYTES",
          value_parser = clap::value_parser!(u16).range(536..=9216))]
    pub set_mss: Option<u16>,
    /// No delay: xtcp's sender never holds back small segments (it has no
    /// Nagle delay unless asked; -N keeps it off and tells the server).
    #[arg(short = 'N', long = "no-delay")]
    pub no_delay: bool,
    /// Target bit rate of each stream (iperf3's -b: per stream, K/M/G/T =
    /// 10^3.. bits/s; 0: unlimited): the sender is paced to it.
    #[arg(short = 'b', long = "bitrate", alias = "bandwidth", value_name = "RATE",
          value_parser = parse_rate)]
    pub bitrate: Option<u64>,
    /// Prefix every output line with this string (`STR:  `).
    #[arg(short = 'T', long = "title", value_name = "STR")]
    pub title: Option<String>,
    /// Send this file's bytes (the test ends after the file, unless -t, -n
    /// or -k say otherwise); with -R, write what is received to it (the
    /// file is replaced only when the test succeeds).
    #[arg(short = 'F', long = "file", value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Source port of the data connections (consecutive ones with -P; the
    /// control connection takes the port after them).
    #[arg(long = "cport", value_name = "PORT",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub cport: Option<u16>,
    /// Authenticate as this user to an iperf3 server that asks
    /// (`--rsa-private-key-path`, `--authorized-users-path`): the password
    /// comes from IPERF3_PASSWORD, else from the terminal.
    #[arg(long, requires = "rsa_public_key_path")]
    pub username: Option<String>,
    /// The server's RSA public key (PEM), for --username.
    #[arg(long, value_name = "PATH", requires = "username")]
    pub rsa_public_key_path: Option<PathBuf>,
    /// UDP: refused, xtcp speaks TCP only.
    #[arg(short = 'u', long = "udp")]
    pub udp: bool,
    /// Give up when the server does not answer the connection request
    /// within this many milliseconds (iperf3's flag).
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub connect_timeout: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// `-A N[,M]`.
fn parse_affinity(s: &str) -> Result<(usize, Option<u32>), String> {
    let bad = || format!("`{s}`: give -A N or -A N,M with N and M core numbers (0, 1, ...)");
    let (n, m) = match s.split_once(',') {
        Some((n, m)) => (n, Some(m)),
        None => (s, None),
    };
    let n = n.trim().parse().map_err(|_| bad())?;
    let m = match m {
        Some(m) => Some(m.trim().parse().map_err(|_| bad())?),
        None => None,
    };
    Ok((n, m))
}

/// `-C NAME`: one of xtcp's.
fn parse_congestion(s: &str) -> Result<CongestionAlgorithm, String> {
    CongestionAlgorithm::from_name(s).ok_or_else(|| {
        format!(
            "`{s}`: xtcp has no such congestion control; it has {}",
            CongestionAlgorithm::NAMES
        )
    })
}

/// `-b RATE`: bits per second as iperf3 reads them (K, M, G, T are powers
/// of 1000); iperf3's `/burst` is refused.
pub(crate) fn parse_rate(s: &str) -> Result<u64, String> {
    if s.contains('/') {
        return Err(format!(
            "`{s}`: a burst count (RATE/N) is not supported; xtcp paces each stream evenly \
             (give RATE alone, e.g. 200M)"
        ));
    }
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'G' => 1e9,
                'T' => 1e12,
                _ => return Err(format!("`{s}`: unknown unit `{c}` (use K, M, G or T)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("`{s}` is not a rate like 100M, 2.5G or 0 (unlimited)"))?;
    let bits = v * mul;
    if bits > 1e15 {
        return Err(format!("`{s}` is above 1000T bits/s"));
    }
    Ok(bits as u64)
}

/// The server's address: `host` as given, or resolved, in the family `-4`
/// / `-6` ask for.
fn resolve_host(a: &ClientArgs) -> anyhow::Result<IpAddr> {
    let want = |ip: &IpAddr| (!a.version4 || ip.is_ipv4()) && (!a.version6 || ip.is_ipv6());
    let flag = if a.version4 { "-4" } else { "-6" };
    if let Ok(ip) = a.host.trim_matches(['[', ']']).parse::<IpAddr>() {
        if !want(&ip) {
            bail!(
                "{flag}: {ip} is an {} address; give an {} address or drop {flag}",
                if ip.is_ipv4() { "IPv4" } else { "IPv6" },
                if a.version4 { "IPv4" } else { "IPv6" }
            );
        }
        return Ok(ip);
    }
    let addrs: Vec<IpAddr> = (a.host.as_str(), a.port)
        .to_socket_addrs()
        .with_context(|| format!("-c {}: cannot resolve the host", a.host))?
        .map(|s| s.ip())
        .collect();
    addrs.iter().copied().find(want).with_context(|| {
        format!(
            "-c {}: no {} address (it has {})",
            a.host,
            if a.version6 { "IPv6" } else { "IPv4" },
            addrs
                .iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// The password for `--username`: IPERF3_PASSWORD, else asked on the
/// terminal (echo off), else an error.
fn password() -> anyhow::Result<String> {
    if let Ok(p) = std::env::var("IPERF3_PASSWORD") {
        return Ok(p);
    }
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        bail!("--username: no password (set IPERF3_PASSWORD; standard input is not a terminal)");
    }
    let tty = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .context("--username: opening /dev/tty to ask for the password")?;
    let old = rustix::termios::tcgetattr(&tty).context("tcgetattr on /dev/tty")?;
    let mut quiet = old.clone();
    quiet.local_modes.remove(rustix::termios::LocalModes::ECHO);
    rustix::termios::tcsetattr(&tty, rustix::termios::OptionalActions::Flush, &quiet)
        .context("tcsetattr on /dev/tty")?;
    let _ = write!(&tty, "Password: ");
    let mut line = String::new();
    let read = std::io::BufRead::read_line(&mut std::io::BufReader::new(&tty), &mut line);
    let _ = rustix::termios::tcsetattr(&tty, rustix::termios::OptionalActions::Flush, &old);
    let _ = writeln!(&tty);
    read.context("reading the password")?;
    Ok(line.trim_end_matches(['\n', '\r']).to_owned())
}

/// iperf3's buffer without `-Z`: `len` pseudo-random bytes (xorshift from
/// fresh entropy), made once per test.
fn random_block(len: usize) -> Arc<[u8]> {
    let e = entropy();
    let mut x = u64::from_le_bytes(e[..8].try_into().unwrap_or([1; 8])) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `-F` with `-R`: the received bytes go to a temporary file next to
/// `path`, renamed over it when the test succeeds (and removed otherwise),
/// so that a failed run leaves an existing file as it was.
struct ReceiveFile {
    tmp: PathBuf,
    path: PathBuf,
    done: bool,
}

impl ReceiveFile {
    fn create(path: &Path) -> anyhow::Result<(ReceiveFile, std::fs::File)> {
        let name = path
            .file_name()
            .with_context(|| format!("-F {}: not a file name", path.display()))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".xtcp-{}", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let f = std::fs::File::options()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("-F {}: creating {}", path.display(), tmp.display()))?;
        Ok((
            ReceiveFile {
                tmp,
                path: path.to_owned(),
                done: false,
            },
            f,
        ))
    }

    fn commit(mut self) -> anyhow::Result<()> {
        std::fs::rename(&self.tmp, &self.path).with_context(|| {
            format!(
                "-F: renaming {} to {}",
                self.tmp.display(),
                self.path.display()
            )
        })?;
        self.done = true;
        Ok(())
    }
}

impl Drop for ReceiveFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
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
    if a.udp {
        clap::Error::raw(
            clap::error::ErrorKind::ArgumentConflict,
            "-u: xtcp speaks TCP only\n",
        )
        .exit();
    }
    let host = resolve_host(a)?;
    let mut cfg = a.engine.config_to(host)?;
    let connect_timeout = Duration::from_millis(a.connect_timeout);
    cfg.tcp.connect_timeout = Some(connect_timeout);
    if a.parallel == 0 || a.parallel > 128 {
        bail!("-P must be between 1 and 128");
    }
    if let Some(m) = a.set_mss {
        cfg.mss = Some(m);
    }
    if let Some(c) = a.congestion {
        cfg.tcp.congestion = c;
    }
    if a.no_delay {
        cfg.tcp.nagle = false;
    }
    if let Some((core, _)) = a.affinity {
        if cfg.queues != 1 {
            bail!(
                "-A {core}: pins the one worker of --queues 1; with --queues {} give --cores",
                cfg.queues
            );
        }
        xtcp_engine::worker::validate_cores("-A", &[core])?;
        cfg.cores = Some(vec![core]);
    }
    // -F: the file to send, or (with -R) where what arrives goes.
    let mut send_file = None;
    let mut recv_file = None;
    let mut sink = None;
    if let Some(path) = &a.file {
        if a.bidir {
            bail!(
                "-F {}: not with --bidir (one direction: send it, or -R to receive it)",
                path.display()
            );
        }
        if a.reverse {
            if a.parallel != 1 {
                bail!(
                    "-F {} with -R: one stream only (-P 1), so that the file is the stream",
                    path.display()
                );
            }
            let (r, f) = ReceiveFile::create(path)?;
            recv_file = Some(r);
            sink = Some(Arc::new(f));
        } else {
            let f = std::fs::File::open(path)
                .with_context(|| format!("-F {}: cannot open it", path.display()))?;
            let len = f
                .metadata()
                .with_context(|| format!("-F {}", path.display()))?
                .len();
            if len == 0 {
                bail!("-F {}: the file is empty", path.display());
            }
            send_file = Some((Arc::new(f), len));
        }
    }
    let authtoken = match (&a.username, &a.rsa_public_key_path) {
        (Some(user), Some(key)) => {
            let pem = std::fs::read_to_string(key)
                .with_context(|| format!("--rsa-public-key-path {}", key.display()))?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            Some(
                xtcp_engine::app::iperf3::client_token(
                    &pem,
                    &key.display().to_string(),
                    user,
                    &password()?,
                    now,
                )
                .map_err(anyhow::Error::msg)?,
            )
        }
        _ => None,
    };
    // -F sends the file once per stream: the test ends after it, and -n or
    // -k may ask for less, not more (a stream has nothing after its end).
    let file_bytes = match (&send_file, a.bytes, a.blocks) {
        (Some((_, len)), None, None) => Some(len * u64::from(a.parallel)),
        (Some((_, len)), n, k) => {
            let whole = len * u64::from(a.parallel);
            let asked = n.unwrap_or(0).max(
                k.unwrap_or(0).saturating_mul(
                    a.length
                        .unwrap_or(u64::from(TestParams::default().block_len)),
                ),
            );
            if asked > whole {
                bail!(
                    "-F {}: -n/-k ask for {asked} bytes, more than the file's {len} bytes × {} \
                     streams ({whole}); give at most {whole}",
                    a.file.as_deref().unwrap_or(Path::new("")).display(),
                    a.parallel
                );
            }
            None
        }
        _ => None,
    };
    let bytes = a.bytes.or(file_bytes);
    let params = TestParams {
        time_secs: if bytes.is_some() || a.blocks.is_some() {
            0
        } else {
            a.time
        },
        bytes: bytes.unwrap_or(0),
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
        mss: a.set_mss.map(u32::from),
        nodelay: a.no_delay,
        bandwidth: a.bitrate.filter(|&b| b > 0),
        title: a.title.clone(),
        congestion: a.congestion.map(|c| c.name().to_owned()),
        server_affinity: a.affinity.and_then(|(_, m)| m),
        authtoken,
        ..TestParams::default()
    };
    let payload = match send_file {
        Some((f, _)) => Payload::File(f),
        None if a.zerocopy => Payload::Zeros,
        None => Payload::Repeat(random_block(params.block_len as usize)),
    };
    let config = ClientConfig {
        params,
        payload,
        sink,
        ..ClientConfig::default()
    };
    let tp = a
        .title
        .as_deref()
        .map(|t| format!("{t}:  "))
        .unwrap_or_default();
    let count = Iperf3Client::connections(&config);
    let json_out = a.json_output;
    let intervals = Rc::new(RefCell::new(Vec::<Interval>::new()));
    let iv_store = intervals.clone();
    let print_iv = !json_out;
    let bidir = a.bidir;
    let iv_title = tp.clone();
    let mut app = Iperf3Client::new(
        config,
        Cookie::from_entropy(&entropy()),
        (a.interval > 0.0).then(|| Duration::from_secs_f64(a.interval.clamp(0.1, 3600.0))),
        Box::new(move |iv: &Interval| {
            if print_iv {
                let mut out = std::io::stdout().lock();
                for line in interval_lines(iv, bidir) {
                    let _ = writeln!(out, "{iv_title}{line}");
                }
                let _ = out.flush();
            }
            iv_store.borrow_mut().push(iv.clone());
        }),
    );
    let remote = SocketAddr::new(host, a.port);
    let flag = interrupt_flag()?;
    let role = Role::ConnectApp {
        remote,
        local: None,
        count,
        port: a.cport,
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
                    "{tp}Connecting to host {}, port {} (xtcp on {})",
                    a.host, a.port, cfg.iface
                );
                println!("{tp}[ ID] Interval           Transfer     Bitrate         Retr  RTT");
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
                "connecting_to": { "host": a.host, "port": a.port },
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
        if let Some(t) = &a.title {
            v["title"] = json!(t);
        }
        // Not iperf3's: what the engine reports of each connection (the
        // control connection first): its ports, congestion control, send
        // MSS, pacing rate, and the send-buffer bytes written one by one
        // (copied or zeroed; -Z leaves it at the first lap's frames).
        let mut conns: Vec<_> = report.connections.iter().collect();
        conns.sort_by_key(|r| r.id);
        v["xtcp"] = json!({ "connections": conns.iter().map(|r| json!({
            "id": r.id, "local_port": r.tuple.local.port(), "remote_port": r.tuple.remote.port(),
            "congestion": r.congestion, "send_mss": r.send_mss,
            "pacing_rate": r.pacing_rate, "bytes_sent": r.bytes_sent,
            "bytes_received": r.bytes_received, "send_bytes_touched": r.send_bytes_touched,
        })).collect::<Vec<_>>() });
        if let Err(e) = &o.result {
            v["error"] = json!(e.to_string());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{tp}- - - - - - - - - - - - - - - - - - - - - - - - -");
        println!("{tp}[ ID] Interval           Transfer     Bitrate         Retr");
        for &(id, s, r, re, _) in &rows {
            println!(
                "{tp}[{id:3}]   0.00-{secs:<6.2} sec  {:>12}  {:6.2} Gbits/sec  {:>5}  sender",
                human(s as f64),
                rate(s, secs),
                re.map_or_else(|| "-".to_owned(), |x| x.to_string())
            );
            println!(
                "{tp}[{id:3}]   0.00-{secs:<6.2} sec  {:>12}  {:6.2} Gbits/sec         receiver",
                human(r as f64),
                rate(r, secs)
            );
        }
        if rows.len() > 1 {
            println!(
                "{tp}[SUM]   0.00-{secs:<6.2} sec  {:>12}  {:6.2} Gbits/sec  {retr:>5}  sender",
                human(sum_sent as f64),
                rate(sum_sent, secs)
            );
            println!(
                "{tp}[SUM]   0.00-{secs:<6.2} sec  {:>12}  {:6.2} Gbits/sec         receiver",
                human(sum_recv as f64),
                rate(sum_recv, secs)
            );
        }
        println!(
            "{tp}CPU Utilization: local {:.1}%, remote {:.1}%",
            o.cpu_util.total, remote_cpu
        );
        for line in xdp.lines() {
            println!("{tp}{line}");
        }
        println!("{tp}");
        println!("{tp}xtcp client done.");
    }
    if let Err(e) = o.result {
        bail!("the test failed: {e}");
    }
    if let Some(r) = report.connections.iter().find_map(|r| r.source_error) {
        bail!(
            "-F {}: {}",
            a.file.as_deref().unwrap_or(Path::new("")).display(),
            std::io::Error::from(r)
        );
    }
    if let Some(r) = recv_file {
        r.commit()?;
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
