//! Who may test against the server: `allow` / `deny` lists of CIDR blocks,
//! checked on the address of a connection when it opens.
//!
//! Contract: pure data and matching, no I/O. A bare address is a block of
//! one host (/32 for IPv4, /128 for IPv6); host bits after the prefix are
//! ignored (`198.18.0.7/15` is `198.18.0.0/15`). An IPv4-mapped IPv6
//! address (`::ffff:198.18.0.2`) is matched as the IPv4 address it maps.
//! The rule: a client is refused if it is in a `deny` block; otherwise it
//! is served if `allow` is empty or it is in an `allow` block.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// One entry of an allow or deny list: an IPv4 or IPv6 CIDR block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr(IpNet);

/// A list entry that is neither an address nor a CIDR block.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not an IP address or CIDR block (accepted: an IPv4 or IPv6 address, optionally \
     with /prefix: /0..=/32 for IPv4, /0..=/128 for IPv6; e.g. 198.18.0.0/15, 2001:db8::/32, \
     192.0.2.7)"
)]
pub struct CidrError(pub String);

impl Cidr {
    /// The block, host bits cleared.
    pub fn net(&self) -> IpNet {
        self.0
    }

    /// True if `addr` is in the block.
    pub fn contains(&self, addr: IpAddr) -> bool {
        self.0.contains(&addr.to_canonical())
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let t = s.trim();
        let net = if t.contains('/') {
            t.parse::<IpNet>().map_err(|_| CidrError(s.to_owned()))?
        } else {
            IpNet::from(t.parse::<IpAddr>().map_err(|_| CidrError(s.to_owned()))?)
        };
        // An IPv4-mapped IPv6 block is the IPv4 block it maps, so that it
        // matches what `contains` compares (canonical addresses).
        let net = match net {
            IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
                Some(v4) => IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96)
                    .map_err(|_| CidrError(s.to_owned()))?,
                None => net,
            },
            other => other,
        };
        Ok(Cidr(net.trunc()))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Parses a comma-separated list (`198.18.0.0/15,2001:2::/48`); empty
/// entries are skipped, a bad one is an error that names it.
pub fn parse_cidr_list(s: &str) -> Result<Vec<Cidr>, CidrError> {
    s.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(str::parse)
        .collect()
}

/// The server's allow and deny lists. The default allows everyone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessList {
    /// Served blocks; empty: every client not denied.
    pub allow: Vec<Cidr>,
    /// Refused blocks; a client in one is refused even if it is allowed.
    pub deny: Vec<Cidr>,
}

impl AccessList {
    /// True if a client at `addr` may test.
    pub fn permits(&self, addr: IpAddr) -> bool {
        if self.deny.iter().any(|c| c.contains(addr)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|c| c.contains(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(allow: &str, deny: &str) -> AccessList {
        AccessList {
            allow: parse_cidr_list(allow).unwrap(),
            deny: parse_cidr_list(deny).unwrap(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn empty_lists_allow_everyone() {
        let a = AccessList::default();
        assert!(a.permits(ip("198.18.0.2")));
        assert!(a.permits(ip("2001:2::2")));
    }

    #[test]
    fn ipv4_blocks_and_bare_addresses() {
        let a = list("198.18.0.0/15, 192.0.2.7", "");
        assert!(a.permits(ip("198.18.0.2")));
        assert!(a.permits(ip("198.19.255.255")));
        assert!(!a.permits(ip("198.20.0.1")));
        assert!(!a.permits(ip("198.17.255.255")));
        // A bare address is one host.
        assert!(a.permits(ip("192.0.2.7")));
        assert!(!a.permits(ip("192.0.2.8")));
        // An IPv4 list says nothing about IPv6 clients: not allowed.
        assert!(!a.permits(ip("2001:2::2")));
        // IPv4-mapped IPv6 is the IPv4 client.
        assert!(a.permits(ip("::ffff:198.18.0.2")));
        assert!(!a.permits(ip("::ffff:198.20.0.1")));
    }

    #[test]
    fn ipv6_blocks_and_bare_addresses() {
        let a = list("2001:2::/48,2001:db8::1", "");
        assert!(a.permits(ip("2001:2::2")));
        assert!(a.permits(ip("2001:2:0:ffff::1")));
        assert!(!a.permits(ip("2001:2:1::1")));
        assert!(a.permits(ip("2001:db8::1")));
        assert!(!a.permits(ip("2001:db8::2")));
        assert!(!a.permits(ip("198.18.0.2")));
        // A mapped block matches the IPv4 clients it maps.
        let m = list("::ffff:198.18.0.0/111", "");
        assert!(m.permits(ip("198.18.0.2")));
        assert!(!m.permits(ip("198.20.0.2")));
    }

    #[test]
    fn deny_beats_allow() {
        let a = list("198.18.0.0/15", "198.18.0.2,2001:2::/64");
        assert!(!a.permits(ip("198.18.0.2")));
        assert!(a.permits(ip("198.18.0.3")));
        // Deny alone: everyone else is served.
        let d = list("", "198.18.0.0/24, 2001:2::/64");
        assert!(!d.permits(ip("198.18.0.200")));
        assert!(d.permits(ip("198.18.1.1")));
        assert!(!d.permits(ip("2001:2::9")));
        assert!(d.permits(ip("2001:2:0:1::9")));
        // Deny everything wins over an allow of everything.
        let all = list("0.0.0.0/0,::/0", "0.0.0.0/0");
        assert!(!all.permits(ip("10.0.0.1")));
        assert!(all.permits(ip("2001:db8::1")));
    }

    #[test]
    fn host_bits_are_ignored_and_shown_cleared() {
        let c: Cidr = "198.18.0.7/15".parse().unwrap();
        assert_eq!(c.to_string(), "198.18.0.0/15");
        assert!(c.contains(ip("198.19.1.1")));
        let one: Cidr = "2001:db8::1".parse().unwrap();
        assert_eq!(one.to_string(), "2001:db8::1/128");
    }

    #[test]
    fn bad_entries_are_named() {
        for bad in [
            "198.18.0.0/33",
            "2001:2::/129",
            "300.1.2.3",
            "example.com",
            "198.18.0.0/",
            "/8",
        ] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert_eq!(e, CidrError(bad.to_owned()));
            assert!(e.to_string().contains(&format!("`{bad}`")), "{e}");
            assert!(e.to_string().contains("/0..=/32"), "{e}");
        }
        let e = parse_cidr_list("198.18.0.0/15,nope,10.0.0.0/8").unwrap_err();
        assert_eq!(e.0, "nope");
        assert_eq!(parse_cidr_list(" , ").unwrap(), vec![]);
    }
}
