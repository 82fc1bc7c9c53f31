#!/usr/bin/env bash
# Two or more xtcp builds against each other, interleaved: `BIN client -Z
# -P STREAMS -t 3` from namespace A into `iperf3 -s` in namespace B (or
# into `SERVER serve`, one fixed build, with SERVER=path), each build in
# turn (the order reversed every other round), ROUNDS times per MTU, on a
# veth pair of its own (offloads off, 198.18.0.1/2). On a host whose rate
# swings by ±30 % from minute to minute, only runs taken next to each
# other compare. Prints one line per run: MTU, round, build, Gbit/s
# received, the streams' mean RTT (µs).
# Run as root:
#   benches/ab-streams.sh "9000 1500" 4 32 /tmp/xtcp-old target/release/xtcp
#   SERVER=/tmp/xtcp-old benches/ab-streams.sh 9000 4 32 /tmp/xtcp-old target/release/xtcp
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,12p "$0" >&2; exit 2; }
mtus=$1 rounds=$2 streams=$3
shift 3
source "$(dirname "$0")/testnet.sh"
testnet_up xab
for mtu in $mtus; do
    testnet_mtu "$mtu"
    for r in $(seq "$rounds"); do
        testnet_order "$r" "$@"
        for bin in "${order[@]}"; do
            : > "$out/server.err"
            if [ -n "${SERVER:-}" ]; then
                # Two workers pinned apart: a spinning worker on each core.
                ip netns exec "$b" "$SERVER" serve -1 -J --iface "$ib" --bind copy --cores 1 \
                    > "$out/server.json" 2> "$out/server.err" &
                pin=(--cores 0)
            else
                ip netns exec "$b" iperf3 -s -1 -J > "$out/server.json" 2> "$out/server.err" &
                pin=()
            fi
            sp=$!
            if [ -n "${SERVER:-}" ]; then testnet_ready "$out/server.err"; else testnet_ready kernel; fi
            ip netns exec "$a" "$bin" client -c 198.18.0.2 -t 3 -Z -J --iface "$ia" --bind copy \
                "${pin[@]}" -P "$streams" > "$out/client.json" 2> "$out/client.err" \
                || { cat "$out/client.err" >&2; exit 1; }
            wait "$sp" || true
            sp=
            python3 - "$out/client.json" "$mtu" "$r" "$bin" <<'PY'
import json, sys
path, mtu, r, build = sys.argv[1:]
end = json.load(open(path))["end"]
rtt = [s["sender"]["mean_rtt"] for s in end["streams"]]
print(mtu, r, build, "%.2f" % (end["sum_received"]["bits_per_second"] / 1e9),
      "%.0f" % (sum(rtt) / len(rtt)))
PY
        done
    done
done
