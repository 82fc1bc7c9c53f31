#!/usr/bin/env bash
# The main job: build xtcp, show what the host offers, measure raw AF_XDP
# rates, then `xtcp bench`: xtcp's TCP against the kernel's, side by side
# (iperf3 tests), over an MTU sweep, on test networks of its own (two
# namespaces, one veth pair each, removed afterwards).
# Run as root. Extra arguments go to `xtcp bench`.
# XTCP_DURATION: seconds per xsk-bench run (5); XTCP_MTUS: bench MTUs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

cargo build --release -p xtcp
XTCP=target/release/xtcp

echo "== xtcp probe --iface lo (host facts: kernel, privileges, hugepages)"
"$XTCP" probe --iface lo
for size in 64 1500 9000 65000; do
    echo "== xtcp xsk-bench --testnet --size $size"
    "$XTCP" xsk-bench --testnet --size "$size" -t "${XTCP_DURATION:-5}"
done
echo "== xtcp bench: xtcp against kernel TCP, side by side"
"$XTCP" bench --mtu "${XTCP_MTUS:-1500,9000,16384,32768,65535}" "$@"
