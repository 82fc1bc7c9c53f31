#!/usr/bin/env bash
# The main job: build xtcp, show what the host offers, and measure raw
# AF_XDP rates on a test network of its own (two namespaces, one veth pair).
# Run as root. Extra arguments go to every `xtcp xsk-bench` run.
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
