//! Netlink attributes (TLVs): a checked reader and a small writer.
//!
//! An attribute is `struct nlattr { u16 nla_len; u16 nla_type; }` in host
//! byte order, followed by `nla_len - 4` bytes of payload and padding up to a
//! multiple of four. The two top bits of `nla_type` are flags
//! (`NLA_F_NESTED`, `NLA_F_NET_BYTEORDER`).
//!
//! No function here panics, whatever the input: a length that points past the
//! buffer, a length below the header size, a payload of the wrong size for
//! the requested type all come back as [`ParseError`]. The iterator stops
//! after the first error.

use std::fmt;

/// Attribute and message boundaries are aligned to this many bytes.
pub const ALIGNTO: usize = 4;
/// Size of `struct nlattr`.
pub const ATTR_HEADER_LEN: usize = 4;
/// `NLA_F_NESTED`: the payload is itself a list of attributes.
pub const F_NESTED: u16 = 1 << 15;
/// `NLA_F_NET_BYTEORDER`: the payload is in network byte order.
pub const F_NET_BYTEORDER: u16 = 1 << 14;
const TYPE_MASK: u16 = !(F_NESTED | F_NET_BYTEORDER);

/// `len` rounded up to the netlink alignment (saturating: never overflows).
#[inline]
pub const fn align(len: usize) -> usize {
    len.saturating_add(ALIGNTO - 1) & !(ALIGNTO - 1)
}

/// A netlink message or attribute could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Fewer bytes than a header or fixed part needs.
    #[error("truncated {what}: needs {need} bytes, {have} present")]
    Truncated {
        /// What was being parsed.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A length field smaller than its own header or larger than the buffer.
    #[error("{what} length field says {len} bytes, but {available} are available (minimum {min})")]
    BadLength {
        /// What was being parsed.
        what: &'static str,
        /// The length field's value.
        len: usize,
        /// Bytes left in the buffer.
        available: usize,
        /// The smallest valid value.
        min: usize,
    },
    /// An attribute's payload has the wrong size for its type.
    #[error("attribute type {kind}: payload of {len} bytes is not a valid {expected}")]
    BadPayload {
        /// Attribute type (flags removed).
        kind: u16,
        /// Payload length.
        len: usize,
        /// The expected type, e.g. "u32".
        expected: &'static str,
    },
    /// An attribute the message must carry is not there.
    #[error("no {what} in the message")]
    Missing {
        /// The attribute.
        what: &'static str,
    },
}

/// One attribute borrowed from a buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    raw_kind: u16,
    payload: &'a [u8],
}

impl fmt::Debug for Attr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attr")
            .field("kind", &self.kind())
            .field("nested", &self.is_nested())
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

impl<'a> Attr<'a> {
    /// The attribute type without the flag bits.
    #[inline]
    pub fn kind(&self) -> u16 {
        self.raw_kind & TYPE_MASK
    }

    /// Whether `NLA_F_NESTED` is set. Many kernel attributes that are nested
    /// do not set it, so callers decide by `kind`, not by this flag.
    #[inline]
    pub fn is_nested(&self) -> bool {
        self.raw_kind & F_NESTED != 0
    }

    /// The payload, without header and padding.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    fn fixed<const N: usize>(&self, expected: &'static str) -> Result<[u8; N], ParseError> {
        self.payload.try_into().map_err(|_| ParseError::BadPayload {
            kind: self.kind(),
            len: self.payload.len(),
            expected,
        })
    }

    /// The payload as a `u8`.
    pub fn u8(&self) -> Result<u8, ParseError> {
        self.fixed::<1>("u8").map(|b| b[0])
    }

    /// The payload as a host-order `u16`.
    pub fn u16(&self) -> Result<u16, ParseError> {
        self.fixed::<2>("u16").map(u16::from_ne_bytes)
    }

    /// The payload as a host-order `u32`.
    pub fn u32(&self) -> Result<u32, ParseError> {
        self.fixed::<4>("u32").map(u32::from_ne_bytes)
    }

    /// The payload as a host-order unsigned integer of 4 or 8 bytes (the
    /// kernel's variable-width `uint`, also accepted for `u64` fields).
    pub fn uint(&self) -> Result<u64, ParseError> {
        match self.payload.len() {
            4 => self.u32().map(u64::from),
            _ => self.fixed::<8>("u32 or u64").map(u64::from_ne_bytes),
        }
    }

    /// The payload as a string: up to the first NUL (the kernel
    /// NUL-terminates its strings), lossily decoded as UTF-8.
    pub fn string(&self) -> String {
        let end = self
            .payload
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.payload.len());
        String::from_utf8_lossy(&self.payload[..end]).into_owned()
    }

    /// The payload read as a list of attributes.
    #[inline]
    pub fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.payload)
    }
}

/// Iterator over the attributes in a buffer. Yields `Err` once on malformed
/// input and then stops.
#[derive(Clone, Debug)]
pub struct Attrs<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Attrs<'a> {
    /// Attributes in `buf`, which starts at an attribute header.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Attrs {
            rest: buf,
            failed: false,
        }
    }

    fn fail(&mut self, e: ParseError) -> Option<Result<Attr<'a>, ParseError>> {
        self.failed = true;
        self.rest = &[];
        Some(Err(e))
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let have = self.rest.len();
        let Some((head, _)) = self.rest.split_first_chunk::<ATTR_HEADER_LEN>() else {
            return self.fail(ParseError::Truncated {
                what: "attribute header",
                need: ATTR_HEADER_LEN,
                have,
            });
        };
        let len = usize::from(u16::from_ne_bytes([head[0], head[1]]));
        let raw_kind = u16::from_ne_bytes([head[2], head[3]]);
        if len < ATTR_HEADER_LEN || len > have {
            return self.fail(ParseError::BadLength {
                what: "attribute",
                len,
                available: have,
                min: ATTR_HEADER_LEN,
            });
        }
        let payload = &self.rest[ATTR_HEADER_LEN..len];
        // The last attribute may come without its trailing padding.
        let next = align(len).min(have);
        self.rest = &self.rest[next..];
        Some(Ok(Attr { raw_kind, payload }))
    }
}

impl std::iter::FusedIterator for Attrs<'_> {}

/// Appends attributes to a message under construction.
pub trait AttrWriter {
    /// Appends one attribute with `payload`, padded to the alignment.
    ///
    /// # Panics
    /// If `payload` is longer than an attribute can carry (65531 bytes);
    /// the request builders in this module only pass short payloads.
    fn put_attr(&mut self, kind: u16, payload: &[u8]);

    /// Appends a host-order `u32` attribute.
    fn put_u32(&mut self, kind: u16, value: u32) {
        self.put_attr(kind, &value.to_ne_bytes());
    }

    /// Appends a NUL-terminated string attribute.
    fn put_str(&mut self, kind: u16, value: &str) {
        let mut payload = Vec::with_capacity(value.len() + 1);
        payload.extend_from_slice(value.as_bytes());
        payload.push(0);
        self.put_attr(kind, &payload);
    }
}

impl AttrWriter for Vec<u8> {
    fn put_attr(&mut self, kind: u16, payload: &[u8]) {
        let len = u16::try_from(ATTR_HEADER_LEN + payload.len())
            .expect("netlink attribute payload fits in u16");
        self.extend_from_slice(&len.to_ne_bytes());
        self.extend_from_slice(&kind.to_ne_bytes());
        self.extend_from_slice(payload);
        self.resize(align(self.len()), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(buf: &[u8]) -> Vec<Result<(u16, Vec<u8>), ParseError>> {
        Attrs::new(buf)
            .map(|r| r.map(|a| (a.kind(), a.payload().to_vec())))
            .collect()
    }

    /// Two attributes: kind 3 = "lo\0" (len 7, padded to 8), kind 4 = u32 65536.
    fn golden() -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&7u16.to_ne_bytes());
        v.extend_from_slice(&3u16.to_ne_bytes());
        v.extend_from_slice(b"lo\0\0");
        v.extend_from_slice(&8u16.to_ne_bytes());
        v.extend_from_slice(&4u16.to_ne_bytes());
        v.extend_from_slice(&65536u32.to_ne_bytes());
        v
    }

    #[test]
    fn parses_golden_attributes() {
        let buf = golden();
        let attrs: Vec<_> = Attrs::new(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(attrs.len(), 2);
        assert_eq!(attrs[0].kind(), 3);
        assert_eq!(attrs[0].payload(), b"lo\0");
        assert_eq!(attrs[0].string(), "lo");
        assert_eq!(attrs[1].kind(), 4);
        assert_eq!(attrs[1].u32().unwrap(), 65536);
        assert_eq!(attrs[1].uint().unwrap(), 65536);
        assert_eq!(
            attrs[1].u16(),
            Err(ParseError::BadPayload {
                kind: 4,
                len: 4,
                expected: "u16"
            })
        );
    }

    #[test]
    fn writer_round_trips_and_pads() {
        let mut buf = Vec::new();
        buf.put_str(3, "lo");
        buf.put_u32(4, 65536);
        assert_eq!(buf, golden());
        assert_eq!(buf.len() % ALIGNTO, 0);
    }

    #[test]
    fn last_attribute_without_padding_is_accepted() {
        let mut buf = golden();
        buf.truncate(4); // drop everything after the first header...
        buf.extend_from_slice(b"lo\0"); // ...and put back the payload without padding
        let got = collect(&buf);
        assert_eq!(got, vec![Ok((3, b"lo\0".to_vec()))]);
    }

    #[test]
    fn every_truncation_is_an_error_or_a_prefix_never_a_panic() {
        let buf = golden();
        for cut in 0..buf.len() {
            let got = collect(&buf[..cut]);
            // Cutting inside the first attribute: the first item is an error.
            // Cutting at its end (7 or 8 bytes): one good attribute, no error.
            match cut {
                0 => assert!(got.is_empty()),
                1..=6 => assert!(matches!(got.as_slice(), [Err(_)]), "cut {cut}: {got:?}"),
                7 | 8 => assert_eq!(got.len(), 1, "cut {cut}"),
                _ => {
                    assert_eq!(got.len(), 2, "cut {cut}");
                    assert!(got[0].is_ok());
                    assert!(got[1].is_err(), "cut {cut}: {got:?}");
                }
            }
        }
    }

    #[test]
    fn length_below_header_is_rejected_and_iteration_stops() {
        let mut buf = golden();
        buf[0..2].copy_from_slice(&2u16.to_ne_bytes());
        let got = collect(&buf);
        assert_eq!(
            got,
            vec![Err(ParseError::BadLength {
                what: "attribute",
                len: 2,
                available: 16,
                min: 4
            })]
        );
    }

    #[test]
    fn length_past_the_buffer_is_rejected() {
        let mut buf = golden();
        buf[8..10].copy_from_slice(&0xfff0u16.to_ne_bytes());
        let got = collect(&buf);
        assert!(got[0].is_ok());
        assert!(matches!(
            got[1],
            Err(ParseError::BadLength { len: 0xfff0, .. })
        ));
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn flags_are_split_from_the_kind() {
        let mut buf = Vec::new();
        buf.put_attr(F_NESTED | 43, &[]);
        let a = Attrs::new(&buf).next().unwrap().unwrap();
        assert_eq!(a.kind(), 43);
        assert!(a.is_nested());
        assert_eq!(a.nested().count(), 0);
    }

    #[test]
    fn uint_accepts_4_and_8_bytes_only() {
        let mut buf = Vec::new();
        buf.put_attr(1, &7u64.to_ne_bytes());
        buf.put_attr(2, &7u32.to_ne_bytes());
        buf.put_attr(3, &[1, 2, 3]);
        let a: Vec<_> = Attrs::new(&buf).map(Result::unwrap).collect();
        assert_eq!(a[0].uint(), Ok(7));
        assert_eq!(a[1].uint(), Ok(7));
        assert!(a[2].uint().is_err());
        assert!(a[2].u8().is_err());
    }

    #[test]
    fn string_without_nul_and_invalid_utf8_do_not_panic() {
        let mut buf = Vec::new();
        buf.put_attr(1, b"abc");
        buf.put_attr(2, &[0xff, 0xfe, 0]);
        let a: Vec<_> = Attrs::new(&buf).map(Result::unwrap).collect();
        assert_eq!(a[0].string(), "abc");
        assert_eq!(a[1].string(), "\u{fffd}\u{fffd}");
    }

    proptest::proptest! {
        #[test]
        fn writer_output_reads_back(
            list in proptest::collection::vec(
                (0u16..0x3fff, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)),
                0..16,
            )
        ) {
            let mut buf = Vec::new();
            for (k, p) in &list {
                buf.put_attr(*k, p);
            }
            proptest::prop_assert_eq!(buf.len() % ALIGNTO, 0);
            let back: Vec<_> = collect(&buf).into_iter().collect::<Result<_, _>>().unwrap();
            proptest::prop_assert_eq!(back, list);
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(0u8..0x20, 0..256)) {
            // Small byte values make plausible lengths, so parsing goes deep.
            for a in Attrs::new(&buf).flatten() {
                let _ = (a.u8(), a.u16(), a.u32(), a.uint(), a.string());
                for n in a.nested().flatten() {
                    let _ = (n.uint(), n.nested().count());
                }
            }
        }
    }
}
