//! `probe` against the real kernel: `lo`, a missing interface, and a veth
//! pair in a network namespace this test creates and enters with `setns`
//! from a thread (as xtcp's own test network will).
//!
//! The namespace tests need root and iproute2; without them they print why
//! and skip. They never touch an interface they did not create.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use xtcp_engine::netlink::route::{self, LinkSelector, XdpAttachMode};
use xtcp_engine::netlink::{NetlinkSocket, genl};
use xtcp_engine::probe::{
    NetdevFeatures, ProbeError, ProbeReport, QueueSource, Support, XdpMode, probe,
};

/// Whether the namespace tests can run; prints the reason when not.
fn can_make_netns(test: &str) -> bool {
    let root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    if !root {
        eprintln!("SKIP {test}: needs root to create network namespaces");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("SKIP {test}: needs iproute2 (`ip`) to create network namespaces");
        return false;
    }
    true
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace named `xtp<pid>n<k>`, deleted on drop (also when a
/// test panics). Deleting it destroys the interfaces inside.
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Netns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "xtp{}n{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name]);
        Netns { name }
    }

    /// `ip -n NS ARGS…`
    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// `ip netns exec NS ARGS…`
    fn exec(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// Runs `f` on a thread that has `setns`'d into this namespace.
    /// A panic inside `f` is re-raised here.
    fn run_inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let ns = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                xtcp_engine::sys::enter_netns(ns.as_fd()).expect("setns(CLONE_NEWNET)");
                f()
            });
            match h.join() {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A veth pair `xtpa<pid>` (4 RX / 2 TX queues, MTU 9000) and `xtpb<pid>`
/// (2 RX / 4 TX) inside a fresh namespace, both up.
fn veth_pair() -> (Netns, String, String) {
    let ns = Netns::new();
    let a = format!("xtpa{}", std::process::id());
    let b = format!("xtpb{}", std::process::id());
    ns.ip(&[
        "link",
        "add",
        &a,
        "numrxqueues",
        "4",
        "numtxqueues",
        "2",
        "type",
        "veth",
        "peer",
        "name",
        &b,
        "numrxqueues",
        "2",
        "numtxqueues",
        "4",
    ]);
    ns.ip(&["link", "set", &a, "mtu", "9000", "up"]);
    ns.ip(&["link", "set", &b, "up"]);
    (ns, a, b)
}

fn features(r: &ProbeReport) -> Vec<String> {
    match &r.xdp.netdev {
        NetdevFeatures::Reported { xdp_features, .. } => xdp_features.clone(),
        NetdevFeatures::Unknown { reason } => {
            panic!("netdev features unknown on this kernel: {reason}")
        }
    }
}

fn attach_support(r: &ProbeReport, mode: XdpMode) -> Support {
    r.xdp
        .attach_modes
        .iter()
        .find(|m| m.mode == mode)
        .expect("mode listed")
        .expected
}

/// (major, minor) of the running kernel.
fn kernel_version(r: &ProbeReport) -> (u32, u32) {
    let mut it = r
        .kernel
        .release
        .split(['.', '-'])
        .map(|p| p.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

#[test]
fn probe_loopback() {
    let r = probe("lo").expect("probe lo");
    assert_eq!(r.interface.name, "lo");
    assert_eq!(
        r.interface.ifindex, 1,
        "lo is always index 1 in its namespace"
    );
    assert!(r.interface.up);
    assert!(r.mtu.current >= 1280, "{:?}", r.mtu);
    // lo has no ethtool channels: counts come from rtnetlink.
    assert_eq!(r.queues.source, QueueSource::Rtnetlink);
    assert!(r.queues.rx >= 1 && r.queues.tx >= 1);
    assert_eq!(Some(r.queues.rx), r.queues.allocated_rx);
    assert_eq!(attach_support(&r, XdpMode::Generic), Support::Yes);
    assert_eq!(r.xdp.attached.mode, XdpAttachMode::None);
    assert_eq!(
        r.kernel.release,
        rustix::system::uname().release().to_string_lossy()
    );
    assert_eq!(r.hugepages.page_size_kib, 2048);
    if let (Some(t), Some(f)) = (r.hugepages.total, r.hugepages.free) {
        assert!(f <= t);
    }
    let names: Vec<_> = r.privileges.capabilities.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "CAP_NET_ADMIN",
            "CAP_NET_RAW",
            "CAP_IPC_LOCK",
            "CAP_SYS_ADMIN",
            "CAP_PERFMON",
            "CAP_BPF"
        ]
    );
    assert_eq!(r.privileges.euid, rustix::process::geteuid().as_raw());
    if kernel_version(&r) >= (6, 3) {
        // lo has no native XDP.
        assert!(
            !features(&r).contains(&"basic".to_owned()),
            "{:?}",
            features(&r)
        );
        assert_eq!(attach_support(&r, XdpMode::Native), Support::No);
    } else {
        eprintln!(
            "kernel {} predates the netdev family: checking the unknown path",
            r.kernel.release
        );
        assert!(matches!(r.xdp.netdev, NetdevFeatures::Unknown { .. }));
    }
}

#[test]
fn nonexistent_interface_is_a_clear_error() {
    let name = format!("xtpnone{}", std::process::id());
    let err = probe(&name).unwrap_err();
    assert!(
        matches!(&err, ProbeError::NoSuchInterface { iface } if *iface == name),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&name) && msg.contains("this network namespace") && msg.contains("ip link"),
        "{msg}"
    );

    // Names the kernel could never accept are rejected before asking it.
    let err = probe("a/b").unwrap_err();
    assert!(matches!(err, ProbeError::InvalidName { .. }), "{err:?}");
    // A long name goes out as IFLA_ALT_IFNAME and is still just "not found".
    let long = format!("xtp-long-alternative-name-{}", std::process::id());
    assert!(matches!(
        probe(&long),
        Err(ProbeError::NoSuchInterface { .. })
    ));
}

#[test]
fn veth_in_a_namespace_entered_with_setns() {
    if !can_make_netns("veth_in_a_namespace_entered_with_setns") {
        return;
    }
    let (ns, a, b) = veth_pair();

    // Not visible from the test's own namespace.
    assert!(matches!(probe(&a), Err(ProbeError::NoSuchInterface { .. })));

    let (ra, rb) = ns.run_inside(|| (probe(&a).expect("probe a"), probe(&b).expect("probe b")));

    assert_eq!(ra.interface.name, a);
    assert_eq!(ra.interface.driver.as_deref(), Some("veth"));
    assert_eq!(ra.interface.kind.as_deref(), Some("veth"));
    assert!(ra.interface.up);
    assert_eq!(
        (ra.mtu.current, ra.mtu.min, ra.mtu.max),
        (9000, Some(68), Some(65535))
    );
    assert_eq!(rb.mtu.current, 1500);

    // veth answers ETHTOOL_GCHANNELS with its real RX/TX queue counts.
    assert_eq!(ra.queues.source, QueueSource::Ethtool);
    assert_eq!((ra.queues.rx, ra.queues.tx), (4, 2));
    assert_eq!((rb.queues.rx, rb.queues.tx), (2, 4));
    assert_eq!(
        (ra.queues.allocated_rx, ra.queues.allocated_tx),
        (Some(4), Some(2))
    );
    let ch = ra.queues.channels.expect("veth reports channels");
    assert_eq!(
        (ch.rx, ch.tx, ch.combined, ch.max_rx, ch.max_tx),
        (4, 2, 0, 4, 2)
    );

    let f = features(&ra);
    for want in ["basic", "redirect", "rx-sg"] {
        assert!(f.iter().any(|x| x == want), "{want} missing from {f:?}");
    }
    // veth has no zero-copy AF_XDP, and (peer without GRO or XDP) cannot
    // be a redirect target.
    assert!(!f.iter().any(|x| x == "xsk-zerocopy"), "{f:?}");
    assert!(!f.iter().any(|x| x == "ndo-xmit"), "{f:?}");
    assert_eq!(ra.xdp.zero_copy, Support::No);
    assert_eq!(ra.xdp.multi_buffer, Support::Yes);
    assert_eq!(ra.xdp.zero_copy_multi_buffer, Support::No);
    assert_eq!(ra.xdp.zero_copy_tx_defect, None);
    assert_eq!(attach_support(&ra, XdpMode::Native), Support::Yes);
    assert_eq!(attach_support(&ra, XdpMode::Generic), Support::Yes);
    assert_eq!(attach_support(&ra, XdpMode::Offload), Support::No);
    assert_eq!(ra.xdp.attached.mode, XdpAttachMode::None);
    assert_eq!(ra.xdp.attached.prog_id, None);

    // GRO on the peer makes this end a redirect target: the report follows.
    ns.exec(&["ethtool", "-K", &b, "gro", "on"]);
    let ra = ns.run_inside(|| probe(&a).expect("probe a"));
    let f = features(&ra);
    for want in ["basic", "redirect", "ndo-xmit", "rx-sg", "ndo-xmit-sg"] {
        assert!(
            f.iter().any(|x| x == want),
            "{want} missing from {f:?} with peer GRO on"
        );
    }
    assert!(!f.iter().any(|x| x == "xsk-zerocopy"), "{f:?}");
}

#[test]
fn attached_xdp_program_is_reported() {
    if !can_make_netns("attached_xdp_program_is_reported") {
        return;
    }
    let (ns, a, b) = veth_pair();
    ns.run_inside(|| {
        let mut bpf = aya::Ebpf::load(xtcp_ebpf::STEER).expect("load steering object");
        let prog: &mut aya::programs::Xdp = bpf
            .program_mut(xtcp_ebpf::STEER_PROGRAM)
            .expect("steering program in object")
            .try_into()
            .expect("an XDP program");
        prog.load().expect("verifier accepts the steering program");
        prog.attach(&b, aya::programs::XdpMode::Driver)
            .expect("native attach on veth");

        let rb = probe(&b).expect("probe b");
        assert_eq!(
            rb.xdp.attached.mode,
            XdpAttachMode::Driver,
            "{:?}",
            rb.xdp.attached
        );
        let id = rb.xdp.attached.prog_id.expect("program id");
        assert_eq!(rb.xdp.attached.driver_prog_id, Some(id));
        assert_eq!(rb.xdp.attached.generic_prog_id, None);
        // A program on the peer also makes `a` a redirect target.
        let fa = features(&probe(&a).expect("probe a"));
        assert!(fa.iter().any(|x| x == "ndo-xmit"), "{fa:?}");

        drop(bpf); // closes the link: detached
        let rb = probe(&b).expect("probe b");
        assert_eq!(rb.xdp.attached.mode, XdpAttachMode::None);
    });
}

#[test]
fn netlink_client_against_the_kernel() {
    let mut rt = NetlinkSocket::route().expect("route socket");
    let by_name = route::get_link(&mut rt, LinkSelector::Name("lo")).expect("lo by name");
    let by_index =
        route::get_link(&mut rt, LinkSelector::Index(by_name.ifindex)).expect("lo by index");
    assert_eq!(by_name, by_index);
    assert_eq!(by_index.name, "lo");
    let missing = route::get_link(&mut rt, LinkSelector::Index(u32::MAX >> 1)).unwrap_err();
    assert_eq!(missing.errno(), Some(libc::ENODEV), "{missing:?}");

    // A family the kernel does not have resolves to None (the path an old
    // kernel without "netdev" takes), not to an error.
    let mut gs = NetlinkSocket::generic().expect("generic socket");
    let none = genl::resolve_family(&mut gs, "xtcp-nofamily").expect("lookup");
    assert_eq!(none, None);
    // A name longer than GENL_NAMSIZ fails policy validation; the kernel's
    // extended-ack text comes through in the error.
    let e = genl::resolve_family(&mut gs, "xtcp-name-longer-than-16").unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL), "{e:?}");
    match &e {
        xtcp_engine::netlink::NetlinkError::Kernel { message, .. } => {
            assert!(message.is_some(), "no extended ack text: {e:?}");
            assert!(e.to_string().contains(message.as_deref().unwrap()), "{e}");
        }
        other => panic!("expected a kernel error, got {other:?}"),
    }
    // The controller itself always exists.
    let ctrl = genl::resolve_family(&mut gs, "nlctrl")
        .expect("lookup")
        .expect("nlctrl exists");
    assert_eq!(ctrl.id, genl::GENL_ID_CTRL);
}
