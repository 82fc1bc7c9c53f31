//! xtcp-engine: a kernel-bypass TCP engine on AF_XDP.
//!
//! Layers, bottom up (each knows only the ones below it): [`frame`] (shared
//! vocabulary), [`wire`], [`seg`], [`tcp`], [`xsk`] (AF_XDP; the home of `unsafe`),
//! [`xdp`] (steering program), `worker`, [`app`]. [`testnet`] builds network
//! namespaces and veth pairs for tests and benchmarks.
#![deny(unsafe_code)]

pub mod app;
pub mod caps;
pub mod frame;
pub mod netlink;
pub mod probe;
pub mod seg;
#[expect(
    unsafe_code,
    reason = "FFI points: ethtool ioctls and their guarded buffers, setns, socket options, mallopt, getrusage"
)]
pub mod sys;
pub mod tcp;
pub mod testnet;
pub mod wire;
pub mod worker;
pub mod xdp;
#[expect(
    unsafe_code,
    reason = "AF_XDP: mmap'd rings and UMEM shared with the kernel"
)]
pub mod xsk;
