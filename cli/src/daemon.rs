//! `xtcp serve -D` and `-I pidfile`, as `iperf3 -s -D -I FILE`: the server
//! detaches from the terminal before anything is set up, and the pid file
//! names the process that serves, for as long as it serves.
//!
//! Order (the caller's): [`PidFile::check`] while errors still reach the
//! terminal, [`daemonize`] while the process has one thread (before the
//! engine, the metrics server or any other thread starts), then
//! [`PidFile::write`] with the daemon's pid; dropping the [`PidFile`] (serve
//! returns, after SIGINT/SIGTERM too) removes the file.
//!
//! The command the user ran returns once the daemon serves ([`ready`]),
//! with status 0, or with its error and status 1 if it failed before
//! ([`failed`], or its exit): a pipe from the daemon to it says which.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// A pid file: checked, then written, removed on drop.
#[derive(Debug)]
pub(crate) struct PidFile {
    path: PathBuf,
    written: bool,
}

/// True if a process `pid` runs now that is an xtcp: its command name is
/// this process's, and it is not a zombie. (A pid file a killed serve left
/// may name a pid the system has given to another program since, or a
/// zombie nobody reaped: neither holds the file.)
fn running(pid: u32) -> bool {
    let name_state = |stat: &str| -> Option<(String, char)> {
        // "PID (COMM) STATE …": COMM may hold spaces and parentheses.
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_owned();
        Some((comm, rest.trim_start().chars().next()?))
    };
    let ours = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| name_state(&s));
    let theirs = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| name_state(&s));
    match (ours, theirs) {
        (_, None) => false,
        (_, Some((_, 'Z' | 'X'))) => false,
        (Some((me, _)), Some((them, _))) => me == them,
        // Our own name unreadable: any live process holds the file.
        (None, Some(_)) => true,
    }
}

impl PidFile {
    /// Refuses a file that names a running process (another serve, most
    /// likely); a stale one (its process gone, or no pid in it) is
    /// replaced. The path is made absolute, so that it still names the same
    /// file if the working directory changes.
    pub(crate) fn check(path: &Path) -> anyhow::Result<PidFile> {
        let path = std::path::absolute(path)
            .with_context(|| format!("-I {}: not a usable path", path.display()))?;
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(pid) = text.trim().parse::<u32>() {
                if pid != std::process::id() && running(pid) {
                    bail!(
                        "-I {}: it names pid {pid}, which is running (another xtcp serve?); \
                         stop it or give another pid file",
                        path.display()
                    );
                }
            }
        }
        Ok(PidFile {
            path,
            written: false,
        })
    }

    /// Writes this process's pid (after [`daemonize`]: the daemon's), to a
    /// file beside it that is then renamed over it: a reader (a supervisor,
    /// a second serve's check) sees the old file or the whole new one,
    /// never an empty or half-written one.
    pub(crate) fn write(&mut self) -> anyhow::Result<()> {
        let what = || format!("-I {}: cannot write it", self.path.display());
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, format!("{}\n", std::process::id())).with_context(what)?;
        if let Err(e) = std::fs::rename(&tmp, &self.path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e).with_context(what);
        }
        self.written = true;
        Ok(())
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if self.written {
            // Only if it still names us (a later serve may have replaced it).
            let ours = std::fs::read_to_string(&self.path)
                .is_ok_and(|t| t.trim() == std::process::id().to_string());
            if ours && let Err(e) = std::fs::remove_file(&self.path) {
                // After --user the directory may not let us (a root-owned
                // /run): said, not left silently.
                eprintln!(
                    "xtcp serve: -I {}: cannot remove it ({e}){}",
                    self.path.display(),
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        ": after --user, give a pid file in a directory that user may write \
                         (a systemd unit's RuntimeDirectory)"
                    } else {
                        ""
                    }
                );
            }
        }
    }
}

/// Points standard output and error at `log` (appended), as [`daemonize`]
/// does: after the log file was rotated (SIGHUP), so that the daemon lets
/// the old one go.
pub(crate) fn redirect_std(log: &Path) -> anyhow::Result<()> {
    let out = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("--logfile {}: cannot open it", log.display()))?;
    rustix::stdio::dup2_stdout(&out).context("dup2 onto standard output")?;
    rustix::stdio::dup2_stderr(&out).context("dup2 onto standard error")?;
    Ok(())
}

/// Detaches as daemon(3) does, without changing directory: fork (the
/// parent exits once the daemon serves or failed: see [`ready`]), a new
/// session, standard input from /dev/null, standard output and error to
/// `log` (appended) or /dev/null. Call only while the process has a single
/// thread.
pub(crate) fn daemonize(log: Option<&Path>) -> anyhow::Result<()> {
    let (from_daemon, to_parent) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).context("-D: pipe")?;
    let null = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .context("-D: opening /dev/null")?;
    let out = match log {
        Some(p) => std::fs::File::options()
            .create(true)
            .append(true)
            .open(p)
            .with_context(|| format!("-D: --logfile {}: cannot open it", p.display()))?,
        None => null.try_clone().context("-D: duplicating /dev/null")?,
    };
    // SAFETY: fork(2) in a process with one thread (the caller's contract):
    // the child is a full copy, no lock can be held by a thread that does
    // not exist in it.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => bail!("-D: fork failed: {}", std::io::Error::last_os_error()),
        0 => {}
        _ => {
            drop(to_parent);
            parent_waits(std::fs::File::from(from_daemon), log)
        }
    }
    drop(from_daemon);
    if let Ok(mut r) = READY.lock() {
        *r = Some(std::fs::File::from(to_parent));
    }
    rustix::process::setsid().context("-D: setsid failed")?;
    rustix::stdio::dup2_stdin(&null).context("-D: dup2 onto standard input")?;
    rustix::stdio::dup2_stdout(&out).context("-D: dup2 onto standard output")?;
    rustix::stdio::dup2_stderr(&out).context("-D: dup2 onto standard error")?;
    Ok(())
}

/// The daemon's end of the pipe its parent waits on: written once, when
/// it serves or failed first.
static READY: std::sync::Mutex<Option<std::fs::File>> = std::sync::Mutex::new(None);

/// The parent of [`daemonize`]: exits 0 once the daemon serves, else 1
/// with the daemon's error (or that it exited first), so that a daemon
/// that failed to start is not taken for one that runs.
fn parent_waits(mut from_daemon: std::fs::File, log: Option<&Path>) -> ! {
    let mut said = Vec::new();
    // Until the daemon writes and closes its end, or exits.
    let _ = std::io::Read::read_to_end(&mut from_daemon, &mut said);
    match said.as_slice() {
        [1] => std::process::exit(0),
        [] => eprintln!(
            "xtcp: error: -D: the daemon exited before it served{}",
            log.map_or_else(String::new, |p| format!(" (see {})", p.display()))
        ),
        text => eprintln!("xtcp: error: {}", String::from_utf8_lossy(text)),
    }
    std::process::exit(1)
}

/// The daemon serves: its parent exits 0 (nothing if not daemonized).
pub(crate) fn ready() {
    if let Some(mut f) = READY.lock().ok().and_then(|mut r| r.take()) {
        let _ = std::io::Write::write_all(&mut f, &[1]);
    }
}

/// The daemon failed before it served (`msg`): its parent says so and
/// exits 1 (nothing if not daemonized, or once ready).
pub(crate) fn failed(msg: &str) {
    if let Some(mut f) = READY.lock().ok().and_then(|mut r| r.take()) {
        let _ = std::io::Write::write_all(&mut f, msg.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::running;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// A pid file holds against a live process with this one's name only:
    /// not against another program, a zombie, or no process at all.
    #[test]
    fn only_a_live_process_of_ours_holds_a_pid_file() {
        assert!(running(std::process::id()));
        let mut other = Command::new("sleep").arg("30").spawn().unwrap();
        assert!(!running(other.id()), "sleep is no xtcp");
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(!running(other.id()), "gone");
        // Ours, exited and not yet reaped: a zombie.
        let mut ours = Command::new("/proc/self/exe")
            .arg("--list")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stat = format!("/proc/{}/stat", ours.id());
        let deadline = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&stat).is_ok_and(|s| s.contains(") Z ")) {
            assert!(Instant::now() < deadline, "the child never exited");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!running(ours.id()), "a zombie");
        ours.wait().unwrap();
    }
}
