#!/usr/bin/env bash
# compare.sh: xtcp's AF_XDP ring layer against a libxdp C reference (xsk_ref.c).
#
# Builds its own test network (two network namespaces joined by a veth
# pair), then for each packet size runs AF_XDP copy-mode txonly on side B,
# alternating the C reference and `xtcp xsk-bench` so that both see the
# same machine conditions (C first in odd rounds, xtcp first in even ones,
# so neither always runs right after the other), and prints a markdown
# table of medians of both metrics: packets per second, and packets per
# CPU-second of the sending process. Side A runs `xtcp xsk-bench --mode
# rxdrop` during each run, and each sender starts only once that receiver
# reports its socket bound (RX=none leaves side A without an XDP program:
# the kernel drops the packets).
#
# Run as root:  benches/xsk-ref/compare.sh
# Environment:  DURATION=3 ROUNDS=3 SIZES="64 1500 9000 65000"
#               XTCP=target/release/xtcp  RX=xtcp|none  TX_CORE=0 RX_CORE=1
#               OUT=dir (keep every run's JSON there)
#               QUIET_WAIT=60 (before each C/xtcp pair, wait up to this many
#               seconds for a second in which the CPUs are >= QUIET_IDLE=80 %
#               idle; 0 disables: the machine may be shared)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
DURATION=${DURATION:-3}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-"64 1500 9000 65000"}
XTCP=${XTCP:-$repo/target/release/xtcp}
RX=${RX:-xtcp}
TX_CORE=${TX_CORE:-0}
RX_CORE=${RX_CORE:-1}
OUT=${OUT:-}
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_IDLE=${QUIET_IDLE:-80}

if [[ $(id -u) -ne 0 ]]; then
	echo "compare.sh: run as root (AF_XDP, namespaces)" >&2
	exit 1
fi
[[ -x $XTCP ]] || { echo "compare.sh: no xtcp binary at $XTCP (cargo build --release -p xtcp)" >&2; exit 1; }
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "compare.sh: ROUNDS must be 1..99" >&2; exit 1; }
[[ $QUIET_WAIT =~ ^[0-9]+$ ]] || { echo "compare.sh: QUIET_WAIT must be a number of seconds" >&2; exit 1; }
case $RX in xtcp | none) ;; *) echo "compare.sh: RX must be xtcp or none" >&2; exit 1 ;; esac

# Build dependencies.
missing=()
[[ -e /usr/include/xdp/xsk.h ]] || missing+=(libxdp-dev)
[[ -e /usr/include/bpf/libbpf.h ]] || missing+=(libbpf-dev)
command -v clang >/dev/null || missing+=(clang)
command -v jq >/dev/null || missing+=(jq)
command -v ethtool >/dev/null || missing+=(ethtool)
[[ -x /usr/bin/time ]] || missing+=(time)
if ((${#missing[@]})); then
	echo "# installing ${missing[*]}" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null
fi

tag=$$
ns_a=xref-a$tag
ns_b=xref-b$tag
if_a=xra$tag
if_b=xrb$tag
tmp=$(mktemp -d /tmp/xsk-ref.XXXXXX)
bg_pids=()

cleanup() {
	local p
	for p in "${bg_pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${bg_pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	ip netns del "$ns_a" 2>/dev/null || true
	ip netns del "$ns_b" 2>/dev/null || true
	if [[ -n $OUT ]]; then
		mkdir -p "$OUT" && cp "$tmp"/*.json "$OUT"/ 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cc -O2 -Wall -o "$tmp/xsk_ref" "$here/xsk_ref.c" -lxdp -lbpf
# Our own copy: the tree's binary may be rebuilt while we run.
cp "$XTCP" "$tmp/xtcp"

ip netns add "$ns_a"
ip netns add "$ns_b"
ip -n "$ns_a" link add "$if_a" numtxqueues 1 numrxqueues 1 type veth \
	peer name "$if_b" numtxqueues 1 numrxqueues 1 netns "$ns_b"
for side in a b; do
	if [[ $side == a ]]; then ns=$ns_a ifc=$if_a addr=198.18.0.1; else ns=$ns_b ifc=$if_b addr=198.18.0.2; fi
	ip netns exec "$ns" ethtool -K "$ifc" tso off gso off gro off tx off >/dev/null
	ip -n "$ns" addr add "$addr/24" dev "$ifc"
	ip -n "$ns" link set "$ifc" up
done
mac_a=$(ip netns exec "$ns_a" cat "/sys/class/net/$if_a/address")
mac_b=$(ip netns exec "$ns_b" cat "/sys/class/net/$if_b/address")
ip -n "$ns_b" neigh replace 198.18.0.1 lladdr "$mac_a" dev "$if_b"
ip -n "$ns_a" neigh replace 198.18.0.2 lladdr "$mac_b" dev "$if_a"

median() { # numbers on stdin -> median
	sort -g | awk '{v[NR] = $1} END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Percent of CPU time idle over the next second, all CPUs.
idle_pct() {
	local a b
	a=$(awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $5 + $6 }' /proc/stat)
	sleep 1
	b=$(awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $5 + $6 }' /proc/stat)
	awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); d = y[1] - x[1]; print (d > 0 ? int(100 * (y[2] - x[2]) / d) : 0) }'
}

# Waits (at most QUIET_WAIT seconds) for a mostly idle second.
wait_quiet() {
	local i pct=0
	for ((i = 0; i < QUIET_WAIT; i++)); do
		pct=$(idle_pct)
		((pct >= QUIET_IDLE)) && return 0
	done
	((QUIET_WAIT == 0)) || echo "# machine still busy (${pct}% idle) after ${QUIET_WAIT}s; running anyway" >&2
	return 0
}

# Waits until the receiver $1 has written its "bound" line (socket bound,
# fill ring full, steering program attached) to $2; fails if it exits
# first or takes more than 30 s.
wait_bound() {
	local pid=$1 err=$2 i
	for ((i = 0; i < 300; i++)); do
		grep -q ' bound, ' "$err" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

rx_duration=$(awk -v d="$DURATION" 'BEGIN { print d + 2.5 }')

# One sender run with the receiver around it. $1 = c|xtcp, $2 = size, $3 = round.
run_one() {
	local tool=$1 size=$2 round=$3 rxpid="" out="$tmp/$1-$2-$3.json"
	if [[ $RX == xtcp ]]; then
		ip netns exec "$ns_a" "$tmp/xtcp" xsk-bench --iface "$if_a" --mode rxdrop \
			--bind copy --core "$RX_CORE" --duration "$rx_duration" --json --log warn \
			>"$tmp/rx-$tool-$size-$round.json" 2>"$tmp/rx-$tool-$size-$round.err" &
		rxpid=$!
		bg_pids+=("$rxpid")
		wait_bound "$rxpid" "$tmp/rx-$tool-$size-$round.err" || {
			echo "xtcp rxdrop on side A did not bind (size $size):" \
				"$(tail -n 3 "$tmp/rx-$tool-$size-$round.err")" >&2
			kill "$rxpid" 2>/dev/null || true
			wait "$rxpid" 2>/dev/null || true
			bg_pids=()
			return 0
		}
	fi
	if [[ $tool == c ]]; then
		ip netns exec "$ns_b" /usr/bin/time -f '%U %S' -o "$tmp/$tool-$size-$round.time" \
			"$tmp/xsk_ref" --iface "$if_b" --mode txonly --size "$size" \
			--dst-ip 198.18.0.1 --src-ip 198.18.0.2 --dst-mac "$mac_a" \
			--duration "$DURATION" --core "$TX_CORE" >"$out" 2>"$tmp/$tool-$size-$round.err" ||
			{ echo "C txonly failed (size $size):" >&2; cat "$tmp/$tool-$size-$round.err" >&2; }
	else
		ip netns exec "$ns_b" /usr/bin/time -f '%U %S' -o "$tmp/$tool-$size-$round.time" \
			"$tmp/xtcp" xsk-bench --iface "$if_b" --mode txonly --size "$size" \
			--dst-ip 198.18.0.1 --src-ip 198.18.0.2 --dst-mac "$mac_a" \
			--duration "$DURATION" --json --bind copy --core "$TX_CORE" --log warn \
			>"$out" 2>"$tmp/$tool-$size-$round.err" ||
			{ echo "xtcp txonly failed (size $size):" >&2; cat "$tmp/$tool-$size-$round.err" >&2; }
	fi
	if [[ -n $rxpid ]]; then
		wait "$rxpid" || echo "xtcp rxdrop on side A failed (size $size):" \
			"$(tail -n 3 "$tmp/rx-$tool-$size-$round.err")" >&2
		bg_pids=()
	fi
	local pps gbps pkts cpu
	pps=$(jq -r '.pps // empty' "$out" 2>/dev/null || true)
	gbps=$(jq -r '.gbps // empty' "$out" 2>/dev/null || true)
	pkts=$(jq -r '.packets // empty' "$out" 2>/dev/null || true)
	# Sender CPU seconds (user + system, whole process; softirq work may
	# be accounted elsewhere) -> packets per CPU second.
	cpu=$(awk 'NF == 2 && $1 ~ /^[0-9.]+$/ { print $1 + $2 }' "$tmp/$tool-$size-$round.time" 2>/dev/null || true)
	local eff
	eff=$(awk -v p="${pkts:-0}" -v c="${cpu:-0}" 'BEGIN { print (c > 0 ? p / c : 0) }')
	echo "# size $size round $round $tool: ${pps:-?} pps ${gbps:-?} Gbit/s, ${cpu:-?} CPU-s, $eff packets/CPU-s (load $(cut -d" " -f1 /proc/loadavg))" >&2
	[[ -n $pps ]] && echo "$round $pps $gbps $eff" >>"$tmp/$tool-$size.txt"
	return 0
}

echo "# $(date -u +%FT%TZ) kernel $(uname -r), ${DURATION}s x $ROUNDS rounds, copy mode, side A: $RX" >&2
for size in $SIZES; do
	mtu=$((size - 14))
	((mtu < 1500)) && mtu=1500
	ip -n "$ns_a" link set "$if_a" mtu "$mtu"
	ip -n "$ns_b" link set "$if_b" mtu "$mtu"
	for ((round = 1; round <= ROUNDS; round++)); do
		wait_quiet
		if ((round % 2)); then
			run_one c "$size" "$round"
			run_one xtcp "$size" "$round"
		else
			run_one xtcp "$size" "$round"
			run_one c "$size" "$round"
		fi
	done
done

echo
echo "Kernel $(uname -r), $(date -u +%F), AF_XDP copy mode txonly on one veth queue, ${DURATION} s x $ROUNDS rounds (medians), side A: $RX"
echo
# Two metrics. Mpps: packets per second of the send window. Mpps/CPU-s:
# packets per CPU second (user + system) of the sender process, which
# includes the veth and receiver work the kernel does in the sender's
# context; it holds when other work on the machine steals the sender's
# core. xtcp/C is the ratio of the medians; "per round" is the median of
# the ratios of the C and xtcp runs of the same round (back to back, so
# less sensitive to load that drifts across rounds).
echo "| size (B) | C Mpps | C Gbit/s | xtcp Mpps | xtcp Gbit/s | xtcp/C | xtcp/C per round | C Mpps/CPU-s | xtcp Mpps/CPU-s | xtcp/C per CPU-s | xtcp/C per CPU-s per round |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for size in $SIZES; do
	touch "$tmp/c-$size.txt" "$tmp/xtcp-$size.txt"
	c_pps=$(cut -d' ' -f2 "$tmp/c-$size.txt" | median)
	c_gb=$(cut -d' ' -f3 "$tmp/c-$size.txt" | median)
	x_pps=$(cut -d' ' -f2 "$tmp/xtcp-$size.txt" | median)
	x_gb=$(cut -d' ' -f3 "$tmp/xtcp-$size.txt" | median)
	c_eff=$(cut -d' ' -f4 "$tmp/c-$size.txt" | median)
	x_eff=$(cut -d' ' -f4 "$tmp/xtcp-$size.txt" | median)
	pair=$(join <(sort "$tmp/c-$size.txt") <(sort "$tmp/xtcp-$size.txt") |
		awk '$2 > 0 { print $5 / $2 }' | median)
	pair_eff=$(join <(sort "$tmp/c-$size.txt") <(sort "$tmp/xtcp-$size.txt") |
		awk '$4 > 0 { print $7 / $4 }' | median)
	awk -v s="$size" -v cp="$c_pps" -v cg="$c_gb" -v xp="$x_pps" -v xg="$x_gb" -v pr="$pair" \
		-v ce="$c_eff" -v xe="$x_eff" -v pe="$pair_eff" 'BEGIN {
		ratio = (cp + 0 > 0 && xp != "nan") ? sprintf("%.2f", xp / cp) : "n/a"
		pair = pr == "nan" ? "n/a" : sprintf("%.2f", pr)
		eff = (ce + 0 > 0 && xe != "nan") ? sprintf("%.2f", xe / ce) : "n/a"
		pair_eff = pe == "nan" ? "n/a" : sprintf("%.2f", pe)
		printf "| %s | %.3f | %.2f | %.3f | %.2f | %s | %s | %.3f | %.3f | %s | %s |\n", s, cp / 1e6, cg, xp / 1e6, xg, ratio, pair, ce / 1e6, xe / 1e6, eff, pair_eff
	}'
done
