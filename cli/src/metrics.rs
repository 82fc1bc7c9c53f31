//! `xtcp serve --metrics ADDR:PORT`: Prometheus metrics at `GET /metrics`,
//! served over the kernel's TCP (a plain listening socket, not xtcp's
//! engine) by a thread of its own that never touches the data path.
//!
//! Who does what:
//!
//! - the control thread (the engine's progress callback, every loop turn)
//!   calls [`Metrics::observe`], which about every 100 ms copies the
//!   workers' latest counters and the steering program's into a snapshot
//!   (no allocation once the first copy is made); serve's test callback
//!   calls [`Metrics::test`] once per test;
//! - the HTTP thread (HTTP/1.1 by `hyper` on a current-thread `tokio`
//!   runtime: every connection a task on that thread, at most
//!   [`MAX_CONNECTIONS`] at once — one more closes the one that waited
//!   longest for a request — each closed after [`IDLE_TIMEOUT`] without a
//!   request) renders the last snapshot on each scrape, and
//!   reads the driver's redirect-drop counter (`ethtool -S`) itself, then
//!   (at most once a second);
//! - the workers know nothing of it: they report counters to the control
//!   thread as they always do.
//!
//! The exposition is Prometheus' text format 0.0.4
//! (`text/plain; version=0.0.4`), written by `prometheus-client`: the
//! format `promtool check metrics` checks and every Prometheus server
//! takes (it asks for OpenMetrics first, and parses what the
//! `Content-Type` says). `prometheus-client`'s OpenMetrics writer does not
//! pass `promtool check metrics` (Prometheus 2.42, a 0.0.4 parser): its
//! `# TYPE xtcp_build info` is "unknown metric type", and without it every
//! counter's samples (`xtcp_x_total`) stand apart from the HELP and TYPE
//! written for `xtcp_x`: "no help text", untyped.
//!
//! Counters are the process's own (from zero at start), except the
//! driver's redirect drops, which are its increase since `xtcp serve`
//! started. The TCP counters are totals over the queues, not per queue: a
//! connection handed from one worker to another takes its counts with it,
//! so a queue's share can fall, while the total only grows (it is
//! exposed as the largest total seen, so that a report of one worker that
//! comes before the other's never shows a dip).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use xtcp_engine::probe::{DriverDropSnapshot, driver_redirect_drops};
use xtcp_engine::worker::{Progress, WorkerCounters};
use xtcp_engine::xdp::SteerCounters;

/// How often the control thread refreshes the snapshot.
const REFRESH: Duration = Duration::from_millis(100);

/// `--metrics` value: `ADDR:PORT` with a port other than 0 (IPv6 in
/// brackets).
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let a: SocketAddr = s
        .parse()
        .map_err(|_| format!("{s:?} is not ADDR:PORT: give e.g. 127.0.0.1:9100 or [::1]:9100"))?;
    if a.port() == 0 {
        return Err(format!("{s}: the port must be in 1..=65535"));
    }
    Ok(a)
}

/// What the metrics show: the last snapshot of the engine's counters and
/// the tests' counts. Shared by the control thread (writes) and the HTTP
/// thread (reads).
#[derive(Debug)]
pub struct Metrics {
    state: Mutex<State>,
    /// When `observe` last refreshed the snapshot, in ms since `epoch`
    /// (`u64::MAX`: never).
    refreshed: AtomicU64,
    epoch: Instant,
    iface: String,
    queues: u32,
    /// The driver's redirect-drop counter when serve started.
    drops0: DriverDropSnapshot,
    /// Its last reading, and when (a reading takes ~0.2 ms of ethtool
    /// calls on veth: scrapes more often than [`DRIVER_READ`] share one).
    drops: Mutex<Option<(Instant, DriverDropSnapshot)>>,
}

/// How often a scrape reads the driver's counter at most.
const DRIVER_READ: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Default)]
struct State {
    workers: Vec<WorkerCounters>,
    steer: Option<SteerCounters>,
    tcp: TcpTotals,
    tests: Tests,
    reloads: Reloads,
}

/// Reloads (SIGHUP) by result, and whether the last one took.
#[derive(Debug, Clone, Copy, Default)]
struct Reloads {
    ok: u64,
    failed: u64,
    last_failed: bool,
}

/// TCP counters summed over the queues, the largest seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TcpTotals {
    segments_sent: u64,
    retransmits: u64,
    bytes_received: u64,
    bytes_sent: u64,
    paws_drops: u64,
    out_of_window: u64,
    old_sequence: u64,
    challenge_acks: u64,
    unanswered: u64,
}

impl TcpTotals {
    fn of(workers: &[WorkerCounters]) -> TcpTotals {
        let mut t = TcpTotals::default();
        for w in workers {
            t.segments_sent += w.tcp_segments_sent;
            t.retransmits += w.tcp_retransmits;
            t.bytes_received += w.tcp_bytes_received;
            t.bytes_sent += w.tcp_bytes_sent;
            t.paws_drops += w.tcp_paws_drops;
            t.out_of_window += w.tcp_out_of_window;
            t.old_sequence += w.tcp_old_sequence;
            t.challenge_acks += w.tcp_challenge_acks;
            t.unanswered += w.tcp_unanswered;
        }
        t
    }

    fn max(self, o: TcpTotals) -> TcpTotals {
        TcpTotals {
            segments_sent: self.segments_sent.max(o.segments_sent),
            retransmits: self.retransmits.max(o.retransmits),
            bytes_received: self.bytes_received.max(o.bytes_received),
            bytes_sent: self.bytes_sent.max(o.bytes_sent),
            paws_drops: self.paws_drops.max(o.paws_drops),
            out_of_window: self.out_of_window.max(o.out_of_window),
            old_sequence: self.old_sequence.max(o.old_sequence),
            challenge_acks: self.challenge_acks.max(o.challenge_acks),
            unanswered: self.unanswered.max(o.unanswered),
        }
    }
}

/// Tests by result.
#[derive(Debug, Clone, Default)]
struct Tests {
    ok: u64,
    failed: u64,
    /// By reason.
    refused: BTreeMap<String, u64>,
    /// Data bytes xtcp received and sent in tests.
    received: u64,
    sent: u64,
}

impl Metrics {
    /// Metrics of `queues` queues of `iface`; reads the driver's
    /// redirect-drop counter now, as the base of its increase.
    pub fn new(iface: &str, queues: u32) -> Metrics {
        Metrics {
            state: Mutex::new(State {
                workers: Vec::with_capacity(queues as usize),
                ..State::default()
            }),
            refreshed: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            iface: iface.to_owned(),
            queues,
            drops0: driver_redirect_drops(iface, queues),
            drops: Mutex::new(None),
        }
    }

    /// The driver's redirect-drop counter, read now unless a reading of
    /// the last [`DRIVER_READ`] is at hand.
    fn driver_drops(&self) -> DriverDropSnapshot {
        let mut d = self.drops.lock().unwrap_or_else(PoisonError::into_inner);
        match &*d {
            Some((at, v)) if at.elapsed() < DRIVER_READ => v.clone(),
            _ => {
                let v = driver_redirect_drops(&self.iface, self.queues);
                *d = Some((Instant::now(), v.clone()));
                v
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere leaves plain counters behind: still good.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The engine's progress (control thread, every loop turn): taken
    /// about every 100 ms, otherwise nothing but a clock read.
    pub fn observe(&self, p: &Progress<'_>) {
        self.observe_at(self.epoch.elapsed(), p);
    }

    /// [`Metrics::observe`] at `now` (since `epoch`).
    fn observe_at(&self, now: Duration, p: &Progress<'_>) {
        let now = now.as_millis() as u64;
        let last = self.refreshed.load(Ordering::Relaxed);
        if last != u64::MAX && now.saturating_sub(last) < REFRESH.as_millis() as u64 {
            return;
        }
        self.refreshed.store(now, Ordering::Relaxed);
        self.store(p.workers, p.steer);
    }

    fn store(&self, workers: &[WorkerCounters], steer: Option<SteerCounters>) {
        let mut s = self.lock();
        // Same length every time: no allocation after the first.
        s.workers.clear();
        s.workers.extend_from_slice(workers);
        if steer.is_some() {
            s.steer = steer;
        }
        s.tcp = s.tcp.max(TcpTotals::of(workers));
    }

    /// A test ended: `result` is "ok", "failed" or "refused" (with the
    /// reason, e.g. "busy"); `received` and `sent` are its data bytes.
    pub fn test(&self, result: &str, reason: Option<&str>, received: u64, sent: u64) {
        let mut s = self.lock();
        let t = &mut s.tests;
        match result {
            "ok" => t.ok += 1,
            "refused" => {
                *t.refused
                    .entry(reason.unwrap_or("unknown").to_owned())
                    .or_default() += 1
            }
            _ => t.failed += 1,
        }
        t.received += received;
        t.sent += sent;
    }

    /// A reload (SIGHUP) took (`ok`), or failed and the running
    /// configuration stays.
    pub fn reload(&self, ok: bool) {
        let mut s = self.lock();
        let r = &mut s.reloads;
        if ok {
            r.ok += 1;
        } else {
            r.failed += 1;
        }
        r.last_failed = !ok;
    }

    /// The exposition of the last snapshot (Prometheus text format 0.0.4).
    pub fn render(self: &Arc<Self>) -> String {
        let mut registry = Registry::with_prefix("xtcp");
        registry.register_collector(Box::new(Exposition(self.clone())));
        let mut out = String::with_capacity(16 << 10);
        // Writing into a String cannot fail, and our collector does not.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
        out
    }
}

/// What a scrape writes: the snapshot, and the driver's counter read now.
#[derive(Debug)]
struct Exposition(Arc<Metrics>);

type Res = Result<(), fmt::Error>;

/// One sample of a counter or gauge in a family.
fn sample(e: &mut MetricEncoder<'_>, labels: &[(&str, &str)], v: u64, ty: MetricType) -> Res {
    let e = e.encode_family(&labels)?;
    match ty {
        MetricType::Counter => ConstCounter::new(v).encode(e),
        _ => ConstGauge::new(v as i64).encode(e),
    }
}

/// A family with one sample per queue. The queue is the worker's place in
/// `workers` (worker i serves queue i), not its `queue` field, which is 0
/// until the worker's first report.
fn per_queue(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    ty: MetricType,
    workers: &[WorkerCounters],
    f: impl Fn(&WorkerCounters) -> u64,
) -> Res {
    let mut e = enc.encode_descriptor(name, help, unit, ty)?;
    for (q, w) in workers.iter().enumerate() {
        let q = q.to_string();
        sample(&mut e, &[("queue", &q)], f(w), ty)?;
    }
    Ok(())
}

/// Reads one counter of a worker's.
type Field = fn(&WorkerCounters) -> u64;

/// A family with one sample per queue and value of `label`.
fn per_queue_by(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    workers: &[WorkerCounters],
    label: &str,
    values: &[(&str, Field)],
) -> Res {
    let mut e = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (q, w) in workers.iter().enumerate() {
        let q = q.to_string();
        for (v, f) in values {
            sample(
                &mut e,
                &[("queue", &q), (label, v)],
                f(w),
                MetricType::Counter,
            )?;
        }
    }
    Ok(())
}

/// A counter family without labels but `label`, or none at all.
fn by(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: &[(&[(&str, &str)], u64)],
) -> Res {
    let mut e = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, v) in samples {
        sample(&mut e, labels, *v, MetricType::Counter)?;
    }
    Ok(())
}

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Res {
        let m = &self.0;
        let s = m.lock().clone();
        let drops = m.driver_drops();
        let w = &s.workers[..];
        let counter = MetricType::Counter;
        let bytes = Some(&Unit::Bytes);
        let packets = Unit::Other("packets".into());
        let packets = Some(&packets);

        let info = Info::new([("version", env!("CARGO_PKG_VERSION"))]);
        info.encode(enc.encode_descriptor(
            "build",
            "The xtcp build serving (always 1; the version in its label).",
            None,
            MetricType::Info,
        )?)?;

        // Packet I/O of each queue's AF_XDP socket.
        per_queue(
            &mut enc,
            "rx",
            "TCP packets received on the queue and handed to TCP.",
            packets,
            counter,
            w,
            |c| c.port.rx_segments,
        )?;
        per_queue(
            &mut enc,
            "rx",
            "Bytes of the packets received and handed to TCP (Ethernet frames).",
            bytes,
            counter,
            w,
            |c| c.port.rx_bytes,
        )?;
        per_queue(
            &mut enc,
            "tx",
            "Packets queued for transmission on the queue.",
            packets,
            counter,
            w,
            |c| c.port.tx_packets,
        )?;
        per_queue(
            &mut enc,
            "tx",
            "Bytes of the packets queued for transmission (Ethernet frames).",
            bytes,
            counter,
            w,
            |c| c.port.tx_bytes,
        )?;
        per_queue_by(
            &mut enc,
            "rx_dropped_packets",
            "Received packets xtcp dropped, by reason: malformed (truncated or bad headers), \
             not_tcp, fragment (IP fragments), checksum (bad TCP checksum), not_ours (for \
             another address), oversize (a chain too long), too_big (ICMP \"packet too big\" \
             beyond 64 in one loop turn: a flood).",
            w,
            "reason",
            &[
                ("malformed", |c| c.port.drop_malformed),
                ("not_tcp", |c| c.port.drop_not_tcp),
                ("fragment", |c| c.port.drop_fragment),
                ("checksum", |c| c.port.drop_checksum),
                ("not_ours", |c| c.port.drop_not_ours),
                ("oversize", |c| c.port.drop_oversize),
                ("too_big", |c| c.port.drop_too_big),
            ],
        )?;
        per_queue(
            &mut enc,
            "tx_ring_full",
            "Sends put off because the TX ring had no room.",
            None,
            counter,
            w,
            |c| c.port.tx_ring_full,
        )?;
        per_queue(
            &mut enc,
            "tx_full_turns",
            "Worker loop turns that found the TX ring or the frame pool full.",
            None,
            counter,
            w,
            |c| c.tx_full_turns,
        )?;

        // The kernel's XDP_STATISTICS of each socket, and the driver's.
        per_queue(
            &mut enc,
            "xdp_rx_ring_full",
            "Packets the kernel dropped because the socket's RX ring was full \
             (XDP_STATISTICS rx_ring_full).",
            None,
            counter,
            w,
            |c| c.xdp.rx_ring_full,
        )?;
        per_queue(
            &mut enc,
            "xdp_fill_ring_empty",
            "Times the kernel found the socket's fill ring empty \
             (XDP_STATISTICS rx_fill_ring_empty_descs).",
            None,
            counter,
            w,
            |c| c.xdp.rx_fill_ring_empty_descs,
        )?;
        per_queue(
            &mut enc,
            "xdp_rx_dropped",
            "Packets the kernel dropped for other reasons (XDP_STATISTICS rx_dropped).",
            None,
            counter,
            w,
            |c| c.xdp.rx_dropped,
        )?;
        per_queue_by(
            &mut enc,
            "xdp_invalid_descriptors",
            "Invalid descriptors the kernel found, by ring (XDP_STATISTICS \
             rx_invalid_descs, tx_invalid_descs).",
            w,
            "ring",
            &[
                ("rx", |c| c.xdp.rx_invalid_descs),
                ("tx", |c| c.xdp.tx_invalid_descs),
            ],
        )?;
        if let (Ok(now), Ok(base)) = (&drops.values, &m.drops0.values) {
            let mut e = enc.encode_descriptor(
                "xdp_redirect_drops",
                "Packets the driver failed to redirect into the socket since xtcp serve \
                 started (veth: ethtool -S rx_queue_N_drops).",
                None,
                counter,
            )?;
            for (q, (n, b)) in now.iter().zip(base).enumerate() {
                let q = q.to_string();
                sample(&mut e, &[("queue", &q)], n.saturating_sub(*b), counter)?;
            }
        }
        if let (Some(Ok(now)), Some(Ok(base))) = (&drops.peer_tx_dropped, &m.drops0.peer_tx_dropped)
        {
            let mut e = enc.encode_descriptor(
                "xdp_before_xdp_drops",
                "veth only: packets the veth's peer could not hand to this end since xtcp \
                 serve started (the peer's tx_dropped: the queue in front of XDP full, or a \
                 packet over this end's MTU), lost before the XDP program saw them.",
                None,
                counter,
            )?;
            sample(&mut e, &[], now.saturating_sub(*base), counter)?;
        }
        if let Some(st) = s.steer {
            for (name, help, v) in [
                (
                    "xdp_steered",
                    "Packets the XDP program redirected to xtcp's sockets.",
                    st.steered,
                ),
                (
                    "xdp_passed",
                    "Packets the XDP program passed to the kernel (not xtcp's).",
                    st.passed,
                ),
                (
                    "xdp_malformed",
                    "Packets the XDP program found malformed (passed to the kernel).",
                    st.malformed,
                ),
                (
                    "xdp_no_socket",
                    "Packets for xtcp that arrived on a queue without a socket.",
                    st.no_socket,
                ),
            ] {
                by(&mut enc, name, help, packets, &[(&[], v)])?;
            }
        }

        // TCP, all queues.
        by(
            &mut enc,
            "tcp_segments_sent",
            "TCP segments sent, retransmissions included, all queues.",
            None,
            &[(&[], s.tcp.segments_sent)],
        )?;
        by(
            &mut enc,
            "tcp_retransmits",
            "TCP segments retransmitted, all queues.",
            None,
            &[(&[], s.tcp.retransmits)],
        )?;
        by(
            &mut enc,
            "tcp_payload",
            "TCP payload bytes: received (delivered in order) and sent (retransmissions \
             included), all queues.",
            bytes,
            &[
                (&[("direction", "received")], s.tcp.bytes_received),
                (&[("direction", "sent")], s.tcp.bytes_sent),
            ],
        )?;
        by(
            &mut enc,
            "tcp_unacceptable_segments",
            "The peers' TCP segments not taken: a timestamp older than the last one taken \
             (paws), outside the receive window (out_of_window), or data or a FIN received \
             already, sent again (old_sequence), all queues.",
            None,
            &[
                (&[("reason", "paws")], s.tcp.paws_drops),
                (&[("reason", "out_of_window")], s.tcp.out_of_window),
                (&[("reason", "old_sequence")], s.tcp.old_sequence),
            ],
        )?;
        by(
            &mut enc,
            "tcp_unacceptable_unanswered",
            "Unacceptable TCP segments without data or a FIN left unanswered, and challenge ACKs not \
             sent: each connection answers (or challenges) one per 500 ms (RFC 5961 section 7), \
             all queues.",
            None,
            &[(&[], s.tcp.unanswered)],
        )?;
        by(
            &mut enc,
            "tcp_challenge_acks",
            "ACKs sent to challenge an in-window RST, any SYN, or an ACK too old (RFC 5961), \
             all queues.",
            None,
            &[(&[], s.tcp.challenge_acks)],
        )?;

        // Connections.
        per_queue(
            &mut enc,
            "connections",
            "Connections the queue's worker holds now (any state, TIME-WAIT included).",
            None,
            MetricType::Gauge,
            w,
            |c| c.live,
        )?;
        per_queue(
            &mut enc,
            "connections_established",
            "Connections established on the queue.",
            None,
            counter,
            w,
            |c| c.connections,
        )?;
        per_queue(
            &mut enc,
            "connections_refused",
            "Connections refused with a reset: beyond --max-conns (or no room on a hand-over).",
            None,
            counter,
            w,
            |c| c.refused,
        )?;
        per_queue_by(
            &mut enc,
            "connections_migrated",
            "Connections handed from one queue's worker to another's (their packets came in \
             on another queue), by direction: in (taken over) and out (handed over).",
            w,
            "direction",
            &[("in", |c| c.migrated_in), ("out", |c| c.migrated_out)],
        )?;
        per_queue_by(
            &mut enc,
            "handover_packets",
            "Packets of a connection that another queue's worker holds or is taking over, \
             by what became of them: held (the payload kept until the connection came), \
             forwarded (no payload: handed to its worker), dropped (no room to hold them, \
             or the connection did not come within 50 ms; the peer sends them again).",
            w,
            "result",
            &[
                ("held", |c| c.held),
                ("forwarded", |c| c.forwarded),
                ("dropped", |c| c.misplaced),
            ],
        )?;
        per_queue(
            &mut enc,
            "rx_no_connection",
            "Packets for no connection of xtcp's, answered with a reset (unless they are one, or \
             an ICMP message), as the kernel answers them.",
            packets,
            counter,
            w,
            |c| c.no_connection + c.listener.no_connection,
        )?;
        per_queue(
            &mut enc,
            "rx_too_big",
            "ICMP \"packet too big\" messages about xtcp's flows (path MTU discovery, RFC 1191 \
             and 8201): taken to their connection, whose MSS steps down where the MTU reported \
             is below its own.",
            packets,
            counter,
            w,
            |c| c.too_big,
        )?;
        per_queue(
            &mut enc,
            "listener_syns",
            "SYNs the listener took (a half-open connection made).",
            None,
            counter,
            w,
            |c| c.listener.syns_accepted,
        )?;
        per_queue(
            &mut enc,
            "listener_syns_dropped",
            "SYNs the listener dropped: its half-open table was full, or another queue's listener holds the flow.",
            None,
            counter,
            w,
            |c| c.listener.syns_dropped,
        )?;
        per_queue(
            &mut enc,
            "listener_syns_invalid",
            "SYNs the listener dropped as invalid: FIN set too (as Linux drops them).",
            None,
            counter,
            w,
            |c| c.listener.syns_invalid,
        )?;

        // iperf3 tests.
        let t = &s.tests;
        let mut tests: Vec<(Vec<(&str, &str)>, u64)> = vec![
            (vec![("result", "ok")], t.ok),
            (vec![("result", "failed")], t.failed),
        ];
        for (reason, n) in &t.refused {
            tests.push((vec![("result", "refused"), ("reason", reason)], *n));
        }
        let tests: Vec<(&[(&str, &str)], u64)> = tests.iter().map(|(l, n)| (&l[..], *n)).collect();
        by(
            &mut enc,
            "tests",
            "iperf3 tests that ended, by result: ok, failed, refused (with its reason).",
            None,
            &tests,
        )?;
        by(
            &mut enc,
            "test",
            "Data bytes of iperf3 tests as the tests count them (without -O's omitted seconds), by direction as xtcp sees it: received, sent.",
            bytes,
            &[
                (&[("direction", "received")], t.received),
                (&[("direction", "sent")], t.sent),
            ],
        )?;

        // Reloads.
        let r = s.reloads;
        by(
            &mut enc,
            "config_reloads",
            "Configuration reloads (SIGHUP), by result: ok, failed (the running configuration stays).",
            None,
            &[
                (&[("result", "ok")], r.ok),
                (&[("result", "failed")], r.failed),
            ],
        )?;
        let mut e = enc.encode_descriptor(
            "config_last_reload_successful",
            "1 if the last configuration reload took (or none was asked for), 0 if it failed and the running configuration stays.",
            None,
            MetricType::Gauge,
        )?;
        sample(&mut e, &[], u64::from(!r.last_failed), MetricType::Gauge)?;
        Ok(())
    }
}

/// The HTTP side: a listening socket and the thread that answers on it;
/// stopped and joined on drop.
pub struct MetricsServer {
    metrics: Arc<Metrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer").finish_non_exhaustive()
    }
}

impl MetricsServer {
    /// The metrics it serves.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `--metrics`' listening socket at `at`, or an error that says why not.
fn bind(at: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(at).map_err(|e| bind_error(at, &e))
}

fn bind_error(at: SocketAddr, e: &std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind::*;
    let why = match e.kind() {
        AddrInUse => {
            "address in use: another program listens there; stop it or choose another port"
                .to_owned()
        }
        AddrNotAvailable => {
            "address not available: it is not an address of this host (in this network \
             namespace)"
                .to_owned()
        }
        PermissionDenied => {
            format!("permission denied ({e}): a port below 1024 needs CAP_NET_BIND_SERVICE")
        }
        _ => e.to_string(),
    };
    anyhow::anyhow!("--metrics {at}: {why}")
}

/// What `serve --check-config` checks of `--metrics`: that the address is
/// this host's and the port may be bound. In use counts as fine: a running
/// server (the one the configuration is for, say) holds it.
pub fn check(at: SocketAddr) -> anyhow::Result<()> {
    match TcpListener::bind(at) {
        Err(e) if e.kind() != std::io::ErrorKind::AddrInUse => Err(bind_error(at, &e)),
        _ => Ok(()),
    }
}

/// Connections served at once: one more closes the one that waited
/// longest for a request (a Prometheus server keeps one open per target,
/// and reconnects if it finds it closed).
pub const MAX_CONNECTIONS: usize = 64;
/// A request's head must have arrived this long after its first byte
/// (a slow client cannot hold a connection by trickling it).
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection without a request for this long is closed (Prometheus'
/// longest usual scrape interval is a minute; its client opens another).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Binds `at` (a kernel TCP socket) and serves the metrics of `queues`
/// queues of `iface` there from a thread of its own. Fails at once, naming
/// `--metrics` and the address, if the address cannot be bound.
pub fn serve(at: SocketAddr, iface: &str, queues: u32) -> anyhow::Result<MetricsServer> {
    let listener = bind(at)?;
    listener
        .set_nonblocking(true)
        .with_context(|| format!("--metrics {at}"))?;
    let metrics = Arc::new(Metrics::new(iface, queues));
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let m = metrics.clone();
    let thread = std::thread::Builder::new()
        .name("xtcp-metrics".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build();
            match rt {
                Ok(rt) => tokio::task::LocalSet::new().block_on(&rt, http(listener, m, stopped)),
                Err(e) => tracing::error!("--metrics {at}: cannot serve: {e}"),
            }
        })
        .context("starting the metrics thread")?;
    Ok(MetricsServer {
        metrics,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// An open connection, as the accept loop sees it.
struct Open {
    /// When it last began a request (or was accepted).
    last: Rc<Cell<Instant>>,
    /// Told to close (after a response under way).
    close: Rc<tokio::sync::Notify>,
}

/// The HTTP thread's loop, until `stopped`: each connection a task of its
/// own, at most [`MAX_CONNECTIONS`] (one more closes the one that waited
/// longest for a request). A failed accept (no file descriptor left, say)
/// is said and waited out, never the end of the endpoint.
async fn http(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let at = listener.local_addr().ok();
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("--metrics {at:?}: cannot serve: {e}");
            return;
        }
    };
    let open: Rc<RefCell<BTreeMap<u64, Open>>> = Rc::default();
    let mut next_id = 0u64;
    let mut said = None::<Instant>;
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!("--metrics: accepting a connection failed: {e}; retrying");
                    said = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        {
            let mut open = open.borrow_mut();
            if open.len() >= MAX_CONNECTIONS {
                let longest = open
                    .iter()
                    .min_by_key(|(_, o)| o.last.get())
                    .map(|(&id, _)| id);
                if let Some(o) = longest.and_then(|id| open.remove(&id)) {
                    o.close.notify_one();
                }
            }
        }
        let (id, me) = (
            next_id,
            Open {
                last: Rc::new(Cell::new(Instant::now())),
                close: Rc::default(),
            },
        );
        next_id += 1;
        let (last, close) = (me.last.clone(), me.close.clone());
        open.borrow_mut().insert(id, me);
        let (open, metrics) = (open.clone(), metrics.clone());
        tokio::task::spawn_local(async move {
            connection(stream, metrics, last, close, IDLE_TIMEOUT).await;
            open.borrow_mut().remove(&id);
        });
    }
}

/// One connection's requests until the client closes it, it stays
/// without a request for `idle` ([`IDLE_TIMEOUT`]), or `close` says so
/// (then a response under way is finished first). `last`: when it last
/// began a request.
async fn connection(
    stream: tokio::net::TcpStream,
    metrics: Arc<Metrics>,
    last: Rc<Cell<Instant>>,
    close: Rc<tokio::sync::Notify>,
    idle: Duration,
) {
    let seen = last.clone();
    let service = hyper::service::service_fn(move |req| {
        seen.set(Instant::now());
        std::future::ready(Ok::<_, std::convert::Infallible>(respond(&req, &metrics)))
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    loop {
        let idle_until = tokio::time::Instant::from_std(last.get() + idle);
        tokio::select! {
            // A request that came in is served before the idle timer is
            // looked at: a server thread late to poll does not close a
            // connection whose request is waiting.
            biased;
            _ = conn.as_mut() => return,
            () = close.notified() => break,
            () = tokio::time::sleep_until(idle_until) => {
                if last.get().elapsed() >= idle {
                    break;
                }
            }
        }
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(HEAD_TIMEOUT, conn).await;
}

/// `GET /metrics` renders the snapshot (`HEAD` too: the head without the
/// body, as a health check wants); every other path is 404, every other
/// method on it 405.
fn respond<B>(
    req: &hyper::Request<B>,
    metrics: &Arc<Metrics>,
) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    use hyper::{Method, StatusCode, header};
    let text = |status: StatusCode, body: String| {
        let mut r = hyper::Response::new(http_body_util::Full::new(hyper::body::Bytes::from(body)));
        *r.status_mut() = status;
        r
    };
    if req.uri().path() != "/metrics" {
        return text(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n".into(),
        );
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD are served at /metrics\n".into(),
        );
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let mut r = text(StatusCode::OK, metrics.render());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        ),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that sends no request for the idle time is closed;
    /// one that asks is answered first, and then closed the same way.
    #[test]
    fn an_idle_connection_is_closed() {
        use std::io::{Read, Write};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let metrics = Arc::new(Metrics::new("lo", 1));
        // The second connection's idle time counts from its request's
        // being written: a test thread kept off its core between connect
        // and write does not make it idle.
        let (written, wait_written) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .unwrap();
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                for i in 0..2 {
                    let (s, _) = listener.accept().await.unwrap();
                    if i == 1 {
                        wait_written.recv().unwrap();
                    }
                    let last = Rc::new(Cell::new(Instant::now()));
                    let idle = Duration::from_millis(200);
                    connection(s, metrics.clone(), last, Rc::default(), idle).await;
                }
            });
        });
        let limit = Some(Duration::from_secs(60));
        // Silent: closed without a word.
        let mut s = std::net::TcpStream::connect(at).unwrap();
        s.set_read_timeout(limit).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert!(got.is_empty(), "{got:?}");
        // A request (404: no scrape of `lo` needed) kept alive, then silent.
        let mut s = std::net::TcpStream::connect(at).unwrap();
        s.set_read_timeout(limit).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        written.send(()).unwrap();
        s.read_to_end(&mut got).unwrap();
        let text = String::from_utf8(got).unwrap();
        assert!(text.starts_with("HTTP/1.1 404"), "{text}");
        assert!(text.ends_with("the metrics are at /metrics\n"), "{text}");
        server.join().unwrap();
    }

    fn worker(queue: u32, seed: u64) -> WorkerCounters {
        let mut w = WorkerCounters {
            queue,
            live: seed + 7,
            connections: seed + 8,
            refused: seed + 9,
            migrated_in: seed + 23,
            migrated_out: seed + 24,
            held: seed + 25,
            forwarded: seed + 26,
            misplaced: seed + 27,
            no_connection: seed + 20,
            too_big: seed + 28,
            tx_full_turns: seed + 10,
            tcp_segments_sent: seed + 11,
            tcp_retransmits: seed + 12,
            tcp_bytes_received: seed + 13,
            tcp_bytes_sent: seed + 14,
            tcp_paws_drops: seed + 18,
            tcp_out_of_window: seed + 19,
            tcp_old_sequence: seed + 29,
            tcp_challenge_acks: seed + 20,
            tcp_unanswered: seed + 21,
            ..WorkerCounters::default()
        };
        w.port.rx_segments = seed + 1;
        w.port.rx_bytes = seed + 2;
        w.port.tx_packets = seed + 3;
        w.port.tx_bytes = seed + 4;
        w.port.drop_checksum = seed + 5;
        w.port.tx_ring_full = seed + 6;
        w.xdp.rx_ring_full = seed + 15;
        w.xdp.rx_fill_ring_empty_descs = seed + 16;
        w.listener.syns_accepted = seed + 17;
        w.listener.syns_invalid = seed + 22;
        w.listener.no_connection = seed + 8;
        w
    }

    /// The value of the sample `series` (name and labels as written).
    fn value(text: &str, series: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn each_counter_lands_in_its_series_per_queue() {
        let m = Arc::new(Metrics::new("xtcp-no-such0", 2));
        m.store(&[worker(0, 100), worker(1, 200)], None);
        let t = m.render();
        assert!(t.contains("# TYPE xtcp_rx_packets_total counter\n"), "{t}");
        assert_eq!(value(&t, r#"xtcp_rx_packets_total{queue="0"}"#), 101);
        assert_eq!(value(&t, r#"xtcp_rx_packets_total{queue="1"}"#), 201);
        assert_eq!(value(&t, r#"xtcp_rx_bytes_total{queue="1"}"#), 202);
        assert_eq!(value(&t, r#"xtcp_tx_packets_total{queue="0"}"#), 103);
        assert_eq!(value(&t, r#"xtcp_tx_bytes_total{queue="0"}"#), 104);
        let checksum = r#"xtcp_rx_dropped_packets_total{queue="1",reason="checksum"}"#;
        assert_eq!(value(&t, checksum), 205);
        let fragment = r#"xtcp_rx_dropped_packets_total{queue="1",reason="fragment"}"#;
        assert_eq!(value(&t, fragment), 0);
        assert_eq!(value(&t, r#"xtcp_tx_ring_full_total{queue="0"}"#), 106);
        assert_eq!(value(&t, r#"xtcp_tx_full_turns_total{queue="0"}"#), 110);
        assert_eq!(value(&t, r#"xtcp_connections{queue="1"}"#), 207);
        assert!(t.contains("# TYPE xtcp_connections gauge\n"), "{t}");
        let est = r#"xtcp_connections_established_total{queue="1"}"#;
        assert_eq!(value(&t, est), 208);
        assert_eq!(
            value(&t, r#"xtcp_connections_refused_total{queue="0"}"#),
            109
        );
        assert_eq!(value(&t, r#"xtcp_xdp_rx_ring_full_total{queue="0"}"#), 115);
        let fill = r#"xtcp_xdp_fill_ring_empty_total{queue="1"}"#;
        assert_eq!(value(&t, fill), 216);
        assert_eq!(value(&t, r#"xtcp_listener_syns_total{queue="1"}"#), 217);
        let invalid = r#"xtcp_listener_syns_invalid_total{queue="0"}"#;
        assert_eq!(value(&t, invalid), 122);
        let moved = |q: u8, d: &str| {
            value(
                &t,
                &format!(r#"xtcp_connections_migrated_total{{queue="{q}",direction="{d}"}}"#),
            )
        };
        assert_eq!((moved(0, "in"), moved(1, "out")), (123, 224));
        let handover = |q: u8, r: &str| {
            value(
                &t,
                &format!(r#"xtcp_handover_packets_total{{queue="{q}",result="{r}"}}"#),
            )
        };
        assert_eq!(
            (
                handover(1, "held"),
                handover(0, "forwarded"),
                handover(1, "dropped")
            ),
            (225, 126, 227)
        );
        let none = r#"xtcp_rx_no_connection_packets_total{queue="1"}"#;
        // The worker's and its listener's.
        assert_eq!(value(&t, none), 220 + 208);
        let too_big = r#"xtcp_rx_too_big_packets_total{queue="0"}"#;
        assert_eq!(value(&t, too_big), 128);
        // TCP: the sums over the queues.
        assert_eq!(value(&t, "xtcp_tcp_segments_sent_total"), 111 + 211);
        assert_eq!(value(&t, "xtcp_tcp_retransmits_total"), 112 + 212);
        let rx = r#"xtcp_tcp_payload_bytes_total{direction="received"}"#;
        assert_eq!(value(&t, rx), 113 + 213);
        let tx = r#"xtcp_tcp_payload_bytes_total{direction="sent"}"#;
        assert_eq!(value(&t, tx), 114 + 214);
        let paws = r#"xtcp_tcp_unacceptable_segments_total{reason="paws"}"#;
        assert_eq!(value(&t, paws), 118 + 218);
        let oow = r#"xtcp_tcp_unacceptable_segments_total{reason="out_of_window"}"#;
        assert_eq!(value(&t, oow), 119 + 219);
        let old = r#"xtcp_tcp_unacceptable_segments_total{reason="old_sequence"}"#;
        assert_eq!(value(&t, old), 129 + 229);
        assert_eq!(value(&t, "xtcp_tcp_challenge_acks_total"), 120 + 220);
        let unanswered = "xtcp_tcp_unacceptable_unanswered_total";
        assert_eq!(value(&t, unanswered), 121 + 221);
        let version = format!(
            "xtcp_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(value(&t, &version), 1);
        // No steering counters read yet, no driver counter on a missing
        // interface: no such series rather than a made-up zero.
        assert!(!t.contains("xtcp_xdp_steered"), "{t}");
        assert!(!t.contains("xtcp_xdp_redirect_drops"), "{t}");
        assert!(!t.contains("xtcp_xdp_before_xdp_drops"), "{t}");
        let steer = SteerCounters {
            steered: 5,
            passed: 6,
            malformed: 7,
            no_socket: 8,
        };
        m.store(&[worker(0, 100), worker(1, 200)], Some(steer));
        let t = m.render();
        assert_eq!(value(&t, "xtcp_xdp_steered_packets_total"), 5);
        assert_eq!(value(&t, "xtcp_xdp_passed_packets_total"), 6);
        assert_eq!(value(&t, "xtcp_xdp_no_socket_packets_total"), 8);
    }

    #[test]
    fn queues_not_yet_reported_are_labelled_by_their_place() {
        // Before a worker's first report the engine holds default counters
        // for it, whose `queue` is 0 whatever the queue.
        let m = Arc::new(Metrics::new("xtcp-no-such0", 2));
        m.store(&[WorkerCounters::default(); 2], None);
        let t = m.render();
        for q in ["0", "1"] {
            let series = format!("xtcp_connections{{queue=\"{q}\"}} ");
            let n = t.lines().filter(|l| l.starts_with(&series)).count();
            assert_eq!(n, 1, "{series}in:\n{t}");
        }
    }

    #[test]
    fn tcp_totals_never_fall_when_a_connection_moves_between_queues() {
        let m = Arc::new(Metrics::new("xtcp-no-such0", 2));
        m.store(&[worker(0, 100), worker(1, 200)], None);
        // Queue 0 handed a connection with 50 segments over; queue 1 has
        // not reported since.
        let mut w0 = worker(0, 100);
        w0.tcp_segments_sent -= 50;
        m.store(&[w0, worker(1, 200)], None);
        let t = m.render();
        assert_eq!(value(&t, "xtcp_tcp_segments_sent_total"), 111 + 211);
        let mut w1 = worker(1, 200);
        w1.tcp_segments_sent += 60;
        m.store(&[w0, w1], None);
        let t = m.render();
        assert_eq!(value(&t, "xtcp_tcp_segments_sent_total"), 111 + 211 + 10);
    }

    #[test]
    fn tests_are_counted_by_result_and_reason_with_their_bytes() {
        let m = Arc::new(Metrics::new("xtcp-no-such0", 1));
        let t = m.render();
        assert_eq!(value(&t, r#"xtcp_tests_total{result="ok"}"#), 0);
        assert_eq!(value(&t, r#"xtcp_tests_total{result="failed"}"#), 0);
        m.test("ok", None, 1000, 10);
        m.test("ok", None, 0, 20);
        m.test("failed", None, 5, 0);
        m.test("refused", Some("busy"), 0, 0);
        m.test("refused", Some("busy"), 0, 0);
        m.test("refused", Some("denied"), 0, 0);
        let t = m.render();
        assert_eq!(value(&t, r#"xtcp_tests_total{result="ok"}"#), 2);
        assert_eq!(value(&t, r#"xtcp_tests_total{result="failed"}"#), 1);
        let busy = r#"xtcp_tests_total{result="refused",reason="busy"}"#;
        assert_eq!(value(&t, busy), 2);
        let denied = r#"xtcp_tests_total{result="refused",reason="denied"}"#;
        assert_eq!(value(&t, denied), 1);
        let rx = r#"xtcp_test_bytes_total{direction="received"}"#;
        assert_eq!(value(&t, rx), 1005);
        assert_eq!(value(&t, r#"xtcp_test_bytes_total{direction="sent"}"#), 30);
    }

    #[test]
    fn reloads_are_counted_and_the_last_ones_result_shown() {
        let m = Arc::new(Metrics::new("xtcp-no-such0", 1));
        let last = "xtcp_config_last_reload_successful";
        let t = m.render();
        assert_eq!(value(&t, last), 1, "{t}");
        m.reload(true);
        m.reload(false);
        let t = m.render();
        assert_eq!(value(&t, r#"xtcp_config_reloads_total{result="ok"}"#), 1);
        assert_eq!(
            value(&t, r#"xtcp_config_reloads_total{result="failed"}"#),
            1
        );
        assert_eq!(value(&t, last), 0);
        assert!(t.contains(&format!("# TYPE {last} gauge")), "{t}");
        m.reload(true);
        assert_eq!(value(&m.render(), last), 1);
    }

    #[test]
    fn observe_takes_a_snapshot_about_every_100_ms() {
        let m = Arc::new(Metrics::new("xtcp-no-such0", 1));
        let rx = r#"xtcp_rx_packets_total{queue="0"}"#;
        let at = |ms: u64, seed: u64| {
            let w = [worker(0, seed)];
            m.observe_at(
                Duration::from_millis(ms),
                &Progress {
                    workers: &w,
                    ..Progress::default()
                },
            );
            value(&m.render(), rx)
        };
        assert_eq!(at(5, 100), 101, "the first progress is taken");
        assert_eq!(at(50, 200), 101, "45 ms later: not taken");
        assert_eq!(at(104, 300), 101, "99 ms later: not taken");
        assert_eq!(at(105, 400), 401, "100 ms later: taken");
        assert_eq!(at(110, 500), 401);
        assert_eq!(at(1000, 600), 601);
    }

    #[test]
    fn bad_addresses_are_refused_with_the_form_expected() {
        assert!(parse_addr("127.0.0.1:9100").is_ok());
        assert!(parse_addr("[::1]:9100").is_ok());
        let e = parse_addr("localhost").unwrap_err();
        assert!(e.contains("\"localhost\" is not ADDR:PORT"), "{e}");
        let e = parse_addr("127.0.0.1:0").unwrap_err();
        assert!(e.contains("1..=65535"), "{e}");
    }
}
