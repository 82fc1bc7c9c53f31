//! Helpers shared by the CLI tests (`client.rs`, `serve.rs`, `bulk.rs`).
#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xtcp_engine::testnet::{Netns, TestNet, TestNetConfig};
use xtcp_engine::worker::bulk::pattern_fill;

/// The binary under test.
pub const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");

/// Engine options of every xtcp end on the test network: copy mode (veth
/// has no zero-copy), verified checksums (offloads are off), and fewer
/// UMEM frames than the default.
pub const ENGINE: [&str; 6] = ["--bind", "copy", "--rx-csum", "verify", "--frames", "8192"];

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

/// Kills a child on drop (a failing test leaves nothing running).
pub struct Reap(pub Child);

impl Drop for Reap {
    fn drop(&mut self) {
        // A process a test stopped (SIGSTOP) is let go on first.
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .args(["-CONT", &self.0.id().to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
        let mut child = net
            .a
            .ns
            .command(XTCP)
            .args(args)
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
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

/// A kernel sender in side B: connects to `dst` (retrying while xtcp
/// starts), writes `len` bytes of the pattern `seed` and returns once the
/// kernel says that all of them were acknowledged (`ss -i`), with the
/// connection open.
pub fn acked_sender(net: &TestNet, dst: SocketAddr, seed: u64, len: usize) -> TcpStream {
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
    s.write_all(&buf).unwrap();
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

/// Sends `count` TCP SYNs from side B to A's port `port`, from source
/// ports 1024 on, as raw Ethernet frames (no socket of B's kernel owns
/// them: B answers the SYN-ACKs with resets).
pub fn syn_flood(net: &TestNet, port: u16, count: u32) {
    let mac = |m: [u8; 6]| m.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let script = format!(
        r#"
import socket, struct
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
src, dst = socket.inet_aton("{b_ip}"), socket.inet_aton("{a_ip}")
eth = bytes.fromhex("{a_mac}") + bytes.fromhex("{b_mac}") + b"\x08\x00"
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("{b_if}", 0))
for i in range({count}):
    sport = 1024 + i
    tcp = struct.pack("!HHIIBBHHH", sport, {port}, 1000 + i, 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), i & 0xffff, 0, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    s.send(eth + ip + tcp)
"#,
        b_ip = net.b.ip4,
        a_ip = net.a.ip4,
        a_mac = mac(net.a.mac),
        b_mac = mac(net.b.mac),
        b_if = net.b.iface,
    );
    let out = net
        .b
        .ns
        .command("python3")
        .args(["-c", &script])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "the SYN flood: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
