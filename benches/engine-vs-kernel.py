#!/usr/bin/env python3
"""xtcp's engine against the Linux kernel's TCP, side by side, on a test
network of its own (two network namespaces joined by a veth pair, offloads
off so every packet is MTU-sized, as a NIC's wire carries them).

For each MTU, interleaved in one run, REPEAT times:
  kernel -> kernel   socat (256 KiB blocks from /dev/zero) -> socat (/dev/null)
  xtcp   -> kernel   xtcp send --zeros (or --pattern 1)     -> socat (/dev/null)
  kernel -> xtcp     socat (256 KiB blocks from /dev/zero) -> xtcp recv --discard

Gbit/s: payload bytes over the transfer time (socat: the sender's wall time;
xtcp: first connection established to last closed, from its report).
Every end runs CUBIC (the kernel's sockets by TCP_CONGESTION, whatever the
host's default). CPU s/GiB: all CPUs' busy time from /proc/stat over the run (both ends share
this machine; user + system + softirq, everything but idle and iowait),
per GiB moved. Ratios are xtcp / kernel from the same repetition; the table
shows medians.

Usage (root): benches/engine-vs-kernel.py [--mtu 1500,9000,...] [--bytes 4G]
              [--repeat 3] [--xtcp target/release/xtcp] [--json FILE]

With --file-vs-zeros, instead: `xtcp send --file F` (F: --bytes of random
data in the page cache, read once before) against `xtcp send --zeros` of the
same size, interleaved, both to socat; the ratio is file / zeros.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

PORT = 5301
# The kernel's sockets run CUBIC, as xtcp does, whatever the host's default
# (BBR on the hosts of docs/BENCHMARKS.md): TCP_CONGESTION (IPPROTO_TCP 6,
# option 13) set by socat.
CUBIC = "setsockopt-string=6:13:cubic"
SOURCE = ["--zeros"]


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, **kw)


def busy_ticks():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle


def ticks_to_s(t):
    return t / os.sysconf("SC_CLK_TCK")


class Net:
    def __init__(self, mtu):
        tag = f"{os.getpid()}m{mtu}"
        self.a, self.b = f"xbench-a{tag}", f"xbench-b{tag}"
        self.ia, self.ib = f"xba{os.getpid() % 100000}", f"xbb{os.getpid() % 100000}"
        sh("ip", "netns", "add", self.a)
        sh("ip", "netns", "add", self.b)
        sh("ip", "-n", self.a, "link", "add", self.ia, "type", "veth", "peer", "name",
           self.ib, "netns", self.b)
        for ns, i, ip in ((self.a, self.ia, "198.18.0.1"), (self.b, self.ib, "198.18.0.2")):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", i, "mtu", str(mtu), "up")
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", i)
            sh("ip", "netns", "exec", ns, "ethtool", "-K", i, "tso", "off", "gso", "off",
               "gro", "off", "tx", "off", stdout=subprocess.DEVNULL)

    def close(self):
        for ns in (self.a, self.b):
            sh("ip", "netns", "del", ns, check=False, stderr=subprocess.DEVNULL)

    def run(self, ns, *args, **kw):
        return subprocess.Popen(["ip", "netns", "exec", ns, *args], **kw)

    def wait_listening(self, ns, proc, timeout=30.0):
        """Until a kernel socket listens on PORT in `ns` (socat is ready)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                sys.exit(f"the listener in {ns} exited ({proc.returncode}) before listening")
            out = sh("ip", "netns", "exec", ns, "ss", "-Htln", f"sport = :{PORT}",
                     stdout=subprocess.PIPE, text=True).stdout
            if out.strip():
                return
            time.sleep(0.01)
        sys.exit(f"nothing listened on port {PORT} in {ns} within {timeout:.0f} s")


def wait_for_line(proc, text, timeout=30.0):
    """Until `proc` writes a line holding `text` on its stderr (a pipe);
    the rest of its stderr is drained in the background."""
    seen, found = threading.Event(), []

    def drain():
        for line in proc.stderr:
            if text in line:
                found.append(line)
                seen.set()
        seen.set()  # end of stream: stop waiting either way

    threading.Thread(target=drain, daemon=True).start()
    if not seen.wait(timeout) or not found:
        sys.exit(f"{proc.args[3:5]} did not say {text!r} within {timeout:.0f} s")


def kernel_to_kernel(net, nbytes):
    rx = net.run(net.b, "socat", "-b", "262144", "-u",
                 f"TCP4-LISTEN:{PORT},bind=198.18.0.2,reuseaddr,{CUBIC}", "OPEN:/dev/null")
    net.wait_listening(net.b, rx)
    c0, t0 = busy_ticks(), time.time()
    sh("ip", "netns", "exec", net.a, "socat", "-b", "262144", "-u",
       f"OPEN:/dev/zero,readbytes={nbytes}", f"TCP4:198.18.0.2:{PORT},{CUBIC}")
    secs = time.time() - t0
    rx.wait(timeout=60)
    cpu = ticks_to_s(busy_ticks() - c0)
    return {"gbps": nbytes * 8 / secs / 1e9, "cpu_s_per_gib": cpu / (nbytes / 2**30),
            "seconds": secs, "retransmits": None}


def xtcp_to_kernel(net, nbytes, xtcp, extra):
    c0 = busy_ticks()
    r = xtcp_send(net, nbytes, xtcp, [*SOURCE, "--bytes", str(nbytes)], extra)
    cpu = ticks_to_s(busy_ticks() - c0)
    return {"gbps": r["gbps"], "cpu_s_per_gib": cpu / (nbytes / 2**30),
            "seconds": r["seconds"], "retransmits": r["retransmits"],
            "xtcp_cpu_s_per_gib": r["xtcp_cpu_s_per_gib"]}


def kernel_to_xtcp(net, nbytes, xtcp, extra):
    rx = net.run(net.a, xtcp, "recv", "--iface", net.ia, "-B", "198.18.0.1", "-p", str(PORT),
                 "--discard", "--bind", "copy", "--json", *extra,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Ready once it says so (XDP attached, UMEM set up); a probe connection
    # would be taken for the transfer.
    wait_for_line(rx, "listening on")
    c0 = busy_ticks()
    sh("ip", "netns", "exec", net.b, "socat", "-b", "262144", "-u",
       f"OPEN:/dev/zero,readbytes={nbytes}", f"TCP4:198.18.0.1:{PORT},{CUBIC}")
    out = rx.stdout.read()  # (its stderr: the drain thread's)
    rx.wait(timeout=120)
    cpu = ticks_to_s(busy_ticks() - c0)
    r = json.loads(out)
    return {"gbps": r["gbps"], "cpu_s_per_gib": cpu / (nbytes / 2**30),
            "seconds": r["seconds"], "retransmits": None,
            "xtcp_cpu_s_per_gib": r["cpu_seconds_per_gib"]}


def xtcp_send(net, nbytes, xtcp, source, extra):
    """`xtcp send SOURCE` from A to socat in B (into /dev/null); its report."""
    rx = net.run(net.b, "socat", "-b", "262144", "-u",
                 f"TCP4-LISTEN:{PORT},bind=198.18.0.2,reuseaddr,{CUBIC}", "OPEN:/dev/null")
    net.wait_listening(net.b, rx)
    out = sh("ip", "netns", "exec", net.a, xtcp, "send", "--iface", net.ia,
             "-c", "198.18.0.2", "-p", str(PORT), *source,
             "--bind", "copy", "--json", *extra, stdout=subprocess.PIPE,
             stderr=subprocess.DEVNULL).stdout
    rx.wait(timeout=60)
    r = json.loads(out)
    assert r["bytes"] == nbytes, r["bytes"]
    return {"gbps": r["gbps"], "seconds": r["seconds"], "retransmits": r["retransmits"],
            "xtcp_cpu_s_per_gib": r["cpu_seconds_per_gib"]}


def file_vs_zeros(a, nbytes):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".file-vs-zeros.bin")
    with open(path, "wb") as f:
        left = nbytes
        while left:
            n = min(left, 1 << 24)
            f.write(os.urandom(n))
            left -= n
    try:
        print(f"{'MTU':>6} {'zeros Gbit/s':>13} {'file Gbit/s':>12} {'file/zeros':>11}")
        samples = []
        for mtu in [int(m) for m in a.mtu.split(",")]:
            net = Net(mtu)
            try:
                ratios, zs, fs = [], [], []
                for rep in range(a.repeat):
                    with open(path, "rb") as f:  # into the page cache
                        while f.read(1 << 24):
                            pass
                    z = xtcp_send(net, nbytes, a.xtcp, ["--zeros", "--bytes", str(nbytes)],
                                  a.xtcp_args)
                    fl = xtcp_send(net, nbytes, a.xtcp, ["--file", path], a.xtcp_args)
                    zs.append(z["gbps"])
                    fs.append(fl["gbps"])
                    ratios.append(fl["gbps"] / z["gbps"])
                    samples.append({"mtu": mtu, "repeat": rep, "zeros": z, "file": fl})
                print(f"{mtu:>6} {statistics.median(zs):>13.2f} {statistics.median(fs):>12.2f} "
                      f"{statistics.median(ratios):>11.2f}", flush=True)
            finally:
                net.close()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(samples, f, indent=1)
    finally:
        os.unlink(path)


def parse_size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1].upper()] if s[-1].upper() in m else int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mtu", default="1500,9000,16384,32768,65535")
    ap.add_argument("--bytes", default="4G")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--xtcp", default="target/release/xtcp")
    ap.add_argument("--json", help="write every sample to this file")
    ap.add_argument("--pattern", action="store_true",
                    help="xtcp sends the pattern stream (generated, costs CPU) "
                    "instead of --zeros")
    ap.add_argument("--file-vs-zeros", action="store_true",
                    help="compare xtcp send --file (from the page cache) with --zeros")
    ap.add_argument("xtcp_args", nargs="*", help="extra xtcp options (after --)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("engine-vs-kernel: needs root (network namespaces, XDP)")
    nbytes = parse_size(a.bytes)
    if a.file_vs_zeros:
        return file_vs_zeros(a, nbytes)
    if a.pattern:
        SOURCE[:] = ["--pattern", "1"]
    samples = []
    print(f"{'MTU':>6} {'direction':<16} {'Gbit/s':>8} {'CPU s/GiB':>10} "
          f"{'xtcp/kernel Gbit/s':>19} {'xtcp/kernel CPU':>16}")
    for mtu in [int(m) for m in a.mtu.split(",")]:
        net = Net(mtu)
        try:
            rows = {"kernel -> kernel": [], "xtcp -> kernel": [], "kernel -> xtcp": []}
            for rep in range(a.repeat):
                k = kernel_to_kernel(net, nbytes)
                s = xtcp_to_kernel(net, nbytes, a.xtcp, a.xtcp_args)
                r = kernel_to_xtcp(net, nbytes, a.xtcp, a.xtcp_args)
                for name, v in (("kernel -> kernel", k), ("xtcp -> kernel", s),
                                ("kernel -> xtcp", r)):
                    v.update({"mtu": mtu, "direction": name, "repeat": rep})
                    if name != "kernel -> kernel":
                        v["gbps_ratio"] = v["gbps"] / k["gbps"]
                        v["cpu_ratio"] = v["cpu_s_per_gib"] / k["cpu_s_per_gib"]
                    rows[name].append(v)
                    samples.append(v)
            for name, vs in rows.items():
                med = lambda key: statistics.median(v[key] for v in vs)
                ratio = "" if name == "kernel -> kernel" else \
                    f"{med('gbps_ratio'):>19.2f} {med('cpu_ratio'):>16.2f}"
                print(f"{mtu:>6} {name:<16} {med('gbps'):>8.2f} {med('cpu_s_per_gib'):>10.2f} "
                      f"{ratio}", flush=True)
        finally:
            net.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(samples, f, indent=1)


if __name__ == "__main__":
    main()
