//! `xtcp probe --iface IFACE [--json]`: what the interface and this host
//! offer xtcp. (`xtcp probe IFACE`, the earlier spelling, still works.)

use anyhow::Context as _;
use xtcp_engine::probe::{NetdevFeatures, ProbeReport, QueueSource, XdpMode};
use xtcp_engine::xdp::{AttachMode, Steering};

/// Arguments of `xtcp probe`.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// Interface to probe, in the current network namespace.
    #[arg(long, required_unless_present = "iface_positional")]
    pub iface: Option<String>,
    /// The earlier spelling of `--iface IFACE` (hidden, for one release).
    #[arg(hide = true, value_name = "IFACE", conflicts_with = "iface")]
    pub iface_positional: Option<String>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also attach xtcp's steering program briefly in native and in generic
    /// mode and report what really works. Some drivers (mlx5, i40e, …)
    /// restart their queues when an XDP program is attached: do not use this
    /// on an interface that carries live traffic.
    #[arg(long)]
    pub try_attach: bool,
}

impl ProbeArgs {
    /// `xtcp probe IFACE` (the earlier spelling) as `--iface IFACE`.
    pub fn resolve_old_spellings(&mut self) {
        if let Some(i) = self.iface_positional.take() {
            self.iface = Some(i);
        }
    }
}

/// Runs `xtcp probe`.
pub fn run(args: &ProbeArgs) -> anyhow::Result<()> {
    let iface = args
        .iface
        .as_deref()
        .or(args.iface_positional.as_deref())
        .context("probe needs --iface IFACE")?;
    let mut report =
        xtcp_engine::probe::probe(iface).with_context(|| format!("probing interface {iface:?}"))?;
    if args.try_attach {
        for (mode, attach) in [
            (XdpMode::Native, AttachMode::Native),
            (XdpMode::Generic, AttachMode::Generic),
        ] {
            match Steering::attach(iface, attach) {
                Ok(s) => {
                    drop(s);
                    report
                        .xdp
                        .record_trial(mode, true, "trial attach succeeded");
                }
                Err(e) => report
                    .xdp
                    .record_trial(mode, false, format!("trial attach failed: {e}")),
            }
        }
    }
    if args.json {
        let json = serde_json::to_string_pretty(&report).context("serializing the probe report")?;
        println!("{json}");
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

/// The human-readable report: `key: value` lines with aligned values.
pub fn render(r: &ProbeReport) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut row = |k: &str, v: String| rows.push((k.to_owned(), v));
    let i = &r.interface;
    row("interface", format!("{} (index {})", i.name, i.ifindex));
    row("driver", opt(i.driver.as_deref()));
    if let Some(v) = &i.driver_version {
        row("driver version", v.clone());
    }
    if let Some(v) = &i.firmware {
        row("firmware", v.clone());
    }
    if let Some(v) = &i.bus_info {
        row("bus", v.clone());
    }
    if let Some(v) = &i.kind {
        row("link kind", v.clone());
    }
    row(
        "state",
        format!(
            "{}, operstate {}",
            if i.up { "up" } else { "down" },
            opt(i.operstate)
        ),
    );
    let q = &r.queues;
    let source = match q.source {
        QueueSource::Ethtool => "ethtool channels",
        QueueSource::Rtnetlink => "rtnetlink",
    };
    row("queues", format!("rx {} tx {} (from {source})", q.rx, q.tx));
    if let Some(c) = &q.channels {
        row(
            "channels",
            format!(
                "rx {} tx {} combined {} other {} (max rx {} tx {} combined {} other {})",
                c.rx, c.tx, c.combined, c.other, c.max_rx, c.max_tx, c.max_combined, c.max_other
            ),
        );
    }
    row(
        "allocated queues",
        format!("rx {} tx {}", opt(q.allocated_rx), opt(q.allocated_tx)),
    );
    row(
        "mtu",
        format!(
            "{} (min {}, max {})",
            r.mtu.current,
            opt(r.mtu.min),
            opt(r.mtu.max)
        ),
    );
    let x = &r.xdp;
    match &x.netdev {
        NetdevFeatures::Reported {
            xdp_features,
            xdp_features_raw,
            xdp_zc_max_segs,
            xdp_rx_metadata_features,
            xsk_features,
        } => {
            row(
                "xdp features",
                format!("{} ({xdp_features_raw:#x})", list(xdp_features)),
            );
            row("xdp zc max segs", opt(*xdp_zc_max_segs));
            row(
                "xdp rx metadata",
                xdp_rx_metadata_features
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), list),
            );
            row(
                "xsk features",
                xsk_features.as_deref().map_or_else(|| "-".to_owned(), list),
            );
        }
        NetdevFeatures::Unknown { reason } => row("xdp features", format!("unknown: {reason}")),
    }
    row("zero-copy", x.zero_copy.as_str().to_owned());
    row("multi-buffer", x.multi_buffer.as_str().to_owned());
    row(
        "zero-copy multi-buffer",
        x.zero_copy_multi_buffer.as_str().to_owned(),
    );
    row(
        "zero-copy tx defect",
        x.zero_copy_tx_defect.unwrap_or("none known").to_owned(),
    );
    for m in &x.attach_modes {
        row(
            &format!("attach {}", m.mode.as_str()),
            format!(
                "{} ({}{})",
                m.expected.as_str(),
                m.reason,
                if m.verified { ", verified" } else { "" }
            ),
        );
    }
    let a = &x.attached;
    let attached = match a.prog_id {
        Some(id) => format!("{:?} (program id {id})", a.mode),
        None => format!("{:?}", a.mode),
    };
    row("xdp attached", attached.to_lowercase());
    row(
        "kernel",
        format!("{} {}", r.kernel.release, r.kernel.machine),
    );
    let p = &r.privileges;
    row("euid", p.euid.to_string());
    let caps: Vec<String> = p
        .capabilities
        .iter()
        .map(|c| format!("{}{}", if c.effective { "+" } else { "-" }, c.name))
        .collect();
    row(
        "capabilities",
        if caps.is_empty() {
            "unknown".into()
        } else {
            caps.join(" ")
        },
    );
    row(
        "memlock",
        format!("soft {}, hard {}", p.memlock_soft, p.memlock_hard),
    );
    let lock = p
        .capabilities
        .iter()
        .any(|c| c.name == "CAP_IPC_LOCK" && c.effective);
    row(
        "default UMEM",
        format!(
            "up to {} MiB per queue (4096-byte frames; less where 2048-byte ones do): {}",
            p.umem_default_bytes >> 20,
            match p.memlock_covers_default_umem {
                Some(true) if lock => "fits (CAP_IPC_LOCK lifts the memlock limit)",
                Some(true) => "fits the memlock limit",
                Some(false) => "does not fit the memlock limit (see missing privileges)",
                None => "unknown (capabilities unknown)",
            }
        ),
    );
    row("missing privileges", list(&p.missing));
    let h = &r.hugepages;
    row(
        "hugepages 2MB",
        format!(
            "total {}, free {} (reserved, for --hugepages)",
            opt(h.total),
            opt(h.free)
        ),
    );
    row(
        "transparent hugepages",
        match h.transparent.as_deref() {
            Some("never") => "never (the UMEM gets base pages)".to_owned(),
            Some(m) => format!("{m} (the UMEM asks for them)"),
            None => "unknown".to_owned(),
        },
    );
    for n in &r.notes {
        row("note", n.clone());
    }
    let width = rows.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{:<width$}  {v}\n", format!("{k}:")))
        .collect()
}
