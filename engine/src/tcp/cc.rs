//! Congestion control behind a trait: NewReno (RFC 5681 / 6582 window rules)
//! and CUBIC (RFC 9438).
//!
//! The connection owns loss detection and recovery (RFC 6675 pipe / NextSeg;
//! what a recovery sends, RFC 9937 PRR); the controller only owns the window
//! and the target a recovery brings the flight down to (`ssthresh`). Call
//! order: `on_ack` for every ACK that advances `SND.UNA` outside recovery,
//! `on_congestion_event` once when a loss recovery starts, `on_rto` on a
//! retransmission timeout, `on_recovery_end` when recovery completes, and
//! `undo` (at most once after an `on_congestion_event`, never after an
//! `on_rto`) when the connection finds that recovery needless. Windows are
//! in bytes.
//!
//! Both controllers leave their initial slow start by HyStart++ (RFC 9406,
//! [`HyStart`]) where the RTT grows before a loss ends it.

use std::time::{Duration, Instant};

/// An ACK that advanced SND.UNA, as a controller sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ack {
    /// Bytes it newly acknowledged.
    pub acked: usize,
    /// The smoothed RTT, if known.
    pub srtt: Option<Duration>,
    /// The RTT this ACK measured, if it measured one (its timestamp echo:
    /// HyStart++ takes a sample from every ACK, in 1-ms ticks).
    pub rtt_sample: Option<Duration>,
    /// SND.UNA after it, a send offset.
    pub una: u64,
    /// The highest offset sent (SND.NXT, or SND.MAX after going back).
    pub sent: u64,
}

/// A congestion controller.
pub trait CongestionControl: Send + std::fmt::Debug {
    /// The congestion window, bytes.
    fn window(&self) -> usize;
    /// The slow-start threshold, bytes.
    fn ssthresh(&self) -> usize;
    /// An ACK acknowledged new bytes (not in recovery).
    fn on_ack(&mut self, now: Instant, ack: &Ack);
    /// Loss detected by duplicate ACKs / SACK: a recovery starts with
    /// `in_flight` bytes outstanding.
    fn on_congestion_event(&mut self, now: Instant, in_flight: usize);
    /// Recovery finished (all data outstanding at its start is acknowledged).
    fn on_recovery_end(&mut self, now: Instant);
    /// The last congestion event was no loss (every retransmission of its
    /// recovery reached the peer twice, or the timestamp echo shows the
    /// originals filled the holes: they were late): back to the state
    /// before it, the window at least what it was then.
    fn undo(&mut self);
    /// Retransmission timeout with `in_flight` bytes outstanding.
    fn on_rto(&mut self, now: Instant, in_flight: usize);
    /// The sender MSS changed (at connection establishment).
    fn set_mss(&mut self, mss: usize);
    /// The path's MTU fell mid-connection and the MSS with it: the window
    /// and threshold keep their number of segments (Linux counts both in
    /// segments), at the new size.
    fn rescale_mss(&mut self, mss: usize);
    /// The algorithm's name as Linux spells it (`TCP_CONGESTION`): what
    /// iperf3 reports as `congestion_used`.
    fn name(&self) -> &'static str;
}

/// Which controller a [`super::Config`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CongestionAlgorithm {
    /// [`NewReno`].
    NewReno,
    /// [`Cubic`].
    Cubic,
}

impl CongestionAlgorithm {
    /// The names [`CongestionAlgorithm::from_name`] takes.
    pub const NAMES: &'static str = "cubic, reno, newreno";

    /// The algorithm called `name` (ASCII case ignored): `cubic`, or `reno`
    /// / `newreno` for [`NewReno`] (Linux's `reno` is NewReno too); None
    /// for a name xtcp lacks.
    pub fn from_name(name: &str) -> Option<CongestionAlgorithm> {
        match name.to_ascii_lowercase().as_str() {
            "cubic" => Some(CongestionAlgorithm::Cubic),
            "reno" | "newreno" => Some(CongestionAlgorithm::NewReno),
            _ => None,
        }
    }

    /// Its name as Linux spells it: `cubic`, `reno`.
    pub fn name(self) -> &'static str {
        match self {
            CongestionAlgorithm::NewReno => "reno",
            CongestionAlgorithm::Cubic => "cubic",
        }
    }

    /// A controller of this kind; `hystart`: its initial slow start ends
    /// by HyStart++ too ([`HyStart`]).
    pub fn build(
        self,
        mss: usize,
        initial_segments: usize,
        hystart: bool,
    ) -> Box<dyn CongestionControl> {
        let h = HyStart::new(hystart);
        match self {
            CongestionAlgorithm::NewReno => Box::new(NewReno {
                hystart: h,
                ..NewReno::new(mss, initial_segments)
            }),
            CongestionAlgorithm::Cubic => Box::new(Cubic {
                hystart: h,
                ..Cubic::new(mss, initial_segments)
            }),
        }
    }
}

/// RFC 9406's constants: the RTT increase that ends slow start is an
/// eighth of the last round's least RTT, within 4..16 ms, judged once a
/// round has 8 samples; Conservative Slow Start grows a quarter as fast,
/// for at most 5 rounds.
const MIN_RTT_THRESH: u64 = 4_000_000;
const MAX_RTT_THRESH: u64 = 16_000_000;
const MIN_RTT_DIVISOR: u64 = 8;
const N_RTT_SAMPLE: u32 = 8;
const CSS_GROWTH_DIVISOR: usize = 4;
const CSS_ROUNDS: u32 = 5;
/// No RTT, no round, not in CSS.
const NONE: u64 = u64::MAX;

/// HyStart++ (RFC 9406): slow start that ends before the loss that would
/// end it. Each round (a window of data, from one ACK of SND.NXT to the
/// next) keeps the least RTT its ACKs measured; once a round has 8 samples
/// and its least RTT is above the last round's by the threshold (the
/// bottleneck's queue has begun to fill), the window grows a quarter as
/// fast (Conservative Slow Start, CSS). If the RTT falls back below where
/// CSS began, that was jitter and slow start resumes; after 5 rounds of
/// CSS, congestion avoidance begins (`ssthresh` = the window). Without it
/// a slow start doubles the window until the queue overflows, and the last
/// round loses as much as the path holds.
///
/// For the initial slow start only (the RFC's recommendation): a loss or an
/// RTO turns it off, and the slow starts after an RTO climb to the
/// `ssthresh` the loss set. Unlike the RFC's unpaced sender, growth is
/// not limited to 8 segments an ACK (L), as in the plain slow start. RTT
/// samples come from timestamp echoes: a connection without timestamps
/// has none and keeps the plain slow start.
#[derive(Debug, Clone, Copy)]
pub struct HyStart {
    on: bool,
    /// Where the current round ends: SND.NXT when it began.
    window_end: u64,
    /// Least RTT of the last round and of this one, ns.
    last_round_min: u64,
    round_min: u64,
    /// RTT samples in this round.
    samples: u32,
    /// In CSS: the least RTT of the round that began it, ns.
    css_baseline: u64,
    /// Rounds begun in CSS.
    css_rounds: u32,
}

impl HyStart {
    /// On, or off: slow start as before HyStart++.
    pub fn new(on: bool) -> HyStart {
        HyStart {
            on,
            window_end: NONE,
            last_round_min: NONE,
            round_min: NONE,
            samples: 0,
            css_baseline: NONE,
            css_rounds: 0,
        }
    }

    /// In Conservative Slow Start.
    pub fn in_css(&self) -> bool {
        self.on && self.css_baseline != NONE
    }

    /// An ACK in slow start: the bytes the window grows by, and whether
    /// slow start ends with it (the window then is the new `ssthresh`).
    fn on_ack(&mut self, ack: &Ack) -> (usize, bool) {
        if !self.on {
            return (ack.acked, false);
        }
        if self.window_end == NONE || ack.una >= self.window_end {
            // A new round.
            self.window_end = ack.sent;
            self.last_round_min = self.round_min;
            self.round_min = NONE;
            self.samples = 0;
            if self.css_baseline != NONE {
                self.css_rounds += 1;
                if self.css_rounds >= CSS_ROUNDS {
                    self.on = false;
                    return (ack.acked / CSS_GROWTH_DIVISOR, true);
                }
            }
        }
        if let Some(rtt) = ack.rtt_sample {
            let ns = u64::try_from(rtt.as_nanos()).unwrap_or(NONE - 1);
            self.round_min = self.round_min.min(ns);
            self.samples += 1;
        }
        let judged = self.samples >= N_RTT_SAMPLE && self.round_min != NONE;
        if self.css_baseline != NONE {
            if judged && self.round_min < self.css_baseline {
                // The RTT came down again: jitter, not a queue.
                self.css_baseline = NONE;
                return (ack.acked, false);
            }
            return (ack.acked / CSS_GROWTH_DIVISOR, false);
        }
        if judged && self.last_round_min != NONE {
            let thresh =
                (self.last_round_min / MIN_RTT_DIVISOR).clamp(MIN_RTT_THRESH, MAX_RTT_THRESH);
            if self.round_min >= self.last_round_min.saturating_add(thresh) {
                self.css_baseline = self.round_min;
                self.css_rounds = 0;
                return (ack.acked / CSS_GROWTH_DIVISOR, false);
            }
        }
        (ack.acked, false)
    }

    /// A loss or an RTO: the initial slow start is over.
    fn end(&mut self) {
        self.on = false;
    }
}

/// RFC 5681 slow start and congestion avoidance with byte counting
/// (RFC 3465, L = 2·MSS), halving on loss.
#[derive(Debug, Clone)]
pub struct NewReno {
    mss: usize,
    initial_segments: usize,
    cwnd: usize,
    ssthresh: usize,
    /// Bytes acknowledged towards the next congestion-avoidance increment.
    acked_acc: usize,
    /// (cwnd, ssthresh) before the last congestion event, for `undo`.
    prior: Option<(usize, usize)>,
    hystart: HyStart,
}

impl NewReno {
    /// A controller with an initial window of `initial_segments` × `mss`,
    /// HyStart++ on.
    pub fn new(mss: usize, initial_segments: usize) -> NewReno {
        NewReno {
            mss,
            initial_segments,
            cwnd: mss * initial_segments,
            ssthresh: usize::MAX,
            acked_acc: 0,
            prior: None,
            hystart: HyStart::new(true),
        }
    }
}

impl CongestionControl for NewReno {
    fn window(&self) -> usize {
        self.cwnd
    }
    fn ssthresh(&self) -> usize {
        self.ssthresh
    }
    fn on_ack(&mut self, _now: Instant, ack: &Ack) {
        if self.cwnd < self.ssthresh {
            let (grow, exit) = self.hystart.on_ack(ack);
            self.cwnd = slow_start(self.cwnd, self.ssthresh, grow);
            if exit {
                self.ssthresh = self.cwnd;
            }
        } else {
            self.acked_acc += ack.acked;
            if self.acked_acc >= self.cwnd {
                self.acked_acc -= self.cwnd;
                self.cwnd += self.mss;
            }
        }
    }
    fn on_congestion_event(&mut self, _now: Instant, in_flight: usize) {
        self.hystart.end();
        self.prior = Some((self.cwnd, self.ssthresh));
        self.ssthresh = (in_flight / 2).max(2 * self.mss);
        self.cwnd = self.ssthresh;
        self.acked_acc = 0;
    }
    fn on_recovery_end(&mut self, _now: Instant) {
        self.cwnd = self.ssthresh.max(self.mss);
    }
    fn undo(&mut self) {
        if let Some((cwnd, ssthresh)) = self.prior.take() {
            self.cwnd = self.cwnd.max(cwnd);
            self.ssthresh = self.ssthresh.max(ssthresh);
        }
    }
    fn on_rto(&mut self, _now: Instant, in_flight: usize) {
        self.hystart.end();
        self.prior = None;
        self.ssthresh = (in_flight / 2).max(2 * self.mss);
        self.cwnd = self.mss;
        self.acked_acc = 0;
    }
    fn name(&self) -> &'static str {
        "reno"
    }
    fn set_mss(&mut self, mss: usize) {
        self.mss = mss;
        self.cwnd = mss * self.initial_segments;
    }
    fn rescale_mss(&mut self, mss: usize) {
        let old = self.mss;
        self.mss = mss;
        self.cwnd = rescale(self.cwnd, old, mss);
        self.ssthresh = rescale(self.ssthresh, old, mss);
        self.acked_acc = 0;
        self.prior = None;
    }
}

/// `bytes` of segments of `old` bytes, as many segments of `new` bytes
/// (at least one); `usize::MAX` (no threshold yet) stays.
fn rescale(bytes: usize, old: usize, new: usize) -> usize {
    if bytes == usize::MAX {
        return bytes;
    }
    (bytes / old.max(1)).max(1) * new
}

/// Slow start: the window grows by every byte an ACK acknowledges, up to
/// `ssthresh`, as Linux's `tcp_slow_start` does. Not RFC 3465's limit of
/// two segments an ACK: a receiver that acknowledges a dozen segments at a
/// time (a stretch ACK, from a peer whose application is busy, or one that
/// coalesces) would hold slow start to a sixth of its pace.
fn slow_start(cwnd: usize, ssthresh: usize, acked: usize) -> usize {
    cwnd.saturating_add(acked).min(ssthresh.max(cwnd))
}

/// CUBIC (RFC 9438): `W(t) = C·(t − K)³ + W_max` in segments, C = 0.4,
/// β = 0.7, with fast convergence and the Reno-friendly region.
#[derive(Debug, Clone)]
pub struct Cubic {
    mss: usize,
    initial_segments: usize,
    s: CubicState,
    /// The state before the last congestion event, for `undo`.
    prior: Option<CubicState>,
    hystart: HyStart,
}

/// What a congestion event changes in [`Cubic`]: its window and curve.
#[derive(Debug, Clone, Copy)]
struct CubicState {
    cwnd: usize,
    ssthresh: usize,
    /// W_max, segments.
    w_max: f64,
    /// W_last_max (fast convergence), segments.
    w_last_max: f64,
    /// K, seconds.
    k: f64,
    /// Start of the current congestion-avoidance epoch.
    epoch: Option<Instant>,
    /// W_est, segments (Reno-friendly estimate).
    w_est: f64,
    /// cwnd at the start of the epoch (segments), for W_est.
    cwnd_epoch: f64,
}

const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;

impl Cubic {
    /// A controller with an initial window of `initial_segments` × `mss`,
    /// HyStart++ on.
    pub fn new(mss: usize, initial_segments: usize) -> Cubic {
        Cubic {
            mss,
            initial_segments,
            s: CubicState {
                cwnd: mss * initial_segments,
                ssthresh: usize::MAX,
                w_max: 0.0,
                w_last_max: 0.0,
                k: 0.0,
                epoch: None,
                w_est: 0.0,
                cwnd_epoch: 0.0,
            },
            prior: None,
            hystart: HyStart::new(true),
        }
    }

    fn segments(&self) -> f64 {
        self.s.cwnd as f64 / self.mss as f64
    }

    fn reduce(&mut self, in_flight: usize) {
        let w = self.segments();
        // Fast convergence (RFC 9438 §4.7).
        if w < self.s.w_last_max {
            self.s.w_last_max = w;
            self.s.w_max = w * (1.0 + CUBIC_BETA) / 2.0;
        } else {
            self.s.w_last_max = w;
            self.s.w_max = w;
        }
        let flight_seg = in_flight as f64 / self.mss as f64;
        let reduced = (flight_seg.min(w) * CUBIC_BETA).max(2.0);
        self.s.ssthresh = (reduced * self.mss as f64) as usize;
        self.s.epoch = None;
    }
}

impl CongestionControl for Cubic {
    fn window(&self) -> usize {
        self.s.cwnd
    }
    fn ssthresh(&self) -> usize {
        self.s.ssthresh
    }
    fn on_ack(&mut self, now: Instant, ack: &Ack) {
        if self.s.cwnd < self.s.ssthresh {
            let (grow, exit) = self.hystart.on_ack(ack);
            self.s.cwnd = slow_start(self.s.cwnd, self.s.ssthresh, grow);
            if exit {
                self.s.ssthresh = self.s.cwnd;
            }
            return;
        }
        let (acked, rtt) = (ack.acked, ack.srtt);
        let mss = self.mss as f64;
        let epoch = match self.s.epoch {
            Some(e) => e,
            None => {
                // A new congestion-avoidance epoch (RFC 9438 §4.2).
                let cw = self.segments();
                if self.s.w_max <= cw {
                    self.s.k = 0.0;
                    self.s.w_max = cw;
                } else {
                    self.s.k = ((self.s.w_max - cw) / CUBIC_C).cbrt();
                }
                self.s.w_est = cw;
                self.s.cwnd_epoch = cw;
                self.s.epoch = Some(now);
                now
            }
        };
        let rtt = rtt.unwrap_or(Duration::from_millis(100)).as_secs_f64();
        let t = now.saturating_duration_since(epoch).as_secs_f64();
        let cw = self.segments();
        // Reno-friendly estimate (§4.3), α = 3(1−β)/(1+β).
        let alpha = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
        self.s.w_est += alpha * (acked as f64 / mss) / cw;
        let d = t + rtt - self.s.k;
        let target = (CUBIC_C * d * d * d + self.s.w_max).clamp(cw, 1.5 * cw);
        let next = if self.s.w_est > target {
            // Reno-friendly region: grow like Reno would.
            cw + (self.s.w_est - cw).max(0.0).min(acked as f64 / mss / cw)
        } else {
            cw + (target - cw) / cw * (acked as f64 / mss)
        };
        self.s.cwnd = ((next * mss) as usize).max(self.s.cwnd);
    }
    fn on_congestion_event(&mut self, _now: Instant, in_flight: usize) {
        self.hystart.end();
        self.prior = Some(self.s);
        self.reduce(in_flight);
        self.s.cwnd = self.s.ssthresh;
    }
    fn on_recovery_end(&mut self, _now: Instant) {
        self.s.cwnd = self.s.ssthresh.max(self.mss);
    }
    fn undo(&mut self) {
        if let Some(p) = self.prior.take() {
            let cwnd = self.s.cwnd.max(p.cwnd);
            self.s = CubicState { cwnd, ..p };
        }
    }
    fn on_rto(&mut self, _now: Instant, in_flight: usize) {
        self.hystart.end();
        self.prior = None;
        self.reduce(in_flight);
        self.s.cwnd = self.mss;
    }
    fn name(&self) -> &'static str {
        "cubic"
    }
    fn set_mss(&mut self, mss: usize) {
        self.mss = mss;
        self.s.cwnd = mss * self.initial_segments;
    }
    fn rescale_mss(&mut self, mss: usize) {
        // W_max, W_est and the epoch's window are in segments already.
        let old = self.mss;
        self.mss = mss;
        self.s.cwnd = rescale(self.s.cwnd, old, mss);
        self.s.ssthresh = rescale(self.s.ssthresh, old, mss);
        self.prior = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ACK of `acked` bytes with smoothed RTT `srtt` and no sample.
    fn ack(acked: usize, srtt: Option<Duration>) -> Ack {
        Ack {
            acked,
            srtt,
            ..Ack::default()
        }
    }

    #[test]
    fn newreno_slow_start_avoidance_and_loss() {
        let now = Instant::now();
        let mut c = NewReno::new(1000, 10);
        assert_eq!(c.window(), 10_000);
        c.on_ack(now, &ack(1000, None));
        assert_eq!(c.window(), 11_000);
        c.on_congestion_event(now, 20_000);
        assert_eq!((c.window(), c.ssthresh()), (10_000, 10_000));
        // Congestion avoidance: one MSS per window of ACKed bytes.
        for _ in 0..10 {
            c.on_ack(now, &ack(1000, None));
        }
        assert_eq!(c.window(), 11_000);
        c.on_rto(now, 11_000);
        assert_eq!((c.window(), c.ssthresh()), (1000, 5500));
    }

    /// Slow start counts every byte a stretch ACK acknowledges (a peer
    /// that acknowledges 18 segments at once: 18 segments more, not two),
    /// up to `ssthresh`, in both controllers.
    #[test]
    fn slow_start_grows_by_what_a_stretch_ack_acknowledges() {
        let now = Instant::now();
        let mut ccs: [Box<dyn CongestionControl>; 2] = [
            Box::new(NewReno::new(1000, 10)),
            Box::new(Cubic::new(1000, 10)),
        ];
        for c in &mut ccs {
            c.on_ack(now, &ack(18_000, None));
            assert_eq!(c.window(), 28_000, "{}", c.name());
            c.on_congestion_event(now, 100_000);
            c.on_rto(now, 100_000);
            // From one segment up to the ssthresh the loss set.
            let ss = c.ssthresh();
            for _ in 0..20 {
                c.on_ack(now, &ack(18_000, None));
            }
            assert!(c.window() >= ss, "{}", c.name());
            assert!(c.window() <= ss + 18_000, "{}: {}", c.name(), c.window());
        }
    }

    /// `undo` returns to the state before the last congestion event (its
    /// window, threshold and, for CUBIC, the curve), once; after an RTO
    /// there is nothing to undo.
    #[test]
    fn undo_restores_the_state_before_the_congestion_event() {
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(10));
        let mut ccs: [Box<dyn CongestionControl>; 2] = [
            Box::new(NewReno::new(1000, 10)),
            Box::new(Cubic::new(1000, 10)),
        ];
        for c in &mut ccs {
            c.on_ack(t0, &ack(40_000, rtt));
            c.on_congestion_event(t0, 50_000);
            c.on_recovery_end(t0);
            c.on_ack(t0, &ack(20_000, rtt));
            let (w, ss) = (c.window(), c.ssthresh());
            c.on_congestion_event(t0, c.window());
            assert!(c.window() < w, "{}", c.name());
            c.undo();
            assert_eq!((c.ssthresh(), c.window()), (ss, w), "{}", c.name());
            // Once only.
            c.on_congestion_event(t0, c.window());
            c.undo();
            c.undo();
            assert_eq!(c.window(), w, "{}", c.name());
            // Nothing after an RTO.
            c.on_congestion_event(t0, c.window());
            c.on_rto(t0, c.window());
            c.undo();
            assert_eq!(c.window(), 1000, "{}", c.name());
        }
    }

    /// Round `r` of a slow start: ten ACKs of 1,000 bytes, each with an
    /// RTT sample of `rtt_ms`; what each grew the window by.
    fn round(c: &mut NewReno, r: u64, rtt_ms: u64) -> Vec<usize> {
        let now = Instant::now();
        (0..10)
            .map(|i| {
                let before = c.window();
                c.on_ack(
                    now,
                    &Ack {
                        acked: 1000,
                        srtt: Some(Duration::from_millis(20)),
                        rtt_sample: Some(Duration::from_millis(rtt_ms)),
                        una: r * 100_000 + (i + 1) * 1000,
                        sent: (r + 1) * 100_000,
                    },
                );
                c.window() - before
            })
            .collect()
    }

    /// HyStart++ (RFC 9406) step by step: a round whose least RTT is 4 ms
    /// above the last round's enters Conservative Slow Start at its eighth
    /// sample (a quarter of the growth); one whose RTT falls below where
    /// CSS began resumes slow start; five rounds begun in CSS end slow
    /// start. After a loss it is off.
    #[test]
    fn hystart_plus_plus_rounds() {
        let full = vec![1000; 10];
        let mut css = vec![1000; 7];
        css.extend([250; 3]);
        let mut c = NewReno::new(1000, 10);
        assert_eq!(round(&mut c, 0, 20), full);
        assert_eq!(round(&mut c, 1, 20), full);
        // 3 ms more is below the threshold (4 ms: 20 / 8 is less).
        assert_eq!(round(&mut c, 2, 23), full);
        assert!(!c.hystart.in_css());
        assert_eq!(round(&mut c, 3, 27), css);
        assert!(c.hystart.in_css());
        // Jitter: at the eighth sample the RTT is below CSS's baseline.
        assert_eq!(round(&mut c, 4, 26)[..7], [250; 7]);
        assert!(!c.hystart.in_css());
        assert_eq!(round(&mut c, 5, 26), full);
        assert_eq!(round(&mut c, 6, 31), css);
        for r in 7..11 {
            assert_eq!(round(&mut c, r, 31), vec![250; 10], "round {r}");
            assert_eq!(c.ssthresh(), usize::MAX);
        }
        // The fifth round begun in CSS: congestion avoidance from here.
        let w = c.window();
        assert_eq!(round(&mut c, 11, 31)[0], 250);
        assert_eq!(c.ssthresh(), w + 250);
        assert!(!c.hystart.in_css());
        assert!(round(&mut c, 12, 31).iter().sum::<usize>() < 1000);

        // Off after a loss: the slow start after an RTO is the plain one.
        let mut c = NewReno::new(1000, 10);
        round(&mut c, 0, 20);
        c.on_rto(Instant::now(), 1_000_000);
        for r in 1..4 {
            assert_eq!(round(&mut c, r, 20 + 10 * r), full);
        }
        // And where it is turned off.
        let mut c = CongestionAlgorithm::NewReno.build(1000, 10, false);
        for (r, rtt) in [(0, 20), (1, 20), (2, 40), (3, 80)] {
            let before = c.window();
            for i in 0..10 {
                c.on_ack(
                    Instant::now(),
                    &Ack {
                        acked: 1000,
                        srtt: None,
                        rtt_sample: Some(Duration::from_millis(rtt)),
                        una: r * 100_000 + (i + 1) * 1000,
                        sent: (r + 1) * 100_000,
                    },
                );
            }
            assert_eq!(c.window() - before, 10_000);
        }
    }

    #[test]
    fn cubic_reduces_by_beta_and_regrows_to_wmax() {
        let t0 = Instant::now();
        let mut c = Cubic::new(1000, 10);
        // Slow start to 100 segments.
        while c.window() < 100_000 {
            c.on_ack(t0, &ack(2000, None));
        }
        c.on_congestion_event(t0, c.window());
        let after = c.window();
        assert!((69_000..=71_500).contains(&after), "β = 0.7: {after}");
        // Grow for a few seconds at RTT 10 ms with one window per RTT.
        let rtt = Duration::from_millis(10);
        let mut now = t0;
        for _ in 0..400 {
            now += rtt;
            let w = c.window();
            c.on_ack(now, &ack(w, Some(rtt)));
        }
        assert!(c.window() > 100_000, "regrew beyond W_max: {}", c.window());
        // A second loss below the previous W_max triggers fast convergence.
        let w = c.window();
        c.on_rto(now, w);
        assert_eq!(c.window(), 1000);
        assert!(c.ssthresh() >= 2000);
    }
}
