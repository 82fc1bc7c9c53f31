//! Scripted byte exchanges, malformed input, and an in-memory client/server
//! pair on a virtual clock.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const COOKIE: &[u8; COOKIE_LEN] = b"abcdefghijklmnopqrstuvwxyz234567abcd\0";

fn frame(v: &Value) -> Vec<u8> {
    let text = v.to_string();
    let mut out = (text.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out
}

/// Splits a framed JSON message off the front of `bytes`.
fn unframe(bytes: &[u8]) -> (Value, &[u8]) {
    let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    let v = serde_json::from_slice(&bytes[4..4 + len]).unwrap();
    (v, &bytes[4 + len..])
}

/// What iperf3 3.12 sends for `iperf3 -c X -t 1 -P 2`.
fn params_312(extra: Value) -> Value {
    let mut v = json!({"tcp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":2,
        "len":131072,"pacing_timer":1000,"client_version":"3.12"});
    if let (Value::Object(m), Value::Object(x)) = (&mut v, extra) {
        m.extend(x);
    }
    v
}

/// Client results as iperf3 3.12 sends them for a forward two-stream test.
fn client_results(ids: &[u32], bytes: u64) -> Value {
    let streams: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({"id":id,"bytes":bytes,"retransmits":0,"jitter":0,"errors":0,
            "packets":0,"start_time":0,"end_time":1.000123})
        })
        .collect();
    json!({"cpu_util_total":1.5,"cpu_util_user":0.5,"cpu_util_system":1.0,
        "sender_has_retransmits":1,"congestion_used":"bbr","streams":streams})
}

fn events_server(s: &mut ServerSession) -> Vec<Event> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn events_client(c: &mut ClientSession) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn out_server(s: &mut ServerSession) -> Vec<u8> {
    s.poll_transmit().unwrap_or_default()
}

fn only_error(events: &[Event]) -> &Error {
    match events {
        [Event::Error(e)] => e,
        other => panic!("expected exactly one error event, got {other:?}"),
    }
}

// ---- vocabulary ---------------------------------------------------------

#[test]
fn state_bytes_match_iperf_api_h() {
    let table: [(State, i8); 18] = [
        (State::TestStart, 1),
        (State::TestRunning, 2),
        (State::ResultRequest, 3),
        (State::TestEnd, 4),
        (State::StreamBegin, 5),
        (State::StreamRunning, 6),
        (State::StreamEnd, 7),
        (State::AllStreamsEnd, 8),
        (State::ParamExchange, 9),
        (State::CreateStreams, 10),
        (State::ServerTerminate, 11),
        (State::ClientTerminate, 12),
        (State::ExchangeResults, 13),
        (State::DisplayResults, 14),
        (State::IperfStart, 15),
        (State::IperfDone, 16),
        (State::AccessDenied, -1),
        (State::ServerError, -2),
    ];
    for (s, v) in table {
        assert_eq!(s.to_i8(), v);
        assert_eq!(State::from_byte(v as u8), Some(s));
    }
    assert_eq!(ACCESS_DENIED_BYTE, 0xff);
    assert_eq!(State::ServerError.to_byte(), 0xfe);
    for b in [0u8, 17, 0x7f, 0x80, 0xfd] {
        assert_eq!(State::from_byte(b), None, "{b:#x}");
    }
}

#[test]
fn cookie_from_entropy_uses_iperf_alphabet() {
    let c = Cookie::from_entropy(&[0xffu8; 36]);
    assert_eq!(c.as_bytes()[36], 0);
    assert_eq!(c.as_str(), "7".repeat(36)); // 255 % 32 = 31 → '7'
    let mut e = [0u8; 36];
    for (i, b) in e.iter_mut().enumerate() {
        *b = i as u8;
    }
    let c = Cookie::from_entropy(&e);
    assert_eq!(&c.as_str()[..32], "abcdefghijklmnopqrstuvwxyz234567");
    assert_eq!(Cookie::parse(c.as_bytes()), Ok(c));
}

#[test]
fn cookie_parse_rejects_malformed() {
    assert!(Cookie::parse(COOKIE).is_ok());
    assert_eq!(Cookie::parse(&COOKIE[..36]), Err(Error::BadCookie)); // truncated
    let mut no_nul = *COOKIE;
    no_nul[36] = b'x';
    assert_eq!(Cookie::parse(&no_nul), Err(Error::BadCookie));
    let mut binary = *COOKIE;
    binary[3] = 0x01;
    assert_eq!(Cookie::parse(&binary), Err(Error::BadCookie));
    let mut space = *COOKIE;
    space[10] = b' ';
    assert_eq!(Cookie::parse(&space), Err(Error::BadCookie));
    let mut long = COOKIE.to_vec();
    long.push(0);
    assert_eq!(Cookie::parse(&long), Err(Error::BadCookie));
}

#[test]
fn params_round_trip_and_iperf312_document() {
    let p = TestParams {
        time_secs: 3,
        omit_secs: 1,
        bytes: 10 << 20,
        parallel: 4,
        reverse: true,
        window: Some(65536),
        block_len: 8192,
        title: Some("t".into()),
        client_version: Some("xtcp".into()),
        get_server_output: true,
        server_affinity: Some(1),
        congestion: Some("reno".into()),
        bandwidth: Some(200_000_000),
        mss: Some(1000),
        ..TestParams::default()
    };
    let Value::Object(m) = p.to_json() else {
        panic!()
    };
    assert_eq!(m["tcp"], json!(true));
    assert_eq!(m["num"], json!(10 << 20));
    // iperf3's names for -A n,m, -C, -b, -M.
    assert_eq!(m["server_affinity"], json!(1));
    assert_eq!(m["congestion"], json!("reno"));
    assert_eq!(m["bandwidth"], json!(200_000_000));
    assert_eq!(m["MSS"], json!(1000));
    assert_eq!(TestParams::from_json(&m), Ok(p));

    let Value::Object(m) = params_312(json!({})) else {
        panic!()
    };
    let p = TestParams::from_json(&m).unwrap();
    assert_eq!((p.parallel, p.time_secs, p.block_len), (2, 1, 131072));
    assert_eq!(p.pacing_timer, Some(1000));
    assert_eq!(p.client_version.as_deref(), Some("3.12"));
    assert!(!p.reverse && !p.bidirectional);
    assert_eq!(p.validate(128), Ok(()));
}

#[test]
fn params_accept_cjson_doubles_and_reject_bad_types() {
    let Value::Object(m) = params_312(json!({"num": 1e15, "time": 0})) else {
        panic!()
    };
    assert_eq!(
        TestParams::from_json(&m).unwrap().bytes,
        1_000_000_000_000_000
    );
    for bad in [
        json!({"parallel": "2"}),
        json!({"parallel": -1}),
        json!({"time": 1e12}),
        json!({"title": 5}),
    ] {
        let Value::Object(m) = params_312(bad.clone()) else {
            panic!()
        };
        assert!(
            matches!(TestParams::from_json(&m), Err(Error::BadParams(_))),
            "{bad}"
        );
    }
    let Value::Object(m) = json!({"omit":0,"time":1,"parallel":1}) else {
        panic!()
    };
    assert!(matches!(
        TestParams::from_json(&m),
        Err(Error::BadParams(_))
    ));
}

#[test]
fn params_validate_ranges() {
    let ok = TestParams::default();
    assert_eq!(ok.validate(128), Ok(()));
    let cases = [
        (
            TestParams {
                parallel: 0,
                ..ok.clone()
            },
            ierrno::IENUMSTREAMS,
        ),
        (
            TestParams {
                parallel: 65,
                bidirectional: true,
                ..ok.clone()
            },
            ierrno::IENUMSTREAMS,
        ),
        (
            TestParams {
                block_len: MAX_BLOCK_LEN + 1,
                ..ok.clone()
            },
            ierrno::IEBLOCKSIZE,
        ),
        (
            TestParams {
                time_secs: MAX_TIME_SECS + 1,
                ..ok.clone()
            },
            ierrno::IEDURATION,
        ),
        (
            TestParams {
                omit_secs: MAX_OMIT_SECS + 1,
                ..ok.clone()
            },
            ierrno::IEOMIT,
        ),
        (
            TestParams {
                protocol: Protocol::Udp,
                ..ok.clone()
            },
            ierrno::IEUNIMP,
        ),
        (
            TestParams {
                reverse: true,
                bidirectional: true,
                ..ok.clone()
            },
            ierrno::IEREVERSEBIDIR,
        ),
    ];
    for (p, code) in cases {
        assert_eq!(p.validate(128).map_err(|e| e.0), Err(code), "{p:?}");
    }
}

/// A server's output travels in the results both ways: text, or a JSON
/// object (`iperf3 -s -J`'s `server_output_json`); anything but an object
/// there is refused.
#[test]
fn results_carry_the_servers_output_text_or_json() {
    let mut v = client_results(&[1], 5);
    v["server_output_json"] = json!({"end": {"sum_received": {"bytes": 5}}});
    v["server_output_text"] = json!("Accepted connection from …\n");
    let Value::Object(m) = v else { panic!() };
    let r = Results::from_json(&m, 1).unwrap();
    assert_eq!(
        r.server_output_json,
        Some(json!({"end": {"sum_received": {"bytes": 5}}}))
    );
    assert_eq!(
        r.server_output_text.as_deref(),
        Some("Accepted connection from …\n")
    );
    let Value::Object(again) = r.to_json() else {
        panic!()
    };
    assert_eq!(Results::from_json(&again, 1).unwrap(), r);
    let mut v = client_results(&[1], 5);
    v["server_output_json"] = json!("not an object");
    let Value::Object(m) = v else { panic!() };
    assert!(matches!(
        Results::from_json(&m, 1),
        Err(Error::BadResults(_))
    ));
}

#[test]
fn results_parse_iperf312_and_reject_missing_fields() {
    let Value::Object(m) = client_results(&[1, 3], 2_500_000_000) else {
        panic!()
    };
    let r = Results::from_json(&m, 2).unwrap();
    assert_eq!(r.streams.len(), 2);
    assert_eq!(r.streams[1].id, 3);
    assert_eq!(r.streams[0].bytes, 2_500_000_000);
    assert_eq!(r.congestion_used.as_deref(), Some("bbr"));
    assert!(matches!(
        Results::from_json(&m, 1),
        Err(Error::BadResults(_))
    ));
    for key in ["cpu_util_total", "sender_has_retransmits", "streams"] {
        let mut m2 = m.clone();
        m2.remove(key);
        assert!(
            matches!(Results::from_json(&m2, 2), Err(Error::BadResults(_))),
            "{key}"
        );
    }
    for key in ["id", "bytes", "retransmits", "jitter", "errors", "packets"] {
        let mut v = client_results(&[1], 5);
        v["streams"][0].as_object_mut().unwrap().remove(key);
        let Value::Object(m2) = v else { panic!() };
        assert!(
            matches!(Results::from_json(&m2, 2), Err(Error::BadResults(_))),
            "{key}"
        );
    }
    // start_time / end_time are optional (pre-3.2 servers).
    let mut v = client_results(&[1], 5);
    v["streams"][0].as_object_mut().unwrap().remove("end_time");
    let Value::Object(m2) = v else { panic!() };
    assert_eq!(
        Results::from_json(&m2, 2).unwrap().streams[0].end_time,
        None
    );
}

/// Debian's iperf3 3.12 (system cJSON 1.7.15) prints -1 as 2^64-1; this is
/// what its server sent for a forward test, verbatim.
#[test]
fn results_accept_debian_cjson_minus_one() {
    let text = br#"{"cpu_util_total":21.1586778753918,"cpu_util_user":0.73531097235856624,"cpu_util_system":20.423267240391276,"sender_has_retransmits":18446744073709551615,"congestion_used":"bbr","streams":[{"id":1,"bytes":668811581,"retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":1.003357}]}"#;
    let Value::Object(m) = serde_json::from_slice(text).unwrap() else {
        panic!()
    };
    let r = Results::from_json(&m, 1).unwrap();
    assert_eq!(r.sender_has_retransmits, -1);
    assert_eq!(r.streams[0].retransmits, -1);
    assert_eq!(r.streams[0].bytes, 668_811_581);
    assert_eq!(r.streams[0].end_time, Some(1.003357));
}

// ---- server, scripted ---------------------------------------------------

/// Drives a server through cookie and parameters; returns it in CREATE_STREAMS.
fn server_at_create_streams(extra: Value, t0: Instant) -> ServerSession {
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    s.handle_control(t0, COOKIE);
    assert_eq!(out_server(&mut s), [9]);
    s.handle_control(t0, &frame(&params_312(extra)));
    assert_eq!(out_server(&mut s), [10]);
    s
}

#[test]
fn server_full_scripted_exchange() {
    let t0 = Instant::now();
    let mut s = server_at_create_streams(json!({}), t0);
    assert_eq!(
        events_server(&mut s),
        [Event::CreateStreams {
            count: 2,
            reverse: false,
            bidir: false
        }]
    );
    assert!(s.expects_streams());
    // A stray connection with another cookie is refused, the test goes on.
    let mut other = *COOKIE;
    other[0] = b'z';
    assert_eq!(s.accept_stream(t0, &other), Err(Error::WrongCookie));
    assert_eq!(s.accept_stream(t0, b"garbage"), Err(Error::BadCookie));
    let a = s.accept_stream(t0, COOKIE).unwrap();
    assert_eq!(out_server(&mut s), Vec::<u8>::new());
    let b = s.accept_stream(t0, COOKIE).unwrap();
    assert_eq!((a.id, a.role), (StreamId(1), Role::Receive));
    assert_eq!((b.id, b.role), (StreamId(3), Role::Receive));
    assert_eq!(out_server(&mut s), [1, 2]);
    assert!(!s.expects_streams());
    assert_eq!(s.accept_stream(t0, COOKIE), Err(Error::NotAcceptingStreams));
    let ev = events_server(&mut s);
    assert!(matches!(&ev[..], [Event::StartTest { params }] if params.parallel == 2));

    assert!(s.record_bytes(StreamId(1), 1000));
    assert!(s.record_bytes(StreamId(3), 2000));
    assert!(!s.record_bytes(StreamId(2), 1));
    let t1 = t0 + Duration::from_millis(1000);
    s.handle_control(t1, &[4]);
    assert_eq!(events_server(&mut s), [Event::TestEnd]);
    assert_eq!(out_server(&mut s), Vec::<u8>::new());
    s.record_bytes(StreamId(3), 500); // drained after TEST_END
    s.end_test(
        t1,
        EndReport {
            cpu_util_total: 2.0,
            ..EndReport::default()
        },
    )
    .unwrap();
    assert_eq!(out_server(&mut s), [13]);
    s.handle_control(t1, &frame(&client_results(&[1, 3], 1750)));
    let out = out_server(&mut s);
    let (v, rest) = unframe(&out);
    assert_eq!(rest, [14]);
    assert_eq!(v["cpu_util_total"], json!(2.0));
    assert_eq!(v["sender_has_retransmits"], json!(-1)); // only received
    assert_eq!(v["streams"][0]["id"], json!(1));
    assert_eq!(v["streams"][0]["bytes"], json!(1000));
    assert_eq!(v["streams"][1]["id"], json!(3));
    assert_eq!(v["streams"][1]["bytes"], json!(2500));
    assert_eq!(v["streams"][1]["retransmits"], json!(-1));
    assert_eq!(v["streams"][1]["end_time"], json!(1.0));
    let ev = events_server(&mut s);
    assert!(
        matches!(&ev[..], [Event::PeerResults(r)] if r.streams.len() == 2 && r.cpu_util_total == 1.5)
    );
    assert!(!s.is_finished());
    s.handle_control(t1, &[16]);
    assert_eq!(events_server(&mut s), [Event::Done]);
    assert!(s.is_finished());
    assert_eq!(s.counted_bytes(Role::Receive), 3500);
}

#[test]
fn route_new_connections() {
    let t0 = Instant::now();
    assert_eq!(route(None), Route::Control);
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    assert_eq!(route(Some(&s)), Route::Refuse);
    s.handle_control(t0, COOKIE);
    s.handle_control(t0, &frame(&params_312(json!({"parallel": 1}))));
    assert_eq!(route(Some(&s)), Route::Data);
    s.accept_stream(t0, COOKIE).unwrap();
    assert_eq!(route(Some(&s)), Route::Refuse);
    s.handle_control(t0, &[0x55]);
    assert!(s.is_finished());
    assert_eq!(route(Some(&s)), Route::Control);
}

#[test]
fn stream_ids_follow_iperf_numbering() {
    let ids: Vec<u32> = (0..5).map(|i| StreamId::from_index(i).0).collect();
    assert_eq!(ids, [1, 3, 4, 5, 6]);
    let t0 = Instant::now();
    let mut s = server_at_create_streams(json!({"parallel": 3}), t0);
    for _ in 0..3 {
        s.accept_stream(t0, COOKIE).unwrap();
    }
    for (id, ok) in [
        (0, false),
        (1, true),
        (2, false),
        (3, true),
        (4, true),
        (5, false),
    ] {
        assert_eq!(s.record_bytes(StreamId(id), 1), ok, "id {id}");
    }
    assert!(!s.record_bytes(StreamId(u32::MAX), 1));
}

#[test]
fn server_accepts_input_one_byte_at_a_time() {
    let t0 = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    let mut out = Vec::new();
    let mut script = COOKIE.to_vec();
    script.extend(frame(&params_312(json!({"reverse": true, "parallel": 1}))));
    for b in &script {
        s.handle_control(t0, std::slice::from_ref(b));
        out.extend(out_server(&mut s));
    }
    assert_eq!(out, [9, 10]);
    let info = s.accept_stream(t0, COOKIE).unwrap();
    assert_eq!(info.role, Role::Send);
    assert_eq!(out_server(&mut s), [1, 2]);
}

#[test]
fn server_bidir_roles_and_retransmits() {
    let t0 = Instant::now();
    let mut s = server_at_create_streams(json!({"bidirectional": true}), t0);
    assert_eq!(
        events_server(&mut s),
        [Event::CreateStreams {
            count: 4,
            reverse: false,
            bidir: true
        }]
    );
    let infos: Vec<_> = (0..4)
        .map(|_| s.accept_stream(t0, COOKIE).unwrap())
        .collect();
    let want = [
        (1, Role::Receive),
        (3, Role::Receive),
        (4, Role::Send),
        (5, Role::Send),
    ];
    for (i, (id, role)) in infos.iter().zip(want) {
        assert_eq!((i.id.0, i.role), (id, role));
    }
    s.record_bytes(StreamId(4), 10);
    assert!(s.add_retransmits(StreamId(4), 7));
    s.handle_control(t0, &[4]);
    s.end_test(
        t0,
        EndReport {
            sender_has_retransmits: true,
            ..EndReport::default()
        },
    )
    .unwrap();
    out_server(&mut s);
    s.handle_control(t0, &frame(&client_results(&[1, 3, 4, 5], 1)));
    let (v, _) = unframe(&out_server(&mut s));
    assert_eq!(v["sender_has_retransmits"], json!(1));
    assert_eq!(v["streams"][0]["retransmits"], json!(-1));
    assert_eq!(v["streams"][2]["retransmits"], json!(7));
    assert_eq!(v["streams"][3]["retransmits"], json!(0));
}

#[test]
fn server_omit_period_is_not_counted() {
    let t0 = Instant::now();
    let mut s = server_at_create_streams(json!({"omit": 1, "parallel": 1}), t0);
    s.accept_stream(t0, COOKIE).unwrap();
    assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    s.record_bytes(StreamId(1), 100);
    assert_eq!(s.counted_from(), None);
    s.handle_timeout(t0 + Duration::from_secs(1));
    s.record_bytes(StreamId(1), 40);
    assert_eq!(s.counted_bytes(Role::Receive), 40);
    assert_eq!(s.streams()[0].total_bytes, 140);
    // The counted bytes' seconds (a rate's) begin where they began.
    assert_eq!(s.counted_from(), Some(t0 + Duration::from_secs(1)));
}

/// Retransmits in the omitted seconds do not count, as iperf3 resets its
/// count when they end (`-O` with `-R`: the server sends).
#[test]
fn server_omit_period_retransmits_are_not_counted() {
    let t0 = Instant::now();
    let mut s = server_at_create_streams(json!({"omit": 1, "parallel": 1, "reverse": true}), t0);
    let info = s.accept_stream(t0, COOKIE).unwrap();
    assert_eq!(info.role, Role::Send);
    assert!(s.add_retransmits(info.id, 1015));
    s.handle_timeout(t0 + Duration::from_secs(1));
    assert_eq!(s.retransmits(), 0);
    assert!(s.add_retransmits(info.id, 1131));
    assert!(s.add_retransmits(info.id, 986));
    assert_eq!(s.retransmits(), 2117);
    assert_eq!(s.streams()[0].counted_retransmits(), Some(2117));
}

#[test]
fn server_rejects_garbage_cookie_silently() {
    let t0 = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    s.handle_control(t0, b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(only_error(&events_server(&mut s)), &Error::BadCookie);
    assert!(s.is_finished());
    assert_eq!(s.poll_transmit(), None); // not an iperf3 peer: no answer
}

#[test]
fn server_huge_length_prefix_fails_at_once() {
    let t0 = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    s.handle_control(t0, COOKIE);
    out_server(&mut s);
    s.handle_control(t0, &[0xff, 0xff, 0xff, 0xff]);
    assert!(matches!(
        only_error(&events_server(&mut s)),
        Error::MessageTooLong {
            len: 0xffff_ffff,
            ..
        }
    ));
    let mut want = vec![0xfe];
    want.extend(114i32.to_be_bytes());
    want.extend(0i32.to_be_bytes());
    assert_eq!(out_server(&mut s), want);
}

#[test]
fn server_rejects_bad_json_and_bad_params() {
    let t0 = Instant::now();
    type Check = fn(&Error) -> bool;
    let bad: Vec<(Vec<u8>, Check)> = vec![
        (b"\0\0\0\x04{\"tc".to_vec(), |e| {
            matches!(e, Error::BadJson(_))
        }),
        (b"\0\0\0\x02[]".to_vec(), |e| matches!(e, Error::BadJson(_))),
        (b"\0\0\0\x04\xff\xfe{}".to_vec(), |e| {
            matches!(e, Error::BadJson(_))
        }),
        (frame(&json!({"time": 1})), |e| {
            matches!(e, Error::BadParams(_))
        }),
        (frame(&params_312(json!({"parallel": 1000}))), |e| {
            matches!(e, Error::Refused { errno: 6, .. })
        }),
        (frame(&params_312(json!({"udp": true}))), |e| {
            matches!(e, Error::Refused { errno: 13, .. })
        }),
        (frame(&params_312(json!({"len": "big"}))), |e| {
            matches!(e, Error::BadParams(_))
        }),
    ];
    for (bytes, check) in bad {
        let mut s = ServerSession::new(ServerConfig::default(), t0);
        s.handle_control(t0, COOKIE);
        s.handle_control(t0, &bytes);
        let ev = events_server(&mut s);
        assert!(
            check(only_error(&ev)),
            "{:?}: {ev:?}",
            String::from_utf8_lossy(&bytes)
        );
        let out = out_server(&mut s);
        assert_eq!(out[..2], [9, 0xfe], "SERVER_ERROR follows PARAM_EXCHANGE");
        assert!(s.is_finished());
    }
}

#[test]
fn server_truncated_input_then_eof() {
    let t0 = Instant::now();
    for cut in [10, COOKIE_LEN, COOKIE_LEN + 2, COOKIE_LEN + 20] {
        let mut script = COOKIE.to_vec();
        script.extend(frame(&params_312(json!({}))));
        let mut s = ServerSession::new(ServerConfig::default(), t0);
        s.handle_control(t0, &script[..cut]);
        assert!(events_server(&mut s).is_empty(), "cut {cut}");
        s.handle_control_eof(t0, ControlEnd::Reset);
        let e = only_error(&events_server(&mut s)).clone();
        assert!(
            matches!(
                e,
                Error::ControlClosed {
                    how: ControlEnd::Reset,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().ends_with("(reset by the peer)"), "{e}");
    }
}

#[test]
fn server_rejects_bad_state_bytes() {
    let t0 = Instant::now();
    for (byte, check) in [
        (0x55u8, Error::UnknownState(0x55)),
        (16, Error::ClientQuit { phase: "running" }),
        (12, Error::ClientTerminated),
    ] {
        let mut s = server_at_create_streams(json!({"parallel": 1}), t0);
        s.accept_stream(t0, COOKIE).unwrap();
        events_server(&mut s);
        s.handle_control(t0, &[byte]);
        assert_eq!(only_error(&events_server(&mut s)), &check);
        // Later input is ignored.
        s.handle_control(t0, &[4]);
        assert!(events_server(&mut s).is_empty());
    }
}

#[test]
fn server_rejects_results_naming_unknown_streams() {
    let t0 = Instant::now();
    let mut s = server_at_create_streams(json!({"parallel": 1}), t0);
    s.accept_stream(t0, COOKIE).unwrap();
    s.handle_control(t0, &[4]);
    s.end_test(t0, EndReport::default()).unwrap();
    events_server(&mut s);
    s.handle_control(t0, &frame(&client_results(&[2], 1)));
    assert_eq!(only_error(&events_server(&mut s)), &Error::UnknownStream(2));
}

#[test]
fn server_input_buffer_is_bounded() {
    let t0 = Instant::now();
    let cfg = ServerConfig {
        max_json_len: 100,
        ..ServerConfig::default()
    };
    let mut s = ServerSession::new(cfg, t0);
    s.handle_control(t0, COOKIE);
    // A length the limit allows, but more bytes than the buffer takes.
    s.handle_control(t0, &[0, 0, 0, 90]);
    assert!(events_server(&mut s).is_empty());
    s.handle_control(t0, &[b' '; 1000]);
    assert!(matches!(
        only_error(&events_server(&mut s)),
        Error::BufferFull { .. }
    ));
    // Over the limit by one: refused on the length alone.
    let mut s = ServerSession::new(
        ServerConfig {
            max_json_len: 100,
            ..ServerConfig::default()
        },
        t0,
    );
    s.handle_control(t0, COOKIE);
    s.handle_control(t0, &[0, 0, 0, 101]);
    assert_eq!(
        only_error(&events_server(&mut s)),
        &Error::MessageTooLong { len: 101, max: 100 }
    );
}

#[test]
fn server_end_test_only_after_test_end() {
    let t0 = Instant::now();
    let mut s = server_at_create_streams(json!({"parallel": 1}), t0);
    assert!(matches!(
        s.end_test(t0, EndReport::default()),
        Err(Error::WrongPhase { .. })
    ));
}

#[test]
fn server_timeouts() {
    let t0 = Instant::now();
    let hs = DEFAULT_HANDSHAKE_TIMEOUT;
    // Stalled before the cookie: no answer.
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    assert_eq!(s.poll_timeout(), Some(t0 + hs));
    s.handle_timeout(t0 + hs - Duration::from_millis(1));
    assert!(events_server(&mut s).is_empty());
    s.handle_timeout(t0 + hs);
    assert!(matches!(
        only_error(&events_server(&mut s)),
        Error::Timeout { .. }
    ));
    assert_eq!(s.poll_transmit(), None);
    assert_eq!(s.poll_timeout(), None);

    // Streams never connect.
    let mut s = server_at_create_streams(json!({}), t0);
    s.handle_timeout(t0 + hs);
    assert!(matches!(
        events_server(&mut s).last(),
        Some(Event::Error(Error::Timeout { .. }))
    ));
    assert_eq!(out_server(&mut s)[0], 0xfe);

    // Running: data progress pushes the idle deadline; silence ends it.
    let cfg = ServerConfig {
        idle_timeout: Duration::from_secs(5),
        end_grace: Duration::from_secs(1),
        ..ServerConfig::default()
    };
    let mut s = ServerSession::new(cfg.clone(), t0);
    s.handle_control(t0, COOKIE);
    s.handle_control(
        t0,
        &frame(&params_312(json!({"parallel": 1, "time": 0, "num": 1000}))),
    );
    s.accept_stream(t0, COOKIE).unwrap();
    events_server(&mut s);
    let idle = t0 + Duration::from_secs(5);
    assert_eq!(s.poll_timeout(), Some(idle));
    s.record_bytes(StreamId(1), 1);
    s.handle_timeout(idle);
    assert!(events_server(&mut s).is_empty());
    assert_eq!(s.poll_timeout(), Some(idle + Duration::from_secs(5)));
    s.handle_timeout(idle + Duration::from_secs(5));
    let ev = events_server(&mut s);
    let e = only_error(&ev);
    assert_eq!(
        e,
        &Error::IdleTimeout {
            idle: Duration::from_secs(5),
            flag: "--idle-timeout"
        }
    );
    assert!(e.to_string().contains("idle timeout"), "{e}");
    assert!(out_server(&mut s).ends_with(&server_error(ierrno::IENOMSG, 0)));

    // Timed test: dead after omit + time + grace even with data flowing.
    let mut s = ServerSession::new(cfg, t0);
    s.handle_control(t0, COOKIE);
    s.handle_control(t0, &frame(&params_312(json!({"parallel": 1, "time": 2}))));
    s.accept_stream(t0, COOKIE).unwrap();
    events_server(&mut s);
    assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(3)));
    s.record_bytes(StreamId(1), 1);
    s.handle_timeout(t0 + Duration::from_secs(3));
    assert!(matches!(
        only_error(&events_server(&mut s)),
        Error::Timeout { .. }
    ));
}

#[test]
fn server_eof_after_display_results_is_done() {
    let t0 = Instant::now();
    let mut s = server_at_create_streams(json!({"parallel": 1}), t0);
    s.accept_stream(t0, COOKIE).unwrap();
    s.handle_control(t0, &[4]);
    s.end_test(t0, EndReport::default()).unwrap();
    s.handle_control(t0, &frame(&client_results(&[1], 1)));
    events_server(&mut s);
    s.handle_control_eof(t0, ControlEnd::Closed);
    assert_eq!(events_server(&mut s), [Event::Done]);
}

#[test]
fn server_terminate_sends_server_terminate() {
    let t0 = Instant::now();
    let mut s = server_at_create_streams(json!({}), t0);
    s.terminate(t0);
    assert_eq!(out_server(&mut s), [11]);
    assert!(s.is_finished());
}

// ---- server limits --------------------------------------------------------

/// What a server writes after `SERVER_ERROR`: its code and errno.
fn server_error(i_errno: i32, errno: i32) -> Vec<u8> {
    let mut v = vec![0xfe];
    v.extend(i_errno.to_be_bytes());
    v.extend(errno.to_be_bytes());
    v
}

/// Cookie and parameters into a session with `cfg` at `t0`: its output and
/// events.
fn offer(cfg: ServerConfig, t0: Instant, extra: Value) -> (ServerSession, Vec<u8>, Vec<Event>) {
    let mut s = ServerSession::new(cfg, t0).with_wall_clock(std::time::SystemTime::now());
    s.handle_control(t0, COOKIE);
    s.handle_control(t0, &frame(&params_312(extra)));
    let out = out_server(&mut s);
    let ev = events_server(&mut s);
    (s, out, ev)
}

/// The session refused the parameters with `i_errno`, for `refusal`.
fn assert_refused(
    (s, out, ev): (ServerSession, Vec<u8>, Vec<Event>),
    i_errno: i32,
    refusal: Refusal,
) -> Error {
    let mut want = vec![9];
    want.extend(server_error(i_errno, 0));
    assert_eq!(out, want, "PARAM_EXCHANGE, then SERVER_ERROR {i_errno}");
    assert!(s.is_finished());
    assert_eq!(s.refusal(), Some(refusal));
    match &ev[..] {
        [Event::Error(e)] => e.clone(),
        other => panic!("{other:?}"),
    }
}

fn accepted((s, out, ev): (ServerSession, Vec<u8>, Vec<Event>)) -> ServerSession {
    assert_eq!(out, [9, 10], "CREATE_STREAMS: {ev:?}");
    assert!(matches!(&ev[..], [Event::CreateStreams { .. }]), "{ev:?}");
    assert_eq!(s.refusal(), None);
    s
}

fn max_duration(secs: u64) -> ServerConfig {
    ServerConfig {
        max_duration: Some(Duration::from_secs(secs)),
        ..ServerConfig::default()
    }
}

/// iperf3 3.20's `--server-max-duration`: `-t` + `-O` above it, or no `-t`
/// at all (`-n`, `-k`), is refused with IEMAXSERVERTESTDURATIONEXCEEDED.
#[test]
fn max_duration_refuses_long_and_untimed_tests() {
    let t0 = Instant::now();
    let cfg = max_duration(10);
    accepted(offer(cfg.clone(), t0, json!({"time": 10})));
    accepted(offer(cfg.clone(), t0, json!({"time": 8, "omit": 2})));
    let e = assert_refused(
        offer(cfg.clone(), t0, json!({"time": 9, "omit": 2})),
        ierrno::IEMAXSERVERTESTDURATIONEXCEEDED,
        Refusal::MaxDuration,
    );
    assert!(
        e.to_string()
            .contains("-t 9 + -O 2 = 11 s exceeds the server's max duration of 10 s"),
        "{e}"
    );
    for untimed in [
        json!({"time": 0, "num": 1_000_000}),
        json!({"time": 0, "blockcount": 5}),
    ] {
        let e = assert_refused(
            offer(cfg.clone(), t0, untimed),
            ierrno::IEMAXSERVERTESTDURATIONEXCEEDED,
            Refusal::MaxDuration,
        );
        assert!(e.to_string().contains("without a time limit"), "{e}");
    }
    // No limit: an untimed test is fine.
    accepted(offer(
        ServerConfig::default(),
        t0,
        json!({"time": 0, "num": 5}),
    ));
}

fn bitrate(bits: u64, window: u64) -> ServerConfig {
    ServerConfig {
        bitrate_limit: Some(BitrateLimit {
            bits_per_second: bits,
            window: Duration::from_secs(window),
        }),
        ..ServerConfig::default()
    }
}

/// `-b` × streams (doubled with `--bidir`) above the limit is refused at
/// the parameters with IETOTALRATE; `--fq-rate` the same.
#[test]
fn bitrate_limit_refuses_a_requested_rate_above_it() {
    let t0 = Instant::now();
    let cfg = bitrate(100_000_000, 5);
    // -P 2 (params_312) × 50M = the limit: accepted.
    accepted(offer(cfg.clone(), t0, json!({"bandwidth": 50_000_000})));
    accepted(offer(cfg.clone(), t0, json!({})));
    let e = assert_refused(
        offer(cfg.clone(), t0, json!({"bandwidth": 50_000_001})),
        ierrno::IETOTALRATE,
        Refusal::BitrateLimit,
    );
    assert!(e.to_string().contains("bitrate limit of 100000000"), "{e}");
    assert_refused(
        offer(
            cfg.clone(),
            t0,
            json!({"bandwidth": 30_000_000, "bidirectional": true}),
        ),
        ierrno::IETOTALRATE,
        Refusal::BitrateLimit,
    );
    assert_refused(
        offer(cfg.clone(), t0, json!({"fqrate": 60_000_000})),
        ierrno::IETOTALRATE,
        Refusal::BitrateLimit,
    );
    // Both limits broken: the rate's code wins, as in iperf3.
    let cfg = ServerConfig {
        max_duration: Some(Duration::from_secs(1)),
        ..cfg
    };
    assert_refused(
        offer(cfg, t0, json!({"time": 5, "bandwidth": 1_000_000_000})),
        ierrno::IETOTALRATE,
        Refusal::BitrateLimit,
    );
}

/// A running test whose bytes, both directions, average above the limit
/// over the window is ended with IETOTALRATE; below it, it runs on.
#[test]
fn bitrate_limit_ends_a_running_test_above_it() {
    let t0 = Instant::now();
    let sec = Duration::from_secs(1);
    // 8 Mbit/s over 2 s: 2 MB in two seconds is the most.
    let cfg = bitrate(8_000_000, 2);
    let mut s = accepted(offer(
        cfg.clone(),
        t0,
        json!({"parallel": 1, "bidirectional": true, "time": 30}),
    ));
    s.accept_stream(t0, COOKIE).unwrap();
    s.accept_stream(t0, COOKIE).unwrap();
    assert_eq!(out_server(&mut s), [1, 2]);
    events_server(&mut s);
    assert_eq!(s.poll_timeout(), Some(t0 + sec), "the first sample");
    // 1 MB each second, split over the two directions: at the limit.
    for i in 1..=3u32 {
        s.record_bytes(StreamId(1), 600_000);
        s.record_bytes(StreamId(3), 400_000);
        s.handle_timeout(t0 + sec * i);
        assert!(events_server(&mut s).is_empty(), "second {i}");
    }
    // Then 1.2 MB in a second: 2.2 MB over the last two.
    s.record_bytes(StreamId(1), 600_000);
    s.record_bytes(StreamId(3), 600_000);
    s.handle_timeout(t0 + sec * 4);
    let ev = events_server(&mut s);
    let e = only_error(&ev);
    assert_eq!(
        e,
        &Error::BitrateLimit {
            bits_per_second: 8_800_000,
            seconds: 2.0,
            limit: 8_000_000
        }
    );
    assert!(e.to_string().contains("bitrate limit"), "{e}");
    assert_eq!(out_server(&mut s), server_error(ierrno::IETOTALRATE, 0));
    assert_eq!(s.refusal(), None, "ended while running, not refused");
    // Omitted seconds count too (iperf3 samples them).
    let mut s = accepted(offer(cfg, t0, json!({"parallel": 1, "omit": 5})));
    s.accept_stream(t0, COOKIE).unwrap();
    events_server(&mut s);
    s.record_bytes(StreamId(1), 3_000_000);
    s.handle_timeout(t0 + sec);
    s.handle_timeout(t0 + sec * 2);
    assert!(matches!(
        only_error(&events_server(&mut s)),
        Error::BitrateLimit { .. }
    ));
}

#[test]
fn refusals_name_max_streams_and_bad_params() {
    let t0 = Instant::now();
    let cfg = ServerConfig {
        max_streams: 4,
        ..ServerConfig::default()
    };
    accepted(offer(cfg.clone(), t0, json!({"parallel": 4})));
    assert_refused(
        offer(cfg.clone(), t0, json!({"parallel": 5})),
        ierrno::IENUMSTREAMS,
        Refusal::MaxStreams,
    );
    assert_refused(
        offer(
            cfg.clone(),
            t0,
            json!({"parallel": 3, "bidirectional": true}),
        ),
        ierrno::IENUMSTREAMS,
        Refusal::MaxStreams,
    );
    assert_refused(
        offer(cfg.clone(), t0, json!({"udp": true})),
        ierrno::IEUNIMP,
        Refusal::Params,
    );
    assert_refused(
        offer(cfg, t0, json!({"len": "big"})),
        ierrno::IERECVPARAMS,
        Refusal::Params,
    );
    // A client that sends something else than iperf3's cookie is no
    // test: not one that failed.
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    s.handle_control(t0, b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert!(s.is_finished());
    assert_eq!(s.refusal(), Some(Refusal::NoCookie));
    // Nor one that closes, or stays silent, before its cookie.
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    s.handle_control_eof(t0, ControlEnd::Closed);
    assert_eq!(s.refusal(), Some(Refusal::NoCookie));
}

fn with_auth() -> ServerConfig {
    let users = format!(
        "# test users\nalice,{}\n",
        super::auth::password_hash("alice", "s3cret")
    );
    let a = Authenticator::from_text(
        &super::auth::testing::key_pkcs8_pem(),
        "key.pem",
        &users,
        "users.csv",
        DEFAULT_TIME_SKEW,
    )
    .unwrap();
    ServerConfig {
        auth: Some(std::sync::Arc::new(a)),
        ..ServerConfig::default()
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The parameters' `authtoken` must pass: both paddings; a bad password, an
/// unknown user, a stale or a missing token is refused with IEAUTHTEST.
#[test]
fn auth_token_in_the_parameters() {
    use super::auth::testing::{Padding, token};
    let t0 = Instant::now();
    let now = unix_now();
    for p in [Padding::Pkcs1, Padding::Oaep] {
        let s = accepted(offer(
            with_auth(),
            t0,
            json!({"authtoken": token("alice", "s3cret", now, p)}),
        ));
        assert_eq!(s.user(), Some("alice"));
        for (user, pwd, ts, want) in [
            ("alice", "nope", now, AuthError::BadPassword("alice".into())),
            ("bob", "s3cret", now, AuthError::UnknownUser("bob".into())),
        ] {
            let e = assert_refused(
                offer(
                    with_auth(),
                    t0,
                    json!({"authtoken": token(user, pwd, ts, p)}),
                ),
                ierrno::IEAUTHTEST,
                Refusal::Auth,
            );
            assert_eq!(e, Error::Auth(want));
        }
        let e = assert_refused(
            offer(
                with_auth(),
                t0,
                json!({"authtoken": token("alice", "s3cret", now - 30, p)}),
            ),
            ierrno::IEAUTHTEST,
            Refusal::Auth,
        );
        assert!(matches!(e, Error::Auth(AuthError::Stale { .. })), "{e}");
    }
    let e = assert_refused(
        offer(with_auth(), t0, json!({})),
        ierrno::IEAUTHTEST,
        Refusal::Auth,
    );
    assert_eq!(e, Error::Auth(AuthError::Missing));
    assert!(e.to_string().contains("authentication failed"), "{e}");
    // The wall clock advances with the instants given: a token made now is
    // stale to a session whose clock has moved on a minute.
    let mut s = ServerSession::new(with_auth(), t0).with_wall_clock(std::time::SystemTime::now());
    s.handle_control(t0, COOKIE);
    let later = t0 + Duration::from_secs(60);
    let tok = token("alice", "s3cret", now, Padding::Pkcs1);
    s.handle_control(later, &frame(&params_312(json!({"authtoken": tok}))));
    assert!(matches!(
        only_error(&events_server(&mut s)),
        Error::Auth(AuthError::Stale { .. })
    ));
}

// ---- client, scripted ---------------------------------------------------

fn client(params: TestParams, t0: Instant) -> ClientSession {
    let cookie = Cookie::parse(COOKIE).unwrap();
    ClientSession::new(
        ClientConfig {
            params,
            ..ClientConfig::default()
        },
        cookie,
        t0,
    )
    .unwrap()
}

#[test]
fn client_full_scripted_exchange() {
    let t0 = Instant::now();
    let params = TestParams {
        time_secs: 2,
        parallel: 2,
        reverse: true,
        ..TestParams::default()
    };
    let mut c = client(params.clone(), t0);
    assert_eq!(c.poll_transmit().unwrap(), COOKIE);
    c.handle_control(t0, &[9]);
    let out = c.poll_transmit().unwrap();
    let (v, rest) = unframe(&out);
    assert!(rest.is_empty());
    let Value::Object(m) = v else { panic!() };
    assert_eq!(TestParams::from_json(&m), Ok(params));
    c.handle_control(t0, &[10]);
    assert_eq!(
        events_client(&mut c),
        [Event::CreateStreams {
            count: 2,
            reverse: true,
            bidir: false
        }]
    );
    let streams = c.streams();
    assert_eq!(
        streams,
        [
            StreamInfo {
                id: StreamId(1),
                role: Role::Receive
            },
            StreamInfo {
                id: StreamId(3),
                role: Role::Receive
            }
        ]
    );
    c.handle_control(t0, &[1, 2]);
    assert!(matches!(
        &events_client(&mut c)[..],
        [Event::StartTest { .. }]
    ));
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(2)));
    c.record_bytes(StreamId(1), 100);
    c.record_bytes(StreamId(3), 200);
    c.handle_timeout(t0 + Duration::from_secs(2));
    assert_eq!(events_client(&mut c), [Event::TestEnd]);
    c.record_bytes(StreamId(3), 50); // still draining
    c.end_test(t0 + Duration::from_secs(2), EndReport::default())
        .unwrap();
    assert_eq!(c.poll_transmit().unwrap(), [4]);
    c.handle_control(t0, &[13]);
    let out = c.poll_transmit().unwrap();
    let (v, rest) = unframe(&out);
    assert!(rest.is_empty());
    assert_eq!(v["sender_has_retransmits"], json!(-1));
    assert_eq!(v["streams"][1]["bytes"], json!(250));
    assert_eq!(v["streams"][1]["end_time"], json!(2.0));
    let mut server = frame(
        &json!({"cpu_util_total":3,"cpu_util_user":1,"cpu_util_system":2,
        "sender_has_retransmits":1,"streams":[
        {"id":1,"bytes":100,"retransmits":5,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":2},
        {"id":3,"bytes":250,"retransmits":0,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":2}]}),
    );
    server.push(14);
    c.handle_control(t0, &server);
    let ev = events_client(&mut c);
    assert!(
        matches!(&ev[..], [Event::PeerResults(r), Event::Done] if r.streams[0].retransmits == 5)
    );
    assert_eq!(c.poll_transmit().unwrap(), [16]);
    assert!(c.is_finished());
    assert_eq!(c.peer_results().unwrap().cpu_util_total, 3.0);
}

/// A receiving client writes TEST_END at once (`stop_test`) and holds its
/// results until its last counts are in (`end_test`), even when the server
/// asks for them first.
#[test]
fn client_stop_test_then_results_when_the_counts_are_in() {
    let t0 = Instant::now();
    let params = TestParams {
        time_secs: 1,
        reverse: true,
        ..TestParams::default()
    };
    let mut c = client(params, t0);
    c.handle_control(t0, &[9]);
    c.poll_transmit();
    c.handle_control(t0, &[10, 1, 2]);
    events_client(&mut c);
    c.record_bytes(StreamId(1), 100);
    let t1 = t0 + Duration::from_secs(1);
    c.handle_timeout(t1);
    assert_eq!(events_client(&mut c), [Event::TestEnd]);
    c.stop_test(t1).unwrap();
    assert_eq!(c.poll_transmit().unwrap(), [4], "TEST_END at once");
    // The server asks; the last bytes are still arriving: nothing yet.
    c.handle_control(t1, &[13]);
    assert!(c.poll_transmit().is_none());
    assert!(events_client(&mut c).is_empty());
    assert!(
        c.poll_timeout().is_none(),
        "waits on the caller, not the peer"
    );
    c.record_bytes(StreamId(1), 23);
    assert!(matches!(c.stop_test(t1), Err(Error::WrongPhase { .. })));
    c.end_test(t1 + Duration::from_millis(30), EndReport::default())
        .unwrap();
    let out = c.poll_transmit().unwrap();
    let (v, rest) = unframe(&out);
    assert!(rest.is_empty(), "no second TEST_END");
    assert_eq!(v["streams"][0]["bytes"], json!(123));
    assert_eq!(v["streams"][0]["end_time"], json!(1.0), "ends at TEST_END");
}

#[test]
fn client_byte_budget_ends_test() {
    let t0 = Instant::now();
    let mut c = client(
        TestParams {
            time_secs: 0,
            bytes: 1000,
            ..TestParams::default()
        },
        t0,
    );
    c.handle_control(t0, &[9, 10, 1, 2]);
    events_client(&mut c);
    assert_eq!(c.poll_timeout(), Some(t0 + DEFAULT_IDLE_TIMEOUT));
    c.record_bytes(StreamId(1), 999);
    assert!(events_client(&mut c).is_empty());
    c.record_bytes(StreamId(1), 1);
    assert_eq!(events_client(&mut c), [Event::TestEnd]);
}

/// A running test that moves nothing for the idle timeout (`--rcv-timeout`)
/// fails with it, counted from when bytes last moved (not from the next
/// check after them).
#[test]
fn client_idle_timeout_ends_a_silent_test() {
    let t0 = Instant::now();
    let idle = Duration::from_millis(1500);
    let mut c = ClientSession::new(
        ClientConfig {
            params: TestParams {
                reverse: true,
                time_secs: 60,
                ..TestParams::default()
            },
            idle_timeout: idle,
            ..ClientConfig::default()
        },
        Cookie::parse(COOKIE).unwrap(),
        t0,
    )
    .unwrap();
    c.handle_control(t0, &[9, 10, 1, 2]);
    events_client(&mut c);
    assert_eq!(c.poll_timeout(), Some(t0 + idle));
    let t1 = t0 + Duration::from_millis(400);
    c.record_bytes(StreamId(1), 1);
    c.note_progress(t1);
    c.handle_timeout(t0 + idle);
    assert!(events_client(&mut c).is_empty());
    assert_eq!(c.poll_timeout(), Some(t1 + idle));
    c.handle_timeout(t1 + idle);
    let ev = events_client(&mut c);
    assert_eq!(
        only_error(&ev),
        &Error::IdleTimeout {
            idle,
            flag: "--rcv-timeout"
        }
    );
}

/// `-R -n`: the server sends right after TEST_RUNNING, on the data
/// connections, so the whole budget may be counted before the client reads
/// TEST_RUNNING itself; the test then ends as it runs.
#[test]
fn client_byte_budget_filled_before_test_running_ends_the_test() {
    let t0 = Instant::now();
    let mut c = client(
        TestParams {
            time_secs: 0,
            bytes: 1000,
            reverse: true,
            ..TestParams::default()
        },
        t0,
    );
    c.handle_control(t0, &[9, 10, 1]);
    events_client(&mut c);
    c.record_bytes(StreamId(1), 1000);
    assert!(events_client(&mut c).is_empty());
    c.handle_control(t0, &[2]);
    let ev = events_client(&mut c);
    assert_eq!(ev.last(), Some(&Event::TestEnd), "{ev:?}");
}

#[test]
fn client_block_budget_counts_after_omit() {
    let t0 = Instant::now();
    let mut c = client(
        TestParams {
            time_secs: 0,
            blocks: 4,
            block_len: 100,
            omit_secs: 1,
            ..TestParams::default()
        },
        t0,
    );
    c.handle_control(t0, &[9, 10, 1, 2]);
    events_client(&mut c);
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    c.record_bytes(StreamId(1), 1000); // omitted: does not count
    assert!(events_client(&mut c).is_empty());
    assert_eq!(c.counted_from(), None);
    c.handle_timeout(t0 + Duration::from_secs(1));
    assert_eq!(c.counted_from(), Some(t0 + Duration::from_secs(1)));
    c.record_bytes(StreamId(1), 399);
    assert!(events_client(&mut c).is_empty());
    c.record_bytes(StreamId(1), 1);
    assert_eq!(events_client(&mut c), [Event::TestEnd]);
    assert_eq!(c.counted_bytes(Role::Send), 400);
}

/// A client whose test runs `time_secs` (`omit_secs` omitted) or until
/// `file_end` bytes were sent, under way (TEST_START, TEST_RUNNING).
fn file_client(time_secs: u32, omit_secs: u32, file_end: u64, t0: Instant) -> ClientSession {
    let config = ClientConfig {
        params: TestParams {
            time_secs,
            omit_secs,
            ..TestParams::default()
        },
        end_after_sent: Some(file_end),
        ..ClientConfig::default()
    };
    let mut c = ClientSession::new(config, Cookie::parse(COOKIE).unwrap(), t0).unwrap();
    c.handle_control(t0, &[9, 10, 1, 2]);
    events_client(&mut c);
    c
}

/// `-F` with `-t`: a timed test that also ends once the file went out on
/// every stream, the omitted seconds' bytes included (iperf3 ends at
/// whichever comes first); the server is told only the time.
#[test]
fn client_file_end_ends_a_timed_test_omitted_bytes_included() {
    let t0 = Instant::now();
    let mut c = file_client(30, 1, 1000, t0);
    c.record_bytes(StreamId(1), 600); // in the omitted second
    assert!(events_client(&mut c).is_empty());
    c.handle_timeout(t0 + Duration::from_secs(1));
    c.record_bytes(StreamId(1), 399);
    assert!(events_client(&mut c).is_empty());
    c.record_bytes(StreamId(1), 1);
    assert_eq!(events_client(&mut c), [Event::TestEnd]);
    assert_eq!(c.counted_bytes(Role::Send), 400, "as iperf3 counts them");
    // The time ends it first where the file is longer.
    let mut c = file_client(2, 0, 1 << 30, t0);
    c.record_bytes(StreamId(1), 1000);
    assert!(events_client(&mut c).is_empty());
    c.handle_timeout(t0 + Duration::from_secs(2));
    assert_eq!(events_client(&mut c), [Event::TestEnd]);
}

#[test]
fn client_terminate_and_early_end() {
    let t0 = Instant::now();
    let mut c = client(TestParams::default(), t0);
    c.handle_control(t0, &[9]);
    c.poll_transmit();
    c.terminate(t0);
    assert_eq!(c.poll_transmit().unwrap(), [12]);
    assert!(c.is_finished());

    // end_test before the time is up stops a running test; not before it runs.
    let mut c = client(TestParams::default(), t0);
    assert!(matches!(
        c.end_test(t0, EndReport::default()),
        Err(Error::WrongPhase { .. })
    ));
    c.handle_control(t0, &[9, 10, 1, 2]);
    c.poll_transmit();
    c.end_test(t0, EndReport::default()).unwrap();
    assert_eq!(c.poll_transmit().unwrap(), [4]);
}

#[test]
fn client_server_refusals() {
    let t0 = Instant::now();
    let mut c = client(TestParams::default(), t0);
    c.handle_control(t0, &[0xff]);
    assert_eq!(only_error(&events_client(&mut c)), &Error::AccessDenied);

    let mut c = client(TestParams::default(), t0);
    c.handle_control(t0, &[9, 0xfe, 0, 0, 0]);
    assert!(events_client(&mut c).is_empty()); // codes still incomplete
    c.handle_control(t0, &[114, 0, 0, 0, 2]);
    assert_eq!(
        only_error(&events_client(&mut c)),
        &Error::ServerError {
            i_errno: 114,
            errno: 2
        }
    );

    // A refused login: iperf3's server writes SERVER_ERROR and IEAUTHTEST
    // only (no errno), then closes.
    let mut c = client(TestParams::default(), t0);
    c.handle_control(t0, &[9, 0xfe, 0, 0, 0, 142]);
    assert!(events_client(&mut c).is_empty());
    c.handle_control_eof(t0, ControlEnd::Closed);
    let e = only_error(&events_client(&mut c)).clone();
    assert_eq!(
        e,
        Error::ServerError {
            i_errno: 142,
            errno: 0
        }
    );
    assert!(
        e.to_string().ends_with(": test authorization failed"),
        "{e}"
    );

    let mut c = client(TestParams::default(), t0);
    c.handle_control(t0, &[9, 10, 1, 2, 11]);
    assert!(matches!(
        events_client(&mut c).last(),
        Some(Event::Error(Error::ServerTerminated))
    ));

    let mut c = client(TestParams::default(), t0);
    c.handle_control(t0, &[10]);
    assert!(matches!(
        only_error(&events_client(&mut c)),
        Error::UnexpectedState {
            state: State::CreateStreams,
            ..
        }
    ));
}

#[test]
fn client_rejects_malformed_results() {
    let t0 = Instant::now();
    let bad: [&[u8]; 4] = [
        b"\xff\xff\xff\xff",
        b"\0\0\0\x03abc",
        b"\0\0\0\x02{}",
        b"\0\0\0\x0f{\"streams\":[1]}",
    ];
    for bytes in bad {
        let mut c = client(TestParams::default(), t0);
        c.handle_control(t0, &[9, 10, 1, 2]);
        c.end_test(t0, EndReport::default()).unwrap();
        c.handle_control(t0, &[13]);
        events_client(&mut c);
        c.handle_control(t0, bytes);
        let ev = events_client(&mut c);
        assert!(
            matches!(
                only_error(&ev),
                Error::MessageTooLong { .. } | Error::BadJson(_) | Error::BadResults(_)
            ),
            "{ev:?}"
        );
    }
}

#[test]
fn client_handshake_timeout_and_eof() {
    let t0 = Instant::now();
    let mut c = client(TestParams::default(), t0);
    c.handle_timeout(t0 + DEFAULT_HANDSHAKE_TIMEOUT);
    assert!(matches!(
        only_error(&events_client(&mut c)),
        Error::Timeout { .. }
    ));
    let mut c = client(TestParams::default(), t0);
    c.handle_control(t0, &[9]);
    c.handle_control_eof(t0, ControlEnd::TimedOut);
    let e = only_error(&events_client(&mut c)).clone();
    assert_eq!(
        e.to_string(),
        "control connection closed while waiting for CREATE_STREAMS \
         (timed out: the peer stopped acknowledging)"
    );
}

#[test]
fn client_rejects_invalid_params() {
    let cookie = Cookie::parse(COOKIE).unwrap();
    let r = ClientSession::new(
        ClientConfig {
            params: TestParams {
                parallel: 0,
                ..TestParams::default()
            },
            ..ClientConfig::default()
        },
        cookie,
        Instant::now(),
    );
    assert!(matches!(r, Err(Error::Config(_))));
}

// ---- client against server, in memory ----------------------------------

/// Moves control bytes both ways until neither side has anything to say.
fn pump(c: &mut ClientSession, s: &mut ServerSession, now: Instant) {
    for _ in 0..100 {
        let mut moved = false;
        if let Some(b) = c.poll_transmit() {
            s.handle_control(now, &b);
            moved = true;
        }
        if let Some(b) = s.poll_transmit() {
            c.handle_control(now, &b);
            moved = true;
        }
        if !moved {
            return;
        }
    }
    panic!("control exchange did not settle");
}

fn pair_run(params: TestParams) {
    let t0 = Instant::now();
    let entropy: [u8; 36] = std::array::from_fn(|i| (i * 7) as u8);
    let mut c = ClientSession::new(
        ClientConfig {
            params: params.clone(),
            ..ClientConfig::default()
        },
        Cookie::from_entropy(&entropy),
        t0,
    )
    .unwrap();
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    pump(&mut c, &mut s, t0);
    let ce = events_client(&mut c);
    let se = events_server(&mut s);
    assert_eq!(ce, se, "both sides announce the same streams");
    // Connect in order, cookie first.
    let mut pairs = Vec::new();
    for info in c.streams() {
        let got = s.accept_stream(t0, c.cookie().as_bytes()).unwrap();
        assert_eq!(got.id, info.id);
        assert_ne!(got.role, info.role, "one end sends, the other receives");
        pairs.push(info);
    }
    pump(&mut c, &mut s, t0);
    assert!(matches!(
        &events_server(&mut s)[..],
        [Event::StartTest { .. }]
    ));
    assert!(matches!(
        &events_client(&mut c)[..],
        [Event::StartTest { .. }]
    ));
    // Move data: every stream carries 1000 * id bytes.
    for info in &pairs {
        let n = 1000 * u64::from(info.id.0);
        assert!(c.record_bytes(info.id, n));
        assert!(s.record_bytes(info.id, n));
    }
    let t_end = t0 + Duration::from_secs(u64::from(params.time_secs));
    c.handle_timeout(t_end);
    assert_eq!(events_client(&mut c), [Event::TestEnd]);
    c.end_test(t_end, EndReport::default()).unwrap();
    pump(&mut c, &mut s, t_end);
    assert_eq!(events_server(&mut s), [Event::TestEnd]);
    s.end_test(t_end, EndReport::default()).unwrap();
    pump(&mut c, &mut s, t_end);
    let se = events_server(&mut s);
    let ce = events_client(&mut c);
    let (Event::PeerResults(from_client), Event::Done) = (&se[0], &se[1]) else {
        panic!("{se:?}")
    };
    let (Event::PeerResults(from_server), Event::Done) = (&ce[0], &ce[1]) else {
        panic!("{ce:?}")
    };
    for (info, (a, b)) in pairs
        .iter()
        .zip(from_client.streams.iter().zip(&from_server.streams))
    {
        assert_eq!((a.id, b.id), (info.id.0, info.id.0));
        assert_eq!(a.bytes, 1000 * u64::from(info.id.0));
        assert_eq!(b.bytes, a.bytes);
    }
    assert!(c.is_finished() && s.is_finished());
}

#[test]
fn pair_forward_reverse_bidir() {
    for (reverse, bidirectional, parallel) in
        [(false, false, 1), (true, false, 3), (false, true, 2)]
    {
        pair_run(TestParams {
            time_secs: 1,
            reverse,
            bidirectional,
            parallel,
            ..TestParams::default()
        });
    }
}

/// Like `pump`, but delivers each side's bytes in chunks of `split` bytes.
fn pump_chunked(c: &mut ClientSession, s: &mut ServerSession, now: Instant, split: usize) {
    for _ in 0..1000 {
        let mut moved = false;
        if let Some(b) = c.poll_transmit() {
            for chunk in b.chunks(split) {
                s.handle_control(now, chunk);
            }
            moved = true;
        }
        if let Some(b) = s.poll_transmit() {
            for chunk in b.chunks(split) {
                c.handle_control(now, chunk);
            }
            moved = true;
        }
        if !moved {
            return;
        }
    }
    panic!("control exchange did not settle");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any parameters a client can send survive the trip.
    #[test]
    fn params_round_trip(time in 0u32..100, omit in 0u32..10, bytes in any::<u64>(),
                         parallel in 1u32..64, reverse in any::<bool>(), len in 1u32..MAX_BLOCK_LEN,
                         window in proptest::option::of(1u32..u32::MAX), title in proptest::option::of(".{0,20}")) {
        let p = TestParams { time_secs: time, omit_secs: omit, bytes, parallel, reverse,
            block_len: len, window, title, ..TestParams::default() };
        let Value::Object(m) = p.to_json() else { panic!() };
        prop_assert_eq!(TestParams::from_json(&m), Ok(p));
    }

    /// A whole test between the two sessions, with the control bytes cut
    /// into arbitrary pieces: the same results as in one piece.
    #[test]
    fn pair_with_arbitrary_segmentation(split in 1usize..64, parallel in 1u32..5, bidir in any::<bool>(),
                                        n in 0u64..1_000_000) {
        let t0 = Instant::now();
        let params = TestParams { time_secs: 1, parallel, bidirectional: bidir, ..TestParams::default() };
        let mut c = ClientSession::new(ClientConfig { params, ..ClientConfig::default() },
            Cookie::from_entropy(&[7; 36]), t0).unwrap();
        let mut s = ServerSession::new(ServerConfig::default(), t0);
        pump_chunked(&mut c, &mut s, t0, split);
        for info in c.streams() {
            prop_assert_eq!(s.accept_stream(t0, c.cookie().as_bytes()).map(|i| i.id), Ok(info.id));
            c.record_bytes(info.id, n + u64::from(info.id.0));
        }
        pump_chunked(&mut c, &mut s, t0, split);
        for st in s.streams().to_vec() {
            s.record_bytes(st.id, n + u64::from(st.id.0));
        }
        let t1 = t0 + Duration::from_secs(1);
        c.handle_timeout(t1);
        c.end_test(t1, EndReport::default()).unwrap();
        pump_chunked(&mut c, &mut s, t1, split);
        s.end_test(t1, EndReport::default()).unwrap();
        pump_chunked(&mut c, &mut s, t1, split);
        prop_assert!(c.is_finished() && s.is_finished());
        let from_server = c.peer_results().unwrap();
        for (st, r) in s.streams().iter().zip(&from_server.streams) {
            prop_assert_eq!(r.id, st.id.0);
            prop_assert_eq!(r.bytes, n + u64::from(st.id.0));
        }
        let evs = events_server(&mut s);
        prop_assert_eq!(evs.last(), Some(&Event::Done));
    }

    /// Arbitrary bytes, arbitrarily split, after a valid or no prefix:
    /// no panic, and the session either waits or ends with one error.
    #[test]
    fn server_never_panics(prefix in 0usize..3, junk in proptest::collection::vec(any::<u8>(), 0..300),
                           split in 1usize..40) {
        let t0 = Instant::now();
        let mut s = ServerSession::new(ServerConfig { max_json_len: 128, ..ServerConfig::default() }, t0);
        if prefix >= 1 { s.handle_control(t0, COOKIE); }
        if prefix >= 2 {
            s.handle_control(t0, &frame(&params_312(json!({"parallel": 1}))));
            let _ = s.accept_stream(t0, COOKIE);
        }
        for chunk in junk.chunks(split) {
            s.handle_control(t0, chunk);
        }
        s.handle_timeout(t0 + Duration::from_secs(1000));
        let evs = events_server(&mut s);
        let errors = evs.iter().filter(|e| matches!(e, Event::Error(_))).count();
        prop_assert!(errors <= 1);
        // Finished, or waiting for the caller's `end_test` after TEST_END.
        prop_assert!(s.is_finished() || evs.contains(&Event::TestEnd));
    }

    #[test]
    fn client_never_panics(junk in proptest::collection::vec(any::<u8>(), 0..300), split in 1usize..40) {
        let t0 = Instant::now();
        let mut c = ClientSession::new(
            ClientConfig { max_json_len: 128, ..ClientConfig::default() },
            Cookie::parse(COOKIE).unwrap(), t0).unwrap();
        for chunk in junk.chunks(split) {
            c.handle_control(t0, chunk);
            let _ = c.end_test(t0, EndReport::default());
        }
        c.handle_timeout(t0 + Duration::from_secs(1000));
        let errors = events_client(&mut c).iter().filter(|e| matches!(e, Event::Error(_))).count();
        prop_assert!(errors <= 1);
    }
}
