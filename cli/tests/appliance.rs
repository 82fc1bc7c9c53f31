//! `xtcp serve` as an appliance: `--config FILE` and `--check-config FILE`
//! (errors that name the key and the line; settings from the file, the
//! command line overriding them); `--json-lines` and `--logfile` (one JSON
//! object per test, checked against the stock iperf3 client's own report);
//! SIGHUP reopening the log file; a scheduler's iperf3 command line
//! (pScheduler's single-ended throughput test) driving it.
//! The serving tests need root (CI runs as root) and build their own
//! namespaces.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{
    ENGINE, TempDir, Watched, XTCP, iperf3_json, iperf3_timed, server_clock_holds, testnet,
    wait_established,
};
use xtcp_engine::testnet::TestNet;

fn check(file: &Path, extra: &[&str]) -> (i32, String, String) {
    check_with(Command::new(XTCP), file, extra)
}

/// `serve --check-config FILE <extra>` run by `cmd` (xtcp, or xtcp in a
/// namespace): exit code, stdout, stderr.
fn check_with(mut cmd: Command, file: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = cmd
        .arg("serve")
        .arg("--check-config")
        .arg(file)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_names_the_key_and_the_line_of_what_is_wrong() {
    let dir = TempDir::new("check-config");
    let f = dir.file(
        "unknown.toml",
        "# serve on the loopback\niface = \"lo\"\n\nbogus = 1\n",
    );
    let (code, _, err) = check(&f, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("line 4: unknown key `bogus`"), "{err}");

    let f = dir.file("value.toml", "iface = \"lo\"\nport = 70000\n");
    let (code, _, err) = check(&f, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("line 2: `port = 70000`"), "{err}");
    assert!(err.contains("65535"), "says what it takes: {err}");

    let f = dir.file("enum.toml", "iface = \"lo\"\nbind = \"sideways\"\n");
    let (_, _, err) = check(&f, &[]);
    assert!(err.contains("line 2: `bind = \"sideways\"`"), "{err}");
    assert!(err.contains("possible values"), "lists them: {err}");

    let f = dir.file("syntax.toml", "iface = \"lo\"\nport = = 1\n");
    let (code, _, err) = check(&f, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("line 2, column"), "{err}");

    // Good, and a flag on the command line taken over the file's value.
    let f = dir.file("good.toml", "iface = \"lo\"\nport = 5201\nqueues = 1\n");
    let (code, out, err) = check(&f, &["--port", "5202"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("configuration OK"), "{out}");
    // A bad value on the command line is clap's usual error.
    let (code, _, err) = check(&f, &["--port", "0"]);
    assert_eq!(code, 2, "{err}");

    // The example in contrib/ has every key right: it passes, with what
    // this host lacks (its interface, user, cores) given on the command
    // line.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../contrib/serve.toml");
    let (code, out, err) = check(
        Path::new(example),
        &[
            "--iface", "lo", "--user", "nobody", "--queues", "1", "--cores", "0",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("configuration OK"), "{out}");

    // What serve would find wrong at start: no such interface.
    let f = dir.file("iface.toml", "iface = \"xtcp-no-such0\"\n");
    let (code, _, err) = check(&f, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("xtcp-no-such0"), "{err}");
}

/// `--check-config` finds what serve would refuse at start, short of
/// taking the interface: the engine's settings, more queues than the
/// interface has, an address of no interface (-B), a `--metrics` address
/// it cannot bind. In a namespace of its own, on its veth.
#[test]
fn check_config_finds_what_serve_would_refuse() {
    let net = testnet(1);
    let dir = TempDir::new("check-config-engine");
    let f = dir.file(
        "serve.toml",
        &format!("iface = \"{}\"\nport = 5201\n", net.a.iface),
    );
    let check_in = |extra: &[&str]| check_with(net.a.ns.command(XTCP), &f, extra);
    let (code, out, err) = check_in(&[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("configuration OK"), "{out}");
    // A value out of range is the parser's to refuse (exit 2).
    let (code, _, err) = check_in(&["--queues", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("'--queues <QUEUES>': give 1 or more queues (a worker each)"),
        "{err}"
    );
    for (extra, says) in [
        (
            &["--logfile", "/nonexistent/dir/x.log"][..],
            "--logfile /nonexistent/dir/x.log: no directory",
        ),
        (
            &["-I", "/nonexistent/x.pid"],
            "-I /nonexistent/x.pid: no directory",
        ),
        (
            &["-D", "--json-lines", "--logfile", "/tmp/x.jsonl"],
            "the daemon's diagnostics would go into the log file",
        ),
        (&["--queues", "4"], "has 1 receive queue"),
        (&["--mss", "10"], "--mss 10 is too small"),
        (
            &["--ring", "64", "--frames", "100"],
            "--frames 100 is too few",
        ),
        (&["-B", "198.51.100.7"], "198.51.100.7:5201"),
        (
            &["--metrics", "198.51.100.7:9100"],
            "--metrics 198.51.100.7:9100: address not available",
        ),
    ] {
        let (code, out, err) = check_in(extra);
        assert_eq!(code, 1, "{extra:?}: {out} {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!out.contains("configuration OK"), "{extra:?}: {out}");
    }
    // A port in use and a pid file naming a running process (the server
    // running with this configuration, say) are no error of the
    // configuration.
    let _held = {
        let _g = net.a.ns.enter().unwrap();
        std::net::TcpListener::bind((net.a.ip4, 5201)).unwrap()
    };
    let pid = dir.file("serve.pid", &format!("{}\n", std::process::id()));
    let (code, _, err) = check_in(&["-I", pid.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}

/// A config file serving on A's interface at `port`, one JSON line per
/// test to `log`, with the tests' engine options (`ENGINE`) as keys.
fn config_text(net: &TestNet, port: u16, log: &Path) -> String {
    let mut text = format!(
        "iface = \"{}\"\nport = {port}\njson_lines = true\nlogfile = \"{}\"\n",
        net.a.iface,
        log.display()
    );
    for pair in ENGINE.chunks(2) {
        text.push_str(&format!(
            "{} = \"{}\"\n",
            pair[0].trim_start_matches("--").replace('-', "_"),
            pair[1]
        ));
    }
    text
}

/// `xtcp serve --config CONF EXTRA…` in side A, once it listens.
fn serve_from(net: &TestNet, conf: &Path, extra: &[&str]) -> Watched {
    let mut args = vec![
        "serve".to_owned(),
        "--config".into(),
        conf.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let mut server = Watched::spawn(net, &args, Stdio::null());
    server.wait_for("listening on");
    server
}

/// Waits (bounded) until `path` holds at least `n` lines; returns them.
fn wait_lines(path: &Path, n: usize, server: &mut Watched) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n && text.ends_with('\n') {
            return lines;
        }
        if let Some(s) = server.child.0.try_wait().unwrap() {
            panic!("xtcp serve exited ({s}): {}", server.err.lock().unwrap());
        }
        assert!(
            Instant::now() < deadline,
            "{} has {} lines, not {n}: {text}",
            path.display(),
            lines.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One `--json-lines` record against the client's own report of the test.
/// `wall`: the seconds the client's whole run took.
fn check_record(
    line: &str,
    (client, wall): &(serde_json::Value, f64),
    net: &TestNet,
    direction: &str,
) {
    let r: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(r["result"], "ok", "{r}");
    assert!(r["reason"].is_null() && r["message"].is_null(), "{r}");
    assert_eq!(r["direction"], direction, "{r}");
    assert_eq!(r["streams"], 1, "{r}");
    let at: std::net::SocketAddr = r["client"].as_str().unwrap().parse().unwrap();
    assert_eq!(at.ip(), std::net::IpAddr::V4(net.b.ip4), "{r}");
    humantime::parse_rfc3339(r["time"].as_str().unwrap()).unwrap();
    let end = &client["end"];
    let (mine, theirs) = match direction {
        "forward" => ("bytes_received", &end["sum_sent"]),
        _ => ("bytes_sent", &end["sum_received"]),
    };
    // What xtcp moved is what the stock client sent (forward) or received
    // (reverse), by the client's own count.
    assert_eq!(r[mine], theirs["bytes"], "{r} vs {theirs}");
    let secs = r["seconds"].as_f64().unwrap();
    let gbps = r[mine.replace("bytes", "gbps")].as_f64().unwrap();
    let want = theirs["bytes"].as_f64().unwrap() * 8.0 / secs / 1e9;
    assert!((gbps - want).abs() <= 1e-9 * want.max(1.0), "{r}");
    // The seconds (and so the rate) against the client's own clock.
    let what = format!("--json-lines, {direction}");
    server_clock_holds(&what, secs, theirs["seconds"].as_f64().unwrap(), *wall);
}

#[test]
fn serve_takes_its_settings_from_the_file_the_command_line_wins_and_json_lines_go_to_the_logfile() {
    let net = testnet(1);
    let dir = TempDir::new("serve-config");
    let log = dir.0.join("tests.jsonl");
    let text = config_text(&net, 5310, &log);
    let conf = dir.file("serve.toml", &text);
    let mut server = serve_from(&net, &conf, &["--port", "5311"]);
    assert!(
        server.err.lock().unwrap().contains(":5311"),
        "the command line's port: {}",
        server.err.lock().unwrap()
    );

    let v = iperf3_timed(&net, &["-p", "5311", "-n", "64M"]);
    let lines = wait_lines(&log, 1, &mut server);
    check_record(&lines[0], &v, &net, "forward");

    // After rotation: SIGHUP reopens the file. A changed output form is
    // named as kept until a restart (the lines keep the running form).
    let rotated = dir.0.join("tests.jsonl.1");
    std::fs::rename(&log, &rotated).unwrap();
    std::fs::write(&conf, format!("{text}format = \"m\"\nlog = \"debug\"\n")).unwrap();
    server.signal("-HUP");
    server.wait_for("reloaded");
    server.wait_for("changed but kept until serve restarts: format, log");
    let v = iperf3_timed(&net, &["-p", "5311", "-n", "64M", "-R"]);
    let lines = wait_lines(&log, 1, &mut server);
    check_record(&lines[0], &v, &net, "reverse");
    assert_eq!(
        std::fs::read_to_string(&rotated).unwrap().lines().count(),
        1,
        "the rotated file keeps its line"
    );

    server.signal("-TERM");
    let (st, err) = server.wait_exit("serve stops on SIGTERM");
    assert!(st.success(), "{st}: {err}");
}

/// pScheduler's iperf3 tool, in a single-ended throughput test, runs only
/// the client, with this command line (its `run`: `-p PORT -c DEST -t
/// DURATION --json`, then `-i`, `-P`, `-O`, `-R` from the test spec), against
/// an iperf3 server it does not manage: an xtcp appliance serves it.
#[test]
fn pscheduler_single_ended_command_lines_are_served() {
    let net = testnet(1);
    let dir = TempDir::new("pscheduler");
    let log = dir.0.join("tests.jsonl");
    let mut args: Vec<String> = [
        "serve",
        "--iface",
        &net.a.iface,
        "--port",
        "5320",
        "--json-lines",
        "--logfile",
        log.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    args.extend(ENGINE.map(String::from));
    let mut server = Watched::spawn(&net, &args, Stdio::null());
    server.wait_for("listening on");
    for (n, reverse) in [(1, false), (2, true)] {
        let mut extra = vec!["-p", "5320", "-t", "2", "-i", "1", "-P", "2", "-O", "1"];
        if reverse {
            extra.push("-R");
        }
        let v = iperf3_json(&net, &extra);
        let lines = wait_lines(&log, n, &mut server);
        let r: serde_json::Value = serde_json::from_str(&lines[n - 1]).unwrap();
        assert_eq!(r["result"], "ok", "{r}");
        assert_eq!(r["streams"], 2, "{r}");
        assert_eq!(r["direction"], if reverse { "reverse" } else { "forward" });
        // What pScheduler's parser reads: the intervals (omitted ones
        // flagged) and the end sums.
        let ivs = v["intervals"].as_array().unwrap();
        assert!(ivs.iter().any(|i| i["sum"]["omitted"] == true), "{v}");
        assert!(ivs.iter().any(|i| i["sum"]["omitted"] == false), "{v}");
        assert!(
            v["end"]["sum_received"]["bytes"].as_u64().unwrap() > 0,
            "{v}"
        );
        assert_eq!(v["end"]["streams"].as_array().unwrap().len(), 2, "{v}");
    }
}

/// A stock client of side B, denied by serve on `port`: it is told so.
fn denied_client(net: &TestNet, port: u16) {
    let out = net
        .b
        .ns
        .command("timeout")
        .args(["60", "iperf3", "-c", &net.a.ip4.to_string()])
        .args(["-p", &port.to_string(), "-t", "1"])
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("test authorization failed"), "{said}");
}

/// SIGHUP while a test runs: the running test goes on to the end under the
/// settings it started with, and the new ones (here a `deny` naming the
/// client) apply from the next test on; the refusal is told to the client
/// and logged as a JSON line.
#[test]
fn sighup_during_a_test_applies_the_new_limits_from_the_next_test_on() {
    let net = testnet(1);
    let dir = TempDir::new("sighup");
    let log = dir.0.join("tests.jsonl");
    let text = config_text(&net, 5330, &log);
    let conf = dir.file("serve.toml", &text);
    let mut server = serve_from(&net, &conf, &[]);

    let client = net
        .b
        .ns
        .command("timeout")
        .args([
            "60",
            "iperf3",
            "-c",
            &net.a.ip4.to_string(),
            "-p",
            "5330",
            "-J",
        ])
        .args(["-t", "3"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = common::Reap(client);
    // Control and data connection up: the test runs.
    let err = server.err.clone();
    wait_established(
        &net,
        5330,
        2,
        &mut [&mut client.0, &mut server.child.0],
        &|| format!("serve: {}", err.lock().unwrap()),
    );
    // The client held still until serve has reloaded, so that the reload
    // lands during the test however slow the machine.
    common::kill_tree("-STOP", client.0.id());
    std::fs::write(&conf, format!("{text}deny = [\"{}\"]\n", net.b.ip4)).unwrap();
    server.signal("-HUP");
    server.wait_for("reloaded");
    common::kill_tree("-CONT", client.0.id());
    let mut json = String::new();
    std::io::Read::read_to_string(&mut client.0.stdout.take().unwrap(), &mut json).unwrap();
    let status = client.0.wait().unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(status.success() && v.get("error").is_none(), "{v}");
    let lines = wait_lines(&log, 1, &mut server);
    let r: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(r["result"], "ok", "the running test is not dropped: {r}");
    assert_eq!(
        r["bytes_received"], v["end"]["sum_received"]["bytes"],
        "{r}"
    );

    // The next test: denied, told, logged.
    let denied = || denied_client(&net, 5330);
    denied();
    let lines = wait_lines(&log, 2, &mut server);
    let r: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(r["result"], "refused", "{r}");
    assert_eq!(r["reason"], "denied", "{r}");
    // The whole message, as the text line says it.
    assert_eq!(
        r["message"],
        format!(
            "refused: client {} is not allowed (the server's allow/deny lists)",
            net.b.ip4
        ),
        "{r}"
    );
    let at: std::net::SocketAddr = r["client"].as_str().unwrap().parse().unwrap();
    assert_eq!(at.ip(), std::net::IpAddr::V4(net.b.ip4), "{r}");

    // A reload whose file is bad keeps the running configuration.
    std::fs::write(&conf, format!("{text}deny = [\"not-an-address\"]\n")).unwrap();
    server.signal("-HUP");
    server.wait_for("reload failed");
    assert!(
        server.err.lock().unwrap().contains("not-an-address"),
        "{}",
        server.err.lock().unwrap()
    );
    denied();
    // One that serve would refuse at its next start (it was taken, its
    // --max-conns kept for a restart that would then fail).
    std::fs::write(&conf, format!("{text}max_conns = 4\nmax_streams = 10\n")).unwrap();
    server.signal("-HUP");
    server.wait_for("serve would refuse this configuration at its next start");
    denied();
}

/// A reload as `--user nobody` (serve opened its log file as root, before
/// the drop): a log file serve made is nobody's, so the reload opens it
/// again; one it cannot open (root's, there before) stays open and the
/// reload says so — either way the new `deny` applies (the whole reload
/// used to fail on the log file, and the deny list never came in force).
#[test]
fn a_reload_as_nobody_applies_and_keeps_the_log_file_it_cannot_open() {
    let net = testnet(1);
    let out = Command::new("id").args(["-u", "nobody"]).output().unwrap();
    assert!(out.status.success(), "no user nobody here");
    let nobody: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    for made_by_serve in [true, false] {
        let dir = TempDir::new(&format!("reload-nobody-{made_by_serve}"));
        let log = dir.0.join("tests.jsonl");
        if !made_by_serve {
            std::fs::write(&log, "").unwrap();
        }
        let text = config_text(&net, 5331, &log) + "user = \"nobody\"\n";
        let conf = dir.file("serve.toml", &text);
        let mut server = serve_from(&net, &conf, &[]);
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&log).unwrap());
        assert_eq!(
            owner == nobody,
            made_by_serve,
            "the log file's owner {owner}"
        );
        std::fs::write(&conf, format!("{text}deny = [\"{}\"]\n", net.b.ip4)).unwrap();
        server.signal("-HUP");
        server.wait_for("xtcp serve: reloaded");
        let err = server.err.lock().unwrap().clone();
        assert_eq!(
            err.contains("so kept: writing to the log file open"),
            !made_by_serve,
            "{err}"
        );
        denied_client(&net, 5331);
        let lines = wait_lines(&log, 1, &mut server);
        let r: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(r["reason"], "denied", "{r}");
        server.signal("-TERM");
        let (status, err) = server.wait_exit("serve did not stop on SIGTERM");
        assert!(status.success(), "{err}");
    }
}
