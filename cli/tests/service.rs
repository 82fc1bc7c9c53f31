//! `xtcp serve` as a service (issue 15, items 6 and 7), in the test's own
//! namespaces, against Debian's stock `iperf3 -c`:
//!
//! - `--user nobody`: while a test runs, the process and every one of its
//!   threads (`/proc/PID/task/*/status`) show nobody's uid and gid, no
//!   supplementary group, no capability in any set, `no_new_privs`, and the
//!   process is not dumpable; the test's byte counts match the client's
//!   `-J`, and the XDP statistics read after the drop (BPF map, ethtool)
//!   match the kernel's own counters;
//! - SIGTERM: exit 0, no XDP program on the interface, no steering program
//!   left loaded, the port free for the kernel again; SIGKILL: the same,
//!   left to the kernel;
//! - a drop the kernel does not complete (securebits) fails the run before
//!   any test; a missing user, uid 0, or a start as non-root are errors
//!   before anything is set up;
//! - `NOTIFY_SOCKET`: READY=1 arrives once the drop holds, and is all a
//!   test needs to wait for; STOPPING=1 at SIGTERM;
//! - `contrib/xtcp-serve.service` passes `systemd-analyze verify`; its
//!   capability bounding set and memlock limit, applied with `setpriv` and
//!   `prlimit` as systemd would (systemd is not PID 1 here: this is how
//!   the set is proved), serve a stock iperf3 test, and each capability and
//!   the limit left out makes setup fail with a one-line error naming it.
//!
//! Root needed (CI runs as root).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

mod common;

use common::{
    ENGINE, Reap, XTCP, client_wrote_what_xtcp_received, ethtool_stat, link_stat, tcp_mib,
    tcp_out_segs, testnet, wait_b_done_sending, wait_established,
};
use xtcp_engine::testnet::TestNet;

const WAIT: Duration = Duration::from_secs(60);
const PORT: u16 = 5201;
const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../contrib/xtcp-serve.service");
/// Where the unit expects the binary.
const INSTALLED: &str = "/usr/local/bin/xtcp";

/// `id -u nobody`, `id -g nobody`: the user database's answer, not ours.
fn nobody() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").args([flag, "nobody"]).output().unwrap();
        assert!(out.status.success(), "no user nobody here");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

/// An `xtcp serve` in side A's namespace, its standard output and error
/// collected as they come.
struct Serve {
    child: Reap,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn collect(
    mut pipe: impl Read + Send + 'static,
) -> (Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let t = text.clone();
    let h = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            t.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (text, h)
}

impl Serve {
    /// `wrapper… xtcp serve --iface A <ENGINE> extra…` (the wrapper, such
    /// as `setpriv …`, execs xtcp: the child's PID is xtcp's).
    fn spawn(net: &TestNet, wrapper: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Serve {
        let mut argv: Vec<&str> = wrapper.to_vec();
        argv.extend([XTCP, "serve", "--iface", &net.a.iface, "-i", "0"]);
        argv.extend(ENGINE);
        argv.extend(extra);
        let mut c = net.a.ns.command(argv[0]);
        c.args(&argv[1..])
            .env_remove("NOTIFY_SOCKET")
            .env_remove("XTCP_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        let (out, r1) = collect(child.stdout.take().unwrap());
        let (err, r2) = collect(child.stderr.take().unwrap());
        Serve {
            child: Reap(child),
            out,
            err,
            readers: vec![r1, r2],
        }
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Waits (bounded) for `needle` on standard error.
    fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.err.lock().unwrap().contains(needle) {
            if let Some(s) = self.child.0.try_wait().unwrap() {
                panic!("xtcp exited ({s}) before {needle:?}: {}", self.err());
            }
            assert!(Instant::now() < deadline, "no {needle:?}: {}", self.err());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn err(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "kill {sig}");
    }

    /// Waits (bounded) for the exit; the status, standard output and error.
    fn wait_exit(&mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(s) = self.child.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "xtcp did not exit: {}",
                self.err()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            r.join().unwrap();
        }
        (status, self.out.lock().unwrap().clone(), self.err())
    }
}

fn serve_args<'a>(user: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["-J", "--user", user];
    v.extend(extra);
    v
}

/// The JSON documents `serve -J` wrote, in order.
fn documents(out: &str) -> Vec<serde_json::Value> {
    serde_json::Deserializer::from_str(out)
        .into_iter::<serde_json::Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("serve -J output: {e}: {out}"))
}

/// A stock `iperf3 -c A -J args…` in side B, running.
fn iperf3_start(net: &TestNet, args: &[&str]) -> Reap {
    Reap(
        net.b
            .ns
            .command("timeout")
            .args(["120", "iperf3", "-c", &net.a.ip4.to_string(), "-J"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("iperf3 (apt install iperf3)"),
    )
}

/// Its JSON once it has finished; it must have succeeded.
fn iperf3_finish(mut c: Reap) -> serde_json::Value {
    let mut out = String::new();
    c.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let st = c.0.wait().unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3 -J: {e}: {out}"));
    assert!(st.success() && v.get("error").is_none(), "iperf3: {v}");
    v
}

fn iperf3_run(net: &TestNet, args: &[&str]) -> serde_json::Value {
    iperf3_finish(iperf3_start(net, args))
}

/// One `/proc/…/status`'s credentials.
#[derive(Debug)]
struct Creds {
    name: String,
    uid: Vec<u32>,
    gid: Vec<u32>,
    groups: Vec<u32>,
    /// CapInh, CapPrm, CapEff, CapAmb.
    caps: Vec<(String, u64)>,
    no_new_privs: String,
}

fn creds(path: &str) -> Creds {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let get = |k: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}:")))
            .unwrap_or_else(|| panic!("no {k} in {path}: {text}"))
            .trim()
            .to_owned()
    };
    let ids = |k: &str| -> Vec<u32> {
        get(k)
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect()
    };
    Creds {
        name: get("Name"),
        uid: ids("Uid"),
        gid: ids("Gid"),
        groups: ids("Groups"),
        caps: ["CapInh", "CapPrm", "CapEff", "CapAmb"]
            .iter()
            .map(|k| (k.to_string(), u64::from_str_radix(&get(k), 16).unwrap()))
            .collect(),
        no_new_privs: get("NoNewPrivs"),
    }
}

/// The process `pid` and each of its threads run as `uid`/`gid`, with no
/// supplementary group, nothing in any capability set (so never
/// CAP_SYS_ADMIN, bit 21) and `no_new_privs`; returns the threads' names.
fn assert_dropped(pid: u32, uid: u32, gid: u32) -> Vec<String> {
    let mut paths = vec![format!("/proc/{pid}/status")];
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        paths.push(format!("{}/status", t.unwrap().path().display()));
    }
    let mut names = Vec::new();
    for p in &paths {
        let c = creds(p);
        assert_eq!(c.uid, [uid; 4], "{p}: {c:?}");
        assert_eq!(c.gid, [gid; 4], "{p}: {c:?}");
        assert!(c.groups.is_empty(), "{p}: {c:?}");
        for (k, v) in &c.caps {
            assert_eq!(v & (1 << 21), 0, "{p}: CAP_SYS_ADMIN in {k}: {c:?}");
            assert_eq!(*v, 0, "{p}: {k}: {c:?}");
        }
        assert_eq!(c.no_new_privs, "1", "{p}: {c:?}");
        names.push(c.name);
    }
    names
}

/// The process is not dumpable: its private `/proc/PID` files belong to
/// root although it runs as `uid` (the kernel's `task_dump_owner`; the
/// directory itself keeps the process's uid), and a process of that user
/// may not look at its file descriptors (the BPF link, the maps, the
/// AF_XDP sockets).
fn assert_not_dumpable(net: &TestNet, pid: u32, uid: u32, gid: u32) {
    for f in ["environ", "fd"] {
        let owner = std::fs::metadata(format!("/proc/{pid}/{f}")).unwrap().uid();
        assert_eq!(
            owner, 0,
            "/proc/{pid}/{f} of a non-dumpable process is root's"
        );
    }
    let out = net
        .a
        .ns
        .command("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
            "ls",
            &format!("/proc/{pid}/fd"),
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "user {uid} may list the fds of xtcp: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Permission denied"), "{err}");
}

/// Whether side A's interface has an XDP program attached (`ip -d link`).
fn xdp_attached(net: &TestNet) -> bool {
    let out = net
        .a
        .ns
        .ip(&["-d", "link", "show", "dev", &net.a.iface])
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.contains("prog/xdp") || text.contains(" xdp")
}

/// After xtcp has exited: nothing attached to the interface, no steering
/// program loaded since `since` that no process holds (a link or program
/// left pinned or attached would be one; the kernel frees a released
/// program shortly after, hence the bounded wait), and the port is the
/// kernel's again (the reservation socket is gone: a kernel listener can
/// bind it).
fn assert_nothing_left(net: &TestNet, since: SystemTime) {
    assert!(
        !xdp_attached(net),
        "an XDP program is left on {}",
        net.a.iface
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = xtcp_engine::xdp::orphaned_steering_programs(since).unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "steering programs left: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _g = net.a.ns.enter().unwrap();
    std::net::TcpListener::bind((net.a.ip4, PORT))
        .unwrap_or_else(|e| panic!("port {PORT} still held: {e}"));
}

/// Every TCP segment side B's stack sent less those its veth dropped
/// before the peer's XDP ran (`Tcp: OutSegs + RetransSegs`, TX dropped);
/// see xdp_stats.rs.
fn segments_reaching_a(net: &TestNet) -> u64 {
    tcp_out_segs(&net.b.ns) - link_stat(&net.b.ns, &net.b.iface, "tx", "dropped")
}

fn redirect_drops(net: &TestNet, queues: u32) -> u64 {
    (0..queues)
        .map(|q| ethtool_stat(&net.a.ns, &net.a.iface, &format!("rx_queue_{q}_drops")))
        .sum()
}

/// `serve --user nobody`, started with supplementary groups (so that
/// clearing them shows), over two queues: while a two-stream test runs,
/// every thread — the two workers among them — is nobody with nothing;
/// the test's bytes are the client's; what xtcp reads after the drop (the
/// steering program's counters through its map, the driver's through
/// ethtool) matches the kernel's counts; SIGTERM detaches everything.
#[test]
fn as_nobody_every_thread_holds_nothing_while_serving_and_sigterm_detaches_everything() {
    let net = testnet(2);
    let (uid, gid) = nobody();
    let since = SystemTime::now();
    let segs0 = segments_reaching_a(&net);
    let drops0 = redirect_drops(&net, 2);
    let b_mib = |k: &str| tcp_mib(&net.b.ns, k);
    let (rtx0, rst0) = (b_mib("RetransSegs"), b_mib("OutRsts"));
    let mut s = Serve::spawn(
        &net,
        &["setpriv", "--groups=4,27"],
        &serve_args("nobody", &["--queues", "2"]),
        &[],
    );
    s.wait_for("listening on");
    assert!(s.err().contains("as nobody"), "{}", s.err());
    assert!(xdp_attached(&net), "attached while serving");

    let mut client = iperf3_start(&net, &["-t", "3", "-P", "2"]);
    let err = s.err.clone();
    wait_established(&net, PORT, 3, &mut [&mut client.0, &mut s.child.0], &|| {
        format!("serve: {}", err.lock().unwrap())
    });
    let names = assert_dropped(s.pid(), uid, gid);
    for w in ["xtcp-q0", "xtcp-q1"] {
        assert!(names.iter().any(|n| n == w), "worker {w}: {names:?}");
    }
    assert_not_dumpable(&net, s.pid(), uid, gid);
    let v = iperf3_finish(client);
    // B's count of what it sent is final once its connections are closed.
    let err = s.err.clone();
    wait_b_done_sending(&net, PORT, &|| format!("serve: {}", err.lock().unwrap()));

    s.signal("-TERM");
    let (status, out, err) = s.wait_exit();
    assert!(status.success(), "SIGTERM: exit 0: {status}: {err}");
    assert!(err.contains("xtcp serve: stopped"), "{err}");
    assert_nothing_left(&net, since);

    let docs = documents(&out);
    assert_eq!(docs.len(), 2, "a test, then the run: {out}");
    let got = docs[0]["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(got > 0, "{out}");
    assert_eq!(
        v["end"]["sum_received"]["bytes"].as_u64(),
        Some(got),
        "the client's count: {v}"
    );
    client_wrote_what_xtcp_received(&net, got, &v);
    let xdp = &docs[1]["xdp"];
    assert_eq!(
        xdp["no_socket"].as_u64(),
        Some(0),
        "nothing arrived on a queue without a socket (a worker that exits first \
         closes its socket while the other's connections still close): {xdp}"
    );
    assert_eq!(
        xdp["steered"].as_u64(),
        Some(segments_reaching_a(&net) - segs0),
        "steered (the BPF map, read as nobody) is what B's stack sent ({} of them \
         retransmitted, {} resets): {xdp}\n{err}",
        b_mib("RetransSegs") - rtx0,
        b_mib("OutRsts") - rst0,
    );
    assert_eq!(
        xdp["driver_drops"].as_u64(),
        Some(redirect_drops(&net, 2) - drops0),
        "the driver's count (ethtool, read as nobody): {xdp}"
    );
}

/// SIGKILL during a test: no destructor runs, the kernel closes the BPF
/// link and the sockets — nothing stays attached or loaded, the port is
/// free.
#[test]
fn sigkill_as_nobody_leaves_nothing_behind() {
    let net = testnet(1);
    let since = SystemTime::now();
    let mut s = Serve::spawn(&net, &[], &serve_args("nobody", &[]), &[]);
    s.wait_for("listening on");
    let mut client = iperf3_start(&net, &["-t", "30"]);
    let err = s.err.clone();
    wait_established(&net, PORT, 2, &mut [&mut client.0, &mut s.child.0], &|| {
        format!("serve: {}", err.lock().unwrap())
    });
    assert!(xdp_attached(&net), "attached while serving");
    s.signal("-KILL");
    let (status, _, err) = s.wait_exit();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{err}"
    );
    assert_nothing_left(&net, since);
}

/// A directory for a notification socket, removed on drop.
struct NotifyDir(PathBuf);

impl NotifyDir {
    fn new() -> NotifyDir {
        let p = std::env::temp_dir().join(format!(
            "xtcp-notify-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir(&p).unwrap();
        // Searchable by the user xtcp drops to.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        NotifyDir(p)
    }
}

impl Drop for NotifyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn datagram(sock: &UnixDatagram, what: &str, s: &Serve) -> String {
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no {what} on NOTIFY_SOCKET ({e}): {}", s.err()));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// systemd's side of `Type=notify`, played by the test: a datagram socket
/// as writable as `/run/systemd/notify`. READY=1 is the only condition the
/// iperf3 test waits for; when it arrives, the drop already holds.
#[test]
fn ready_1_after_the_drop_is_enough_for_a_stock_iperf3_test_and_sigterm_sends_stopping_1() {
    let net = testnet(1);
    let (uid, gid) = nobody();
    let dir = NotifyDir::new();
    let path = dir.0.join("notify");
    let sock = UnixDatagram::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let mut s = Serve::spawn(
        &net,
        &[],
        &serve_args("nobody", &[]),
        &[("NOTIFY_SOCKET", path.to_str().unwrap())],
    );

    let msg = datagram(&sock, "READY=1", &s);
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    let status = msg
        .lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or_else(|| panic!("a STATUS= line: {msg:?}"));
    assert!(
        status.starts_with("listening on ") && status.ends_with(" as nobody"),
        "{status}"
    );
    assert_dropped(s.pid(), uid, gid);

    let v = iperf3_run(&net, &["-t", "1"]);

    // A reload's result is the new status (`systemctl status` shows it).
    s.signal("-HUP");
    let msg = datagram(&sock, "STATUS= after a reload", &s);
    assert!(
        msg.starts_with(&format!("STATUS={status}; reloaded")),
        "{msg:?}"
    );

    s.signal("-TERM");
    let msg = datagram(&sock, "STOPPING=1", &s);
    assert_eq!(msg, "STOPPING=1\n");
    let (status, out, err) = s.wait_exit();
    assert!(status.success(), "{status}: {err}");
    let docs = documents(&out);
    assert_eq!(
        docs[0]["end"]["sum_received"]["bytes"].as_u64(),
        v["end"]["sum_received"]["bytes"].as_u64(),
        "{out} {v}"
    );
    client_wrote_what_xtcp_received(
        &net,
        docs[0]["end"]["sum_received"]["bytes"].as_u64().unwrap(),
        &v,
    );
    // Nothing else was sent.
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    assert!(
        sock.recv(&mut buf).is_err(),
        "one READY=1, one STATUS=, one STOPPING=1"
    );
}

/// With the `no_setuid_fixup` securebit (set by whoever starts xtcp) the
/// kernel keeps every capability across the change of user: the check
/// after the drop finds them, and the run fails before the banner — no
/// test is ever served with them — and leaves nothing behind.
#[test]
fn a_drop_the_kernel_does_not_complete_fails_the_run_before_any_test() {
    let net = testnet(1);
    let since = SystemTime::now();
    let mut s = Serve::spawn(
        &net,
        &["setpriv", "--securebits=+no_setuid_fixup"],
        &serve_args("nobody", &[]),
        &[],
    );
    let (status, _, err) = s.wait_exit();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(!err.contains("listening on"), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("xtcp: error: "))
        .unwrap_or_else(|| panic!("an error line: {err}"));
    for needle in [
        "--user nobody: the privilege drop did not hold: thread ",
        "CapPrm 000",
        "CapEff 000",
        "securebits 0x4",
        "xtcp stops rather than serve with privileges",
    ] {
        assert!(line.contains(needle), "{needle:?} in {line}");
    }
    assert_nothing_left(&net, since);
}

/// Errors before anything is set up, each one line naming the value.
#[test]
fn a_missing_user_uid_0_or_a_start_as_non_root_are_errors_before_setup() {
    let net = testnet(1);
    let (uid, gid) = nobody();
    let cases: [(Vec<&str>, &str, &str); 3] = [
        (
            vec![],
            "xtcp-no-such-user",
            "xtcp: error: no such user `xtcp-no-such-user`: create it (`useradd --system \
             --no-create-home --shell /usr/sbin/nologin xtcp-no-such-user`) or give an existing \
             unprivileged user with --user",
        ),
        (vec![], "root", "xtcp: error: --user root: `root` is uid 0"),
        (
            vec![
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ],
            "nobody",
            "xtcp: error: --user nobody: xtcp drops to `nobody` from root once it is set up, \
             but it runs as uid 65534: start it as root",
        ),
    ];
    assert_eq!((uid, gid), (65534, 65534), "nobody is 65534 here");
    for (wrapper, user, want) in cases {
        let since = SystemTime::now();
        let mut s = Serve::spawn(&net, &wrapper, &serve_args(user, &[]), &[]);
        let (status, _, err) = s.wait_exit();
        assert_eq!(status.code(), Some(1), "{user}: {err}");
        assert!(err.starts_with(want), "{user}: {err}");
        assert_eq!(err.lines().count(), 1, "{user}: {err}");
        assert_nothing_left(&net, since);
    }
}

/// The unit's `Key=value` lines.
fn unit_values(key: &str) -> Vec<String> {
    let unit = std::fs::read_to_string(UNIT).unwrap();
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
        .collect()
}

fn unit_value(key: &str) -> String {
    let v = unit_values(key);
    assert_eq!(v.len(), 1, "one {key}= in the unit: {v:?}");
    v[0].clone()
}

fn systemd_is_pid_1() -> bool {
    std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd")
}

/// `systemd-analyze verify` on the unit, its binary path replaced by the
/// binary under test (verify wants it to exist).
#[test]
fn the_unit_verifies() {
    if !systemd_is_pid_1() {
        eprintln!(
            "note: systemd is not PID 1 here: the unit is verified offline, and \
             the_units_capabilities_serve_and_each_one_is_needed proves its capability set"
        );
    }
    let unit = std::fs::read_to_string(UNIT).unwrap();
    assert!(
        unit.contains(&format!("ExecStart={INSTALLED} serve ")),
        "{unit}"
    );
    let dir = NotifyDir::new();
    let copy = dir.0.join("xtcp-serve.service");
    std::fs::write(&copy, unit.replace(INSTALLED, XTCP)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", copy.to_str().unwrap()])
        .env("SYSTEMD_LOG_LEVEL", "notice")
        .output()
        .expect("systemd-analyze (apt install systemd)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("xtcp-serve.service"))
        .collect();
    assert!(ours.is_empty(), "complaints about the unit: {ours:?}");

    // What the rest of this file relies on.
    assert_eq!(unit_value("Type"), "notify");
    assert_eq!(unit_value("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(unit_value("NoNewPrivileges"), "yes");
    assert!(
        unit_values("User").is_empty(),
        "starts as root, drops itself"
    );
    assert!(!unit_value("CapabilityBoundingSet").contains("CAP_SYS_ADMIN"));
    assert_eq!(unit_value("AmbientCapabilities"), "");
}

/// The unit's capability bounding set as `setpriv` applies it, the way
/// systemd starts the root service (bounding set, empty inheritable and
/// ambient sets, `no_new_privs`), under the memlock limit the unit leaves
/// as it is: the kernel's default, 8 MiB (systemd's DefaultLimitMEMLOCK
/// since 253), below the UMEM (ENGINE: 8192 frames of 4096 bytes).
fn as_the_unit_starts_it(caps: &[String]) -> Vec<String> {
    let set: Vec<String> = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let mut w: Vec<String> = [
        "prlimit",
        "--memlock=8388608:8388608",
        "setpriv",
        "--no-new-privs",
        "--inh-caps=-all",
        "--ambient-caps=-all",
    ]
    .map(str::to_owned)
    .to_vec();
    w.push(format!("--bounding-set=-all,{}", set.join(",")));
    w
}

/// The unit's set is enough and nothing in it is spare: with exactly it a
/// stock iperf3 test runs (as nobody; xtcp sends) and SIGTERM cleans up; with one
/// capability left out, setup (or, for CAP_SETUID and CAP_SETGID, the
/// check before it) fails with one line naming it.
#[test]
fn the_units_capabilities_serve_and_each_one_is_needed() {
    let net = testnet(1);
    let (uid, gid) = nobody();
    let caps: Vec<String> = unit_value("CapabilityBoundingSet")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert!(
        unit_values("LimitMEMLOCK").is_empty(),
        "CAP_IPC_LOCK instead"
    );
    assert!(!caps.is_empty());

    let since = SystemTime::now();
    let w = as_the_unit_starts_it(&caps);
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    let mut s = Serve::spawn(&net, &w, &serve_args("nobody", &[]), &[]);
    s.wait_for("listening on");
    // Reverse: xtcp sends (TX ring, `sendto` kicks, completions) as nobody.
    let v = iperf3_run(&net, &["-n", "64M", "-R"]);
    assert_dropped(s.pid(), uid, gid);
    s.signal("-TERM");
    let (status, out, err) = s.wait_exit();
    assert!(status.success(), "{status}: {err}");
    assert_eq!(v["end"]["sum_received"]["bytes"].as_u64(), Some(64 << 20));
    assert_eq!(
        documents(&out)[0]["end"]["sum_sent"]["bytes"].as_u64(),
        Some(64 << 20),
        "{out}"
    );
    assert_nothing_left(&net, since);

    for missing in &caps {
        let set: Vec<String> = caps.iter().filter(|c| *c != missing).cloned().collect();
        let w = as_the_unit_starts_it(&set);
        let w: Vec<&str> = w.iter().map(String::as_str).collect();
        let mut s = Serve::spawn(&net, &w, &serve_args("nobody", &[]), &[]);
        let (status, _, err) = s.wait_exit();
        assert_eq!(status.code(), Some(1), "without {missing}: {err}");
        assert!(err.contains(missing.as_str()), "without {missing}: {err}");
        assert_eq!(err.lines().count(), 1, "without {missing}: {err}");
    }
}
