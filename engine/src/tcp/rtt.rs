//! RTT estimation and the retransmission timeout per RFC 6298.
//!
//! Feed samples with [`RttEstimator::sample`] (only from segments that were not
//! retransmitted — Karn's rule — or from timestamp echoes, which are
//! unambiguous); read [`RttEstimator::rto`]. Backoff is the caller's: it
//! doubles the RTO per expiry with [`RttEstimator::backoff`] and resets it on
//! new acknowledgements with [`RttEstimator::reset_backoff`].

use std::time::Duration;

/// Not sampled yet (in `srtt` and `min_rtt`).
const NONE: u64 = u64::MAX;

/// `d` in nanoseconds, saturating short of `u64::MAX` (which the
/// estimator and the connection's timers keep for "none").
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos())
        .unwrap_or(NONE - 1)
        .min(NONE - 1)
}

/// SRTT / RTTVAR / RTO state. Kept in nanoseconds (`u64`, 8 bytes, where
/// an `Option<Duration>` takes 16): the estimator a connection consults on
/// every acknowledgement is one cache line. The arithmetic is
/// `Duration`'s, which is exact in nanoseconds.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: u64,
    rttvar: u64,
    min_rtt: u64,
    initial: u64,
    min: u64,
    max: u64,
    backoff_shift: u32,
}

impl RttEstimator {
    /// An estimator with the RTO bounds and the RTO before the first sample.
    pub fn new(initial: Duration, min: Duration, max: Duration) -> RttEstimator {
        RttEstimator {
            srtt: NONE,
            rttvar: 0,
            min_rtt: NONE,
            initial: nanos(initial),
            min: nanos(min),
            max: nanos(max),
            backoff_shift: 0,
        }
    }

    /// Adds one measurement (RFC 6298 §2.2, §2.3 with α = 1/8, β = 1/4).
    pub fn sample(&mut self, r: Duration) {
        let r = nanos(r);
        self.min_rtt = self.min_rtt.min(r);
        if self.srtt == NONE {
            self.srtt = r;
            self.rttvar = r / 2;
        } else {
            let diff = self.srtt.abs_diff(r);
            self.rttvar = self.rttvar.saturating_mul(3).saturating_add(diff) / 4;
            self.srtt = self.srtt.saturating_mul(7).saturating_add(r) / 8;
        }
    }

    /// RTTVAR (RFC 6298), once sampled.
    pub fn rttvar(&self) -> Option<Duration> {
        (self.srtt != NONE).then(|| Duration::from_nanos(self.rttvar))
    }

    /// The smoothed RTT, if sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt_ns().map(Duration::from_nanos)
    }

    /// [`Self::srtt`] in nanoseconds.
    pub(crate) fn srtt_ns(&self) -> Option<u64> {
        (self.srtt != NONE).then_some(self.srtt)
    }

    /// The smallest sample seen.
    pub fn min_rtt(&self) -> Option<Duration> {
        (self.min_rtt != NONE).then(|| Duration::from_nanos(self.min_rtt))
    }

    /// The RTO without backoff: `SRTT + max(G, 4·RTTVAR)` within the bounds.
    pub fn base_rto(&self) -> Duration {
        Duration::from_nanos(self.base_rto_ns())
    }

    fn base_rto_ns(&self) -> u64 {
        let r = if self.srtt == NONE {
            self.initial
        } else {
            // Clock granularity G: 1 ms (timestamps tick in milliseconds).
            self.srtt
                .saturating_add(self.rttvar.saturating_mul(4).max(1_000_000))
        };
        r.clamp(self.min, self.max)
    }

    /// The current RTO, backoff included, at most the maximum.
    pub fn rto(&self) -> Duration {
        Duration::from_nanos(self.rto_ns())
    }

    /// [`Self::rto`] in nanoseconds.
    pub(crate) fn rto_ns(&self) -> u64 {
        self.base_rto_ns()
            .checked_mul(1u64 << self.backoff_shift.min(16))
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// Doubles the RTO (RFC 6298 §5.5).
    pub fn backoff(&mut self) {
        self.backoff_shift = (self.backoff_shift + 1).min(16);
    }

    /// Number of doublings in effect.
    pub fn backoff_count(&self) -> u32 {
        self.backoff_shift
    }

    /// Undoes the backoff (a new ACK arrived).
    pub fn reset_backoff(&mut self) {
        self.backoff_shift = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn rfc6298_formulas_and_bounds() {
        let mut e = RttEstimator::new(ms(1000), ms(200), ms(60_000));
        assert_eq!(e.rto(), ms(1000));
        assert_eq!(e.rttvar(), None, "no sample yet");
        e.sample(ms(100));
        // SRTT = 100, RTTVAR = 50 → RTO = 300.
        assert_eq!(e.srtt(), Some(ms(100)));
        assert_eq!(e.rttvar(), Some(ms(50)));
        assert_eq!(e.rto(), ms(300));
        e.sample(ms(100));
        // RTTVAR = 3/4·50 = 37.5 → 100 + 150 = 250.
        assert_eq!(e.rttvar(), Some(Duration::from_micros(37_500)));
        assert_eq!(e.rto(), Duration::from_micros(250_000));
        for _ in 0..50 {
            e.sample(ms(10));
        }
        assert_eq!(e.rto(), ms(200), "clamped to the minimum");
        e.backoff();
        assert_eq!(e.rto(), ms(400));
        e.backoff();
        assert_eq!(e.rto(), ms(800));
        for _ in 0..20 {
            e.backoff();
        }
        assert_eq!(e.rto(), ms(60_000), "clamped to the maximum");
        e.reset_backoff();
        assert_eq!(e.rto(), ms(200));
    }
}
