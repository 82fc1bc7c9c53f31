//! TCP option lists: parsing never panics; what parses and fits in 40
//! bytes re-emits and parses back to the same options.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xtcp_engine::wire::TcpOptions;

fuzz_target!(|data: &[u8]| {
    if let Ok(o) = TcpOptions::parse(data) {
        let mut buf = [0u8; 64];
        match o.emit(&mut buf) {
            Ok(n) => assert_eq!(TcpOptions::parse(&buf[..n]), Ok(o)),
            Err(_) => assert!(o.len() > 40),
        }
    }
});
