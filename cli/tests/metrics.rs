//! `xtcp serve --metrics ADDR:PORT` (issue 15, item 2): the Prometheus
//! exposition, scraped over the kernel's TCP inside the test's own
//! namespace, against independent sources — the stock iperf3 client's own
//! `-J` byte counts, the kernel sender's TCP counters (`/proc/net/snmp` of
//! its namespace), its veth's counters and the veth's `ethtool -S`;
//! `promtool check metrics` on what was scraped; a real Prometheus server
//! scraping for a few seconds and answering over its HTTP API; a busy or
//! bad address refused before anything is attached. And, ignored (a
//! benchmark, not a test): the cost of being scraped every 100 ms.
//! Root needed (CI runs as root); each test builds its own namespaces.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::{
    ENGINE, Forged, Reap, Watched, XTCP, ethtool_stat, iperf3_json, link_stat, need_iperf3,
    tcp_mib, testnet,
};
use xtcp_engine::testnet::{Netns, TestNet};

const WAIT: Duration = Duration::from_secs(60);
const METRICS_PORT: u16 = 9100;

fn metrics_at(net: &TestNet) -> SocketAddr {
    SocketAddr::new(net.a.ip4.into(), METRICS_PORT)
}

/// `xtcp serve --metrics` on side A; returns once it says it listens.
fn serve(net: &TestNet, queues: u32, extra: &[&str]) -> Watched {
    let mut args: Vec<String> = [
        "serve",
        "--iface",
        &net.a.iface,
        "--queues",
        &queues.to_string(),
        "--metrics",
        &metrics_at(net).to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(ENGINE.iter().chain(extra).map(|s| s.to_string()));
    let mut x = Watched::spawn(net, &args, Stdio::null());
    x.wait_for("listening on");
    x
}

/// An HTTP/1.0 GET of `path` at `at`, from inside `ns` over the kernel's
/// TCP: status, head (lower case) and body.
fn get(ns: &Netns, at: SocketAddr, path: &str) -> (u16, String, String) {
    request(ns, at, "GET", path)
}

/// [`get`] with another method.
fn request(ns: &Netns, at: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let _g = ns.enter().unwrap();
    let mut s = TcpStream::connect_timeout(&at, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect to {at}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {at}\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head: {raw}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status: {head}"));
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// `GET /metrics`, which must answer 200.
fn scrape(net: &TestNet) -> String {
    let (status, head, body) = get(&net.a.ns, metrics_at(net), "/metrics");
    assert_eq!(status, 200, "{head}{body}");
    body
}

/// The value of sample `series` (name and labels exactly as written).
fn value(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{series} {v}")))
}

fn must(text: &str, series: &str) -> u64 {
    value(text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

/// The kernel counters of side B (the iperf3 client's) and of A's veth
/// that the metrics are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kernel {
    /// B's TCP segments sent (`OutSegs` + `RetransSegs`).
    b_out: u64,
    /// B's TCP segments received (`InSegs`).
    b_in: u64,
    /// B's connections opened (`ActiveOpens`).
    b_opens: u64,
    /// B's veth: packets dropped on transmit (before A's XDP).
    b_tx_dropped: u64,
    /// A's veth: packets dropped on transmit (xtcp's, B's queue full).
    a_tx_dropped: u64,
    /// A's veth: failed redirects into the socket of queue 0.
    a_redirect_drops: u64,
}

impl Kernel {
    fn read(net: &TestNet) -> Kernel {
        Kernel {
            b_out: tcp_mib(&net.b.ns, "OutSegs") + tcp_mib(&net.b.ns, "RetransSegs"),
            b_in: tcp_mib(&net.b.ns, "InSegs"),
            b_opens: tcp_mib(&net.b.ns, "ActiveOpens"),
            b_tx_dropped: link_stat(&net.b.ns, &net.b.iface, "tx", "dropped"),
            a_tx_dropped: link_stat(&net.a.ns, &net.a.iface, "tx", "dropped"),
            a_redirect_drops: ethtool_stat(&net.a.ns, &net.a.iface, "rx_queue_0_drops"),
        }
    }

    fn since(self, o: Kernel) -> Kernel {
        Kernel {
            b_out: self.b_out - o.b_out,
            b_in: self.b_in - o.b_in,
            b_opens: self.b_opens - o.b_opens,
            b_tx_dropped: self.b_tx_dropped - o.b_tx_dropped,
            a_tx_dropped: self.a_tx_dropped - o.a_tx_dropped,
            a_redirect_drops: self.a_redirect_drops - o.a_redirect_drops,
        }
    }
}

fn bytes(v: &serde_json::Value, side: &str) -> u64 {
    v["end"][side]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no end.{side}.bytes: {v}"))
}

/// A client that sends a bad cookie: no iperf3 client, no test (refused at
/// once, `no_cookie`).
fn bad_cookie(net: &TestNet) {
    let _g = net.b.ns.enter().unwrap();
    let dst = SocketAddr::new(net.a.ip4.into(), 5201);
    let mut s = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
    s.write_all(&[0xff; 64]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut b = Vec::new();
    let _ = s.read_to_end(&mut b);
}

/// Scrapes until `cond` holds for the scraped text (a minute at most);
/// returns that text.
fn scrape_until(
    net: &TestNet,
    what: &str,
    mut cond: impl FnMut(&str) -> Result<(), String>,
) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = scrape(net);
        match cond(&text) {
            Ok(()) => return text,
            Err(why) => assert!(
                Instant::now() < deadline,
                "{what} never held: {why}\n{text}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn scraped_counters_agree_with_iperf3_and_the_kernels_counters() {
    need_iperf3();
    let net = testnet(1);
    let k0 = Kernel::read(&net);
    let mut x = serve(&net, 1, &[]);

    // Before any test: the series exist, at zero; the build is the one
    // `xtcp --version` names.
    let t = scrape(&net);
    assert_eq!(must(&t, r#"xtcp_tests_total{result="ok"}"#), 0);
    assert_eq!(must(&t, r#"xtcp_tests_total{result="failed"}"#), 0);
    let out = Command::new(XTCP).arg("--version").output().unwrap();
    let version = String::from_utf8(out.stdout).unwrap();
    let version = version.trim().strip_prefix("xtcp ").unwrap().to_owned();
    let build = format!("xtcp_build_info{{version=\"{version}\"}}");
    assert_eq!(must(&t, &build), 1);

    // Forward with a byte count: xtcp receives exactly what the stock
    // client's own count says it sent. Reverse with a byte count: xtcp
    // sends exactly what the client's own count says it received.
    let fwd = iperf3_json(&net, &["-n", "256M"]);
    let rev = iperf3_json(&net, &["-n", "64M", "-R"]);
    let sent_by_client = bytes(&fwd, "sum_sent");
    let received_by_client = bytes(&rev, "sum_received");
    assert!(sent_by_client >= 256 << 20, "{sent_by_client}");
    assert_eq!(received_by_client, 64 << 20);
    // And a connection that is no iperf3 client (no test).
    bad_cookie(&net);

    let t = scrape_until(&net, "three tests counted", |t| {
        let ok = value(t, r#"xtcp_tests_total{result="ok"}"#);
        let none = value(
            t,
            r#"xtcp_tests_total{result="refused",reason="no_cookie"}"#,
        );
        (ok == Some(2) && none == Some(1))
            .then_some(())
            .ok_or(format!("ok {ok:?}, no_cookie {none:?}"))
    });
    assert_eq!(must(&t, r#"xtcp_tests_total{result="failed"}"#), 0);
    assert_eq!(
        must(&t, r#"xtcp_test_bytes_total{direction="received"}"#),
        sent_by_client
    );
    assert_eq!(
        must(&t, r#"xtcp_test_bytes_total{direction="sent"}"#),
        received_by_client
    );

    // Once every connection is gone on both sides, the queue's packets
    // against the kernel's: every TCP segment B's kernel sent is one xtcp
    // received, dropped (by reason) or lost at the redirect, unless B's
    // veth dropped it before XDP; every packet xtcp queued is one that
    // B's TCP received, unless A's veth dropped it (B's queue full).
    let drops = [
        "malformed",
        "not_tcp",
        "fragment",
        "checksum",
        "not_ours",
        "oversize",
    ];
    let mut kernel = k0;
    let t = scrape_until(&net, "the packet counts to match the kernel's", |t| {
        // B's connections in TIME-WAIT are over: nothing more is sent.
        let ss = net
            .b
            .ns
            .command("ss")
            .args(["-Htn", "state", "connected", "exclude", "time-wait"])
            .output()
            .unwrap();
        let open = String::from_utf8_lossy(&ss.stdout).into_owned();
        if !open.trim().is_empty() {
            return Err(format!("B still has connections: {open}"));
        }
        let k = Kernel::read(&net).since(k0);
        kernel = k;
        let rx = must(t, r#"xtcp_rx_packets_total{queue="0"}"#);
        let dropped: u64 = drops
            .iter()
            .map(|r| {
                must(
                    t,
                    &format!(r#"xtcp_rx_dropped_packets_total{{queue="0",reason="{r}"}}"#),
                )
            })
            .sum();
        let redirect = must(t, r#"xtcp_xdp_redirect_drops_total{queue="0"}"#);
        let before = must(t, "xtcp_xdp_before_xdp_drops_total");
        let tx = must(t, r#"xtcp_tx_packets_total{queue="0"}"#);
        let live = must(t, r#"xtcp_connections{queue="0"}"#);
        let got = (rx + dropped + redirect, tx, redirect, before, live);
        let want = (
            k.b_out - k.b_tx_dropped,
            k.b_in + k.a_tx_dropped,
            k.a_redirect_drops,
            k.b_tx_dropped,
            0,
        );
        (got == want).then_some(()).ok_or(format!(
            "(rx + dropped + at redirect, tx, at redirect, before XDP, connections) {got:?}, \
             from the kernel {want:?}: {k:?}"
        ))
    });
    eprintln!("kernel: {kernel:?}");
    // Every segment B's kernel sent that reached A's XDP was steered.
    assert_eq!(
        must(&t, "xtcp_xdp_steered_packets_total"),
        kernel.b_out - kernel.b_tx_dropped
    );
    // Five connections (two per iperf3 test, the bad cookie's): B's
    // kernel opened them, xtcp's listener took their SYNs.
    assert_eq!(kernel.b_opens, 5);
    assert_eq!(
        must(&t, r#"xtcp_connections_established_total{queue="0"}"#),
        kernel.b_opens
    );
    assert_eq!(
        must(&t, r#"xtcp_listener_syns_total{queue="0"}"#),
        kernel.b_opens
    );
    // TCP payload: at least what the tests moved (the control connections
    // carry a little more), and xtcp's bytes on the wire more than that.
    let payload_rx = must(&t, r#"xtcp_tcp_payload_bytes_total{direction="received"}"#);
    let payload_tx = must(&t, r#"xtcp_tcp_payload_bytes_total{direction="sent"}"#);
    assert!(
        payload_rx > sent_by_client && payload_rx < sent_by_client + (64 << 10),
        "{payload_rx} {sent_by_client}"
    );
    assert!(
        payload_tx >= received_by_client,
        "{payload_tx} {received_by_client}"
    );
    assert!(must(&t, r#"xtcp_rx_bytes_total{queue="0"}"#) > payload_rx);
    assert!(must(&t, r#"xtcp_tx_bytes_total{queue="0"}"#) > payload_tx);
    x.signal("-INT");
    let (st, err) = x.wait_exit("xtcp serve to stop");
    assert!(st.success(), "{err}");
}

/// Two queues, each worker on the other queue's CPU (as in serve's
/// `handshakes_that_end_on_another_queue_complete`): the handshakes end on
/// the other queue, so their last ACKs are forwarded to the listener's
/// worker, and the data that comes in on the wrong queue is held for its
/// connection. The scrape counts them, every connection handed over is
/// taken on the other side, and every bare ACK of no connection that B
/// sent is counted (B sees resets for them, up to the listener's queue of
/// resets at once).
#[test]
fn handovers_and_strays_are_counted() {
    need_iperf3();
    let net = testnet(2);
    let mut x = serve(&net, 2, &["--cores", "1,0"]);
    let a = net.a.ip4.to_string();
    for cpu in ["0", "1"] {
        common::iperf3_json_to(&net, &["taskset", "-c", cpu], &a, &["-t", "1", "-P", "4"]);
    }
    const STRAYS: u32 = 20;
    let reset = common::bare_acks_reset(&net, 5201, STRAYS);
    // (A burst beyond the listener's queue of 16 resets is counted, not
    // all answered.)
    assert!(
        (1..=u64::from(STRAYS)).contains(&reset),
        "B saw {reset} resets for {STRAYS} bare ACKs"
    );
    let sum = |t: &str, family: &str, label: &str| -> u64 {
        (0..2)
            .map(|q| must(t, &format!(r#"{family}{{queue="{q}"{label}}}"#)))
            .sum()
    };
    let moved = |t: &str, d: &str| {
        sum(
            t,
            "xtcp_connections_migrated_total",
            &format!(r#",direction="{d}""#),
        )
    };
    // Each worker's counters come in its own reports: a hand-over shows
    // as out on one before it shows as in on the other.
    let t = scrape_until(&net, "both tests and the strays counted", |t| {
        let ok = value(t, r#"xtcp_tests_total{result="ok"}"#);
        let strays = sum(t, "xtcp_rx_no_connection_packets_total", "");
        let (i, o) = (moved(t, "in"), moved(t, "out"));
        (ok == Some(2) && strays == u64::from(STRAYS) && i == o)
            .then_some(())
            .ok_or(format!(
                "tests ok {ok:?}, no connection {strays}, migrated in {i} out {o}"
            ))
    });
    let handover = |r: &str| {
        sum(
            &t,
            "xtcp_handover_packets_total",
            &format!(r#",result="{r}""#),
        )
    };
    // 2 tests x 5 connections, each handshake's last ACK forwarded.
    assert!(handover("forwarded") >= 10, "{t}");
    assert!(
        handover("held") > 0,
        "data for connections on their way: {t}"
    );
    x.signal("-INT");
    let (st, err) = x.wait_exit("xtcp serve to stop");
    assert!(st.success(), "{err}");
}

/// Connections the endpoint serves at once (`metrics::MAX_CONNECTIONS`).
const MAX_METRICS_CONNECTIONS: usize = 64;

/// Whether the peer has closed `s` (read at its end, or reset).
fn closed_by_peer(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    match s.peek(&mut b) {
        Ok(n) => n == 0,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Idle connections to the metrics endpoint, more than it serves at once
/// and more than its process may open files (`prlimit` to 128): each one
/// beyond 64 closes the one that waited longest for a request, so that a
/// scraper still gets in, the process holds no more than that (its file
/// descriptors and threads counted), and the endpoint lives on after
/// them (it died before: a thread per connection, and at the file limit
/// its accept thread panicked).
#[test]
fn idle_connections_neither_exhaust_the_endpoint_nor_keep_a_scraper_out() {
    let net = testnet(1);
    let mut x = serve(&net, 1, &[]);
    let pid = x.child.0.id();
    let out = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), "--nofile=128:128"])
        .output()
        .expect("prlimit (util-linux)");
    assert!(out.status.success(), "{out:?}");
    let fds = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    let threads = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .count()
    };
    scrape(&net);
    let (fds0, threads0) = (fds(), threads());
    const IDLE: usize = 300;
    let held: Vec<TcpStream> = {
        let _g = net.b.ns.enter().unwrap();
        (0..IDLE)
            .map(|_| TcpStream::connect_timeout(&metrics_at(&net), WAIT).unwrap())
            .collect()
    };
    // A scraper gets in all the same (and takes a place while it does).
    assert!(scrape(&net).contains("# TYPE xtcp_build_info gauge"));
    let deadline = Instant::now() + WAIT;
    loop {
        let closed = held.iter().filter(|s| closed_by_peer(s)).count();
        if closed >= IDLE + 1 - MAX_METRICS_CONNECTIONS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{closed} of {IDLE} idle connections closed by serve"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        fds() <= fds0 + MAX_METRICS_CONNECTIONS,
        "{} file descriptors, {fds0} before",
        fds()
    );
    assert_eq!(threads(), threads0, "no thread per connection");
    drop(held);
    assert!(scrape(&net).contains("# TYPE xtcp_build_info gauge"));
    x.signal("-INT");
    let (st, err) = x.wait_exit("xtcp serve to stop");
    assert!(st.success(), "{err}");
}

#[test]
fn promtool_passes_the_scrape_head_is_served_and_other_paths_are_404() {
    need_iperf3();
    assert!(
        Command::new("promtool").arg("--version").output().is_ok(),
        "promtool is not installed (scripts/deps.sh installs Debian's prometheus)"
    );
    let net = testnet(2);
    let mut x = serve(&net, 2, &[]);
    // While a test runs: the connections xtcp holds, over both queues, are
    // the ones B's kernel has established with it (control and two
    // streams). The client is stopped once they are up, so that the test
    // cannot end before the count is scraped, and let go on after.
    let mut client = Reap(
        net.b
            .ns
            .command("iperf3")
            .args(["-c", &net.a.ip4.to_string(), "-t", "4", "-P", "2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let err = x.err.clone();
    common::wait_established(&net, 5201, 3, &mut [&mut client.0, &mut x.child.0], &|| {
        format!("xtcp serve: {}", err.lock().unwrap())
    });
    common::kill("-STOP", client.0.id());
    scrape_until(&net, "the live connections counted", |t| {
        let ss = net
            .b
            .ns
            .command("ss")
            .args(["-Htn", "state", "established", "dport", "= :5201"])
            .output()
            .unwrap();
        let b = String::from_utf8_lossy(&ss.stdout).lines().count() as u64;
        let held: u64 = (0..2)
            .map(|q| must(t, &format!(r#"xtcp_connections{{queue="{q}"}}"#)))
            .sum();
        (b == 3 && held == b)
            .then_some(())
            .ok_or(format!("B has {b} established, xtcp holds {held}"))
    });
    common::kill("-CONT", client.0.id());
    // (What it prints in 4 s fits the pipes.)
    let st = client.0.wait().unwrap();
    let mut printed = String::new();
    if let Some(mut o) = client.0.stdout.take() {
        o.read_to_string(&mut printed).unwrap();
    }
    if let Some(mut e) = client.0.stderr.take() {
        e.read_to_string(&mut printed).unwrap();
    }
    assert!(st.success(), "iperf3 -c: {st}: {printed}");
    let text = scrape_until(&net, "the test counted", |t| {
        (value(t, r#"xtcp_tests_total{result="ok"}"#) == Some(1))
            .then_some(())
            .ok_or("not yet".into())
    });
    // Both queues are there.
    must(&text, r#"xtcp_rx_packets_total{queue="1"}"#);
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The content type says which format it is.
    let (status, head, _) = get(&net.a.ns, metrics_at(&net), "/metrics?x=1");
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    for path in ["/", "/metrics/", "/favicon.ico"] {
        let (status, _, body) = get(&net.a.ns, metrics_at(&net), path);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("/metrics"), "{body}");
    }
    // HEAD (a health check) gets GET's head and no body; other methods
    // are told which ones there are.
    let (status, head, body) = request(&net.a.ns, metrics_at(&net), "HEAD", "/metrics");
    assert_eq!((status, body.as_str()), (200, ""), "{head}");
    assert!(
        head.contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let (status, head, body) = request(&net.a.ns, metrics_at(&net), "POST", "/metrics");
    assert_eq!(status, 405, "{head}{body}");
    assert!(head.contains("allow: get, head"), "{head}");
}

/// A temporary directory, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "xtcp-{what}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `s` percent-encoded for a URL's query.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Asks the Prometheus server at `at` (in `ns`) for the instant value of
/// `query`: None until it has one sample.
fn prom_query(ns: &Netns, at: SocketAddr, query: &str) -> Option<f64> {
    let path = format!("/api/v1/query?query={}", urlencode(query));
    let (status, _, body) = get(ns, at, &path);
    assert_eq!(status, 200, "{query}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{v}");
    let r = v["data"]["result"].as_array()?;
    if r.len() != 1 {
        return None;
    }
    r[0]["value"][1].as_str()?.parse().ok()
}

#[test]
fn a_prometheus_server_scrapes_it_and_answers_queries() {
    need_iperf3();
    assert!(
        Command::new("prometheus").arg("--version").output().is_ok(),
        "prometheus is not installed (scripts/deps.sh installs Debian's prometheus)"
    );
    let net = testnet(1);
    let _x = serve(&net, 1, &[]);
    let dir = TempDir::new("prometheus");
    let prom = SocketAddr::new(net.a.ip4.into(), 9090);
    let config = dir.0.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: xtcp\n    static_configs:\n      \
             - targets: ['{}']\n",
            metrics_at(&net)
        ),
    )
    .unwrap();
    let mut server = Reap(
        net.a
            .ns
            .command("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join("data").display()
            ))
            .arg(format!("--web.listen-address={prom}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let v = iperf3_json(&net, &["-n", "64M"]);
    let sent = bytes(&v, "sum_sent");
    // Until it has scraped xtcp since the test ended (it scrapes every
    // second): the answers it gives.
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(s) = server.0.try_wait().unwrap() {
            panic!("prometheus exited: {s}");
        }
        // Listening is not ready: until its storage is up, Prometheus
        // answers 503 (`/-/ready` says when).
        let ready = {
            let _g = net.a.ns.enter().unwrap();
            TcpStream::connect_timeout(&prom, Duration::from_secs(1)).is_ok()
        } && get(&net.a.ns, prom, "/-/ready").0 == 200;
        if ready {
            let up = prom_query(&net.a.ns, prom, r#"up{job="xtcp"}"#);
            let ok = prom_query(&net.a.ns, prom, r#"xtcp_tests_total{result="ok"}"#);
            let rx = prom_query(
                &net.a.ns,
                prom,
                r#"xtcp_test_bytes_total{direction="received"}"#,
            );
            if up == Some(1.0) && ok == Some(1.0) {
                assert_eq!(rx, Some(sent as f64));
                let build = prom_query(&net.a.ns, prom, "xtcp_build_info");
                assert_eq!(build, Some(1.0));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus answers up {up:?}, tests ok {ok:?}"
            );
        } else {
            assert!(Instant::now() < deadline, "prometheus never became ready");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(server);
}

#[test]
fn a_busy_or_bad_metrics_address_is_refused_before_anything_is_attached() {
    let net = testnet(1);
    let run = |metrics: &str| {
        let out = net
            .a
            .ns
            .command(XTCP)
            .args(["serve", "--iface", &net.a.iface, "--metrics", metrics])
            .args(ENGINE)
            .output()
            .unwrap();
        assert!(!out.status.success(), "--metrics {metrics} was taken");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains("listening"), "{err}");
        err
    };
    let attached = || {
        let out = net
            .a
            .ns
            .command("ip")
            .args(["-d", "link", "show", "dev", &net.a.iface])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    };
    // Another program listens there.
    let busy = metrics_at(&net);
    let holder = {
        let _g = net.a.ns.enter().unwrap();
        TcpListener::bind(busy).unwrap()
    };
    let err = run(&busy.to_string());
    assert!(
        err.contains(&format!("--metrics {busy}: address in use")),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!attached(), "nothing is attached: {err}");
    drop(holder);
    // Not this host's address.
    let err = run("198.18.200.1:9100");
    assert!(
        err.contains("--metrics 198.18.200.1:9100: address not available"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // Not ADDR:PORT; port 0.
    let err = run("localhost:9100");
    assert!(err.contains("\"localhost:9100\" is not ADDR:PORT"), "{err}");
    let err = run("127.0.0.1:0");
    assert!(err.contains("1..=65535"), "{err}");
    assert!(!attached());
    // The check above sees a program when there is one: serve, with the
    // address free again.
    let _x = serve(&net, 1, &[]);
    assert!(attached(), "xtcp serve attaches its XDP program");
}

/// CPU time (ns) that the threads of process `pid` have run, from each
/// thread's `schedstat`: (the workers' (`xtcp-q*`), the main (control)
/// thread's, the others' — the metrics threads and the signal handler's),
/// and the threads' ids.
fn cpu_ns(pid: u32) -> ([u64; 3], Vec<u64>) {
    let mut total = [0; 3];
    let mut tids = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let e = e.unwrap();
        let stat = std::fs::read_to_string(e.path().join("schedstat")).unwrap();
        let ns: u64 = stat.split_whitespace().next().unwrap().parse().unwrap();
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap();
        let tid: u64 = e.file_name().to_string_lossy().parse().unwrap();
        let kind = if comm.starts_with("xtcp-q") {
            0
        } else if tid == u64::from(pid) {
            1
        } else {
            2
        };
        total[kind] += ns;
        tids.push(tid);
    }
    tids.sort_unstable();
    (total, tids)
}

/// GET /metrics every 100 ms from inside namespace `ns` until `stop`;
/// returns how long each took (µs).
fn scrape_every_100ms(ns: String, at: SocketAddr, stop: Arc<AtomicBool>) -> Vec<f64> {
    let _g = xtcp_engine::testnet::enter(&ns).unwrap();
    let mut took = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let mut s = TcpStream::connect(at).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut b = Vec::new();
        s.read_to_end(&mut b).unwrap();
        assert!(
            b.get(8..13) == Some(&b" 200 "[..]),
            "{}",
            String::from_utf8_lossy(&b)
        );
        took.push(t.elapsed().as_secs_f64() * 1e6);
        std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
    }
    took
}

/// A kernel TCP server in namespace `ns` at `at` that answers every GET
/// with `body`, as `xtcp serve --metrics` would, from a thread of the test
/// (the benchmark's control: the same scrapes, none of them xtcp's work);
/// stopped on drop.
struct Decoy {
    ns: String,
    at: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Decoy {
    fn start(ns: &Netns, at: SocketAddr, body: String) -> Decoy {
        let listener = {
            let _g = ns.enter().unwrap();
            TcpListener::bind(at).unwrap()
        };
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            for c in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let mut c = c.unwrap();
                let mut req = [0u8; 1024];
                let _ = c.read(&mut req);
                let _ = write!(
                    c,
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Decoy {
            ns: ns.name().to_owned(),
            at,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Decoy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept (from inside the namespace: the address is
        // there).
        if let Ok(_g) = xtcp_engine::testnet::enter(&self.ns) {
            let _ = TcpStream::connect_timeout(&self.at, Duration::from_secs(1));
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The cost of metrics on the data path (issue 15's performance check): one
/// `xtcp serve --metrics`, `iperf3 -c` tests against it back to back,
/// alternately scraped every 100 ms and not scraped (ABBA order, so that a
/// drift of the machine's speed weighs on both alike). While xtcp is not
/// scraped, the same scraper GETs the same text from a decoy, a kernel
/// server of the test's in the same namespace, so that both arms put the
/// same scraping load on the machine and differ only in xtcp's work
/// (XTCP_BENCH_DECOY=0: nothing instead). First, with xtcp idle, the CPU
/// its threads use, not scraped and scraped. Prints per round
/// the stock client's Gbit/s and xtcp's CPU (iperf3's `remote_total`),
/// then the medians, the median of the pairs' ratios (scraped / not) and
/// what one scrape took. A benchmark, not a test: it prints, it does not
/// judge. Run: `cargo test -p xtcp --test metrics -- --ignored --nocapture
/// metrics_cost` (XTCP_BENCH_ROUNDS pairs, default 8, of XTCP_BENCH_SECS
/// seconds, default 5, at MTU XTCP_BENCH_MTU, default 1500).
#[test]
#[ignore = "a benchmark: run it by name with --ignored"]
fn metrics_cost_scraped_every_100ms_vs_not() {
    let env = |k: &str, d: u32| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let rounds = env("XTCP_BENCH_ROUNDS", 8);
    let secs = env("XTCP_BENCH_SECS", 5);
    let mtu = env("XTCP_BENCH_MTU", 1500);
    assert!(
        rounds > 0,
        "XTCP_BENCH_ROUNDS {rounds}: give 1 or more pairs"
    );
    let mut net = testnet(1);
    net.set_mtu(mtu).unwrap();
    let x = serve(&net, 1, &[]);
    let pid = x.child.0.id();
    // Idle: the CPU xtcp's threads use, not scraped and scraped.
    let idle = |scraped: bool| {
        let stop = Arc::new(AtomicBool::new(false));
        let scraper = scraped.then(|| {
            let (ns, at, stop) = (net.a.ns.name().to_owned(), metrics_at(&net), stop.clone());
            std::thread::spawn(move || scrape_every_100ms(ns, at, stop))
        });
        let (c0, t0) = cpu_ns(pid);
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs(u64::from(secs) * 2));
        let (c1, t1) = cpu_ns(pid);
        let secs = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let n = scraper.map_or(0, |s| s.join().unwrap().len());
        assert_eq!(t0, t1, "no thread of xtcp's came or went");
        let used: Vec<f64> = (0..3).map(|k| (c1[k] - c0[k]) as f64 / 1e9).collect();
        (used, secs, n)
    };
    for scraped in [false, true] {
        let (used, secs, n) = idle(scraped);
        eprintln!(
            "idle xtcp, {}: CPU over {secs:.1} s: workers {:.1} ms, control thread {:.1} \
             ms, other threads (metrics) {:.1} ms{}",
            if scraped {
                "scraped every 100 ms"
            } else {
                "not scraped"
            },
            used[0] * 1e3,
            used[1] * 1e3,
            used[2] * 1e3,
            if scraped {
                format!(
                    ": {:.0} us per scrape ({n} scrapes)",
                    used[2] / n as f64 * 1e6
                )
            } else {
                String::new()
            }
        );
    }
    // (Gbit/s, xtcp's CPU %) of each round, not scraped and scraped.
    let mut runs: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    let mut pairs = Vec::new();
    let mut scrape_us: Vec<f64> = Vec::new();
    let mut pair = [0.0; 2];
    // The control rounds: scrapes of the decoy (the same requests and
    // bytes, served by the test), or (XTCP_BENCH_DECOY=0) no scrapes.
    let decoy = (env("XTCP_BENCH_DECOY", 1) != 0).then(|| {
        let at = SocketAddr::new(net.a.ip4.into(), METRICS_PORT + 1);
        Decoy::start(&net.a.ns, at, scrape(&net))
    });
    eprintln!(
        "control rounds: {}",
        if decoy.is_some() {
            "the same scrapes every 100 ms, of a decoy (a kernel server of the test's)"
        } else {
            "no scrapes"
        }
    );
    for r in 0..rounds * 2 {
        // ABBA: scraped on rounds 1, 2, 5, 6, ...
        let scraped = matches!(r % 4, 1 | 2);
        let stop = Arc::new(AtomicBool::new(false));
        let target = if scraped {
            Some(metrics_at(&net))
        } else {
            decoy.as_ref().map(|d| d.at)
        };
        let scraper = target.map(|at| {
            let (ns, stop) = (net.a.ns.name().to_owned(), stop.clone());
            std::thread::spawn(move || scrape_every_100ms(ns, at, stop))
        });
        let v = iperf3_json(&net, &["-t", &secs.to_string()]);
        stop.store(true, Ordering::Relaxed);
        let n = scraper.map_or(0, |s| {
            let took = s.join().unwrap();
            let n = took.len();
            if scraped {
                scrape_us.extend(took);
            }
            n
        });
        let g = v["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap()
            / 1e9;
        let cpu = v["end"]["cpu_utilization_percent"]["remote_total"]
            .as_f64()
            .unwrap();
        eprintln!(
            "round {r}: {} {g:.2} Gbit/s, xtcp CPU {cpu:.0} % ({n} scrapes{})",
            if scraped { "scraped" } else { "not scraped" },
            if scraped || n == 0 {
                ""
            } else {
                " of the decoy"
            }
        );
        assert!(!scraped || n as f64 >= f64::from(secs) * 5.0, "{n} scrapes");
        runs[usize::from(scraped)].push((g, cpu));
        pair[usize::from(scraped)] += g;
        if r % 2 == 1 {
            pairs.push(pair[1] / pair[0]);
            pair = [0.0; 2];
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let col = |k: usize, f: fn(&(f64, f64)) -> f64| median(runs[k].iter().map(f).collect());
    eprintln!(
        "MTU {mtu}, {rounds} pairs of {secs} s: not scraped {:.2} Gbit/s (xtcp CPU {:.0} %), \
         scraped every 100 ms {:.2} Gbit/s (xtcp CPU {:.0} %), medians; ratio scraped / not: \
         {:.3} of the medians, {:.3} median of the pairs ({}); one scrape {:.0} us (median of \
         {})",
        col(0, |r| r.0),
        col(0, |r| r.1),
        col(1, |r| r.0),
        col(1, |r| r.1),
        col(1, |r| r.0) / col(0, |r| r.0),
        median(pairs.clone()),
        pairs
            .iter()
            .map(|p| format!("{p:.3}"))
            .collect::<Vec<_>>()
            .join(" "),
        median(scrape_us.clone()),
        scrape_us.len()
    );
}

#[test]
fn connections_beyond_max_conns_are_counted_as_refused() {
    let net = testnet(1);
    // (The least serve takes: a test needs two connections.)
    let _x = serve(&net, 1, &["--max-conns", "2"]);
    let dst = SocketAddr::new(net.a.ip4.into(), 5201);
    let in_b = net.b.ns.enter().unwrap();
    // The first two are held (xtcp waits for their cookies); the next two
    // are refused: their SYNs are answered with a reset, and B's kernel
    // says so to the application when it connects.
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect_timeout(&dst, Duration::from_secs(10)).unwrap())
        .collect();
    let mut resets = 0;
    for _ in 0..2 {
        match TcpStream::connect_timeout(&dst, Duration::from_secs(10)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => resets += 1,
            r => panic!("a connection beyond --max-conns 2: {r:?}"),
        }
    }
    drop(in_b);
    scrape_until(&net, "the refused connections counted", |t| {
        let refused = must(t, r#"xtcp_connections_refused_total{queue="0"}"#);
        let live = must(t, r#"xtcp_connections{queue="0"}"#);
        (refused == resets && live == 2)
            .then_some(())
            .ok_or(format!(
                "refused {refused}, held {live}; B saw {resets} resets"
            ))
    });
    drop(held);
}

/// Refused tests are counted by reason: a client from an address the deny
/// list names (it is told so, and fails), and one from another address
/// that asks for more than the duration limit, and a connection that
/// brings no cookie; `xtcp_tests_total{result="refused",reason=…}` has
/// exactly the refusals the clients saw.
#[test]
fn refused_tests_are_counted_by_reason() {
    need_iperf3();
    let net = testnet(1);
    // A second address on side B, the one denied.
    let denied = "198.18.0.3";
    net.b
        .ns
        .ip(&["addr", "add", &format!("{denied}/24"), "dev", &net.b.iface])
        .unwrap();
    let _x = serve(&net, 1, &["--deny", denied, "--server-max-duration", "5"]);
    let client = |extra: &[&str]| {
        net.b
            .ns
            .command("timeout")
            .args(["60", "iperf3", "-c", &net.a.ip4.to_string()])
            .args(extra)
            .output()
            .unwrap()
    };
    // Denied, twice.
    for _ in 0..2 {
        let out = client(&["-B", denied, "-t", "1"]);
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains("test authorization failed"),
            "{said}"
        );
    }
    scrape_until(&net, "two denied tests counted", |t| {
        match value(t, r#"xtcp_tests_total{result="refused",reason="denied"}"#) {
            Some(2) => Ok(()),
            v => Err(format!("denied: {v:?}")),
        }
    });
    // From B's own address the client is not denied, but asks for more
    // than the duration limit.
    let out = client(&["-t", "30"]);
    assert!(!out.status.success());
    let t = scrape_until(
        &net,
        "a test over the duration limit counted",
        |t| match value(
            t,
            r#"xtcp_tests_total{result="refused",reason="max_duration"}"#,
        ) {
            Some(1) => Ok(()),
            v => Err(format!("max_duration: {v:?}")),
        },
    );
    assert_eq!(must(&t, r#"xtcp_tests_total{result="ok"}"#), 0, "{t}");
    assert_eq!(must(&t, r#"xtcp_tests_total{result="failed"}"#), 0, "{t}");
    // A connection that closes before iperf3's cookie (a port scan, a TCP
    // health check) is no test that failed (it was counted as one).
    {
        let _g = net.b.ns.enter().unwrap();
        let s = std::net::TcpStream::connect((net.a.ip4, 5201)).unwrap();
        drop(s);
    }
    let t = scrape_until(
        &net,
        "a connection without a cookie counted",
        |t| match value(
            t,
            r#"xtcp_tests_total{result="refused",reason="no_cookie"}"#,
        ) {
            Some(1) => Ok(()),
            v => Err(format!("no_cookie: {v:?}")),
        },
    );
    assert_eq!(must(&t, r#"xtcp_tests_total{result="failed"}"#), 0, "{t}");
}

/// Reloads (SIGHUP) are counted by result, and
/// `xtcp_config_last_reload_successful` says whether the last one took:
/// `systemctl reload` (a signal) cannot tell an operator that it failed.
#[test]
fn reloads_are_counted_and_a_failed_one_shows() {
    let net = testnet(1);
    let dir = common::TempDir::new("metrics-reload");
    let conf = dir.file("serve.toml", "idle_timeout = 30\n");
    let mut x = serve(&net, 1, &["--config", conf.to_str().unwrap()]);
    let last = "xtcp_config_last_reload_successful";
    assert_eq!(must(&scrape(&net), last), 1);
    x.signal("-HUP");
    x.wait_for("xtcp serve: reloaded");
    let t = scrape(&net);
    assert_eq!(
        must(&t, r#"xtcp_config_reloads_total{result="ok"}"#),
        1,
        "{t}"
    );
    assert_eq!(must(&t, last), 1, "{t}");
    std::fs::write(&conf, "idle_timeout = \"soon\"\n").unwrap();
    x.signal("-HUP");
    x.wait_for("xtcp serve: reload failed");
    let t = scrape(&net);
    assert_eq!(
        must(&t, r#"xtcp_config_reloads_total{result="failed"}"#),
        1,
        "{t}"
    );
    assert_eq!(must(&t, last), 0, "{t}");
}

/// Forged segments of a connection to serve (see [`Forged::into`]): the
/// unacceptable-segment series count each kind as side B forged it, and
/// the challenge ACKs and answers skipped as B's capture of xtcp's
/// answers allows.
#[test]
fn forged_segments_are_counted_by_reason() {
    let net = testnet(1);
    let _x = serve(&net, 1, &[]);
    let forged = Forged::into(&net, SocketAddr::new(net.a.ip4.into(), 5201));
    let series = [
        r#"xtcp_tcp_unacceptable_segments_total{reason="out_of_window"}"#,
        r#"xtcp_tcp_unacceptable_segments_total{reason="paws"}"#,
        "xtcp_tcp_challenge_acks_total",
        "xtcp_tcp_unacceptable_unanswered_total",
    ];
    let t = scrape_until(&net, "the forged segments counted", |t| {
        let counts = series.map(|s| must(t, s));
        forged
            .all_counted(counts)
            .then_some(())
            .ok_or_else(|| format!("{series:?}: {counts:?}"))
    });
    let counts = series.map(|s| must(&t, s));
    forged.check(&format!("{series:?} = {counts:?}"), counts);
}

/// DEPLOYMENT.md's alert rules, as printed there, pass `promtool check
/// rules`, and `promtool test rules` holds them to what the document says
/// they catch: refused tests fire `XtcpTestsRefused` by reason, but
/// connections that sent no iperf3 cookie (a load balancer's TCP check, a
/// port scan) do not; a failed test fires `XtcpTestsFailing`.
#[test]
fn the_documented_alert_rules_fire_as_documented() {
    assert!(
        Command::new("promtool").arg("--version").output().is_ok(),
        "promtool is not installed (scripts/deps.sh installs Debian's prometheus)"
    );
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/DEPLOYMENT.md"
    ))
    .unwrap();
    let start = doc
        .find("```yaml\n# rules/xtcp.yml\n")
        .expect("the rules block in DEPLOYMENT.md");
    let block = &doc[start + "```yaml\n".len()..];
    let rules = &block[..block.find("```").unwrap()];
    let dir = std::env::temp_dir().join(format!("xtcp-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("xtcp.yml"), rules).unwrap();
    std::fs::write(
        dir.join("test.yml"),
        r#"rule_files: [xtcp.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job="xtcp",instance="a"}'
        values: '1x120'
      - series: 'xtcp_tests_total{job="xtcp",instance="a",result="refused",reason="no_cookie"}'
        values: '0+4x120'
      - series: 'xtcp_tests_total{job="xtcp",instance="a",result="refused",reason="busy"}'
        values: '0+1x120'
      - series: 'xtcp_tests_total{job="xtcp",instance="a",result="failed",reason="error"}'
        values: '0x60 1x60'
    alert_rule_test:
      - eval_time: 90m
        alertname: XtcpTestsRefused
        exp_alerts:
          - exp_labels: {instance: a, reason: busy}
      - eval_time: 90m
        alertname: XtcpTestsFailing
        exp_alerts:
          - exp_labels: {instance: a}
      - eval_time: 30m
        alertname: XtcpTestsFailing
        exp_alerts: []
"#,
    )
    .unwrap();
    for args in [
        &["check", "rules", "xtcp.yml"][..],
        &["test", "rules", "test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}\n{rules}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
