//! Workers: the per-queue loop that joins the sans-IO TCP core to AF_XDP.
//!
//! - [`port`]: the packet I/O of one queue — TCP segments in and out of an
//!   AF_XDP socket: receive with Ethernet and IP parsing, receive-checksum
//!   policy and drop counters; send through `seg` (header template, payload
//!   by reference into send-buffer frames);
//! - [`sendmem`]: a connection's send buffer as UMEM frames it owns;
//! - [`thread`]: one pinned worker per queue — the loop: its connections,
//!   timers, the shares of frames and ring they get, hand-overs between
//!   workers, counters;
//! - [`conn`]: a connection as the worker holds it, with what its bytes come
//!   from and go to: a bulk source and sink, or an application connection
//!   whose orders and reports travel to and from the control thread;
//! - [`msg`]: what workers and the control thread tell each other
//!   (counters, connection reports, application messages);
//! - [`bulk`]: the sources and sinks of `xtcp send` / `recv` (pattern,
//!   zeros, files read in place, pipes to I/O threads);
//! - [`cores`]: which cores the workers run on, and other xtcp workers
//!   already pinned there;
//! - [`registry`]: which worker owns which connection (lock-free), for
//!   segments that arrive on another worker's queue;
//! - [`engine`]: setup (addresses, port reservation, steering, sockets),
//!   the control thread (counters, connection reports, an optional
//!   [`App`] such as the iperf3 server or client), lifecycle and teardown.

pub mod bulk;
pub mod conn;
pub mod cores;
pub mod engine;
pub mod msg;
pub mod port;
pub mod registry;
pub mod sendmem;
pub mod table;
pub mod thread;

pub use conn::SinkKind;
pub use cores::validate_cores;
pub use engine::{
    App, AppIn, AppOut, CpuTimes, DEFAULT_SEND_BUFFER, DEFAULT_SEND_INITIAL, EngineConfig,
    EngineError, EngineReport, FrameSizePolicy, ListenOn, Opener, Progress, Role, RxCsumPolicy,
    SEND_BYTES, TX_HEADROOM, TxLayoutPolicy, UmemReport, check_listener, default_frames,
    listen_addrs, process_cpu, process_times, run, run_app,
};
pub use msg::{
    ConnReport, Payload, TcpSample, WorkerCounters, filler_period, random_filler, repeating_pattern,
};
pub use port::{HeaderCache, IpMarks, PortConfig, PortCounters, RxCsum, TxLayout, XskPort};
pub use sendmem::UmemFrames;
pub use thread::WaitStrategy;
