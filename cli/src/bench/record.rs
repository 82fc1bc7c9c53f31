//! The record `xtcp bench --json` writes: `{"meta": {...}, "samples":
//! [...]}`. `meta` says what ran where (xtcp's version and commit, the
//! kernel, CPU, memory, the date, the command line, the load before and
//! after, the network and its offloads); each sample is a [`Sample`].
//! Records of earlier versions, a bare list of samples, are read too
//! (`xtcp bench --from FILE`); the axes they lack take their defaults.
//! The schema is documented in docs/BENCHMARKS.md ("The record").

use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use xtcp_engine::testnet::TestNet;

use super::{BenchArgs, Sample};

/// The version of this record's layout (the bare list of samples was 1;
/// 2 wrote `frame_size` as a number, before `--frame-size auto`; 3 had no
/// `cc`: the kernel's ends ran the host's default congestion control).
pub const SCHEMA: u32 = 4;

/// What ran where.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Meta {
    /// [`SCHEMA`].
    pub schema: u32,
    /// xtcp's version.
    pub xtcp_version: String,
    /// The git commit it was built from, `-dirty` if tracked files had
    /// changes (`None` outside a git checkout).
    pub git_commit: Option<String>,
    /// `uname -r`.
    pub kernel: String,
    /// The CPU's model name (`/proc/cpuinfo`).
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `MemTotal` of `/proc/meminfo`, bytes.
    pub memory_bytes: u64,
    /// When the run started, RFC 3339, UTC.
    pub date: String,
    /// The command line, as given.
    pub command_line: Vec<String>,
    /// The preset run, if any.
    pub preset: Option<String>,
    /// Seconds per test, and repetitions.
    pub duration_s: u32,
    /// Repetitions of each point.
    pub repeat: u32,
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages before the run.
    pub loadavg_before: Vec<f64>,
    /// The same after it.
    pub loadavg_after: Vec<f64>,
    /// The network: `veth` (the bench's own pair) or `adopted`.
    pub network: String,
    /// The interfaces of side A (clients) and B (servers).
    pub interfaces: Vec<String>,
    /// Their drivers.
    pub drivers: Vec<String>,
    /// Their offloads when the run started (`{"a": {"tso": "off", …},
    /// "b": …}`); each sample has the state during its run.
    pub offloads: Option<serde_json::Value>,
    /// Why the sweep ended before its last run (`interrupted`, or the
    /// error of the run that failed); absent for a whole sweep. The
    /// samples are the runs that completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// The congestion control a new network namespace starts with on this
    /// host (`net.ipv4.tcp_congestion_control`), which bench's own ends do
    /// not run (`--cc`); absent in records before it was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_cc: Option<String>,
}

fn loadavg() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| {
            s.split_whitespace()
                .take(3)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The value of `key` in a `key : value` file such as /proc/cpuinfo.
fn proc_field(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_owned())
    })
}

fn driver_of(ns: &xtcp_engine::testnet::Netns, iface: &str) -> String {
    ns.exec(&["ethtool", "-i", iface])
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("driver:").map(|d| d.trim().to_owned()))
        })
        .unwrap_or_default()
}

impl Meta {
    /// What is known before the network is built.
    pub fn start(a: &BenchArgs) -> Meta {
        let commit = env!("XTCP_GIT_COMMIT");
        Meta {
            schema: SCHEMA,
            xtcp_version: env!("CARGO_PKG_VERSION").to_owned(),
            git_commit: (!commit.is_empty()).then(|| commit.to_owned()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            cpu_model: proc_field("/proc/cpuinfo", "model name").unwrap_or_default(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: proc_field("/proc/meminfo", "MemTotal")
                .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
                .map_or(0, |kb| kb * 1024),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            command_line: std::env::args().collect(),
            preset: a
                .preset
                .and_then(|p| clap::ValueEnum::to_possible_value(&p))
                .map(|v| v.get_name().to_owned()),
            duration_s: a.duration,
            repeat: a.repeat,
            loadavg_before: loadavg(),
            ..Meta::default()
        }
    }

    /// With the network's interfaces, drivers and offloads.
    pub fn with_network(mut self, net: &TestNet, offloads: Option<serde_json::Value>) -> Meta {
        self.network = if net.is_adopted() { "adopted" } else { "veth" }.to_owned();
        self.interfaces = vec![net.a.iface.clone(), net.b.iface.clone()];
        self.drivers = vec![
            driver_of(&net.a.ns, &net.a.iface),
            driver_of(&net.b.ns, &net.b.iface),
        ];
        self.offloads = offloads;
        self
    }

    /// The load after the run.
    pub fn finish(&mut self) {
        self.loadavg_after = loadavg();
    }
}

/// A whole record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// `None` for a record of an earlier version.
    pub meta: Option<Meta>,
    /// The runs.
    pub samples: Vec<Sample>,
}

impl Record {
    /// Writes the record as pretty JSON, through a temporary file beside
    /// `path`, so that a failed write leaves an earlier record as it was.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        replace(
            "--json",
            path,
            serde_json::to_string_pretty(self)?.as_bytes(),
        )
    }

    /// Reads a record: this form, or the bare list of samples.
    pub fn read(path: &Path) -> anyhow::Result<Record> {
        let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let v: serde_json::Value = serde_json::from_slice(&text)
            .with_context(|| format!("{}: not JSON", path.display()))?;
        let rec = match v {
            // Another tool's list (benches/engine-vs-kernel.py writes one):
            // said as such, not as a field that failed to parse.
            serde_json::Value::Array(ref a)
                if a.first().is_some_and(|s| s.get("pair").is_none()) =>
            {
                bail!(
                    "{}: a list, but not of xtcp bench samples (they have a `pair`): give a \
                     record that `xtcp bench --json` wrote",
                    path.display()
                )
            }
            serde_json::Value::Array(_) => Record {
                meta: None,
                samples: serde_json::from_value(v)
                    .with_context(|| format!("{}: not a list of bench samples", path.display()))?,
            },
            serde_json::Value::Object(ref o) if o.contains_key("samples") => {
                serde_json::from_value(v)
                    .with_context(|| format!("{}: not an xtcp bench record", path.display()))?
            }
            _ => bail!(
                "{}: neither an xtcp bench record ({{\"meta\", \"samples\"}}) nor a list of samples",
                path.display()
            ),
        };
        Ok(rec)
    }
}

/// `bytes` written beside `path` and renamed over it once whole
/// ([`crate::outfile::ReplaceFile`]: `path`'s mode kept, no file of
/// another name touched), so that a failure leaves what was there.
pub fn replace(flag: &'static str, path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let r = crate::outfile::ReplaceFile::new(flag, path)?;
    let mut f = r.create()?;
    std::io::Write::write_all(&mut f, bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("{flag}: writing {}", path.display()))?;
    r.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_bare_lists_and_new_records_read_back() {
        let dir = std::env::temp_dir().join(format!("xtcp-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A sample as version 0.1 wrote it: no new axes, no CPU split.
        let old = dir.join("old.json");
        std::fs::write(
            &old,
            r#"[{"mtu": 9000, "rcvbuf": "64K", "ring": 2048, "frame_size": 4096,
                 "tx_burst": 64, "mss_clip": "on", "tx_layout": "auto", "repeat": 0,
                 "pair": "xtcp → kernel", "gbps": 12.5, "retransmits": 3,
                 "cpu_sender": 99.0, "cpu_receiver": 40.0, "cpu_s_per_gib": 0.2,
                 "ratio": 1.1, "ping_rtt_us": 40.0, "min_rtt_us": null,
                 "rtt_us": null, "queue_delay_us": null, "xdp_client": null,
                 "xdp_server": null, "drop_pct": null}]"#,
        )
        .unwrap();
        // Another tool's list (engine-vs-kernel.py's) is named as such.
        let other = dir.join("other.json");
        std::fs::write(
            &other,
            r#"[{"gbps": 7.0, "direction": "kernel -> kernel"}]"#,
        )
        .unwrap();
        let e = Record::read(&other).unwrap_err().to_string();
        assert!(e.contains("a list, but not of xtcp bench samples"), "{e}");
        let r = Record::read(&old).unwrap();
        assert!(r.meta.is_none());
        assert_eq!(r.samples.len(), 1);
        let s = &r.samples[0];
        assert_eq!((s.point.mtu, s.point.rcvbuf.as_str()), (9000, "64K"));
        assert_eq!(s.point.streams, 1, "an axis it lacks takes its default");
        assert_eq!(s.point.kernel_txqueue, "none");
        assert_eq!(s.point.frame_size, "4096", "recorded as a number");
        assert_eq!(s.gbps, 12.5);
        // Written and read back in the new form.
        let new = dir.join("new.json");
        let rec = Record {
            meta: Some(Meta {
                schema: SCHEMA,
                kernel: "6.18.0".into(),
                ..Meta::default()
            }),
            samples: r.samples.clone(),
        };
        rec.write(&new).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&new).unwrap()).unwrap();
        assert_eq!(v["meta"]["schema"], 4);
        assert_eq!(
            v["samples"][0]["mtu"], 9000,
            "the axes are the sample's own fields"
        );
        let back = Record::read(&new).unwrap();
        assert_eq!(back.meta.unwrap().kernel, "6.18.0");
        assert_eq!(back.samples[0].point, r.samples[0].point);
        // Anything else is refused with its name.
        let bad = dir.join("bad.json");
        std::fs::write(&bad, r#"{"start": {}}"#).unwrap();
        let e = Record::read(&bad).unwrap_err().to_string();
        assert!(e.contains("neither an xtcp bench record"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
