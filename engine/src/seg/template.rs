//! A connection's header template: Ethernet + IP + TCP bytes with the
//! per-segment fields left to fill, and the checksum sums of everything
//! that does not change from segment to segment.
//!
//! [`HeaderTemplate::write`] copies the template and fixes up sequence
//! number, flags, IP id, lengths and both checksums with a handful of
//! additions — no loop over the header, none over the payload.
//! [`HeaderTemplate::update`] rewrites what changes between bursts (the
//! acknowledgement number, window and timestamps) in place, adjusting the
//! base sum word by word.

use super::{MAX_HEADER_LEN, SegError};
use crate::wire::checksum::{self, fold32};
use crate::wire::{
    EthernetFrame, EthernetRepr, IpProtocol, IpRepr, Ipv4Packet, Ipv6Packet, SeqNumber, TcpFlags,
    TcpOption, TcpPacket, TcpRepr, TcpTimestamp, ipv4, ipv6, locate_tcp, tcp,
};

/// A header template (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderTemplate {
    buf: [u8; MAX_HEADER_LEN],
    len: usize,
    ip_off: usize,
    tcp_off: usize,
    v6: bool,
    flags: TcpFlags,
    seq: SeqNumber,
    /// IPv4 header sum with total length, id and checksum zero.
    ip_base: u16,
    /// Pseudo-header (without length) + TCP header with seq, flags and
    /// checksum zero.
    tcp_base: u16,
    /// Largest payload the IP length field allows ([`Self::max_payload`]).
    max_payload: u32,
    /// Where the timestamp option's TSval is in `buf`, if the header has
    /// one at an even offset into the TCP header (as every sender lays it
    /// out); 0 if not. [`Self::update`] rewrites it in place.
    ts_off: u16,
}

impl HeaderTemplate {
    /// Builds a template from representations. The IP repr's payload length
    /// is ignored (set per segment); the TCP repr's `seq` and `flags` are
    /// the defaults [`Self::seq`]/[`Self::flags`] report.
    pub fn new(eth: &EthernetRepr, ip: &IpRepr, tcp: &TcpRepr) -> Result<HeaderTemplate, SegError> {
        let l2 = eth.header_len();
        let l3 = l2 + ip.header_len();
        let len = l3 + tcp.header_len();
        if len > MAX_HEADER_LEN || tcp.options.len() > tcp::MAX_OPTIONS_LEN {
            return Err(SegError::HeaderTooLong);
        }
        let mut buf = [0u8; MAX_HEADER_LEN];
        eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        let tcp_len = tcp.header_len();
        match *ip {
            IpRepr::V4(mut r) => {
                r.payload_len = tcp_len;
                r.protocol = IpProtocol::TCP;
                r.emit(&mut Ipv4Packet::new_unchecked(&mut buf[l2..]));
            }
            IpRepr::V6(mut r) => {
                r.payload_len = tcp_len;
                r.next_header = IpProtocol::TCP;
                r.emit(&mut Ipv6Packet::new_unchecked(&mut buf[l2..]));
            }
        }
        tcp.emit(&mut TcpPacket::new_unchecked(&mut buf[l3..len]))?;
        HeaderTemplate::from_headers(&buf[..len])
    }

    /// Builds a template from the headers of a TCP frame (everything up to
    /// the payload must be in `frame`; IPv6 extension headers are kept).
    pub fn from_headers(frame: &[u8]) -> Result<HeaderTemplate, SegError> {
        let l = locate_tcp(frame)?;
        let len = l.payload_off();
        if len > MAX_HEADER_LEN {
            return Err(SegError::HeaderTooLong);
        }
        let mut buf = [0u8; MAX_HEADER_LEN];
        buf[..len].copy_from_slice(&frame[..len]);
        let t = TcpPacket::new_unchecked(&frame[l.tcp_off..len]);
        let v6 = matches!(l.ip, IpRepr::V6(_));
        let mut tpl = HeaderTemplate {
            buf,
            len,
            ip_off: l.ip_off,
            tcp_off: l.tcp_off,
            v6,
            flags: t.flags(),
            seq: t.seq(),
            ip_base: 0,
            tcp_base: 0,
            max_payload: 0,
            ts_off: 0,
        };
        tpl.ts_off = timestamp_at(&frame[l.tcp_off + tcp::HEADER_LEN..len])
            .map(|at| l.tcp_off + tcp::HEADER_LEN + at)
            .filter(|at| (at - l.tcp_off) % 2 == 0)
            .map_or(0, |at| at as u16);
        tpl.max_payload = if v6 {
            65535 - (len - l.ip_off - ipv6::HEADER_LEN)
        } else {
            65535 - (len - l.ip_off)
        } as u32;
        tpl.recompute();
        Ok(tpl)
    }

    /// Recomputes the base sums after a change to the template bytes.
    fn recompute(&mut self) {
        let mut b = self.buf;
        let (ip_off, tcp_off, len) = (self.ip_off, self.tcp_off, self.len);
        let pseudo = if self.v6 {
            let p = Ipv6Packet::new_unchecked(&b[ip_off..]);
            checksum::pseudo_v6(&p.src(), &p.dst(), IpProtocol::TCP.0, 0)
        } else {
            let p = Ipv4Packet::new_unchecked(&b[ip_off..]);
            let hl = p.header_len();
            let (src, dst) = (p.src(), p.dst());
            for f in [ipv4::LENGTH_OFF, ipv4::IDENT_OFF, ipv4::CHECKSUM_OFF] {
                b[ip_off + f] = 0;
                b[ip_off + f + 1] = 0;
            }
            self.ip_base = checksum::sum(&b[ip_off..ip_off + hl]);
            checksum::pseudo_v4(src, dst, IpProtocol::TCP.0, 0)
        };
        b[tcp_off + tcp::SEQ_OFF..tcp_off + tcp::SEQ_OFF + 4].fill(0);
        b[tcp_off + tcp::FLAGS_OFF] = 0;
        b[tcp_off + tcp::CHECKSUM_OFF..tcp_off + tcp::CHECKSUM_OFF + 2].fill(0);
        self.tcp_base = checksum::add(pseudo, checksum::sum(&b[tcp_off..len]));
    }

    /// Header length (descriptor 0 of every segment).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.len
    }

    /// The template bytes (sequence number, flags, lengths and checksums as
    /// last set, not per segment).
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// True for IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.v6
    }

    /// Offset of the TCP header.
    pub fn tcp_off(&self) -> usize {
        self.tcp_off
    }

    /// Largest payload the IP length field allows with these headers.
    pub fn max_payload(&self) -> usize {
        self.max_payload as usize
    }

    /// Flags of the burst (CWR goes on the first segment, FIN and PSH on the last).
    pub fn flags(&self) -> TcpFlags {
        self.flags
    }

    /// Sets the burst flags.
    pub fn set_flags(&mut self, f: TcpFlags) {
        self.flags = f;
    }

    /// Sequence number the template was built with.
    pub fn seq(&self) -> SeqNumber {
        self.seq
    }

    /// Rewrites the fields an established connection changes between
    /// bursts — the acknowledgement number, the window and the timestamp
    /// option's values — in place, the TCP base sum updated for each
    /// 16-bit word that changed (RFC 1624: add the complement of the old
    /// word and the new one), instead of a template built anew. False,
    /// with nothing changed, where the header's shape differs: a
    /// timestamp given and the template has none (or none at an even
    /// offset), or the template has one and none is given.
    pub fn update(&mut self, ack: SeqNumber, window: u16, ts: Option<TcpTimestamp>) -> bool {
        let t = self.tcp_off;
        let ts_at = usize::from(self.ts_off);
        if ts.is_some() != (ts_at != 0) {
            return false;
        }
        let mut acc = u32::from(self.tcp_base);
        let mut patch = |buf: &mut [u8; MAX_HEADER_LEN], at: usize, new: &[u8]| {
            for (i, w) in new.chunks_exact(2).enumerate() {
                let (o, n) = (at + 2 * i, u16::from_be_bytes([w[0], w[1]]));
                acc += u32::from(!u16::from_be_bytes([buf[o], buf[o + 1]])) + u32::from(n);
                buf[o..o + 2].copy_from_slice(w);
            }
        };
        patch(&mut self.buf, t + tcp::ACK_OFF, &ack.0.to_be_bytes());
        patch(&mut self.buf, t + tcp::WINDOW_OFF, &window.to_be_bytes());
        if let Some(ts) = ts {
            patch(&mut self.buf, ts_at, &ts.tsval.to_be_bytes());
            patch(&mut self.buf, ts_at + 4, &ts.tsecr.to_be_bytes());
        }
        // The base and 14 words, each at most 0xffff: far below 2^32.
        self.tcp_base = fold32(acc);
        true
    }

    /// Writes one segment's header into `out[..header_len()]`.
    ///
    /// `payload_sum` is the Internet sum of the `payload_len` payload bytes
    /// (computed from their first byte).
    #[inline(always)]
    pub fn write(
        &self,
        out: &mut [u8],
        seq: SeqNumber,
        ip_id: u16,
        flags: TcpFlags,
        payload_len: usize,
        payload_sum: u16,
    ) -> Result<(), SegError> {
        let len = self.len;
        let Some(out) = out.get_mut(..len) else {
            return Err(SegError::HeaderBuffer { need: len });
        };
        if payload_len > self.max_payload() {
            return Err(SegError::TooLarge);
        }
        copy_header(out, &self.buf[..len]);
        // The IP and TCP headers' fixed parts as arrays: one bounds check
        // each, the fields at constant offsets. (`from_headers` found both
        // whole inside the first `len` bytes.)
        let ip = self.ip_off;
        if self.v6 {
            let pl = (len - ip - ipv6::HEADER_LEN + payload_len) as u16;
            let h: &mut [u8; ipv6::HEADER_LEN] = fixed(out, ip)?;
            h[ipv6::PAYLOAD_LEN_OFF..ipv6::PAYLOAD_LEN_OFF + 2].copy_from_slice(&pl.to_be_bytes());
        } else {
            let total = (len - ip + payload_len) as u16;
            let h: &mut [u8; 20] = fixed(out, ip)?;
            h[ipv4::LENGTH_OFF..ipv4::LENGTH_OFF + 2].copy_from_slice(&total.to_be_bytes());
            h[ipv4::IDENT_OFF..ipv4::IDENT_OFF + 2].copy_from_slice(&ip_id.to_be_bytes());
            // Three 16-bit values: far below 2^32.
            let c = !fold32(u32::from(self.ip_base) + u32::from(total) + u32::from(ip_id));
            h[ipv4::CHECKSUM_OFF..ipv4::CHECKSUM_OFF + 2].copy_from_slice(&c.to_be_bytes());
        }
        let tcp_len = (len - self.tcp_off + payload_len) as u32;
        let t: &mut [u8; 20] = fixed(out, self.tcp_off)?;
        t[tcp::SEQ_OFF..tcp::SEQ_OFF + 4].copy_from_slice(&seq.0.to_be_bytes());
        t[tcp::FLAGS_OFF] = flags.0;
        // Seven values of at most 16 bits: far below 2^32.
        let c = !fold32(
            u32::from(self.tcp_base)
                + (seq.0 >> 16)
                + (seq.0 & 0xffff)
                + u32::from(flags.0)
                + (tcp_len >> 16)
                + (tcp_len & 0xffff)
                + u32::from(payload_sum),
        );
        t[tcp::CHECKSUM_OFF..tcp::CHECKSUM_OFF + 2].copy_from_slice(&c.to_be_bytes());
        Ok(())
    }
}

/// Where the timestamp option's TSval is in a TCP options area (walked by
/// [`TcpOption::parse`]).
fn timestamp_at(mut opts: &[u8]) -> Option<usize> {
    let len = opts.len();
    while !opts.is_empty() {
        let (opt, rest) = TcpOption::parse(opts).ok()?;
        match opt {
            TcpOption::EndOfList => return None,
            // TSval and TSecr are the option's last eight bytes.
            TcpOption::Timestamp(_) => return Some(len - rest.len() - 8),
            _ => opts = rest,
        }
    }
    None
}

/// `N` bytes of `out` from `at` as an array (a header's fixed part).
#[inline(always)]
fn fixed<const N: usize>(out: &mut [u8], at: usize) -> Result<&mut [u8; N], SegError> {
    out.get_mut(at..)
        .and_then(|r| r.first_chunk_mut::<N>())
        .ok_or(SegError::OutOfBounds)
}

/// Copies a header (`dst` and `src` of one length): two overlapping
/// fixed-size copies for the usual lengths (54 bytes for IPv4 without
/// options up to 126 with IPv6 and 40 bytes of TCP options), which compile
/// to a few vector moves where a length known only at run time would call
/// `memcpy`; `copy_from_slice` for the rest.
#[inline(always)]
fn copy_header(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    let dst = &mut dst[..n];
    if (32..=64).contains(&n) {
        dst[..32].copy_from_slice(&src[..32]);
        dst[n - 32..].copy_from_slice(&src[n - 32..]);
    } else if (64..=128).contains(&n) {
        dst[..64].copy_from_slice(&src[..64]);
        dst[n - 64..].copy_from_slice(&src[n - 64..]);
    } else {
        dst.copy_from_slice(src);
    }
}
