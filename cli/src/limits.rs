//! `xtcp serve`'s limits and authentication, with iperf3's flag names where
//! iperf3 has one: the flags, and the [`ServerConfig`] they make.
//!
//! Every flag is an `Option` without a clap default, so that a
//! configuration file can fill what the command line left out; the
//! defaults are applied in [`LimitArgs::server_config`]. Calling it again
//! (after a reload) loads the key and the users file again.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use xtcp_engine::app::iperf3::{
    AccessList, Authenticator, BitrateLimit, BitrateLimitError, Cidr, DEFAULT_TIME_SKEW,
    ServerConfig, parse_bitrate_limit,
};

/// A `--server-bitrate-limit` value: a limit, or none (`0`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit(pub Option<BitrateLimit>);

impl FromStr for RateLimit {
    type Err = BitrateLimitError;

    fn from_str(s: &str) -> Result<RateLimit, BitrateLimitError> {
        parse_bitrate_limit(s).map(RateLimit)
    }
}

/// Limits and authentication of `xtcp serve`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LimitArgs {
    /// Serve only clients whose address is in one of these blocks: IPv4 or
    /// IPv6 CIDR blocks or single addresses, comma-separated or the flag
    /// repeated (default: every client). A refused client is answered
    /// "test authorization failed" and reported as refused (denied).
    #[arg(long, value_name = "CIDR[,CIDR…]", value_delimiter = ',')]
    pub allow: Option<Vec<Cidr>>,
    /// Refuse clients in these blocks, even if --allow names them.
    #[arg(long, value_name = "CIDR[,CIDR…]", value_delimiter = ',')]
    pub deny: Option<Vec<Cidr>>,
    /// As iperf3 3.20: refuse a test whose -t plus -O exceeds this many
    /// seconds, and any test without -t (-n, -k); 0 = no limit (default).
    #[arg(long = "server-max-duration", value_name = "SECS",
          value_parser = clap::value_parser!(u32).range(0..=86_400))]
    pub server_max_duration: Option<u32>,
    /// As iperf3: refuse a test that asks for more than RATE bit/s in all
    /// (-b × streams), and end one that moves more, both directions
    /// together, averaged over SECS (default 5, 0.1..=60). RATE takes K, M,
    /// G, T (powers of 1000); 0 = no limit (default). E.g. 1G, 500M/10.
    #[arg(long = "server-bitrate-limit", value_name = "RATE[/SECS]")]
    pub server_bitrate_limit: Option<RateLimit>,
    /// End a running test that moves no data and no control message for
    /// this many seconds (1..=86400; default 120). With -1, also exit when
    /// no client came for that long (as iperf3 -s -1 --idle-timeout).
    #[arg(long = "idle-timeout", value_name = "SECS",
          value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub idle_timeout: Option<u32>,
    /// As iperf3's --rcv-timeout: end a running test that moves nothing
    /// for this many milliseconds (100..=86400000; default 120000). It
    /// takes the place of --idle-timeout's for the running test.
    #[arg(long = "rcv-timeout", value_name = "MS",
          value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    pub rcv_timeout: Option<u64>,
    /// Most data streams one test may open, both directions of --bidir
    /// counted (1..=256; default 256, iperf3's -P 128 both ways); more is
    /// refused as iperf3 refuses -P above its maximum.
    #[arg(long = "max-streams", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_streams: Option<u32>,
    /// As iperf3: the RSA private key (PEM, PKCS#1 or PKCS#8, no password;
    /// `openssl genrsa -out key.pem 2048`) that decrypts clients'
    /// credentials. With --authorized-users-path, every test must log in
    /// (`iperf3 -c … --username U --rsa-public-key-path pub.pem`).
    #[arg(long = "rsa-private-key-path", value_name = "FILE")]
    pub rsa_private_key_path: Option<PathBuf>,
    /// As iperf3: the users, one line `user,sha256hex` each, the hex SHA-256
    /// of `{user}password` (`printf '%s' '{alice}secret' | sha256sum`); `#`
    /// starts a comment line.
    #[arg(long = "authorized-users-path", value_name = "FILE")]
    pub authorized_users_path: Option<PathBuf>,
    /// As iperf3: refuse a login whose timestamp is more than this many
    /// seconds from this host's clock (1..=86400; default 10).
    #[arg(long = "time-skew-threshold", value_name = "SECS",
          value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub time_skew_threshold: Option<u32>,
}

impl LimitArgs {
    /// The server configuration these limits make, defaults filled in;
    /// `one_off`: `-1` (the idle timeout then also ends an idle server).
    /// Reads the key and the users file, if given.
    pub fn server_config(&self, one_off: bool) -> anyhow::Result<ServerConfig> {
        self.server_config_keeping(one_off, None)
    }

    /// [`LimitArgs::server_config`], with `auth` for the authentication
    /// instead of reading the key and the users file (a reload that
    /// cannot read them where serve dropped its privileges keeps those
    /// it runs with).
    pub fn server_config_keeping(
        &self,
        one_off: bool,
        auth: Option<Arc<Authenticator>>,
    ) -> anyhow::Result<ServerConfig> {
        let mut c = ServerConfig {
            access: AccessList {
                allow: self.allow.clone().unwrap_or_default(),
                deny: self.deny.clone().unwrap_or_default(),
            },
            max_duration: self
                .server_max_duration
                .filter(|&s| s > 0)
                .map(|s| Duration::from_secs(s.into())),
            bitrate_limit: self.server_bitrate_limit.and_then(|r| r.0),
            ..ServerConfig::default()
        };
        if let Some(s) = self.idle_timeout {
            c.idle_timeout = Duration::from_secs(s.into());
            c.exit_when_idle = one_off.then_some(c.idle_timeout);
        }
        if let Some(ms) = self.rcv_timeout {
            c.idle_timeout = Duration::from_millis(ms);
            c.idle_timeout_flag = "--rcv-timeout";
        }
        if let Some(n) = self.max_streams {
            c.max_streams = n;
        }
        let skew = self
            .time_skew_threshold
            .map_or(DEFAULT_TIME_SKEW, |s| Duration::from_secs(s.into()));
        match (&self.rsa_private_key_path, &self.authorized_users_path) {
            (Some(_), Some(_)) if auth.is_some() => c.auth = auth,
            (Some(key), Some(users)) => {
                let a = Authenticator::load(key, users, skew)
                    .context("authentication (--rsa-private-key-path, --authorized-users-path)")?;
                c.auth = Some(Arc::new(a));
            }
            (None, None) if self.time_skew_threshold.is_some() => bail!(
                "--time-skew-threshold applies to authentication: give --rsa-private-key-path \
                 and --authorized-users-path too"
            ),
            (None, None) => {}
            (Some(_), None) => bail!(
                "--rsa-private-key-path needs --authorized-users-path (authentication takes both)"
            ),
            (None, Some(_)) => bail!(
                "--authorized-users-path needs --rsa-private-key-path (authentication takes both)"
            ),
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        l: LimitArgs,
    }

    fn parse(args: &[&str]) -> Result<LimitArgs, String> {
        let mut v = vec!["t"];
        v.extend(args);
        Cli::try_parse_from(v)
            .map(|c| c.l)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_when_nothing_is_given() {
        let c = parse(&[]).unwrap().server_config(false).unwrap();
        let d = ServerConfig::default();
        assert_eq!(c.access, AccessList::default());
        assert_eq!((c.max_duration, c.bitrate_limit), (None, None));
        assert_eq!(
            (c.idle_timeout, c.max_streams),
            (d.idle_timeout, d.max_streams)
        );
        assert!(c.auth.is_none() && c.exit_when_idle.is_none());
    }

    #[test]
    fn flags_make_the_config() {
        let l = parse(&[
            "--allow",
            "198.18.0.0/15,2001:2::/48",
            "--allow",
            "192.0.2.7",
            "--deny",
            "198.18.0.66",
            "--server-max-duration",
            "30",
            "--server-bitrate-limit",
            "500M/2",
            "--idle-timeout",
            "7",
            "--max-streams",
            "8",
        ])
        .unwrap();
        let c = l.server_config(true).unwrap();
        assert_eq!(c.access.allow.len(), 3);
        assert_eq!(c.access.deny[0].to_string(), "198.18.0.66/32");
        assert_eq!(c.max_duration, Some(Duration::from_secs(30)));
        assert_eq!(
            c.bitrate_limit,
            Some(BitrateLimit {
                bits_per_second: 500_000_000,
                window: Duration::from_secs(2)
            })
        );
        assert_eq!(c.idle_timeout, Duration::from_secs(7));
        assert_eq!(c.idle_timeout_flag, "--idle-timeout", "named in the error");
        assert_eq!(
            c.exit_when_idle,
            Some(Duration::from_secs(7)),
            "-1 with --idle-timeout"
        );
        assert_eq!(c.max_streams, 8);
        assert!(l.server_config(false).unwrap().exit_when_idle.is_none());
        // --rcv-timeout, in ms, is the running test's; --idle-timeout keeps
        // the exit of -1.
        let c = parse(&["--idle-timeout", "7", "--rcv-timeout", "2500"])
            .unwrap()
            .server_config(true)
            .unwrap();
        assert_eq!(c.idle_timeout, Duration::from_millis(2500));
        assert_eq!(c.idle_timeout_flag, "--rcv-timeout");
        assert_eq!(c.exit_when_idle, Some(Duration::from_secs(7)));
        assert!(
            parse(&["--rcv-timeout", "99"]).is_err(),
            "iperf3's least is 100 ms"
        );
        // Zero is no limit, as in iperf3.
        let c = parse(&["--server-max-duration", "0", "--server-bitrate-limit", "0"])
            .unwrap()
            .server_config(false)
            .unwrap();
        assert_eq!((c.max_duration, c.bitrate_limit), (None, None));
    }

    #[test]
    fn bad_values_name_the_value_and_the_range() {
        for (args, want) in [
            (
                &["--allow", "198.18.0.0/15,nope"][..],
                ["`nope`", "/0..=/32"],
            ),
            (
                &["--deny", "10.0.0.0/40"][..],
                ["`10.0.0.0/40`", "/0..=/128"],
            ),
            (
                &["--server-max-duration", "86401"][..],
                ["86401", "0..=86400"],
            ),
            (&["--idle-timeout", "0"][..], ["'0'", "1..=86400"]),
            (&["--max-streams", "257"][..], ["257", "1..=256"]),
            (&["--time-skew-threshold", "0"][..], ["'0'", "1..=86400"]),
            (&["--server-bitrate-limit", "1Q"][..], ["`1Q`", "0.1..=60"]),
            (
                &["--server-bitrate-limit", "1G/100"][..],
                ["`1G/100`", "0.1..=60"],
            ),
        ] {
            let e = parse(args).unwrap_err();
            for w in want {
                assert!(e.contains(w), "{args:?}: {e}");
            }
        }
    }

    #[test]
    fn authentication_takes_both_files() {
        let e = |args: &[&str]| {
            parse(args)
                .unwrap()
                .server_config(false)
                .unwrap_err()
                .to_string()
        };
        assert!(e(&["--rsa-private-key-path", "k.pem"]).contains("--authorized-users-path"));
        assert!(e(&["--authorized-users-path", "u.csv"]).contains("--rsa-private-key-path"));
        assert!(e(&["--time-skew-threshold", "5"]).contains("--rsa-private-key-path"));
        let msg = parse(&[
            "--rsa-private-key-path",
            "/nonexistent/k.pem",
            "--authorized-users-path",
            "/nonexistent/u.csv",
        ])
        .unwrap()
        .server_config(false)
        .unwrap_err();
        let chain = format!("{msg:#}");
        assert!(chain.contains("cannot read /nonexistent/k.pem"), "{chain}");
    }
}
