//! The steering program: load it with aya, attach it to an interface,
//! register AF_XDP sockets per queue, edit the steering rules, read counters.
//!
//! The program (`ebpf/c/steer.bpf.c`) redirects TCP packets whose local
//! address and port match a rule to the AF_XDP socket of their RX queue,
//! and with them the ICMP "packet too big" messages about such flows (the
//! quoted segment's source address and port match), and passes everything
//! else to the kernel. It is attached through a BPF link
//! owned by this process: when the process exits — even by SIGKILL — the
//! kernel closes the link and the program is detached. Dropping
//! [`Steering`] detaches it too.
//!
//! Rules live in two slots; [`Steering::set_rules`] writes the inactive one
//! and then flips the active index, so a packet being classified sees either
//! the old or the new set, not a half-written one — unless two updates come
//! within one program run (microseconds), which rule edits at human or
//! connection-setup pace do not.

pub mod impair;

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{Array, MapData, PerCpuArray, XskMap};
use aya::programs::{ProgramError, Xdp, XdpMode};
use aya::{Ebpf, EbpfError, EbpfLoader};
use std::time::SystemTime;

/// How many xtcp steering programs the kernel has loaded now, in any
/// namespace (a leak check for tests and tools: each attached xtcp holds
/// one, and none should outlive its process).
pub fn steering_programs_loaded() -> Result<usize, ProgramError> {
    let mut n = 0;
    for p in aya::programs::loaded_programs() {
        if p?.name() == b"xtcp_steer" {
            n += 1;
        }
    }
    Ok(n)
}

/// The IDs of steering programs loaded at or after `since` that no process
/// holds any more: no program or link descriptor in any `/proc/PID/fdinfo`
/// names them. A program that outlives its process this way is a leak (a
/// pin, or an attachment without a BPF link); other xtcp processes running
/// at the same time hold theirs and are not counted.
pub fn orphaned_steering_programs(since: SystemTime) -> Result<Vec<u32>, ProgramError> {
    let mut ours = Vec::new();
    for p in aya::programs::loaded_programs() {
        let p = p?;
        if p.name() == b"xtcp_steer" && p.loaded_at().is_none_or(|t| t >= since) {
            ours.push(p.id());
        }
    }
    if ours.is_empty() {
        return Ok(ours);
    }
    let mut held = std::collections::BTreeSet::new();
    let procs = std::fs::read_dir("/proc").map_err(|e| {
        ProgramError::SyscallError(aya::sys::SyscallError {
            call: "read_dir /proc",
            io_error: e,
        })
    })?;
    for pid in procs.flatten() {
        let Ok(fds) = std::fs::read_dir(pid.path().join("fdinfo")) else {
            continue; // not a process, or gone
        };
        for fd in fds.flatten() {
            let Ok(text) = std::fs::read_to_string(fd.path()) else {
                continue;
            };
            for line in text.lines() {
                if let Some(id) = line.strip_prefix("prog_id:") {
                    if let Ok(id) = id.trim().parse::<u32>() {
                        held.insert(id);
                    }
                }
            }
        }
    }
    ours.retain(|id| !held.contains(id));
    Ok(ours)
}

/// Maximum number of steering rules.
pub const MAX_RULES: usize = xtcp_ebpf::MAX_RULES;
const RULE_LEN: usize = 24;
const RULESET_LEN: usize = 8 + RULE_LEN * MAX_RULES;

/// How to attach the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// Native (driver) mode: the driver runs the program; fails if it can't.
    Native,
    /// Generic (SKB) mode: works on any interface, slower.
    Generic,
    /// Native, and generic if native is refused (with a notice).
    #[default]
    Auto,
}

/// One steering rule: TCP packets to a local address (or any) and a local
/// port range. A listener on port P is `ports: P..=P`; outgoing
/// connections are matched by their local (ephemeral) port range, since the
/// replies arrive with those ports as destination.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Rule {
    /// Local address; `None` matches any address of either family.
    pub addr: Option<IpAddr>,
    /// Local port range (inclusive).
    pub ports: RangeInclusive<u16>,
}

impl Rule {
    /// A rule for one local port on any address.
    pub fn port(port: u16) -> Rule {
        Rule {
            addr: None,
            ports: port..=port,
        }
    }

    fn encode(&self, out: &mut [u8]) {
        let (family, any) = match self.addr {
            None => (0u8, 1u8),
            Some(IpAddr::V4(_)) => (4, 0),
            Some(IpAddr::V6(_)) => (6, 0),
        };
        out[0] = family;
        out[1] = any;
        out[2..4].copy_from_slice(&self.ports.start().to_ne_bytes());
        out[4..6].copy_from_slice(&self.ports.end().to_ne_bytes());
        out[6..8].fill(0);
        out[8..24].fill(0);
        match self.addr {
            Some(IpAddr::V4(a)) => out[8..12].copy_from_slice(&a.octets()),
            Some(IpAddr::V6(a)) => out[8..24].copy_from_slice(&a.octets()),
            None => {}
        }
    }
}

/// Encodes a rule set the way `struct xtcp_ruleset` lays it out.
fn encode_rules(rules: &[Rule]) -> [u8; RULESET_LEN] {
    let mut buf = [0u8; RULESET_LEN];
    buf[0..4].copy_from_slice(&(rules.len() as u32).to_ne_bytes());
    for (i, r) in rules.iter().enumerate() {
        r.encode(&mut buf[8 + i * RULE_LEN..8 + (i + 1) * RULE_LEN]);
    }
    buf
}

/// What happens to a packet that matches a rule but whose RX queue has no
/// AF_XDP socket (during start-up and shutdown, or when RSS puts a flow on
/// a queue xtcp does not serve). Counted as `no_socket` either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NoSocket {
    /// Give it to the kernel (which answers with a RST if it has no socket
    /// for the port).
    #[default]
    Pass,
    /// Drop it: TCP retransmits once a socket is there.
    Drop,
}

/// The program's counters, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SteerCounters {
    /// Packets redirected to an AF_XDP socket.
    pub steered: u64,
    /// Packets passed to the kernel (not ours).
    pub passed: u64,
    /// Packets too short or with bad header lengths (passed; the kernel drops them).
    pub malformed: u64,
    /// Packets that matched a rule but had no socket on their queue (passed).
    pub no_socket: u64,
}

/// Errors of loading, attaching and driving the steering program.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// No such interface.
    #[error("no interface named `{iface}` in this network namespace (list them with `ip link`)")]
    NoInterface {
        /// The name given.
        iface: String,
    },
    /// The kernel refused to load the program.
    #[error("loading the XDP steering program failed: {source}; {hint}")]
    Load {
        /// What to do (names the capabilities this process lacks).
        hint: String,
        /// aya's error (includes the verifier log, if any).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The kernel (its verifier) refused the program: the message is short
    /// and names what is missing; the verifier's log goes to the debug log.
    #[error("loading the XDP steering program failed: {errno}{verifier}; {hint}")]
    Refused {
        /// The `BPF_PROG_LOAD` error.
        #[source]
        errno: std::io::Error,
        /// The verifier's verdict (the last line of its log that is not a
        /// statistic), as `": verifier: …"`, or empty.
        verifier: String,
        /// What to do.
        hint: String,
    },
    /// Attaching failed.
    #[error("attaching XDP in {mode} mode to {iface} failed: {source}{hint}")]
    Attach {
        /// Interface.
        iface: String,
        /// Mode tried.
        mode: &'static str,
        /// aya's error.
        #[source]
        source: Box<ProgramError>,
        /// What to do.
        hint: String,
    },
    /// Too many rules.
    #[error("{count} steering rules given; at most {MAX_RULES} are supported")]
    TooManyRules {
        /// How many were given.
        count: usize,
    },
    /// An invalid rule.
    #[error("invalid steering rule {rule:?}: {why}")]
    BadRule {
        /// The rule.
        rule: Rule,
        /// Why.
        why: &'static str,
    },
    /// Queue id beyond the XSKMAP.
    #[error("queue {queue} is beyond the {max} queues the steering program can serve")]
    QueueRange {
        /// The queue.
        queue: u32,
        /// The limit.
        max: u32,
    },
    /// A map operation failed.
    #[error("BPF map `{map}`: {source}")]
    Map {
        /// Map name.
        map: &'static str,
        /// aya's error.
        #[source]
        source: aya::maps::MapError,
    },
}

/// The steering program, loaded and attached to one interface.
pub struct Steering {
    // Field order matters for drop: maps first, then the program (whose
    // link detaches it).
    xsks: XskMap<MapData>,
    rules: Array<MapData, [u8; RULESET_LEN]>,
    config: Array<MapData, u32>,
    counters: PerCpuArray<MapData, u64>,
    active: u32,
    current: Vec<Rule>,
    mode: AttachMode,
    iface: String,
    _ebpf: Ebpf,
}

impl std::fmt::Debug for Steering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steering")
            .field("iface", &self.iface)
            .field("mode", &self.mode)
            .field("rules", &self.current)
            .finish()
    }
}

/// The verifier's verdict: the last line of its log that is not one of
/// the statistics it ends with.
fn verifier_verdict(log: &str) -> Option<&str> {
    const STATS: [&str; 4] = [
        "verification time",
        "stack depth",
        "processed ",
        "max_states",
    ];
    log.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !STATS.iter().any(|s| l.starts_with(s)))
}

/// What to tell the user when `BPF_PROG_LOAD` failed, given the caller's
/// effective capabilities (`None`: unknown).
fn load_hint(caps: Option<crate::caps::CapSet>, verifier: bool) -> String {
    use crate::caps::{BPF, NET_ADMIN, PERFMON};
    let log = if verifier {
        "; the verifier's log is shown with --log debug"
    } else {
        ""
    };
    let Some(caps) = caps else {
        return format!("loading it needs root, or CAP_BPF + CAP_PERFMON + CAP_NET_ADMIN{log}");
    };
    let missing: Vec<&str> = [BPF, PERFMON]
        .into_iter()
        .filter(|&c| !caps.has_or_sys_admin(c))
        .chain([NET_ADMIN].into_iter().filter(|&c| !caps.has(c)))
        .map(|c| c.name)
        .collect();
    let why = if !caps.has_or_sys_admin(PERFMON) {
        " (without CAP_PERFMON the verifier refuses the pointer arithmetic of the \
         program's packet parsing)"
    } else if !caps.has(NET_ADMIN) {
        " (the kernel creates the program's socket map, an XSKMAP, only with it)"
    } else {
        ""
    };
    if missing.is_empty() {
        format!(
            "this process has CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN: the kernel may lack \
             BPF or XDP support{log}"
        )
    } else {
        format!(
            "this process lacks {}{why}: run as root, or grant CAP_BPF, CAP_PERFMON \
             and CAP_NET_ADMIN ({GRANT}){log}",
            missing.join(" and ")
        )
    }
}

/// How to grant what xtcp needs.
const GRANT: &str = "e.g. `setcap cap_net_admin,cap_net_raw,cap_bpf,cap_perfmon,cap_ipc_lock+ep \
                     \"$(command -v xtcp)\"`, or systemd `AmbientCapabilities=CAP_NET_ADMIN \
                     CAP_NET_RAW CAP_BPF CAP_PERFMON CAP_IPC_LOCK`";

/// What to say where the kernel refused an operation for want of
/// `CAP_NET_ADMIN` before the program was loaded (asking for a neighbour's
/// address): the capabilities of xtcp's set this process lacks, and how
/// to grant them.
pub fn net_admin_hint() -> String {
    use crate::caps::{BPF, NET_ADMIN, NET_RAW, PERFMON};
    let lacks = crate::caps::effective().map(|caps| {
        [NET_ADMIN, NET_RAW]
            .into_iter()
            .filter(|&c| !caps.has(c))
            .chain(
                [BPF, PERFMON]
                    .into_iter()
                    .filter(|&c| !caps.has_or_sys_admin(c)),
            )
            .map(|c| c.name)
            .collect::<Vec<_>>()
    });
    let grant = format!(
        "run as root, or grant CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_PERFMON ({GRANT})"
    );
    match lacks {
        Some(l) if !l.is_empty() => format!("this process lacks {}: {grant}", l.join(" and ")),
        Some(_) => "this process has CAP_NET_ADMIN, but not over this network namespace (one \
                    that another user namespace owns?): run xtcp where the namespace's owner \
                    grants it"
            .to_owned(),
        None => grant,
    }
}

/// A `BPF_PROG_LOAD` failure as a short error; the verifier's log (tens
/// of lines) goes to the debug log.
fn load_error(e: ProgramError) -> XdpError {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            tracing::debug!("the verifier's log of xtcp_steer:\n{log}");
            XdpError::Refused {
                errno: io_error,
                verifier: verifier_verdict(&log)
                    .map(|v| format!(": verifier: {v}"))
                    .unwrap_or_default(),
                hint: load_hint(crate::caps::effective(), true),
            }
        }
        e => XdpError::Load {
            hint: load_hint(crate::caps::effective(), false),
            source: Box::new(e),
        },
    }
}

fn attach_hint(e: &ProgramError) -> String {
    let errno = match e {
        ProgramError::SyscallError(s) => s.io_error.raw_os_error(),
        _ => None,
    };
    match errno {
        Some(libc::EBUSY | libc::EEXIST) => "; another XDP program is attached to this interface: \
            another xtcp (one xtcp process owns an interface and all the queues it serves; \
            stop the other one or use another interface), or a foreign program (see \
            `ip link show` and `bpftool net show dev IFACE`; one attached through a bpf \
            link is detached by ending its owner, or `bpftool link detach id ID`, not by `ip \
            link set dev IFACE xdp off`)"
            .to_owned(),
        Some(libc::EPERM | libc::EACCES) => {
            "; run as root or grant CAP_NET_ADMIN and CAP_BPF".to_owned()
        }
        Some(libc::EOPNOTSUPP | libc::EINVAL) => {
            "; the driver may lack native XDP or multi-buffer XDP (xdp.frags) support: \
             try `--xdp-mode generic`, or check `xtcp probe IFACE`"
                .to_owned()
        }
        Some(libc::ERANGE) => "; the MTU is too large for this driver's XDP: lower it".to_owned(),
        _ => String::new(),
    }
}

impl Steering {
    /// Loads the program and attaches it to `iface` in `mode`.
    pub fn attach(iface: &str, mode: AttachMode) -> Result<Steering, XdpError> {
        let ifindex = crate::xsk::ifindex(iface).map_err(|_| XdpError::NoInterface {
            iface: iface.to_owned(),
        })?;
        // The program has no CO-RE relocations, so no kernel BTF to relocate
        // against: `Ebpf::load` would parse /sys/kernel/btf/vmlinux (6 MB,
        // ~50 ms) for them a second time after `EbpfLoader::new` did.
        let mut ebpf =
            EbpfLoader::new()
                .btf(None)
                .load(xtcp_ebpf::STEER)
                .map_err(|e: EbpfError| XdpError::Load {
                    hint: load_hint(crate::caps::effective(), false),
                    source: Box::new(e),
                })?;
        let prog: &mut Xdp = ebpf
            .program_mut(xtcp_ebpf::STEER_PROGRAM)
            .ok_or_else(|| XdpError::Load {
                hint: String::from("the object is broken: rebuild xtcp"),
                source: "program xtcp_steer missing from the object".into(),
            })?
            .try_into()
            .map_err(|e: ProgramError| XdpError::Load {
                hint: String::from("the object is broken: rebuild xtcp"),
                source: Box::new(e),
            })?;
        prog.load().map_err(load_error)?;
        let attach_err = |source: ProgramError, mode: &'static str| XdpError::Attach {
            iface: iface.to_owned(),
            mode,
            hint: attach_hint(&source),
            source: Box::new(source),
        };
        let used = match mode {
            AttachMode::Native => {
                prog.attach_to_if_index(ifindex, XdpMode::Driver)
                    .map_err(|e| attach_err(e, "native"))?;
                AttachMode::Native
            }
            AttachMode::Generic => {
                prog.attach_to_if_index(ifindex, XdpMode::Skb)
                    .map_err(|e| attach_err(e, "generic"))?;
                AttachMode::Generic
            }
            AttachMode::Auto => match prog.attach_to_if_index(ifindex, XdpMode::Driver) {
                Ok(_) => AttachMode::Native,
                Err(e) => {
                    let busy = matches!(&e, ProgramError::SyscallError(s)
                        if matches!(s.io_error.raw_os_error(), Some(libc::EBUSY | libc::EEXIST | libc::EPERM)));
                    if busy {
                        return Err(attach_err(e, "native"));
                    }
                    tracing::warn!(
                        iface,
                        "native XDP attach failed ({e}); falling back to generic (SKB) mode, \
                         which is slower and sees packets after GRO: turn GRO off (`ethtool \
                         -K {iface} gro off`), or packets larger than a frame are dropped"
                    );
                    prog.attach_to_if_index(ifindex, XdpMode::Skb)
                        .map_err(|e| attach_err(e, "generic"))?;
                    AttachMode::Generic
                }
            },
        };
        let take = |ebpf: &mut Ebpf, name: &'static str| {
            ebpf.take_map(name).ok_or_else(|| XdpError::Load {
                hint: String::from("the object is broken: rebuild xtcp"),
                source: format!("map {name} missing from the object").into(),
            })
        };
        let map_err = |map: &'static str| move |source| XdpError::Map { map, source };
        let xsks = XskMap::try_from(take(&mut ebpf, "xsks")?).map_err(map_err("xsks"))?;
        let rules = Array::try_from(take(&mut ebpf, "rules")?).map_err(map_err("rules"))?;
        let config = Array::try_from(take(&mut ebpf, "config")?).map_err(map_err("config"))?;
        let counters =
            PerCpuArray::try_from(take(&mut ebpf, "counters")?).map_err(map_err("counters"))?;
        Ok(Steering {
            xsks,
            rules,
            config,
            counters,
            active: 0,
            current: Vec::new(),
            mode: used,
            iface: iface.to_owned(),
            _ebpf: ebpf,
        })
    }

    /// The mode the program is attached in.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Directs packets of `queue` to the AF_XDP socket `fd`.
    pub fn register(&mut self, queue: u32, fd: &impl AsFd) -> Result<(), XdpError> {
        if queue >= xtcp_ebpf::MAX_QUEUES {
            return Err(XdpError::QueueRange {
                queue,
                max: xtcp_ebpf::MAX_QUEUES,
            });
        }
        self.xsks
            .set(queue, fd.as_fd().as_raw_fd(), 0)
            .map_err(|source| XdpError::Map {
                map: "xsks",
                source,
            })
    }

    /// Removes the socket of `queue` (its packets go to the kernel again).
    pub fn unregister(&mut self, queue: u32) -> Result<(), XdpError> {
        self.xsks.unset(queue).map_err(|source| XdpError::Map {
            map: "xsks",
            source,
        })
    }

    /// Replaces the rule set.
    pub fn set_rules(&mut self, rules: &[Rule]) -> Result<(), XdpError> {
        if rules.len() > MAX_RULES {
            return Err(XdpError::TooManyRules { count: rules.len() });
        }
        for r in rules {
            if r.ports.start() > r.ports.end() {
                return Err(XdpError::BadRule {
                    rule: r.clone(),
                    why: "empty port range",
                });
            }
        }
        let next = self.active ^ 1;
        self.rules
            .set(next, encode_rules(rules), 0)
            .map_err(|source| XdpError::Map {
                map: "rules",
                source,
            })?;
        self.config
            .set(0, next, 0)
            .map_err(|source| XdpError::Map {
                map: "config",
                source,
            })?;
        self.active = next;
        self.current = rules.to_vec();
        Ok(())
    }

    /// Sets what happens to matching packets of a queue without a socket.
    pub fn set_no_socket(&mut self, action: NoSocket) -> Result<(), XdpError> {
        let v = u32::from(action == NoSocket::Drop);
        self.config.set(1, v, 0).map_err(|source| XdpError::Map {
            map: "config",
            source,
        })
    }

    /// Adds one rule to the current set.
    pub fn add_rule(&mut self, rule: Rule) -> Result<(), XdpError> {
        let mut rules = self.current.clone();
        rules.push(rule);
        self.set_rules(&rules)
    }

    /// The current rule set.
    pub fn rules(&self) -> &[Rule] {
        &self.current
    }

    /// Reads the counters, summed over CPUs.
    pub fn counters(&self) -> Result<SteerCounters, XdpError> {
        let get = |i: u32| -> Result<u64, XdpError> {
            let v = self.counters.get(&i, 0).map_err(|source| XdpError::Map {
                map: "counters",
                source,
            })?;
            Ok(v.iter().sum())
        };
        Ok(SteerCounters {
            steered: get(0)?,
            passed: get(1)?,
            malformed: get(2)?,
            no_socket: get(3)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn rules_encode_like_the_c_struct() {
        let rules = [
            Rule::port(5201),
            Rule {
                addr: Some(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))),
                ports: 32768..=60999,
            },
            Rule {
                addr: Some(IpAddr::V6(Ipv6Addr::LOCALHOST)),
                ports: 80..=80,
            },
        ];
        let b = encode_rules(&rules);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 3);
        let r0 = &b[8..32];
        assert_eq!((r0[0], r0[1]), (0, 1));
        assert_eq!(u16::from_ne_bytes([r0[2], r0[3]]), 5201);
        assert_eq!(u16::from_ne_bytes([r0[4], r0[5]]), 5201);
        let r1 = &b[32..56];
        assert_eq!((r1[0], r1[1]), (4, 0));
        assert_eq!(u16::from_ne_bytes([r1[2], r1[3]]), 32768);
        assert_eq!(u16::from_ne_bytes([r1[4], r1[5]]), 60999);
        assert_eq!(&r1[8..12], &[10, 1, 2, 3]);
        assert!(r1[12..24].iter().all(|&x| x == 0));
        let r2 = &b[56..80];
        assert_eq!(r2[0], 6);
        assert_eq!(r2[23], 1);
        assert!(b[80..].iter().all(|&x| x == 0));
    }
}
