//! GSO and GRO over arbitrary frames: never panic, and whatever GSO emits
//! is a valid frame that GRO accepts.
//!
//! Input: byte 0-1 = MSS, byte 2 = where to cut the frame into two
//! descriptors, the rest = the frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xtcp_engine::frame::{Desc, FrameAddr};
use xtcp_engine::seg::{Gro, Gso, RxChecksum};
use xtcp_engine::wire::locate_tcp;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let mss = u16::from_be_bytes([data[0], data[1]]) as usize;
    let frame = &data[3..];
    let cut = (data[2] as usize * 4).min(frame.len());
    let mem = frame.to_vec();
    let chain = if cut > 0 && cut < frame.len() {
        vec![
            Desc::new(FrameAddr(0), cut as u32, true),
            Desc::new(FrameAddr(cut as u64), (frame.len() - cut) as u32, false),
        ]
    } else {
        vec![Desc::new(FrameAddr(0), frame.len() as u32, false)]
    };
    for policy in [RxChecksum::Trust, RxChecksum::Verify] {
        let mut gro = Gro::new(policy);
        let _ = gro.push(&chain, &mem);
        let mut hdr = [0u8; 256];
        let mut out = [Desc::default(); 80];
        let _ = gro.take(&mut hdr, FrameAddr(0), &mut out);
    }
    if let Ok(mut gso) = Gso::new(&chain, &mem, mss) {
        let mut hdr = [0u8; 256];
        let mut descs = [Desc::default(); 64];
        while let Some(r) = gso.next_segment(&mut hdr, FrameAddr(0), &mut descs) {
            let Ok(info) = r else { break };
            let mut seg = hdr[..info.header_len].to_vec();
            for d in &descs[1..info.desc_count] {
                let a = d.addr.0 as usize;
                seg.extend_from_slice(&mem[a..a + d.len as usize]);
            }
            let l = locate_tcp(&seg).expect("GSO output parses");
            assert_eq!(l.payload_len(), info.payload_len);
        }
    }
});
