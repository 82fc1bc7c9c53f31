//! Netlink messages: `struct nlmsghdr` framing, request building, and the
//! kernel's error/ack message (`struct nlmsgerr` plus extended-ack TLVs).
//!
//! Parsing never panics: malformed input is a [`ParseError`].

use super::attr::{ALIGNTO, Attrs, ParseError, align};

/// Size of `struct nlmsghdr`.
pub const HEADER_LEN: usize = 16;

/// `NLMSG_NOOP`.
pub const NLMSG_NOOP: u16 = 1;
/// `NLMSG_ERROR`: an error, or an ack when the error code is 0.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: end of a dump.
pub const NLMSG_DONE: u16 = 3;
/// `NLMSG_OVERRUN`.
pub const NLMSG_OVERRUN: u16 = 4;

/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x01;
/// `NLM_F_MULTI`.
pub const NLM_F_MULTI: u16 = 0x02;
/// `NLM_F_ACK`.
pub const NLM_F_ACK: u16 = 0x04;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`): every object of the kind.
pub const NLM_F_DUMP: u16 = 0x300;
/// `NLM_F_CAPPED` (on an error message): only the request's header is echoed.
pub const NLM_F_CAPPED: u16 = 0x100;
/// `NLM_F_ACK_TLVS` (on an error message): extended-ack attributes follow.
pub const NLM_F_ACK_TLVS: u16 = 0x200;

/// `NLMSGERR_ATTR_MSG`: a human-readable error string.
const NLMSGERR_ATTR_MSG: u16 = 1;

/// The fields of `struct nlmsghdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Length of the message including this header.
    pub len: u32,
    /// Message type (`nlmsg_type`): a protocol's command or a genl family id.
    pub kind: u16,
    /// `NLM_F_*` flags.
    pub flags: u16,
    /// Sequence number.
    pub seq: u32,
    /// Sending port id.
    pub pid: u32,
}

impl Header {
    fn parse(buf: &[u8]) -> Result<Header, ParseError> {
        let Some((h, _)) = buf.split_first_chunk::<HEADER_LEN>() else {
            return Err(ParseError::Truncated {
                what: "netlink message header",
                need: HEADER_LEN,
                have: buf.len(),
            });
        };
        let u32_at = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        Ok(Header {
            len: u32_at(0),
            kind: u16::from_ne_bytes([h[4], h[5]]),
            flags: u16::from_ne_bytes([h[6], h[7]]),
            seq: u32_at(8),
            pid: u32_at(12),
        })
    }
}

/// One message borrowed from a receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// Its header.
    pub header: Header,
    /// Everything after the header, up to `header.len`.
    pub payload: &'a [u8],
}

/// Iterator over the messages in one datagram. Yields `Err` once on malformed
/// input and then stops.
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Messages<'a> {
    /// Messages in `buf` (one `recv`'s worth).
    pub fn new(buf: &'a [u8]) -> Self {
        Messages { rest: buf }
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let have = self.rest.len();
        let header = match Header::parse(self.rest) {
            Ok(h) => h,
            Err(e) => {
                self.rest = &[];
                return Some(Err(e));
            }
        };
        let len = header.len as usize;
        if len < HEADER_LEN || len > have {
            self.rest = &[];
            return Some(Err(ParseError::BadLength {
                what: "netlink message",
                len,
                available: have,
                min: HEADER_LEN,
            }));
        }
        let payload = &self.rest[HEADER_LEN..len];
        self.rest = &self.rest[align(len).min(have)..];
        Some(Ok(Message { header, payload }))
    }
}

impl std::iter::FusedIterator for Messages<'_> {}

/// Builds one request message: header (type `kind`, `NLM_F_REQUEST | flags`,
/// sequence `seq`, port id 0 = let the kernel fill it) followed by `body`.
///
/// # Panics
/// If `body` is longer than a netlink message can be (4 GiB).
pub fn request(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let len = HEADER_LEN + align(body.len());
    let len32 = u32::try_from(len).expect("netlink request fits in u32");
    let mut buf = Vec::with_capacity(len);
    buf.extend_from_slice(&len32.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(body);
    buf.resize(len, 0);
    debug_assert_eq!(buf.len() % ALIGNTO, 0);
    buf
}

/// The content of an `NLMSG_ERROR` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMessage {
    /// The error code as the kernel sent it: 0 for an ack, `-errno` otherwise.
    pub error: i32,
    /// The extended-ack message string, when the kernel attached one.
    pub ext_msg: Option<String>,
}

impl ErrorMessage {
    /// Parses the payload of an `NLMSG_ERROR` message whose header flags are
    /// `flags`.
    pub fn parse(flags: u16, payload: &[u8]) -> Result<ErrorMessage, ParseError> {
        let Some((code, rest)) = payload.split_first_chunk::<4>() else {
            return Err(ParseError::Truncated {
                what: "netlink error message",
                need: 4 + HEADER_LEN,
                have: payload.len(),
            });
        };
        let error = i32::from_ne_bytes(*code);
        // The echoed request: its header always, its body unless capped.
        let echoed = Header::parse(rest)?;
        let echoed_len = if flags & NLM_F_CAPPED != 0 {
            HEADER_LEN
        } else {
            align(echoed.len as usize).max(HEADER_LEN)
        };
        let mut ext_msg = None;
        if flags & NLM_F_ACK_TLVS != 0 {
            // A bad echoed length or a malformed TLV costs us only the
            // optional message, never the error code itself.
            if let Some(tlvs) = rest.get(echoed_len..) {
                ext_msg = Attrs::new(tlvs)
                    .map_while(Result::ok)
                    .find(|a| a.kind() == NLMSGERR_ATTR_MSG)
                    .map(|a| a.string());
            }
        }
        Ok(ErrorMessage { error, ext_msg })
    }
}

#[cfg(test)]
mod tests {
    use super::super::attr::AttrWriter;
    use super::*;

    #[test]
    fn request_header_layout() {
        let m = request(18, NLM_F_ACK, 7, &[1, 2, 3]);
        assert_eq!(m.len(), 20);
        assert_eq!(&m[0..4], &20u32.to_ne_bytes());
        assert_eq!(&m[4..6], &18u16.to_ne_bytes());
        assert_eq!(&m[6..8], &(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        assert_eq!(&m[8..12], &7u32.to_ne_bytes());
        assert_eq!(&m[12..16], &[0; 4]);
        assert_eq!(&m[16..], &[1, 2, 3, 0]);
    }

    #[test]
    fn iterates_two_messages_and_rejects_truncation() {
        let mut buf = request(16, 0, 1, &[9; 8]);
        buf.extend(request(NLMSG_DONE, 0, 1, &[0; 4]));
        let msgs: Vec<_> = Messages::new(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].header.kind, 16);
        assert_eq!(msgs[0].payload, &[9; 8]);
        assert_eq!(msgs[1].header.kind, NLMSG_DONE);
        for cut in 1..buf.len() {
            let got: Vec<_> = Messages::new(&buf[..cut]).collect();
            let complete = got.iter().filter(|m| m.is_ok()).count();
            let expect_complete = usize::from(cut >= 24);
            assert_eq!(complete, expect_complete, "cut {cut}");
            assert!(got.last().unwrap().is_err() || cut == 24, "cut {cut}");
        }
    }

    #[test]
    fn message_length_below_header_is_rejected() {
        let mut buf = request(16, 0, 1, &[]);
        buf[0..4].copy_from_slice(&8u32.to_ne_bytes());
        let got: Vec<_> = Messages::new(&buf).collect();
        assert!(matches!(
            got.as_slice(),
            [Err(ParseError::BadLength { len: 8, .. })]
        ));
    }

    /// An `NLMSG_ERROR` payload as the kernel sends it for a capped request
    /// with extended ack: -ENODEV, the echoed header, then NLMSGERR_ATTR_MSG.
    fn golden_error(flags: u16) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&(-19i32).to_ne_bytes());
        let echoed = request(18, 0, 42, &[0; 16]);
        if flags & NLM_F_CAPPED != 0 {
            p.extend_from_slice(&echoed[..HEADER_LEN]);
        } else {
            p.extend_from_slice(&echoed);
        }
        p.put_str(NLMSGERR_ATTR_MSG, "no such device");
        p
    }

    #[test]
    fn parses_error_with_ext_ack_capped_and_uncapped() {
        for flags in [NLM_F_CAPPED | NLM_F_ACK_TLVS, NLM_F_ACK_TLVS] {
            let e = ErrorMessage::parse(flags, &golden_error(flags)).unwrap();
            assert_eq!(e.error, -19);
            assert_eq!(
                e.ext_msg.as_deref(),
                Some("no such device"),
                "flags {flags:#x}"
            );
        }
    }

    #[test]
    fn error_without_tlv_flag_ignores_trailing_bytes() {
        let flags = NLM_F_CAPPED;
        let e = ErrorMessage::parse(flags, &golden_error(flags)).unwrap();
        assert_eq!(
            e,
            ErrorMessage {
                error: -19,
                ext_msg: None
            }
        );
    }

    #[test]
    fn truncated_error_message_is_an_error_or_loses_only_the_text() {
        let flags = NLM_F_CAPPED | NLM_F_ACK_TLVS;
        let full = golden_error(flags);
        // The text attribute is whole (if unpadded) from this length on.
        let text_end = 4 + HEADER_LEN + 4 + "no such device\0".len();
        for cut in 0..full.len() {
            match ErrorMessage::parse(flags, &full[..cut]) {
                Ok(e) => {
                    assert!(cut >= 4 + HEADER_LEN, "cut {cut}");
                    assert_eq!(e.error, -19);
                    assert_eq!(e.ext_msg.is_some(), cut >= text_end, "cut {cut}");
                }
                Err(_) => assert!(cut < 4 + HEADER_LEN, "cut {cut}"),
            }
        }
    }

    #[test]
    fn error_with_absurd_echoed_length_keeps_the_code() {
        let flags = NLM_F_ACK_TLVS;
        let mut p = golden_error(flags);
        p[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        let e = ErrorMessage::parse(flags, &p).unwrap();
        assert_eq!(e.error, -19);
        assert_eq!(e.ext_msg, None);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_datagrams_never_panic(buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            for m in Messages::new(&buf).flatten() {
                for flags in [0, NLM_F_ACK_TLVS, NLM_F_CAPPED | NLM_F_ACK_TLVS] {
                    let _ = ErrorMessage::parse(flags, m.payload);
                }
            }
            for flags in [0, NLM_F_ACK_TLVS, NLM_F_CAPPED | NLM_F_ACK_TLVS] {
                let _ = ErrorMessage::parse(flags, &buf);
            }
        }
    }
}
