//! Interval reports and RTT statistics for the engine's iperf3 client and
//! server: the counts workers send (bytes, retransmits, smoothed RTT) are
//! summed per stream over each reporting interval, as iperf3 prints and
//! writes them (`intervals[].streams[]` and `intervals[].sum` in `-J`), and
//! the RTT samples are summarised per stream like iperf3's
//! `min_rtt` / `max_rtt` / `mean_rtt` (one sample per count, that is every
//! few milliseconds while data moves, where iperf3 reads `tcp_info` once per
//! interval).

use std::time::{Duration, Instant};

use super::{Role, StreamId, StreamInfo};

/// One stream over one interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamInterval {
    /// iperf3's stream id.
    pub id: StreamId,
    /// This side's direction.
    pub role: Role,
    /// Bytes moved (sent or received, as `role` says).
    pub bytes: u64,
    /// Retransmitted segments (sending streams).
    pub retransmits: u64,
    /// Smoothed RTT at the last count of the interval.
    pub rtt: Option<Duration>,
}

/// Every stream over one reporting interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    /// Seconds since the start of the test, at the start of the interval.
    pub start: f64,
    /// At its end.
    pub end: f64,
    /// Within the omit period (`-O`): shown, not counted in the results.
    pub omitted: bool,
    /// Per stream, in stream order.
    pub streams: Vec<StreamInterval>,
}

impl Interval {
    /// Length in seconds.
    pub fn seconds(&self) -> f64 {
        self.end - self.start
    }

    /// Bytes moved in `role` summed over the streams.
    pub fn bytes(&self, role: Role) -> u64 {
        self.streams
            .iter()
            .filter(|s| s.role == role)
            .map(|s| s.bytes)
            .sum()
    }

    /// Bytes sent.
    pub fn sent(&self) -> u64 {
        self.bytes(Role::Send)
    }

    /// Bytes received.
    pub fn received(&self) -> u64 {
        self.bytes(Role::Receive)
    }

    /// Retransmits summed over the streams.
    pub fn retransmits(&self) -> u64 {
        self.streams.iter().map(|s| s.retransmits).sum()
    }
}

/// RTT samples of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RttSummary {
    /// Smallest sample.
    pub min: Duration,
    /// Largest sample.
    pub max: Duration,
    sum: Duration,
    samples: u64,
}

impl RttSummary {
    fn add(&mut self, rtt: Duration) {
        if self.samples == 0 || rtt < self.min {
            self.min = rtt;
        }
        self.max = self.max.max(rtt);
        self.sum += rtt;
        self.samples += 1;
    }

    /// Mean of the samples, None without any.
    pub fn mean(&self) -> Option<Duration> {
        u32::try_from(self.samples)
            .ok()
            .filter(|&n| n > 0)
            .map(|n| self.sum / n)
    }

    /// Number of samples.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

/// Sums counts per stream into intervals; see the module doc.
#[derive(Debug)]
pub(crate) struct Meter {
    period: Option<Duration>,
    omit: Duration,
    started: Option<Instant>,
    begin: Option<Instant>,
    current: Vec<StreamInterval>,
    rtt: Vec<RttSummary>,
}

impl Meter {
    /// A meter reporting every `period` (None: no interval reports, RTT
    /// statistics only).
    pub(crate) fn new(period: Option<Duration>) -> Meter {
        Meter {
            period: period.filter(|p| !p.is_zero()),
            omit: Duration::ZERO,
            started: None,
            begin: None,
            current: Vec::new(),
            rtt: Vec::new(),
        }
    }

    /// The test starts now with these streams; the first `omit` of it is
    /// the omit period.
    pub(crate) fn start(&mut self, now: Instant, streams: &[StreamInfo], omit: Duration) {
        self.omit = omit;
        self.started = Some(now);
        self.begin = Some(now);
        self.current = streams
            .iter()
            .map(|s| StreamInterval {
                id: s.id,
                role: s.role,
                bytes: 0,
                retransmits: 0,
                rtt: None,
            })
            .collect();
        self.rtt = vec![RttSummary::default(); streams.len()];
    }

    /// A count for stream `id`; unknown ids are ignored.
    pub(crate) fn count(
        &mut self,
        id: StreamId,
        bytes: u64,
        retransmits: u64,
        rtt: Option<Duration>,
    ) {
        let Some(i) = self.current.iter().position(|s| s.id == id) else {
            return;
        };
        let s = &mut self.current[i];
        s.bytes += bytes;
        s.retransmits += retransmits;
        if let Some(r) = rtt {
            s.rtt = Some(r);
            // Only a stream that moved data samples its RTT (a stopped or
            // idle stream keeps reporting the same estimate).
            if bytes > 0 {
                self.rtt[i].add(r);
            }
        }
    }

    /// The current interval is over.
    pub(crate) fn due(&self, now: Instant) -> bool {
        match (self.period, self.begin) {
            (Some(p), Some(b)) => now >= b + p,
            _ => false,
        }
    }

    /// Closes the current interval at `now` and returns it (None when not
    /// started, not reporting, or empty in time).
    pub(crate) fn flush(&mut self, now: Instant) -> Option<Interval> {
        self.period?;
        let (start, begin) = (self.started?, self.begin?);
        if now <= begin {
            return None;
        }
        let streams = self.current.clone();
        for s in &mut self.current {
            s.bytes = 0;
            s.retransmits = 0;
        }
        self.begin = Some(now);
        Some(Interval {
            start: begin.saturating_duration_since(start).as_secs_f64(),
            end: now.saturating_duration_since(start).as_secs_f64(),
            omitted: now.saturating_duration_since(start) <= self.omit,
            streams,
        })
    }

    /// Stops reporting (the test ended); RTT statistics stay.
    pub(crate) fn stop(&mut self) {
        self.begin = None;
    }

    /// RTT statistics of stream `id`.
    pub(crate) fn rtt(&self, id: StreamId) -> Option<RttSummary> {
        let i = self.current.iter().position(|s| s.id == id)?;
        Some(self.rtt[i]).filter(|r| r.samples > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams() -> Vec<StreamInfo> {
        vec![
            StreamInfo {
                id: StreamId(1),
                role: Role::Send,
            },
            StreamInfo {
                id: StreamId(3),
                role: Role::Receive,
            },
        ]
    }

    #[test]
    fn counts_sum_per_stream_per_interval() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let mut m = Meter::new(Some(Duration::from_secs(1)));
        assert!(m.flush(ms(10)).is_none(), "not started");
        m.start(t, &streams(), Duration::from_millis(1500));
        m.count(StreamId(1), 100, 2, Some(Duration::from_micros(50)));
        m.count(StreamId(3), 40, 0, None);
        m.count(StreamId(9), 1000, 0, None);
        assert!(!m.due(ms(999)));
        assert!(m.due(ms(1000)));
        let a = m.flush(ms(1000)).unwrap();
        assert_eq!((a.start, a.end, a.omitted), (0.0, 1.0, true));
        assert_eq!((a.sent(), a.received(), a.retransmits()), (100, 40, 2));
        assert_eq!(a.streams[0].rtt, Some(Duration::from_micros(50)));
        m.count(StreamId(1), 7, 0, Some(Duration::from_micros(150)));
        let b = m.flush(ms(2000)).unwrap();
        assert_eq!((b.sent(), b.received(), b.omitted), (7, 0, false));
        assert_eq!(b.seconds(), 1.0);
        let r = m.rtt(StreamId(1)).unwrap();
        assert_eq!(
            (r.min, r.max, r.mean(), r.samples()),
            (
                Duration::from_micros(50),
                Duration::from_micros(150),
                Some(Duration::from_micros(100)),
                2
            )
        );
        assert!(m.rtt(StreamId(3)).is_none(), "no samples");
        m.stop();
        assert!(!m.due(ms(5000)) && m.flush(ms(5000)).is_none());
    }

    #[test]
    fn no_period_no_intervals() {
        let t = Instant::now();
        let mut m = Meter::new(None);
        m.start(t, &streams(), Duration::ZERO);
        m.count(StreamId(1), 5, 0, Some(Duration::from_micros(9)));
        assert!(!m.due(t + Duration::from_secs(10)));
        assert!(m.flush(t + Duration::from_secs(10)).is_none());
        assert_eq!(
            m.rtt(StreamId(1)).unwrap().mean(),
            Some(Duration::from_micros(9))
        );
    }
}
