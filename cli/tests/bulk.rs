//! `xtcp send` and `xtcp recv` against the kernel's TCP (socat) on a test
//! network: 1 GiB, SHA-256 compared, at MTU 1500, 9000 and 65535, IPv4 and
//! IPv6, with and without MSS clipping, both directions; a killed peer; the
//! errors a user meets; under loss, the retransmissions and packets it
//! reports against the path's own count; forged segments, counted and
//! answered as RFC 5961 and Linux do. Root needed (CI runs as root);
//! each test builds its own namespaces.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;

use common::{
    CPU_SLACK, Forged, Reap, TICK, Watched, acked_sender, count, exit_and_cpu, impair_b, line_of,
    number, output_and_cpu, pattern_sender, quantity, socat_listen, socat_receiver, tcp_mib,
    tcp_out_segs, wait_listening, wait_ss, zeros_from_b,
};
use xtcp_engine::testnet::{Netns, TestNet, TestNetConfig};
use xtcp_engine::worker::bulk::pattern_fill;

const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");
const SEED: u64 = 42;
const GIB: u64 = 1 << 30;
/// The variants (IPv6, clipping off) move a quarter of it: a gibibyte each
/// way per MTU is the long run, the variants check the path is the same.
const QUARTER: u64 = GIB / 4;

fn testnet(mtu: u32) -> TestNet {
    TestNet::new(TestNetConfig {
        mtu,
        queues: 1,
        offloads: false,
    })
    .unwrap_or_else(|e| panic!("cannot build the test network (these tests run as root): {e}"))
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{name}", std::process::id()))
}

/// A FIFO made anew at [`tmp`]`(name)`.
fn fifo(name: &str) -> PathBuf {
    let p = tmp(name);
    let _ = std::fs::remove_file(&p);
    assert!(Command::new("mkfifo").arg(&p).status().unwrap().success());
    p
}

fn sha256_file(p: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(p)
        .output()
        .expect("sha256sum");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)[..64].to_owned()
}

/// The first `len` bytes (`GIB` or `QUARTER`) of the pattern stream in a
/// file (made once per test process) and its SHA-256.
fn pattern_file(len: u64) -> &'static (PathBuf, String) {
    static F: [OnceLock<(PathBuf, String)>; 2] = [OnceLock::new(), OnceLock::new()];
    let i = match len {
        GIB => 0,
        QUARTER => 1,
        _ => panic!("no pattern file of {len} bytes"),
    };
    F[i].get_or_init(|| {
        let name = format!("pattern-42-{}m.bin", len >> 20);
        let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        if std::fs::metadata(&p).map(|m| m.len()).ok() != Some(len) || !cached_matches(&p, len) {
            let part = p.with_extension(format!("part{}", std::process::id()));
            let mut f = std::io::BufWriter::new(std::fs::File::create(&part).unwrap());
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0;
            while off < len {
                pattern_fill(SEED, off, &mut buf);
                f.write_all(&buf).unwrap();
                off += buf.len() as u64;
            }
            f.into_inner().unwrap().sync_all().unwrap();
            std::fs::rename(&part, &p).unwrap();
        }
        let h = sha256_file(&p);
        (p, h)
    })
}

/// Whether a cached pattern file holds the current pattern (its head and
/// tail are checked; the generator may have changed since it was written).
fn cached_matches(p: &Path, len: u64) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(p) else {
        return false;
    };
    let mut got = vec![0u8; 1 << 16];
    let mut want = vec![0u8; 1 << 16];
    for off in [0, len - (1 << 16)] {
        if f.seek(SeekFrom::Start(off)).is_err() || f.read_exact(&mut got).is_err() {
            return false;
        }
        pattern_fill(SEED, off, &mut want);
        if got != want {
            return false;
        }
    }
    true
}

/// Starts xtcp in side A's namespace with its stdout and stderr piped.
fn spawn_xtcp_piped(net: &TestNet, args: &[String]) -> Reap {
    Reap(
        net.a
            .ns
            .command(XTCP)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Starts xtcp in side A's namespace with its stderr piped.
fn spawn_xtcp(net: &TestNet, args: &[String]) -> Reap {
    Reap(
        net.a
            .ns
            .command(XTCP)
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Waits (bounded) for a child with piped stderr to exit; returns its status,
/// what it printed there, and the CPU (user, system) the kernel accounted
/// to it.
fn wait_exit(
    child: &mut Reap,
    limit_s: u64,
    what: &str,
) -> (std::process::ExitStatus, String, (f64, f64)) {
    let (status, user, system) = exit_and_cpu(&mut child.0, Duration::from_secs(limit_s), what);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err).unwrap();
    (status, err, (user, system))
}

/// No XDP program stays attached to side A's interface.
fn assert_detached(net: &TestNet) {
    let link = net.a.ns.ip(&["link", "show", &net.a.iface]).unwrap();
    let text = String::from_utf8_lossy(&link.stdout);
    assert!(!text.contains("xdp"), "nothing stays attached: {text}");
}

/// Kernel-side waits of these tests, bounded by a minute.
const WAIT: Duration = Duration::from_secs(60);

fn socat_addr(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("TCP4:{a}:{port}"),
        IpAddr::V6(a) => format!("TCP6:[{a}]:{port}"),
    }
}

/// `xtcp recv` in side A on `port` with `extra` arguments, its standard
/// output to `stdout`; returns once it listens.
/// What an xtcp run with `--json` (its standard output piped) printed, as
/// the one document it is; read once it exited.
fn json_stdout(w: &mut Watched) -> serde_json::Value {
    let mut out = String::new();
    std::io::Read::read_to_string(&mut w.child.0.stdout.take().unwrap(), &mut out).unwrap();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON document ({e}): {out}"))
}

fn recv_listening(net: &TestNet, port: u16, extra: &[&str], stdout: Stdio) -> Watched {
    let mut args = vec!["recv".to_string()];
    args.extend(engine_args(net, true));
    args.extend(["--listen".to_string(), port.to_string()]);
    args.extend(extra.iter().map(|a| a.to_string()));
    let mut xtcp = Watched::spawn(net, &args, stdout);
    xtcp.wait_for("listening on");
    xtcp
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "xtcp failed: {err}");
    err
}

fn engine_args(net: &TestNet, clip: bool) -> Vec<String> {
    [
        "--iface",
        &net.a.iface,
        "--bind",
        "copy",
        "--rx-csum",
        "verify",
        "--mss-clip",
        if clip { "on" } else { "off" },
        "--frames",
        "10240",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// xtcp send (pattern, or the pattern file with `from_file`) → socat
/// writing a file; SHA-256 compared.
fn send_to_kernel(net: &TestNet, v6: bool, clip: bool, from_file: bool, len: u64) {
    let (pfile, want) = pattern_file(len);
    let (a, b): (IpAddr, IpAddr) = if v6 {
        (net.a.ip6.into(), net.b.ip6.into())
    } else {
        (net.a.ip4.into(), net.b.ip4.into())
    };
    let _ = a;
    let out_file = tmp(&format!("sent-{}-{v6}-{clip}.bin", net.a.iface));
    let socat = socat_receiver(
        net,
        b,
        5201,
        &format!("OPEN:{},creat,trunc", out_file.display()),
    );
    let mut args = vec!["send".to_string()];
    args.extend(engine_args(net, clip));
    args.extend([
        "--connect".into(),
        std::net::SocketAddr::new(b, 5201).to_string(),
    ]);
    if from_file {
        args.extend(["--file".into(), pfile.display().to_string()]);
    } else {
        args.extend([
            "--pattern".into(),
            SEED.to_string(),
            "--bytes".into(),
            len.to_string(),
        ]);
    }
    args.push("--json".into());
    let (in0, out0) = (tcp_mib(&net.b.ns, "InSegs"), tcp_out_segs(&net.b.ns));
    let started = Instant::now();
    let (out, user, system) = output_and_cpu(net.a.ns.command(XTCP).args(&args));
    let wall = started.elapsed().as_secs_f64();
    ok(&out);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
    assert_eq!(j["bytes"].as_u64(), Some(len), "{j}");
    check_counts(&j, (user, system), wall);
    // The MSS it sent with, and whether --mss-clip rounded it down to
    // whole frames (`clipped_to` says so in the text): what its packets
    // carry less the headers and timestamps, at MTU 9000 8948 (8928 over
    // IPv6) → 8192.
    let c = &j["connections"][0];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{c}"));
    let frame = n(&j["engine"]["umem"]["frame_size"]);
    let carried = n(&c["packet_mtu"]) - if v6 { 40 } else { 20 } - 20 - 12;
    let clipped = clip && carried >= frame && carried % frame != 0;
    assert_eq!(c["mss_clipped"], clipped, "{c}");
    let mss = if clipped {
        carried - carried % frame
    } else {
        carried
    };
    assert_eq!(n(&c["mss"]), mss, "{c}");
    // Every segment xtcp counts went to B's kernel, and every one that
    // kernel sent reached xtcp or is among what its XDP statistics say was
    // lost on the way (a veth pair: nothing else on it). Read once socat
    // has the whole stream: by then B has sent its last segment, and xtcp
    // exited only after acknowledging it.
    let counts_b = |j: &serde_json::Value| {
        let (i, o) = (
            tcp_mib(&net.b.ns, "InSegs") - in0,
            tcp_out_segs(&net.b.ns) - out0,
        );
        let lost = j["xdp"]["dropped_at_redirect"].as_u64().unwrap()
            + j["xdp"]["dropped_before_xdp"].as_u64().unwrap_or(0);
        assert_eq!(j["segments_sent"].as_u64(), Some(i), "B's InSegs: {j}");
        let received = j["segments_received"].as_u64().unwrap();
        assert_eq!(received + lost, o, "B's OutSegs: {j}");
    };
    // New data went out in bursts, whole bursts through one `seg` cursor
    // each where every segment is whole frames: one frame each in the
    // single-descriptor layout (MTU 1500 here), frames whole with MSS
    // clipping in the chained one. Unclipped chained segments straddle
    // frames and go segment by segment (as does a burst whose frames are
    // still being transmitted).
    let port = |k: &str| -> u64 {
        j["engine"]["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["port"][k].as_u64().unwrap())
            .sum()
    };
    if j["engine"]["tx_layout"] == "single" || clip {
        assert!(port("tx_bursts") > 0, "{}", j["engine"]["workers"]);
        assert!(port("tx_bursts") <= port("tx_packets"));
    } else {
        assert_eq!(port("tx_bursts"), 0);
    }
    // socat exits once it has the whole stream.
    let mut socat = socat;
    let start = Instant::now();
    while socat.0.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "socat did not get the end of the stream"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    counts_b(&j);
    let got = sha256_file(&out_file);
    let _ = std::fs::remove_file(&out_file);
    assert_eq!(&got, want, "SHA-256 of what the kernel received");
}

/// What `xtcp send`/`recv --json` says of its time and CPU against the
/// test's own account: the transfer's seconds within the process's life
/// (`wall`), the rate its bytes over those seconds, and its CPU (that of
/// the transfer: setup and teardown, the steering program's load and the
/// UMEM's population, are left out) within what the kernel accounted to
/// the process (`cpu`: user, system, from `wait4`).
fn check_counts(j: &serde_json::Value, cpu: (f64, f64), wall: f64) {
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("{v} in {j}"));
    let secs = f(&j["seconds"]);
    assert!(
        secs > 0.0 && secs <= wall,
        "{secs} s in a {wall} s run: {j}"
    );
    let want = f(&j["bytes"]) * 8.0 / secs / 1e9;
    assert!((f(&j["gbps"]) - want).abs() <= 1e-9 * want, "{j}");
    let (u, s) = (
        f(&j["engine"]["cpu"]["user"]),
        f(&j["engine"]["cpu"]["system"]),
    );
    eprintln!("CPU: xtcp says user {u} system {s}; wait4: {cpu:?}");
    // Unrounded figures against wait4's: a tick's slack.
    assert!(u <= cpu.0 + TICK && s <= cpu.1 + TICK, "{cpu:?}: {j}");
    assert!(u > 0.0, "{j}");
    let total = f(&j["cpu_seconds"]);
    assert!((total - u - s).abs() < 1e-9, "{j}");
}

/// socat sending the pattern file → xtcp recv writing a file (SHA-256
/// compared), or with `discard`, dropping it.
fn recv_from_kernel(net: &TestNet, v6: bool, clip: bool, discard: bool, len: u64) {
    let (pfile, want) = pattern_file(len);
    let a: IpAddr = if v6 {
        net.a.ip6.into()
    } else {
        net.a.ip4.into()
    };
    let out_file = tmp(&format!("recv-{}-{v6}-{clip}.bin", net.a.iface));
    let mut args = vec!["recv".to_string()];
    args.extend(engine_args(net, clip));
    // With clipping off, no address: the listener serves both of A's
    // (frames laid out for IPv6's longer header, IPv4 offered 20 bytes more
    // in the same packets), and says so.
    let dual = !clip;
    if !dual {
        args.extend(["-B".into(), a.to_string()]);
    }
    args.extend(["-p".into(), "5202".into()]);
    if discard {
        args.push("--discard".into());
    } else {
        args.extend(["--out".into(), out_file.display().to_string()]);
    }
    let started = Instant::now();
    let xtcp = spawn_xtcp(net, &args);
    // Retry the connect while xtcp starts; B's segment counters from
    // before the attempt that got through (a refused one went to A's
    // kernel).
    let mut sent = false;
    let mut base = (0, 0, 0);
    // Until xtcp listens (bounded).
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        base = (
            tcp_mib(&net.b.ns, "InSegs"),
            tcp_out_segs(&net.b.ns),
            tcp_mib(&net.b.ns, "RetransSegs"),
        );
        let s = net
            .b
            .ns
            .command("socat")
            .args([
                "-u",
                &format!("OPEN:{}", pfile.display()),
                &socat_addr(a, 5202),
            ])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        if s.success() {
            sent = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(sent, "socat could not send to xtcp recv");
    let mut xtcp = xtcp;
    let (status, err, cpu) = wait_exit(&mut xtcp, 120, "xtcp recv did not exit");
    let wall = started.elapsed().as_secs_f64();
    assert!(status.success(), "xtcp recv failed: {err}");
    assert!(err.contains(&format!("received {len} bytes")), "{err}");
    let banner = if dual {
        format!(
            "listening on {}:5202 and [{}]:5202 ({}, copy mode)",
            net.a.ip4, net.a.ip6, net.a.iface
        )
    } else {
        format!(
            "listening on {} ({}, copy mode)",
            std::net::SocketAddr::new(a, 5202),
            net.a.iface
        )
    };
    assert!(err.contains(&banner), "{banner}: {err}");
    // The interface line's MSS is the one of the family it names: a
    // listener on both says both (IPv6's header is 20 bytes longer in the
    // same packets); it said IPv4's alone, also for an IPv6 transfer.
    let iface_line = line_of(&err, &format!("xtcp: {} MTU ", net.a.iface));
    let num = |word: &str| -> u64 {
        let at = iface_line
            .find(word)
            .unwrap_or_else(|| panic!("{word:?} in {iface_line}"));
        let n = iface_line[at + word.len()..]
            .split([' ', ','])
            .next()
            .unwrap();
        n.parse()
            .unwrap_or_else(|_| panic!("{n:?} after {word:?} in {iface_line}"))
    };
    let mss = num(" MSS ");
    let most = net.config.mtu as u64 - if v6 || dual { 60 } else { 40 };
    if dual {
        let ipv6 = num(" over IPv4, ");
        assert!(
            mss == ipv6 + 20 && ipv6 <= most && iface_line.contains(" over IPv6, "),
            "{iface_line}"
        );
    } else {
        assert!(
            mss <= most && !iface_line.contains(" over IPv"),
            "{iface_line}"
        );
    }
    // Its summary line against the test's own account: the seconds within
    // the process's life, the rate its bytes over them (as printed: to a
    // millisecond, three significant places), and the segments it counts
    // against those B's kernel counted the other way.
    let line = &common::plural_counts(line_of(&err, "xtcp: received "));
    let (secs, bits) = (quantity(line, " bytes in "), quantity(line, " = "));
    assert!(
        secs > 0.0 && secs <= wall,
        "{secs} s in a {wall} s run: {line}"
    );
    let rate = len as f64 * 8.0 / secs;
    assert!(
        (bits - rate).abs() <= rate * (0.005 + 0.0005 / secs),
        "{line}"
    );
    // Its CPU (", CPU X s (Y s/GiB)") within what the kernel accounted to
    // the process, and per GiB of what it received.
    let cpu_s = number(line, ", CPU ");
    assert!(
        cpu_s > 0.0 && cpu_s <= cpu.0 + cpu.1 + CPU_SLACK,
        "CPU {cpu_s} s, the kernel's {cpu:?}: {line}"
    );
    let per_gib = number(line, " s (");
    let per_gib_want = cpu_s / (len as f64 / GIB as f64);
    assert!(
        (per_gib - per_gib_want).abs() <= 0.005 + 0.005 * GIB as f64 / len as f64,
        "{per_gib} s/GiB for {cpu_s} s and {len} bytes: {line}"
    );
    // "… = RATE, S segments sent, N received (…": no retransmits, which
    // are the sender's to count.
    assert!(!line.contains("retransmit"), "{line}");
    assert_eq!(
        count_before(line, " segments sent, "),
        tcp_mib(&net.b.ns, "InSegs") - base.0,
        "segments sent: B's InSegs: {line}"
    );
    // Of what B sent, what did not reach xtcp its XDP line says was lost.
    let xdp = line_of(&err, "xtcp: XDP: ");
    let lost = count(xdp, "dropped at redirect") + count(xdp, "before XDP");
    assert_eq!(
        count(line, " segments sent, ") + lost,
        tcp_out_segs(&net.b.ns) - base.1,
        "segments received: B's OutSegs + RetransSegs: {line} {xdp}"
    );
    // Payload taken straight from the RX frames (each frame of a
    // multi-buffer packet in turn at MTU 9000 and 65535), not through TCP's
    // receive buffer: by the discard sink, all of it but what came out of
    // order, so all of it where nothing was lost or sent again; by the file
    // writer, what its pipe had room for at the time.
    let in_place: u64 = err
        .split(" bytes taken in place")
        .next()
        .and_then(|h| h.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no in-place count in {err}"));
    if discard {
        let resent = tcp_mib(&net.b.ns, "RetransSegs") - base.2;
        if lost == 0 && resent == 0 {
            assert_eq!(in_place, len, "nothing lost: {err}");
        }
        assert!(in_place >= len / 10 * 9, "{in_place} bytes in place: {err}");
        return;
    }
    assert!(in_place > 0, "{in_place} bytes in place: {err}");
    let got = sha256_file(&out_file);
    let _ = std::fs::remove_file(&out_file);
    assert_eq!(&got, want, "SHA-256 of what xtcp received");
}

/// An `--mss` above what the MTU carries is clamped, and said so (it was
/// taken without a word).
#[test]
fn an_mss_above_the_mtu_is_said_to_be_clamped() {
    let net = testnet(1500);
    let _socat = socat_receiver(&net, net.b.ip4.into(), 5236, "OPEN:/dev/null");
    let mut args = send_pattern_args(&net, 5236, 1 << 20);
    args.extend(["--mss".into(), "9000".into()]);
    let out = net.a.ns.command(XTCP).args(&args).output().unwrap();
    let err = ok(&out);
    assert!(
        err.contains(&format!(
            "--mss 9000 is more than {}'s MTU of 1500 carries: MSS 1460",
            net.a.iface
        )),
        "{err}"
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["engine"]["mss"], 1460, "{j}");
}

/// An IPv4-mapped IPv6 address (`::ffff:198.18.0.2`) is its IPv4 address,
/// as iperf3 takes it, for `-c` and `-B` (they were refused: no route to
/// it, no interface with it).
#[test]
fn an_ipv4_mapped_address_is_its_ipv4_one() {
    let net = testnet(1500);
    let port = 5237;
    let _socat = socat_receiver(&net, net.b.ip4.into(), port, "OPEN:/dev/null");
    let mut args = send_pattern_args(&net, port, 1 << 20);
    let c = args.iter().position(|a| a == "-c").unwrap();
    args[c + 1] = format!("::ffff:{}", net.b.ip4);
    args.extend(["-B".into(), format!("::ffff:{}", net.a.ip4)]);
    let out = net.a.ns.command(XTCP).args(&args).output().unwrap();
    ok(&out);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["bytes"].as_u64(), Some(1 << 20), "{j}");
    assert_eq!(
        j["connections"][0]["remote"],
        format!("{}:{port}", net.b.ip4),
        "{j}"
    );
}

/// `send -F -` reads standard input, `recv --out -` writes standard
/// output, as `-` means in other tools (they were taken as file names).
#[test]
fn a_dash_is_standard_input_and_output() {
    let net = testnet(1500);
    let len = 300_000;
    let mut data = vec![0u8; len];
    pattern_fill(SEED, 0, &mut data);
    let src = tmp("dash-src.bin");
    std::fs::write(&src, &data).unwrap();
    // send -F - → socat.
    let got = tmp("dash-sent.bin");
    let _ = std::fs::remove_file(&got);
    let mut socat = socat_receiver(
        &net,
        net.b.ip4.into(),
        5203,
        &format!("OPEN:{},creat,trunc", got.display()),
    );
    let mut args = vec!["send".to_string()];
    args.extend(engine_args(&net, true));
    args.extend([
        "-c".into(),
        net.b.ip4.to_string(),
        "-p".into(),
        "5203".into(),
    ]);
    args.extend(["-F".into(), "-".into()]);
    let out = net
        .a
        .ns
        .command(XTCP)
        .args(&args)
        .stdin(std::fs::File::open(&src).unwrap())
        .output()
        .unwrap();
    ok(&out);
    assert!(socat.0.wait().unwrap().success());
    assert!(std::fs::read(&got).unwrap() == data, "what socat got");
    // socat → recv --out -.
    let got = tmp("dash-received.bin");
    let mut xtcp = recv_listening(
        &net,
        5204,
        &["--out", "-"],
        Stdio::from(std::fs::File::create(&got).unwrap()),
    );
    let sent = net
        .b
        .ns
        .command("socat")
        .args([
            "-u",
            &format!("OPEN:{}", src.display()),
            &socat_addr(net.a.ip4.into(), 5204),
        ])
        .status()
        .unwrap();
    assert!(sent.success());
    let (status, err) = xtcp.wait_exit("xtcp recv did not exit");
    assert!(status.success(), "{err}");
    assert!(std::fs::read(&got).unwrap() == data, "what recv wrote");
    assert!(!Path::new("-").exists());
    for p in [&src, &got, &tmp("dash-sent.bin")] {
        let _ = std::fs::remove_file(p);
    }
}

fn matrix(mtu: u32) {
    let net = testnet(mtu);
    for v6 in [false, true] {
        for clip in [true, false] {
            let len = if !v6 && clip { GIB } else { QUARTER };
            send_to_kernel(&net, v6, clip, mtu == 9000 && !v6 && clip, len);
            recv_from_kernel(&net, v6, clip, false, len);
        }
    }
    recv_from_kernel(&net, false, true, true, QUARTER);
}

#[test]
fn byte_exact_both_ways_mtu_1500_ipv4_ipv6_clip_on_off() {
    matrix(1500);
}

#[test]
fn byte_exact_both_ways_mtu_9000_ipv4_ipv6_clip_on_off() {
    matrix(9000);
}

#[test]
fn byte_exact_both_ways_mtu_65535_ipv4_ipv6_clip_on_off() {
    matrix(65535);
}

#[test]
fn killed_kernel_peer_is_reported_and_nothing_stays_attached() {
    let net = testnet(1500);
    let mut socat = socat_receiver(&net, net.b.ip4.into(), 5201, "OPEN:/dev/null");
    let mut args = vec!["send".to_string()];
    args.extend(engine_args(&net, true));
    args.extend([
        "--connect".into(),
        format!("{}:5201", net.b.ip4),
        "--pattern".into(),
        "1".into(),
        "--bytes".into(),
        "1T".into(),
    ]);
    let mut xtcp = spawn_xtcp(&net, &args);
    // Killed once the transfer runs (socat has a connection).
    wait_ss(
        &net.b.ns,
        &["-t", "state", "established", "sport = :5201"],
        "xtcp's connection to socat",
        WAIT,
        Some(&mut socat.0),
    );
    socat.0.kill().unwrap();
    let (status, err, _) = wait_exit(&mut xtcp, 120, "xtcp send did not notice the dead peer");
    assert!(!status.success(), "exit status non-zero: {err}");
    assert!(
        err.contains("connection reset by peer") || err.contains("timed out"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_detached(&net);
}

#[test]
fn user_errors_are_clear() {
    let net = testnet(1500);
    let run = |args: &[&str]| net.a.ns.command(XTCP).args(args).output().unwrap();
    let fails = |out: Output, needle: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    fails(
        run(&[
            "send",
            "--iface",
            "nosuch0",
            "--connect",
            "198.18.0.2:1",
            "--pattern",
            "1",
            "--bytes",
            "1M",
        ]),
        "nosuch0",
    );
    fails(
        run(&[
            "send",
            "--iface",
            &net.a.iface,
            "--connect",
            "198.18.0.2:1",
            "--file",
            "/etc/hostname",
            "--connections",
            "2",
        ]),
        "needs --pattern",
    );
    // A peer that does not answer ARP fails within --connect-timeout
    // (not the kernel's three seconds, when that is less).
    fails(
        run(&[
            "send",
            "--iface",
            &net.a.iface,
            "-c",
            "198.18.0.77",
            "--connect-timeout",
            "300",
            "--pattern",
            "1",
            "--bytes",
            "1M",
        ]),
        "198.18.0.77 (next hop to 198.18.0.77) did not answer ARP within 300ms",
    );
    // A name is resolved (here through /etc/hosts): to an address the
    // kernel routes elsewhere, which is said.
    fails(
        run(&[
            "send",
            "--iface",
            &net.a.iface,
            "-c",
            "localhost",
            "--pattern",
            "1",
            "--bytes",
            "1M",
        ]),
        // (127.0.0.1 or ::1, whichever the resolver gives first)
        "through lo",
    );
    // A directory is refused before anything is sent (it opens, and only
    // a read would fail).
    fails(
        run(&[
            "send",
            "--iface",
            &net.a.iface,
            "--connect",
            "198.18.0.2:1",
            "--file",
            "/etc",
        ]),
        "/etc is a directory",
    );
    fails(
        run(&[
            "send",
            "--iface",
            &net.a.iface,
            "--connect",
            "198.18.0.2:1",
            "--pattern",
            "1",
        ]),
        "--bytes",
    );
    fails(
        run(&[
            "recv",
            "--iface",
            &net.a.iface,
            "--listen",
            "5201",
            "--out",
            "/dev/null",
            "--keep-listening",
        ]),
        "--keep-listening needs",
    );
    // Connection refused: nobody listens on the kernel side.
    fails(
        run(&[
            "send",
            "--iface",
            &net.a.iface,
            "--connect",
            &format!("{}:9", net.b.ip4),
            "--pattern",
            "1",
            "--bytes",
            "1M",
        ]),
        "connection refused",
    );
    // Values that cannot work, refused before anything is set up.
    let iface = net.a.iface.clone();
    let send = |extra: &[&str]| {
        let mut v = vec![
            "send",
            "--iface",
            &iface,
            "--connect",
            "198.18.0.1:9",
            "--pattern",
            "1",
            "--bytes",
            "1M",
        ];
        v.extend_from_slice(extra);
        run(&v)
    };
    fails(
        send(&["--mss", "0"]),
        "--mss 0 is too small: give at least 536",
    );
    fails(send(&["--mss", "10"]), "--mss 10 is too small");
    fails(send(&["--batch", "0"]), "--batch 0 must be between 1");
    fails(send(&["--batch", "4096", "--ring", "2048"]), "--batch 4096");
    fails(send(&["--connect-timeout", "0"]), "--connect-timeout");
    fails(
        run(&[
            "recv",
            "--iface",
            "nosuch0",
            "--listen",
            "5201",
            "--discard",
            "--batch",
            "0",
        ]),
        "--batch 0",
    );
    fails(
        run(&[
            "send",
            "--iface",
            &net.a.iface,
            "--connect",
            &format!("[{}]:9", net.b.ip6),
            "--pattern",
            "1",
            "--bytes",
            "1M",
            "--mss",
            "1000",
        ]),
        "--mss 1000 is too small for IPv6: give at least 1220",
    );
    // A route that leaves through another interface.
    fails(
        run(&[
            "send",
            "--iface",
            &net.a.iface,
            "--connect",
            "127.0.0.1:9",
            "--pattern",
            "1",
            "--bytes",
            "1M",
        ]),
        &format!(
            "routes 127.0.0.1 through lo (index 1), not {} (index",
            net.a.iface
        ),
    );
}

/// A UMEM the kernel will not map (here under an address-space limit) is
/// named with its size and what makes it: give fewer --frames (it said
/// "out of memory or the memlock limit is too low", and memlock is not
/// what a mapping needs).
#[test]
fn a_umem_too_large_to_map_says_to_give_fewer_frames() {
    let net = testnet(1500);
    let out = net
        .a
        .ns
        .command("prlimit")
        .args(["--as=1073741824", XTCP, "recv", "--iface", &net.a.iface])
        .args(["--discard", "--frames", "1048576", "--frame-size", "2048"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the kernel would not give 2048 MiB of memory (")
            && err.contains(
                "the UMEM is --frames × the frame size (1048576 × 2048 bytes): give fewer --frames"
            ),
        "{err}"
    );
}

/// `send`'s connections take their local ports from the namespace's
/// `net.ipv4.ip_local_port_range`, as the kernel's own connections do (it
/// took them from Linux's default range whatever that was set to); a range
/// with fewer ports than connections is said.
#[test]
fn local_ports_come_from_the_namespaces_range() {
    let net = testnet(1500);
    let port = 5241u16;
    net.a
        .ns
        .exec(&[
            "sysctl",
            "-q",
            "-w",
            "net.ipv4.ip_local_port_range=40000 40003",
        ])
        .unwrap();
    // A sink for each connection (socat forks one per connection).
    let _sinks = Reap(
        net.b
            .ns
            .command("socat")
            .args([
                "-u",
                &format!("TCP4-LISTEN:{port},bind={},reuseaddr,fork", net.b.ip4),
                "OPEN:/dev/null",
            ])
            .spawn()
            .expect("socat"),
    );
    wait_listening(&net.b.ns, port, WAIT, None);
    let send = |n: &str| {
        net.a
            .ns
            .command(XTCP)
            .args([
                "send",
                "--iface",
                &net.a.iface,
                "-c",
                &net.b.ip4.to_string(),
            ])
            .args(["-p", &port.to_string(), "--zeros", "-n", "64K"])
            .args(["-P", n, "--json"])
            .output()
            .unwrap()
    };
    let out = send("4");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut ports: Vec<u64> = j["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let local: SocketAddr = c["local"].as_str().unwrap().parse().unwrap();
            u64::from(local.port())
        })
        .collect();
    ports.sort_unstable();
    assert_eq!(ports, [40000, 40001, 40002, 40003], "{j}");
    let out = send("5");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "5 connections need 5 local ports, and this namespace's range \
             (net.ipv4.ip_local_port_range) is 40000-40003: 4 ports"
        ),
        "{err}"
    );
}

/// An interface that is down is refused with how to bring it up (recv
/// listened on it for ever, send said "no route"); one up without a
/// carrier (here the veth's other end down) is said, and recv listens.
#[test]
fn a_down_interface_is_refused_and_one_without_a_carrier_said() {
    let net = testnet(1500);
    let iface = net.a.iface.clone();
    let peer = net.b.ip4.to_string();
    let want = format!("{iface} is down: bring it up first (`ip link set {iface} up`)");
    net.a
        .ns
        .exec(&["ip", "link", "set", &iface, "down"])
        .unwrap();
    for args in [
        &["recv", "--iface", &iface, "--discard"][..],
        &[
            "send", "--iface", &iface, "-c", &peer, "--zeros", "-n", "1M",
        ][..],
    ] {
        let out = net.a.ns.command(XTCP).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(&want), "{args:?}: {err}");
    }
    net.a.ns.exec(&["ip", "link", "set", &iface, "up"]).unwrap();
    net.b
        .ns
        .exec(&["ip", "link", "set", &net.b.iface, "down"])
        .unwrap();
    let mut xtcp = recv_listening(&net, 5239, &["--discard"], Stdio::null());
    assert!(
        xtcp.err.lock().unwrap().contains(&format!(
            "{iface} is up but has no carrier: nothing arrives or leaves until it has"
        )),
        "{}",
        xtcp.err.lock().unwrap()
    );
    xtcp.child.0.kill().unwrap();
}

#[test]
fn sigint_closes_connections_and_detaches() {
    let net = testnet(1500);
    let mut xtcp = recv_listening(
        &net,
        5205,
        &["--discard", "--keep-listening", "--grace", "1"],
        Stdio::null(),
    );
    // A kernel sender that would run for minutes.
    let sender = net
        .b
        .ns
        .command("socat")
        .args(["-u", "OPEN:/dev/zero", &socat_addr(net.a.ip4.into(), 5205)])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _sender = Reap(sender);
    wait_ss(
        &net.b.ns,
        &["-t", "state", "established", "dport = :5205"],
        "socat's connection to xtcp",
        WAIT,
        None,
    );
    xtcp.signal("-INT");
    let (status, err) = xtcp.wait_exit("xtcp recv did not stop on SIGINT");
    // The connection in progress was closed (FIN), and reset after the
    // grace period since the sender went on sending: reported, non-zero.
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("aborted") || err.contains("interrupted"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_detached(&net);
}

/// Without --keep-listening `recv` takes one stream: a second connection
/// while the first is open is refused (its SYN answered with a reset: its
/// connect fails; counted), and the first ends well (the second used to
/// be served, then cut off when the first ended, and recv failed for it;
/// later let in, then reset once it had sent, so that a sender of a few
/// bytes took them for delivered).
#[test]
fn recv_refuses_a_second_connection_and_the_first_goes_on() {
    let net = testnet(1500);
    let port = 5237u16;
    let json = tmp("second-conn.json");
    let out = std::fs::File::create(&json).unwrap();
    let seed = SEED.to_string();
    let mut xtcp = recv_listening(&net, port, &["--verify", &seed, "--json"], Stdio::from(out));
    let dst = SocketAddr::new(net.a.ip4.into(), port);
    let len = 1_000_000;
    let first = acked_sender(&net, dst, SEED, len);
    let e = {
        let _g = net.b.ns.enter().unwrap();
        std::net::TcpStream::connect_timeout(&dst, WAIT)
            .expect_err("the second connection was not refused")
    };
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    drop(first);
    let (status, err) = xtcp.wait_exit("xtcp recv did not end with the first stream");
    assert!(status.success(), "{err}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(j["bytes"], len as u64, "{j}");
    assert_eq!(j["connections"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(j["engine"]["workers"][0]["refused"], 1, "{j}");
    let _ = std::fs::remove_file(&json);
}

/// Three namespaces of the test's own: A (xtcp), a router R, B (the
/// kernel receiver), over IPv4 and IPv6; A–R at MTU 9000, R–B at 1500 on
/// R's side (B's end 9000, so that B announces a jumbo MSS): R drops A's
/// larger packets and answers with ICMP "fragmentation needed" / "packet
/// too big" (unless [`Routed::mute_icmp`]). Removed on drop (the
/// namespaces take their veths).
struct Routed {
    a: Netns,
    r: Netns,
    b: Netns,
}

impl Routed {
    const B: &'static str = "198.18.212.2";
    const B6: &'static str = "2001:2:212::2";

    /// `queues`: A's link to R has that many queues each way.
    fn new(queues: u32) -> Routed {
        let tag = format!("{:x}", std::process::id() % 0xfffff);
        let n = Routed {
            a: Netns::new(&format!("xtcp-ra{tag}")).unwrap(),
            r: Netns::new(&format!("xtcp-rr{tag}")).unwrap(),
            b: Netns::new(&format!("xtcp-rb{tag}")).unwrap(),
        };
        let (ra, rr0, rr1, rb) = (
            format!("ra{tag}"),
            format!("rq{tag}"),
            format!("rs{tag}"),
            format!("rb{tag}"),
        );
        let ip = |ns: &Netns, args: &[&str]| {
            ns.ip(args).unwrap();
        };
        let q = queues.to_string();
        ip(
            &n.a,
            &[
                "link",
                "add",
                &ra,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                &rr0,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "netns",
                n.r.name(),
            ],
        );
        ip(
            &n.r,
            &[
                "link",
                "add",
                &rr1,
                "type",
                "veth",
                "peer",
                "name",
                &rb,
                "netns",
                n.b.name(),
            ],
        );
        for (ns, dev, addr, addr6, mtu) in [
            (&n.a, &ra, "198.18.211.1/24", "2001:2:211::1/64", "9000"),
            (&n.r, &rr0, "198.18.211.2/24", "2001:2:211::2/64", "9000"),
            (&n.r, &rr1, "198.18.212.1/24", "2001:2:212::1/64", "1500"),
            (&n.b, &rb, "198.18.212.2/24", "2001:2:212::2/64", "9000"),
        ] {
            ip(ns, &["link", "set", dev, "mtu", mtu]);
            ip(ns, &["addr", "add", addr, "dev", dev]);
            ip(ns, &["-6", "addr", "add", addr6, "dev", dev, "nodad"]);
            ip(ns, &["link", "set", dev, "up"]);
            ns.exec(&[
                "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off",
            ])
            .unwrap();
        }
        ip(
            &n.a,
            &["route", "add", "198.18.212.0/24", "via", "198.18.211.2"],
        );
        ip(
            &n.b,
            &["route", "add", "198.18.211.0/24", "via", "198.18.212.1"],
        );
        ip(
            &n.a,
            &[
                "-6",
                "route",
                "add",
                "2001:2:212::/64",
                "via",
                "2001:2:211::2",
            ],
        );
        ip(
            &n.b,
            &[
                "-6",
                "route",
                "add",
                "2001:2:211::/64",
                "via",
                "2001:2:212::1",
            ],
        );
        for s in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
            n.r.exec(&["sysctl", "-qw", s]).unwrap();
        }
        n
    }

    /// R's ICMP goes nowhere from now on (a route to nowhere for what R
    /// itself sends over ICMP): a black hole as firewalls make them.
    fn mute_icmp(&self) {
        for v in ["-4", "-6"] {
            let proto = if v == "-4" { "icmp" } else { "ipv6-icmp" };
            self.r
                .ip(&[v, "rule", "add", "ipproto", proto, "lookup", "100"])
                .unwrap();
            self.r
                .ip(&[v, "route", "add", "blackhole", "default", "table", "100"])
                .unwrap();
        }
    }

    fn iface_a(&self) -> String {
        format!("ra{:x}", std::process::id() % 0xfffff)
    }

    /// `xtcp CMD --iface <A's> --bind copy` in A, bounded by a minute.
    fn xtcp(&self, cmd: &str) -> Command {
        let mut c = self.a.command("timeout");
        c.args([
            "60",
            XTCP,
            cmd,
            "--iface",
            &self.iface_a(),
            "--bind",
            "copy",
        ]);
        c
    }
}

/// A path whose MTU (1500, a router's) is below the ends' (9000):
/// - the router's ICMP "fragmentation needed" / "packet too big" reaches
///   xtcp (its XDP program steers it there): the MSS steps down to the
///   MTU reported at once, without a timeout, over IPv4 and IPv6;
/// - where that ICMP never comes, xtcp finds the black hole by its
///   timeouts and steps down all the same;
/// - with the path's MTU on the route (as both reports advise), the
///   segments fit it from the start: nothing is sent again.
///
/// The stream arrives whole each time, and the report says what happened
/// and what to do. `client` takes the ICMP too; and with two queues, a
/// worker forwards the ICMP about the other's connections to it.
#[test]
fn send_through_a_smaller_mtu_hop_steps_the_mss_down_or_takes_the_routes() {
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Case {
        Icmp,
        Icmp6,
        BlackHole,
        RouteMtu,
    }
    let net = Routed::new(1);
    let port = 5241u16;
    let len = 4u64 << 20;
    let mut want = vec![0u8; len as usize];
    pattern_fill(SEED, 0, &mut want);
    // `xtcp client ARGS -J` against a one-off `iperf3 -s` in B, through
    // the router: its JSON and standard error.
    let client = |args: &[&str]| {
        let mut server = Reap(
            net.b
                .command("iperf3")
                .args(["-s", "-1", "-B", Routed::B, "-p", &port.to_string()])
                .stdout(Stdio::null())
                .spawn()
                .expect("iperf3 -s"),
        );
        wait_listening(&net.b, port, WAIT, Some(&mut server.0));
        let out = net
            .xtcp("client")
            .args(["-c", Routed::B, "-p", &port.to_string(), "-J"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "client {args:?}: {err}");
        let _ = server.0.wait();
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("-J");
        (j, err)
    };
    // `client` (iperf3's) takes the ICMP as `send` does, and says so.
    let (j, err) = client(&["-n", "4M"]);
    // The data connection (the control connection's segments are small).
    let data = &j["xtcp"]["connections"][1];
    assert_eq!(data["mss_path_mtu_steps"], 1, "{j}");
    assert_eq!(data["packet_mtu"], 1500, "{j}");
    assert_eq!(data["send_mss"], 1448, "{j}");
    // Each interval's `pmtu` is the connection's, as iperf3's is the
    // socket's (not the interface's 9000).
    let ivs = j["intervals"].as_array().unwrap();
    assert!(!ivs.is_empty(), "{j}");
    for iv in ivs {
        assert_eq!(iv["streams"][0]["pmtu"], 1500, "{iv}");
    }
    // Named by iperf3's stream id, as the report names it.
    assert!(
        err.contains(&format!(
            "xtcp: stream 1 → {}:{port}: the path's MTU is 1500 (a hop said so: ICMP \
             \"packet too big\")",
            Routed::B
        )),
        "{err}"
    );
    // The router's report expiring each second (--pmtu-expires 1) in a
    // 3-second test: the MSS goes back up, and the router refuses the
    // large segments again; at the end it is down, or back up where the
    // test ended before the router's next refusal came.
    let (j, err) = client(&["-t", "3", "--pmtu-expires", "1"]);
    let data = &j["xtcp"]["connections"][1];
    let n = |k: &str| data[k].as_u64().unwrap_or_else(|| panic!("{k} in {data}"));
    let (steps, raises) = (n("mss_path_mtu_steps"), n("mss_path_mtu_raises"));
    eprintln!("--pmtu-expires 1: {data}");
    assert!(raises >= 1, "{data}");
    assert!(steps == raises + 1 || steps == raises, "{data}");
    let down = steps > raises;
    assert_eq!(n("packet_mtu"), if down { 1500 } else { 9000 }, "{data}");
    assert_eq!(n("mss_black_hole_steps"), 0, "{data}");
    let said = if down {
        "going back up in between as the report expired (--pmtu-expires)"
    } else {
        "once that report had expired (--pmtu-expires) it went back up"
    };
    assert!(err.contains(said), "{err}");
    for case in [Case::Icmp, Case::Icmp6, Case::BlackHole, Case::RouteMtu] {
        let (b, listen) = if case == Case::Icmp6 {
            (
                Routed::B6,
                format!("TCP6-LISTEN:{port},bind=[{}],reuseaddr", Routed::B6),
            )
        } else {
            (
                Routed::B,
                format!("TCP4-LISTEN:{port},bind={},reuseaddr", Routed::B),
            )
        };
        match case {
            Case::BlackHole => net.mute_icmp(),
            Case::RouteMtu => {
                net.a
                    .ip(&[
                        "route",
                        "replace",
                        "198.18.212.0/24",
                        "via",
                        "198.18.211.2",
                        "mtu",
                        "1500",
                    ])
                    .unwrap();
            }
            _ => {}
        }
        let got = tmp("routed.bin");
        let mut socat = Reap(
            net.b
                .command("socat")
                .args([
                    "-u",
                    &listen,
                    &format!("OPEN:{},creat,trunc", got.display()),
                ])
                .spawn()
                .expect("socat"),
        );
        wait_listening(&net.b, port, WAIT, Some(&mut socat.0));
        let iface = net.iface_a();
        // R's IPv4 packets it could not forward for their size (DF set).
        let frag_fails = common::ip_mib(&net.r, "FragFails");
        let out = net
            .xtcp("send")
            .args(["-c", b, "-p", &port.to_string()])
            .args([
                "--pattern",
                &SEED.to_string(),
                "-n",
                &len.to_string(),
                "--json",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{case:?}: {err}");
        let st = socat.0.wait().unwrap();
        assert!(st.success(), "socat: {st}");
        assert!(std::fs::read(&got).unwrap() == want, "{case:?}: what B got");
        let _ = std::fs::remove_file(&got);
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
        let c = &j["connections"][0];
        // The router's messages, counted where they came in.
        let too_big: u64 = j["engine"]["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["too_big"].as_u64().unwrap())
            .sum();
        // 1500 less the IP and TCP headers and the timestamps.
        let mss = if case == Case::Icmp6 { 1428 } else { 1448 };
        assert_eq!(c["mss"], mss, "{case:?}: {j}");
        assert_eq!(c["packet_mtu"], 1500, "{case:?}: {j}");
        let steps = (&c["mss_path_mtu_steps"], &c["mss_black_hole_steps"]);
        match case {
            Case::Icmp | Case::Icmp6 => {
                assert_eq!(steps, (&1.into(), &0.into()), "{case:?}: {j}");
                assert!(too_big >= 1, "{case:?}: {j}");
                if case == Case::Icmp {
                    // R counts what it refused (the count RouteMtu's
                    // case holds still).
                    assert!(common::ip_mib(&net.r, "FragFails") > frag_fails, "{j}");
                }
                assert!(
                    err.contains(&format!(
                        "the path's MTU is 1500 (a hop said so: ICMP \"packet too big\"), and \
                         the MSS stepped down to {mss} bytes"
                    )),
                    "{case:?}: {err}"
                );
                let route = if case == Case::Icmp6 {
                    format!(
                        "`ip route replace 2001:2:212::2 via 2001:2:211::2 dev {iface} mtu 1500`"
                    )
                } else {
                    format!("`ip route replace 198.18.212.2 via 198.18.211.2 dev {iface} mtu 1500`")
                };
                assert!(err.contains(&route), "{case:?}: {err}");
                assert!(!err.contains("timeout after timeout"), "{err}");
            }
            Case::BlackHole => {
                assert_eq!(steps, (&0.into(), &1.into()), "{case:?}: {j}");
                assert!(
                    err.contains(
                        "large segments were lost timeout after timeout, and the MSS \
                         stepped down once to 1448 bytes (packets of 1500)"
                    ),
                    "{err}"
                );
                // The advice, which the next round follows.
                assert!(
                    err.contains(&format!(
                        "`ip route replace 198.18.212.2 via 198.18.211.2 dev {iface} mtu 1500`"
                    )),
                    "{err}"
                );
            }
            Case::RouteMtu => {
                assert_eq!(steps, (&0.into(), &0.into()), "{case:?}: {j}");
                // No segment too large for the route left A: R refused
                // none (a loss probe may still repeat one, when an ACK is
                // late, so retransmits are not the measure).
                assert_eq!(too_big, 0, "{j}");
                assert_eq!(
                    common::ip_mib(&net.r, "FragFails"),
                    frag_fails,
                    "R refused packets too large for B's link: {j}"
                );
                assert!(
                    err.contains("the route to the peer has an MTU of 1500"),
                    "{err}"
                );
            }
        }
    }
    drop(net);
    // Two queues, connections opened on both workers: R's ICMP (one flow
    // to the kernel's hash, so on one queue) is about connections of
    // both, and the worker it reaches forwards it to the other.
    let net = Routed::new(2);
    let mut sink = Reap(
        net.b
            .command("socat")
            .args([
                "-u",
                &format!("TCP4-LISTEN:{port},bind={},reuseaddr,fork", Routed::B),
                "OPEN:/dev/null",
            ])
            .spawn()
            .expect("socat"),
    );
    wait_listening(&net.b, port, WAIT, Some(&mut sink.0));
    let out = net
        .xtcp("send")
        .args([
            "--queues",
            "2",
            "-P",
            "4",
            "-c",
            Routed::B,
            "-p",
            &port.to_string(),
        ])
        .args(["--pattern", &SEED.to_string(), "-n", "1M", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "two queues: {err}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
    for c in j["connections"].as_array().unwrap() {
        assert_eq!(c["mss_path_mtu_steps"], 1, "{j}");
        assert_eq!(c["mss_black_hole_steps"], 0, "{j}");
    }
    let workers = j["engine"]["workers"].as_array().unwrap();
    let sum = |k: &str| -> u64 { workers.iter().map(|w| w[k].as_u64().unwrap()).sum() };
    assert!(sum("too_big_forwarded") >= 1, "{j}");
    // A router's ICMP for each refused packet of a window: those about one
    // flow in a turn are folded into one, and none of four flows' dropped.
    let port_sum = |k: &str| -> u64 {
        workers
            .iter()
            .map(|w| {
                w["port"][k]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{k} in {w}"))
            })
            .sum()
    };
    assert_eq!(port_sum("drop_too_big"), 0, "{j}");
    assert!(
        err.contains("xtcp: connections 0–3 → 198.18.212.2:5241: the path's MTU is 1500"),
        "{err}"
    );
    drop(sink);
    drop(net);
}

/// `send --file FILE -n BYTES` sends the file's first BYTES (a count that
/// ends inside a frame and a read), as `client -F -n` does; more than the
/// file has, or -n with a FIFO, is refused before a connection is made.
#[test]
fn send_file_n_sends_the_files_first_bytes() {
    let net = testnet(1500);
    let (file, _) = pattern_file(QUARTER);
    let n: u64 = 3_000_001;
    let port = 5244u16;
    let got = tmp("file-n.bin");
    let _socat = socat_receiver(
        &net,
        net.b.ip4.into(),
        port,
        &format!("OPEN:{},creat,trunc", got.display()),
    );
    let send = |extra: &[&str]| {
        let args = send_to_b(&net, port, extra);
        net.a
            .ns
            .command("timeout")
            .arg("60")
            .arg(XTCP)
            .args(&args)
            .output()
            .unwrap()
    };
    let out = send(&["--file", file.to_str().unwrap(), "-n", &n.to_string()]);
    ok(&out);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
    assert_eq!(j["bytes"].as_u64(), Some(n), "{j}");
    // socat exits at the stream's end: its file is whole once it has.
    let deadline = Instant::now() + WAIT;
    while std::fs::metadata(&got).map(|m| m.len()).unwrap_or(0) < n {
        assert!(Instant::now() < deadline, "B did not get {n} bytes");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut want = vec![0u8; n as usize];
    pattern_fill(SEED, 0, &mut want);
    assert!(std::fs::read(&got).unwrap() == want, "B got other bytes");
    let _ = std::fs::remove_file(&got);
    // More than the file has: refused, nothing sent.
    let out = send(&[
        "--file",
        file.to_str().unwrap(),
        "-n",
        &(QUARTER + 1).to_string(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "-n {}: {} has only {QUARTER} bytes",
            QUARTER + 1,
            file.display()
        )),
        "{err}"
    );
    let fifo = fifo("file-n.fifo");
    let out = send(&["--file", fifo.to_str().unwrap(), "-n", "1M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("-n goes with a regular file"), "{err}");
    let _ = std::fs::remove_file(&fifo);
}

/// `xtcp send` to B's IPv4 address and `port` in copy mode, `--json`,
/// then `extra`: its arguments.
fn send_to_b(net: &TestNet, port: u16, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["send".to_string()];
    args.extend(engine_args(net, false));
    let (b, port) = (net.b.ip4.to_string(), port.to_string());
    args.extend(["-c", &b, "-p", &port, "--json"].map(str::to_owned));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A handshake that needed a retransmitted SYN is said, with how long it
/// took (the seconds of the transfer begin after it): B's answer to the
/// first SYN has no route (a blackhole route in B) until B's kernel has
/// taken that SYN; only a SYN sent again, a second later at the least,
/// can then complete the handshake.
#[test]
fn a_slow_handshake_is_said_with_its_time() {
    let net = testnet(1500);
    let port = 5243u16;
    let _sink = socat_receiver(&net, net.b.ip4.into(), port, "OPEN:/dev/null");
    let a = format!("{}/32", net.a.ip4);
    net.b.ns.ip(&["route", "add", "blackhole", &a]).unwrap();
    let syns0 = tcp_mib(&net.b.ns, "InSegs");
    let args = send_to_b(&net, port, &["--zeros", "-n", "1M"]);
    let started = Instant::now();
    let mut send = Watched::spawn(&net, &args, Stdio::piped());
    let deadline = Instant::now() + WAIT;
    while tcp_mib(&net.b.ns, "InSegs") == syns0 {
        assert!(Instant::now() < deadline, "B never took the SYN");
        std::thread::sleep(Duration::from_millis(5));
    }
    net.b.ns.ip(&["route", "del", "blackhole", &a]).unwrap();
    let (status, err) = send.wait_exit("xtcp send did not end");
    let wall = started.elapsed().as_secs_f64();
    assert!(status.success(), "{err}");
    let j = json_stdout(&mut send);
    let h = j["connections"][0]["handshake_seconds"].as_f64().unwrap();
    // The first retransmission of a SYN waits a second (RFC 6298).
    assert!((1.0..wall).contains(&h), "{h} s of a {wall} s run: {j}");
    assert!(
        err.contains(&format!(
            "xtcp: connection 0 → {}:{port}: the handshake took ",
            net.b.ip4
        )),
        "{err}"
    );
    assert!(j["seconds"].as_f64().unwrap() + h <= wall, "{j}");
}

/// `send`/`recv --json` that fail before their report still print a JSON
/// document on standard output (as iperf3 `-J` does): `ok` false and the
/// error, the same words as on standard error; options that do not go
/// together too. One that fails after (its input unreadable) has the
/// OS's words for it in the connection's result.
#[test]
fn json_runs_that_fail_before_their_report_print_the_error_as_json() {
    let net = testnet(1500);
    // No host answers ARP for this address on B's link.
    let send = net
        .a
        .ns
        .command("timeout")
        .args(["30", XTCP, "send", "-J", "--zeros", "-n", "1M"])
        .args(["-c", "198.18.0.77", "--connect-timeout", "1000"])
        .output()
        .unwrap();
    let recv = net
        .a
        .ns
        .command("timeout")
        .args([
            "30",
            XTCP,
            "recv",
            "-J",
            "--discard",
            "--iface",
            "no-such-if0",
        ])
        .output()
        .unwrap();
    // Options that do not go together (exit status 2).
    let usage = net
        .a
        .ns
        .command("timeout")
        .args(["30", XTCP, "send", "-J", "--pattern", "1"])
        .args(["-c", &net.b.ip4.to_string()])
        .output()
        .unwrap();
    // recv's stream on standard output, where --json goes too (it exited
    // 1, as an error of the run).
    let usage_recv = net
        .a
        .ns
        .command("timeout")
        .args(["30", XTCP, "recv", "-J", "--iface", &net.a.iface])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    // The input cannot be read (the kernel's EIO at offset 0 of a
    // process's memory): the OS's words, not only the kind's.
    let _sink = socat_receiver(&net, net.b.ip4.into(), 5229, "OPEN:/dev/null");
    let unreadable = net
        .a
        .ns
        .command("timeout")
        .args(["30", XTCP, "send", "-J", "-F", "/proc/self/mem"])
        .args(["-c", &net.b.ip4.to_string(), "-p", "5229"])
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&unreadable.stdout).unwrap();
    assert_eq!(
        j["connections"][0]["result"], "reading the input failed: Input/output error (os error 5)",
        "{j}"
    );
    for (what, out, code) in [
        ("send", send, 1),
        ("recv", recv, 1),
        ("send --pattern without -n", usage, 2),
        (
            "recv --json with its stream on standard output",
            usage_recv,
            2,
        ),
        ("send -F /proc/self/mem", unreadable, 1),
    ] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{what}: {err}");
        let j: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{what}: no JSON ({e}): {err}"));
        assert_eq!(j["ok"], false, "{what}: {j}");
        let e = j["error"].as_str().unwrap();
        assert!(
            err.contains(&format!("xtcp: error: {e}")),
            "{what}: {j} {err}"
        );
    }
}

/// The loopback interface is refused by every command that runs the
/// engine, with what to use instead (a listener on it answered nothing,
/// a sender waited for ARP), and nothing is left attached.
#[test]
fn the_loopback_interface_is_refused_with_what_to_do() {
    let net = testnet(1500);
    for args in [
        &["serve", "--iface", "lo", "-1"][..],
        &["client", "--iface", "lo", "-c", "127.0.0.1", "-t", "1"],
        &[
            "send",
            "--iface",
            "lo",
            "-c",
            "127.0.0.1",
            "--zeros",
            "-n",
            "1M",
        ],
        &["recv", "--iface", "lo", "--discard", "-B", "127.0.0.1"],
    ] {
        let out = net
            .a
            .ns
            .command("timeout")
            .arg("60")
            .arg(XTCP)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(
                "lo is the loopback interface: xtcp runs TCP with another host over a network \
                 interface, and on loopback this host only talks to itself; give --iface a \
                 network interface, or, to try xtcp on one machine, a veth pair between two \
                 network namespaces (README, \"Trying it on one machine\")"
            ),
            "{args:?}: {err}"
        );
    }
    let links = net
        .a
        .ns
        .command("ip")
        .args(["link", "show", "lo"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(!links.contains("xdp"), "{links}");
}

/// `-B` with an address of another interface than the one xtcp runs on is
/// refused before anything is set up, naming the interface that holds it
/// (recv used to listen on `lo` for an address of the veth's, and send to
/// connect from an address whose answers came in elsewhere).
#[test]
fn a_bind_address_of_another_interface_is_refused() {
    let net = testnet(1500);
    let a = net.a.ip4.to_string();
    let recv = net
        .a
        .ns
        .command("timeout")
        .args(["30", XTCP, "recv", "--discard", "-B", &a, "--iface", "lo"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&recv.stderr);
    assert_eq!(recv.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "-B {a} is an address of {}, not of lo: what is sent to it would come in on {}",
            net.a.iface, net.a.iface
        )),
        "{err}"
    );
    let send = net
        .a
        .ns
        .command("timeout")
        .args(["30", XTCP, "send", "-B", "127.0.0.1", "--zeros", "-n", "1M"])
        .args(["-c", &net.b.ip4.to_string()])
        .output()
        .unwrap();
    // `-c HOST%DEV` names the interface, as --iface does.
    let dev = net
        .a
        .ns
        .command("timeout")
        .args(["30", XTCP, "send", "--zeros", "-n", "1M", "--iface", "lo"])
        .args(["-c", &format!("{}%{}", net.b.ip4, net.a.iface)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&dev.stderr);
    assert!(
        err.contains(&format!(
            "-c …%{} and --iface lo name two interfaces",
            net.a.iface
        )),
        "{err}"
    );
    let err = String::from_utf8_lossy(&send.stderr);
    assert_eq!(send.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "-B 127.0.0.1 is an address of lo, not of {}: the peer's answers to a connection \
             from it would come in on lo",
            net.a.iface
        )),
        "{err}"
    );
    assert_detached(&net);
}

/// A receiver that reads the whole stream and then keeps its side open
/// (no FIN, for a minute) does not hold `send` up: the stream and its FIN
/// acknowledged, send waits `--grace` for the peer's FIN, then lets the
/// connection go, exits 0 while the receiver still holds its socket, says
/// so, and its seconds end at the acknowledgement, not after the wait.
#[test]
fn send_lets_go_of_a_receiver_that_keeps_its_side_open() {
    let net = testnet(1500);
    let port = 5239u16;
    let got = tmp("kept-open.bin");
    let eof = tmp("kept-open.eof");
    let _ = std::fs::remove_file(&eof);
    let script = format!(
        r#"
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("{b}", {port}))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
with open("{got}", "wb") as f:
    while True:
        d = c.recv(65536)
        if not d:
            break
        f.write(d)
open("{eof}", "w").write("eof")
time.sleep(60)
"#,
        b = net.b.ip4,
        got = got.display(),
        eof = eof.display(),
    );
    let mut peer = Reap(
        net.b
            .ns
            .command("timeout")
            .args(["90", "python3", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_listening(&net.b.ns, port, WAIT, Some(&mut peer.0));
    let len = 1_000_000u64;
    let mut args = vec!["send".to_string()];
    args.extend(engine_args(&net, false));
    args.extend([
        "--connect".into(),
        SocketAddr::new(net.b.ip4.into(), port).to_string(),
        "--pattern".into(),
        SEED.to_string(),
        "--bytes".into(),
        len.to_string(),
        "--grace".into(),
        "1".into(),
        "--json".into(),
    ]);
    let started = Instant::now();
    let out = net
        .a
        .ns
        .command("timeout")
        .arg("60")
        .arg(XTCP)
        .args(&args)
        .output()
        .unwrap();
    let wall = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    // The receiver had the whole stream (it says so once it read to the
    // end, which its kernel acknowledged before send left), and holds its
    // socket still.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !eof.exists() {
        assert!(
            Instant::now() < deadline,
            "the receiver saw no end of stream: {err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        peer.0.try_wait().unwrap().is_none(),
        "the receiver closed: send waited for it"
    );
    let mut want = vec![0u8; len as usize];
    pattern_fill(SEED, 0, &mut want);
    assert!(
        std::fs::read(&got).unwrap() == want,
        "what the receiver got"
    );
    assert!(
        err.contains("the stream was whole and acknowledged, but the receiver had not closed its side --grace later: let go"),
        "{err}"
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
    assert_eq!(j["bytes"].as_u64(), Some(len), "{j}");
    assert_eq!(j["connections"][0]["result"], "ok", "{j}");
    assert_eq!(j["connections"][0]["peer_open"], true, "{j}");
    // The second of --grace waited after the acknowledgement is in the
    // run, not in its seconds.
    let secs = j["seconds"].as_f64().unwrap();
    assert!(
        secs + 1.0 <= wall,
        "{secs} s reported of a {wall} s run: {j}"
    );
    drop(peer);
    let _ = std::fs::remove_file(&got);
    let _ = std::fs::remove_file(&eof);
}

/// `recv -n` holds each stream to its length, and `--verify` says what it
/// checked: a stream as long as -n and of the pattern passes (the JSON's
/// `verified` and `expected_bytes`); a short one fails, and its --out FILE
/// stays as it was; an empty stream fails --verify without -n, which
/// passes a stream of the pattern and says that its length went
/// unchecked.
#[test]
fn recv_n_checks_each_streams_length_and_verify_says_what_it_checked() {
    let net = testnet(1500);
    let port = 5238u16;
    let dst = SocketAddr::new(net.a.ip4.into(), port);
    let seed = SEED.to_string();
    let len = 300_000;
    let n = len.to_string();
    let longer = (len + 1000).to_string();
    // recv with `args`, fed `len` bytes of the pattern by a kernel sender
    // that then closes: its exit status and standard error.
    let fed = |args: &[&str], stdout: Stdio| {
        let mut xtcp = recv_listening(&net, port, args, stdout);
        drop(acked_sender(&net, dst, SEED, len));
        xtcp.wait_exit("xtcp recv did not end with the stream")
    };
    // As long as -n, the pattern: verified.
    let json = tmp("verify-n.json");
    let out = std::fs::File::create(&json).unwrap();
    let (status, err) = fed(&["--verify", &seed, "-n", &n, "--json"], Stdio::from(out));
    assert!(status.success(), "{err}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(j["verified"]["seed"], SEED, "{j}");
    assert_eq!(j["verified"]["bytes"], len as u64, "{j}");
    assert_eq!(j["expected_bytes"], len as u64, "{j}");
    let _ = std::fs::remove_file(&json);
    // Shorter than -n: fails, and says by how much.
    let (status, err) = fed(&["--verify", &seed, "-n", &longer], Stdio::null());
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "the stream held {len} bytes, fewer than the {longer} of -n"
        )),
        "{err}"
    );
    assert!(!err.contains("match the pattern"), "{err}");
    // Into a file: FILE stays as it was, what came is in FILE.partial.
    let file = tmp("short-n.out");
    std::fs::write(&file, b"as it was").unwrap();
    let f = file.to_string_lossy().into_owned();
    let (status, err) = fed(&["--out", &f, "-n", &longer], Stdio::null());
    assert!(!status.success(), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"as it was", "{err}");
    let partial = PathBuf::from(format!("{f}.partial"));
    assert_pattern_file(&partial, len, &err);
    // A run that completes replaces FILE, and says that the older
    // FILE.partial is still there.
    let (status, err) = fed(&["--out", &f, "-n", &n], Stdio::null());
    assert!(status.success(), "{err}");
    assert_pattern_file(&file, len, &err);
    assert!(
        err.contains(&format!(
            "xtcp: {} is from an earlier run that did not complete",
            partial.display()
        )),
        "{err}"
    );
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&partial);
    // An empty stream: nothing was checked.
    let mut xtcp = recv_listening(&net, port, &["--verify", &seed], Stdio::null());
    {
        let _g = net.b.ns.enter().unwrap();
        drop(std::net::TcpStream::connect_timeout(&dst, WAIT).unwrap());
    }
    let (status, err) = xtcp.wait_exit("xtcp recv did not end with the stream");
    assert!(!status.success(), "{err}");
    assert!(err.contains("--verify: the stream was empty"), "{err}");
    // The pattern without -n: passes, its length said to be unchecked.
    let (status, err) = fed(&["--verify", &seed], Stdio::null());
    assert!(status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "xtcp: --verify {SEED}: the {len} bytes received match the pattern (their length \
             unchecked: -n BYTES checks it)"
        )),
        "{err}"
    );
}

/// A stream that fails recv's check while it comes (longer than `-n`, or
/// not of `--verify`'s pattern) is reset at once: its sender learns that
/// it failed (it wrote 16 MiB and got a reset, where it used to end well
/// while recv wrote the whole stream and only then failed), recv says
/// why, and what it wrote of the longer stream stops near `-n`.
#[test]
fn a_stream_that_fails_its_check_is_reset_at_once() {
    let net = testnet(1500);
    let port = 5239u16;
    let dst = SocketAddr::new(net.a.ip4.into(), port);
    const LEN: usize = 16 << 20;
    let n = 300_000u64;
    let file = tmp("longer-than-n.out");
    let f = file.to_string_lossy().into_owned();
    let partial = PathBuf::from(format!("{f}.partial"));
    let wrong = (SEED + 1).to_string();
    let n_arg = n.to_string();
    for args in [
        vec!["--out", f.as_str(), "-n", n_arg.as_str()],
        vec!["--verify", wrong.as_str()],
    ] {
        let mut xtcp = recv_listening(&net, port, &args, Stdio::null());
        let mut data = vec![0u8; LEN];
        pattern_fill(SEED, 0, &mut data);
        let told = {
            let _g = net.b.ns.enter().unwrap();
            let mut s = std::net::TcpStream::connect_timeout(&dst, WAIT).unwrap();
            s.set_read_timeout(Some(WAIT)).unwrap();
            s.set_write_timeout(Some(WAIT)).unwrap();
            match s.write_all(&data) {
                Err(e) => e,
                // All of it in B's send buffer before the reset came: it
                // shows when the peer's answer to our FIN is read.
                Ok(()) => {
                    s.shutdown(std::net::Shutdown::Write).unwrap();
                    std::io::Read::read(&mut s, &mut [0u8; 1]).expect_err("a reset, not recv's FIN")
                }
            }
        };
        assert!(
            matches!(
                told.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
            "{args:?}: {told}"
        );
        let (status, err) = xtcp.wait_exit("xtcp recv did not end with the stream");
        assert!(!status.success(), "{args:?}: {err}");
        if args[0] == "--out" {
            let line = line_of(&err, "xtcp: error: connection 0 ");
            assert!(
                line.contains(&format!(
                    "the stream brought more than the {n} bytes of -n: reset after "
                )),
                "{err}"
            );
            let after = count(line, "reset after");
            let written = std::fs::metadata(&partial).unwrap().len();
            assert_eq!(written, after, "{err}");
            assert!(after > n && after < LEN as u64 / 2, "{err}");
        } else {
            assert!(
                err.contains("--verify failed: the stream differs from the pattern at byte 0"),
                "{err}"
            );
        }
    }
    let _ = std::fs::remove_file(&partial);
}

/// `recv --keep-listening` says how each connection ended as it ends (a
/// failed `--verify` showed only at Ctrl-C).
#[test]
fn keep_listening_says_how_each_connection_ended() {
    let net = testnet(1500);
    let port = 5235u16;
    let seed = SEED.to_string();
    let mut xtcp = recv_listening(
        &net,
        port,
        &["--verify", &seed, "--keep-listening"],
        Stdio::null(),
    );
    // Two streams of the pattern, each closed once acknowledged.
    for _ in 0..2 {
        drop(acked_sender(
            &net,
            SocketAddr::new(net.a.ip4.into(), port),
            SEED,
            1 << 16,
        ));
    }
    xtcp.wait_for(&format!("xtcp recv: connection 1 from {}:", net.b.ip4));
    // Zeros, not the pattern: reset at the first byte, so socat fails,
    // unless all of it was in its socket before the reset came (whether it
    // does is its own; `a_stream_that_fails_its_check_is_reset_at_once`
    // checks what the sender is told).
    let _ = zeros_from_b(&net, port, 100_000);
    xtcp.wait_for(&format!("xtcp recv: connection 2 from {}:", net.b.ip4));
    xtcp.wait_for("failed: --verify failed: the stream differs from the pattern at byte ");
    xtcp.signal("-INT");
    let (status, err) = xtcp.wait_exit("xtcp recv did not stop on SIGINT");
    assert!(!status.success(), "a connection failed: {err}");
    // The summary lists again only the one that failed: each was said as
    // it ended.
    let again: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("xtcp: connection "))
        .collect();
    assert_eq!(again.len(), 1, "{err}");
    assert!(again[0].starts_with("xtcp: connection 2 "), "{err}");
}

/// The received output is exactly the first `len` bytes of the pattern.
fn assert_pattern_file(p: &Path, len: usize, err: &str) {
    let got = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}; {err}", p.display()));
    assert_eq!(got.len(), len, "bytes on disk; xtcp said: {err}");
    let mut want = vec![0u8; len];
    pattern_fill(SEED, 0, &mut want);
    assert!(got == want, "the output differs from what was sent");
}

/// What xtcp's text report says it received.
fn reported_bytes(err: &str) -> u64 {
    err.split("received ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {err}"))
}

/// However `xtcp recv` ends (SIGINT, SIGTERM, the peer's RST, its
/// interface going away), every byte it acknowledged is in its output, and
/// its report says so: on standard output, or, with `--out FILE`, in
/// `FILE.partial`, FILE left as it was (the stream did not end well).
#[test]
fn recv_output_holds_every_acknowledged_byte_however_it_ends() {
    let net = testnet(1500);
    // (how it ends, bytes, to standard output instead of a file)
    let cases = [
        ("-INT", 1_000_000, false),
        ("-INT", 100_000, false),
        ("-TERM", 100_000, true),
        ("-TERM", 3_000_000, false),
        ("rst", 1_000_000, false),
        ("rst", 100_000, true),
        // The peer falls silent, then SIGINT: the FIN goes unanswered and
        // the connection is reset when --grace runs out.
        ("silent", 1_000_000, false),
        // The interface goes away (last: the test network goes with it).
        ("gone", 1_000_000, false),
    ];
    for (k, (how, len, stdout)) in cases.into_iter().enumerate() {
        let port = 5210 + k as u16;
        let out = tmp(&format!("acked-{k}.bin"));
        let partial = tmp(&format!("acked-{k}.bin.partial"));
        let _ = std::fs::remove_file(&partial);
        // What the file held before: kept (half the file cases have none).
        let old = (!stdout && k % 2 == 0).then_some(b"old".as_slice());
        match old {
            Some(b) => std::fs::write(&out, b).unwrap(),
            None => {
                let _ = std::fs::remove_file(&out);
            }
        }
        let mut args = vec!["recv".to_string()];
        args.extend(engine_args(&net, true));
        args.extend([
            "--listen".into(),
            port.to_string(),
            "--grace".into(),
            "1".into(),
        ]);
        let target = if stdout {
            Stdio::from(std::fs::File::create(&out).unwrap())
        } else {
            args.extend(["--out".into(), out.display().to_string()]);
            Stdio::null()
        };
        let mut xtcp = Watched::spawn(&net, &args, target);
        xtcp.wait_for("listening on");
        let sock = acked_sender(&net, SocketAddr::new(net.a.ip4.into(), port), SEED, len);
        let mut silence = Vec::new();
        match how {
            "rst" => {
                socket2::SockRef::from(&sock)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
                drop(sock);
            }
            "silent" => {
                let all = xtcp_engine::xdp::impair::ImpairConfig::loss(100.0);
                silence.push(impair_b(&net, all));
                xtcp.signal("-INT");
            }
            "gone" => {
                net.a.ns.ip(&["link", "del", &net.a.iface]).unwrap();
            }
            sig => xtcp.signal(sig),
        }
        let (status, err) = xtcp.wait_exit("xtcp recv did not end");
        if how == "gone" {
            assert!(
                err.contains(&format!("the interface {} went away", net.a.iface)),
                "{err}"
            );
            // Its connection could not be reset: no line says it was.
            assert!(
                err.contains("aborted as the interface went away (no reset could reach the peer)")
                    && !err.contains("reset sent"),
                "{err}"
            );
        }
        assert!(
            !status.success(),
            "{how}: an interrupted or reset stream fails: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(reported_bytes(&err), len as u64, "{how} {len}: {err}");
        if stdout {
            assert_pattern_file(&out, len, &err);
        } else {
            assert_pattern_file(&partial, len, &err);
            let was = if old.is_some() {
                "is as it was"
            } else {
                "was not made"
            };
            assert!(
                err.contains(&format!(
                    "{} {was}: the {len} bytes written are in {}",
                    out.display(),
                    partial.display()
                )),
                "{err}"
            );
            match old {
                Some(b) => assert_eq!(std::fs::read(&out).unwrap(), b, "{how}: {err}"),
                None => assert!(!out.exists(), "{how}: {err}"),
            }
            let _ = std::fs::remove_file(&partial);
        }
        let _ = std::fs::remove_file(&out);
        if how != "gone" {
            assert_detached(&net);
        }
        drop(silence);
    }
}

/// The first SIGINT says how long `recv` may wait for the peer's FIN; a
/// second one while it waits exits at once (status 130) and says so: what
/// the writer had written of `--out FILE` is in `FILE.partial`, FILE is as
/// it was. (Both were silent, the bytes left in a file of its own.)
#[test]
fn a_second_signal_exits_at_once_and_says_where_the_bytes_are() {
    let net = testnet(1500);
    let port = 5234u16;
    let out = tmp("second-signal.bin");
    let partial = tmp("second-signal.bin.partial");
    let _ = std::fs::remove_file(&partial);
    std::fs::write(&out, b"old").unwrap();
    let out_arg = out.display().to_string();
    let mut xtcp = recv_listening(
        &net,
        port,
        &["--grace", "600", "--out", &out_arg, "--json"],
        Stdio::piped(),
    );
    let len = 1_000_000;
    let sock = acked_sender(&net, SocketAddr::new(net.a.ip4.into(), port), SEED, len);
    xtcp.signal("-INT");
    xtcp.wait_for(
        "xtcp: interrupted: stopping; if a connection is open, it awaits the peer's FIN for up \
         to 600.0 s (--grace), then is reset; a second SIGINT/SIGTERM exits at once",
    );
    // The first was taken: xtcp's FIN is in, the sender holds on.
    wait_ss(
        &net.b.ns,
        &["-t", "state", "close-wait", &format!("dport = :{port}")],
        "xtcp's FIN",
        WAIT,
        None,
    );
    xtcp.signal("-INT");
    let (status, err) = xtcp.wait_exit("xtcp recv did not exit on the second SIGINT");
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("a second SIGINT: exiting at once")
            && err.contains(&format!("those written are in {}", partial.display())),
        "{err}"
    );
    // --json's document says it, as for any error before the report.
    let j = json_stdout(&mut xtcp);
    assert_eq!(j["ok"], false, "{j}");
    assert!(
        j["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("a second SIGINT: exiting at once")),
        "{j}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"old", "{err}");
    let got = std::fs::read(&partial).unwrap();
    assert!(got.len() <= len, "{err}");
    let mut want = vec![0u8; got.len()];
    pattern_fill(SEED, 0, &mut want);
    assert!(got == want, "the partial file is the stream's start");
    drop(sock);
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&partial);
}

/// A slow stream's bytes are written as they come, not when it ends: a
/// kernel sender's first 6,000 bytes (all acknowledged) reach `recv`'s
/// output while the connection stays open (the writer's chunk used to
/// hold them until the peer's FIN).
#[test]
fn a_slow_streams_bytes_reach_the_output_before_it_ends() {
    let net = testnet(1500);
    let port = 5236u16;
    let path = tmp("slow-stream.bin");
    let out = std::fs::File::create(&path).unwrap();
    let mut xtcp = recv_listening(&net, port, &["--out", "-"], Stdio::from(out));
    let len = 6_000;
    let sock = acked_sender(&net, SocketAddr::new(net.a.ip4.into(), port), SEED, len);
    let deadline = Instant::now() + WAIT;
    while std::fs::metadata(&path).unwrap().len() < len as u64 {
        assert!(
            xtcp.child.0.try_wait().unwrap().is_none(),
            "{}",
            xtcp.err.lock().unwrap()
        );
        assert!(
            Instant::now() < deadline,
            "the acknowledged bytes never reached the output while the \
             connection was open: {} of {len} bytes",
            std::fs::metadata(&path).unwrap().len()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(sock);
    let (status, err) = xtcp.wait_exit("xtcp recv did not end with the stream");
    assert!(status.success(), "{err}");
    assert_pattern_file(&path, len, &err);
    let _ = std::fs::remove_file(&path);
}

/// `--out FIFO` is written in place, opened once: a reader waiting on the
/// FIFO gets the whole stream (recv's check that it can write there
/// opened it and closed it at start, so the reader got an empty stream
/// and recv's writer then waited for another).
#[test]
fn a_fifo_is_written_in_place_and_its_reader_gets_the_whole_stream() {
    let net = testnet(1500);
    let port = 5237u16;
    let fifo = fifo("out.fifo");
    // The reader opens (and waits for a writer) before recv starts.
    let path = fifo.clone();
    let reader = std::thread::spawn(move || std::fs::read(&path).unwrap());
    let out = fifo.display().to_string();
    let mut xtcp = recv_listening(&net, port, &["--out", &out], Stdio::null());
    let len = 4 << 20;
    let sock = acked_sender(&net, SocketAddr::new(net.a.ip4.into(), port), SEED, len);
    drop(sock);
    let (status, err) = xtcp.wait_exit("xtcp recv did not end with the stream");
    assert!(status.success(), "{err}");
    let got = reader.join().unwrap();
    let mut want = vec![0u8; len];
    pattern_fill(SEED, 0, &mut want);
    assert_eq!(got.len(), len, "{err}");
    assert!(got == want, "the stream, byte for byte");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let _ = std::fs::remove_file(&fifo);
}

/// `--out /dev/stdout` (a path to recv's own descriptor, as a shell's
/// `>(…)` gives `/dev/fd/N`) is written in place: the pipe behind it gets
/// the whole stream. recv made its hidden file beside the descriptor's
/// "target" (`/proc/self/fd/.pipe:[N].xtcp-PID`) and failed once the
/// stream had begun, resetting it.
#[test]
fn a_descriptor_path_is_written_in_place_and_its_pipe_gets_the_whole_stream() {
    let net = testnet(1500);
    let port = 5238u16;
    let mut xtcp = recv_listening(&net, port, &["--out", "/dev/stdout"], Stdio::piped());
    let mut stdout = xtcp.child.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut got).unwrap();
        got
    });
    let len = 4 << 20;
    let sock = acked_sender(&net, SocketAddr::new(net.a.ip4.into(), port), SEED, len);
    drop(sock);
    let (status, err) = xtcp.wait_exit("xtcp recv did not end with the stream");
    assert!(status.success(), "{err}");
    assert!(err.contains(&format!("received {len} bytes")), "{err}");
    let got = reader.join().unwrap();
    let mut want = vec![0u8; len];
    pattern_fill(SEED, 0, &mut want);
    assert_eq!(got.len(), len, "{err}");
    assert!(got == want, "the stream, byte for byte");
}

/// An output that fills up: `recv` says why it failed (the disk is full,
/// not only that it reset the connection), and the bytes it reports are
/// what the file holds (`FILE.partial`: the stream did not end well). The
/// file is on a 1-MiB tmpfs of a mount namespace of its own.
#[test]
fn a_full_disk_is_named_and_the_report_says_what_the_file_holds() {
    let net = testnet(1500);
    let dir = tmp("full-disk");
    std::fs::create_dir_all(&dir).unwrap();
    let port = 5230u16;
    let mut args = vec!["recv".to_string()];
    args.extend(engine_args(&net, true));
    args.extend(["--listen".into(), port.to_string()]);
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let d = dir.display();
    let script = format!(
        "mount -t tmpfs -o size=1m xtcp-test {d} || exit 99; \
         {XTCP} {} --out {d}/o.bin; rc=$?; \
         echo \"on disk $(stat -c %s {d}/o.bin.partial)\" >&2; exit $rc",
        quoted.join(" ")
    );
    let mut cmd = net.a.ns.command("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c", &script])
        .stdout(Stdio::null());
    let mut xtcp = Watched::spawn_command(cmd);
    xtcp.wait_for("listening on");
    let len = 4 << 20;
    let mut data = vec![0u8; len];
    pattern_fill(SEED, 0, &mut data);
    {
        let _g = net.b.ns.enter().unwrap();
        let mut s = std::net::TcpStream::connect((net.a.ip4, port)).unwrap();
        // Reset by xtcp part-way: the error is expected.
        let _ = s.write_all(&data);
    }
    let (status, err) = xtcp.wait_exit("xtcp recv did not end");
    eprintln!("{err}");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    let on_disk: u64 = err
        .split("on disk ")
        .nth(1)
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(on_disk > 0 && on_disk < len as u64, "{err}");
    assert_eq!(reported_bytes(&err), on_disk, "{err}");
    assert!(
        err.contains(&format!("writing the output failed after {on_disk} bytes")),
        "{err}"
    );
    assert_detached(&net);
}

/// A Python receiver in side B: `script` run with B's address, `port` and
/// `extra` as its arguments, its stdout piped; returns once it listens.
fn python_receiver(net: &TestNet, script: &str, port: u16, extra: &[&str]) -> Reap {
    let r = Reap(
        net.b
            .ns
            .command("python3")
            .args(["-c", script, &net.b.ip4.to_string(), &port.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_listening(&net.b.ns, port, WAIT, None);
    r
}

/// `xtcp send` of `len` bytes of the pattern to B's `port`, `--json`.
fn send_pattern_args(net: &TestNet, port: u16, len: u64) -> Vec<String> {
    let mut args = vec!["send".to_string()];
    args.extend(engine_args(net, true));
    args.extend([
        "-c".into(),
        net.b.ip4.to_string(),
        "-p".into(),
        port.to_string(),
        "--pattern".into(),
        SEED.to_string(),
        "--bytes".into(),
        len.to_string(),
        "--json".into(),
    ]);
    args
}

/// A kernel receiver that stops reading: its window shuts, xtcp probes,
/// Linux drops the probe's byte (beyond its shut window) and answers at
/// SND.UNA; then it reads again and its window update comes. The transfer
/// resumes from SND.UNA and ends byte-exact. (It stalled for good after
/// three probes: SND.NXT stayed past the probe's byte, and nothing went
/// and no timer was armed.) The receiver reads again once the third probe
/// went (the path's count of segments sent again, on B's ingress), not
/// after a time.
#[test]
fn a_zero_window_against_linux_ends_byte_exact() {
    const RECEIVER: &str = r#"
import os, socket, sys, time
ip, port, pause_at, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
l.bind((ip, port)); l.listen(1)
c, _ = l.accept()
f, n, paused = open(path, "wb"), 0, False
while True:
    if not paused and n >= pause_at:
        paused = True
        print("paused", flush=True)
        deadline = time.time() + 60
        while not os.path.exists(path + ".go") and time.time() < deadline:
            time.sleep(0.01)
    b = c.recv(65536)
    if not b:
        break
    f.write(b); n += len(b)
f.close()
print("received", n, flush=True)
"#;
    let net = testnet(1500);
    let len: u64 = 16 << 20;
    let got = tmp("zero-window.bin");
    let go = got.with_extension("bin.go");
    let _ = std::fs::remove_file(&go);
    let port = 5231u16;
    // Counts only: what B receives, and the segments sent again.
    let (ingress, _egress) = impair_b(
        &net,
        xtcp_engine::xdp::impair::ImpairConfig {
            port: Some(port),
            ..Default::default()
        },
    );
    let receiver = python_receiver(&net, RECEIVER, port, &["4000000", got.to_str().unwrap()]);
    let args = send_pattern_args(&net, port, len);
    let send = Reap(
        net.a
            .ns
            .command("timeout")
            .arg("120")
            .arg(XTCP)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The window shut and probes went again (the first ones dropped):
    // three probes in all (with one, it resumed even before the fix).
    let deadline = Instant::now() + WAIT;
    while ingress.counters().unwrap().repeated < 2 {
        assert!(Instant::now() < deadline, "no probe went twice");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(&go, b"").unwrap();
    let read = |pipe: Option<&mut dyn std::io::Read>| {
        let mut t = String::new();
        if let Some(p) = pipe {
            p.read_to_string(&mut t).unwrap();
        }
        t
    };
    let (mut send, mut receiver) = (send, receiver);
    let stdout = read(send.0.stdout.as_mut().map(|p| p as _));
    let err = read(send.0.stderr.as_mut().map(|p| p as _));
    assert!(send.0.wait().unwrap().success(), "{err}");
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(j["bytes"].as_u64(), Some(len), "{j}");
    let text = read(receiver.0.stdout.as_mut().map(|p| p as _));
    assert!(receiver.0.wait().unwrap().success(), "{text}");
    assert_eq!(
        text.lines().last(),
        Some(format!("received {len}").as_str()),
        "{text}"
    );
    assert_pattern_file(&got, len as usize, &err);
    let _ = std::fs::remove_file(&got);
    let _ = std::fs::remove_file(&go);
}

/// A receiver that resets the connection part-way: `send`'s count is what
/// the receiver's kernel acknowledged (its `bytes_received`, read once its
/// window is shut and nothing more gets in), not what xtcp wrote into its
/// send buffer, which ran ahead by up to a buffer's worth.
#[test]
fn a_reset_transfer_reports_what_the_peer_acknowledged() {
    const RECEIVER: &str = r#"
import socket, struct, subprocess, sys, time
ip, port, stop_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def zero_window_advs():
    out = subprocess.run(["nstat", "-az", "TcpExtTCPToZeroWindowAdv"],
                         capture_output=True, text=True).stdout
    return sum(int(l.split()[1]) for l in out.splitlines()
               if l.startswith("TcpExtTCPToZeroWindowAdv"))
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
l.bind((ip, port)); l.listen(1)
before = zero_window_advs()
c, _ = l.accept()
n = 0
while n < stop_at:
    b = c.recv(65536)
    if not b:
        sys.exit("the stream ended early")
    n += len(b)
# Stop reading: once the window is shut, nothing more is taken in.
deadline = time.time() + 60
while zero_window_advs() == before and time.time() < deadline:
    time.sleep(0.01)
ss = subprocess.run(["ss", "-Htin", "sport = :%d" % port], capture_output=True, text=True).stdout
got = [w for w in ss.split() if w.startswith("bytes_received:")]
print(got[0].split(":")[1], flush=True)
c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
c.close()
"#;
    let net = testnet(1500);
    let port = 5232u16;
    let mut receiver = python_receiver(&net, RECEIVER, port, &["3000000"]);
    let args = send_pattern_args(&net, port, 64 << 20);
    let out = net
        .a
        .ns
        .command("timeout")
        .arg("120")
        .arg(XTCP)
        .args(&args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "reset: {err}");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut receiver.0.stdout.take().unwrap(), &mut text).unwrap();
    assert!(receiver.0.wait().unwrap().success(), "{text}");
    let acked: u64 = text.trim().parse().unwrap_or_else(|_| panic!("{text}"));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["bytes"].as_u64(), Some(acked), "{j}");
    assert_eq!(
        j["connections"][0]["bytes_sent"].as_u64(),
        Some(acked),
        "{j}"
    );
}

/// SIGINT to `xtcp send` before its source's end resets the connection,
/// so that the receiver learns its stream is short: a FIN would tell it
/// that it has the whole stream (a file, standard input, `-n` bytes).
#[test]
fn an_interrupted_send_resets_so_the_receiver_knows_the_stream_is_short() {
    const RECEIVER: &str = r#"
import socket, sys
ip, port = sys.argv[1], int(sys.argv[2])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.settimeout(60)
l.bind((ip, port)); l.listen(1)
c, _ = l.accept()
c.settimeout(60)
n, said = 0, False
try:
    while True:
        b = c.recv(65536)
        if not b:
            print("eof", n, flush=True)
            break
        n += len(b)
        if n >= 1000000 and not said:
            said = True
            print("started", flush=True)
except ConnectionResetError:
    print("reset", n, flush=True)
"#;
    let net = testnet(1500);
    let port = 5233u16;
    let mut receiver = python_receiver(&net, RECEIVER, port, &[]);
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(receiver.0.stdout.take().unwrap()));
    let args = send_pattern_args(&net, port, 1 << 40);
    let mut send = Watched::spawn(&net, &args, Stdio::null());
    let first = lines.next().unwrap().unwrap();
    assert_eq!(first, "started", "the stream flows");
    send.signal("-INT");
    let (status, err) = send.wait_exit("xtcp send did not stop on SIGINT");
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(
            "xtcp: interrupted: a stream not sent to its end is reset at once (so that the \
             receiver knows it is short)"
        ),
        "{err}"
    );
    let last = lines.next().unwrap().unwrap();
    assert!(
        last.starts_with("reset "),
        "the receiver saw: {last}; xtcp: {err}"
    );
    assert!(receiver.0.wait().unwrap().success());
    assert_detached(&net);
}

/// SIGINT to `xtcp send` once its stream was sent whole and acknowledged
/// cuts nothing: the connection is let go at once (not --grace later: 600
/// s here, beyond the wait), without a reset, and the run succeeds. A
/// second signal then would exit 130 with `--json`'s document saying so:
/// checked by `a_second_signal_exits_at_once_and_says_where_the_bytes_are`.
#[test]
fn an_interrupt_after_the_whole_stream_cuts_nothing() {
    const RECEIVER: &str = r#"
import socket, sys, time
ip, port = sys.argv[1], int(sys.argv[2])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.settimeout(60)
l.bind((ip, port)); l.listen(1)
c, _ = l.accept()
c.settimeout(60)
n = 0
while True:
    b = c.recv(65536)
    if not b:
        break
    n += len(b)
print("eof", n, flush=True)
# Its side stays open: send is let go, not closed.
time.sleep(90)
"#;
    let net = testnet(1500);
    let port = 5236u16;
    let len = 3_000_000u64;
    let mut receiver = python_receiver(&net, RECEIVER, port, &[]);
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(receiver.0.stdout.take().unwrap()));
    let mut args = send_pattern_args(&net, port, len);
    args.extend(["--grace".into(), "600".into()]);
    let mut send = Watched::spawn(&net, &args, Stdio::piped());
    // The receiver read the whole stream and its end: the source was read
    // to its end, and the FIN was sent after the last byte.
    assert_eq!(lines.next().unwrap().unwrap(), format!("eof {len}"));
    send.signal("-INT");
    let (status, err) = send.wait_exit("xtcp send was not let go on SIGINT");
    assert!(status.success(), "{err}");
    assert!(
        err.contains(
            "the stream was whole and acknowledged, but the receiver had not closed its side \
             when send was interrupted: let go"
        ),
        "{err}"
    );
    let j = json_stdout(&mut send);
    assert_eq!(j["ok"], true, "{j}");
    assert_eq!(j["bytes"].as_u64(), Some(len), "{j}");
    assert_eq!(j["connections"][0]["result"], "ok", "{j}");
    assert_eq!(j["connections"][0]["peer_open"], true, "{j}");
    assert!(
        receiver.0.try_wait().unwrap().is_none(),
        "the receiver is still holding its side"
    );
    assert_detached(&net);
}

/// `recv --rcv-timeout MS`: a stream that brings nothing for that long
/// (its sender fell silent: died without a word, or stalled) is reset, and
/// recv fails saying why, in bounded time; the sender learns of it (it
/// would otherwise hold recv for ever, as it would the kernel's TCP).
#[test]
fn a_receive_timeout_ends_a_stream_that_fell_silent() {
    let net = testnet(1500);
    let port = 5238u16;
    let mut xtcp = recv_listening(
        &net,
        port,
        &["--rcv-timeout", "1000", "--discard", "--json"],
        Stdio::piped(),
    );
    let len = 100_000;
    // The bytes written, then nothing more from the sender. (Not waited
    // for their acknowledgement: a test thread late to read it would find
    // the connection already reset. The JSON below says they all came.)
    let mut sock = pattern_sender(&net, SocketAddr::new(net.a.ip4.into(), port), SEED, len);
    let (status, err) = xtcp.wait_exit("recv --rcv-timeout did not end a silent stream");
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("no data for the receive timeout (--rcv-timeout): reset"),
        "{err}"
    );
    let j = json_stdout(&mut xtcp);
    assert_eq!(j["ok"], false, "{j}");
    assert_eq!(
        j["connections"][0]["bytes_received"].as_u64(),
        Some(len as u64),
        "{j}"
    );
    // The sender is told: its next read meets the reset.
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let e = std::io::Read::read(&mut sock, &mut [0u8; 1]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    assert_detached(&net);
}

/// The interface's MTU lowered during a transfer (`ip link set … mtu`):
/// xtcp's connection follows at once, as Linux's TCP follows its device's
/// MTU, its MSS stepped down for the link (counted so), where it found out
/// only as a black hole before (timeouts, seconds of stall, advice about a
/// hop on the path).
#[test]
fn a_lowered_interface_mtu_is_followed_at_once() {
    const RECEIVER: &str = r#"
import socket, sys
ip, port = sys.argv[1], int(sys.argv[2])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.settimeout(60)
l.bind((ip, port)); l.listen(1)
c, _ = l.accept()
c.settimeout(60)
n, step = 0, 4 << 20
try:
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        k = n // step
        n += len(b)
        if n // step > k:
            print(n, flush=True)
except (ConnectionResetError, socket.timeout):
    pass
"#;
    let net = testnet(9000);
    let port = 5240u16;
    let mut receiver = python_receiver(&net, RECEIVER, port, &[]);
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(receiver.0.stdout.take().unwrap()));
    let mut got = || -> u64 { lines.next().unwrap().unwrap().parse().unwrap() };
    let mut send = Watched::spawn(
        &net,
        &send_pattern_args(&net, port, 1 << 40),
        Stdio::piped(),
    );
    got();
    for (ns, iface) in [(&net.a.ns, &net.a.iface), (&net.b.ns, &net.b.iface)] {
        ns.ip(&["link", "set", "dev", iface, "mtu", "1500"])
            .unwrap();
    }
    // Well past what was in flight at the change.
    let at = got();
    while got() < at + (32 << 20) {}
    send.signal("-INT");
    let (_, err) = send.wait_exit("xtcp send did not stop on SIGINT");
    let j = json_stdout(&mut send);
    let c = &j["connections"][0];
    assert_eq!(c["mss_link_mtu_steps"], 1, "{j}\n{err}");
    assert_eq!(c["mss_black_hole_steps"], 0, "{j}\n{err}");
    assert!(c["mss"].as_u64().is_some_and(|m| m <= 1460), "{j}");
    assert!(
        err.contains(
            "the interface's own MTU fell during the connection, and the MSS stepped down"
        ),
        "{err}"
    );
    assert!(!err.contains("a hop on the path"), "{err}");
    drop(receiver);
    assert_detached(&net);
}

/// An address a kernel socket cannot take says why: one still tentative
/// (IPv6 duplicate address detection not done: a hundred probes a second
/// apart keep it so for the test) cannot be bound yet, and a link-local
/// one needs the interface scope xtcp does not carry (both were "is the
/// address configured on the interface?", though it was).
#[test]
fn an_address_that_cannot_be_bound_says_why() {
    let net = testnet(1500);
    let tentative = "2001:2::77";
    for cmd in [
        format!("net.ipv6.conf.{}.accept_dad=1", net.a.iface),
        format!("net.ipv6.conf.{}.dad_transmits=100", net.a.iface),
    ] {
        net.a.ns.exec(&["sysctl", "-qw", &cmd]).unwrap();
    }
    net.a
        .ns
        .ip(&[
            "-6",
            "addr",
            "add",
            &format!("{tentative}/64"),
            "dev",
            &net.a.iface,
        ])
        .unwrap();
    let mut args = vec!["recv".to_string()];
    args.extend(engine_args(&net, true));
    args.extend(["-B", tentative, "-p", "5241", "--discard"].map(String::from));
    let out = net.a.ns.command(XTCP).args(&args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "(the address is tentative: IPv6 duplicate address detection has not finished"
        ),
        "{err}"
    );
    let mut args = send_pattern_args(&net, 5241, 1000);
    args.extend(["-B".into(), "fe80::1".into()]);
    let c = args.iter().position(|a| a == "-c").unwrap();
    args[c + 1] = net.b.ip6.to_string();
    let out = net.a.ns.command(XTCP).args(&args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("(a link-local address needs its interface scope, which xtcp does not carry"),
        "{err}"
    );
    assert_detached(&net);
}

/// `recv --keep-listening`: a connection reset as the stop's `--grace` ran
/// out says so in its own line, as the final error does (its line said
/// "aborted (reset sent)", found by a review).
#[test]
fn keep_listening_says_a_connection_reset_at_the_stop_was_interrupted() {
    let net = testnet(1500);
    let port = 5242u16;
    let mut xtcp = recv_listening(
        &net,
        port,
        &["--keep-listening", "--discard", "--grace", "1"],
        Stdio::null(),
    );
    // Its bytes acknowledged, the sender holds the connection open.
    let sock = acked_sender(&net, SocketAddr::new(net.a.ip4.into(), port), SEED, 10_000);
    xtcp.signal("-INT");
    let (status, err) = xtcp.wait_exit("xtcp recv did not stop on SIGINT");
    assert!(!status.success(), "{err}");
    let line = format!(
        "from {}: failed: interrupted: reset after --grace (the peer had not closed)",
        sock.local_addr().unwrap()
    );
    assert!(err.contains(&line), "{line} not in {err}");
    drop(sock);
    assert_detached(&net);
}

/// The interface's MTU lowered while `recv` listens: new connections are
/// offered the MSS it carries, so a peer whose own MTU is larger sends
/// segments that fit (offered the MSS of the start, its 9000-byte packets
/// were dropped at this end's veth, and nothing was acknowledged).
#[test]
fn a_lowered_interface_mtu_is_what_new_connections_are_offered() {
    let net = testnet(9000);
    let port = 5243u16;
    let mut xtcp = recv_listening(
        &net,
        port,
        &["--keep-listening", "--discard"],
        Stdio::null(),
    );
    net.a
        .ns
        .ip(&["link", "set", "dev", &net.a.iface, "mtu", "1500"])
        .unwrap();
    xtcp.wait_for("the interface's MTU changed");
    // Every byte acknowledged (else this panics, bounded).
    let sock = acked_sender(&net, SocketAddr::new(net.a.ip4.into(), port), SEED, 1 << 20);
    let ss = net
        .b
        .ns
        .command("ss")
        .args([
            "-Htni",
            &format!("sport = :{}", sock.local_addr().unwrap().port()),
        ])
        .output()
        .unwrap();
    let ss = String::from_utf8_lossy(&ss.stdout);
    assert!(ss.contains(" mss:1448 "), "B's sender: {ss}");
    drop(sock);
    xtcp.signal("-INT");
    let (status, err) = xtcp.wait_exit("xtcp recv did not stop on SIGINT");
    assert!(status.success(), "{err}");
    assert_detached(&net);
}

/// A listener's interface addresses change while it runs: one added is
/// said not to be served (the rules were made at start), one served and
/// removed is said to be served still; each once.
#[test]
fn addresses_added_and_removed_while_listening_are_said() {
    let net = testnet(1500);
    let mut xtcp = recv_listening(
        &net,
        5245,
        &["--keep-listening", "--discard", "-4"],
        Stdio::null(),
    );
    let iface = net.a.iface.clone();
    net.a
        .ns
        .ip(&["addr", "add", "198.18.0.77/24", "dev", &iface])
        .unwrap();
    xtcp.wait_for(&format!("198.18.0.77 was added to {iface}: not served"));
    // Another family than -4 takes: nothing to say.
    net.a
        .ns
        .ip(&["addr", "add", "2001:2::77/64", "dev", &iface, "nodad"])
        .unwrap();
    let a = net.a.ip4.to_string();
    net.a
        .ns
        .ip(&["addr", "del", &format!("{a}/24"), "dev", &iface])
        .unwrap();
    xtcp.wait_for(&format!("{a} was removed from {iface}: still served"));
    xtcp.signal("-INT");
    let (status, err) = xtcp.wait_exit("xtcp recv did not stop on SIGINT");
    assert!(status.success(), "{err}");
    assert!(!err.contains("2001:2::77"), "{err}");
    assert_eq!(err.matches("was added to").count(), 1, "{err}");
}

/// `recv --keep-listening --verify` stopped before any connection came:
/// a service stopped (exit 0) that says it checked nothing (it said the
/// 0 bytes received matched the pattern).
#[test]
fn keep_listening_stopped_idle_says_nothing_was_checked() {
    let net = testnet(1500);
    let mut xtcp = recv_listening(
        &net,
        5244,
        &["--keep-listening", "--verify", "3", "-n", "1M"],
        Stdio::null(),
    );
    xtcp.signal("-INT");
    let (status, err) = xtcp.wait_exit("xtcp recv did not stop on SIGINT");
    assert!(status.success(), "{err}");
    assert!(
        err.contains("--verify 3: no connection arrived, nothing was checked"),
        "{err}"
    );
    assert!(!err.contains("match the pattern"), "{err}");
}

/// Nothing on disk changes before a connection arrives: not when setup
/// fails, not when the run is interrupted idle (which says so).
#[test]
fn recv_leaves_the_output_alone_until_a_connection_arrives() {
    let net = testnet(1500);
    let existing = tmp("existing.bin");
    std::fs::write(&existing, b"precious").unwrap();
    let fresh = tmp("fresh.bin");
    let _ = std::fs::remove_file(&fresh);
    for out in [&existing, &fresh] {
        let r = net
            .a
            .ns
            .command(XTCP)
            .args(["recv", "--iface", "nosuch0", "--listen", "5220", "--out"])
            .arg(out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{err}");
        assert!(err.contains("nosuch0"), "{err}");
        assert!(
            !err.contains("listening on"),
            "no banner before setup: {err}"
        );
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"precious");
    assert!(!fresh.exists(), "a failed run leaves no file behind");
    // Interrupted before any connection came.
    for out in [&existing, &fresh] {
        let mut args = vec!["recv".to_string()];
        args.extend(engine_args(&net, true));
        args.extend(["--listen".into(), "5221".into(), "--out".into()]);
        args.push(out.display().to_string());
        let mut xtcp = Watched::spawn(&net, &args, Stdio::null());
        xtcp.wait_for("listening on");
        xtcp.signal("-INT");
        let (status, err) = xtcp.wait_exit("xtcp recv did not stop on SIGINT");
        assert!(!status.success(), "{err}");
        assert!(err.contains("no connection arrived"), "{err}");
        assert!(!err.contains("ended before its stream"), "{err}");
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"precious");
    assert!(!fresh.exists(), "an idle run leaves no file behind");
    let _ = std::fs::remove_file(&existing);
    // An output that cannot be written is refused before setup.
    let r = net
        .a
        .ns
        .command(XTCP)
        .args(["recv", "--iface", &net.a.iface, "--listen", "5222", "--out"])
        .arg("/nonexistent-dir/x.bin")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("no directory"), "{err}");
    // Without --iface: refused before an interface is looked up, so the
    // message names none (it used to say which one it had taken).
    let r = net
        .a
        .ns
        .command(XTCP)
        .args(["recv", "--listen", "5222", "--out"])
        .arg("/nonexistent-dir/x.bin")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("no directory"), "{err}");
    assert!(!err.contains(net.a.iface.as_str()), "{err}");
}

/// A peer that never answers (its address has a neighbour entry, nobody
/// owns it): `send` gives up after --connect-timeout (10 s by default)
/// and says what it tried.
#[test]
fn a_silent_peer_ends_at_the_connect_timeout_with_a_message() {
    let net = testnet(1500);
    let silent = "198.18.0.99";
    net.a
        .ns
        .ip(&[
            "neigh",
            "add",
            silent,
            "lladdr",
            "02:00:00:00:00:99",
            "dev",
            &net.a.iface,
            "nud",
            "permanent",
        ])
        .unwrap();
    for timeout in [Some("1500"), None] {
        let mut args = vec!["send".to_string()];
        args.extend(engine_args(&net, true));
        args.extend(
            [
                "--connect",
                &format!("{silent}:5201"),
                "--pattern",
                "1",
                "--bytes",
                "1M",
            ]
            .map(String::from),
        );
        if let Some(t) = timeout {
            args.extend(["--connect-timeout".into(), t.into()]);
        }
        let mut xtcp = spawn_xtcp(&net, &args);
        let (status, err, _) = wait_exit(&mut xtcp, 120, "xtcp send did not give up");
        assert!(!status.success(), "{err}");
        let want = format!(
            "no answer from {silent}:5201 within {} s (--connect-timeout)",
            if timeout.is_some() { "1.5" } else { "10.0" }
        );
        assert!(err.contains(&want), "{want:?} in {err}");
        let from = format!("SYNs sent from {}:", net.a.ip4);
        assert!(err.contains(&from), "{from:?} in {err}");
        assert_detached(&net);
    }
    // The iperf3 client, the same way.
    let mut args = vec!["client".to_string()];
    args.extend(engine_args(&net, true));
    args.extend(["-c", silent, "-t", "1", "--connect-timeout", "1500"].map(String::from));
    let mut xtcp = spawn_xtcp(&net, &args);
    let (status, err, _) = wait_exit(&mut xtcp, 120, "xtcp client did not give up");
    assert!(!status.success(), "{err}");
    let want = format!("no answer from {silent}:5201 within 1.5 s (--connect-timeout)");
    assert!(err.contains(&want), "{want:?} in {err}");
    assert_detached(&net);
}

/// `--sndbuf auto` (the default) starts each send buffer at 256K and
/// doubles it as the path needs, within 4M; `--sndbuf SIZE` fixes it;
/// `--json` reports the buffer each connection ended with.
#[test]
fn the_send_buffer_is_autotuned_unless_fixed() {
    let net = testnet(1500);
    let b: IpAddr = net.b.ip4.into();
    let send = |extra: &[&str]| -> u64 {
        let _socat = Reap(
            net.b
                .ns
                .command("socat")
                .args(["-u", &socat_listen(b, 5201), "OPEN:/dev/null"])
                .spawn()
                .expect("socat (apt install socat)"),
        );
        wait_listening(&net.b.ns, 5201, WAIT, None);
        let mut args = vec!["send".to_string()];
        args.extend(engine_args(&net, true));
        args.extend(["--connect", "198.18.0.2:5201", "--zeros", "--json"].map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = net.a.ns.command(XTCP).args(&args).output().unwrap();
        ok(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let c = &v["connections"][0];
        assert_eq!(c["result"], "ok", "{v}");
        c["send_buffer"]
            .as_u64()
            .unwrap_or_else(|| panic!("no send_buffer: {v}"))
    };
    const K: u64 = 1024;
    // Too short to grow: the starting size.
    assert_eq!(send(&["--bytes", "1000"]), 256 * K);
    // A longer run may double it, never past 4M.
    let grown = send(&["--bytes", "256M"]);
    assert!(
        (256 * K..=4096 * K).contains(&grown)
            && grown % (256 * K) == 0
            && (grown / (256 * K)).is_power_of_two(),
        "auto-tuned to {grown}"
    );
    // Fixed: what was asked, however long the run.
    assert_eq!(send(&["--bytes", "256M", "--sndbuf", "1M"]), 1024 * K);
    let out = net
        .a
        .ns
        .command(XTCP)
        .args([
            "send",
            "--iface",
            &net.a.iface,
            "--connect",
            "198.18.0.2:5201",
        ])
        .args(["--zeros", "--bytes", "1M", "--sndbuf", "1K"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("--sndbuf must be `auto` or between"), "{err}");
}

/// A connection that idles long enough to be taken for a light one (one
/// that receives little: its receive window cut to a few segments, so that
/// the worker's receive budget goes to the busy ones) gets its share back
/// as soon as its peer uses up the window it had. A kernel sender that
/// connects, waits until xtcp says (at debug level) it took the connection
/// for a light one, then sends 64 MiB: xtcp counts the promotion, says so,
/// and the window the sender sees at the end (`ss`) is nearly the whole
/// budget (`--rcvbuf 1M` is above it), never more.
#[test]
fn an_idle_connection_that_starts_sending_gets_its_window_back() {
    let net = testnet(1500);
    let a: IpAddr = net.a.ip4.into();
    let to = SocketAddr::new(a, 5203);
    let mut xtcp = recv_listening(
        &net,
        5203,
        &[
            "--discard",
            "--rcvbuf",
            "1M",
            "--json",
            "--log",
            "info,xtcp_engine::worker::thread=debug",
        ],
        Stdio::piped(),
    );
    // The socket is side B's: made there, used from here.
    let mut s = {
        let _in_b = net.b.ns.enter().unwrap();
        std::net::TcpStream::connect_timeout(&to, WAIT).expect("connect to xtcp recv")
    };
    let peer = s.local_addr().unwrap();
    xtcp.wait_for(&format!("{peer} → {to}: light ("));
    let block = vec![0u8; 1 << 20];
    for _ in 0..64 {
        s.write_all(&block).unwrap();
    }
    let ss = net
        .b
        .ns
        .command("ss")
        .args(["-Htin", "dst", &to.to_string()])
        .output()
        .unwrap();
    let ss = String::from_utf8_lossy(&ss.stdout).into_owned();
    let wnd: u64 = ss
        .split_whitespace()
        .find_map(|w| w.strip_prefix("snd_wnd:"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no snd_wnd in {ss}"));
    drop(s);
    let (status, err) = xtcp.wait_exit("xtcp recv did not exit");
    assert!(status.success(), "{err}");
    assert!(err.contains(&format!("{peer} → {to}: busy again")), "{err}");
    let v = json_stdout(&mut xtcp);
    assert_eq!(v["bytes"], 64 << 20, "{v}");
    let w = &v["engine"]["workers"][0];
    let budget = w["rx_window_budget"].as_u64().unwrap();
    assert!(w["light_promoted"].as_u64().unwrap() >= 1, "{w}");
    assert!(wnd <= budget + (1 << 14), "window {wnd}, budget {budget}");
    assert!(
        wnd * 10 >= budget * 9,
        "window {wnd}: less than 90 % of the budget {budget}"
    );
}

/// The number just before `word` in `line` ("…, 12 retransmits, …").
fn count_before(line: &str, word: &str) -> u64 {
    let head = line
        .split(word)
        .next()
        .filter(|h| h.len() < line.len())
        .unwrap_or_else(|| panic!("no {word:?} in {line}"));
    head.rsplit([' ', ','])
        .find(|w| !w.is_empty())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no number before {word:?} in {line}"))
}

/// With 1 % of the packets lost each way, what `xtcp send` reports it
/// retransmitted (the summary, each connection, in JSON and in text) is
/// what the path saw sent again: the impairment program on B's side counts
/// every segment that starts below what its flow had reached, dropped or
/// not. Its packet counts are the path's too.
#[test]
fn send_reports_the_retransmissions_the_path_saw() {
    let net = testnet(1500);
    let (ingress, egress) = impair_b(&net, xtcp_engine::xdp::impair::ImpairConfig::loss(1.0));
    const LEN: u64 = 32 << 20;
    for (k, json) in [true, false].into_iter().enumerate() {
        let port = 5230 + k as u16;
        let sink = Reap(
            net.b
                .ns
                .command("socat")
                .args([
                    "-u",
                    &socat_listen(net.b.ip4.into(), port),
                    "OPEN:/dev/null",
                ])
                .spawn()
                .expect("socat (apt install socat)"),
        );
        wait_listening(&net.b.ns, port, WAIT, None);
        let (i0, e0) = (ingress.counters().unwrap(), egress.counters().unwrap());
        let a0 = (tcp_out_segs(&net.a.ns), tcp_mib(&net.a.ns, "InSegs"));
        let mut args = vec!["send".to_string()];
        args.extend(engine_args(&net, true));
        args.extend([
            "--connect".into(),
            SocketAddr::new(net.b.ip4.into(), port).to_string(),
            "--pattern".into(),
            SEED.to_string(),
            "--bytes".into(),
            LEN.to_string(),
        ]);
        if json {
            args.push("--json".into());
        }
        let out = net.a.ns.command(XTCP).args(&args).output().unwrap();
        let err = ok(&out);
        drop(sink);
        // xtcp's own account: the retransmissions as each place reports
        // them; segments sent, as counted by TCP and by the port; segments
        // received, likewise, with what its XDP statistics say was lost
        // before it.
        let (retx, sent, received) = if json {
            let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
            assert_eq!(j["bytes"].as_u64(), Some(LEN), "{j}");
            let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v} in {j}"));
            let lost = n(&j["xdp"]["dropped_at_redirect"])
                + j["xdp"]["dropped_before_xdp"].as_u64().unwrap_or(0);
            let port = &j["engine"]["workers"][0]["port"];
            (
                vec![n(&j["retransmits"]), n(&j["connections"][0]["retransmits"])],
                [n(&j["segments_sent"]), n(&port["tx_packets"])],
                [
                    n(&j["segments_received"]) + lost,
                    n(&port["rx_segments"]) + lost,
                ],
            )
        } else {
            let line = &common::plural_counts(line_of(&err, "xtcp: sent "));
            // "xtcp: IF MTU 1500 MSS 1460, …": the link's MTU, and the
            // largest segment it holds (IPv4 and TCP headers: 40 bytes).
            let iface = line_of(&err, &format!("xtcp: {} MTU ", net.a.iface));
            assert_eq!(count(iface, " MTU "), 1500, "{iface}");
            assert_eq!(count_before(iface, ", XDP "), 1500 - 40, "{iface}");
            // "xtcp: queue 0: rx N segs, tx M pkts, …"
            let q = line_of(&err, "xtcp: queue 0: ");
            let xdp = line_of(&err, "xtcp: XDP: ");
            let lost = count(xdp, "dropped at redirect") + count(xdp, "before XDP");
            (
                vec![count_before(line, " retransmits,")],
                [count_before(line, " segments sent,"), count(q, " tx ")],
                [
                    count(line, " segments sent, ") + lost,
                    count(q, " rx ") + lost,
                ],
            )
        };
        // The path's counts against xtcp's and A's own kernel's (which
        // answers what B sends once xtcp has left: its FIN again, if xtcp's
        // last ACK was lost). The path counts a packet a moment after it
        // went: wait for the two accounts to agree.
        let deadline = Instant::now() + WAIT;
        let (i, e) = loop {
            let (i, e) = (ingress.counters().unwrap(), egress.counters().unwrap());
            let kernel = (
                tcp_out_segs(&net.a.ns) - a0.0,
                tcp_mib(&net.a.ns, "InSegs") - a0.1,
            );
            let to_b = i.seen - i0.seen;
            let from_b = (e.seen - e0.seen) - (e.dropped - e0.dropped);
            let agree = sent.iter().all(|&s| s + kernel.0 == to_b)
                && received.iter().all(|&r| r + kernel.1 == from_b);
            if agree {
                eprintln!("the path: {to_b} to B, {from_b} from B; A's kernel {kernel:?}");
                break (i, e);
            }
            assert!(
                Instant::now() < deadline,
                "segments sent {sent:?} and received {received:?}, A's kernel {kernel:?}: \
                 the path {to_b} to B, {from_b} from B: {err}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let repeated = i.repeated - i0.repeated;
        assert!(
            i.dropped > i0.dropped && e.dropped > e0.dropped && repeated > 0,
            "loss: {i:?} {e:?}"
        );
        for r in retx {
            assert_eq!(r, repeated, "retransmitted, the path's count {i:?}: {err}");
        }
    }
}

/// A sniffer in side B, in Python (after `TCP_PARSE`): what B's interface
/// sends to port `DPORT` of A (after the impairment's egress drops, which
/// come first), per connection: a data segment that starts beyond the
/// highest offset up to which every byte was sent (what A's TCP has
/// taken in order, if it got each frame B sent) is out of order. Counted
/// until SIGTERM (then what is queued), printed as JSON with the frames
/// the socket could not take (`PACKET_STATISTICS`).
const OUT_OF_ORDER_MODEL: &str = r#"
import json, select, signal, socket, struct, sys, time
IFACE, DPORT, LIFE = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: the whole transfer
s.bind((IFACE, 0))
s.setblocking(False)
flows = {}
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)

def take(f):
    p = parse(f)
    if not p or p["dport"] != DPORT: return
    if p["flags"] & 2:
        flows[p["sport"]] = dict(isn=p["seq"], nxt=1, held=[], ooo=0, data=0)
        return
    fl = flows.get(p["sport"])
    if fl is None or p["len"] == 0: return
    fl["data"] += 1
    start = (p["seq"] - fl["isn"]) & 0xffffffff
    end = start + p["len"]
    if end <= fl["nxt"]: return
    start = max(start, fl["nxt"])
    if start > fl["nxt"]:
        fl["ooo"] += 1
        fl["held"].append((start, end))
        return
    fl["nxt"] = end
    while True:
        joins = [h for h in fl["held"] if h[0] <= fl["nxt"]]
        if not joins: break
        fl["held"] = [h for h in fl["held"] if h[0] > fl["nxt"]]
        fl["nxt"] = max([fl["nxt"]] + [e for _, e in joins])

def drain():
    while True:
        try: f, addr = s.recvfrom(65535)
        except BlockingIOError: return
        if addr[2] == 4: take(f)  # PACKET_OUTGOING

print("ready", flush=True)
end = time.monotonic() + LIFE
while not stop and time.monotonic() < end:
    select.select([s], [], [], 0.05)
    drain()
drain()
packets, drops = struct.unpack("II", s.getsockopt(263, 6, 8))  # PACKET_STATISTICS
print(json.dumps(dict(flows=[dict(port=k, ooo=v["ooo"], data=v["data"]) for k, v in flows.items()],
                      socket_drops=drops)), flush=True)
"#;

/// With 1 % of the packets lost each way, what `xtcp recv` reports of
/// the segments that came out of order (the summary in text, and per
/// connection and in sum in JSON) is what B sent out of order: a sniffer
/// on B's side counts what left B after the drops, in the order it left
/// (`OUT_OF_ORDER_MODEL`). A's side loses none of those frames before
/// xtcp's TCP sees them (its XDP statistics say so): xtcp's receive window
/// is bounded by what veth queues in front of XDP, so B cannot send more
/// than that queue holds however late xtcp's worker runs.
#[test]
fn recv_reports_the_out_of_order_segments_the_path_made() {
    let net = testnet(1500);
    let loss = xtcp_engine::xdp::impair::ImpairConfig::loss(1.0);
    let (_ingress, mut egress) = impair_b(&net, loss);
    // B's TCP hands its egress GSO packets of up to tens of segments,
    // split after the impairment: one segment each, so that 1 % of the
    // segments are lost, not 1 % of the packets (a round of a few hundred
    // packets could lose none).
    net.b
        .ns
        .exec(&[
            "ip",
            "link",
            "set",
            "dev",
            &net.b.iface,
            "gso_max_segs",
            "1",
        ])
        .unwrap();
    const LEN: usize = 8 << 20;
    for (k, json) in [true, false].into_iter().enumerate() {
        let port = 5240 + k as u16;
        let mut model = Reap(
            net.b
                .ns
                .command("python3")
                .args(["-c", &format!("{}{OUT_OF_ORDER_MODEL}", common::TCP_PARSE)])
                .args([net.b.iface.as_str(), &port.to_string(), "300"])
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3"),
        );
        let mut model_out = std::io::BufReader::new(model.0.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut model_out, &mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the sniffer did not start");
        let mut extra = vec!["--discard"];
        if json {
            extra.push("--json");
        }
        let mut xtcp = recv_listening(&net, port, &extra, Stdio::piped());
        // Set again for each round: its count of packets starts over, and
        // the round loses one for sure besides those at random.
        egress.set(loss).unwrap();
        let e0 = egress.counters().unwrap();
        assert!(zeros_from_b(&net, port, LEN), "socat could not send");
        let (status, err) = xtcp.wait_exit("xtcp recv did not exit");
        assert!(status.success(), "{err}");
        let mut out = String::new();
        std::io::Read::read_to_string(&mut xtcp.child.0.stdout.take().unwrap(), &mut out).unwrap();
        let (ooo, lost) = if json {
            let j: serde_json::Value =
                serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
            assert_eq!(j["bytes"].as_u64(), Some(LEN as u64), "{j}");
            let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v} in {j}"));
            let c = &j["connections"][0];
            assert_eq!(n(&j["out_of_order"]), n(&c["out_of_order"]), "{j}");
            (
                n(&c["out_of_order"]) + n(&c["out_of_order_dropped"]),
                n(&j["xdp"]["dropped_at_redirect"])
                    + j["xdp"]["dropped_before_xdp"].as_u64().unwrap_or(0),
            )
        } else {
            // "xtcp: received N bytes in … = …, K out of order, …"
            let summary = line_of(&err, "xtcp: received ");
            let xdp = line_of(&err, "xtcp: XDP: ");
            (
                count_before(summary, " out of order"),
                count(xdp, "dropped at redirect") + count(xdp, "before XDP"),
            )
        };
        let pid = model.0.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let mut report = String::new();
        std::io::BufRead::read_line(&mut model_out, &mut report).unwrap();
        let m: serde_json::Value =
            serde_json::from_str(&report).unwrap_or_else(|e| panic!("{e}: {report}"));
        assert_eq!(m["socket_drops"], 0, "the sniffer missed frames: {m}");
        let flows = m["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 1, "{m}");
        let want = flows[0]["ooo"].as_u64().unwrap();
        let e = egress.counters().unwrap();
        assert!(e.dropped > e0.dropped, "B's egress lost nothing: {e:?}");
        assert!(want > 0, "nothing came out of order: {m}");
        assert_eq!(
            lost, 0,
            "A's side lost B's frames before xtcp's TCP: {out} {err}"
        );
        assert_eq!(ooo, want, "out of order: xtcp {ooo}, B sent {m}: {err}");
    }
}

/// Forged segments of an established connection (an attacker in the path,
/// or a peer that lost its state): 100 outside the window, 50 failing PAWS,
/// then 5 SYNs. `xtcp recv --json` counts each kind as the test sent them,
/// and what it answers on the wire (counted on B's side) is one ACK per
/// 500 ms, to the segments without data and to the SYNs (challenge ACKs)
/// alike, as Linux answers.
#[test]
fn forged_segments_are_counted_and_answered_at_most_twice_a_second() {
    let net = testnet(1500);
    let to = SocketAddr::new(net.a.ip4.into(), 5206);
    let mut args = vec!["recv".to_string()];
    args.extend(engine_args(&net, true));
    args.extend(["--listen", &to.to_string(), "--discard", "--json"].map(String::from));
    let mut xtcp = spawn_xtcp_piped(&net, &args);
    let forged = Forged::into(&net, to);
    let (status, err, _) = wait_exit(&mut xtcp, 60, "xtcp recv did not exit");
    assert!(status.success(), "{err}");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut xtcp.0.stdout.take().unwrap(), &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["bytes"], 3, "the forger's three bytes: {v}");
    let u = &v["connections"][0]["unacceptable"];
    forged.check(
        &format!("{u}"),
        [
            u["out_of_window"].as_u64().unwrap(),
            u["paws"].as_u64().unwrap(),
            u["challenge_acks"].as_u64().unwrap(),
            u["answers_skipped"].as_u64().unwrap(),
        ],
    );
    // The worker's sums (one queue, one connection) are the same.
    let w = &v["engine"]["workers"][0];
    let n = |k: &str| w[k].as_u64().unwrap_or_else(|| panic!("no {k} in {w}"));
    forged.check(
        &format!("{w}"),
        [
            n("tcp_out_of_window"),
            n("tcp_paws_drops"),
            n("tcp_challenge_acks"),
            n("tcp_unanswered"),
        ],
    );
}
