//! TCP (RFC 9293) with options: MSS, window scale, SACK-permitted, SACK
//! blocks (up to 4), timestamps, NOP and EOL. Unknown options are skipped by
//! their length; malformed option lengths are rejected.
//!
//! [`TcpPacket::new_checked`] guarantees the header, options included, is in
//! the buffer; after it no accessor panics. [`TcpRepr::parse`] does not
//! verify the checksum: the receive-checksum policy (verify or trust) is the
//! caller's, with [`TcpPacket::verify_checksum`]. Emitting lays options out
//! as Linux does (MSS, SACK-permitted + timestamps, window scale, SACK
//! blocks), padded with NOPs to a multiple of four.

use super::checksum;
use super::seq::SeqNumber;
use super::{Error, Result, be16, be32, put16, put32};
use core::fmt;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const DOFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const OPTIONS: usize = 20;
}

/// Offset of the sequence number.
pub const SEQ_OFF: usize = field::SEQ;
/// Offset of the flags byte.
pub const FLAGS_OFF: usize = field::FLAGS;
/// Offset of the checksum.
pub const CHECKSUM_OFF: usize = field::CHECKSUM;
/// Offset of the acknowledgement number.
pub const ACK_OFF: usize = field::ACK;
/// Offset of the window.
pub const WINDOW_OFF: usize = field::WINDOW;

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Largest header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;
/// Largest options area.
pub const MAX_OPTIONS_LEN: usize = 40;

mod kind {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WSCALE: u8 = 3;
    pub const SACK_PERM: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMP: u8 = 8;
}

/// TCP flags (the low 8 bits of the flags field).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// FIN.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// SYN.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// RST.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// PSH.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// ACK.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// URG.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECE.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// CWR.
    pub const CWR: TcpFlags = TcpFlags(0x80);
    /// No flag.
    pub const NONE: TcpFlags = TcpFlags(0);

    /// True if every flag of `other` is set here.
    #[inline]
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any flag of `other` is set here.
    #[inline]
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// These flags without those of `other`.
    #[inline]
    #[must_use]
    pub const fn without(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & !other.0)
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl core::ops::BitOrAssign for TcpFlags {
    fn bitor_assign(&mut self, rhs: TcpFlags) {
        self.0 |= rhs.0;
    }
}

impl core::ops::BitAnd for TcpFlags {
    type Output = TcpFlags;
    fn bitand(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & rhs.0)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        let mut first = true;
        for (i, n) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// The timestamps option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct TcpTimestamp {
    /// TSval.
    pub tsval: u32,
    /// TSecr.
    pub tsecr: u32,
}

/// Up to four SACK blocks (left edge, right edge).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SackBlocks {
    blocks: [(SeqNumber, SeqNumber); 4],
    count: u8,
}

impl SackBlocks {
    /// No blocks.
    pub const EMPTY: SackBlocks = SackBlocks {
        blocks: [(SeqNumber(0), SeqNumber(0)); 4],
        count: 0,
    };

    /// Blocks from a slice; `None` if there are more than four.
    pub fn from_slice(s: &[(SeqNumber, SeqNumber)]) -> Option<SackBlocks> {
        if s.len() > 4 {
            return None;
        }
        let mut b = SackBlocks::EMPTY;
        b.blocks[..s.len()].copy_from_slice(s);
        b.count = s.len() as u8;
        Some(b)
    }

    /// Appends a block; false if four are already present.
    pub fn push(&mut self, block: (SeqNumber, SeqNumber)) -> bool {
        if self.count >= 4 {
            return false;
        }
        self.blocks[self.count as usize] = block;
        self.count += 1;
        true
    }

    /// The blocks.
    pub fn as_slice(&self) -> &[(SeqNumber, SeqNumber)] {
        &self.blocks[..self.count as usize]
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// One option as found in a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// End of option list.
    EndOfList,
    /// No-operation.
    NoOperation,
    /// Maximum segment size.
    MaxSegmentSize(u16),
    /// Window scale shift count.
    WindowScale(u8),
    /// SACK permitted.
    SackPermitted,
    /// SACK blocks.
    Sack(SackBlocks),
    /// Timestamps.
    Timestamp(TcpTimestamp),
    /// Anything else: kind and data (without kind and length bytes).
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data.
        data: &'a [u8],
    },
}

impl<'a> TcpOption<'a> {
    /// Parses one option at the start of `b`; returns it and the rest.
    /// Known options with a wrong length, and lengths < 2 or past the end,
    /// are `Malformed`.
    pub fn parse(b: &'a [u8]) -> Result<(TcpOption<'a>, &'a [u8])> {
        let Some(&k) = b.first() else {
            return Err(Error::Truncated);
        };
        match k {
            kind::EOL => return Ok((TcpOption::EndOfList, &[])),
            kind::NOP => return Ok((TcpOption::NoOperation, &b[1..])),
            _ => {}
        }
        let Some(&len) = b.get(1) else {
            return Err(Error::Malformed);
        };
        let len = len as usize;
        if len < 2 || len > b.len() {
            return Err(Error::Malformed);
        }
        let data = &b[2..len];
        let rest = &b[len..];
        let opt = match (k, len) {
            (kind::MSS, 4) => TcpOption::MaxSegmentSize(be16(data, 0)),
            (kind::WSCALE, 3) => TcpOption::WindowScale(data[0]),
            (kind::SACK_PERM, 2) => TcpOption::SackPermitted,
            (kind::TIMESTAMP, 10) => TcpOption::Timestamp(TcpTimestamp {
                tsval: be32(data, 0),
                tsecr: be32(data, 4),
            }),
            (kind::SACK, l) if (10..=34).contains(&l) && (l - 2) % 8 == 0 => {
                let mut s = SackBlocks::EMPTY;
                for c in data.chunks_exact(8) {
                    s.push((SeqNumber(be32(c, 0)), SeqNumber(be32(c, 4))));
                }
                TcpOption::Sack(s)
            }
            (kind::MSS | kind::WSCALE | kind::SACK_PERM | kind::TIMESTAMP | kind::SACK, _) => {
                return Err(Error::Malformed);
            }
            _ => TcpOption::Unknown { kind: k, data },
        };
        Ok((opt, rest))
    }
}

/// The options xtcp understands, gathered from a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct TcpOptions {
    /// MSS.
    pub mss: Option<u16>,
    /// Window scale shift (as received; the TCP layer clamps to 14).
    pub window_scale: Option<u8>,
    /// SACK permitted.
    pub sack_permitted: bool,
    /// Timestamps.
    pub timestamp: Option<TcpTimestamp>,
    /// SACK blocks.
    pub sack: SackBlocks,
}

impl TcpOptions {
    /// No options.
    pub const NONE: TcpOptions = TcpOptions {
        mss: None,
        window_scale: None,
        sack_permitted: false,
        timestamp: None,
        sack: SackBlocks::EMPTY,
    };

    /// Parses an options area. A later duplicate replaces an earlier one;
    /// parsing stops at EOL; unknown options are skipped.
    pub fn parse(b: &[u8]) -> Result<TcpOptions> {
        // What nearly every segment of a connection with timestamps begins
        // with (RFC 7323 Appendix A's layout, as Linux and xtcp send it):
        // NOP, NOP, the timestamp; taken in one step, the rest one by one.
        match b.split_first_chunk::<12>() {
            Some((head, rest)) if head[..4] == [kind::NOP, kind::NOP, kind::TIMESTAMP, 10] => {
                let ts = TcpTimestamp {
                    tsval: be32(head, 4),
                    tsecr: be32(head, 8),
                };
                Self::parse_each(
                    rest,
                    TcpOptions {
                        timestamp: Some(ts),
                        ..TcpOptions::NONE
                    },
                )
            }
            _ => Self::parse_each(b, TcpOptions::NONE),
        }
    }

    /// Parses options one by one into `o`.
    pub(crate) fn parse_each(mut b: &[u8], mut o: TcpOptions) -> Result<TcpOptions> {
        while !b.is_empty() {
            let (opt, rest) = TcpOption::parse(b)?;
            match opt {
                TcpOption::EndOfList => break,
                TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
                TcpOption::MaxSegmentSize(v) => o.mss = Some(v),
                TcpOption::WindowScale(v) => o.window_scale = Some(v),
                TcpOption::SackPermitted => o.sack_permitted = true,
                TcpOption::Timestamp(t) => o.timestamp = Some(t),
                TcpOption::Sack(s) => o.sack = s,
            }
            b = rest;
        }
        Ok(o)
    }

    /// Bytes these options take when emitted (a multiple of 4, possibly
    /// more than [`MAX_OPTIONS_LEN`], which `emit` refuses).
    pub const fn len(&self) -> usize {
        let mut n = 0;
        if self.mss.is_some() {
            n += 4;
        }
        if self.timestamp.is_some() {
            n += 12; // SACK-permitted rides in the two bytes before TS, else NOP NOP
        } else if self.sack_permitted {
            n += 4;
        }
        if self.window_scale.is_some() {
            n += 4;
        }
        if self.sack.count > 0 {
            n += 4 + 8 * self.sack.count as usize;
        }
        n
    }

    /// True if no option is set.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the options into `b[..self.len()]`. `Malformed` if they do not
    /// fit in 40 bytes; `Truncated` if `b` is too short.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize> {
        let n = self.len();
        if n > MAX_OPTIONS_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < n {
            return Err(Error::Truncated);
        }
        let mut i = 0;
        if let Some(mss) = self.mss {
            b[i..i + 2].copy_from_slice(&[kind::MSS, 4]);
            put16(b, i + 2, mss);
            i += 4;
        }
        if let Some(ts) = self.timestamp {
            if self.sack_permitted {
                b[i..i + 2].copy_from_slice(&[kind::SACK_PERM, 2]);
            } else {
                b[i..i + 2].copy_from_slice(&[kind::NOP, kind::NOP]);
            }
            b[i + 2..i + 4].copy_from_slice(&[kind::TIMESTAMP, 10]);
            put32(b, i + 4, ts.tsval);
            put32(b, i + 8, ts.tsecr);
            i += 12;
        } else if self.sack_permitted {
            b[i..i + 4].copy_from_slice(&[kind::NOP, kind::NOP, kind::SACK_PERM, 2]);
            i += 4;
        }
        if let Some(ws) = self.window_scale {
            b[i..i + 4].copy_from_slice(&[kind::NOP, kind::WSCALE, 3, ws]);
            i += 4;
        }
        if !self.sack.is_empty() {
            let l = 2 + 8 * self.sack.len();
            b[i..i + 4].copy_from_slice(&[kind::NOP, kind::NOP, kind::SACK, l as u8]);
            i += 4;
            for (left, right) in self.sack.as_slice() {
                put32(b, i, left.0);
                put32(b, i + 4, right.0);
                i += 8;
            }
        }
        Ok(i)
    }
}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// A view without checks (for emitting).
    pub const fn new_unchecked(buffer: T) -> TcpPacket<T> {
        TcpPacket { buffer }
    }

    /// A view whose header (with options) is present.
    pub fn new_checked(buffer: T) -> Result<TcpPacket<T>> {
        let p = TcpPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the header, options included, fits.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < hl {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Sequence number.
    pub fn seq(&self) -> SeqNumber {
        SeqNumber(be32(self.buffer.as_ref(), field::SEQ))
    }
    /// Acknowledgement number.
    pub fn ack(&self) -> SeqNumber {
        SeqNumber(be32(self.buffer.as_ref(), field::ACK))
    }
    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::DOFF] >> 4) as usize * 4
    }
    /// Flags.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.buffer.as_ref()[field::FLAGS])
    }
    /// Window (unscaled).
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT)
    }
    /// The options area.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }
    /// The payload (the rest of the buffer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// True if header + payload (the whole buffer) verify against the
    /// pseudo-header sum (see [`super::IpRepr::pseudo_sum`]).
    pub fn verify_checksum(&self, pseudo_sum: u16) -> bool {
        checksum::add(pseudo_sum, checksum::sum(self.buffer.as_ref())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: SeqNumber) {
        put32(self.buffer.as_mut(), field::SEQ, v.0);
    }
    /// Sets the acknowledgement number.
    pub fn set_ack(&mut self, v: SeqNumber) {
        put32(self.buffer.as_mut(), field::ACK, v.0);
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, f: TcpFlags) {
        self.buffer.as_mut()[field::FLAGS] = f.0;
    }
    /// Sets the window.
    pub fn set_window(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::WINDOW, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Computes the checksum over the whole buffer (header + payload).
    pub fn fill_checksum(&mut self, pseudo_sum: u16) {
        self.set_checksum(0);
        let s = checksum::add(pseudo_sum, checksum::sum(self.buffer.as_ref()));
        self.set_checksum(!s);
    }
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }
}

/// A parsed TCP header (the payload stays in the packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: SeqNumber,
    /// Acknowledgement number (meaningful with ACK).
    pub ack: SeqNumber,
    /// Flags.
    pub flags: TcpFlags,
    /// Window (unscaled).
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options.
    pub options: TcpOptions,
}

impl TcpRepr {
    /// Parses a checked header and its options. Does not verify the checksum.
    pub fn parse<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Result<TcpRepr> {
        p.check_len()?;
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq(),
            ack: p.ack(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
            options: TcpOptions::parse(p.options())?,
        })
    }

    /// Header length this repr emits, options included.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Writes the header (options included, checksum field zero). Fill the
    /// checksum afterwards with [`TcpPacket::fill_checksum`], or let `seg`
    /// compute it.
    ///
    /// `Malformed` if the options exceed 40 bytes; `Truncated` if the
    /// buffer is shorter than `header_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut TcpPacket<T>) -> Result<()> {
        let hl = self.header_len();
        if self.options.len() > MAX_OPTIONS_LEN {
            return Err(Error::Malformed);
        }
        let b = p.buffer.as_mut();
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        put16(b, field::SRC_PORT, self.src_port);
        put16(b, field::DST_PORT, self.dst_port);
        put32(b, field::SEQ, self.seq.0);
        put32(b, field::ACK, self.ack.0);
        b[field::DOFF] = ((hl / 4) as u8) << 4;
        b[field::FLAGS] = self.flags.0;
        put16(b, field::WINDOW, self.window);
        put16(b, field::CHECKSUM, 0);
        put16(b, field::URGENT, self.urgent);
        self.options.emit(&mut b[field::OPTIONS..hl])?;
        Ok(())
    }
}
