//! `xtcp --help`: the summary names every command and the command list
//! gives each one a line of description.

use std::process::Command;

const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");

const COMMANDS: [&str; 7] = [
    "probe",
    "xsk-bench",
    "send",
    "recv",
    "serve",
    "client",
    "bench",
];

#[test]
fn help_lists_all_seven_commands_with_a_line_each() {
    let out = Command::new(XTCP).arg("--help").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let summary = text.lines().next().unwrap_or_default();
    for c in COMMANDS {
        assert!(
            summary.split([' ', ',', ':', '.']).any(|w| w == c),
            "the first line names `{c}`: {summary:?}"
        );
    }
    let section: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    for c in COMMANDS {
        let line = section
            .iter()
            .find(|l| l.split_whitespace().next() == Some(c))
            .unwrap_or_else(|| panic!("`{c}` is in the command list:\n{text}"));
        let words = line.split_whitespace().count();
        assert!(words >= 4, "`{c}` has a one-line description: {line:?}");
    }
}

/// README's first two commands work as root on a machine without sudo:
/// each line's prefix (what precedes `scripts/`) is run with a PATH that
/// holds no sudo, in front of a stand-in for the script.
#[test]
fn readme_first_commands_run_without_sudo() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md at the workspace root");
    let block: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert_eq!(
        readme.lines().position(|l| l.starts_with("```sh")),
        Some(2),
        "the commands are the README's first lines after the title"
    );
    let commands: Vec<&str> = block
        .iter()
        .copied()
        .filter(|l| l.contains("scripts/"))
        .collect();
    assert_eq!(commands.len(), 2, "{block:?}");
    // A PATH with one program, `true` standing in for the script.
    let dir = std::env::temp_dir().join(format!("xtcp-nosudo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stand_in = dir.join("stand-in");
    std::fs::write(&stand_in, "#!/bin/sh\necho ran \"$0\"\n").unwrap();
    std::fs::set_permissions(
        &stand_in,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    for line in commands {
        let prefix = &line[..line.find("scripts/").unwrap()];
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("{prefix}{}", stand_in.display()))
            .env("PATH", &dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with("ran"),
            "`{line}` without sudo: {:?} {stdout} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `send` and `recv` arguments that cannot go together are usage errors,
/// as clap's are (exit status 2), found before any interface is looked
/// up (nothing else is printed first).
#[test]
fn send_and_recv_argument_combinations_are_usage_errors() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["send", "-c", "198.18.0.2", "-P", "2", "-F", "/etc/hosts"],
            "-P (--parallel) above 1 needs --pattern or --zeros",
        ),
        (
            &["send", "-c", "198.18.0.2", "-P", "0", "--zeros", "-n", "1M"],
            "-P (--parallel) 0 is outside 1..=1024",
        ),
        (
            &["send", "-c", "198.18.0.2", "-n", "1M", "-F", "-"],
            "-n (--bytes) goes with --pattern SEED, --zeros or --file FILE",
        ),
        (
            &["send", "-c", "198.18.0.2", "--zeros"],
            "--pattern and --zeros need -n BYTES",
        ),
        (
            &["recv", "--keep-listening", "--out", "/tmp/x"],
            "--keep-listening needs --verify SEED or --discard",
        ),
        (
            &["recv", "--keep-listening"],
            "--keep-listening needs --verify SEED or --discard",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(XTCP).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("xtcp: error: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// A link-local peer is refused with the reason and what to give instead
/// (it used to lose its `%scope` and fail with a route's wrong advice).
#[test]
fn a_link_local_peer_is_refused_with_the_reason() {
    for args in [
        &["send", "-c", "fe80::1%lo", "--zeros", "-n", "1M"][..],
        &["client", "-c", "fe80::1", "-t", "1"][..],
    ] {
        let out = Command::new(XTCP).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "-c {}: a link-local peer (fe80::/10) is not one xtcp reaches",
                args[2]
            )),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("unique-local address (fd00::/8)"),
            "{args:?}: {err}"
        );
    }
}
