#!/usr/bin/env bash
# Raw AF_XDP sweeps with `xtcp xsk-bench --testnet` (txonly on one side of a
# veth pair, rxdrop on the other, each in a namespace of its own): packet
# sizes, batch sizes and ring sizes. Prints a markdown table. Run as root.
#   benches/xsk-sweep.sh [seconds-per-run]
set -euo pipefail
cd "$(dirname "$0")/.."
D="${1:-3}"
cargo build --release -p xtcp >/dev/null 2>&1
X=target/release/xtcp

row() { # label, args...
    local label="$1"; shift
    local j
    j=$("$X" xsk-bench --testnet -t "$D" -J "$@" 2>/dev/null)
    python3 - "$label" "$j" <<'PY'
import json, sys
label, j = sys.argv[1], json.loads(sys.argv[2])
tx, rx = j["tx"], j["rx"]
print(f"| {label} | {tx['pps']/1e6:.3f} | {tx['gbps']:.2f} | {rx['pps']/1e6:.3f} | {rx['gbps']:.2f} | {j['lost']} |")
PY
}

echo "| run | tx Mpps | tx Gbit/s | rx Mpps | rx Gbit/s | not received |"
echo "|---|---|---|---|---|---|"
for s in 64 1500 9000 65000; do row "size $s" --size "$s"; done
for b in 16 64 256; do row "size 64, batch $b" --size 64 --batch "$b"; done
for b in 16 64 256; do row "size 1500, batch $b" --size 1500 --batch "$b"; done
for r in 512 2048 8192; do row "size 1500, ring $r" --size 1500 --ring "$r" --frames $((r * 8)); done
row "size 1500, wakeup kick" --size 1500 --wakeup kick
row "size 1500, wakeup poll" --size 1500 --wakeup poll
row "size 9000, frame 2048" --size 9000 --frame-size 2048
