#!/usr/bin/env bash
# A flow whose packets change queues: `iperf3 -c -t 1 -P 4` from B's kernel
# into `xtcp serve --queues 2` in A, on a veth pair of its own with two
# queues a side (offloads off, 198.18.0.1/2). With XPS set (`xps`, as the
# engine's test network sets it: B transmits on queue q from CPU q), the
# queue a kernel sender's data arrives on follows the CPU it is sent from,
# so an unpinned iperf3 moves its flows between xtcp's queues all the time
# and xtcp hands its connections over again and again; `noxps`: the queue
# follows the flow's hash, as a NIC's RSS keeps a flow on one queue. For
# each build in turn (the order reversed every other round), one `xtcp
# serve` runs TESTS tests back to back; prints one line per build and
# round: the median and range of the bytes a test received (the stock
# client's report of xtcp's count), of the sender's retransmissions (its
# own count), and from serve's closing `-J` document the hand-overs and
# the segments held for a connection on its way (`held`) or dropped
# (`misplaced`), summed over the queues. CORES is serve's `--cores`
# (`0,1`; `1,0` crosses them, so that every ACK xtcp sends makes B send on
# the other queue), PIN `yes` runs test i's client on CPU i % 2.
# Run as root:
#   benches/queue-moves.sh ROUNDS TESTS CORES PIN xps|noxps BUILD...
#   benches/queue-moves.sh 4 6 0,1 no xps /tmp/xtcp-before target/release/xtcp
set -euo pipefail
[ $# -ge 6 ] || { sed -n 2,21p "$0" >&2; exit 2; }
rounds=$1 tests=$2 cores=$3 pin=$4 xps=$5
shift 5
source "$(dirname "$0")/testnet.sh"
testnet_up xqm 2
[ "$xps" = xps ] && testnet_xps
for r in $(seq "$rounds"); do
    testnet_order "$r" "$@"
    for bin in "${order[@]}"; do
        rm -f "$out"/c-*.json
        ip netns exec "$a" "$bin" serve --iface "$ia" --queues 2 --cores "$cores" --bind copy \
            -B 198.18.0.1 -J > "$out/serve.json" 2> "$out/serve.err" &
        sp=$!
        testnet_ready "$out/serve.err"
        for t in $(seq "$tests"); do
            pre=()
            [ "$pin" = yes ] && pre=(taskset -c $((t % 2)))
            # The server takes one test at a time: one whose streams are
            # still closing refuses the next ("busy"), which then waits.
            for try in $(seq 40); do
                ip netns exec "$b" "${pre[@]}" iperf3 -c 198.18.0.1 -t 1 -P 4 -J \
                    > "$out/c-$t.json" || true
                grep -q '"error"' "$out/c-$t.json" || break
                sleep 0.25
            done
        done
        kill -INT "$sp"
        wait "$sp" || { cat "$out/serve.err" >&2; exit 1; }
        sp=
        python3 - "$out" "$tests" "$bin" "$r" <<'PY'
import json, statistics, sys
out, tests, build, r = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
mb, rt = [], []
for t in range(1, tests + 1):
    e = json.load(open(f"{out}/c-{t}.json"))["end"]
    mb.append(e["sum_received"]["bytes"] / 1e6)
    rt.append(e["sum_sent"]["retransmits"])
text = open(f"{out}/serve.json").read()
dec, i, docs = json.JSONDecoder(), 0, []
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i == len(text):
        break
    d, i = dec.raw_decode(text, i)
    docs.append(d)
q = docs[-1]["queues"]
# A build from before the counter has none: "-".
s = lambda k: sum(x[k] for x in q) if all(k in x for x in q) else "-"
print(f"round {r} {build}: MB a test {statistics.median(mb):.0f} ({min(mb):.0f}-{max(mb):.0f}), "
      f"retransmissions {statistics.median(rt):.0f} ({min(rt)}-{max(rt)}), "
      f"hand-overs {s('migrated_in')}, held {s('held')}, misplaced {s('misplaced')}")
PY
    done
done
