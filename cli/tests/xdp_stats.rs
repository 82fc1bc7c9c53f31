//! The XDP statistics xtcp prints (`xdp` in the JSON, the `XDP:` line)
//! against independent sources: the veth's own `ethtool -S`
//! `rx_queue_N_drops` of each queue, read by the test before xtcp starts
//! and after it exits, and the kernel sender's `Tcp: OutSegs` (its namespace's
//! `/proc/net/snmp`). And the UMEM line (`UMEM … MiB, … of it on huge
//! pages`) against the process's mappings, read by the test from outside.
//! Root needed; each test builds its own namespaces.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;

use common::{ENGINE, Reap, Watched, ethtool_stat, kill, link_stat, tcp_out_segs};
use xtcp_engine::testnet::TestNet;

const WAIT: Duration = Duration::from_secs(60);
const PORT: u16 = 5300;

/// `xtcp recv --discard` on side A with `extra` options, its standard
/// error collected as it comes; returns once its banner is out.
fn spawn_recv(net: &TestNet, json: bool, extra: &[&str]) -> Watched {
    let listen = format!("{}:{PORT}", net.a.ip4);
    let mut args = vec!["recv", "--discard", "--listen", &listen];
    if json {
        args.push("--json");
    }
    args.extend(extra);
    spawn_xtcp(net, &args, "listening on")
}

/// Waits (bounded) for xtcp to exit; returns its JSON (`Null` without
/// `--json`) and standard error.
fn finish(x: Watched) -> (serde_json::Value, String) {
    let (out, err) = wait_ok(x);
    if out.trim().is_empty() {
        return (serde_json::Value::Null, err);
    }
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}; stderr: {err}"));
    assert_eq!(v["ok"], true, "{v}; stderr: {err}");
    (v, err)
}

/// Side B's kernel sends 100 kB to xtcp's port (socat), and closes.
fn send_100k(net: &TestNet) {
    send_100k_from(net, None)
}

/// [`send_100k`] from CPU `cpu` if given (with several queues, B
/// transmits on the queue of the sending CPU).
fn send_100k_from(net: &TestNet, cpu: Option<u32>) {
    let st = common::on_cpu(&net.b.ns, cpu, "sh")
        .args([
            "-c",
            &format!(
                "head -c 100000 /dev/zero | socat -u STDIN TCP4:{}:{PORT}",
                net.a.ip4
            ),
        ])
        .status()
        .unwrap();
    assert!(st.success(), "socat could not send");
}

/// What a run's output says, from the JSON or the human `XDP:` line.
#[derive(Debug, PartialEq)]
struct Printed {
    steered: u64,
    dropped: u64,
    /// Percent, as printed (two decimals on the human line).
    percent: f64,
    ring_full: u64,
    fill_empty: u64,
    rx_dropped: u64,
    /// Arrived on a queue without an xtcp socket (dropped by the program).
    no_socket: u64,
    /// The driver's count; the human line names its source instead.
    driver: Option<u64>,
    /// What the veth's peer could not hand over (its `tx_dropped`).
    before_xdp: u64,
}

/// The number after `key` in `line`.
fn after(line: &str, key: &str) -> u64 {
    let rest = &line[line
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {line}"))
        + key.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {key:?} in {line}"))
}

fn printed(v: &serde_json::Value, err: &str) -> Printed {
    if v.is_null() {
        let line = xdp_line(err);
        assert!(
            line.contains("driver veth rx_queue_N_drops)"),
            "the source of the drop count is named: {line}"
        );
        let pct = line.split(" (").nth(1).unwrap();
        let pct: f64 = pct.split(' ').next().unwrap().parse().unwrap();
        return Printed {
            steered: after(line, "steered "),
            dropped: after(line, "dropped at redirect "),
            percent: pct,
            ring_full: after(line, "rx ring full "),
            fill_empty: after(line, "fill ring empty "),
            rx_dropped: after(line, "rx dropped "),
            no_socket: after(line, "no socket "),
            driver: None,
            before_xdp: after(line, "before XDP "),
        };
    }
    let x = &v["xdp"];
    assert_eq!(x["driver"], "veth", "{x}");
    assert_eq!(x["driver_counter"], "rx_queue_N_drops", "{x}");
    assert_eq!(x["drops_source"], "driver", "{x}");
    assert_eq!(x["queues"].as_array().unwrap().len(), 1, "{x}");
    assert_eq!(x["queues"][0]["driver_drops"], x["driver_drops"], "{x}");
    assert_eq!(x["queues"][0]["rx_ring_full"], x["rx_ring_full"], "{x}");
    Printed {
        steered: u(x, "steered"),
        dropped: u(x, "dropped_at_redirect"),
        percent: x["drop_percent"].as_f64().unwrap(),
        ring_full: u(x, "rx_ring_full"),
        fill_empty: u(x, "rx_fill_ring_empty_descs"),
        rx_dropped: u(x, "rx_dropped"),
        no_socket: u(x, "no_socket"),
        driver: Some(u(x, "driver_drops")),
        before_xdp: u(x, "dropped_before_xdp"),
    }
}

fn u(v: &serde_json::Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no number {field} in {v}"))
}

/// The `XDP:` line of standard error.
fn xdp_line(err: &str) -> &str {
    common::line_of(err, "xtcp: XDP: ")
}

/// A run that cannot drop: 100 kB (≈ 70 segments, with the handshake and
/// the close under 100 packets) cannot fill a 2048-entry RX ring, nor the
/// veth's 256-packet queue. xtcp prints 0 drops, 0 from the driver, and
/// as steered exactly the segments the kernel sender's stack sent; once
/// with `--json`, once as the human line.
#[test]
fn a_run_without_drops_prints_zero_and_steers_every_segment_the_peer_sent() {
    let net = common::testnet(1);
    for json in [true, false] {
        let segs0 = tcp_out_segs(&net.b.ns);
        let lost0 = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped");
        let drops0 = ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops");
        let x = spawn_recv(&net, json, &[]);
        send_100k(&net);
        let (v, err) = finish(x);
        let segs = tcp_out_segs(&net.b.ns) - segs0;
        let drops = ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops") - drops0;
        assert!(
            err.contains("received 100000 bytes") || u(&v, "bytes") == 100_000,
            "{err}"
        );
        assert_eq!(drops, 0, "the veth dropped nothing");
        let lost = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped") - lost0;
        assert_eq!(
            lost, 0,
            "nor did its peer (fewer packets than its queue holds)"
        );
        let p = printed(&v, &err);
        assert_eq!(
            p,
            Printed {
                // Every segment the sender's stack sent is TCP to xtcp's
                // port: all steered.
                steered: segs,
                dropped: 0,
                percent: 0.0,
                ring_full: 0,
                fill_empty: 0,
                rx_dropped: 0,
                no_socket: 0,
                driver: json.then_some(0),
                before_xdp: 0,
            },
            "{v} {err}"
        );
        assert_eq!(
            err.lines()
                .filter(|l| l.starts_with("xtcp: XDP queue"))
                .count(),
            0,
            "one queue: no per-queue lines: {err}"
        );
    }
}

/// Drops made to happen, not hoped for: xtcp's RX ring has 64 entries.
/// A kernel sender's stream is under way when xtcp is stopped (SIGSTOP);
/// then side B sends 1000 SYNs to xtcp's port as raw frames (a sender that
/// heeds no window: xtcp keeps the windows it offers within its ring, so a
/// TCP sender alone cannot overflow it). After 64, every one the veth
/// redirects fails. The test waits for the veth's own counter to rise,
/// lets xtcp go on (the SYNs it took get SYN-ACKs, which B's kernel
/// resets), and the stream completes. Once with `--json`, once human. Part
/// of the burst may not even reach XDP: the sending veth drops what its
/// peer's 256-packet queue has no room for, and counts it (TX dropped).
///
/// What the numbers must be, from the kernel (net/xdp/xsk.c, 6.18, copy
/// mode) and as measured here: a redirect into a socket whose RX ring is
/// full counts `rx_ring_full`; one that finds no fill-ring entry would
/// count `rx_fill_ring_empty_descs` and `rx_dropped`; either way veth
/// counts the failed `xdp_do_redirect` in `rx_queue_N_drops`, so the
/// veth's count is `rx_ring_full + rx_dropped`. The fill ring (128) is
/// larger than the RX ring (64) and was refilled before the stop, so all
/// of these drops are ring-full drops: `rx_ring_full` equals the veth's
/// count, `rx_dropped` and fill-ring-empty stay 0.
#[test]
fn drops_at_a_full_rx_ring_match_the_veth_counter() {
    const RAW_SYNS: u32 = 1000;
    let net = common::testnet(1);
    for json in [true, false] {
        let segs0 = tcp_out_segs(&net.b.ns);
        let lost0 = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped");
        let drops0 = ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops");
        let x = spawn_recv(&net, json, &["--ring", "64"]);
        let mut socat = Reap(
            net.b
                .ns
                .command("socat")
                .args(["-u", "STDIN", &format!("TCP4:{}:{PORT}", net.a.ip4)])
                .stdin(Stdio::piped())
                .spawn()
                .expect("socat (apt install socat)"),
        );
        let mut input = socat.0.stdin.take().unwrap();
        // 8 kB first: the stream is under way before xtcp stops.
        let first = vec![0u8; 8192];
        input.write_all(&first).unwrap();
        input.flush().unwrap();
        let filter = format!("dst {}:{PORT}", net.a.ip4);
        let deadline = Instant::now() + WAIT;
        loop {
            let out = net
                .b
                .ns
                .command("ss")
                .args(["-Htin", &filter])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let acked: u64 = text
                .split_whitespace()
                .find_map(|w| w.strip_prefix("bytes_acked:")?.parse().ok())
                .unwrap_or(0);
            if acked >= first.len() as u64 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the first 8 kB were not acked: {text}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = x.child.0.id();
        kill("-STOP", pid);
        common::syn_flood(&net, PORT, RAW_SYNS);
        let deadline = Instant::now() + WAIT;
        while ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops") == drops0 {
            assert!(
                Instant::now() < deadline,
                "no drop at the veth with xtcp stopped and a full window in flight"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        kill("-CONT", pid);
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..4 {
            input.write_all(&chunk).unwrap();
        }
        // socat sees the end and sends FIN.
        drop(input);
        let deadline = Instant::now() + WAIT;
        while socat.0.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "socat did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
        let (v, err) = finish(x);
        let drops = ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops") - drops0;
        let segs = tcp_out_segs(&net.b.ns) - segs0;
        // Segments the sender's veth dropped itself (its peer's 256-packet
        // queue full while the burst went out): never seen by XDP.
        let lost = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped") - lost0;
        let bytes = 8192 + (4u64 << 20);
        assert!(
            err.contains(&format!("received {bytes} bytes")) || u(&v, "bytes") == bytes,
            "{err}"
        );
        assert!(drops > 0);
        let mut p = printed(&v, &err);
        // Steered: every segment the sender's stack sent, retransmissions
        // included, and the raw SYNs, less those its veth dropped before
        // XDP. Dropped: the veth's own count; the sockets saw the same
        // failures, all as ring-full drops.
        let steered = segs + u64::from(RAW_SYNS) - lost;
        let pct = drops as f64 * 100.0 / steered as f64;
        // The JSON's float, parsed back, may differ in the last bit.
        if json && (p.percent - pct).abs() < 1e-9 {
            p.percent = pct;
        }
        assert_eq!(
            p,
            Printed {
                steered,
                dropped: drops,
                percent: if json {
                    pct
                } else {
                    format!("{pct:.2}").parse().unwrap()
                },
                ring_full: drops,
                fill_empty: 0,
                rx_dropped: 0,
                no_socket: 0,
                driver: json.then_some(drops),
                before_xdp: lost,
            },
            "{v} {err}"
        );
    }
}

/// With two queues, drops on one of them are that queue's: a SYN flood
/// sent from B's CPU 1 arrives on A's queue 1 (XPS) while xtcp is
/// stopped, and overflows that queue's 64-entry ring. Each queue's figures
/// (JSON `xdp.queues[]`, and the human `XDP queue N:` lines, printed
/// because a queue dropped) equal the veth's own count for that queue,
/// `rx_queue_N_drops`, read by the test; the sums equal the totals.
#[test]
fn drops_on_the_second_queue_are_reported_on_its_own_line() {
    const RAW_SYNS: u32 = 1000;
    let net = common::testnet(2);
    let counter = |q: usize| format!("rx_queue_{q}_drops");
    for json in [true, false] {
        let drops0 = [0, 1].map(|q| ethtool_stat(&net.a.ns, &net.a.iface, &counter(q)));
        let x = spawn_recv(
            &net,
            json,
            &["--queues", "2", "--cores", "0,1", "--ring", "64"],
        );
        let pid = x.child.0.id();
        kill("-STOP", pid);
        common::syn_flood_from(&net, PORT, RAW_SYNS, Some(1));
        let deadline = Instant::now() + WAIT;
        while ethtool_stat(&net.a.ns, &net.a.iface, &counter(1)) == drops0[1] {
            assert!(
                Instant::now() < deadline,
                "no drop on queue 1 with xtcp stopped and {RAW_SYNS} SYNs sent to it"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        kill("-CONT", pid);
        // The connection that ends `recv`: from CPU 0, so on queue 0.
        send_100k_from(&net, Some(0));
        let (v, err) = finish(x);
        let drops = [0, 1].map(|q| ethtool_stat(&net.a.ns, &net.a.iface, &counter(q)) - drops0[q]);
        assert!(drops[1] > 0, "{drops:?}");
        // (ring full, driver drops) per queue, as printed.
        let per_queue: Vec<(u64, u64)> = if json {
            let x = &v["xdp"];
            let qs = x["queues"].as_array().unwrap();
            assert_eq!(qs.len(), 2, "{x}");
            for (i, q) in qs.iter().enumerate() {
                assert_eq!(q["queue"], i, "{x}");
                assert_eq!(q["rx_dropped"], 0, "{x}");
                assert_eq!(q["rx_fill_ring_empty_descs"], 0, "{x}");
            }
            assert_eq!(u(x, "driver_drops"), drops[0] + drops[1], "{x}");
            assert_eq!(u(x, "rx_ring_full"), drops[0] + drops[1], "{x}");
            qs.iter()
                .map(|q| (u(q, "rx_ring_full"), u(q, "driver_drops")))
                .collect()
        } else {
            assert_eq!(
                after(xdp_line(&err), "dropped at redirect "),
                drops[0] + drops[1],
                "{err}"
            );
            (0..2)
                .map(|q| {
                    let line = common::line_of(&err, &format!("xtcp: XDP queue {q}: "));
                    (after(line, "rx ring full "), after(line, "driver drops "))
                })
                .collect()
        };
        assert_eq!(
            per_queue,
            vec![(drops[0], drops[0]), (drops[1], drops[1])],
            "the veth's drops per queue: {drops:?}; {v} {err}"
        );
    }
}

/// `--queues 1` on an interface of two receive queues: said at start
/// (what comes in on the other queue never reaches xtcp), and at the end
/// with the count: SYNs that side B sends from CPU 1 (so on queue 1) are
/// all `no socket`, and the line says to give `--queues 2`.
#[test]
fn fewer_queues_than_the_interface_has_are_warned_of_and_their_losses_said() {
    const SYNS: u32 = 20;
    let net = common::testnet(2);
    let mut x = spawn_recv(&net, false, &["--queues", "1", "--cores", "0"]);
    x.wait_for(&format!(
        "{} has 2 receive queues and xtcp serves 1 (--queues 1)",
        net.a.iface
    ));
    common::syn_flood_from(&net, PORT, SYNS, Some(1));
    // The connection that ends `recv`: from CPU 0, so on queue 0.
    send_100k_from(&net, Some(0));
    let (_, err) = finish(x);
    assert_eq!(
        after(xdp_line(&err), "no socket "),
        u64::from(SYNS),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "xtcp: XDP: {SYNS} packets of xtcp's connections came in on a queue without an xtcp \
             socket and were dropped (no socket): a SYN or data is sent again after a timeout, \
             a reset never: {} has 2 receive queues and xtcp served 1; give --queues 2",
            net.a.iface
        )),
        "{err}"
    );
}

/// A peer's answers that come in on a queue xtcp does not serve are lost
/// (B answers a SYN to a closed port with a reset, sent from the CPU that
/// took the SYN, so on queue 1 where xtcp's worker on core 1 sends): the
/// connect timeout's error says that the answers may be among them,
/// instead of only guessing at a firewall.
#[test]
fn a_connect_timeout_names_answers_lost_on_a_queue_not_served() {
    let net = common::testnet(2);
    let resets = common::tcp_mib(&net.b.ns, "OutRsts");
    let b = net.b.ip4.to_string();
    let args = [
        "send",
        "-c",
        &b,
        "-p",
        "9",
        "--zeros",
        "-n",
        "1M",
        "--queues",
        "1",
        "--cores",
        "1",
        "--connect-timeout",
        "1500",
    ];
    let x = spawn_xtcp(&net, &args, "");
    let (status, err) = {
        let mut x = x;
        x.wait_exit_within(WAIT, "xtcp send gives up")
    };
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        common::tcp_mib(&net.b.ns, "OutRsts") > resets,
        "B answered: {err}"
    );
    assert!(
        err.contains(&format!("no answer from {b}:9 within 1.5 s")),
        "{err}"
    );
    assert!(
        err.contains(
            "of xtcp's connections came in on a queue it does not serve, and were \
                      dropped: the answers may be among them; see the XDP line"
        ),
        "{err}"
    );
}

/// Frames side B's veth cannot hand to side A are lost before A's XDP
/// program runs, and B counts them (`tx_dropped`). Made to happen: B's MTU
/// is raised to 9000 while A's stays 1500, and B pings A with 3000-byte
/// packets, which veth refuses to forward (over A's MTU). xtcp reports, as
/// dropped before XDP, exactly what B counted over the run; a TCP stream
/// (MSS from A's SYN-ACK: 1460) still arrives whole.
#[test]
fn what_the_veth_peer_could_not_hand_over_is_counted_before_xdp() {
    const PINGS: u64 = 20;
    let net = common::testnet(1);
    let st = net
        .b
        .ns
        .command("ip")
        .args(["link", "set", "dev", &net.b.iface, "mtu", "9000"])
        .status()
        .unwrap();
    assert!(st.success(), "setting B's MTU");
    for json in [true, false] {
        let lost0 = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped");
        let x = spawn_recv(&net, json, &[]);
        // Every one is dropped: ping fails, as it should.
        let _ = net
            .b
            .ns
            .command("ping")
            .args([
                "-q",
                "-n",
                "-c",
                &PINGS.to_string(),
                "-i",
                "0.01",
                "-W",
                "1",
            ])
            .args(["-s", "3000", "-M", "do", &net.a.ip4.to_string()])
            .output()
            .expect("ping (apt install iputils-ping)");
        let deadline = Instant::now() + WAIT;
        while link_stat(&net.b.ns, &net.b.iface, "tx", "dropped") < lost0 + PINGS {
            assert!(Instant::now() < deadline, "B's veth dropped no ping");
            std::thread::sleep(Duration::from_millis(10));
        }
        send_100k(&net);
        let (v, err) = finish(x);
        let lost = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped") - lost0;
        assert!(lost >= PINGS, "{lost}");
        assert!(
            err.contains("received 100000 bytes") || u(&v, "bytes") == 100_000,
            "{err}"
        );
        let p = printed(&v, &err);
        assert_eq!(p.before_xdp, lost, "{v} {err}");
        if !json {
            assert!(
                xdp_line(&err).contains(&format!(
                    "before XDP {lost} (veth peer's tx_dropped, every flow's)"
                )),
                "{err}"
            );
        }
    }
}

/// Starts `xtcp ARGS` on side A, its standard error collected; returns once
/// `banner` is on it.
fn spawn_xtcp(net: &TestNet, args: &[&str], banner: &str) -> Watched {
    let args: Vec<String> = args
        .iter()
        .chain(["--iface", net.a.iface.as_str()].iter())
        .chain(ENGINE.iter())
        .map(|s| s.to_string())
        .collect();
    let mut x = Watched::spawn(net, &args, Stdio::piped());
    if !banner.is_empty() {
        x.wait_for(banner);
    }
    x
}

/// Waits (bounded) for a successful exit; returns standard output and error.
fn wait_ok(mut x: Watched) -> (String, String) {
    let (status, err) = x.wait_exit_within(WAIT, "xtcp exits");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut x.child.0.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success(), "xtcp failed: {out} {err}");
    (out, err)
}

/// `xtcp serve -1` (human summary) under a kernel `iperf3 -c -n 1M`:
/// fewer packets than its 2048-entry RX ring holds, so nothing can drop at
/// the redirect; the XDP line says 0, and steered is every segment the
/// client's stack sent (control and data connection) less what its veth
/// dropped before XDP.
#[test]
fn serve_prints_the_xdp_line_when_it_stops() {
    let net = common::testnet(1);
    let segs0 = tcp_out_segs(&net.b.ns);
    let lost0 = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped");
    let drops0 = ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops");
    let x = spawn_xtcp(&net, &["serve", "-1", "-i", "0"], "listening on");
    let out = net
        .b
        .ns
        .command("iperf3")
        .args(["-c", &net.a.ip4.to_string(), "-n", "1M"])
        .output()
        .expect("iperf3 (apt install iperf3)");
    assert!(
        out.status.success(),
        "iperf3 -c: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (_, err) = wait_ok(x);
    let lost = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped") - lost0;
    let steered = tcp_out_segs(&net.b.ns) - segs0 - lost;
    assert_eq!(
        ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops"),
        drops0
    );
    let line = err
        .lines()
        .find(|l| l.starts_with("xtcp serve: XDP: "))
        .unwrap_or_else(|| panic!("no XDP line: {err}"));
    assert!(
        line.starts_with(&format!(
            "xtcp serve: XDP: steered {steered}, dropped at redirect 0 (0.00 %, driver veth \
             rx_queue_N_drops): rx ring full 0, fill ring empty 0, rx dropped 0, rx invalid \
             descs 0, tx invalid descs 0, tx ring empty "
        )) && line.ends_with(&format!(
            "; no socket 0; before XDP {lost} (veth peer's tx_dropped, every flow's)"
        )),
        "{line}"
    );
}

/// `xtcp client -J` against a kernel `iperf3 -s -1`: the JSON's `xdp`
/// object says 0 drops (xtcp receives only ACKs and control: far fewer
/// packets than its RX ring holds) and as steered every segment the
/// server's stack sent less what its veth dropped before XDP.
#[test]
fn client_json_carries_the_xdp_statistics() {
    let net = common::testnet(1);
    let _server = Reap(
        net.b
            .ns
            .command("iperf3")
            .args(["-s", "-1", "-B", &net.b.ip4.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("iperf3 (apt install iperf3)"),
    );
    common::wait_listening(&net.b.ns, 5201, WAIT, None);
    let segs0 = tcp_out_segs(&net.b.ns);
    let lost0 = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped");
    let drops0 = ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops");
    let ip = net.b.ip4.to_string();
    let x = spawn_xtcp(&net, &["client", "-c", &ip, "-n", "1M", "-J"], "");
    let (out, _) = wait_ok(x);
    let steered = tcp_out_segs(&net.b.ns)
        - segs0
        - (link_stat(&net.b.ns, &net.b.iface, "tx", "dropped") - lost0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let x = &v["xdp"];
    assert_eq!(u(x, "steered"), steered, "{x}");
    assert_eq!(
        u(x, "driver_drops"),
        ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops") - drops0,
        "{x}"
    );
    assert_eq!(u(x, "dropped_at_redirect"), 0, "{x}");
    assert_eq!(u(x, "rx_ring_full"), 0, "{x}");
    assert_eq!(x["drop_percent"].as_f64(), Some(0.0), "{x}");
    assert_eq!(x["queues"][0]["queue"], 0, "{x}");
    // veth has no zero-copy (`xtcp probe`; tests/vm checks `true`).
    assert_eq!(x["zero_copy"], false, "{x}");
}

/// Size and `AnonHugePages` (bytes) of each readable-writable mapping in
/// `smaps` text.
fn rw_mappings(smaps: &str) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut cur: Option<u64> = None;
    for l in smaps.lines() {
        let mut w = l.split_whitespace();
        let (Some(first), Some(second)) = (w.next(), w.next()) else {
            continue;
        };
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
        {
            cur = second.starts_with("rw").then_some(b - a);
        } else if first == "AnonHugePages:"
            && let Some(size) = cur
        {
            out.push((size, second.parse::<u64>().unwrap() * 1024));
        }
    }
    out
}

/// The UMEM the report describes (`engine.umem` in the JSON, the `UMEM`
/// part of the summary) is a mapping of the process, as the test reads
/// `/proc/PID/smaps` from outside while it runs: one of exactly that
/// size with exactly that much on huge pages, and that size is the frames
/// given times the frame size reported. The engine offers the area to
/// transparent huge pages; whether the kernel grants them is the system's
/// business, so the count is checked, not a minimum. The frame size: at
/// MTU 1500 in copy mode each segment takes a frame of its own (the
/// single-descriptor layout), so `auto` takes 2048-byte frames; a page
/// where the layout is chained or the size is given.
#[test]
fn the_umem_report_matches_the_process_mapping() {
    let net = common::testnet(1);
    let frames = common::engine_frames();
    let runs: [(bool, &[&str], u64); 4] = [
        (true, &[], 2048),
        (false, &[], 2048),
        (true, &["--tx-layout", "chained"], 4096),
        (false, &["--frame-size", "4096"], 4096),
    ];
    for (json, extra, frame) in runs {
        let x = spawn_recv(&net, json, extra);
        let pid = x.child.0.id();
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
        let maps = rw_mappings(&smaps);
        send_100k(&net);
        let (v, err) = finish(x);
        if json {
            let m = &v["engine"]["umem"];
            let (bytes, huge) = (u(m, "bytes"), u(m, "huge_bytes"));
            assert_eq!(m["reserved_hugepages"], false, "{m}");
            assert_eq!(u(m, "frame_size"), frame, "{extra:?}: {m}");
            assert_eq!(bytes, frames * frame, "{extra:?}: {m}");
            assert!(huge <= bytes, "{m}");
            assert!(
                maps.contains(&(bytes, huge)),
                "no mapping of {bytes} bytes with {huge} on huge pages: {maps:?}"
            );
        } else {
            let line = err
                .lines()
                .find(|l| l.contains(" UMEM "))
                .unwrap_or_else(|| panic!("no UMEM in the summary: {err}"));
            let (mib, huge_mib) = (after(line, "UMEM "), after(line, "MiB, "));
            assert!(line.contains("of it on huge pages (transparent)"), "{line}");
            assert_eq!(after(line, "transparent), "), frame, "{extra:?}: {line}");
            // As the summary rounds (`{:.0}` of MiB).
            let round = |b: u64| -> u64 {
                format!("{:.0}", b as f64 / f64::from(1 << 20))
                    .parse()
                    .unwrap()
            };
            assert_eq!(mib, round(frames * frame), "{extra:?}: {line}");
            assert!(
                maps.iter()
                    .any(|&(b, h)| round(b) == mib && round(h) == huge_mib),
                "no mapping of {mib} MiB with {huge_mib} MiB on huge pages: {maps:?}"
            );
        }
    }
}
