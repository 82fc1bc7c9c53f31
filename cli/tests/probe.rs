//! The `xtcp probe` binary: JSON that parses, aligned text, clear errors,
//! and a report that reflects missing privileges instead of failing.

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Output};

fn xtcp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtcp"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run xtcp")
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "xtcp failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "--json output does not parse ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn json_for_loopback_parses_and_has_every_section() {
    let v = json_of(&xtcp(&["probe", "lo", "--json"]));
    assert_eq!(v["interface"]["name"], "lo");
    assert_eq!(v["interface"]["ifindex"], 1);
    assert!(v["mtu"]["current"].as_u64().unwrap() > 0);
    assert!(v["queues"]["rx"].as_u64().unwrap() >= 1);
    assert_eq!(v["queues"]["source"], "rtnetlink");
    let status = v["xdp"]["netdev"]["status"].as_str().unwrap();
    assert!(status == "reported" || status == "unknown", "{status}");
    if status == "reported" {
        assert!(v["xdp"]["netdev"]["xdp_features"].is_array());
    } else {
        assert!(v["xdp"]["netdev"]["reason"].is_string());
    }
    let modes: Vec<_> = v["xdp"]["attach_modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(modes, ["native", "generic", "offload"]);
    assert_eq!(v["xdp"]["attached"]["mode"], "none");
    assert!(
        v["kernel"]["release"]
            .as_str()
            .unwrap()
            .chars()
            .next()
            .unwrap()
            .is_ascii_digit()
    );
    assert_eq!(v["privileges"]["capabilities"].as_array().unwrap().len(), 6);
    assert!(
        v["privileges"]["memlock_soft"].is_u64() || v["privileges"]["memlock_soft"] == "unlimited"
    );
    assert_eq!(v["hugepages"]["page_size_kib"], 2048);
    // The mode in force, as sysfs marks it.
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|m| {
            m.split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(['[', ']']).to_owned())
        });
    assert_eq!(v["hugepages"]["transparent"].as_str(), thp.as_deref());
    assert!(v["notes"].is_array());
}

#[test]
fn text_report_is_aligned_key_value_lines() {
    let out = xtcp(&["probe", "lo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 10, "{text}");
    for key in [
        "interface:",
        "driver:",
        "queues:",
        "mtu:",
        "xdp features:",
        "zero-copy:",
        "kernel:",
        "capabilities:",
        "hugepages 2MB:",
        "transparent hugepages:",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(key)),
            "no {key:?} line in\n{text}"
        );
    }
    // Every value starts in the same column, after "key:" and padding.
    let column = |l: &str| {
        let colon = l.find(':').unwrap();
        colon + 1 + l[colon + 1..].len() - l[colon + 1..].trim_start().len()
    };
    let first = column(lines[0]);
    for l in &lines {
        assert_eq!(column(l), first, "misaligned line {l:?} in\n{text}");
    }
}

#[test]
fn nonexistent_interface_fails_with_a_clear_message() {
    let name = format!("xtpnone{}", std::process::id());
    let out = xtcp(&["probe", &name, "--json"]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "no interface named \"{name}\" in this network namespace"
        )) && err.contains("ip link"),
        "{err}"
    );
}

#[test]
fn unprivileged_run_reports_what_is_missing() {
    if !is_root() {
        eprintln!(
            "SKIP unprivileged_run_reports_what_is_missing: needs root to switch to an unprivileged user"
        );
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIP unprivileged_run_reports_what_is_missing: needs setpriv (util-linux)");
        return;
    }
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_xtcp"))
        .args(["probe", "lo", "--json"])
        .output()
        .expect("run setpriv");
    let v = json_of(&out);
    assert_eq!(v["privileges"]["euid"], 65534);
    for c in v["privileges"]["capabilities"].as_array().unwrap() {
        assert_eq!(c["effective"], false, "{c}");
    }
    let missing: Vec<_> = v["privileges"]["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    for need in ["CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF", "CAP_PERFMON"] {
        assert!(
            missing.iter().any(|m| m.contains(need)),
            "{need} not in {missing:?}"
        );
    }
}

/// `ip netns exec` runs the binary in a fresh namespace with a veth pair.
#[test]
fn json_for_veth_in_a_namespace() {
    if !is_root() || Command::new("ip").arg("-V").output().is_err() {
        eprintln!("SKIP json_for_veth_in_a_namespace: needs root and iproute2");
        return;
    }
    struct Netns(String);
    impl Drop for Netns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let pid = std::process::id();
    let ns = Netns(format!("xtp{pid}cli"));
    let ip = |args: &[&str]| {
        let st = Command::new("ip").args(args).status().expect("run ip");
        assert!(st.success(), "ip {args:?}");
    };
    ip(&["netns", "add", &ns.0]);
    let (a, b) = (format!("xtpc{pid}"), format!("xtpd{pid}"));
    ip(&[
        "-n", &ns.0, "link", "add", &a, "type", "veth", "peer", "name", &b,
    ]);
    ip(&["-n", &ns.0, "link", "set", &a, "mtu", "4000"]);

    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.0,
            env!("CARGO_BIN_EXE_xtcp"),
            "probe",
            &a,
            "--json",
        ])
        .output()
        .expect("run ip netns exec");
    let v = json_of(&out);
    assert_eq!(v["interface"]["driver"], "veth");
    assert_eq!(v["interface"]["up"], false);
    assert_eq!(v["mtu"]["current"], 4000);
    assert_eq!(v["mtu"]["max"], 65535);
    assert_eq!(v["queues"]["source"], "ethtool");
    assert_eq!(v["queues"]["rx"], 1);
    assert_eq!(v["xdp"]["zero_copy"], "no");
    // The key is there, and empty: veth has no known zero-copy TX defect
    // (tests/vm checks the one virtio_net has).
    assert_eq!(
        v["xdp"].get("zero_copy_tx_defect"),
        Some(&serde_json::Value::Null)
    );
    assert_eq!(v["xdp"]["attached"]["mode"], "none");
}

/// The limits and capabilities the report shows are the ones the process
/// runs with, as set from outside: `prlimit` sets the memlock limits and
/// `setpriv` takes CAP_NET_ADMIN and CAP_IPC_LOCK out of the bounding set
/// (root then runs without them); the hugepage counts are the kernel's
/// (`/proc/meminfo`).
#[test]
fn the_report_shows_the_limits_and_capabilities_it_runs_with() {
    if !is_root() {
        eprintln!("SKIP the_report_shows_the_limits_and_capabilities_it_runs_with: needs root");
        return;
    }
    let probe = |pre: &[&str]| {
        json_of(
            &Command::new(pre[0])
                .args(&pre[1..])
                .arg(env!("CARGO_BIN_EXE_xtcp"))
                .args(["probe", "lo", "--json"])
                .output()
                .expect("run prlimit / setpriv (util-linux)"),
        )
    };
    // Limits below the hard limit this test runs with (raising it needs
    // CAP_SYS_RESOURCE, which a container may not give).
    let now: String = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = now
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .unwrap();
    let hard_now = line.split_whitespace().nth(4).unwrap();
    let top: u64 = hard_now.parse().unwrap_or(4 << 20).min(4 << 20);
    let (soft, hard) = (top / 4, top / 2);
    assert!(soft >= 4096, "the memlock hard limit here is {hard_now}");
    let limits = format!("--memlock={soft}:{hard}");
    let v = probe(&["prlimit", &limits]);
    let p = &v["privileges"];
    assert_eq!(
        (p["memlock_soft"].as_u64(), p["memlock_hard"].as_u64()),
        (Some(soft), Some(hard)),
        "{p}"
    );
    // Less than the default UMEM, but CAP_IPC_LOCK lifts the limit.
    assert!(p["umem_default_bytes"].as_u64().unwrap() > soft, "{p}");
    assert_eq!(p["memlock_covers_default_umem"], true, "{p}");
    assert_eq!(p["missing"].as_array().unwrap().len(), 0, "{p}");

    let v = probe(&[
        "setpriv",
        "--bounding-set=-net_admin,-ipc_lock",
        "prlimit",
        &limits,
    ]);
    let p = &v["privileges"];
    assert_eq!(p["euid"], 0, "{p}");
    for c in p["capabilities"].as_array().unwrap() {
        let off = ["CAP_NET_ADMIN", "CAP_IPC_LOCK"].contains(&c["name"].as_str().unwrap());
        assert_eq!(c["effective"], !off, "{c}");
    }
    assert_eq!(p["memlock_covers_default_umem"], false, "{p}");
    let missing: Vec<&str> = p["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert!(missing[0].starts_with("CAP_NET_ADMIN"), "{missing:?}");
    assert!(
        missing[1].starts_with("CAP_IPC_LOCK or RLIMIT_MEMLOCK")
            && missing[1].contains(&format!("soft limit is {soft} bytes")),
        "{missing:?}"
    );

    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let field = |k: &str| -> u64 {
        let l = meminfo
            .lines()
            .find(|l| l.starts_with(k))
            .unwrap_or_else(|| panic!("no {k} in /proc/meminfo"));
        l[k.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap()
    };
    let h = &v["hugepages"];
    assert_eq!(
        field("Hugepagesize:"),
        2048,
        "the default hugepage size is what the probe reports"
    );
    assert_eq!(h["total"].as_u64(), Some(field("HugePages_Total:")), "{h}");
    assert_eq!(h["free"].as_u64(), Some(field("HugePages_Free:")), "{h}");
}
