#!/usr/bin/env bash
# A long-running xtcp listener's memory over many short tests or
# connections: `BIN serve` in namespace A with N stock `iperf3 -c -n 100K`
# tests one after another from B, or `BIN recv --keep-listening --discard`
# with N kernel connections (`socat`, 100 kB each), on a veth pair of its
# own (offloads off, 198.18.0.1/2). Prints the listener's resident memory
# (VmRSS), descriptors and threads every N/10, and at the end what it
# reported (serve: its tests' count; recv: bytes, connections listed and
# not listed). A listener whose memory grows with the connections it has
# served shows a slope to the end; a bounded one levels off.
# Run as root:
#   benches/churn-memory.sh serve 2000 target/release/xtcp
#   benches/churn-memory.sh recv 13000 target/release/xtcp
set -euo pipefail
[ $# -eq 3 ] || { sed -n 2,13p "$0" >&2; exit 2; }
mode=$1 n=$2 bin=$3
source "$(dirname "$0")/testnet.sh"
testnet_up xcm
# (serve says "Server listening on" on standard output, recv "listening
# on" on standard error.)
case $mode in
serve)
    ip netns exec "$a" "$bin" serve --iface "$ia" >"$out/out" 2>"$out/err" &
    said=$out/out
    ;;
recv)
    ip netns exec "$a" "$bin" recv --iface "$ia" --keep-listening --discard --json \
        >"$out/out" 2>"$out/err" &
    said=$out/err
    ;;
*) echo "mode: serve or recv" >&2; exit 2 ;;
esac
sp=$!
testnet_ready "$said"
state() {
    printf 'fds %s threads %s %s\n' "$(ls "/proc/$sp/fd" | wc -l)" \
        "$(ls "/proc/$sp/task" | wc -l)" "$(grep VmRSS "/proc/$sp/status" | tr -s ' \t' ' ')"
}
echo "0 done: $(state)"
failed=0
for i in $(seq 1 "$n"); do
    if [ "$mode" = serve ]; then
        ip netns exec "$b" timeout 30 iperf3 -c 198.18.0.1 -n 100K >/dev/null 2>&1 ||
            failed=$((failed + 1))
    else
        ip netns exec "$b" timeout 30 socat -u OPEN:/dev/zero,readbytes=100000 \
            TCP4:198.18.0.1:5201 || failed=$((failed + 1))
    fi
    if [ $((i % (n / 10 > 0 ? n / 10 : 1))) -eq 0 ]; then
        echo "$i done ($failed failed): $(state)"
    fi
done
kill -INT "$sp"
wait "$sp" || true
sp=
if [ "$mode" = recv ]; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1]));
print("recv reported", d["bytes"], "bytes,", len(d["connections"]), "connections listed,",
      d.get("connections_not_listed", 0), "not listed")' "$out/out"
else
    echo "serve: $(grep -c 'Accepted connection from' "$out/out") tests accepted"
fi
