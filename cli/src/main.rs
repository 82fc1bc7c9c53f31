//! The `xtcp` command line.

mod probe;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "xtcp", version, about = "Kernel-bypass TCP on AF_XDP")]
enum Cli {
    /// Show what an interface and this host offer xtcp (driver, queues, MTU,
    /// XDP features, privileges, hugepages).
    Probe(probe::ProbeArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse() {
        Cli::Probe(args) => probe::run(&args),
    }
}
