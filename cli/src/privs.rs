//! `xtcp serve --user NAME`: set up as root, serve as NAME with no
//! capabilities.
//!
//! Order (the caller keeps it):
//!
//! 1. [`prepare`], before anything is set up and before any thread is
//!    spawned: looks the user up (a missing user is an error here), checks
//!    that xtcp can become it (effective uid 0 with CAP_SETUID and
//!    CAP_SETGID), and sets on the main thread what threads inherit when
//!    they are created: `no_new_privs` on, the ambient and inheritable
//!    capability sets empty, keep-caps off. None of that narrows what setup
//!    may do (it keeps the permitted and effective sets).
//! 2. [`Target::become_user`], once the engine is set up — the steering
//!    program attached through its BPF link, the UMEM registered, the
//!    AF_XDP sockets bound and in the XSKMAP, the ports reserved, the
//!    workers running: `setgroups(0)`, `setresgid`, `setresuid` through
//!    glibc, which applies each to every thread of the process (nptl's
//!    SIGSETXID broadcast; the raw system calls would change the calling
//!    thread only). Leaving uid 0 for a uid that is not 0 makes the kernel
//!    clear the permitted, effective and ambient sets of each thread (no
//!    securebits asked otherwise). Then the process is made non-dumpable:
//!    it holds the BPF link, the steering maps and the AF_XDP sockets, and
//!    a dumpable process could be ptraced (and those descriptors taken
//!    with `pidfd_getfd`) by anything else running as the same user.
//! 3. [`verify`], at once: every thread in `/proc/self/task` must show the
//!    user's uid and gid four times, no supplementary group, CapEff,
//!    CapPrm, CapInh and CapAmb 0 and NoNewPrivs 1, and the process must be
//!    non-dumpable; otherwise the run fails (the caller stops the engine
//!    before any test is served).
//!
//! What works without any capability afterwards (cli/tests/service.rs
//! serves stock iperf3 tests and stops this way): the AF_XDP rings and
//! their `sendto`/`recvfrom`/`poll` wake-ups and `XDP_STATISTICS`, BPF map
//! reads and writes through the descriptors already open (since Linux 6.5
//! only `BPF_MAP_CREATE` and `BPF_PROG_LOAD` check privileges; older
//! kernels with `kernel.unprivileged_bpf_disabled` set refuse every `bpf()`
//! call, and the steering counters are then missing from the summary), the
//! ethtool statistics ioctl (`ETHTOOL_GSTATS`, `ETHTOOL_GDRVINFO` need no
//! capability), netlink reads, closing the reservation sockets, and the
//! detach at SIGTERM: closing the BPF link's descriptor needs nothing (a
//! netlink-attached program, on kernels before 5.9 that have no XDP links,
//! would need CAP_NET_ADMIN to detach). What does not: loading or
//! attaching another program, binding another AF_XDP socket, registering
//! another UMEM — nothing `serve` does after setup. So no capability is
//! kept.
//!
//! The FFI points: `getpwnam_r`, `setgroups`, `setresgid`, `setresuid`
//! (glibc's, for the all-threads semantics above).

use std::ffi::{CStr, CString};

use anyhow::{Context, bail};
use rustix::thread::{CapabilitySet, CapabilitySets};

/// The user `--user` names, looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Its name, as given.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
}

/// Looks `name` up in the user database (NSS: `/etc/passwd`, LDAP, …).
fn lookup(name: &str) -> anyhow::Result<Option<Target>> {
    let c = CString::new(name).map_err(|_| anyhow::anyhow!("--user {name:?}: a NUL byte"))?;
    let mut buf = vec![0u8; 1024];
    loop {
        let mut pw = std::mem::MaybeUninit::<libc::passwd>::uninit();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `c` is a NUL-terminated string; `pw` and `buf` outlive the
        // call and `buf.len()` is the buffer's length; glibc writes the
        // entry into `pw` (its strings into `buf`) and sets `result` to
        // `pw` or to null.
        let rc = unsafe {
            libc::getpwnam_r(
                c.as_ptr(),
                pw.as_mut_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if result.is_null() {
            // Not found is rc 0 (or ENOENT / ESRCH / EBADF / EPERM from
            // some NSS modules, see getpwnam(3)).
            return match rc {
                0 | libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => Ok(None),
                e => Err(std::io::Error::from_raw_os_error(e))
                    .with_context(|| format!("--user {name}: looking the user up (getpwnam_r)")),
            };
        }
        // SAFETY: `result` is non-null, so glibc filled `pw` in.
        let pw = unsafe { pw.assume_init() };
        // SAFETY: `pw_name` points into `buf`, NUL-terminated, alive here.
        let found = unsafe { CStr::from_ptr(pw.pw_name) };
        return Ok(Some(Target {
            name: found.to_string_lossy().into_owned(),
            uid: pw.pw_uid,
            gid: pw.pw_gid,
        }));
    }
}

/// Step 1 (see the module): looks the user up and readies the process to
/// become it; errors before anything is set up.
pub fn prepare(name: &str) -> anyhow::Result<Target> {
    let Some(t) = lookup(name)? else {
        bail!(
            "no such user `{name}`: create it (`useradd --system --no-create-home --shell \
             /usr/sbin/nologin {name}`) or give an existing unprivileged user with --user"
        );
    };
    if t.uid == 0 {
        bail!(
            "--user {name}: `{name}` is uid 0, which keeps every privilege; give an \
             unprivileged user (e.g. `useradd --system xtcp`, then --user xtcp)"
        );
    }
    let euid = rustix::process::geteuid().as_raw();
    if euid != 0 {
        bail!(
            "--user {name}: xtcp drops to `{name}` from root once it is set up, but it runs as \
             uid {euid}: start it as root (the unit in contrib/ does), or leave --user out and \
             run it as that user with the capabilities `xtcp probe` lists"
        );
    }
    let caps = rustix::thread::capabilities(None).context("capget")?;
    let missing: Vec<&str> = [
        (CapabilitySet::SETUID, "CAP_SETUID"),
        (CapabilitySet::SETGID, "CAP_SETGID"),
    ]
    .into_iter()
    .filter(|(c, _)| !caps.effective.contains(*c))
    .map(|(_, n)| n)
    .collect();
    if !missing.is_empty() {
        bail!(
            "--user {name}: becoming `{name}` needs {}, which xtcp lacks: add {} to the unit's \
             CapabilityBoundingSet= (or to the capabilities xtcp is started with)",
            missing.join(" and "),
            missing.join(" ")
        );
    }
    // Inherited by every thread spawned from here on (the workers).
    rustix::thread::set_no_new_privs(true).context("prctl(PR_SET_NO_NEW_PRIVS)")?;
    rustix::thread::clear_ambient_capability_set().context("prctl(PR_CAP_AMBIENT_CLEAR_ALL)")?;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            inheritable: CapabilitySet::empty(),
            ..caps
        },
    )
    .context("capset (emptying the inheritable set)")?;
    // Fails only where a locked securebit forbids it; `verify` then finds
    // the capabilities the kernel kept.
    let _ = rustix::thread::set_keep_capabilities(false);
    Ok(t)
}

impl Target {
    /// Steps 2 and 3 (see the module): becomes the user on every thread,
    /// turns dumpable off and checks that all of it holds.
    pub fn become_user(&self) -> anyhow::Result<()> {
        let what = |call: &str| format!("--user {}: {call}", self.name);
        // SAFETY: setgroups with size 0 reads no list; glibc applies it to
        // every thread.
        if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
            return Err(std::io::Error::last_os_error()).context(what("setgroups(0, NULL)"));
        }
        // SAFETY: plain integer arguments; glibc applies it to every thread.
        if unsafe { libc::setresgid(self.gid, self.gid, self.gid) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| what(&format!("setresgid({0}, {0}, {0})", self.gid)));
        }
        // SAFETY: as above.
        if unsafe { libc::setresuid(self.uid, self.uid, self.uid) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| what(&format!("setresuid({0}, {0}, {0})", self.uid)));
        }
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
            .with_context(|| what("prctl(PR_SET_DUMPABLE, 0)"))?;
        verify(self)
    }
}

/// One thread's credentials, from its `/proc/…/status`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Creds {
    /// `Name:` (the thread's name).
    pub name: String,
    /// `Uid:` real, effective, saved, filesystem.
    pub uids: Vec<u32>,
    /// `Gid:` likewise.
    pub gids: Vec<u32>,
    /// `Groups:` (supplementary).
    pub groups: Vec<u32>,
    /// `CapInh`, `CapPrm`, `CapEff`, `CapAmb`.
    pub caps: [u64; 4],
    /// `NoNewPrivs:`.
    pub no_new_privs: bool,
}

const CAP_FIELDS: [&str; 4] = ["CapInh", "CapPrm", "CapEff", "CapAmb"];

/// Parses a `/proc/…/status` text; `None` if a field is missing.
pub fn parse_status(text: &str) -> Option<Creds> {
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .map(str::trim)
    };
    let ids = |k: &str| -> Option<Vec<u32>> {
        field(k)?
            .split_whitespace()
            .map(|n| n.parse().ok())
            .collect()
    };
    let mut caps = [0u64; 4];
    for (c, k) in caps.iter_mut().zip(CAP_FIELDS) {
        *c = u64::from_str_radix(field(k)?, 16).ok()?;
    }
    Some(Creds {
        name: field("Name")?.to_owned(),
        uids: ids("Uid")?,
        gids: ids("Gid")?,
        groups: ids("Groups")?,
        caps,
        no_new_privs: field("NoNewPrivs")? == "1",
    })
}

/// What in `c` does not match a thread that runs as `t` with nothing else
/// (empty: all holds).
pub fn problems(c: &Creds, t: &Target) -> Vec<String> {
    let mut p = Vec::new();
    if c.uids.len() != 4 || c.uids.iter().any(|&u| u != t.uid) {
        p.push(format!("Uid {:?} (want {} four times)", c.uids, t.uid));
    }
    if c.gids.len() != 4 || c.gids.iter().any(|&g| g != t.gid) {
        p.push(format!("Gid {:?} (want {} four times)", c.gids, t.gid));
    }
    if !c.groups.is_empty() {
        p.push(format!("Groups {:?} (want none)", c.groups));
    }
    for (v, k) in c.caps.iter().zip(CAP_FIELDS) {
        if *v != 0 {
            p.push(format!("{k} {v:016x} (want 0)"));
        }
    }
    if !c.no_new_privs {
        p.push("NoNewPrivs 0 (want 1)".to_owned());
    }
    p
}

/// Step 3 (see the module): every thread of this process runs as `t` with
/// no capability, and the process is not dumpable.
pub fn verify(t: &Target) -> anyhow::Result<()> {
    let fail = |detail: String| {
        let bits = rustix::thread::capabilities_secure_bits()
            .map_or_else(|_| "unknown".to_owned(), |b| format!("{:#x}", b.bits()));
        anyhow::anyhow!(
            "--user {}: the privilege drop did not hold: {detail} (securebits {bits}; the \
             keep-caps or no-setuid-fixup bits, e.g. SecureBits= in a unit, keep capabilities \
             across the change of user): xtcp stops rather than serve with privileges",
            t.name
        )
    };
    let mut seen = 0;
    let tasks = std::fs::read_dir("/proc/self/task").context("reading /proc/self/task")?;
    for task in tasks {
        let task = task.context("reading /proc/self/task")?;
        let path = task.path().join("status");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // A thread that exited meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let c = parse_status(&text)
            .ok_or_else(|| fail(format!("{} cannot be parsed", path.display())))?;
        let p = problems(&c, t);
        if !p.is_empty() {
            return Err(fail(format!(
                "thread {} ({}): {}",
                task.file_name().to_string_lossy(),
                c.name,
                p.join(", ")
            )));
        }
        seen += 1;
    }
    if seen == 0 {
        return Err(fail("no thread in /proc/self/task".to_owned()));
    }
    match rustix::process::dumpable_behavior() {
        Ok(rustix::process::DumpableBehavior::NotDumpable) => Ok(()),
        Ok(d) => Err(fail(format!("the process is dumpable ({d:?})"))),
        Err(e) => Err(fail(format!("prctl(PR_GET_DUMPABLE): {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOBODY: &str = "Name:\txtcp-q0\nUmask:\t0022\nState:\tS (sleeping)\n\
        Uid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nFDSize:\t64\n\
        Groups:\t \nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
        CapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n\
        NoNewPrivs:\t1\nSeccomp:\t0\n";

    fn nobody() -> Target {
        Target {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
        }
    }

    #[test]
    fn a_dropped_thread_passes() {
        let c = parse_status(NOBODY).unwrap();
        assert_eq!(c.name, "xtcp-q0");
        assert_eq!(c.uids, [65534; 4]);
        assert!(c.groups.is_empty());
        assert_eq!(problems(&c, &nobody()), Vec::<String>::new());
    }

    #[test]
    fn each_thing_left_over_is_named() {
        let root = NOBODY
            .replace("Uid:\t65534\t65534\t65534", "Uid:\t0\t65534\t65534")
            .replace("Groups:\t ", "Groups:\t0 27")
            .replace("CapEff:\t0000000000000000", "CapEff:\t0000000000201000")
            .replace("CapAmb:\t0000000000000000", "CapAmb:\t0000000000001000")
            .replace("NoNewPrivs:\t1", "NoNewPrivs:\t0");
        let p = problems(&parse_status(&root).unwrap(), &nobody());
        assert_eq!(
            p,
            [
                "Uid [0, 65534, 65534, 65534] (want 65534 four times)",
                "Groups [0, 27] (want none)",
                "CapEff 0000000000201000 (want 0)",
                "CapAmb 0000000000001000 (want 0)",
                "NoNewPrivs 0 (want 1)",
            ]
        );
        let other_gid = NOBODY.replace("Gid:\t65534\t65534", "Gid:\t65534\t0");
        assert_eq!(
            problems(&parse_status(&other_gid).unwrap(), &nobody()),
            ["Gid [65534, 0, 65534, 65534] (want 65534 four times)"]
        );
    }

    #[test]
    fn a_status_without_a_field_is_not_taken_for_a_clean_one() {
        assert_eq!(parse_status(&NOBODY.replace("CapPrm", "CapXyz")), None);
        assert_eq!(parse_status(&NOBODY.replace("NoNewPrivs:\t1\n", "")), None);
        assert_eq!(
            parse_status(&NOBODY.replace("Uid:\t65534", "Uid:\tx")),
            None
        );
    }

    #[test]
    fn users_are_looked_up() {
        let root = lookup("root").unwrap().unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(lookup("xtcp-no-such-user-4711").unwrap(), None);
        let e = prepare("xtcp-no-such-user-4711").unwrap_err().to_string();
        assert!(
            e.starts_with("no such user `xtcp-no-such-user-4711`: create it (`useradd --system"),
            "{e}"
        );
        let e = prepare("root").unwrap_err().to_string();
        assert!(e.contains("is uid 0"), "{e}");
    }
}
