//! Deterministic-simulation and scripted tests of the TCP core.

use super::sim::{LinkConfig, Sim, SimConfig};
use super::*;
use std::time::Duration;

fn clean_close(sim: &Sim, cfg: &SimConfig) {
    let (c, s) = (sim.client_app(), sim.server_app());
    assert_eq!(c.received, cfg.server_bytes, "client received");
    assert_eq!(s.received, cfg.client_bytes, "server received");
    assert_eq!(
        (c.corrupt_bytes, s.corrupt_bytes),
        (0, 0),
        "pattern mismatch"
    );
    assert!(c.eof && s.eof, "both saw EOF");
    assert_eq!(c.closed, Some(CloseReason::Normal), "client close");
    assert_eq!(s.closed, Some(CloseReason::Normal), "server close");
    assert_eq!(sim.client.state(), State::Closed);
}

#[test]
fn bulk_both_ways_clean_close() {
    let cfg = SimConfig::default();
    let mut sim = Sim::new(cfg.clone());
    assert!(sim.drive_bounded(Duration::from_secs(60)));
    eprintln!(
        "{:?}\n{:?}",
        sim.client.stats(),
        sim.server.as_ref().unwrap().stats()
    );
    clean_close(&sim, &cfg);
}

/// One run of the exactly-once matrix: loss, reordering, duplication,
/// corruption and window size all chosen from `seed`.
fn matrix_run(seed: u64) -> (Sim, SimConfig) {
    let mut r = isn::XorShift::new(seed);
    let loss = [0.0, 0.005, 0.01, 0.02, 0.05][r.below(5) as usize];
    let reorder = [0.0, 0.0, 0.02, 0.1][r.below(4) as usize];
    let duplicate = [0.0, 0.0, 0.01, 0.05][r.below(4) as usize];
    let corrupt = [0.0, 0.0, 0.01][r.below(3) as usize];
    let window = [8 * 1024, 32 * 1024, 256 * 1024][r.below(3) as usize];
    let link = LinkConfig {
        bandwidth: 100_000_000,
        delay: Duration::from_millis(1 + r.below(20)),
        queue_limit: 50 + r.below(200) as usize,
        loss,
        reorder,
        reorder_delay: Duration::from_millis(1 + r.below(5)),
        duplicate,
        corrupt,
        mtu: 1500,
    };
    let mut conn = Config {
        recv_buffer: window,
        recv_window: if r.below(2) == 0 {
            RecvWindow::Fixed(window)
        } else {
            RecvWindow::AutoTune { initial: 8 * 1024 }
        },
        sack: r.below(4) != 0,
        timestamps: r.below(4) != 0,
        window_scaling: r.below(4) != 0,
        send_frames: 16,
        ..Config::default()
    };
    if r.below(2) == 0 {
        conn.congestion = CongestionAlgorithm::NewReno;
    }
    let mut server = conn.clone();
    server.sack = r.below(4) != 0;
    server.timestamps = r.below(4) != 0;
    let cfg = SimConfig {
        client: conn,
        server,
        c2s: link.clone(),
        s2c: link,
        seed,
        client_bytes: 20_000 + r.below(150_000),
        server_bytes: r.below(150_000),
        ..SimConfig::default()
    };
    let mut sim = Sim::new(cfg.clone());
    let settled = sim.drive_bounded(Duration::from_secs(600));
    assert!(settled, "seed {seed}: did not settle");
    (sim, cfg)
}

fn sweep(seeds: std::ops::Range<u64>) {
    for seed in seeds {
        let (sim, cfg) = matrix_run(seed);
        let res =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| clean_close(&sim, &cfg)));
        if res.is_err() {
            panic!(
                "seed {seed}: {:?}\nclient {:?}\nserver {:?}\nc2s {:?}\ns2c {:?}",
                cfg,
                sim.client.stats(),
                sim.server.as_ref().map(|s| *s.stats()),
                sim.c2s_stats(),
                sim.s2c_stats()
            );
        }
    }
}

#[test]
fn exactly_once_sweep() {
    sweep(0..200);
}

/// The long run: thousands of seeded runs over the loss / reordering /
/// duplication / corruption / window matrix. `cargo test -p xtcp-engine --lib
/// --release -- --ignored exactly_once_long_sweep` (about a minute in debug).
#[test]
#[ignore = "long run: 5000 seeded simulations"]
fn exactly_once_long_sweep() {
    sweep(1000..6000);
}
