//! One vocabulary across xtcp's commands (issue 17 item 4), end to end on
//! test networks of their own (root needed; CI runs as root):
//!
//! - without `--iface`, `send` and `client` run on the interface the kernel
//!   routes the peer through, `recv` and `serve` on the one that holds the
//!   `-B` address, and say so; the bytes arrive whole;
//! - without `-B` too, `serve` runs on the one interface that is up with an
//!   address and serves its IPv4 and IPv6 addresses;
//! - where nothing says which interface, the error names what was tried
//!   (the route asked for, the address looked for, the candidates);
//! - the `--wakeup` names have the same effect as the spellings they
//!   replace (`busy`, `need-wakeup`; xsk-bench's `need`, `busy`).
//!
//! That each earlier spelling parses to exactly what its new one does, and
//! that `--help` shows only the new ones, is checked in `cli/src/args.rs`;
//! the other tests (bulk, xsk_bench, bench, probe) still run the earlier
//! spellings (`--connect`, `--listen`, `--duration`, `probe IFACE`).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{
    ENGINE, Reap, Watched, XTCP, acked_sender, need_iperf3, socat_receiver, testnet, wait_listening,
};
use xtcp_engine::testnet::TestNet;
use xtcp_engine::worker::bulk::pattern_fill;

const WAIT: Duration = Duration::from_secs(60);

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("vocab-{}-{name}", std::process::id()))
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    pattern_fill(seed, 0, &mut v);
    v
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter()
        .map(|s| s.to_string())
        .chain(ENGINE.map(String::from))
        .collect()
}

/// Runs xtcp in side A's namespace to its end.
fn run_a(net: &TestNet, a: &[String]) -> Output {
    net.a
        .ns
        .command("timeout")
        .arg("120")
        .arg(XTCP)
        .args(a)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits (bounded) for a child to exit.
fn wait_gone(child: &mut Reap, what: &str) {
    let start = Instant::now();
    while child.0.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < WAIT, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// No XDP program stays attached to side A's interface.
fn assert_detached(net: &TestNet) {
    let link = net.a.ns.ip(&["link", "show", &net.a.iface]).unwrap();
    let text = String::from_utf8_lossy(&link.stdout);
    assert!(!text.contains("xdp"), "nothing stays attached: {text}");
}

/// `xtcp send -c HOST -p PORT` without `--iface`, IPv4 and IPv6: it names
/// the veth it found by the route, and socat receives every byte of the
/// pattern.
#[test]
fn send_without_iface_takes_the_route_and_moves_every_byte() {
    let net = testnet(1);
    let len = 32 << 20;
    let want = pattern(7, len);
    for (port, dst) in [
        (5301u16, IpAddr::V4(net.b.ip4)),
        (5302, IpAddr::V6(net.b.ip6)),
    ] {
        let file = tmp(&format!("send-{port}.bin"));
        let mut socat = socat_receiver(
            &net,
            dst,
            port,
            &format!("OPEN:{},creat,trunc", file.display()),
        );
        let out = run_a(
            &net,
            &args(&[
                "send",
                "-c",
                &dst.to_string(),
                "-p",
                &port.to_string(),
                "--pattern",
                "7",
                "-n",
                "32M",
            ]),
        );
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        let found = format!("xtcp: using interface {} (route to {dst})", net.a.iface);
        assert!(err.contains(&found), "stderr says {found:?}: {err}");
        assert!(err.contains(&format!("sent {len} bytes")), "{err}");
        wait_gone(&mut socat, "socat did not get the end of the stream");
        let got = std::fs::read(&file).unwrap();
        let _ = std::fs::remove_file(&file);
        assert_eq!(got.len(), len, "bytes on disk");
        assert!(got == want, "the file holds the pattern, byte for byte");
    }
    assert_detached(&net);
}

/// `xtcp recv -B ADDR -p PORT` without `--iface`: it names the veth that
/// holds ADDR, and the file holds every byte a kernel sender sent.
#[test]
fn recv_without_iface_takes_the_interface_holding_the_address() {
    let net = testnet(1);
    let len = 16 << 20;
    let file = tmp("recv.bin");
    let mut xtcp = Watched::spawn(
        &net,
        &args(&[
            "recv",
            "-B",
            &net.a.ip4.to_string(),
            "-p",
            "5303",
            "--out",
            &file.display().to_string(),
        ]),
        Stdio::null(),
    );
    xtcp.wait_for(&format!(
        "xtcp: using interface {} (holds {})",
        net.a.iface, net.a.ip4
    ));
    xtcp.wait_for("listening on");
    let dst = SocketAddr::new(IpAddr::V4(net.a.ip4), 5303);
    drop(acked_sender(&net, dst, 9, len));
    let (status, err) = xtcp.wait_exit("recv ends after the sender's FIN");
    assert!(status.success(), "{err}");
    assert!(err.contains(&format!("received {len} bytes")), "{err}");
    let got = std::fs::read(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(got.len(), len, "bytes on disk");
    assert!(got == pattern(9, len), "the file holds the pattern");
    assert_detached(&net);
}

/// `-B ADDR%DEV` names the interface for `send` and `recv` too, as it
/// does for `client` and `serve` (their parser refused it: "invalid IP
/// address syntax").
#[test]
fn send_and_recv_take_addr_percent_dev() {
    let net = testnet(1);
    let at = |ip: IpAddr, dev: &str| format!("{ip}%{dev}");
    let mut xtcp = Watched::spawn(
        &net,
        &args(&[
            "recv",
            "-B",
            &at(IpAddr::V4(net.a.ip4), &net.a.iface),
            "-p",
            "5304",
            "--discard",
        ]),
        Stdio::null(),
    );
    xtcp.wait_for(&format!("listening on {}:5304 ({}", net.a.ip4, net.a.iface));
    let len = 1 << 20;
    drop(acked_sender(
        &net,
        SocketAddr::new(IpAddr::V4(net.a.ip4), 5304),
        9,
        len,
    ));
    let (status, err) = xtcp.wait_exit("recv ends after the sender's FIN");
    assert!(status.success(), "{err}");
    assert!(!err.contains("using interface"), "-B named it: {err}");
    let mut socat = socat_receiver(&net, IpAddr::V4(net.b.ip4), 5305, "OPEN:/dev/null");
    let out = run_a(
        &net,
        &args(&[
            "send",
            "-B",
            &at(IpAddr::V4(net.a.ip4), &net.a.iface),
            "-c",
            &net.b.ip4.to_string(),
            "-p",
            "5305",
            "--zeros",
            "-n",
            "1M",
        ]),
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("using interface"), "-B named it: {err}");
    wait_gone(&mut socat, "socat did not get the end of the stream");
    assert_detached(&net);
}

/// `serve -B ADDR` and `client -c HOST` without `--iface`, against stock
/// iperf3 on the other side: each names the veth, and the peer's own
/// report has the bytes.
#[test]
fn serve_and_client_without_iface() {
    need_iperf3();
    let net = testnet(1);
    let mut serve = Watched::spawn(
        &net,
        &args(&["serve", "-1", "-B", &net.a.ip4.to_string()]),
        Stdio::null(),
    );
    serve.wait_for(&format!(
        "xtcp: using interface {} (holds {})",
        net.a.iface, net.a.ip4
    ));
    serve.wait_for("listening on");
    let v = common::iperf3_json(&net, &["-t", "1"]);
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    assert!(sent > 0, "{v}");
    let (status, err) = serve.wait_exit("serve -1 ends after its test");
    assert!(status.success(), "{err}");

    let mut server = Reap(
        net.b
            .ns
            .command("iperf3")
            .args(["-s", "-1", "-p", "5304"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&net.b.ns, 5304, WAIT, Some(&mut server.0));
    let out = run_a(
        &net,
        &args(&[
            "client",
            "-c",
            &net.b.ip4.to_string(),
            "-p",
            "5304",
            "-t",
            "1",
            "-J",
        ]),
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let found = format!(
        "xtcp: using interface {} (route to {})",
        net.a.iface, net.b.ip4
    );
    assert!(err.contains(&found), "stderr says {found:?}: {err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let received = v["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(received > 0, "{v}");
    wait_gone(&mut server, "iperf3 -s -1 ends after its test");
    assert_detached(&net);
}

/// Where `--iface` cannot be inferred the error says what was asked and
/// what to give, and nothing is attached.
#[test]
fn without_iface_the_errors_name_what_was_tried() {
    let net = testnet(1);
    let fails = |a: &[&str], needles: &[&str]| {
        let out = run_a(&net, &args(a));
        let err = stderr(&out);
        eprintln!("{a:?}: {err}");
        assert!(!out.status.success(), "{a:?} fails: {err}");
        for n in needles {
            assert!(err.contains(n), "{a:?}: stderr lacks {n:?}: {err}");
        }
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    // No route: the namespace has none but the veth's subnets.
    fails(
        &["send", "-c", "203.0.113.5", "--zeros", "-n", "1M"],
        &[
            "cannot infer --iface: the kernel has no route to 203.0.113.5 (RTM_GETROUTE: ",
            "give --iface",
        ],
    );
    fails(
        &["client", "-c", "203.0.113.5", "-t", "1"],
        &["the kernel has no route to 203.0.113.5"],
    );
    // This host's own address.
    fails(
        &["send", "-c", "127.0.0.1", "--zeros", "-n", "1M"],
        &["127.0.0.1 is routed through lo (an address of this host)"],
    );
    // -B with an address no interface holds.
    let candidates = format!("the candidates are {} ({})", net.a.iface, net.a.ip4);
    fails(
        &["recv", "-B", "198.18.9.9", "--discard"],
        &[
            "no interface here has the address 198.18.9.9 (-B)",
            &candidates,
        ],
    );
    // IPv6: the candidates are those with IPv6 addresses, not link-local
    // ones (a listener never serves those).
    let out = run_a(&net, &args(&["recv", "-B", "2001:2::99", "--discard"]));
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!(
            "the candidates are {} ({})",
            net.a.iface, net.a.ip6
        )),
        "{err}"
    );
    assert!(!err.contains("fe80"), "{err}");
    // Listening without -B where two interfaces have addresses: which one
    // is meant? (A second veth pair, both ends in A's namespace, goes
    // with it.)
    for cmd in [
        "link add xtra0 type veth peer name xtra1",
        "addr add 198.19.255.1/32 dev xtra0",
        "link set xtra0 up",
    ] {
        let out = net
            .a
            .ns
            .command("ip")
            .args(cmd.split(' '))
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {cmd}: {}", stderr(&out));
    }
    let both = format!("{} ({}, {})", net.a.iface, net.a.ip4, net.a.ip6);
    fails(
        &["recv", "--discard"],
        &[
            "cannot infer --iface without -B; the candidates are ",
            &both,
            "xtra0 (198.19.255.1)",
            "give --iface or -B ADDR",
        ],
    );
    fails(
        &["serve"],
        &["cannot infer --iface without -B", &both, "xtra0"],
    );
    fails(
        &["serve", "-4"],
        &[
            "cannot infer --iface without -B",
            &format!("{} ({})", net.a.iface, net.a.ip4),
            "xtra0 (198.19.255.1)",
        ],
    );
    // With -6, only the test network's interface has an address of the
    // family: it is taken, and only that address served.
    let mut serve = Watched::spawn(&net, &args(&["serve", "-6", "-1"]), Stdio::null());
    serve.wait_for(&format!(
        "xtcp: using interface {} (the only one up with an address to serve: {}; -B or \
         --iface chooses)",
        net.a.iface, net.a.ip6
    ));
    serve.wait_for(&format!(
        "listening on [{}]:5201 ({}, copy mode)",
        net.a.ip6, net.a.iface
    ));
    serve.signal("-INT");
    let (status, err) = serve.wait_exit("serve -6 ends at SIGINT");
    // (-1 stopped before its test came: a failure, as iperf3 -s -1's.)
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("-1: stopped before a test came"), "{err}");
    assert_detached(&net);
}

/// `serve` without `--iface` or `-B`, as `iperf3 -s` is run: the test
/// network's side has one interface with addresses, and serve takes it
/// and serves both its addresses; a stock client over IPv6 is served.
#[test]
fn serve_without_iface_or_address_serves_the_only_interface() {
    need_iperf3();
    let net = testnet(1);
    let mut serve = Watched::spawn(&net, &args(&["serve", "-1"]), Stdio::null());
    serve.wait_for(&format!(
        "xtcp: using interface {} (the only one up with an address to serve: {}, {}; -B or \
         --iface chooses)",
        net.a.iface, net.a.ip4, net.a.ip6
    ));
    serve.wait_for(&format!(
        "listening on {}:5201 and [{}]:5201 ({}, copy mode)",
        net.a.ip4, net.a.ip6, net.a.iface
    ));
    let v = common::iperf3_json_to(&net, &[], &net.a.ip6.to_string(), &["-t", "1"]);
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    assert!(sent > 0, "{v}");
    let (status, err) = serve.wait_exit("serve -1 ends after its test");
    assert!(status.success(), "{err}");
    assert_detached(&net);
}

/// The engine's `--wakeup`: `spin` (and its earlier name `busy`) never
/// sleeps; `poll` (and `need-wakeup`) sleeps in poll() when idle, as the
/// worker's own counter shows. The idle time is certain: interrupted, recv
/// closes and waits out `--grace` for a FIN the kernel sender, which
/// holds its socket open, never sends (a transfer alone may have no idle
/// turn far enough from a timer to sleep: CI saw an 8 MiB send with
/// `poll` and 0 sleeps).
#[test]
fn engine_wakeup_names_and_their_earlier_spellings_do_the_same() {
    let net = testnet(1);
    for (i, (name, sleeps)) in [
        ("spin", false),
        ("busy", false),
        ("poll", true),
        ("need-wakeup", true),
    ]
    .into_iter()
    .enumerate()
    {
        let port = 5310 + i as u16;
        let listen = port.to_string();
        let a = args(&[
            "recv",
            "--iface",
            &net.a.iface,
            "--listen",
            &listen,
            "--discard",
            "--grace",
            "1",
            "--wakeup",
            name,
            "-J",
        ]);
        let mut recv = Watched::spawn(&net, &a, Stdio::piped());
        recv.wait_for("listening on");
        let len = 1 << 20;
        let held = acked_sender(&net, SocketAddr::new(net.a.ip4.into(), port), 9, len);
        recv.signal("-INT");
        let (status, err) = recv.wait_exit("xtcp recv ends after --grace");
        assert!(!status.success(), "reset after --grace: {err}");
        drop(held);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut recv.child.0.stdout.take().unwrap(), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["bytes"], len, "{v}");
        let n = v["engine"]["workers"][0]["sleeps"].as_u64().unwrap();
        assert_eq!(n > 0, sleeps, "--wakeup {name}: {n} sleeps");
    }
}

/// xsk-bench's `--wakeup`: `spin` (earlier `need`) binds with
/// need-wakeup, `kick` (earlier `busy`) and `poll` without, as the bind
/// result in the report says.
#[test]
fn xsk_bench_wakeup_names_and_their_earlier_spellings_do_the_same() {
    for (name, need_wakeup) in [
        ("spin", true),
        ("need", true),
        ("kick", false),
        ("busy", false),
        ("poll", false),
    ] {
        let out = Command::new(XTCP)
            .args([
                "xsk-bench",
                "--testnet",
                "-t",
                "0.5",
                "-J",
                "--wakeup",
                name,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for side in ["tx", "rx"] {
            assert_eq!(
                v[side]["bind"]["need_wakeup"].as_bool(),
                Some(need_wakeup),
                "--wakeup {name}, side {side}: {v}"
            );
        }
        assert!(v["tx"]["packets"].as_u64().unwrap() > 0, "{v}");
    }
}

/// `probe --iface IFACE` and the earlier `probe IFACE` report the same.
#[test]
fn probe_iface_flag_and_positional_agree() {
    let net = testnet(1);
    let json = |a: &[&str]| {
        let out = net.a.ns.command(XTCP).args(a).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // Counters that move between two runs.
        v["interface"]["stats"] = serde_json::Value::Null;
        v
    };
    let new = json(&["probe", "--iface", &net.a.iface, "--json"]);
    let old = json(&["probe", &net.a.iface, "--json"]);
    assert_eq!(new["interface"]["name"], net.a.iface.as_str());
    assert_eq!(new, old);
}
