//! xtcp-engine: a kernel-bypass TCP engine on AF_XDP.
//!
//! Layers, bottom up (each knows only the ones below it): [`frame`] (shared
//! vocabulary), `wire`, `seg`, `tcp`, [`xsk`] (AF_XDP; the home of `unsafe`),
//! [`xdp`] (steering program), `worker`, `app`. [`testnet`] builds network
//! namespaces and veth pairs for tests and benchmarks.
#![deny(unsafe_code)]

pub mod frame;
pub mod seg;
pub mod wire;
