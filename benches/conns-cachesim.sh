#!/usr/bin/env bash
# Cache misses per segment of the `conns` bench (benches/benches/conns.rs),
# counted by a cache simulator instead of timed: deterministic, so a change
# to the connection state's layout can be judged to the line where a timed
# run on a shared VM swings by ±20 %. Runs the bench under
# `valgrind --tool=callgrind --cache-sim=yes`, collecting inside
# `Conns::segment` only (one call a segment), with a 32 KiB L1d and a
# 512 KiB last level (one Zen core's L1d and L2; misses there go to L3).
# The lazy first zeroing of each connection's buffers (memset, first lap
# only) is left out. Prints a markdown table.
#   benches/conns-cachesim.sh [connections ...]     (default: 1 10 100 1000)
# Needs valgrind (apt install valgrind); about a minute per count.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind: apt-get install valgrind" >&2; exit 1; }
NS=("$@")
[ ${#NS[@]} -gt 0 ] || NS=(1 10 100 1000)
export CARGO_PROFILE_BENCH_DEBUG=true
B=$(cargo bench -p xtcp-benches --bench conns --no-run --message-format=json 2>/dev/null | python3 -c '
import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "conns" and m.get("executable"):
        print(m["executable"])')
[ -x "$B" ] || { echo "the conns bench did not build" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "| connections | instructions | L1d read misses | L1d write misses | L2 read misses | L2 write misses |"
echo "|---:|---:|---:|---:|---:|---:|"
for n in "${NS[@]}"; do
    valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=524288,8,64 \
        --toggle-collect='conns::Conns::segment' --callgrind-out-file="$OUT/$n" \
        "$B" --bench "conns/segment/$n\$" --profile-time 3 >/dev/null 2>&1
    python3 - "$OUT/$n" "$n" <<'PY'
import re, subprocess, sys
path, n = sys.argv[1], sys.argv[2]
names = "Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw".split()
ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", path],
                     capture_output=True, text=True).stdout
def row(pat):
    for l in ann.splitlines():
        if pat in l and "=>" not in l:
            # counts, "." for zero, each followed by its share "(x%)"
            v = [0 if x == "." else int(x.replace(",", ""))
                 for x in l.split() if x == "." or re.fullmatch(r"[\d,]+", x)]
            if len(v) >= len(names):
                return v[:len(names)]
    return [0] * len(names)
tot, ms = row("PROGRAM TOTALS"), row("__memset")
txt = open(path).read()
ids = set(re.findall(r"\((\d+)\) conns::Conns::segment\n", txt))
calls = sum(int(c) for i, c in re.findall(r"cfn=\((\d+)\)[^\n]*\ncalls=(\d+)", txt) if i in ids)
if calls == 0:
    sys.exit("no call of Conns::segment counted")
per = {k: (tot[i] - ms[i]) / calls for i, k in enumerate(names)}
print(f"| {n} | {per['Ir']:.0f} | {per['D1mr']:.1f} | {per['D1mw']:.1f} | {per['DLmr']:.1f} | {per['DLmw']:.1f} |")
PY
done
