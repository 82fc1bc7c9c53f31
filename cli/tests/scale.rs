//! Many connections on one queue: 1,000 concurrent connections each way
//! between xtcp and the kernel's TCP, byte-exact, with the memory xtcp
//! used bounded; `--max-conns` refusing the next connection with a reset
//! while those held go on. Root needed (CI runs as root); each test builds
//! its own namespaces.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

use common::{ENGINE, Watched, acked_sender, testnet};
use socket2::{Domain, Socket, Type};
use xtcp_engine::testnet::TestNet;
use xtcp_engine::worker::bulk::{pattern_check, pattern_fill};

const SEED: u64 = 42;
const CONNS: usize = 1000;
/// Bytes each of the 1,000 connections moves.
const EACH: usize = 256 * 1024;
/// Waits of these tests: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);

fn args(net: &TestNet, first: &[&str]) -> Vec<String> {
    first
        .iter()
        .chain(["--iface", net.a.iface.as_str()].iter())
        .chain(ENGINE.iter())
        .map(|s| s.to_string())
        .collect()
}

/// `xtcp recv --keep-listening` on `port`, verifying the pattern, JSON
/// report, holding at most `max_conns` connections.
fn recv_args(net: &TestNet, port: u16, max_conns: usize) -> Vec<String> {
    let (port, seed, max) = (port.to_string(), SEED.to_string(), max_conns.to_string());
    args(
        net,
        &[
            "recv",
            "--listen",
            &port,
            "--verify",
            &seed,
            "--keep-listening",
            "--json",
            "--max-conns",
            &max,
        ],
    )
}

/// Reads a stream to its end, checking it against the pattern; returns the
/// byte count, or where it first differed.
fn read_pattern(s: &mut TcpStream) -> Result<usize, String> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = 0usize;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(at),
            Ok(n) => {
                if let Some(off) = pattern_check(SEED, at as u64, &buf[..n]) {
                    return Err(format!("differs at byte {off}"));
                }
                at += n;
            }
            Err(e) => return Err(format!("read after {at} bytes: {e}")),
        }
    }
}

/// The peak resident set of process `pid` so far (`VmHWM`), bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Reads all of a child's standard output on a thread of its own.
fn collect_stdout(x: &mut Watched) -> std::thread::JoinHandle<String> {
    let stdout = x.child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut s = String::new();
        std::io::BufReader::new(stdout)
            .read_to_string(&mut s)
            .unwrap();
        s
    })
}

/// What xtcp may use for `conns` connections: its UMEM (the tests'
/// `--frames`, of 4 KiB at most), a fixed part (code, rings, tables, the
/// runtime; measured at about 40 MiB with one connection) and per
/// connection its send-buffer bookkeeping and the receive-buffer pages it
/// touched (measured: about 75 KiB), under 128 KiB. Memory that grew with
/// the bytes moved (a buffer per byte, a leak per segment) would be far
/// beyond it: 256 MiB moved; and so would 4 MiB receive buffers cleared at
/// allocation (measured before the fix: 394 MiB).
fn memory_bound(conns: usize) -> u64 {
    common::engine_frames() * 4096 + (96 << 20) + conns as u64 * (128 << 10)
}

/// 1,000 connections from `xtcp send` into one kernel listener at once,
/// 256 KiB of the pattern each: every stream arrives whole and intact,
/// xtcp reports each, and its memory stays bounded.
#[test]
fn a_thousand_connections_from_xtcp_arrive_byte_exact() {
    let net = testnet(1);
    let port = 5301;
    let listen = SocketAddr::new(net.b.ip4.into(), port);
    let listener = {
        let _g = net.b.ns.enter().unwrap();
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_reuse_address(true).unwrap();
        s.bind(&listen.into()).unwrap();
        s.listen(4096).unwrap();
        std::net::TcpListener::from(s)
    };
    let (tx, rx) = mpsc::channel();
    let acceptor = std::thread::spawn(move || {
        for _ in 0..CONNS {
            let (mut s, _) = listener.accept().expect("accept");
            let tx = tx.clone();
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let _ = tx.send(read_pattern(&mut s));
                })
                .unwrap();
        }
    });
    let mut a = args(&net, &["send"]);
    a.extend(
        [
            "--connect",
            &listen.to_string(),
            "--pattern",
            &SEED.to_string(),
            "--bytes",
            &EACH.to_string(),
            "--connections",
            &CONNS.to_string(),
            "--json",
        ]
        .map(String::from),
    );
    let mut x = Watched::spawn(&net, &a, Stdio::piped());
    let reader = collect_stdout(&mut x);
    // The peak resident set, read until the process is gone.
    let pid = x.child.0.id();
    let deadline = Instant::now() + WAIT;
    let mut rss = 0;
    while x.child.0.try_wait().unwrap().is_none() {
        rss = rss.max(peak_rss(pid).unwrap_or(0));
        assert!(
            Instant::now() < deadline,
            "xtcp send with 1,000 connections"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, err) = x.wait_exit_within(WAIT, "xtcp send with 1,000 connections");
    let out = reader.join().unwrap();
    assert!(status.success(), "{err}");
    assert!(rss > 0, "the peak resident set was read");
    let mut got = 0;
    for _ in 0..CONNS {
        let r = rx.recv_timeout(WAIT).expect("every stream ends");
        assert_eq!(r, Ok(EACH), "a stream the kernel received");
        got += 1;
    }
    assert_eq!(got, CONNS);
    acceptor.join().unwrap();
    assert_report(&out, &err, "bytes_sent", rss);
}

/// xtcp's JSON report `out` says that each of the 1,000 connections ended
/// well with `EACH` bytes in `field`, their sum in all; its peak resident
/// memory `rss` was within the bound.
fn assert_report(out: &str, err: &str, field: &str, rss: u64) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {err}"));
    let conns = v["connections"].as_array().unwrap();
    assert_eq!(conns.len(), CONNS, "{err}");
    for c in conns {
        assert_eq!(c["result"], "ok", "{c}");
        assert_eq!(c[field], EACH as u64, "{c}");
    }
    assert_eq!(v["bytes"], (CONNS * EACH) as u64);
    assert!(
        rss < memory_bound(CONNS),
        "xtcp's resident memory {} MiB is beyond {} MiB",
        rss >> 20,
        memory_bound(CONNS) >> 20
    );
    v
}

/// 1,000 kernel clients connected to `xtcp recv --keep-listening` at once
/// (all established before any sends), 256 KiB of the pattern each: xtcp
/// verifies every stream, closes each after the peer's FIN, and reports
/// each with its exact byte count; its memory stays bounded.
#[test]
fn a_thousand_kernel_clients_into_xtcp_recv_arrive_byte_exact() {
    let net = testnet(1);
    let port = 5302;
    let a = recv_args(&net, port, CONNS);
    let mut x = Watched::spawn(&net, &a, Stdio::piped());
    let reader = collect_stdout(&mut x);
    x.wait_for("listening on");
    let dst = SocketAddr::new(net.a.ip4.into(), port);
    // Connect all, then send all: 1,000 connections at once on one queue.
    let mut streams = Vec::with_capacity(CONNS);
    {
        let _g = net.b.ns.enter().unwrap();
        for i in 0..CONNS {
            let deadline = Instant::now() + WAIT;
            loop {
                match TcpStream::connect_timeout(&dst, Duration::from_secs(5)) {
                    Ok(s) => break streams.push(s),
                    Err(e) => assert!(Instant::now() < deadline, "connection {i}: {e}"),
                }
            }
        }
    }
    let mut data = vec![0u8; EACH];
    pattern_fill(SEED, 0, &mut data);
    let data = std::sync::Arc::new(data);
    let (tx, rx) = mpsc::channel();
    for mut s in streams {
        let (tx, data) = (tx.clone(), data.clone());
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                s.set_read_timeout(Some(WAIT)).unwrap();
                let r = s
                    .write_all(&data)
                    .and_then(|()| s.shutdown(std::net::Shutdown::Write))
                    .map_err(|e| format!("write: {e}"))
                    // xtcp closes once it has the whole stream: our read
                    // sees its FIN.
                    .and_then(|()| {
                        let mut b = [0u8; 1];
                        match s.read(&mut b) {
                            Ok(0) => Ok(()),
                            Ok(_) => Err("data from xtcp".to_string()),
                            Err(e) => Err(format!("waiting for xtcp's FIN: {e}")),
                        }
                    });
                let _ = tx.send(r);
            })
            .unwrap();
    }
    for i in 0..CONNS {
        let r = rx.recv_timeout(WAIT).expect("every client ends");
        assert_eq!(r, Ok(()), "client {i}");
    }
    let rss = peak_rss(x.child.0.id()).expect("xtcp is running");
    x.signal("-INT");
    let (status, err) = x.wait_exit_within(WAIT, "xtcp recv after SIGINT");
    let out = reader.join().unwrap();
    let v = assert_report(&out, &err, "bytes_received", rss);
    assert_eq!(v["engine"]["workers"][0]["refused"], 0);
    // A line for each as it ended.
    let each = format!(": ok; {EACH} bytes received in ");
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("xtcp recv: connection ") && l.contains(&each))
            .count(),
        CONNS,
        "{err}"
    );
    // Stopped with every connection served well: a success, in the exit
    // status and in the report alike.
    assert!(status.success(), "{err}");
    assert_eq!(
        (&v["ok"], &v["error"]),
        (&true.into(), &serde_json::Value::Null)
    );
}

/// With `--max-conns 4`, a fifth connection is refused: its SYN is
/// answered with a reset, so that its connect fails (it was let in and
/// then reset, and a sender that wrote little took it for delivered);
/// counted as refused; the four held finish byte-exact.
#[test]
fn beyond_max_conns_a_connection_is_reset_and_the_others_go_on() {
    let net = testnet(1);
    let port = 5303;
    let a = recv_args(&net, port, 4);
    let mut x = Watched::spawn(&net, &a, Stdio::piped());
    let reader = collect_stdout(&mut x);
    x.wait_for("listening on");
    let dst = SocketAddr::new(net.a.ip4.into(), port);
    let held: Vec<TcpStream> = (0..4)
        .map(|_| acked_sender(&net, dst, SEED, 100_000))
        .collect();
    let mut b = [0u8; 1];
    let e = {
        let _g = net.b.ns.enter().unwrap();
        TcpStream::connect_timeout(&dst, WAIT).expect_err("the fifth connect is refused")
    };
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    // The four held go on to their end.
    let mut more = vec![0u8; 400_000];
    pattern_fill(SEED, 100_000, &mut more);
    for mut s in held {
        s.write_all(&more).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        assert_eq!(
            s.read(&mut b).unwrap(),
            0,
            "xtcp's FIN after the whole stream"
        );
    }
    x.signal("-INT");
    let (_, err) = x.wait_exit_within(WAIT, "xtcp recv after SIGINT");
    let out = reader.join().unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    let conns = v["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 4, "the refused one is not a connection: {err}");
    for c in conns {
        assert_eq!(c["result"], "ok", "{c}");
        assert_eq!(c["bytes_received"], 500_000, "{c}");
    }
    assert_eq!(v["engine"]["workers"][0]["refused"], 1, "{err}");
}
