//! Next-hop resolution from the kernel's routing and neighbour tables,
//! triggering ARP / neighbour discovery when an entry is missing.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use common::*;
use xtcp_engine::netlink::neigh::{ResolveError, resolve};

#[test]
fn resolves_known_and_unknown_neighbours_v4_and_v6() {
    let net = testnet(1500, 1);
    // The test network installs static entries; remove them so the kernel
    // has to resolve.
    for ip in [net.b.ip4.to_string(), net.b.ip6.to_string()] {
        net.a
            .ns
            .ip(&["neigh", "del", &ip, "dev", &net.a.iface])
            .unwrap();
    }
    let _g = net.a.ns.enter().unwrap();
    for dst in [IpAddr::V4(net.b.ip4), IpAddr::V6(net.b.ip6)] {
        let hop = resolve(dst, Duration::from_secs(30)).unwrap();
        assert_eq!(hop.mac, net.b.mac, "{dst}");
        assert_eq!(hop.addr, dst, "on-link: the destination is the next hop");
        assert_eq!(hop.route.gateway, None);
        // Again, now from the table.
        assert_eq!(resolve(dst, Duration::from_secs(1)).unwrap().mac, net.b.mac);
    }
}

#[test]
fn unreachable_and_unrouted_destinations_give_clear_errors() {
    let net = testnet(1500, 1);
    let _g = net.a.ns.enter().unwrap();
    // On-link but nobody there.
    let e = resolve(
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, 77)),
        Duration::from_millis(500),
    )
    .unwrap_err();
    assert!(matches!(e, ResolveError::Unresolved { .. }), "{e:?}");
    assert!(e.to_string().contains("did not answer ARP"), "{e}");
    let on = format!("on {} (index ", net.a.iface);
    assert!(e.to_string().contains(&on), "names the interface: {e}");
    // No route at all (the namespace has no default route).
    let e = resolve(
        IpAddr::V4(Ipv4Addr::new(203, 0, 113, 5)),
        Duration::from_millis(500),
    )
    .unwrap_err();
    assert!(matches!(e, ResolveError::NoRoute { .. }), "{e:?}");
    assert!(e.to_string().contains("no route to 203.0.113.5"), "{e}");
}
