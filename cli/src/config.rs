//! `xtcp serve --config FILE`: serve's settings from a TOML file.
//!
//! A key is a flag of `xtcp serve` by its long name with `_` for `-`
//! (`frame_size = 4096` is `--frame-size 4096`), except three that carry the
//! names operators know from iperf3 and perfSONAR: `address`
//! (`--bind-address`), `max_duration` (`--server-max-duration`) and
//! `bitrate_limit` (`--server-bitrate-limit`); `log` is xtcp's global
//! `--log` (serve's flags include it once the command is built). A switch
//! takes `true` or `false`, a list flag a TOML array (or the same
//! comma-separated string the command line takes), every other key a string
//! or a number.
//!
//! The file is read before the command line is parsed: its settings become
//! flags placed right after `serve`, ahead of the command line's, and a
//! flag given twice takes its last value, so the command line overrides the
//! file (a list given on the command line replaces the file's; a switch set
//! to `true` in the file cannot be turned off from the command line). Every value goes through the same parser as its flag, and
//! an unknown key or a bad value is an error that names the file, the line
//! and the key; settings that conflict ([`file_error`]) name the file. The
//! same expansion runs again when serve reloads its configuration (SIGHUP).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::{Arg, ArgAction, Command};
use toml::{Spanned, Value};

/// Keys named otherwise than their flag: (key, the flag's long name).
const RENAMED: &[(&str, &str)] = &[
    ("address", "bind-address"),
    ("max_duration", "server-max-duration"),
    ("bitrate_limit", "server-bitrate-limit"),
];

/// Flags that have no key: the file's own, and the ones that only make
/// sense typed.
const NO_KEY: &[&str] = &["config", "check-config", "help", "version"];

/// The subcommand the file belongs to.
const SUBCOMMAND: &str = "serve";

/// Where the file's settings go in `argv`, and which file.
#[derive(Debug, PartialEq, Eq)]
struct Found {
    /// Index of the argument after `serve`.
    insert_at: usize,
    /// The file, from `--config FILE` or `--check-config FILE`.
    file: PathBuf,
}

/// The index of the subcommand in `argv` (after the program name and the
/// global flags), if it is `serve`, and the config file given to it.
fn find(argv: &[OsString]) -> Option<Found> {
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].to_string_lossy();
        if a == "--log" {
            i += 2;
            continue;
        }
        if a.starts_with('-') {
            i += 1;
            continue;
        }
        if a != SUBCOMMAND {
            return None;
        }
        break;
    }
    let insert_at = i + 1;
    let tail = argv.get(insert_at..)?;
    for (j, a) in tail.iter().enumerate() {
        let a = a.to_string_lossy();
        if a == "--" {
            break;
        }
        for flag in ["--config", "--check-config"] {
            if a == flag {
                return tail.get(j + 1).map(|f| Found {
                    insert_at,
                    file: PathBuf::from(f),
                });
            }
            if let Some(f) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return Some(Found {
                    insert_at,
                    file: PathBuf::from(f),
                });
            }
        }
    }
    None
}

/// `argv` with the settings of serve's config file inserted after `serve`
/// (unchanged when the command is not serve or has no config file); `serve`
/// is serve's command (its flags and their parsers).
pub fn expand(argv: Vec<OsString>, serve: &Command) -> anyhow::Result<Vec<OsString>> {
    let Some(found) = find(&argv) else {
        return Ok(argv);
    };
    let flags = file_flags(&found.file, serve, &argv[found.insert_at..])?;
    let mut out = argv;
    out.splice(found.insert_at..found.insert_at, flags);
    Ok(out)
}

/// What to say for `e`, clap's error for the command line `raw` once the
/// config file was expanded into it, when the command line alone parses
/// (`cmd`): the file's settings are in it (a conflict, or a flag the file
/// and the command line both give that takes one value), and clap's message
/// alone would not name the file. `None` for other errors (and for help).
pub fn file_error(e: &clap::Error, cmd: &Command, raw: &[OsString]) -> Option<String> {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return None;
    }
    let found = find(raw)?;
    cmd.clone().try_get_matches_from(raw).ok()?;
    Some(format!(
        "{}: its settings, with the command line: {} (a key is its flag's long name with _ for -)",
        found.file.display(),
        clap_message(e)
    ))
}

/// Whether the command line `tail` gives `arg`.
fn given(arg: &Arg, tail: &[OsString]) -> bool {
    let long = arg.get_long().map(|l| format!("--{l}"));
    let short = arg.get_short().map(|c| format!("-{c}"));
    tail.iter().map(|a| a.to_string_lossy()).any(|a| {
        long.as_deref()
            .is_some_and(|l| a == l || a.strip_prefix(l).is_some_and(|r| r.starts_with('=')))
            || short.as_deref().is_some_and(|s| a == s)
    })
}

/// The file's settings as serve's flags, each value checked by its flag's
/// parser; `tail` is the command line after `serve`.
fn file_flags(path: &Path, serve: &Command, tail: &[OsString]) -> anyhow::Result<Vec<OsString>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the config file {}", path.display()))?;
    // Each value with its place in the file; keys in sorted order.
    let table: std::collections::BTreeMap<String, Spanned<Value>> = toml::from_str(&text)
        .map_err(|e| anyhow!("{} {}", path.display(), one_line(&e.to_string())))?;
    let mut flags = Vec::new();
    for (key, v) in &table {
        let line = text[..v.span().start.min(text.len())].matches('\n').count() + 1;
        let at = |msg: String| anyhow!("{} line {line}: {msg}", path.display());
        let long = RENAMED
            .iter()
            .find(|(k, _)| k == key)
            .map_or_else(|| key.replace('_', "-"), |(_, f)| (*f).to_owned());
        let arg = serve
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
            .filter(|_| !NO_KEY.contains(&long.as_str()) && !key.contains('-'))
            .filter(|a| {
                RENAMED
                    .iter()
                    .all(|(k, f)| a.get_long() != Some(f) || k == key)
            })
            .ok_or_else(|| at(format!("unknown key `{key}`; the keys are {}", keys(serve))))?;
        let values = arg_values(arg, key, v.get_ref()).map_err(at)?;
        // A flag given twice takes the last value, but one that collects
        // values (a list) would add the command line's to the file's: the
        // command line's alone, then.
        if !(matches!(arg.get_action(), ArgAction::Append) && given(arg, tail)) {
            flags.extend(values);
        }
    }
    Ok(flags)
}

/// The flags for `key = value`.
fn arg_values(arg: &Arg, key: &str, value: &Value) -> Result<Vec<OsString>, String> {
    let long = format!("--{}", arg.get_long().unwrap_or_default());
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        return match value {
            Value::Boolean(true) => Ok(vec![long.into()]),
            Value::Boolean(false) => Ok(Vec::new()),
            v => Err(format!(
                "`{key}` is a switch: give true or false, not {}",
                v.type_str()
            )),
        };
    }
    let scalar = |v: &Value| -> Result<String, String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Integer(i) => Ok(i.to_string()),
            Value::Float(f) => Ok(f.to_string()),
            Value::Boolean(b) => Ok(b.to_string()),
            v => Err(format!(
                "`{key}` takes a string or a number, not {}",
                v.type_str()
            )),
        }
    };
    // A list is the flag given once per item where the flag collects them,
    // else one comma-separated value (as `--cores 0,1` takes it), which the
    // flag's parser then accepts or refuses.
    let items: Vec<String> = match value {
        Value::Array(list) => {
            let list = list.iter().map(scalar).collect::<Result<Vec<_>, _>>()?;
            if matches!(arg.get_action(), ArgAction::Append) {
                list
            } else {
                let d = arg.get_value_delimiter().unwrap_or(',');
                vec![list.join(&d.to_string())]
            }
        }
        v => vec![scalar(v)?],
    };
    // The flag alone, with its parser: a value is valid here when it is on
    // the command line.
    let check = Command::new("xtcp serve")
        .no_binary_name(true)
        .disable_help_flag(true)
        .arg(
            Arg::new("value")
                .long(arg.get_long().unwrap_or_default().to_owned())
                .value_names(arg.get_value_names().unwrap_or_default().to_vec())
                .value_parser(arg.get_value_parser().clone())
                .action(ArgAction::Set),
        );
    let mut out = Vec::new();
    for item in items {
        let pieces: Vec<&str> = match arg.get_value_delimiter() {
            Some(d) => item.split(d).collect(),
            None => vec![item.as_str()],
        };
        for p in pieces {
            check
                .clone()
                .try_get_matches_from([OsStr::new(&long), OsStr::new(p)])
                .map_err(|e| format!("`{key} = {value}`: {}", clap_message(&e)))?;
        }
        if arg.is_require_equals_set() {
            // A flag whose value is optional (`--timestamps[=FORMAT]`).
            out.push(format!("{long}={item}").into());
        } else {
            out.push(long.clone().into());
            out.push(item.into());
        }
    }
    Ok(out)
}

/// What a clap error says (with the values it takes, if it lists them),
/// on one line, without "error:" and the usage.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default();
    let mut msg = first.strip_prefix("error: ").unwrap_or(first).to_owned();
    for l in lines.filter(|l| l.starts_with('[') || l.starts_with("tip:")) {
        msg.push(' ');
        msg.push_str(l);
    }
    msg
}

/// A TOML error's message on one line: its position, then what is wrong.
fn one_line(e: &str) -> String {
    let lines: Vec<&str> = e.lines().map(str::trim).collect();
    let place = lines.first().copied().unwrap_or_default();
    let place = place.strip_prefix("TOML parse error at ").unwrap_or(place);
    let what = lines
        .iter()
        .rev()
        .find(|l| {
            !l.is_empty()
                && !l.starts_with('|')
                && !l.chars().next().is_some_and(|c| c.is_ascii_digit())
        })
        .copied()
        .unwrap_or_default();
    format!("{place}: {what}")
}

/// The keys a config file may have, for the error about an unknown one.
fn keys(serve: &Command) -> String {
    let mut ks: Vec<String> = serve
        .get_arguments()
        .filter_map(Arg::get_long)
        .filter(|l| !NO_KEY.contains(l))
        .map(|l| {
            RENAMED
                .iter()
                .find(|(_, f)| *f == l)
                .map_or_else(|| l.replace('-', "_"), |(k, _)| (*k).to_owned())
        })
        .collect();
    ks.sort();
    ks.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Args;

    fn serve_cmd() -> Command {
        crate::serve::ServeArgs::augment_args(
            Command::new("serve")
                .version(env!("CARGO_PKG_VERSION"))
                .disable_version_flag(true),
        )
    }

    fn argv(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    fn file(text: &str) -> tempfile_path::TempPath {
        tempfile_path::TempPath::with(text)
    }

    /// A file in the temporary directory, removed on drop.
    mod tempfile_path {
        use std::path::PathBuf;
        use std::sync::atomic::{AtomicU32, Ordering};

        pub struct TempPath(pub PathBuf);

        impl TempPath {
            pub fn with(text: &str) -> TempPath {
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "xtcp-config-test-{}-{}.toml",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::write(&p, text).unwrap();
                TempPath(p)
            }
        }

        impl Drop for TempPath {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    fn expand_str(cmdline: &str, f: &Path) -> anyhow::Result<Vec<String>> {
        let mut a = argv(cmdline);
        a.push("--config".into());
        a.push(f.into());
        Ok(expand(a, &serve_cmd())?
            .into_iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect())
    }

    #[test]
    fn keys_become_flags_ahead_of_the_command_line() {
        let f = file(
            "iface = \"veth0\"\nport = 5202\nqueues = 2\nhugepages = true\none_off = false\n\
                      address = \"198.18.0.1\"\ncores = [0, 1]\n",
        );
        let got = expand_str("xtcp --log debug serve --port 6000", &f.0).unwrap();
        let p = f.0.to_string_lossy().into_owned();
        // BTreeMap order: keys sorted.
        assert_eq!(
            got,
            [
                "xtcp",
                "--log",
                "debug",
                "serve",
                "--bind-address",
                "198.18.0.1",
                "--cores",
                "0,1",
                "--hugepages",
                "--iface",
                "veth0",
                "--port",
                "5202",
                "--queues",
                "2",
                "--port",
                "6000",
                "--config",
                &p,
            ]
        );
    }

    #[test]
    fn other_commands_and_no_file_are_left_alone() {
        let a = argv("xtcp recv --config x.toml");
        assert_eq!(expand(a.clone(), &serve_cmd()).unwrap(), a);
        let a = argv("xtcp serve --iface v0");
        assert_eq!(expand(a.clone(), &serve_cmd()).unwrap(), a);
        assert_eq!(
            find(&argv("xtcp --log=debug serve --check-config=/etc/x.toml")),
            Some(Found {
                insert_at: 3,
                file: PathBuf::from("/etc/x.toml")
            })
        );
    }

    /// xtcp's own command, built (serve's flags with the global ones).
    fn xtcp_cmd() -> Command {
        use clap::CommandFactory;
        let mut c = crate::Cli::command();
        c.build();
        c
    }

    #[test]
    fn the_global_log_filter_is_a_key_its_value_checked() {
        let cmd = xtcp_cmd();
        let serve = cmd.find_subcommand("serve").unwrap();
        let f = file("log = \"warn\"\n");
        let a = expand(
            argv(&format!("xtcp serve --config {}", f.0.display())),
            serve,
        )
        .unwrap();
        assert_eq!(&a[2..4], &[OsString::from("--log"), "warn".into()]);
        let m = cmd.clone().try_get_matches_from(a).unwrap();
        assert_eq!(m.get_one::<String>("log").unwrap(), "warn");
        let f = file("log = \"x[{\"\n");
        let e = expand(
            argv(&format!("xtcp serve --config {}", f.0.display())),
            serve,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 1: `log = \"x[{\"`") && e.contains("not a log filter"),
            "{e}"
        );
    }

    /// A conflict the file's settings make is told with the file's name;
    /// the command line's own errors are clap's.
    #[test]
    fn a_conflict_of_the_files_settings_names_the_file() {
        let cmd = xtcp_cmd();
        let serve = cmd.find_subcommand("serve").unwrap();
        let f = file("iface = \"v0\"\njson = true\njson_lines = true\n");
        let raw = argv(&format!("xtcp serve --config {}", f.0.display()));
        let e = cmd
            .clone()
            .try_get_matches_from(expand(raw.clone(), serve).unwrap())
            .unwrap_err();
        let msg = file_error(&e, &cmd, &raw).unwrap();
        assert!(
            msg.starts_with(&format!("{}: its settings", f.0.display()))
                && msg.contains("'--json' cannot be used with '--json-lines'"),
            "{msg}"
        );
        let raw = argv(&format!(
            "xtcp serve --json --json-lines --config {}",
            f.0.display()
        ));
        let e = cmd
            .clone()
            .try_get_matches_from(expand(raw.clone(), serve).unwrap())
            .unwrap_err();
        assert_eq!(file_error(&e, &cmd, &raw), None, "the command line's own");
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_file_line_and_key() {
        let f = file("iface = \"v0\"\n\n# a comment\nbogus = 1\n");
        let e = expand_str("xtcp serve", &f.0).unwrap_err().to_string();
        assert!(e.contains("line 4: unknown key `bogus`"), "{e}");
        assert!(e.contains("frame_size"), "the keys are listed: {e}");

        let f = file("iface = \"v0\"\nport = 0\n");
        let e = expand_str("xtcp serve", &f.0).unwrap_err().to_string();
        assert!(e.contains("line 2: `port = 0`"), "{e}");
        assert!(e.contains("not in 1..=65535"), "{e}");

        let f = file("port = 5201\nxdp_mode = \"sideways\"\n");
        let e = expand_str("xtcp serve", &f.0).unwrap_err().to_string();
        assert!(e.contains("line 2: `xdp_mode = \"sideways\"`"), "{e}");

        let f = file("hugepages = \"yes\"\n");
        let e = expand_str("xtcp serve", &f.0).unwrap_err().to_string();
        assert!(e.contains("line 1: `hugepages` is a switch"), "{e}");

        let f = file("port = [1, 2]\n");
        let e = expand_str("xtcp serve", &f.0).unwrap_err().to_string();
        assert!(
            e.contains("line 1: `port = [1, 2]`: invalid value '1,2'"),
            "{e}"
        );

        // The flag's own name is not a key, nor the file's own flags.
        for bad in [
            "bind_address = \"::1\"",
            "frame-size = 4096",
            "config = \"x\"",
        ] {
            let f = file(bad);
            let e = expand_str("xtcp serve", &f.0).unwrap_err().to_string();
            assert!(e.contains("line 1: unknown key"), "{bad}: {e}");
        }

        let f = file("port = \n");
        let e = expand_str("xtcp serve", &f.0).unwrap_err().to_string();
        assert!(
            e.contains("line 1, column"),
            "TOML syntax errors say where: {e}"
        );
        assert!(!e.contains('\n'), "on one line: {e}");

        let e = expand_str("xtcp serve", Path::new("/nonexistent/xtcp.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reading the config file /nonexistent/xtcp.toml"),
            "{e}"
        );
    }

    #[test]
    fn the_command_line_overrides_the_file() {
        use clap::FromArgMatches;
        let f = file("iface = \"v0\"\nport = 5202\nqueues = 2\n");
        let got = expand_str("xtcp serve --port 6000", &f.0).unwrap();
        let cmd = serve_cmd().args_override_self(true).no_binary_name(true);
        let m = cmd.try_get_matches_from(&got[2..]).unwrap();
        let a = crate::serve::ServeArgs::from_arg_matches(&m).unwrap();
        assert_eq!(a.port, 6000);
        assert_eq!(a.engine.queues, 2);
        assert_eq!(a.engine.iface.as_deref(), Some("v0"));

        // A list on the command line replaces the file's, not adds to it.
        let f = file("iface = \"v0\"\nallow = [\"198.18.0.0/24\", \"2001:2::/48\"]\n");
        let parse = |cmdline: &str| {
            let got = expand_str(cmdline, &f.0).unwrap();
            let cmd = serve_cmd().args_override_self(true).no_binary_name(true);
            let m = cmd.try_get_matches_from(&got[2..]).unwrap();
            let a = crate::serve::ServeArgs::from_arg_matches(&m).unwrap();
            a.limits
                .allow
                .unwrap()
                .iter()
                .map(|c| format!("{c:?}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(parse("xtcp serve").len(), 2);
        assert_eq!(parse("xtcp serve --allow 198.18.1.0/24").len(), 1);
    }

    /// A flag whose value is optional takes the file's value with `=`
    /// (`timestamps = "%s "` is `--timestamps=%s `).
    #[test]
    fn an_optional_value_comes_with_an_equals_sign() {
        use clap::FromArgMatches;
        let f = file("iface = \"v0\"\ntimestamps = \"%s \"\nformat = \"M\"\n");
        let got = expand_str("xtcp serve", &f.0).unwrap();
        assert!(got.contains(&"--timestamps=%s ".to_owned()), "{got:?}");
        let cmd = serve_cmd().args_override_self(true).no_binary_name(true);
        let m = cmd.try_get_matches_from(&got[2..]).unwrap();
        let a = crate::serve::ServeArgs::from_arg_matches(&m).unwrap();
        assert_eq!(a.style.timestamps.as_deref(), Some("%s "));
        assert_eq!(a.style.format, Some('M'));
    }
}
