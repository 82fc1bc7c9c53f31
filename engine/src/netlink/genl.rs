//! Generic netlink: family resolution (`nlctrl` `CTRL_CMD_GETFAMILY`) and the
//! `netdev` family's `dev-get`, which reports a device's XDP capabilities
//! (kernel ≥ 6.3; the metadata and xsk attributes came later).
//!
//! Layout of a generic netlink message after `struct nlmsghdr` (whose type is
//! the family id): `struct genlmsghdr { u8 cmd; u8 version; u16 reserved; }`
//! followed by attributes.

use super::NetlinkError;
use super::attr::{AttrWriter, Attrs, ParseError};
use super::socket::NetlinkSocket;

/// Size of `struct genlmsghdr`.
pub const GENL_HEADER_LEN: usize = 4;
/// `GENL_ID_CTRL`: the controller family's fixed id.
pub const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_VERSION: u16 = 3;

/// The netdev family's name.
pub const NETDEV_FAMILY_NAME: &str = "netdev";
/// The netdev family's version this code speaks.
pub const NETDEV_FAMILY_VERSION: u8 = 1;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NETDEV_A_DEV_XDP_ZC_MAX_SEGS: u16 = 4;
const NETDEV_A_DEV_XDP_RX_METADATA_FEATURES: u16 = 5;
const NETDEV_A_DEV_XSK_FEATURES: u16 = 6;

/// A resolved generic netlink family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// Its dynamic id: the `nlmsg_type` of its messages.
    pub id: u16,
    /// The version the kernel implements.
    pub version: u32,
}

/// Names for a flag set's bits, in bit order.
type NameTable = &'static [(u64, &'static str)];

const XDP_ACT_NAMES: NameTable = &[
    (1 << 0, "basic"),
    (1 << 1, "redirect"),
    (1 << 2, "ndo-xmit"),
    (1 << 3, "xsk-zerocopy"),
    (1 << 4, "hw-offload"),
    (1 << 5, "rx-sg"),
    (1 << 6, "ndo-xmit-sg"),
];
const XDP_RX_METADATA_NAMES: NameTable = &[
    (1 << 0, "timestamp"),
    (1 << 1, "hash"),
    (1 << 2, "vlan-tag"),
];
const XSK_FEATURE_NAMES: NameTable = &[
    (1 << 0, "tx-timestamp"),
    (1 << 1, "tx-checksum"),
    (1 << 2, "tx-launch-time-fifo"),
];

/// Names for the set bits of `bits` from `table`; bits the table does not
/// know (newer kernels) come out as `bit-N` so nothing is hidden.
fn decode(bits: u64, table: NameTable) -> Vec<String> {
    (0..64)
        .map(|n| 1u64 << n)
        .filter(|b| bits & b != 0)
        .map(|b| match table.iter().find(|(v, _)| *v == b) {
            Some((_, name)) => (*name).to_owned(),
            None => format!("bit-{}", b.trailing_zeros()),
        })
        .collect()
}

/// `netdev-xdp-act`: what a device's XDP implementation can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XdpFeatures(pub u64);

impl XdpFeatures {
    /// XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX: native XDP works.
    pub const BASIC: u64 = 1 << 0;
    /// XDP_REDIRECT (to AF_XDP sockets, other devices, CPUs).
    pub const REDIRECT: u64 = 1 << 1;
    /// The device can be a redirect target (`ndo_xdp_xmit`).
    pub const NDO_XMIT: u64 = 1 << 2;
    /// AF_XDP zero-copy.
    pub const XSK_ZEROCOPY: u64 = 1 << 3;
    /// Program offload to the NIC.
    pub const HW_OFFLOAD: u64 = 1 << 4;
    /// Multi-buffer (fragmented) frames on receive.
    pub const RX_SG: u64 = 1 << 5;
    /// Multi-buffer frames as a redirect target.
    pub const NDO_XMIT_SG: u64 = 1 << 6;

    /// Whether every bit of `mask` is set.
    pub fn contains(self, mask: u64) -> bool {
        self.0 & mask == mask
    }

    /// Names of the set bits ("basic", "redirect", "ndo-xmit",
    /// "xsk-zerocopy", "hw-offload", "rx-sg", "ndo-xmit-sg", or "bit-N").
    pub fn names(self) -> Vec<String> {
        decode(self.0, XDP_ACT_NAMES)
    }
}

/// `xdp-rx-metadata`: metadata kfuncs an XDP program can call on receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XdpRxMetadata(pub u64);

impl XdpRxMetadata {
    /// Names of the set bits ("timestamp", "hash", "vlan-tag", or "bit-N").
    pub fn names(self) -> Vec<String> {
        decode(self.0, XDP_RX_METADATA_NAMES)
    }
}

/// `xsk-flags`: AF_XDP TX metadata features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XskFeatures(pub u64);

impl XskFeatures {
    /// Names of the set bits ("tx-timestamp", "tx-checksum",
    /// "tx-launch-time-fifo", or "bit-N").
    pub fn names(self) -> Vec<String> {
        decode(self.0, XSK_FEATURE_NAMES)
    }
}

/// The netdev family's answer to `dev-get` for one device. Fields absent
/// from the reply (older kernels) are `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NetdevDev {
    /// Interface index.
    pub ifindex: u32,
    /// `xdp-features`.
    pub xdp_features: Option<XdpFeatures>,
    /// `xdp-zc-max-segs`: the most descriptors a zero-copy multi-buffer frame may use.
    pub xdp_zc_max_segs: Option<u32>,
    /// `xdp-rx-metadata-features`.
    pub xdp_rx_metadata: Option<XdpRxMetadata>,
    /// `xsk-features`.
    pub xsk_features: Option<XskFeatures>,
}

fn genl_body(cmd: u8, version: u8) -> Vec<u8> {
    vec![cmd, version, 0, 0]
}

fn split_genl(payload: &[u8]) -> Result<(u8, &[u8]), ParseError> {
    match payload.split_first_chunk::<GENL_HEADER_LEN>() {
        Some((h, rest)) => Ok((h[0], rest)),
        None => Err(ParseError::Truncated {
            what: "struct genlmsghdr",
            need: GENL_HEADER_LEN,
            have: payload.len(),
        }),
    }
}

/// The body of a `CTRL_CMD_GETFAMILY` request for `name`.
pub fn get_family_body(name: &str) -> Vec<u8> {
    let mut b = genl_body(CTRL_CMD_GETFAMILY, 1);
    b.put_str(CTRL_ATTR_FAMILY_NAME, name);
    b
}

/// Parses a `CTRL_CMD_NEWFAMILY` reply payload.
pub fn parse_family(payload: &[u8]) -> Result<Family, ParseError> {
    let (_, attrs) = split_genl(payload)?;
    let mut id = None;
    let mut version = 0;
    for a in Attrs::new(attrs) {
        let a = a?;
        match a.kind() {
            CTRL_ATTR_FAMILY_ID => id = Some(a.u16()?),
            CTRL_ATTR_VERSION => version = a.u32()?,
            _ => {}
        }
    }
    let id = id.ok_or(ParseError::Truncated {
        what: "family reply without CTRL_ATTR_FAMILY_ID",
        need: 1,
        have: 0,
    })?;
    Ok(Family { id, version })
}

/// Resolves a family by name. `Ok(None)` when the kernel does not have it
/// (`ENOENT`: too old, or the feature is compiled out).
pub fn resolve_family(
    sock: &mut NetlinkSocket,
    name: &str,
) -> Result<Option<Family>, NetlinkError> {
    match sock.request(GENL_ID_CTRL, 0, &get_family_body(name)) {
        Ok(reply) => Ok(Some(parse_family(&reply.payload)?)),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The body of a netdev `dev-get` request for `ifindex`.
pub fn dev_get_body(ifindex: u32) -> Vec<u8> {
    let mut b = genl_body(NETDEV_CMD_DEV_GET, NETDEV_FAMILY_VERSION);
    b.put_u32(NETDEV_A_DEV_IFINDEX, ifindex);
    b
}

/// Parses a netdev `dev-get` reply payload.
pub fn parse_dev(payload: &[u8]) -> Result<NetdevDev, ParseError> {
    let (_, attrs) = split_genl(payload)?;
    let mut dev = NetdevDev::default();
    for a in Attrs::new(attrs) {
        let a = a?;
        match a.kind() {
            NETDEV_A_DEV_IFINDEX => dev.ifindex = a.u32()?,
            NETDEV_A_DEV_XDP_FEATURES => dev.xdp_features = Some(XdpFeatures(a.uint()?)),
            NETDEV_A_DEV_XDP_ZC_MAX_SEGS => dev.xdp_zc_max_segs = Some(a.u32()?),
            NETDEV_A_DEV_XDP_RX_METADATA_FEATURES => {
                dev.xdp_rx_metadata = Some(XdpRxMetadata(a.uint()?));
            }
            NETDEV_A_DEV_XSK_FEATURES => dev.xsk_features = Some(XskFeatures(a.uint()?)),
            _ => {}
        }
    }
    Ok(dev)
}

/// netdev `dev-get` for `ifindex` in the socket's network namespace.
pub fn netdev_dev_get(
    sock: &mut NetlinkSocket,
    family: Family,
    ifindex: u32,
) -> Result<NetdevDev, NetlinkError> {
    let reply = sock.request(family.id, 0, &dev_get_body(ifindex))?;
    if reply.kind != family.id {
        return Err(NetlinkError::Unexpected { kind: reply.kind });
    }
    Ok(parse_dev(&reply.payload)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A netdev `dev-get` reply captured from Linux 6.18 for a veth whose
    /// peer has neither an XDP program nor GRO: genl header (cmd 1,
    /// version 1), ifindex 3, u64 xdp-features basic|redirect|rx-sg (0x23),
    /// no zc-max-segs (only zero-copy devices report it), u64 rx-metadata
    /// timestamp|hash|vlan-tag, u64 xsk-features 0.
    const GOLDEN_VETH: &[u8] = &[
        0x01, 0x01, 0x00, 0x00, // genlmsghdr
        0x08, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, // ifindex 3
        0x0c, 0x00, 0x03, 0x00, 0x23, 0, 0, 0, 0, 0, 0, 0, // xdp-features
        0x0c, 0x00, 0x05, 0x00, 0x07, 0, 0, 0, 0, 0, 0, 0, // xdp-rx-metadata-features
        0x0c, 0x00, 0x06, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, // xsk-features
    ];

    #[test]
    #[cfg(target_endian = "little")]
    fn parses_golden_netdev_reply() {
        let dev = parse_dev(GOLDEN_VETH).unwrap();
        assert_eq!(dev.ifindex, 3);
        let f = dev.xdp_features.unwrap();
        assert_eq!(f.names(), ["basic", "redirect", "rx-sg"]);
        assert!(f.contains(XdpFeatures::BASIC | XdpFeatures::RX_SG));
        assert!(!f.contains(XdpFeatures::XSK_ZEROCOPY));
        assert!(!f.contains(XdpFeatures::NDO_XMIT));
        assert_eq!(dev.xdp_zc_max_segs, None);
        assert_eq!(
            dev.xdp_rx_metadata.unwrap().names(),
            ["timestamp", "hash", "vlan-tag"]
        );
        assert_eq!(dev.xsk_features.unwrap().names(), Vec::<String>::new());
    }

    #[test]
    fn zero_copy_device_with_pad_attributes() {
        // Architectures without efficient unaligned access put a pad
        // attribute (type 2) before each u64; zero-copy devices add zc-max-segs.
        let mut p = genl_body(NETDEV_CMD_DEV_GET, 1);
        p.put_u32(NETDEV_A_DEV_IFINDEX, 4);
        p.put_attr(2, &[]);
        p.put_attr(NETDEV_A_DEV_XDP_FEATURES, &0x2bu64.to_ne_bytes());
        p.put_u32(NETDEV_A_DEV_XDP_ZC_MAX_SEGS, 1);
        let dev = parse_dev(&p).unwrap();
        assert_eq!(
            dev.xdp_features.unwrap().names(),
            ["basic", "redirect", "xsk-zerocopy", "rx-sg"]
        );
        assert_eq!(dev.xdp_zc_max_segs, Some(1));
        assert_eq!(dev.xdp_rx_metadata, None);
    }

    #[test]
    fn first_kernel_reply_has_only_features() {
        // 6.3: ifindex and xdp-features only.
        let mut p = genl_body(NETDEV_CMD_DEV_GET, 1);
        p.put_u32(NETDEV_A_DEV_IFINDEX, 2);
        p.put_attr(NETDEV_A_DEV_XDP_FEATURES, &(0x0bu64).to_ne_bytes());
        let dev = parse_dev(&p).unwrap();
        assert_eq!(dev.xdp_features, Some(XdpFeatures(0x0b)));
        assert_eq!(dev.xdp_zc_max_segs, None);
        assert_eq!(dev.xsk_features, None);
    }

    #[test]
    fn truncated_and_corrupted_replies_never_panic() {
        // Attribute boundaries: a cut there is a shorter valid reply,
        // anywhere else an error.
        let boundaries = [4, 12, 24, 36];
        for cut in 0..GOLDEN_VETH.len() {
            let r = parse_dev(&GOLDEN_VETH[..cut]);
            assert_eq!(r.is_ok(), boundaries.contains(&cut), "cut {cut}: {r:?}");
        }
        // Cut inside the xdp-features attribute: an error, not a partial value.
        assert!(parse_dev(&GOLDEN_VETH[..18]).is_err());
        for i in 0..GOLDEN_VETH.len() {
            for v in [0u8, 2, 5, 0xff] {
                let mut p = GOLDEN_VETH.to_vec();
                p[i] = v;
                let _ = parse_dev(&p);
            }
        }
    }

    #[test]
    fn feature_decoding_covers_every_bit() {
        assert_eq!(
            XdpFeatures(0x7f).names(),
            [
                "basic",
                "redirect",
                "ndo-xmit",
                "xsk-zerocopy",
                "hw-offload",
                "rx-sg",
                "ndo-xmit-sg"
            ]
        );
        assert_eq!(XdpFeatures(0).names(), Vec::<String>::new());
        assert_eq!(XdpFeatures(1 << 9 | 1).names(), ["basic", "bit-9"]);
        assert_eq!(XdpFeatures(1 << 63).names(), ["bit-63"]);
        assert_eq!(
            XskFeatures(0b111).names(),
            ["tx-timestamp", "tx-checksum", "tx-launch-time-fifo"]
        );
        assert_eq!(XdpRxMetadata(0b1000).names(), ["bit-3"]);
    }

    #[test]
    fn family_request_and_reply() {
        let b = get_family_body("netdev");
        assert_eq!(&b[..4], &[CTRL_CMD_GETFAMILY, 1, 0, 0]);
        let a = Attrs::new(&b[4..]).next().unwrap().unwrap();
        assert_eq!(
            (a.kind(), a.payload()),
            (CTRL_ATTR_FAMILY_NAME, &b"netdev\0"[..])
        );

        let mut reply = genl_body(1, 2); // CTRL_CMD_NEWFAMILY
        reply.put_attr(CTRL_ATTR_FAMILY_ID, &0x1du16.to_ne_bytes());
        reply.put_str(CTRL_ATTR_FAMILY_NAME, "netdev");
        reply.put_u32(CTRL_ATTR_VERSION, 1);
        assert_eq!(
            parse_family(&reply),
            Ok(Family {
                id: 0x1d,
                version: 1
            })
        );

        let mut no_id = genl_body(1, 2);
        no_id.put_u32(CTRL_ATTR_VERSION, 1);
        assert!(parse_family(&no_id).is_err());
        assert!(parse_family(&reply[..3]).is_err());
    }

    #[test]
    fn dev_get_request_body() {
        let b = dev_get_body(5);
        assert_eq!(&b[..4], &[NETDEV_CMD_DEV_GET, NETDEV_FAMILY_VERSION, 0, 0]);
        let a = Attrs::new(&b[4..]).next().unwrap().unwrap();
        assert_eq!((a.kind(), a.u32()), (NETDEV_A_DEV_IFINDEX, Ok(5)));
    }

    proptest::proptest! {
        #[test]
        fn mutated_golden_dev_reply_never_panics(
            edits in proptest::collection::vec((0usize..64, proptest::prelude::any::<u8>()), 1..6),
            cut in 0usize..64,
        ) {
            let mut p = GOLDEN_VETH.to_vec();
            for (i, v) in edits {
                let n = p.len();
                p[i % n] = v;
            }
            p.truncate(cut);
            let _ = parse_dev(&p);
            let _ = parse_family(&p);
        }
    }
}
