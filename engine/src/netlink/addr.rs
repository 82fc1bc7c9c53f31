//! Interface addresses (`RTM_GETADDR` dump), and the interface a command
//! runs on when it is not named: the one the kernel routes a destination
//! through ([`route_iface`]), or the one that holds a local address
//! ([`iface_holding`]).

use std::net::IpAddr;

use super::attr::{Attrs, ParseError};
use super::neigh::{Route, get_route};
use super::route::{LinkInfo, LinkSelector, get_link};
use super::{NetlinkError, NetlinkSocket};

const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
/// `ifa_flags`: duplicate address detection not finished, or failed.
const IFA_F_TENTATIVE: u8 = 0x40;
const IFA_F_DADFAILED: u8 = 0x08;
/// `ifa_scope` of an address of the link only (IPv6's `fe80::/10`); a
/// loopback address's scope is the host's (254), and it is served.
const RT_SCOPE_LINK: u8 = 253;
/// Size of `struct ifaddrmsg`.
const IFADDRMSG_LEN: usize = 8;

/// One address of an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IfAddr {
    /// The interface's index.
    pub ifindex: u32,
    /// The address (`IFA_LOCAL` where given: on point-to-point links
    /// `IFA_ADDRESS` is the peer's).
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
    /// Whether it can be used as a source or bound to: not tentative (IPv6
    /// duplicate address detection still running) and not failed it.
    pub usable: bool,
    /// Of link scope (IPv6's `fe80::/10`): reachable only with an
    /// interface named alongside, and not served unless given.
    pub link_scope: bool,
}

/// Parses an `RTM_NEWADDR` payload; `None` for a family other than IPv4
/// and IPv6 or a message without an address.
pub fn parse_addr(payload: &[u8]) -> Result<Option<IfAddr>, ParseError> {
    let Some((ifa, attrs)) = payload.split_first_chunk::<IFADDRMSG_LEN>() else {
        return Err(ParseError::Truncated {
            what: "struct ifaddrmsg",
            need: IFADDRMSG_LEN,
            have: payload.len(),
        });
    };
    let family = i32::from(ifa[0]);
    let ifindex = u32::from_ne_bytes([ifa[4], ifa[5], ifa[6], ifa[7]]);
    let ip = |b: &[u8]| match (family, b.len()) {
        (libc::AF_INET, 4) => <[u8; 4]>::try_from(b).ok().map(IpAddr::from),
        (libc::AF_INET6, 16) => <[u8; 16]>::try_from(b).ok().map(IpAddr::from),
        _ => None,
    };
    let (mut local, mut address) = (None, None);
    for a in Attrs::new(attrs) {
        let a = a?;
        match a.kind() {
            IFA_LOCAL => local = ip(a.payload()),
            IFA_ADDRESS => address = ip(a.payload()),
            _ => {}
        }
    }
    Ok(local.or(address).map(|addr| IfAddr {
        ifindex,
        addr,
        prefix_len: ifa[1],
        usable: ifa[2] & (IFA_F_TENTATIVE | IFA_F_DADFAILED) == 0,
        link_scope: ifa[3] == RT_SCOPE_LINK,
    }))
}

/// The addresses a listener on interface `ifindex` serves when none is
/// given: its IPv4 addresses, then its IPv6 addresses but link-local
/// ones, each in the kernel's order; the tentative ones (not
/// [`IfAddr::usable`]) apart, since they cannot be served.
pub fn serving_addrs(
    sock: &mut NetlinkSocket,
    ifindex: u32,
) -> Result<(Vec<IpAddr>, Vec<IpAddr>), NetlinkError> {
    let mut addrs: Vec<IfAddr> = get_addrs(sock)?
        .into_iter()
        .filter(|a| a.ifindex == ifindex && !a.link_scope)
        .collect();
    addrs.sort_by_key(|a| a.addr.is_ipv6());
    let (usable, tentative): (Vec<IfAddr>, Vec<IfAddr>) = addrs.into_iter().partition(|a| a.usable);
    let ips = |v: Vec<IfAddr>| v.into_iter().map(|a| a.addr).collect();
    Ok((ips(usable), ips(tentative)))
}

/// Every IPv4 and IPv6 address of every interface in `sock`'s namespace.
pub fn get_addrs(sock: &mut NetlinkSocket) -> Result<Vec<IfAddr>, NetlinkError> {
    // struct ifaddrmsg, AF_UNSPEC: all families.
    let body = [0u8; IFADDRMSG_LEN];
    let mut out = Vec::new();
    for r in sock.dump(RTM_GETADDR, &body)? {
        if r.kind != RTM_NEWADDR {
            return Err(NetlinkError::Unexpected { kind: r.kind });
        }
        out.extend(parse_addr(&r.payload)?);
    }
    Ok(out)
}

/// The interface the kernel (in `sock`'s namespace) routes `dst` through,
/// with the route.
pub fn route_iface(
    sock: &mut NetlinkSocket,
    dst: IpAddr,
) -> Result<(Route, LinkInfo), NetlinkError> {
    let route = get_route(sock, dst)?;
    let link = get_link(sock, LinkSelector::Index(route.oif))?;
    Ok((route, link))
}

/// An interface's name and some of its addresses.
pub type IfaceAddrs = (String, Vec<IpAddr>);

/// What [`iface_holding`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// The interface that has the address.
    Found(LinkInfo),
    /// No interface has it; these interfaces (up, not loopback) have
    /// addresses of its family (IPv6 ones not link-local), with those
    /// addresses.
    NotFound(Vec<IfaceAddrs>),
}

/// The interface that has the local address `addr`, or, for the
/// unspecified address or one that no interface has, the interfaces that
/// could be meant: up, not loopback, with an address of `addr`'s family
/// that a listener serves (not IPv6 link-local).
pub fn iface_holding(sock: &mut NetlinkSocket, addr: IpAddr) -> Result<Holder, NetlinkError> {
    let addrs = get_addrs(sock)?;
    if !addr.is_unspecified()
        && let Some(a) = addrs.iter().find(|a| a.addr == addr)
    {
        return Ok(Holder::Found(get_link(
            sock,
            LinkSelector::Index(a.ifindex),
        )?));
    }
    // The addresses that could be meant instead: of the family asked for,
    // and none that a listener never serves (IPv6 link-local).
    let of_family = addrs.iter().filter(|a| match a.addr {
        IpAddr::V4(_) => addr.is_ipv4(),
        IpAddr::V6(v6) => addr.is_ipv6() && !v6.is_unicast_link_local(),
    });
    Ok(Holder::NotFound(up_ifaces(sock, of_family)?))
}

/// The interfaces of `addrs` that are up and not loopback, each with its
/// addresses among `addrs`, in their order.
fn up_ifaces<'a>(
    sock: &mut NetlinkSocket,
    addrs: impl Iterator<Item = &'a IfAddr>,
) -> Result<Vec<IfaceAddrs>, NetlinkError> {
    // Index, name and addresses; None for an interface left out.
    let mut found: Vec<(u32, Option<IfaceAddrs>)> = Vec::new();
    for a in addrs {
        if let Some((_, c)) = found.iter_mut().find(|c| c.0 == a.ifindex) {
            if let Some((_, v)) = c {
                v.push(a.addr);
            }
            continue;
        }
        let link = match get_link(sock, LinkSelector::Index(a.ifindex)) {
            Ok(l) => Some(l),
            // Gone since the dump.
            Err(e) if e.errno() == Some(libc::ENODEV) => None,
            Err(e) => return Err(e),
        };
        let keep = link.filter(|l| l.is_up() && !l.is_loopback());
        found.push((a.ifindex, keep.map(|l| (l.name, vec![a.addr]))));
    }
    Ok(found.into_iter().filter_map(|(_, c)| c).collect())
}

/// The interfaces a listener given no address could serve: up, not
/// loopback, with an address [`serving_addrs`] would take (of either
/// family), each with those addresses, in the kernel's order.
pub fn serving_ifaces(sock: &mut NetlinkSocket) -> Result<Vec<IfaceAddrs>, NetlinkError> {
    let mut addrs = get_addrs(sock)?;
    addrs.sort_by_key(|a| a.addr.is_ipv6());
    up_ifaces(sock, addrs.iter().filter(|a| a.usable && !a.link_scope))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `RTM_NEWADDR` payload as the kernel sends it for
    /// `198.18.0.1/30 dev index 7`: ifaddrmsg, IFA_ADDRESS, IFA_LOCAL,
    /// IFA_LABEL.
    fn golden_v4() -> Vec<u8> {
        let mut p = vec![libc::AF_INET as u8, 30, 0x80, 0];
        p.extend_from_slice(&7u32.to_ne_bytes());
        for (kind, data) in [
            (IFA_ADDRESS, &[198u8, 18, 0, 1][..]),
            (IFA_LOCAL, &[198, 18, 0, 1][..]),
            (3, b"xa1\0".as_slice()),
        ] {
            p.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
            p.extend_from_slice(&kind.to_ne_bytes());
            p.extend_from_slice(data);
            while p.len() % 4 != 0 {
                p.push(0);
            }
        }
        p
    }

    #[test]
    fn parses_an_ipv4_address() {
        let a = parse_addr(&golden_v4()).unwrap().unwrap();
        assert_eq!(
            a,
            IfAddr {
                ifindex: 7,
                addr: "198.18.0.1".parse().unwrap(),
                prefix_len: 30,
                usable: true,
                link_scope: false,
            }
        );
    }

    /// `2001:db8::1/64` and `fe80::1/64` as the kernel sends them, with
    /// their `ifa_flags` and `ifa_scope`.
    fn v6(addr: [u8; 16], flags: u8, scope: u8) -> Vec<u8> {
        let mut p = vec![libc::AF_INET6 as u8, 64, flags, scope];
        p.extend_from_slice(&2u32.to_ne_bytes());
        p.extend_from_slice(&20u16.to_ne_bytes());
        p.extend_from_slice(&IFA_ADDRESS.to_ne_bytes());
        p.extend_from_slice(&addr);
        p
    }

    /// What a listener given no address may serve: neither a tentative
    /// address (duplicate address detection running, or failed) nor one
    /// of link scope.
    #[test]
    fn tentative_and_link_scope_addresses_are_told_apart() {
        let global: [u8; 16] = "2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets();
        let link: [u8; 16] = "fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let a = parse_addr(&v6(global, 0x80, 0)).unwrap().unwrap();
        assert_eq!(a.addr, IpAddr::from(global));
        assert!(a.usable && !a.link_scope, "{a:?}");
        let a = parse_addr(&v6(global, IFA_F_TENTATIVE, 0))
            .unwrap()
            .unwrap();
        assert!(!a.usable, "{a:?}");
        let a = parse_addr(&v6(global, IFA_F_DADFAILED | 0x80, 0))
            .unwrap()
            .unwrap();
        assert!(!a.usable, "{a:?}");
        let a = parse_addr(&v6(link, 0x80, RT_SCOPE_LINK)).unwrap().unwrap();
        assert!(a.usable && a.link_scope, "{a:?}");
        // ::1 on lo: the host's scope, served on an interface named for it.
        let a = parse_addr(&v6(std::net::Ipv6Addr::LOCALHOST.octets(), 0x80, 254))
            .unwrap()
            .unwrap();
        assert!(a.usable && !a.link_scope, "{a:?}");
    }

    #[test]
    fn local_wins_over_the_peer_address() {
        let mut p = vec![libc::AF_INET as u8, 32, 0, 0];
        p.extend_from_slice(&3u32.to_ne_bytes());
        for (kind, ip) in [(IFA_ADDRESS, [10u8, 0, 0, 2]), (IFA_LOCAL, [10, 0, 0, 1])] {
            p.extend_from_slice(&8u16.to_ne_bytes());
            p.extend_from_slice(&kind.to_ne_bytes());
            p.extend_from_slice(&ip);
        }
        let a = parse_addr(&p).unwrap().unwrap();
        assert_eq!(a.addr, "10.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn truncated_and_foreign_payloads_never_panic() {
        let g = golden_v4();
        for n in 0..g.len() {
            let _ = parse_addr(&g[..n]);
        }
        assert!(parse_addr(&g[..4]).is_err());
        let mut other = g.clone();
        other[0] = 17; // AF_PACKET
        assert_eq!(parse_addr(&other).unwrap(), None);
    }
}
