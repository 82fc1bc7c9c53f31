//! `xtcp bench` end to end: short sweeps complete, their JSON has every
//! sample (with RTTs where the sender reports them), their SVG is a
//! well-formed image, `--iface` hands the interfaces back as they were, and
//! nothing is left behind. Root needed (CI runs as root).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");

/// One bench at a time: they measure, and the machine may have two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const PAIRS: [&str; 4] = [
    "kernel → kernel",
    "xtcp → kernel",
    "kernel → xtcp",
    "xtcp → xtcp",
];

/// Runs `xtcp bench` (behind `prefix`, e.g. `ip netns exec NS`) with
/// `args`; returns its output and PID (its namespaces are named after it;
/// `ip netns exec` execs the program, so the PID is the same).
fn run_bench(prefix: &[&str], args: &[&str], json: &Path, svg: &Path) -> (Output, u32) {
    let mut cmd = match prefix {
        [first, rest @ ..] => {
            let mut c = Command::new(first);
            c.args(rest).arg(XTCP);
            c
        }
        [] => Command::new(XTCP),
    };
    cmd.arg("bench")
        .args(args)
        .arg("--json")
        .arg(json)
        .arg("--plot")
        .arg(svg);
    output_and_pid(&mut cmd)
}

/// Runs `cmd` to its end, its output collected: the output, and the PID.
fn output_and_pid(cmd: &mut Command) -> (Output, u32) {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

/// The lines of bench's table that name a pair: its rows. (The note
/// under it on a host that was not quiet names one too.)
fn table_rows(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|l| PAIRS.iter().any(|p| l.contains(p)) && !l.starts_with("The host was not quiet"))
}

fn temp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()))
}

fn assert_success(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "xtcp bench failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The record's samples, after checking its layout: `{"meta", "samples"}`,
/// meta describing this machine and this run (`args` among its command
/// line), each sample's CPU split into user and system, xtcp's counters
/// for each xtcp end, and the offloads during its run.
fn samples(json: &Path) -> Vec<serde_json::Value> {
    check_schema(json);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    check_meta(&v["meta"]);
    let samples = v["samples"].as_array().unwrap().clone();
    for s in &samples {
        check_sample(s);
    }
    samples
}

/// The record validates against the documented schema
/// (docs/bench-record.schema.json, with python3's jsonschema).
fn check_schema(json: &Path) {
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench-record.schema.json");
    let check = Command::new("python3")
        .args([
            "-c",
            "import json, sys, jsonschema; s = json.load(open(sys.argv[1])); \
             v = jsonschema.Draft202012Validator(s); \
             errs = [f'{list(e.absolute_path)}: {e.message}' for e in v.iter_errors(json.load(open(sys.argv[2])))]; \
             print('\\n'.join(errs[:20])); sys.exit(1 if errs else 0)",
        ])
        .arg(&schema)
        .arg(json)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{} does not validate against the schema: {}{}",
        json.display(),
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

fn check_meta(m: &serde_json::Value) {
    assert_eq!(m["schema"], 4, "{m}");
    assert_eq!(m["xtcp_version"], env!("CARGO_PKG_VERSION"), "{m}");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(m["kernel"], release.trim(), "{m}");
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(m["cpus"], cpus, "{m}");
    assert!(m["memory_bytes"].as_u64().unwrap() > 1 << 28, "{m}");
    assert!(m["date"].as_str().unwrap().ends_with('Z'), "{m}");
    assert_eq!(m["command_line"][1], "bench", "{m}");
    for k in ["loadavg_before", "loadavg_after"] {
        assert_eq!(m[k].as_array().unwrap().len(), 3, "{k}: {m}");
    }
    assert_eq!(m["drivers"][0], "veth", "{m}");
    assert_eq!(m["offloads"]["a"]["tso"], "off", "{m}");
    // The commit the binary was built from, where it was built in git.
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if let Some(head) = head {
        let built = m["git_commit"].as_str().unwrap_or_else(|| panic!("{m}"));
        assert!(
            built == head || built == format!("{head}-dirty"),
            "built from {built}, HEAD is {head}"
        );
    }
}

fn check_sample(s: &serde_json::Value) {
    let pair = s["pair"].as_str().unwrap();
    let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("no {k}: {s}"));
    // iperf3's totals are user + system (both rounded in its output).
    for side in ["sender", "receiver"] {
        let total = f(&format!("cpu_{side}"));
        let parts = f(&format!("cpu_{side}_user")) + f(&format!("cpu_{side}_system"));
        assert!(
            (total - parts).abs() < 0.5,
            "{side}: {total} vs {parts}: {s}"
        );
    }
    for (end, is_xtcp) in [
        ("engine_client", pair.starts_with("xtcp")),
        ("engine_server", pair.ends_with("xtcp")),
    ] {
        let e = &s[end];
        assert_eq!(!e.is_null(), is_xtcp, "{end}: {s}");
        if is_xtcp {
            let n = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("no {k}: {e}"));
            assert!(n("turns") > 0 && n("tx_full_turns") <= n("turns"), "{e}");
            for k in [
                "drop_malformed",
                "drop_not_tcp",
                "drop_checksum",
                "drop_oversize",
            ] {
                assert_eq!(n(k), 0, "a clean veth run drops nothing: {k}: {e}");
            }
        }
    }
    assert!(s["offloads"]["a"]["gro"].is_string(), "{s}");
    assert!(s["qdisc"].as_str().unwrap().starts_with("qdisc"), "{s}");
    // Both ends ran the point's congestion control, whatever the host's
    // default (the kernel's ends read it from their sockets), and the
    // record says so.
    let cc = s["cc"].as_str().unwrap();
    assert!(cc == "cubic" || cc == "reno", "{s}");
    assert_eq!(s["sender_congestion"], cc, "{pair}: {s}");
    assert_eq!(s["receiver_congestion"], cc, "{pair}: {s}");
    check_counts(s);
}

/// The bytes behind a sample's Gbit/s, held to counts that do not come
/// from where they do (the client's report of what the server received):
/// the server's own document, what the link carried, what the client
/// wrote.
fn check_counts(s: &serde_json::Value) {
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("no {k}: {s}"));
    let bytes = n("bytes");
    assert!(bytes > 0, "{s}");
    // Gbit/s is those bytes over the receiver's seconds.
    let (gbps, secs) = (s["gbps"].as_f64().unwrap(), s["seconds"].as_f64().unwrap());
    let expect = bytes as f64 * 8.0 / secs / 1e9;
    assert!(
        (gbps - expect).abs() <= 1e-9 * expect,
        "{gbps} vs {expect}: {s}"
    );
    // The server's own count (a stock iperf3 server's for xtcp → kernel),
    // as the client relayed it.
    assert_eq!(n("server_bytes"), bytes, "{s}");
    // The link carried every byte received, each packet with IPv4 and TCP
    // headers of 40 bytes at least (veth counts from the IP header on where
    // an XDP program runs on it, whole Ethernet frames where none does, as
    // a NIC does): an over-count cannot hide here.
    let (link, packets) = (n("link_rx_bytes"), n("link_rx_packets"));
    assert!(
        bytes + 40 * packets <= link,
        "{bytes} bytes received, but B's link received {link} bytes in {packets} packets: {s}"
    );
    // The client wrote at least that, and at most what the sender's and the
    // receiver's buffers hold a stream more (still on the way, or unread
    // when the test ended): xtcp's auto-tuned 4 MiB each way, the kernel's
    // `tcp_wmem` and `tcp_rmem` (new namespaces take the host's), or the
    // point's own sizes where it sets them.
    let sent = n("sent_bytes");
    let max = |f: &str, axis: &str| {
        let v = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{f}")).unwrap();
        let m: u64 = v.split_whitespace().last().unwrap().parse().unwrap();
        let a = s[axis].as_str().unwrap_or("auto");
        let size = |t: &str, k: u64| t.parse::<u64>().ok().map(|v| v * k);
        let point = match a.as_bytes().last() {
            Some(b'K') => size(&a[..a.len() - 1], 1 << 10),
            Some(b'M') => size(&a[..a.len() - 1], 1 << 20),
            _ => size(a, 1),
        };
        // The kernel doubles a socket buffer that is set.
        m.max(4 << 20).max(2 * point.unwrap_or(0))
    };
    let buffers = n("streams") * (max("tcp_wmem", "sndbuf") + max("tcp_rmem", "rcvbuf"));
    assert!(
        bytes <= sent && sent - bytes <= buffers,
        "{bytes} bytes received of {sent} written (buffers hold at most {buffers}): {s}"
    );
}

/// Checks the SVG with python3's XML parser: an `<svg>` root with at least
/// `lines` polylines, and `texts` among its text.
fn check_svg(svg: &Path, lines: usize, texts: &[&str]) {
    let check = Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); \
             ns = '{http://www.w3.org/2000/svg}'; assert r.tag == ns + 'svg'; \
             n = len(r.findall(ns + 'polyline')); \
             assert n >= int(sys.argv[2]), n; \
             t = ' '.join(x.text or '' for x in r.iter(ns + 'text')); \
             assert all(w in t for w in sys.argv[3:]), t",
        ])
        .arg(svg)
        .arg(lines.to_string())
        .args(texts)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "the SVG does not parse or lacks lines or text: {}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// No namespace of the bench run with this PID is left.
fn assert_no_bench_namespaces(pid: u32) {
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(
        !ns.contains(&format!("xtcp-a{pid}x")) && !ns.contains(&format!("xtcp-b{pid}x")),
        "namespaces left behind: {ns}"
    );
}

#[test]
fn short_sweep_writes_every_sample_and_a_plot_and_cleans_up() {
    let _serial = serial();
    // Programs loaded from here on (less a second for the kernel's clock
    // conversion) are the bench's, or of other processes that hold them.
    let since = std::time::SystemTime::now() - Duration::from_secs(1);
    let (json, svg) = (temp("bench.json"), temp("bench.svg"));
    let (out, pid) = run_bench(&[], &["--mtu", "1500,65535", "-t", "1"], &json, &svg);
    let text = assert_success(&out);
    // The table: a row per MTU and pair (rows begin with the MTU; a note
    // under the table may name a pair too).
    for pair in PAIRS {
        let rows = text
            .lines()
            .filter(|l| {
                l.contains(pair) && l.trim_start().starts_with(|c: char| c.is_ascii_digit())
            })
            .count();
        assert_eq!(rows, 2, "{pair} twice in {text}");
    }
    // The congestion control every end ran, and the host's default.
    let host = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    let said = format!(
        "Every end runs cubic (iperf3's -C on every client, which the server takes too; xtcp's \
         --cc; this host's default is {}).",
        host.trim()
    );
    assert!(text.contains(&said), "{said}: {text}");
    // How each kind of client sends, where the table has no column for it.
    assert!(
        text.contains(
            "The kernel's clients copy every byte they send from iperf3's buffer (iperf3 \
             without -Z), xtcp's send from frames filled once (-Z)"
        ),
        "{text}"
    );
    let samples = samples(&json);
    assert_eq!(samples.len(), 8, "{samples:?}");
    check_table(&text, &samples);
    for s in &samples {
        assert!(s["gbps"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["cpu_s_per_gib"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["ping_rtt_us"].as_f64().unwrap() > 0.0, "{s}");
        assert_queue_delay(s, 1);
        assert_xdp(s);
        if s["pair"] != "kernel → kernel" {
            assert!(s["ratio"].as_f64().unwrap() > 0.0, "{s}");
        }
    }
    let mtus: BTreeSet<u64> = samples.iter().map(|s| s["mtu"].as_u64().unwrap()).collect();
    assert_eq!(mtus.into_iter().collect::<Vec<_>>(), vec![1500, 65535]);
    // Gbit/s and CPU panels with a line per pair, the MTU on the x axis.
    check_svg(&svg, 8, &["Gbit/s by MTU", "1500", "65535"]);
    // The record read back says what the run said of its ends, before the
    // same table: the host's default congestion control is in its meta.
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["meta"]["host_cc"], host.trim(), "{}", v["meta"]);
    let again = Command::new(XTCP)
        .args(["bench", "--from"])
        .arg(&json)
        .output()
        .unwrap();
    let again = assert_success(&again);
    let said: Vec<&str> = text
        .lines()
        .take_while(|l| !(l.contains("pair") && l.contains("Gbit/s")))
        .filter(|l| l.starts_with("The ") || l.starts_with("Every end runs"))
        .collect();
    assert_eq!(said.len(), 3, "offloads, cc, copies: {text}");
    for line in said {
        assert!(again.contains(line), "{line:?} in {again}");
    }
    check_table(&again, &samples);
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&svg);
    assert_no_bench_namespaces(pid);
    // Each xtcp end attached a steering program; none outlives its
    // process (the kernel frees them shortly after: wait, bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = xtcp_engine::xdp::orphaned_steering_programs(since).unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "steering programs left loaded: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A busy loop of its own (bash, builtins only: no process comes and
/// goes), for five minutes at most; killed on drop.
struct Hog(std::process::Child);

impl Hog {
    fn start() -> Hog {
        Hog(Command::new("bash")
            .args(["-c", "while [ $SECONDS -lt 300 ]; do :; done"])
            .spawn()
            .unwrap())
    }

    /// Its CPU time so far, clock ticks (`/proc/PID/stat` utime + stime).
    fn ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0.id())).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<u64> = after
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // Fields 14 and 15 of the line; `f` starts at field 4.
        f[10] + f[11]
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Another process busy during the runs: each sample records it as the
/// busiest other process, with no more CPU than the hog's own count says
/// it used, and bench says under the table that the host was not quiet.
/// (Where a process of the host's own was busier still in a run, that one
/// is recorded: it is checked against `/proc` instead.)
#[test]
fn a_busy_host_is_recorded_with_each_run_and_said() {
    let _serial = serial();
    let (json, svg) = (temp("bench-busy.json"), temp("bench-busy.svg"));
    let hog = Hog::start();
    let hog_pid = u64::from(hog.0.id());
    let before = hog.ticks();
    let (out, pid) = run_bench(&[], &["--mtu", "1500", "-t", "1"], &json, &svg);
    let used = (hog.ticks() - before) as f64 / 100.0;
    drop(hog);
    let text = assert_success(&out);
    let samples = samples(&json);
    assert_eq!(samples.len(), 4, "{samples:?}");
    // The hog's CPU in each run is at least its rate there times the
    // run's test seconds (the run is longer: the client starts and ends
    // around them), and the runs do not overlap: together they are no
    // more than what the hog used in all.
    let mut in_runs = 0.0;
    for s in &samples {
        let b = &s["other_busiest"];
        let pct = b["cpu_pct"].as_f64().unwrap();
        assert!(pct >= 10.0, "a busy loop on a host of few cores: {s}");
        assert!(s["other_cpu_pct"].as_f64().unwrap() >= pct, "{s}");
        assert!(s["steal_pct"].as_f64().unwrap() >= 0.0, "{s}");
        if b["pid"] == hog_pid {
            assert_eq!(b["comm"], "bash", "{s}");
            in_runs += pct / 100.0 * s["seconds"].as_f64().unwrap();
        } else {
            eprintln!("busier than the hog: {b}");
            let comm = std::fs::read_to_string(format!("/proc/{}/comm", b["pid"]));
            if let Ok(comm) = comm {
                assert_eq!(b["comm"], comm.trim(), "{s}");
            }
        }
    }
    // (A clock tick of rounding per reading.)
    assert!(
        in_runs <= used + 0.1,
        "{in_runs:.2} CPU-s in the runs, the hog used {used:.2}"
    );
    assert!(
        text.contains("The host was not quiet: other processes used up to"),
        "{text}"
    );
    // The note names the busiest of the run where others took the most.
    let most = samples
        .iter()
        .max_by(|a, b| {
            let pct = |s: &serde_json::Value| s["other_cpu_pct"].as_f64().unwrap();
            pct(a).total_cmp(&pct(b))
        })
        .unwrap();
    let b = &most["other_busiest"];
    let named = format!("{} (pid {})", b["comm"].as_str().unwrap(), b["pid"]);
    assert!(text.contains(&named), "{named} in {text}");
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&svg);
    assert_no_bench_namespaces(pid);
}

#[test]
fn ring_sweep_measures_rtt_and_queueing_delay_and_plots_against_the_ring() {
    let _serial = serial();
    let (json, svg) = (temp("bench-ring.json"), temp("bench-ring.svg"));
    let (out, pid) = run_bench(
        &[],
        &[
            "--mtu",
            "9000",
            "--ring",
            "256,2048",
            "--tx-burst",
            "32",
            // Three readings of the RTT a stream at least.
            "-t",
            "3",
        ],
        &json,
        &svg,
    );
    let text = assert_success(&out);
    // Columns for the axes that vary or are not at their default; the
    // frame size is neither.
    let header = text
        .lines()
        .find(|l| l.contains(" pair ") && l.contains("Gbit/s"))
        .unwrap_or_else(|| panic!("no table header in {text}"));
    assert!(!header.contains("frame"), "{header}");
    for header in [
        "ring",
        "burst",
        "ping µs",
        "min RTT µs",
        "RTT µs",
        "qdelay µs",
        "drop %",
    ] {
        assert!(text.contains(header), "no {header} column: {text}");
    }
    let samples = samples(&json);
    assert_eq!(samples.len(), 8, "{samples:?}");
    let rings: BTreeSet<u64> = samples
        .iter()
        .map(|s| s["ring"].as_u64().unwrap())
        .collect();
    assert_eq!(rings.into_iter().collect::<Vec<_>>(), vec![256, 2048]);
    for s in &samples {
        assert_eq!(s["mtu"], 9000, "{s}");
        assert_eq!(s["frame_size"], "auto", "{s}");
        assert_eq!(s["tx_burst"], 32, "{s}");
        assert!(s["ping_rtt_us"].as_f64().unwrap() > 0.0, "{s}");
        assert_queue_delay(s, 3);
        assert_xdp(s);
    }
    // Gbit/s, CPU and RTT panels with a line per pair, and the idle RTT.
    check_svg(
        &svg,
        13,
        &["Gbit/s by ring", "RTT under load", "256", "2048"],
    );
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&svg);
    assert_no_bench_namespaces(pid);
}

/// A closed terminal (SIGHUP) and then two Ctrl-C in the middle of a sweep:
/// bench stops, prints and records the runs it completed (the record says
/// it is incomplete), removes its namespaces, and exits 130. (A second
/// Ctrl-C used to end it at once and leave them, and SIGHUP too.)
#[test]
fn signals_keep_the_runs_done_and_leave_nothing_behind() {
    use std::io::BufRead;
    let _serial = serial();
    let json = temp("bench-signals.json");
    let mut child = Command::new(XTCP)
        .args([
            "bench", "--mtu", "1500", "-t", "2", "--repeat", "3", "--json",
        ])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // A run done: its progress line (standard error is no terminal).
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    while !seen.contains("[1/12]") {
        let l = err.next().expect("bench ended early").unwrap();
        seen.push_str(&l);
        seen.push('\n');
    }
    for sig in ["-HUP", "-INT", "-INT"] {
        assert!(
            Command::new("kill")
                .args([sig, &pid.to_string()])
                .status()
                .unwrap()
                .success()
        );
    }
    let rest: Vec<String> = err.map(Result::unwrap).collect();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let rest = rest.join("\n");
    assert_eq!(out.status.code(), Some(130), "{seen}{rest}");
    assert!(rest.contains("xtcp bench: interrupted after "), "{rest}");
    assert!(
        text.contains(PAIRS[0]),
        "the runs done are in the table: {text}"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["meta"]["incomplete"], "interrupted", "{v}");
    let n = v["samples"].as_array().unwrap().len();
    assert!((1..12).contains(&n), "{n} samples");
    let _ = std::fs::remove_file(&json);
    assert_no_bench_namespaces(pid);
}

/// A run that fails (here an iperf3 client, the second or the first, made
/// to fail by a wrapper first in PATH) ends the sweep: the runs before it are printed and
/// recorded, the error says where it stopped, and nothing is left. (One
/// failure used to lose every result.) Where the first run fails, nothing
/// was measured, and a record and plot already at --json and --plot stay
/// as they were (a review found an earlier record replaced by an empty
/// one).
#[test]
fn a_failed_run_keeps_the_runs_before_it() {
    let _serial = serial();
    let (json, svg, dir) = (
        temp("bench-failed.json"),
        temp("bench-failed.svg"),
        temp("bench-failed-bin"),
    );
    std::fs::create_dir_all(&dir).unwrap();
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v iperf3"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let count = dir.join("count");
    std::fs::write(
        dir.join("iperf3"),
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" -c \"*)\n  n=$(($(cat {c} 2>/dev/null || echo 0) + 1)); echo $n > {c}\n  if [ $n -eq $FAIL_AT ]; then echo '{{\"error\": \"made to fail\"}}'; exit 1; fi;;\nesac\nexec {real} \"$@\"\n",
            c = count.display(),
            real = real.trim()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .args(["+x", dir.join("iperf3").to_str().unwrap()])
        .status()
        .unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for fail_at in [2, 1] {
        let _ = std::fs::remove_file(&count);
        std::fs::write(&json, b"an earlier record").unwrap();
        std::fs::write(&svg, b"an earlier plot").unwrap();
        let (out, pid) = output_and_pid(
            Command::new(XTCP)
                .args(["bench", "--mtu", "1500", "-t", "1", "--json"])
                .arg(&json)
                .arg("--plot")
                .arg(&svg)
                .env("PATH", &path)
                .env("FAIL_AT", fail_at.to_string()),
        );
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(1), "{err}");
        // (xtcp's clients are no iperf3: the second iperf3 client is the
        // third run's, kernel → xtcp.)
        let ran = if fail_at == 2 { 2 } else { 0 };
        assert!(
            err.contains(&format!("the sweep stopped after {ran} of 4 runs"))
                && err.contains("made to fail"),
            "{err}"
        );
        assert_no_bench_namespaces(pid);
        if ran == 0 {
            assert!(
                err.contains(&format!(
                    "; {} and {} left as they were",
                    json.display(),
                    svg.display()
                )),
                "{err}"
            );
            assert_eq!(std::fs::read(&json).unwrap(), b"an earlier record");
            assert_eq!(std::fs::read(&svg).unwrap(), b"an earlier plot");
            continue;
        }
        // kernel → kernel and xtcp → kernel ran; kernel → xtcp's client
        // failed.
        assert!(text.contains(PAIRS[0]) && text.contains(PAIRS[1]), "{text}");
        for (flag, p) in [("--json", &json), ("--plot", &svg)] {
            assert!(
                err.contains(&format!(
                    "xtcp bench: {flag} written to {} (it replaced the file that was there)",
                    p.display()
                )),
                "{err}"
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert!(
            v["meta"]["incomplete"]
                .as_str()
                .is_some_and(|e| e.contains("made to fail")),
            "{v}"
        );
        assert_eq!(v["samples"].as_array().unwrap().len(), ran, "{v}");
    }
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&svg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader of the table that goes away (`| head -1`) ends the printing,
/// not the sweep: with `--json` every run is measured and recorded, and
/// bench says where; without a record to hold the results, the sweep stops
/// after the point under way, and says why. (It panicked on the broken
/// pipe before, losing the sweep and its record.) The second run is on one
/// core (`taskset -c 0`): bench first says that its two xtcp ends will
/// share it; on two, it does not.
#[test]
fn a_closed_standard_output_ends_the_table_not_the_record() {
    use std::io::BufRead;
    let _serial = serial();
    let json = temp("bench-closed.json");
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    for record in [true, false] {
        // taskset execs xtcp: the same process.
        let mut cmd = Command::new(if record { XTCP } else { "taskset" });
        if !record {
            cmd.args(["-c", "0", XTCP]);
        }
        cmd.args(["bench", "-t", "1"]);
        if record {
            cmd.args(["--mtu", "1500", "--json"]).arg(&json);
        } else {
            cmd.args(["--mtu", "1500,9000"]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        {
            // One line, then the reader is gone.
            let mut first = String::new();
            std::io::BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut first)
                .unwrap();
            assert!(!first.is_empty(), "bench printed nothing");
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
        assert_no_bench_namespaces(pid);
        let note = "this process may run on core 0 only: the two ends of xtcp → xtcp share it";
        if !record || two {
            assert_eq!(
                err.contains(note),
                !record,
                "on one core: {}: {err}",
                !record
            );
        }
        if record {
            assert!(out.status.success(), "{err}");
            assert!(
                err.contains(&format!(
                    "standard output was closed before the table's end; the sweep ran to its \
                     end, its results in {}",
                    json.display()
                )),
                "{err}"
            );
            assert_eq!(samples(&json).len(), 4);
            assert!(
                err.contains(&format!(
                    "xtcp bench: --json written to {}\n",
                    json.display()
                )),
                "a new file: {err}"
            );
        } else {
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(
                err.contains(
                    "the sweep stopped after 4 of 8 runs: standard output was closed, and no \
                     --json or --plot holds the results"
                ),
                "{err}"
            );
        }
    }
    let _ = std::fs::remove_file(&json);
}

/// A program bench runs that is not in PATH is named, with its package,
/// before anything is set up (a missing iperf3 showed as "the server exited
/// (exit status: 1) before it was ready: ", with the pair named twice).
#[test]
fn a_missing_program_is_named_with_its_package() {
    let dir = temp("bench-path");
    std::fs::create_dir_all(&dir).unwrap();
    for p in ["ip", "tc", "ss", "ethtool", "sysctl"] {
        let real = String::from_utf8(
            Command::new("sh")
                .args(["-c", &format!("command -v {p}")])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let _ = std::fs::remove_file(dir.join(p));
        std::os::unix::fs::symlink(real.trim(), dir.join(p)).unwrap();
    }
    let out = Command::new(XTCP)
        .args(["bench", "--mtu", "1500", "-t", "1"])
        .env("PATH", &dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "bench runs iperf3, ping, which are not in PATH: apt install iperf3 iputils-ping"
        ),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A namespace of the test's own, deleted on drop (also on panic).
struct TestNs(String);

impl TestNs {
    fn new() -> TestNs {
        let name = format!("xtcp-t{}", std::process::id());
        ip(&["netns", "add", &name]);
        TestNs(name)
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The MTU of `iface` in namespace `ns`.
fn mtu_in(ns: &str, iface: &str) -> u32 {
    let out = ip(&["-n", ns, "-o", "link", "show", "dev", iface]);
    let w: Vec<&str> = out.split_whitespace().collect();
    let i = w.iter().position(|x| *x == "mtu").unwrap();
    w[i + 1].parse().unwrap()
}

#[test]
fn iface_takes_over_a_veth_pair_and_hands_it_back_as_it_was() {
    let _serial = serial();
    let ns = TestNs::new();
    ip(&[
        "-n", &ns.0, "link", "add", "va", "type", "veth", "peer", "name", "vb",
    ]);
    // MTUs other than the sweep's, to see them put back.
    ip(&["-n", &ns.0, "link", "set", "dev", "va", "mtu", "1400"]);
    ip(&["-n", &ns.0, "link", "set", "dev", "vb", "mtu", "1600"]);
    let (json, svg) = (temp("bench-iface.json"), temp("bench-iface.svg"));
    let (out, pid) = run_bench(
        &["ip", "netns", "exec", &ns.0],
        &["--iface", "va,vb", "--mtu", "1500", "-t", "1"],
        &json,
        &svg,
    );
    let text = assert_success(&out);
    for pair in PAIRS {
        let rows = table_rows(&text).filter(|l| l.contains(pair)).count();
        assert_eq!(rows, 1, "{pair} once in {text}");
    }
    let samples = samples(&json);
    assert_eq!(samples.len(), 4, "{samples:?}");
    for s in &samples {
        assert_eq!(s["mtu"], 1500, "{s}");
        assert!(s["gbps"].as_f64().unwrap() > 0.0, "{s}");
    }
    // Back in the test's namespace, with the MTUs they had.
    assert_eq!(mtu_in(&ns.0, "va"), 1400);
    assert_eq!(mtu_in(&ns.0, "vb"), 1600);
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&svg);
    assert_no_bench_namespaces(pid);
}

/// Two interfaces that are not connected (one end of each of two veth
/// pairs): the idle ping finds no path, and the error asks whether they
/// are connected; both go back as they were.
#[test]
fn iface_of_two_unconnected_interfaces_asks_whether_they_are() {
    let _serial = serial();
    let ns = TestNs::new();
    for (a, b) in [("ua", "ux"), ("ub", "uy")] {
        ip(&[
            "-n", &ns.0, "link", "add", a, "type", "veth", "peer", "name", b,
        ]);
    }
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, XTCP, "bench", "--iface", "ua,ub"])
        .args(["--mtu", "1500", "-t", "1"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("idle RTT (are ua and ub connected: a cable between the two ports, or the two ends of one veth pair?)"),
        "{err}"
    );
    assert_eq!(mtu_in(&ns.0, "ua"), 1500, "handed back");
    assert_eq!(mtu_in(&ns.0, "ub"), 1500, "handed back");
}

#[test]
fn iface_errors_name_the_interface_and_leave_nothing_behind() {
    for (iface, want) in [
        ("nosuch0,nosuch1", "`nosuch0` does not exist"),
        ("lo,lo", "`lo` given for both sides"),
        ("nosuch0", "two interfaces"),
    ] {
        let out = Command::new(XTCP)
            .args(["bench", "--iface", iface, "-t", "1"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--iface {iface} succeeded");
        assert!(err.contains(want), "--iface {iface}: `{want}` not in {err}");
    }
}

/// Where the record and the plot would go is checked before anything
/// runs: a sweep is not lost at its end to a path that cannot be written,
/// and nothing is set up.
#[test]
fn unwritable_outputs_are_refused_before_the_sweep() {
    let svg = temp("early.svg");
    for (flag, path, want) in [
        (
            "--json",
            "/nonexistent/dir/x.json",
            "--json /nonexistent/dir/x.json: no directory",
        ),
        (
            "--plot",
            "/nonexistent/dir/x.svg",
            "--plot /nonexistent/dir/x.svg: no directory",
        ),
        ("--json", "/etc", "--json /etc is a directory"),
        // A directory where no file can be made.
        (
            "--json",
            "/proc/x.json",
            "--json /proc/x.json: cannot make a file in /proc",
        ),
        (
            "--plot",
            "/proc/x.svg",
            "--plot /proc/x.svg: cannot make a file in /proc",
        ),
    ] {
        let (out, pid) = output_and_pid(
            Command::new(XTCP)
                .args(["bench", "--mtu", "1500", "-t", "1", flag, path])
                .args(
                    ["--plot".as_ref(), svg.as_os_str()]
                        .iter()
                        .filter(|_| flag == "--json"),
                ),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag} {path}: {err}");
        assert!(err.contains(want), "{flag} {path}: `{want}` not in {err}");
        // Refused before the sweep: no point ran, no network was made.
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_no_bench_namespaces(pid);
    }
    assert!(!svg.exists(), "no plot of a sweep that did not run");
}

/// Every client (stock iperf3 and xtcp's) reports the sender's RTT each
/// interval; from tests of `secs` seconds (a reading a second), bench takes
/// the least and the mean, and the queueing delay is the one less the
/// other, never negative. Under three readings a stream they are not shown.
fn assert_queue_delay(s: &serde_json::Value, secs: u32) {
    if secs < 3 {
        for k in ["min_rtt_us", "rtt_us", "queue_delay_us"] {
            assert!(s[k].is_null(), "{k} from {secs} readings: {s}");
        }
        return;
    }
    let rtt = s["rtt_us"].as_f64().unwrap_or_else(|| panic!("{s}"));
    let min = s["min_rtt_us"].as_f64().unwrap_or_else(|| panic!("{s}"));
    assert!(min > 0.0 && min <= rtt, "{s}");
    let q = s["queue_delay_us"]
        .as_f64()
        .unwrap_or_else(|| panic!("{s}"));
    assert!(q >= 0.0, "{s}");
    assert!((q - (rtt - min)).abs() < 1e-6, "{s}");
}

/// The XDP statistics of a sample: one object per xtcp end (none for a
/// kernel end), each consistent in itself — drops at most what was
/// steered, the share their quotient, the queues summing to the totals,
/// veth's own count (what the drops are on veth) equal to the sockets'
/// `rx_ring_full + rx_dropped` (as cli/tests/xdp_stats.rs finds) — and
/// `drop_pct` the receiving xtcp end's share.
fn assert_xdp(s: &serde_json::Value) {
    let pair = s["pair"].as_str().unwrap();
    let client = pair.starts_with("xtcp");
    let server = pair.ends_with("xtcp");
    assert_eq!(!s["xdp_client"].is_null(), client, "{s}");
    assert_eq!(!s["xdp_server"].is_null(), server, "{s}");
    let n = |x: &serde_json::Value, f: &str| {
        x[f].as_u64()
            .unwrap_or_else(|| panic!("no number {f} in {x}"))
    };
    for x in [&s["xdp_client"], &s["xdp_server"]] {
        if x.is_null() {
            continue;
        }
        let steered = n(x, "steered");
        let dropped = n(x, "dropped_at_redirect");
        assert!(steered > 0, "an iperf3 test steers packets: {x}");
        assert!(dropped <= steered, "{x}");
        let pct = x["drop_percent"].as_f64().unwrap();
        assert!(
            (pct - dropped as f64 * 100.0 / steered as f64).abs() < 1e-9,
            "{x}"
        );
        assert_eq!(x["driver"], "veth", "{x}");
        assert_eq!(x["drops_source"], "driver", "{x}");
        assert_eq!(n(x, "driver_drops"), dropped, "{x}");
        assert_eq!(n(x, "rx_ring_full") + n(x, "rx_dropped"), dropped, "{x}");
        let queues = x["queues"].as_array().unwrap();
        assert!(!queues.is_empty(), "{x}");
        for f in [
            "rx_dropped",
            "rx_ring_full",
            "rx_fill_ring_empty_descs",
            "rx_invalid_descs",
            "tx_invalid_descs",
            "tx_ring_empty_descs",
            "driver_drops",
        ] {
            let sum: u64 = queues.iter().map(|q| n(q, f)).sum();
            assert_eq!(sum, n(x, f), "{f}: {x}");
        }
    }
    let receiving = if server {
        &s["xdp_server"]
    } else {
        &s["xdp_client"]
    };
    if client || server {
        assert_eq!(s["drop_pct"], receiving["drop_percent"], "{s}");
    } else {
        assert!(
            s["drop_pct"].is_null(),
            "kernel → kernel has no drop share: {s}"
        );
    }
}

/// The axes beyond MTU, buffers and rings, at one short point with each at
/// a value other than its default; each is seen to take effect by what the
/// other side reports: iperf3's own `test_start` (the write size, the
/// streams, the send buffer `net.ipv4.tcp_wmem` gave it), `ethtool -k`
/// (offloads on for the kernel pair only) and `tc` (the queue).
#[test]
fn new_axes_take_effect_at_one_short_point() {
    let _serial = serial();
    let (json, svg) = (temp("bench-axes.json"), temp("bench-axes.svg"));
    let (out, pid) = run_bench(
        &[],
        &[
            "--mtu",
            "9000",
            "--length",
            "63K",
            "--sndbuf",
            "64K",
            "--nodelay",
            "on",
            "--kernel-offloads",
            "on",
            "--kernel-zerocopy",
            "on",
            "-P",
            "2",
            "--kernel-txqueue",
            "100",
            "--cc",
            "reno",
            "-t",
            "1",
        ],
        &json,
        &svg,
    );
    let text = assert_success(&out);
    for header in ["sndbuf", "len", " P ", "nodel", "koff", "kzc", "kq", " cc "] {
        assert!(text.contains(header), "no {header} column: {text}");
    }
    assert!(
        !text.contains("The kernel's clients copy"),
        "kzc on: {text}"
    );
    let samples = samples(&json);
    assert_eq!(samples.len(), 4, "{samples:?}");
    for s in &samples {
        let pair = s["pair"].as_str().unwrap();
        let start = &s["client_start"];
        assert_eq!(start["blksize"], 63 * 1024, "{s}");
        assert_eq!(start["num_streams"], 2, "{s}");
        assert!(s["jain"].as_f64().unwrap() > 0.5, "two streams: {s}");
        if pair.starts_with("kernel") {
            assert_eq!(start["sndbuf_actual"], 65536, "tcp_wmem's send buffer: {s}");
        }
        let on = if pair == PAIRS[0] { "on" } else { "off" };
        for side in ["a", "b"] {
            for k in ["tso", "gso", "gro", "tx"] {
                assert_eq!(s["offloads"][side][k], on, "{pair} {side} {k}: {s}");
            }
        }
        let q = s["qdisc"].as_str().unwrap();
        assert!(q.contains("pfifo") && q.contains("limit 100p"), "{q}");
        assert_eq!(s["kernel_txqueue"], "100", "{s}");
        assert_eq!(s["cc"], "reno", "{s}");
        assert_queue_delay(s, 1);
        assert_xdp(s);
    }
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&svg);
    assert_no_bench_namespaces(pid);
}

/// veth has no AF_XDP zero-copy: asked for on bench's own veth pair, it is
/// a usage error before anything runs (exit 2), saying why and what to
/// give instead.
#[test]
fn zero_copy_on_veth_is_refused_with_the_reason() {
    let (out, pid) = output_and_pid(
        Command::new(XTCP).args(["bench", "--mtu", "1500", "--bind", "zerocopy", "-t", "1"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "--bind zerocopy: the bench's own network is a veth pair, which has no AF_XDP \
             zero-copy; give two NIC ports that have it (--iface A,B"
        ),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
    assert_no_bench_namespaces(pid);
}

/// Flags that would run something else than asked are refused before
/// anything runs: an axis a preset sets (the run would be another
/// experiment under the preset's name, beside its published table), a
/// receive buffer above what iperf3's `-w` takes, an MTU the test network
/// cannot have.
#[test]
fn conflicting_sweep_flags_are_refused_before_anything_runs() {
    for (args, want) in [
        (
            &["--preset", "mss-clip", "--mtu", "1500"][..],
            "--preset mss-clip sets --mtu itself",
        ),
        (
            &["--preset", "ring-queue", "--ring", "64", "--mtu", "1500"][..],
            "--preset ring-queue sets --mtu, --ring itself",
        ),
        (
            &["--rcvbuf", "1G"][..],
            "--rcvbuf 1G: takes auto or a size in 4096..=536870912",
        ),
        // (It failed setting up the test network: "RTNETLINK answers:
        // Invalid argument" from `ip addr add 2001:2::1/64`.)
        (
            &["--mtu", "1500,1000"][..],
            "--mtu 1000: give MTUs from 1280 to 65535 (the bench's network carries IPv6 too, \
             whose least MTU is 1280)",
        ),
        // The interfaces of --iface too: they are given its IPv6 addresses.
        (
            &["--iface", "nosuch0,nosuch1", "--mtu", "576"][..],
            "--mtu 576: give MTUs from 1280 to 65535 (the bench's network carries IPv6 too, \
             whose least MTU is 1280)",
        ),
        // Each named alone (both were named whichever was wrong).
        (&["--repeat", "0"][..], "error: --repeat must be at least 1"),
        (&["--cc", "bbr"][..], "--cc takes cubic, reno, not `bbr`"),
    ] {
        let out = Command::new(XTCP)
            .arg("bench")
            .args(args)
            .args(["-t", "1"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "usage: {args:?}: {err}");
        assert!(err.contains(want), "{args:?}: `{want}` not in {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing runs");
    }
}

/// Each preset runs (its first point, one second per pair), prints the
/// published table next to ours, records which preset it ran, and draws
/// the published figure beside ours; `--from` reads the record back and
/// prints the same comparison.
#[test]
fn every_preset_runs_one_short_point_and_prints_the_published_table() {
    let _serial = serial();
    for (preset, source) in [
        ("loopback-mtu", "net: loopback: set default mtu to 64K"),
        ("lo0-space", "the review raising lo0's MTU"),
        (
            "rcvbuf-small",
            "Network performance regression in Linux kernel 6.6 for small socket size test cases",
        ),
        (
            "ring-queue",
            "ng_eiface(4): Increase default TX queue size to 4096",
        ),
        ("mss-clip", "tcp mss MCLBYTES restriction"),
    ] {
        let (json, svg) = (
            temp(&format!("bench-{preset}.json")),
            temp(&format!("bench-{preset}.svg")),
        );
        let (out, pid) = run_bench(
            &[],
            &["--preset", preset, "--points", "1", "-t", "1"],
            &json,
            &svg,
        );
        let text = assert_success(&out);
        assert!(
            text.contains("Published: ") && text.contains(source),
            "{preset}: {text}"
        );
        assert!(
            text.contains("Ours (this machine; medians):"),
            "{preset}: {text}"
        );
        if preset == "mss-clip" {
            assert!(
                text.contains("zero-copy: not measured here") && text.contains("tests/vm/run.sh"),
                "{text}"
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(v["meta"]["preset"], preset);
        let samples = samples(&json);
        assert_eq!(samples.len(), 4, "{preset}: one point: {samples:?}");
        for s in &samples {
            assert_queue_delay(s, 1);
        }
        check_svg(
            &svg,
            4,
            &["published,", "ours, Gbit/s by", "both, relative to"],
        );
        // The record read back: the same comparison, nothing run.
        let again = Command::new(XTCP)
            .args(["bench", "--from"])
            .arg(&json)
            .output()
            .unwrap();
        let again_text = String::from_utf8_lossy(&again.stdout);
        assert!(again.status.success(), "{again_text}");
        assert!(
            again_text.contains(&format!("--preset {preset}")) && again_text.contains(source),
            "{again_text}"
        );
        let _ = std::fs::remove_file(&json);
        let _ = std::fs::remove_file(&svg);
        assert_no_bench_namespaces(pid);
    }
}

/// Every row of the table `text` printed (one per MTU and pair: the MTU
/// the one axis shown, and the frame size where the samples' is not the
/// default, as in records of schema 2) holds the medians of that MTU's and
/// pair's `samples`, as printed to their decimals (the retransmits'
/// median exactly: whole, or with its `.5`); a row for every MTU and pair
/// sampled.
fn check_table(text: &str, samples: &[serde_json::Value]) {
    let header = text
        .lines()
        .find(|l| l.contains("pair") && l.contains("Gbit/s"))
        .unwrap_or_else(|| panic!("no table in {text}"));
    let frame = |s: &serde_json::Value| match &s["frame_size"] {
        serde_json::Value::Number(n) => n.to_string(),
        v => v.as_str().unwrap_or("auto").to_owned(),
    };
    let frame_shown = samples.iter().any(|s| frame(s) != "auto");
    // Records before schema 4 have no `cc`: their kernel ends ran the
    // host's default, shown as `unset`.
    let cc = |s: &serde_json::Value| s["cc"].as_str().unwrap_or("unset").to_owned();
    let cc_shown = samples.iter().any(|s| cc(s) != "cubic");
    let dims_header = [
        "MTU",
        if frame_shown { " frame" } else { "" },
        if cc_shown { " cc" } else { "" },
        " pair",
    ]
    .concat();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>().join(" ")[..dims_header.len()],
        dims_header,
        "{header}"
    );
    fn median(mut v: Vec<f64>) -> Option<f64> {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        (n > 0).then(|| {
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        })
    }
    // Columns after the pair: the sample's field and its decimals.
    const COLUMNS: [(&str, i32); 11] = [
        ("gbps", 2),
        ("retransmits", 0),
        ("cpu_sender", 1),
        ("cpu_receiver", 1),
        ("cpu_s_per_gib", 2),
        ("ratio", 2),
        ("ping_rtt_us", 0),
        ("min_rtt_us", 0),
        ("rtt_us", 0),
        ("queue_delay_us", 0),
        ("drop_pct", 2),
    ];
    let mut rows = BTreeSet::new();
    for line in table_rows(text) {
        let pair = PAIRS.iter().find(|p| line.contains(**p)).unwrap();
        let (dims, values) = line.split_once(pair).unwrap();
        let dims: Vec<&str> = dims.split_whitespace().collect();
        let mtu: u64 = dims[0].parse().unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            rows.insert((mtu, *pair)),
            "two rows for {mtu} {pair}: {text}"
        );
        let mut printed: Vec<&str> = values.split_whitespace().collect();
        if *pair == PAIRS[0] {
            // No ratio of the kernel pair to itself: the column is blank.
            printed.insert(5, "");
        }
        assert_eq!(printed.len(), COLUMNS.len(), "{line}");
        let of: Vec<&serde_json::Value> = samples
            .iter()
            .filter(|s| s["mtu"] == mtu && s["pair"] == *pair)
            .collect();
        assert!(!of.is_empty(), "a row without samples: {line}");
        let mut want_dims = vec![];
        if frame_shown {
            want_dims.push(frame(of[0]));
        }
        if cc_shown {
            want_dims.push(cc(of[0]));
        }
        assert_eq!(dims[1..], want_dims, "{line}");
        for ((field, decimals), shown) in COLUMNS.iter().zip(printed) {
            let m = median(of.iter().filter_map(|s| s[*field].as_f64()).collect());
            match m {
                _ if *field == "ratio" && *pair == PAIRS[0] => {}
                None => assert_eq!(shown, "-", "{field}: {line}"),
                Some(m) => {
                    let want = m;
                    let got: f64 = shown
                        .parse()
                        .unwrap_or_else(|e| panic!("{field} {e}: {line}"));
                    let half = if *field == "retransmits" {
                        0.0
                    } else {
                        0.5 * 10f64.powi(-decimals)
                    };
                    assert!(
                        (got - want).abs() <= half + 1e-9 * want.abs(),
                        "{field}: printed {got}, the median of the samples {want}: {line}"
                    );
                }
            }
        }
    }
    let sampled: BTreeSet<(u64, &str)> = samples
        .iter()
        .map(|s| {
            let pair = s["pair"].as_str().unwrap();
            (
                s["mtu"].as_u64().unwrap(),
                *PAIRS.iter().find(|p| **p == pair).unwrap(),
            )
        })
        .collect();
    assert_eq!(rows, sampled, "{text}");
}

/// `--from`: the table of a record of this version is the medians of its
/// samples: two repetitions (a median the mean of two), and the same record
/// with a third repetition written in by the test (a median the middle
/// one).
#[test]
fn from_prints_the_medians_of_the_records_samples() {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bench-record-v2.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&rec).unwrap()).unwrap();
    let from = |path: &Path| {
        let out = Command::new(XTCP)
            .args(["bench", "--from"])
            .arg(path)
            .output()
            .unwrap();
        assert_success(&out)
    };
    let two = v["samples"].as_array().unwrap().clone();
    assert!(two.iter().any(|s| s["repeat"] == 1), "two repetitions");
    let text = from(&rec);
    check_table(&text, &two);
    // A record from before bench set the congestion control says so.
    assert!(
        text.contains("cc unset: bench of that version left the kernel's ends at the host's"),
        "{text}"
    );
    // A sweep's flag would not apply: refused, not ignored (a usage error).
    let out = Command::new(XTCP)
        .args(["bench", "--from"])
        .arg(&rec)
        .args(["--mtu", "1500", "--ring", "64"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--mtu, --ring would not apply"), "{err}");
    for flag in [["-t", "7"], ["--repeat", "3"]] {
        let out = Command::new(XTCP)
            .args(["bench", "--from"])
            .arg(&rec)
            .args(flag)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag:?}: {err}");
        assert!(err.contains("cannot be used with"), "{flag:?}: {err}");
    }
    // A third repetition: the first one's figures scaled, each differently,
    // and drops where the record had none.
    let mut three = two.clone();
    for (i, s) in two.iter().filter(|s| s["repeat"] == 0).enumerate() {
        let mut t = s.clone();
        t["repeat"] = 2.into();
        let k = 0.5 + (i % 5) as f64 * 0.4;
        for f in [
            "gbps",
            "cpu_sender",
            "cpu_receiver",
            "cpu_s_per_gib",
            "ratio",
            "ping_rtt_us",
            "min_rtt_us",
            "rtt_us",
            "queue_delay_us",
        ] {
            if let Some(x) = s[f].as_f64() {
                t[f] = (x * k).into();
            }
        }
        t["retransmits"] = (s["retransmits"].as_u64().unwrap() * 3 + 1).into();
        if s["drop_pct"].is_f64() {
            t["drop_pct"] = (0.37 * k).into();
        }
        three.push(t);
    }
    v["samples"] = three.clone().into();
    v["meta"]["repeat"] = 3.into();
    let path = temp("bench-three.json");
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let text = from(&path);
    let _ = std::fs::remove_file(&path);
    check_table(&text, &three);
}

/// A record of an earlier version (a bare list of samples: the bench's
/// record of 2026-12-01, kept in tests/data) is read back: its table,
/// nothing run.
#[test]
fn from_reads_a_record_of_an_earlier_version() {
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bench-record-v1.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&old).unwrap()).unwrap();
    let points: BTreeSet<(u64, String)> = v
        .as_array()
        .expect("a bare list")
        .iter()
        .map(|s| {
            (
                s["mtu"].as_u64().unwrap(),
                s["pair"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let out = Command::new(XTCP)
        .args(["bench", "--from"])
        .arg(&old)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("a bare list of samples (no meta") && text.contains("shows at its default"),
        "{text}"
    );
    // A row (of medians) per MTU and pair.
    let rows = table_rows(&text).count();
    assert_eq!(rows, points.len(), "{text}");
}
