//! `xtcp bench` end to end: a short sweep completes, its JSON has every
//! sample, its SVG is a well-formed image, and nothing is left behind.
//! Root needed (CI runs as root).

use std::process::Command;

const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");

#[test]
fn short_sweep_writes_every_sample_and_a_plot_and_cleans_up() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let json = dir.join(format!("bench-{}.json", std::process::id()));
    let svg = dir.join(format!("bench-{}.svg", std::process::id()));
    let child = Command::new(XTCP)
        .args(["bench", "--mtu", "1500,65535", "--duration", "2", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "xtcp bench failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The table: a row per MTU and pair.
    for pair in [
        "kernel → kernel",
        "xtcp → kernel",
        "kernel → xtcp",
        "xtcp → xtcp",
    ] {
        assert_eq!(text.matches(pair).count(), 2, "{pair} twice in {text}");
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let samples = v.as_array().unwrap();
    assert_eq!(samples.len(), 8, "{v}");
    for s in samples {
        assert!(s["gbps"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["cpu_s_per_gib"].as_f64().unwrap() > 0.0, "{s}");
        if s["pair"] != "kernel → kernel" {
            assert!(s["ratio"].as_f64().unwrap() > 0.0, "{s}");
        }
    }
    let mtus: std::collections::BTreeSet<u64> =
        samples.iter().map(|s| s["mtu"].as_u64().unwrap()).collect();
    assert_eq!(mtus.into_iter().collect::<Vec<_>>(), vec![1500, 65535]);
    // A well-formed SVG (python3's XML parser), with a line per pair.
    let check = Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); \
             assert r.tag.endswith('svg'); \
             assert len(r.findall('{http://www.w3.org/2000/svg}polyline')) == 8",
        ])
        .arg(&svg)
        .status()
        .unwrap();
    assert!(check.success(), "the SVG does not parse");
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&svg);
    // Nothing left behind: the namespaces carry the bench's PID.
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(
        !ns.contains(&format!("xtcp-a{pid}x")) && !ns.contains(&format!("xtcp-b{pid}x")),
        "namespaces left behind: {ns}"
    );
}
