//! `xtcp client`: an iperf3 client (against a stock `iperf3 -s`) whose
//! control and data connections are carried by xtcp's own TCP on AF_XDP.
//! Output as iperf3's (`report`: its lines, `-V`, `-f`, `--logfile`,
//! `--forceflush`, `--timestamps`; `-J`'s document with every key iperf3
//! 3.12 writes, `--json-stream`'s events, `--get-server-output`), plus the
//! run's XDP statistics.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use xtcp_engine::app::iperf3::{ClientConfig, Cookie, Iperf3Client, MAX_BLOCK_LEN, TestParams};
use xtcp_engine::tcp::{CloseReason, CongestionAlgorithm, ConnectionError};
use xtcp_engine::worker::{Payload, Role, random_filler, repeating_pattern, run_app};

use crate::args::{EngineArgs, parse_size};
use crate::bulk::{
    MtuSteps, Unacceptable, connect_timeout_message, interrupt_flag, mtu_notes, route_via,
};
use crate::outfile::ReplaceFile;
use crate::xdpstats::{EngineCounters, XdpSummary};
use xtcp_engine::worker::bulk::{NO_STREAM, OpenOutput, spawn_writer};

/// Arguments of `xtcp client`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// Print the version and exit (iperf3's `-v`; `-V` is verbose, as
    /// iperf3's).
    #[arg(short = 'v', long = "version", action = clap::ArgAction::Version)]
    pub version: Option<bool>,
    /// The iperf3 server: an address, or a name resolved (to the family
    /// `-4`/`-6` ask for); `HOST%DEV` also names the interface, as
    /// iperf3's (`--bind-dev DEV`).
    #[arg(short = 'c', long = "client", value_name = "HOST[%DEV]")]
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
    /// Seconds to transmit [default: 10; 0: until interrupted]; one end
    /// condition of -t, -n and -k, as iperf3 (with -F, the test ends at -t
    /// or at the file's end, whichever comes first).
    #[arg(short, long, value_name = "SECS", value_parser = crate::args::parse_test_secs)]
    pub time: Option<u32>,
    /// Bytes to transmit (e.g. 2G) instead of a time (0, as iperf3's: no
    /// byte count, the time).
    #[arg(short = 'n', long = "bytes", value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Blocks to transmit instead of a time (e.g. 1000 or 10K; 0, as
    /// iperf3's: no block count, the time).
    #[arg(short = 'k', long = "blockcount", value_parser = parse_size)]
    pub blocks: Option<u64>,
    /// Parallel streams (1 to 128, as iperf3).
    #[arg(short = 'P', long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=128))]
    pub parallel: u32,
    /// Reverse: the server sends.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    pub bidir: bool,
    /// Receive window of each data stream (e.g. 64K): xtcp's when it
    /// receives, and sent to the server for its side, like iperf3's `-w`
    /// (up to 1G; with --rcvbuf auto the receive buffer grows to it, a
    /// --rcvbuf given must hold it).
    #[arg(short = 'w', long = "window", value_parser = parse_size)]
    pub window: Option<u64>,
    /// Block length (iperf3 counts -k in blocks of this size; 0, as
    /// iperf3's, is the default: 128K; at most 1M, as iperf3's).
    #[arg(short = 'l', long = "length", value_parser = parse_size)]
    pub length: Option<u64>,
    /// Seconds at the start to leave out of the results (at most 60, as
    /// iperf3).
    #[arg(short = 'O', long = "omit", default_value_t = 0,
          value_parser = crate::args::parse_omit_secs)]
    pub omit: u32,
    /// Seconds between interval lines (0: one line for the whole test, at
    /// its end, as iperf3).
    #[arg(short = 'i', long = "interval", default_value_t = 1.0,
          value_parser = crate::args::parse_interval)]
    pub interval: f64,
    /// JSON output shaped like iperf3's, plus xtcp's `xdp` object (the
    /// run's XDP statistics: steered, dropped at the redirect, per queue).
    #[arg(short = 'J', long = "json", alias = "json-output")]
    pub json_output: bool,
    /// Zero-copy sender: the send buffer's frames are filled with zeros
    /// once and re-sent as they are, no per-byte work (without -Z the
    /// streams send pseudo-random bytes over and over, like iperf3's
    /// buffer, with a period of up to `-l` that fits the send buffer's
    /// slots: written into a frame once, then re-sent as it comes round).
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
    /// MSS of xtcp's connections (announced, and the most xtcp sends; the
    /// control connection's too, where iperf3 sets it on the data streams
    /// only); also sent to the server, as iperf3's TCP_MAXSEG.
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
    /// Send this file's bytes, whole on each stream (the test ends after
    /// the file, or at -t if given and sooner; -n or -k may ask for less);
    /// with -R, write what is received to it (the file is replaced only
    /// when the test succeeds).
    #[arg(short = 'F', long = "file", value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Our address, as iperf3's `-B` (default: the kernel's preferred
    /// source for the route to the server); one of the interface's.
    /// `ADDR%DEV` also names the interface, as iperf3's (`--bind-dev DEV`).
    #[arg(short = 'B', long = "bind-address", value_name = "ADDR[%DEV]",
          value_parser = crate::args::parse_addr_dev)]
    pub bind_address: Option<crate::args::AddrDev>,
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
    /// The TOS byte of the data connections' packets (the IPv6 traffic
    /// class), 0-255 (0x.. hex, 0.. octal), as iperf3's -S. The two ECN
    /// bits go out as 0: xtcp does not negotiate ECN (Linux's TCP drops
    /// them from IP_TOS too). Sent to the server, which may mark its own
    /// (xtcp serve does; Debian 12's iperf3 3.12 only over IPv6). The last
    /// of -S and --dscp counts, as in iperf3.
    #[arg(short = 'S', long = "tos", value_name = "N", value_parser = parse_tos,
          overrides_with = "dscp", allow_negative_numbers = true)]
    pub tos: Option<u8>,
    /// The DSCP of the data connections' packets, 0-63 or a name (af11 …
    /// af43, cs0 … cs7, ef, va; lowdelay, throughput, reliability), as
    /// iperf3's --dscp: -S with the code point in the TOS byte's upper six
    /// bits.
    #[arg(long = "dscp", value_name = "N|NAME", value_parser = parse_dscp,
          overrides_with = "tos", allow_negative_numbers = true)]
    pub dscp: Option<u8>,
    /// The IPv6 flow label of the data connections' packets from the SYN
    /// on, 1-0xfffff, as iperf3's -L (IPv6 only).
    #[arg(short = 'L', long = "flowlabel", value_name = "N", value_parser = parse_flowlabel,
          allow_negative_numbers = true)]
    pub flowlabel: Option<u32>,
    /// iperf3's --dont-fragment, passed on to the server: xtcp's TCP sets
    /// IPv4's Don't Fragment bit on every packet anyway, as Linux's TCP
    /// does (iperf3 itself applies the flag to UDP only).
    #[arg(long)]
    pub dont_fragment: bool,
    /// A string for the JSON of both ends (`extra_data`), as iperf3's.
    #[arg(long, value_name = "STR")]
    pub extra_data: Option<String>,
    /// Send iperf3's digits ("0123456789" over and over) instead of random
    /// bytes: the -l block iperf3 fills with them, repeated with the send
    /// buffer's period as the random bytes are (see -Z), not block by
    /// block; with -Z too, the digits are sent, as by iperf3. A server that
    /// sends (-R, --bidir) is asked to send them too.
    #[arg(long, conflicts_with = "file")]
    pub repeating_payload: bool,
    /// With -R or --bidir: end the test when it moves nothing for this many
    /// milliseconds while it runs, as iperf3's --rcv-timeout
    /// (100..=86400000; default 120000).
    #[arg(long, value_name = "MS", allow_negative_numbers = true,
          value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    pub rcv_timeout: Option<u64>,
    /// Debug logging, as iperf3's -d: in the place of --log, debug (`-d=1`
    /// … `-d=4`: error, warn, info, debug), on standard error.
    #[arg(short = 'd', long = "debug", value_name = "LEVEL", num_args = 0..=1,
          require_equals = true, default_missing_value = "4",
          value_parser = clap::value_parser!(u8).range(1..=4))]
    pub debug: Option<u8>,
    /// Pace each data connection at this many bits of payload a second at
    /// most (K, M, G, T = 10^3..), as iperf3's --fq-rate (a socket's
    /// SO_MAX_PACING_RATE): every segment spaced, where -b paces the
    /// average (a worker that comes late, as on a loaded host, sends what the
    /// rate allowed in up to the last 10 ms at once). Sent to the server
    /// for the streams it sends (xtcp serve paces them; Debian 12's iperf3
    /// 3.12 does not).
    #[arg(long = "fq-rate", value_name = "RATE", value_parser = parse_rate)]
    pub fq_rate: Option<u64>,
    /// UDP: refused, xtcp speaks TCP only.
    #[arg(short = 'u', long = "udp")]
    pub udp: bool,
    /// iperf3's flags for SCTP and UDP, and for the timer of its -b:
    /// refused with why (xtcp speaks TCP, and paces each segment).
    #[command(flatten)]
    pub refused: RefusedArgs,
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

/// iperf3 client flags xtcp has no use for: each is refused with why, not
/// as an unknown argument.
#[derive(clap::Args, Debug, Clone)]
pub struct RefusedArgs {
    #[arg(long, hide = true)]
    sctp: bool,
    #[arg(short = 'X', long = "xbind", hide = true, value_name = "NAME")]
    xbind: Option<String>,
    #[arg(long, hide = true, value_name = "N")]
    nstreams: Option<String>,
    #[arg(long = "udp-counters-64bit", hide = true)]
    udp_counters_64bit: bool,
    #[arg(long = "pacing-timer", hide = true, value_name = "USECS")]
    pacing_timer: Option<String>,
}

impl RefusedArgs {
    /// Why the first flag given is refused.
    fn refusal(&self) -> Option<&'static str> {
        if self.sctp || self.xbind.is_some() || self.nstreams.is_some() {
            Some("--sctp, -X and --nstreams are SCTP's: xtcp speaks TCP only")
        } else if self.udp_counters_64bit {
            Some("--udp-counters-64bit is UDP's: xtcp speaks TCP only")
        } else if self.pacing_timer.is_some() {
            Some(
                "--pacing-timer sets the timer of iperf3's -b: xtcp paces each segment (-b, \
                 --fq-rate) and has no such timer",
            )
        } else {
            None
        }
    }
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

/// A number as C's `strtol(s, _, 0)` reads it: decimal, `0x` hex, `0`
/// octal.
fn parse_c_number(s: &str) -> Option<u64> {
    let t = s.trim();
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if t.len() > 1
        && let Some(o) = t.strip_prefix('0')
    {
        u64::from_str_radix(o, 8).ok()
    } else {
        t.parse().ok()
    }
}

/// `-S N`: a byte.
fn parse_tos(s: &str) -> Result<u8, String> {
    parse_c_number(s)
        .and_then(|v| u8::try_from(v).ok())
        .ok_or_else(|| format!("`{s}`: give a TOS byte, 0-255 (e.g. 0x10 or 16)"))
}

/// `--dscp`: a code point (0-63) or a name (iperf3's), as the TOS byte it
/// makes.
fn parse_dscp(s: &str) -> Result<u8, String> {
    // (name, TOS byte): the code point shifted into the upper six bits;
    // the last three are RFC 1349's TOS bits, as iperf3 takes them.
    const NAMES: &[(&str, u8)] = &[
        ("af11", 10 << 2),
        ("af12", 12 << 2),
        ("af13", 14 << 2),
        ("af21", 18 << 2),
        ("af22", 20 << 2),
        ("af23", 22 << 2),
        ("af31", 26 << 2),
        ("af32", 28 << 2),
        ("af33", 30 << 2),
        ("af41", 34 << 2),
        ("af42", 36 << 2),
        ("af43", 38 << 2),
        ("cs0", 0),
        ("cs1", 8 << 2),
        ("cs2", 16 << 2),
        ("cs3", 24 << 2),
        ("cs4", 32 << 2),
        ("cs5", 40 << 2),
        ("cs6", 48 << 2),
        ("cs7", 56 << 2),
        ("ef", 46 << 2),
        ("va", 44 << 2),
        ("lowdelay", 0x10),
        ("throughput", 0x08),
        ("reliability", 0x04),
    ];
    if let Some(&(_, tos)) = NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(s.trim())) {
        return Ok(tos);
    }
    parse_c_number(s)
        .and_then(|v| u8::try_from(v).ok())
        .filter(|&v| v < 64)
        .map(|v| v << 2)
        .ok_or_else(|| {
            format!(
                "`{s}`: give a DSCP, 0-63, or one of af11-13, af21-23, af31-33, af41-43, cs0-7, \
                 ef, va, lowdelay, throughput, reliability"
            )
        })
}

/// `-L N`: an IPv6 flow label.
fn parse_flowlabel(s: &str) -> Result<u32, String> {
    parse_c_number(s)
        .and_then(|v| u32::try_from(v).ok())
        .filter(|v| (1..=xtcp_engine::worker::IpMarks::FLOW_LABEL_MAX).contains(v))
        .ok_or_else(|| format!("`{s}`: give an IPv6 flow label, 1-0xfffff"))
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
    let host = crate::args::split_dev(&a.host).0;
    if let Ok(given) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        crate::args::refuse_link_local("-c", &a.host, given)?;
        // An IPv4-mapped address is the IPv4 one, whatever -4/-6 say (as
        // iperf3 connects to it).
        let ip = given.to_canonical();
        if ip != given {
            return Ok(ip);
        }
        if !want(&ip) {
            bail!(
                "{flag}: {ip} is an {} address; give an {} address or drop {flag}",
                if ip.is_ipv4() { "IPv4" } else { "IPv6" },
                if a.version4 { "IPv4" } else { "IPv6" }
            );
        }
        return Ok(ip);
    }
    let addrs: Vec<IpAddr> = (host, a.port)
        .to_socket_addrs()
        .with_context(|| format!("-c {host}: cannot resolve the host"))?
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
    let mut run = None;
    let r = run_client(a, &mut run);
    if let Err(e) = &r {
        // As iperf3: with -J (or --json-stream) a failed test still writes
        // its document, the error in it.
        let msg = crate::error_chain(e);
        match &run {
            Some(run) => run.fail(&msg),
            None => crate::report::fail_before_the_run(a, &msg),
        }
    }
    r
}

/// The test; `slot` gets its report's writer once there is one (for
/// [`client`] to write a failure with).
fn run_client(a: &ClientArgs, slot: &mut Option<crate::report::ClientRun>) -> anyhow::Result<()> {
    if a.udp {
        clap::Error::raw(
            clap::error::ErrorKind::ArgumentConflict,
            "-u: xtcp speaks TCP only\n",
        )
        .exit();
    }
    if let Some(why) = a.refused.refusal() {
        clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, format!("{why}\n")).exit();
    }
    let host = resolve_host(a)?;
    if a.flowlabel.is_some() && host.is_ipv4() {
        bail!(
            "-L: a flow label is IPv6's; {host} is an IPv4 address (give an IPv6 server or drop -L)"
        );
    }
    // `-c HOST%DEV`, `-B ADDR%DEV`: iperf3's `--bind-dev DEV`.
    let dev_c = crate::args::split_dev(&a.host).1;
    let dev_b = a.bind_address.as_ref().and_then(|b| b.dev.as_deref());
    let mut cfg = a.engine.with_dev(dev_c, dev_b)?.config_to(host)?;
    if let Some(b) = &a.bind_address {
        crate::args::addr_on_iface(&cfg.iface, b.ip, true)?;
    }
    let connect_timeout = Duration::from_millis(a.connect_timeout);
    cfg.tcp.connect_timeout = Some(connect_timeout);

    if let Some(m) = a.set_mss {
        cfg.mss = Some(m);
    }
    // `-w` beyond the receive buffer it would not fit: with `--rcvbuf
    // auto` the buffer grows to it (iperf3's `-w` asks the kernel for the
    // buffer); a `--rcvbuf` given is the user's, and the check below says
    // they disagree.
    if let (Some(w), crate::args::BufSize::Auto) = (a.window, a.engine.rcvbuf)
        && w <= 1 << 30
    {
        cfg.tcp.recv_buffer = cfg.tcp.recv_buffer.max(w as usize);
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
            // Written beside it and renamed over it when the test
            // succeeds (removed otherwise): a failed run leaves an existing
            // file as it was.
            let r = ReplaceFile::new("-F", path)?;
            sink = Some(r.create()?);
            recv_file = Some(r);
        } else {
            let f = std::fs::File::open(path)
                .with_context(|| format!("-F {}: cannot open it", path.display()))?;
            let m = f
                .metadata()
                .with_context(|| format!("-F {}", path.display()))?;
            if m.is_dir() {
                bail!("-F {} is a directory: give a file to send", path.display());
            }
            let len = m.len();
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
    // -F sends the file once per stream: the test ends after it (or at
    // -t, if given and sooner, as iperf3's -F with -t), and -n or -k may
    // ask for less, not more (a stream has nothing after its end). The
    // file's end ends the test in any case, also where -O's omitted
    // seconds took it all, -n's bytes left to count after them (as
    // iperf3's, right after them).
    let file_end = send_file
        .as_ref()
        .map(|(_, len)| len * u64::from(a.parallel));
    let file_bytes = match (&send_file, a.byte_count(), a.block_count()) {
        (Some(_), None, None) if a.time.is_some() => None,
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
    let (time_secs, bytes, blocks) = a.end_condition(file_bytes);
    let params = TestParams {
        time_secs,
        bytes,
        blocks,
        parallel: a.parallel,
        reverse: a.reverse,
        bidirectional: a.bidir,
        omit_secs: a.omit,
        block_len: match a.length.filter(|&l| l > 0) {
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
                             ({} bytes; raise it with --rcvbuf, or leave that at auto, which \
                             takes a -w of up to 1G)",
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
        get_server_output: a.output.get_server_output,
        fq_rate: a.fq_rate.filter(|&r| r > 0),
        tos: a.tos.or(a.dscp).filter(|&t| t > 0).map(u32::from),
        flow_label: a.flowlabel,
        dont_fragment: a.dont_fragment,
        extra_data: a.extra_data.clone(),
        repeating_payload: a.repeating_payload,
        zerocopy: a.zerocopy,
        ..TestParams::default()
    };
    let payload = match send_file {
        Some((f, _)) => Payload::File(f),
        None if a.repeating_payload => {
            Payload::Filler(repeating_pattern(params.block_len as usize))
        }
        None if a.zerocopy => Payload::Zeros,
        None => Payload::Filler(random_filler(params.block_len as usize)),
    };
    let mut config = ClientConfig {
        params,
        payload,
        end_after_sent: file_end,
        ..ClientConfig::default()
    };
    if let Some(ms) = a.rcv_timeout {
        if !a.reverse && !a.bidir {
            bail!(
                "--rcv-timeout {ms}: the client's receive timeout is for a test it receives \
                 (-R, --bidir), as in iperf3"
            );
        }
        config.idle_timeout = Duration::from_millis(ms);
    }
    // A byte or block budget that this side's sending streams split
    // exactly ends once the server's TCP acknowledged every byte of it
    // (not so with --bidir, where the received bytes may end it first,
    // nor with -O): then xtcp's count of them is what the server had.
    let p = &config.params;
    let acked_budget = match (p.bytes, p.blocks) {
        _ if p.bidirectional || p.reverse || p.omit_secs > 0 => None,
        (0, 0) => config.end_after_sent,
        (0, k) => Some(k.saturating_mul(u64::from(p.block_len))),
        (n, _) => Some(n),
    };
    let count = Iperf3Client::connections(&config);
    let cookie = Cookie::from_entropy(&entropy());
    let run = &*slot.insert(crate::report::ClientRun::new(
        a,
        &cfg,
        &config.params,
        &cookie,
        host,
    )?);
    let mut app = Iperf3Client::new(
        config,
        cookie,
        // -i 0: one interval, the whole test (iperf3 prints that one line).
        Some(if a.interval > 0.0 {
            Duration::from_secs_f64(a.interval)
        } else {
            Duration::ZERO
        }),
        run.on_interval(),
    );
    app.set_on_start(run.on_start());
    // -R -F: a writer thread writes what the stream receives, so that the
    // worker never waits for the disk (a lagging writer holds the bytes in
    // TCP's receive buffer instead).
    let writer = match sink {
        Some(f) => {
            // Unbuffered (the writer's chunks are 256 KiB): what the
            // writer counts is what the file holds.
            let open: OpenOutput =
                Box::new(move || Ok(Box::new(f) as Box<dyn std::io::Write + Send>));
            let (sink, t) = spawn_writer(open).context("starting the writer thread")?;
            app.set_sink(sink);
            Some(t)
        }
        None => None,
    };
    let remote = SocketAddr::new(host, a.port);
    let flag = interrupt_flag()?;
    let role = Role::ConnectApp {
        remote,
        local: a.bind_address.as_ref().map(|b| b.ip),
        count,
        port: a.cport,
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
    // The engine is done, every stream's sink closed: the writer has
    // flushed the file, or says why it could not (before anything else: a
    // failed write also resets the connection, and the test then fails).
    app.release_sink();
    let written = match writer {
        Some(t) => Some(
            t.join()
                .map_err(|_| anyhow::anyhow!("-F: the writer thread panicked"))?,
        ),
        None => None,
    };
    let file_name = || a.file.as_deref().unwrap_or(Path::new("")).display();
    if let Some(w) = &written
        && let Err(e) = &w.result
        // No byte and no end came (the test failed before its stream
        // ran), or the stream did not end (the test did not either: said
        // below).
        && e.kind() != NO_STREAM
        && e.kind() != std::io::ErrorKind::UnexpectedEof
    {
        bail!(
            "-F {}: writing what arrived failed after {} bytes: {e}",
            file_name(),
            w.bytes
        );
    }
    if report.iface_gone {
        bail!("{}", crate::bulk::iface_gone(&report.iface));
    }
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
    // Not iperf3's, in -J: xtcp's own drops by reason and full turns, and
    // what the engine reports of each connection (the control connection
    // first): its ports, congestion control, send MSS, pacing rate, the
    // send-buffer bytes written one by one (copied or zeroed; -Z leaves it
    // at the first lap's frames), the send buffer's limit at the end, its
    // retransmissions to its close (iperf3's count ends with the test,
    // before the data connections' FINs), and the peer's segments it did not
    // take (as `send`/`recv --json` report them).
    let mut conns: Vec<_> = report.connections.iter().collect();
    conns.sort_by_key(|r| r.id);
    let mut extra = serde_json::Map::new();
    extra.insert(
        "engine".into(),
        serde_json::to_value(EngineCounters::of(&report))?,
    );
    extra.insert(
        "xtcp".into(),
        json!({ "connections": conns.iter().map(|r| json!({
            "id": r.id, "local_port": r.tuple.local.port(), "remote_port": r.tuple.remote.port(),
            "congestion": r.congestion, "send_mss": r.send_mss,
            "pacing_rate": r.pacing_rate, "bytes_sent": r.bytes_sent,
            "bytes_received": r.bytes_received, "send_bytes_touched": r.send_bytes_touched,
            "send_buffer": r.send_buffer, "retransmits": r.stats.retransmits,
            "unacceptable": Unacceptable::of(&r.stats),
            "packet_mtu": r.established.map(|_| r.packet_mtu),
            "mss_path_mtu_steps": r.stats.mss_path_mtu_steps,
            "mss_link_mtu_steps": r.stats.mss_link_mtu_steps,
            "mss_path_mtu_raises": r.stats.mss_path_mtu_raises,
            "mss_black_hole_steps": r.stats.mss_black_hole_steps,
        })).collect::<Vec<_>>() }),
    );
    if let Some(t) = &a.title {
        extra.insert("title".into(), json!(t));
    }
    if let Some(d) = &a.extra_data {
        extra.insert("extra_data".into(), json!(d));
    }
    run.finish(&o, &XdpSummary::of(&report), extra)?;
    // A smaller MTU on the path, as `send` says it, its streams named by
    // iperf3's ids as the report names them (the control connection's
    // segments are small).
    let steps: Vec<MtuSteps> = conns
        .iter()
        .filter_map(|r| {
            let i = o.connected.iter().position(|t| *t == Some(r.tuple))?;
            let id = o.streams.get(i)?.id.0;
            Some(MtuSteps::of(r).named(id as usize))
        })
        .collect();
    for line in mtu_notes(&steps, &route_via(&report), ("stream", "streams")) {
        eprintln!("{line}");
    }
    if o.result.is_ok()
        && let Some((read, sent)) = crate::report::server_read_short(&o)
        && Some(sent) == acked_budget
    {
        eprintln!(
            "xtcp: the server read {read} of the {sent} bytes its TCP acknowledged: iperf3's server \
             closes its data connections at TEST_END with what they hold unread (Linux there \
             counts each such close in TcpExtTCPAbortOnClose)"
        );
    }
    if let Err(e) = o.result {
        bail!("the test failed: {e}");
    }
    if let Some(r) = report.connections.iter().find_map(|r| r.source_error) {
        bail!(
            "-F {}: {}",
            a.file.as_deref().unwrap_or(Path::new("")).display(),
            r
        );
    }
    if let Some(r) = recv_file {
        // The file holds every byte that arrived (the omitted seconds'
        // too), or the run fails and the old file stays.
        let on_disk = match &written {
            Some(w) => match &w.result {
                Ok(()) => w.bytes,
                Err(e) if e.kind() == NO_STREAM => 0,
                Err(e) => bail!("-F {}: {e}", file_name()),
            },
            None => 0,
        };
        let arrived: u64 = o
            .streams
            .iter()
            .filter(|s| s.role == xtcp_engine::app::iperf3::Role::Receive)
            .map(|s| s.total_bytes)
            .sum();
        if on_disk != arrived {
            bail!(
                "-F {}: {on_disk} bytes reached the file of the {arrived} that arrived",
                file_name()
            );
        }
        r.commit()?;
    }
    Ok(())
}

impl ClientArgs {
    /// `-n`, as iperf3 reads it: 0 is none.
    fn byte_count(&self) -> Option<u64> {
        self.bytes.filter(|&n| n > 0)
    }

    /// `-k`, likewise.
    fn block_count(&self) -> Option<u64> {
        self.blocks.filter(|&k| k > 0)
    }

    /// What iperf3 refuses as a parameter error, found before anything is
    /// set up (a usage error): more than one end condition (-n 0 and -k 0
    /// are none, as iperf3's), a block longer than iperf3's largest.
    pub fn usage_error(&self) -> Option<String> {
        let ends = [
            self.time.is_some(),
            self.byte_count().is_some(),
            self.block_count().is_some(),
        ];
        if ends.into_iter().filter(|&e| e).count() > 1 {
            return Some(
                "only one test end condition (-t, -n, -k) may be given, as iperf3's".into(),
            );
        }
        if let Some(l) = self.length.filter(|&l| l > u64::from(MAX_BLOCK_LEN)) {
            return Some(format!(
                "-l {l}: block size too large (maximum = {MAX_BLOCK_LEN} bytes, as iperf3's)"
            ));
        }
        None
    }

    /// The test's end condition: (seconds, bytes, blocks), 0 for each not
    /// given; `file_bytes`, -F's bytes where they end it.
    fn end_condition(&self, file_bytes: Option<u64>) -> (u32, u64, u64) {
        let bytes = self.byte_count().or(file_bytes);
        let blocks = self.block_count();
        let secs = if bytes.is_some() || blocks.is_some() {
            0
        } else {
            self.time.unwrap_or(10)
        };
        (secs, bytes.unwrap_or(0), blocks.unwrap_or(0))
    }
}

/// The largest `-w`: the engine's receive buffer.
fn rcvbuf_limit(cfg: &xtcp_engine::worker::EngineConfig) -> usize {
    cfg.tcp.recv_buffer
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-S`, `--dscp` and `-L` read numbers as iperf3 (C's `strtol` base 0)
    /// and names as iperf3; out of range is refused with what to give.
    fn args(extra: &[&str]) -> ClientArgs {
        let argv = [
            &["xtcp", "client", "--iface", "lo", "-c", "198.18.0.2"][..],
            extra,
        ]
        .concat();
        match <crate::Cli as clap::Parser>::try_parse_from(argv)
            .unwrap()
            .cmd
        {
            crate::Cmd::Client(a) => a,
            c => panic!("{c:?}"),
        }
    }

    /// `-n 0` and `-k 0` are no end condition, as iperf3's: the time is
    /// (10 s, or -t's); two end conditions, or a block over 1M, are
    /// refused before anything is set up.
    #[test]
    fn zero_bytes_or_blocks_leave_the_time_and_conflicts_are_refused() {
        let end = |extra: &[&str]| args(extra).end_condition(None);
        assert_eq!(end(&[]), (10, 0, 0));
        assert_eq!(end(&["-n", "0"]), (10, 0, 0));
        assert_eq!(end(&["-k", "0"]), (10, 0, 0));
        assert_eq!(end(&["-t", "3", "-n", "0"]), (3, 0, 0));
        assert_eq!(end(&["-t", "0"]), (0, 0, 0));
        assert_eq!(end(&["-n", "1M"]), (0, 1 << 20, 0));
        assert_eq!(end(&["-k", "7", "-n", "0"]), (0, 0, 7));
        assert_eq!(args(&["-n", "0", "-k", "0", "-t", "2"]).usage_error(), None);
        for two in [
            &["-t", "3", "-n", "1M"][..],
            &["-t", "3", "-k", "1"],
            &["-n", "1M", "-k", "1"],
        ] {
            let e = args(two).usage_error().unwrap();
            assert!(
                e.contains("only one test end condition (-t, -n, -k)"),
                "{two:?}: {e}"
            );
        }
        assert_eq!(args(&["-l", "1M"]).usage_error(), None);
        let e = args(&["-l", "1048577"]).usage_error().unwrap();
        assert!(
            e.contains("block size too large (maximum = 1048576 bytes"),
            "{e}"
        );
    }

    #[test]
    fn tos_dscp_and_flow_label_values() {
        assert_eq!(parse_tos("0x10"), Ok(0x10));
        assert_eq!(parse_tos("064"), Ok(52));
        assert_eq!(parse_tos("52"), Ok(52));
        assert_eq!(parse_tos("0"), Ok(0));
        assert!(parse_tos("256").unwrap_err().contains("0-255"));
        assert!(parse_tos("0x").is_err());
        assert_eq!(parse_dscp("46"), Ok(0xb8));
        assert_eq!(parse_dscp("EF"), Ok(0xb8));
        assert_eq!(parse_dscp("af11"), Ok(0x28));
        assert_eq!(parse_dscp("cs7"), Ok(0xe0));
        assert_eq!(parse_dscp("lowdelay"), Ok(0x10));
        assert_eq!(parse_dscp("0x3f"), Ok(0xfc));
        assert!(parse_dscp("64").unwrap_err().contains("0-63"));
        assert!(parse_dscp("af44").is_err());
        assert_eq!(parse_flowlabel("0xfffff"), Ok(0xfffff));
        assert_eq!(parse_flowlabel("1"), Ok(1));
        assert!(parse_flowlabel("0").is_err(), "iperf3 takes 1 up");
        assert!(parse_flowlabel("0x100000").is_err());
    }
}
