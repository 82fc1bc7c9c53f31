//! Tests of the segmentation: every segment is re-parsed by our parser and
//! by etherparse (its checksums, from the runs' cached sums, must equal a
//! full recomputation there), payloads concatenate back to the stream, the
//! flag and IPv4-id rules hold, clipping yields whole frames, and a segment
//! boundary inside a run is refused.

use super::*;
use crate::frame::{Desc, FrameAddr, FrameSize};
use crate::wire::checksum::copy_and_sum;
use crate::wire::tests::oracle;
use crate::wire::{
    EtherType, EthernetAddress, EthernetRepr, IpProtocol, IpRepr, Ipv4Repr, Ipv6Repr, TcpOptions,
    TcpPacket, TcpRepr, TcpTimestamp, VlanTag, locate_tcp,
};
use proptest::prelude::*;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn reprs(v6: bool, vlan: bool, ts: bool, flags: TcpFlags) -> (EthernetRepr, IpRepr, TcpRepr) {
    let eth = EthernetRepr {
        dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
        src: EthernetAddress([2, 0, 0, 0, 0, 1]),
        vlan: vlan.then_some(VlanTag {
            pcp: 0,
            dei: false,
            vid: 7,
        }),
        ethertype: if v6 { EtherType::IPV6 } else { EtherType::IPV4 },
    };
    let ip = if v6 {
        IpRepr::V6(Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            next_header: IpProtocol::TCP,
            payload_len: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0x1234,
        })
    } else {
        IpRepr::V4(Ipv4Repr {
            src: [10, 0, 0, 1].into(),
            dst: [10, 0, 0, 2].into(),
            protocol: IpProtocol::TCP,
            payload_len: 0,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0xfff0,
            dont_frag: true,
        })
    };
    let tcp = TcpRepr {
        src_port: 5201,
        dst_port: 40000,
        seq: SeqNumber(0xffff_0000),
        ack: SeqNumber(77),
        flags,
        window: 1000,
        urgent: 0,
        options: TcpOptions {
            timestamp: ts.then_some(TcpTimestamp { tsval: 1, tsecr: 2 }),
            ..TcpOptions::NONE
        },
    };
    (eth, ip, tcp)
}

/// `len` bytes of `mem` at `addr`.
fn at(mem: &[u8], addr: FrameAddr, len: usize) -> &[u8] {
    &mem[addr.0 as usize..addr.0 as usize + len]
}

/// Concatenates a chain: descriptor 0 from `hdr`, the rest from `mem`.
fn assemble(hdr: &[u8], descs: &[Desc], mem: &[u8]) -> Vec<u8> {
    let mut v = hdr[..descs[0].len as usize].to_vec();
    for d in &descs[1..] {
        v.extend_from_slice(at(mem, d.addr, d.len as usize));
    }
    v
}

/// Checks one emitted segment against etherparse and the rules; returns
/// its payload.
fn check_segment(
    frame: &[u8],
    info: &SegmentInfo,
    descs: &[Desc],
    burst: TcpFlags,
    first: bool,
    last: bool,
) -> Vec<u8> {
    for (i, d) in descs.iter().enumerate() {
        assert_eq!(
            d.is_contd(),
            i + 1 < descs.len(),
            "CONTD on {i} of {}",
            descs.len()
        );
    }
    let l = locate_tcp(frame).unwrap();
    assert_eq!(l.tcp_len + l.tcp_off, frame.len());
    let t = TcpPacket::new_checked(&frame[l.tcp_off..]).unwrap();
    assert!(t.verify_checksum(l.pseudo_sum()), "our checksum check");
    let o = oracle(frame);
    assert_eq!(o.seq, info.seq.0);
    assert_eq!(o.payload.len(), info.payload_len);
    let mut want = burst;
    if !first {
        want = want.without(TcpFlags::CWR);
    }
    if !last {
        want = want.without(TcpFlags::FIN | TcpFlags::PSH);
    }
    assert_eq!(TcpFlags(o.flags), want, "flags first={first} last={last}");
    assert_eq!(info.flags, want);
    if let Some(id) = o.ip_id {
        assert_eq!(id, info.ip_id);
    }
    o.payload
}

/// Writes `data` into frames of `fs` bytes, starting `start` bytes into the
/// first (frame 0 of the memory is left out, so that address 0 is never
/// payload), and describes it as the send buffer does: runs cut at frame
/// boundaries, at segment boundaries (every `mss` stream bytes) and, if
/// `cut` is not 0, every `cut` bytes too (runs of odd lengths at odd
/// places), each with its sum cached as it was written.
fn describe(
    data: &[u8],
    start: usize,
    fs: usize,
    mss: usize,
    cut: usize,
) -> (Vec<u8>, Vec<StreamFrame>) {
    let mut mem = vec![0u8; (start + data.len()).div_ceil(fs).max(1) * fs + fs];
    let mut runs = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let addr = fs + start + pos;
        let mut take = (fs - addr % fs).min(mss - pos % mss);
        if cut > 0 {
            take = take.min(cut - pos % cut);
        }
        let take = take.min(data.len() - pos);
        let sum = copy_and_sum(&mut mem[addr..addr + take], &data[pos..pos + take]);
        runs.push(StreamFrame {
            addr: FrameAddr(addr as u64),
            len: take as u32,
            sum,
        });
        pos += take;
    }
    (mem, runs)
}

#[allow(clippy::too_many_arguments)]
fn run_tso(
    v6: bool,
    vlan: bool,
    ts: bool,
    burst: TcpFlags,
    len: usize,
    mss: usize,
    clip: bool,
    fsize: FrameSize,
    start: usize,
    cut: usize,
) {
    let (eth, ip, tcp) = reprs(v6, vlan, ts, burst);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let fs = fsize.bytes();
    let mss = if clip { clip_mss(mss, fs) } else { mss }.min(tpl.max_payload());
    // Clipping only changes anything when the MSS holds a whole frame.
    let clip = clip && mss >= fs;
    let (start, cut) = if clip { (0, 0) } else { (start % fs, cut) };
    let data = pattern(len, len as u32 ^ mss as u32);
    let (mem, runs) = describe(&data, start, fs, mss, cut);
    let seq0 = SeqNumber(0xffff_fff0);
    let mut c = SegCursor::new(len, seq0, 0xfff0, mss).unwrap();
    let mut hdr = [0xa5u8; 256];
    // A header, and a run a byte at the most (`cut` 1).
    let mut descs = vec![Desc::default(); mss + 1];
    let mut got = Vec::new();
    let mut i = 0usize;
    let nseg = len.div_ceil(mss).max(1);
    while let Some(r) = c.next(&tpl, &runs, &mut hdr, FrameAddr(0), &mut descs) {
        let info = r.unwrap();
        let chain = &descs[..info.desc_count];
        let frame = assemble(&hdr, chain, &mem);
        let last = i + 1 == nseg;
        got.extend(check_segment(&frame, &info, chain, burst, i == 0, last));
        assert_eq!(info.seq, seq0 + i * mss);
        if !last {
            assert_eq!(info.payload_len, mss);
        }
        if !v6 {
            assert_eq!(info.ip_id, 0xfff0u16.wrapping_add(i as u16));
        }
        if clip {
            // Whole, frame-aligned pages; only the stream's very last frame
            // may be partial.
            for (k, d) in chain[1..].iter().enumerate() {
                assert_eq!(d.addr.offset_in_frame(fsize), 0);
                if !(last && k + 2 == chain.len()) {
                    assert_eq!(d.len as usize, fs, "segment {i} desc {k}");
                }
            }
        }
        i += 1;
    }
    assert_eq!(i, nseg);
    assert!(c.is_done());
    assert_eq!(got, data);
}

#[test]
fn clip_examples() {
    assert_eq!(clip_mss(8948, 4096), 8192);
    assert_eq!(clip_mss(8960, 4096), 8192);
    assert_eq!(clip_mss(65483, 4096), 61440);
    assert_eq!(clip_mss(1448, 4096), 1448);
    assert_eq!(clip_mss(1448, 0), 1448);
}

#[test]
fn tso_fixed_cases() {
    let all = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN | TcpFlags::CWR;
    let (f4k, f2k) = (FrameSize::F4096, FrameSize::F2048);
    for cut in [0, 1, 255, 1001] {
        run_tso(false, false, true, all, 100_000, 8948, true, f4k, 0, cut);
        run_tso(true, true, true, all, 100_000, 65000, true, f4k, 0, cut);
        run_tso(
            false, false, false, all, 100_001, 1448, false, f4k, 3001, cut,
        );
        run_tso(false, false, true, all, 100_001, 8948, false, f4k, 1, cut);
        run_tso(true, false, false, all, 9_000, 1448, false, f2k, 7, cut);
        // A header-only segment (pure FIN).
        let fin = TcpFlags::ACK | TcpFlags::FIN;
        run_tso(false, true, true, fin, 0, 1448, false, f4k, 0, cut);
    }
}

/// The checksum is the runs' cached sums, not the bytes: a run whose sum
/// is wrong gives a segment whose checksum fails, by exactly the error
/// (nothing reads the payload to correct it).
#[test]
fn the_cached_sums_are_what_the_checksum_takes() {
    let (eth, ip, tcp) = reprs(false, false, true, TcpFlags::ACK);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let data = pattern(8192, 21);
    let (mem, mut runs) = describe(&data, 0, 4096, 8192, 0);
    runs[1].sum = runs[1].sum.wrapping_add(1);
    let (mut hdr, mut descs) = ([0u8; 128], [Desc::default(); 4]);
    let info = SegCursor::new(8192, SeqNumber(1), 1, 8192)
        .unwrap()
        .next(&tpl, &runs, &mut hdr, FrameAddr(0), &mut descs)
        .unwrap()
        .unwrap();
    let frame = assemble(&hdr, &descs[..info.desc_count], &mem);
    let l = locate_tcp(&frame).unwrap();
    let t = TcpPacket::new_checked(&frame[l.tcp_off..]).unwrap();
    assert!(!t.verify_checksum(l.pseudo_sum()));
}

#[test]
fn tso_errors_leave_cursor() {
    let (eth, ip, tcp) = reprs(false, false, false, TcpFlags::ACK);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let data = pattern(10_000, 3);
    let (_, runs) = describe(&data, 0, 4096, 8192, 0);
    let mut c = SegCursor::new(10_000, SeqNumber(1), 0, 8192).unwrap();
    let before = c;
    let mut hdr = [0u8; 128];
    let mut descs = [Desc::default(); 2];
    let r = c.next(&tpl, &runs, &mut hdr, FrameAddr(0), &mut descs);
    assert_eq!(r, Some(Err(SegError::Descriptors { have: 2 })));
    assert_eq!(c, before);
    let r = c.next(
        &tpl,
        &runs,
        &mut hdr[..10],
        FrameAddr(0),
        &mut [Desc::default(); 4],
    );
    assert_eq!(r, Some(Err(SegError::HeaderBuffer { need: 54 })));
    assert_eq!(c, before);
    // Asking for more than the runs hold.
    let mut c = SegCursor::new(20_000, SeqNumber(1), 0, 8192).unwrap();
    let mut descs = [Desc::default(); 8];
    assert!(matches!(
        c.next(&tpl, &runs, &mut hdr, FrameAddr(0), &mut descs),
        Some(Ok(_))
    ));
    let mid = c;
    assert_eq!(
        c.next(&tpl, &runs, &mut hdr, FrameAddr(0), &mut descs),
        Some(Err(SegError::ShortStream))
    );
    assert_eq!(c, mid);
    assert_eq!(
        SegCursor::new(1, SeqNumber(1), 0, 0).err(),
        Some(SegError::ZeroMss)
    );
}

/// A segment that would end inside a run is refused, in both layouts, and
/// the cursor stays where it was: the run's sum covers all of it, and the
/// payload is not read to split it.
#[test]
fn a_boundary_inside_a_run_is_refused() {
    let (eth, ip, tcp) = reprs(false, false, true, TcpFlags::ACK);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let data = pattern(8192, 4);
    // Whole 4096-byte frames, MSS 1448 (unclipped): the first segment ends
    // inside the first run.
    let (mut mem, runs) = describe(&data, 0, 4096, 8192, 0);
    let mut c = SegCursor::new(8192, SeqNumber(1), 0, 1448).unwrap();
    let before = c;
    let (mut hdr, mut descs) = ([0u8; 128], [Desc::default(); 4]);
    assert_eq!(
        c.next(&tpl, &runs, &mut hdr, FrameAddr(0), &mut descs),
        Some(Err(SegError::SplitFrame))
    );
    assert_eq!(c, before);
    let mut d = Desc::default();
    assert_eq!(
        c.next_in_headroom(&tpl, &runs, &mut mem, &mut d),
        Some(Err(SegError::SplitFrame))
    );
    assert_eq!(c, before);
    // Fewer bytes asked for than the run holds: the same.
    let mut c = SegCursor::new(4000, SeqNumber(1), 0, 8192).unwrap();
    assert_eq!(
        c.next(&tpl, &runs, &mut hdr, FrameAddr(0), &mut descs),
        Some(Err(SegError::SplitFrame))
    );
}

/// A template whose acknowledgement number, window and timestamps were
/// rewritten in place writes the headers a template built anew with them
/// writes: the same bytes (the TCP checksum in either of ones-complement's
/// two zeros), and checksums that verify.
fn check_update(v6: bool, vlan: bool, ack: u32, window: u16, ts: Option<(u32, u32)>, seq: u32) {
    let (eth, ip, mut tcp) = reprs(v6, vlan, ts.is_some(), TcpFlags::ACK);
    let mut tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    tcp.ack = SeqNumber(ack);
    tcp.window = window;
    tcp.options.timestamp = ts.map(|(tsval, tsecr)| TcpTimestamp { tsval, tsecr });
    assert!(tpl.update(tcp.ack, window, tcp.options.timestamp));
    let fresh = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let data = pattern(1000, seq);
    let (mem, runs) = describe(&data, 0, 4096, 1448, 0);
    let mut out = Vec::new();
    for t in [&tpl, &fresh] {
        let mut c = SegCursor::new(1000, SeqNumber(seq), 1, 1448).unwrap();
        let mut hdr = [0u8; 128];
        let mut descs = [Desc::default(); 4];
        let info = c
            .next(t, &runs, &mut hdr, FrameAddr(0), &mut descs)
            .unwrap()
            .unwrap();
        let f = assemble(&hdr, &descs[..info.desc_count], &mem);
        check_segment(
            &f,
            &info,
            &descs[..info.desc_count],
            TcpFlags::ACK,
            true,
            true,
        );
        let o = oracle(&f);
        assert_eq!((o.ack, o.window), (ack, window));
        out.push(f);
    }
    let l = locate_tcp(&out[0]).unwrap();
    let c = l.tcp_off + 16;
    let sums = [&out[0], &out[1]].map(|f| u16::from_be_bytes([f[c], f[c + 1]]));
    assert!(
        sums[0] == sums[1] || (sums[0] | sums[1] == 0xffff && sums[0] & sums[1] == 0),
        "checksums {sums:04x?}"
    );
    out[0][c..c + 2].copy_from_slice(&sums[1].to_be_bytes());
    assert_eq!(out[0], out[1]);
}

#[test]
fn template_updates() {
    check_update(false, false, 123_456, 4321, Some((5, 6)), 5);
    check_update(true, true, u32::MAX, 0, Some((u32::MAX, 0)), u32::MAX - 10);
    check_update(false, true, 0, u16::MAX, None, 0);
    // The template from an emitted segment's headers has the same shape.
    let (eth, ip, tcp) = reprs(false, false, true, TcpFlags::ACK);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let again = HeaderTemplate::from_headers(tpl.bytes()).unwrap();
    assert_eq!(again.header_len(), tpl.header_len());
    assert_eq!(again.seq(), tcp.seq);
}

/// An update that would change the header's shape is refused and changes
/// nothing: timestamps for a template without them, none for one with
/// them, and a timestamp option at an odd offset (which the word-wise
/// update cannot rewrite).
#[test]
fn template_updates_refused() {
    let ts = Some(TcpTimestamp { tsval: 1, tsecr: 2 });
    for (with, given) in [(false, ts), (true, None)] {
        let (eth, ip, tcp) = reprs(false, false, with, TcpFlags::ACK);
        let mut tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
        let before = tpl.clone();
        assert!(!tpl.update(SeqNumber(9), 9, given));
        assert_eq!(tpl, before);
    }
    // NOP, the timestamp (at an odd offset), NOP.
    let (eth, ip, tcp) = reprs(false, false, true, TcpFlags::ACK);
    let mut hdr = HeaderTemplate::new(&eth, &ip, &tcp)
        .unwrap()
        .bytes()
        .to_vec();
    let opts = hdr.len() - 12;
    assert_eq!(hdr[opts..opts + 4], [1, 1, 8, 10]);
    hdr.copy_within(opts + 2..opts + 12, opts + 1);
    hdr[opts + 11] = 1;
    let mut tpl = HeaderTemplate::from_headers(&hdr).unwrap();
    let before = tpl.clone();
    assert!(!tpl.update(SeqNumber(9), 9, ts));
    assert_eq!(tpl, before);
}

fn arb_burst() -> impl Strategy<Value = TcpFlags> {
    (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(p, f, c, e)| {
        let mut x = TcpFlags::ACK;
        if p {
            x |= TcpFlags::PSH;
        }
        if f {
            x |= TcpFlags::FIN;
        }
        if c {
            x |= TcpFlags::CWR;
        }
        if e {
            x |= TcpFlags::ECE;
        }
        x
    })
}

fn arb_mss() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(536usize),
        Just(1448),
        Just(1460),
        Just(8192),
        Just(8948),
        Just(32768),
        Just(61440),
        Just(65483),
        100usize..20_000,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn tso_properties(
        v6 in any::<bool>(), vlan in any::<bool>(), ts in any::<bool>(), burst in arb_burst(),
        len in prop_oneof![0usize..3000, 0usize..200_000], mss in arb_mss(), clip in any::<bool>(),
        f2k in any::<bool>(), start in 0usize..4096,
        cut in prop_oneof![Just(0usize), 1usize..5000],
    ) {
        let fsize = if f2k { FrameSize::F2048 } else { FrameSize::F4096 };
        run_tso(v6, vlan, ts, burst, len, mss, clip, fsize, start, cut);
    }

    /// [`check_update`] at any values.
    #[test]
    fn template_update_properties(
        v6 in any::<bool>(), vlan in any::<bool>(), ack in any::<u32>(), window in any::<u16>(),
        ts in proptest::option::of(any::<(u32, u32)>()), seq in any::<u32>(),
    ) {
        check_update(v6, vlan, ack, window, ts, seq);
    }
}

/// Single-descriptor layout: frames with 256 bytes of headroom, one run a
/// frame, headers written right before each run.
fn run_headroom(v6: bool, ts: bool, burst: TcpFlags, len: usize, cap: usize) {
    const HEADROOM: usize = 256;
    let fs = 4096;
    let (eth, ip, tcp) = reprs(v6, true, ts, burst);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let data = pattern(len, 77);
    let nframes = len.div_ceil(cap).max(1);
    let mut mem = vec![0u8; (nframes + 1) * fs];
    let mut runs = Vec::new();
    for (i, chunk) in data.chunks(cap).enumerate() {
        let at = (i + 1) * fs + HEADROOM;
        let sum = copy_and_sum(&mut mem[at..at + chunk.len()], chunk);
        runs.push(StreamFrame {
            addr: FrameAddr(at as u64),
            len: chunk.len() as u32,
            sum,
        });
    }
    let mut c = SegCursor::new(len, SeqNumber(9), 3, cap).unwrap();
    let nseg = runs.len();
    let mut got = Vec::new();
    let mut i = 0;
    let mut d = Desc::default();
    while let Some(r) = c.next_in_headroom(&tpl, &runs, &mut mem, &mut d) {
        let info = r.unwrap();
        assert_eq!(info.desc_count, 1);
        assert!(!d.is_contd());
        assert_eq!(
            d.addr.offset_in_frame(FrameSize::F4096) + info.header_len,
            HEADROOM
        );
        let frame = at(&mem, d.addr, d.len as usize).to_vec();
        got.extend(check_segment(
            &frame,
            &info,
            &[d],
            burst,
            i == 0,
            i + 1 == nseg,
        ));
        if !v6 {
            assert_eq!(info.ip_id, 3 + i as u16);
        }
        i += 1;
    }
    assert_eq!(i, nseg);
    assert_eq!(got, data);
}

#[test]
fn tso_single_descriptor_layout() {
    let all = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN | TcpFlags::CWR;
    for v6 in [false, true] {
        run_headroom(v6, true, all, 100_000, 3840);
        run_headroom(v6, false, TcpFlags::ACK, 3841, 3840);
        run_headroom(v6, true, all, 100, 3840);
        run_headroom(v6, true, all, 10_000, 1448);
    }
    let (eth, ip, tcp) = reprs(false, false, true, TcpFlags::ACK);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let mut mem = vec![0u8; 3 * 4096];
    let mut d = Desc::default();
    // No room before address 10 for a 66-byte header.
    let runs = [StreamFrame {
        addr: FrameAddr(10),
        len: 100,
        sum: 0,
    }];
    let mut c = SegCursor::new(100, SeqNumber(1), 0, 1448).unwrap();
    assert_eq!(
        c.next_in_headroom(&tpl, &runs, &mut mem, &mut d),
        Some(Err(SegError::NoHeadroom))
    );
    // A header-only segment has no run to carry it.
    let mut c = SegCursor::new(0, SeqNumber(1), 0, 1448).unwrap();
    assert_eq!(
        c.next_in_headroom(&tpl, &runs, &mut mem, &mut d),
        Some(Err(SegError::NoHeadroom))
    );
}

#[test]
fn hostile_descriptors_are_errors() {
    let (eth, ip, tcp) = reprs(false, false, true, TcpFlags::ACK);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let mut mem = vec![0u8; 8192];
    let mut hdr = [0u8; 128];
    let mut descs = [Desc::default(); 8];
    let mut d = Desc::default();
    // A run whose range wraps the address space.
    let wrap = [StreamFrame {
        addr: FrameAddr(u64::MAX - 10),
        len: 100,
        sum: 0,
    }];
    let mut c = SegCursor::new(100, SeqNumber(1), 0, 1448).unwrap();
    assert_eq!(
        c.next(&tpl, &wrap, &mut hdr, FrameAddr(0), &mut descs),
        Some(Err(SegError::OutOfBounds))
    );
    assert_eq!(
        c.next_in_headroom(&tpl, &wrap, &mut mem, &mut d),
        Some(Err(SegError::OutOfBounds))
    );
    // A run whose headroom lies outside the memory.
    let outside = [StreamFrame {
        addr: FrameAddr(1 << 40),
        len: 100,
        sum: 0,
    }];
    assert_eq!(
        c.next_in_headroom(&tpl, &outside, &mut mem, &mut d),
        Some(Err(SegError::OutOfBounds))
    );
}

/// Retransmission re-sends the same pages: segmenting a later range of the
/// stream (from a frame boundary, clipped MSS) gives the same segments as
/// the first transmission.
#[test]
fn retransmission_resends_the_same_segments() {
    let burst = TcpFlags::ACK;
    let (eth, ip, tcp) = reprs(false, false, true, burst);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let data = pattern(100_000, 5);
    let mss = clip_mss(8948, 4096);
    let (mem, runs) = describe(&data, 0, 4096, mss, 0);
    let seq0 = SeqNumber(1_000);
    let mut first = Vec::new();
    let mut c = SegCursor::new(data.len(), seq0, 0, mss).unwrap();
    let (mut hdr, mut descs) = ([0u8; 128], [Desc::default(); 8]);
    while let Some(r) = c.next(&tpl, &runs, &mut hdr, FrameAddr(0), &mut descs) {
        let info = r.unwrap();
        first.push(assemble(&hdr, &descs[..info.desc_count], &mem));
    }
    // Retransmit segments 3 and 4: frames 6.., 2 × 8192 bytes.
    let mut tpl_rtx = tpl.clone();
    tpl_rtx.set_flags(burst);
    let start = 3 * mss;
    let mut c = SegCursor::new(2 * mss, seq0 + start, 3, mss).unwrap();
    let mut i = 3;
    while let Some(r) = c.next(&tpl_rtx, &runs[6..], &mut hdr, FrameAddr(0), &mut descs) {
        let info = r.unwrap();
        let again = assemble(&hdr, &descs[..info.desc_count], &mem);
        assert_eq!(again, first[i]);
        i += 1;
    }
    assert_eq!(i, 5);
}
