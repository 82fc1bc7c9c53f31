#!/usr/bin/env bash
# The engine's own CPU per segment against the number of connections (issue
# 14: "per-packet cost flat from 1 to 1,000 connections ... in the engine"):
# `xtcp send -P N --zeros` with BYTES in all (BYTES / N each) from namespace
# A into a Python asyncio sink in namespace B (the kernel's TCP, reading and
# discarding), on a veth pair of its own (offloads off, 198.18.0.1/2, one
# queue), for each N and each build in turn (the builds' order reversed
# every other round), ROUNDS times. `--wakeup poll`,
# so that a worker with nothing to do sleeps in the kernel instead of
# spinning in user space. A build named `kernel` is A's own TCP instead: a
# Python asyncio sender with N connections writing zeros (1 MiB a write),
# pinned to core 0 as xtcp's worker is. Prints one line per run: N, build,
# segments B received, the process's user CPU (from xtcp's --json report;
# `-` for the kernel sender) in ns per segment, the whole machine's busy
# CPU (/proc/stat, both cores, sender and sink and the kernel's TCP on
# both ends) in ns per segment, Gbit/s (BYTES over the run's wall time,
# setup included).
# Run as root:
#   benches/conns-engine.sh 1500 1G 3 "1 10 100 1000" target/release/xtcp [/tmp/xtcp-old] [kernel]
set -euo pipefail
[ $# -ge 5 ] || { sed -n 2,19p "$0" >&2; exit 2; }
mtu=$1 total=$2 rounds=$3 ps=$4
shift 4
bytes=$(numfmt --from=iec "$total")
source "$(dirname "$0")/testnet.sh"
testnet_up xce
testnet_mtu "$mtu"
# The kernel sender's closed connections wait in TIME-WAIT on A's ports;
# xtcp takes a block of consecutive ones: room for both.
ip netns exec "$a" sysctl -qw net.ipv4.ip_local_port_range="1024 65535"
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
# Busy jiffies of all CPUs (everything but idle and iowait).
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
in_segs() { ip netns exec "$b" awk '/^Tcp:/{n++; if(n==1){for(i=1;i<=NF;i++) if($i=="InSegs") c=i} else print $c}' /proc/net/snmp; }
hz=$(getconf CLK_TCK)
for r in $(seq "$rounds"); do
    testnet_order "$r" "$@"
    for p in $ps; do
        for bin in "${order[@]}"; do
            seg0=$(in_segs) busy0=$(busy) t0=$(date +%s.%N)
            if [ "$bin" = kernel ]; then
                ip netns exec "$a" taskset -c 0 python3 - "$p" $((bytes / p)) <<'PY'
import asyncio, sys
p, n = int(sys.argv[1]), int(sys.argv[2])
buf = bytes(1 << 20)
async def one():
    r, w = await asyncio.open_connection("198.18.0.2", 5201)
    # CUBIC, as xtcp's sender, whatever the host's default.
    w.get_extra_info("socket").setsockopt(6, 13, b"cubic")
    left = n
    while left > 0:
        k = min(left, len(buf))
        w.write(buf if k == len(buf) else buf[:k])
        await w.drain()
        left -= k
    w.close()
    await w.wait_closed()
async def main():
    await asyncio.gather(*(one() for _ in range(p)))
asyncio.run(main())
PY
                # The sender has closed its sockets, and the kernel goes on
                # sending what they held: the run ends when B stops
                # receiving (nothing new for 0.3 s; a minute at most).
                last=$(in_segs) t_last=$(date +%s.%N)
                for i in $(seq 200); do
                    sleep 0.3
                    now=$(in_segs)
                    [ "$now" = "$last" ] && break
                    last=$now t_last=$(date +%s.%N)
                done
                user=-
            else
                ip netns exec "$a" "$bin" send --iface "$ia" -c 198.18.0.2 -p 5201 --zeros \
                    -n $((bytes / p)) -P "$p" --max-conns $((p + 16)) --bind copy --cores 0 \
                    --wakeup poll --json > "$out/send.json" 2> "$out/send.err" \
                    || { cat "$out/send.err" >&2; exit 1; }
                user=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["engine"]["cpu"]["user"])' "$out/send.json")
            fi
            t1=$(date +%s.%N) busy1=$(busy) seg1=$(in_segs)
            [ "$bin" = kernel ] && t1=$t_last
            python3 - "$p" "$bin" $((seg1 - seg0)) "$user" $((busy1 - busy0)) "$hz" "$t0" "$t1" $((bytes / p * p)) <<'PY'
import sys
p, build, segs, user, busy, hz, t0, t1, nbytes = sys.argv[1:]
segs = int(segs)
u = "-" if user == "-" else "%.1f" % (float(user) / segs * 1e9)
machine = int(busy) / int(hz) / segs * 1e9
print(p, build, segs, u, "%.1f" % machine, "%.2f" % (int(nbytes) * 8 / (float(t1) - float(t0)) / 1e9))
PY
        done
    done
done
