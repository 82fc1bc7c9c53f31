//! A file written beside its destination and renamed over it only when it
//! is complete, so that a failed run leaves an existing file as it was:
//! `recv --out` and `client -F … -R`.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The file being written (`.NAME.xtcp-PID` beside `path`), and where it
/// goes once complete. Dropped unfinished, it is removed.
pub(crate) struct ReplaceFile {
    flag: &'static str,
    tmp: PathBuf,
    path: PathBuf,
    done: bool,
}

impl ReplaceFile {
    /// Nothing is created yet ([`create`](Self::create) makes the file);
    /// `flag` names the argument in messages.
    pub(crate) fn new(flag: &'static str, path: &Path) -> anyhow::Result<ReplaceFile> {
        let Some(name) = path.file_name() else {
            bail!("{flag} {}: not a file name", path.display());
        };
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".xtcp-{}", std::process::id()));
        Ok(ReplaceFile {
            flag,
            tmp: path.with_file_name(tmp_name),
            path: path.to_owned(),
            done: false,
        })
    }

    /// The file being written.
    pub(crate) fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// Where a run that did not complete leaves what it wrote:
    /// `PATH.partial`.
    pub(crate) fn partial(&self) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".partial");
        PathBuf::from(p)
    }

    /// Makes the file being written (see [`create_tmp`]).
    pub(crate) fn create(&self) -> anyhow::Result<File> {
        create_tmp(&self.tmp).with_context(|| {
            format!(
                "{} {}: creating {}",
                self.flag,
                self.path.display(),
                self.tmp.display()
            )
        })
    }

    /// Complete: renamed over the destination.
    pub(crate) fn commit(mut self) -> anyhow::Result<()> {
        std::fs::rename(&self.tmp, &self.path).with_context(|| {
            format!(
                "{}: renaming {} to {}",
                self.flag,
                self.tmp.display(),
                self.path.display()
            )
        })?;
        self.done = true;
        Ok(())
    }

    /// Not complete: what was written, if anything, is renamed to
    /// [`partial`](Self::partial) (replacing what was there), which is
    /// returned; the destination stays as it was. An empty file is removed.
    pub(crate) fn keep_partial(mut self) -> anyhow::Result<Option<PathBuf>> {
        match std::fs::metadata(&self.tmp) {
            Ok(m) if m.len() > 0 => {}
            _ => return Ok(None),
        }
        let partial = self.partial();
        std::fs::rename(&self.tmp, &partial).with_context(|| {
            format!(
                "{}: renaming {} to {}",
                self.flag,
                self.tmp.display(),
                partial.display()
            )
        })?;
        self.done = true;
        Ok(Some(partial))
    }
}

impl Drop for ReplaceFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Creates `tmp` for writing; an existing file of that name is an error,
/// never overwritten.
pub(crate) fn create_tmp(tmp: &Path) -> std::io::Result<File> {
    File::options().write(true).create_new(true).open(tmp)
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

    #[test]
    fn complete_replaces_incomplete_goes_beside_and_dropped_leaves_nothing() {
        let d = dir("cycle");
        let path = d.join("out.bin");
        std::fs::write(&path, b"old").unwrap();

        let r = ReplaceFile::new("--out", &path).unwrap();
        std::io::Write::write_all(&mut r.create().unwrap(), b"new").unwrap();
        assert!(r.tmp().exists());
        r.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");

        let r = ReplaceFile::new("--out", &path).unwrap();
        std::io::Write::write_all(&mut r.create().unwrap(), b"half").unwrap();
        let partial = r.keep_partial().unwrap().unwrap();
        assert_eq!(partial, d.join("out.bin.partial"));
        assert_eq!(std::fs::read(&partial).unwrap(), b"half");
        assert_eq!(std::fs::read(&path).unwrap(), b"new", "left as it was");

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
        let tmp = r.tmp().to_owned();
        drop(r);
        assert!(!tmp.exists());
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["out.bin"]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
