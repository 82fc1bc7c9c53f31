#!/usr/bin/env bash
# The engine's own CPU per segment against the number of connections (issue
# 14: "per-packet cost flat from 1 to 1,000 connections ... in the engine"):
# `xtcp send -P N --zeros` with BYTES in all (BYTES / N each) from namespace
# A into a Python asyncio sink in namespace B (the kernel's TCP, reading and
# discarding), on a veth pair of its own (offloads off, 198.18.0.1/2, one
# queue), for each N and each build in turn (the builds' order reversed
# every other round), ROUNDS times. `--wakeup poll`,
# so that a worker with nothing to do sleeps in the kernel instead of
# spinning in user space. Prints one line per run: N, build, segments sent,
# the process's user CPU (from its --json report) in ns per segment, Gbit/s.
# Run as root:
#   benches/conns-engine.sh 1500 1G 3 "1 10 100 1000" target/release/xtcp [/tmp/xtcp-old]
set -euo pipefail
[ $# -ge 5 ] || { sed -n 2,13p "$0" >&2; exit 2; }
mtu=$1 total=$2 rounds=$3 ps=$4
shift 4
bytes=$(numfmt --from=iec "$total")
source "$(dirname "$0")/testnet.sh"
testnet_up xce
testnet_mtu "$mtu"
# The sink: every connection read to its end and discarded, on core 1
# (xtcp's worker is on core 0).
ip netns exec "$b" taskset -c 1 python3 -c '
import asyncio
async def handle(r, w):
    while await r.read(1 << 20):
        pass
    w.close()
async def main():
    s = await asyncio.start_server(handle, "198.18.0.2", 5201, backlog=4096)
    async with s:
        await s.serve_forever()
asyncio.run(main())' &
sp=$!
for i in $(seq 600); do
    ip netns exec "$b" ss -Htln 'sport = :5201' | grep -q . && break
    kill -0 "$sp" 2>/dev/null || { echo "the sink exited" >&2; exit 1; }
    sleep 0.05
done
for r in $(seq "$rounds"); do
    testnet_order "$r" "$@"
    for p in $ps; do
        for bin in "${order[@]}"; do
            ip netns exec "$a" "$bin" send --iface "$ia" -c 198.18.0.2 -p 5201 --zeros \
                -n $((bytes / p)) -P "$p" --max-conns $((p + 16)) --bind copy --cores 0 \
                --wakeup poll --json > "$out/send.json" 2> "$out/send.err" \
                || { cat "$out/send.err" >&2; exit 1; }
            python3 - "$out/send.json" "$p" "$bin" <<'PY'
import json, sys
path, p, build = sys.argv[1:]
d = json.load(open(path))
segs = d["segments_sent"]
user = d["engine"]["cpu"]["user"]
print(p, build, segs, "%.1f" % (user / segs * 1e9), "%.2f" % d["gbps"])
PY
        done
    done
done
