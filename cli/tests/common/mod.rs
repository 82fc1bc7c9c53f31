//! Helpers shared by the iperf3 tests (`client.rs`, `serve.rs`).

use xtcp_engine::testnet::{TestNet, TestNetConfig};

/// The binary under test.
pub const XTCP: &str = env!("CARGO_BIN_EXE_xtcp");

/// Engine options of every xtcp end on the test network: copy mode (veth
/// has no zero-copy), verified checksums (offloads are off), and fewer
/// UMEM frames than the default.
pub const ENGINE: [&str; 6] = ["--bind", "copy", "--rx-csum", "verify", "--frames", "8192"];

/// A test network with MTU 1500 and `queues` queues per side.
pub fn testnet(queues: u32) -> TestNet {
    TestNet::new(TestNetConfig {
        mtu: 1500,
        queues,
        offloads: false,
    })
    .unwrap_or_else(|e| panic!("cannot build the test network (these tests run as root): {e}"))
}
