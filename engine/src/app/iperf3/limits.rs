//! The server's limits as iperf3 users know them, and why a control
//! connection was refused.
//!
//! Contract: pure data and arithmetic, no I/O, no clock. What iperf3 (3.20)
//! does, and what this server does the same way:
//!
//! - `--server-max-duration N`: a test whose `-t` + `-O` exceeds N seconds,
//!   or that has no time limit (`-t 0`, which is what `-n` and `-k` tests
//!   send), is refused at the parameters with `IEMAXSERVERTESTDURATIONEXCEEDED`
//!   (37). A running test is not cut at N: it is bounded by its own `-t`,
//!   which the check made at most N.
//! - `--server-bitrate-limit N[KMGT][/S]`: a test that asks for more than N
//!   bit/s in total (`-b` × streams, doubled with `--bidir`; the same for
//!   `--fq-rate`) is refused at the parameters with `IETOTALRATE` (27); a
//!   running test whose bytes in both directions together, averaged over
//!   the last S seconds (default 5), exceed N is ended with `IETOTALRATE`.
//!   iperf3 samples once per statistics interval (1 s) and averages over
//!   `round(S / 1 s)` samples (at least one), from the first full window on,
//!   omitted seconds included; [`RateWindow`] does the same.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Why a control connection was refused before its test ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The client's address is denied (or not allowed).
    Denied,
    /// A test is already running.
    Busy,
    /// Authentication is required and the client's token did not pass.
    Auth,
    /// `-t` + `-O` above the server's max duration, or no time limit.
    MaxDuration,
    /// The requested total bit rate is above the server's limit.
    BitrateLimit,
    /// More data streams than the server allows.
    MaxStreams,
    /// Parameters that are invalid or not supported.
    Params,
    /// No test: the connection closed, went quiet or sent something else
    /// before iperf3's cookie (a port scan, a TCP health check).
    NoCookie,
}

impl Refusal {
    /// Every refusal, in a fixed order (for counters and tests).
    pub const ALL: [Refusal; 8] = [
        Refusal::Denied,
        Refusal::Busy,
        Refusal::Auth,
        Refusal::MaxDuration,
        Refusal::BitrateLimit,
        Refusal::MaxStreams,
        Refusal::Params,
        Refusal::NoCookie,
    ];

    /// A short stable name: "denied", "busy", "auth", "max_duration",
    /// "bitrate_limit", "max_streams", "params", "no_cookie".
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Denied => "denied",
            Refusal::Busy => "busy",
            Refusal::Auth => "auth",
            Refusal::MaxDuration => "max_duration",
            Refusal::BitrateLimit => "bitrate_limit",
            Refusal::MaxStreams => "max_streams",
            Refusal::Params => "params",
            Refusal::NoCookie => "no_cookie",
        }
    }

    /// Whether `iperf3 -s -1` would count the connection as its one test
    /// and exit: a busy answer happens while the one test runs, and iperf3
    /// goes on after an authentication failure (so does this server after
    /// a denied address, or a connection that brought no cookie: no test);
    /// a refused test's parameters end a one-off server.
    pub fn ends_one_off(self) -> bool {
        !matches!(
            self,
            Refusal::Busy | Refusal::Auth | Refusal::Denied | Refusal::NoCookie
        )
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// iperf3's `--server-bitrate-limit`: the most bits per second a test may
/// move, both directions together, averaged over `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitrateLimit {
    /// Bits per second (more than 0).
    pub bits_per_second: u64,
    /// Averaging interval (iperf3's default: 5 s).
    pub window: Duration,
}

/// iperf3's default averaging interval for the bitrate limit.
pub const DEFAULT_BITRATE_WINDOW: Duration = Duration::from_secs(5);

/// Shortest and longest averaging interval iperf3 accepts
/// (`MIN_INTERVAL`, `MAX_INTERVAL`).
pub const BITRATE_WINDOW_RANGE: (f64, f64) = (0.1, 60.0);

/// How often the rate is sampled (iperf3's statistics interval).
pub const RATE_SAMPLE_PERIOD: Duration = Duration::from_secs(1);

/// A `--server-bitrate-limit` value that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{value}`: {reason} (accepted: a rate in bit/s with an optional K, M, G or T suffix (powers \
     of 1000), then optionally / and the averaging interval in seconds, 0.1..=60; e.g. 500M, \
     1G/10; 0 means no limit)"
)]
pub struct BitrateLimitError {
    pub value: String,
    pub reason: &'static str,
}

/// Parses iperf3's `N[KMGT][/S]` (`1G`, `500M/5`, `2.5g/0.5`). `Ok(None)`
/// for a rate of 0 (no limit, as in iperf3).
pub fn parse_bitrate_limit(s: &str) -> Result<Option<BitrateLimit>, BitrateLimitError> {
    let err = |reason| BitrateLimitError {
        value: s.to_owned(),
        reason,
    };
    let (rate, window) = match s.trim().split_once('/') {
        Some((r, w)) => (r.trim(), Some(w.trim())),
        None => (s.trim(), None),
    };
    let (digits, mult) = match rate.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_lowercase() {
                'k' => 1e3,
                'm' => 1e6,
                'g' => 1e9,
                't' => 1e12,
                _ => return Err(err("unknown unit suffix")),
            };
            (&rate[..i], m)
        }
        _ => (rate, 1.0),
    };
    let n: f64 = digits
        .parse()
        .map_err(|_| err("the rate is not a number"))?;
    let bits = n * mult;
    if !bits.is_finite() || bits < 0.0 || bits >= u64::MAX as f64 {
        return Err(err("the rate is out of range"));
    }
    let window = match window {
        None => DEFAULT_BITRATE_WINDOW,
        Some(w) => {
            let secs: f64 = w
                .parse()
                .map_err(|_| err("the averaging interval is not a number"))?;
            let (lo, hi) = BITRATE_WINDOW_RANGE;
            if !(lo..=hi).contains(&secs) {
                return Err(err("the averaging interval is out of range"));
            }
            Duration::from_secs_f64(secs)
        }
    };
    let bits_per_second = bits as u64;
    Ok((bits_per_second > 0).then_some(BitrateLimit {
        bits_per_second,
        window,
    }))
}

impl FromStr for BitrateLimit {
    type Err = BitrateLimitError;

    /// As [`parse_bitrate_limit`], but 0 is an error (use `Option`).
    fn from_str(s: &str) -> Result<BitrateLimit, BitrateLimitError> {
        parse_bitrate_limit(s)?.ok_or(BitrateLimitError {
            value: s.to_owned(),
            reason: "a limit of 0 is no limit",
        })
    }
}

impl fmt::Display for BitrateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bit/s over {} s",
            self.bits_per_second,
            self.window.as_secs_f64()
        )
    }
}

/// The running check of a [`BitrateLimit`]: bytes per sample period in a
/// ring of the last `samples` periods. Allocates once, at creation.
#[derive(Debug)]
pub(crate) struct RateWindow {
    limit: BitrateLimit,
    samples: usize,
    ring: VecDeque<u64>,
    mark: u64,
    next: Instant,
}

/// The window's verdict when it is over the limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct OverLimit {
    pub bits_per_second: u64,
    pub seconds: f64,
}

impl RateWindow {
    /// A window starting at `now`, with `bytes` moved so far.
    pub(crate) fn new(limit: BitrateLimit, now: Instant, bytes: u64) -> RateWindow {
        let period = RATE_SAMPLE_PERIOD.as_secs_f64();
        let w = limit.window.as_secs_f64();
        let samples = if w <= period {
            1
        } else {
            ((w / period).round() as usize).max(1)
        };
        RateWindow {
            limit,
            samples,
            ring: VecDeque::with_capacity(samples + 1),
            mark: bytes,
            next: now + RATE_SAMPLE_PERIOD,
        }
    }

    /// When the next sample is due.
    pub(crate) fn deadline(&self) -> Instant {
        self.next
    }

    /// Takes the samples due by `now` (`bytes`: every byte moved so far,
    /// both directions); `Err` once the average over the last full window
    /// is above the limit.
    pub(crate) fn sample(&mut self, now: Instant, bytes: u64) -> Result<(), OverLimit> {
        while self.next <= now {
            self.next += RATE_SAMPLE_PERIOD;
            self.ring.push_back(bytes.saturating_sub(self.mark));
            self.mark = bytes;
            if self.ring.len() > self.samples {
                self.ring.pop_front();
            }
            if self.ring.len() < self.samples {
                continue;
            }
            let total: u64 = self.ring.iter().fold(0u64, |a, &b| a.saturating_add(b));
            let seconds = RATE_SAMPLE_PERIOD.as_secs_f64() * self.samples as f64;
            let bits_per_second = (total as f64 * 8.0 / seconds) as u64;
            if bits_per_second > self.limit.bits_per_second {
                return Err(OverLimit {
                    bits_per_second,
                    seconds,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(bits: u64, window: f64) -> Option<BitrateLimit> {
        Some(BitrateLimit {
            bits_per_second: bits,
            window: Duration::from_secs_f64(window),
        })
    }

    #[test]
    fn bitrate_syntax_as_iperf3() {
        assert_eq!(parse_bitrate_limit("1G"), Ok(limit(1_000_000_000, 5.0)));
        assert_eq!(parse_bitrate_limit("500M/5"), Ok(limit(500_000_000, 5.0)));
        assert_eq!(parse_bitrate_limit("500m/2.5"), Ok(limit(500_000_000, 2.5)));
        assert_eq!(parse_bitrate_limit("2.5g"), Ok(limit(2_500_000_000, 5.0)));
        assert_eq!(parse_bitrate_limit("100k/0.1"), Ok(limit(100_000, 0.1)));
        assert_eq!(
            parse_bitrate_limit("3T/60"),
            Ok(limit(3_000_000_000_000, 60.0))
        );
        assert_eq!(parse_bitrate_limit("12345"), Ok(limit(12345, 5.0)));
        assert_eq!(parse_bitrate_limit("0"), Ok(None));
        assert_eq!(parse_bitrate_limit("0M/3"), Ok(None));
        assert!("0".parse::<BitrateLimit>().is_err());
        assert_eq!("1G/10".parse(), Ok(limit(1_000_000_000, 10.0).unwrap()));
    }

    #[test]
    fn bad_bitrates_name_the_value_and_the_range() {
        for (bad, why) in [
            ("", "not a number"),
            ("fast", "not a number"),
            ("1X", "unknown unit"),
            ("1Gb", "unknown unit"),
            ("-1M", "out of range"),
            ("1M/0", "interval is out of range"),
            ("1M/61", "interval is out of range"),
            ("1M/x", "interval is not a number"),
            ("1e30T", "out of range"),
        ] {
            let e = parse_bitrate_limit(bad).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(&format!("`{bad}`")), "{text}");
            assert!(text.contains(why), "{bad}: {text}");
            assert!(text.contains("0.1..=60"), "{text}");
        }
    }

    #[test]
    fn rate_window_averages_the_last_full_window() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        // 8000 bit/s over 3 s = 1000 bytes a second.
        let mut w = RateWindow::new(limit(8000, 3.0).unwrap(), t0, 0);
        assert_eq!(w.deadline(), t0 + s);
        // A burst in the first second alone does not count before the
        // window is full...
        assert_eq!(w.sample(t0 + s, 2500), Ok(()));
        assert_eq!(w.sample(t0 + 2 * s, 2500), Ok(()));
        // ...and then the average is what counts: 3000 bytes in 3 s.
        assert_eq!(w.sample(t0 + 3 * s, 3000), Ok(()));
        // 4 s: the last three seconds moved 0 + 500 + 3000 = 3500 bytes.
        assert_eq!(
            w.sample(t0 + 4 * s, 6000),
            Err(OverLimit {
                bits_per_second: 9333,
                seconds: 3.0
            })
        );
    }

    #[test]
    fn rate_window_of_one_sample_and_late_calls() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        // Windows up to the sample period average over one sample.
        let mut w = RateWindow::new(limit(8000, 0.5).unwrap(), t0, 100);
        assert_eq!(w.sample(t0 + s / 2, 10_000), Ok(()), "not due yet");
        assert_eq!(w.sample(t0 + s, 1100), Ok(()));
        assert!(w.sample(t0 + 2 * s, 2101).is_err());
        // A late call takes every sample due: the bytes go to the first.
        let mut w = RateWindow::new(limit(8000, 2.0).unwrap(), t0, 0);
        assert_eq!(w.sample(t0 + 3 * s, 1999), Ok(()));
        assert_eq!(w.deadline(), t0 + 4 * s);
    }

    #[test]
    fn refusal_names() {
        let names: Vec<&str> = Refusal::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names,
            [
                "denied",
                "busy",
                "auth",
                "max_duration",
                "bitrate_limit",
                "max_streams",
                "params",
                "no_cookie",
            ]
        );
        assert!(!Refusal::Busy.ends_one_off() && !Refusal::Auth.ends_one_off());
        assert!(Refusal::MaxDuration.ends_one_off() && Refusal::Params.ends_one_off());
    }
}
