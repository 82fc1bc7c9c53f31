//! A file written beside its destination and renamed over it only when it
//! is complete, so that a failed run leaves an existing file as it was:
//! `recv --out` and `client -F … -R`.
//!
//! What is replaced is what the path names: through a symlink, the file it
//! points to (the link stays), with that file's mode and owner. A path that
//! names no regular file (a device such as `/dev/null`, a FIFO, a socket)
//! is written in place, as a program writing to it would: there is nothing
//! there to keep or replace. So is one that reaches a process's open file
//! through `/proc` (`/dev/stdout`, `/dev/fd/N` as a shell's `>(…)` gives,
//! `/proc/self/fd/N`): it names the descriptor, not a place to put a file
//! beside (a regular file there is appended to, as the descriptor's own
//! writes would go on from its end).

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The file being written (`.NAME.xtcp-PID` beside the destination), and
/// where it goes once complete. Dropped unfinished, it is removed.
pub(crate) struct ReplaceFile {
    flag: &'static str,
    tmp: PathBuf,
    /// The destination: the path given, or the file its symlink names.
    path: PathBuf,
    /// The destination's mode and owner, to give the new file.
    keep: Option<(u32, u32, u32)>,
    /// Written in place (not a regular file, or a process's descriptor).
    in_place: bool,
    /// In place at the end: a regular file reached through `/proc`.
    append: bool,
    done: bool,
}

/// Opens what a [`ReplaceFile`] writes, on whichever thread writes it.
pub(crate) type Opener = Box<dyn FnOnce() -> std::io::Result<File> + Send>;

impl ReplaceFile {
    /// Nothing is created yet ([`opener`](Self::opener) makes the file);
    /// `flag` names the argument in messages.
    pub(crate) fn new(flag: &'static str, path: &Path) -> anyhow::Result<ReplaceFile> {
        if let Some(regular) = through_proc(path) {
            return Ok(ReplaceFile {
                flag,
                tmp: PathBuf::new(),
                path: path.to_owned(),
                keep: None,
                in_place: true,
                append: regular,
                done: false,
            });
        }
        let path = resolve(path).with_context(|| format!("{flag} {}", path.display()))?;
        let Some(name) = path.file_name() else {
            bail!("{flag} {}: not a file name", path.display());
        };
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(".xtcp-");
        keep_leftovers(&path, &tmp_name);
        tmp_name.push(std::process::id().to_string());
        let meta = std::fs::metadata(&path).ok();
        Ok(ReplaceFile {
            flag,
            tmp: path.with_file_name(tmp_name),
            keep: meta
                .as_ref()
                .filter(|m| m.is_file())
                .map(|m| (m.permissions().mode(), m.uid(), m.gid())),
            in_place: meta.is_some_and(|m| !m.is_file()),
            append: false,
            path,
            done: false,
        })
    }

    /// Whether the destination is written in place (it is no regular
    /// file): then nothing is renamed, and a failed run cannot leave it as
    /// it was.
    pub(crate) fn in_place(&self) -> bool {
        self.in_place
    }

    /// The file being written beside the destination; `None` in place.
    pub(crate) fn tmp(&self) -> Option<&Path> {
        (!self.in_place).then_some(self.tmp.as_path())
    }

    /// Where a run that did not complete leaves what it wrote:
    /// `PATH.partial` (or, where that is taken, the first free of
    /// `PATH.partial.1`, `.2`, …: [`move_aside`]).
    pub(crate) fn partial(&self) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".partial");
        PathBuf::from(p)
    }

    /// Opens the file to write: made anew beside the destination (an
    /// existing file of that name is an error, never overwritten), with
    /// the destination's mode and owner; or the destination itself, in
    /// place.
    pub(crate) fn opener(&self) -> Opener {
        let (tmp, keep, in_place, append, path) = (
            self.tmp.clone(),
            self.keep,
            self.in_place,
            self.append,
            self.path.clone(),
        );
        Box::new(move || {
            if in_place {
                return File::options().write(true).append(append).open(&path);
            }
            let f = File::options().write(true).create_new(true).open(&tmp)?;
            if let Some((mode, uid, gid)) = keep {
                f.set_permissions(std::fs::Permissions::from_mode(mode))?;
                // As the owner allows: root gives the file back to its
                // owner; another user keeps it (and the mode says who may
                // read it).
                let _ = std::os::unix::fs::fchown(&f, Some(uid), Some(gid));
            }
            Ok(f)
        })
    }

    /// Makes the file to write on this thread (see [`opener`](Self::opener)).
    pub(crate) fn create(&self) -> anyhow::Result<File> {
        self.opener()().with_context(|| {
            format!(
                "{} {}: opening {}",
                self.flag,
                self.path.display(),
                self.tmp().unwrap_or(&self.path).display()
            )
        })
    }

    /// Complete: renamed over the destination.
    pub(crate) fn commit(mut self) -> anyhow::Result<()> {
        if !self.in_place {
            std::fs::rename(&self.tmp, &self.path).with_context(|| {
                format!(
                    "{}: renaming {} to {}",
                    self.flag,
                    self.tmp.display(),
                    self.path.display()
                )
            })?;
        }
        self.done = true;
        Ok(())
    }

    /// Not complete: what was written, if anything, is moved to
    /// [`partial`](Self::partial) (never over a file there: [`move_aside`]),
    /// whose name is returned; the destination stays as it was. An empty
    /// file is removed; in place, nothing is done.
    pub(crate) fn keep_partial(mut self) -> anyhow::Result<Option<PathBuf>> {
        if self.in_place {
            self.done = true;
            return Ok(None);
        }
        match std::fs::metadata(&self.tmp) {
            Ok(m) if m.len() > 0 => {}
            _ => return Ok(None),
        }
        let partial = self.partial();
        let moved = move_aside(&self.tmp, &partial).with_context(|| {
            format!(
                "{}: renaming {} to {}",
                self.flag,
                self.tmp.display(),
                partial.display()
            )
        })?;
        self.done = true;
        Ok(Some(moved))
    }
}

impl Drop for ReplaceFile {
    fn drop(&mut self) {
        if !self.done && !self.in_place {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Moves `tmp` to `partial`, or where a file of that name is there (a
/// user's, an earlier run's) to the first free of `partial.1` …
/// `partial.999`: never over one. Where the file system makes hard links
/// the move cannot race another that takes the name; where not, a name
/// found free is renamed to. The name it went to.
pub(crate) fn move_aside(tmp: &Path, partial: &Path) -> std::io::Result<PathBuf> {
    for n in 0..1000 {
        let to = if n == 0 {
            partial.to_owned()
        } else {
            let mut p = partial.as_os_str().to_owned();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        match std::fs::hard_link(tmp, &to) {
            Ok(()) => {
                std::fs::remove_file(tmp)?;
                return Ok(to);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) if std::fs::symlink_metadata(&to).is_err() => {
                std::fs::rename(tmp, &to)?;
                return Ok(to);
            }
            Err(_) => {}
        }
    }
    Err(std::io::Error::other(format!(
        "{} and {}.1 to .999 are all taken",
        partial.display(),
        partial.display()
    )))
}

/// How long a file being written must have gone unchanged, its writer's
/// process gone, before it counts as left over.
const LEFT_OVER_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// Files being written beside `path` (`prefix` + a PID) that a run killed
/// before it could rename them left behind (SIGKILL, a crash): their
/// process is gone (no `/proc/PID` here, or one that is no xtcp) and they
/// have not changed for [`LEFT_OVER_AFTER`] (a writer in another PID
/// namespace writes on). Each becomes `PATH.partial`, as an interrupted
/// run's bytes do, where there is none; else it is left where it is. What
/// was done is said on standard error.
fn keep_leftovers(path: &Path, prefix: &OsString) {
    let Some(dir) = path.parent().map(|d| {
        if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            d
        }
    }) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = prefix.to_string_lossy();
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Some(pid) = name.strip_prefix(prefix.as_ref()) else {
            continue;
        };
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let xtcp_alive = std::fs::read_to_string(Path::new("/proc").join(pid).join("comm"))
            .is_ok_and(|c| c.starts_with("xtcp"));
        let Some(meta) = e.metadata().ok().filter(std::fs::Metadata::is_file) else {
            continue;
        };
        let stale = meta
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= LEFT_OVER_AFTER);
        if xtcp_alive || !stale {
            continue;
        }
        let what = format!(
            "{} ({} bytes), left by an xtcp run (process {pid}) killed before it could rename \
             it",
            e.path().display(),
            meta.len()
        );
        if partial.exists() {
            eprintln!(
                "xtcp: {what}, is left as it is: {} is there already",
                partial.display()
            );
        } else if std::fs::rename(e.path(), &partial).is_ok() {
            eprintln!("xtcp: {what}, is now {}", partial.display());
        }
    }
}

/// Whether `path` reaches a process's open file through `/proc` (itself, a
/// directory on the way, or a symlink's target under `/proc`): then
/// `Some(whether that file is a regular one)`. Such a path names a
/// descriptor (`/dev/stdout`, `/dev/fd/63`), whose "target" (`pipe:[N]`)
/// is no path to write beside.
pub(crate) fn through_proc(path: &Path) -> Option<bool> {
    let under_proc = |p: &Path| {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        p.starts_with("/proc") || std::fs::canonicalize(dir).is_ok_and(|d| d.starts_with("/proc"))
    };
    let mut p = path.to_owned();
    let mut proc = false;
    // Bounded as the kernel bounds a path's links (40).
    for _ in 0..40 {
        if under_proc(&p) {
            proc = true;
            break;
        }
        match link_target(&p) {
            Ok(Some(to)) => p = to,
            _ => break,
        }
    }
    proc.then(|| std::fs::metadata(path).is_ok_and(|m| m.is_file()))
}

/// `path`, or the file its symlinks name (which need not exist yet).
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let mut p = path.to_owned();
    // Bounded as the kernel bounds a path's links (40).
    for _ in 0..40 {
        match link_target(&p)? {
            Some(to) => p = to,
            None => return Ok(p),
        }
    }
    Err(std::io::Error::other("too many levels of symbolic links"))
}

/// What the symlink `p` points to, as a path (a relative target taken from
/// the link's directory); `None` where `p` is no symlink (or nothing).
fn link_target(p: &Path) -> std::io::Result<Option<PathBuf>> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => {
            let to = std::fs::read_link(p)?;
            Ok(Some(match p.parent() {
                Some(dir) if to.is_relative() => dir.join(to),
                _ => to,
            }))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xtcp-outfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A file a killed run left beside the destination (its process gone,
    /// unchanged for a minute) becomes `PATH.partial` when the next run
    /// starts; one being written (a live xtcp, or changed lately) and other
    /// names are left alone, and so is a second leftover once there is a
    /// `PATH.partial`.
    #[test]
    fn files_left_by_a_killed_run_become_the_partial_file() {
        let d = dir("leftovers");
        let path = d.join("out.bin");
        let old = std::time::SystemTime::now() - LEFT_OVER_AFTER * 2;
        let make = |name: &str, when: std::time::SystemTime| {
            let f = File::create(d.join(name)).unwrap();
            f.set_modified(when).unwrap();
        };
        // Above any pid_max: no such process.
        make(".out.bin.xtcp-4294967", old);
        std::fs::write(d.join(".out.bin.xtcp-4294967"), b"kept bytes").unwrap();
        File::open(d.join(".out.bin.xtcp-4294967"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        make(".out.bin.xtcp-4294968", std::time::SystemTime::now());
        make(".out.bin.xtcp-12ab", old);
        make(".other.bin.xtcp-4294967", old);
        // This test's process (its name begins with xtcp) counts as a live
        // writer: its file stays.
        make(&format!(".out.bin.xtcp-{}", std::process::id()), old);
        let _r = ReplaceFile::new("--out", &path).unwrap();
        assert_eq!(
            std::fs::read(d.join("out.bin.partial")).unwrap(),
            b"kept bytes"
        );
        let mut left: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec![
            ".other.bin.xtcp-4294967".to_owned(),
            ".out.bin.xtcp-12ab".to_owned(),
            ".out.bin.xtcp-4294968".to_owned(),
            format!(".out.bin.xtcp-{}", std::process::id()),
            "out.bin.partial".to_owned(),
        ];
        want.sort();
        assert_eq!(left, want);
        let _ = std::fs::remove_dir_all(&d);
    }

    fn write(r: &ReplaceFile, b: &[u8]) {
        std::io::Write::write_all(&mut r.create().unwrap(), b).unwrap();
    }

    #[test]
    fn complete_replaces_incomplete_goes_beside_and_dropped_leaves_nothing() {
        let d = dir("cycle");
        let path = d.join("out.bin");
        std::fs::write(&path, b"old").unwrap();

        let r = ReplaceFile::new("--out", &path).unwrap();
        write(&r, b"new");
        assert!(r.tmp().unwrap().exists());
        r.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");

        let r = ReplaceFile::new("--out", &path).unwrap();
        write(&r, b"half");
        let partial = r.keep_partial().unwrap().unwrap();
        assert_eq!(partial, d.join("out.bin.partial"));
        assert_eq!(std::fs::read(&partial).unwrap(), b"half");
        assert_eq!(std::fs::read(&path).unwrap(), b"new", "left as it was");

        // A file of that name (a user's, an earlier run's) is never
        // replaced: the next free `.N` is taken (a review found a user's
        // `out.bin.partial` overwritten).
        for n in 1..=2 {
            let r = ReplaceFile::new("--out", &path).unwrap();
            write(&r, format!("half {n}").as_bytes());
            let p = r.keep_partial().unwrap().unwrap();
            assert_eq!(p, d.join(format!("out.bin.partial.{n}")));
            assert_eq!(std::fs::read(&p).unwrap(), format!("half {n}").as_bytes());
            std::fs::remove_file(&p).unwrap();
            if n == 1 {
                std::fs::write(&p, b"taken").unwrap();
            }
        }
        assert_eq!(std::fs::read(&partial).unwrap(), b"half", "kept");
        assert_eq!(
            std::fs::read(d.join("out.bin.partial.1")).unwrap(),
            b"taken"
        );
        std::fs::remove_file(d.join("out.bin.partial.1")).unwrap();

        // Empty, or never made: no partial file.
        std::fs::remove_file(&partial).unwrap();
        let r = ReplaceFile::new("--out", &path).unwrap();
        r.create().unwrap();
        assert_eq!(r.keep_partial().unwrap(), None);
        let r = ReplaceFile::new("--out", &path).unwrap();
        assert_eq!(r.keep_partial().unwrap(), None);

        // Dropped: removed.
        let r = ReplaceFile::new("--out", &path).unwrap();
        r.create().unwrap();
        let tmp = r.tmp().unwrap().to_owned();
        drop(r);
        assert!(!tmp.exists());
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["out.bin"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The replaced file keeps its mode; a symlink's target is replaced
    /// and the link stays; a device is written in place, not replaced by a
    /// regular file (a review found `--out /dev/null`-like nodes, FIFOs
    /// and links turned into regular files, and a 0600 file made 0644).
    #[test]
    fn mode_kept_links_followed_devices_written_in_place() {
        let d = dir("kinds");
        let path = d.join("secret.bin");
        std::fs::write(&path, b"old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let r = ReplaceFile::new("--out", &path).unwrap();
        write(&r, b"new");
        r.commit().unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);

        let link = d.join("link");
        std::os::unix::fs::symlink("secret.bin", &link).unwrap();
        let r = ReplaceFile::new("--out", &link).unwrap();
        write(&r, b"via link");
        r.commit().unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"via link");
        // A link to a file not made yet: made where it points.
        let dangling = d.join("dangling");
        std::os::unix::fs::symlink("later.bin", &dangling).unwrap();
        let r = ReplaceFile::new("--out", &dangling).unwrap();
        write(&r, b"later");
        r.commit().unwrap();
        assert_eq!(std::fs::read(d.join("later.bin")).unwrap(), b"later");
        assert!(
            std::fs::symlink_metadata(&dangling)
                .unwrap()
                .file_type()
                .is_symlink()
        );

        let null = Path::new("/dev/null");
        let r = ReplaceFile::new("--out", null).unwrap();
        assert!(r.in_place() && r.tmp().is_none());
        write(&r, b"gone");
        assert_eq!(r.keep_partial().unwrap(), None);
        let r = ReplaceFile::new("--out", null).unwrap();
        write(&r, b"gone");
        r.commit().unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::metadata(null)
                .unwrap()
                .file_type()
                .is_char_device()
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A path that reaches a process's descriptor through /proc
    /// (`/dev/stdout`, a shell's `>(…)` as `/dev/fd/N`, `/proc/self/fd/N`)
    /// is written in place: a pipe gets the bytes, a regular file behind
    /// the descriptor is appended to. A review found recv making its
    /// hidden file in `/dev/fd/` (`.pipe:[N].xtcp-PID`), failing after the
    /// stream had begun.
    #[test]
    fn a_descriptor_through_proc_is_written_in_place() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let (mut rx, tx) = std::io::pipe().unwrap();
        let fd = tx.as_raw_fd();
        for path in [format!("/dev/fd/{fd}"), format!("/proc/self/fd/{fd}")] {
            let path = Path::new(&path);
            assert_eq!(through_proc(path), Some(false), "{}", path.display());
            let r = ReplaceFile::new("--out", path).unwrap();
            assert!(r.in_place() && r.tmp().is_none(), "{}", path.display());
            write(&r, b"piped");
            r.commit().unwrap();
            let mut got = [0u8; 5];
            rx.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"piped");
        }
        assert!(through_proc(Path::new("/dev/stdout")).is_some());
        assert_eq!(through_proc(Path::new("/dev/null")), None);
        let d = dir("proc");
        let file = d.join("out.bin");
        std::fs::write(&file, b"head ").unwrap();
        let held = std::fs::File::open(&file).unwrap();
        let path = format!("/proc/self/fd/{}", held.as_raw_fd());
        assert_eq!(through_proc(Path::new(&path)), Some(true));
        let r = ReplaceFile::new("--out", Path::new(&path)).unwrap();
        assert!(r.in_place());
        write(&r, b"tail");
        r.commit().unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"head tail");
        assert_eq!(through_proc(&file), None, "a plain path is not");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
