#!/usr/bin/env bash
# What one scrape of `xtcp serve --metrics` costs its HTTP side: builds in
# turn (the order reversed every other round), ROUNDS times, each an idle
# `serve --metrics` on a veth pair of its own, scraped every 100 ms for
# SECS seconds from B (a new connection each, HTTP/1.0, as a health check
# does); per thread, the CPU it ran meanwhile (`schedstat`, ns) divided by
# the scrapes. The HTTP side is every thread but the main (control) one,
# the workers (`xtcp-q*`) and the signal handler. Prints one line per run.
# Run as root:
#   benches/metrics-scrape.sh 3 10 /tmp/xtcp-old target/release/xtcp
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,11p "$0" >&2; exit 2; }
rounds=$1 secs=$2
shift 2
source "$(dirname "$0")/testnet.sh"
testnet_up xms
# ns of CPU each thread of $1 has run, "tid comm ns" per line
threads() {
    local t
    for t in /proc/"$1"/task/*; do
        echo "${t##*/} $(cat "$t/comm") $(cut -d' ' -f1 "$t/schedstat")"
    done
}
for r in $(seq 1 "$rounds"); do
    testnet_order "$r" "$@"
    for bin in "${order[@]}"; do
        ip netns exec "$a" "$bin" serve --iface "$ia" --metrics 198.18.0.1:9100 \
            > "$out/serve.log" 2>&1 &
        sp=$!
        testnet_ready "$out/serve.log"
        threads "$sp" > "$out/before"
        n=$(ip netns exec "$b" python3 -c '
import socket, sys, time
end, n = time.monotonic() + float(sys.argv[1]), 0
while time.monotonic() < end:
    s = socket.create_connection(("198.18.0.1", 9100))
    s.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
    while s.recv(65536):
        pass
    s.close()
    n += 1
    time.sleep(0.1)
print(n)' "$secs")
        threads "$sp" > "$out/after"
        kill -INT "$sp"
        wait "$sp" || true
        sp=
        python3 - "$out/before" "$out/after" "$n" "$r" "$bin" <<'PY'
import sys
before = {l.split()[0]: int(l.split()[2]) for l in open(sys.argv[1])}
after = [l.split() for l in open(sys.argv[2])]
n = int(sys.argv[3])
main = min(int(t) for t, _, _ in after)
http = sum(int(ns) - before.get(t, 0) for t, comm, ns in after
           if int(t) != main and not comm.startswith(("xtcp-q", "xtcp-signals")))
print(f"round {sys.argv[4]} {sys.argv[5]} {n} scrapes, HTTP side {http / n / 1e6:.3f} ms of CPU a scrape")
PY
    done
done
