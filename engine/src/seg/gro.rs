//! GRO: merge consecutive in-order TCP segments of one flow into one large
//! segment, with Linux's rules (`tcp_gro_receive`, `inet_gro_receive`):
//!
//! - same flow: identical Ethernet header, IP addresses, ports; IPv4 without
//!   options, same TOS/TTL/DF, id +1 per segment (or fixed); IPv6 without
//!   extension headers, same traffic class, flow label and hop limit;
//! - contiguous: the sequence number is the one the held segment ends at;
//! - compatible: same ACK number, window and TCP options (bytes); flags
//!   equal except CWR, PSH and FIN; no CWR on a segment being appended;
//!   SYN, RST and URG never merged;
//! - bounded: no segment longer than the first (its length is the MSS), the
//!   total within the IP length field (and [`Gro::with_max_payload`]), the
//!   chain within [`MAX_GRO_DESCS`].
//!
//! A segment shorter than the first, or with PSH or FIN, is appended and
//! ends the merge ([`GroOutcome::HeldFlush`]). Anything that does not fit
//! is [`GroOutcome::Mismatch`]: the caller takes the held segment
//! ([`Gro::take`]) and pushes the segment again. A segment that can never
//! be merged (no payload, SYN/RST/URG, IP options, extension headers,
//! multi-buffer headers) is [`GroOutcome::Bypass`]: pass it on as it is.
//!
//! The merged TCP checksum is built from the segments' payload sums. With
//! [`RxChecksum::Trust`] (the NIC verified them) those are derived from each
//! segment's checksum field, so the payload is not read; with
//! [`RxChecksum::Verify`] the payload is read once, the checksum checked,
//! and a bad segment refused with [`SegError::Wire`]`(Checksum)`.

use super::{FrameMemory, MAX_HEADER_LEN, SegError, SegmentInfo};
use crate::frame::{Desc, FrameAddr};
use crate::wire::checksum::{self, Accumulator};
use crate::wire::{
    Error, IpRepr, Ipv4Packet, Ipv6Packet, SeqNumber, TcpFlags, TcpPacket, ipv4, ipv6, locate_tcp,
    tcp,
};

/// Most payload descriptors a merged segment holds.
pub const MAX_GRO_DESCS: usize = 64;

/// Receive-checksum policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxChecksum {
    /// Read the payload and verify every segment's TCP checksum.
    Verify,
    /// The checksums were verified already (NIC offload): derive payload
    /// sums from the checksum fields without reading the payload.
    Trust,
}

/// What [`Gro::push`] did with a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroOutcome {
    /// Held (started or appended); more may follow.
    Held,
    /// Held, and the merge is complete: [`Gro::take`] it now.
    HeldFlush,
    /// Not part of the held segment: [`Gro::take`] the held one, then push
    /// this segment again.
    Mismatch,
    /// Never mergeable and nothing is held: pass the segment on unchanged.
    Bypass,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    hdr_len: usize,
    ip_off: usize,
    tcp_off: usize,
    v6: bool,
    first_len: usize,
    payload_len: usize,
    payload_sum: Accumulator,
    next_seq: SeqNumber,
    next_id: u16,
    id_fixed: Option<bool>,
    last_flags: TcpFlags,
    count: usize,
    segments: usize,
}

/// Merges one flow's segments (see the module doc). Keep one per flow, or
/// flush at the end of every receive batch.
#[derive(Debug, Clone)]
pub struct Gro {
    hdr: [u8; MAX_HEADER_LEN],
    descs: [Desc; MAX_GRO_DESCS],
    held: Option<Held>,
    policy: RxChecksum,
    max_payload: usize,
}

/// A parsed candidate segment.
struct Candidate<'m> {
    head: &'m [u8],
    hdr_len: usize,
    ip_off: usize,
    tcp_off: usize,
    v6: bool,
    payload_len: usize,
    payload_sum: u16,
    seq: SeqNumber,
    ip_id: u16,
    flags: TcpFlags,
}

/// TCP fields that must match between segments: ACK (8..12), data offset
/// and window (12..13, 14..16), urgent pointer and options. Flags (13) and
/// checksum (16..18) are compared separately or not at all.
fn tcp_compatible(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a[0..4] == b[0..4]
        && a[8..13] == b[8..13]
        && a[14..16] == b[14..16]
        && a[18..] == b[18..]
}

impl Gro {
    /// An empty merger with the given checksum policy.
    pub fn new(policy: RxChecksum) -> Gro {
        Gro {
            hdr: [0; MAX_HEADER_LEN],
            descs: [Desc::default(); MAX_GRO_DESCS],
            held: None,
            policy,
            max_payload: usize::MAX,
        }
    }

    /// Caps the merged payload below the IP limit (Linux `gro_max_size`);
    /// a segment that would exceed it starts a new merge.
    #[must_use]
    pub fn with_max_payload(mut self, max_payload: usize) -> Gro {
        self.max_payload = max_payload;
        self
    }

    /// True if a segment is held.
    pub fn is_holding(&self) -> bool {
        self.held.is_some()
    }

    /// Number of segments merged into the held one.
    pub fn held_segments(&self) -> usize {
        self.held.map_or(0, |h| h.segments)
    }

    fn parse<'m, M: FrameMemory + ?Sized>(
        &self,
        chain: &[Desc],
        mem: &'m M,
    ) -> Result<Option<Candidate<'m>>, SegError> {
        let first = chain.first().ok_or(SegError::ShortStream)?;
        let head = mem
            .bytes(first.addr, first.len as usize)
            .ok_or(SegError::OutOfBounds)?;
        let l = locate_tcp(head)?;
        let hdr_len = l.payload_off();
        let t = TcpPacket::new_checked(&head[l.tcp_off..])?;
        let flags = t.flags();
        let (v6, ip_id, plain_ip) = match l.ip {
            IpRepr::V4(r) => (false, r.ident, l.tcp_off - l.ip_off == ipv4::HEADER_LEN),
            IpRepr::V6(_) => (true, 0, l.tcp_off - l.ip_off == ipv6::HEADER_LEN),
        };
        let payload_len = l.payload_len();
        if !plain_ip
            || payload_len == 0
            || flags.intersects(TcpFlags::SYN | TcpFlags::RST | TcpFlags::URG)
            || hdr_len > MAX_HEADER_LEN
            || (chain.len() > 1 && head.len() < hdr_len)
        {
            return Ok(None);
        }
        // Every descriptor must lie in the memory (also when the payload is
        // not read), and together they must hold the payload the IP header
        // claims.
        let mut avail: usize = 0;
        for d in chain {
            if mem.bytes(d.addr, d.len as usize).is_none() {
                return Err(SegError::OutOfBounds);
            }
            avail += d.len as usize;
        }
        if avail < hdr_len + payload_len {
            return Err(SegError::ShortStream);
        }
        // The payload's sum.
        let pseudo = l.pseudo_sum();
        let hdr_sum = checksum::add(pseudo, checksum::sum(&head[l.tcp_off..hdr_len]));
        let payload_sum = match self.policy {
            RxChecksum::Trust => !hdr_sum,
            RxChecksum::Verify => {
                let mut acc = Accumulator::new(0);
                let mut skip = hdr_len;
                let mut left = payload_len;
                for d in chain {
                    let b = mem
                        .bytes(d.addr, d.len as usize)
                        .ok_or(SegError::OutOfBounds)?;
                    let s = skip.min(b.len());
                    skip -= s;
                    let take = (b.len() - s).min(left);
                    acc.add_bytes(&b[s..s + take]);
                    left -= take;
                }
                if left > 0 {
                    return Err(SegError::ShortStream);
                }
                if checksum::add(hdr_sum, acc.sum()) != 0xffff {
                    return Err(SegError::Wire(Error::Checksum));
                }
                acc.sum()
            }
        };
        Ok(Some(Candidate {
            head,
            hdr_len,
            ip_off: l.ip_off,
            tcp_off: l.tcp_off,
            v6,
            payload_len,
            payload_sum,
            seq: t.seq(),
            ip_id,
            flags,
        }))
    }

    /// Offers the segment in `chain` (its first descriptor holds all its
    /// headers). See [`GroOutcome`] for what to do next. On error nothing
    /// changed and the segment should be dropped or passed on.
    pub fn push<M: FrameMemory + ?Sized>(
        &mut self,
        chain: &[Desc],
        mem: &M,
    ) -> Result<GroOutcome, SegError> {
        let Some(c) = self.parse(chain, mem)? else {
            return Ok(if self.held.is_some() {
                GroOutcome::Mismatch
            } else {
                GroOutcome::Bypass
            });
        };
        let payload_descs = payload_desc_count(chain, c.hdr_len, c.payload_len);
        match self.held {
            None => {
                if payload_descs > MAX_GRO_DESCS {
                    return Ok(GroOutcome::Bypass);
                }
                self.hdr[..c.hdr_len].copy_from_slice(&c.head[..c.hdr_len]);
                let mut h = Held {
                    hdr_len: c.hdr_len,
                    ip_off: c.ip_off,
                    tcp_off: c.tcp_off,
                    v6: c.v6,
                    first_len: c.payload_len,
                    payload_len: 0,
                    payload_sum: Accumulator::new(0),
                    next_seq: c.seq,
                    next_id: c.ip_id,
                    id_fixed: None,
                    last_flags: c.flags,
                    count: 0,
                    segments: 0,
                };
                self.append(&mut h, chain, &c);
                let end = c.flags.intersects(TcpFlags::PSH | TcpFlags::FIN);
                self.held = Some(h);
                Ok(if end {
                    GroOutcome::HeldFlush
                } else {
                    GroOutcome::Held
                })
            }
            Some(mut h) => {
                if !self.compatible(&h, &c, payload_descs) {
                    return Ok(GroOutcome::Mismatch);
                }
                if !c.v6 && h.id_fixed.is_none() {
                    h.id_fixed = Some(c.ip_id == h.next_id.wrapping_sub(1));
                }
                self.append(&mut h, chain, &c);
                let end = c.payload_len < h.first_len
                    || c.flags.intersects(TcpFlags::PSH | TcpFlags::FIN);
                self.held = Some(h);
                Ok(if end {
                    GroOutcome::HeldFlush
                } else {
                    GroOutcome::Held
                })
            }
        }
    }

    fn compatible(&self, h: &Held, c: &Candidate<'_>, payload_descs: usize) -> bool {
        let held = &self.hdr[..h.hdr_len];
        let new = &c.head[..c.hdr_len];
        if c.hdr_len != h.hdr_len || c.v6 != h.v6 || c.tcp_off != h.tcp_off {
            return false;
        }
        // Link layer identical.
        if held[..h.ip_off] != new[..h.ip_off] {
            return false;
        }
        let (hi, ni) = (&held[h.ip_off..h.tcp_off], &new[h.ip_off..h.tcp_off]);
        if h.v6 {
            // Version/class/flow, next header, hop limit, addresses.
            if hi[0..4] != ni[0..4] || hi[6..40] != ni[6..40] {
                return false;
            }
        } else {
            // TOS, flags/fragment, TTL, protocol, addresses.
            if hi[1] != ni[1] || hi[6..10] != ni[6..10] || hi[12..20] != ni[12..20] {
                return false;
            }
            let id_ok = match h.id_fixed {
                None => c.ip_id == h.next_id || c.ip_id == h.next_id.wrapping_sub(1),
                Some(true) => c.ip_id == h.next_id.wrapping_sub(1),
                Some(false) => c.ip_id == h.next_id,
            };
            if !id_ok {
                return false;
            }
        }
        let (ht, nt) = (&held[h.tcp_off..], &new[h.tcp_off..]);
        if !tcp_compatible(ht, nt) {
            return false;
        }
        let mask = !(TcpFlags::CWR.0 | TcpFlags::PSH.0 | TcpFlags::FIN.0);
        if (h.last_flags.0 ^ c.flags.0) & mask != 0 || c.flags.contains(TcpFlags::CWR) {
            return false;
        }
        // The held segment already ended (it would have been HeldFlush).
        if h.last_flags.intersects(TcpFlags::PSH | TcpFlags::FIN)
            || !h.payload_len.is_multiple_of(h.first_len)
        {
            return false;
        }
        c.seq == h.next_seq
            && c.payload_len <= h.first_len
            && h.payload_len + c.payload_len <= max_payload(h).min(self.max_payload)
            && h.count + payload_descs <= MAX_GRO_DESCS
    }

    fn append(&mut self, h: &mut Held, chain: &[Desc], c: &Candidate<'_>) {
        let mut skip = c.hdr_len;
        let mut left = c.payload_len;
        for d in chain {
            let dlen = d.len as usize;
            let s = skip.min(dlen);
            skip -= s;
            let take = (dlen - s).min(left);
            if take > 0 {
                self.descs[h.count] = Desc::new(d.addr.add(s), take as u32, false);
                h.count += 1;
                left -= take;
            }
        }
        h.payload_sum.add_sum(c.payload_sum, c.payload_len);
        h.payload_len += c.payload_len;
        h.next_seq += c.payload_len;
        h.next_id = c.ip_id.wrapping_add(1);
        h.last_flags = c.flags;
        h.segments += 1;
    }

    /// Writes the held merged segment — the first segment's headers with
    /// lengths, checksums and flags (PSH/FIN of the last) fixed — into
    /// `hdr` at `hdr_addr`, and header + payload descriptors into `descs`.
    /// `None` if nothing is held. On error the segment stays held.
    pub fn take(
        &mut self,
        hdr: &mut [u8],
        hdr_addr: FrameAddr,
        descs: &mut [Desc],
    ) -> Option<Result<SegmentInfo, SegError>> {
        let h = self.held?;
        if hdr.len() < h.hdr_len {
            return Some(Err(SegError::HeaderBuffer { need: h.hdr_len }));
        }
        if descs.len() < h.count + 1 {
            return Some(Err(SegError::Descriptors { have: descs.len() }));
        }
        let out = &mut hdr[..h.hdr_len];
        out.copy_from_slice(&self.hdr[..h.hdr_len]);
        let ip_len = h.hdr_len - h.ip_off + h.payload_len;
        if h.v6 {
            Ipv6Packet::new_unchecked(&mut out[h.ip_off..])
                .set_payload_len((ip_len - ipv6::HEADER_LEN) as u16);
        } else {
            let mut p = Ipv4Packet::new_unchecked(&mut out[h.ip_off..]);
            p.set_total_len(ip_len as u16);
            p.fill_checksum();
        }
        let tcp_len = h.hdr_len - h.tcp_off + h.payload_len;
        let (ip, seq, flags);
        {
            let l = match locate_tcp(out) {
                Ok(l) => l,
                Err(e) => return Some(Err(e.into())),
            };
            ip = l.ip;
            let mut t = TcpPacket::new_unchecked(&mut out[h.tcp_off..]);
            seq = t.seq();
            flags = t.flags() | (h.last_flags & (TcpFlags::PSH | TcpFlags::FIN));
            t.set_flags(flags);
            t.set_checksum(0);
        }
        let pseudo = ip.pseudo_sum(crate::wire::IpProtocol::TCP, tcp_len);
        let mut acc = Accumulator::new(pseudo);
        acc.add_bytes(&out[h.tcp_off..]);
        acc.add_sum(h.payload_sum.sum(), h.payload_len);
        let c = acc.checksum();
        out[h.tcp_off + tcp::CHECKSUM_OFF..h.tcp_off + tcp::CHECKSUM_OFF + 2]
            .copy_from_slice(&c.to_be_bytes());
        descs[0] = Desc::new(hdr_addr, h.hdr_len as u32, h.count > 0);
        for (i, d) in self.descs[..h.count].iter().enumerate() {
            descs[i + 1] = Desc::new(d.addr, d.len, i + 1 < h.count);
        }
        let ip_id = match ip {
            IpRepr::V4(r) => r.ident,
            IpRepr::V6(_) => 0,
        };
        self.held = None;
        Some(Ok(SegmentInfo {
            seq,
            flags,
            payload_len: h.payload_len,
            header_len: h.hdr_len,
            desc_count: h.count + 1,
            ip_id,
        }))
    }
}

fn max_payload(h: &Held) -> usize {
    if h.v6 {
        65535 - (h.hdr_len - h.ip_off - ipv6::HEADER_LEN)
    } else {
        65535 - (h.hdr_len - h.ip_off)
    }
}

fn payload_desc_count(chain: &[Desc], hdr_len: usize, payload_len: usize) -> usize {
    let mut skip = hdr_len;
    let mut left = payload_len;
    let mut n = 0;
    for d in chain {
        let dlen = d.len as usize;
        let s = skip.min(dlen);
        skip -= s;
        let take = (dlen - s).min(left);
        if take > 0 {
            n += 1;
            left -= take;
        }
    }
    n
}
