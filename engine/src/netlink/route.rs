//! rtnetlink `RTM_GETLINK` for one interface, by index or by name; and
//! for one link's `tx_dropped` counter, in this namespace or, by the id
//! this one gives it, in another (a veth's peer).
//!
//! The reply (`RTM_NEWLINK`: `struct ifinfomsg` + `IFLA_*` attributes) is
//! parsed into [`LinkInfo`]. Attributes that are absent (older kernels) are
//! `None`; unknown attributes are ignored; a malformed message is an error.

use super::NetlinkError;
use super::attr::{AttrWriter, Attrs, ParseError};
use super::socket::NetlinkSocket;

/// `RTM_NEWLINK`.
pub const RTM_NEWLINK: u16 = 16;
/// `RTM_GETLINK`.
pub const RTM_GETLINK: u16 = 18;

/// Size of `struct ifinfomsg`.
pub const IFINFOMSG_LEN: usize = 16;

const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINK: u16 = 5;
const IFLA_TXQLEN: u16 = 13;
const IFLA_OPERSTATE: u16 = 16;
const IFLA_LINKINFO: u16 = 18;
const IFLA_STATS64: u16 = 23;
const IFLA_EXT_MASK: u16 = 29;
const IFLA_NUM_TX_QUEUES: u16 = 31;
const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_XDP: u16 = 43;
const IFLA_TARGET_NETNSID: u16 = 46;
const IFLA_MIN_MTU: u16 = 50;
const IFLA_MAX_MTU: u16 = 51;
const IFLA_ALT_IFNAME: u16 = 53;

const IFLA_INFO_KIND: u16 = 1;

const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;

/// `RTEXT_FILTER_SKIP_STATS`: leave the (large) statistics out of the reply.
const RTEXT_FILTER_SKIP_STATS: u32 = 1 << 3;
/// `IFF_UP`.
const IFF_UP: u32 = 1;
/// `IFF_LOOPBACK`.
const IFF_LOOPBACK: u32 = 8;
/// `IFF_LOWER_UP`: the driver has a carrier (read when the kernel answers,
/// where the operational state follows it a moment later).
const IFF_LOWER_UP: u32 = 0x1_0000;
/// Names longer than this go in `IFLA_ALT_IFNAME` (IFNAMSIZ - 1).
const MAX_IFNAME_LEN: usize = 15;

/// Which interface to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkSelector<'a> {
    /// By interface index.
    Index(u32),
    /// By name or alternative name.
    Name(&'a str),
}

/// How an XDP program is attached to a link (`IFLA_XDP_ATTACHED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XdpAttachMode {
    /// No program (`XDP_ATTACHED_NONE`).
    None,
    /// Native, in the driver (`XDP_ATTACHED_DRV`).
    Driver,
    /// Generic, in the stack (`XDP_ATTACHED_SKB`).
    Generic,
    /// Offloaded to the NIC (`XDP_ATTACHED_HW`).
    Offload,
    /// More than one mode at once (`XDP_ATTACHED_MULTI`).
    Multi,
    /// A value this code does not know.
    Other(u8),
}

impl XdpAttachMode {
    fn from_raw(v: u8) -> Self {
        match v {
            0 => Self::None,
            1 => Self::Driver,
            2 => Self::Generic,
            3 => Self::Offload,
            4 => Self::Multi,
            v => Self::Other(v),
        }
    }
}

/// The `IFLA_XDP` nest: what is attached now, and the program ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct XdpAttachment {
    /// How it is attached.
    pub mode: XdpAttachMode,
    /// The program id when exactly one program is attached.
    pub prog_id: Option<u32>,
    /// The driver-mode program, if any.
    pub driver_prog_id: Option<u32>,
    /// The generic-mode program, if any.
    pub generic_prog_id: Option<u32>,
    /// The offloaded program, if any.
    pub offload_prog_id: Option<u32>,
}

impl Default for XdpAttachment {
    fn default() -> Self {
        XdpAttachment {
            mode: XdpAttachMode::None,
            prog_id: None,
            driver_prog_id: None,
            generic_prog_id: None,
            offload_prog_id: None,
        }
    }
}

/// What rtnetlink says about one link.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinkInfo {
    /// Interface index.
    pub ifindex: u32,
    /// Interface name (`IFLA_IFNAME`).
    pub name: String,
    /// `IFF_*` flags.
    pub flags: u32,
    /// Link kind for virtual devices (`IFLA_INFO_KIND`: "veth", "bridge", …).
    pub kind: Option<String>,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// Smallest MTU the device accepts (kernel ≥ 4.18).
    pub min_mtu: Option<u32>,
    /// Largest MTU the device accepts (kernel ≥ 4.18).
    pub max_mtu: Option<u32>,
    /// Allocated TX queues (`IFLA_NUM_TX_QUEUES`).
    pub num_tx_queues: Option<u32>,
    /// Allocated RX queues (`IFLA_NUM_RX_QUEUES`).
    pub num_rx_queues: Option<u32>,
    /// Transmit queue length in packets.
    pub txqlen: Option<u32>,
    /// RFC 2863 operational state (`IFLA_OPERSTATE`).
    pub operstate: Option<u8>,
    /// The `IFLA_XDP` nest (default: nothing attached, when absent).
    pub xdp: XdpAttachment,
    /// The link this one is tied to (`IFLA_LINK`): a veth's peer, a VLAN's
    /// parent; its index in the namespace `link_netnsid` names.
    pub link: Option<u32>,
    /// The namespace of `link`, as this namespace numbers it
    /// (`IFLA_LINK_NETNSID`); absent when it is this one.
    pub link_netnsid: Option<i32>,
}

impl LinkInfo {
    /// Whether the link is administratively up (`IFF_UP`).
    pub fn is_up(&self) -> bool {
        self.flags & IFF_UP != 0
    }

    /// Whether the link has a carrier (`IFF_LOWER_UP`).
    pub fn has_carrier(&self) -> bool {
        self.flags & IFF_LOWER_UP != 0
    }

    /// Whether the link is a loopback device (`IFF_LOOPBACK`).
    pub fn is_loopback(&self) -> bool {
        self.flags & IFF_LOOPBACK != 0
    }

    /// The operational state's name as `ip link` prints it (lower case).
    pub fn operstate_name(&self) -> Option<&'static str> {
        self.operstate.map(|s| match s {
            0 => "unknown",
            1 => "notpresent",
            2 => "down",
            3 => "lowerlayerdown",
            4 => "testing",
            5 => "dormant",
            6 => "up",
            _ => "invalid",
        })
    }
}

/// The body (`struct ifinfomsg` + attributes) of an `RTM_GETLINK` request.
pub fn get_link_body(selector: LinkSelector<'_>) -> Vec<u8> {
    let mut body = vec![0u8; IFINFOMSG_LEN]; // family AF_UNSPEC, index 0
    match selector {
        LinkSelector::Index(index) => {
            body[4..8].copy_from_slice(&index.to_ne_bytes());
        }
        LinkSelector::Name(name) if name.len() <= MAX_IFNAME_LEN => {
            body.put_str(IFLA_IFNAME, name);
        }
        LinkSelector::Name(name) => body.put_str(IFLA_ALT_IFNAME, name),
    }
    body.put_u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
    body
}

/// Parses the payload of an `RTM_NEWLINK` message.
pub fn parse_link(payload: &[u8]) -> Result<LinkInfo, ParseError> {
    let Some((ifi, attrs)) = payload.split_first_chunk::<IFINFOMSG_LEN>() else {
        return Err(ParseError::Truncated {
            what: "struct ifinfomsg",
            need: IFINFOMSG_LEN,
            have: payload.len(),
        });
    };
    let mut link = LinkInfo {
        ifindex: u32::from_ne_bytes([ifi[4], ifi[5], ifi[6], ifi[7]]),
        flags: u32::from_ne_bytes([ifi[8], ifi[9], ifi[10], ifi[11]]),
        ..LinkInfo::default()
    };
    for a in Attrs::new(attrs) {
        let a = a?;
        match a.kind() {
            IFLA_IFNAME => link.name = a.string(),
            IFLA_MTU => link.mtu = Some(a.u32()?),
            IFLA_MIN_MTU => link.min_mtu = Some(a.u32()?),
            IFLA_MAX_MTU => link.max_mtu = Some(a.u32()?),
            IFLA_NUM_TX_QUEUES => link.num_tx_queues = Some(a.u32()?),
            IFLA_NUM_RX_QUEUES => link.num_rx_queues = Some(a.u32()?),
            IFLA_TXQLEN => link.txqlen = Some(a.u32()?),
            IFLA_OPERSTATE => link.operstate = Some(a.u8()?),
            IFLA_LINKINFO => {
                for i in a.nested() {
                    let i = i?;
                    if i.kind() == IFLA_INFO_KIND {
                        link.kind = Some(i.string());
                    }
                }
            }
            IFLA_XDP => link.xdp = parse_xdp(a.nested())?,
            IFLA_LINK => link.link = Some(a.u32()?),
            IFLA_LINK_NETNSID => link.link_netnsid = Some(a.u32()? as i32),
            _ => {}
        }
    }
    Ok(link)
}

/// `struct rtnl_link_stats64`: the byte offset of `tx_dropped` (the eighth
/// `__u64`, after rx/tx packets, bytes, errors and rx_dropped).
const STATS64_TX_DROPPED: usize = 7 * 8;

/// The body of an `RTM_GETLINK` request for link `index` of the namespace
/// this one numbers `netnsid` (`None`: this one), statistics included.
pub fn get_link_stats_body(index: u32, netnsid: Option<i32>) -> Vec<u8> {
    let mut body = vec![0u8; IFINFOMSG_LEN];
    body[4..8].copy_from_slice(&index.to_ne_bytes());
    if let Some(id) = netnsid {
        body.put_attr(IFLA_TARGET_NETNSID, &id.to_ne_bytes());
    }
    body
}

/// The `tx_dropped` of an `RTM_NEWLINK` payload's `IFLA_STATS64`.
pub fn parse_tx_dropped(payload: &[u8]) -> Result<u64, ParseError> {
    let attrs = payload.get(IFINFOMSG_LEN..).ok_or(ParseError::Truncated {
        what: "struct ifinfomsg",
        need: IFINFOMSG_LEN,
        have: payload.len(),
    })?;
    for a in Attrs::new(attrs) {
        let a = a?;
        if a.kind() == IFLA_STATS64 {
            let p = a.payload();
            let b =
                p.get(STATS64_TX_DROPPED..STATS64_TX_DROPPED + 8)
                    .ok_or(ParseError::Truncated {
                        what: "struct rtnl_link_stats64",
                        need: STATS64_TX_DROPPED + 8,
                        have: p.len(),
                    })?;
            let mut v = [0u8; 8];
            v.copy_from_slice(b);
            return Ok(u64::from_ne_bytes(v));
        }
    }
    Err(ParseError::Missing {
        what: "IFLA_STATS64",
    })
}

/// The `tx_dropped` counter of link `index` in the namespace `sock`'s
/// numbers `netnsid` (`None`: `sock`'s own), as `ip -s link` shows it. A
/// veth counts there the packets it could not hand to its peer (the queue
/// in front of the peer's XDP program full, the peer down, or a packet
/// larger than the peer's MTU).
pub fn get_tx_dropped(
    sock: &mut NetlinkSocket,
    index: u32,
    netnsid: Option<i32>,
) -> Result<u64, NetlinkError> {
    let reply = sock.request(RTM_GETLINK, 0, &get_link_stats_body(index, netnsid))?;
    if reply.kind != RTM_NEWLINK {
        return Err(NetlinkError::Unexpected { kind: reply.kind });
    }
    Ok(parse_tx_dropped(&reply.payload)?)
}

fn parse_xdp(attrs: Attrs<'_>) -> Result<XdpAttachment, ParseError> {
    let mut x = XdpAttachment::default();
    for a in attrs {
        let a = a?;
        match a.kind() {
            IFLA_XDP_ATTACHED => x.mode = XdpAttachMode::from_raw(a.u8()?),
            IFLA_XDP_PROG_ID => x.prog_id = Some(a.u32()?),
            IFLA_XDP_DRV_PROG_ID => x.driver_prog_id = Some(a.u32()?),
            IFLA_XDP_SKB_PROG_ID => x.generic_prog_id = Some(a.u32()?),
            IFLA_XDP_HW_PROG_ID => x.offload_prog_id = Some(a.u32()?),
            _ => {}
        }
    }
    Ok(x)
}

/// Asks the kernel (in `sock`'s network namespace) for one link.
///
/// An unknown name or index is [`NetlinkError::Kernel`] with `ENODEV`.
pub fn get_link(
    sock: &mut NetlinkSocket,
    selector: LinkSelector<'_>,
) -> Result<LinkInfo, NetlinkError> {
    let reply = sock.request(RTM_GETLINK, 0, &get_link_body(selector))?;
    if reply.kind != RTM_NEWLINK {
        return Err(NetlinkError::Unexpected { kind: reply.kind });
    }
    Ok(parse_link(&reply.payload)?)
}

#[cfg(test)]
mod tests {
    use super::super::msg;
    use super::*;

    /// An `RTM_NEWLINK` payload for a veth in the shape the kernel sends
    /// (attribute order and padding as on the wire), built byte by byte.
    pub(crate) fn golden_veth() -> Vec<u8> {
        let mut p = Vec::new();
        // struct ifinfomsg: AF_UNSPEC, pad, ARPHRD_ETHER=1, index 7, flags UP|BROADCAST|RUNNING|MULTICAST, change 0
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&1u16.to_ne_bytes());
        p.extend_from_slice(&7i32.to_ne_bytes());
        p.extend_from_slice(&0x1043u32.to_ne_bytes());
        p.extend_from_slice(&0u32.to_ne_bytes());
        p.put_str(IFLA_IFNAME, "xtpa123");
        p.put_u32(IFLA_TXQLEN, 1000);
        p.put_attr(IFLA_OPERSTATE, &[6]);
        p.put_u32(IFLA_MTU, 9000);
        p.put_u32(IFLA_MIN_MTU, 68);
        p.put_u32(IFLA_MAX_MTU, 65535);
        p.put_u32(IFLA_NUM_TX_QUEUES, 4);
        p.put_u32(IFLA_NUM_RX_QUEUES, 3);
        p.put_attr(999, &[1, 2, 3, 4, 5]); // unknown: ignored
        let mut linkinfo = Vec::new();
        linkinfo.put_str(IFLA_INFO_KIND, "veth");
        p.put_attr(IFLA_LINKINFO | super::super::attr::F_NESTED, &linkinfo);
        let mut xdp = Vec::new();
        xdp.put_attr(IFLA_XDP_ATTACHED, &[1]);
        xdp.put_u32(IFLA_XDP_PROG_ID, 42);
        xdp.put_u32(IFLA_XDP_DRV_PROG_ID, 42);
        p.put_attr(IFLA_XDP | super::super::attr::F_NESTED, &xdp);
        p
    }

    #[test]
    fn parses_golden_link() {
        let link = parse_link(&golden_veth()).unwrap();
        assert_eq!(
            link,
            LinkInfo {
                ifindex: 7,
                name: "xtpa123".into(),
                flags: 0x1043,
                kind: Some("veth".into()),
                mtu: Some(9000),
                min_mtu: Some(68),
                max_mtu: Some(65535),
                num_tx_queues: Some(4),
                num_rx_queues: Some(3),
                txqlen: Some(1000),
                operstate: Some(6),
                xdp: XdpAttachment {
                    mode: XdpAttachMode::Driver,
                    prog_id: Some(42),
                    driver_prog_id: Some(42),
                    generic_prog_id: None,
                    offload_prog_id: None,
                },
                link: None,
                link_netnsid: None,
            }
        );
        assert!(link.is_up());
        assert_eq!(link.operstate_name(), Some("up"));
    }

    #[test]
    fn a_veth_names_its_peer_and_the_peer_its_tx_drops() {
        // The peer's index and namespace (another one: id 3).
        let mut p = golden_veth();
        p.put_u32(IFLA_LINK, 9);
        p.put_attr(IFLA_LINK_NETNSID, &3i32.to_ne_bytes());
        let link = parse_link(&p).unwrap();
        assert_eq!((link.link, link.link_netnsid), (Some(9), Some(3)));
        // The request for the peer's statistics: its index, the namespace.
        let body = get_link_stats_body(9, Some(3));
        assert_eq!(&body[4..8], &9u32.to_ne_bytes());
        let a: Vec<_> = Attrs::new(&body[IFINFOMSG_LEN..])
            .map(Result::unwrap)
            .collect();
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].kind(), a[0].payload()),
            (IFLA_TARGET_NETNSID, &3i32.to_ne_bytes()[..])
        );
        assert_eq!(get_link_stats_body(9, None).len(), IFINFOMSG_LEN);
        // Its reply: tx_dropped is the eighth counter of IFLA_STATS64.
        let mut stats = vec![0u8; 24 * 8];
        for (i, c) in stats.chunks_exact_mut(8).enumerate() {
            c.copy_from_slice(&(i as u64 * 100).to_ne_bytes());
        }
        let mut r = golden_veth();
        r.put_attr(IFLA_STATS64, &stats);
        assert_eq!(parse_tx_dropped(&r), Ok(700));
        // Without the statistics, or with them cut short: an error.
        assert!(matches!(
            parse_tx_dropped(&golden_veth()),
            Err(ParseError::Missing { .. })
        ));
        let mut r = golden_veth();
        r.put_attr(IFLA_STATS64, &stats[..60]);
        assert!(matches!(
            parse_tx_dropped(&r),
            Err(ParseError::Truncated { .. })
        ));
    }

    #[test]
    fn old_kernel_without_optional_attributes() {
        let mut p = golden_veth();
        p.truncate(IFINFOMSG_LEN);
        p.put_str(IFLA_IFNAME, "eth0");
        p.put_u32(IFLA_MTU, 1500);
        let link = parse_link(&p).unwrap();
        assert_eq!(link.mtu, Some(1500));
        assert_eq!(
            (link.min_mtu, link.max_mtu, link.num_rx_queues),
            (None, None, None)
        );
        assert_eq!(link.xdp.mode, XdpAttachMode::None);
        assert_eq!(link.operstate_name(), None);
    }

    #[test]
    fn every_truncation_is_an_error_or_a_shorter_link_never_a_panic() {
        let full = golden_veth();
        for cut in 0..full.len() {
            if let Ok(link) = parse_link(&full[..cut]) {
                assert_ne!(link, parse_link(&full).unwrap(), "cut {cut}");
            }
        }
        assert!(parse_link(&full[..IFINFOMSG_LEN - 1]).is_err());
    }

    #[test]
    fn wrong_payload_size_is_an_error() {
        let mut p = golden_veth();
        p.truncate(IFINFOMSG_LEN);
        p.put_attr(IFLA_MTU, &[0xdc, 0x05]); // u16 where u32 is due
        assert_eq!(
            parse_link(&p),
            Err(ParseError::BadPayload {
                kind: IFLA_MTU,
                len: 2,
                expected: "u32"
            })
        );
    }

    #[test]
    fn corrupted_bytes_never_panic() {
        let full = golden_veth();
        for i in 0..full.len() {
            for v in [0u8, 1, 3, 0x7f, 0xff] {
                let mut p = full.clone();
                p[i] = v;
                let _ = parse_link(&p);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn mutated_golden_link_never_panics(
            edits in proptest::collection::vec((0usize..512, proptest::prelude::any::<u8>()), 1..8),
            cut in 0usize..512,
        ) {
            let mut p = golden_veth();
            for (i, v) in edits {
                let n = p.len();
                p[i % n] = v;
            }
            p.truncate(cut);
            let _ = parse_link(&p);
        }
    }

    #[test]
    fn request_body_by_name_index_and_altname() {
        let b = get_link_body(LinkSelector::Name("lo"));
        assert_eq!(&b[..IFINFOMSG_LEN], &[0; IFINFOMSG_LEN]);
        let attrs: Vec<_> = Attrs::new(&b[IFINFOMSG_LEN..])
            .map(Result::unwrap)
            .collect();
        assert_eq!(attrs[0].kind(), IFLA_IFNAME);
        assert_eq!(attrs[0].payload(), b"lo\0");
        assert_eq!(attrs[1].kind(), IFLA_EXT_MASK);
        assert_eq!(attrs[1].u32(), Ok(RTEXT_FILTER_SKIP_STATS));

        let b = get_link_body(LinkSelector::Index(9));
        assert_eq!(&b[4..8], &9u32.to_ne_bytes());
        assert_eq!(Attrs::new(&b[IFINFOMSG_LEN..]).count(), 1);

        let long = "enp0s31f6-longname";
        let b = get_link_body(LinkSelector::Name(long));
        let first = Attrs::new(&b[IFINFOMSG_LEN..]).next().unwrap().unwrap();
        assert_eq!(first.kind(), IFLA_ALT_IFNAME);
        assert_eq!(first.string(), long);
    }

    #[test]
    fn full_request_message_frames_correctly() {
        let m = msg::request(RTM_GETLINK, 0, 1, &get_link_body(LinkSelector::Index(1)));
        let parsed: Vec<_> = msg::Messages::new(&m).collect::<Result<_, _>>().unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].header.kind, RTM_GETLINK);
        assert_eq!(parsed[0].payload.len(), IFINFOMSG_LEN + 8);
    }
}
