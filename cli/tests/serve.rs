//! `xtcp serve` against Debian's stock `iperf3 -c`: forward, reverse,
//! parallel streams over two queues, byte counts in `-J` equal to xtcp's,
//! tests back to back, `-w`, the server's interval lines, and garbage or
//! killed clients that must not stop the server.
//! Root needed (CI runs as root); each test builds its own namespaces.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod common;

use common::{ENGINE, XTCP, testnet};
use xtcp_engine::testnet::TestNet;

/// `xtcp serve` in side A's namespace; its stdout lines arrive on a channel.
struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(net: &TestNet, queues: u32) -> Server {
        let mut child = net
            .a
            .ns
            .command(XTCP)
            .args([
                "serve",
                "--iface",
                &net.a.iface,
                "--queues",
                &queues.to_string(),
            ])
            .args(ENGINE)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("xtcp serve: {l}");
            }
        });
        // Setup is quick; iperf3 retries nothing, so wait for it.
        std::thread::sleep(Duration::from_millis(1500));
        Server { child, lines: rx }
    }

    /// The next test report line.
    fn outcome(&self) -> String {
        self.outcome_and_intervals().0
    }

    /// The next test report line, and the interval lines printed before it.
    fn outcome_and_intervals(&self) -> (String, Vec<String>) {
        let mut intervals = Vec::new();
        loop {
            let l = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .expect("xtcp serve reports each test");
            if l.starts_with("xtcp serve: test") {
                return (l, intervals);
            }
            intervals.push(l);
        }
    }
}

fn have_iperf3() -> bool {
    Command::new("iperf3").arg("--version").output().is_ok()
}

/// Runs `iperf3 -c` from side B with `-J`; returns its JSON.
fn iperf3(net: &TestNet, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["-c".to_string(), net.a.ip4.to_string(), "-J".into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = net
        .b
        .ns
        .command("timeout")
        .arg("60")
        .arg("iperf3")
        .args(&args)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "iperf3 {args:?}: no JSON ({e}): {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(out.status.success(), "iperf3 {args:?} failed: {v}");
    assert!(v.get("error").is_none(), "iperf3 {args:?}: {v}");
    v
}

/// The number after `word ` in an outcome line.
fn count(line: &str, word: &str) -> u64 {
    let at = line
        .find(word)
        .unwrap_or_else(|| panic!("{word:?} in {line}"))
        + word.len();
    line[at..]
        .trim_start()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn stock_iperf3_forward_reverse_and_n_back_to_back_with_matching_counts() {
    if !have_iperf3() {
        panic!("iperf3 is not installed (scripts/deps.sh installs it)");
    }
    let net = testnet(1);
    let server = Server::start(&net, 1);

    // Forward: xtcp receives; iperf3's receiver total is xtcp's count.
    let v = iperf3(&net, &["-t", "2"]);
    let (line, intervals) = server.outcome_and_intervals();
    assert!(line.contains(": ok;") && line.contains("forward"), "{line}");
    let got = v["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(got > 0);
    assert_eq!(got, count(&line, "received"), "{line}");
    // The server's interval lines (one stream, id 1, every second) add up
    // to what it counted.
    assert!(intervals.len() >= 2, "{intervals:?}");
    assert!(intervals[0].starts_with("[  1]   0.00-1."), "{intervals:?}");
    let interval_bytes: f64 = intervals
        .iter()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|x| *x == "sec").unwrap();
            let n: f64 = w[at + 1].parse().unwrap();
            n * match w[at + 2] {
                "GBytes" => f64::from(1u32 << 30),
                "MBytes" => f64::from(1u32 << 20),
                u => panic!("unit {u} in {l}"),
            }
        })
        .sum();
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

    // `-w 16K`: from the first second on, the kernel sender sees at most
    // that window (plus one window-scale unit of rounding).
    let v = iperf3(&net, &["-t", "3", "-w", "16K"]);
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
    let v = iperf3(&net, &["-t", "2", "-R"]);
    let line = server.outcome();
    assert!(line.contains(": ok;") && line.contains("reverse"), "{line}");
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    assert!(sent > 0);
    assert_eq!(sent, count(&line, "sent"), "{line}");
    assert!(v["end"]["sum_received"]["bytes"].as_u64().unwrap() > 0);

    // A byte count: xtcp received every byte iperf3 sent — at least 2 GiB
    // (iperf3 3.12 may write a block beyond `-n`, see esnet/iperf#1768).
    let v = iperf3(&net, &["-n", "2G"]);
    let line = server.outcome();
    assert!(line.contains(": ok;"), "{line}");
    let sent = v["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    assert!(sent >= 2 << 30, "{sent}");
    assert_eq!(v["end"]["sum_received"]["bytes"].as_u64(), Some(sent));
    assert_eq!(count(&line, "received"), sent);

    // A byte count in reverse: xtcp sends exactly that many.
    let v = iperf3(&net, &["-n", "128M", "-R"]);
    let line = server.outcome();
    assert!(line.contains(": ok;"), "{line}");
    assert_eq!(count(&line, "sent"), 128 << 20, "{line}");
    assert_eq!(v["end"]["sum_received"]["bytes"].as_u64(), Some(128 << 20));
}

#[test]
fn stock_iperf3_four_streams_over_two_queues() {
    if !have_iperf3() {
        panic!("iperf3 is not installed (scripts/deps.sh installs it)");
    }
    let net = testnet(2);
    let server = Server::start(&net, 2);
    let v = iperf3(&net, &["-t", "2", "-P", "4"]);
    let line = server.outcome();
    assert!(
        line.contains(": ok;") && line.contains("4 streams"),
        "{line}"
    );
    assert_eq!(
        v["end"]["sum_received"]["bytes"].as_u64().unwrap(),
        count(&line, "received")
    );
    let streams = v["end"]["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 4);
    for s in streams {
        assert!(s["receiver"]["bytes"].as_u64().unwrap() > 0, "{s}");
    }
}

#[test]
fn garbage_clients_do_not_stop_the_server() {
    if !have_iperf3() {
        panic!("iperf3 is not installed (scripts/deps.sh installs it)");
    }
    let net = testnet(1);
    let server = Server::start(&net, 1);
    let dst = SocketAddr::new(net.a.ip4.into(), 5201);
    {
        let _g = net.b.ns.enter().unwrap();
        // A bad cookie: the test fails at once.
        let mut s = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
        s.write_all(&[0xff; 64]).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut b = Vec::new();
        let _ = s.read_to_end(&mut b);
    }
    let line = server.outcome();
    assert!(line.contains("failed"), "{line}");
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
    assert!(line.contains("failed"), "{line}");
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
    std::thread::sleep(Duration::from_secs(2));
    // `ip netns exec` execs iperf3: this PID is the client's.
    victim.kill().unwrap();
    victim.wait().unwrap();
    let line = server.outcome();
    assert!(line.contains("failed"), "{line}");
    assert!(count(&line, "received") > 0, "it was running: {line}");
    // The next stock client is served.
    let v = iperf3(&net, &["-t", "1"]);
    let line = server.outcome();
    assert!(line.contains(": ok;"), "{line}");
    assert_eq!(
        v["end"]["sum_received"]["bytes"].as_u64().unwrap(),
        count(&line, "received")
    );
}
