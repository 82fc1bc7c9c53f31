//! A small netlink client: what `probe` needs (links, XDP features and
//! attachments, queues), the engine's next hop (routes and neighbours) and
//! the peer's `tx_dropped` for the XDP statistics.
//!
//! - [`attr`]: TLV reader/writer; [`msg`]: message framing and error replies.
//!   Both are pure and never panic on malformed input.
//! - [`socket`]: a blocking request/reply socket (rustix, no `unsafe`).
//! - [`route`]: rtnetlink `RTM_GETLINK` for one interface.
//! - [`neigh`]: the route to a destination (`RTM_GETROUTE`) and its next
//!   hop's link-layer address (`RTM_GETNEIGH`).
//! - [`addr`]: interface addresses (`RTM_GETADDR` dump); the interface a
//!   destination is routed through, or that holds a local address.
//! - [`genl`]: generic netlink family resolution and netdev `dev-get`.
//!
//! Sockets belong to the network namespace of the thread that creates them,
//! so everything here answers for the caller's current namespace (unlike
//! `/sys/class/net`, which shows the namespace of whoever mounted sysfs).

pub mod addr;
pub mod attr;
pub mod genl;
pub mod msg;
pub mod neigh;
pub mod route;
pub mod socket;

use std::io;

pub use attr::ParseError;
pub use socket::NetlinkSocket;

/// A netlink exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// A socket system call failed.
    #[error("`{call}` failed")]
    Io {
        /// The call, e.g. "socket(AF_NETLINK)".
        call: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The kernel answered with an error code.
    #[error("kernel answered {source}{}", .message.as_ref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        /// The extended-ack text, when the kernel gave one.
        message: Option<String>,
        /// The errno as an OS error.
        #[source]
        source: io::Error,
    },
    /// The reply could not be parsed.
    #[error("malformed netlink reply")]
    Malformed(#[from] ParseError),
    /// The reply did not fit the receive buffer.
    #[error("netlink reply of {len} bytes exceeds the {capacity}-byte buffer")]
    Truncated {
        /// The reply's real length.
        len: usize,
        /// The buffer's size.
        capacity: usize,
    },
    /// A reply of a type the request cannot produce.
    #[error("unexpected netlink reply of message type {kind}")]
    Unexpected {
        /// Its `nlmsg_type`.
        kind: u16,
    },
}

impl NetlinkError {
    pub(crate) fn kernel(e: msg::ErrorMessage) -> Self {
        NetlinkError::Kernel {
            message: e.ext_msg,
            source: io::Error::from_raw_os_error(e.error.saturating_neg()),
        }
    }

    /// The errno behind this error, for kernel answers and failed calls.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Io { source, .. } | NetlinkError::Kernel { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }
}
