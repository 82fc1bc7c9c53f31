//! [`XskPort`]: TCP segments in and out of one AF_XDP socket.
//!
//! Receive: each packet is parsed down to TCP with
//! [`crate::wire::locate_tcp`]; packets that are not TCP to our address, IP
//! fragments, malformed headers and — under [`RxCsum::Verify`] — bad
//! checksums are counted by reason and dropped, never passed on and never a
//! panic. What is left is handed to the caller as `(source, destination,
//! header, payload parts)`, the payload in place in its receive frames: one
//! part, or one per frame of a multi-buffer chain (whose frames are held
//! until its last descriptor arrives). The frames go back to the fill ring
//! right after. Only a chain whose TCP header runs past its first frame is
//! gathered into one buffer first. An ICMP "packet too big" about a TCP
//! segment of ours (which the steering program sends here with the flow's
//! packets) is set aside for the caller ([`XskPort::too_big`]).
//!
//! Send ([`XskPort::send_segment`]): every segment goes out through `seg`.
//! Its headers come from the connection's [`HeaderTemplate`] (in a
//! [`HeaderCache`]: the acknowledgement number, window and timestamps
//! rewritten in place when they change, the template built anew only when
//! other options or the addresses do; sequence number, flags, lengths,
//! IPv4 id and both checksums are fixed up per segment), and its payload is
//! never copied:
//!
//! - chained layout ([`TxLayout::Chained`]): the headers in a frame from the
//!   pool, then descriptors that point into the send buffer's frames
//!   ([`crate::xsk::TxBatch::lend`]); the TCP checksum folds in the payload
//!   pieces' cached sums, so no payload byte is read;
//! - single-descriptor layout ([`TxLayout::Single`], for devices that take
//!   one descriptor per packet): the headers are written into the headroom of
//!   the payload's own frame and one descriptor carries both. A payload that
//!   does not start its slot, or whose frame is still being transmitted, is
//!   copied behind the headers into a pool frame instead, and counted
//!   ([`PortCounters::tx_copied`]).
//!
//! A burst of segments of whole frames ([`XskPort::send_burst`]) is cut by
//! one `seg` cursor, the ring reserved once: in the single-descriptor
//! layout each segment's headers go into its own frame's headroom, in the
//! chained layout into a pool frame followed by its frames' descriptors;
//! counted ([`PortCounters::tx_bursts`]). Other bursts go segment by
//! segment.
//!
//! A packet longer than the MTU is refused and counted: veth, for one,
//! "completes" such a frame and drops it silently.
//!
//! Hot path: no allocation (the gather buffer and frame pool are sized at
//! open), no locks, no logging; counters only.
//!
//! Call order per loop turn: [`XskPort::recv`], then the TCP core, then
//! [`XskPort::provision`] (frames for send buffers) and the application,
//! then [`XskPort::send_burst`] for a burst of segments of whole frames
//! (one `seg` cursor cuts it, the ring reserved once), else
//! [`XskPort::send_segment`] for each segment it produced (for
//! the second and later segments of a burst, [`XskPort::send_next_part`],
//! which keeps the first one's header template), then
//! [`XskPort::flush`] (kicks TX, takes back completed frames, refills the
//! fill ring).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::sendmem::UmemFrames;
use crate::frame::Desc;
use crate::seg::{FrameMemory, HeaderTemplate, SegCursor, SegError, StreamFrame};
use crate::tcp::{MAX_PIECES, Piece, Segment, SendMemory};
use crate::wire::checksum::Accumulator;
use crate::wire::{
    Error as WireError, EtherType, EthernetAddress, EthernetRepr, IpProtocol, IpRepr, Ipv4Repr,
    Ipv6Repr, SeqNumber, TcpFlags, TcpPacket, TcpRepr, TcpTimestamp, TooBig, locate_tcp,
    locate_too_big,
};
use crate::xsk::{Frame, RxDesc, TxBatch, TxDesc, Umem, Xsk};

/// One frame's bytes, addressed as UMEM addresses (for `seg`'s
/// single-descriptor layout, which writes headers by address).
struct OneFrame<'a> {
    base: crate::frame::FrameAddr,
    bytes: &'a mut [u8],
}

impl FrameMemory for OneFrame<'_> {
    fn bytes_mut(&mut self, addr: crate::frame::FrameAddr, len: usize) -> Option<&mut [u8]> {
        let start = usize::try_from(addr.0.checked_sub(self.base.0)?).ok()?;
        self.bytes.get_mut(start..start.checked_add(len)?)
    }
}

/// A payload piece as `seg` takes it: where it lies, how long, its sum.
fn stream_frame(p: &Piece) -> StreamFrame {
    StreamFrame {
        addr: p.addr,
        len: p.len as u32,
        sum: p.sum,
    }
}

/// Queues one chained segment: its header frame `hdr` (`header_len` bytes),
/// then `descs[1..]`, which point into the frames of `pieces` in order,
/// lent. Gives the header frame back if the batch has no room.
fn queue_chained(
    batch: &mut TxBatch<'_>,
    hdr: Frame,
    header_len: usize,
    descs: &[Desc],
    pieces: &[Piece],
    mem: &UmemFrames,
) -> Result<(), Frame> {
    let n = descs.len();
    batch
        .push(TxDesc {
            frame: hdr,
            offset: 0,
            len: header_len as u32,
            contd: n > 1,
        })
        .map_err(|d| d.frame)?;
    for (i, (p, d)) in pieces.iter().zip(&descs[1..]).enumerate() {
        // Every piece's frame was checked before its descriptors were made.
        let Some(frame) = mem.token(p.slot) else {
            continue;
        };
        let off = (d.addr.0 - frame.addr().0) as u32;
        batch.lend(frame, off, d.len, i + 2 < n);
    }
    Ok(())
}

/// A connection's header template and what it was built for. The sequence
/// number and flags `seg` fixes up per segment; the acknowledgement
/// number, window and timestamps, which change from burst to burst, the
/// template rewrites in place ([`HeaderTemplate::update`]); anything else
/// that differs (addresses, other options, the [`IpMarks`]) builds it anew.
#[derive(Debug, Default)]
pub struct HeaderCache {
    built: Option<(HeaderTemplate, [u8; 6], SocketAddr, SocketAddr, TcpRepr)>,
    marks: IpMarks,
    /// Templates built (for tests and counters).
    pub builds: u64,
}

/// What a connection's IP headers carry besides addresses and lengths
/// (iperf3's `-S`/`--dscp` and `-L`; a socket's `IP_TOS`, `IPV6_TCLASS`
/// and flow label). Zero: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IpMarks {
    /// The IPv4 TOS byte, or the IPv6 traffic class. Its two ECN bits are
    /// sent as 0 (Not-ECT): xtcp does not negotiate ECN, and Linux's TCP
    /// drops them from `IP_TOS` too.
    pub tos: u8,
    /// The IPv6 flow label (20 bits; IPv4 has none).
    pub flow_label: u32,
}

impl IpMarks {
    /// The ECN field of the TOS byte / traffic class.
    const ECN: u8 = 0b11;
    /// The largest flow label.
    pub const FLOW_LABEL_MAX: u32 = 0xf_ffff;
}

/// `repr` without what a template fixes up per segment or rewrites in
/// place: what decides whether a template can be kept.
fn shape(repr: &TcpRepr) -> TcpRepr {
    let mut k = *repr;
    k.seq = SeqNumber(0);
    k.flags = TcpFlags(0);
    k.ack = SeqNumber(0);
    k.window = 0;
    if let Some(ts) = k.options.timestamp.as_mut() {
        *ts = TcpTimestamp::default();
    }
    k
}

impl HeaderCache {
    /// Marks every header built from now on with `marks` (the template is
    /// built anew if they change).
    pub fn set_marks(&mut self, marks: IpMarks) {
        if marks != self.marks {
            self.marks = marks;
            self.built = None;
        }
    }

    /// The template for `repr` from `src` to `dst` via `mac`, with `repr`'s
    /// flags set; `None` if the headers cannot be built (mixed address
    /// families, too long).
    fn template(
        &mut self,
        local_mac: [u8; 6],
        mac: [u8; 6],
        src: SocketAddr,
        dst: SocketAddr,
        repr: &TcpRepr,
    ) -> Option<&HeaderTemplate> {
        let key = shape(repr);
        let kept = match &mut self.built {
            Some((tpl, m, s, d, k)) if *m == mac && *s == src && *d == dst && *k == key => {
                tpl.update(repr.ack, repr.window, repr.options.timestamp)
            }
            _ => false,
        };
        if !kept {
            let ip = match (src.ip(), dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
                    src: s,
                    dst: d,
                    protocol: IpProtocol::TCP,
                    payload_len: 0,
                    ttl: 64,
                    dscp_ecn: self.marks.tos & !IpMarks::ECN,
                    ident: 0,
                    dont_frag: true,
                }),
                (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
                    src: s,
                    dst: d,
                    next_header: IpProtocol::TCP,
                    payload_len: 0,
                    hop_limit: 64,
                    traffic_class: self.marks.tos & !IpMarks::ECN,
                    flow_label: self.marks.flow_label & IpMarks::FLOW_LABEL_MAX,
                }),
                _ => return None,
            };
            let eth = EthernetRepr {
                dst: EthernetAddress(mac),
                src: EthernetAddress(local_mac),
                vlan: None,
                ethertype: if src.is_ipv4() {
                    EtherType::IPV4
                } else {
                    EtherType::IPV6
                },
            };
            let tpl = HeaderTemplate::new(&eth, &ip, repr).ok()?;
            self.built = Some((tpl, mac, src, dst, key));
            self.builds += 1;
        }
        let (tpl, ..) = self.built.as_mut()?;
        tpl.set_flags(repr.flags);
        Some(tpl)
    }
}

/// What to do with received TCP checksums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RxCsum {
    /// Verify every segment; drop and count bad ones. For NICs.
    Verify,
    /// Accept without verifying. For a veth peer whose kernel hands over
    /// partial (pseudo-header only) checksums, which cannot be verified.
    Trust,
}

/// How a port lays out the segments it sends (DESIGN.md, "Segment layout
/// in UMEM").
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TxLayout {
    /// A header frame, then descriptors pointing into the send buffer's
    /// frames (multi-buffer AF_XDP).
    Chained,
    /// One descriptor: the headers written into the headroom of the frame
    /// that holds the payload (devices that take one descriptor per packet).
    Single,
}

/// Addressing and limits of a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Our addresses (packets to others are dropped and counted): one, or
    /// a listener's several (an interface's IPv4 and IPv6 addresses).
    pub locals: Box<[IpAddr]>,
    /// Our MAC.
    pub local_mac: [u8; 6],
    /// The next hop's MAC (frames we send go there).
    pub next_hop_mac: [u8; 6],
    /// Receive-checksum policy.
    pub rx_csum: RxCsum,
    /// The link MTU: the largest IP packet we send.
    pub mtu: usize,
    /// Transmit layout.
    pub layout: TxLayout,
}

/// Per-port counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PortCounters {
    /// TCP segments handed to the caller.
    pub rx_segments: u64,
    /// Bytes of the packets they came in.
    pub rx_bytes: u64,
    /// Packets queued for transmission.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Dropped: truncated or malformed headers.
    pub drop_malformed: u64,
    /// ICMP "packet too big" about a TCP segment of ours, set aside for
    /// the caller ([`XskPort::too_big`]).
    pub rx_too_big: u64,
    /// Of those, the ones about a flow that one was set aside for already
    /// in the same loop turn: folded into it (the least MTU said is kept),
    /// as a router refuses each large packet of a window.
    pub too_big_folded: u64,
    /// Dropped: not TCP over IPv4/IPv6 (nor a "packet too big" about it).
    pub drop_not_tcp: u64,
    /// Dropped: a "packet too big" beyond the [`TOO_BIG_MAX`] flows that
    /// the receive calls of one loop turn keep (a flood: routers limit
    /// their rate).
    pub drop_too_big: u64,
    /// Dropped: IP fragments.
    pub drop_fragment: u64,
    /// Dropped: bad TCP checksum (under [`RxCsum::Verify`]).
    pub drop_checksum: u64,
    /// Dropped: addressed to another IP address.
    pub drop_not_ours: u64,
    /// Dropped: a received chain of more than 40 descriptors, or longer
    /// than the gather buffer.
    pub drop_oversize: u64,
    /// Sends refused: the packet would exceed the MTU.
    pub tx_too_long: u64,
    /// Sends refused: no room on the TX ring.
    pub tx_ring_full: u64,
    /// Sends refused: no free frame (all in flight).
    pub tx_no_frame: u64,
    /// Single-descriptor layout: segments whose payload was copied behind
    /// a header into a frame of its own, because it did not start its
    /// send-buffer slot or that slot's frame was still being transmitted.
    pub tx_copied: u64,
    /// Segments queued as parts of a whole burst through one `seg` cursor
    /// ([`XskPort::send_burst`]).
    pub tx_bursts: u64,
}

/// One AF_XDP socket carrying TCP segments.
pub struct XskPort {
    xsk: Xsk,
    umem: Arc<Umem>,
    pool: Vec<Frame>,
    /// Descriptors of the receive chain (multi-buffer packet) so far:
    /// frame, offset, length. Held until its last part arrives, then
    /// delivered in place and returned to the fill ring.
    rx_chain: Vec<(Frame, u32, u32)>,
    /// Only for a chain whose TCP header runs past its first frame.
    gather: Vec<u8>,
    /// ICMP "packet too big" messages the receive calls found since the
    /// caller last took them ([`XskPort::too_big`]); at most
    /// [`TOO_BIG_MAX`].
    too_big: Vec<TooBig>,
    in_chain: bool,
    chain_oversize: bool,
    cfg: PortConfig,
    ip_id: u16,
    counters: PortCounters,
    /// Frames given at creation.
    frames: usize,
    /// A chained segment's pieces and descriptors, filled afresh for each
    /// (only the first ones it uses are read): kept here, so that a segment
    /// does not clear a kilobyte of stack for them.
    seg_frames: [StreamFrame; MAX_PIECES],
    seg_descs: [Desc; MAX_PIECES + 1],
}

impl std::fmt::Debug for XskPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskPort")
            .field("xsk", &self.xsk)
            .field("cfg", &self.cfg)
            .finish()
    }
}

/// Largest packet a port gathers from a receive chain.
const GATHER_LEN: usize = 65536 + 14 + 4;

/// Most descriptors in one received packet (a 64 KiB packet in 2048-byte
/// frames takes 33 or 34); longer chains are dropped as oversize.
const RX_CHAIN_MAX: usize = 40;
/// ICMP "packet too big" messages that receive calls keep for their caller
/// until it takes them (routers limit their rate: more in one loop turn is
/// a flood).
pub const TOO_BIG_MAX: usize = 64;

/// A received segment's payload: consecutive parts, each in place in its
/// receive frame (one part unless the packet spans several frames).
pub type Parts<'a> = &'a [&'a [u8]];

impl XskPort {
    /// Wraps a bound socket with `frames` of its UMEM (all of them, or this
    /// queue's share of a UMEM the queues share) and fills the fill ring.
    /// The socket should be registered with the steering program by the
    /// caller.
    pub fn new(mut xsk: Xsk, cfg: PortConfig, frames: Vec<Frame>) -> XskPort {
        let umem = xsk.umem().clone();
        let mut pool = frames;
        let frames = pool.len();
        // Room for every frame of the UMEM: frames of connections handed
        // over from another queue come back here too, without allocating.
        pool.reserve(umem.frame_count() as usize);
        let n = xsk.fill.size().min(pool.len() as u32 / 2);
        xsk.fill.fill(&mut pool, n);
        XskPort {
            xsk,
            umem,
            pool,
            rx_chain: Vec::with_capacity(RX_CHAIN_MAX),
            gather: Vec::with_capacity(GATHER_LEN),
            too_big: Vec::with_capacity(TOO_BIG_MAX),
            in_chain: false,
            chain_oversize: false,
            cfg,
            ip_id: 1,
            counters: PortCounters::default(),
            frames,
            seg_frames: [StreamFrame::default(); MAX_PIECES],
            seg_descs: [Desc::default(); MAX_PIECES + 1],
        }
    }

    /// The frames this port was given.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The counters.
    pub fn counters(&self) -> &PortCounters {
        &self.counters
    }

    /// The socket.
    pub fn xsk(&self) -> &Xsk {
        &self.xsk
    }

    /// Receives up to `max` descriptors and hands every acceptable TCP
    /// segment to `f(source, destination, header, payload parts)`: the
    /// payload stays in its receive frames (several for a multi-buffer
    /// packet) until `f` returns.
    pub fn recv(
        &mut self,
        max: u32,
        mut f: impl FnMut(SocketAddr, SocketAddr, &TcpRepr, Parts<'_>),
    ) {
        self.recv_from(max, |_, src, dst, repr, payload| f(src, dst, repr, payload));
    }

    /// Like [`XskPort::recv`], and also hands over the frame's source MAC
    /// (the next hop towards the sender, where replies go). Returns the
    /// descriptors taken from the RX ring.
    pub fn recv_from(
        &mut self,
        max: u32,
        mut f: impl FnMut([u8; 6], SocketAddr, SocketAddr, &TcpRepr, Parts<'_>),
    ) -> u32 {
        let XskPort {
            xsk,
            umem,
            pool,
            rx_chain,
            gather,
            too_big,
            in_chain,
            chain_oversize,
            cfg,
            counters,
            ..
        } = self;
        let n = xsk.rx.recv(max, |d: RxDesc| {
            if !d.contd && !*in_chain {
                let data = &umem.frame(&d.frame)[d.offset as usize..(d.offset + d.len) as usize];
                deliver(&[data], gather, too_big, cfg, counters, &mut f);
                pool.push(d.frame);
                return;
            }
            if !*in_chain {
                *chain_oversize = false;
            }
            *in_chain = d.contd;
            if rx_chain.len() < RX_CHAIN_MAX {
                rx_chain.push((d.frame, d.offset, d.len));
            } else {
                *chain_oversize = true;
                pool.push(d.frame);
            }
            if d.contd {
                return;
            }
            if *chain_oversize {
                counters.drop_oversize += 1;
            } else {
                let mut parts: [&[u8]; RX_CHAIN_MAX] = [&[]; RX_CHAIN_MAX];
                for (p, (frame, off, len)) in parts.iter_mut().zip(rx_chain.iter()) {
                    *p = &umem.frame(frame)[*off as usize..(*off + *len) as usize];
                }
                deliver(
                    &parts[..rx_chain.len()],
                    gather,
                    too_big,
                    cfg,
                    counters,
                    &mut f,
                );
            }
            pool.extend(rx_chain.drain(..).map(|(frame, _, _)| frame));
        });
        if !pool.is_empty() {
            let n = pool.len() as u32;
            xsk.fill.fill(pool, n);
        }
        n
    }

    /// The ICMP "packet too big" messages about TCP segments of ours (to
    /// one of our addresses) that receive calls found since the last call
    /// of this: the caller takes them to their connections. Counted
    /// ([`PortCounters::rx_too_big`]); more than [`TOO_BIG_MAX`] are
    /// dropped.
    pub fn too_big(&mut self) -> std::vec::Drain<'_, TooBig> {
        self.too_big.drain(..)
    }

    /// Frames and queues one segment from `src` to `dst` to the next hop
    /// `mac`: its headers from `cache` (the connection's header template,
    /// rebuilt when the acknowledgement, window or options change), written
    /// into a header frame from the pool, followed by descriptors that
    /// point into the send-buffer frames of `mem` where the payload
    /// `pieces` lie (chained layout: the payload is not copied, and its
    /// checksum comes from the pieces' cached sums). Returns false (and
    /// counts why) if it could not be queued: too long for the MTU, no room
    /// on the TX ring, or no free header frame; the caller retries later
    /// (TCP retransmits what never left).
    #[expect(clippy::too_many_arguments, reason = "one segment's every part")]
    pub fn send_segment(
        &mut self,
        mac: [u8; 6],
        src: SocketAddr,
        dst: SocketAddr,
        repr: &TcpRepr,
        pieces: &[Piece],
        mem: &mut UmemFrames,
        cache: &mut HeaderCache,
    ) -> bool {
        let local_mac = self.cfg.local_mac;
        let Some(tpl) = cache.template(local_mac, mac, src, dst, repr) else {
            self.counters.tx_too_long += 1;
            return false;
        };
        self.emit(repr, pieces, mem, tpl)
    }

    /// Frames and queues the next segment of a burst whose first segment
    /// went through [`XskPort::send_segment`] with the same `cache`: its
    /// header differs only in the sequence number and the flags, so the
    /// template is used as it is.
    pub fn send_next_part(
        &mut self,
        repr: &TcpRepr,
        pieces: &[Piece],
        mem: &mut UmemFrames,
        cache: &mut HeaderCache,
    ) -> bool {
        let Some((tpl, ..)) = cache.built.as_mut() else {
            self.counters.tx_too_long += 1;
            return false;
        };
        tpl.set_flags(repr.flags);
        self.emit(repr, pieces, mem, tpl)
    }

    /// The interface's MTU changed: segments are checked against `mtu`.
    pub fn set_mtu(&mut self, mtu: usize) {
        self.cfg.mtu = mtu;
    }

    /// Whether a burst of segments of `seg_len` payload bytes can go
    /// through [`XskPort::send_burst`]: always in the single-descriptor
    /// layout, in the chained one when each segment is whole frames (as
    /// MSS clipping makes them).
    pub fn takes_bursts_of(&self, seg_len: usize) -> bool {
        self.cfg.layout == TxLayout::Single
            || seg_len.is_multiple_of(self.umem.frame_size().bytes())
    }

    /// Frames and queues a whole burst (`seg` from
    /// [`crate::tcp::Connection::poll_transmit_gso`], `pieces` its payload)
    /// with one `seg` cursor, which advances the sequence numbers, IPv4 ids
    /// and flags (PSH and FIN on the last only), the ring reserved once.
    /// Single-descriptor layout: one piece a segment, its headers into the
    /// headroom of its slot's frame. Chained layout: each segment's headers
    /// in a frame from the pool, then the descriptors of the whole
    /// send-buffer frames it takes (their sums are the frames' own, so no
    /// payload byte is read). Returns `None`, having queued nothing, where
    /// the burst does not take this path (a piece that is not the start of
    /// its frame, or segments that are not whole frames; a frame still
    /// being transmitted; no room): the caller then sends it segment by
    /// segment. Else how many segments went out (all, but for a failure,
    /// counted, after which TCP retransmits the rest).
    #[expect(clippy::too_many_arguments, reason = "one burst's every part")]
    pub fn send_burst(
        &mut self,
        mac: [u8; 6],
        src: SocketAddr,
        dst: SocketAddr,
        seg: &Segment,
        pieces: &[Piece],
        mem: &mut UmemFrames,
        cache: &mut HeaderCache,
    ) -> Option<usize> {
        let (k, np) = (seg.count(), pieces.len());
        let ip_hl = if src.is_ipv4() { 20 } else { 40 };
        if k < 2
            || np > MAX_PIECES
            || !self.takes_bursts_of(seg.seg_len)
            || ip_hl + seg.repr.header_len() + seg.seg_len > self.cfg.mtu
        {
            return None;
        }
        let single = self.cfg.layout == TxLayout::Single;
        let fs = self.umem.frame_size().bytes();
        let whole = if single {
            np == k
                && pieces.iter().enumerate().all(|(i, p)| {
                    p.offset == 0
                        && (p.len == seg.seg_len || (i + 1 == k && p.len <= seg.seg_len))
                        && mem.token(p.slot).is_some_and(|f| !self.umem.is_lent(f))
                })
        } else {
            pieces.iter().enumerate().all(|(i, p)| {
                p.offset == 0 && (p.len == fs || i + 1 == np) && mem.token(p.slot).is_some()
            })
        };
        // Descriptors: one a segment, or a header each and the frames;
        // header frames from the pool for the chained layout.
        let (descs, headers) = if single { (k, 0) } else { (k + np, k) };
        let ring_free = (self.xsk.tx.size() - self.xsk.tx.in_flight()) as usize;
        if !whole || ring_free < descs || self.pool.len() < headers {
            return None;
        }
        let local_mac = self.cfg.local_mac;
        let tpl = cache.template(local_mac, mac, src, dst, &seg.repr)?;
        if single && mem.headroom() < tpl.header_len() {
            return None;
        }
        for (f, p) in self.seg_frames.iter_mut().zip(pieces) {
            *f = stream_frame(p);
        }
        let cursor = SegCursor::new(
            seg.len,
            seg.repr.seq,
            self.ip_id.wrapping_add(1),
            seg.seg_len,
        )
        .ok()?;
        let sent = if single {
            self.burst_in_headroom(cursor, tpl, pieces, mem)
        } else {
            self.burst_chained(cursor, tpl, pieces, mem, k)
        };
        self.ip_id = self.ip_id.wrapping_add(sent as u16);
        self.counters.tx_packets += sent as u64;
        self.counters.tx_bursts += sent as u64;
        Some(sent)
    }

    /// [`XskPort::send_burst`]'s single-descriptor layout: each segment's
    /// headers into its own frame's headroom. Returns the segments queued.
    fn burst_in_headroom(
        &mut self,
        mut cursor: SegCursor,
        tpl: &HeaderTemplate,
        pieces: &[Piece],
        mem: &mut UmemFrames,
    ) -> usize {
        let frames = &self.seg_frames[..pieces.len()];
        let mut batch = self.xsk.tx.batch(pieces.len() as u32);
        let mut sent = 0;
        for p in pieces {
            let Some(frame) = mem.token_mut(p.slot) else {
                break;
            };
            let base = frame.addr();
            let Some(bytes) = self.umem.try_frame_mut(frame) else {
                break;
            };
            let mut view = OneFrame { base, bytes };
            let mut desc = Desc::default();
            if !matches!(
                cursor.next_in_headroom(tpl, frames, &mut view, &mut desc),
                Some(Ok(_))
            ) {
                self.counters.tx_too_long += 1;
                break;
            }
            if !batch.lend(frame, (desc.addr.0 - base.0) as u32, desc.len, false) {
                break;
            }
            sent += 1;
            self.counters.tx_bytes += u64::from(desc.len);
        }
        sent
    }

    /// [`XskPort::send_burst`]'s chained layout: each of the `k` segments'
    /// headers in a frame from the pool, then its frames' descriptors.
    /// Returns the segments queued.
    fn burst_chained(
        &mut self,
        mut cursor: SegCursor,
        tpl: &HeaderTemplate,
        pieces: &[Piece],
        mem: &mut UmemFrames,
        k: usize,
    ) -> usize {
        let np = pieces.len();
        let (frames, descs) = (&self.seg_frames[..np], &mut self.seg_descs);
        let mut batch = self.xsk.tx.batch((k + np) as u32);
        let (mut sent, mut at) = (0, 0);
        for _ in 0..k {
            let Some(mut hdr) = self.pool.pop() else {
                break;
            };
            let hdr_addr = hdr.addr();
            let buf = self.umem.frame_mut(&mut hdr);
            let info = match cursor.next(tpl, frames, buf, hdr_addr, descs) {
                Some(Ok(info)) => info,
                _ => {
                    self.pool.push(hdr);
                    self.counters.tx_too_long += 1;
                    break;
                }
            };
            let n = info.desc_count;
            let rest = pieces.get(at..).unwrap_or_default();
            if let Err(hdr) =
                queue_chained(&mut batch, hdr, info.header_len, &descs[..n], rest, mem)
            {
                self.pool.push(hdr);
                break;
            }
            at += n - 1;
            sent += 1;
            self.counters.tx_bytes += (info.header_len + info.payload_len) as u64;
        }
        sent
    }

    /// One segment with the template `tpl`.
    fn emit(
        &mut self,
        repr: &TcpRepr,
        pieces: &[Piece],
        mem: &mut UmemFrames,
        tpl: &HeaderTemplate,
    ) -> bool {
        let plen: usize = pieces.iter().map(|p| p.len).sum();
        let ip_hl = if tpl.is_ipv6() { 40 } else { 20 };
        if ip_hl + repr.header_len() + plen > self.cfg.mtu || pieces.len() > MAX_PIECES {
            self.counters.tx_too_long += 1;
            return false;
        }
        let n = 1 + pieces.len();
        if self.pool.is_empty() {
            self.reap();
            if self.pool.is_empty() {
                self.counters.tx_no_frame += 1;
                return false;
            }
        }
        if ((self.xsk.tx.size() - self.xsk.tx.in_flight()) as usize) < n {
            self.counters.tx_ring_full += 1;
            return false;
        }
        // Every piece lies in a frame the connection holds (a slot is
        // written before it is sent): else nothing goes.
        if pieces.iter().any(|p| mem.token(p.slot).is_none()) {
            self.counters.tx_no_frame += 1;
            return false;
        }
        if self.cfg.layout == TxLayout::Single {
            return self.send_single(repr, pieces, plen, mem, tpl);
        }
        let (frames, descs) = (&mut self.seg_frames, &mut self.seg_descs);
        for (f, p) in frames.iter_mut().zip(pieces) {
            *f = stream_frame(p);
        }
        let Some(mut hdr) = self.pool.pop() else {
            return false;
        };
        let hdr_addr = hdr.addr();
        self.ip_id = self.ip_id.wrapping_add(1);
        // The pieces are the segment's, each with its sum: `seg` takes
        // them whole, reading no payload.
        let emitted = SegCursor::new(plen, repr.seq, self.ip_id, plen.max(1)).and_then(|mut c| {
            let buf = self.umem.frame_mut(&mut hdr);
            c.next(tpl, &frames[..pieces.len()], buf, hdr_addr, descs)
                .unwrap_or(Err(SegError::ShortStream))
        });
        let info = match emitted {
            Ok(info) => info,
            Err(_) => {
                self.pool.push(hdr);
                self.counters.tx_too_long += 1;
                return false;
            }
        };
        let mut batch = self.xsk.tx.batch(n as u32);
        if let Err(hdr) = queue_chained(&mut batch, hdr, info.header_len, &descs[..n], pieces, mem)
        {
            // Cannot happen: room for n was checked. Keep the frame.
            self.pool.push(hdr);
            return false;
        }
        drop(batch);
        let total = info.header_len + plen;
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += total as u64;
        true
    }

    /// The single-descriptor layout: the headers into the headroom of the
    /// slot's frame, right before the payload, and one descriptor for both
    /// (lent: the frame stays the connection's). A payload that does not
    /// start its slot, or whose frame is still being transmitted (its
    /// headroom cannot be rewritten), is copied behind the headers into a
    /// frame of its own instead, and counted.
    fn send_single(
        &mut self,
        repr: &TcpRepr,
        pieces: &[Piece],
        plen: usize,
        mem: &mut UmemFrames,
        tpl: &HeaderTemplate,
    ) -> bool {
        let hl = tpl.header_len();
        let fs = self.umem.frame_size().bytes();
        self.ip_id = self.ip_id.wrapping_add(1);
        if let [p] = pieces
            && p.offset == 0
            && mem.headroom() >= hl
            && let Some(frame) = mem.token_mut(p.slot)
        {
            let base = frame.addr();
            let emitted = self.umem.try_frame_mut(frame).map(|bytes| {
                let mut view = OneFrame { base, bytes };
                let sf = [stream_frame(p)];
                let mut desc = Desc::default();
                SegCursor::new(p.len, repr.seq, self.ip_id, p.len)
                    .and_then(|mut c| {
                        c.next_in_headroom(tpl, &sf, &mut view, &mut desc)
                            .unwrap_or(Err(SegError::ShortStream))
                    })
                    .map(|_| desc)
            });
            if let Some(Ok(desc)) = emitted {
                let mut batch = self.xsk.tx.batch(1);
                if batch.lend(frame, (desc.addr.0 - base.0) as u32, desc.len, false) {
                    self.counters.tx_packets += 1;
                    self.counters.tx_bytes += u64::from(desc.len);
                    return true;
                }
                return false;
            }
        }
        // A frame of its own: the headers, then the payload copied (its sum
        // is known).
        if hl + plen > fs {
            self.counters.tx_too_long += 1;
            return false;
        }
        let Some(mut frame) = self.pool.pop() else {
            return false;
        };
        let buf = self.umem.frame_mut(&mut frame);
        let mut acc = Accumulator::new(0);
        let mut at = hl;
        for p in pieces {
            buf[at..at + p.len].copy_from_slice(&mem.slot(p.slot)[p.offset..p.offset + p.len]);
            acc.add_sum(p.sum, p.len);
            at += p.len;
        }
        if tpl
            .write(
                &mut buf[..hl],
                repr.seq,
                self.ip_id,
                repr.flags,
                plen,
                acc.sum(),
            )
            .is_err()
        {
            self.pool.push(frame);
            self.counters.tx_too_long += 1;
            return false;
        }
        let mut batch = self.xsk.tx.batch(1);
        if let Err(d) = batch.push(TxDesc {
            frame,
            offset: 0,
            len: (hl + plen) as u32,
            contd: false,
        }) {
            self.pool.push(d.frame);
            return false;
        }
        if plen > 0 {
            self.counters.tx_copied += 1;
        }
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += (hl + plen) as u64;
        true
    }

    /// Frames and queues a segment without payload (an ACK, SYN, FIN or
    /// RST of a connection, or a reset for a segment that matched none).
    pub fn send_header(
        &mut self,
        mac: [u8; 6],
        src: SocketAddr,
        dst: SocketAddr,
        repr: &TcpRepr,
        cache: &mut HeaderCache,
    ) -> bool {
        self.send_segment(mac, src, dst, repr, &[], &mut UmemFrames::default(), cache)
    }

    /// TX descriptors a segment of `pieces` payload pieces takes.
    pub fn descs_for(pieces: usize) -> usize {
        1 + pieces
    }

    /// Whether a segment of `descs` descriptors can be queued now (a header
    /// frame and TX ring room), reaping completions first if needed.
    pub fn has_room(&mut self, descs: usize) -> bool {
        self.room_for(descs) > 0
    }

    /// How many segments of up to `descs` descriptors each can be queued
    /// now (each a header frame and its descriptors), reaping completions
    /// first if needed.
    pub fn room_for(&mut self, descs: usize) -> usize {
        if self.pool.is_empty() {
            self.reap();
        }
        let ring_free = (self.xsk.tx.size() - self.xsk.tx.in_flight()) as usize;
        (ring_free / descs.max(1)).min(self.pool.len())
    }

    /// Takes back the frames `mem` gave up (its limit shrank), then gives
    /// it the frames it wants for its send buffer, as long as the
    /// pool keeps `reserve` frames for headers; a send buffer with fewer
    /// than four frames may go down to half of that, so that a connection
    /// that comes late is not left without any.
    pub fn provision(&mut self, mem: &mut UmemFrames, reserve: usize) {
        mem.take_surplus(&mut self.pool);
        let mut want = mem.wants();
        let floor = if mem.frames_held() < 4 {
            reserve / 2
        } else {
            reserve
        };
        while want > 0 && self.pool.len() > floor {
            let Some(f) = self.pool.pop() else {
                break;
            };
            mem.give(f);
            want -= 1;
        }
    }

    /// Takes a finished connection's send-buffer frames back.
    pub fn take_back(&mut self, mem: &mut UmemFrames) {
        mem.release(&mut self.pool);
    }

    /// Frames in the pool now.
    pub fn pool_len(&self) -> usize {
        self.pool.len()
    }

    /// Takes back completed TX frames.
    fn reap(&mut self) {
        self.xsk.comp.complete(&mut self.pool, u32::MAX);
    }

    /// Kicks TX when descriptors wait, takes back completed frames, and tops
    /// up the fill ring.
    pub fn flush(&mut self) {
        if self.xsk.tx.in_flight() > 0 && self.xsk.tx.needs_wakeup() {
            // Transient errors (ring busy) are retried on the next flush.
            let _ = self.xsk.tx.kick();
        }
        self.reap();
        if self.xsk.fill.needs_wakeup() {
            self.xsk.fill.wakeup();
        }
    }

    /// Waits up to `timeout_ms` for received packets.
    pub fn poll(&self, timeout_ms: i32) -> bool {
        self.xsk.rx.poll(timeout_ms)
    }
}

/// Bytes `[from, to)` of the concatenation of `parts`, as parts; returns
/// how many of `out` it filled.
fn sub_parts<'a>(parts: &[&'a [u8]], from: usize, to: usize, out: &mut [&'a [u8]]) -> usize {
    let (mut at, mut n) = (0, 0);
    for p in parts {
        let (s, e) = (from.max(at), to.min(at + p.len()));
        if s < e && n < out.len() {
            out[n] = &p[s - at..e - at];
            n += 1;
        }
        at += p.len();
    }
    n
}

/// Parses one packet — whole in `parts[0]`, or in consecutive parts of a
/// receive chain — and hands its segment on with the payload in place, or
/// counts why not.
fn deliver(
    parts: &[&[u8]],
    gather: &mut Vec<u8>,
    too_big: &mut Vec<TooBig>,
    cfg: &PortConfig,
    counters: &mut PortCounters,
    f: &mut impl FnMut([u8; 6], SocketAddr, SocketAddr, &TcpRepr, Parts<'_>),
) {
    let Some(&first) = parts.first() else {
        return;
    };
    let mut src_mac = [0u8; 6];
    if let Some(b) = first.get(6..12) {
        src_mac.copy_from_slice(b);
    }
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let located = locate_tcp(first);
    let split = match &located {
        Ok(l) => l.tcp_off + l.tcp_header_len > first.len(),
        Err(_) => true,
    };
    if split && parts.len() > 1 {
        // Headers not whole in the first frame of a chain (drivers put them
        // first; this is for the rest): gather once, deliver as one part.
        if total > gather.capacity() {
            counters.drop_oversize += 1;
            return;
        }
        gather.clear();
        for p in parts {
            gather.extend_from_slice(p);
        }
        let whole = std::mem::take(gather);
        deliver(&[&whole], gather, too_big, cfg, counters, f);
        *gather = whole;
        return;
    }
    let l = match located {
        Ok(l) => l,
        Err(WireError::Fragmented) => {
            counters.drop_fragment += 1;
            return;
        }
        Err(WireError::Unsupported) => {
            // ICMP about a segment of ours: of what is not TCP, the
            // steering program sends only that here.
            match locate_too_big(first) {
                Ok(t) if parts.len() == 1 => {
                    if !cfg.locals.contains(&t.to) {
                        counters.drop_not_ours += 1;
                    } else if let Some(k) = too_big
                        .iter_mut()
                        .find(|k| k.local == t.local && k.remote == t.remote)
                    {
                        // Another about a flow one is set aside for (a
                        // router refuses each packet of a window): one
                        // goes to the connection, the least MTU said.
                        counters.rx_too_big += 1;
                        counters.too_big_folded += 1;
                        if t.mtu != 0 && (k.mtu == 0 || t.mtu < k.mtu) {
                            *k = t;
                        }
                    } else if too_big.len() < TOO_BIG_MAX {
                        counters.rx_too_big += 1;
                        too_big.push(t);
                    } else {
                        counters.drop_too_big += 1;
                    }
                }
                Err(WireError::Checksum | WireError::Malformed | WireError::Truncated) => {
                    counters.drop_malformed += 1;
                }
                _ => counters.drop_not_tcp += 1,
            }
            return;
        }
        Err(_) => {
            counters.drop_malformed += 1;
            return;
        }
    };
    let end = l.tcp_off + l.tcp_len;
    let hdr_end = l.tcp_off + l.tcp_header_len;
    if end > total || hdr_end > first.len() {
        counters.drop_malformed += 1;
        return;
    }
    let (src_ip, dst_ip): (IpAddr, IpAddr) = match l.ip {
        IpRepr::V4(r) => (r.src.into(), r.dst.into()),
        IpRepr::V6(r) => (r.src.into(), r.dst.into()),
    };
    if !cfg.locals.contains(&dst_ip) {
        counters.drop_not_ours += 1;
        return;
    }
    let Ok(pkt) = TcpPacket::new_checked(&first[l.tcp_off..hdr_end]) else {
        counters.drop_malformed += 1;
        return;
    };
    let mut out: [&[u8]; RX_CHAIN_MAX] = [&[]; RX_CHAIN_MAX];
    if cfg.rx_csum == RxCsum::Verify {
        let n = sub_parts(parts, l.tcp_off, end, &mut out);
        let mut sum = Accumulator::new(l.pseudo_sum());
        for p in &out[..n] {
            sum.add_bytes(p);
        }
        if sum.sum() != 0xffff {
            counters.drop_checksum += 1;
            return;
        }
    }
    let Ok(repr) = TcpRepr::parse(&pkt) else {
        counters.drop_malformed += 1;
        return;
    };
    counters.rx_segments += 1;
    counters.rx_bytes += total as u64;
    let n = sub_parts(parts, hdr_end, end, &mut out);
    f(
        src_mac,
        SocketAddr::new(src_ip, repr.src_port),
        SocketAddr::new(dst_ip, repr.dst_port),
        &repr,
        &out[..n],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Ipv4Packet;
    use std::net::Ipv4Addr;

    const US: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const PEER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    fn cfg(rx_csum: RxCsum) -> PortConfig {
        PortConfig {
            locals: Box::new([US.into()]),
            local_mac: [2, 0, 0, 0, 0, 1],
            next_hop_mac: [2, 0, 0, 0, 0, 2],
            rx_csum,
            mtu: 1500,
            layout: TxLayout::Chained,
        }
    }

    fn tcp_to(dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
            .ipv4(PEER.octets(), dst.octets(), 64)
            .tcp(5201, 40000, 7, 1000)
            .ack(9);
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    type Got = Vec<(SocketAddr, SocketAddr, TcpRepr, Vec<u8>)>;

    fn run(bytes: &[u8], policy: RxCsum) -> (PortCounters, Got) {
        run_parts(&[bytes], policy)
    }

    /// Delivers a packet given in parts (a receive chain).
    fn run_parts(parts: &[&[u8]], policy: RxCsum) -> (PortCounters, Got) {
        let mut c = PortCounters::default();
        let mut got = Vec::new();
        let mut gather = Vec::with_capacity(GATHER_LEN);
        deliver(
            parts,
            &mut gather,
            &mut Vec::new(),
            &cfg(policy),
            &mut c,
            &mut |_, src, dst, r: &TcpRepr, p: Parts<'_>| got.push((src, dst, *r, p.concat())),
        );
        (c, got)
    }

    /// What `send_segment` puts on the wire, rebuilt in memory: the header
    /// from the connection's template, written by `seg` from the payload
    /// pieces' cached sums (no payload memory given to it), then the
    /// payload bytes the descriptors point at.
    fn wire_bytes(
        cache: &mut HeaderCache,
        buf: &mut crate::tcp::send::SendBuffer<crate::tcp::HeapFrames>,
        src: SocketAddr,
        dst: SocketAddr,
        repr: &TcpRepr,
        offset: u64,
        len: usize,
    ) -> Vec<u8> {
        let mut pieces = [Piece::default(); MAX_PIECES];
        let n = buf.pieces(offset, len, &mut pieces).unwrap();
        let tpl = cache.template([2; 6], [3; 6], src, dst, repr).unwrap();
        let mut frames = [StreamFrame::default(); MAX_PIECES];
        for (f, p) in frames.iter_mut().zip(&pieces[..n]) {
            *f = stream_frame(p);
        }
        let mut hdr = [0u8; crate::seg::MAX_HEADER_LEN];
        let mut descs = [Desc::default(); MAX_PIECES + 1];
        let info = SegCursor::new(len, repr.seq, 7, len.max(1))
            .unwrap()
            .next(
                tpl,
                &frames[..n],
                &mut hdr,
                crate::frame::FrameAddr(0),
                &mut descs,
            )
            .unwrap()
            .unwrap();
        assert_eq!(info.desc_count, n + 1);
        let mut pkt = hdr[..info.header_len].to_vec();
        let mem = buf.memory().bytes();
        for d in &descs[1..n + 1] {
            pkt.extend_from_slice(&mem[d.addr.0 as usize..d.addr.0 as usize + d.len as usize]);
        }
        pkt
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// The checksum a segment gets from cached sums equals a full
        /// recomputation (etherparse's, and ours), whatever the writes, the
        /// segment boundaries, the slot size, the address family and the
        /// options; and the payload is the stream's bytes.
        #[test]
        fn segment_checksums_from_cached_sums_verify(
            writes in proptest::collection::vec((0usize..9000, proptest::num::u8::ANY, 0u8..3), 1..12),
            cuts in proptest::collection::vec(1usize..9000, 1..20),
            slot in proptest::sample::select(vec![None, Some(1448usize), Some(3774)]),
            v6 in proptest::bool::ANY,
            ts in proptest::option::of((proptest::num::u32::ANY, proptest::num::u32::ANY)),
            window in proptest::num::u16::ANY,
        ) {
            let mut buf = crate::tcp::send::SendBuffer::new(4096, 16, crate::tcp::HeapFrames::default());
            buf.allocate(slot);
            let mut stream = Vec::new();
            for (n, seed, kind) in writes {
                let data: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(seed) ^ seed).collect();
                let k = match kind {
                    0 => buf.write(&data),
                    1 => buf.fill_zeros(n),
                    _ => {
                        let mut at = 0;
                        buf.fill(|d| {
                            let t = d.len().min(n - at);
                            d[..t].copy_from_slice(&data[at..at + t]);
                            at += t;
                            t
                        })
                    }
                };
                if kind == 1 {
                    stream.extend(std::iter::repeat_n(0u8, k));
                } else {
                    stream.extend_from_slice(&data[..k]);
                }
            }
            let (src, dst): (SocketAddr, SocketAddr) = if v6 {
                ("[2001:2::1]:40000".parse().unwrap(), "[2001:2::2]:5201".parse().unwrap())
            } else {
                ("198.18.0.1:40000".parse().unwrap(), "198.18.0.2:5201".parse().unwrap())
            };
            let mut cache = HeaderCache::default();
            let mut off = 0u64;
            for c in cuts.iter().cycle().take(64) {
                if off as usize >= stream.len() {
                    break;
                }
                let len = (*c).min(stream.len() - off as usize).min(8948);
                let mut repr = TcpRepr {
                    src_port: src.port(),
                    dst_port: dst.port(),
                    seq: SeqNumber(1_000_000u32.wrapping_add(off as u32)),
                    ack: SeqNumber(77),
                    flags: TcpFlags::ACK | TcpFlags::PSH,
                    window,
                    urgent: 0,
                    options: crate::wire::TcpOptions::NONE,
                };
                repr.options.timestamp = ts.map(|(tsval, tsecr)| crate::wire::TcpTimestamp { tsval, tsecr });
                let pkt = wire_bytes(&mut cache, &mut buf, src, dst, &repr, off, len);
                // etherparse verifies both checksums (IPv4 header and TCP).
                let o = crate::wire::tests::oracle(&pkt);
                proptest::prop_assert_eq!(&o.payload[..], &stream[off as usize..off as usize + len]);
                proptest::prop_assert_eq!(o.seq, repr.seq.0);
                // Our own full recomputation: pseudo-header + segment sums to 0xffff.
                let l = locate_tcp(&pkt).unwrap();
                let mut acc = Accumulator::new(l.pseudo_sum());
                acc.add_bytes(&pkt[l.tcp_off..l.tcp_off + l.tcp_len]);
                proptest::prop_assert_eq!(acc.sum(), 0xffff);
                // A retransmission (same bounds, sums from the cache) too.
                let again = wire_bytes(&mut cache, &mut buf, src, dst, &repr, off, len);
                proptest::prop_assert_eq!(&again, &pkt);
                off += len as u64;
            }
        }
    }

    #[test]
    fn a_chained_packet_is_delivered_in_place_part_by_part() {
        let payload: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        let pkt = tcp_to(US, &payload);
        // Headers in the first part; odd split points inside the payload, as
        // a receive chain of three frames can have.
        let (a, rest) = pkt.split_at(1001);
        let (b, c) = rest.split_at(4095);
        let (cnt, got) = run_parts(&[a, b, c], RxCsum::Verify);
        assert_eq!(cnt.rx_segments, 1, "{cnt:?}");
        assert_eq!(got[0].3, payload);
        // The checksum covers every part: a flipped bit in the last one is
        // caught.
        let mut bad = c.to_vec();
        bad[100] ^= 1;
        assert_eq!(run_parts(&[a, b, &bad], RxCsum::Verify).0.drop_checksum, 1);
        // A header split over two parts is gathered first, then delivered.
        let (h1, h2) = pkt.split_at(30);
        let (cnt, got) = run_parts(&[h1, h2], RxCsum::Verify);
        assert_eq!(cnt.rx_segments, 1, "{cnt:?}");
        assert_eq!(got[0].3, payload);
        // Parts shorter than the IP length claims: malformed.
        assert_eq!(run_parts(&[a, b], RxCsum::Verify).0.drop_malformed, 1);
    }

    /// A router's "fragmentation needed" about our segment from `from`.
    fn too_big_to(to: Ipv4Addr, from: Ipv4Addr) -> Vec<u8> {
        too_big_about(to, from, 40000, 1400)
    }

    /// The same about our port `port`, with `mtu` for the next hop.
    fn too_big_about(to: Ipv4Addr, from: Ipv4Addr, port: u16, mtu: u16) -> Vec<u8> {
        let seg = etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4(from.octets(), PEER.octets(), 64)
            .tcp(port, 5201, 77, 1000);
        let mut quoted = Vec::new();
        seg.write(&mut quoted, &[0; 100]).unwrap();
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
            .ipv4([198, 18, 9, 9], to.octets(), 64)
            .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: mtu,
                },
            ));
        let mut v = Vec::new();
        b.write(&mut v, &quoted[14..62]).unwrap();
        v
    }

    /// An ICMP "packet too big" to us is set aside for the caller (at most
    /// [`TOO_BIG_MAX`] flows at a time, more about one flow folded into
    /// one with the least MTU), not delivered as a segment; one to another
    /// address, or corrupt, is counted and dropped.
    #[test]
    fn a_packet_too_big_is_set_aside_for_the_caller() {
        let cfg = cfg(RxCsum::Verify);
        let mut c = PortCounters::default();
        let mut gather = Vec::with_capacity(GATHER_LEN);
        let mut kept = Vec::with_capacity(TOO_BIG_MAX);
        let mut segments = 0;
        let mut one = |bytes: &[u8], kept: &mut Vec<TooBig>, c: &mut PortCounters| {
            deliver(
                &[bytes],
                &mut gather,
                kept,
                &cfg,
                c,
                &mut |_, _, _, _, _| segments += 1,
            )
        };
        let icmp = too_big_to(US, US);
        // About one flow: folded, the least MTU kept.
        for mtu in [1400, 1300, 1400] {
            one(&too_big_about(US, US, 40000, mtu), &mut kept, &mut c);
        }
        assert_eq!(kept.len(), 1);
        assert_eq!((c.rx_too_big, c.too_big_folded), (3, 2), "{c:?}");
        let t = kept[0];
        assert_eq!(t.mtu, 1300);
        assert_eq!(t.seq.0, 77);
        assert_eq!(t.local, SocketAddr::new(US.into(), 40000));
        assert_eq!(t.remote, SocketAddr::new(PEER.into(), 5201));
        // About as many flows as are kept, and one more: dropped.
        for port in 1..TOO_BIG_MAX as u16 + 1 {
            one(
                &too_big_about(US, US, 40000 + port, 1400),
                &mut kept,
                &mut c,
            );
        }
        assert_eq!(kept.len(), TOO_BIG_MAX);
        assert_eq!(c.rx_too_big, 3 + TOO_BIG_MAX as u64 - 1, "{c:?}");
        assert_eq!(c.drop_too_big, 1, "{c:?}");
        kept.clear();
        one(
            &too_big_to(Ipv4Addr::new(198, 18, 0, 9), US),
            &mut kept,
            &mut c,
        );
        assert_eq!(c.drop_not_ours, 1, "{c:?}");
        let mut bad = icmp.clone();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        one(&bad, &mut kept, &mut c);
        assert_eq!(c.drop_malformed, 1, "{c:?}");
        assert!(kept.is_empty());
        assert_eq!(c.rx_segments, 0);
        assert_eq!(segments, 0);
    }

    #[test]
    fn good_segment_is_delivered() {
        let (c, got) = run(&tcp_to(US, b"hello"), RxCsum::Verify);
        assert_eq!(c.rx_segments, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, SocketAddr::new(PEER.into(), 5201));
        assert_eq!(got[0].1, SocketAddr::new(US.into(), 40000));
        assert_eq!(got[0].2.seq.0, 7);
        assert_eq!(got[0].3, b"hello");
    }

    #[test]
    fn bad_packets_are_counted_by_reason_and_dropped() {
        // Bad checksum: dropped under Verify, accepted under Trust (a veth
        // peer's partial checksums cannot be verified).
        let mut bad = tcp_to(US, b"hello");
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        assert_eq!(run(&bad, RxCsum::Verify).0.drop_checksum, 1);
        assert_eq!(run(&bad, RxCsum::Trust).0.rx_segments, 1);
        // Not ours.
        assert_eq!(
            run(&tcp_to(Ipv4Addr::new(198, 18, 0, 9), b"x"), RxCsum::Verify)
                .0
                .drop_not_ours,
            1
        );
        // Not TCP: a UDP datagram.
        let b = etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4(PEER.octets(), US.octets(), 64)
            .udp(1, 2);
        let mut udp = Vec::new();
        b.write(&mut udp, b"u").unwrap();
        assert_eq!(run(&udp, RxCsum::Verify).0.drop_not_tcp, 1);
        // A fragment (MF set).
        let mut frag = tcp_to(US, b"frag");
        frag[14 + 6] |= 0x20;
        Ipv4Packet::new_unchecked(&mut frag[14..34]).fill_checksum();
        assert_eq!(run(&frag, RxCsum::Trust).0.drop_fragment, 1);
        // Truncated anywhere: never delivered, never a panic.
        let good = tcp_to(US, b"truncate me");
        for cut in 0..good.len() {
            let (c, got) = run(&good[..cut], RxCsum::Trust);
            assert!(got.is_empty(), "cut {cut}");
            assert_eq!(c.rx_segments, 0);
        }
        // Random corruption of any single byte: never a panic.
        for i in 0..good.len() {
            for v in [0u8, 0xff, 0x45, 0x06] {
                let mut x = good.clone();
                x[i] = v;
                let _ = run(&x, RxCsum::Trust);
            }
        }
    }

    /// The cache keeps its template across what changes from burst to
    /// burst (the acknowledgement number, window and timestamps: rewritten
    /// in place, the headers as a template built for them would write),
    /// and builds anew for another shape (SACK blocks) or peer.
    #[test]
    fn the_header_cache_rewrites_in_place_and_builds_for_a_new_shape() {
        use crate::wire::{SackBlocks, TcpOptions, TcpTimestamp};
        let (mac, src, dst) = (
            [2, 0, 0, 0, 0, 2],
            SocketAddr::from((US, 40000)),
            SocketAddr::from((PEER, 5201)),
        );
        let repr = |ack: u32, window: u16, tsecr: u32| TcpRepr {
            src_port: 40000,
            dst_port: 5201,
            seq: SeqNumber(1000),
            ack: SeqNumber(ack),
            flags: TcpFlags::ACK,
            window,
            urgent: 0,
            options: TcpOptions {
                timestamp: Some(TcpTimestamp { tsval: 77, tsecr }),
                ..TcpOptions::NONE
            },
        };
        let mut cache = HeaderCache::default();
        let headers = |cache: &mut HeaderCache, r: &TcpRepr, dst: SocketAddr| {
            let tpl = cache
                .template([2, 0, 0, 0, 0, 1], mac, src, dst, r)
                .unwrap();
            let mut out = [0u8; 128];
            tpl.write(&mut out, r.seq, 1, r.flags, 0, 0).unwrap();
            out[..tpl.header_len()].to_vec()
        };
        headers(&mut cache, &repr(1, 100, 5), dst);
        for (ack, window, tsecr) in [(2, 100, 5), (2, 300, 6), (u32::MAX, 0, u32::MAX)] {
            let r = repr(ack, window, tsecr);
            let got = headers(&mut cache, &r, dst);
            assert_eq!(cache.builds, 1, "rewritten in place");
            let want = headers(&mut HeaderCache::default(), &r, dst);
            let l = locate_tcp(&got).unwrap();
            let t = TcpPacket::new_checked(&got[l.tcp_off..]).unwrap();
            assert!(t.verify_checksum(l.pseudo_sum()));
            let c = l.tcp_off + 16;
            assert_eq!(
                (got[..c].to_vec(), &got[c + 2..]),
                (want[..c].to_vec(), &want[c + 2..])
            );
        }
        let mut sack = repr(3, 100, 7);
        sack.options.sack = SackBlocks::from_slice(&[(SeqNumber(10), SeqNumber(20))]).unwrap();
        headers(&mut cache, &sack, dst);
        assert_eq!(cache.builds, 2, "another shape");
        headers(&mut cache, &sack, SocketAddr::from((PEER, 5202)));
        assert_eq!(cache.builds, 3, "another peer");
    }

    /// [`IpMarks`] go into every header built after them, the ECN bits
    /// left 0 and the IPv4 header checksum right; setting others builds
    /// the template anew, setting the same ones does not.
    #[test]
    fn marks_set_the_tos_traffic_class_and_flow_label() {
        use etherparse::{NetHeaders, PacketHeaders};
        let repr = TcpRepr {
            src_port: 40000,
            dst_port: 5201,
            seq: SeqNumber(1000),
            ack: SeqNumber(1),
            flags: TcpFlags::ACK,
            window: 100,
            urgent: 0,
            options: crate::wire::TcpOptions::NONE,
        };
        let headers = |cache: &mut HeaderCache, src: SocketAddr, dst: SocketAddr| {
            let tpl = cache
                .template([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], src, dst, &repr)
                .unwrap();
            let mut out = [0u8; 128];
            tpl.write(&mut out, repr.seq, 1, repr.flags, 0, 0).unwrap();
            out[..tpl.header_len()].to_vec()
        };
        let v4 = (
            SocketAddr::from((US, 40000)),
            SocketAddr::from((PEER, 5201)),
        );
        let mut cache = HeaderCache::default();
        let h = headers(&mut cache, v4.0, v4.1);
        assert_eq!(Ipv4Packet::new_checked(&h[14..]).unwrap().dscp_ecn(), 0);
        cache.set_marks(IpMarks {
            tos: 0xb8 | 0b11,
            flow_label: 0,
        });
        let h = headers(&mut cache, v4.0, v4.1);
        assert_eq!(cache.builds, 2, "built anew for the marks");
        let ip = Ipv4Packet::new_checked(&h[14..]).unwrap();
        assert_eq!(ip.dscp_ecn(), 0xb8, "EF, the ECN bits cleared");
        assert!(ip.verify_checksum());
        cache.set_marks(IpMarks {
            tos: 0xb8 | 0b11,
            flow_label: 0,
        });
        headers(&mut cache, v4.0, v4.1);
        assert_eq!(cache.builds, 2, "the same marks keep the template");

        let (a, b): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
            ("2001:2::1".parse().unwrap(), "2001:2::2".parse().unwrap());
        let mut cache = HeaderCache::default();
        cache.set_marks(IpMarks {
            tos: 0x28,
            flow_label: 0xabcde,
        });
        let h = headers(
            &mut cache,
            SocketAddr::from((a, 40000)),
            SocketAddr::from((b, 5201)),
        );
        let p = PacketHeaders::from_ethernet_slice(&h).unwrap();
        let Some(NetHeaders::Ipv6(ip6, _)) = p.net else {
            panic!("not IPv6: {:?}", p.net);
        };
        assert_eq!(ip6.traffic_class, 0x28);
        assert_eq!(ip6.flow_label.value(), 0xabcde);
    }
}
