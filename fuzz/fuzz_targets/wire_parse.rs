//! Every wire parser over arbitrary bytes: must never panic, and whatever
//! parses must re-emit to bytes that parse to the same representation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xtcp_engine::wire::{
    ArpPacket, ArpRepr, EthernetFrame, EthernetRepr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr,
    TcpPacket, TcpRepr, locate_tcp, locate_too_big,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = locate_too_big(data) {
        assert!(t.local.is_ipv4() == t.remote.is_ipv4());
    }
    if let Ok(l) = locate_tcp(data) {
        let t = TcpPacket::new_checked(&data[l.tcp_off..]).expect("located TCP header");
        let _ = t.verify_checksum(l.pseudo_sum());
        if let Ok(r) = TcpRepr::parse(&t) {
            // Options packed tighter than our layout (e.g. MSS + TS + three
            // SACK blocks without NOPs) may not re-emit in 40 bytes.
            let mut buf = [0u8; 60];
            match r.emit(&mut TcpPacket::new_unchecked(&mut buf[..])) {
                Ok(()) => {
                    let back = TcpPacket::new_checked(&buf[..r.header_len()]).unwrap();
                    assert_eq!(TcpRepr::parse(&back), Ok(r));
                }
                Err(_) => assert!(r.options.len() > 40),
            }
        }
    }
    if let Ok(f) = EthernetFrame::new_checked(data) {
        if let Ok(r) = EthernetRepr::parse(&f) {
            let mut buf = [0u8; 18];
            r.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
            let again = EthernetRepr::parse(&EthernetFrame::new_checked(&buf[..]).unwrap());
            assert_eq!(again, Ok(r));
        }
    }
    if let Ok(p) = ArpPacket::new_checked(data) {
        let _ = (p.sha(), p.spa(), p.tha(), p.tpa());
        let _ = ArpRepr::parse(&p);
    }
    if let Ok(p) = Ipv4Packet::new_checked_prefix(data) {
        let _ = p.payload();
        if let Ok(r) = Ipv4Repr::parse(&p) {
            let mut buf = [0u8; 20];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
            let back = Ipv4Packet::new_checked_prefix(&buf[..]).unwrap();
            assert_eq!(Ipv4Repr::parse(&back), Ok(r));
        }
    }
    if let Ok(p) = Ipv6Packet::new_checked_prefix(data) {
        let _ = p.upper_layer();
        let _ = Ipv6Repr::parse(&p);
    }
});
