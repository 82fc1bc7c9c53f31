# Sourced by the bench scripts: a test network of their own, two network
# namespaces A and B joined by a veth pair (198.18.0.1 in A, 198.18.0.2 in
# B), offloads off, as `xtcp bench` sets it; removed on exit, also on
# Ctrl-C and TERM, with the server process `$sp` and the folder `$out`.
#   testnet_up PREFIX [QUEUES]
#                       sets a, b (namespaces), ia, ib (their interfaces),
#                       out (a scratch folder); QUEUES queues a side (1)
#   testnet_xps         B transmits on queue q from CPU q (XPS), as the
#                       engine's test network sets it with several queues
#   testnet_mtu MTU     sets both ends' MTU
#   testnet_ready WHAT  waits (30 s at most) for the server `$sp` to be
#                       ready: WHAT `kernel`, a listener on port 5201 in B;
#                       else a file where xtcp prints "listening on"; exits
#                       if the server exits first
#   testnet_order R B.. sets the array `order` to the builds B.. in the
#                       order of round R: as given in odd rounds, reversed
#                       in even ones. Runs in a fixed order are not
#                       comparable: on the development VM a run was faster
#                       second than first by up to a fifth with the same
#                       binary both times (benches/conns-engine.sh at 1,000
#                       connections, 2026-12-04: 0.84, 5 rounds of 6).
# Names carry PREFIX and the script's PID, so runs side by side do not meet.
sp=
testnet_cleanup() {
    # (Under `set -e` a failed kill of a server that has exited already
    # would end the trap before the namespaces go.)
    if [ -n "$sp" ]; then kill "$sp" 2>/dev/null || true; fi
    ip netns del "$a" 2>/dev/null || true
    ip netns del "$b" 2>/dev/null || true
    rm -rf "$out"
}
testnet_up() {
    a=$1-a$$ b=$1-b$$ ia=${1}a$$ ib=${1}b$$
    out=$(mktemp -d)
    trap testnet_cleanup EXIT
    trap 'exit 130' INT TERM
    ip netns add "$a"
    ip netns add "$b"
    local nq=${2:-1}
    ip link add "$ia" netns "$a" numtxqueues "$nq" numrxqueues "$nq" type veth \
        peer name "$ib" netns "$b" numtxqueues "$nq" numrxqueues "$nq"
    local x ns ifc addr
    for x in "$a $ia 198.18.0.1" "$b $ib 198.18.0.2"; do
        read -r ns ifc addr <<< "$x"
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "$ifc" up
        ip -n "$ns" addr add "$addr/24" dev "$ifc"
        ip netns exec "$ns" ethtool -K "$ifc" tso off gso off gro off tx off >/dev/null
    done
}
testnet_xps() {
    local q=0
    while ip netns exec "$b" test -e "/sys/class/net/$ib/queues/tx-$q/xps_cpus"; do
        ip netns exec "$b" sh -c "printf '%x' $((1 << q)) > /sys/class/net/$ib/queues/tx-$q/xps_cpus"
        q=$((q + 1))
    done
}
testnet_mtu() {
    ip -n "$a" link set "$ia" mtu "$1"
    ip -n "$b" link set "$ib" mtu "$1"
}
testnet_order() {
    local r=$1 i
    shift
    order=("$@")
    if [ $((r % 2)) -eq 0 ]; then
        order=()
        for ((i = $#; i >= 1; i--)); do order+=("${!i}"); done
    fi
}
testnet_ready() {
    local i
    for i in $(seq 600); do
        if [ "$1" = kernel ]; then
            ip netns exec "$b" ss -Htln 'sport = :5201' | grep -q . && return 0
        else
            grep -q "listening on" "$1" 2>/dev/null && return 0
        fi
        if ! kill -0 "$sp" 2>/dev/null; then
            echo "the server exited" >&2
            [ "$1" = kernel ] || cat "$1" >&2
            exit 1
        fi
        sleep 0.05
    done
    echo "the server did not get ready within 30 s" >&2
    exit 1
}
