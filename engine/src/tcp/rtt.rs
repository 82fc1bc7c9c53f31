//! RTT estimation and the retransmission timeout per RFC 6298.
//!
//! Feed samples with [`RttEstimator::sample`] (only from segments that were not
//! retransmitted — Karn's rule — or from timestamp echoes, which are
//! unambiguous); read [`RttEstimator::rto`]. Backoff is the caller's: it
//! doubles the RTO per expiry with [`RttEstimator::backoff`] and resets it on
//! new acknowledgements with [`RttEstimator::reset_backoff`].

use std::time::Duration;

/// SRTT / RTTVAR / RTO state.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    min_rtt: Option<Duration>,
    latest: Option<Duration>,
    initial: Duration,
    min: Duration,
    max: Duration,
    backoff_shift: u32,
}

impl RttEstimator {
    /// An estimator with the RTO bounds and the RTO before the first sample.
    pub fn new(initial: Duration, min: Duration, max: Duration) -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            min_rtt: None,
            latest: None,
            initial,
            min,
            max,
            backoff_shift: 0,
        }
    }

    /// Adds one measurement (RFC 6298 §2.2, §2.3 with α = 1/8, β = 1/4).
    pub fn sample(&mut self, r: Duration) {
        self.latest = Some(r);
        self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + r) / 8);
            }
        }
    }

    /// RTTVAR (RFC 6298), once sampled.
    pub fn rttvar(&self) -> Option<Duration> {
        self.srtt.map(|_| self.rttvar)
    }

    /// The smoothed RTT, if sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The smallest sample seen.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The RTO without backoff: `SRTT + max(G, 4·RTTVAR)` within the bounds.
    pub fn base_rto(&self) -> Duration {
        let r = match self.srtt {
            None => self.initial,
            // Clock granularity G: 1 ms (timestamps tick in milliseconds).
            Some(s) => s + (self.rttvar * 4).max(Duration::from_millis(1)),
        };
        r.clamp(self.min, self.max)
    }

    /// The current RTO, backoff included, at most the maximum.
    pub fn rto(&self) -> Duration {
        let b = self.base_rto();
        b.checked_mul(1u32 << self.backoff_shift.min(16))
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
