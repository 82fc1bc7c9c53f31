//! What rides on TCP: application protocols spoken over xtcp's streams.
//!
//! Every module here is sans-IO: it consumes bytes and the current time and
//! produces bytes and events; the engine (or a test driver over kernel
//! sockets) owns the connections and the clock.

pub mod iperf3;
