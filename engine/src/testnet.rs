//! A test network: two network namespaces joined by a veth pair, with
//! addresses, MTU, queue count and offloads chosen by the caller. Used by
//! the integration tests and by `xtcp bench` / `xtcp xsk-bench --testnet`.
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

/// Two namespaces `a` and `b` joined by a veth pair.
#[derive(Debug)]
pub struct TestNet {
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
        // Several queues: the kernel side transmits on queue q from CPU q
        // (XPS). Its ACKs and SYN-ACKs are made in the softirq of the CPU
        // that delivered the segment — on veth, the sender's — so a worker
        // pinned to core q mostly gets its flows back on queue q, the way a
        // NIC's RSS keeps a flow on one queue.
        if config.queues > 1 {
            let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
            for q in 0..config.queues.min(64) {
                let file = format!("/sys/class/net/{b_if}/queues/tx-{q}/xps_cpus");
                let mask = 1u64 << (q as usize % ncpu.min(64));
                b_ns.exec(&["sh", "-c", &format!("echo {mask:x} > {file}")])?;
            }
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
        a_ns.ip(&[
            "neigh",
            "replace",
            &ip4(2).to_string(),
            "lladdr",
            &fmt_mac(b_mac),
            "dev",
            &a_if,
        ])?;
        b_ns.ip(&[
            "neigh",
            "replace",
            &ip4(1).to_string(),
            "lladdr",
            &fmt_mac(a_mac),
            "dev",
            &b_if,
        ])?;
        a_ns.ip(&[
            "neigh",
            "replace",
            &ip6(2).to_string(),
            "lladdr",
            &fmt_mac(b_mac),
            "dev",
            &a_if,
        ])?;
        b_ns.ip(&[
            "neigh",
            "replace",
            &ip6(1).to_string(),
            "lladdr",
            &fmt_mac(a_mac),
            "dev",
            &b_if,
        ])?;
        Ok(TestNet {
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
}
