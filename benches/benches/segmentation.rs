//! Segmentation: TSO by reference (segments/s; multiply by the MSS for the
//! payload rate), and one header emit + checksum done three ways (template,
//! Repr emitters, etherparse).

#![deny(unsafe_code)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;
use xtcp_benches::ThreadCpuTime;
use xtcp_benches::pattern;
use xtcp_engine::frame::{Desc, FrameAddr};
use xtcp_engine::seg::{HeaderTemplate, SegCursor, StreamFrame, clip_mss};
use xtcp_engine::wire::checksum;
use xtcp_engine::wire::{
    EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol, IpRepr, Ipv4Packet,
    Ipv4Repr, Ipv6Repr, SeqNumber, TcpFlags, TcpOptions, TcpPacket, TcpRepr, TcpTimestamp,
};

const FRAME: usize = 4096;
const STREAM: usize = 1 << 20;

fn reprs(v6: bool) -> (EthernetRepr, IpRepr, TcpRepr) {
    let eth = EthernetRepr {
        dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
        src: EthernetAddress([2, 0, 0, 0, 0, 1]),
        vlan: None,
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
            flow_label: 0,
        })
    } else {
        IpRepr::V4(Ipv4Repr {
            src: [10, 0, 0, 1].into(),
            dst: [10, 0, 0, 2].into(),
            protocol: IpProtocol::TCP,
            payload_len: 0,
            ttl: 64,
            dscp_ecn: 0,
            ident: 1,
            dont_frag: true,
        })
    };
    let tcp = TcpRepr {
        src_port: 5201,
        dst_port: 40000,
        seq: SeqNumber(1),
        ack: SeqNumber(1),
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window: 1000,
        urgent: 0,
        options: TcpOptions {
            timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 2 }),
            ..TcpOptions::NONE
        },
    };
    (eth, ip, tcp)
}

/// A 1 MiB send stream in 4 KiB frames, described as the send buffer hands
/// it to `seg`: runs cut at frame and MSS boundaries, each with its sum
/// (cached when written), so no segment boundary falls inside a run; an
/// MSS of whole frames gives whole-frame runs. `seg` reads no payload, so
/// the bytes themselves need not be in memory: only their sums are.
fn stream(mss: usize) -> Vec<StreamFrame> {
    let data = pattern(STREAM, 5);
    let mut runs = Vec::new();
    let mut pos = 0;
    while pos < STREAM {
        let take = (FRAME - pos % FRAME).min(mss - pos % mss).min(STREAM - pos);
        runs.push(StreamFrame {
            addr: FrameAddr((FRAME + pos) as u64),
            len: take as u32,
            sum: checksum::sum(&data[pos..pos + take]),
        });
        pos += take;
    }
    runs
}

fn tso(c: &mut Criterion<ThreadCpuTime>) {
    let mut g = c.benchmark_group("tso");
    for v6 in [false, true] {
        let (eth, ip, tcp) = reprs(v6);
        let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
        for (name, mss) in [
            ("1448", 1448usize),
            ("8192_clipped", clip_mss(8948, FRAME)),
            ("8948", 8948),
            ("32768", 32768),
            ("61440", 61440),
        ] {
            let runs = stream(mss);
            let nseg = STREAM.div_ceil(mss);
            g.throughput(Throughput::Elements(nseg as u64));
            let id = BenchmarkId::new(if v6 { "ipv6" } else { "ipv4" }, name);
            let mut hdr = [0u8; 128];
            let mut descs = [Desc::default(); 24];
            g.bench_function(id, |b| {
                b.iter(|| {
                    let mut s = SegCursor::new(STREAM, SeqNumber(1), 1, mss).unwrap();
                    let mut n = 0;
                    while let Some(r) = s.next(&tpl, &runs, &mut hdr, FrameAddr(0), &mut descs) {
                        let info = r.unwrap();
                        black_box(&descs[..info.desc_count]);
                        n += 1;
                    }
                    black_box(&hdr);
                    n
                })
            });
        }
    }
    g.finish();
}

/// Headers for one 1448-byte TCP/IPv4 segment with correct checksums.
fn emit(c: &mut Criterion<ThreadCpuTime>) {
    let (eth, ip, tcp) = reprs(false);
    let IpRepr::V4(ip4) = ip else { unreachable!() };
    let payload = pattern(1448, 3);
    let payload_sum = checksum::sum(&payload);
    let tpl = HeaderTemplate::new(&eth, &ip, &tcp).unwrap();
    let hl = tpl.header_len();
    let mut g = c.benchmark_group("emit_1448");
    g.throughput(Throughput::Elements(1));
    let mut hdr = [0u8; 128];
    g.bench_function("xtcp_template_cached_sum", |b| {
        let mut seq = SeqNumber(1);
        b.iter(|| {
            seq += 1448;
            tpl.write(&mut hdr, seq, 7, tcp.flags, 1448, black_box(payload_sum))
                .unwrap();
            black_box(&hdr);
        })
    });
    g.bench_function("xtcp_template_sum_payload", |b| {
        let mut seq = SeqNumber(1);
        b.iter(|| {
            seq += 1448;
            let s = checksum::sum(black_box(&payload));
            tpl.write(&mut hdr, seq, 7, tcp.flags, 1448, s).unwrap();
            black_box(&hdr);
        })
    });
    let mut frame = vec![0u8; hl + 1448];
    frame[hl..].copy_from_slice(&payload);
    g.bench_function("xtcp_repr_emit", |b| {
        let mut seq = SeqNumber(1);
        b.iter(|| {
            seq += 1448;
            let t = TcpRepr { seq, ..tcp };
            let ip = Ipv4Repr {
                payload_len: t.header_len() + 1448,
                ..ip4
            };
            eth.emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
            ip.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..]));
            let mut p = TcpPacket::new_unchecked(&mut frame[34..]);
            t.emit(&mut p).unwrap();
            p.fill_checksum(checksum::pseudo_v4(
                ip.src,
                ip.dst,
                6,
                ip.payload_len as u32,
            ));
            black_box(&frame);
        })
    });
    g.bench_function("etherparse", |b| {
        use etherparse::{
            EtherType as E, Ethernet2Header, Ipv4Header, TcpHeader, TcpOptionElement,
        };
        let mut seq = 1u32;
        b.iter(|| {
            seq = seq.wrapping_add(1448);
            let e = Ethernet2Header {
                source: eth.src.0,
                destination: eth.dst.0,
                ether_type: E::IPV4,
            };
            let mut t = TcpHeader::new(tcp.src_port, tcp.dst_port, seq, tcp.window);
            t.ack = true;
            t.psh = true;
            t.acknowledgment_number = tcp.ack.0;
            t.set_options(&[
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::Timestamp(1, 2),
            ])
            .unwrap();
            let mut i = Ipv4Header::new(
                (t.header_len() + 1448) as u16,
                64,
                etherparse::IpNumber::TCP,
                ip4.src.octets(),
                ip4.dst.octets(),
            )
            .unwrap();
            i.identification = 7;
            i.dont_fragment = true;
            i.header_checksum = i.calc_header_checksum();
            t.checksum = t.calc_checksum_ipv4(&i, black_box(&payload)).unwrap();
            let mut w = &mut hdr[..];
            e.write(&mut w).unwrap();
            i.write(&mut w).unwrap();
            t.write(&mut w).unwrap();
            black_box(&hdr);
        })
    });
    g.finish();

    // The receive side of the same job: find the layers, parse the TCP
    // header with its options, verify the TCP checksum.
    let mut g = c.benchmark_group("parse_verify_1448");
    g.throughput(Throughput::Elements(1));
    p_frame_checksum(&mut frame, &ip4, &tcp);
    g.bench_function("xtcp", |b| {
        b.iter(|| {
            let f = black_box(&frame[..]);
            let l = xtcp_engine::wire::locate_tcp(f).unwrap();
            let t = TcpPacket::new_checked(&f[l.tcp_off..l.tcp_off + l.tcp_len]).unwrap();
            let r = TcpRepr::parse(&t).unwrap();
            assert!(t.verify_checksum(l.pseudo_sum()));
            black_box(r)
        })
    });
    g.bench_function("etherparse", |b| {
        b.iter(|| {
            let f = black_box(&frame[..]);
            let p = etherparse::SlicedPacket::from_ethernet(f).unwrap();
            let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
                unreachable!()
            };
            let Some(etherparse::TransportSlice::Tcp(t)) = &p.transport else {
                unreachable!()
            };
            let want = t
                .calc_checksum_ipv4(ip.header().source(), ip.header().destination())
                .unwrap();
            assert_eq!(want, t.checksum());
            black_box(t.options_iterator().count())
        })
    });
    g.finish();
}

/// Fills in a correct TCP checksum for the bench frame.
fn p_frame_checksum(frame: &mut [u8], ip4: &Ipv4Repr, tcp: &TcpRepr) {
    let ip = Ipv4Repr {
        payload_len: tcp.header_len() + 1448,
        ..*ip4
    };
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..]));
    let mut p = TcpPacket::new_unchecked(&mut frame[34..]);
    tcp.emit(&mut p).unwrap();
    p.fill_checksum(checksum::pseudo_v4(
        ip.src,
        ip.dst,
        6,
        ip.payload_len as u32,
    ));
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(ThreadCpuTime)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = tso, emit
}
criterion_main!(benches);
