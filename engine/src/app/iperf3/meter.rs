//! Interval reports and RTT statistics for the engine's iperf3 client and
//! server: the counts workers send (bytes, retransmits, smoothed RTT) are
//! summed per stream over each reporting interval, as iperf3 prints and
//! writes them (`intervals[].streams[]` and `intervals[].sum` in `-J`), and
//! the RTT samples are summarised per stream like iperf3's
//! `min_rtt` / `max_rtt` / `mean_rtt` (one sample per count, that is every
//! few milliseconds while data moves, where iperf3 reads `tcp_info` once per
//! interval).
//!
//! The last interval ends when the test ends, and holds every count that
//! arrives until the caller says the counts are in (what was in flight, or
//! written but not yet acknowledged, at the end). A last interval shorter
//! than a tenth of the period is folded into the one before it (iperf3
//! drops such a tail when it moved nothing): so that this can be done, an
//! interval is handed out a tenth of a period after it closed.

use std::time::{Duration, Instant};

use super::{Role, StreamId, StreamInfo};
use crate::worker::TcpSample;

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
    /// RTT variation at the last count of the interval.
    pub rttvar: Option<Duration>,
    /// Congestion window at the last count of the interval, bytes.
    pub snd_cwnd: u64,
    /// The peer's receive window at the last count, bytes.
    pub snd_wnd: u64,
    /// The connection's MSS at the last count (0: none yet).
    pub mss: u32,
    /// The largest IP packet its segments made at the last count (the
    /// path MTU it kept to; 0: none yet).
    pub pmtu: u32,
}

/// A stream's TCP over the whole test, as iperf3's `end.streams[].sender`
/// reports it from `tcp_info`: the largest congestion and send windows
/// seen, and the MSS and congestion control of the connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamTcp {
    /// Largest congestion window seen, bytes.
    pub max_snd_cwnd: u64,
    /// Largest peer window seen, bytes.
    pub max_snd_wnd: u64,
    /// MSS the connection sent with (0: never counted).
    pub mss: u32,
    /// Its congestion control ("" before the first count).
    pub congestion: &'static str,
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
    /// When the test ended ([`Meter::end_at`]).
    end: Option<Instant>,
    current: Vec<StreamInterval>,
    /// The last closed interval, not handed out yet, and when it closed.
    held: Option<(Interval, Instant)>,
    /// A closed interval to hand out at the next poll (the one held when
    /// the omitted seconds ended).
    ready: Option<Interval>,
    rtt: Vec<RttSummary>,
    tcp: Vec<StreamTcp>,
}

impl Meter {
    /// A meter reporting every `period` (zero: one interval, the whole
    /// test, at its end, as iperf3's `-i 0` prints one line; None: no
    /// interval reports, RTT statistics only).
    pub(crate) fn new(period: Option<Duration>) -> Meter {
        Meter {
            period,
            omit: Duration::ZERO,
            started: None,
            begin: None,
            end: None,
            current: Vec::new(),
            held: None,
            ready: None,
            rtt: Vec::new(),
            tcp: Vec::new(),
        }
    }

    /// The test starts now with these streams; the first `omit` of it is
    /// the omit period.
    pub(crate) fn start(&mut self, now: Instant, streams: &[StreamInfo], omit: Duration) {
        self.omit = omit;
        self.started = Some(now);
        self.begin = Some(now);
        self.end = None;
        self.held = None;
        self.ready = None;
        self.current = streams
            .iter()
            .map(|s| StreamInterval {
                id: s.id,
                role: s.role,
                bytes: 0,
                retransmits: 0,
                rtt: None,
                rttvar: None,
                snd_cwnd: 0,
                snd_wnd: 0,
                mss: 0,
                pmtu: 0,
            })
            .collect();
        self.rtt = vec![RttSummary::default(); streams.len()];
        self.tcp = vec![StreamTcp::default(); streams.len()];
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

    /// The TCP state of stream `id` at a count (with [`Meter::count`]);
    /// unknown ids are ignored.
    pub(crate) fn sample(&mut self, id: StreamId, t: &TcpSample) {
        let Some(i) = self.current.iter().position(|s| s.id == id) else {
            return;
        };
        let s = &mut self.current[i];
        s.snd_cwnd = t.cwnd;
        s.snd_wnd = t.snd_wnd;
        s.rttvar = t.rttvar.or(s.rttvar);
        s.mss = t.mss;
        s.pmtu = t.pmtu;
        let m = &mut self.tcp[i];
        m.max_snd_cwnd = m.max_snd_cwnd.max(t.cwnd);
        m.max_snd_wnd = m.max_snd_wnd.max(t.snd_wnd);
        m.mss = t.mss;
        m.congestion = t.congestion;
    }

    /// The TCP of stream `id` over the test so far.
    pub(crate) fn tcp(&self, id: StreamId) -> Option<StreamTcp> {
        let i = self.current.iter().position(|s| s.id == id)?;
        self.tcp.get(i).copied()
    }

    /// The congestion control of the streams with `role` (the first that
    /// counted), None before any count.
    pub(crate) fn congestion(&self, role: Role) -> Option<&'static str> {
        self.current
            .iter()
            .zip(&self.tcp)
            .find(|(s, t)| s.role == role && !t.congestion.is_empty())
            .map(|(_, t)| t.congestion)
    }

    /// An interval to print now, if any: call while the test runs, until it
    /// returns None. Closes the current interval once its period is over,
    /// and hands it out a tenth of a period later.
    pub(crate) fn poll(&mut self, now: Instant) -> Option<Interval> {
        let period = self.period.filter(|p| !p.is_zero())?;
        if self.end.is_some() {
            return None;
        }
        if let Some(iv) = self.ready.take() {
            return Some(iv);
        }
        let begin = self.begin?;
        if now >= begin + period {
            let iv = self.close(now);
            if let Some((prev, _)) = self.held.replace((iv, now)) {
                return Some(prev);
            }
        }
        match &self.held {
            Some((_, at)) if now >= *at + period / 10 => self.held.take().map(|(iv, _)| iv),
            _ => None,
        }
    }

    /// `-O`'s omitted seconds ended at `at` (when the session began to
    /// count): the interval running closes there, omitted, and those after
    /// it count their times from there, as iperf3 restarts its clock (its
    /// intervals after the omitted ones begin at 0 again). One shorter
    /// than a tenth of the period is folded into the omitted one before.
    pub(crate) fn end_omit(&mut self, at: Instant) {
        if self.omit.is_zero() || self.started.is_none() || self.end.is_some() {
            return;
        }
        if let (Some(period), Some(begin)) = (self.period, self.begin) {
            let mut tail = self.close(at);
            tail.omitted = true;
            let short = at.saturating_duration_since(begin) < period / 10;
            match self.held.take() {
                Some((mut last, t)) if short => {
                    fold(&mut last, &tail);
                    self.held = Some((last, t));
                }
                held => {
                    self.ready = held.map(|(iv, _)| iv);
                    self.held = Some((tail, at));
                }
            }
        }
        self.omit = Duration::ZERO;
        self.started = Some(at);
        self.begin = Some(at);
    }

    /// The test ended at `at`: no interval closes or is handed out until
    /// [`Meter::finish`]; counts still arrive into the last one.
    pub(crate) fn end_at(&mut self, at: Instant) {
        if self.started.is_some() && self.end.is_none() {
            self.end = Some(at);
        }
    }

    /// The last counts are in: the intervals still to print (the last one
    /// ends when the test ended; folded into the one before if shorter than
    /// a tenth of the period, dropped if that short and alone and empty).
    /// Reporting stops; RTT statistics stay.
    pub(crate) fn finish(&mut self, now: Instant) -> Vec<Interval> {
        let mut out = Vec::new();
        let (Some(period), Some(begin)) = (self.period, self.begin) else {
            self.begin = None;
            return out;
        };
        out.extend(self.ready.take());
        let end = self.end.unwrap_or(now).max(begin);
        let tail = self.close(end);
        let short = end.saturating_duration_since(begin) < period / 10;
        match self.held.take() {
            Some((mut last, _)) if short => {
                fold(&mut last, &tail);
                out.push(last);
            }
            held => {
                out.extend(held.map(|(iv, _)| iv));
                let moved = tail.streams.iter().any(|s| s.bytes > 0);
                if !short || moved {
                    out.push(tail);
                }
            }
        }
        self.begin = None;
        out
    }

    /// The current interval, closed at `at`; the next begins there.
    fn close(&mut self, at: Instant) -> Interval {
        let start = self.started.unwrap_or(at);
        let begin = self.begin.unwrap_or(at);
        let streams = self.current.clone();
        for s in &mut self.current {
            s.bytes = 0;
            s.retransmits = 0;
        }
        self.begin = Some(at);
        Interval {
            start: begin.saturating_duration_since(start).as_secs_f64(),
            end: at.saturating_duration_since(start).as_secs_f64(),
            omitted: at.saturating_duration_since(start) <= self.omit,
            streams,
        }
    }

    /// RTT statistics of stream `id`.
    pub(crate) fn rtt(&self, id: StreamId) -> Option<RttSummary> {
        let i = self.current.iter().position(|s| s.id == id)?;
        Some(self.rtt[i]).filter(|r| r.samples > 0)
    }
}

/// `tail`, too short to stand alone, added to `last`, the interval before
/// it: `last` ends where `tail` did, with both intervals' counts and the
/// later TCP state.
fn fold(last: &mut Interval, tail: &Interval) {
    last.end = tail.end;
    for (a, b) in last.streams.iter_mut().zip(&tail.streams) {
        a.bytes += b.bytes;
        a.retransmits += b.retransmits;
        a.rtt = b.rtt.or(a.rtt);
        a.rttvar = b.rttvar.or(a.rttvar);
        if b.snd_cwnd > 0 {
            a.snd_cwnd = b.snd_cwnd;
            a.snd_wnd = b.snd_wnd;
        }
        if b.mss > 0 {
            (a.mss, a.pmtu) = (b.mss, b.pmtu);
        }
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

    /// At the end of `-O`'s omitted seconds the running interval closes,
    /// omitted, and the next ones count from there (iperf3's restart at 0).
    #[test]
    fn the_omitted_seconds_end_an_interval_and_restart_the_clock() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let mut m = Meter::new(Some(Duration::from_secs(1)));
        m.start(t, &streams(), Duration::from_millis(1500));
        m.count(StreamId(1), 100, 0, None);
        assert!(m.poll(ms(1000)).is_none());
        m.count(StreamId(1), 50, 0, None);
        // The session stopped omitting at 1.5 s.
        m.end_omit(ms(1500));
        m.end_omit(ms(1600)); // once only
        m.count(StreamId(1), 7, 0, None);
        let a = m.poll(ms(1500)).unwrap();
        assert_eq!((a.start, a.end, a.omitted, a.sent()), (0.0, 1.0, true, 100));
        let b = m.poll(ms(1650)).unwrap();
        assert_eq!((b.start, b.end, b.omitted, b.sent()), (1.0, 1.5, true, 50));
        assert!(m.poll(ms(2400)).is_none());
        m.end_at(ms(2500));
        let rest = m.finish(ms(2500));
        assert_eq!(rest.len(), 1);
        let c = &rest[0];
        assert_eq!((c.start, c.end, c.omitted, c.sent()), (0.0, 1.0, false, 7));
    }

    #[test]
    fn counts_sum_per_stream_per_interval() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let mut m = Meter::new(Some(Duration::from_secs(1)));
        assert!(m.poll(ms(10)).is_none(), "not started");
        m.start(t, &streams(), Duration::from_millis(1500));
        m.count(StreamId(1), 100, 2, Some(Duration::from_micros(50)));
        m.count(StreamId(3), 40, 0, None);
        m.count(StreamId(9), 1000, 0, None);
        assert!(m.poll(ms(999)).is_none());
        // Closed at 1 s, handed out a tenth of a period later.
        assert!(m.poll(ms(1000)).is_none());
        m.count(StreamId(1), 7, 0, Some(Duration::from_micros(150)));
        assert!(m.poll(ms(1099)).is_none());
        let a = m.poll(ms(1100)).unwrap();
        assert!(m.poll(ms(1100)).is_none());
        assert_eq!((a.start, a.end, a.omitted), (0.0, 1.0, true));
        assert_eq!((a.sent(), a.received(), a.retransmits()), (100, 40, 2));
        assert_eq!(a.streams[0].rtt, Some(Duration::from_micros(50)));
        assert!(m.poll(ms(2000)).is_none());
        let b = m.poll(ms(2100)).unwrap();
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
        // The end: a long enough tail is its own interval, of its true length.
        m.count(StreamId(1), 5, 0, None);
        m.end_at(ms(2500));
        assert!(m.poll(ms(3000)).is_none(), "ended");
        m.count(StreamId(1), 6, 0, None); // arrived after the end
        let tail = m.finish(ms(2600));
        assert_eq!(tail.len(), 1);
        assert_eq!((tail[0].start, tail[0].end, tail[0].sent()), (2.0, 2.5, 11));
        assert!(m.poll(ms(5000)).is_none() && m.finish(ms(5000)).is_empty());
    }

    /// What the last moments count (bytes in flight or unacknowledged at
    /// the end, counted in a burst) never makes an interval of a few
    /// milliseconds with an absurd rate: a tail under a tenth of the period
    /// joins the interval before it.
    #[test]
    fn a_short_last_interval_is_folded_into_the_one_before() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let mut m = Meter::new(Some(Duration::from_secs(1)));
        m.start(t, &streams(), Duration::ZERO);
        m.count(StreamId(1), 1000, 1, None);
        assert!(m.poll(ms(1000)).is_none());
        m.count(StreamId(1), 800, 2, Some(Duration::from_micros(70)));
        m.end_at(ms(1004));
        // The drain takes long: the held interval is not handed out alone.
        assert!(m.poll(ms(1500)).is_none());
        m.count(StreamId(3), 300, 0, None);
        let ivs = m.finish(ms(1900));
        assert_eq!(ivs.len(), 1, "{ivs:?}");
        let iv = &ivs[0];
        assert_eq!((iv.start, iv.end), (0.0, 1.004));
        assert_eq!((iv.sent(), iv.received(), iv.retransmits()), (1800, 300, 3));
        assert_eq!(iv.streams[0].rtt, Some(Duration::from_micros(70)));

        // A whole test shorter than that: printed with its true length; an
        // empty one is not printed.
        let mut m = Meter::new(Some(Duration::from_secs(1)));
        m.start(t, &streams(), Duration::ZERO);
        m.count(StreamId(1), 9, 0, None);
        m.end_at(ms(50));
        let ivs = m.finish(ms(60));
        assert_eq!((ivs.len(), ivs[0].end, ivs[0].sent()), (1, 0.05, 9));
        let mut m = Meter::new(Some(Duration::from_secs(1)));
        m.start(t, &streams(), Duration::ZERO);
        assert!(m.finish(ms(50)).is_empty());
    }

    /// The TCP state of a count shows in the interval it falls in (the
    /// last one of the interval wins), and the stream keeps the largest
    /// windows over the test, its MSS and its congestion control.
    #[test]
    fn tcp_samples_per_interval_and_maxima_per_stream() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let sample = |cwnd, wnd, var| TcpSample {
            cwnd,
            snd_wnd: wnd,
            rttvar: Some(Duration::from_micros(var)),
            mss: 1448,
            pmtu: 1500,
            congestion: "cubic",
        };
        let mut m = Meter::new(Some(Duration::from_secs(1)));
        m.start(t, &streams(), Duration::ZERO);
        assert_eq!(m.congestion(Role::Send), None);
        m.count(StreamId(1), 10, 0, Some(Duration::from_micros(40)));
        m.sample(StreamId(1), &sample(90_000, 500_000, 7));
        m.sample(StreamId(1), &sample(60_000, 700_000, 9));
        m.sample(StreamId(9), &sample(1, 1, 1));
        assert!(m.poll(ms(1000)).is_none());
        m.sample(StreamId(1), &sample(30_000, 200_000, 3));
        let a = m.poll(ms(1100)).unwrap();
        let s = &a.streams[0];
        assert_eq!(
            (s.snd_cwnd, s.snd_wnd, s.rttvar),
            (60_000, 700_000, Some(Duration::from_micros(9)))
        );
        assert_eq!(a.streams[1].snd_cwnd, 0, "a receiving stream has none");
        m.end_at(ms(1500));
        let b = m.finish(ms(1600));
        assert_eq!(b[0].streams[0].snd_cwnd, 30_000);
        let tcp = m.tcp(StreamId(1)).unwrap();
        assert_eq!(
            (tcp.max_snd_cwnd, tcp.max_snd_wnd, tcp.mss, tcp.congestion),
            (90_000, 700_000, 1448, "cubic")
        );
        assert_eq!(m.congestion(Role::Send), Some("cubic"));
        assert_eq!(m.congestion(Role::Receive), None);
    }

    /// A zero period (`-i 0`): nothing while the test runs, then one
    /// interval, the whole test.
    #[test]
    fn a_zero_period_gives_the_whole_test_as_one_interval() {
        let t = Instant::now();
        let mut m = Meter::new(Some(Duration::ZERO));
        m.start(t, &streams(), Duration::ZERO);
        m.count(StreamId(1), 5, 0, None);
        assert!(m.poll(t + Duration::from_secs(2)).is_none());
        m.count(StreamId(1), 7, 1, None);
        m.end_at(t + Duration::from_millis(2500));
        let ivs = m.finish(t + Duration::from_secs(3));
        assert_eq!(ivs.len(), 1, "{ivs:?}");
        assert_eq!((ivs[0].start, ivs[0].end), (0.0, 2.5));
        assert_eq!(ivs[0].streams[0].bytes, 12);
        assert_eq!(ivs[0].streams[0].retransmits, 1);
    }

    #[test]
    fn no_period_no_intervals() {
        let t = Instant::now();
        let mut m = Meter::new(None);
        m.start(t, &streams(), Duration::ZERO);
        m.count(StreamId(1), 5, 0, Some(Duration::from_micros(9)));
        assert!(m.poll(t + Duration::from_secs(10)).is_none());
        assert!(m.finish(t + Duration::from_secs(10)).is_empty());
        assert_eq!(
            m.rtt(StreamId(1)).unwrap().mean(),
            Some(Duration::from_micros(9))
        );
    }
}
