//! Helpers shared by the CLI tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use xtcp_engine::testnet::{Netns, TestNet, TestNetConfig};
use xtcp_engine::worker::bulk::pattern_fill;

/// The binary under test.
pub const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");

/// Engine options of every xtcp end on the test network: copy mode (veth
/// has no zero-copy), verified checksums (offloads are off), and fewer
/// UMEM frames than the default: the rings' 8,192 and 4,096 for the send
/// buffers (8 MiB of 2-KiB frames at MTU 1500, 16 MiB of 4-KiB ones).
pub const ENGINE: [&str; 6] = ["--bind", "copy", "--rx-csum", "verify", "--frames", "12288"];

/// The UMEM frames [`ENGINE`] gives.
pub fn engine_frames() -> u64 {
    let at = ENGINE.iter().position(|a| *a == "--frames").unwrap();
    ENGINE[at + 1].parse().unwrap()
}

/// A test network with MTU 1500 and `queues` queues per side.
pub fn testnet(queues: u32) -> TestNet {
    TestNet::new(TestNetConfig {
        mtu: 1500,
        queues,
        offloads: false,
    })
    .unwrap_or_else(|e| panic!("cannot build the test network (these tests run as root): {e}"))
}

/// Waits until a kernel socket in `ns` matches the `ss` filter `args` (a
/// listener on a port, a connection established: seen without connecting
/// to it), at most `limit`; `child`, if given, must not exit meanwhile.
/// Returns what `ss` printed.
pub fn wait_ss(
    ns: &Netns,
    args: &[&str],
    what: &str,
    limit: Duration,
    mut child: Option<&mut Child>,
) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let out = ns.command("ss").arg("-Hn").args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !text.trim().is_empty() {
            return text;
        }
        if let Some(st) = child.as_mut().and_then(|c| c.try_wait().unwrap()) {
            panic!("exited ({st}) before {what}");
        }
        assert!(Instant::now() < deadline, "no {what} after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`wait_ss`] for a listener on `port`.
pub fn wait_listening(ns: &Netns, port: u16, limit: Duration, child: Option<&mut Child>) {
    let filter = format!("sport = :{port}");
    let what = format!("a listener on port {port}");
    wait_ss(ns, &["-lt", &filter], &what, limit, child);
}

/// Kills a child and everything it started on drop (a failing test leaves
/// nothing running, also when the child is a wrapper such as `timeout`,
/// whose command would otherwise outlive a SIGKILL of the wrapper).
pub struct Reap(pub Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_some() {
            return;
        }
        let pids = with_descendants(self.0.id());
        for sig in ["-CONT", "-KILL"] {
            // A process a test stopped (SIGSTOP) is let go on first.
            let _ = Command::new("kill")
                .arg(sig)
                .args(pids.iter().map(|p| p.to_string()))
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.0.wait();
    }
}

/// `pid` and every process it started, and they started, from `/proc`.
fn with_descendants(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    let mut i = 0;
    while i < pids.len() && pids.len() < 4096 {
        pids.extend(children(pids[i]));
        i += 1;
    }
    pids
}

/// Sends `sig` to `pid` and everything it started (a wrapper such as
/// `timeout` and its command); all of them must exist.
pub fn kill_tree(sig: &str, pid: u32) {
    for p in with_descendants(pid) {
        kill(sig, p);
    }
}

/// The children of every thread of `pid`, from `/proc`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// An xtcp whose standard error is collected as it comes, so that a test
/// can wait for a line (the banner printed once setup succeeded).
pub struct Watched {
    pub child: Reap,
    pub err: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Watched {
    pub fn spawn(net: &TestNet, args: &[String], stdout: Stdio) -> Watched {
        let mut cmd = net.a.ns.command(XTCP);
        cmd.args(args).stdout(stdout);
        Watched::spawn_command(cmd)
    }

    /// Runs `cmd` (its standard error watched).
    pub fn spawn_command(mut cmd: Command) -> Watched {
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let mut pipe = child.stderr.take().unwrap();
        let err = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let e = err.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut pipe, &mut buf) {
                if n == 0 {
                    break;
                }
                e.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Watched {
            child: Reap(child),
            err,
            reader: Some(reader),
        }
    }

    /// Waits (bounded) for `needle` on standard error.
    pub fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.err.lock().unwrap().contains(needle) {
            if let Some(s) = self.child.0.try_wait().unwrap() {
                panic!(
                    "xtcp exited ({s}) before {needle:?}: {}",
                    self.err.lock().unwrap()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} from xtcp: {}",
                self.err.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn signal(&self, sig: &str) {
        let pid = self.child.0.id().to_string();
        assert!(
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Waits (a minute at most) for the exit; returns the status and all
    /// of stderr.
    pub fn wait_exit(&mut self, what: &str) -> (std::process::ExitStatus, String) {
        self.wait_exit_within(Duration::from_secs(60), what)
    }

    /// Waits (`limit` at most) for the exit; returns the status and all of
    /// stderr.
    pub fn wait_exit_within(
        &mut self,
        limit: Duration,
        what: &str,
    ) -> (std::process::ExitStatus, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                start.elapsed() < limit,
                "{what}: {}",
                self.err.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        (status, self.err.lock().unwrap().clone())
    }
}

/// socat in side B listening on `ip`:`port`, writing what it receives to
/// `to` (a socat address: `OPEN:/dev/null`, `OPEN:FILE,creat,trunc`);
/// returns once it listens.
pub fn socat_receiver(net: &TestNet, ip: IpAddr, port: u16, to: &str) -> Reap {
    let mut socat = Reap(
        net.b
            .ns
            .command("socat")
            .args(["-u", &socat_listen(ip, port), to])
            .spawn()
            .expect("socat (apt install socat)"),
    );
    wait_listening(&net.b.ns, port, Duration::from_secs(60), Some(&mut socat.0));
    socat
}

/// socat's address for a TCP listener on `ip`:`port`.
pub fn socat_listen(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("TCP4-LISTEN:{port},bind={a},reuseaddr"),
        IpAddr::V6(a) => format!("TCP6-LISTEN:{port},bind=[{a}],reuseaddr"),
    }
}

/// socat in side B sends `len` zero bytes to A's IPv4 address on `port`
/// and closes; whether it succeeded.
pub fn zeros_from_b(net: &TestNet, port: u16, len: usize) -> bool {
    net.b
        .ns
        .command("sh")
        .args([
            "-c",
            &format!(
                "head -c {len} /dev/zero | socat -u - TCP4:{}:{port}",
                net.a.ip4
            ),
        ])
        .status()
        .unwrap()
        .success()
}

/// A kernel sender in side B: connects to `dst` (retrying while xtcp
/// starts), writes `len` bytes of the pattern `seed` and returns once the
/// kernel says that all of them were acknowledged (`ss -i`), with the
/// connection open.
pub fn acked_sender(net: &TestNet, dst: SocketAddr, seed: u64, len: usize) -> TcpStream {
    let s = pattern_sender(net, dst, seed, len);
    // `ss -i` shows what the kernel knows: bytes_acked counts the SYN too.
    let lport = s.local_addr().unwrap().port();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = net
            .b
            .ns
            .command("ss")
            .args(["-Htni", &format!("sport = :{lport}")])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let acked: usize = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("bytes_acked:"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if acked > len {
            return s;
        }
        assert!(Instant::now() < deadline, "xtcp never acknowledged: {text}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A kernel sender in side B: connects to `dst` (retrying while xtcp
/// starts) and writes `len` bytes of the pattern `seed` into its socket,
/// with the connection open.
pub fn pattern_sender(net: &TestNet, dst: SocketAddr, seed: u64, len: usize) -> TcpStream {
    let mut s = {
        let _g = net.b.ns.enter().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match TcpStream::connect_timeout(&dst, Duration::from_secs(1)) {
                Ok(s) => break s,
                Err(e) => assert!(Instant::now() < deadline, "connect to xtcp: {e}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut buf = vec![0u8; len];
    pattern_fill(seed, 0, &mut buf);
    // A peer that acknowledges nothing fails the test (bounded), where the
    // write would wait for ever on a full send buffer.
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(&buf)
        .unwrap_or_else(|e| panic!("writing to xtcp: {e} (nothing acknowledged for 60 s?)"));
    s
}

/// Python that sends IPv4 TCP segments from side B to side A as raw
/// Ethernet frames on B's interface (no socket of B's kernel owns them),
/// checksums computed: `frame(sport, dport, seq, ack, flags, window,
/// opts, ip_id)` builds one, `raw_socket()` opens the socket (`ETH_P_ALL`:
/// it also sees what B sends, where one of IP's sees only what comes in).
/// Its arguments come first on the command line: [`raw_tcp_args`].
const RAW_TCP: &str = r#"
import socket, struct, sys
B, A, IFACE, A_MAC, B_MAC = sys.argv[1:6]
b_ip, a_ip = socket.inet_aton(B), socket.inet_aton(A)

def csum(b):
    if len(b) % 2: b += b"\0"
    v = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while v >> 16: v = (v & 0xffff) + (v >> 16)
    return ~v & 0xffff

def frame(sport, dport, seq, ack, flags, window, opts=b"", ip_id=0, ip_frag=0):
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xffffffff, ack & 0xffffffff,
                      (20 + len(opts)) // 4 << 4, flags, window, 0, 0) + opts
    pseudo = b_ip + a_ip + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), ip_id, ip_frag, 64, 6, 0, b_ip, a_ip)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return bytes.fromhex(A_MAC) + bytes.fromhex(B_MAC) + b"\x08\x00" + ip + tcp

def raw_socket():
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    s.bind((IFACE, 0))
    return s

def from_a(f):
    """(destination port, flags) of a TCP frame A sent, else None."""
    if f[12:14] != b"\x08\x00" or f[23] != 6 or f[26:30] != a_ip:
        return None
    tcp = f[14 + (f[14] & 15) * 4:]
    return struct.unpack("!H", tcp[2:4])[0], tcp[13]
"#;

/// [`RAW_TCP`]'s arguments: B's and A's IPv4 addresses, B's interface,
/// A's and B's MACs.
fn raw_tcp_args(net: &TestNet) -> [String; 5] {
    let mac = |m: [u8; 6]| m.iter().map(|b| format!("{b:02x}")).collect::<String>();
    [
        net.b.ip4.to_string(),
        net.a.ip4.to_string(),
        net.b.iface.clone(),
        mac(net.a.mac),
        mac(net.b.mac),
    ]
}

/// Sends `count` TCP SYNs from side B to A's port `port`, from source
/// ports 1024 on, as raw Ethernet frames (no socket of B's kernel owns
/// them: B answers the SYN-ACKs with resets).
pub fn syn_flood(net: &TestNet, port: u16, count: u32) {
    syn_flood_from(net, port, count, None)
}

/// Sends `count` TCP segments (ACKs, source ports 3000 on) from side B to
/// A's port `port` whose TCP checksum is wrong, as raw Ethernet frames:
/// what a worker that verifies checksums drops and counts.
pub fn bad_checksums(net: &TestNet, port: u16, count: u32) {
    let script = format!(
        r#"{RAW_TCP}
s = raw_socket()
for i in range({count}):
    f = bytearray(frame(3000 + i, {port}, 1000 + i, 1, 0x10, 64240))
    f[14 + 20 + 16] ^= 0xff
    s.send(bytes(f))
"#
    );
    run_raw_tcp(net, None, &script, "the segments with bad checksums");
}

/// `program` in `ns`, on CPU `cpu` if given (`taskset`).
pub fn on_cpu(ns: &Netns, cpu: Option<u32>, program: &str) -> Command {
    match cpu {
        Some(c) => {
            let mut t = ns.command("taskset");
            t.args(["-c", &c.to_string(), program]);
            t
        }
        None => ns.command(program),
    }
}

/// [`syn_flood`] from CPU `cpu` if given: with several queues, B's kernel
/// transmits on the queue of the sending CPU (XPS, as the test network
/// sets it), so the SYNs arrive on A's queue `cpu`.
pub fn syn_flood_from(net: &TestNet, port: u16, count: u32, cpu: Option<u32>) {
    let script = format!(
        r#"{RAW_TCP}
s = raw_socket()
for i in range({count}):
    s.send(frame(1024 + i, {port}, 1000 + i, 0, 0x02, 64240, ip_id=i & 0xffff))
"#
    );
    run_raw_tcp(net, cpu, &script, "the SYN flood");
}

/// Runs `script` (which starts with [`RAW_TCP`]) in side B, on CPU `cpu` if
/// given; it must succeed (else the failure names `what`). Returns its
/// standard output.
fn run_raw_tcp(net: &TestNet, cpu: Option<u32>, script: &str, what: &str) -> String {
    let out = on_cpu(&net.b.ns, cpu, "python3")
        .args(["-c", script])
        .args(raw_tcp_args(net))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends `count` segments with both SYN and FIN from side B to A's port
/// `port` (source ports 2000 on), then one proper SYN (source port 9999),
/// as raw frames, and waits (60 s at most) for the proper SYN's SYN-ACK.
/// Returns how many SYN-ACKs for the SYN+FIN ports came before it: A
/// answers in the order the segments came, so any answer to them would.
pub fn syn_fins_answered(net: &TestNet, port: u16, count: u32) -> u64 {
    let script = format!(
        r#"{RAW_TCP}
import time
s = raw_socket()
for i in range({count}):
    s.send(frame(2000 + i, {port}, 5000 + i, 0, 0x03, 64240))
s.send(frame(9999, {port}, 7000, 0, 0x02, 64240))
answered, end = 0, time.monotonic() + 60
s.settimeout(1)
while time.monotonic() < end:
    try:
        f = s.recv(65536)
    except socket.timeout:
        continue
    seg = from_a(f)
    if seg is None or seg[1] & 0x12 != 0x12:
        continue
    dport = seg[0]
    if dport == 9999:
        print(answered)
        sys.exit(0)
    if 2000 <= dport < 2000 + {count}:
        answered += 1
sys.exit("no SYN-ACK for the proper SYN in 60 s")
"#
    );
    run_raw_tcp(net, None, &script, "the SYN+FINs")
        .trim()
        .parse()
        .unwrap()
}

/// Sends `count` bare ACKs (no connection of anyone's: source ports 3000
/// on) from side B to A's port `port` as raw frames, and counts the
/// resets that come back for them: until all came, or none more in the 5 s
/// after the last one (a minute at most); a listener answers a burst up
/// to its queue of resets (16) and counts the rest.
pub fn bare_acks_reset(net: &TestNet, port: u16, count: u32) -> u64 {
    let script = format!(
        r#"{RAW_TCP}
import time
s = raw_socket()
for i in range({count}):
    s.send(frame(3000 + i, {port}, 100000 + i, 200000 + i, 0x10, 64240))
reset, end = set(), time.monotonic() + 60
last = time.monotonic()
s.settimeout(1)
while len(reset) < {count} and time.monotonic() < end and time.monotonic() < last + 5:
    try:
        f = s.recv(65536)
    except socket.timeout:
        continue
    seg = from_a(f)
    if seg is None:
        continue
    dport, flags = seg
    if flags & 0x04 and 3000 <= dport < 3000 + {count}:
        reset.add(dport)
        last = time.monotonic()
print(len(reset))
"#
    );
    run_raw_tcp(net, None, &script, "the bare ACKs")
        .trim()
        .parse()
        .unwrap()
}

/// `xtcp serve` in side A's namespace: its stdout lines arrive on a
/// channel, its stderr is echoed (with the test's output).
pub struct Server {
    pub child: Reap,
    lines: mpsc::Receiver<String>,
    /// Its stderr so far.
    err: std::sync::Arc<std::sync::Mutex<String>>,
    err_reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// `xtcp serve` on `queues` queues.
    pub fn start(net: &TestNet, queues: u32) -> Server {
        Server::start_with(net, queues, &[])
    }

    /// `xtcp serve <extra>`; returns once it says it listens (it says so
    /// only once it is set up).
    pub fn start_with(net: &TestNet, queues: u32, extra: &[&str]) -> Server {
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
            .args(extra)
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
        let (ready_tx, ready) = mpsc::channel();
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let keep = text.clone();
        let err_reader = std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("xtcp serve: {l}");
                keep.lock().unwrap().push_str(&format!("{l}\n"));
                if l.contains("listening on") {
                    let _ = ready_tx.send(());
                }
            }
        });
        let mut child = Reap(child);
        // iperf3 retries nothing: wait until it serves.
        if ready.recv_timeout(Duration::from_secs(30)).is_err() {
            panic!(
                "xtcp serve did not say it listens within 30 s (exit: {:?})",
                child.0.try_wait()
            );
        }
        Server {
            child,
            lines: rx,
            err: text,
            err_reader: Some(err_reader),
        }
    }

    /// Stops it as Ctrl-C does; returns its exit status, all it printed on
    /// stderr, and the CPU (user, system) the kernel accounted to it.
    pub fn stop(mut self) -> (std::process::ExitStatus, String, (f64, f64)) {
        kill("-INT", self.child.0.id());
        let (status, user, system) = exit_and_cpu(
            &mut self.child.0,
            Duration::from_secs(60),
            "xtcp serve did not stop on SIGINT",
        );
        if let Some(r) = self.err_reader.take() {
            r.join().unwrap();
        }
        let err = self.err.lock().unwrap().clone();
        (status, err, (user, system))
    }

    /// The next stdout line.
    pub fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("xtcp serve prints a line")
    }

    /// The next JSON document (`-J`: one per test).
    pub fn json(&self) -> serde_json::Value {
        let mut text = String::new();
        loop {
            let l = self.line();
            let end = l == "}";
            text.push_str(&l);
            text.push('\n');
            if end {
                return serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            }
        }
    }

    /// What it prints on stdout until it exits (`-1`: after its test).
    pub fn rest(&self) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(l) => out.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => return out,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("xtcp serve did not exit: {out:?}"),
            }
        }
    }

    /// The next test report line.
    pub fn outcome(&self) -> String {
        self.outcome_and_intervals().0
    }

    /// The next test report line, and the interval lines printed before it
    /// (of iperf3's lines, those of an interval: not the banners, the
    /// connection lines, the headers or the summary).
    pub fn outcome_and_intervals(&self) -> (String, Vec<String>) {
        let mut intervals = Vec::new();
        loop {
            let l = self.line();
            if l.starts_with("xtcp serve: test") {
                eprintln!("{l}");
                return (l, intervals);
            }
            let end = l.trim_end();
            if l.starts_with('[')
                && l.contains(" sec ")
                && !end.ends_with("sender")
                && !end.ends_with("receiver")
            {
                intervals.push(l);
            }
        }
    }

    /// Waits for the first interval line of a running test.
    pub fn wait_running(&self) {
        loop {
            let l = self.line();
            assert!(!l.starts_with("xtcp serve: test"), "ended early: {l}");
            // An interval line (not the stream's "connected" line).
            if l.starts_with("[  1]") && l.contains(" sec ") {
                return;
            }
        }
    }
}

/// Fails the test unless Debian's iperf3 is installed.
pub fn need_iperf3() {
    assert!(
        Command::new("iperf3").arg("--version").output().is_ok(),
        "iperf3 is not installed (scripts/deps.sh installs it)"
    );
}

/// Stock `iperf3 -c` from side B to A's IPv4 address, at most 60 s: the
/// caller adds the test's flags.
pub fn stock_client(net: &TestNet) -> std::process::Command {
    let mut c = net.b.ns.command("timeout");
    c.args(["60", "iperf3", "-c", &net.a.ip4.to_string()]);
    c
}

/// Runs `iperf3 -c <A's IPv4> -J <extra>` from side B; returns its JSON,
/// which must report no error.
pub fn iperf3_json(net: &TestNet, extra: &[&str]) -> serde_json::Value {
    iperf3_json_to(net, &[], &net.a.ip4.to_string(), extra)
}

/// Like [`iperf3_json`], to `addr`, the client started by `prefix`
/// (`taskset -c 1`, …).
pub fn iperf3_json_to(
    net: &TestNet,
    prefix: &[&str],
    addr: &str,
    extra: &[&str],
) -> serde_json::Value {
    iperf3_timed_to(net, prefix, addr, extra).0
}

/// Like [`iperf3_json`], and the seconds the client's whole run took, from
/// before it was started to after it ended (which hold any clock of the
/// test's, see [`server_clock_holds`]).
pub fn iperf3_timed(net: &TestNet, extra: &[&str]) -> (serde_json::Value, f64) {
    iperf3_timed_to(net, &[], &net.a.ip4.to_string(), extra)
}

/// [`iperf3_timed`] to `addr`, the client started by `prefix`.
pub fn iperf3_timed_to(
    net: &TestNet,
    prefix: &[&str],
    addr: &str,
    extra: &[&str],
) -> (serde_json::Value, f64) {
    let mut args = vec!["-c".to_string(), addr.to_string(), "-J".into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let began = Instant::now();
    let out = net
        .b
        .ns
        .command("timeout")
        .arg("60")
        .args(prefix)
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
    (v, began.elapsed().as_secs_f64())
}

/// The whole number after `word ` in `line` (serve's line for a test,
/// xtcp's summary).
pub fn count(line: &str, word: &str) -> u64 {
    after(line, word)
}

/// The number after `word` in `line`, as [`count`], with a fraction
/// (`2.005 s`).
pub fn number(line: &str, word: &str) -> f64 {
    after(line, word)
}

/// The quantity after `word` in `line` ("92.4 ms", "2.36 Gbit/s",
/// "522 Kbit/s"), in seconds or bits per second.
pub fn quantity(line: &str, word: &str) -> f64 {
    let at = line
        .find(word)
        .unwrap_or_else(|| panic!("{word:?} in {line}"))
        + word.len();
    let mut w = line[at..].split_whitespace();
    let n: f64 = w
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {word:?} in {line}"));
    let unit = w.next().unwrap_or("").trim_end_matches([',', ')']);
    let scale = match unit {
        "s" | "bit/s" => 1.0,
        "ms" => 1e-3,
        "µs" => 1e-6,
        "Kbit/s" => 1e3,
        "Mbit/s" => 1e6,
        "Gbit/s" => 1e9,
        "Tbit/s" => 1e12,
        u => panic!("unit {u:?} after {word:?} in {line}"),
    };
    n * scale
}

/// The word after `word` in `line`, parsed.
fn after<T: std::str::FromStr>(line: &str, word: &str) -> T
where
    T::Err: std::fmt::Display,
{
    let at = line
        .find(word)
        .unwrap_or_else(|| panic!("{word:?} in {line}"))
        + word.len();
    let w = line[at..].trim_start().split(' ').next().unwrap();
    w.parse()
        .unwrap_or_else(|e| panic!("{word:?} in {line}: {w:?}: {e}"))
}

/// `send`'s and `recv`'s summary line with its counts in the plural
/// whatever they are ("1 retransmit" as "1 retransmits"), for [`count`]
/// and the like to find them by their words.
pub fn plural_counts(line: &str) -> String {
    line.replace(" 1 byte in", " 1 bytes in")
        .replace(" 1 retransmit,", " 1 retransmits,")
        .replace(" 1 segment sent,", " 1 segments sent,")
}

/// The line of `err` that begins with `prefix` (`xtcp: XDP: `).
pub fn line_of<'a>(err: &'a str, prefix: &str) -> &'a str {
    err.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in {err}"))
}

/// `ethtool -S IFACE` value `name`, read in `ns`.
pub fn ethtool_stat(ns: &Netns, iface: &str, name: &str) -> u64 {
    let out = ns.command("ethtool").args(["-S", iface]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            (k.trim() == name).then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {name} in ethtool -S {iface}: {text}"))
}

/// A directory of the test's own, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("xtcp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// The path of `name` in it, as a string (for a command line).
    pub fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }

    /// Writes `name` in it; its path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// All that is left to read on a child's pipe (`child.stdout`,
/// `child.stderr`), taken: until the child closes it.
pub fn drain<R: std::io::Read>(pipe: &mut Option<R>) -> String {
    let mut s = String::new();
    pipe.take()
        .expect("the pipe is there")
        .read_to_string(&mut s)
        .unwrap();
    s
}

/// Sends `sig` (`-STOP`, `-TERM`, …) to the process `pid`, which must exist.
pub fn kill(sig: &str, pid: u32) {
    assert!(
        Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success(),
        "kill {sig} {pid}"
    );
}

/// Waits (bounded) until side B has at least `n` established connections
/// to A's `port` (iperf3's control connection and its streams). None of
/// `watch` (the client, the server) may exit meanwhile: if one does, the
/// panic says which, and what it printed; every panic adds `context()`
/// (what a server printed, collected elsewhere).
pub fn wait_established(
    net: &TestNet,
    port: u16,
    n: usize,
    watch: &mut [&mut Child],
    context: &dyn Fn() -> String,
) {
    let filter = format!("dst {}:{port}", net.a.ip4);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = net
            .b
            .ns
            .command("ss")
            .args(["-Htn", "state", "established", &filter])
            .output()
            .unwrap();
        let got = String::from_utf8_lossy(&out.stdout).lines().count();
        if got >= n {
            return;
        }
        for (i, c) in watch.iter_mut().enumerate() {
            if let Some(st) = c.try_wait().unwrap() {
                let mut printed = String::new();
                if let Some(mut o) = c.stdout.take() {
                    let _ = o.read_to_string(&mut printed);
                }
                if let Some(mut e) = c.stderr.take() {
                    let _ = e.read_to_string(&mut printed);
                }
                panic!(
                    "process {i} of those watched ({st}) exited with {got} of {n} connections to \
                     port {port} up: {printed}\n{}",
                    context()
                );
            }
        }
        assert!(
            Instant::now() < deadline,
            "{got} connections to port {port}, not {n}: {}",
            context()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until side B has no TCP socket to A's `port` that can
/// still send, every one gone or in TIME-WAIT: only then are B's counts of
/// what it sent there final. A server stopped before (SIGTERM right after
/// the client's end) leaves B retransmitting a FIN that no steering
/// program sees.
pub fn wait_b_done_sending(net: &TestNet, port: u16, context: &dyn Fn() -> String) {
    let filter = format!("( dport = :{port} )");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = net
            .b
            .ns
            .command("ss")
            .args([
                "-Htn",
                "state",
                "connected",
                "exclude",
                "time-wait",
                &filter,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "ss: {out:?}");
        let left = String::from_utf8_lossy(&out.stdout).into_owned();
        if left.trim().is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "B still has sockets to port {port} after 60 s:\n{left}{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `field` of the `Tcp:` lines of `/proc/net/snmp` in `ns`.
pub fn tcp_mib(ns: &Netns, field: &str) -> u64 {
    proc_counter(ns, "/proc/net/snmp", "Tcp:", field)
}

/// `field` of the `Ip:` lines of `/proc/net/snmp` in `ns` (IPv4).
pub fn ip_mib(ns: &Netns, field: &str) -> u64 {
    proc_counter(ns, "/proc/net/snmp", "Ip:", field)
}

/// `field` of the `TcpExt:` lines of `/proc/net/netstat` in `ns`.
pub fn tcp_ext(ns: &Netns, field: &str) -> u64 {
    proc_counter(ns, "/proc/net/netstat", "TcpExt:", field)
}

/// `field` of a counter table in `file` (in `ns`): the two lines that
/// start with `prefix`, names then values.
fn proc_counter(ns: &Netns, file: &str, prefix: &str, field: &str) -> u64 {
    let out = ns.command("cat").arg(file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rows = text.lines().filter(|l| l.starts_with(prefix));
    let (names, values) = (rows.next().unwrap(), rows.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|w| w == field)
        .unwrap_or_else(|| panic!("no {field}: {names}"));
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// Linux's count in side B of connections closed with bytes unread
/// (`TcpExt: TCPAbortOnClose`).
pub fn closed_unread(net: &TestNet) -> u64 {
    tcp_ext(&net.b.ns, "TCPAbortOnClose")
}

/// The largest buffer auto-tuning may give a kernel TCP socket in `ns`:
/// the third field of `/proc/sys/net/ipv4/{which}` (`tcp_rmem`, `tcp_wmem`).
pub fn tcp_buffer_max(ns: &Netns, which: &str) -> u64 {
    let out = ns
        .command("cat")
        .arg(format!("/proc/sys/net/ipv4/{which}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{which}: {out:?}"))
}

/// The impairment program on side B's interface, both ways, with `cfg`:
/// (ingress: what A sends, egress: what B sends). Detached on drop.
pub fn impair_b(
    net: &TestNet,
    cfg: xtcp_engine::xdp::impair::ImpairConfig,
) -> (
    xtcp_engine::xdp::impair::Impairment,
    xtcp_engine::xdp::impair::Impairment,
) {
    use xtcp_engine::xdp::impair::{Hook, Impairment};
    let _g = net.b.ns.enter().unwrap();
    (
        Impairment::attach(&net.b.iface, Hook::Ingress, cfg).unwrap(),
        Impairment::attach(&net.b.iface, Hook::Egress, cfg).unwrap(),
    )
}

/// In a forward test the stock client (in `net`'s side B) reports as
/// received (`end.sum_received.bytes`) what xtcp told it: xtcp's own
/// count. Its own count is what it wrote (`end.sum_sent.bytes`): at least
/// what xtcp received, and at most a send buffer a stream more (what was
/// still on the way when the test ended). Checks xtcp's `received`
/// against that.
pub fn client_wrote_what_xtcp_received(net: &TestNet, received: u64, client: &serde_json::Value) {
    let sent = client["end"]["sum_sent"]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no end.sum_sent.bytes: {client}"));
    let streams = client["end"]["streams"]
        .as_array()
        .map_or(0, |s| s.len() as u64);
    assert!(streams > 0, "no end.streams: {client}");
    let buffers = streams * tcp_buffer_max(&net.b.ns, "tcp_wmem");
    assert!(
        received <= sent && sent - received <= buffers,
        "xtcp received {received} bytes; the client wrote {sent} (its {streams} streams' send \
         buffers hold at most {buffers})"
    );
}

/// Checks what a stock iperf3 server in side B says it received
/// (`end.sum_received.bytes` of `doc`: its own JSON, or xtcp client's,
/// which carries the server's count) of the `n` bytes xtcp sent on one
/// data connection: all of them, or
/// fewer only where the server closed a connection with bytes still
/// unread (`closed_before`: [`closed_unread`] before the test), and then
/// short by no more than one receive buffer of side B can hold
/// (`tcp_rmem`'s largest). iperf3's server closes its data sockets at
/// `TEST_END` without reading what they hold, so it counts only what it
/// read by then; a `-n` test of xtcp's ends once the server's TCP
/// acknowledged every byte, but xtcp cannot know what the server read
/// (iperf3 3.12's own client, which writes `TEST_END` once the bytes are
/// in its send buffer, lost the tail of a 1.5 MB `-F` transfer in 3 of 8
/// runs, kernel to kernel). Linux counts such a close as
/// `TCPAbortOnClose`: the shortfall is the server's. Returns the count.
pub fn stock_server_received(
    net: &TestNet,
    doc: &serde_json::Value,
    n: u64,
    closed_before: u64,
) -> u64 {
    let got = doc["end"]["sum_received"]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no end.sum_received.bytes: {doc}"));
    let closed = closed_unread(net) - closed_before;
    let rmem_max = tcp_buffer_max(&net.b.ns, "tcp_rmem");
    assert!(
        got == n || (got < n && closed > 0 && n - got <= rmem_max),
        "the stock server received {got} of {n} bytes; connections it closed unread: \
         {closed}; a receive buffer holds at most {rmem_max}"
    );
    got
}

/// Runs `cmd` to its end, stdout and stderr captured, and returns its
/// output with the CPU seconds (user, system) the kernel accounted to it
/// and the descendants it waited for (`wait4`'s rusage): an account kept
/// apart from anything the program says of itself.
#[allow(clippy::zombie_processes)] // waited for by wait4, below
pub fn output_and_cpu(cmd: &mut Command) -> (std::process::Output, f64, f64) {
    use std::os::unix::process::ExitStatusExt;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).unwrap();
        v
    });
    let mut stderr = Vec::new();
    err.read_to_end(&mut stderr).unwrap();
    let stdout = reader.join().unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let mut status: libc::c_int = 0;
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `pid` is our own child, not yet waited for (`child` is never
    // waited on after this); `status` and `ru` are live, writable and of
    // the types wait4 fills.
    let r = unsafe { libc::wait4(pid, &mut status, 0, ru.as_mut_ptr()) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    // SAFETY: wait4 succeeded, so it filled the rusage.
    let ru = unsafe { ru.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let output = std::process::Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout,
        stderr,
    };
    (output, secs(ru.ru_utime), secs(ru.ru_stime))
}

/// The CPU (user, system seconds) the kernel has accounted to process
/// `pid` and all its threads so far, from `/proc/PID/stat` (clock ticks).
/// Read from a zombie, it is the whole life's.
pub fn proc_cpu(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    // After the command name (which may hold anything but ends at the last
    // ')'): state is field 3, utime 14, stime 15.
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks = |i: usize| -> f64 { rest[i].parse::<u64>().unwrap() as f64 / hz };
    (ticks(14 - 3), ticks(15 - 3))
}

/// Waits (`limit` at most, else fails with `what`) for `child` to exit;
/// returns its status and the CPU (user, system seconds) the kernel
/// accounted to it over its life, read while it is a zombie and only then
/// reaped.
pub fn exit_and_cpu(
    child: &mut Child,
    limit: Duration,
    what: &str,
) -> (std::process::ExitStatus, f64, f64) {
    let pid = child.id();
    let deadline = Instant::now() + limit;
    loop {
        let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
        // SAFETY: `pid` is our own child, not yet reaped (WNOWAIT leaves it
        // so); `info` is live, writable, zeroed (si_pid stays 0 while the
        // child runs, as WNOHANG documents).
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid,
                info.as_mut_ptr(),
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        assert_eq!(r, 0, "waitid: {}", std::io::Error::last_os_error());
        // SAFETY: waitid succeeded, so `info` is initialised (zeroed or
        // filled).
        if unsafe { info.assume_init().si_pid() } != 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{what} (within {limit:?})");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (user, system) = proc_cpu(pid);
    (child.wait().unwrap(), user, system)
}

/// The kernel accounts CPU time in ticks and splits it into user and
/// system by sampling: what xtcp reads of itself may exceed what is read
/// from outside (`wait4`) by a tick.
pub const TICK: f64 = 0.01;

/// [`TICK`], and another for what is printed rounded to a hundredth or
/// read from `/proc` in whole ticks.
pub const CPU_SLACK: f64 = 2.0 * TICK;

/// `what`: `a` (xtcp's) within `rel` (relative) of `b` (the reference).
pub fn near(what: &str, a: f64, b: f64, rel: f64) {
    eprintln!("{what}: {a} vs {b}");
    assert!(
        (a - b).abs() <= rel * b.abs(),
        "{what}: {a} vs {b} (more than {}% apart)",
        rel * 100.0
    );
}

/// How iperf3's two ends clock a test. The server counts from sending
/// TEST_START to receiving TEST_END; the client from receiving TEST_START
/// to its end (its last byte written, or read with `-R`), and then sends
/// TEST_END. So the client's clock lies inside the server's. The server's
/// is longer by those two messages' way, and a busy machine (other tests,
/// a vCPU its host took away) can make that as long as it likes. It is
/// never shorter, but for the two ends' stamps of one instant: `STAMPS`.
/// (With `-O`, each end counts from its own timer for the omitted seconds,
/// as late as its thread handles it: the counted seconds need not nest,
/// the whole clocks do.)
pub const STAMPS: f64 = 0.001;

/// xtcp as iperf3's server: its seconds (`mine`) hold the stock client's
/// (`theirs`, see [`STAMPS`]), and lie within `wall`, the seconds the test
/// measured around the client's whole run.
pub fn server_clock_holds(what: &str, mine: f64, theirs: f64, wall: f64) {
    eprintln!("{what}: xtcp's {mine} s, the client's {theirs} s, the run {wall} s");
    assert!(
        mine >= theirs - STAMPS && mine <= wall,
        "{what}: xtcp's {mine} s is not within the client's {theirs} s and the client's \
         whole run, {wall} s"
    );
}

/// xtcp as iperf3's client: its seconds (`mine`) lie within the stock
/// server's (`theirs`, see [`STAMPS`]), and those within `wall`, the
/// seconds xtcp's whole run took as the test timed it.
pub fn client_clock_within(what: &str, mine: f64, theirs: f64, wall: f64) {
    eprintln!("{what}: xtcp's {mine} s, the server's {theirs} s, xtcp's run {wall} s");
    assert!(
        mine <= theirs + STAMPS && theirs <= wall,
        "{what}: xtcp's {mine} s is not within the server's {theirs} s, or that not within \
         xtcp's run, {wall} s"
    );
}

/// `bps` is `bytes` over `secs`, within `rel` (what a printed figure's
/// rounding leaves).
pub fn rate_is_bytes_over_seconds(what: &str, bps: f64, bytes: f64, secs: f64, rel: f64) {
    near(
        &format!("{what}: bits/s over bytes and seconds"),
        bps,
        bytes * 8.0 / secs,
        rel,
    );
}

/// `Tcp: OutSegs + RetransSegs` of the namespace: every TCP segment its
/// stack sent (Linux leaves retransmissions out of `OutSegs` and counts
/// them in `RetransSegs`).
pub fn tcp_out_segs(ns: &Netns) -> u64 {
    tcp_mib(ns, "OutSegs") + tcp_mib(ns, "RetransSegs")
}

/// A veth counter from `ip -s link` (`dir` "rx"/"tx", `name` e.g.
/// "dropped": on transmit, veth's count of packets its peer's queue had no
/// room for, which never reach the peer's XDP program).
pub fn link_stat(ns: &Netns, iface: &str, dir: &str, name: &str) -> u64 {
    let out = ns
        .command("ip")
        .args(["-j", "-s", "link", "show", "dev", iface])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["stats64"][dir][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {dir} {name} of {iface}: {v}"))
}

/// A received stream that repeats: its period (where its first 4 KiB come
/// again), checked to be at most `most` bytes and to hold for every byte
/// of `data`. Returns the repeated block.
pub fn repeated_block<'a>(data: &'a [u8], most: usize, what: &str) -> &'a [u8] {
    let head = &data[..4096];
    let period = (1..data.len() - 4096)
        .find(|&p| &data[p..p + 4096] == head)
        .unwrap_or_else(|| panic!("{what}: the stream does not repeat"));
    assert!(period <= most, "{what}: period {period}");
    let block = &data[..period];
    for (k, chunk) in data.chunks(period).enumerate() {
        assert!(
            chunk == &block[..chunk.len()],
            "{what}: period {period}, block {k} differs"
        );
    }
    block
}

/// Python that reads an IPv4 TCP segment out of an Ethernet frame, for
/// side B's forgers and for [`PathTimer`]'s relay: `parse(f)` gives its
/// addresses, ports, numbers, flags, window, payload length, timestamp
/// (TSval, TSecr) and window shift where present, or None.
pub const TCP_PARSE: &str = r#"
import struct

def parse(f):
    if len(f) < 34 or f[12:14] != b"\x08\x00" or f[23] != 6: return None
    ip = f[14:]
    ihl, tot = (ip[0] & 15) * 4, struct.unpack("!H", ip[2:4])[0]
    tcp = ip[ihl:tot]
    if len(tcp) < 20: return None
    sp, dp, seq, ack, off, flags, win = struct.unpack("!HHIIBBH", tcp[:16])
    hl, ts, shift, i = (off >> 4) * 4, None, None, 20
    while i + 1 < hl:
        k = tcp[i]
        if k == 0: break
        if k == 1: i += 1; continue
        n = tcp[i + 1]
        if n < 2: break
        if k == 8 and n == 10: ts = struct.unpack("!II", tcp[i + 2:i + 10])
        if k == 3 and n == 3: shift = tcp[i + 2]
        i += n
    return dict(src=ip[12:16], dst=ip[16:20], sport=sp, dport=dp, seq=seq, ack=ack,
                flags=flags, window=win, len=len(tcp) - hl, ts=ts, shift=shift)
"#;

/// What side B's forgers share, in Python, after [`RAW_TCP`] and
/// [`TCP_PARSE`]: a raw socket on B's interface that sees both ways (`s`;
/// "ready" is printed once it is open), a minute's deadline,
/// `next_packet(pred)`, and `spaced(n, sport, dport, seq, ack, flags,
/// tsval, tsecr)`, which injects `n` segments without data from B to A.
const FORGE_TOOLS: &str = r#"
import json, time
deadline = time.monotonic() + 60
s = raw_socket()
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: past rmem_max
s.settimeout(0.2)
print("ready", flush=True)

def next_packet(pred):
    while time.monotonic() < deadline:
        try: f = s.recv(65535)
        except socket.timeout: continue
        p = parse(f)
        if p and pred(p): return p
    sys.exit("timed out")

def spaced(n, sport, dport, seq, ack, flags, tsval, tsecr):
    # A millisecond apart, so that xtcp's worker takes each in a turn of
    # its own, where answers due in one turn would go out as one ACK.
    opts = b"\x01\x01\x08\x0a" + struct.pack("!II", tsval & 0xffffffff, tsecr)
    for _ in range(n):
        s.send(frame(sport, dport, seq, ack, flags, 502, opts))
        time.sleep(0.001)
"#;

/// Side B's half of [`Forged::into`], after [`FORGE_TOOLS`]: connects to
/// the address given, sends a byte and reads the connection's sequence
/// numbers and timestamp off that segment; injects forged segments of the
/// connection without data, sends a second byte and counts what xtcp
/// answered until its ACK of that byte; waits 0.6 s; forges SYNs, sends a
/// third byte and counts again; closes, and prints the counts as JSON.
const FORGER: &str = r#"
DPORT, OOW, PAWS, SYNS = map(int, sys.argv[6:])
while True:
    try:
        c = socket.create_connection((A, DPORT), timeout=5)
        break
    except OSError as e:
        if time.monotonic() > deadline: sys.exit("cannot connect: %s" % e)
        time.sleep(0.05)
SPORT = c.getsockname()[1]

def ours(p, frm):
    ports = (p["sport"], p["dport"])
    return p["src"] == frm and SPORT in ports and DPORT in ports

def answered(nxt, byte):
    # xtcp's pure ACKs of RCV.NXT = nxt until its ACK of `byte`, sent now.
    c.sendall(byte)
    answers = 0
    while True:
        p = next_packet(lambda p: ours(p, a_ip))
        if p["ack"] == (nxt + 1) & 0xffffffff: return answers
        if p["ack"] == nxt and p["len"] == 0 and p["flags"] == 0x10: answers += 1

c.sendall(b"x")
d = next_packet(lambda p: ours(p, b_ip) and p["len"] > 0)
if d["ts"] is None: sys.exit("no timestamps on the connection")
nxt, ack, (tsval, tsecr) = (d["seq"] + d["len"]) & 0xffffffff, d["ack"], d["ts"]
next_packet(lambda p: ours(p, a_ip) and p["ack"] == nxt)
start = time.monotonic()
# Timestamps ahead of the peer's, so that PAWS passes them wherever its
# clock is by then.
spaced(OOW, SPORT, DPORT, nxt + (1 << 30), ack, 0x10, tsval + (1 << 20), tsecr)
# Older by more than any RTO's worth of ticks: not taken for a duplicate
# ACK that the path reordered.
spaced(PAWS, SPORT, DPORT, nxt, ack, 0x10, tsval - (1 << 20), tsecr)
answers = answered(nxt, b"y")
span = time.monotonic() - start
# xtcp's last answer went out before its ACK of "y": past the throttle's
# 500 ms, the first SYN is challenged. At RCV.NXT and outside the window
# in turn: RFC 5961 challenges a SYN whatever its numbers.
time.sleep(0.6)
start = time.monotonic()
for i in range(SYNS):
    spaced(1, SPORT, DPORT, nxt + 1 + (i % 2 << 30), 0, 0x02, tsval + 1000, tsecr)
challenges = answered(nxt + 1, b"z")
syn_span = time.monotonic() - start
c.close()
print(json.dumps(dict(answers=answers, span=span, challenges=challenges,
                      syn_span=syn_span)), flush=True)
"#;

/// Side B's half of [`Forged::into_client`], after [`FORGE_TOOLS`]: finds
/// the connection xtcp sends data on to B's port (its first full
/// segment), reads xtcp's RCV.NXT and B's timestamp off B's next segment
/// of it, injects forged segments of it without data, and counts xtcp's
/// pure ACKs of that RCV.NXT until xtcp's FIN; prints the counts as JSON.
const CLIENT_FORGER: &str = r#"
BPORT, OOW, PAWS = map(int, sys.argv[6:])
d = next_packet(lambda p: p["src"] == a_ip and p["dport"] == BPORT and p["len"] >= 1000)
APORT = d["sport"]

def ours(p, frm):
    return p["src"] == frm and {p["sport"], p["dport"]} == {APORT, BPORT}

b = next_packet(lambda p: ours(p, b_ip) and p["ts"] is not None)
nxt, ack, (tsval, tsecr) = b["seq"], b["ack"], b["ts"]
start = time.monotonic()
# B's kernel stamps its ACKs meanwhile: these, ahead of its clock, pass PAWS.
spaced(OOW, BPORT, APORT, nxt + (1 << 30), ack, 0x10, tsval + (1 << 20), tsecr)
spaced(PAWS, BPORT, APORT, nxt, ack, 0x10, tsval - (1 << 20), tsecr)
answers = 0
while True:
    p = next_packet(lambda p: ours(p, a_ip))
    if p["flags"] & 1: break
    if p["ack"] == nxt and p["len"] == 0 and p["flags"] == 0x10: answers += 1
span = time.monotonic() - start
print(json.dumps(dict(answers=answers, span=span, challenges=0, syn_span=0.0)), flush=True)
"#;

/// What [`Forged::into`] or [`Forged::into_client`] sent and saw.
pub struct Forged {
    /// SYNs forged.
    pub syns: u64,
    /// xtcp sends data on the connection: an answer may ride on a data
    /// segment, where B cannot tell it from the data's own ACK.
    pub sends_data: bool,
    /// Pure ACKs of xtcp's on the connection, answering the forged
    /// segments without data, counted on B's side.
    pub answers: u64,
    /// Seconds from the first forged segment to the segment of xtcp's
    /// that ended the count: xtcp took each of them within that time.
    pub span: f64,
    /// [`Forged::answers`] and [`Forged::span`] of the SYNs.
    pub challenges: u64,
    pub syn_span: f64,
}

impl Forged {
    /// Forged segments sent outside the window, failing PAWS, and SYNs.
    pub const OOW: u64 = 100;
    pub const PAWS: u64 = 50;
    pub const SYNS: u64 = 5;

    /// Connects from side B to `dst` (xtcp's, IPv4), sends a byte, forges
    /// [`Forged::OOW`] segments of that connection outside xtcp's window
    /// and [`Forged::PAWS`] in it with an old timestamp, a millisecond
    /// apart, as an attacker in the path would (raw frames from B's
    /// interface), and sends a second byte; once xtcp has acknowledged it,
    /// waits 0.6 s, forges [`Forged::SYNS`] SYNs, at RCV.NXT and outside
    /// the window in turn, and sends a third byte; closes once xtcp has
    /// acknowledged that.
    pub fn into(net: &TestNet, dst: SocketAddr) -> Forged {
        assert_eq!(dst.ip(), std::net::IpAddr::from(net.a.ip4), "side A's IPv4");
        Forged::run(net, FORGER, &[dst.port().to_string()], Forged::SYNS, || ()).0
    }

    /// Runs `during` (an xtcp that sends data to B's port `b_port` from
    /// side A, IPv4) once side B watches; meanwhile forges, from B,
    /// [`Forged::OOW`] and [`Forged::PAWS`] segments of the connection xtcp
    /// sends data on (found by its first full segment), and counts xtcp's
    /// answers until its FIN on that connection. Returns once both are
    /// done.
    pub fn into_client<T>(net: &TestNet, b_port: u16, during: impl FnOnce() -> T) -> (Forged, T) {
        let (mut forged, t) = Forged::run(net, CLIENT_FORGER, &[b_port.to_string()], 0, during);
        forged.sends_data = true;
        (forged, t)
    }

    fn run<T>(
        net: &TestNet,
        main: &str,
        args: &[String],
        syns: u64,
        during: impl FnOnce() -> T,
    ) -> (Forged, T) {
        let mut counts = vec![Forged::OOW.to_string(), Forged::PAWS.to_string()];
        if syns > 0 {
            counts.push(syns.to_string());
        }
        let mut child = net
            .b
            .ns
            .command("python3")
            .args(["-c", &format!("{RAW_TCP}{TCP_PARSE}{FORGE_TOOLS}{main}")])
            .args(raw_tcp_args(net))
            .args(args)
            .args(counts)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut child = Reap(child);
        let mut ready = String::new();
        out.read_line(&mut ready).unwrap();
        assert_eq!(ready.trim(), "ready", "the forger did not start");
        let t = during();
        let mut text = String::new();
        out.read_to_string(&mut text).unwrap();
        let status = child.0.wait().unwrap();
        assert!(status.success(), "the forger failed: {text}");
        let v: serde_json::Value =
            serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
        let forged = Forged {
            syns,
            sends_data: false,
            answers: v["answers"].as_u64().unwrap(),
            span: v["span"].as_f64().unwrap(),
            challenges: v["challenges"].as_u64().unwrap(),
            syn_span: v["syn_span"].as_f64().unwrap(),
        };
        (forged, t)
    }

    /// True once `counts` (as [`Forged::check`] takes them) can hold
    /// every forged segment: each kind counted, a challenge where SYNs
    /// were forged, and each of the others challenged, skipped or among
    /// the answers the span allows (for counts read while the worker may
    /// still be publishing them).
    pub fn all_counted(&self, [oow, paws, challenges, skipped]: [u64; 4]) -> bool {
        oow >= Forged::OOW
            && paws >= Forged::PAWS
            && challenges >= u64::from(self.syns > 0)
            && challenges + skipped + Forged::answerable(self.span)
                >= Forged::OOW + Forged::PAWS + self.syns
    }

    /// The most answers (or challenges) the throttle allows in `span`
    /// seconds.
    fn answerable(span: f64) -> u64 {
        1 + (span / 0.5) as u64
    }

    /// Holds xtcp's counts — outside the window, PAWS, challenge ACKs,
    /// answers skipped — to what was forged and what B saw. Each kind
    /// without data counted as sent. Those answered at most once per
    /// 500 ms of the span (sent 1 ms apart, they take about 0.15 s: one
    /// answer), the rest skipped; the SYNs challenged the same way (the
    /// first, 0.6 s after the last answer, at least), the rest skipped. On
    /// the wire, those answers and challenges, no more (answers due in one
    /// turn of xtcp's go out as one ACK, so perhaps fewer; and where xtcp
    /// sends data, an answer may go out on a data segment instead of as a
    /// pure ACK, so perhaps none).
    pub fn check(&self, what: &str, [oow, paws, challenges, skipped]: [u64; 4]) {
        eprintln!(
            "xtcp counted {what}; B saw {} answers in {:.3} s, {} challenges in {:.3} s",
            self.answers, self.span, self.challenges, self.syn_span
        );
        assert_eq!((oow, paws), (Forged::OOW, Forged::PAWS), "{what}");
        let at_most = Forged::answerable;
        let challenged = if self.syns > 0 {
            1..=at_most(self.syn_span)
        } else {
            0..=0
        };
        assert!(
            challenged.contains(&challenges),
            "{what}: {} SYNs for {} s",
            self.syns,
            self.syn_span
        );
        let answered = (Forged::OOW + Forged::PAWS + self.syns)
            .checked_sub(challenges + skipped)
            .unwrap_or_else(|| panic!("{what}: more skipped than forged"));
        assert!(
            (1..=at_most(self.span)).contains(&answered),
            "{what}: {answered} answered in {} s",
            self.span
        );
        assert!(
            (u64::from(!self.sends_data)..=answered).contains(&self.answers),
            "{} answers on the wire; {what}",
            self.answers
        );
        assert!(
            (u64::from(self.syns > 0)..=challenges).contains(&self.challenges),
            "{} challenges on the wire; {what}",
            self.challenges
        );
    }
}

/// The relay of [`PathTimer`], in Python (after [`TCP_PARSE`]): moves
/// Ethernet frames between two interfaces (raw sockets), those from the
/// inner one (B's stack) held for a fixed delay. Per TCP flow from the outer one (side A), it
/// times each segment that occupies sequence space (data, SYN, FIN), from
/// when it has it to when it passes on the first ACK that covers it (a
/// segment seen twice is not timed: Karn), it takes the most sequence
/// space in flight: above the last ACK it passed on, when a segment comes,
/// counts the segments that end at or below the highest it had seen
/// (resent), and takes the least and most window B offered (scaled by the
/// shift in B's SYN, after it). On SIGTERM, or after its lifetime, it
/// prints per flow how many it timed, the least and the most, that most in
/// flight, the resent, and those windows.
const PATH_TIMER: &str = r#"
import collections, json, select, signal, socket, sys, time
OUTER, INNER, DELAY, LIFE = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
PACKET_OUTGOING, M = 4, 0xffffffff

def open_raw(ifname):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE: past rmem_max
    s.bind((ifname, 0))
    s.setblocking(False)
    return s

def tcp(f):
    # `parse`, with the segment's flow (from its sender) and the sequence
    # space it takes (data, SYN, FIN).
    p = parse(f)
    if p:
        p["flow"] = (p["src"], p["sport"], p["dst"], p["dport"])
        p["used"] = p["len"] + (p["flags"] & 2 != 0) + (p["flags"] & 1 != 0)
    return p

def frames(s):
    while True:
        try: f, addr = s.recvfrom(65535)
        except BlockingIOError: return
        if addr[2] != PACKET_OUTGOING: yield f

class Flow:
    def __init__(self):
        self.sent = {}  # end sequence -> when taken (None: seen twice)
        self.samples, self.top, self.acked, self.in_flight = [], None, None, 0
        self.resent = 0  # segments that ended at or below the highest seen
        self.shift, self.windows = 0, []

stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
outer, inner = open_raw(OUTER), open_raw(INNER)
flows = collections.defaultdict(Flow)
held = collections.deque()  # (due, frame), from B, in order
print("ready", flush=True)
end = time.monotonic() + LIFE
while not stop and time.monotonic() < end:
    wait = max(0.0, held[0][0] - time.monotonic()) if held else 0.05
    ready = select.select([outer, inner], [], [], min(wait, 0.05))[0]
    if outer in ready:
        for f in frames(outer):
            t = time.monotonic()
            p = tcp(f)
            if p and p["used"] > 0:
                fl, e = flows[p["flow"]], (p["seq"] + p["used"]) & M
                fl.sent[e] = None if e in fl.sent else t
                if fl.top is None or (e - fl.top) & M < 1 << 31 and e != fl.top: fl.top = e
                else: fl.resent += 1
                if fl.acked is not None:
                    fl.in_flight = max(fl.in_flight, (fl.top - fl.acked) & M)
            inner.send(f)
    if inner in ready:
        for f in frames(inner):
            held.append((time.monotonic() + DELAY, f))
    while held and held[0][0] <= time.monotonic():
        f = held.popleft()[1]
        p = tcp(f)
        t = time.monotonic()
        outer.send(f)
        if not p: continue
        k = p["flow"]
        back = (k[2], k[3], k[0], k[1])
        if p["flags"] & 2:
            fl = flows[back]
            fl.shift = p["shift"] or 0
            fl.windows.append(p["window"])  # a SYN's window is not scaled
        elif p["flags"] & 0x10:
            fl, ack = flows.get(back), p["ack"]
            if fl is None: continue
            fl.windows.append(p["window"] << fl.shift)
            if fl.acked is None or (ack - fl.acked) & M < 1 << 31: fl.acked = ack
            for e in [e for e in fl.sent if (ack - e) & M < 1 << 31]:
                t0 = fl.sent.pop(e)
                if t0 is not None: fl.samples.append(t - t0)
print(json.dumps([dict(a_port=k[1], b_port=k[3], timed=len(fl.samples),
                       least=min(fl.samples, default=0), most=max(fl.samples, default=0),
                       in_flight=fl.in_flight, resent=fl.resent,
                       window_least=min(fl.windows, default=0),
                       window_most=max(fl.windows, default=0))
                  for k, fl in flows.items()]), flush=True)
"#;

/// A relay in side B's path that delays B's frames and times the round
/// trips of A's segments from the middle of the path: an outside source
/// for the RTTs xtcp reports.
///
/// B's interface is emptied (no address, another MAC) and the relay
/// moves frames between it and a new veth pair in B, whose inner end
/// takes B's addresses, MAC and neighbours: A and B see the same network
/// as before, with every frame from B a fixed delay later. A round trip
/// xtcp times (from its sending a segment to its taking the ACK) holds
/// the relay's of the same segment (from the relay's having it to its
/// passing on the ACK), so no RTT of xtcp's can be below the least the
/// relay timed. The relay is Python: keep the rate low (`-b`), or its
/// receive queue adds to xtcp's RTTs what the relay does not see.
pub struct PathTimer {
    child: Reap,
    out: BufReader<std::process::ChildStdout>,
}

/// What a [`PathTimer`] saw of one flow from side A.
#[derive(Debug)]
pub struct PathTimes {
    /// A's port and B's.
    pub a_port: u16,
    pub b_port: u16,
    /// Segments timed.
    pub timed: u64,
    /// The least and the most, seconds.
    pub least: f64,
    pub most: f64,
    /// The most sequence space A had in flight: above the last ACK the
    /// relay passed on to A, when a segment of A's came.
    pub in_flight: u64,
    /// Segments of A's that ended at or below the highest sequence number
    /// A had sent before: retransmissions (none means A's congestion
    /// window never shrank: only a loss, found or feared, shrinks it).
    pub resent: u64,
    /// The least and the most window B offered A, bytes.
    pub window_least: u64,
    pub window_most: u64,
}

impl PathTimer {
    /// Puts the relay in B's path, holding B's frames for `delay`.
    pub fn start(net: &TestNet, delay: Duration) -> PathTimer {
        let ns = &net.b.ns;
        let outer = net.b.iface.as_str();
        let short = &outer[2..];
        let (relay_end, inner) = (format!("po{short}"), format!("pi{short}"));
        let mac = |m: [u8; 6]| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        let mtu = net.config.mtu.to_string();
        let run = |args: &[&str]| {
            ns.exec(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        };
        let (b_mac, a_mac) = (mac(net.b.mac), mac(net.a.mac));
        let (b4, b6) = (format!("{}/24", net.b.ip4), format!("{}/64", net.b.ip6));
        run(&["ip", "addr", "flush", "dev", outer]);
        run(&["ip", "link", "set", outer, "address", "02:00:00:00:00:b0"]);
        run(&["ip", "link", "set", outer, "promisc", "on"]);
        #[rustfmt::skip]
        run(&["ip", "link", "add", &relay_end, "mtu", &mtu, "type", "veth",
              "peer", "name", &inner, "mtu", &mtu]);
        run(&["ip", "link", "set", &inner, "address", &b_mac]);
        run(&["ip", "link", "set", &relay_end, "promisc", "on", "up"]);
        run(&["ip", "addr", "add", &b4, "dev", &inner]);
        run(&["ip", "addr", "add", &b6, "dev", &inner, "nodad"]);
        run(&["ip", "link", "set", &inner, "up"]);
        for a in [net.a.ip4.to_string(), net.a.ip6.to_string()] {
            run(&[
                "ip", "neigh", "replace", &a, "lladdr", &a_mac, "dev", &inner,
            ]);
        }
        for iface in [outer, &relay_end, &inner] {
            // As the test network's own ends: no segmentation offloads, so
            // each frame fits the MTU; checksums made in software, so the
            // relay's copies carry them.
            #[rustfmt::skip]
            run(&["ethtool", "-K", iface, "tso", "off", "gso", "off", "gro", "off", "tx", "off"]);
        }
        for iface in [outer, &relay_end] {
            // The relay's ends take no part in B's stack.
            run(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{iface}.disable_ipv6=1"),
            ]);
        }
        let mut child = ns
            .command("python3")
            .args(["-c", &format!("{TCP_PARSE}{PATH_TIMER}"), outer, &relay_end])
            .arg(delay.as_secs_f64().to_string())
            .arg("300")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let child = Reap(child);
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the relay did not start");
        PathTimer { child, out }
    }

    /// Stops the relay; returns what it saw of each flow from A.
    pub fn stop(mut self) -> Vec<PathTimes> {
        kill("-TERM", self.child.0.id());
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let v: Vec<serde_json::Value> =
            serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
        let n = |f: &serde_json::Value, k: &str| f[k].as_u64().unwrap();
        let x = |f: &serde_json::Value, k: &str| f[k].as_f64().unwrap();
        v.iter()
            .map(|f| PathTimes {
                a_port: n(f, "a_port") as u16,
                b_port: n(f, "b_port") as u16,
                timed: n(f, "timed"),
                least: x(f, "least"),
                most: x(f, "most"),
                in_flight: n(f, "in_flight"),
                resent: n(f, "resent"),
                window_least: n(f, "window_least"),
                window_most: n(f, "window_most"),
            })
            .collect()
    }
}
