#!/usr/bin/env bash
# Two or more xtcp builds against each other where xtcp receives,
# interleaved (the order reversed every other round), ROUNDS times per MTU,
# on a veth pair of its own (offloads off, 198.18.0.1 in A, .2 in B):
#   bidir  `BIN client --bidir -t 3` (A) with `iperf3 -s` (B): Gbit/s xtcp
#          sent and received;
#   N      `iperf3 -c -P N -t 3` (B) into `BIN serve -1 -J` (A): Gbit/s,
#          the kernel senders' retransmits, the largest window a sender saw
#          (`snd_wnd` of its TCP_INFO in iperf3's intervals), and xtcp's
#          drops at the redirect of the packets steered to it.
# One line per run. TESTS picks them (default "bidir 1 32"). Run as root:
#   benches/ab-receive.sh "1500 9000" 4 /tmp/xtcp-old target/release/xtcp
#   TESTS=bidir benches/ab-receive.sh 1500 6 /tmp/xtcp-old target/release/xtcp
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,14p "$0" >&2; exit 2; }
mtus=$1 rounds=$2
shift 2
source "$(dirname "$0")/testnet.sh"
testnet_up xar
for mtu in $mtus; do
    testnet_mtu "$mtu"
    for r in $(seq "$rounds"); do
        testnet_order "$r" "$@"
        for bin in "${order[@]}"; do
            for t in ${TESTS:-bidir 1 32}; do
                : > "$out/srv.err"
                if [ "$t" = bidir ]; then
                    ip netns exec "$b" iperf3 -s -1 > /dev/null 2> "$out/srv.err" & sp=$!
                    testnet_ready kernel
                    ip netns exec "$a" "$bin" client -c 198.18.0.2 -t 3 --bidir -J \
                        > "$out/c.json" 2> /dev/null
                    wait "$sp"; sp=
                    python3 - "$mtu" "$r" "$bin" "$out/c.json" <<'PY'
import json, sys
mtu, r, bin, path = sys.argv[1:]
e = json.load(open(path))["end"]
print(f"{mtu} r{r} {bin} bidir sent {e['sum_sent']['bits_per_second'] / 1e9:.2f}"
      f" received {e['sum_received_bidir_reverse']['bits_per_second'] / 1e9:.2f}")
PY
                    continue
                fi
                ip netns exec "$a" "$bin" serve -1 -J --iface "$ia" \
                    > "$out/srv.json" 2> "$out/srv.err" & sp=$!
                testnet_ready "$out/srv.err"
                ip netns exec "$b" iperf3 -c 198.18.0.1 -t 3 -P "$t" -J > "$out/c.json"
                wait "$sp"; sp=
                python3 - "$mtu" "$r" "$bin" "$t" "$out/c.json" "$out/srv.json" <<'PY'
import json, sys
mtu, r, bin, p, client, server = sys.argv[1:]
k = json.load(open(client))
text, dec, i, last = open(server).read(), json.JSONDecoder(), 0, None
while (j := text.find("{", i)) >= 0:
    o, i = dec.raw_decode(text, j)
    o = o.get("xtcp_serve", o)  # serve -1 -J: one document (earlier builds: two)
    last = o if "xdp" in o else last
e, x = k["end"], last["xdp"]
wnd = max(s["snd_wnd"] for iv in k["intervals"] for s in iv["streams"])
print(f"{mtu} r{r} {bin} -P {p} {e['sum_received']['bits_per_second'] / 1e9:.2f} Gbit/s,"
      f" retransmits {e['sum_sent']['retransmits']}, largest snd_wnd {wnd},"
      f" dropped {x['dropped_at_redirect']} of {x['steered']}")
PY
            done
        done
    done
done
