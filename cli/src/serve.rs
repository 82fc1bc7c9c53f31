//! `xtcp serve`: an iperf3 server (`iperf3 -c` tests against it) whose
//! control and data connections are carried by xtcp's own TCP on AF_XDP,
//! built to run as a long-lived appliance.
//!
//! - Output (`report`): `iperf3 -s`'s lines (banners, "Accepted
//!   connection from …", the streams, header, intervals, summary) and a
//!   line per test of xtcp's own; with `-J` a JSON document per test with
//!   every key of `iperf3 -s -J`'s; with `--json-lines` one JSON object
//!   per test served or refused. To standard output, or to `--logfile`;
//!   `-f`, `--timestamps`. A client's `--get-server-output` gets the
//!   test's text (or document) as serve printed it.
//! - Settings: the flags, and a TOML file under them (`--config`, see
//!   `config`); limits and authentication (`limits`); metrics over the
//!   kernel's TCP (`metrics`).
//! - Life cycle: set up as root, then `--user` drops every privilege
//!   (`privs`) before the banner and systemd's READY=1 (`notify`); SIGHUP
//!   reads the settings again (limits, allow/deny and users for the next
//!   test; the log file reopened); SIGINT/SIGTERM stop it, detaching
//!   everything.

use std::cell::RefCell;
use std::io::Write as _;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use xtcp_engine::app::iperf3::{
    Authenticator, Interval, Iperf3Server, ServerConfig, TestOutcome, TestStart,
};
use xtcp_engine::worker::{Role, SinkKind, run_app};

use crate::args::{EngineArgs, ListenFamily};
use crate::bulk::interrupt_flag;
use crate::report::{Output, ServeMode, ServeRun, count, rate_text};
use crate::xdpstats::{EngineCounters, XdpSummary};
use xtcp_engine::tcp::ListenerStats;

/// Arguments of `xtcp serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Print the version and exit (iperf3's `-v`; `-V` is verbose, as
    /// iperf3's).
    #[arg(short = 'v', long = "version", action = clap::ArgAction::Version)]
    pub version: Option<bool>,
    /// Server mode (accepted so that `iperf3 -s` habits work; serve is
    /// always a server).
    #[arg(short = 's', long = "server")]
    pub server: bool,
    /// Run in the background as a daemon: detach before anything is set
    /// up; standard output and error go to --logfile, else /dev/null.
    #[arg(short = 'D', long = "daemon")]
    pub daemon: bool,
    /// Write the process id to this file once serving (after -D: the
    /// daemon's), and remove it at exit; refused if it names a running
    /// process.
    #[arg(short = 'I', long = "pidfile", value_name = "FILE")]
    pub pidfile: Option<PathBuf>,
    /// Pin the serve worker to core N (one queue; --cores for more).
    #[arg(short = 'A', long = "affinity", value_name = "N")]
    pub affinity: Option<usize>,
    /// Address to serve on (default: every address of the interface: its
    /// IPv4 addresses and its IPv6 addresses but link-local ones; -4 or -6
    /// takes one family; `::` is every address too, `0.0.0.0` the IPv4
    /// ones); `ADDR%DEV` also names the interface, as iperf3's (`--bind-dev
    /// DEV`)
    #[arg(short = 'B', long = "bind-address", value_name = "ADDR[%DEV]",
          value_parser = crate::args::parse_addr_dev)]
    pub addr: Option<crate::args::AddrDev>,
    #[command(flatten)]
    pub family: ListenFamily,
    /// Port (iperf3's default).
    #[arg(short, long, default_value_t = 5201,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Serve one test, then exit (like `iperf3 -s -1`); its result is the
    /// exit status.
    #[arg(short = '1', long)]
    pub one_off: bool,
    /// More detail, as iperf3 -s -V: the version and host lines, and for
    /// each test its time, cookie, MSS setting and parameters, and the
    /// summary's details (what the other side's statistics are, the
    /// congestion control).
    #[arg(short = 'V', long)]
    pub verbose: bool,
    /// Debug logging, as iperf3's -d: in the place of --log, debug (`-d=1`
    /// … `-d=4`: error, warn, info, debug), on standard error.
    #[arg(short = 'd', long = "debug", value_name = "LEVEL", num_args = 0..=1,
          require_equals = true, default_missing_value = "4",
          value_parser = clap::value_parser!(u8).range(1..=4))]
    pub debug: Option<u8>,
    /// Seconds between interval lines while a test runs (0: one line for
    /// the whole test, at its end, as iperf3).
    #[arg(short = 'i', long = "interval", default_value_t = 1.0,
          value_parser = crate::args::parse_interval)]
    pub interval: f64,
    /// JSON output shaped like `iperf3 -s -J`'s: one document per test;
    /// when the server stops, one more, `{"xdp": …, "listener": …,
    /// "refused": N}`: the run's XDP statistics (steered, dropped at the
    /// redirect, per queue), the listener's counters (SYNs taken and
    /// dropped, the most half-open at once), the connections refused
    /// beyond `--max-conns`, and per queue the connections it took and the
    /// segments it received and sent. With -1, one document, as iperf3's:
    /// the test's, that object in it as `xtcp_serve` (with the documents
    /// of connections refused before the test, which do not use it up, as
    /// `refused_tests`).
    #[arg(short = 'J', long = "json", conflicts_with = "json_lines")]
    pub json: bool,
    /// One JSON object per line for each test served or refused — time,
    /// client, direction, streams, seconds, bytes and Gbit/s each way,
    /// retransmits, result ("ok", "failed", "refused") and reason — instead
    /// of the interval lines and the line per test: for journald or a log
    /// shipper.
    #[arg(long)]
    pub json_lines: bool,
    /// Write what serve would write to standard output (interval lines, the
    /// line or JSON per test) to FILE instead, appending, a line at a time
    /// (as iperf3's --logfile). SIGHUP reopens it (after log rotation).
    /// Diagnostics still go to standard error.
    #[arg(long, value_name = "FILE")]
    pub logfile: Option<PathBuf>,
    /// Read settings from a TOML file: a key per flag, named as the flag
    /// with `_` for `-` (`frame_size = 4096`), and `address`,
    /// `max_duration`, `bitrate_limit` for `--bind-address`,
    /// `--server-max-duration`, `--server-bitrate-limit`. Flags given on the
    /// command line override the file. SIGHUP reads it again.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Check the configuration (the file, with the flags given here) and
    /// exit: 0 and "configuration OK" when serve would start with it, else
    /// the first error: 2 for the file itself (naming the key and the
    /// line), 1 for settings serve refuses together or on this host
    /// (naming their flags).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub check_config: Option<PathBuf>,
    /// Once set up, run as this user: its primary group, no supplementary
    /// groups, no capabilities (xtcp must start as root). Under systemd
    /// (`NOTIFY_SOCKET`), READY=1 follows the drop.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    // The doc comment is clap's help text: its brackets are syntax, not links.
    #[allow(rustdoc::broken_intra_doc_links)]
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics over the
    /// kernel's TCP (e.g. 127.0.0.1:9100, [::1]:9100); bound before
    /// anything is attached.
    #[arg(long, value_name = "ADDR:PORT", value_parser = crate::metrics::parse_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// -f, --forceflush, --timestamps (cli/src/report.rs). Serve writes
    /// every line at once whatever --forceflush says.
    #[command(flatten)]
    pub style: crate::report::StyleArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Limits and authentication (cli/src/limits.rs).
    #[command(flatten)]
    pub limits: crate::limits::LimitArgs,
}

fn describe(o: &TestOutcome) -> String {
    let window = match o.params.as_ref().and_then(|p| p.window) {
        Some(w) => format!(", window {w} bytes (-w)"),
        None => String::new(),
    };
    let mode = match &o.params {
        Some(p) if p.bidirectional => "bidirectional",
        Some(p) if p.reverse => "reverse (xtcp sends)",
        Some(_) => "forward (xtcp receives)",
        None => "no parameters",
    };
    let result = outcome_result(o);
    let congestion = o
        .congestion
        .map_or_else(String::new, |c| format!(", congestion {c}"));
    let paced = o.pacing_rate.map_or_else(String::new, |r| {
        format!(", paced to {r} bit/s per stream (-b)")
    });
    format!(
        "xtcp serve: test from {}: {result}; {mode}, {} stream{}, {:.3} s, received {} bytes \
         ({}), sent {} bytes ({}){window}{congestion}{paced}",
        o.client.remote,
        o.streams,
        if o.streams == 1 { "" } else { "s" },
        o.seconds,
        o.received,
        rate_text(o.received, o.seconds),
        o.sent,
        rate_text(o.sent, o.seconds)
    )
}

/// A test's result in words: "ok", "refused (WHY): …", "failed: …".
fn outcome_result(o: &TestOutcome) -> String {
    match (&o.result, o.refused) {
        (Ok(()), _) => "ok".to_owned(),
        (Err(e), Some(r)) => format!("refused ({}): {e}", r.as_str()),
        (Err(e), None) => format!("failed: {e}"),
    }
}

/// A test's result as the log and the metrics name it: "ok", "failed", or
/// "refused" with the refusal's name.
fn verdict(o: &TestOutcome) -> (&'static str, Option<&'static str>) {
    match (&o.result, o.refused) {
        (Ok(()), _) => ("ok", None),
        (Err(_), Some(r)) => ("refused", Some(r.as_str())),
        (Err(_), None) => ("failed", None),
    }
}

/// A test (or a refusal) as one JSON line: see `--json-lines`.
fn test_record(o: &TestOutcome, at: std::time::SystemTime) -> serde_json::Value {
    let gbps = |b: u64| {
        if o.seconds > 0.0 {
            b as f64 * 8.0 / o.seconds / 1e9
        } else {
            0.0
        }
    };
    let direction = o.params.as_ref().map(|p| {
        if p.bidirectional {
            "bidir"
        } else if p.reverse {
            "reverse"
        } else {
            "forward"
        }
    });
    let (result, reason) = verdict(o);
    let reason = match &o.result {
        Err(e) if o.refused.is_none() => Some(e.to_string()),
        _ => reason.map(str::to_owned),
    };
    json!({
        "time": humantime::format_rfc3339_millis(at).to_string(),
        "client": o.client.remote.to_string(),
        "direction": direction,
        "streams": o.streams,
        "seconds": o.seconds,
        "bytes_received": o.received,
        "bytes_sent": o.sent,
        "gbps_received": gbps(o.received),
        "gbps_sent": gbps(o.sent),
        "retransmits": o.retransmits,
        "user": o.user,
        "congestion": o.congestion,
        "pacing_rate": o.pacing_rate,
        "result": result,
        "reason": reason,
        // What the text line says of a refusal or failure, whole.
        "message": o.result.as_ref().err().map(ToString::to_string),
    })
}

/// `xtcp serve`. With `-J` or `--json-lines`, an error that ends it (it
/// could not start; its interface went away) is a document of its own
/// too, where it writes its records, unless `-1`'s one document says it.
pub fn serve(a: &ServeArgs) -> anyhow::Result<()> {
    let said = std::cell::Cell::new(false);
    let r = serve_run(a, &said);
    if let Err(e) = &r
        && (a.json || a.json_lines)
        && a.check_config.is_none()
        && !said.get()
    {
        error_record(a, &crate::error_chain(e));
    }
    r
}

/// `serve`'s error as a document (`-J`: the keys of `iperf3 -s -J`'s, as
/// it writes its own when its listener cannot start) or a record
/// (`--json-lines`: `result` "error"), on standard output or appended to
/// `--logfile`.
fn error_record(a: &ServeArgs, error: &str) {
    let doc = if a.json {
        serde_json::to_string_pretty(&json!({
            "start": {},
            "intervals": [],
            "end": {},
            "error": error,
        }))
    } else {
        serde_json::to_string(&json!({
            "time": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            "result": "error",
            "message": error,
        }))
    }
    .unwrap_or_default();
    match &a.logfile {
        Some(p) => {
            let _ = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(p)
                .and_then(|mut f| writeln!(f, "{doc}"));
        }
        None => println!("{doc}"),
    }
}

fn serve_run(a: &ServeArgs, said: &std::cell::Cell<bool>) -> anyhow::Result<()> {
    // `--user`: looked up and checked before anything is set up, before
    // any thread exists; the drop comes with the first progress report.
    let target = a.user.as_deref().map(crate::privs::prepare).transpose()?;
    let on = a.family.on(a.addr.as_ref().map(|b| b.ip))?;
    let dev = a.addr.as_ref().and_then(|b| b.dev.as_deref());
    let mut cfg = a.engine.with_dev(None, dev)?.config_at(on)?;
    // Test after test for as long as it runs: what a test reports is its
    // session's, so the engine keeps no connection's report.
    cfg.keep_reports = false;
    if let Some(core) = a.affinity {
        if cfg.queues != 1 {
            bail!(
                "-A {core}: pins the one worker of --queues 1; with --queues {} give --cores",
                cfg.queues
            );
        }
        xtcp_engine::worker::validate_cores("-A", &[core])?;
        cfg.cores = Some(vec![core]);
    }
    let server_config = capped(
        a.limits.server_config(a.one_off)?,
        a,
        a.engine.max_conns,
        cfg.queues,
    )?;
    if a.daemon && a.logfile.is_none() && (a.json || a.json_lines) {
        // (Its standard output is /dev/null: every record would be lost.)
        bail!(
            "-D without --logfile: the daemon's standard output goes to /dev/null, and with it \
             every {} record; run serve under systemd (contrib/xtcp-serve.service), or without \
             -D",
            if a.json { "-J" } else { "--json-lines" }
        );
    }
    if a.daemon && a.logfile.is_some() && (a.json || a.json_lines) {
        // A daemon's standard error goes to its log file (as iperf3 -D's):
        // there its diagnostics would sit between the JSON objects.
        bail!(
            "-D with --logfile and {}: the daemon's diagnostics would go into the log file \
             between the JSON objects; run serve under systemd (contrib/xtcp-serve.service: \
             the journal keeps them) or without -D, its standard error sent where you want it",
            if a.json { "-J" } else { "--json-lines" }
        );
    }
    if let Some(f) = &a.check_config {
        // What serve checks before it sets anything up (all of the above),
        // and what setting up would meet, short of taking the interface:
        // the engine's settings, the interface's queues, the addresses and
        // ports it would bind (serve's and --metrics'), the files it would
        // write (the log file, the pid file).
        xtcp_engine::worker::check_listener(&cfg, on, a.port)?;
        if let Some(m) = a.metrics {
            crate::metrics::check(m)?;
        }
        if let Some(p) = &a.logfile {
            crate::bulk::check_writable("--logfile", p)?;
        }
        // Writable only: a running server (the one this configuration is
        // checked for, say) names itself in it.
        if let Some(p) = &a.pidfile {
            crate::bulk::check_writable("-I", p)?;
        }
        println!("xtcp serve: {}: configuration OK", f.display());
        return Ok(());
    }
    // The interface, and the addresses the engine would listen on there:
    // an interface without one is an error before anything is set up.
    let index = xtcp_engine::xsk::ifindex(&cfg.iface)?;
    xtcp_engine::worker::listen_addrs(&cfg.iface, index, on)?;
    // -I, -D: the pid file checked while errors reach the terminal, the
    // fork while this process has one thread, the pid written after it.
    let mut pidfile = a
        .pidfile
        .as_deref()
        .map(crate::daemon::PidFile::check)
        .transpose()?;
    let log_is_new = a.logfile.as_deref().is_some_and(|p| !p.exists());
    if a.daemon {
        let log = a.logfile.as_deref().map(std::path::absolute).transpose()?;
        crate::daemon::daemonize(log.as_deref())?;
    }
    if let Some(p) = pidfile.as_mut() {
        p.write()?;
    }
    // Metrics: bound now (not for --check-config: a running service
    // holds the address), so that a bad address fails before anything is
    // attached; fed by the test and progress callbacks below.
    let metrics_server = a
        .metrics
        .map(|at| crate::metrics::serve(at, &cfg.iface, cfg.queues))
        .transpose()?;
    let metrics = metrics_server.as_ref().map(|s| s.metrics());
    let test_metrics = metrics.clone();
    let output = Rc::new(RefCell::new(Output::open(
        a.logfile.as_deref(),
        serve_style(a),
    )?));
    // A log file serve made is the user's it runs as (--user), so that a
    // reload (SIGHUP, after rotation or not) can open it again.
    if let (Some(t), Some(p), true) = (&target, &a.logfile, log_is_new) {
        std::os::unix::fs::chown(p, Some(t.uid), Some(t.gid))
            .with_context(|| format!("--logfile {}: giving it to {}", p.display(), t.name))?;
    }
    // The authentication serve runs with: a reload that cannot read its
    // files again (where --user cannot) keeps it.
    let running_auth = RefCell::new(server_config.auth.clone());
    let flag = interrupt_flag()?;
    // SIGHUP: read the configuration again (see `reload`).
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())
        .context("installing the SIGHUP handler")?;
    let one_off = a.one_off;
    // -1 -J: the test's document waits for the run's counters, to go out
    // as one document (with the refusals before it in it).
    let one_doc: Rc<RefCell<OneDoc>> = Rc::default();
    let one_doc_test = one_doc.clone();
    let stop = flag.clone();
    // -1's test, where it failed: how (its outcome's result).
    let failed: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let failed2 = failed.clone();
    // -1: whether its test came (else the run ends without one: stopped,
    // or no client within --idle-timeout).
    let tested = Arc::new(AtomicBool::new(false));
    let tested2 = tested.clone();
    let mode = if a.json {
        ServeMode::Json
    } else if a.json_lines {
        ServeMode::JsonLines
    } else {
        ServeMode::Text
    };
    let run = ServeRun::new(
        output.clone(),
        mode,
        a.style.unit(),
        a.port,
        &cfg,
        a.verbose,
    );
    let (iv_run, test_run, start_run, gso_run) =
        (run.clone(), run.clone(), run.clone(), run.clone());
    let mut server = Iperf3Server::new(
        server_config,
        // -i 0: one interval, the whole test (as iperf3 -s -i 0). With
        // --json-lines they are not printed, but a client's
        // --get-server-output text has them.
        Some(if a.interval > 0.0 {
            Duration::from_secs_f64(a.interval)
        } else {
            Duration::ZERO
        }),
        Box::new(move |iv: &Interval| iv_run.interval(iv)),
        Box::new(move |o: &TestOutcome| {
            if let Some(m) = &test_metrics {
                let (result, reason) = verdict(o);
                m.test(result, reason, o.received, o.sent);
            }
            let doc = test_run.end(o);
            let mut out = test_run.out.borrow_mut();
            match test_run.mode {
                ServeMode::Json if one_off => {
                    let doc = doc.unwrap_or_default();
                    let mut held = one_doc_test.borrow_mut();
                    if o.ends_one_off() {
                        held.test = Some(doc);
                    } else {
                        held.refused.push(doc);
                    }
                }
                ServeMode::Json => {
                    out.json(
                        &serde_json::to_string_pretty(&doc.unwrap_or_default()).unwrap_or_default(),
                    );
                }
                ServeMode::JsonLines => {
                    let v = test_record(o, std::time::SystemTime::now());
                    out.json(&v.to_string());
                }
                // (Never in a running test's --get-server-output text: a
                // client refused meanwhile ends here too.)
                ServeMode::Text => out.line_unkept(&describe(o)),
            }
            drop(out);
            // A busy, denied or failed login does not use up `-1`'s test.
            if one_off && o.ends_one_off() {
                *failed2.lock().unwrap_or_else(|e| e.into_inner()) =
                    o.result.is_err().then(|| outcome_result(o));
                tested2.store(true, Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
            } else if o.refused.is_none() && !stop.load(Ordering::Relaxed) {
                // (Not when stopping: no test comes after.)
                test_run.banner();
            }
        }),
    );
    server.set_on_start(Box::new(move |t: &TestStart| start_run.start(t)));
    server.set_server_output(Box::new(move |o: &TestOutcome| gso_run.server_output(o)));
    // SIGHUP's new limits, allow/deny and users: for the next test.
    let (reload_tx, reload_rx) = crossbeam_channel::unbounded::<ServerConfig>();
    server.set_reload(reload_rx);
    let role = Role::Listen {
        on,
        port: a.port,
        sinks: SinkKind::App,
        keep_listening: true,
    };
    let mut announced = false;
    let mut dropped = Ok(());
    let mut notify = crate::notify::Notifier::default();
    // The engine reports progress once it is set up and serving: the
    // privilege drop, the banner and READY=1 only then, never before an
    // error; a drop that fails stops the engine before any test.
    let run = run_app(
        &cfg,
        role,
        &flag,
        |p| {
            if let Some(m) = &metrics {
                m.observe(p);
            }
            if hup.swap(false, Ordering::Relaxed) {
                // Said on standard error, in the metrics and in the
                // service manager's status (`systemctl status`), since
                // `systemctl reload` (a signal) cannot tell.
                let r = reload(a, &output, &reload_tx, cfg.queues, &running_auth);
                if let Some(m) = &metrics {
                    m.reload(r.is_ok());
                }
                let said = match r {
                    Ok(msg) => msg,
                    Err(e) => format!(
                        "reload failed, the running configuration stays: {}",
                        crate::error_chain(&e)
                    ),
                };
                eprintln!("xtcp serve: {said}");
                notify.note(&said);
            }
            if !announced {
                announced = true;
                dropped = target
                    .as_ref()
                    .map_or(Ok(()), crate::privs::Target::become_user);
                if dropped.is_err() {
                    flag.store(true, Ordering::Relaxed);
                    return;
                }
                let as_user = target
                    .as_ref()
                    .map_or_else(String::new, |t| format!(" as {}", t.name));
                let status = format!(
                    "listening on {} ({}, {}){as_user}",
                    crate::bulk::listening(p.listen),
                    cfg.iface,
                    crate::bulk::bind_mode(p.zero_copy)
                );
                eprintln!("xtcp serve: {status}, iperf3 clients welcome; Ctrl-C stops");
                run.verbose_header();
                run.banner();
                notify.ready(&status);
                crate::daemon::ready();
            }
            if flag.load(Ordering::Relaxed) {
                notify.stopping();
            }
        },
        Some(&mut server),
    );
    // A -1 test's document held for the run's counters goes out without
    // them where the run ends in an error.
    let held_doc = || {
        if let Some(doc) = std::mem::take(&mut *one_doc.borrow_mut()).into_doc(None) {
            output
                .borrow_mut()
                .json(&serde_json::to_string_pretty(&doc).unwrap_or_default());
            said.set(true);
        }
    };
    if let Err(e) = dropped {
        held_doc();
        return Err(e);
    }
    notify.stopping();
    let report = match run.with_context(|| format!("xtcp serve on {}", cfg.iface)) {
        Ok(r) => r,
        Err(e) => {
            held_doc();
            return Err(e);
        }
    };
    if report.iface_gone {
        held_doc();
        bail!("{}", crate::bulk::iface_gone(&report.iface));
    }
    eprintln!(
        "xtcp serve: stopped; {}, CPU {:.2} s (user {:.2} s, system {:.2} s)",
        count(
            report.workers.iter().map(|w| w.connections).sum::<u64>(),
            "connection"
        ),
        report.cpu_seconds,
        report.cpu.user,
        report.cpu.system
    );
    for line in crate::bulk::queue_lines(&report, "--max-conns") {
        eprintln!("xtcp serve: {line}");
    }
    let xdp = XdpSummary::of(&report);
    for line in xdp.lines() {
        eprintln!("xtcp serve: {line}");
    }
    let listener = listener_totals(&report);
    let refused: u64 = report.workers.iter().map(|w| w.refused).sum();
    eprintln!(
        "xtcp serve: listener: {} taken, {} dropped (half-open table full, or another queue's \
         flow), {} invalid (FIN set), at most {} half-open at once; {} completed, {} refused \
         (--max-conns)",
        count(listener.syns_accepted, "SYN"),
        listener.syns_dropped,
        listener.syns_invalid,
        listener.half_open_peak,
        count(listener.established, "handshake"),
        count(refused, "connection")
    );
    // -1 stopped (SIGINT/SIGTERM) before its test came: a failure, as
    // `iperf3 -s -1` exits 1 then (the exit status is the test's result,
    // and there was none). No client within --idle-timeout is not one
    // (stock's status 0 too).
    let untested = (one_off && !tested.load(Ordering::Relaxed) && report.interrupted)
        .then(|| "-1: stopped before a test came".to_owned());
    if mode == ServeMode::Json {
        // After the tests' objects, one of the whole run's XDP statistics
        // and the listener's counters (with -1, in the test's).
        let mut fin = json!({
            "xdp": xdp,
            "engine": EngineCounters::of(&report),
            "listener": listener,
            "refused": refused,
            "queues": report.workers.iter().map(|w| json!({
                "queue": w.queue,
                "connections": w.connections,
                "rx_segments": w.port.rx_segments,
                "tx_packets": w.port.tx_packets,
                "refused": w.refused,
                "migrated_in": w.migrated_in,
                "migrated_out": w.migrated_out,
                "forwarded": w.forwarded,
                "held": w.held,
                "misplaced": w.misplaced,
            })).collect::<Vec<_>>(),
        });
        if let Some(e) = &untested {
            fin["error"] = json!(e);
        }
        let held = std::mem::take(&mut *one_doc.borrow_mut());
        if let Some(doc) = held.into_doc(Some(fin)) {
            output
                .borrow_mut()
                .json(&serde_json::to_string_pretty(&doc)?);
            said.set(true);
        }
    }
    if let Some(e) = untested {
        bail!("{e}");
    }
    if let Some(how) = failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
        // "failed: …", or "refused (WHY): …", which reads "was refused".
        let was = if how.starts_with("refused") {
            "was "
        } else {
            ""
        };
        bail!("-1: the test {was}{how}");
    }
    Ok(())
}

/// What `serve -1 -J` holds back to write as one document, as
/// `iperf3 -s -1 -J` writes one: the test's document, and those of the
/// connections refused before it (busy, denied, a failed login, no
/// cookie: they do not use up `-1`'s test).
#[derive(Debug, Default)]
struct OneDoc {
    test: Option<serde_json::Value>,
    refused: Vec<serde_json::Value>,
}

impl OneDoc {
    /// The one document: the test's, with `run` (the run's counters) and
    /// the refusals in it as `xtcp_serve` (`refused_tests`); without a
    /// test, that object alone; None where there is nothing to write.
    fn into_doc(self, run: Option<serde_json::Value>) -> Option<serde_json::Value> {
        let mut extra = run.unwrap_or_else(|| json!({}));
        if !self.refused.is_empty() {
            extra["refused_tests"] = serde_json::Value::Array(self.refused);
        }
        let empty = extra.as_object().is_some_and(|m| m.is_empty());
        match self.test {
            Some(mut test) => {
                if !empty {
                    test["xtcp_serve"] = extra;
                }
                Some(test)
            }
            None => (!empty).then_some(extra),
        }
    }
}

/// `c` with the most data streams a test may open kept within what the
/// workers can hold: `--max-conns` on each of `queues` queues, less the
/// test's control connection. A test asking for more is then refused at its
/// parameters, as iperf3 refuses `-P` above its maximum, instead of failing
/// when one of its data connections is reset. An explicit `--max-streams`
/// above that is an error.
fn capped(
    mut c: ServerConfig,
    a: &ServeArgs,
    max_conns: u32,
    queues: u32,
) -> anyhow::Result<ServerConfig> {
    // (No queues is refused with its own message later.)
    let conns = u64::from(max_conns) * u64::from(queues.max(1));
    let cap = u32::try_from(conns.saturating_sub(1)).unwrap_or(u32::MAX);
    if c.max_streams > cap {
        if cap == 0 {
            bail!(
                "--max-conns 1 on one queue: a test needs two connections at least (its control \
                 connection and a data stream); give --max-conns 2 or more"
            );
        }
        if let Some(n) = a.limits.max_streams {
            bail!(
                "--max-streams {n}: the workers hold at most {conns} connections (--max-conns \
                 {max_conns} on {queues} queue(s)), one of them a test's control connection; give \
                 --max-streams {cap} or less, or a larger --max-conns"
            );
        }
        c.max_streams = cap;
    }
    Ok(c)
}

/// SIGHUP: serve's settings read again (the command line, and the config
/// file as it is now). The output file is opened anew (after log rotation,
/// or at a new `logfile`); settings that need a restart are named and keep
/// their running values.
fn reload(
    running: &ServeArgs,
    output: &RefCell<Output>,
    server: &crossbeam_channel::Sender<ServerConfig>,
    queues: u32,
    running_auth: &RefCell<Option<Arc<Authenticator>>>,
) -> anyhow::Result<String> {
    let (new, log) = crate::serve_args_again()?;
    let denied = |e: &anyhow::Error| {
        e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
        })
    };
    // What serve, run as --user, may not open again: the files it opened
    // as root at its start. The same files unreadable now keep what it
    // runs with, said; anything else wrong fails the reload.
    let mut kept = Vec::new();
    // Everything read and checked before anything changes; the workers
    // keep the connections they hold (--max-conns) until a restart.
    let same_auth = new.limits.rsa_private_key_path == running.limits.rsa_private_key_path
        && new.limits.authorized_users_path == running.limits.authorized_users_path;
    let limits = match new.limits.server_config(running.one_off) {
        Err(e) if denied(&e) && same_auth && running_auth.borrow().is_some() => {
            kept.push(format!("the key and the users file as they were ({e:#})"));
            new.limits
                .server_config_keeping(running.one_off, running_auth.borrow().clone())?
        }
        r => r?,
    };
    // A file that serve would refuse at its next start is refused now,
    // not applied in part (its --max-conns waits for that start).
    if new.engine.max_conns != running.engine.max_conns {
        capped(limits.clone(), &new, new.engine.max_conns, queues)
            .context("serve would refuse this configuration at its next start")?;
    }
    let config = capped(limits, &new, running.engine.max_conns, queues)?;
    let out = match Output::open(new.logfile.as_deref(), serve_style(&new)) {
        Err(e) if denied(&e) && new.logfile == running.logfile => {
            kept.push(format!("writing to the log file open ({e:#})"));
            None
        }
        r => Some(r?),
    };
    let auth = config.auth.clone();
    // The server takes the newest of those it has not taken yet.
    server
        .send(config)
        .context("the server has stopped taking configurations")?;
    *running_auth.borrow_mut() = auth;
    if let Some(out) = out {
        output.borrow_mut().replace(out);
        // A daemon's standard output and error are its log file: the new
        // one from now on, so that the rotated file is let go.
        if running.daemon
            && let Some(p) = &new.logfile
        {
            crate::daemon::redirect_std(p)?;
        }
    }
    let restart: Vec<&str> = [
        (
            "the engine settings",
            format!("{:?}", running.engine) != format!("{:?}", new.engine),
        ),
        ("address", running.addr != new.addr),
        ("port", running.port != new.port),
        ("interval", running.interval != new.interval),
        ("json", running.json != new.json),
        ("json_lines", running.json_lines != new.json_lines),
        ("one_off", running.one_off != new.one_off),
        ("user", running.user != new.user),
        ("metrics", running.metrics != new.metrics),
        // The output's form is fixed when serve starts (the log file is
        // opened again, in the running form).
        ("format", running.style.format != new.style.format),
        (
            "timestamps",
            running.style.timestamps != new.style.timestamps,
        ),
        (
            "forceflush",
            running.style.forceflush != new.style.forceflush,
        ),
        ("daemon", running.daemon != new.daemon),
        ("pidfile", running.pidfile != new.pidfile),
        ("verbose", running.verbose != new.verbose),
        ("log", crate::log_changed(&log)),
    ]
    .into_iter()
    .filter_map(|(name, changed)| changed.then_some(name))
    .collect();
    let what = match &new.config {
        Some(f) => format!(
            "reloaded {}: limits, allow/deny and users apply from the next test",
            f.display()
        ),
        None => "reloaded (no config file: the command line's settings stay; the log file, \
                 the key and the users file are read again)"
            .to_owned(),
    };
    let mut msg = what;
    if !restart.is_empty() {
        msg += &format!(
            "; changed but kept until serve restarts: {}",
            restart.join(", ")
        );
    }
    if !kept.is_empty() {
        msg += &format!(
            "; the user serve runs as may not open these, so kept: {} (give it access, or \
             restart serve)",
            kept.join("; ")
        );
    }
    Ok(msg)
}

/// How serve writes lines: `--timestamps`; every line at once (a log
/// read while serve runs, `--forceflush` or not).
fn serve_style(a: &ServeArgs) -> crate::report::Style {
    let mut style = a.style.style();
    style.forceflush = true;
    style
}

/// The listeners' counters summed over the queues.
fn listener_totals(r: &xtcp_engine::worker::EngineReport) -> ListenerStats {
    let mut t = ListenerStats::default();
    for w in &r.workers {
        t.add(&w.listener);
    }
    t
}
