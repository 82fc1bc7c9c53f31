#!/usr/bin/env bash
# Installs what xtcp's build, tests and benchmarks need on Debian 12, where
# missing. Sourced by main.sh and test.sh; safe to run again.
set -euo pipefail

need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
have clang || need_pkgs+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need_pkgs+=(libbpf-dev)
[ -f /usr/include/x86_64-linux-gnu/asm/types.h ] || [ -f /usr/include/asm/types.h ] || need_pkgs+=(linux-libc-dev)
have ip || need_pkgs+=(iproute2)
have ethtool || need_pkgs+=(ethtool)
have ping || need_pkgs+=(iputils-ping)
have iperf3 || need_pkgs+=(iperf3)
have socat || need_pkgs+=(socat)
have python3 || need_pkgs+=(python3)
# bench: its records checked against docs/bench-record.schema.json, its
# kernel send buffers set with sysctl, its queues with tc (iproute2).
python3 -c 'import jsonschema' 2>/dev/null || need_pkgs+=(python3-jsonschema)
have sysctl || need_pkgs+=(procps)
have setpriv || need_pkgs+=(util-linux)
have cc || need_pkgs+=(gcc)
have pkg-config || need_pkgs+=(pkg-config)
# serve's tests: RSA keys and tokens (cli/tests/limits.rs), the unit file
# checked with systemd-analyze (cli/tests/service.rs).
have openssl || need_pkgs+=(openssl)
# xsk-bench's wakeup counts against the syscalls strace sees
# (cli/tests/xsk_bench.rs).
have strace || need_pkgs+=(strace)
have systemd-analyze || need_pkgs+=(systemd)

# install [APT-OPTION...] -- PACKAGE...: apt-get install, as root only.
install() {
    local opts=()
    while [ "$1" != "--" ]; do opts+=("$1"); shift; done
    shift
    if [ "$(id -u)" -ne 0 ]; then
        echo "xtcp: missing packages: $*; run as root or install them" >&2
        exit 1
    fi
    echo "xtcp: installing $*" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q "${opts[@]}" "$@" >/dev/null
}
if [ "${#need_pkgs[@]}" -gt 0 ]; then
    install -- "${need_pkgs[@]}"
fi
# promtool and a Prometheus server for the metrics tests (cli/tests/metrics.rs),
# without the exporters Debian recommends with it.
if ! have promtool || ! have prometheus; then
    install --no-install-recommends -- prometheus
fi

if ! have cargo; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
# Under sudo, PATH is sudo's secure_path and HOME root's: a toolchain that
# rustup installed for the user who ran sudo is theirs (its proxies find
# the toolchains through RUSTUP_HOME).
if ! have cargo && [ -n "${SUDO_USER:-}" ]; then
    user_home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
    if [ -n "$user_home" ] && [ -x "$user_home/.cargo/bin/cargo" ]; then
        export PATH="$user_home/.cargo/bin:$PATH"
        if [ -z "${RUSTUP_HOME:-}" ] && [ -d "$user_home/.rustup" ]; then
            export RUSTUP_HOME="$user_home/.rustup"
        fi
    fi
fi
if ! have cargo; then
    echo "xtcp: cargo not found: install Rust 1.87 or newer (https://rustup.rs)" >&2
    exit 1
fi
