//! The calling thread's effective capabilities and memlock limit, for
//! messages that name what is missing (the loader, UMEM registration) and
//! for `probe`.
//!
//! Capabilities are per thread: they are read from `CapEff` in
//! `/proc/thread-self/status` (falling back to `/proc/self/status`).

/// A capability xtcp needs, with its bit number in `CapEff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap {
    /// Its name, e.g. "CAP_NET_ADMIN".
    pub name: &'static str,
    /// Bit number (`include/uapi/linux/capability.h`).
    pub bit: u32,
}

/// `CAP_NET_ADMIN`: attach XDP programs, bind AF_XDP sockets.
pub const NET_ADMIN: Cap = Cap {
    name: "CAP_NET_ADMIN",
    bit: 12,
};
/// `CAP_NET_RAW`: create AF_XDP sockets.
pub const NET_RAW: Cap = Cap {
    name: "CAP_NET_RAW",
    bit: 13,
};
/// `CAP_IPC_LOCK`: lock memory beyond `RLIMIT_MEMLOCK` (UMEM pages).
pub const IPC_LOCK: Cap = Cap {
    name: "CAP_IPC_LOCK",
    bit: 14,
};
/// `CAP_SYS_ADMIN`: stands in for `CAP_BPF` and `CAP_PERFMON`.
pub const SYS_ADMIN: Cap = Cap {
    name: "CAP_SYS_ADMIN",
    bit: 21,
};
/// `CAP_PERFMON`: the verifier allows pointer arithmetic (the steering
/// program's packet parsing) to programs loaded with it (`bpf_allow_ptr_leaks`).
pub const PERFMON: Cap = Cap {
    name: "CAP_PERFMON",
    bit: 38,
};
/// `CAP_BPF`: load BPF programs and create maps.
pub const BPF: Cap = Cap {
    name: "CAP_BPF",
    bit: 39,
};

/// The capabilities `probe` reports.
pub const REPORTED: [Cap; 6] = [NET_ADMIN, NET_RAW, IPC_LOCK, SYS_ADMIN, PERFMON, BPF];

/// A `CapEff` bit set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapSet(pub u64);

impl CapSet {
    /// Whether `cap` is in the set.
    pub fn has(self, cap: Cap) -> bool {
        self.0 & (1u64 << cap.bit) != 0
    }

    /// Whether `cap` is in the set, or `CAP_SYS_ADMIN`, which the kernel
    /// accepts in its place (`CAP_BPF`, `CAP_PERFMON`).
    pub fn has_or_sys_admin(self, cap: Cap) -> bool {
        self.has(cap) || self.has(SYS_ADMIN)
    }
}

/// Parses the `CapEff:` line of a `/proc/*/status` file.
pub fn parse_cap_eff(status: &str) -> Option<CapSet> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .map(CapSet)
}

/// The calling thread's `/proc` status text.
pub fn thread_status() -> std::io::Result<String> {
    std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status"))
}

/// The calling thread's effective capabilities, if they can be read.
pub fn effective() -> Option<CapSet> {
    thread_status().ok().as_deref().and_then(parse_cap_eff)
}

/// The `RLIMIT_MEMLOCK` soft limit in bytes (`None`: unlimited).
pub fn memlock_soft() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Memlock).current
}

/// Whether `bytes` more locked memory fit: `CAP_IPC_LOCK` lifts the limit
/// (the kernel then charges UMEM pages to the memory cgroup instead);
/// without it they count against `RLIMIT_MEMLOCK`, shared by all of the
/// user's processes. `None` when the capabilities cannot be read.
pub fn memlock_covers(caps: Option<CapSet>, soft: Option<u64>, bytes: u64) -> Option<bool> {
    let caps = caps?;
    Some(caps.has(IPC_LOCK) || soft.is_none_or(|s| s >= bytes))
}

/// How to raise the memlock limit, for messages: `needed` bytes, the one
/// UMEM all of xtcp's queues share. Where the limit alone would hold them,
/// this user's other processes hold locked memory too (another xtcp, a
/// database): the limit to ask for is theirs and the UMEM's together, at
/// least.
pub fn memlock_hint(soft: Option<u64>, needed: u64) -> String {
    let now = soft.map_or_else(|| "unlimited".to_owned(), |b| format!("{b} bytes"));
    let (others, ask) = match soft {
        Some(s) if s >= needed => (
            ", which the limit alone would hold: this user's other processes (another xtcp?) \
             hold locked memory too, and theirs and the UMEM's together must fit",
            s.saturating_add(needed),
        ),
        _ => ("", needed),
    };
    format!(
        "without CAP_IPC_LOCK the UMEM's pages count against RLIMIT_MEMLOCK, now {now} \
         (shared by all of this user's processes), and the UMEM (one for all of xtcp's \
         queues, --frames for each) needs {needed} bytes ({} KiB) of it{others}: raise it with \
         `ulimit -l {}` (or `ulimit -l unlimited`) in the shell that starts xtcp, \
         `LimitMEMLOCK=infinity` in a systemd unit, or grant CAP_IPC_LOCK, which lifts the \
         limit; or use fewer --frames",
        needed.div_ceil(1024),
        ask.div_ceil(1024)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_sets_and_memlock() {
        let s = parse_cap_eff("Name:\tx\nCapEff:\t000001ffffffffff\n").unwrap();
        assert!(s.has(PERFMON) && s.has(BPF) && s.has(NET_ADMIN));
        let bpf_only = CapSet((1 << 39) | (1 << 12) | (1 << 13));
        assert!(!bpf_only.has_or_sys_admin(PERFMON));
        assert!(CapSet(1 << 21).has_or_sys_admin(PERFMON));
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None);
        let no_lock = Some(CapSet(0));
        assert_eq!(
            memlock_covers(no_lock, Some(8 << 20), 64 << 20),
            Some(false)
        );
        assert_eq!(
            memlock_covers(no_lock, Some(64 << 20), 64 << 20),
            Some(true)
        );
        assert_eq!(memlock_covers(no_lock, None, 64 << 20), Some(true));
        // Below the limit alone, the user's other processes hold the rest:
        // the limit asked for is above the one there is.
        let h = memlock_hint(Some(8 << 20), 6 << 20);
        assert!(h.contains("ulimit -l 14336"), "{h}");
        assert!(h.contains("other processes"), "{h}");
        let h = memlock_hint(Some(64 << 10), 48 << 20);
        assert!(
            h.contains("ulimit -l 49152") && !h.contains("other processes"),
            "{h}"
        );
        assert_eq!(
            memlock_covers(Some(CapSet(1 << 14)), Some(0), 64 << 20),
            Some(true)
        );
        assert_eq!(memlock_covers(None, Some(0), 1), None);
        let h = memlock_hint(Some(65536), 67108864);
        assert!(h.contains("RLIMIT_MEMLOCK, now 65536 bytes"), "{h}");
        assert!(h.contains("needs 67108864 bytes"), "{h}");
        assert!(
            h.contains("ulimit -l 65536") && h.contains("LimitMEMLOCK="),
            "{h}"
        );
    }
}
