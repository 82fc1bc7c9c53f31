//! `xtcp send` and `xtcp recv` against the kernel's TCP (socat) on a test
//! network: 1 GiB, SHA-256 compared, at MTU 1500, 9000 and 65535, IPv4 and
//! IPv6, with and without MSS clipping, both directions; a killed peer; the
//! errors a user meets. Root needed (CI runs as root); each test builds its
//! own namespaces.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use xtcp_engine::app::bulk::pattern_fill;
use xtcp_engine::testnet::{TestNet, TestNetConfig};

const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");
const SEED: u64 = 42;
const GIB: u64 = 1 << 30;

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

fn sha256_file(p: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(p)
        .output()
        .expect("sha256sum");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)[..64].to_owned()
}

/// The 1 GiB pattern stream in a file (made once per test process) and its
/// SHA-256.
fn pattern_file() -> &'static (PathBuf, String) {
    static F: OnceLock<(PathBuf, String)> = OnceLock::new();
    F.get_or_init(|| {
        let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pattern-42-1g.bin");
        if std::fs::metadata(&p).map(|m| m.len()).ok() != Some(GIB) || !cached_matches(&p) {
            let part = p.with_extension(format!("part{}", std::process::id()));
            let mut f = std::io::BufWriter::new(std::fs::File::create(&part).unwrap());
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0;
            while off < GIB {
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
fn cached_matches(p: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(p) else {
        return false;
    };
    let mut got = vec![0u8; 1 << 16];
    let mut want = vec![0u8; 1 << 16];
    for off in [0, GIB - (1 << 16)] {
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

/// Waits (bounded) for a child with piped stderr to exit; returns its status
/// and what it printed there.
fn wait_exit(child: &mut Reap, limit_s: u64, what: &str) -> (std::process::ExitStatus, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(limit_s), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err).unwrap();
    (status, err)
}

/// No XDP program stays attached to side A's interface.
fn assert_detached(net: &TestNet) {
    let link = net.a.ns.ip(&["link", "show", &net.a.iface]).unwrap();
    let text = String::from_utf8_lossy(&link.stdout);
    assert!(!text.contains("xdp"), "nothing stays attached: {text}");
}

/// Kills a child on drop (a failing test leaves nothing running).
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn socat_addr(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("TCP4:{a}:{port}"),
        IpAddr::V6(a) => format!("TCP6:[{a}]:{port}"),
    }
}

fn socat_listen(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("TCP4-LISTEN:{port},bind={a},reuseaddr"),
        IpAddr::V6(a) => format!("TCP6-LISTEN:{port},bind=[{a}],reuseaddr"),
    }
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
        "8192",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// xtcp send (pattern, or the pattern file with `from_file`) → socat
/// writing a file; SHA-256 compared.
fn send_to_kernel(net: &TestNet, v6: bool, clip: bool, from_file: bool) {
    let (pfile, want) = pattern_file();
    let (a, b): (IpAddr, IpAddr) = if v6 {
        (net.a.ip6.into(), net.b.ip6.into())
    } else {
        (net.a.ip4.into(), net.b.ip4.into())
    };
    let _ = a;
    let out_file = tmp(&format!("sent-{}-{v6}-{clip}.bin", net.a.iface));
    let socat = Reap(
        net.b
            .ns
            .command("socat")
            .args([
                "-u",
                &socat_listen(b, 5201),
                &format!("OPEN:{},creat,trunc", out_file.display()),
            ])
            .spawn()
            .expect("socat (apt install socat)"),
    );
    std::thread::sleep(Duration::from_millis(300));
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
            "1G".into(),
        ]);
    }
    let out = net.a.ns.command(XTCP).args(&args).output().unwrap();
    let err = ok(&out);
    assert!(err.contains("sent 1073741824 bytes"), "{err}");
    // socat exits once it has the whole stream.
    let mut socat = socat;
    let start = Instant::now();
    while socat.0.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = sha256_file(&out_file);
    let _ = std::fs::remove_file(&out_file);
    assert_eq!(&got, want, "SHA-256 of what the kernel received");
}

/// socat sending the pattern file → xtcp recv writing a file (SHA-256
/// compared), or with `discard`, dropping it.
fn recv_from_kernel(net: &TestNet, v6: bool, clip: bool, discard: bool) {
    let (pfile, want) = pattern_file();
    let a: IpAddr = if v6 {
        net.a.ip6.into()
    } else {
        net.a.ip4.into()
    };
    let out_file = tmp(&format!("recv-{}-{v6}-{clip}.bin", net.a.iface));
    let mut args = vec!["recv".to_string()];
    args.extend(engine_args(net, clip));
    args.extend([
        "--listen".into(),
        std::net::SocketAddr::new(a, 5202).to_string(),
    ]);
    if discard {
        args.push("--discard".into());
    } else {
        args.extend(["--out".into(), out_file.display().to_string()]);
    }
    let xtcp = spawn_xtcp(net, &args);
    // Retry the connect while xtcp starts.
    let mut sent = false;
    for _ in 0..50 {
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
    let (status, err) = wait_exit(&mut xtcp, 120, "xtcp recv did not exit");
    assert!(status.success(), "xtcp recv failed: {err}");
    assert!(err.contains("received 1073741824 bytes"), "{err}");
    // Payload taken straight from the RX frames (each frame of a
    // multi-buffer packet in turn at MTU 9000 and 65535), not through TCP's
    // receive buffer: by the discard sink, all of it but what came out of
    // order; by the file writer, what its pipe had room for at the time.
    let in_place: u64 = err
        .split(" bytes taken in place")
        .next()
        .and_then(|h| h.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no in-place count in {err}"));
    if discard {
        assert!(
            in_place >= (1 << 30) / 10 * 9,
            "{in_place} bytes in place: {err}"
        );
        return;
    }
    assert!(in_place > 0, "{in_place} bytes in place: {err}");
    let got = sha256_file(&out_file);
    let _ = std::fs::remove_file(&out_file);
    assert_eq!(&got, want, "SHA-256 of what xtcp received");
}

fn matrix(mtu: u32) {
    let net = testnet(mtu);
    for v6 in [false, true] {
        for clip in [true, false] {
            send_to_kernel(&net, v6, clip, mtu == 9000 && !v6 && clip);
            recv_from_kernel(&net, v6, clip, false);
        }
    }
    recv_from_kernel(&net, false, true, true);
}

#[test]
fn one_gib_both_ways_mtu_1500_ipv4_ipv6_clip_on_off() {
    matrix(1500);
}

#[test]
fn one_gib_both_ways_mtu_9000_ipv4_ipv6_clip_on_off() {
    matrix(9000);
}

#[test]
fn one_gib_both_ways_mtu_65535_ipv4_ipv6_clip_on_off() {
    matrix(65535);
}

#[test]
fn killed_kernel_peer_is_reported_and_nothing_stays_attached() {
    let net = testnet(1500);
    let socat = net
        .b
        .ns
        .command("socat")
        .args([
            "-u",
            &socat_listen(net.b.ip4.into(), 5201),
            "OPEN:/dev/null",
        ])
        .spawn()
        .expect("socat (apt install socat)");
    let mut socat = Reap(socat);
    std::thread::sleep(Duration::from_millis(300));
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
    std::thread::sleep(Duration::from_secs(2));
    socat.0.kill().unwrap();
    let (status, err) = wait_exit(&mut xtcp, 120, "xtcp send did not notice the dead peer");
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

#[test]
fn sigint_closes_connections_and_detaches() {
    let net = testnet(1500);
    let mut args = vec!["recv".to_string()];
    args.extend(engine_args(&net, true));
    args.extend([
        "--listen".into(),
        "5205".into(),
        "--discard".into(),
        "--keep-listening".into(),
        "--grace".into(),
        "1".into(),
    ]);
    let mut xtcp = spawn_xtcp(&net, &args);
    std::thread::sleep(Duration::from_secs(1));
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
    std::thread::sleep(Duration::from_secs(1));
    let pid = xtcp.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let (status, err) = wait_exit(&mut xtcp, 30, "xtcp recv did not stop on SIGINT");
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
