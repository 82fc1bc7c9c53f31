//! Path impairment for tests: a tc (TCX) program on the kernel peer's side
//! of a test network that drops, duplicates and (sending them by a slower
//! detour) reorders TCP packets at random, or drops one chosen packet for
//! sure, and counts what it did (this kernel has no netem), and the
//! retransmissions that pass it. Attached through a BPF link, so it goes
//! away with the process.

use aya::Ebpf;
use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::{ProgramError, SchedClassifier, TcAttachType};

use super::XdpError;

/// Which way the impaired packets travel through the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// Packets arriving at the interface (sent by the other side).
    Ingress,
    /// Packets the interface's own kernel sends.
    Egress,
}

/// Rates, in parts per million of the TCP packets the hook sees. A drop is
/// a loss as on a wire, also on egress, where the local stack is told that
/// the packet went (and recovers it as a loss, not as local congestion).
/// On egress the local stack hands over GSO packets of several segments,
/// which are dropped or duplicated whole (set the device's `gso_max_segs`
/// to 1 for per-segment decisions). Only packets that were not dropped can
/// be duplicated, so the duplicate rate is `(1 - drop) × dup`.
///
/// Besides those at random, [`ImpairConfig::drop_nth`] drops one chosen
/// packet for sure, so that a test of loss recovery always has a loss to
/// recover from: a rate alone can drop none of a few dozen GSO packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImpairConfig {
    /// Dropped.
    pub drop_ppm: u32,
    /// Duplicated (at ingress the copy follows the original; at egress it
    /// leaves first).
    pub dup_ppm: u32,
    /// Only TCP packets from or to this port; `None`: all TCP.
    pub port: Option<u16>,
    /// At ingress, sent the long way round, where they arrive late: out of
    /// [`Detour::ifindex`], whose peer takes them into the same host
    /// ([`Detour`]).
    pub detour_ppm: u32,
    /// Where they go; `None`: nowhere (no reordering).
    pub detour: Option<Detour>,
    /// The Nth TCP packet without SYN that the hook sees (counted from 1,
    /// over all flows that match `port`, since the rates were last set) is
    /// dropped whatever the rate; 0: none.
    pub drop_nth: u32,
}

/// The packet that [`ImpairConfig::loss`] drops for sure: late enough to
/// be past the handshake and the first round trips, early enough that every
/// lossy test's transfer has it, each way.
pub const LOSS_NTH: u32 = 32;

/// An interface of the impaired host whose egress delivers back into it
/// (one end of a veth pair whose other end is in the same namespace),
/// slowed by a qdisc: packets sent out of it arrive after those that took
/// the direct way, reordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detour {
    /// The interface they are sent out of.
    pub ifindex: u32,
    /// The MAC address of its far end (their destination MAC becomes it,
    /// so that the stack there takes them).
    pub mac: [u8; 6],
}

impl ImpairConfig {
    /// Drops `percent` % of the TCP packets at random and, if `percent` is
    /// above 0, the [`LOSS_NTH`]th packet without SYN for sure.
    pub fn loss(percent: f64) -> ImpairConfig {
        let drop_ppm = (percent * 10_000.0).round() as u32;
        ImpairConfig {
            drop_ppm,
            drop_nth: if drop_ppm > 0 { LOSS_NTH } else { 0 },
            ..ImpairConfig::default()
        }
    }
}

/// What the program did, in TCP segments, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImpairCounters {
    /// TCP packets that matched.
    pub seen: u64,
    /// Of those, dropped.
    pub dropped: u64,
    /// Of those, duplicated.
    pub duplicated: u64,
    /// Of those, segments that start below the highest sequence number
    /// their flow had reached at the hook (SYN and FIN included), whether
    /// dropped or not: retransmissions, as the path sees them.
    pub repeated: u64,
    /// Their payload bytes.
    pub repeated_bytes: u64,
    /// Sent by the detour (reordered).
    pub detoured: u64,
}

/// The impairment program attached to one interface and hook.
pub struct Impairment {
    config: Array<MapData, [u32; 9]>,
    ordinal: Array<MapData, u64>,
    counters: PerCpuArray<MapData, u64>,
    hook: Hook,
    ebpf: Ebpf,
}

impl std::fmt::Debug for Impairment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Impairment")
            .field("hook", &self.hook)
            .finish()
    }
}

impl Impairment {
    /// Loads the program and attaches it to `iface` at `hook` with `cfg`.
    pub fn attach(iface: &str, hook: Hook, cfg: ImpairConfig) -> Result<Impairment, XdpError> {
        crate::xsk::ifindex(iface).map_err(|_| XdpError::NoInterface {
            iface: iface.to_owned(),
        })?;
        let load_err = |e: Box<dyn std::error::Error + Send + Sync>| XdpError::Load {
            hint: "the test impairment program needs root".to_owned(),
            source: e,
        };
        let mut ebpf = Ebpf::load(xtcp_ebpf::IMPAIR).map_err(|e| load_err(Box::new(e)))?;
        let config: Array<MapData, [u32; 9]> = Array::try_from(
            ebpf.take_map("impair_cfg")
                .ok_or_else(|| load_err("map impair_cfg missing".into()))?,
        )
        .map_err(|source| XdpError::Map {
            map: "impair_cfg",
            source,
        })?;
        let counters = PerCpuArray::try_from(
            ebpf.take_map("impair_counters")
                .ok_or_else(|| load_err("map impair_counters missing".into()))?,
        )
        .map_err(|source| XdpError::Map {
            map: "impair_counters",
            source,
        })?;
        let ordinal = Array::try_from(
            ebpf.take_map("impair_ordinal")
                .ok_or_else(|| load_err("map impair_ordinal missing".into()))?,
        )
        .map_err(|source| XdpError::Map {
            map: "impair_ordinal",
            source,
        })?;
        let mut imp = Impairment {
            config,
            ordinal,
            counters,
            hook,
            ebpf,
        };
        imp.set(cfg)?;
        let prog: &mut SchedClassifier = imp
            .ebpf
            .program_mut(xtcp_ebpf::IMPAIR_PROGRAM)
            .ok_or_else(|| load_err("program xtcp_impair missing".into()))?
            .try_into()
            .map_err(|e: ProgramError| load_err(Box::new(e)))?;
        prog.load().map_err(|e| load_err(Box::new(e)))?;
        let attach = match hook {
            Hook::Ingress => TcAttachType::Ingress,
            Hook::Egress => TcAttachType::Egress,
        };
        prog.attach(iface, attach)
            .map_err(|source| XdpError::Attach {
                iface: iface.to_owned(),
                mode: "tc",
                hint: format!(
                    "; before Linux 6.6 (no TCX links) add a clsact qdisc first: \
                 `tc qdisc add dev {iface} clsact`"
                ),
                source: Box::new(source),
            })?;
        Ok(imp)
    }

    /// Changes the rates, and counts towards [`ImpairConfig::drop_nth`]
    /// from here.
    pub fn set(&mut self, cfg: ImpairConfig) -> Result<(), XdpError> {
        self.config
            .set(0, encode(cfg, self.hook), 0)
            .map_err(|source| XdpError::Map {
                map: "impair_cfg",
                source,
            })?;
        self.ordinal.set(0, 0, 0).map_err(|source| XdpError::Map {
            map: "impair_ordinal",
            source,
        })
    }

    /// Reads the counters.
    pub fn counters(&self) -> Result<ImpairCounters, XdpError> {
        let get = |i: u32| -> Result<u64, XdpError> {
            let v = self.counters.get(&i, 0).map_err(|source| XdpError::Map {
                map: "impair_counters",
                source,
            })?;
            Ok(v.iter().sum())
        };
        Ok(ImpairCounters {
            seen: get(0)?,
            dropped: get(1)?,
            duplicated: get(2)?,
            repeated: get(3)?,
            repeated_bytes: get(4)?,
            detoured: get(5)?,
        })
    }
}

/// The program's `struct impair_config`, as the words of its map value.
fn encode(cfg: ImpairConfig, hook: Hook) -> [u32; 9] {
    let (ifindex, mac) = cfg.detour.map_or((0, [0; 6]), |d| (d.ifindex, d.mac));
    [
        cfg.drop_ppm.min(1_000_000),
        cfg.dup_ppm.min(1_000_000),
        u32::from(cfg.port.unwrap_or(0)),
        u32::from(hook == Hook::Ingress),
        cfg.detour_ppm.min(1_000_000),
        ifindex,
        u32::from_ne_bytes([mac[0], mac[1], mac[2], mac[3]]),
        u32::from_ne_bytes([mac[4], mac[5], 0, 0]),
        cfg.drop_nth,
    ]
}
