//! A test network: two network namespaces joined by a veth pair, with
//! addresses, MTU, queue count and offloads chosen by the caller. Used by
//! the integration tests and by `xtcp bench` / `xtcp xsk-bench --testnet`.
//!
//! [`TestNet::adopt`] builds the same two namespaces around two existing
//! interfaces instead (two NIC ports cabled back to back, for `xtcp bench
//! --iface`) and hands them back, as they were, when dropped.
//!
//! Everything is created with iproute2 and ethtool (this is setup code, not
//! the engine's runtime) and removed when the [`TestNet`] is dropped — also
//! when a test panics, since unwinding runs the destructor. Deleting a
//! namespace deletes the veth end inside it, and with it the pair.
//!
//! Addresses come from the benchmarking ranges (198.18.0.0/15, RFC 2544;
//! 2001:2::/48, RFC 5180) and live only inside the namespaces, so traffic
//! never leaves them. Names carry the process id and a counter so that
//! tests running in parallel do not collide.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::OwnedFd;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Settings of a test network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestNetConfig {
    /// MTU of both veth ends.
    pub mtu: u32,
    /// RX and TX queues of each veth end.
    pub queues: u32,
    /// TSO, GSO, GRO and TX checksum offload on both ends (on = kernel
    /// defaults for veth; off = every packet is MTU-sized and fully
    /// checksummed, what an XDP program on the other end sees from a NIC).
    pub offloads: bool,
}

impl Default for TestNetConfig {
    fn default() -> Self {
        TestNetConfig {
            mtu: 1500,
            queues: 1,
            offloads: false,
        }
    }
}

/// A named network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

/// Errors while building the test network.
#[derive(Debug, thiserror::Error)]
pub enum TestNetError {
    /// A command could not be run (not installed?).
    #[error("cannot run `{cmd}`: {source} (install iproute2 and ethtool)")]
    Spawn {
        /// The command line.
        cmd: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Failed {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Not root.
    #[error("the test network needs root (network namespaces and veth)")]
    NotRoot,
    /// An interface to adopt does not exist here.
    #[error("interface `{iface}` does not exist in this network namespace")]
    NoSuchIface {
        /// The interface.
        iface: String,
    },
    /// The same interface given for both sides.
    #[error("interface `{iface}` given for both sides: give two interfaces")]
    SameIface {
        /// The interface.
        iface: String,
    },
    /// No carrier on an interface after a change.
    #[error("interface `{iface}` has no carrier {secs} s after `{after}` (is it cabled?)")]
    NoCarrier {
        /// The interface.
        iface: String,
        /// What was changed.
        after: String,
        /// How long we waited.
        secs: u64,
    },
    /// An interface that cannot be taken over.
    #[error("interface `{iface}` cannot be taken over: {reason}")]
    Refused {
        /// The interface.
        iface: String,
        /// Why.
        reason: String,
    },
    /// setns failed.
    #[error("entering network namespace {name}: {source}")]
    Setns {
        /// Namespace.
        name: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn run(args: &[&str]) -> Result<Output, TestNetError> {
    let cmd = args.join(" ");
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| TestNetError::Spawn {
            cmd: cmd.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(TestNetError::Failed {
            cmd,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out)
}

impl Netns {
    /// Creates a namespace with loopback up.
    pub fn new(name: &str) -> Result<Netns, TestNetError> {
        run(&["ip", "netns", "add", name])?;
        let ns = Netns {
            name: name.to_owned(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME args…`.
    pub fn ip(&self, args: &[&str]) -> Result<Output, TestNetError> {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend_from_slice(args);
        run(&v)
    }

    /// Runs a command inside the namespace and waits for it.
    pub fn exec(&self, args: &[&str]) -> Result<Output, TestNetError> {
        let mut v = vec!["ip", "netns", "exec", &self.name];
        v.extend_from_slice(args);
        run(&v)
    }

    /// A [`Command`] that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Moves the calling thread into the namespace until the guard drops.
    /// Sockets created meanwhile stay in the namespace afterwards.
    pub fn enter(&self) -> Result<NsGuard, TestNetError> {
        enter(&self.name)
    }
}

/// Moves the calling thread into the named namespace until the guard drops
/// (for threads that only know the name).
pub fn enter(name: &str) -> Result<NsGuard, TestNetError> {
    let err = |source| TestNetError::Setns {
        name: name.to_owned(),
        source,
    };
    let home: OwnedFd = std::fs::File::open("/proc/thread-self/ns/net")
        .map_err(err)?
        .into();
    let target: OwnedFd = std::fs::File::open(format!("/run/netns/{name}"))
        .map_err(err)?
        .into();
    setns(&target).map_err(err)?;
    Ok(NsGuard { home })
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

/// Returns the thread to its original namespace on drop.
#[derive(Debug)]
pub struct NsGuard {
    home: OwnedFd,
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        if let Err(e) = setns(&self.home) {
            // The thread would keep running in the wrong namespace: fail
            // loudly, but do not panic while already unwinding (abort).
            if std::thread::panicking() {
                eprintln!("cannot return to the original network namespace: {e}");
            } else {
                panic!("cannot return to the original network namespace: {e}");
            }
        }
    }
}

fn setns(fd: &OwnedFd) -> io::Result<()> {
    crate::sys::enter_netns(std::os::fd::AsFd::as_fd(fd))
}

/// One side of the test network.
#[derive(Debug)]
pub struct Side {
    /// Its namespace.
    pub ns: Netns,
    /// Its veth end.
    pub iface: String,
    /// IPv4 address (/24).
    pub ip4: Ipv4Addr,
    /// IPv6 address (/64).
    pub ip6: Ipv6Addr,
    /// MAC address.
    pub mac: [u8; 6],
}

/// Two namespaces `a` and `b` joined by a veth pair ([`TestNet::new`]), or
/// by two existing interfaces taken over for a while ([`TestNet::adopt`]).
#[derive(Debug)]
pub struct TestNet {
    /// Interfaces to hand back. Declared first: fields drop in order, so
    /// they leave the namespaces before those are deleted.
    adopted: Option<Adopted>,
    /// Side A (usually xtcp's side).
    pub a: Side,
    /// Side B (usually the kernel's side or the traffic source).
    pub b: Side,
    /// The settings it was built with.
    pub config: TestNetConfig,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// True if the process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// The MAC of `iface` in `ns` (`SIOCGIFHWADDR`, from inside the namespace).
fn mac_of(ns: &Netns, iface: &str) -> Result<[u8; 6], TestNetError> {
    let _g = ns.enter()?;
    crate::xsk::iface_mac(iface).map_err(|e| TestNetError::Failed {
        cmd: format!("read MAC of {iface} in {}", ns.name()),
        stderr: e.to_string(),
    })
}

impl TestNet {
    /// Builds the network.
    pub fn new(config: TestNetConfig) -> Result<TestNet, TestNetError> {
        if !is_root() {
            return Err(TestNetError::NotRoot);
        }
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}x{n}", std::process::id());
        let a_ns = Netns::new(&format!("xtcp-a{tag}"))?;
        let b_ns = Netns::new(&format!("xtcp-b{tag}"))?;
        // veth names: at most 15 bytes.
        let short = format!("{:x}x{n}", std::process::id() % 0xfffff);
        let a_if = format!("xa{short}");
        let b_if = format!("xb{short}");
        let q = config.queues.to_string();
        a_ns.ip(&[
            "link",
            "add",
            &a_if,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &b_if,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "netns",
            b_ns.name(),
        ])?;
        // Several queues: the kernel side transmits on queue q from CPU q
        // (XPS). Its ACKs and SYN-ACKs are made in the softirq of the CPU
        // that delivered the segment — on veth, the sender's — so a worker
        // pinned to core q gets the ACKs of its own flows back on queue q.
        // Unlike a NIC's RSS, the queue follows the transmitting CPU, not
        // the flow: data that a kernel sender writes goes out on the queue
        // of whichever CPU its thread is on, and xtcp hands the connection
        // over to that queue's worker each time. Unpinned, `iperf3 -c -P 4
        // -t 1` into `xtcp serve --queues 2` had about 180 hand-overs a
        // test; with XPS cleared (the queue then follows the flow's hash),
        // none (2026-12-05; BENCHMARKS.md, "A flow that changes queues").
        // Tests that send from kernel sockets over several queues and care
        // about the rate pin the sender or clear XPS
        // (`thirty_two_streams_spread_over_two_queues`).
        if config.queues > 1 {
            let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
            for q in 0..config.queues.min(64) {
                let file = format!("/sys/class/net/{b_if}/queues/tx-{q}/xps_cpus");
                let mask = 1u64 << (q as usize % ncpu.min(64));
                b_ns.exec(&["sh", "-c", &format!("echo {mask:x} > {file}")])?;
            }
        }
        wire(a_ns, a_if, b_ns, b_if, config, None)
    }

    /// Takes over two existing interfaces `a` and `b` (two ports cabled back
    /// to back, or the ends of a veth pair) instead of making a veth pair:
    /// moves them into two namespaces of their own and configures them like
    /// [`TestNet::new`] (`config.queues` is not applied: a NIC keeps its
    /// channels). Their addresses are flushed by the move and not put back
    /// (a warning names them). On drop, also on error and on panic, each
    /// goes back into this process's namespace with its MTU, offloads, ring
    /// sizes and up/down state as they were, before the namespaces are
    /// deleted. An interface that carries this namespace's default route is
    /// refused.
    pub fn adopt(a: &str, b: &str, config: TestNetConfig) -> Result<TestNet, TestNetError> {
        if a == b {
            return Err(TestNetError::SameIface {
                iface: a.to_owned(),
            });
        }
        let a_link = LinkState::read(None, a)?;
        let b_link = LinkState::read(None, b)?;
        if !is_root() {
            return Err(TestNetError::NotRoot);
        }
        for l in [&a_link, &b_link] {
            if l.loopback {
                return Err(TestNetError::Refused {
                    iface: l.iface.clone(),
                    reason: "it is a loopback device".into(),
                });
            }
            for family in ["-4", "-6"] {
                let routes = run(&["ip", family, "-o", "route", "show", "default"])?;
                if words_follow(&routes.stdout, "dev", &l.iface) {
                    return Err(TestNetError::Refused {
                        iface: l.iface.clone(),
                        reason: "it carries this namespace's default route \
                                 (taking it over would cut this host off)"
                            .into(),
                    });
                }
            }
            let addrs = run(&["ip", "-o", "addr", "show", "dev", &l.iface])?;
            let addrs: Vec<String> = String::from_utf8_lossy(&addrs.stdout)
                .lines()
                .filter(|line| !line.contains("scope link"))
                .filter_map(|line| {
                    let w: Vec<&str> = line.split_whitespace().collect();
                    w.iter()
                        .position(|x| *x == "inet" || *x == "inet6")
                        .and_then(|i| w.get(i + 1))
                        .map(|x| x.to_string())
                })
                .collect();
            if !addrs.is_empty() {
                tracing::warn!(
                    "{}: its addresses {} are removed for the test and not put back",
                    l.iface,
                    addrs.join(", ")
                );
            }
        }
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}x{n}", std::process::id());
        let a_ns = Netns::new(&format!("xtcp-a{tag}"))?;
        let b_ns = Netns::new(&format!("xtcp-b{tag}"))?;
        // Declared after the namespaces, so on an early return it drops
        // first and hands back what was already moved.
        let mut adopted = Adopted {
            home_pid: std::process::id(),
            links: Vec::new(),
        };
        for (l, ns) in [(a_link, &a_ns), (b_link, &b_ns)] {
            let features = offloads_of(&l.iface)?;
            run(&["ip", "link", "set", "dev", &l.iface, "netns", ns.name()])?;
            adopted.links.push(AdoptedLink {
                iface: l.iface,
                ns: ns.name().to_owned(),
                mtu: l.mtu,
                was_up: l.up,
                features,
                rings: None,
            });
        }
        wire(
            a_ns,
            a.to_owned(),
            b_ns,
            b.to_owned(),
            config,
            Some(adopted),
        )
    }

    /// True if the interfaces were taken over with [`TestNet::adopt`].
    pub fn is_adopted(&self) -> bool {
        self.adopted.is_some()
    }

    /// Sets the MTU of both ends.
    pub fn set_mtu(&mut self, mtu: u32) -> Result<(), TestNetError> {
        let m = mtu.to_string();
        for side in [&self.a, &self.b] {
            side.ns
                .ip(&["link", "set", "dev", &side.iface, "mtu", &m])?;
        }
        self.config.mtu = mtu;
        Ok(())
    }

    /// The largest MTU both ends take (`maxmtu` of `ip -d link`), if the
    /// devices report it.
    pub fn max_mtu(&self) -> Result<Option<u32>, TestNetError> {
        let mut max: Option<u32> = None;
        for side in [&self.a, &self.b] {
            if let Some(m) = LinkState::read(Some(&side.ns), &side.iface)?.max_mtu {
                max = Some(max.map_or(m, |x| x.min(m)));
            }
        }
        Ok(max)
    }

    /// Ring sizes of both ends (`ethtool -g`); `None` for a device without
    /// ring parameters (veth).
    pub fn rings(&self) -> Result<[Option<Rings>; 2], TestNetError> {
        Ok([
            rings_of(self.a.ns.name(), &self.a.iface)?,
            rings_of(self.b.ns.name(), &self.b.iface)?,
        ])
    }

    /// Sets the RX and TX rings of both ends to `n` (`ethtool -G`); the
    /// sizes they had are put back on drop. Only for adopted interfaces
    /// (veth has no rings).
    pub fn set_ring(&mut self, n: u32) -> Result<(), TestNetError> {
        let Some(adopted) = self.adopted.as_mut() else {
            return Err(TestNetError::Refused {
                iface: self.a.iface.clone(),
                reason: "veth has no ring sizes to set".into(),
            });
        };
        for (side, link) in [&self.a, &self.b].into_iter().zip(&mut adopted.links) {
            let r =
                rings_of(side.ns.name(), &side.iface)?.ok_or_else(|| TestNetError::Refused {
                    iface: side.iface.clone(),
                    reason: "it has no ring sizes to set (`ethtool -g` is not supported)".into(),
                })?;
            if n > r.rx_max || n > r.tx_max {
                return Err(TestNetError::Refused {
                    iface: side.iface.clone(),
                    reason: format!(
                        "ring {n} is above its maximum (rx {}, tx {} per `ethtool -g`)",
                        r.rx_max, r.tx_max
                    ),
                });
            }
            if link.rings.is_none() {
                link.rings = Some((r.rx, r.tx));
            }
            // ethtool refuses a change that changes nothing.
            if (r.rx, r.tx) != (n, n) {
                let n = n.to_string();
                side.ns
                    .exec(&["ethtool", "-G", &side.iface, "rx", &n, "tx", &n])?;
            }
        }
        Ok(())
    }

    /// Turns TSO, GSO, GRO and TX checksum offload of both ends on or off
    /// (the switches of [`TestNetConfig::offloads`]); adopted interfaces
    /// get theirs back on drop as before.
    pub fn set_offloads(&mut self, on: bool) -> Result<(), TestNetError> {
        let onoff = if on { "on" } else { "off" };
        for side in [&self.a, &self.b] {
            side.ns.exec(&[
                "ethtool",
                "-K",
                &side.iface,
                "tso",
                onoff,
                "gso",
                onoff,
                "gro",
                onoff,
                "tx",
                onoff,
            ])?;
        }
        self.config.offloads = on;
        Ok(())
    }

    /// The offloads [`TestNet::set_offloads`] switches, as each end has
    /// them now (`ethtool -k` names and values, e.g. `("tso", "off")`).
    pub fn offloads(&self) -> Result<[Vec<(&'static str, String)>; 2], TestNetError> {
        Ok([
            offloads_in(Some(&self.a.ns), &self.a.iface)?,
            offloads_in(Some(&self.b.ns), &self.b.iface)?,
        ])
    }

    /// Puts a `pfifo` queue of `packets` in front of both veth ends'
    /// transmit (`tc qdisc replace … root pfifo limit N`), or with `None`
    /// removes it, leaving veth's default (no queue). Only on the veth
    /// pair of its own: an adopted NIC's queueing is left as it is.
    pub fn set_txqueue(&mut self, packets: Option<u32>) -> Result<(), TestNetError> {
        if self.adopted.is_some() {
            return Err(TestNetError::Refused {
                iface: self.a.iface.clone(),
                reason: "the transmit queue is set on the test network's own veth pair only".into(),
            });
        }
        for side in [&self.a, &self.b] {
            match packets {
                Some(n) => {
                    let n = n.to_string();
                    side.ns.exec(&[
                        "tc",
                        "qdisc",
                        "replace",
                        "dev",
                        &side.iface,
                        "root",
                        "pfifo",
                        "limit",
                        &n,
                    ])?;
                }
                None => {
                    let shown = side.ns.exec(&["tc", "qdisc", "show", "dev", &side.iface])?;
                    if String::from_utf8_lossy(&shown.stdout).contains("pfifo") {
                        side.ns
                            .exec(&["tc", "qdisc", "del", "dev", &side.iface, "root"])?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits (at most `timeout`) until both ends have a carrier again, as
    /// a NIC may reset its link after an MTU or ring change; `after` names
    /// the change for the error.
    pub fn wait_carrier(&self, timeout: Duration, after: &str) -> Result<(), TestNetError> {
        let start = Instant::now();
        for side in [&self.a, &self.b] {
            loop {
                if LinkState::read(Some(&side.ns), &side.iface)?.lower_up {
                    break;
                }
                if start.elapsed() >= timeout {
                    return Err(TestNetError::NoCarrier {
                        iface: side.iface.clone(),
                        after: after.to_owned(),
                        secs: timeout.as_secs(),
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }
}

/// Ring sizes of a device, from `ethtool -g`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rings {
    /// RX ring entries now.
    pub rx: u32,
    /// TX ring entries now.
    pub tx: u32,
    /// Largest RX ring.
    pub rx_max: u32,
    /// Largest TX ring.
    pub tx_max: u32,
}

/// What `ip -d -o link show` tells of an interface.
#[derive(Debug)]
struct LinkState {
    iface: String,
    mtu: u32,
    max_mtu: Option<u32>,
    up: bool,
    lower_up: bool,
    loopback: bool,
}

impl LinkState {
    /// Reads the state of `iface` in `ns` (`None`: this process's namespace).
    fn read(ns: Option<&Netns>, iface: &str) -> Result<LinkState, TestNetError> {
        let args = ["-d", "-o", "link", "show", "dev", iface];
        let out = match ns {
            Some(ns) => ns.ip(&args),
            None => run(&[&["ip"][..], &args[..]].concat()),
        };
        let out = match out {
            Err(TestNetError::Failed { stderr, .. }) if stderr.contains("does not exist") => {
                return Err(TestNetError::NoSuchIface {
                    iface: iface.to_owned(),
                });
            }
            r => r?,
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let flags = text
            .split_once('<')
            .and_then(|(_, r)| r.split_once('>'))
            .map_or("", |(f, _)| f);
        let has = |f: &str| flags.split(',').any(|x| x == f);
        let number_after = |key: &str| {
            let w: Vec<&str> = text.split_whitespace().collect();
            w.windows(2)
                .find(|p| p[0] == key)
                .and_then(|p| p[1].parse::<u32>().ok())
        };
        Ok(LinkState {
            iface: iface.to_owned(),
            mtu: number_after("mtu").ok_or_else(|| TestNetError::Failed {
                cmd: format!("ip -d -o link show dev {iface}"),
                stderr: format!("no MTU in its output: {text}"),
            })?,
            max_mtu: number_after("maxmtu"),
            up: has("UP"),
            lower_up: has("LOWER_UP"),
            loopback: has("LOOPBACK"),
        })
    }
}

/// True if `key` is followed by `value` among the words of `out`.
fn words_follow(out: &[u8], key: &str, value: &str) -> bool {
    let text = String::from_utf8_lossy(out);
    let w: Vec<&str> = text.split_whitespace().collect();
    w.windows(2).any(|p| p[0] == key && p[1] == value)
}

/// The offloads [`TestNetConfig::offloads`] switches, as `ethtool -K`
/// names with their present values, read in this process's namespace.
fn offloads_of(iface: &str) -> Result<Vec<(&'static str, String)>, TestNetError> {
    offloads_in(None, iface)
}

/// The same, read in `ns` (`None`: this process's namespace).
fn offloads_in(
    ns: Option<&Netns>,
    iface: &str,
) -> Result<Vec<(&'static str, String)>, TestNetError> {
    let out = match ns {
        Some(ns) => ns.exec(&["ethtool", "-k", iface])?,
        None => run(&["ethtool", "-k", iface])?,
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = Vec::new();
    for (long, short) in [
        ("tx-checksumming", "tx"),
        ("tcp-segmentation-offload", "tso"),
        ("generic-segmentation-offload", "gso"),
        ("generic-receive-offload", "gro"),
    ] {
        let value = text.lines().find_map(|l| {
            l.strip_prefix(long)
                .and_then(|r| r.strip_prefix(':'))
                .and_then(|r| r.split_whitespace().next())
        });
        if let Some(value) = value {
            v.push((short, value.to_owned()));
        }
    }
    Ok(v)
}

/// `ethtool -g` of `iface` in `ns`; `None` if the device has no ring
/// parameters.
fn rings_of(ns: &str, iface: &str) -> Result<Option<Rings>, TestNetError> {
    let out = match run(&["ip", "netns", "exec", ns, "ethtool", "-g", iface]) {
        Err(TestNetError::Failed { stderr, .. }) if stderr.contains("not supported") => {
            return Ok(None);
        }
        r => r?,
    };
    let text = String::from_utf8_lossy(&out.stdout);
    parse_rings(&text)
        .map(Some)
        .ok_or_else(|| TestNetError::Failed {
            cmd: format!("ethtool -g {iface}"),
            stderr: format!("cannot read its RX/TX ring sizes from: {text}"),
        })
}

/// The RX/TX lines of `ethtool -g`: "Pre-set maximums:" then "Current
/// hardware settings:".
fn parse_rings(text: &str) -> Option<Rings> {
    let (max, now) = text.split_once("Current hardware settings:")?;
    let field = |part: &str, key: &str| {
        part.lines().find_map(|l| {
            l.trim()
                .strip_prefix(key)
                .and_then(|r| r.trim().parse::<u32>().ok())
        })
    };
    Some(Rings {
        rx: field(now, "RX:")?,
        tx: field(now, "TX:")?,
        rx_max: field(max, "RX:")?,
        tx_max: field(max, "TX:")?,
    })
}

/// An interface taken over by [`TestNet::adopt`], and what to put back.
#[derive(Debug)]
struct AdoptedLink {
    iface: String,
    /// The namespace it is in now.
    ns: String,
    mtu: u32,
    was_up: bool,
    /// `ethtool -K` names and values of the offloads.
    features: Vec<(&'static str, String)>,
    /// (rx, tx) ring sizes before [`TestNet::set_ring`] first changed them.
    rings: Option<(u32, u32)>,
}

/// The interfaces of an adopted [`TestNet`]; hands them back on drop.
#[derive(Debug)]
struct Adopted {
    /// They go back into the namespace of this process.
    home_pid: u32,
    links: Vec<AdoptedLink>,
}

impl Drop for Adopted {
    fn drop(&mut self) {
        let home = self.home_pid.to_string();
        for l in &self.links {
            let mut failed = Vec::new();
            let in_ns = |args: &[&str]| {
                let mut v = vec!["ip", "netns", "exec", &l.ns];
                v.extend_from_slice(args);
                run(&v)
            };
            if let Some((rx, tx)) = l.rings {
                let current = rings_of(&l.ns, &l.iface);
                if !matches!(current, Ok(Some(r)) if (r.rx, r.tx) == (rx, tx)) {
                    let (rx, tx) = (rx.to_string(), tx.to_string());
                    failed.extend(in_ns(&["ethtool", "-G", &l.iface, "rx", &rx, "tx", &tx]).err());
                }
            }
            if !l.features.is_empty() {
                let mut v = vec!["ethtool", "-K", &l.iface];
                for (name, value) in &l.features {
                    v.push(name);
                    v.push(value);
                }
                failed.extend(in_ns(&v).err());
            }
            let mtu = l.mtu.to_string();
            failed.extend(
                run(&[
                    "ip", "-n", &l.ns, "link", "set", "dev", &l.iface, "mtu", &mtu,
                ])
                .err(),
            );
            match run(&[
                "ip", "-n", &l.ns, "link", "set", "dev", &l.iface, "netns", &home,
            ]) {
                Ok(_) if l.was_up => {
                    failed.extend(run(&["ip", "link", "set", "dev", &l.iface, "up"]).err());
                }
                Ok(_) => {}
                Err(e) => eprintln!(
                    "xtcp: cannot move {} back from namespace {}: {e} (deleting the namespace \
                     returns a physical NIC to the initial namespace and destroys a veth end)",
                    l.iface, l.ns
                ),
            }
            for e in failed {
                eprintln!("xtcp: putting {} back as it was: {e}", l.iface);
            }
        }
    }
}

/// Configures both ends (MTU, offloads, addresses, up, static neighbours)
/// and builds the [`TestNet`]; on error the namespaces are deleted and
/// adopted interfaces returned (`adopted` drops before `a_ns` and `b_ns`).
fn wire(
    a_ns: Netns,
    a_if: String,
    b_ns: Netns,
    b_if: String,
    config: TestNetConfig,
    adopted: Option<Adopted>,
) -> Result<TestNet, TestNetError> {
    // Parameters drop in reverse order: `adopted` before the namespaces.
    let mtu = config.mtu.to_string();
    let onoff = if config.offloads { "on" } else { "off" };
    let ip4 = |i: u8| Ipv4Addr::new(198, 18, 0, i);
    let ip6 = |i: u16| Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, i);
    for (ns, iface, i) in [(&a_ns, &a_if, 1u8), (&b_ns, &b_if, 2u8)] {
        ns.ip(&["link", "set", iface, "mtu", &mtu])?;
        ns.exec(&[
            "ethtool", "-K", iface, "tso", onoff, "gso", onoff, "gro", onoff, "tx", onoff,
        ])?;
        ns.ip(&["addr", "add", &format!("{}/24", ip4(i)), "dev", iface])?;
        ns.ip(&[
            "addr",
            "add",
            &format!("{}/64", ip6(u16::from(i))),
            "dev",
            iface,
            "nodad",
        ])?;
        ns.ip(&["link", "set", iface, "up"])?;
    }
    let a_mac = mac_of(&a_ns, &a_if)?;
    let b_mac = mac_of(&b_ns, &b_if)?;
    // Static neighbours: no ARP/ND round trip needed by raw senders.
    let fmt_mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    for (ns, iface, peer4, peer6, peer_mac) in [
        (&a_ns, &a_if, ip4(2), ip6(2), b_mac),
        (&b_ns, &b_if, ip4(1), ip6(1), a_mac),
    ] {
        for peer in [peer4.to_string(), peer6.to_string()] {
            ns.ip(&[
                "neigh",
                "replace",
                &peer,
                "lladdr",
                &fmt_mac(peer_mac),
                "dev",
                iface,
            ])?;
        }
    }
    Ok(TestNet {
        adopted,
        a: Side {
            ns: a_ns,
            iface: a_if,
            ip4: ip4(1),
            ip6: ip6(1),
            mac: a_mac,
        },
        b: Side {
            ns: b_ns,
            iface: b_if,
            ip4: ip4(2),
            ip6: ip6(2),
            mac: b_mac,
        },
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_from_ethtool_g() {
        let out = "Ring parameters for eth1:\n\
                   Pre-set maximums:\n\
                   RX:\t\t\t8192\n\
                   RX Mini:\t\tn/a\n\
                   RX Jumbo:\t\tn/a\n\
                   TX:\t\t\t4096\n\
                   Current hardware settings:\n\
                   RX:\t\t\t1024\n\
                   RX Mini:\t\tn/a\n\
                   RX Jumbo:\t\tn/a\n\
                   TX:\t\t\t512\n\
                   RX Buf Len:\t\tn/a\n\
                   TX Push:\t\toff\n";
        assert_eq!(
            parse_rings(out),
            Some(Rings {
                rx: 1024,
                tx: 512,
                rx_max: 8192,
                tx_max: 4096
            })
        );
        assert_eq!(
            parse_rings("Ring parameters for eth1:\nPre-set maximums:\n"),
            None
        );
    }

    #[test]
    fn default_route_device_is_found_among_the_words() {
        let routes = b"default via 192.0.2.1 dev eth0 proto dhcp metric 100\n";
        assert!(words_follow(routes, "dev", "eth0"));
        assert!(!words_follow(routes, "dev", "eth"));
    }
}
