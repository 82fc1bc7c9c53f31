//! The XDP statistics of a run, as every command prints them: the AF_XDP
//! sockets' own `XDP_STATISTICS` (summed and per queue), the steering
//! program's count of packets it redirected, and the driver's count of
//! redirects that failed (veth: `rx_queue_N_drops`), read at start and end.
//!
//! A packet the steering program redirects is counted as steered before
//! the kernel tries to put it on the socket's RX ring; if that fails (RX
//! ring full, fill ring empty) the packet is lost: the socket counts it
//! (`rx_ring_full`, or `rx_dropped` with `rx_fill_ring_empty_descs`), and
//! so does a driver that keeps its own count. Drops ÷ steered is the share
//! of xtcp's packets lost before xtcp saw them.
//!
//! A veth also loses packets before XDP runs: what its peer sends while
//! the 256-packet queue in front of the XDP program is full (or larger than
//! this end's MTU) is dropped by the peer and counted in the peer's
//! `tx_dropped`, which xtcp reads at start and end too, in whichever
//! namespace the peer is (`dropped_before_xdp`).

use serde::Serialize;
use xtcp_engine::worker::EngineReport;
use xtcp_engine::xsk::XskStats;

/// One queue's statistics.
#[derive(Debug, Clone, Serialize)]
pub struct QueueXdp {
    /// The queue.
    pub queue: u32,
    /// Its socket's `XDP_STATISTICS`.
    #[serde(flatten)]
    pub xsk: XskStats,
    /// The driver's redirect drops on this queue over the run (`None`:
    /// not reported, see [`XdpSummary::driver_note`]).
    pub driver_drops: Option<u64>,
}

/// The XDP statistics of a run (JSON field `xdp` of every command).
#[derive(Debug, Clone, Serialize)]
pub struct XdpSummary {
    /// Whether every socket was bound in zero-copy mode, as the kernel
    /// confirmed it (`XDP_OPTIONS`); `false` is copy mode.
    pub zero_copy: bool,
    /// Packets the steering program redirected to xtcp's sockets, all
    /// queues (`None` if its counters could not be read).
    pub steered: Option<u64>,
    /// Packets of xtcp's flows that arrived on a queue without an xtcp
    /// socket, which the steering program dropped (a queue xtcp does not
    /// serve, or one whose worker had already exited); `None` as `steered`.
    pub no_socket: Option<u64>,
    /// Packets lost at the redirect: the driver's count where it has one
    /// (`drops_source` "driver"), else the sockets' `rx_ring_full +
    /// rx_dropped` ("sockets").
    pub dropped_at_redirect: u64,
    /// "driver" or "sockets": where `dropped_at_redirect` comes from.
    pub drops_source: &'static str,
    /// `dropped_at_redirect` ÷ `steered` × 100 (`None` if nothing was steered).
    pub drop_percent: Option<f64>,
    /// The sockets' `XDP_STATISTICS`, summed over the queues.
    #[serde(flatten)]
    pub sum: XskStats,
    /// The driver of the interface.
    pub driver: String,
    /// The driver's counter, `N` standing for the queue (veth:
    /// `rx_queue_N_drops`); `None` where the driver has none.
    pub driver_counter: Option<&'static str>,
    /// Its increase over the run, all queues; `None` with `driver_note`.
    pub driver_drops: Option<u64>,
    /// Why there is no driver count ("not reported by driver mlx5_core").
    pub driver_note: Option<String>,
    /// veth only: packets the veth's peer could not hand to this end over
    /// the run (the peer's `tx_dropped`: the 256-packet queue in front of
    /// this end's XDP program was full, or a packet was over this end's
    /// MTU), lost before XDP saw them, of any flow; not in `steered` nor in
    /// `dropped_at_redirect`. `None` for other drivers, or with
    /// `before_xdp_note`.
    pub dropped_before_xdp: Option<u64>,
    /// Why a veth's `dropped_before_xdp` could not be read.
    pub before_xdp_note: Option<String>,
    /// Per queue.
    pub queues: Vec<QueueXdp>,
    /// The steering program ran in generic (SKB) mode: the driver's
    /// counter sees none of these drops (the sockets' count is used).
    #[serde(skip)]
    pub generic: bool,
    /// The interface, and its receive queues where known (what the lines
    /// advise on a `no socket` count).
    #[serde(skip)]
    pub iface: String,
    #[serde(skip)]
    pub rx_queues: Option<u32>,
}

/// xtcp's own packet-path counters of a run, summed over the workers
/// (JSON field `engine` of `client -J` and of `serve -J`'s closing
/// document): what xtcp dropped after the redirect, by reason, and the
/// transmit side's refusals and full turns.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct EngineCounters {
    /// Packets dropped by reason: truncated or malformed headers.
    pub drop_malformed: u64,
    /// Not TCP over IPv4/IPv6.
    pub drop_not_tcp: u64,
    /// IP fragments.
    pub drop_fragment: u64,
    /// Bad TCP checksum.
    pub drop_checksum: u64,
    /// Addressed to another IP address.
    pub drop_not_ours: u64,
    /// Chains longer than xtcp gathers.
    pub drop_oversize: u64,
    /// ICMP "packet too big" about more than 64 flows in one loop turn (a
    /// flood; more than one about a flow are folded into one, not dropped).
    pub drop_too_big: u64,
    /// Sends refused: no room on the TX ring.
    pub tx_ring_full: u64,
    /// Sends refused: no free frame.
    pub tx_no_frame: u64,
    /// Loop turns that found the TX ring or the frame pool full.
    pub tx_full_turns: u64,
    /// The most descriptors waiting on one TX ring at a kick (the largest
    /// over the workers).
    pub tx_queued_max: u64,
    /// Loop turns in all.
    pub turns: u64,
    /// Payload bytes the receive windows may offer in sum (over the
    /// workers): what their RX rings can absorb.
    pub rx_window_budget: u64,
    /// Light connections (a few segments' window) whose peer used it up
    /// and that got their share of that budget back.
    pub light_promoted: u64,
}

impl EngineCounters {
    /// The counters of `r`, summed over its workers.
    pub fn of(r: &EngineReport) -> EngineCounters {
        let mut c = EngineCounters::default();
        for w in &r.workers {
            let p = &w.port;
            c.drop_malformed += p.drop_malformed;
            c.drop_not_tcp += p.drop_not_tcp;
            c.drop_fragment += p.drop_fragment;
            c.drop_checksum += p.drop_checksum;
            c.drop_not_ours += p.drop_not_ours;
            c.drop_oversize += p.drop_oversize;
            c.drop_too_big += p.drop_too_big;
            c.tx_ring_full += p.tx_ring_full;
            c.tx_no_frame += p.tx_no_frame;
            c.tx_full_turns += w.tx_full_turns;
            c.tx_queued_max = c.tx_queued_max.max(w.tx_queued_max);
            c.turns += w.turns;
            c.rx_window_budget += w.rx_window_budget;
            c.light_promoted += w.light_promoted;
        }
        c
    }
}

fn add(a: &mut XskStats, b: &XskStats) {
    a.rx_dropped += b.rx_dropped;
    a.rx_invalid_descs += b.rx_invalid_descs;
    a.tx_invalid_descs += b.tx_invalid_descs;
    a.rx_ring_full += b.rx_ring_full;
    a.rx_fill_ring_empty_descs += b.rx_fill_ring_empty_descs;
    a.tx_ring_empty_descs += b.tx_ring_empty_descs;
}

impl XdpSummary {
    /// The statistics of `r`.
    pub fn of(r: &EngineReport) -> XdpSummary {
        let d = &r.driver_drops;
        let mut sum = XskStats::default();
        let queues: Vec<QueueXdp> = r
            .workers
            .iter()
            .map(|w| {
                add(&mut sum, &w.xdp);
                QueueXdp {
                    queue: w.queue,
                    xsk: w.xdp,
                    driver_drops: d
                        .per_queue
                        .as_ref()
                        .and_then(|v| v.get(w.queue as usize).copied()),
                }
            })
            .collect();
        let steered = r.steer.map(|s| s.steered);
        let no_socket = r.steer.map(|s| s.no_socket);
        // Generic XDP runs after the driver: a failed redirect there is in
        // the sockets' count only.
        let generic = r.xdp_mode == xtcp_engine::xdp::AttachMode::Generic;
        let (dropped_at_redirect, drops_source) = match d.total {
            Some(t) if !generic => (t, "driver"),
            _ => (sum.rx_ring_full + sum.rx_dropped, "sockets"),
        };
        XdpSummary {
            zero_copy: xtcp_engine::xsk::all_zero_copy(&r.bind),
            steered,
            no_socket,
            dropped_at_redirect,
            drops_source,
            drop_percent: steered
                .filter(|&s| s > 0)
                .map(|s| dropped_at_redirect as f64 * 100.0 / s as f64),
            sum,
            driver: d.driver.clone(),
            driver_counter: d.counter,
            driver_drops: d.total,
            driver_note: d.note.clone(),
            dropped_before_xdp: d.peer_tx_dropped,
            before_xdp_note: d.peer_note.clone(),
            queues,
            generic,
            iface: r.iface.clone(),
            rx_queues: r.rx_queues,
        }
    }

    /// The one-line summary, then one line per queue when there are several
    /// and some queue dropped.
    pub fn lines(&self) -> Vec<String> {
        let s = &self.sum;
        let pct = self
            .drop_percent
            .map_or_else(|| "-".to_owned(), |p| format!("{p:.2} %"));
        let source = match (&self.driver_counter, &self.driver_note) {
            _ if self.generic => {
                "sockets' count: generic XDP, which the driver's counter does not see".to_owned()
            }
            (Some(c), None) => format!("driver {} {c}", self.driver),
            (_, Some(n)) => format!("sockets' count; driver count {n}"),
            (None, None) => "sockets' count".to_owned(),
        };
        let before = match (self.dropped_before_xdp, &self.before_xdp_note) {
            (Some(n), _) => format!("; before XDP {n} (veth peer's tx_dropped, every flow's)"),
            (None, Some(note)) => format!("; before XDP unknown ({note})"),
            (None, None) => String::new(),
        };
        let mut v = vec![format!(
            "XDP: steered {}, dropped at redirect {} ({pct}, {source}): rx ring full {}, \
             fill ring empty {}, rx dropped {}, rx invalid descs {}, tx invalid descs {}, \
             tx ring empty {}; no socket {}{before}",
            self.steered
                .map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
            self.dropped_at_redirect,
            s.rx_ring_full,
            s.rx_fill_ring_empty_descs,
            s.rx_dropped,
            s.rx_invalid_descs,
            s.tx_invalid_descs,
            s.tx_ring_empty_descs,
            self.no_socket
                .map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
        )];
        if let Some(n) = self.no_socket.filter(|&n| n > 0) {
            let served = self.queues.len();
            let more = match self.rx_queues.filter(|&q| q as usize > served) {
                Some(q) => format!(
                    ": {} has {q} receive queues and xtcp served {served}; give --queues {q}",
                    self.iface
                ),
                None => String::new(),
            };
            v.push(format!(
                "XDP: {} of xtcp's connections came in on a queue without an xtcp socket and \
                 {} dropped (no socket): a SYN or data is sent again after a timeout, a reset \
                 never{more}",
                crate::report::count(n, "packet"),
                if n == 1 { "was" } else { "were" },
            ));
        }
        if self.generic && self.sum.rx_dropped > 0 {
            v.push(format!(
                "XDP: generic mode: {} dropped at the sockets (rx dropped): generic XDP sees \
                 packets after GRO (and, on veth, as the peer's TSO/GSO made them), larger than \
                 a frame; turn those off (`ethtool -K {} gro off`, and `tso off gso off` on a \
                 veth's peer), or use native XDP (--xdp-mode native)",
                crate::report::count(self.sum.rx_dropped, "packet"),
                self.iface
            ));
        }
        let dropped =
            |q: &QueueXdp| q.driver_drops.unwrap_or(0) + q.xsk.rx_ring_full + q.xsk.rx_dropped > 0;
        if self.queues.len() > 1 && self.queues.iter().any(dropped) {
            for q in &self.queues {
                v.push(format!(
                    "XDP queue {}: driver drops {}, rx ring full {}, fill ring empty {}, \
                     rx dropped {}, rx invalid descs {}, tx invalid descs {}, tx ring empty {}",
                    q.queue,
                    q.driver_drops
                        .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                    q.xsk.rx_ring_full,
                    q.xsk.rx_fill_ring_empty_descs,
                    q.xsk.rx_dropped,
                    q.xsk.rx_invalid_descs,
                    q.xsk.tx_invalid_descs,
                    q.xsk.tx_ring_empty_descs,
                ));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(queues: Vec<QueueXdp>, driver: Option<u64>) -> XdpSummary {
        let mut sum = XskStats::default();
        for q in &queues {
            add(&mut sum, &q.xsk);
        }
        XdpSummary {
            zero_copy: false,
            steered: Some(1000),
            no_socket: Some(0),
            dropped_at_redirect: driver.unwrap_or(sum.rx_ring_full + sum.rx_dropped),
            drops_source: if driver.is_some() {
                "driver"
            } else {
                "sockets"
            },
            drop_percent: Some(driver.unwrap_or(sum.rx_ring_full + sum.rx_dropped) as f64 / 10.0),
            sum,
            driver: if driver.is_some() {
                "veth"
            } else {
                "mlx5_core"
            }
            .into(),
            driver_counter: driver.map(|_| "rx_queue_N_drops"),
            driver_drops: driver,
            driver_note: driver
                .is_none()
                .then(|| "not reported by driver mlx5_core".to_owned()),
            dropped_before_xdp: None,
            before_xdp_note: None,
            queues,
            generic: false,
            iface: "eth1".into(),
            rx_queues: None,
        }
    }

    fn q(queue: u32, full: u64, drv: Option<u64>) -> QueueXdp {
        QueueXdp {
            queue,
            xsk: XskStats {
                rx_ring_full: full,
                ..XskStats::default()
            },
            driver_drops: drv,
        }
    }

    #[test]
    fn one_line_unless_several_queues_and_a_drop() {
        let s = summary(vec![q(0, 7, Some(7))], Some(7));
        let l = s.lines();
        assert_eq!(l.len(), 1);
        assert!(
            l[0].starts_with(
                "XDP: steered 1000, dropped at redirect 7 (0.70 %, driver veth rx_queue_N_drops): \
                 rx ring full 7, fill ring empty 0"
            ),
            "{}",
            l[0]
        );
        assert!(l[0].ends_with("tx ring empty 0; no socket 0"), "{}", l[0]);
        let s = summary(vec![q(0, 0, Some(0)), q(1, 0, Some(0))], Some(0));
        assert_eq!(s.lines().len(), 1, "no drop: no per-queue detail");
        let s = summary(vec![q(0, 0, Some(0)), q(1, 3, Some(3))], Some(3));
        let l = s.lines();
        assert_eq!(l.len(), 3);
        assert!(
            l[2].starts_with("XDP queue 1: driver drops 3, rx ring full 3"),
            "{}",
            l[2]
        );
    }

    #[test]
    fn generic_mode_counts_the_sockets_drops_and_says_what_to_turn_off() {
        let mut xsk = XskStats {
            rx_dropped: 43,
            ..XskStats::default()
        };
        xsk.rx_ring_full = 2;
        let mut s = summary(
            vec![QueueXdp {
                queue: 0,
                xsk,
                driver_drops: Some(0),
            }],
            Some(0),
        );
        s.generic = true;
        s.dropped_at_redirect = 45;
        let l = s.lines();
        assert!(l[0].contains("dropped at redirect 45 ("), "{}", l[0]);
        assert!(
            l[0].contains("sockets' count: generic XDP, which the driver's counter does not see)"),
            "{}",
            l[0]
        );
        assert!(
            l[1].starts_with(
                "XDP: generic mode: 43 packets dropped at the sockets (rx dropped): generic XDP \
                 sees packets after GRO"
            ),
            "{l:?}"
        );
        assert!(l[1].contains("`ethtool -K eth1 gro off`"), "{l:?}");
    }

    #[test]
    fn a_no_socket_count_says_which_queues_were_not_served() {
        let mut s = summary(vec![q(0, 0, Some(0))], Some(0));
        s.no_socket = Some(1);
        s.rx_queues = Some(4);
        let l = s.lines();
        assert_eq!(
            l[1],
            "XDP: 1 packet of xtcp's connections came in on a queue without an xtcp socket and \
             was dropped (no socket): a SYN or data is sent again after a timeout, a reset \
             never: eth1 has 4 receive queues and xtcp served 1; give --queues 4"
        );
        // Where the interface's queues are not known, the count alone.
        s.rx_queues = None;
        assert!(s.lines()[1].ends_with("a reset never"), "{:?}", s.lines());
    }

    #[test]
    fn a_veths_drops_before_xdp_end_the_line() {
        let mut s = summary(vec![q(0, 0, Some(0))], Some(0));
        s.dropped_before_xdp = Some(12);
        let l = s.lines();
        assert!(
            l[0].ends_with("; no socket 0; before XDP 12 (veth peer's tx_dropped, every flow's)"),
            "{}",
            l[0]
        );
        s.dropped_before_xdp = None;
        s.before_xdp_note = Some("reading xtv0: no such device".into());
        assert!(
            s.lines()[0].ends_with("; before XDP unknown (reading xtv0: no such device)"),
            "{}",
            s.lines()[0]
        );
    }

    #[test]
    fn without_a_driver_counter_the_sockets_count_and_the_reason_show() {
        let s = summary(vec![q(0, 4, None)], None);
        let l = s.lines();
        assert!(
            l[0].contains(
                "dropped at redirect 4 (0.40 %, sockets' count; driver count not reported by \
                 driver mlx5_core)"
            ),
            "{}",
            l[0]
        );
    }
}
