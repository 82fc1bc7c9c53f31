//! Compiles the XDP programs in `c/` with clang (`-target bpf`) into `OUT_DIR`.
//!
//! Needs clang and libbpf's headers (`bpf/bpf_helpers.h`): on Debian
//! `apt-get install clang libbpf-dev`. Failure to find them stops the build
//! with a message that says so.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// Each program and its own flags: the test impairment's count of packets,
/// one for all CPUs, takes an atomic fetch-and-add (BPF ISA v3, Linux 5.12).
const PROGRAMS: &[(&str, &[&str])] = &[("steer", &[]), ("impair", &["-mcpu=v3"])];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = env::var("XTCP_CLANG").unwrap_or_else(|_| "clang".to_owned());
    println!("cargo:rerun-if-env-changed=XTCP_CLANG");
    println!("cargo:rerun-if-changed=c");
    let multiarch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64",
        Ok("riscv64") => "riscv64",
        _ => "x86_64",
    };
    for (name, flags) in PROGRAMS {
        let src = format!("c/{name}.bpf.c");
        let obj = out.join(format!("{name}.bpf.o"));
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
            .args(*flags)
            // Debian keeps <asm/types.h> under the multiarch directory.
            .arg(format!("-I/usr/include/{multiarch}-linux-gnu"))
            .arg("-Ic")
            .args(["-c", &src, "-o"])
            .arg(&obj)
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!(
                "clang failed ({s}) compiling ebpf/{src}; is libbpf-dev installed \
                 (bpf/bpf_helpers.h)? On Debian: apt-get install clang libbpf-dev"
            ),
            Err(e) => panic!(
                "cannot run `{clang}` ({e}): xtcp's XDP programs are built with clang. \
                 On Debian: apt-get install clang libbpf-dev (or set XTCP_CLANG)"
            ),
        }
    }
}
