//! xtcp's output against stock iperf3 3.12 on the same test veth: the
//! `-J` documents of `xtcp client` and `xtcp serve` carry every key (with
//! its JSON type) that iperf3 writes (normal, `-R`, `--bidir`), and the
//! output flags have their effect (`-V`, `-f`, `--logfile`,
//! `--forceflush`, `--timestamps`, `--json-stream`, `--get-server-output`,
//! serve's iperf3 -s lines), each number checked against what the stock
//! peer itself reports. Root needed; each test builds its own namespaces.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime};

mod common;

use common::{
    ENGINE, Reap, Server, TempDir, XTCP, client_wrote_what_xtcp_received, iperf3_json, need_iperf3,
    testnet, wait_listening,
};
use serde_json::Value;
use xtcp_engine::testnet::{Netns, TestNet};

/// Every path of `v` with its JSON type; an array's elements all under
/// `path[]` (the union of their keys).
fn shape(v: &Value, path: String, out: &mut BTreeMap<String, &'static str>) {
    let t = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    out.entry(path.clone()).or_insert(t);
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                shape(x, format!("{path}/{k}"), out);
            }
        }
        Value::Array(a) => {
            for x in a {
                shape(x, format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// What `mine` lacks of `stock`'s keys, or has with another type (xtcp's
/// extra keys are fine).
fn key_diff(stock: &Value, mine: &Value) -> Vec<String> {
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    shape(stock, String::new(), &mut a);
    shape(mine, String::new(), &mut b);
    a.iter()
        .filter_map(|(k, t)| match b.get(k) {
            None => Some(format!("missing {k} ({t})")),
            Some(u) if u != t => Some(format!("type of {k}: iperf3 {t}, xtcp {u}")),
            Some(_) => None,
        })
        .collect()
}

fn assert_same_keys(what: &str, stock: &Value, mine: &Value) {
    let d = key_diff(stock, mine);
    assert!(
        d.is_empty(),
        "{what}: xtcp's JSON differs from stock iperf3's:\n  {}\nxtcp: {mine}\niperf3: {stock}",
        d.join("\n  ")
    );
}

/// A stock `iperf3 -s <extra>` in `ns` bound to `addr`, stdout piped;
/// returns once it listens on `port`.
fn stock_server(ns: &Netns, addr: &str, port: u16, extra: &[&str]) -> Reap {
    need_iperf3();
    let mut child = ns
        .command("iperf3")
        .args(["-s", "-B", addr, "-p", &port.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(ns, port, Duration::from_secs(20), Some(&mut child));
    Reap(child)
}

/// All of a one-off (`-1`) stock server's stdout once it exited.
fn stock_output(mut s: Reap) -> String {
    let mut text = String::new();
    s.0.stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let _ = s.0.wait();
    text
}

/// `xtcp client --iface A <engine> -c B <extra>` in side A's namespace,
/// under `TZ=UTC` and the C locale; must succeed; returns its stdout.
fn xtcp_client(net: &TestNet, extra: &[&str]) -> String {
    let out = client_cmd(net, extra).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "xtcp client {extra:?} failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn client_cmd(net: &TestNet, extra: &[&str]) -> std::process::Command {
    let mut c = net.a.ns.command("timeout");
    c.args(["60", XTCP, "client", "--iface", &net.a.iface])
        .args(ENGINE)
        .args(["-c", &net.b.ip4.to_string()])
        .args(extra)
        .env("TZ", "UTC")
        .env("LC_ALL", "C");
    c
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

const MODES: [&[&str]; 3] = [&[], &["-R"], &["--bidir"]];

/// Item 3: `xtcp client -J` has every key of stock `iperf3 -c -J`, with
/// its type, in a normal, a reverse and a bidirectional test against the
/// same stock server.
#[test]
fn client_json_has_every_key_stock_iperf3_writes() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    let _server = stock_server(&net.b.ns, &b, 5201, &[]);
    for mode in MODES {
        let mut args = vec!["-c", &b, "-J", "-t", "1"];
        args.extend(mode);
        let out = net
            .a
            .ns
            .command("timeout")
            .arg("60")
            .arg("iperf3")
            .args(&args)
            .output()
            .unwrap();
        let stock = parse(&String::from_utf8_lossy(&out.stdout));
        assert!(stock.get("error").is_none(), "{stock}");
        let mut x = vec!["-J", "-t", "1"];
        x.extend(mode);
        let mine = parse(&xtcp_client(&net, &x));
        assert!(mine.get("error").is_none(), "{mine}");
        assert_same_keys(&format!("client {mode:?}"), &stock, &mine);
        // Values from xtcp's TCP: the path MTU is the link's, the send
        // window and cwnd of a sending stream are set, the version says
        // xtcp, the system is uname's.
        let iv = &mine["intervals"][0]["streams"];
        let sending = iv.as_array().unwrap().iter().find(|s| s["sender"] == true);
        assert_eq!(sending.is_some(), mode != ["-R"], "{iv}");
        if let Some(s) = sending {
            assert_eq!(s["pmtu"], 1500, "{s}");
            assert!(s["snd_wnd"].as_u64().unwrap() > 0, "{s}");
            assert!(s["snd_cwnd"].as_u64().unwrap() > 0, "{s}");
            assert!(s["rttvar"].as_u64().is_some(), "{s}");
        }
        let version = mine["start"]["version"].as_str().unwrap();
        assert!(
            version.starts_with("iperf 3.") && version.contains("xtcp"),
            "{version}"
        );
        let uname = std::process::Command::new("uname")
            .arg("-snrvm")
            .output()
            .unwrap();
        assert_eq!(
            mine["start"]["system_info"].as_str().unwrap(),
            String::from_utf8_lossy(&uname.stdout).trim()
        );
        // The congestion control: xtcp's own sender's as its engine ran
        // it, the kernel receiver's as the stock server reported it.
        let (ours, theirs) = if mode == ["-R"] {
            ("receiver_tcp_congestion", "sender_tcp_congestion")
        } else {
            ("sender_tcp_congestion", "receiver_tcp_congestion")
        };
        assert_eq!(mine["end"][ours], "cubic", "{mode:?}");
        assert_eq!(mine["end"][theirs], stock["end"][theirs], "{mode:?}");
        assert_eq!(
            mine["start"]["cookie"].as_str().map(str::len),
            Some(36),
            "{mine}"
        );
    }
}

/// The kinds of a summary's lines, in order: `n[TX-C] sender`,
/// `SUM[TX-C] receiver`, `file` (iperf3's "Sent … of FILE"), `header`.
fn summary_shape(text: &str) -> Vec<String> {
    let tail = text.rsplit("- - - - - -").next().unwrap_or("");
    tail.lines()
        .filter_map(|l| {
            let t = l.trim_start();
            if t.starts_with("Sent ") {
                return Some("file".to_owned());
            }
            if t.starts_with("[ ID]") {
                return Some("header".to_owned());
            }
            Some(format!(
                "{} {}",
                line_kind(t)?,
                t.split_whitespace().last()?
            ))
        })
        .collect()
}

/// A report line's kind: `n[TX-C]` for a stream's, `SUM[RX-S]` for a
/// sum's (`n[]` without `--bidir`'s tags).
fn line_kind(line: &str) -> Option<String> {
    let (id, rest) = line.trim_start().strip_prefix('[')?.split_once(']')?;
    let tag = rest
        .strip_prefix('[')
        .and_then(|r| r.split_once(']'))
        .map_or("", |(t, _)| t);
    let kind = if id.trim() == "SUM" { "SUM" } else { "n" };
    Some(format!("{kind}[{tag}]"))
}

/// The summary's lines come in iperf3's order: with `--bidir` each
/// direction's streams and then their sum (all streams came first, then
/// both sums); with `-F` iperf3's "Sent … of FILE" line under each
/// stream's sender line, and `diskfile` in each stream of `-J`'s `end`.
#[test]
fn summaries_are_grouped_and_name_the_file_as_iperf3_s() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    let dir = std::env::temp_dir().join(format!("xtcp-summary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("src.bin");
    std::fs::write(&file, vec![7u8; 3 << 20]).unwrap();
    let file = file.to_str().unwrap();
    let _server = stock_server(&net.b.ns, &b, 5201, &[]);
    let stock = |args: &[&str]| {
        let out = net
            .a
            .ns
            .command("timeout")
            .arg("60")
            .arg("iperf3")
            .args(["-c", &b])
            .args(args)
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        assert!(out.status.success(), "iperf3 {args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for args in [
        &["--bidir", "-P", "2", "-t", "1"][..],
        &["-F", file, "-P", "2"],
        &["-F", file],
    ] {
        let (theirs, mine) = (stock(args), xtcp_client(&net, args));
        let want = summary_shape(&theirs);
        assert!(want.len() > 3, "{theirs}");
        assert_eq!(
            summary_shape(&mine),
            want,
            "{args:?}:\n{mine}\niperf3:\n{theirs}"
        );
    }
    let args = ["-J", "-F", file];
    let theirs = parse(&stock(&args));
    let mine = parse(&xtcp_client(&net, &args));
    assert_same_keys("-F", &theirs, &mine);
    let d = &mine["end"]["streams"][0]["diskfile"];
    assert_eq!(d["size"], 3 << 20, "{d}");
    assert_eq!(d["sent"], 3 << 20, "{d}");
    assert_eq!(d["percent_sent"], 100, "{d}");
    assert_eq!(d["filename"], file, "{d}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first interval's block as iperf3 lays it out: the column header
/// (whole), then each line's kind, `n[TX-C]` or `SUM[RX-S]`, in order.
fn first_block(text: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("[ ID]"));
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let mut out = vec![header.trim_end().to_owned()];
    for l in lines.take_while(|l| l.contains(" 0.00-")) {
        let Some(kind) = line_kind(l) else {
            break;
        };
        out.push(kind);
    }
    out
}

/// An interval's lines come as iperf3's, on either side: a client that
/// only receives (-R) has no Retr/Cwnd columns; with `--bidir -P 2`, each
/// direction's streams and then their sum, the client's sending streams
/// first (the server's receiving ones first on its side).
#[test]
fn interval_blocks_are_headed_and_ordered_as_iperf3_s() {
    need_iperf3();
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    let cases: [&[&str]; 2] = [&["-R", "-t", "2"], &["--bidir", "-P", "2", "-t", "2"]];
    // Client side: stock client and xtcp's against a stock server.
    let server = stock_server(&net.b.ns, &b, 5201, &[]);
    for args in cases {
        let out = net
            .a
            .ns
            .command("timeout")
            .args(["60", "iperf3", "-c", &b])
            .args(args)
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        assert!(out.status.success(), "iperf3 {args:?}");
        let theirs = String::from_utf8_lossy(&out.stdout).into_owned();
        let mine = xtcp_client(&net, args);
        let want = first_block(&theirs);
        assert!(want.len() > 1, "{theirs}");
        assert_eq!(
            first_block(&mine),
            want,
            "{args:?}:\n{mine}\niperf3:\n{theirs}"
        );
    }
    drop(server);
    // Server side: a stock client against xtcp serve, then against a
    // stock server.
    let xtcp = Server::start(&net, 1);
    for args in cases {
        let _ = iperf3_json(&net, args);
        let mut lines = Vec::new();
        loop {
            let l = xtcp.line();
            if l.starts_with("xtcp serve: test") {
                break;
            }
            lines.push(l);
        }
        let mine = lines.join("\n");
        let stock = stock_server(&net.b.ns, &b, 5202, &["-1"]);
        let out = net
            .a
            .ns
            .command("timeout")
            .args(["60", "iperf3", "-c", &b, "-p", "5202"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "iperf3 {args:?}");
        let theirs = stock_output(stock);
        let want = first_block(&theirs);
        assert!(want.len() > 1, "{theirs}");
        assert_eq!(
            first_block(&mine),
            want,
            "{args:?}:\n{mine}\niperf3 -s:\n{theirs}"
        );
    }
}

/// Item 3, server side: `xtcp serve -J`'s document per test, and the
/// `server_output_json` a stock client gets with `--get-server-output`,
/// have every key of stock `iperf3 -s -J`'s (normal, `-R`, `--bidir`);
/// the stock client's own document has the same keys against either
/// server; and the server's document and the output it returned have the
/// server's own side's counts as the client has them, and zeros for the
/// client's side, as stock's server writes them.
#[test]
fn serve_json_and_server_output_have_every_key_stock_iperf3_s_writes() {
    need_iperf3();
    let net = testnet(1);
    let a = net.a.ip4.to_string();
    let mut stock = Vec::new();
    for mode in MODES {
        let server = stock_server(&net.a.ns, &a, 5202, &["-1", "-J"]);
        let mut args = vec!["-p", "5202", "--get-server-output", "-t", "1"];
        args.extend(mode);
        let client = iperf3_json(&net, &args);
        let doc = parse(&stock_output(server));
        stock.push((client, doc));
    }
    let server = Server::start_with(&net, 1, &["-J"]);
    for (mode, (stock_client, stock_doc)) in MODES.iter().zip(&stock) {
        let mut args = vec!["--get-server-output", "-t", "1"];
        args.extend(*mode);
        let client = iperf3_json(&net, &args);
        let doc = server.json();
        assert!(doc.get("error").is_none(), "{doc}");
        assert_same_keys(&format!("serve -J {mode:?}"), stock_doc, &doc);
        let out = &client["server_output_json"];
        assert!(out.is_object(), "server_output_json in {client}");
        assert_same_keys(
            &format!("server_output_json {mode:?}"),
            &stock_client["server_output_json"],
            out,
        );
        assert_same_keys(
            &format!("the stock client's document {mode:?}"),
            stock_client,
            &client,
        );
        // As stock `iperf3 -s -J` writes it, in serve's document and in the
        // output it returned: the server's own side's counts, as the
        // client has them (it got them in the results), and zeros for the
        // side only the client counted.
        let (own, zero): (&[&str], &[&str]) = match *mode {
            [] => (&["sum_received"], &["sum_sent"]),
            ["-R"] => (&["sum_sent"], &["sum_received"]),
            _ => (
                &["sum_received", "sum_sent_bidir_reverse"],
                &["sum_sent", "sum_received_bidir_reverse"],
            ),
        };
        for key in own {
            let theirs = &client["end"][key]["bytes"];
            assert!(theirs.as_u64().unwrap() > 0, "{key}: {client}");
            assert_eq!(
                &doc["end"][key]["bytes"], theirs,
                "{mode:?} {key}: serve {doc}\nclient {client}"
            );
            assert_eq!(&out["end"][key]["bytes"], theirs, "{mode:?} {key}: {out}");
        }
        for key in zero {
            assert_eq!(doc["end"][key]["bytes"], 0, "{mode:?} {key}: serve {doc}");
            assert_eq!(out["end"][key]["bytes"], 0, "{mode:?} {key}: {out}");
            // No more keys than stock's there (no retransmits).
            assert_eq!(
                object_keys(&doc["end"][key]),
                object_keys(&stock_doc["end"][key]),
                "{mode:?} {key}"
            );
        }
        // Each stream's side the server did not do: zeros, with stock's
        // keys only (no TCP figures of the client's).
        let streams = |d: &Value| d["end"]["streams"].as_array().unwrap().clone();
        let stock_sides: Vec<(Vec<String>, Vec<String>)> = streams(stock_doc)
            .iter()
            .map(|s| (object_keys(&s["sender"]), object_keys(&s["receiver"])))
            .collect();
        for s in streams(&doc) {
            let ours = s["sender"]["sender"] == true;
            let other = if ours { "receiver" } else { "sender" };
            assert_eq!(s[other]["bytes"], 0, "{mode:?}: {s}");
            let keys = object_keys(&s[other]);
            assert!(
                stock_sides
                    .iter()
                    .any(|(snd, rcv)| keys == if ours { rcv.clone() } else { snd.clone() }),
                "{mode:?}: {s} against stock's {stock_sides:?}"
            );
        }
    }
}

/// An object's keys, sorted.
fn object_keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map_or_else(Vec::new, |o| o.keys().cloned().collect());
    k.sort();
    k
}

/// Numbers of the line ending in `tail` (sender / receiver) whose id is
/// `id`: (transfer in bytes, rate as printed, its unit, interval end).
fn summary(text: &str, id: &str, tail: &str) -> (f64, f64, String, f64) {
    let l = text
        .lines()
        .find(|l| l.starts_with(id) && l.trim_end().ends_with(tail))
        .unwrap_or_else(|| panic!("no {id} … {tail} line in {text}"));
    let w: Vec<&str> = l.split_whitespace().collect();
    let at = w.iter().position(|x| *x == "sec").unwrap();
    let end: f64 = w[at - 1].split('-').nth(1).unwrap().parse().unwrap();
    let n: f64 = w[at + 1].parse().unwrap();
    let scale = match w[at + 2] {
        "GBytes" => f64::from(1u32 << 30),
        "MBytes" => f64::from(1u32 << 20),
        "KBytes" => 1024.0,
        "Bytes" => 1.0,
        u => panic!("unit {u} in {l}"),
    };
    (
        n * scale,
        w[at + 3].parse().unwrap(),
        w[at + 4].to_owned(),
        end,
    )
}

/// `-f M` and `-f k`: the receiver's rate in MBytes/s (bytes ÷ 2^20) and
/// in Kbit/s, from the bytes the stock server itself counted.
#[test]
fn format_flag_prints_rates_in_that_unit() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    for (f, unit, scale) in [
        ("M", "MBytes/sec", 1048576.0),
        ("k", "Kbits/sec", 1000.0 / 8.0),
    ] {
        let server = stock_server(&net.b.ns, &b, 5201, &["-1", "-J"]);
        let text = xtcp_client(&net, &["-t", "2", "-f", f]);
        let theirs = parse(&stock_output(server));
        let bytes = theirs["end"]["sum_received"]["bytes"].as_f64().unwrap();
        let (_, rate, u, end) = summary(&text, "[  1]", "receiver");
        assert_eq!(u, unit, "{text}");
        let want = bytes / end / scale;
        // The printed seconds are rounded to 10 ms, the rate to four
        // digits.
        assert!(
            (rate - want).abs() <= want * 0.01 + 1.0,
            "-f {f}: {rate} {unit}, the server counted {bytes} bytes in {end} s: {want}\n{text}"
        );
    }
    // A letter iperf3 does not know: refused, naming it and the letters.
    let out = client_cmd(&net, &["-t", "1", "-f", "x"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("\"x\"") && err.contains("K, M, G, T"),
        "{err}"
    );
}

/// `-V`: iperf3's verbose start and end, the MSS of the control and data
/// connections (what the link's MTU gives with timestamps), the
/// congestion control of both ends (ours from the engine, the server's as
/// it reported it); with `-J` nothing but the JSON document.
#[test]
fn verbose_prints_iperf3s_details_and_adds_nothing_to_json() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    let server = stock_server(&net.b.ns, &b, 5201, &["-1", "-J"]);
    let text = xtcp_client(&net, &["-t", "1", "-V"]);
    let theirs = parse(&stock_output(server));
    for needle in [
        "iperf 3.12 (xtcp ",
        "Time: ",
        "      Cookie: ",
        "Starting Test: protocol: TCP, 1 streams, 131072 byte blocks, omitting 0 seconds, 1 \
         second test, tos 0",
        "Test Complete. Summary Results:",
        "CPU Utilization: local/sender ",
        "snd_tcp_congestion cubic",
        "iperf Done.",
    ] {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    // The MSS lines: xtcp's connections' MSS as their handshakes settled
    // it. Both ends announce the link's MTU less the IPv4 and TCP headers
    // (RFC 6691), and the kernel peer negotiates timestamps, 12 bytes of
    // options in every segment: 1500 − 40 − 12.
    let mtu = net.config.mtu as u64;
    let mss = mtu - 40 - 12;
    for needle in [
        format!("Control connection MSS {mss}\n"),
        format!("      TCP MSS: {mss} (default)\n"),
    ] {
        assert!(text.contains(&needle), "{needle:?} in {text}");
    }
    let rcv = theirs["end"]["receiver_tcp_congestion"].as_str().unwrap();
    assert!(
        text.contains(&format!("rcv_tcp_congestion {rcv}")),
        "{rcv} in {text}"
    );
    let _server = stock_server(&net.b.ns, &b, 5201, &[]);
    let plain = parse(&xtcp_client(&net, &["-t", "1", "-J"]));
    let verbose = parse(&xtcp_client(&net, &["-t", "1", "-J", "-V"]));
    assert!(key_diff(&plain, &verbose).is_empty() && key_diff(&verbose, &plain).is_empty());
}

/// `--logfile`: everything in the file (appended run after run), nothing
/// on standard output.
#[test]
fn logfile_takes_all_output_and_appends() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    let _server = stock_server(&net.b.ns, &b, 5201, &[]);
    let dir = TempDir::new("logfile");
    let log = dir.path("client.log");
    for run in 1..=2 {
        let out = xtcp_client(&net, &["-t", "1", "--logfile", &log]);
        assert_eq!(out, "", "stdout of run {run}");
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.matches("iperf Done.").count(), run, "{text}");
        assert_eq!(text.matches("Connecting to host").count(), run, "{text}");
        summary(&text, "[  1]", "receiver");
    }
    // -J goes there too.
    let out = xtcp_client(&net, &["-t", "1", "-J", "--logfile", &log]);
    assert_eq!(out, "");
    let text = std::fs::read_to_string(&log).unwrap();
    let json = &text[text.rfind("iperf Done.").unwrap() + "iperf Done.".len()..];
    assert!(
        parse(json)["end"]["sum_received"]["bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
}

/// `--forceflush`: with `--logfile`, the interval lines are in the file
/// while the test still runs (without it they wait in the buffer).
#[test]
fn forceflush_writes_each_line_at_once() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    let _server = stock_server(&net.b.ns, &b, 5201, &[]);
    let dir = TempDir::new("forceflush");
    let log = dir.path("client.log");
    let mut child: Child = client_cmd(&net, &["-t", "30", "--logfile", &log, "--forceflush"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text
            .lines()
            .any(|l| l.starts_with("[  1]") && l.contains(" sec "))
        {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the client ended before its first interval line reached the file: {text}"
        );
        assert!(
            Instant::now() < deadline,
            "no interval line in the file: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `--timestamps[=FORMAT]`: every line starts with the time it was
/// written, in strftime's format (default "%c ").
#[test]
fn timestamps_prefix_every_line() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    let _server = stock_server(&net.b.ns, &b, 5201, &[]);
    let before = SystemTime::now() - Duration::from_secs(1);
    let text = xtcp_client(&net, &["-t", "1", "--timestamps=%Y-%m-%dT%H:%M:%S| "]);
    let after = SystemTime::now() + Duration::from_secs(1);
    assert!(text.lines().count() > 5, "{text}");
    for l in text.lines() {
        let (ts, _) = l.split_once("| ").unwrap_or_else(|| panic!("{l:?}"));
        let t = humantime::parse_rfc3339(&format!("{ts}Z")).unwrap_or_else(|e| panic!("{l}: {e}"));
        assert!(before <= t && t <= after, "{l}");
    }
    // The default, "%c ", read back by date(1).
    let text = xtcp_client(&net, &["-t", "1", "--timestamps"]);
    for l in text.lines() {
        // "%c" in the C locale: "Tue Dec  1 18:20:00 2026", 24 characters.
        let ts = &l[..24];
        let out = std::process::Command::new("date")
            .args(["-u", "-d", ts, "+%s"])
            .output()
            .unwrap();
        let secs: u64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{ts:?} of {l:?} is not a time"));
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        assert!(before <= t && t <= after + Duration::from_secs(30), "{l}");
        assert_eq!(&l[24..25], " ", "{l:?}");
    }
}

/// `--json-stream`: one JSON object per line, start, intervals, end; the
/// end's receiver bytes are the stock server's own count.
#[test]
fn json_stream_is_one_event_per_line() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    let server = stock_server(&net.b.ns, &b, 5201, &["-1", "-J"]);
    let text = xtcp_client(&net, &["-t", "2", "--json-stream"]);
    let theirs = parse(&stock_output(server));
    let events: Vec<Value> = text.lines().map(parse).collect();
    let names: Vec<&str> = events
        .iter()
        .map(|e| {
            assert!(e["data"].is_object(), "{e}");
            e["event"].as_str().unwrap()
        })
        .collect();
    assert_eq!(names.first(), Some(&"start"), "{names:?}");
    assert_eq!(names.last(), Some(&"end"), "{names:?}");
    assert!(
        names.iter().filter(|n| **n == "interval").count() >= 2,
        "{names:?}"
    );
    let end = &events.last().unwrap()["data"];
    assert_eq!(
        end["sum_received"]["bytes"], theirs["end"]["sum_received"]["bytes"],
        "{end}\n{theirs}"
    );
    assert_eq!(events[0]["data"]["connecting_to"]["port"], 5201);
}

/// `--get-server-output`, both ways: xtcp's client prints the stock
/// server's text after "Server output:"; a stock client gets serve's own
/// text for the test (its lines as serve printed them, the summary with
/// the bytes the client was told).
#[test]
fn get_server_output_both_ways() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    {
        let server = stock_server(&net.b.ns, &b, 5201, &["-1"]);
        let text = xtcp_client(&net, &["-t", "1", "--get-server-output", "-T", "run1"]);
        let stock_text = stock_output(server);
        // As a stock client: -T's prefix on the blank line before, none on
        // the server's own lines, and again on the lines after them.
        let (ours, theirs) = text
            .split_once("run1:  \nServer output:\n")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(ours.lines().all(|l| l.starts_with("run1:  ")), "{ours}");
        let (theirs, after) = theirs
            .split_once("\nrun1:  \n")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(!theirs.contains("run1:"), "{theirs}");
        assert_eq!(after.trim_end(), "run1:  iperf Done.", "{text}");
        let accepted = format!("Accepted connection from {}, port ", net.a.ip4);
        assert!(theirs.contains(&accepted), "{theirs}");
        // The receiver line the stock server printed, word for word.
        let line = stock_text
            .lines()
            .find(|l| l.trim_end().ends_with("receiver"))
            .unwrap();
        assert!(theirs.contains(line), "{line:?} in {theirs}");
    }
    {
        // A server run with -J sends JSON: labelled as a stock client
        // labels it.
        let server = stock_server(&net.b.ns, &b, 5201, &["-1", "-J"]);
        let text = xtcp_client(&net, &["-t", "1", "--get-server-output"]);
        drop(server);
        let json = text
            .split_once("\nServer JSON output:\n")
            .unwrap_or_else(|| panic!("{text}"))
            .1;
        assert!(
            json.starts_with('{') && json.contains("\"sum_received\""),
            "{text}"
        );
    }
    // serve's text, and with --json-lines (which prints a record a test)
    // the same text for the client all the same.
    for lines in [false, true] {
        let server = Server::start_with(&net, 1, if lines { &["--json-lines"] } else { &[] });
        let client = iperf3_json(&net, &["-t", "2", "--get-server-output"]);
        let text = client["server_output_text"]
            .as_str()
            .unwrap_or_else(|| panic!("{client}"));
        let port = client["start"]["connected"][0]["local_port"]
            .as_u64()
            .unwrap();
        for needle in [
            format!("Accepted connection from {}, port ", net.b.ip4),
            format!(
                "[  1] local {} port 5201 connected to {} port {port}",
                net.a.ip4, net.b.ip4
            ),
            "[ ID] Interval           Transfer     Bitrate".to_owned(),
        ] {
            assert!(text.contains(&needle), "{needle:?} in {text}");
        }
        // Its intervals ("[  1]   0.00-1.01   sec …": where they end is
        // the server's clock's), before the summary.
        let intervals = text
            .lines()
            .take_while(|l| !l.starts_with("- - -"))
            .filter(|l| l.starts_with("[  1] ") && l.contains(" sec "))
            .count();
        assert!(intervals >= 2, "{intervals} intervals in {text}");
        assert!(!text.contains("xtcp serve: "), "{text}");
        let (bytes, ..) = summary(text, "[  1]", "receiver");
        let got = client["end"]["sum_received"]["bytes"].as_f64().unwrap();
        assert!(
            (bytes - got).abs() <= got * 0.006,
            "{bytes} vs {got}: {text}"
        );
        client_wrote_what_xtcp_received(&net, got as u64, &client);
        if lines {
            // Its output is the record alone: the text went to the client.
            let record: serde_json::Value = serde_json::from_str(&server.line()).unwrap();
            assert_eq!(record["result"], "ok", "{record}");
            assert_eq!(
                record["bytes_received"], client["end"]["sum_sent"]["bytes"],
                "{record}"
            );
        } else {
            // And serve printed the same lines itself.
            let (verdict, _) = server.outcome_and_intervals();
            assert!(
                verdict.contains(": ok;") && verdict.contains(" 1 stream,"),
                "{verdict}"
            );
        }
    }
}

/// `xtcp serve -V` prints what `iperf3 -s -V` prints, line kind by line
/// kind and in the same order, receiving and sending: the version and host
/// lines, the test's time, cookie (the client's own, as its `-V` shows
/// it), MSS setting and parameters, and the summary's details, with one
/// stream and two.
#[test]
fn serve_verbose_prints_iperf3_s_v_lines() {
    let net = testnet(1);
    let b = net.b.ip4.to_string();
    const KINDS: [&str; 13] = [
        "iperf 3.",
        "Linux ",
        "Time: ",
        "Accepted connection from ",
        "      Cookie: ",
        "      TCP MSS: ",
        "Starting Test: ",
        "Test Complete. Summary Results:",
        "(sender statistics not available)",
        "(receiver statistics not available)",
        "CPU Utilization: ",
        "snd_tcp_congestion ",
        "rcv_tcp_congestion ",
    ];
    let kinds = |text: &str| -> Vec<&'static str> {
        text.lines()
            .filter_map(|l| KINDS.iter().find(|k| l.contains(**k)))
            .copied()
            .collect()
    };
    // (With -P 2, the [SUM] lines' "not available" too.)
    for mode in [&[][..], &["-R"], &["-P", "2"], &["-R", "-P", "2"]] {
        let server = stock_server(&net.b.ns, &b, 5201, &["-1", "-V"]);
        let out = net
            .a
            .ns
            .command("timeout")
            .args(["60", "iperf3", "-c", &b, "-t", "1"])
            .args(mode)
            .output()
            .unwrap();
        assert!(out.status.success());
        let stock = stock_output(server);
        let server = Server::start_with(&net, 1, &["-1", "-V"]);
        let out = common::stock_client(&net)
            .args(["-t", "1", "-V"])
            .args(mode)
            .output()
            .unwrap();
        assert!(out.status.success());
        let client = String::from_utf8_lossy(&out.stdout);
        let mut mine = String::new();
        loop {
            let l = server.line();
            if l.starts_with("xtcp serve: test") {
                break;
            }
            mine.push_str(&l);
            mine.push('\n');
        }
        assert_eq!(
            kinds(&mine),
            kinds(&stock),
            "{mode:?}: {mine}\n---\n{stock}"
        );
        let cookie = |t: &str| {
            t.lines()
                .find_map(|l| l.trim().strip_prefix("Cookie: ").map(str::to_owned))
                .unwrap_or_else(|| panic!("no cookie in {t}"))
        };
        assert_eq!(cookie(&mine), cookie(&client), "{mode:?}");
    }
}

/// Serve prints iperf3 -s's lines: the banner per test, "Accepted
/// connection from", the stream's addresses (the client's own port), the
/// header, the intervals and the summary; `-f M` rates from the bytes
/// the stock client was told.
#[test]
fn serve_prints_iperf3_s_lines() {
    let net = testnet(1);
    let server = Server::start_with(&net, 1, &["-f", "M"]);
    let client = iperf3_json(&net, &["-t", "2"]);
    let mut lines = Vec::new();
    loop {
        let l = server.line();
        let done = l.starts_with("xtcp serve: test");
        lines.push(l);
        if done {
            break;
        }
    }
    let next = server.line();
    let text = lines.join("\n");
    let rule = "-----------------------------------------------------------";
    assert_eq!(
        lines[..3],
        [rule, "Server listening on 5201 (test #1)", rule],
        "{text}"
    );
    assert_eq!(next, rule, "{text}");
    assert_eq!(server.line(), "Server listening on 5201 (test #2)");
    let port = client["start"]["connected"][0]["local_port"]
        .as_u64()
        .unwrap();
    assert!(lines[3].starts_with(&format!("Accepted connection from {}, port ", net.b.ip4)));
    assert_eq!(
        lines[4],
        format!(
            "[  1] local {} port 5201 connected to {} port {port}",
            net.a.ip4, net.b.ip4
        )
    );
    assert_eq!(lines[5], "[ ID] Interval           Transfer     Bitrate");
    let (_, rate, unit, end) = summary(&text, "[  1]", "receiver");
    assert_eq!(unit, "MBytes/sec", "{text}");
    let bytes = client["end"]["sum_received"]["bytes"].as_f64().unwrap();
    client_wrote_what_xtcp_received(&net, bytes as u64, &client);
    let want = bytes / end / 1048576.0;
    assert!(
        (rate - want).abs() <= want * 0.01 + 1.0,
        "{rate} vs {want}: {text}"
    );
    assert!(lines.last().unwrap().contains(" 1 stream,"), "{text}");
}

/// Serve's `--timestamps` with `--logfile`: every text line in the file
/// starts with the time it was written (here `%s`, the epoch seconds);
/// `-J`'s documents stay plain JSON, as iperf3's.
#[test]
fn serve_timestamps_every_line_of_its_log() {
    need_iperf3();
    let net = testnet(1);
    let dir = TempDir::new("serve-timestamps");
    let log = dir.path("serve.log");
    let before = SystemTime::now() - Duration::from_secs(1);
    let server = Server::start_with(&net, 1, &["--logfile", &log, "--timestamps=%s| "]);
    let v = iperf3_json(&net, &["-t", "1"]);
    let text = wait_for_line(&log, "xtcp serve: test");
    let after = SystemTime::now() + Duration::from_secs(1);
    drop(server);
    assert!(text.lines().count() > 8, "{text}");
    for l in text.lines() {
        let (ts, rest) = l.split_once("| ").unwrap_or_else(|| panic!("{l:?}"));
        let secs: u64 = ts.parse().unwrap_or_else(|_| panic!("{l:?}"));
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        assert!(before <= t && t <= after, "{l}");
        assert!(
            !rest.starts_with(char::is_numeric) || rest.contains("sec"),
            "{l}"
        );
    }
    let (bytes, ..) = summary(
        &text
            .lines()
            .map(|l| l.split_once("| ").unwrap().1)
            .collect::<Vec<_>>()
            .join("\n"),
        "[  1]",
        "receiver",
    );
    let got = v["end"]["sum_received"]["bytes"].as_f64().unwrap();
    assert!((bytes - got).abs() <= got * 0.006, "{bytes} vs {got}");
    client_wrote_what_xtcp_received(&net, got as u64, &v);

    let log = dir.path("serve.json");
    let server = Server::start_with(&net, 1, &["-J", "--logfile", &log, "--timestamps"]);
    iperf3_json(&net, &["-t", "1"]);
    let text = wait_for_line(&log, "}");
    drop(server);
    assert!(
        parse(&text)["end"]["sum_received"]["bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
}

/// The file's text once a line of it starts with `start` (a minute at
/// most).
fn wait_for_line(path: &str, start: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(|l| {
            l.starts_with(start)
                || l.split_once("| ")
                    .is_some_and(|(_, r)| r.starts_with(start))
        }) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no {start:?} line in {path}: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
