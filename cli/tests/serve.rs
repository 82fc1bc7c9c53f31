//! `xtcp serve` against Debian's stock `iperf3 -c`: forward, reverse,
//! parallel streams over two queues, IPv4 and IPv6 clients of one server, byte counts in `-J` equal to xtcp's,
//! tests back to back, `-w`, the server's interval lines, and garbage or
//! killed clients that must not stop the server; many streams: 32 into one
//! queue lose nothing at the redirect and retransmit no more than into the
//! kernel (a CPU hog running), 32 spread over two queues, handshakes that
//! end on another queue than their SYN, a SYN flood during a test counted
//! and bounded, SYNs with FIN set unanswered and counted.
//! Root needed (CI runs as root); each test builds its own namespaces.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::{
    CPU_SLACK, ENGINE, Reap, STAMPS, Server, TempDir, Watched, XTCP, bad_checksums,
    client_wrote_what_xtcp_received, count, iperf3_json, iperf3_json_to, iperf3_timed, line_of,
    link_stat, need_iperf3, number, proc_cpu, rate_is_bytes_over_seconds, repeated_block,
    server_clock_holds, syn_flood, tcp_buffer_max, tcp_ext, tcp_mib, testnet, wait_listening,
    wait_ss,
};
use xtcp_engine::testnet::TestNet;

#[test]
fn stock_iperf3_forward_reverse_and_n_back_to_back_with_matching_counts() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start(&net, 1);

    let wmem_max = tcp_buffer_max(&net.b.ns, "tcp_wmem");
    let rmem_max = tcp_buffer_max(&net.b.ns, "tcp_rmem");

    // Forward: xtcp receives; iperf3's receiver total is xtcp's count, and
    // xtcp's line agrees with what the stock client says it sent: all of
    // it, or short by what was still in the client's send buffer at
    // TEST_END (xtcp, as iperf3's server, reads what arrived, then closes).
    let (v, wall) = iperf3_timed(&net, &["-t", "2"]);
    let (line, intervals) = server.outcome_and_intervals();
    assert!(line.contains(": ok;") && line.contains("forward"), "{line}");
    let got = v["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(got > 0);
    assert_eq!(got, count(&line, "received"), "{line}");
    line_agrees_with_the_client(&line, "received", &v["end"]["sum_sent"], wmem_max, wall);
    // The CPU xtcp reports to the client, split: receiving through AF_XDP
    // costs system time too (recvfrom/poll wake-ups, the XDP redirect).
    let cpu = &v["end"]["cpu_utilization_percent"];
    let f = |k: &str| cpu[k].as_f64().unwrap_or_else(|| panic!("{k} in {cpu}"));
    assert!(f("remote_system") > 0.0 && f("remote_user") > 0.0, "{cpu}");
    assert!(
        (f("remote_total") - f("remote_user") - f("remote_system")).abs()
            < 1e-6 * f("remote_total").max(1.0),
        "{cpu}"
    );
    // The server's interval lines (one stream, id 1, every second) add up
    // to what it counted.
    assert!(intervals.len() >= 2, "{intervals:?}");
    assert!(intervals[0].starts_with("[  1]   0.00-1."), "{intervals:?}");
    let interval_bytes: f64 = intervals.iter().map(|l| line_bytes(l)).sum();
    let rel = (interval_bytes - got as f64).abs() / got as f64;
    assert!(rel < 0.02, "{interval_bytes} vs {got}: {intervals:?}");
    // The window xtcp offered the kernel sender (its snd_wnd, per interval):
    // autotuned, above 32 KiB.
    let wnd = |v: &serde_json::Value| -> Vec<u64> {
        v["intervals"]
            .as_array()
            .unwrap()
            .iter()
            .skip(1)
            .map(|iv| iv["streams"][0]["snd_wnd"].as_u64().unwrap())
            .collect()
    };
    let free = wnd(&v);
    assert!(free.iter().all(|&w| w > 32 << 10), "{free:?}");

    // `-O 1`: the omitted second counts on neither side, its bytes nor its
    // time. The two ends stop omitting apart, each as late as its timer is
    // handled, and what moves meanwhile counts on one side only: as much as
    // a busy machine lets move. What holds then: xtcp counted less than it
    // received in all (its intervals, the omitted one too, each to three
    // digits), the client sent no more than that and its send buffer, and
    // (against a count off by a factor) xtcp counted at least half of it.
    let (v, wall) = iperf3_timed(&net, &["-t", "2", "-O", "1"]);
    let (line, intervals) = server.outcome_and_intervals();
    assert!(line.contains(": ok;"), "{line}");
    assert!(
        intervals
            .iter()
            .any(|l| l.trim_end().ends_with("(omitted)")),
        "{intervals:?}"
    );
    let all: f64 = intervals.iter().map(|l| line_bytes(l)).sum();
    let theirs = &v["end"]["sum_sent"];
    let (mine, other) = (count(&line, "received"), theirs["bytes"].as_u64().unwrap());
    assert!(
        (mine as f64) < all && other as f64 <= all * 1.005 + wmem_max as f64 && mine >= other / 2,
        "the client sent {other}, xtcp's intervals show {all}: {line}"
    );
    // The clocks: each end counts from its own omit timer, as late as it
    // is handled, so the counted seconds need not nest. Whole clocks do:
    // xtcp's (its intervals, the omitted one too, each shown to the
    // hundredth) holds the client's, which is its counted seconds and at
    // least the omitted second (its timer never fires early), and lies
    // within the client's run. xtcp's counted seconds are the whole less
    // at least the omitted second.
    let (secs, bps) = seconds_and_rate(&line, "received");
    let whole: f64 = intervals.iter().map(|l| line_span(l)).sum();
    let shown = 0.005 * intervals.len() as f64;
    let client = num(theirs, "seconds");
    assert!(
        client + 1.0 - STAMPS - shown <= whole
            && whole <= wall + shown
            && secs <= whole - 1.0 + shown,
        "-O 1: xtcp counted {secs} s of {whole} s, the client {client} s; the run took \
         {wall} s: {intervals:?}"
    );
    rate_is_bytes_over_seconds("-O 1", bps, mine as f64, secs, 0.006);

    // `-w 16K`: from the first second on, the kernel sender sees at most
    // that window (plus one window-scale unit of rounding).
    let v = iperf3_json(&net, &["-t", "3", "-w", "16K"]);
    let line = server.outcome();
    assert!(
        line.contains(": ok;") && line.contains("window 16384"),
        "{line}"
    );
    let small = wnd(&v);
    assert!(
        !small.is_empty() && small.iter().all(|&w| w <= (16 << 10) + 128),
        "{small:?}"
    );
    assert!(v["end"]["sum_received"]["bytes"].as_u64().unwrap() > 0);

    // Reverse: xtcp sends.
    let (v, wall) = iperf3_timed(&net, &["-t", "2", "-R"]);
    let (line, intervals) = server.outcome_and_intervals();
    // What was unacknowledged when the test ended is in the last interval:
    // none is shorter than a tenth of the period (no "2.00-2.00 sec").
    assert!(intervals.len() >= 2, "{intervals:?}");
    for l in &intervals {
        let len = line_span(l);
        assert!(len >= 0.1, "{l} in {intervals:?}");
    }
    assert!(line.contains(": ok;") && line.contains("reverse"), "{line}");
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    assert!(sent > 0);
    assert_eq!(sent, count(&line, "sent"), "{line}");
    line_agrees_with_the_client(&line, "sent", &v["end"]["sum_received"], rmem_max, wall);

    // A byte count: xtcp received every byte iperf3 sent — at least 2 GiB
    // (iperf3 3.12 may write a block beyond `-n`, see esnet/iperf#1768).
    let v = iperf3_json(&net, &["-n", "2G"]);
    let line = server.outcome();
    assert!(line.contains(": ok;"), "{line}");
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    assert!(sent >= 2 << 30, "{sent}");
    assert_eq!(v["end"]["sum_received"]["bytes"].as_u64(), Some(sent));
    assert_eq!(count(&line, "received"), sent);

    // A byte count in reverse: xtcp sends exactly that many, and (as
    // iperf3's server) random bytes, not zeros, that repeat with a period
    // within iperf3's 128 KiB block (the client's `-F` file shows them).
    let dir = TempDir::new("serve-reverse");
    let got = dir.path("got.bin");
    let v = iperf3_json(&net, &["-n", "128M", "-R", "-F", &got]);
    let line = server.outcome();
    assert!(line.contains(": ok;"), "{line}");
    assert_eq!(count(&line, "sent"), 128 << 20, "{line}");
    assert_eq!(v["end"]["sum_received"]["bytes"].as_u64(), Some(128 << 20));
    let data = std::fs::read(&got).unwrap();
    assert_eq!(data.len(), 128 << 20, "the client's -F file");
    let block = repeated_block(&data, 128 << 10, "-R -F");
    let mut seen = [false; 256];
    block.iter().for_each(|&b| seen[usize::from(b)] = true);
    assert!(
        seen.iter().all(|&s| s),
        "every byte value: random, not zeros"
    );
}

/// A JSON number.
fn num(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// What serve's `-J` document for a test says it received.
fn received(test: &serde_json::Value) -> u64 {
    test["end"]["sum_received"]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no end.sum_received.bytes: {test}"))
}

/// xtcp's test line for what it `received` or `sent` against the stock
/// client's own count of the other end (`theirs`: what it sent, or what it
/// read) and its clock (`wall`: the client's whole run, see
/// [`server_clock_holds`]). The counts differ by what a socket buffer of
/// the client (`buffer` bytes) held when the test ended: what it had not
/// sent yet when xtcp, as iperf3's server, stopped reading at TEST_END, or
/// what it had not read of what its TCP acknowledged.
fn line_agrees_with_the_client(
    line: &str,
    word: &str,
    theirs: &serde_json::Value,
    buffer: u64,
    wall: f64,
) {
    let mine = count(line, word);
    let other = theirs["bytes"].as_u64().unwrap();
    let (more, less) = if word == "received" {
        (other, mine)
    } else {
        (mine, other)
    };
    assert!(
        less <= more && more - less <= buffer,
        "the client counted {other}: {line}"
    );
    let (secs, bps) = seconds_and_rate(line, word);
    let what = format!("xtcp {word}, against the client");
    server_clock_holds(&what, secs, num(theirs, "seconds"), wall);
    // Printed to the millisecond, and to three digits.
    rate_is_bytes_over_seconds(&what, bps, mine as f64, secs, 0.006);
}

/// The seconds of an interval line (`[  1]   1.00-2.00   sec …`), to the
/// hundredth it shows.
fn line_span(l: &str) -> f64 {
    let w: Vec<&str> = l.split_whitespace().collect();
    let at = w.iter().position(|x| *x == "sec").unwrap();
    let (a, b) = w[at - 1].split_once('-').unwrap();
    b.parse::<f64>().unwrap() - a.parse::<f64>().unwrap()
}

/// The bytes of an interval line (`[  1]   0.00-1.00   sec   562 MBytes
/// …`), to the three digits it shows.
fn line_bytes(l: &str) -> f64 {
    let w: Vec<&str> = l.split_whitespace().collect();
    let at = w.iter().position(|x| *x == "sec").unwrap();
    let n: f64 = w[at + 1].parse().unwrap();
    n * match w[at + 2] {
        "GBytes" => f64::from(1u32 << 30),
        "MBytes" => f64::from(1u32 << 20),
        "KBytes" => 1024.0,
        "Bytes" => 1.0,
        u => panic!("unit {u} in {l}"),
    }
}

/// The seconds and bits/s of a test report line (`…, 2.005 s, received N
/// bytes (7.22 Gbit/s), sent …`) for `word` (`received` or `sent`).
fn seconds_and_rate(line: &str, word: &str) -> (f64, f64) {
    let secs = line
        .split(", ")
        .find_map(|part| part.strip_suffix(" s")?.parse().ok())
        .unwrap_or_else(|| panic!("no seconds in {line}"));
    let at = line.find(&format!(", {word} ")).unwrap();
    let rest = &line[at..];
    let bits = common::quantity(rest, "(");
    (secs, bits)
}

#[test]
fn stock_iperf3_four_streams_over_two_queues() {
    need_iperf3();
    let net = testnet(2);
    let server = Server::start(&net, 2);
    let v = iperf3_json(&net, &["-t", "2", "-P", "4"]);
    let line = server.outcome();
    assert!(
        line.contains(": ok;") && line.contains("4 streams"),
        "{line}"
    );
    assert_eq!(
        v["end"]["sum_received"]["bytes"].as_u64().unwrap(),
        count(&line, "received")
    );
    client_wrote_what_xtcp_received(&net, count(&line, "received"), &v);
    let streams = v["end"]["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 4);
    for s in streams {
        assert!(s["receiver"]["bytes"].as_u64().unwrap() > 0, "{s}");
    }
}

/// One server, both families: given no `-B`, serve listens on the
/// interface's IPv4 and IPv6 addresses, says so, and serves stock clients
/// over each (forward, four streams over two queues, reverse) with counts
/// that agree with theirs. Each family's connections offer the MSS of its
/// header: with B's MTU raised to 9000, the kernel client's MSS (iperf3's
/// `tcp_mss_default`, the kernel's TCP_MAXSEG) is what xtcp offered, less
/// the timestamps' 12 bytes: 1,448 over IPv4, 20 less over IPv6.
#[test]
fn one_server_serves_ipv4_and_ipv6_clients() {
    need_iperf3();
    let net = testnet(2);
    let out = net
        .b
        .ns
        .command("ip")
        .args(["link", "set", &net.b.iface, "mtu", "9000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = Server::start(&net, 2);
    let (ip4, ip6) = (net.a.ip4.to_string(), net.a.ip6.to_string());
    for (addr, extra, word, mss) in [
        (&ip4, &["-t", "1"][..], "received", 1448),
        (&ip6, &["-t", "1", "-P", "4"][..], "received", 1428),
        (&ip6, &["-t", "1", "-R"][..], "sent", 1428),
    ] {
        let v = iperf3_json_to(&net, &[], addr, extra);
        let line = server.outcome();
        assert!(line.contains(": ok;"), "{addr} {extra:?}: {line}");
        let theirs = if word == "received" {
            &v["end"]["sum_received"]
        } else {
            &v["end"]["sum_sent"]
        };
        let n = theirs["bytes"].as_u64().unwrap();
        assert!(n > 0, "{addr} {extra:?}: {v}");
        assert_eq!(n, count(&line, word), "{addr} {extra:?}: {line}");
        assert_eq!(
            v["start"]["tcp_mss_default"].as_u64(),
            Some(mss),
            "{addr} {extra:?}: {}",
            v["start"]
        );
    }
    let (status, err, _) = server.stop();
    assert!(status.success(), "{err}");
    let banner = format!(
        "listening on {ip4}:5201 and [{ip6}]:5201 ({}, copy mode)",
        net.a.iface
    );
    assert!(err.contains(&banner), "{banner:?} in {err}");
}

/// `-4` and `-6` serve one family of the interface's addresses, as `iperf3
/// -s -4` does: the other family's clients find no listener (A's kernel
/// answers them), and -B of the other family, or an interface without the
/// family, is refused with what to do.
#[test]
fn minus_4_and_minus_6_serve_one_family() {
    need_iperf3();
    let net = testnet(1);
    let (ip4, ip6): (IpAddr, IpAddr) = (net.a.ip4.into(), net.a.ip6.into());
    for (flag, served, other) in [("-4", ip4, ip6), ("-6", ip6, ip4)] {
        let server = Server::start_with(&net, 1, &[flag]);
        let v = iperf3_json_to(&net, &[], &served.to_string(), &["-t", "1"]);
        let line = server.outcome();
        assert!(line.contains(": ok;"), "{flag}: {line}");
        let n = v["end"]["sum_received"]["bytes"].as_u64().unwrap();
        assert!(n > 0, "{flag}: {v}");
        assert_eq!(n, count(&line, "received"), "{flag}: {line}");
        let out = net
            .b
            .ns
            .command("timeout")
            .args(["60", "iperf3", "-c", &other.to_string(), "-t", "1"])
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !out.status.success() && said.contains("Connection refused"),
            "{flag}: a client of {other}: {said}"
        );
        let (status, err, _) = server.stop();
        assert!(status.success(), "{err}");
        let banner = format!(
            "listening on {} ({}, copy mode)",
            SocketAddr::new(served, 5201),
            net.a.iface
        );
        assert!(err.contains(&banner), "{flag}: {banner:?} in {err}");
    }
    let refused = |args: &[&str]| {
        let out = net
            .a
            .ns
            .command("timeout")
            .args(["60", XTCP, "serve", "--iface", &net.a.iface])
            .args(args)
            .args(ENGINE)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(&["-4", "-B", &ip6.to_string()]);
    assert!(
        err.contains(&format!("-4: -B {ip6} is an IPv6 address")) && err.contains("drop -4"),
        "{err}"
    );
    let err = refused(&["-4", "-6"]);
    assert!(err.contains("cannot be used with"), "{err}");
    net.a
        .ns
        .ip(&["-4", "addr", "flush", "dev", &net.a.iface])
        .unwrap();
    let err = refused(&["-4"]);
    assert!(
        err.contains(&format!(
            "{} has no IPv4 address to listen on (-4)",
            net.a.iface
        )),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");
}

/// `-B ::` and `-B 0.0.0.0` are every address, as for a socket bound to
/// them: `::` serves both families (as iperf3's dual-stack socket),
/// `0.0.0.0` the IPv4 ones. (With `--iface`, both served nothing: every
/// client was refused.)
#[test]
fn unspecified_bind_addresses_serve_every_address() {
    need_iperf3();
    let net = testnet(1);
    let (ip4, ip6) = (net.a.ip4.to_string(), net.a.ip6.to_string());
    for (b, clients) in [("::", vec![&ip4, &ip6]), ("0.0.0.0", vec![&ip4])] {
        let server = Server::start_with(&net, 1, &["-B", b]);
        for addr in clients {
            let v = iperf3_json_to(&net, &[], addr, &["-t", "1"]);
            let line = server.outcome();
            assert!(line.contains(": ok;"), "-B {b}, a client of {addr}: {line}");
            let n = v["end"]["sum_received"]["bytes"].as_u64().unwrap();
            assert!(n > 0, "-B {b}: {v}");
            assert_eq!(n, count(&line, "received"), "-B {b}: {line}");
        }
        let (status, err, _) = server.stop();
        assert!(status.success(), "{err}");
    }
}

/// An address still tentative (IPv6 duplicate address detection not
/// finished, or failed) cannot be served: serve without -B names it on
/// standard error and serves the others. Made deterministic by a failed
/// detection: B holds the address first.
#[test]
fn a_tentative_address_is_named_and_not_served() {
    let net = testnet(1);
    let dup = "2001:2::77";
    net.b
        .ns
        .ip(&[
            "addr",
            "add",
            &format!("{dup}/64"),
            "dev",
            &net.b.iface,
            "nodad",
        ])
        .unwrap();
    net.a
        .ns
        .ip(&["addr", "add", &format!("{dup}/64"), "dev", &net.a.iface])
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = net
            .a
            .ns
            .ip(&["-6", "addr", "show", "dev", &net.a.iface])
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout).into_owned();
        if shown.contains("dadfailed") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "A's {dup} did not fail detection: {shown}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let server = Server::start(&net, 1);
    let (status, err, _) = server.stop();
    assert!(status.success(), "{err}");
    assert!(
        err.contains(&format!("{dup} on {} is tentative", net.a.iface)),
        "{err}"
    );
    let banner = format!(
        "listening on {}:5201 and [{}]:5201 ({}, copy mode)",
        net.a.ip4, net.a.ip6, net.a.iface
    );
    assert!(err.contains(&banner), "{banner:?} in {err}");
    // With -6 and the test network's IPv6 address gone, nothing is left to
    // serve, and the error says which address is tentative.
    let ip6 = format!("{}/64", net.a.ip6);
    net.a
        .ns
        .ip(&["addr", "del", &ip6, "dev", &net.a.iface])
        .unwrap();
    let out = net
        .a
        .ns
        .command("timeout")
        .args(["60", XTCP, "serve", "--iface", &net.a.iface, "-6"])
        .args(ENGINE)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("has no IPv6 address to listen on (-6)")
            && err.contains(&format!("({dup} still tentative)")),
        "{err}"
    );
}

#[test]
fn garbage_clients_do_not_stop_the_server() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start(&net, 1);
    let dst = SocketAddr::new(net.a.ip4.into(), 5201);
    // Segments whose checksum is wrong: dropped and counted (the stop
    // summary says how many, by reason).
    bad_checksums(&net, 5201, 7);
    {
        let _g = net.b.ns.enter().unwrap();
        // A bad cookie: no iperf3 client, no test (refused at once).
        let mut s = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
        s.write_all(&[0xff; 64]).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut b = Vec::new();
        let _ = s.read_to_end(&mut b);
    }
    let line = server.outcome();
    assert!(line.contains("refused (no_cookie)"), "{line}");
    {
        let _g = net.b.ns.enter().unwrap();
        // A good cookie, then garbage instead of the parameters.
        let mut s = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
        let mut cookie = [b'a'; 37];
        cookie[36] = 0;
        s.write_all(&cookie).unwrap();
        s.write_all(&[0, 0, 0, 9]).unwrap();
        s.write_all(b"not json!").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut b = Vec::new();
        let _ = s.read_to_end(&mut b);
    }
    let line = server.outcome();
    assert!(line.contains("refused (params): invalid JSON"), "{line}");
    // A client killed in the middle of its test (its kernel closes the
    // control and data connections): that test fails...
    let mut victim = net
        .b
        .ns
        .command("iperf3")
        .args(["-c", &net.a.ip4.to_string(), "-t", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once it is running: its first interval line is out.
    loop {
        let l = server.line();
        assert!(!l.starts_with("xtcp serve: test"), "{l}");
        if l.starts_with("[  1]") && l.contains(" sec ") {
            break;
        }
    }
    // `ip netns exec` execs iperf3: this PID is the client's.
    victim.kill().unwrap();
    victim.wait().unwrap();
    let line = server.outcome();
    assert!(line.contains("failed"), "{line}");
    assert!(count(&line, "received") > 0, "it was running: {line}");
    // The next stock client is served.
    let v = iperf3_json(&net, &["-t", "1"]);
    let line = server.outcome();
    assert!(line.contains(": ok;"), "{line}");
    assert_eq!(
        v["end"]["sum_received"]["bytes"].as_u64().unwrap(),
        count(&line, "received")
    );
    client_wrote_what_xtcp_received(&net, count(&line, "received"), &v);
    // The queue's line in the stop summary (it had none: its drops were
    // only in --metrics and -J).
    let (status, err, _) = server.stop();
    assert!(status.success(), "{status}: {err}");
    let q = line_of(&err, "xtcp serve: queue 0: rx ");
    assert!(q.contains(", dropped 7 (checksum 7, malformed 0), "), "{q}");
    assert!(q.contains(" refused 0 (--max-conns), "), "{q}");
}

/// `serve -J`: a JSON document per test whose byte counts are the stock
/// client's own (`-n`: every byte arrives), whose intervals add up to them,
/// and CPU split into user and system time; the client's `remote_*` CPU
/// figures are what xtcp sent it: system time (AF_XDP's sendto kicks, the
/// peer's receive path on veth) is not zero, and total = user + system.
/// Each test's CPU is within what the kernel accounted to the process
/// meanwhile, and the closing line's count of connections and CPU are
/// those of the tests and of the process's whole life.
#[test]
fn serve_json_counts_and_cpu_split_agree_with_the_stock_client() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["--json"]);
    let pid = server.child.0.id();
    let tests = [
        (&["-n", "1G"][..], "sum_received", "sum_sent"),
        (&["-n", "512M", "-R"][..], "sum_sent", "sum_received"),
    ];
    for (extra, key, theirs) in tests {
        let before = proc_cpu(pid);
        let (v, wall) = iperf3_timed(&net, extra);
        let mine = server.json();
        // The test's CPU (its percentages of its own seconds, which lie
        // inside the time it measured them over) against the kernel's
        // account of the process from before the client started to after
        // the document was printed.
        let after = proc_cpu(pid);
        let secs = mine["end"][key]["seconds"].as_f64().unwrap();
        let pct = |k: &str| mine["end"]["cpu_utilization_percent"][k].as_f64().unwrap();
        for (k, kernel) in [
            ("host_user", after.0 - before.0),
            ("host_system", after.1 - before.1),
            ("host_total", after.0 + after.1 - before.0 - before.1),
        ] {
            let cpu = pct(k) / 100.0 * secs;
            assert!(
                cpu <= kernel + CPU_SLACK,
                "{extra:?}: {k} {} % of {secs} s = {cpu} s, the kernel's {kernel} s: {mine}",
                pct(k)
            );
        }
        assert!(mine.get("error").is_none(), "{mine}");
        let got = mine["end"][key]["bytes"].as_u64().unwrap();
        assert_eq!(
            Some(got),
            v["end"][theirs]["bytes"].as_u64(),
            "{extra:?}: {mine}"
        );
        // Its seconds against the client's own clock for the same bytes,
        // and its rate, those bytes over those seconds.
        let m = &mine["end"][key];
        let what = format!("{extra:?}");
        server_clock_holds(
            &what,
            num(m, "seconds"),
            num(&v["end"][theirs], "seconds"),
            wall,
        );
        rate_is_bytes_over_seconds(
            &what,
            num(m, "bits_per_second"),
            got as f64,
            num(m, "seconds"),
            1e-6,
        );
        let ivs = mine["intervals"].as_array().unwrap();
        let sum: u64 = ivs
            .iter()
            .map(|iv| iv["sum"]["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, got, "{extra:?}: intervals {mine}");
        // None shorter than a tenth of a second, or than the whole test
        // where that is shorter (a fast machine moves 128M in less).
        let whole = mine["end"][key]["seconds"].as_f64().unwrap();
        for iv in ivs {
            let secs = iv["sum"]["seconds"].as_f64().unwrap();
            assert!(secs >= whole.min(0.1) - 1e-6, "{iv}");
        }
        // xtcp's own figures, as it prints them and as the stock client got
        // them (not the stock client's own: the kernel splits a process's
        // CPU time into user and system by sampling, and a short client can
        // come out with none of either).
        let host = &mine["end"]["cpu_utilization_percent"];
        let remote = &v["end"]["cpu_utilization_percent"];
        let f =
            |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap_or_else(|| panic!("{k} in {x}"));
        for k in ["total", "user", "system"] {
            let (a, b) = (
                f(host, &format!("host_{k}")),
                f(remote, &format!("remote_{k}")),
            );
            assert!(
                (a - b).abs() < 1e-6 * a.max(1.0),
                "{extra:?}: {host} vs {remote}"
            );
        }
        let (t, u, sy) = (
            f(host, "host_total"),
            f(host, "host_user"),
            f(host, "host_system"),
        );
        assert!(sy > 0.0 && u > 0.0, "{extra:?}: {host}");
        assert!(
            (t - (u + sy)).abs() < 1e-6 * t.max(1.0),
            "{extra:?}: {host}"
        );
    }
    // "stopped; N connections, CPU X s (user U s, system S s)": each test
    // was a control connection and one stream; the CPU is the process's,
    // as the kernel accounted it to its whole life.
    let (status, err, (user, system)) = server.stop();
    assert!(status.success(), "{status}: {err}");
    let line = line_of(&err, "xtcp serve: stopped; ");
    assert_eq!(count(line, "stopped;"), 2 * tests.len() as u64, "{line}");
    let (x, u, sy) = (
        number(line, ", CPU "),
        number(line, "(user "),
        number(line, ", system "),
    );
    eprintln!("{line}; the kernel's: user {user} s, system {system} s");
    assert!(
        u <= user + CPU_SLACK && sy <= system + CPU_SLACK && u > 0.0 && sy > 0.0,
        "the kernel's user {user} s, system {system} s: {line}"
    );
    assert!((x - u - sy).abs() <= 0.015, "{line}");
}

/// Values that cannot work are refused in one line naming the value and the
/// range, and the banner comes only once the server is set up.
#[test]
fn bad_port_and_interface_are_refused_before_any_banner() {
    // Everything runs in the test network's namespace: even a run that
    // wrongly started would touch only the interface made for it, and
    // `timeout` ends it (and fails the test) instead of waiting for it.
    let net = testnet(1);
    let run = |args: &[&str]| {
        let out = net
            .a
            .ns
            .command("timeout")
            .args(["60", XTCP])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let iface = net.a.iface.as_str();
    let peer = net.b.ip4.to_string();
    for cmd in [
        &["serve", "--iface", iface, "-p", "0"][..],
        &["client", "--iface", iface, "-c", &peer, "-p", "0"][..],
    ] {
        let (ok, _, err) = run(cmd);
        assert!(
            !ok && err.contains("'0'") && err.contains("1..=65535"),
            "{cmd:?}: {err}"
        );
    }
    let (ok, out, err) = run(&["serve", "--iface", "nosuch0"]);
    assert!(!ok && err.contains("nosuch0"), "{err}");
    assert!(!err.contains("listening") && out.is_empty(), "{out}{err}");
    let (ok, out, err) = run(&["client", "--iface", "nosuch0", "-c", &peer]);
    assert!(!ok && err.contains("nosuch0"), "{err}");
    assert!(!out.contains("Connecting"), "{out}");

    // No address on the interface (of either family): serve's own option
    // is -B.
    net.a.ns.ip(&["addr", "flush", "dev", iface]).unwrap();
    let mut args = vec!["serve", "--iface", iface];
    args.extend(ENGINE);
    let (ok, _, err) = run(&args);
    assert!(!ok, "{err}");
    assert!(
        err.contains("no address to listen on")
            && err.contains("-B ADDR")
            && !err.contains("--listen"),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");
}

/// A thread that keeps a core busy while it lives.
struct Hog(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Hog {
    fn start() -> Hog {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let h = std::thread::spawn(move || {
            let mut x = 0u64;
            while !s.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        });
        Hog(stop, Some(h))
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(h) = self.1.take() {
            let _ = h.join();
        }
    }
}

/// serve's closing document: packets were steered to xtcp, and at most
/// 0.1 % of them dropped at the redirect into its sockets, and as many in
/// front of XDP (veth's queue, counted at its peer), where the driver
/// reports it.
fn assert_few_dropped_at_redirect(fin: &serde_json::Value) {
    let xdp = &fin["xdp"];
    let steered = xdp["steered"].as_u64().unwrap();
    let dropped = xdp["dropped_at_redirect"].as_u64().unwrap();
    assert!(steered > 0, "{fin}");
    assert!(
        dropped * 1000 <= steered,
        "dropped {dropped} of {steered} at the redirect: {xdp}"
    );
    if let Some(before) = xdp["dropped_before_xdp"].as_u64() {
        assert!(
            before * 1000 <= steered,
            "dropped {before} in front of XDP, {steered} steered: {xdp}"
        );
    }
}

/// Side B's kernel TCP so far (`nstat`): segments retransmitted
/// (TcpRetransSegs), and of those the ones a loss made, found by SACKs or
/// duplicate ACKs (TcpExtTCPFastRetrans), and the tail loss probes and
/// RTO expiries (TcpExtTCPLossProbes, TcpExtTCPTimeouts), which a late ACK
/// makes too.
#[derive(Debug, Clone, Copy)]
struct Retransmitted {
    segments: u64,
    fast: u64,
    probes: u64,
    timeouts: u64,
}

impl std::ops::Sub for Retransmitted {
    type Output = Retransmitted;
    fn sub(self, o: Retransmitted) -> Retransmitted {
        Retransmitted {
            segments: self.segments - o.segments,
            fast: self.fast - o.fast,
            probes: self.probes - o.probes,
            timeouts: self.timeouts - o.timeouts,
        }
    }
}

fn retransmitted(net: &TestNet) -> Retransmitted {
    let out = net.b.ns.command("nstat").args(["-asz"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |name: &str| {
        text.lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some(name)).then(|| w.next()?.parse().ok())?
            })
            .unwrap_or_else(|| panic!("{name} in nstat: {text}"))
    };
    Retransmitted {
        segments: get("TcpRetransSegs"),
        fast: get("TcpExtTCPFastRetrans"),
        probes: get("TcpExtTCPLossProbes"),
        timeouts: get("TcpExtTCPTimeouts"),
    }
}

/// 32 streams into one queue, with a CPU hog on one of the two cores: xtcp
/// drops at most 0.1 % of what was steered to it at the redirect and in
/// front of XDP (its receive windows together fit the queue), and the
/// kernel senders retransmit on a loss at most twice what they do into
/// the kernel's own TCP on the same network (hog and all), plus a few for
/// the start. What timers make is left out of that count and shown: a
/// tail loss probe repeats a segment when an ACK is 2 × RTT late, an RTO
/// a flight when it is later still, and a user-space receiver that the hog
/// (or a busy host) takes the core from is late where the kernel's
/// receiver, in softirq, is not; that costs segments, not a loss.
#[test]
fn thirty_two_streams_into_one_queue_lose_nothing_at_the_redirect() {
    need_iperf3();
    let net = testnet(1);
    let _hog = Hog::start();
    // The kernel's TCP on side A, same network, same load.
    let kernel = Reap(
        net.a
            .ns
            .command("iperf3")
            .args(["-s", "-1", "-p", "5202"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&net.a.ns, 5202, Duration::from_secs(30), None);
    let r0 = retransmitted(&net);
    let k = iperf3_json(&net, &["-p", "5202", "-t", "3", "-P", "32"]);
    drop(kernel);
    let r1 = retransmitted(&net);
    let server = Server::start_with(&net, 1, &["-1", "-J"]);
    let x = iperf3_json(&net, &["-t", "3", "-P", "32"]);
    let r2 = retransmitted(&net);
    let test = server.json();
    let fin = test["xtcp_serve"].clone();
    // One document with -1, as iperf3 -s -1 -J writes: the run's
    // counters in it, nothing after it.
    assert!(fin["listener"].is_object(), "{test}");
    assert_eq!(server.rest(), Vec::<String>::new());
    assert_eq!(
        test["end"]["sum_received"]["bytes"], x["end"]["sum_received"]["bytes"],
        "xtcp's count is the client's"
    );
    client_wrote_what_xtcp_received(&net, received(&test), &x);
    assert_few_dropped_at_redirect(&fin);
    let (rk, rx) = (r1 - r0, r2 - r1);
    eprintln!("B's retransmissions into the kernel {rk:?}, into xtcp {rx:?}");
    assert!(
        rx.fast <= 2 * rk.fast + 64,
        "the kernel senders retransmitted on a loss {} segments into xtcp, {} into the kernel \
         (into xtcp {rx:?}, into the kernel {rk:?}); iperf3 says {} and {}",
        rx.fast,
        rk.fast,
        x["end"]["sum_sent"]["retransmits"],
        k["end"]["sum_sent"]["retransmits"]
    );
}

/// `serve -1 -J` writes one document whatever came before its test, as
/// `iperf3 -s -1 -J` does: a connection that sent no cookie (a port probe)
/// does not use up the test, and its refusal is in the test's document
/// (`xtcp_serve.refused_tests`), not a document of its own.
#[test]
fn one_off_json_is_one_document_with_the_refusals_before_the_test_in_it() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["-1", "-J"]);
    {
        let _g = net.b.ns.enter().unwrap();
        let dst = SocketAddr::new(net.a.ip4.into(), 5201);
        let probe = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
        drop(probe);
    }
    let v = iperf3_json(&net, &["-t", "1"]);
    let text = server.rest().join("\n");
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not one document ({e}): {text}"));
    assert_eq!(
        doc["end"]["sum_received"]["bytes"], v["end"]["sum_received"]["bytes"],
        "{doc}"
    );
    let refused = doc["xtcp_serve"]["refused_tests"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{doc}");
    assert!(refused[0]["error"].as_str().is_some(), "{doc}");
    assert!(doc["xtcp_serve"]["xdp"].is_object(), "{doc}");
}

/// `serve -1` stopped (SIGINT) before a test came exits 1, as
/// `iperf3 -s -1` does (its status is the test's result, and there was
/// none), and `-J`'s one document says why.
#[test]
fn one_off_stopped_before_its_test_fails_and_says_so() {
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["-1", "-J"]);
    common::kill("-INT", server.child.0.id());
    let text = server.rest().join("\n");
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not one document ({e}): {text}"));
    assert_eq!(doc["error"], "-1: stopped before a test came", "{doc}");
    assert!(doc["xdp"].is_object(), "the run's counters: {doc}");
    let (status, err, _) = server.stop();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("xtcp: error: -1: stopped before a test came"),
        "{err}"
    );
}

/// `serve -J` and `--json-lines` that cannot start write their error as a
/// document (`iperf3 -s -J`'s keys) or a record (`result` "error") where
/// their records go, as `iperf3 -s -J` writes one when its listener cannot
/// start.
#[test]
fn serve_that_cannot_start_says_so_in_its_json() {
    let net = testnet(1);
    for json in ["-J", "--json-lines"] {
        let out = net
            .a
            .ns
            .command(XTCP)
            .args(["serve", "--iface", "nosuch0", json])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{json}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        let e = doc[if json == "-J" { "error" } else { "message" }]
            .as_str()
            .unwrap_or_default();
        assert!(e.contains("nosuch0"), "{json}: {doc}");
        assert!(err.contains(e), "the same error on standard error: {err}");
        if json == "-J" {
            for key in ["start", "end"] {
                assert!(doc[key].is_object(), "{doc}");
            }
            assert!(doc["intervals"].is_array(), "{doc}");
        } else {
            assert_eq!(doc["result"], "error", "{doc}");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).lines().count(),
                1,
                "one line"
            );
        }
    }
}

/// 32 streams over two queues: both queues' workers serve connections and
/// receive data, xtcp's count is the client's, and nothing arrived on a
/// queue without a socket, closes included.
#[test]
fn thirty_two_streams_spread_over_two_queues() {
    need_iperf3();
    let net = testnet(2);
    // The test network's kernel side transmits on queue q from CPU q
    // (XPS), and iperf3 3.12 sends every stream from its one thread: the
    // streams would spread over the queues only as far as the scheduler
    // happens to move that thread. Without XPS the kernel picks the queue
    // by each flow's hash, as a NIC's RSS does: 32 streams on one queue of
    // two then has odds of 2^-31.
    for q in 0..2 {
        let file = format!("/sys/class/net/{}/queues/tx-{q}/xps_cpus", net.b.iface);
        net.b
            .ns
            .exec(&["sh", "-c", &format!("echo 0 > {file}")])
            .unwrap();
    }
    let server = Server::start_with(&net, 2, &["-1", "-J"]);
    let v = iperf3_json(&net, &["-t", "2", "-P", "32"]);
    let test = server.json();
    let fin = test["xtcp_serve"].clone();
    assert_eq!(
        test["end"]["sum_received"]["bytes"],
        v["end"]["sum_received"]["bytes"]
    );
    client_wrote_what_xtcp_received(&net, received(&test), &v);
    let queues = fin["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2, "{fin}");
    let mut total = 0;
    for q in queues {
        // A connection lives on the queue its data arrives on: it is
        // established on the queue of its handshake and moves if its data
        // comes in on the other one.
        let n = |k: &str| q[k].as_u64().unwrap();
        let held = n("connections") + n("migrated_in") - n("migrated_out");
        assert!(held > 0, "every queue serves connections: {fin}");
        assert!(n("rx_segments") > 0, "{fin}");
        total += held;
    }
    assert_eq!(total, 33, "32 data connections and the control one: {fin}");
    // No worker left before the others: its socket goes with it, and the
    // last packets of connections that moved may still come in on its queue.
    assert_eq!(fin["xdp"]["no_socket"], 0, "{fin}");
}

/// 10,000 SYNs from as many ports during a `-P 8` test: the test completes
/// with xtcp's count equal to the client's, every SYN is accounted for
/// (taken, dropped by the full half-open table, or lost before the
/// listener), and the listener never holds more half-open connections
/// than its table has room for.
///
/// The flood must be sent whole while the test runs: the client's TEST_END
/// then comes behind every SYN on the one queue, so the listener has seen
/// them all before `-1` lets serve end. A test that ended before the flood
/// was out (a slow machine's) proves nothing, and is run again, twice as
/// long (bounded).
#[test]
fn a_syn_flood_during_a_test_is_counted_and_bounded() {
    need_iperf3();
    let net = testnet(1);
    // What B's kernel itself sent towards the listener: its connections'
    // SYNs, first and again.
    let syns_from_b = || tcp_mib(&net.b.ns, "ActiveOpens") + tcp_ext(&net.b.ns, "TCPSynRetrans");
    const SYNS: u32 = 10_000;
    let mut secs = 4;
    let (server, mut client, syns_before, dropped_before) = loop {
        let server = Server::start_with(&net, 1, &["-1", "-J"]);
        let syns_before = syns_from_b();
        let client = net
            .b
            .ns
            .command("iperf3")
            .args(["-c", &net.a.ip4.to_string(), "-J"])
            .args(["-t", &secs.to_string(), "-P", "8"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut client = Reap(client);
        // The test is under way: its eight data connections are established.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let est = wait_ss(
                &net.b.ns,
                &["-t", "state", "established", "dport = :5201"],
                "the test's connections",
                Duration::from_secs(60),
                Some(&mut client.0),
            );
            if est.lines().count() >= 9 {
                break;
            }
            assert!(Instant::now() < deadline, "{est}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let dropped_before = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped");
        syn_flood(&net, 5201, SYNS);
        if client.0.try_wait().unwrap().is_none() {
            break (server, client, syns_before, dropped_before);
        }
        eprintln!("the {secs}-s test ended before the flood was out: again, twice as long");
        assert!(
            secs < 64,
            "a {secs}-s test ended before 10,000 SYNs were sent"
        );
        let _ = server.stop();
        secs *= 2;
    };
    let out = {
        let start = Instant::now();
        while client.0.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(120), "iperf3 ends");
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut s = String::new();
        client
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s
    };
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v.get("error").is_none(), "{v}");
    let test = server.json();
    let fin = test["xtcp_serve"].clone();
    assert_eq!(
        test["end"]["sum_received"]["bytes"], v["end"]["sum_received"]["bytes"],
        "the test went on: xtcp's count is the client's"
    );
    client_wrote_what_xtcp_received(&net, received(&test), &v);
    let l = &fin["listener"];
    let seen = l["syns_accepted"].as_u64().unwrap() + l["syns_dropped"].as_u64().unwrap();
    let lost = fin["xdp"]["dropped_at_redirect"].as_u64().unwrap()
        + link_stat(&net.b.ns, &net.b.iface, "tx", "dropped")
        - dropped_before;
    // Seen or lost, at least the flood and the test's nine connections (the
    // losses at the redirect may be data segments too); seen, at most every
    // SYN that was sent (the flood's, and B's kernel's own, retransmitted
    // ones included).
    let sent = u64::from(SYNS) + syns_from_b() - syns_before;
    assert!(
        seen + lost >= u64::from(SYNS) + 9 && seen <= sent,
        "every SYN is accounted for: {seen} seen by the listener, {lost} packets lost before \
         it, {sent} SYNs sent: {fin}"
    );
    let peak = l["half_open_peak"].as_u64().unwrap();
    assert!(
        (1..=1024).contains(&peak),
        "half-open connections held at once: {peak} (the table has 1024): {fin}"
    );
}

/// A UDP test is refused as iperf3 refuses what it does not implement, and
/// with `-1` it is the one test: serve exits 1 saying why, and counts its
/// one connection as one.
#[test]
fn a_udp_test_is_refused_and_serve_1_says_why() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["-1"]);
    let out = common::stock_client(&net)
        .args(["-u", "-t", "1"])
        .output()
        .unwrap();
    let client_err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{client_err}");
    assert!(
        client_err.contains("not implemented"),
        "iperf3's IEUNIMP: {client_err}"
    );
    let (status, err, _) = server.stop();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "xtcp: error: -1: the test was refused (params): parameters refused (iperf3 error 13): \
             UDP tests are not supported (xtcp serves TCP tests)"
        ),
        "{err}"
    );
    assert!(
        err.contains("xtcp serve: stopped; 1 connection, CPU "),
        "{err}"
    );
    assert!(
        err.contains("listener: 1 SYN taken,") && err.contains("; 1 handshake completed, "),
        "{err}"
    );
}

/// A SYN with FIN set gets no SYN-ACK and opens nothing (Linux drops it in
/// LISTEN too); the listener counts each one it saw, and a test after them
/// runs as ever.
#[test]
fn syns_with_fin_get_no_answer_and_are_counted() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["-1", "-J"]);
    let dropped_before = link_stat(&net.b.ns, &net.b.iface, "tx", "dropped");
    const SYN_FINS: u32 = 64;
    assert_eq!(
        common::syn_fins_answered(&net, 5201, SYN_FINS),
        0,
        "SYN-ACKs for SYN+FIN segments"
    );
    let v = iperf3_json(&net, &["-n", "1M"]);
    assert!(v.get("error").is_none(), "{v}");
    let test = server.json();
    let fin = test["xtcp_serve"].clone();
    let l = &fin["listener"];
    let lost = fin["xdp"]["dropped_at_redirect"].as_u64().unwrap()
        + link_stat(&net.b.ns, &net.b.iface, "tx", "dropped")
        - dropped_before;
    let invalid = l["syns_invalid"].as_u64().unwrap();
    assert!(
        invalid <= u64::from(SYN_FINS) && invalid + lost >= u64::from(SYN_FINS),
        "{invalid} SYN+FINs counted, {lost} packets lost before the listener: {fin}"
    );
    // The proper SYN's half-open connection, the test's two.
    assert_eq!(l["syns_accepted"], 3, "{fin}");
}

/// serve interrupted in the middle of a test, as iperf3's server takes
/// it: the client is told (`SERVER_TERMINATE`: the stock client says "the
/// server has terminated" and prints its summary), and serve reports the
/// test with what it received until then, its last partial interval
/// included, the error its own interruption (it read "the client sent
/// IPERF_DONE while running" before, and the stock client "control socket
/// has closed unexpectedly"), and its CPU until then (it read 0 before):
/// not zero, and within what the kernel accounted to the process.
///
/// The client sends as fast as it can: serve closes the data connections
/// and takes what still comes (`--grace` long enough that no reset
/// follows first), so the client's writes go on until it reads the
/// server's word. (They were reset at once before, and the client then
/// failed on its next write about half the time, as it does against a
/// stock `iperf3 -s`, whose exit resets them.) Three rounds.
#[test]
fn an_interrupted_server_tells_the_client_and_reports_the_test() {
    need_iperf3();
    let net = testnet(1);
    for _ in 0..3 {
        interrupted_server_round(&net);
    }
}

fn interrupted_server_round(net: &TestNet) {
    use std::io::BufRead;
    let server = Server::start_with(net, 1, &["-J", "--grace", "60"]);
    let pid = server.child.0.id();
    let before = proc_cpu(pid);
    let mut client = Reap(
        net.b
            .ns
            .command("timeout")
            .args(["120", "iperf3", "-c", &net.a.ip4.to_string()])
            .args(["-t", "60", "--forceflush"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = std::io::BufReader::new(client.0.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    while seen.matches(" sec ").count() < 2 {
        let l = lines.next().expect("the client ended early").unwrap();
        seen.push_str(&l);
        seen.push('\n');
    }
    common::kill("-INT", server.child.0.id());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let err = common::drain(&mut client.0.stderr);
    let status = client.0.wait().unwrap();
    let rest = rest.join("\n");
    assert_eq!(status.code(), Some(1), "{seen}{rest}{err}");
    assert!(
        err.contains("iperf3: error - the server has terminated") && rest.contains("sender"),
        "{rest}{err}"
    );
    let doc = server.json();
    assert_eq!(
        doc["error"], "interrupt - the server has terminated",
        "{doc}"
    );
    let received = doc["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(received > 0, "{doc}");
    let intervals: u64 = doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["sum"]["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(intervals, received, "the last interval is there: {doc}");
    // The process has exited, not yet reaped: its account is final.
    let after = proc_cpu(pid);
    let kernel = after.0 + after.1 - before.0 - before.1;
    let secs = doc["end"]["sum_received"]["seconds"].as_f64().unwrap();
    let pct = doc["end"]["cpu_utilization_percent"]["host_total"]
        .as_f64()
        .unwrap();
    let cpu = pct / 100.0 * secs;
    assert!(
        cpu > 0.0 && cpu <= kernel + CPU_SLACK,
        "{pct} % of {secs} s, the kernel's {kernel} s: {doc}"
    );
}

/// A stock client that leaves after an error of its own (`-w` above what
/// the kernel lets it set: iperf3 says "socket buffer size not set
/// correctly" and sends `IPERF_DONE`) is reported as such, not as a
/// protocol error of the client's ("state IperfDone is not valid").
#[test]
fn a_client_that_fails_on_its_side_is_reported_as_such() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start(&net, 1);
    let max: u64 = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let w = format!("{}K", (max * 4).div_ceil(1024).max(1024));
    let out = common::stock_client(&net)
        .args(["-t", "1", "-w", &w])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("socket buffer size"), "{text}");
    let line = server.outcome();
    assert!(
        line.contains(
            "failed: the client ended the test while waiting for the data connections \
             (IPERF_DONE): an error on its side"
        ),
        "{line}"
    );
}

/// serve holds its port: a stock `iperf3 -s` started beside it, on the
/// same port (on every address, or on serve's), is refused ("Address
/// already in use"), instead of listening where XDP takes every packet
/// from it.
#[test]
fn a_kernel_server_cannot_take_serves_port() {
    need_iperf3();
    let net = testnet(1);
    let _server = Server::start(&net, 1);
    for bind in [None, Some(net.a.ip4.to_string())] {
        let mut c = net.a.ns.command("timeout");
        c.args(["30", "iperf3", "-s", "-1"]);
        if let Some(b) = &bind {
            c.args(["-B", b]);
        }
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "-B {bind:?}: {text}");
        assert!(text.contains("Address already in use"), "{text}");
    }
}

/// Every handshake ends on another queue than the one its SYN came in on,
/// and its data comes in on the SYN's: the listener that took the SYN
/// completes the handshake all the same and the tests complete byte-exact,
/// over IPv4 and IPv6. (A peer's queue for a flow can change: a kernel peer on veth picks its
/// TX queue by the CPU it sends from, or by a hash it re-rolls after a
/// timeout; a NIC's RSS may put the SYN elsewhere than the rest.) How: side
/// B sends on queue q from CPU q (the test network's XPS); its client runs
/// on CPU c, so its SYNs and data leave on queue c, while the worker of
/// queue c runs on the other core, where B's kernel then receives the
/// SYN-ACK and sends the handshake's last ACK, on the other queue. The
/// data B's kernel sends when an ACK of xtcp's comes in leaves from that
/// core too, on the other queue: the connections move from queue to queue
/// all the time, and what comes in for one while it moves is held for it
/// (`held`), not dropped.
#[test]
fn handshakes_that_end_on_another_queue_complete() {
    need_iperf3();
    let net = testnet(2);
    for addr in [IpAddr::from(net.a.ip4), IpAddr::from(net.a.ip6)] {
        let a = addr.to_string();
        let server = Server::start_with(&net, 2, &["-J", "--cores", "1,0", "-B", &a]);
        for cpu in ["0", "1"] {
            let v =
                common::iperf3_json_to(&net, &["taskset", "-c", cpu], &a, &["-t", "1", "-P", "4"]);
            let test = server.json();
            assert_eq!(
                test["end"]["sum_received"]["bytes"], v["end"]["sum_received"]["bytes"],
                "{a}, client on CPU {cpu}: {test}"
            );
            client_wrote_what_xtcp_received(&net, received(&test), &v);
        }
        common::kill("-INT", server.child.0.id());
        let fin = server.json();
        // The handshakes' last ACKs did come in on the other queue:
        // forwarded from there to the listener's worker.
        let sum = |k: &str| -> u64 {
            fin["queues"]
                .as_array()
                .unwrap()
                .iter()
                .map(|q| q[k].as_u64().unwrap())
                .sum()
        };
        assert!(sum("forwarded") >= 10, "{a}: 2 x 5 handshakes: {fin}");
        assert!(
            sum("held") > 0,
            "{a}: data for connections on their way: {fin}"
        );
        assert_eq!(fin["listener"]["rst_sent"], 0, "{a}: {fin}");
    }
}

/// An interface that goes away under a running `xtcp serve` (deleted, as
/// it is with its network namespace) ends the server with an error that
/// says so, instead of leaving it busy-polling a queue that no longer
/// exists.
#[test]
fn serve_ends_with_an_error_when_its_interface_goes_away() {
    let net = testnet(1);
    let mut args: Vec<String> = vec!["serve".into(), "--iface".into(), net.a.iface.clone()];
    args.extend(ENGINE.iter().map(|s| s.to_string()));
    let mut server = Watched::spawn(&net, &args, Stdio::null());
    server.wait_for("listening on");
    net.a.ns.ip(&["link", "del", &net.a.iface]).unwrap();
    let (status, err) = server.wait_exit("xtcp serve did not end once its interface went away");
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(&format!("the interface {} went away", net.a.iface)),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// A connection that receives little leaves the receive budget to the ones
/// that receive. With iperf3's control connection idle, the one stream's
/// window (`-w 1M`, more than the budget) is all of the budget but a light
/// window, where an even split gave it half; the window the kernel sender
/// sees never exceeds the budget, and nothing is dropped at the redirect.
/// Seen by the kernel sender: `snd_wnd` from its `TCP_INFO`, in the
/// client's `-J` intervals.
#[test]
fn one_stream_gets_the_receive_budget_its_idle_control_connection_does_not_use() {
    need_iperf3();
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["-1", "-J"]);
    let x = iperf3_json(&net, &["-t", "4", "-w", "1M"]);
    let test = server.json();
    let fin = test["xtcp_serve"].clone();
    assert_eq!(
        test["end"]["sum_received"]["bytes"], x["end"]["sum_received"]["bytes"],
        "xtcp's count is the client's"
    );
    client_wrote_what_xtcp_received(&net, received(&test), &x);
    let budget = fin["engine"]["rx_window_budget"].as_u64().unwrap();
    let wnd: Vec<u64> = x["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["streams"][0]["snd_wnd"].as_u64().unwrap())
        .collect();
    let most = *wnd.iter().max().unwrap();
    // The scaled window is a multiple of 2^14 bytes at most: no rounding
    // goes beyond that.
    assert!(
        most <= budget + (1 << 14),
        "windows {wnd:?}, budget {budget}"
    );
    assert!(
        most * 10 >= budget * 9,
        "windows {wnd:?}: less than 90 % of the budget {budget}"
    );
    assert_few_dropped_at_redirect(&fin);
}
