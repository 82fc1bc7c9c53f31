//! `--cores` naming a core this process may not run on is refused with one
//! line naming the value and the cores available, before anything is set
//! up (no XDP program attached, nothing listening), in every command that
//! runs the engine; a core another xtcp process's worker (or `xsk-bench`'s)
//! holds is named at start.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use xtcp_engine::testnet::{TestNet, TestNetConfig};

const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");

#[test]
fn a_core_outside_the_affinity_mask_is_refused_before_setup() {
    let net = TestNet::new(TestNetConfig {
        mtu: 1500,
        queues: 1,
        offloads: false,
    })
    .unwrap_or_else(|e| panic!("cannot build the test network (these tests run as root): {e}"));
    let a = net.a.iface.as_str();
    let peer = format!("{}:5201", net.b.ip4);
    let cmds: [&[&str]; 3] = [
        &["recv", "--iface", a, "--listen", "5201", "--discard"],
        &["serve", "--iface", a],
        &[
            "send",
            "--iface",
            a,
            "--connect",
            &peer,
            "--pattern",
            "1",
            "--bytes",
            "1M",
        ],
    ];
    for args in cmds {
        let mut child = net
            .a
            .ns
            .command(XTCP)
            .args(args)
            .args(["--cores", "999"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Bounded: an xtcp that accepted the core would listen or connect
        // until killed.
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        let status = status.unwrap_or_else(|| panic!("{args:?} --cores 999 ran on: {err}"));
        assert!(!status.success(), "{args:?}: {err}");
        assert!(
            err.contains("--cores 999: core 999 does not exist")
                && err.contains("the cores available are 0"),
            "{args:?}: {err}"
        );
        // One error line (serve's banner before it is another issue's).
        let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(errors.len(), 1, "{args:?}: one error line: {err}");
        assert!(errors[0].contains("--cores 999"), "{args:?}: {err}");
        let link = net.a.ns.ip(&["link", "show", a]).unwrap();
        assert!(
            !String::from_utf8_lossy(&link.stdout).contains("xdp"),
            "nothing attached"
        );
    }
}

/// The thread of process `pid` named `name` is allowed on `core` alone.
fn pinned(pid: u32, name: &str, core: usize) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        comm.trim_end() == name
            && status.lines().any(|l| {
                l.strip_prefix("Cpus_allowed_list:").map(str::trim) == Some(&core.to_string())
            })
    })
}

/// `xtcp client` pinned to the core of a running `xtcp serve`'s worker
/// says so at start, naming the core, the server's process and its
/// command line; pinned to another core, it names no such neighbour. The
/// transfer completes either way. Left without `--cores`, `xtcp recv`
/// takes the other core.
#[test]
fn a_core_another_xtcp_worker_holds_is_named_at_start() {
    let net = common::testnet(1);
    let server = common::Server::start_with(&net, 1, &["--cores", "0"]);
    let serve_pid = server.child.0.id();
    // The worker pins itself as it starts: wait for that, not for a time.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pinned(serve_pid, "xtcp-q0", 0) {
        assert!(
            Instant::now() < deadline,
            "xtcp serve's worker xtcp-q0 not pinned to core 0 within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = |core: usize| {
        let out = net
            .b
            .ns
            .command("timeout")
            .args(["60", XTCP, "client", "-c", &net.a.ip4.to_string()])
            .args(["--iface", &net.b.iface, "-n", "1M", "--cores"])
            .arg(core.to_string())
            .args(common::ENGINE)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "xtcp client --cores {core}: {err}");
        err
    };
    let err = client(0);
    eprintln!("xtcp client --cores 0:\n{err}");
    let expected = format!(
        "core 0 (worker 0's) is already taken by xtcp worker xtcp-q0 of process {serve_pid} \
         ({XTCP} serve --iface {}",
        net.a.iface
    );
    assert!(err.contains(&expected), "wanted {expected:?} in: {err}");
    assert!(err.contains("another core with --cores"), "{err}");

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        println!("one core only: the client cannot be pinned elsewhere, second half skipped");
        return;
    }
    // Left without --cores, a worker takes a core no other xtcp worker
    // holds: `xtcp recv` on side B goes to core 1, and names no neighbour.
    let mut recv = net
        .b
        .ns
        .command(XTCP)
        .args([
            "recv",
            "--iface",
            &net.b.iface,
            "--listen",
            "5201",
            "--discard",
        ])
        .args(common::ENGINE)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let recv_pid = recv.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pinned(recv_pid, "xtcp-q0", 1) {
        assert!(
            !pinned(recv_pid, "xtcp-q0", 0),
            "xtcp recv without --cores took serve's core 0"
        );
        assert!(
            recv.try_wait().unwrap().is_none() && Instant::now() < deadline,
            "xtcp recv's worker not pinned to core 1 within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &recv_pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while recv.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = recv.kill();
            let _ = recv.wait();
            panic!("xtcp recv did not stop on SIGINT within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut err = String::new();
    std::io::Read::read_to_string(&mut recv.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!err.contains("is already taken"), "{err}");

    // `xsk-bench` checks too, and its threads are named as workers are:
    // its sender on serve's core 0 names serve; its receiver, on core 1,
    // is named by a client pinned there.
    let args: Vec<String> = [
        "xsk-bench",
        "--testnet",
        "--duration",
        "120",
        "--size",
        "64",
        "--cores",
        "1,0",
    ]
    .map(String::from)
    .into();
    let mut bench = common::Watched::spawn(&net, &args, Stdio::null());
    bench.wait_for(&format!(
        "core 0 (the tx worker's) is already taken by xtcp worker xtcp-q0 of process {serve_pid} "
    ));
    let bench_pid = bench.child.0.id();
    // Its receiver started (and pinned itself) before its sender did.
    assert!(
        pinned(bench_pid, "xtcp-q0", 1),
        "xsk-bench's receiver on core 1"
    );
    let err = client(1);
    // Ctrl-C ends it with its report, its test network removed.
    bench.signal("-INT");
    let (status, bench_err) = bench.wait_exit("xtcp xsk-bench did not stop on SIGINT");
    assert!(status.success(), "{bench_err}");
    let left = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        !left.contains(&format!("{bench_pid}x")),
        "xsk-bench left its namespaces: {left}"
    );
    assert!(
        !err.contains(&format!("of process {serve_pid} ")),
        "core 1 is not serve's, yet: {err}"
    );
    let expected = format!(
        "core 1 (worker 0's) is already taken by xtcp worker xtcp-q0 of process {bench_pid} \
         ({XTCP} xsk-bench --testnet"
    );
    assert!(err.contains(&expected), "wanted {expected:?} in: {err}");
}

/// Two queues on one core (`--cores 0,0`) are named at start: the
/// process's own workers would share it.
#[test]
fn two_workers_on_one_core_are_named_at_start() {
    let net = common::testnet(2);
    let mut args: Vec<String> = ["recv", "--iface", &net.a.iface, "--listen", "5201"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--discard", "--queues", "2", "--cores", "0,0"].map(String::from));
    args.extend(common::ENGINE.map(String::from));
    let mut recv = common::Watched::spawn(&net, &args, Stdio::null());
    recv.wait_for("workers 0 and 1 are both on core 0: each busy-polls its queue");
    recv.wait_for("listening on");
    recv.signal("-INT");
    let (status, err) = recv.wait_exit("xtcp recv did not stop on SIGINT");
    // Nothing was sent: it says so, and fails.
    assert!(
        !status.success() && err.contains("no connection arrived"),
        "{err}"
    );
}
