//! Test drivers that carry the sans-IO iperf3 sessions over kernel TCP
//! (std::net, 127.0.0.1), and helpers to run the real `/usr/bin/iperf3`.
//!
//! These loops are test code: single-threaded, non-blocking sockets, a 1 ms
//! nap when idle, every loop bounded in iterations and time.
#![allow(dead_code)]

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use xtcp_engine::app::iperf3::{
    ACCESS_DENIED_BYTE, COOKIE_LEN, ClientConfig, ClientSession, ControlEnd, Cookie, EndReport,
    Error, Event, Results, Role, Route, ServerConfig, ServerOutput, ServerSession, StreamInfo,
    StreamStats, TestParams, route,
};

pub const IPERF3: &str = "/usr/bin/iperf3";

/// True if the real iperf3 is installed; otherwise prints why the test skips.
pub fn have_iperf3(test: &str) -> bool {
    let ok = std::path::Path::new(IPERF3).exists();
    if !ok {
        eprintln!("SKIP {test}: {IPERF3} is not installed (CI installs the iperf3 package)");
    }
    ok
}

/// Random bytes without a random-number crate: std's per-instance SipHash keys.
pub fn entropy<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_usize(i);
        h.write_u32(std::process::id());
        let v = h.finish().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    out
}

/// The most payload that kernel TCP on this machine can hold between one
/// sender's `write` and its receiver's `read`: the largest send and receive
/// buffers auto-tuning may grow to (the third fields of `tcp_wmem` and
/// `tcp_rmem`; buffer accounting counts at least the payload), plus 1 MiB for
/// the one skb either queue may overshoot by. A peer that ends a test by a
/// control message (as `iperf3 -s` does on TEST_END) stops reading with up
/// to this much still queued, so it may report less than was written by at
/// most this much per stream.
pub fn kernel_queue_bound() -> u64 {
    let max = |name: &str| -> u64 {
        let path = format!("/proc/sys/net/ipv4/{name}");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        text.split_whitespace()
            .nth(2)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{path}: no third field in {text:?}"))
    };
    max("tcp_wmem") + max("tcp_rmem") + (1 << 20)
}

pub fn random_port() -> u16 {
    let b: [u8; 2] = entropy();
    20000 + u16::from_le_bytes(b) % 10000
}

/// A listener on 127.0.0.1 at a random port in 20000..30000, retrying on
/// EADDRINUSE.
pub fn bind_random() -> (TcpListener, u16) {
    for _ in 0..100 {
        let port = random_port();
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            Ok(l) => return (l, port),
            Err(e) if e.kind() == ErrorKind::AddrInUse => continue,
            Err(e) => panic!("bind 127.0.0.1:{port}: {e}"),
        }
    }
    panic!("no free port in 20000..30000 after 100 tries");
}

/// Writes all of `bytes` to a non-blocking socket, waiting at most `limit`.
fn write_all_nb(sock: &mut TcpStream, mut bytes: &[u8], limit: Duration) -> std::io::Result<()> {
    let until = Instant::now() + limit;
    while !bytes.is_empty() {
        match sock.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() > until {
                    return Err(ErrorKind::TimedOut.into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

enum ReadOutcome {
    Data(usize),
    WouldBlock,
    Closed(ControlEnd),
}

/// How a kernel socket's error ended the connection.
fn control_end(e: &std::io::Error) -> ControlEnd {
    match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => ControlEnd::Reset,
        ErrorKind::TimedOut => ControlEnd::TimedOut,
        ErrorKind::ConnectionRefused => ControlEnd::Refused,
        _ => ControlEnd::Aborted,
    }
}

fn read_nb(sock: &mut TcpStream, buf: &mut [u8]) -> ReadOutcome {
    match sock.read(buf) {
        Ok(0) => ReadOutcome::Closed(ControlEnd::Closed),
        Ok(n) => ReadOutcome::Data(n),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
            ReadOutcome::WouldBlock
        }
        Err(e) => ReadOutcome::Closed(control_end(&e)),
    }
}

struct DataConn {
    sock: TcpStream,
    info: StreamInfo,
    closed: bool,
    /// Bytes of the current block already written (iperf3's sender, too,
    /// finishes a block before it starts the next). No reader depends on
    /// it: iperf3's reads return short, and their offsets need not match
    /// the blocks written.
    block_off: usize,
}

/// Writes the rest of the current block and then whole blocks, up to 8
/// writes, without blocking; records what went out.
fn send_blocks(c: &mut DataConn, block: &[u8], mut record: impl FnMut(u64)) -> bool {
    let mut busy = false;
    for _ in 0..8 {
        match c.sock.write(&block[c.block_off..]) {
            Ok(n) => {
                busy = true;
                record(n as u64);
                c.block_off = (c.block_off + n) % block.len();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => {
                c.closed = true;
                break;
            }
        }
    }
    busy
}

/// Bytes the sending end of `sock` (a peer on this host, over loopback)
/// still holds: written but not yet acknowledged (`/proc/net/tcp`'s
/// `tx_queue` of the socket whose local address is `sock`'s peer). None
/// once that socket is gone.
fn peer_unacked(sock: &TcpStream) -> Option<u64> {
    let hex = |a: SocketAddr| match a {
        SocketAddr::V4(a) => format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(a.ip().octets()),
            a.port()
        ),
        SocketAddr::V6(_) => unreachable!("the drivers run on 127.0.0.1"),
    };
    let (local, remote) = (hex(sock.peer_addr().ok()?), hex(sock.local_addr().ok()?));
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&local.as_str()) && f.get(2) == Some(&remote.as_str())).then(|| {
            let tx = f[4].split(':').next().unwrap_or("0");
            u64::from_str_radix(tx, 16).unwrap_or(0)
        })
    })
}

/// Reads every receiving stream until its sender (a peer on this host)
/// holds nothing unacknowledged and nothing is left to read, or it is
/// closed: every byte the peer wrote before it sent TEST_END, however
/// long a loaded machine takes to deliver it. At most `limit`; returns
/// bytes per stream.
fn drain(conns: &mut [DataConn], buf: &mut [u8], limit: Duration) -> Vec<u64> {
    let start = Instant::now();
    let mut got = vec![0u64; conns.len()];
    while start.elapsed() < limit {
        let mut open = false;
        for (i, c) in conns.iter_mut().enumerate() {
            if c.info.role != Role::Receive || c.closed {
                continue;
            }
            // Whether the sender held anything before this read: what it
            // still held then is either read now or still to come.
            let held = peer_unacked(&c.sock).unwrap_or(0);
            match read_nb(&mut c.sock, buf) {
                ReadOutcome::Data(n) => {
                    got[i] += n as u64;
                    open = true;
                }
                ReadOutcome::Closed(_) => c.closed = true,
                ReadOutcome::WouldBlock => open |= held > 0,
            }
        }
        if !open {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    got
}

/// What the server driver saw of one control connection.
#[derive(Debug)]
pub struct ServerOutcome {
    pub result: Result<(), Error>,
    pub params: Option<TestParams>,
    pub streams: Vec<StreamStats>,
    pub peer: Option<Results>,
    /// When the session's counts began (with `-O`, the end of the omitted
    /// seconds).
    pub counted_from: Option<Instant>,
}

impl ServerOutcome {
    pub fn bytes(&self, role: Role) -> u64 {
        self.streams
            .iter()
            .filter(|s| s.role == role)
            .map(|s| s.counted_bytes())
            .sum()
    }
}

struct ServerTest {
    ctrl: TcpStream,
    session: ServerSession,
    pending: Vec<(TcpStream, Vec<u8>, Instant)>,
    data: Vec<DataConn>,
    running: bool,
    peer: Option<Results>,
    result: Option<Result<(), Error>>,
}

/// A `ServerSession` loop on a kernel listener, in a thread.
pub struct ServerHandle {
    pub port: u16,
    stop: Arc<AtomicBool>,
    pub outcomes: Arc<Mutex<Vec<ServerOutcome>>>,
    /// True while a test is past TEST_START and not finished.
    pub running: Arc<AtomicBool>,
    /// Bytes the server has counted on receiving streams, all tests.
    pub received: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    pub fn start(config: ServerConfig) -> ServerHandle {
        let (listener, port) = bind_random();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let running = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let (s, o, r, n) = (
            stop.clone(),
            outcomes.clone(),
            running.clone(),
            received.clone(),
        );
        let thread = std::thread::spawn(move || server_loop(listener, config, &s, &o, &r, &n));
        ServerHandle {
            port,
            stop,
            outcomes,
            running,
            received,
            thread: Some(thread),
        }
    }

    /// Waits (at most `limit`) until the server has counted `n` received
    /// bytes in all.
    pub fn wait_received(&self, n: u64, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.received.load(Ordering::Relaxed) < n {
            if Instant::now() > until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Waits (at most `limit`) until `n` control connections have finished.
    pub fn wait_outcomes(&self, n: usize, limit: Duration) -> usize {
        let until = Instant::now() + limit;
        loop {
            let have = self.outcomes.lock().unwrap().len();
            if have >= n || Instant::now() > until {
                return have;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits (at most `limit`) until a test is running.
    pub fn wait_running(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while !self.running.load(Ordering::Relaxed) {
            if Instant::now() > until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    pub fn take_outcomes(&self) -> Vec<ServerOutcome> {
        std::mem::take(&mut *self.outcomes.lock().unwrap())
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The server loop lives at most this long, whatever happens.
const SERVER_LIFETIME: Duration = Duration::from_secs(120);

fn server_loop(
    listener: TcpListener,
    config: ServerConfig,
    stop: &AtomicBool,
    outcomes: &Mutex<Vec<ServerOutcome>>,
    running: &AtomicBool,
    received: &AtomicU64,
) {
    let born = Instant::now();
    let mut test: Option<ServerTest> = None;
    let mut buf = vec![0u8; 256 * 1024];
    let mut block = Vec::new();
    while !stop.load(Ordering::Relaxed) && born.elapsed() < SERVER_LIFETIME {
        let now = Instant::now();
        let mut busy = false;

        // New connections: control, data, or refused.
        for _ in 0..16 {
            let sock = match listener.accept() {
                Ok((s, _)) => s,
                Err(_) => break,
            };
            busy = true;
            sock.set_nonblocking(true).unwrap();
            let _ = sock.set_nodelay(true);
            match route(test.as_ref().map(|t| &t.session)) {
                Route::Control => {
                    test = Some(ServerTest {
                        ctrl: sock,
                        // Its clock from the accept, after the client's
                        // connect: the turn's `now` can be older.
                        session: ServerSession::new(config.clone(), Instant::now()),
                        pending: Vec::new(),
                        data: Vec::new(),
                        running: false,
                        peer: None,
                        result: None,
                    })
                }
                Route::Data => {
                    if let Some(t) = &mut test {
                        t.pending.push((sock, Vec::new(), now));
                    }
                }
                Route::Refuse => {
                    let mut sock = sock;
                    let _ = sock.write(&[ACCESS_DENIED_BYTE]);
                }
            }
        }

        let Some(t) = &mut test else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };

        // Data connections still sending their cookie.
        let mut i = 0;
        while i < t.pending.len() {
            let (sock, got, since) = &mut t.pending[i];
            let mut cookie = [0u8; COOKIE_LEN];
            let want = COOKIE_LEN - got.len();
            let done = match read_nb(sock, &mut cookie[..want]) {
                ReadOutcome::Data(n) => {
                    got.extend_from_slice(&cookie[..n]);
                    got.len() == COOKIE_LEN
                }
                ReadOutcome::Closed(_) => true,
                ReadOutcome::WouldBlock => since.elapsed() > Duration::from_secs(5),
            };
            if done {
                let (mut sock, got, _) = t.pending.swap_remove(i);
                busy = true;
                match t.session.accept_stream(now, &got) {
                    Ok(info) => t.data.push(DataConn {
                        sock,
                        info,
                        closed: false,
                        block_off: 0,
                    }),
                    Err(_) => {
                        let _ = sock.write(&[ACCESS_DENIED_BYTE]);
                    }
                }
            } else {
                i += 1;
            }
        }

        // Control input.
        match read_nb(&mut t.ctrl, &mut buf[..4096]) {
            ReadOutcome::Data(n) => {
                busy = true;
                t.session.handle_control(now, &buf[..n]);
            }
            ReadOutcome::Closed(how) => t.session.handle_control_eof(now, how),
            ReadOutcome::WouldBlock => {}
        }

        // Data.
        if t.running {
            for c in t.data.iter_mut().filter(|c| !c.closed) {
                match c.info.role {
                    Role::Receive => {
                        for _ in 0..8 {
                            match read_nb(&mut c.sock, &mut buf) {
                                ReadOutcome::Data(n) => {
                                    busy = true;
                                    t.session.record_bytes(c.info.id, n as u64);
                                    received.fetch_add(n as u64, Ordering::Relaxed);
                                }
                                ReadOutcome::Closed(_) => {
                                    c.closed = true;
                                    break;
                                }
                                ReadOutcome::WouldBlock => break,
                            }
                        }
                    }
                    Role::Send => {
                        let (session, id) = (&mut t.session, c.info.id);
                        busy |= send_blocks(c, &block, |n| {
                            session.record_bytes(id, n);
                        });
                    }
                }
            }
        }

        if t.session.poll_timeout().is_some_and(|d| now >= d) {
            t.session.handle_timeout(now);
        }

        // Outputs, then events, until both are empty.
        for _ in 0..8 {
            if let Some(out) = t.session.poll_transmit() {
                busy = true;
                if let Err(e) = write_all_nb(&mut t.ctrl, &out, Duration::from_secs(5)) {
                    t.session
                        .handle_control_eof(Instant::now(), control_end(&e));
                }
            }
            let Some(ev) = t.session.poll_event() else {
                break;
            };
            busy = true;
            match ev {
                Event::CreateStreams { .. } => {}
                Event::StartTest { params } => {
                    block = vec![0x5a; params.block_len as usize];
                    t.running = true;
                    running.store(true, Ordering::Relaxed);
                }
                Event::TestEnd => {
                    t.running = false;
                    // What the client wrote before TEST_END is already in our
                    // receive queues: count it, then report.
                    let got = drain(&mut t.data, &mut buf, Duration::from_secs(10));
                    for (c, n) in t.data.iter().zip(got) {
                        t.session.record_bytes(c.info.id, n);
                    }
                    // Close every data connection before EXCHANGE_RESULTS goes
                    // out, as iperf3's server does on TEST_END. In reverse mode
                    // iperf3 3.12's client makes its data sockets blocking once
                    // it has sent TEST_END and goes on reading them with
                    // whole-block reads before it looks at the control
                    // connection again: only EOF ends such a read.
                    t.data.clear();
                    t.session
                        .end_test(Instant::now(), EndReport::default())
                        .unwrap();
                }
                Event::PeerResults(r) => {
                    t.peer = Some(*r);
                    if t.session.params().is_some_and(|p| p.get_server_output) {
                        let text = format!(
                            "xtcp test driver: {} bytes received, {} sent\n",
                            t.session.counted_bytes(Role::Receive),
                            t.session.counted_bytes(Role::Send)
                        );
                        t.session
                            .send_server_output(Instant::now(), ServerOutput::Text(text))
                            .unwrap();
                    }
                }
                Event::Done => t.result = Some(Ok(())),
                Event::Error(e) => t.result = Some(Err(e)),
            }
        }

        if t.session.is_finished() {
            if let Some(out) = t.session.poll_transmit() {
                let _ = write_all_nb(&mut t.ctrl, &out, Duration::from_secs(1));
            }
            let result = t.result.take().unwrap_or(Err(Error::ControlClosed {
                phase: "terminated",
                how: ControlEnd::Closed,
            }));
            outcomes.lock().unwrap().push(ServerOutcome {
                result,
                params: t.session.params().cloned(),
                streams: t.session.streams().to_vec(),
                peer: t.peer.take(),
                counted_from: t.session.counted_from(),
            });
            test = None; // closes every socket of the test
            running.store(false, Ordering::Relaxed);
            continue;
        }
        if !busy {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A child process with its output collected by threads (so a full pipe
/// never blocks it) and a bounded wait.
pub struct Proc {
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

pub struct ProcOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Proc {
    pub fn spawn(args: &[&str]) -> Proc {
        let mut child = Command::new(IPERF3)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {IPERF3} {args:?}: {e}"));
        let collect = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = r.read_to_string(&mut s);
                s
            })
        };
        let stdout = child.stdout.take().map(|o| collect(Box::new(o)));
        let stderr = child.stderr.take().map(|o| collect(Box::new(o)));
        Proc {
            child,
            stdout,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Some(status) if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits at most `limit`; kills it (by its PID) if it outlives that.
    pub fn wait(mut self, limit: Duration) -> Result<ProcOutput, String> {
        let until = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.try_wait() {
                break s;
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(format!(
                    "iperf3 (pid {}) still running after {limit:?}; killed",
                    self.child.id()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = self.stdout.take().map(|h| h.join().unwrap_or_default());
        let stderr = self.stderr.take().map(|h| h.join().unwrap_or_default());
        Ok(ProcOutput {
            status,
            stdout: stdout.unwrap_or_default(),
            stderr: stderr.unwrap_or_default(),
        })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.try_wait().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `iperf3 -c 127.0.0.1 -p PORT -J <extra>` to completion (bounded) and
/// returns its JSON, after checking exit status 0 and no `error` key.
pub fn run_iperf3_client(port: u16, extra: &[&str]) -> Value {
    let port_s = port.to_string();
    let mut args = vec!["-c", "127.0.0.1", "-p", &port_s, "-J"];
    args.extend_from_slice(extra);
    let out = Proc::spawn(&args)
        .wait(Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("{e}"));
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "iperf3 {args:?}: bad JSON ({e}): {}\n{}",
            out.stdout, out.stderr
        )
    });
    assert!(
        out.status.success(),
        "iperf3 {args:?} exited {:?}: {}",
        out.status,
        out.stderr
    );
    assert!(
        v.get("error").is_none(),
        "iperf3 {args:?} reported {}",
        v["error"]
    );
    v
}

/// Socket inodes listening on `port`, from /proc/net/tcp and tcp6 (so we
/// can wait for a server without connecting to it: a connection would count
/// as a test).
fn listening_inodes(port: u16) -> Vec<String> {
    let needle = format!(":{port:04X}");
    let mut out = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for l in text.lines().skip(1) {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() > 9 && cols[1].ends_with(&needle) && cols[3] == "0A" {
                out.push(cols[9].to_string());
            }
        }
    }
    out
}

/// True if process `pid` listens on `port` (another process on the same
/// port does not count).
pub fn pid_listens(pid: u32, port: u16) -> bool {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|t| {
            let t = t.to_string_lossy();
            inodes.iter().any(|i| t == format!("socket:[{i}]"))
        })
    })
}

/// A one-off `iperf3 -s -1 -J` on a random port, listening when returned.
pub fn start_iperf3_server() -> (Proc, u16) {
    for _ in 0..20 {
        let port = random_port();
        if !listening_inodes(port).is_empty() {
            continue;
        }
        let port_s = port.to_string();
        let mut p = Proc::spawn(&["-s", "-1", "-J", "-p", &port_s]);
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if pid_listens(p.pid(), port) {
                return (p, port);
            }
            if p.try_wait().is_some() || Instant::now() > until {
                break; // port taken (or slow start): next port
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    panic!("could not start iperf3 -s on any port in 20000..30000");
}

/// What the client driver saw.
#[derive(Debug)]
pub struct ClientOutcome {
    pub streams: Vec<StreamStats>,
    pub peer: Results,
    pub events: Vec<String>,
}

impl ClientOutcome {
    pub fn bytes(&self, role: Role) -> u64 {
        self.streams
            .iter()
            .filter(|s| s.role == role)
            .map(|s| s.counted_bytes())
            .sum()
    }

    pub fn peer_bytes(&self) -> u64 {
        self.peer.streams.iter().map(|s| s.bytes).sum()
    }
}

/// Runs one test with a `ClientSession` over kernel TCP against a server on
/// 127.0.0.1:`port`. Bounded by `limit`.
pub fn run_client(port: u16, params: TestParams, limit: Duration) -> Result<ClientOutcome, Error> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut ctrl =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect control");
    ctrl.set_nodelay(true).unwrap();
    ctrl.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let config = ClientConfig {
        params,
        ..ClientConfig::default()
    };
    let mut session = ClientSession::new(config, Cookie::from_entropy(&entropy()), start)?;
    let mut data: Vec<DataConn> = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut block = Vec::new();
    let mut sending = false;
    let mut events = Vec::new();
    let mut peer = None;
    while start.elapsed() < limit {
        let now = Instant::now();
        let mut busy = false;
        match read_nb(&mut ctrl, &mut buf[..4096]) {
            ReadOutcome::Data(n) => {
                busy = true;
                session.handle_control(now, &buf[..n]);
            }
            ReadOutcome::Closed(how) => session.handle_control_eof(now, how),
            ReadOutcome::WouldBlock => {}
        }
        for c in data.iter_mut().filter(|c| !c.closed) {
            match c.info.role {
                Role::Receive => {
                    for _ in 0..8 {
                        match read_nb(&mut c.sock, &mut buf) {
                            ReadOutcome::Data(n) => {
                                busy = true;
                                session.record_bytes(c.info.id, n as u64);
                            }
                            ReadOutcome::Closed(_) => {
                                c.closed = true;
                                break;
                            }
                            ReadOutcome::WouldBlock => break,
                        }
                    }
                }
                Role::Send if sending => {
                    let id = c.info.id;
                    busy |= send_blocks(c, &block, |n| {
                        session.record_bytes(id, n);
                    });
                }
                Role::Send => {}
            }
        }
        if session.poll_timeout().is_some_and(|d| now >= d) {
            session.handle_timeout(now);
        }
        for _ in 0..8 {
            if let Some(out) = session.poll_transmit() {
                busy = true;
                if let Err(e) = write_all_nb(&mut ctrl, &out, Duration::from_secs(5)) {
                    session.handle_control_eof(Instant::now(), control_end(&e));
                }
            }
            let Some(ev) = session.poll_event() else {
                break;
            };
            busy = true;
            events.push(format!("{ev:?}").chars().take(80).collect::<String>());
            match ev {
                Event::CreateStreams { .. } => {
                    for info in session.streams() {
                        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                            .expect("connect data stream");
                        s.set_nodelay(true).unwrap();
                        s.write_all(session.cookie().as_bytes()).unwrap();
                        s.set_nonblocking(true).unwrap();
                        data.push(DataConn {
                            sock: s,
                            info,
                            closed: false,
                            block_off: 0,
                        });
                    }
                }
                Event::StartTest { params } => {
                    block = vec![0xa5; params.block_len as usize];
                    sending = true;
                }
                Event::TestEnd => {
                    sending = false;
                    session.end_test(Instant::now(), EndReport::default())?;
                }
                Event::PeerResults(r) => peer = Some(*r),
                Event::Done => {
                    return Ok(ClientOutcome {
                        streams: session.stream_stats().to_vec(),
                        peer: peer.take().expect("results before Done"),
                        events,
                    });
                }
                Event::Error(e) => return Err(e),
            }
        }
        if !busy {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Err(Error::Timeout {
        phase: "client driver limit",
    })
}
