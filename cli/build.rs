//! Records the git commit xtcp is built from (`XTCP_GIT_COMMIT`: the hash,
//! with `-dirty` if tracked files had changes; empty outside a git
//! checkout), for the record `xtcp bench --json` writes.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    // `-dirty` when tracked files differ from that commit: the binary is
    // then not what the commit holds.
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(c) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if !changes.is_empty() => format!("{c}-dirty"),
            _ => c,
        },
        None => String::new(),
    };
    println!("cargo:rustc-env=XTCP_GIT_COMMIT={commit}");
    // Run again when the sources change (for `-dirty`)...
    for dir in [
        "src",
        "../engine/src",
        "../ebpf/src",
        "../ebpf/c",
        "../Cargo.toml",
        "../Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={dir}");
    }
    // ... and when HEAD moves: HEAD itself (a branch switch), and the
    // branch it names (a commit), loose or packed.
    if let (Some(dir), Some(common)) = (
        git(&["rev-parse", "--absolute-git-dir"]),
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
    ) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={common}/packed-refs");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={common}/{branch}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
