//! `--cores` naming a core this process may not run on is refused with one
//! line naming the value and the cores available, before anything is set
//! up (no XDP program attached, nothing listening), in every command that
//! runs the engine.

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
