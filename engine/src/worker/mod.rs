//! Workers: the per-queue loop that joins the sans-IO TCP core to AF_XDP.
//!
//! - [`port`]: the packet I/O of one queue — TCP segments in and out of an
//!   AF_XDP socket with Ethernet and IP framing, receive-checksum policy and
//!   drop counters;
//! - [`thread`]: one pinned worker per queue — its connections, timers,
//!   application sources and sinks, connections handed over to an
//!   application in the control thread, counters;
//! - [`registry`]: which worker owns which connection (lock-free), for
//!   segments that arrive on another worker's queue;
//! - [`engine`]: setup (addresses, port reservation, steering, sockets),
//!   the control thread (counters, connection reports, an optional
//!   [`App`] such as the iperf3 server or client), lifecycle and teardown.

pub mod engine;
pub mod port;
pub mod registry;
pub mod thread;

pub use engine::{
    App, AppIn, AppOut, CpuTimes, EngineConfig, EngineError, EngineReport, Opener, Progress, Role,
    RxCsumPolicy, process_cpu, process_times, run, run_app, validate_cores,
};
pub use port::{PortConfig, PortCounters, RxCsum, XskPort};
pub use thread::{ConnReport, SinkKind, WaitStrategy, WorkerCounters};
