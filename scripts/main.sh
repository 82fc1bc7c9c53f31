#!/usr/bin/env bash
# The main job: build xtcp, show what the host offers, measure raw AF_XDP
# rates, then xtcp's TCP against the kernel's, side by side, on test networks
# of its own (two namespaces, one veth pair each, removed afterwards).
# Run as root. Extra arguments go to every `xtcp xsk-bench` run.
# XTCP_DURATION: seconds per xsk-bench run (5); XTCP_BYTES: bytes per
# transfer in the TCP comparison (2G); XTCP_MTUS: its MTUs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

cargo build --release -p xtcp
XTCP=target/release/xtcp

echo "== xtcp probe lo (host facts: kernel, privileges, hugepages)"
"$XTCP" probe lo
for size in 64 1500 9000 65000; do
    echo "== xtcp xsk-bench --testnet --size $size"
    "$XTCP" xsk-bench --testnet --size "$size" --duration "${XTCP_DURATION:-5}" "$@"
done
echo "== xtcp send / recv against kernel TCP, side by side (benches/engine-vs-kernel.py)"
python3 benches/engine-vs-kernel.py --xtcp "$XTCP" --bytes "${XTCP_BYTES:-2G}" \
    --mtu "${XTCP_MTUS:-1500,9000,16384,32768,65535}" --repeat 1
