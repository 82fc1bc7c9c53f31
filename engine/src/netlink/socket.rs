//! A blocking netlink socket for one request at a time: one reply, an
//! acknowledgement, or a dump's messages.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use super::NetlinkError;
use super::msg::{
    ErrorMessage, Messages, NLM_F_DUMP, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, request,
};

/// Large enough for any single non-dump reply we ask for (a link message
/// without statistics is a few KiB), and for one datagram of a dump (the
/// kernel fills a dump's datagrams up to about a page or two).
const RECV_BUF_LEN: usize = 64 * 1024;
/// How long to wait for a reply before giving up (`EAGAIN`).
const RECV_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A netlink socket of one protocol, bound with a kernel-chosen port id.
///
/// It belongs to the network namespace of the thread that created it.
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

/// One reply message, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The reply's `nlmsg_type`.
    pub kind: u16,
    /// The reply's payload (after `struct nlmsghdr`).
    pub payload: Vec<u8>,
}

fn io_err(call: &'static str) -> impl FnOnce(rustix::io::Errno) -> NetlinkError {
    move |e| NetlinkError::Io {
        call,
        source: io::Error::from(e),
    }
}

impl NetlinkSocket {
    /// A `NETLINK_ROUTE` socket.
    pub fn route() -> Result<Self, NetlinkError> {
        Self::open(None)
    }

    /// A `NETLINK_GENERIC` socket.
    pub fn generic() -> Result<Self, NetlinkError> {
        Self::open(Some(rustix::net::netlink::GENERIC))
    }

    fn open(protocol: Option<rustix::net::Protocol>) -> Result<Self, NetlinkError> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            protocol,
        )
        .map_err(io_err("socket(AF_NETLINK)"))?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 0))
            .map_err(io_err("bind(AF_NETLINK)"))?;
        // The kernel answers these requests synchronously; the timeout only
        // keeps a wedged socket from hanging the caller forever.
        rustix::net::sockopt::set_socket_timeout(
            &fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(RECV_TIMEOUT),
        )
        .map_err(io_err("setsockopt(SO_RCVTIMEO)"))?;
        // Only improves error messages; kernels before 4.12 lack it.
        if let Err(e) = crate::sys::set_netlink_ext_ack(fd.as_fd()) {
            tracing::debug!("NETLINK_EXT_ACK not available: {e}");
        }
        Ok(NetlinkSocket {
            fd,
            seq: 0,
            buf: vec![0; RECV_BUF_LEN],
        })
    }

    /// Sends one request (`kind`, `NLM_F_REQUEST | flags`, `body`) and
    /// returns its single reply message. A kernel error reply becomes
    /// [`NetlinkError::Kernel`]; replies to other sequence numbers are skipped.
    /// Not for dumps (`NLM_F_DUMP`), which answer with many messages.
    pub fn request(&mut self, kind: u16, flags: u16, body: &[u8]) -> Result<Reply, NetlinkError> {
        let seq = self.send(kind, flags, body)?;
        loop {
            let n = self.recv_datagram()?;
            for m in Messages::new(&self.buf[..n]) {
                let m = m?;
                if m.header.seq != seq {
                    continue;
                }
                match m.header.kind {
                    NLMSG_NOOP => continue,
                    NLMSG_ERROR => {
                        let e = ErrorMessage::parse(m.header.flags, m.payload)?;
                        if e.error == 0 {
                            // An ack without data: we did not ask for one.
                            return Err(NetlinkError::Unexpected { kind: NLMSG_ERROR });
                        }
                        return Err(NetlinkError::kernel(e));
                    }
                    NLMSG_DONE => return Err(NetlinkError::Unexpected { kind: NLMSG_DONE }),
                    kind => {
                        return Ok(Reply {
                            kind,
                            payload: m.payload.to_vec(),
                        });
                    }
                }
            }
        }
    }
}

impl NetlinkSocket {
    /// Sends one dump request (`kind`, `NLM_F_REQUEST | NLM_F_DUMP`, `body`)
    /// and returns every message of the answer up to `NLMSG_DONE`. A kernel
    /// error reply becomes [`NetlinkError::Kernel`].
    pub fn dump(&mut self, kind: u16, body: &[u8]) -> Result<Vec<Reply>, NetlinkError> {
        let seq = self.send(kind, NLM_F_DUMP, body)?;
        let mut out = Vec::new();
        loop {
            let n = self.recv_datagram()?;
            for m in Messages::new(&self.buf[..n]) {
                let m = m?;
                if m.header.seq != seq {
                    continue;
                }
                match m.header.kind {
                    NLMSG_NOOP => continue,
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let e = ErrorMessage::parse(m.header.flags, m.payload)?;
                        if e.error == 0 {
                            return Err(NetlinkError::Unexpected { kind: NLMSG_ERROR });
                        }
                        return Err(NetlinkError::kernel(e));
                    }
                    kind => out.push(Reply {
                        kind,
                        payload: m.payload.to_vec(),
                    }),
                }
            }
        }
    }

    /// Sends one request with the next sequence number; returns it.
    fn send(&mut self, kind: u16, flags: u16, body: &[u8]) -> Result<u32, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let msg = request(kind, flags, self.seq, body);
        let kernel = SocketAddrNetlink::new(0, 0);
        loop {
            match rustix::net::sendto(&self.fd, &msg, SendFlags::empty(), &kernel) {
                Ok(_) => return Ok(self.seq),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(io_err("sendto(AF_NETLINK)")(e)),
            }
        }
    }

    /// Receives one datagram into the buffer and returns its length; a
    /// datagram larger than the buffer is [`NetlinkError::Truncated`].
    fn recv_datagram(&mut self) -> Result<usize, NetlinkError> {
        loop {
            match rustix::net::recv(&self.fd, &mut self.buf[..], RecvFlags::TRUNC) {
                Ok((n, full)) if full > n => {
                    return Err(NetlinkError::Truncated {
                        len: full,
                        capacity: n,
                    });
                }
                Ok((n, _)) => return Ok(n),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(io_err("recv(AF_NETLINK)")(e)),
            }
        }
    }

    /// Sends one request that changes something and waits for the kernel's
    /// acknowledgement (`NLM_F_ACK`); a non-zero error becomes
    /// [`NetlinkError::Kernel`].
    pub fn request_ack(&mut self, kind: u16, flags: u16, body: &[u8]) -> Result<(), NetlinkError> {
        let seq = self.send(kind, flags | super::msg::NLM_F_ACK, body)?;
        loop {
            let n = self.recv_datagram()?;
            for m in Messages::new(&self.buf[..n]) {
                let m = m?;
                if m.header.seq != seq || m.header.kind != NLMSG_ERROR {
                    continue;
                }
                let e = ErrorMessage::parse(m.header.flags, m.payload)?;
                if e.error == 0 {
                    return Ok(());
                }
                return Err(NetlinkError::kernel(e));
            }
        }
    }
}

impl AsFd for NetlinkSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
