//! [`Iperf3Server`] and [`Iperf3Client`] as the engine drives them, in
//! memory: connections are ids with an order channel, the test plays the
//! workers (bytes in, counts, stops, closes) on a virtual clock.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, unbounded};
use serde_json::{Value, json};

use super::auth::testing::{Padding, token};
use super::*;
use crate::tcp::{CloseReason, CongestionAlgorithm, ConnectionError, FourTuple};
use crate::worker::{App, AppIn, AppOut, IpMarks};

const COOKIE: &[u8; COOKIE_LEN] = b"abcdefghijklmnopqrstuvwxyz234567abcd\0";
const OTHER: &[u8; COOKIE_LEN] = b"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\0";
const SERVER: &str = "198.18.0.1:5201";

fn frame(v: &Value) -> Vec<u8> {
    let text = v.to_string();
    let mut out = (text.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out
}

/// Parameters as iperf3 3.12 sends them, with `extra` on top.
fn params(extra: Value) -> Vec<u8> {
    let mut v = json!({"tcp":true,"omit":0,"time":2,"num":0,"blockcount":0,"parallel":1,
        "len":131072,"pacing_timer":1000,"client_version":"3.12"});
    if let (Value::Object(m), Value::Object(x)) = (&mut v, extra) {
        m.extend(x);
    }
    frame(&v)
}

fn results(ids: &[u32]) -> Vec<u8> {
    let streams: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({"id":id,"bytes":1000,"retransmits":0,"jitter":0,"errors":0,
            "packets":0,"start_time":0,"end_time":2.0})
        })
        .collect();
    frame(
        &json!({"cpu_util_total":1.5,"cpu_util_user":0.5,"cpu_util_system":1.0,
        "sender_has_retransmits":1,"congestion_used":"bbr","streams":streams}),
    )
}

fn server_error(i_errno: i32, errno: i32) -> Vec<u8> {
    let mut v = vec![0xfe];
    v.extend(i_errno.to_be_bytes());
    v.extend(errno.to_be_bytes());
    v
}

/// What the server ordered one connection to do, in order.
#[derive(Debug, Default)]
struct Orders {
    written: Vec<u8>,
    relay: bool,
    count: bool,
    send: bool,
    stop: bool,
    close: bool,
    abort: bool,
    /// The rate of the `Send` order.
    rate: Option<u64>,
    /// Its payload's first bytes, if a filler.
    filler: Vec<u8>,
    /// The congestion control ordered.
    congestion: Option<CongestionAlgorithm>,
    /// The IP marks ordered.
    marks: Option<IpMarks>,
    /// The pacing cap ordered, bytes a second.
    max_pacing: Option<u64>,
}

struct Harness {
    server: Iperf3Server,
    outcomes: Rc<RefCell<Vec<TestOutcome>>>,
    conns: HashMap<usize, (Receiver<AppOut>, Orders)>,
    next: usize,
    now: Instant,
}

impl Harness {
    fn new(config: ServerConfig) -> Harness {
        let outcomes = Rc::new(RefCell::new(Vec::new()));
        let o = outcomes.clone();
        let server = Iperf3Server::new(
            config,
            None,
            Box::new(|_| {}),
            Box::new(move |t: &TestOutcome| o.borrow_mut().push(t.clone())),
        );
        Harness {
            server,
            outcomes,
            conns: HashMap::new(),
            next: 0,
            now: Instant::now(),
        }
    }

    fn handle(&mut self, msg: AppIn) {
        self.server.handle(self.now, msg);
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.server.poll(self.now);
    }

    /// A connection from `remote` (an address; the port is made up).
    fn open(&mut self, remote: &str) -> usize {
        let id = self.next;
        self.next += 1;
        let (tx, rx) = unbounded();
        let ip: std::net::IpAddr = remote.parse().unwrap();
        let tuple = FourTuple {
            local: SERVER.parse().unwrap(),
            remote: SocketAddr::new(ip, 40000 + id as u16),
        };
        self.conns.insert(id, (rx, Orders::default()));
        self.handle(AppIn::Opened {
            id,
            tuple,
            out: tx,
            congestion: "cubic",
            mss: 1448,
        });
        id
    }

    fn send(&mut self, id: usize, bytes: &[u8]) {
        self.handle(AppIn::Data {
            id,
            bytes: bytes.to_vec(),
        });
    }

    fn count(&mut self, id: usize, bytes: u64, retransmits: u64) {
        self.handle(AppIn::Count {
            id,
            bytes,
            retransmits,
            rtt: None,
            tcp: Default::default(),
        });
    }

    /// The orders given to `id` so far.
    fn orders(&mut self, id: usize) -> &Orders {
        let (rx, o) = self.conns.get_mut(&id).unwrap();
        while let Ok(order) = rx.try_recv() {
            match order {
                AppOut::Write(b) => o.written.extend(b),
                AppOut::Relay => o.relay = true,
                AppOut::Count => o.count = true,
                AppOut::Send { rate, payload, .. } => {
                    o.send = true;
                    o.rate = rate;
                    if let crate::worker::Payload::Filler(b) = payload {
                        o.filler = b.iter().take(12).copied().collect();
                    }
                }
                AppOut::Congestion(a) => o.congestion = Some(a),
                AppOut::Marks(m) => o.marks = Some(m),
                AppOut::MaxPacingRate(r) => o.max_pacing = Some(r),
                AppOut::Stop => o.stop = true,
                AppOut::Window(_) | AppOut::CountInto(_) | AppOut::Budget(_) => {}
                AppOut::Close => o.close = true,
                AppOut::Abort => o.abort = true,
            }
        }
        o
    }

    /// Takes what was written on `id` since the last call.
    fn written(&mut self, id: usize) -> Vec<u8> {
        self.orders(id);
        std::mem::take(&mut self.conns.get_mut(&id).unwrap().1.written)
    }

    fn outcomes(&self) -> Vec<TestOutcome> {
        self.outcomes.borrow().clone()
    }

    /// A client at `remote` up to a running test with `extra` parameters:
    /// the control connection and the data connections.
    fn start(&mut self, remote: &str, extra: Value) -> (usize, Vec<usize>) {
        let ctrl = self.open(remote);
        assert!(self.orders(ctrl).relay, "a control connection");
        self.send(ctrl, COOKIE);
        self.send(ctrl, &params(extra.clone()));
        assert_eq!(
            self.written(ctrl),
            [9, 10],
            "PARAM_EXCHANGE, CREATE_STREAMS"
        );
        let parallel = extra["parallel"].as_u64().unwrap_or(1) as usize;
        let n = if extra["bidirectional"] == json!(true) {
            2 * parallel
        } else {
            parallel
        };
        let data: Vec<usize> = (0..n)
            .map(|_| {
                let d = self.open(remote);
                self.send(d, COOKIE);
                d
            })
            .collect();
        assert_eq!(self.written(ctrl), [1, 2], "TEST_START, TEST_RUNNING");
        (ctrl, data)
    }

    /// The client ends a running test and goes through the results.
    fn finish(&mut self, ctrl: usize, data: &[usize], ids: &[u32]) {
        self.send(ctrl, &[4]);
        for &d in data {
            assert!(self.orders(d).stop);
            self.handle(AppIn::Stopped { id: d });
        }
        assert_eq!(self.written(ctrl), [13], "EXCHANGE_RESULTS");
        self.send(ctrl, &results(ids));
        let out = self.written(ctrl);
        assert_eq!(out.last(), Some(&14), "DISPLAY_RESULTS");
        self.send(ctrl, &[16]);
        assert!(self.orders(ctrl).close);
    }

    /// The server's results document, sent before DISPLAY_RESULTS.
    fn finish_with_results(&mut self, ctrl: usize, data: &[usize], ids: &[u32]) -> Value {
        self.send(ctrl, &[4]);
        for &d in data {
            self.handle(AppIn::Stopped { id: d });
        }
        assert_eq!(self.written(ctrl), [13]);
        self.send(ctrl, &results(ids));
        let out = self.written(ctrl);
        let len = u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        let v = serde_json::from_slice(&out[4..4 + len]).unwrap();
        self.send(ctrl, &[16]);
        v
    }
}

fn denied(list: &str, deny: &str) -> ServerConfig {
    ServerConfig {
        access: AccessList {
            allow: parse_cidr_list(list).unwrap(),
            deny: parse_cidr_list(deny).unwrap(),
        },
        ..ServerConfig::default()
    }
}

/// A denied address gets SERVER_ERROR / IEAUTHTEST / EACCES and a close,
/// nothing is read from it, and the refusal is reported; others are served.
#[test]
fn denied_clients_are_told_and_reported() {
    let mut h = Harness::new(denied("198.18.0.0/15,2001:2::/48", "198.18.0.66"));
    for who in [
        "198.18.0.66",
        "10.1.2.3",
        "2001:db8::1",
        "::ffff:198.18.0.66",
    ] {
        let id = h.open(who);
        let o = h.orders(id);
        assert!(!o.relay && o.close, "{who}: {o:?}");
        assert_eq!(h.written(id), server_error(ierrno::IEAUTHTEST, 13), "{who}");
        // Whatever it sends next is ignored.
        h.send(id, COOKIE);
        assert!(h.written(id).is_empty());
        let out = h.outcomes().pop().unwrap();
        assert_eq!(out.refused, Some(Refusal::Denied), "{who}");
        assert_eq!(
            out.client.remote.ip(),
            who.parse::<std::net::IpAddr>().unwrap()
        );
        let addr = who.parse::<std::net::IpAddr>().unwrap().to_canonical();
        assert_eq!(out.result, Err(Error::Denied { addr }));
        assert!(!out.ends_one_off());
    }
    assert_eq!(h.outcomes().len(), 4);
    // Allowed: served, v4 and v6.
    for who in ["198.18.0.2", "2001:2::2"] {
        let (ctrl, data) = h.start(who, json!({}));
        h.count(data[0], 1000, 0);
        h.finish(ctrl, &data, &[1]);
        let out = h.outcomes().pop().unwrap();
        assert_eq!(
            (out.result, out.refused, out.received),
            (Ok(()), None, 1000)
        );
    }
}

/// A second client while a test runs gets the busy byte at once; while the
/// test connects its streams, after its cookie shows it is not one of them.
/// The first test is not disturbed either way.
#[test]
fn busy_while_running_and_while_connecting_streams() {
    let mut h = Harness::new(ServerConfig::default());
    // While connecting: the first test asks for two streams.
    let ctrl = h.open("198.18.0.2");
    h.send(ctrl, COOKIE);
    h.send(ctrl, &params(json!({"parallel": 2})));
    assert_eq!(h.written(ctrl), [9, 10]);
    let a = h.open("198.18.0.2");
    h.send(a, COOKIE);
    let second = h.open("198.18.0.3");
    assert!(h.written(second).is_empty(), "read before it is answered");
    h.send(second, &OTHER[..20]);
    assert!(h.written(second).is_empty());
    h.send(second, &OTHER[20..]);
    assert_eq!(h.written(second), [0xff]);
    assert!(h.orders(second).close);
    let out = h.outcomes().pop().unwrap();
    assert_eq!(out.refused, Some(Refusal::Busy));
    assert_eq!(out.result, Err(Error::Busy));
    assert_eq!(out.client.remote, "198.18.0.3:40002".parse().unwrap());
    assert!(!out.ends_one_off());
    // The first test's second stream still connects, as stream 3.
    let b = h.open("198.18.0.2");
    h.send(b, COOKIE);
    assert_eq!(h.written(ctrl), [1, 2]);
    // While running: refused without being read.
    let third = h.open("198.18.0.4");
    assert_eq!(h.written(third), [0xff]);
    assert!(h.orders(third).close && !h.orders(third).relay);
    assert_eq!(h.outcomes().last().unwrap().refused, Some(Refusal::Busy));
    h.count(a, 500, 0);
    h.count(b, 700, 0);
    h.finish(ctrl, &[a, b], &[1, 3]);
    let outs = h.outcomes();
    assert_eq!(outs.len(), 3);
    let first = &outs[2];
    assert_eq!((first.result.clone(), first.refused), (Ok(()), None));
    assert_eq!((first.streams, first.received), (2, 1200));
    assert!(first.ends_one_off());
}

/// `-S`: every data connection's packets carry the TOS byte, both ways of
/// a `--bidir` test (a stock server sets `IP_TOS` on each); `-L` is not
/// the server's to set, as in iperf3. A TOS beyond a byte is refused.
/// `--fq-rate` caps each one's pacing. `--repeating-payload`: what serve
/// sends is iperf3's pattern.
#[test]
fn tos_marks_and_repeating_payload() {
    let mut h = Harness::new(ServerConfig::default());
    let (ctrl, data) = h.start(
        "198.18.0.2",
        json!({"bidirectional": true, "parallel": 2, "TOS": 0xb8, "flowlabel": 5,
               "fqrate": 80_000_000}),
    );
    assert_eq!(data.len(), 4);
    for &d in &data {
        let o = h.orders(d);
        let want = IpMarks {
            tos: 0xb8,
            flow_label: 0,
        };
        assert_eq!(o.marks, Some(want));
        assert_eq!(o.max_pacing, Some(10_000_000), "--fq-rate's bits as bytes");
    }
    assert_eq!(h.orders(ctrl).marks, None, "not the control connection");
    let sent_random = data.iter().any(|&d| {
        let o = h.orders(d);
        o.send && o.filler != b"012345678901"
    });
    assert!(sent_random, "random bytes unless asked");

    // `--repeating-payload`: iperf3's pattern.
    let mut h = Harness::new(ServerConfig::default());
    let (_, data) = h.start(
        "198.18.0.2",
        json!({"reverse": true, "repeating_payload": 1}),
    );
    let o = h.orders(data[0]);
    assert!(o.send);
    assert_eq!(o.filler, b"012345678901");

    let mut h = Harness::new(ServerConfig::default());
    let ctrl = h.open("198.18.0.2");
    h.send(ctrl, COOKIE);
    h.send(ctrl, &params(json!({"TOS": 256})));
    let mut want = vec![9];
    want.extend(server_error(ierrno::IEBADTOS, 0));
    assert_eq!(h.written(ctrl), want);
}

/// A reverse test's `-C` and `-b`: each sending stream runs the asked-for
/// congestion control and is paced to the rate; the results name the
/// algorithm; a name xtcp lacks is refused with IESETCONGESTION.
#[test]
fn congestion_and_rate_of_a_reverse_test() {
    let mut h = Harness::new(ServerConfig::default());
    let (ctrl, data) = h.start(
        "198.18.0.2",
        json!({"reverse": true, "parallel": 2, "congestion": "reno", "bandwidth": 100_000_000}),
    );
    for &d in &data {
        let o = h.orders(d);
        assert_eq!(o.congestion, Some(CongestionAlgorithm::NewReno));
        assert_eq!(
            (o.marks, o.max_pacing),
            (None, None),
            "no TOS, no --fq-rate"
        );
        assert!(o.send);
        assert_eq!(o.rate, Some(100_000_000), "per stream, as iperf3");
    }
    let v = h.finish_with_results(ctrl, &data, &[1, 3]);
    assert_eq!(v["congestion_used"], "reno");
    let out = h.outcomes().pop().unwrap();
    assert_eq!(out.congestion, Some("reno"));
    assert_eq!(out.pacing_rate, Some(100_000_000));

    let ctrl = h.open("198.18.0.2");
    h.send(ctrl, COOKIE);
    h.send(ctrl, &params(json!({"congestion": "bbr"})));
    let mut want = vec![9];
    want.extend(server_error(ierrno::IESETCONGESTION, 0));
    assert_eq!(h.written(ctrl), want);
    let out = h.outcomes().pop().unwrap();
    assert!(
        matches!(&out.result, Err(Error::Refused { errno, reason })
            if *errno == ierrno::IESETCONGESTION && reason.contains("cubic, reno, newreno")),
        "{:?}",
        out.result
    );
}

#[test]
fn limits_checked_up_front_are_reported() {
    let mut h = Harness::new(ServerConfig {
        max_duration: Some(Duration::from_secs(5)),
        max_streams: 2,
        ..ServerConfig::default()
    });
    for (extra, refusal, code) in [
        (
            json!({"time": 6}),
            Refusal::MaxDuration,
            ierrno::IEMAXSERVERTESTDURATIONEXCEEDED,
        ),
        (
            json!({"parallel": 3}),
            Refusal::MaxStreams,
            ierrno::IENUMSTREAMS,
        ),
        (
            json!({"len": 1 << 30}),
            Refusal::Params,
            ierrno::IEBLOCKSIZE,
        ),
    ] {
        let ctrl = h.open("198.18.0.2");
        h.send(ctrl, COOKIE);
        h.send(ctrl, &params(extra));
        let mut want = vec![9];
        want.extend(server_error(code, 0));
        assert_eq!(h.written(ctrl), want);
        assert!(h.orders(ctrl).close);
        let out = h.outcomes().pop().unwrap();
        assert_eq!(out.refused, Some(refusal));
        assert!(out.ends_one_off());
        assert!(matches!(out.result, Err(Error::Refused { errno, .. }) if errno == code));
    }
}

/// A forward test whose two directions together go over the limit is
/// ended with IETOTALRATE: the client is told, its streams are reset.
#[test]
fn bitrate_limit_ends_a_running_test() {
    let mut h = Harness::new(ServerConfig {
        bitrate_limit: Some(BitrateLimit {
            bits_per_second: 8_000_000,
            window: Duration::from_secs(1),
        }),
        ..ServerConfig::default()
    });
    let (ctrl, data) = h.start("198.18.0.2", json!({"bidirectional": true, "time": 10}));
    h.count(data[0], 600_000, 0);
    h.count(data[1], 300_000, 0);
    h.advance(Duration::from_secs(1));
    assert!(
        h.written(ctrl).is_empty(),
        "900 kB in a second is under 1 MB/s"
    );
    h.count(data[0], 600_000, 0);
    h.count(data[1], 600_000, 0);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.written(ctrl), server_error(ierrno::IETOTALRATE, 0));
    assert!(h.orders(ctrl).close);
    for d in &data {
        assert!(h.orders(*d).abort);
    }
    let out = h.outcomes().pop().unwrap();
    assert_eq!(out.refused, None);
    assert_eq!(
        out.result,
        Err(Error::BitrateLimit {
            bits_per_second: 9_600_000,
            seconds: 1.0,
            limit: 8_000_000
        })
    );
    assert_eq!(out.received + out.sent, 2_100_000);
    assert_eq!(out.seconds, 2.0, "it ran until the server ended it");
}

/// Interrupted (Ctrl-C), the server tells the client (`SERVER_TERMINATE`)
/// and closes the control connection; its data connections are stopped
/// and closed, not reset: a client still writing then reads the server's
/// word before a write of its meets a reset. The outcome is the
/// interruption, with what was counted.
#[test]
fn an_interrupted_server_closes_its_data_connections_gently() {
    let mut h = Harness::new(ServerConfig::default());
    let (ctrl, data) = h.start("198.18.0.2", json!({"time": 30, "parallel": 2}));
    h.count(data[0], 1000, 0);
    h.advance(Duration::from_secs(1));
    let now = h.now;
    h.server.interrupt(now);
    assert_eq!(h.written(ctrl), vec![11], "SERVER_TERMINATE");
    assert!(h.orders(ctrl).close);
    for &d in &data {
        let o = h.orders(d);
        assert!(o.stop && o.close && !o.abort, "stream {d}: {o:?}");
    }
    let out = h.outcomes().pop().unwrap();
    assert_eq!(out.result, Err(Error::ServerInterrupted));
    assert_eq!(out.received, 1000);
}

/// A running test that makes no progress is ended by the idle timeout,
/// named in its result, counted from the last bytes (not from the next
/// check after them).
#[test]
fn idle_timeout_ends_a_stalled_test() {
    let mut h = Harness::new(ServerConfig {
        idle_timeout: Duration::from_secs(3),
        ..ServerConfig::default()
    });
    let (ctrl, data) = h.start("198.18.0.2", json!({"time": 30}));
    h.count(data[0], 1000, 0);
    h.advance(Duration::from_secs(2));
    h.count(data[0], 1000, 0);
    h.advance(Duration::from_secs(2));
    assert!(h.written(ctrl).is_empty(), "progress within 3 s");
    h.advance(Duration::from_millis(999));
    assert!(
        h.written(ctrl).is_empty(),
        "3 s after the last bytes: not yet"
    );
    h.advance(Duration::from_millis(1));
    assert_eq!(h.written(ctrl), server_error(ierrno::IENOMSG, 0));
    let out = h.outcomes().pop().unwrap();
    assert_eq!(
        out.result,
        Err(Error::IdleTimeout {
            idle: Duration::from_secs(3),
            flag: "--idle-timeout"
        })
    );
    assert_eq!(out.received, 2000);
    assert_eq!(out.seconds, 5.0, "it ran until the server ended it");
}

/// A data connection that fails while the test runs fails the test: the
/// client is told as iperf3's server tells a stream's failed write
/// (IESTREAMWRITE and the errno, ETIMEDOUT for a user timeout), once the
/// client has had a moment to end the test itself; the outcome names the
/// cause.
#[test]
fn a_failed_data_connection_fails_the_test() {
    let mut h = Harness::new(ServerConfig::default());
    let (ctrl, data) = h.start("198.18.0.2", json!({"time": 30, "reverse": true}));
    h.count(data[0], 1000, 0);
    h.advance(Duration::from_secs(1));
    h.handle(AppIn::Closed {
        id: data[0],
        reason: CloseReason::Error(ConnectionError::UserTimeout),
    });
    h.advance(Duration::from_millis(100));
    assert!(h.written(ctrl).is_empty(), "a moment for the client's word");
    h.advance(Duration::from_millis(100));
    assert_eq!(h.written(ctrl), server_error(ierrno::IESTREAMWRITE, 110));
    let out = h.outcomes().pop().unwrap();
    assert_eq!(
        out.result,
        Err(Error::StreamFailed(ConnectionError::UserTimeout))
    );
}

/// Retransmits arrive as counts since the last report; the results the
/// client gets and the outcome hold their sum per sending stream.
#[test]
fn retransmits_add_up_over_counts() {
    let mut h = Harness::new(ServerConfig::default());
    let (ctrl, data) = h.start("198.18.0.2", json!({"reverse": true, "parallel": 2}));
    assert!(h.orders(data[0]).send && h.orders(data[1]).send);
    h.count(data[0], 1000, 2);
    h.count(data[0], 1000, 3);
    h.count(data[1], 1000, 0);
    h.count(data[1], 1000, 4);
    h.count(data[1], 1000, 0);
    let v = h.finish_with_results(ctrl, &data, &[1, 3]);
    assert_eq!(v["streams"][0]["retransmits"], json!(5), "{v}");
    assert_eq!(v["streams"][1]["retransmits"], json!(4), "{v}");
    let out = h.outcomes().pop().unwrap();
    assert_eq!(out.result, Ok(()));
    assert_eq!((out.retransmits, out.sent), (9, 5000));
}

/// A new configuration applies to the next connections; a running test
/// keeps the one it started with (its limits, and its address stays
/// served).
#[test]
fn reload_applies_to_the_next_test_only() {
    let mut h = Harness::new(ServerConfig::default());
    let (tx, rx) = unbounded();
    h.server.set_reload(rx);
    let (ctrl, data) = h.start("198.18.0.2", json!({"time": 10}));
    let strict = ServerConfig {
        max_duration: Some(Duration::from_secs(5)),
        bitrate_limit: Some(BitrateLimit {
            bits_per_second: 8_000,
            window: Duration::from_secs(1),
        }),
        ..denied("", "198.18.0.2")
    };
    // Two reloads: the latest wins.
    tx.send(ServerConfig {
        max_streams: 1,
        ..ServerConfig::default()
    })
    .unwrap();
    tx.send(strict).unwrap();
    h.advance(Duration::from_millis(1));
    assert_eq!(h.server.config().max_duration, Some(Duration::from_secs(5)));
    // The running test (-t 10, far above 1 kB/s) goes on.
    for _ in 0..3 {
        h.count(data[0], 1_000_000, 0);
        h.advance(Duration::from_secs(1));
    }
    assert!(h.written(ctrl).is_empty(), "not ended by the new limits");
    h.finish(ctrl, &data, &[1]);
    let first = h.outcomes().pop().unwrap();
    assert_eq!((first.result, first.received), (Ok(()), 3_000_000));
    // The next ones get the new configuration.
    let again = h.open("198.18.0.2");
    assert_eq!(h.written(again), server_error(ierrno::IEAUTHTEST, 13));
    let other = h.open("198.18.0.3");
    h.send(other, COOKIE);
    h.send(other, &params(json!({"time": 10})));
    let mut want = vec![9];
    want.extend(server_error(ierrno::IEMAXSERVERTESTDURATIONEXCEEDED, 0));
    assert_eq!(h.written(other), want);
    let refused: Vec<_> = h.outcomes().iter().map(|o| o.refused).collect();
    assert_eq!(
        refused[1..],
        [Some(Refusal::Denied), Some(Refusal::MaxDuration)]
    );
}

/// `iperf3 -s -1 --idle-timeout N`: no connection for N seconds and the
/// server finishes; a connection starts the wait again.
#[test]
fn one_off_idle_exit() {
    let mut h = Harness::new(ServerConfig {
        exit_when_idle: Some(Duration::from_secs(2)),
        ..ServerConfig::default()
    });
    h.advance(Duration::ZERO);
    h.advance(Duration::from_millis(1500));
    assert!(!h.server.finished());
    let c = h.open("198.18.0.2");
    h.handle(AppIn::Closed {
        id: c,
        reason: CloseReason::Normal,
    });
    h.advance(Duration::from_millis(1500));
    assert!(!h.server.finished(), "the connection reset the wait");
    h.advance(Duration::from_millis(600));
    assert!(h.server.finished());
    // Without exit_when_idle it never finishes.
    let mut h = Harness::new(ServerConfig {
        idle_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    });
    h.advance(Duration::ZERO);
    h.advance(Duration::from_secs(60));
    assert!(!h.server.finished());
}

/// Authentication configured: the user is in the outcome; a bad password
/// is refused with IEAUTHTEST and reported as "auth".
#[test]
fn auth_outcomes() {
    let users = format!("alice,{}\n", password_hash("alice", "s3cret"));
    let a = Authenticator::from_text(
        &super::auth::testing::key_pkcs1_pem(),
        "k",
        &users,
        "u",
        DEFAULT_TIME_SKEW,
    )
    .unwrap();
    let mut h = Harness::new(ServerConfig {
        auth: Some(std::sync::Arc::new(a)),
        ..ServerConfig::default()
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let good = token("alice", "s3cret", now, Padding::Pkcs1);
    let (ctrl, data) = h.start("198.18.0.2", json!({ "authtoken": good }));
    h.finish(ctrl, &data, &[1]);
    let out = h.outcomes().pop().unwrap();
    assert_eq!((out.result, out.user.as_deref()), (Ok(()), Some("alice")));
    let ctrl = h.open("198.18.0.2");
    h.send(ctrl, COOKIE);
    let bad = token("alice", "s3cret!", now, Padding::Oaep);
    h.send(ctrl, &params(json!({ "authtoken": bad })));
    let mut want = vec![9];
    want.extend(server_error(ierrno::IEAUTHTEST, 0));
    assert_eq!(h.written(ctrl), want);
    let out = h.outcomes().pop().unwrap();
    assert_eq!(out.refused, Some(Refusal::Auth));
    assert_eq!(
        out.result,
        Err(Error::Auth(AuthError::BadPassword("alice".into())))
    );
    assert!(
        !out.ends_one_off(),
        "iperf3 -s -1 goes on after a failed login"
    );
}

/// An [`Iperf3Client`] whose test of `params` runs, its
/// `params.parallel` streams open; its orders to the control connection
/// and to each stream.
fn running_client(
    params: TestParams,
) -> (
    Iperf3Client,
    Receiver<AppOut>,
    Vec<Receiver<AppOut>>,
    Instant,
) {
    let streams = params.parallel as usize;
    let mut c = Iperf3Client::new(
        ClientConfig {
            params,
            ..ClientConfig::default()
        },
        Cookie::parse(COOKIE).unwrap(),
        None,
        Box::new(|_| {}),
    );
    let t0 = Instant::now();
    let tuple = FourTuple {
        local: "198.18.0.2:40000".parse().unwrap(),
        remote: SERVER.parse().unwrap(),
    };
    let opened = |id, out| AppIn::Opened {
        id,
        tuple,
        out,
        congestion: "cubic",
        mss: 1448,
    };
    let control = |bytes: &[u8]| AppIn::Data {
        id: 0,
        bytes: bytes.to_vec(),
    };
    let (tx0, rx0) = unbounded();
    c.handle(t0, opened(0, tx0));
    // PARAM_EXCHANGE, CREATE_STREAMS; the streams; TEST_START, TEST_RUNNING.
    c.handle(t0, control(&[9]));
    c.handle(t0, control(&[10]));
    let rxs = (1..=streams)
        .map(|id| {
            let (tx, rx) = unbounded();
            c.handle(t0, opened(id, tx));
            rx
        })
        .collect();
    c.handle(t0, control(&[1, 2]));
    assert!(!c.finished());
    (c, rx0, rxs, t0)
}

/// [`running_client`] of a 10-second test of two streams.
fn two_stream_client() -> (
    Iperf3Client,
    Receiver<AppOut>,
    Vec<Receiver<AppOut>>,
    Instant,
) {
    running_client(TestParams {
        time_secs: 10,
        parallel: 2,
        ..TestParams::default()
    })
}

/// A data connection that fails while the test runs (here its user
/// timeout) fails the test, as a stream's failed write fails iperf3's
/// client, unless the server tells why first: the server is told
/// (`IPERF_DONE`, as iperf3's client leaves after an error of its own),
/// the connections are reset, and the outcome names the cause. A reset
/// the server's `SERVER_TERMINATE` follows is the server's ending.
#[test]
fn client_fails_the_test_when_a_data_connection_fails() {
    let (mut c, rx0, rxs, t0) = two_stream_client();
    let t1 = t0 + Duration::from_secs(2);
    c.handle(
        t1,
        AppIn::Closed {
            id: 1,
            reason: CloseReason::Error(ConnectionError::UserTimeout),
        },
    );
    // The server may say why on the control connection: a moment for it.
    c.poll(t1 + Duration::from_millis(100));
    assert!(!c.finished());
    c.poll(t1 + Duration::from_millis(200));
    assert!(c.finished());
    let o = c.outcome().unwrap();
    assert_eq!(
        o.result,
        Err(Error::StreamFailed(ConnectionError::UserTimeout))
    );
    let written: Vec<u8> = rx0
        .try_iter()
        .filter_map(|o| match o {
            AppOut::Write(b) => Some(b),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(written.last(), Some(&16), "IPERF_DONE last: {written:?}");
    assert!(
        rxs[1].try_iter().any(|o| matches!(o, AppOut::Abort)),
        "the other stream reset"
    );

    let (mut c, _rx0, _rxs, t0) = two_stream_client();
    c.handle(
        t0,
        AppIn::Closed {
            id: 1,
            reason: CloseReason::Error(ConnectionError::Reset),
        },
    );
    c.handle(
        t0,
        AppIn::Data {
            id: 0,
            bytes: vec![11],
        },
    );
    c.poll(t0 + Duration::from_secs(1));
    assert_eq!(c.outcome().unwrap().result, Err(Error::ServerTerminated));
}

/// The client on the engine adds up the retransmits of its sending
/// streams too (counts carry those since the last).
#[test]
fn client_retransmits_add_up_over_counts() {
    let (mut c, rx0, _rxs, t0) = running_client(TestParams {
        time_secs: 1,
        ..TestParams::default()
    });
    for r in [1, 0, 6] {
        c.handle(
            t0,
            AppIn::Count {
                id: 1,
                bytes: 100,
                retransmits: r,
                rtt: None,
                tcp: Default::default(),
            },
        );
    }
    let t1 = t0 + Duration::from_secs(1);
    c.poll(t1);
    c.handle(t1, AppIn::Stopped { id: 1 });
    c.handle(
        t1,
        AppIn::Data {
            id: 0,
            bytes: vec![13],
        },
    );
    // What the client sent: cookie, parameters, TEST_END, its results.
    let mut out = Vec::new();
    while let Ok(o) = rx0.try_recv() {
        if let AppOut::Write(b) = o {
            out.extend(b);
        }
    }
    assert_eq!(&out[..COOKIE_LEN], COOKIE);
    let len = |at: usize| u32::from_be_bytes(out[at..at + 4].try_into().unwrap()) as usize;
    let at = COOKIE_LEN + 4 + len(COOKIE_LEN);
    assert_eq!(out[at], 4, "TEST_END after the parameters");
    let at = at + 1;
    let v: Value = serde_json::from_slice(&out[at + 4..at + 4 + len(at)]).unwrap();
    assert_eq!(v["streams"][0]["retransmits"], json!(7), "{v}");
}

/// The start callback sees every stream with its addresses; a client that
/// asks `get_server_output` gets what the server-output callback made
/// (JSON here) in its results, made from the test as the server counted
/// it and the client's results; the outcome carries each stream's TCP (largest windows, MSS,
/// congestion control), the client's results and the cookie; the
/// congestion control goes to the client as `congestion_used`.
#[test]
fn start_and_server_output_callbacks_and_stream_outcomes() {
    let mut h = Harness::new(ServerConfig::default());
    let started = Rc::new(RefCell::new(Vec::new()));
    let s = started.clone();
    h.server.set_on_start(Box::new(move |t: &TestStart| {
        s.borrow_mut()
            .push((t.client, t.streams.clone(), t.params.reverse));
    }));
    let made = Rc::new(RefCell::new(Vec::new()));
    let m = made.clone();
    h.server.set_server_output(Box::new(move |o: &TestOutcome| {
        m.borrow_mut().push(o.clone());
        ServerOutput::Json(json!({ "received": o.received, "streams": o.stream_outcomes.len() }))
    }));
    let (ctrl, data) = h.start(
        "198.18.0.2",
        json!({"reverse": true, "get_server_output": 1}),
    );
    {
        let st = started.borrow();
        assert_eq!(st.len(), 1);
        let (client, streams, reverse) = &st[0];
        assert_eq!(client.remote.port(), 40000 + ctrl as u16);
        assert!(reverse);
        assert_eq!(streams.len(), 1);
        assert_eq!(streams[0].0.id, StreamId(1));
        assert_eq!(streams[0].0.role, Role::Send);
        assert_eq!(streams[0].1.remote.port(), 40000 + data[0] as u16);
    }
    let sample = |cwnd, wnd| crate::worker::TcpSample {
        cwnd,
        snd_wnd: wnd,
        rttvar: Some(Duration::from_micros(30)),
        mss: 1448,
        pmtu: 1500,
        congestion: "cubic",
    };
    for (bytes, cwnd, wnd) in [(1000, 50_000, 70_000), (2000, 40_000, 90_000)] {
        h.handle(AppIn::Count {
            id: data[0],
            bytes,
            retransmits: 1,
            rtt: Some(Duration::from_micros(100)),
            tcp: sample(cwnd, wnd),
        });
    }
    let v = h.finish_with_results(ctrl, &data, &[1]);
    assert_eq!(
        v["server_output_json"],
        json!({ "received": 0, "streams": 1 }),
        "{v}"
    );
    assert!(v.get("server_output_text").is_none(), "{v}");
    assert_eq!(v["congestion_used"], "cubic", "{v}");
    let snap = made.borrow()[0].clone();
    assert_eq!((snap.sent, snap.result.clone()), (3000, Ok(())));
    assert_eq!(
        snap.peer.as_ref().map(|p| p.streams[0].bytes),
        Some(1000),
        "made with the client's results in"
    );
    let out = h.outcomes().pop().unwrap();
    assert_eq!(
        out.cookie.map(|c| c.as_bytes().to_vec()),
        Some(COOKIE.to_vec())
    );
    assert_eq!(out.peer.as_ref().map(|p| p.streams[0].bytes), Some(1000));
    let s = &out.stream_outcomes[0];
    assert_eq!(
        (s.id, s.role, s.bytes, s.retransmits),
        (StreamId(1), Role::Send, 3000, 2)
    );
    assert_eq!(s.tuple.remote.port(), 40000 + data[0] as u16);
    assert_eq!(
        (
            s.tcp.max_snd_cwnd,
            s.tcp.max_snd_wnd,
            s.tcp.mss,
            s.tcp.congestion
        ),
        (50_000, 90_000, 1448, "cubic")
    );
    assert_eq!(s.rtt.map(|r| r.max), Some(Duration::from_micros(100)));
}

/// Without a server-output callback, a client asking for the server's
/// output gets the line with the byte counts.
#[test]
fn server_output_without_a_callback_is_the_counts() {
    let mut h = Harness::new(ServerConfig::default());
    let (ctrl, data) = h.start("198.18.0.2", json!({"get_server_output": 1}));
    h.count(data[0], 1234, 0);
    let v = h.finish_with_results(ctrl, &data, &[1]);
    assert_eq!(
        v["server_output_text"], "xtcp serve: 1234 bytes received, 0 sent\n",
        "{v}"
    );
}
