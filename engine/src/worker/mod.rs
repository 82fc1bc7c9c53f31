//! Workers: the per-queue loop that joins the sans-IO TCP core to AF_XDP.
//!
//! So far: [`port`], the packet I/O of one queue — TCP segments in and out
//! of an AF_XDP socket with Ethernet and IP framing, receive-checksum policy
//! and drop counters. The pinned worker threads, connection placement and
//! the control thread build on it (issue 5).

pub mod port;

pub use port::{PortConfig, PortCounters, RxCsum, XskPort};
