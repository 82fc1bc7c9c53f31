//! `xtcp`: kernel-bypass TCP on AF_XDP — probe, raw AF_XDP benchmark, bulk
//! send / receive over the TCP engine, an iperf3 server and client, and the
//! side-by-side benchmark against the kernel's TCP.

use clap::{Parser, Subcommand};

mod args;
mod bench;
mod bulk;
mod client;
mod config;
mod daemon;
mod limits;
mod metrics;
mod notify;
mod outfile;
mod privs;
mod probe;
mod report;
mod serve;
mod xdpstats;
mod xsk_bench;

/// xtcp: a kernel-bypass TCP engine on AF_XDP.
#[derive(Parser, Debug)]
#[command(name = "xtcp", version, about, long_about = None)]
struct Cli {
    /// Log level filter (error, warn, info, debug, trace), or RUST_LOG syntax.
    #[arg(long, global = true, default_value = "info", env = "XTCP_LOG", value_parser = log_filter)]
    log: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Show what an interface and this host offer xtcp (driver, queues, MTU,
    /// XDP features, privileges, hugepages).
    Probe(probe::ProbeArgs),
    /// Raw AF_XDP packet rates on one queue (like xdpsock): rxdrop, txonly,
    /// l2fwd; or both ends on a test network of its own with --testnet.
    XskBench(xsk_bench::XskBenchArgs),
    /// Send a file, standard input or a seeded pattern to a TCP receiver
    /// over xtcp's own TCP on AF_XDP.
    #[command(override_usage = "xtcp send [OPTIONS] -c <HOST>")]
    Send(bulk::SendArgs),
    /// Receive one TCP stream (or many, with --keep-listening) over xtcp's
    /// own TCP on AF_XDP into a file, standard output or a pattern check.
    Recv(bulk::RecvArgs),
    /// An iperf3 server (`iperf3 -c` tests against it) on xtcp's own TCP.
    // The last of a flag given twice wins: a config file's settings come
    // first (see `config`), the command line's after them.
    #[command(args_override_self = true, version, disable_version_flag = true)]
    Serve(serve::ServeArgs),
    /// An iperf3 client (tests against `iperf3 -s`) on xtcp's own TCP.
    // As iperf3's, the last of a flag given twice wins.
    #[command(args_override_self = true, version, disable_version_flag = true)]
    Client(client::ClientArgs),
    /// xtcp against the kernel's TCP, side by side (iperf3 tests), over a
    /// sweep, on a test network of its own or on two interfaces (--iface).
    Bench(bench::BenchArgs),
}

impl Cmd {
    /// An earlier release's spelling that lands in a field of its own
    /// (`send --connect`, `recv --listen`, `probe IFACE`) moved into the
    /// fields of the new one; the other old spellings are clap aliases.
    fn resolve_old_spellings(&mut self) {
        match self {
            Cmd::Probe(a) => a.resolve_old_spellings(),
            Cmd::Send(a) => a.resolve_old_spellings(),
            Cmd::Recv(a) => a.resolve_old_spellings(),
            Cmd::XskBench(_) | Cmd::Serve(_) | Cmd::Client(_) | Cmd::Bench(_) => {}
        }
    }

    /// A combination of arguments that cannot work, found before anything
    /// is looked up (a usage error: exit status 2, as clap's).
    fn usage_error(&self) -> Option<String> {
        match self {
            Cmd::Send(a) => a.usage_error(),
            Cmd::Recv(a) => a.usage_error(),
            Cmd::Client(a) => a.usage_error(),
            Cmd::Bench(a) => bench::usage_error(a),
            _ => None,
        }
    }
}

/// The log filter: `--log`'s, or that of iperf3's `-d` level where
/// `client` or `serve` was given one.
fn effective_log(log: &str, debug: Option<u8>) -> String {
    match debug {
        Some(1) => "error",
        Some(2) => "warn",
        Some(3) => "info",
        Some(_) => "debug",
        None => log,
    }
    .to_owned()
}

/// `--log`'s value, if tracing takes it as a filter.
fn log_filter(s: &str) -> Result<String, String> {
    // A bare word is a level, or in RUST_LOG syntax a target that shows
    // alone (`warning` silenced everything): only levels are taken bare.
    const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];
    if let Some(w) = s.split(',').map(str::trim).find(|d| {
        !d.is_empty()
            && !d.contains(['=', '['])
            && !LEVELS.contains(&d.to_ascii_lowercase().as_str())
    }) {
        return Err(format!(
            "`{w}` is no level: give error, warn, info, debug or trace (a target's level as \
             TARGET=LEVEL)"
        ));
    }
    tracing_subscriber::EnvFilter::try_new(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("not a log filter ({e}): give error, warn, info, debug or trace"))
}

fn main() {
    // Connections' multi-megabyte receive buffers take memory as they fill,
    // not at allocation (see the function).
    let _ = xtcp_engine::sys::lazy_large_allocations(256 << 10);
    let cli = parse_command_line();
    let debug = match &cli.cmd {
        Cmd::Client(a) => a.debug,
        Cmd::Serve(a) => a.debug,
        _ => None,
    };
    let log = effective_log(&cli.log, debug);
    let _ = LOG.set(log.clone());
    tracing_subscriber::fmt()
        .with_env_filter(
            // Checked by `log_filter` as the command line was parsed.
            tracing_subscriber::EnvFilter::try_new(&log)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    let r = match &cli.cmd {
        Cmd::Probe(a) => probe::run(a),
        Cmd::XskBench(a) => xsk_bench::run(a),
        Cmd::Send(a) => bulk::send(a),
        Cmd::Recv(a) => bulk::recv(a),
        Cmd::Serve(a) => serve::serve(a),
        Cmd::Client(a) => client::client(a),
        Cmd::Bench(a) => bench::bench(a),
    };
    if let Err(e) = r {
        // (A daemon that failed before it served tells the command run.)
        daemon::failed(&error_chain(&e));
        if matches!(&cli.cmd, Cmd::Send(a) if a.json) || matches!(&cli.cmd, Cmd::Recv(a) if a.json)
        {
            bulk::json_error(&error_chain(&e));
        }
        eprintln!("xtcp: error: {}", error_chain(&e));
        std::process::exit(1);
    }
}

/// The command line, with serve's config file (`--config FILE`) expanded
/// into flags ahead of it; an error in the file ends the program here.
fn parse_command_line() -> Cli {
    use clap::FromArgMatches;
    let (cmd, argv) = match expanded_command_line() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("xtcp: error: {}", error_chain(&e));
            std::process::exit(2);
        }
    };
    let m = cmd.clone().try_get_matches_from(argv).unwrap_or_else(|e| {
        if let Some(msg) = config::file_error(&e, &cmd, &std::env::args_os().collect::<Vec<_>>()) {
            eprintln!("xtcp: error: {msg}");
            std::process::exit(2);
        }
        e.exit()
    });
    let mut cli = Cli::from_arg_matches(&m).unwrap_or_else(|e| e.exit());
    cli.cmd.resolve_old_spellings();
    if let Some(msg) = cli.cmd.usage_error() {
        // (-J's document too, as for every error of xtcp's own.)
        if matches!(&cli.cmd, Cmd::Send(a) if a.json) || matches!(&cli.cmd, Cmd::Recv(a) if a.json)
        {
            bulk::json_error(&msg);
        }
        eprintln!("xtcp: error: {msg}");
        std::process::exit(2);
    }
    cli
}

/// The command, and this process's arguments with serve's config file as
/// it is now expanded into them.
fn expanded_command_line() -> anyhow::Result<(clap::Command, Vec<std::ffi::OsString>)> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    // Built, serve's flags include the global ones (`--log`).
    cmd.build();
    let serve = cmd.find_subcommand("serve").expect("serve is a subcommand");
    let argv = config::expand(std::env::args_os().collect(), serve)?;
    Ok((cmd, argv))
}

/// The log filter this process runs with (`--log`, the config file's `log`
/// or `XTCP_LOG`): fixed at start.
static LOG: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Whether serve's settings read again give another log filter than the
/// one running (which only a restart changes).
pub(crate) fn log_changed(new: &str) -> bool {
    LOG.get().is_some_and(|l| l != new)
}

/// Serve's settings read again (SIGHUP): the same command line, with the
/// config file as it is now; and the log filter they give.
pub(crate) fn serve_args_again() -> anyhow::Result<(serve::ServeArgs, String)> {
    use clap::FromArgMatches;
    let (cmd, argv) = expanded_command_line()?;
    let parsed = cmd
        .clone()
        .try_get_matches_from(argv)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(Cli {
            cmd: Cmd::Serve(a),
            log,
        }) => {
            let log = effective_log(&log, a.debug);
            Ok((a, log))
        }
        Ok(_) => anyhow::bail!("the command line is not `xtcp serve` any more"),
        Err(e) => match config::file_error(&e, &cmd, &std::env::args_os().collect::<Vec<_>>()) {
            Some(msg) => anyhow::bail!("{msg}"),
            None => anyhow::bail!(
                "{}",
                e.render().to_string().lines().next().unwrap_or_default()
            ),
        },
    }
}

/// The error and its causes on one line, leaving out a cause whose text the
/// message already contains (our errors often embed their source).
pub(crate) fn error_chain(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !msg.contains(&text) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&text);
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    /// Levels and TARGET=LEVEL directives are taken; a bare word that is
    /// no level is refused (`warning` was a target filter that silenced
    /// every line).
    #[test]
    fn log_filters_take_levels_and_directives_not_stray_words() {
        for ok in [
            "warn",
            "WARN",
            "off",
            "info,xtcp_engine=debug",
            "xtcp=trace",
        ] {
            assert_eq!(super::log_filter(ok).as_deref(), Ok(ok));
        }
        let e = super::log_filter("warning").unwrap_err();
        assert!(e.contains("`warning` is no level"), "{e}");
        assert!(super::log_filter("info,verbose").is_err());
    }

    #[test]
    fn command_line_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
