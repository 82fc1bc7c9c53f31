#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, unit tests, and the integration
# tests that build network namespaces (they need root). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

if [ "$(id -u)" -ne 0 ]; then
    echo "xtcp: the test suite needs root (network namespaces, XDP, AF_XDP)" >&2
    exit 1
fi

# Each phase says how long it took: the suite's budget is 20 minutes.
phase() {
    local t0=$SECONDS
    "$@"
    echo "xtcp: [$1 $2: $((SECONDS - t0)) s, $SECONDS s in all]" >&2
}
phase cargo fmt --all --check
phase cargo clippy --workspace --all-targets --locked -- -D warnings
phase cargo build --workspace --all-targets --locked
# The API docs build without a broken or private link.
RUSTDOCFLAGS="-D warnings" phase cargo doc --workspace --no-deps --locked
phase cargo test --workspace --locked
# The zero-copy path, for real: a virtio-net guest in QEMU, with the xtcp built above.
# A guest under emulation can fail for the emulator's reasons (tests/vm/run.sh
# says which were seen): a failed VM check is retried once, and says so, and
# what failed the first time is repeated at the end.
vm() { XTCP_VM_BIN="${CARGO_TARGET_DIR:-target}/debug/xtcp" bash tests/vm/run.sh; }
t_vm=$SECONDS
vm_log=$(mktemp /tmp/xtcp-vm-first.XXXXXX)
trap 'rm -f "$vm_log"' EXIT
if ! vm 2>&1 | tee "$vm_log"; then
    echo "xtcp: the VM check failed; retrying it once" >&2
    if ! vm; then
        echo "xtcp: the VM check failed twice; the first time:" >&2
        grep -E '^vm: \| ' "$vm_log" >&2 || true
        exit 1
    fi
    echo "xtcp: the VM check passed the second time; the first time:" >&2
    grep -E '^vm: \| ' "$vm_log" >&2 || true
fi
echo "xtcp: [VM check: $((SECONDS - t_vm)) s; the whole suite: $SECONDS s]" >&2
