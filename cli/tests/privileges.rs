//! The capability set docs/DEPLOYMENT.md documents, run for real: `xtcp
//! recv` as an unprivileged user with exactly CAP_NET_ADMIN + CAP_NET_RAW +
//! CAP_BPF + CAP_PERFMON (and CAP_IPC_LOCK, or a memlock limit that holds
//! the UMEM) completes a transfer from the kernel's TCP; without
//! CAP_PERFMON, or with a memlock limit too small, it fails with one short
//! message naming what is missing and how to get it; `xtcp probe` says the
//! same beforehand.
//!
//! Each test runs as its own uid: the kernel charges locked memory per user,
//! so tests running at once must not share one.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use xtcp_engine::testnet::{TestNet, TestNetConfig};

const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");
/// What docs/DEPLOYMENT.md says xtcp needs besides root.
const DOCUMENTED: &str = "+net_admin,+net_raw,+bpf,+perfmon";

fn testnet() -> TestNet {
    TestNet::new(TestNetConfig {
        mtu: 1500,
        queues: 1,
        offloads: false,
    })
    .unwrap_or_else(|e| panic!("cannot build the test network (these tests run as root): {e}"))
}

/// `xtcp args…` in side A's namespace as `uid` with exactly `caps`
/// (inheritable and ambient, so they survive the exec), under a memlock
/// limit of `memlock` bytes if given.
fn as_user(net: &TestNet, uid: u32, caps: &str, memlock: Option<u64>, args: &[&str]) -> Command {
    let mut c = net.a.ns.command("prlimit");
    if let Some(m) = memlock {
        c.arg(format!("--memlock={m}:{m}"));
    }
    c.args([
        "setpriv",
        &format!("--reuid={uid}"),
        &format!("--regid={uid}"),
        "--clear-groups",
        &format!("--inh-caps=-all,{caps}"),
        &format!("--ambient-caps=-all,{caps}"),
        XTCP,
    ])
    .args(args)
    .env_remove("RUST_LOG")
    .env_remove("XTCP_LOG");
    c
}

fn recv_args(net: &TestNet, port: u16) -> Vec<String> {
    [
        "recv",
        "--iface",
        &net.a.iface,
        "--listen",
        &port.to_string(),
        "--discard",
        "--bind",
        "copy",
    ]
    .map(str::to_owned)
    .to_vec()
}

struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The child's standard error (piped), read to the end.
fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut err).unwrap();
    }
    err
}

/// A kernel TCP client in side B's namespace: connects to `to` (retrying
/// while xtcp sets up, bounded), writes `len` bytes, closes.
fn kernel_send(net: &TestNet, to: SocketAddr, len: usize, recv: &mut Reap) {
    let _g = net.b.ns.enter().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut s = loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(e) => {
                if let Some(st) = recv.0.try_wait().unwrap() {
                    panic!(
                        "xtcp recv exited ({st}) before accepting: {}",
                        stderr_of(&mut recv.0)
                    );
                }
                assert!(Instant::now() < deadline, "xtcp never accepted: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    s.write_all(&vec![0x5a; len]).unwrap();
    drop(s);
}

/// Waits (bounded) for the child to exit; its status and standard error.
fn finish(recv: &mut Reap) -> (ExitStatus, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = recv.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "xtcp recv did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, stderr_of(&mut recv.0))
}

/// The documented capabilities move data: with CAP_IPC_LOCK and the
/// default UMEM (64 MiB, far above an 8 MiB memlock limit), and without
/// CAP_IPC_LOCK under a memlock limit that holds a smaller UMEM.
#[test]
fn documented_capabilities_complete_a_transfer() {
    let net = testnet();
    let len = 1_000_000;
    let ways: [(u32, String, Option<u64>, &[&str]); 2] = [
        (65531, format!("{DOCUMENTED},+ipc_lock"), None, &[]),
        // 512 frames × 4096 B = 2 MiB under a 2 MiB limit.
        (
            65530,
            DOCUMENTED.to_owned(),
            Some(2 << 20),
            &["--frames", "512", "--ring", "64"],
        ),
    ];
    for (i, (uid, caps, memlock, extra)) in ways.iter().enumerate() {
        let port = 5301 + i as u16;
        let mut args = recv_args(&net, port);
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut recv = Reap(
            as_user(&net, *uid, caps, *memlock, &args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        kernel_send(
            &net,
            SocketAddr::new(net.a.ip4.into(), port),
            len,
            &mut recv,
        );
        let (status, err) = finish(&mut recv);
        assert!(status.success(), "caps {caps}, memlock {memlock:?}: {err}");
        // The kernel sender's count: every byte it wrote arrived.
        assert!(
            err.contains(&format!("received {len} bytes")),
            "caps {caps}, memlock {memlock:?}: {err}"
        );
    }
}

#[test]
fn without_cap_perfmon_the_load_error_is_short_and_names_it() {
    let net = testnet();
    let args = recv_args(&net, 5311);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = as_user(
        &net,
        65529,
        "+net_admin,+net_raw,+bpf,+ipc_lock",
        None,
        &args,
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("lacks CAP_PERFMON"), "{err}");
    assert!(err.contains("--log debug"), "says where the log is: {err}");
    assert_eq!(err.lines().count(), 1, "one line, no verifier log: {err}");
    assert!(!err.contains("processed "), "no verifier statistics: {err}");

    // The full log is there at debug level.
    let mut debug_args = vec!["--log", "debug"];
    debug_args.extend(&args);
    let out = as_user(
        &net,
        65529,
        "+net_admin,+net_raw,+bpf,+ipc_lock",
        None,
        &debug_args,
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("processed "), "verifier log at debug: {err}");
}

/// Each capability of the documented set, left out, is named in a
/// one-line error.
#[test]
fn each_missing_capability_is_named_in_one_line() {
    let net = testnet();
    let args = recv_args(&net, 5315);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let all = ["net_admin", "net_raw", "bpf", "perfmon", "ipc_lock"];
    for left_out in ["net_admin", "net_raw", "bpf", "perfmon"] {
        let caps: Vec<String> = all
            .iter()
            .filter(|c| **c != left_out)
            .map(|c| format!("+{c}"))
            .collect();
        let out = as_user(&net, 65526, &caps.join(","), None, &args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "without {left_out}: {err}");
        let name = format!("lacks CAP_{}", left_out.to_uppercase());
        assert!(err.contains(&name), "without {left_out}: {err}");
        assert_eq!(err.lines().count(), 1, "without {left_out}: {err}");
    }
}

/// `send` without CAP_NET_ADMIN: the kernel refuses to look up the peer's
/// link-layer address for it (before any program is loaded), and the one
/// line says so, names what this process lacks and how to grant it (it
/// said "netlink: kernel answered Operation not permitted").
#[test]
fn send_without_cap_net_admin_names_it_at_the_neighbour_lookup() {
    let net = testnet();
    let peer = net.b.ip4.to_string();
    let args = [
        "send",
        "--iface",
        &net.a.iface,
        "-c",
        &peer,
        "--pattern",
        "1",
        "-n",
        "1M",
    ];
    for (uid, caps) in [(65525, "+net_raw,+bpf,+perfmon"), (65524, "-all")] {
        // The peer not yet known (the test network's permanent entry
        // gone too): its address must be asked for.
        net.a
            .ns
            .exec(&["ip", "neigh", "flush", "dev", &net.a.iface, "nud", "all"])
            .unwrap();
        let out = as_user(&net, uid, caps, None, &args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{caps}: {err}");
        for needle in [
            format!("asking the kernel for {peer}'s link-layer address"),
            "needs CAP_NET_ADMIN; this process lacks CAP_NET_ADMIN".into(),
            "setcap cap_net_admin,cap_net_raw,cap_bpf,cap_perfmon".into(),
        ] {
            assert!(
                err.contains(needle.as_str()),
                "{caps}: no {needle:?}: {err}"
            );
        }
        // What else it lacks, named too.
        assert_eq!(
            err.contains("CAP_NET_RAW and CAP_BPF and CAP_PERFMON"),
            caps == "-all",
            "{caps}: {err}"
        );
        assert_eq!(
            err.lines()
                .filter(|l| l.starts_with("xtcp: error:"))
                .count(),
            1,
            "{caps}: {err}"
        );
    }
}

#[test]
fn a_memlock_limit_below_the_umem_is_named_with_the_way_to_raise_it() {
    let net = testnet();
    let args = recv_args(&net, 5321);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = as_user(&net, 65528, DOCUMENTED, Some(65536), &args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for needle in [
        "XDP_UMEM_REG",
        "RLIMIT_MEMLOCK, now 65536 bytes",
        // The default UMEM at MTU 1500: the rings' 8,192 frames and 32
        // MiB of them for the send buffers, 24,576 × 2048 bytes.
        "needs 50331648 bytes",
        "ulimit -l",
        "LimitMEMLOCK=",
        "CAP_IPC_LOCK",
    ] {
        assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    }
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A port below 1024 without CAP_NET_BIND_SERVICE: the error names that
/// capability (it asked whether the address was configured).
#[test]
fn a_privileged_port_without_cap_net_bind_service_names_it() {
    let net = testnet();
    let args = recv_args(&net, 443);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = as_user(&net, 65527, &format!("{DOCUMENTED},+ipc_lock"), None, &args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(":443"), "{err}");
    assert!(err.contains("CAP_NET_BIND_SERVICE"), "{err}");
    assert!(!err.contains("is the address configured"), "{err}");
}

fn probe_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn missing(v: &serde_json::Value) -> Vec<String> {
    v["privileges"]["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect()
}

fn effective(v: &serde_json::Value, cap: &str) -> bool {
    v["privileges"]["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == cap)
        .unwrap_or_else(|| panic!("{cap} reported: {v}"))["effective"]
        .as_bool()
        .unwrap()
}

/// `xtcp probe` tells beforehand what the runs above find out: CAP_PERFMON,
/// and whether the memlock limit holds the default UMEM.
#[test]
fn probe_reports_cap_perfmon_and_whether_memlock_holds_the_default_umem() {
    let net = testnet();
    let a = net.a.iface.clone();
    let probe = |caps: &str, memlock: Option<u64>, json: bool| {
        let mut args = vec!["probe", a.as_str()];
        if json {
            args.push("--json");
        }
        as_user(&net, 65527, caps, memlock, &args).output().unwrap()
    };
    // The documented set with CAP_IPC_LOCK: nothing missing.
    let v = probe_json(&probe(
        &format!("{DOCUMENTED},+ipc_lock"),
        Some(65536),
        true,
    ));
    assert!(effective(&v, "CAP_PERFMON"), "{v}");
    assert_eq!(v["privileges"]["umem_default_bytes"], 16384 * 4096);
    assert_eq!(v["privileges"]["memlock_covers_default_umem"], true);
    assert!(missing(&v).is_empty(), "{:?}", missing(&v));

    // Without CAP_IPC_LOCK under 64 KiB: the UMEM does not fit.
    let v = probe_json(&probe(DOCUMENTED, Some(65536), true));
    assert_eq!(v["privileges"]["memlock_soft"], 65536);
    assert_eq!(v["privileges"]["memlock_covers_default_umem"], false);
    let m = missing(&v);
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(
        m[0].contains("RLIMIT_MEMLOCK") && m[0].contains("67108864"),
        "{m:?}"
    );

    // Without CAP_PERFMON.
    let v = probe_json(&probe("+net_admin,+net_raw,+bpf,+ipc_lock", None, true));
    assert!(!effective(&v, "CAP_PERFMON"), "{v}");
    let m = missing(&v);
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(m[0].starts_with("CAP_PERFMON"), "{m:?}");

    // The text report says the same.
    let out = probe(DOCUMENTED, Some(65536), false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("+CAP_PERFMON"), "{text}");
    let umem = text
        .lines()
        .find(|l| l.starts_with("default UMEM:"))
        .unwrap_or_else(|| panic!("a default UMEM line: {text}"));
    assert!(
        umem.contains("up to 64 MiB per queue") && umem.contains("does not fit"),
        "{umem}"
    );
}
