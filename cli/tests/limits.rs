//! `xtcp serve`'s limits and authentication against Debian's stock
//! `iperf3 -c` (3.12): allow/deny, the busy answer (while a test runs and
//! while one connects its streams), the max duration, the bitrate limit
//! (asked for and measured), the idle timeout (a stopped client), the
//! stream limit, and iperf3's RSA authentication with a good and a bad
//! password. Every refusal is reported in serve's line for the test.
//! Root needed (CI runs as root); each test builds its own namespaces.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{
    ENGINE, Reap, Server, TempDir, XTCP, client_wrote_what_xtcp_received, count, kill, kill_tree,
    link_stat, need_iperf3, testnet,
};
use xtcp_engine::testnet::TestNet;

/// Serve's line for a test it served to the end (`context` says which), and
/// the byte counts the stock client's `-J` reports for it: `sum_received`
/// (xtcp's own count as the client was told) equal to serve's line, and
/// `sum_sent` (the client's own count of what it wrote) at least that and
/// at most a send buffer more (what was still in flight when the test
/// ended; the client runs in `net`'s side B).
fn assert_served(net: &TestNet, line: &str, client: &serde_json::Value, context: &str) {
    assert!(line.contains(": ok;"), "{context}: {line}");
    let received = count(line, "received");
    assert_eq!(
        client["end"]["sum_received"]["bytes"].as_u64(),
        Some(received),
        "{context}: {line}"
    );
    client_wrote_what_xtcp_received(net, received, client);
}

/// `iperf3 -c <A's IPv4> <extra>` from side B, with `env`; its output
/// whatever the result.
fn iperf3(net: &TestNet, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = common::stock_client(net);
    c.args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A client iperf3 refused: exit status 1 and exactly this error line.
fn assert_refused_with(out: &Output, message: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}{}", text(&out.stdout));
    assert_eq!(
        err.trim_end(),
        format!("iperf3: error - {message}").trim_end(),
        "{}",
        text(&out.stdout)
    );
}

/// A `-J` run that succeeded: its JSON.
fn json_ok(out: &Output) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}{}", text(&out.stdout), text(&out.stderr)));
    assert!(out.status.success() && v.get("error").is_none(), "{v}");
    v
}

/// The test's seconds in an outcome line ("…, 2.003 s, …").
fn seconds(line: &str) -> f64 {
    let end = line
        .find(" s, received")
        .unwrap_or_else(|| panic!("seconds in {line}"));
    line[..end].rsplit(' ').next().unwrap().parse().unwrap()
}

fn sh(script: &str) -> String {
    let out = Command::new("sh").args(["-c", script]).output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn denied_clients_are_told_and_reported_allowed_ones_served() {
    need_iperf3();
    let net = testnet(1);
    let b4 = net.b.ip4.to_string();
    {
        let server = Server::start_with(&net, 1, &["--deny", &b4, "--allow", "198.18.0.0/15"]);
        let out = iperf3(&net, &["-t", "1"], &[]);
        assert_refused_with(&out, "test authorization failed");
        let line = server.outcome();
        assert!(
            line.contains(&format!("refused: client {b4} is not allowed")),
            "{line}"
        );
        // Not counted as a test: the server serves on (nothing else
        // changed, the same client is refused again).
        let out = iperf3(&net, &["-t", "1"], &[]);
        assert_refused_with(&out, "test authorization failed");
        assert!(server.outcome().contains("is not allowed"));
    }
    // IPv6, on an allow list that names the client: served, counts equal.
    let a6 = net.a.ip6.to_string();
    let b6 = format!("{}/128", net.b.ip6);
    let server = Server::start_with(
        &net,
        1,
        &["-B", &a6, "--allow", &b6, "--deny", "198.18.0.0/15"],
    );
    let out = net
        .b
        .ns
        .command("timeout")
        .args(["60", "iperf3", "-c", &a6, "-t", "1", "-J"])
        .output()
        .unwrap();
    let v = json_ok(&out);
    let line = server.outcome();
    assert_served(&net, &line, &v, "served");
}

/// A second stock client while a test runs gets stock iperf3's busy
/// answer; the first test goes on and its counts are the client's. So do
/// the running test's intervals and the text a `--get-server-output`
/// client gets (the refusal ended the capture of that text, and in `-J`
/// mode dropped the intervals before).
#[test]
fn a_second_client_while_a_test_runs_is_told_the_server_is_busy() {
    need_iperf3();
    let net = testnet(1);
    for json in [false, true] {
        let server = Server::start_with(&net, 1, if json { &["-J"] } else { &[] });
        let first = common::stock_client(&net)
            .args(["-t", "3", "-J", "--get-server-output"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = Reap(first);
        // Running: a connection of the client's has had data acknowledged
        // (its control connection carries a few hundred bytes).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ss = net.b.ns.command("ss").args(["-Htin"]).output().unwrap();
            let ss = String::from_utf8_lossy(&ss.stdout).into_owned();
            let most = ss
                .split_whitespace()
                .filter_map(|w| w.strip_prefix("bytes_acked:")?.parse::<u64>().ok())
                .max();
            if most.is_some_and(|b| b > 1 << 20) {
                break;
            }
            assert!(first.0.try_wait().unwrap().is_none(), "the client ended");
            assert!(Instant::now() < deadline, "the test never ran: {ss}");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The first client held still while the second asks, so that its
        // test is surely running then, however slow the machine.
        kill_tree("-STOP", first.0.id());
        let out = iperf3(&net, &["-t", "1"], &[]);
        kill_tree("-CONT", first.0.id());
        assert_refused_with(&out, "the server is busy running a test. try again later");
        if json {
            let busy = server.json();
            assert_eq!(
                busy["error"], "refused: the server is busy running a test",
                "{busy}"
            );
        } else {
            let busy = server.outcome();
            assert!(busy.contains("refused: the server is busy"), "{busy}");
            assert!(
                busy.contains(&format!("test from {}:", net.b.ip4)),
                "{busy}"
            );
        }
        let mut s = String::new();
        first
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert!(first.0.wait().unwrap().success(), "{s}");
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert!(v.get("error").is_none(), "{v}");
        let received = v["end"]["sum_received"]["bytes"].as_u64().unwrap();
        if json {
            let doc = server.json();
            assert_eq!(doc["end"]["sum_received"]["bytes"], received, "{doc}");
            let intervals = doc["intervals"].as_array().unwrap();
            let sum: u64 = intervals
                .iter()
                .map(|i| i["sum"]["bytes"].as_u64().unwrap())
                .sum();
            assert!(intervals.len() >= 3, "{doc}");
            assert_eq!(sum, received, "every interval is there: {doc}");
            let theirs = &v["server_output_json"];
            assert_eq!(
                theirs["intervals"].as_array().unwrap().len(),
                intervals.len(),
                "{v}"
            );
        } else {
            let line = server.outcome();
            assert_served(&net, &line, &v, "the first test is unaffected");
            let text = v["server_output_text"]
                .as_str()
                .unwrap_or_else(|| panic!("{v}"));
            let intervals = text
                .lines()
                .filter(|l| {
                    l.starts_with("[  1]") && l.contains(" sec ") && !l.contains("receiver")
                })
                .count();
            assert!(
                text.contains("Accepted connection from") && intervals >= 3,
                "the whole text: {text}"
            );
            // Nor the refusal's line, which is no iperf3 text of this test.
            assert!(!text.contains("xtcp serve: "), "{text}");
        }
        drop(server);
    }
}

/// While a test is still connecting its streams, a new connection looks
/// like one of them until its cookie says otherwise: a stock client gets
/// the busy answer then too.
#[test]
fn a_second_client_while_a_test_connects_its_streams_is_told_the_server_is_busy() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &[]);
    let dst = SocketAddr::new(net.a.ip4.into(), 5201);
    let cookie = b"abcdefghijklmnopqrstuvwxyz234567abcd\0";
    // A first client by hand, left halfway: two streams asked, one open.
    let (ctrl, data) = {
        let _g = net.b.ns.enter().unwrap();
        let mut ctrl = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
        ctrl.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        ctrl.write_all(cookie).unwrap();
        let params = br#"{"tcp":true,"omit":0,"time":5,"num":0,"blockcount":0,"parallel":2,"len":131072,"client_version":"3.12"}"#;
        ctrl.write_all(&(params.len() as u32).to_be_bytes())
            .unwrap();
        ctrl.write_all(params).unwrap();
        let mut states = [0u8; 2];
        ctrl.read_exact(&mut states).unwrap();
        assert_eq!(states, [9, 10], "PARAM_EXCHANGE, CREATE_STREAMS");
        let mut data = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
        data.write_all(cookie).unwrap();
        (ctrl, data)
    };
    let out = iperf3(&net, &["-t", "1"], &[]);
    assert_refused_with(&out, "the server is busy running a test. try again later");
    let busy = server.outcome();
    assert!(busy.contains("refused: the server is busy"), "{busy}");
    // The half-made test still takes its second stream and starts.
    let mut ctrl = ctrl;
    {
        let _g = net.b.ns.enter().unwrap();
        let mut second = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
        second.write_all(cookie).unwrap();
        let mut states = [0u8; 2];
        ctrl.read_exact(&mut states).unwrap();
        assert_eq!(states, [1, 2], "TEST_START, TEST_RUNNING");
        drop(second);
    }
    drop((ctrl, data));
    let line = server.outcome();
    assert!(
        line.contains("failed") && line.contains("2 streams"),
        "{line}"
    );
}

/// `--server-max-duration`: -t + -O above it, or -n without -t, is refused
/// with iperf3 3.20's code (which 3.12 prints as "int_errno=37"); a test
/// within it runs.
#[test]
fn max_duration_refuses_long_and_untimed_tests() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["--server-max-duration", "2"]);
    for (args, why) in [
        (&["-t", "2", "-O", "1"][..], "-t 2 + -O 1 = 3 s exceeds"),
        (&["-n", "1M"][..], "without a time limit"),
    ] {
        let out = iperf3(&net, args, &[]);
        assert_refused_with(&out, "int_errno=37: ");
        let line = server.outcome();
        assert!(
            line.contains("(iperf3 error 37)") && line.contains(why),
            "{args:?}: {line}"
        );
        assert!(line.contains("max duration of 2 s"), "{line}");
    }
    let v = json_ok(&iperf3(&net, &["-t", "2", "-J"], &[]));
    let line = server.outcome();
    assert_served(&net, &line, &v, "served");
}

/// `--server-bitrate-limit`: a `-b` above it is refused with IETOTALRATE;
/// a test that moves more on average is ended.
#[test]
fn bitrate_limit_refuses_a_high_b_and_ends_a_fast_test() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["--server-bitrate-limit", "50M/1"]);
    let out = iperf3(&net, &["-t", "2", "-b", "30M", "-P", "2"], &[]);
    assert_refused_with(&out, "total required bandwidth is larger than server limit");
    let line = server.outcome();
    assert!(
        line.contains("(iperf3 error 27)")
            && line.contains("60000000 bit/s exceeds the server's bitrate limit of 50000000"),
        "{line}"
    );
    // Within the limit: runs to the end. 5 MB in all, 40 Mbit: no second
    // of it can exceed 50 Mbit, however a stalled client's pacing catches
    // up or late the server's samples are.
    let v = json_ok(&iperf3(&net, &["-n", "5M", "-b", "20M", "-J"], &[]));
    let line = server.outcome();
    assert_served(&net, &line, &v, "served");
    // Unlimited on a veth: far above 50 Mbit/s, ended by the server (the
    // client sees the error or its streams reset, whichever comes first).
    let before = link_stat(&net.b.ns, &net.b.iface, "tx", "bytes");
    let out = iperf3(&net, &["-t", "30"], &[]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let line = server.outcome();
    assert!(
        line.contains("failed: ended by the server's bitrate limit")
            && line.ends_with(", congestion cubic"),
        "{line}"
    );
    // The rate the server measured over its last second, and what it
    // received in all, against what side B's veth sent (headers included).
    let at = line.find("bitrate limit: ").unwrap() + "bitrate limit: ".len();
    let measured: u64 = line[at..].split(' ').next().unwrap().parse().unwrap();
    let received = count(&line, "received");
    let sent_by_b = link_stat(&net.b.ns, &net.b.iface, "tx", "bytes") - before;
    assert!(measured > 50_000_000, "{line}");
    assert!(seconds(&line) >= 1.0, "a full window first: {line}");
    assert!(
        measured / 8 <= received && received <= sent_by_b,
        "{line}: veth sent {sent_by_b}"
    );
}

/// `--rcv-timeout` (iperf3's, in ms; it takes the place of
/// `--idle-timeout`'s for a running test): a client stopped in the middle
/// of its test (SIGSTOP) has its test ended by the server once nothing
/// moved for that long.
#[test]
fn rcv_timeout_ends_the_test_of_a_stopped_client() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["--idle-timeout", "60", "--rcv-timeout", "2000"]);
    let client = net
        .b
        .ns
        .command("iperf3")
        .args(["-c", &net.a.ip4.to_string(), "-t", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = Reap(client);
    server.wait_running();
    // `ip netns exec` execs iperf3: this PID is the client's.
    let pid = client.0.id();
    kill("-STOP", pid);
    let line = server.outcome();
    assert!(
        line.contains(
            "failed: ended by the idle timeout (--rcv-timeout): no data or control progress for 2 s"
        ),
        "{line}"
    );
    assert!(count(&line, "received") > 0, "{line}");
    assert!(
        seconds(&line) >= 2.0,
        "it ran at least the idle timeout: {line}"
    );
    kill("-CONT", pid);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = client.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the client never ended");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "the client's test was ended");
    // The server serves the next client.
    let v = json_ok(&iperf3(&net, &["-t", "1", "-J"], &[]));
    let line = server.outcome();
    assert_served(&net, &line, &v, "served");
}

/// `-1 --idle-timeout N`: no client for N seconds and serve exits, status 0.
#[test]
fn one_off_server_exits_when_no_client_comes() {
    let net = testnet(1);
    let mut server = Server::start_with(&net, 1, &["-1", "--idle-timeout", "1"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = server.child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "serve -1 --idle-timeout 1 went on"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

/// `--max-streams`: more streams than that is refused with iperf3's code.
#[test]
fn max_streams_refuses_more_streams() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["--max-streams", "2"]);
    let out = iperf3(&net, &["-t", "1", "-P", "3"], &[]);
    assert_refused_with(&out, "number of parallel streams too large (maximum = 128)");
    let line = server.outcome();
    assert!(
        line.contains("(iperf3 error 6)")
            && line
                .contains("3 data streams requested, limit 2 (--max-streams, within --max-conns)"),
        "{line}"
    );
    let out = iperf3(&net, &["-t", "1", "-P", "1", "--bidir"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(server.outcome().contains(": ok;"));
}

/// `--max-conns` bounds a test's streams too: with 3 connections on the
/// one queue, a test of three streams (four connections) is refused at its
/// parameters with iperf3's code, not failed when a data connection is
/// reset; two streams are served, test after test.
#[test]
fn max_conns_refuses_a_test_it_cannot_hold() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["--max-conns", "3"]);
    let out = iperf3(&net, &["-t", "1", "-P", "3"], &[]);
    assert_refused_with(&out, "number of parallel streams too large (maximum = 128)");
    let line = server.outcome();
    assert!(
        line.contains("(iperf3 error 6)")
            && line
                .contains("3 data streams requested, limit 2 (--max-streams, within --max-conns)"),
        "{line}"
    );
    // Test after test at the limit: the connections of the one before
    // (those xtcp closed first wait in TIME-WAIT) make room for the next.
    for round in 0..4 {
        let out = iperf3(&net, &["-t", "1", "-P", "2"], &[]);
        assert!(out.status.success(), "round {round}: {}", text(&out.stderr));
        let line = server.outcome();
        assert!(line.contains(": ok;"), "round {round}: {line}");
    }
}

/// iperf3's authentication with keys made by openssl: PKCS#8 (openssl 3's
/// `genrsa`) and PKCS#1 (`-traditional`); a good password is served, a bad
/// one and none are refused ("test authorization failed") and reported.
#[test]
fn stock_client_logs_in_with_rsa_good_and_bad_password() {
    need_iperf3();
    let dir = TempDir::new("auth");
    let (k8, k1, public, users) = (
        dir.path("key.pem"),
        dir.path("key1.pem"),
        dir.path("public.pem"),
        dir.path("users.csv"),
    );
    sh(&format!(
        "openssl genrsa -out {k8} 2048 2>/dev/null && \
         openssl rsa -in {k8} -traditional -out {k1} 2>/dev/null && \
         openssl rsa -in {k8} -pubout -out {public} 2>/dev/null"
    ));
    assert!(
        std::fs::read_to_string(&k8)
            .unwrap()
            .contains("BEGIN PRIVATE KEY")
    );
    assert!(
        std::fs::read_to_string(&k1)
            .unwrap()
            .contains("BEGIN RSA PRIVATE KEY")
    );
    // The users file as iperf3's manual makes it, with sha256sum.
    let hash = sh("printf '%s' '{alice}s3cret' | sha256sum | cut -d' ' -f1");
    std::fs::write(&users, format!("# users\nalice,{}\n", hash.trim())).unwrap();
    let net = testnet(1);
    for key in [&k8, &k1] {
        let server = Server::start_with(
            &net,
            1,
            &[
                "--rsa-private-key-path",
                key,
                "--authorized-users-path",
                &users,
            ],
        );
        let login = ["--username", "alice", "--rsa-public-key-path", &public];
        let mut args = vec!["-t", "1", "-J"];
        args.extend(login);
        let v = json_ok(&iperf3(&net, &args, &[("IPERF3_PASSWORD", "s3cret")]));
        let line = server.outcome();
        assert_served(&net, &line, &v, key);
        let mut args = vec!["-t", "1"];
        args.extend(login);
        let out = iperf3(&net, &args, &[("IPERF3_PASSWORD", "wrong")]);
        assert_refused_with(&out, "test authorization failed");
        let line = server.outcome();
        assert!(
            line.contains("refused: authentication failed: user `alice`: wrong password"),
            "{line}"
        );
        let out = iperf3(&net, &["-t", "1"], &[]);
        assert_refused_with(&out, "test authorization failed");
        assert!(server.outcome().contains("no authentication token"));
        // iperf3 3.17+ encrypts with OAEP: a token made so by openssl (as
        // iperf3 makes it, through OpenSSL's RSA_PKCS1_OAEP_PADDING: SHA-1)
        // takes a hand-made client to CREATE_STREAMS.
        let token = sh(&format!(
            "printf 'user: alice\\npwd:  s3cret\\nts:   %s' \"$(date +%s)\" | \
             openssl pkeyutl -encrypt -pubin -inkey {public} -pkeyopt rsa_padding_mode:oaep | \
             base64 -w0"
        ));
        let dst = SocketAddr::new(net.a.ip4.into(), 5201);
        let got = {
            let _g = net.b.ns.enter().unwrap();
            let mut c = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c.write_all(b"abcdefghijklmnopqrstuvwxyz234567abcd\0")
                .unwrap();
            let params = serde_json::json!({"tcp": true, "time": 1, "parallel": 1,
                "len": 131072, "authtoken": token.trim(), "client_version": "3.17"})
            .to_string();
            c.write_all(&(params.len() as u32).to_be_bytes()).unwrap();
            c.write_all(params.as_bytes()).unwrap();
            let mut states = [0u8; 2];
            c.read_exact(&mut states).unwrap();
            states
        };
        assert_eq!(
            got,
            [9, 10],
            "PARAM_EXCHANGE, CREATE_STREAMS: the OAEP login passed"
        );
        let line = server.outcome();
        assert!(
            line.contains("failed") && !line.contains("refused"),
            "{line}"
        );
    }
}

/// Bad limit flags: one line naming the value and what is accepted, before
/// anything is set up.
#[test]
fn bad_limit_flags_are_refused_before_any_banner() {
    let net = testnet(1);
    let run = |extra: &[&str]| {
        let out = net
            .a
            .ns
            .command(XTCP)
            .args(["serve", "--iface", &net.a.iface])
            .args(ENGINE)
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(!err.contains("listening"), "{err}");
        err
    };
    let e = run(&["--allow", "198.18.0.0/15,example.com"]);
    assert!(
        e.contains("`example.com` is not an IP address or CIDR block"),
        "{e}"
    );
    let e = run(&["--server-bitrate-limit", "fast"]);
    assert!(e.contains("`fast`") && e.contains("0.1..=60"), "{e}");
    let e = run(&["--idle-timeout", "0"]);
    assert!(e.contains("'0'") && e.contains("1..=86400"), "{e}");
    let dir = TempDir::new("badkey");
    let (key, users) = (dir.path("key.pem"), dir.path("users.csv"));
    std::fs::write(&key, "not a key\n").unwrap();
    std::fs::write(&users, "alice,1234\n").unwrap();
    let e = run(&[
        "--rsa-private-key-path",
        &key,
        "--authorized-users-path",
        &users,
    ]);
    assert!(e.contains(&format!("{key}: not an RSA private key")), "{e}");
    sh(&format!("openssl genrsa -out {key} 1024 2>/dev/null"));
    let e = run(&[
        "--rsa-private-key-path",
        &key,
        "--authorized-users-path",
        &users,
    ]);
    assert!(
        e.contains(&format!("{users}:1: the hash of `alice`")),
        "{e}"
    );
    assert!(Path::new(&key).exists());
    let e = run(&["--max-conns", "4", "--max-streams", "8"]);
    assert!(
        e.contains(
            "--max-streams 8: the workers hold at most 4 connections (--max-conns 4 on 1 queue(s))"
        ) && e.contains("give --max-streams 3 or less"),
        "{e}"
    );
    let e = run(&["--max-conns", "1"]);
    assert!(e.contains("a test needs two connections at least"), "{e}");
}
