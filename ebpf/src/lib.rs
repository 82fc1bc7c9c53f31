//! xtcp's XDP programs as object bytes, compiled from C by `build.rs`.
//!
//! The layouts shared with userspace are in `c/steer.h`; `xtcp-engine`'s
//! `xdp` module mirrors them and loads [`STEER`] with aya.
#![no_std]

/// 8-byte aligned wrapper so the ELF parser can read the object in place.
#[repr(C, align(8))]
pub struct Aligned<T: ?Sized>(pub T);

static STEER_OBJ: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/steer.bpf.o")));

/// The steering program (`SEC("xdp.frags") xtcp_steer`) and its maps:
/// `xsks` (XSKMAP), `rules` (2 slots of `xtcp_ruleset`), `config`
/// (active slot) and `counters` (per-CPU u64 × 4).
pub static STEER: &[u8] = &STEER_OBJ.0;

/// Name of the program section function in [`STEER`].
pub const STEER_PROGRAM: &str = "xtcp_steer";

/// Maximum number of steering rules (`XTCP_MAX_RULES`).
pub const MAX_RULES: usize = 16;

/// Number of entries of the XSKMAP (`XTCP_MAX_QUEUES`).
pub const MAX_QUEUES: u32 = 256;

static IMPAIR_OBJ: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/impair.bpf.o")));

/// The test-only impairment program (`SEC("classifier") xtcp_impair`): drops and
/// duplicates TCP packets at random; maps `impair_cfg` and
/// `impair_counters` (per-CPU u64 × 3: seen, dropped, duplicated).
pub static IMPAIR: &[u8] = &IMPAIR_OBJ.0;

/// Name of the program function in [`IMPAIR`].
pub const IMPAIR_PROGRAM: &str = "xtcp_impair";
