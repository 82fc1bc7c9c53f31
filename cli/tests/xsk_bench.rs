//! `xtcp xsk-bench` end to end (its counts against the receiving kernel's, an
//! outside sender's and the driver's, and the syscalls strace sees), and the
//! failure cases a user meets: each in network namespaces of its own (root
//! needed; CI runs as root).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xtcp_engine::testnet::{TestNet, TestNetConfig};

mod common;

use common::{Watched, ethtool_stat, syn_flood};

const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");

fn testnet(mtu: u32, queues: u32) -> TestNet {
    TestNet::new(TestNetConfig {
        mtu,
        queues,
        offloads: false,
    })
    .unwrap_or_else(|e| panic!("cannot build the test network (these tests run as root): {e}"))
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "xtcp failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

fn fails_with(out: &std::process::Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success: {err}"
    );
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
    assert!(
        !err.contains("panicked"),
        "a clear error, not a panic: {err}"
    );
}

#[test]
fn testnet_rxdrop_counts_what_txonly_sent() {
    let out = Command::new(XTCP)
        .args([
            "xsk-bench",
            "--testnet",
            "--duration",
            "1",
            "--size",
            "64",
            "--json",
        ])
        .output()
        .unwrap();
    let v = json(&out);
    let tx = v["tx"]["packets"].as_u64().unwrap();
    let rx = v["rx"]["packets"].as_u64().unwrap();
    assert!(tx > 0 && rx > 0, "{v}");
    assert!(rx <= tx, "{v}");
    assert_eq!(v["rx"]["bytes"].as_u64().unwrap(), rx * 64);
    assert_eq!(
        v["rx"]["steer"]["steered"].as_u64().unwrap(),
        rx + v["rx"]["xdp_stats"]["rx_ring_full"].as_u64().unwrap()
            + v["rx"]["xdp_stats"]["rx_dropped"].as_u64().unwrap()
    );
    // The receiving interface's XDP program counted (in the kernel) at
    // most what B reports sent: veth may drop, but never invents packets.
    let at_a = v["rx"]["steer"]["steered"].as_u64().unwrap()
        + v["rx"]["steer"]["no_socket"].as_u64().unwrap();
    assert!(at_a <= tx && at_a > 0, "{v}");
    assert_eq!(v["lost"].as_i64().unwrap(), tx as i64 - rx as i64, "{v}");
    assert_eq!(v["size"], 64);
    assert_eq!(v["tx"]["bind"]["zerocopy"], false, "veth is copy mode");
    assert_eq!(v["tx"]["xdp_stats"]["tx_invalid_descs"], 0);
}

/// `-i 0`: no interval reports; the totals as ever. (`-i 0.2` over a
/// second has them, and they add up to the totals.)
#[test]
fn interval_zero_reports_only_the_totals() {
    for (i, some) in [("0.2", true), ("0", false)] {
        let out = Command::new(XTCP)
            .args(["xsk-bench", "--testnet", "--duration", "1", "--size", "64"])
            .args(["-i", i, "--json"])
            .output()
            .unwrap();
        let v = json(&out);
        for side in ["tx", "rx"] {
            assert!(v[side]["packets"].as_u64().unwrap() > 0, "{v}");
            let intervals = v[side]["intervals"].as_array().unwrap();
            let n = intervals.len();
            assert_eq!(n > 0, some, "-i {i}: {side} has {n} intervals");
            if some {
                // The last, shorter interval included: they add up.
                let sum: u64 = intervals
                    .iter()
                    .map(|s| s["packets"].as_u64().unwrap())
                    .sum();
                assert_eq!(
                    sum,
                    v[side]["packets"].as_u64().unwrap(),
                    "-i {i}, {side}: {v}"
                );
            }
        }
    }
}

/// rxdrop's counts against an outside sender's and the receiving
/// driver's: B's kernel sends a known number of TCP SYNs (raw frames, not
/// xtcp), A's veth counts what its XDP redirected into the socket and
/// what it dropped, and rxdrop, stopped by SIGINT once all of them are
/// accounted for there, reports exactly the redirected ones, 54 bytes
/// each (what was already in its ring when it stopped included).
#[test]
fn rxdrop_counts_what_an_outside_sender_sent() {
    const SYNS: u64 = 20_000;
    const PORT: u16 = 5999;
    let net = testnet(1500, 1);
    let stat = |name: &str| ethtool_stat(&net.a.ns, &net.a.iface, name);
    let (redirected0, dropped0) = (stat("rx_queue_0_xdp_redirect"), stat("rx_queue_0_drops"));
    let args: Vec<String> = [
        "xsk-bench",
        "--iface",
        &net.a.iface,
        "--mode",
        "rxdrop",
        "--port",
        &PORT.to_string(),
        "-t",
        "600",
        "--json",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut rx = Watched::spawn(&net, &args, Stdio::piped());
    rx.wait_for("bound");
    syn_flood(&net, PORT, SYNS as u32);
    // Every SYN redirected or dropped at A's XDP, as its driver counts.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (redirected, dropped) = loop {
        let seen = (
            stat("rx_queue_0_xdp_redirect") - redirected0,
            stat("rx_queue_0_drops") - dropped0,
        );
        if seen.0 + seen.1 >= SYNS {
            break seen;
        }
        assert!(
            Instant::now() < deadline,
            "A's XDP saw {seen:?} of {SYNS} SYNs"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(redirected + dropped, SYNS, "B sent no more than {SYNS}");
    rx.signal("-INT");
    let mut stdout = rx.child.0.stdout.take().unwrap();
    let (status, err) = rx.wait_exit("rxdrop ends at SIGINT");
    assert!(status.success(), "{err}");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["packets"].as_u64(), Some(redirected), "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(redirected * 54), "{v}");
    assert!(redirected > 0, "{v}");
    // Its XDP program's count and the socket's drop counters (the
    // kernel's XDP_STATISTICS) against the driver's.
    assert_eq!(v["steer"]["steered"].as_u64(), Some(SYNS), "{v}");
    let st = &v["xdp_stats"];
    assert_eq!(
        st["rx_ring_full"].as_u64().unwrap() + st["rx_dropped"].as_u64().unwrap(),
        dropped,
        "{v}"
    );
}

/// A counter of side B's network namespace: `Tcp: InSegs` from its
/// /proc/net/snmp (TCP segments its kernel received), or a statistic of its
/// veth end from /sys/class/net/IF/statistics.
fn b_counters(net: &TestNet) -> (u64, u64, u64) {
    let out = net.b.ns.exec(&["cat", "/proc/net/snmp"]).unwrap();
    let snmp = String::from_utf8_lossy(&out.stdout).to_string();
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    let col = names
        .split_whitespace()
        .position(|n| n == "InSegs")
        .expect("InSegs in /proc/net/snmp");
    let in_segs: u64 = values.split_whitespace().nth(col).unwrap().parse().unwrap();
    let stat = |name: &str| -> u64 {
        let path = format!("/sys/class/net/{}/statistics/{name}", net.b.iface);
        let out = net.b.ns.exec(&["cat", &path]).unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    (in_segs, stat("rx_packets"), stat("rx_bytes"))
}

/// Side A's veth `tx_dropped` (frames it could not hand to B).
fn a_tx_dropped(net: &TestNet) -> u64 {
    let path = format!("/sys/class/net/{}/statistics/tx_dropped", net.a.iface);
    let out = net.a.ns.exec(&["cat", &path]).unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// `--iface A --mode txonly --dst-ip B`: txonly on side A to side B.
fn txonly_to_b(net: &TestNet) -> Vec<String> {
    let b = net.b.ip4.to_string();
    ["--iface", &net.a.iface, "--mode", "txonly", "--dst-ip", &b]
        .map(str::to_owned)
        .to_vec()
}

/// txonly's JSON report against the receiving kernel's own counters: every
/// packet xtcp counts as sent (completed) arrived at the peer's TCP.
#[test]
fn txonly_json_report_matches_the_receiving_kernels_counters() {
    let net = testnet(1500, 1);
    for size in [64u64, 1500] {
        let before = b_counters(&net);
        let a_dropped_before = a_tx_dropped(&net);
        let started = Instant::now();
        let out = net
            .a
            .ns
            .command(XTCP)
            .arg("xsk-bench")
            .args(txonly_to_b(&net))
            .args(["--size", &size.to_string(), "--duration", "0.5", "--json"])
            .output()
            .unwrap();
        let wall = started.elapsed().as_secs_f64();
        let v = json(&out);
        let packets = v["packets"].as_u64().unwrap();
        // A completion means veth took the frame; B's kernel may still
        // have it in its backlog (a softirq not yet run on a loaded
        // machine): wait until the counts reach the packets, or a while.
        let deadline = Instant::now() + Duration::from_secs(10);
        let (after, a_dropped) = loop {
            let after = b_counters(&net);
            let a_dropped = a_tx_dropped(&net) - a_dropped_before;
            if after.0 - before.0 + a_dropped >= packets || Instant::now() > deadline {
                break (after, a_dropped);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let bytes = v["bytes"].as_u64().unwrap();
        let seconds = v["seconds"].as_f64().unwrap();
        assert!(packets > 0, "{v}");
        assert_eq!(v["mode"], "txonly");
        assert_eq!(bytes, packets * size, "{v}");
        // Nothing else sends TCP into B's namespace: its kernel counted
        // exactly the packets xtcp reports, but for those the veth dropped
        // on the way (B's backlog full: counted as A's tx_dropped; a
        // completion means the kernel is done with the frame, sent or not).
        assert_eq!(
            after.0 - before.0 + a_dropped,
            packets,
            "Tcp InSegs of B ({a_dropped} dropped by A's veth), size {size}: {v}"
        );
        // The veth counts every frame it delivered (and a stray IPv6 or ARP
        // frame besides): at least xtcp's packets and bytes, less drops.
        assert!(
            after.1 - before.1 + a_dropped >= packets,
            "rx_packets of B: {v}"
        );
        assert!(
            after.2 - before.2 + a_dropped * size >= bytes,
            "rx_bytes of B: {v}"
        );
        // The rates are the counts over the measured window, and that
        // window lies within the command's run.
        assert!(
            seconds > 0.0 && seconds <= wall,
            "{seconds} s of {wall} s: {v}"
        );
        let pps = v["pps"].as_f64().unwrap();
        let gbps = v["gbps"].as_f64().unwrap();
        assert!((pps - packets as f64 / seconds).abs() <= 1e-6 * pps, "{v}");
        assert!(
            (gbps - bytes as f64 * 8.0 / seconds / 1e9).abs() <= 1e-6 * gbps,
            "{v}"
        );
        let in_intervals: u64 = v["intervals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["packets"].as_u64().unwrap())
            .sum();
        assert_eq!(
            in_intervals, packets,
            "the intervals add up to the total: {v}"
        );
        assert_eq!(v["xdp_stats"]["tx_invalid_descs"], 0, "{v}");
    }
}

#[test]
fn testnet_multibuffer_9000_and_l2fwd() {
    let out = Command::new(XTCP)
        .args([
            "xsk-bench",
            "--testnet",
            "--duration",
            "1",
            "--size",
            "9000",
            "--json",
        ])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["mtu"], 8986);
    assert_eq!(v["rx"]["bind"]["multi_buffer"], true);
    let rx = v["rx"]["packets"].as_u64().unwrap();
    assert!(rx > 0);
    assert_eq!(v["rx"]["bytes"].as_u64().unwrap(), rx * 9000);

    let out = Command::new(XTCP)
        .args([
            "xsk-bench",
            "--testnet",
            "--mode",
            "l2fwd",
            "--duration",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    let v = json(&out);
    assert!(v["rx"]["packets"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["rx"]["mode"], "l2fwd");
}

#[test]
fn sigkill_leaves_nothing_attached_and_the_queue_can_be_bound_again() {
    let net = testnet(1500, 1);
    let mut child = net
        .a
        .ns
        .command(XTCP)
        .args([
            "xsk-bench",
            "--iface",
            &net.a.iface,
            "--mode",
            "rxdrop",
            "--duration",
            "60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for "bound" (the program is attached and the socket bound).
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().expect("a line from xtcp").unwrap();
    assert!(line.contains("bound"), "{line}");
    let shown = net.a.ns.ip(&["link", "show", "dev", &net.a.iface]).unwrap();
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("xdp"),
        "attached while running"
    );

    // SIGKILL: no destructor runs.
    // SAFETY-free: kill(1) by the PID we spawned.
    let st = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = child.wait().unwrap();
    assert!(!status.success());

    let shown = net.a.ns.ip(&["link", "show", "dev", &net.a.iface]).unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(
        !shown.contains("xdp"),
        "no XDP program left attached: {shown}"
    );

    // The queue binds again. The kernel frees the old socket's pool in
    // deferred work (about a second when idle, longer under load) and
    // only a bind shows it has: retry while the error is "busy", within a
    // generous deadline.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = net
            .a
            .ns
            .command(XTCP)
            .args([
                "xsk-bench",
                "--iface",
                &net.a.iface,
                "--mode",
                "rxdrop",
                "--duration",
                "0.2",
                "--json",
            ])
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("busy") && Instant::now() < deadline,
            "rebind failed: {err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn clear_errors_for_what_users_get_wrong() {
    let net = testnet(1500, 1);
    let run = |args: &[&str]| {
        net.a
            .ns
            .command(XTCP)
            .arg("xsk-bench")
            .args(args)
            .output()
            .unwrap()
    };
    let a = net.a.iface.as_str();
    let peer = net.b.ip4.to_string();

    fails_with(
        &run(&["--iface", "xtcp-nope0"]),
        &["no interface named `xtcp-nope0`"],
    );
    // The sender's addresses with a mode that sends nothing: refused.
    fails_with(
        &run(&["--iface", a, "--mode", "rxdrop", "--dst-ip", &peer]),
        &["--dst-ip applies to txonly"],
    );
    fails_with(
        &run(&[
            "--iface",
            a,
            "--mode",
            "txonly",
            "--dst-ip",
            &peer,
            "--queue",
            "3",
            "--duration",
            "0.2",
        ]),
        &["queue 3 may not exist"],
    );
    fails_with(
        &run(&["--iface", a, "--bind", "zerocopy", "--duration", "0.2"]),
        &["zero-copy", "driver: veth", "--bind copy"],
    );
    fails_with(
        &run(&[
            "--iface",
            a,
            "--mode",
            "txonly",
            "--dst-ip",
            &peer,
            "--size",
            "9000",
            "--duration",
            "0.2",
        ]),
        &["exceeds", "MTU 1500"],
    );
    fails_with(&run(&["--iface", a, "--ring", "1000"]), &["power of two"]);
    // txonly needs its destination; --testnet's side A cannot be the
    // sender (it said "--dst-ip required", as if one would do).
    fails_with(
        &run(&["--iface", a, "--mode", "txonly"]),
        &["--mode txonly needs --dst-ip"],
    );
    fails_with(
        &run(&["--testnet", "--mode", "txonly"]),
        &["side B always runs txonly"],
    );
    fails_with(
        &run(&["--iface", a, "--cores", "999", "-t", "0.2"]),
        &[
            "--cores 999: core 999 does not exist",
            "the cores available are 0",
        ],
    );
    // A destination the kernel routes through another interface: both
    // interfaces named, not only their indexes.
    fails_with(
        &run(&[
            "--iface",
            a,
            "--mode",
            "txonly",
            "--dst-ip",
            "127.0.0.1",
            "--duration",
            "0.2",
        ]),
        &[
            "routes 127.0.0.1 through lo (index 1)",
            &format!("not {a} (index"),
        ],
    );

    // Queue busy, and an interface that already has an XDP program.
    let mut holder = net
        .a
        .ns
        .command(XTCP)
        .args([
            "xsk-bench",
            "--iface",
            a,
            "--mode",
            "rxdrop",
            "--duration",
            "30",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("bound"));
    fails_with(
        &run(&[
            "--iface",
            a,
            "--mode",
            "txonly",
            "--dst-ip",
            &peer,
            "--duration",
            "0.2",
        ]),
        &["queue 0", "busy"],
    );
    fails_with(
        &run(&["--iface", a, "--mode", "rxdrop", "--duration", "0.2"]),
        &["another XDP program is attached"],
    );
    Command::new("kill")
        .args(["-TERM", &holder.id().to_string()])
        .status()
        .unwrap();
    let _ = holder.wait();

    // Missing privilege: the same commands as an unprivileged user.
    let nobody = |args: &[&str]| {
        net.a
            .ns
            .command("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                XTCP,
                "xsk-bench",
            ])
            .args(args)
            .output()
            .unwrap()
    };
    fails_with(
        &nobody(&[
            "--iface",
            a,
            "--mode",
            "txonly",
            "--dst-ip",
            &peer,
            "--duration",
            "0.2",
        ]),
        &["permission denied", "run as root"],
    );
    fails_with(&nobody(&["--iface", a, "--duration", "0.2"]), &["root"]);
}

#[test]
fn testnet_refuses_what_the_path_cannot_carry_and_stops_both_sides_on_error() {
    // Copy mode takes at most 18 descriptors per packet.
    let out = Command::new(XTCP)
        .args([
            "xsk-bench",
            "--testnet",
            "--frame-size",
            "2048",
            "--size",
            "38000",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    fails_with(&out, &["19 descriptors", "--frame-size 4096"]);

    // Side A fails (no zero-copy on veth): side B never starts (it would
    // print its "bound" line) and the command ends without running --duration.
    let out = Command::new(XTCP)
        .args([
            "xsk-bench",
            "--testnet",
            "--bind",
            "zerocopy",
            "--duration",
            "30",
        ])
        .output()
        .unwrap();
    fails_with(&out, &["zero-copy", "driver: veth"]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("# tx:"),
        "B did not start"
    );
}

#[test]
fn txonly_finds_the_destination_mac_through_the_kernel() {
    let net = testnet(1500, 1);
    let peer = net.b.ip4.to_string();
    net.a
        .ns
        .ip(&["neigh", "del", &peer, "dev", &net.a.iface])
        .unwrap();
    let out = net
        .a
        .ns
        .command(XTCP)
        .args([
            "xsk-bench",
            "--iface",
            &net.a.iface,
            "--mode",
            "txonly",
            "--dst-ip",
            &peer,
            "--duration",
            "0.3",
            "--json",
        ])
        .output()
        .unwrap();
    let v = json(&out);
    assert!(v["packets"].as_u64().unwrap() > 0, "{v}");
    let neigh = net.a.ns.ip(&["neigh", "show", &peer]).unwrap();
    let mac = net
        .b
        .mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    assert!(
        String::from_utf8_lossy(&neigh.stdout).contains(&mac),
        "ARP resolved {peer}"
    );
}

/// The wakeups xsk-bench reports are the wakeup syscalls the kernel saw
/// (`strace` counting every thread's zero-length `sendto`/`recvfrom` on
/// its sockets), in each wakeup policy and mode that makes them.
#[test]
fn wakeups_are_the_syscalls_the_kernel_saw() {
    assert!(
        Command::new("strace").arg("-V").output().is_ok(),
        "strace is not installed (scripts/deps.sh installs it)"
    );
    let net = testnet(1500, 1);
    let txonly = |wakeup: &str| -> Vec<String> {
        let mut v = txonly_to_b(&net);
        v.extend(["--wakeup".to_owned(), wakeup.to_owned()]);
        v
    };
    let testnet_mode = |mode: &str, wakeup: &str| -> Vec<String> {
        ["--testnet", "--mode", mode, "--wakeup", wakeup]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let trace = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("xsk-bench-strace-{}", std::process::id()));
    for args in [
        txonly("spin"),
        txonly("kick"),
        txonly("poll"),
        testnet_mode("rxdrop", "spin"),
        testnet_mode("l2fwd", "spin"),
        testnet_mode("l2fwd", "kick"),
    ] {
        let out = net
            .a
            .ns
            .command("strace")
            .args([
                "-f",
                "-qq",
                "-e",
                "trace=sendto,recvfrom",
                "-e",
                "signal=none",
                "-o",
            ])
            .arg(&trace)
            .args([XTCP, "xsk-bench", "--duration", "0.5", "--json"])
            .args(&args)
            .output()
            .unwrap();
        let v = json(&out);
        let text = std::fs::read_to_string(&trace).unwrap();
        let _ = std::fs::remove_file(&trace);
        // "PID sendto(FD, NULL, 0, MSG_DONTWAIT, NULL, 0) = 0", or the
        // same line cut at "<unfinished ...>" where another thread's
        // call came in between (its end is a "<... resumed>" line).
        let seen = text
            .lines()
            .filter(|l| {
                ["sendto(", "recvfrom("].iter().any(|call| {
                    l.split_once(call)
                        .and_then(|(_, rest)| rest.split_once(", "))
                        .is_some_and(|(fd, rest)| {
                            fd.parse::<u32>().is_ok() && rest.starts_with("NULL, 0, MSG_DONTWAIT")
                        })
                })
            })
            .count() as u64;
        let reported = if v["mode"] == "txonly" {
            v["wakeups"].as_u64().unwrap()
        } else {
            v["tx"]["wakeups"].as_u64().unwrap() + v["rx"]["wakeups"].as_u64().unwrap()
        };
        eprintln!("{args:?}: xsk-bench says {reported} wakeups, strace saw {seen}");
        assert_eq!(reported, seen, "{args:?}: {v}");
    }
}
