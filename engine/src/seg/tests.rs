//! Tests of TSO, GSO and GRO: every segment is re-parsed by our parser and
//! by etherparse (checksums must verify there), payloads concatenate back
//! to the stream, the flag and IPv4-id rules hold, clipping yields whole
//! frames without reading the payload, and GRO ∘ GSO gives back the
//! original packet byte for byte.

use super::*;
use crate::frame::{Desc, FrameAddr, FrameSize};
use crate::wire::checksum::copy_and_sum;
use crate::wire::tests::{build_frame, oracle};
use crate::wire::{
    EtherType, EthernetAddress, EthernetRepr, IpProtocol, IpRepr, Ipv4Repr, Ipv6Repr, TcpOptions,
    TcpPacket, TcpRepr, TcpTimestamp, VlanTag, locate_tcp,
};
use proptest::prelude::*;
use std::cell::Cell;

/// Frame memory that counts reads.
struct Counting<'a> {
    mem: &'a [u8],
    reads: Cell<usize>,
    read_len: Cell<usize>,
}

impl FrameMemory for Counting<'_> {
    fn bytes(&self, addr: FrameAddr, len: usize) -> Option<&[u8]> {
        self.reads.set(self.reads.get() + 1);
        self.read_len.set(self.read_len.get() + len);
        self.mem.bytes(addr, len)
    }
}

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

/// Concatenates a chain: descriptor 0 from `hdr`, the rest from `mem`.
fn assemble(hdr: &[u8], descs: &[Desc], mem: &[u8]) -> Vec<u8> {
    let mut v = hdr[..descs[0].len as usize].to_vec();
    for d in &descs[1..] {
        v.extend_from_slice(mem.bytes(d.addr, d.len as usize).unwrap());
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

/// Writes `data` into frames of `fsize` bytes starting `start` bytes into
/// the first, caching each frame's sum. Frame 0 of the memory is left out
/// so that address 0 is never payload.
fn stream_frames(data: &[u8], start: usize, fsize: usize) -> (Vec<u8>, Vec<StreamFrame>) {
    let (mem, frames, _) = stream_frames_blocks(data, start, fsize);
    (mem, frames)
}

/// [`stream_frames`] with per-frame block sums.
fn stream_frames_blocks(
    data: &[u8],
    start: usize,
    fsize: usize,
) -> (Vec<u8>, Vec<StreamFrame>, Vec<BlockSums>) {
    let mut blocks = Vec::new();
    let nframes = (start + data.len()).div_ceil(fsize).max(1);
    let mut mem = vec![0u8; (nframes + 1) * fsize];
    let mut frames = Vec::new();
    let mut pos = 0;
    for i in 0..nframes {
        let base = (i + 1) * fsize;
        let off = if i == 0 { start } else { 0 };
        let take = (fsize - off).min(data.len() - pos);
        let (sum, b) =
            BlockSums::copy_and_sum(&mut mem[base + off..], &data[pos..pos + take]).unwrap();
        assert_eq!(
            sum,
            copy_and_sum(&mut [0u8; 4096][..], &data[pos..pos + take])
        );
        blocks.push(b);
        // The frame's stream bytes start at `off` (data before belongs to
        // an earlier, acknowledged part of the stream).
        frames.push(StreamFrame {
            addr: FrameAddr((base + off) as u64),
            len: take as u32,
            sum,
        });
        pos += take;
    }
    (mem, frames, blocks)
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
    fixed_id: bool,
    use_blocks: bool,
) {
    let (eth, ip, tcp) = reprs(v6, vlan, ts, burst);
    let mut tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    tpl.set_fixed_ip_id(fixed_id);
    let fs = fsize.bytes();
    let mss = if clip { clip_mss(mss, fs) } else { mss }.min(tpl.max_payload());
    // Clipping only changes anything when the MSS holds a whole frame.
    let clip = clip && mss >= fs;
    let start = if clip { 0 } else { start % fs };
    let data = pattern(len, len as u32 ^ mss as u32);
    let (mem, frames, blocks) = stream_frames_blocks(&data, start, fs);
    // Frames hold only stream bytes, so offset 0 of frames[0] is `start`.
    let counting = Counting {
        mem: &mem,
        reads: Cell::new(0),
        read_len: Cell::new(0),
    };
    let seq0 = SeqNumber(0xffff_fff0);
    let mut s = StreamSegmenter::new(&tpl, &frames, 0, len, seq0, mss).unwrap();
    if use_blocks {
        s = s.with_block_sums(&blocks);
    }
    let mut hdr = [0xa5u8; 256];
    let mut descs = [Desc::default(); 40];
    let mut got = Vec::new();
    let mut i = 0usize;
    let nseg = len.div_ceil(mss).max(1);
    while let Some(r) = s.next_segment(&counting, &mut hdr, FrameAddr(0), &mut descs) {
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
            let want = if fixed_id {
                0xfff0
            } else {
                0xfff0u16.wrapping_add(i as u16)
            };
            assert_eq!(info.ip_id, want);
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
    assert_eq!(got, data);
    if clip {
        assert_eq!(
            counting.reads.get(),
            0,
            "clipped segmentation read the payload"
        );
    }
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
    let f4k = FrameSize::F4096;
    for blocks in [false, true] {
        run_tso(
            false, false, true, all, 100_000, 8948, true, f4k, 0, false, blocks,
        );
        run_tso(
            true, true, true, all, 100_000, 65000, true, f4k, 0, false, blocks,
        );
        run_tso(
            false, false, false, all, 100_001, 1448, false, f4k, 3001, false, blocks,
        );
        run_tso(
            false, false, true, all, 100_001, 8948, false, f4k, 1, false, blocks,
        );
        let f2k = FrameSize::F2048;
        run_tso(
            true, false, false, all, 9_000, 1448, false, f2k, 7, true, blocks,
        );
        // A header-only segment (pure FIN).
        let fin = TcpFlags::ACK | TcpFlags::FIN;
        run_tso(
            false, true, true, fin, 0, 1448, false, f4k, 0, false, blocks,
        );
    }
}

#[test]
fn tso_errors_leave_cursor() {
    let (eth, ip, tcp) = reprs(false, false, false, TcpFlags::ACK);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let data = pattern(10_000, 3);
    let (mem, frames) = stream_frames(&data, 0, 4096);
    let mut s = StreamSegmenter::new(&tpl, &frames, 0, 10_000, SeqNumber(1), 8192).unwrap();
    let mut hdr = [0u8; 128];
    let mut descs = [Desc::default(); 2];
    let r = s
        .next_segment(&mem, &mut hdr, FrameAddr(0), &mut descs)
        .unwrap();
    assert_eq!(r, Err(SegError::Descriptors { have: 2 }));
    assert_eq!(s.cursor().remaining(), 10_000);
    let r = s
        .next_segment(
            &mem,
            &mut hdr[..10],
            FrameAddr(0),
            &mut [Desc::default(); 4],
        )
        .unwrap();
    assert_eq!(r, Err(SegError::HeaderBuffer { need: 54 }));
    // Asking for more than the frames hold.
    let mut s = StreamSegmenter::new(&tpl, &frames, 0, 20_000, SeqNumber(1), 8192).unwrap();
    let mut descs = [Desc::default(); 8];
    assert!(
        s.next_segment(&mem, &mut hdr, FrameAddr(0), &mut descs)
            .unwrap()
            .is_ok()
    );
    assert_eq!(
        s.next_segment(&mem, &mut hdr, FrameAddr(0), &mut descs)
            .unwrap(),
        Err(SegError::ShortStream)
    );
    assert_eq!(
        StreamSegmenter::new(&tpl, &frames, 0, 1, SeqNumber(1), 0).err(),
        Some(SegError::ZeroMss)
    );
    // Frames pointing outside the memory.
    let bad = [StreamFrame {
        addr: FrameAddr(1 << 40),
        len: 4096,
        sum: 0,
    }];
    let mut s = StreamSegmenter::new(&tpl, &bad, 0, 4096, SeqNumber(1), 1000).unwrap();
    assert_eq!(
        s.next_segment(&mem, &mut hdr, FrameAddr(0), &mut descs)
            .unwrap(),
        Err(SegError::OutOfBounds)
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
    let (mem, frames) = stream_frames(&data, 0, 4096);
    let mut out = Vec::new();
    for t in [&tpl, &fresh] {
        let mut s = StreamSegmenter::new(t, &frames, 0, 1000, SeqNumber(seq), 1448).unwrap();
        let mut hdr = [0u8; 128];
        let mut descs = [Desc::default(); 4];
        let info = s
            .next_segment(&mem, &mut hdr, FrameAddr(0), &mut descs)
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
        f2k in any::<bool>(), start in 0usize..4096, fixed_id in any::<bool>(), blocks in any::<bool>(),
    ) {
        let fsize = if f2k { FrameSize::F2048 } else { FrameSize::F4096 };
        run_tso(v6, vlan, ts, burst, len, mss, clip, fsize, start, fixed_id, blocks);
    }

    /// [`check_update`] at any values.
    #[test]
    fn template_update_properties(
        v6 in any::<bool>(), vlan in any::<bool>(), ack in any::<u32>(), window in any::<u16>(),
        ts in proptest::option::of(any::<(u32, u32)>()), seq in any::<u32>(),
    ) {
        check_update(v6, vlan, ack, window, ts, seq);
    }

    /// GSO splits correctly, and GRO merges the pieces back into the
    /// original packet, byte for byte.
    #[test]
    fn gso_then_gro_roundtrip(
        v6 in any::<bool>(), vlan in any::<bool>(), ts in any::<bool>(), burst in arb_burst(),
        len in 1usize..65000, mss in prop_oneof![Just(536usize), Just(1448), 400usize..9000],
        head_payload in 0usize..3000, chunk in 512usize..5000, verify in any::<bool>(),
    ) {
        gso_gro(v6, vlan, ts, burst, len, mss, head_payload, chunk, verify);
    }
}

#[allow(clippy::too_many_arguments)]
fn gso_gro(
    v6: bool,
    vlan: bool,
    ts: bool,
    burst: TcpFlags,
    len: usize,
    mss: usize,
    head_payload: usize,
    chunk: usize,
    verify: bool,
) -> usize {
    let (eth, ip, mut tcp) = reprs(v6, vlan, ts, burst);
    tcp.seq = SeqNumber(0xffff_ff00);
    let max = HeaderTemplate::new(&eth, &ip, &tcp).unwrap().max_payload();
    let len = len.min(max);
    let data = pattern(len, (len * 7 + mss) as u32);
    let pkt = build_frame(&eth, &ip, &tcp, &data);
    let hl = pkt.len() - len;
    // Lay the packet out as a chain: headers + some payload, then chunks,
    // each in its own 8 KiB slot of memory (at odd offsets to exercise
    // the odd-offset sums).
    let mut mem = vec![0u8; 8192];
    let mut chain = Vec::new();
    let mut pos = 0;
    let mut first_len = (hl + head_payload).min(pkt.len());
    while pos < pkt.len() {
        let take = if chain.is_empty() {
            first_len
        } else {
            chunk.min(pkt.len() - pos)
        };
        let base = mem.len() + 1;
        mem.resize(base + take.max(8191), 0);
        mem[base..base + take].copy_from_slice(&pkt[pos..pos + take]);
        chain.push(Desc::new(FrameAddr(base as u64), take as u32, true));
        pos += take;
        first_len = 0;
    }
    chain.last_mut().unwrap().options = 0;
    let mut gso = match Gso::new(&chain, &mem, mss) {
        Err(SegError::NoSplitNeeded) => {
            assert!(len <= mss);
            return 0;
        }
        r => r.unwrap(),
    };
    // Emit every segment; keep its header bytes and payload descriptors.
    let mut segs: Vec<(Vec<u8>, Vec<Desc>)> = Vec::new();
    let mut got = Vec::new();
    let nseg = len.div_ceil(mss);
    let mut hdr = [0xa5u8; 256];
    let mut descs = [Desc::default(); 64];
    while let Some(r) = gso.next_segment(&mut hdr, FrameAddr(0), &mut descs) {
        let info = r.unwrap();
        let c = &descs[..info.desc_count];
        let frame = assemble(&hdr, c, &mem);
        let i = segs.len();
        got.extend(check_segment(
            &frame,
            &info,
            c,
            burst,
            i == 0,
            i + 1 == nseg,
        ));
        segs.push((hdr[..info.header_len].to_vec(), c[1..].to_vec()));
    }
    assert_eq!(segs.len(), nseg);
    assert_eq!(got, data);

    // GRO: put each header into its own slot, chain it to its payload.
    let mut rx = mem.clone();
    let mut gro = Gro::new(if verify {
        RxChecksum::Verify
    } else {
        RxChecksum::Trust
    });
    let mut merged = Vec::new();
    let mut out_hdr = [0xa5u8; 256];
    let mut out = [Desc::default(); 80];
    let mut chains = Vec::new();
    for (h, p) in &segs {
        let base = rx.len();
        rx.extend_from_slice(h);
        let mut c = vec![Desc::new(
            FrameAddr(base as u64),
            h.len() as u32,
            !p.is_empty(),
        )];
        c.extend_from_slice(p);
        chains.push(c);
    }
    for c in &chains {
        match gro.push(c, &rx).unwrap() {
            GroOutcome::Held => {}
            GroOutcome::HeldFlush => {
                let info = gro
                    .take(&mut out_hdr, FrameAddr(0), &mut out)
                    .unwrap()
                    .unwrap();
                merged.push(assemble(&out_hdr, &out[..info.desc_count], &rx));
            }
            GroOutcome::Mismatch => {
                let info = gro
                    .take(&mut out_hdr, FrameAddr(0), &mut out)
                    .unwrap()
                    .unwrap();
                merged.push(assemble(&out_hdr, &out[..info.desc_count], &rx));
                match gro.push(c, &rx).unwrap() {
                    GroOutcome::Held => {}
                    GroOutcome::HeldFlush => {
                        let info = gro
                            .take(&mut out_hdr, FrameAddr(0), &mut out)
                            .unwrap()
                            .unwrap();
                        merged.push(assemble(&out_hdr, &out[..info.desc_count], &rx));
                    }
                    other => panic!("after a flush: {other:?}"),
                }
            }
            GroOutcome::Bypass => panic!("GSO output must be mergeable"),
        }
    }
    if let Some(r) = gro.take(&mut out_hdr, FrameAddr(0), &mut out) {
        let info = r.unwrap();
        merged.push(assemble(&out_hdr, &out[..info.desc_count], &rx));
    }
    // Segments are merged back into whole packets; with the first segment
    // setting the size, every merge ends only at the end (or at the 64
    // descriptor limit), and concatenated they are the original stream.
    let mut stream = Vec::new();
    for m in &merged {
        let o = oracle(m);
        stream.extend(o.payload);
    }
    assert_eq!(stream, data);
    if merged.len() == 1 {
        assert_eq!(merged[0], pkt, "GRO(GSO(p)) != p");
    }
    merged.len()
}

#[test]
fn gso_gro_fixed_cases() {
    let all = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN | TcpFlags::CWR;
    for (v6, verify) in [(false, false), (false, true), (true, false), (true, true)] {
        assert_eq!(
            gso_gro(v6, true, true, all, 60_000, 8000, 100, 4096, verify),
            1
        );
        assert_eq!(
            gso_gro(
                v6,
                false,
                false,
                TcpFlags::ACK,
                40_000,
                1448,
                0,
                3000,
                verify
            ),
            1
        );
    }
    // 122 segments of 536 bytes (138 payload pieces with the 16 chunk
    // boundaries) exceed the 64-descriptor chain: three merges.
    assert_eq!(
        gso_gro(false, false, true, all, 65_000, 536, 0, 4096, true),
        3
    );
    // Fits the MSS: GSO declines.
    assert_eq!(
        gso_gro(false, false, true, all, 1000, 1448, 0, 4096, true),
        0
    );
}

/// Builds one TCP/IPv4 segment into `mem` at a fresh address; returns its chain.
struct RxBuilder {
    mem: Vec<u8>,
}

impl RxBuilder {
    fn seg(
        &mut self,
        f: impl FnOnce(&mut Ipv4Repr, &mut TcpRepr),
        payload_len: usize,
    ) -> Vec<Desc> {
        let (eth, ip, mut tcp) = reprs(false, false, true, TcpFlags::ACK);
        let IpRepr::V4(mut ip4) = ip else {
            unreachable!()
        };
        f(&mut ip4, &mut tcp);
        let payload = pattern(payload_len, tcp.seq.0);
        let frame = build_frame(&eth, &IpRepr::V4(ip4), &tcp, &payload);
        let base = self.mem.len();
        self.mem.extend_from_slice(&frame);
        self.mem.resize(base + 4096, 0);
        vec![Desc::new(FrameAddr(base as u64), frame.len() as u32, false)]
    }
}

#[test]
fn gro_rules() {
    let mut rx = RxBuilder { mem: vec![0; 64] };
    let s0 = 1000u32;
    let mk = |rx: &mut RxBuilder, i: u32, f: &dyn Fn(&mut Ipv4Repr, &mut TcpRepr)| {
        rx.seg(
            |ip, t| {
                t.seq = SeqNumber(s0 + i * 1000);
                ip.ident = 10 + i as u16;
                f(ip, t)
            },
            1000,
        )
    };
    let a = mk(&mut rx, 0, &|_, _| {});
    let b = mk(&mut rx, 1, &|_, _| {});
    let gap = mk(&mut rx, 3, &|ip, _| ip.ident = 12);
    let ece = mk(&mut rx, 2, &|_, t| t.flags |= TcpFlags::ECE);
    let cwr = mk(&mut rx, 2, &|_, t| t.flags |= TcpFlags::CWR);
    let port = mk(&mut rx, 2, &|_, t| t.src_port += 1);
    let ack = mk(&mut rx, 2, &|_, t| t.ack += 1);
    let win = mk(&mut rx, 2, &|_, t| t.window += 1);
    let tsopt = mk(&mut rx, 2, &|_, t| {
        t.options.timestamp = Some(TcpTimestamp { tsval: 9, tsecr: 2 })
    });
    let addr = mk(&mut rx, 2, &|ip, _| ip.src = [10, 0, 0, 9].into());
    let ttl = mk(&mut rx, 2, &|ip, _| ip.ttl = 3);
    let id_jump = mk(&mut rx, 2, &|ip, _| ip.ident = 99);
    let syn = mk(&mut rx, 2, &|_, t| t.flags |= TcpFlags::SYN);
    let bigger = rx.seg(
        |ip, t| {
            t.seq = SeqNumber(s0 + 2000);
            ip.ident = 12
        },
        1001,
    );
    let empty = rx.seg(
        |ip, t| {
            t.seq = SeqNumber(s0 + 2000);
            ip.ident = 12
        },
        0,
    );
    let good = mk(&mut rx, 2, &|_, _| {});
    let psh = mk(&mut rx, 3, &|_, t| t.flags |= TcpFlags::PSH);
    let short = rx.seg(
        |ip, t| {
            t.seq = SeqNumber(s0 + 3000);
            ip.ident = 13
        },
        500,
    );
    let mem = &rx.mem;

    for policy in [RxChecksum::Trust, RxChecksum::Verify] {
        let mut g = Gro::new(policy);
        assert_eq!(g.push(&a, mem), Ok(GroOutcome::Held));
        assert_eq!(g.push(&b, mem), Ok(GroOutcome::Held));
        for (name, c) in [
            ("gap", &gap),
            ("ECE", &ece),
            ("CWR", &cwr),
            ("port", &port),
            ("ack", &ack),
            ("window", &win),
            ("options", &tsopt),
            ("address", &addr),
            ("TTL", &ttl),
            ("IP id", &id_jump),
            ("SYN", &syn),
            ("bigger", &bigger),
            ("no payload", &empty),
        ] {
            assert_eq!(g.push(c, mem), Ok(GroOutcome::Mismatch), "{name}");
            assert_eq!(g.held_segments(), 2, "{name}");
        }
        assert_eq!(g.push(&good, mem), Ok(GroOutcome::Held));
        assert_eq!(g.push(&psh, mem), Ok(GroOutcome::HeldFlush));
        // A merge that ended takes nothing more.
        assert_eq!(g.push(&short, mem), Ok(GroOutcome::Mismatch));
        let mut hdr = [0u8; 128];
        let mut out = [Desc::default(); 8];
        let info = g.take(&mut hdr, FrameAddr(0), &mut out).unwrap().unwrap();
        assert_eq!(
            (info.payload_len, info.desc_count, info.seq),
            (4000, 5, SeqNumber(s0))
        );
        assert_eq!(info.flags, TcpFlags::ACK | TcpFlags::PSH);
        let f = assemble(&hdr, &out[..info.desc_count], mem);
        let o = oracle(&f);
        assert_eq!(o.ip_id, Some(10));
        assert_eq!(o.payload.len(), 4000);
        assert!(g.take(&mut hdr, FrameAddr(0), &mut out).is_none());
        // Unmergeable with nothing held: bypass.
        assert_eq!(g.push(&empty, mem), Ok(GroOutcome::Bypass));
        assert_eq!(g.push(&syn, mem), Ok(GroOutcome::Bypass));
        // A short segment ends a merge.
        assert_eq!(g.push(&psh.clone(), mem), Ok(GroOutcome::HeldFlush));
        g.take(&mut hdr, FrameAddr(0), &mut out).unwrap().unwrap();
        assert_eq!(g.push(&good, mem), Ok(GroOutcome::Held));
        assert_eq!(g.push(&short, mem), Ok(GroOutcome::HeldFlush));
        let info = g.take(&mut hdr, FrameAddr(0), &mut out).unwrap().unwrap();
        assert_eq!(info.payload_len, 1500);
        oracle(&assemble(&hdr, &out[..info.desc_count], mem));
    }

    // A size cap: three 1000-byte segments fit in 3000, the fourth does not.
    let mut g = Gro::new(RxChecksum::Trust).with_max_payload(3000);
    assert_eq!(g.push(&a, mem), Ok(GroOutcome::Held));
    assert_eq!(g.push(&b, mem), Ok(GroOutcome::Held));
    assert_eq!(g.push(&good, mem), Ok(GroOutcome::Held));
    assert_eq!(g.push(&psh, mem), Ok(GroOutcome::Mismatch));
    assert_eq!(g.held_segments(), 3);

    // A corrupted payload: refused when verifying, taken on trust.
    let mut bad_mem = rx.mem.clone();
    bad_mem[b[0].addr.0 as usize + 100] ^= 0x40;
    let mut g = Gro::new(RxChecksum::Verify);
    assert_eq!(g.push(&a, &bad_mem), Ok(GroOutcome::Held));
    assert_eq!(
        g.push(&b, &bad_mem),
        Err(SegError::Wire(crate::wire::Error::Checksum))
    );
    assert_eq!(g.held_segments(), 1);
    let mut g = Gro::new(RxChecksum::Trust);
    assert_eq!(g.push(&b, &bad_mem), Ok(GroOutcome::Held));
    // Garbage is an error, not a panic.
    assert!(
        g.push(&[Desc::new(FrameAddr(0), 10, false)], &bad_mem)
            .is_err()
    );
    assert!(g.push(&[], &bad_mem).is_err());
    assert_eq!(
        g.push(&[Desc::new(FrameAddr(1 << 40), 100, false)], &bad_mem),
        Err(SegError::OutOfBounds)
    );
}

/// Single-descriptor layout: frames with 256 bytes of headroom, headers
/// written right before each frame's payload.
fn run_headroom(v6: bool, ts: bool, burst: TcpFlags, len: usize, mss: usize) {
    const HEADROOM: usize = 256;
    let fs = 4096;
    let cap = fs - HEADROOM;
    let (eth, ip, tcp) = reprs(v6, true, ts, burst);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let data = pattern(len, 77);
    let nframes = len.div_ceil(cap).max(1);
    let mut mem = vec![0u8; (nframes + 1) * fs];
    let mut frames = Vec::new();
    for (i, chunk) in data.chunks(cap).enumerate() {
        let at = (i + 1) * fs + HEADROOM;
        let sum = copy_and_sum(&mut mem[at..], chunk);
        frames.push(StreamFrame {
            addr: FrameAddr(at as u64),
            len: chunk.len() as u32,
            sum,
        });
    }
    let mut s = StreamSegmenter::new(&tpl, &frames, 0, len, SeqNumber(9), mss).unwrap();
    let nseg = frames.len();
    let mut got = Vec::new();
    let mut i = 0;
    let mut d = Desc::default();
    while let Some(r) = s.next_in_headroom(&mut mem, &mut d) {
        let info = r.unwrap();
        assert_eq!(info.desc_count, 1);
        assert!(!d.is_contd());
        assert_eq!(
            d.addr.offset_in_frame(FrameSize::F4096) + info.header_len,
            HEADROOM
        );
        let frame = mem.bytes(d.addr, d.len as usize).unwrap().to_vec();
        got.extend(check_segment(
            &frame,
            &info,
            &[d],
            burst,
            i == 0,
            i + 1 == nseg,
        ));
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
        run_headroom(v6, false, TcpFlags::ACK, 3841, 65000);
        run_headroom(v6, true, all, 100, 3840);
    }
    // An MSS below the frame payload would start the next segment mid-frame,
    // where there is no headroom: refused, not corrupted.
    let (eth, ip, tcp) = reprs(false, false, true, TcpFlags::ACK);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let mut mem = vec![0u8; 3 * 4096];
    let frames = [StreamFrame {
        addr: FrameAddr(4096 + 256),
        len: 3840,
        sum: 0,
    }];
    let mut s = StreamSegmenter::new(&tpl, &frames, 0, 3840, SeqNumber(1), 1448).unwrap();
    let mut d = Desc::default();
    assert!(s.next_in_headroom(&mut mem, &mut d).unwrap().is_ok());
    assert_eq!(
        s.next_in_headroom(&mut mem, &mut d).unwrap(),
        Err(SegError::NoHeadroom)
    );
    // No room before address 10 for a 66-byte header.
    let frames = [StreamFrame {
        addr: FrameAddr(10),
        len: 100,
        sum: 0,
    }];
    let mut s = StreamSegmenter::new(&tpl, &frames, 0, 100, SeqNumber(1), 1448).unwrap();
    assert_eq!(
        s.next_in_headroom(&mut mem, &mut d).unwrap(),
        Err(SegError::NoHeadroom)
    );
}

#[test]
fn hostile_descriptors_are_errors() {
    let (eth, ip, tcp) = reprs(false, false, true, TcpFlags::ACK);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let mem = vec![0u8; 8192];
    let mut hdr = [0u8; 128];
    let mut descs = [Desc::default(); 8];
    // A frame whose range wraps the address space.
    let wrap = [StreamFrame {
        addr: FrameAddr(u64::MAX - 10),
        len: 4096,
        sum: 0,
    }];
    let mut s = StreamSegmenter::new(&tpl, &wrap, 5, 100, SeqNumber(1), 1448).unwrap();
    assert_eq!(
        s.next_segment(&mem, &mut hdr, FrameAddr(0), &mut descs)
            .unwrap(),
        Err(SegError::OutOfBounds)
    );
    let mut m = mem.clone();
    let mut d = Desc::default();
    let mut s = StreamSegmenter::new(&tpl, &wrap, 0, 100, SeqNumber(1), 1448).unwrap();
    assert_eq!(
        s.next_in_headroom(&mut m, &mut d).unwrap(),
        Err(SegError::OutOfBounds)
    );

    // GRO/GSO: a segment whose IP length claims more than its chain holds,
    // and a chain pointing outside the memory.
    let payload = pattern(3000, 1);
    let frame = build_frame(&eth, &ip, &tcp, &payload);
    let mut rx = vec![0u8; 8192];
    rx[..frame.len()].copy_from_slice(&frame);
    let short = [Desc::new(FrameAddr(0), (frame.len() - 100) as u32, false)];
    let outside = [
        Desc::new(FrameAddr(0), 1000, true),
        Desc::new(FrameAddr(u64::MAX - 5), 2066, false),
    ];
    for policy in [RxChecksum::Trust, RxChecksum::Verify] {
        let mut g = Gro::new(policy);
        assert_eq!(g.push(&short, &rx), Err(SegError::ShortStream));
        assert_eq!(g.push(&outside, &rx), Err(SegError::OutOfBounds));
        assert!(!g.is_holding());
    }
    assert_eq!(
        Gso::new(&short, &rx, 1000).err(),
        Some(SegError::ShortStream)
    );
    assert_eq!(
        Gso::new(&outside, &rx, 1000).err(),
        Some(SegError::OutOfBounds)
    );
}

/// A send buffer described at write time as pieces cut at frame *and* MSS
/// boundaries (each piece's sum cached by `copy_and_sum`): segmentation
/// with an MSS below the frame size then never reads the payload either.
#[test]
fn tso_mss_cut_pieces_read_nothing() {
    for (v6, mss, len) in [
        (false, 1448, 100_000),
        (true, 1428, 65_537),
        (false, 536, 9_000),
    ] {
        let burst = TcpFlags::ACK | TcpFlags::PSH;
        let (eth, ip, tcp) = reprs(v6, false, true, burst);
        let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
        let data = pattern(len, 11);
        let fs = 4096;
        let mut mem = vec![0u8; (len / fs + 2) * fs];
        let mut pieces = Vec::new();
        let mut pos = 0;
        while pos < len {
            let to_frame_end = fs - pos % fs;
            let to_seg_end = mss - pos % mss;
            let take = to_frame_end.min(to_seg_end).min(len - pos);
            let at = fs + pos;
            let sum = copy_and_sum(&mut mem[at..], &data[pos..pos + take]);
            pieces.push(StreamFrame {
                addr: FrameAddr(at as u64),
                len: take as u32,
                sum,
            });
            pos += take;
        }
        let counting = Counting {
            mem: &mem,
            reads: Cell::new(0),
            read_len: Cell::new(0),
        };
        let mut s = StreamSegmenter::new(&tpl, &pieces, 0, len, SeqNumber(3), mss).unwrap();
        let (mut hdr, mut descs) = ([0u8; 128], [Desc::default(); 8]);
        let nseg = len.div_ceil(mss);
        let (mut i, mut got) = (0, Vec::new());
        while let Some(r) = s.next_segment(&counting, &mut hdr, FrameAddr(0), &mut descs) {
            let info = r.unwrap();
            let chain = &descs[..info.desc_count];
            let frame = assemble(&hdr, chain, &mem);
            got.extend(check_segment(
                &frame,
                &info,
                chain,
                burst,
                i == 0,
                i + 1 == nseg,
            ));
            i += 1;
        }
        assert_eq!((i, got == data), (nseg, true));
        assert_eq!(counting.reads.get(), 0);
    }
}

/// Retransmission re-sends the same pages: segmenting a later range of the
/// stream (from a frame boundary, clipped MSS) gives the same segments as
/// the first transmission and reads nothing.
#[test]
fn retransmission_reads_nothing() {
    let burst = TcpFlags::ACK;
    let (eth, ip, tcp) = reprs(false, false, true, burst);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let data = pattern(100_000, 5);
    let (mem, frames) = stream_frames(&data, 0, 4096);
    let mss = clip_mss(8948, 4096);
    let seq0 = SeqNumber(1_000);
    let mut first = Vec::new();
    let mut s = StreamSegmenter::new(&tpl, &frames, 0, data.len(), seq0, mss).unwrap();
    let (mut hdr, mut descs) = ([0u8; 128], [Desc::default(); 8]);
    while let Some(r) = s.next_segment(&mem, &mut hdr, FrameAddr(0), &mut descs) {
        let info = r.unwrap();
        first.push(assemble(&hdr, &descs[..info.desc_count], &mem));
    }
    // Retransmit segments 3 and 4: frames 6.., 2 × 8192 bytes.
    let counting = Counting {
        mem: &mem,
        reads: Cell::new(0),
        read_len: Cell::new(0),
    };
    let mut tpl_rtx = tpl.clone();
    tpl_rtx.set_flags(burst);
    let start = 3 * mss;
    let mut s =
        StreamSegmenter::new(&tpl_rtx, &frames[6..], 0, 2 * mss, seq0 + start, mss).unwrap();
    let mut i = 3;
    while let Some(r) = s.next_segment(&counting, &mut hdr, FrameAddr(0), &mut descs) {
        let info = r.unwrap();
        let again = assemble(&hdr, &descs[..info.desc_count], &mem);
        let (o1, o2) = (oracle(&first[i]), oracle(&again));
        assert_eq!((o1.seq, &o1.payload), (o2.seq, &o2.payload));
        i += 1;
    }
    assert_eq!(i, 5);
    assert_eq!(counting.reads.get(), 0);
}
