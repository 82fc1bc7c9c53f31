//! Next hops: the kernel's route to a destination (`RTM_GETROUTE`) and the
//! link-layer address of the next hop from its neighbour table
//! (`RTM_GETNEIGH`), asking the kernel to resolve it (ARP / ND) when the
//! entry is missing (`RTM_NEWNEIGH` with `NTF_USE`).
//!
//! xtcp sends frames itself, so it needs the destination MAC the kernel
//! would have used; it takes it from the kernel rather than speaking ARP.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::attr::{AttrWriter, Attrs, ParseError};
use super::{NetlinkError, NetlinkSocket};

const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PREFSRC: u16 = 7;
const RTA_METRICS: u16 = 8;
/// Of `RTA_METRICS`: the route's MTU (`ip route … mtu N`, or a path MTU
/// the kernel learned for the destination).
const RTAX_MTU: u16 = 2;
const RTA_VIA: u16 = 18;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;

const NTF_USE: u8 = 0x01;
const NUD_INCOMPLETE: u16 = 0x01;
const NUD_REACHABLE: u16 = 0x02;
const NUD_STALE: u16 = 0x04;
const NUD_DELAY: u16 = 0x08;
const NUD_PROBE: u16 = 0x10;
const NUD_FAILED: u16 = 0x20;
const NUD_NOARP: u16 = 0x40;
const NUD_PERMANENT: u16 = 0x80;
const NUD_VALID: u16 =
    NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_NOARP | NUD_PERMANENT;

const RTMSG_LEN: usize = 12;
/// `rtm_type` of a route to one of this host's own addresses.
const RTN_LOCAL: u8 = 2;
const NDMSG_LEN: usize = 12;

fn family(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn octets(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn parse_ip(fam: u8, b: &[u8]) -> Option<IpAddr> {
    match (i32::from(fam), b.len()) {
        (libc::AF_INET, 4) => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        (libc::AF_INET6, 16) => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

/// The kernel's route to a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Outgoing interface index.
    pub oif: u32,
    /// Gateway, if the destination is not on-link.
    pub gateway: Option<IpAddr>,
    /// Preferred source address.
    pub prefsrc: Option<IpAddr>,
    /// The gateway is of the other family (`RTA_VIA`, e.g. IPv4 via an IPv6
    /// next hop): not supported by [`resolve`].
    pub via_other_family: bool,
    /// The destination is an address of this host (`RTN_LOCAL`: the route
    /// goes through the loopback device).
    pub local: bool,
    /// The route's MTU, where it has one: set on the route (`ip route …
    /// mtu N`), or the path MTU the kernel learned for the destination
    /// (ICMP "fragmentation needed" / "packet too big" to one of its own
    /// sockets, cached as a route exception).
    pub mtu: Option<u32>,
}

impl Route {
    /// The address whose link-layer address frames must carry.
    pub fn next_hop(&self, dst: IpAddr) -> IpAddr {
        self.gateway.unwrap_or(dst)
    }
}

/// The body of an `RTM_GETROUTE` request for `dst`.
pub fn get_route_body(dst: IpAddr) -> Vec<u8> {
    let mut b = vec![0u8; RTMSG_LEN];
    b[0] = family(dst);
    b[1] = if dst.is_ipv4() { 32 } else { 128 };
    b.put_attr(RTA_DST, &octets(dst));
    b
}

/// Parses an `RTM_NEWROUTE` payload.
pub fn parse_route(payload: &[u8]) -> Result<Route, ParseError> {
    let Some((rtm, attrs)) = payload.split_first_chunk::<RTMSG_LEN>() else {
        return Err(ParseError::Truncated {
            what: "struct rtmsg",
            need: RTMSG_LEN,
            have: payload.len(),
        });
    };
    let fam = rtm[0];
    let mut r = Route {
        oif: 0,
        gateway: None,
        prefsrc: None,
        via_other_family: false,
        local: rtm[7] == RTN_LOCAL,
        mtu: None,
    };
    for a in Attrs::new(attrs) {
        let a = a?;
        match a.kind() {
            RTA_OIF => r.oif = a.u32()?,
            RTA_GATEWAY => r.gateway = parse_ip(fam, a.payload()),
            RTA_PREFSRC => r.prefsrc = parse_ip(fam, a.payload()),
            RTA_VIA => r.via_other_family = true,
            RTA_METRICS => {
                for m in a.nested() {
                    let m = m?;
                    if m.kind() == RTAX_MTU {
                        r.mtu = Some(m.u32()?).filter(|&v| v > 0);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(r)
}

/// One neighbour entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// Link-layer address, if known.
    pub lladdr: Option<[u8; 6]>,
    /// `NUD_*` state bits.
    pub state: u16,
}

impl Neighbour {
    /// True if the entry has a usable link-layer address.
    pub fn is_valid(&self) -> bool {
        self.lladdr.is_some() && self.state & NUD_VALID != 0
    }

    /// True while resolution is in progress.
    pub fn is_incomplete(&self) -> bool {
        self.state & NUD_INCOMPLETE != 0
    }
}

fn ndmsg(ip: IpAddr, ifindex: u32, state: u16, flags: u8) -> Vec<u8> {
    let mut b = vec![0u8; NDMSG_LEN];
    b[0] = family(ip);
    b[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    b[8..10].copy_from_slice(&state.to_ne_bytes());
    b[10] = flags;
    b.put_attr(NDA_DST, &octets(ip));
    b
}

/// Parses an `RTM_NEWNEIGH` payload.
pub fn parse_neighbour(payload: &[u8]) -> Result<Neighbour, ParseError> {
    let Some((nd, attrs)) = payload.split_first_chunk::<NDMSG_LEN>() else {
        return Err(ParseError::Truncated {
            what: "struct ndmsg",
            need: NDMSG_LEN,
            have: payload.len(),
        });
    };
    let mut n = Neighbour {
        lladdr: None,
        state: u16::from_ne_bytes([nd[8], nd[9]]),
    };
    for a in Attrs::new(attrs) {
        let a = a?;
        if a.kind() == NDA_LLADDR {
            n.lladdr = <[u8; 6]>::try_from(a.payload()).ok();
        }
    }
    Ok(n)
}

/// The kernel's route to `dst`.
pub fn get_route(sock: &mut NetlinkSocket, dst: IpAddr) -> Result<Route, NetlinkError> {
    let reply = sock.request(RTM_GETROUTE, 0, &get_route_body(dst))?;
    if reply.kind != RTM_NEWROUTE {
        return Err(NetlinkError::Unexpected { kind: reply.kind });
    }
    Ok(parse_route(&reply.payload)?)
}

/// The neighbour entry for `ip` on `ifindex`, or `None` if there is none.
pub fn get_neighbour(
    sock: &mut NetlinkSocket,
    ifindex: u32,
    ip: IpAddr,
) -> Result<Option<Neighbour>, NetlinkError> {
    match sock.request(RTM_GETNEIGH, 0, &ndmsg(ip, ifindex, 0, 0)) {
        Ok(reply) if reply.kind == RTM_NEWNEIGH => Ok(Some(parse_neighbour(&reply.payload)?)),
        Ok(reply) => Err(NetlinkError::Unexpected { kind: reply.kind }),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Asks the kernel to resolve `ip` on `ifindex` (creating the entry if
/// needed): what the kernel's own stack does before sending a packet.
pub fn trigger_resolution(
    sock: &mut NetlinkSocket,
    ifindex: u32,
    ip: IpAddr,
) -> Result<(), NetlinkError> {
    sock.request_ack(
        RTM_NEWNEIGH,
        NLM_F_CREATE | NLM_F_REPLACE,
        &ndmsg(ip, ifindex, NUD_INCOMPLETE, NTF_USE),
    )
}

/// Where frames to a destination go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextHop {
    /// The route.
    pub route: Route,
    /// The next hop's address (the gateway or the destination).
    pub addr: IpAddr,
    /// Its link-layer address.
    pub mac: [u8; 6],
}

/// Why a destination could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No route.
    #[error("no route to {dst} in this network namespace (see `ip route get {dst}`)")]
    NoRoute {
        /// Destination.
        dst: IpAddr,
    },
    /// The next hop did not answer.
    #[error(
        "{next_hop} (next hop to {dst}) did not answer {proto} within {waited:?} on {oif_name}: \
         is it up and on that link?"
    )]
    Unresolved {
        /// Destination.
        dst: IpAddr,
        /// Next hop.
        next_hop: IpAddr,
        /// ARP or ND.
        proto: &'static str,
        /// Outgoing interface.
        oif: u32,
        /// The outgoing interface named for messages, `"eth1 (index 3)"`
        /// (looked up where the error arose: in another network namespace
        /// the index may name another interface).
        oif_name: String,
        /// How long we waited.
        waited: Duration,
    },
    /// A route whose gateway is of the other address family.
    #[error(
        "the route to {dst} goes via a gateway of the other address family (RTA_VIA), which \
         xtcp does not support: add a route with a same-family gateway, or pass --dst-mac"
    )]
    ViaOtherFamily {
        /// Destination.
        dst: IpAddr,
    },
    /// Netlink failed.
    #[error("netlink: {0}")]
    Netlink(#[from] NetlinkError),
}

/// Finds the next hop to `dst` and its MAC, triggering ARP / neighbour
/// discovery if the kernel does not know it yet and waiting up to `timeout`.
pub fn resolve(dst: IpAddr, timeout: Duration) -> Result<NextHop, ResolveError> {
    let mut sock = NetlinkSocket::route()?;
    let route = match get_route(&mut sock, dst) {
        Ok(r) => r,
        Err(e) if matches!(e.errno(), Some(libc::ENETUNREACH | libc::EHOSTUNREACH)) => {
            return Err(ResolveError::NoRoute { dst });
        }
        Err(e) => return Err(e.into()),
    };
    if route.via_other_family {
        return Err(ResolveError::ViaOtherFamily { dst });
    }
    let addr = route.next_hop(dst);
    let start = Instant::now();
    let mut triggered = false;
    // Bounded: at most timeout / 5 ms polls.
    loop {
        if let Some(n) = get_neighbour(&mut sock, route.oif, addr)? {
            if n.is_valid() {
                if let Some(mac) = n.lladdr {
                    return Ok(NextHop { route, addr, mac });
                }
            }
        }
        if start.elapsed() >= timeout {
            return Err(ResolveError::Unresolved {
                dst,
                next_hop: addr,
                proto: if addr.is_ipv4() {
                    "ARP"
                } else {
                    "neighbour discovery"
                },
                oif: route.oif,
                oif_name: crate::xsk::describe_ifindex(route.oif),
                waited: timeout,
            });
        }
        // Ask again if an earlier attempt failed (the entry then stays
        // FAILED until someone asks).
        let failed = matches!(get_neighbour(&mut sock, route.oif, addr)?, Some(n) if n.state & NUD_FAILED != 0);
        if !triggered || failed {
            trigger_resolution(&mut sock, route.oif, addr)?;
            triggered = true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn route_request_and_reply() {
        let b = get_route_body(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)));
        assert_eq!(b[0], libc::AF_INET as u8);
        assert_eq!(b[1], 32);
        assert_eq!(&b[RTMSG_LEN + 4..RTMSG_LEN + 8], &[198, 18, 0, 2]);

        let mut p = vec![0u8; RTMSG_LEN];
        p[0] = libc::AF_INET as u8;
        p.put_u32(RTA_OIF, 7);
        p.put_attr(RTA_GATEWAY, &[198, 18, 0, 254]);
        p.put_attr(RTA_PREFSRC, &[198, 18, 0, 1]);
        p.put_attr(999, &[1, 2, 3]);
        let r = parse_route(&p).unwrap();
        assert_eq!(r.oif, 7);
        assert_eq!(r.gateway, Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 254))));
        assert_eq!(r.prefsrc, Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))));
        assert_eq!(
            r.next_hop(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9))),
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, 254))
        );
        assert!(!r.via_other_family);
        assert_eq!(r.mtu, None);
        // The route's metrics: its MTU among them.
        let mut metrics = Vec::new();
        metrics.put_u32(3, 100);
        metrics.put_u32(RTAX_MTU, 1500);
        let mut m = p.clone();
        m.put_attr(RTA_METRICS, &metrics);
        assert_eq!(parse_route(&m).unwrap().mtu, Some(1500));
        let mut via = p.clone();
        via.put_attr(
            RTA_VIA,
            &[10, 0, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        );
        assert!(parse_route(&via).unwrap().via_other_family);
        assert!(parse_route(&p[..5]).is_err());
        // A corrupted attribute length is an error, not a panic.
        let mut bad = p.clone();
        bad[RTMSG_LEN] = 0xff;
        assert!(parse_route(&bad).is_err());
    }

    #[test]
    fn neighbour_reply() {
        let mut p = ndmsg(
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            3,
            NUD_REACHABLE,
            0,
        );
        p.put_attr(NDA_LLADDR, &[2, 0, 0, 0, 0, 9]);
        let n = parse_neighbour(&p).unwrap();
        assert_eq!(n.lladdr, Some([2, 0, 0, 0, 0, 9]));
        assert!(n.is_valid() && !n.is_incomplete());
        let p = ndmsg(
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            3,
            NUD_INCOMPLETE,
            0,
        );
        let n = parse_neighbour(&p).unwrap();
        assert!(!n.is_valid() && n.is_incomplete());
        assert!(parse_neighbour(&p[..4]).is_err());
    }
}
