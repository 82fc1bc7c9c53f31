#!/usr/bin/env bash
# Two or more xtcp builds against each other, interleaved: `BIN send
# --zeros -n BYTES` from namespace A into `socat … OPEN:/dev/null` in
# namespace B, each build in turn (the order reversed every other round),
# ROUNDS times, on a veth pair of its own at MTU (offloads off,
# 198.18.0.1/2). On a host whose rate swings by ±30 % from minute to
# minute, only runs taken next to each other compare. Prints one line per
# run: round, build, Gbit/s (send's own figure: bytes acknowledged over
# its seconds).
# Run as root:
#   benches/ab-send.sh 9000 4G 8 /tmp/xtcp-old target/release/xtcp
set -euo pipefail
[ $# -ge 5 ] || { sed -n 2,11p "$0" >&2; exit 2; }
mtu=$1 bytes=$2 rounds=$3
shift 3
source "$(dirname "$0")/testnet.sh"
testnet_up xas
testnet_mtu "$mtu"
ip netns exec "$b" socat -b 262144 -u TCP4-LISTEN:5201,reuseaddr,fork OPEN:/dev/null &
sp=$!
testnet_ready kernel
for r in $(seq 1 "$rounds"); do
    testnet_order "$r" "$@"
    for bin in "${order[@]}"; do
        g=$(ip netns exec "$a" timeout 120 "$bin" send --iface "$ia" -c 198.18.0.2 --zeros \
            -n "$bytes" --bind copy -J 2>/dev/null |
            python3 -c 'import json,sys; print(round(json.load(sys.stdin)["gbps"], 2))')
        echo "round $r $bin $g"
    done
done
