//! Helpers shared by the CLI tests (`client.rs`, `serve.rs`, `bulk.rs`).
#![allow(dead_code)]

use std::process::Child;
use std::time::{Duration, Instant};

use xtcp_engine::testnet::{Netns, TestNet, TestNetConfig};

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
