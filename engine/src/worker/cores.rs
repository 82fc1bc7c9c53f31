//! Which cores the workers run on: the cores a user may give (`--cores`,
//! `-A`), the default when none is given, and the other xtcp workers
//! already pinned to one of them.
//!
//! A worker busy-polls its queue, so two of them on one core each get a
//! fraction of it: `xtcp serve` and `xtcp client` started on one host with
//! the default cores, both on core 0, ran at 1.58 Gbit/s with 7.5 ms of
//! RTT on the 2-core development VM, and nothing said why. [`others_on`]
//! finds such a neighbour from `/proc` (threads named `xtcp-q<N>`, as
//! [`super::engine`] and `xsk-bench` name their workers, allowed on a
//! single core). Without `--cores` the workers take the cores no such
//! neighbour holds first ([`worker_cores`]); a neighbour on a core they
//! are given or cannot avoid, and the engine's own workers put on one core
//! ([`shared_within`]), are named when the engine starts. Two processes
//! that start at the same moment can still pick the same core (neither
//! has pinned its worker yet when the other looks); they are named too.

use std::fs;
use std::path::Path;

use super::engine::EngineError;

/// Refuses (naming `flag`, the value and the cores available) a core that
/// does not exist or is not in this process's CPU affinity mask.
pub fn validate_cores(flag: &str, cores: &[usize]) -> Result<(), EngineError> {
    check_cores(flag, cores, &allowed_cores())
}

/// This process's CPU affinity mask, in ascending order; empty when it
/// could not be read.
fn allowed_cores() -> Vec<usize> {
    let mut v: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    v.sort_unstable();
    v
}

/// The cores of `n` workers: `given` (`--cores`, already validated), else
/// the cores of this process's affinity mask (so `taskset -c 2,3 xtcp …`
/// puts its workers on 2 and 3), those no other xtcp worker is pinned to
/// first ([`others_on`]: `xtcp serve` on the first core, an `xtcp client`
/// started next takes the second), round-robin when there are more
/// workers than cores; worker i on core i when the mask is unknown.
pub fn worker_cores(given: Option<&[usize]>, n: usize) -> Vec<usize> {
    if let Some(g) = given {
        return g.to_vec();
    }
    let allowed = allowed_cores();
    let taken: Vec<usize> = others_on(&allowed).iter().map(|o| o.core).collect();
    free_first(&allowed, &taken, n)
}

/// `n` cores of this process's affinity mask in its order, round-robin
/// (whoever else holds them): how `xtcp bench` places its own two ends.
pub fn mask_cores(n: usize) -> Vec<usize> {
    free_first(&allowed_cores(), &[], n)
}

/// `n` cores from `allowed`, the ones not in `taken` first, each group in
/// `allowed`'s order, round-robin; `0..n` when `allowed` is empty.
fn free_first(allowed: &[usize], taken: &[usize], n: usize) -> Vec<usize> {
    if allowed.is_empty() {
        return (0..n).collect();
    }
    let (free, held): (Vec<usize>, Vec<usize>) = allowed.iter().partition(|c| !taken.contains(c));
    let order: Vec<usize> = free.into_iter().chain(held).collect();
    (0..n).map(|i| order[i % order.len()]).collect()
}

/// Every core in `cores` is one of `allowed` (this process's affinity
/// mask; empty when it could not be read, and then nothing is refused).
fn check_cores(flag: &str, cores: &[usize], allowed: &[usize]) -> Result<(), EngineError> {
    if allowed.is_empty() {
        return Ok(());
    }
    match cores.iter().find(|c| !allowed.contains(c)) {
        None => Ok(()),
        Some(bad) => Err(EngineError::Config(format!(
            "{flag} {}: core {bad} does not exist or is not in this process's CPU affinity \
             mask; the cores available are {}",
            cores
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
            core_ranges(allowed)
        ))),
    }
}

/// `[0, 1, 2, 5]` as `"0-2,5"`.
pub(crate) fn core_ranges(cores: &[usize]) -> String {
    let mut sorted = cores.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// `"0-2,5"` (the kernel's `Cpus_allowed_list`) as `[0, 1, 2, 5]`; `None`
/// when it is not such a list.
fn parse_core_list(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                v.extend(a..=b);
            }
            None => v.push(part.parse().ok()?),
        }
    }
    Some(v)
}

/// An xtcp worker of another process, pinned to one core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreNeighbour {
    /// The core it is pinned to.
    pub core: usize,
    /// Its process.
    pub pid: u32,
    /// Its thread's name (`xtcp-q0`).
    pub thread: String,
    /// Its process's command line, arguments joined by spaces (at most
    /// 200 characters).
    pub command: String,
}

/// The xtcp workers of other processes pinned to one of `cores`, from
/// `/proc`; none when `/proc` cannot be read.
pub fn others_on(cores: &[usize]) -> Vec<CoreNeighbour> {
    scan(Path::new("/proc"), std::process::id(), cores)
}

/// [`others_on`] over a `/proc` laid out at `proc`, leaving out `own_pid`.
/// Processes and threads that end while it reads are passed over.
fn scan(proc: &Path, own_pid: u32, cores: &[usize]) -> Vec<CoreNeighbour> {
    let mut found = Vec::new();
    let Ok(procs) = fs::read_dir(proc) else {
        return found;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == own_pid {
            continue;
        }
        let Ok(tasks) = fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(comm) = fs::read_to_string(t.path().join("comm")) else {
                continue;
            };
            let comm = comm.trim_end();
            let is_worker = comm
                .strip_prefix("xtcp-q")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if !is_worker {
                continue;
            }
            let Ok(status) = fs::read_to_string(t.path().join("status")) else {
                continue;
            };
            let allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(parse_core_list);
            let Some([core]) = allowed.as_deref() else {
                continue;
            };
            if !cores.contains(core) {
                continue;
            }
            let command = fs::read(p.path().join("cmdline"))
                .map(|b| {
                    let s: String = b
                        .split(|&c| c == 0)
                        .filter(|a| !a.is_empty())
                        .map(String::from_utf8_lossy)
                        .collect::<Vec<_>>()
                        .join(" ");
                    s.chars().take(200).collect()
                })
                .unwrap_or_default();
            found.push(CoreNeighbour {
                core: *core,
                pid,
                thread: comm.to_owned(),
                command,
            });
        }
    }
    found.sort_by_key(|n| (n.core, n.pid));
    found
}

/// What to tell the user about `n`, a neighbour on the core that `whose`
/// (`worker 0`, `side A's worker`) is about to be pinned to, with the cores
/// this process may choose from.
pub fn neighbour_warning(whose: &str, n: &CoreNeighbour) -> String {
    format!(
        "core {core} ({whose}'s) is already taken by xtcp worker {thread} of process \
         {pid} ({command}); two busy-polling workers on one core each get a fraction of it, \
         with slower transfers and longer RTTs: give this one or that one another core with \
         --cores (or -A){avail}",
        core = n.core,
        thread = n.thread,
        pid = n.pid,
        command = if n.command.is_empty() {
            "command line unknown"
        } else {
            &n.command
        },
        avail = may_use().map_or_else(String::new, |m| format!("; {m}"))
    )
}

/// What to tell the user about workers of this process that `cores` puts
/// on one core (more queues than allowed cores, or a `--cores` list that
/// names one twice): one line per worker that shares an earlier one's.
pub fn shared_within(cores: &[usize]) -> Vec<String> {
    let mut lines = Vec::new();
    for (i, c) in cores.iter().enumerate() {
        if let Some(j) = cores[..i].iter().position(|d| d == c) {
            lines.push(format!(
                "workers {j} and {i} are both on core {c}: each busy-polls its queue and wants \
                 a core of its own; give --cores a core per queue{}",
                may_use().map_or_else(String::new, |m| format!(" ({m})"))
            ));
        }
    }
    lines
}

/// "this process may use cores 0-3", from its affinity mask; `None` when
/// the mask cannot be read.
fn may_use() -> Option<String> {
    let allowed = allowed_cores();
    (!allowed.is_empty()).then(|| format!("this process may use cores {}", core_ranges(&allowed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_outside_the_affinity_mask_are_refused_with_the_ones_available() {
        assert!(check_cores("--cores", &[0, 1], &[0, 1]).is_ok());
        assert!(
            check_cores("--cores", &[99], &[]).is_ok(),
            "mask unknown: no refusal"
        );
        let e = check_cores("--cores", &[1, 99], &[0, 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--cores 1,99: core 99"), "{e}");
        assert!(e.ends_with("the cores available are 0-1"), "{e}");
        assert_eq!(core_ranges(&[5, 0, 1, 2, 7, 8]), "0-2,5,7-8");
        assert_eq!(core_ranges(&[3]), "3");
    }

    #[test]
    fn default_cores_follow_the_affinity_mask_free_ones_first() {
        assert_eq!(free_first(&[2, 3], &[], 2), [2, 3]);
        assert_eq!(free_first(&[2, 3], &[], 3), [2, 3, 2], "round-robin");
        assert_eq!(free_first(&[5], &[], 1), [5]);
        assert_eq!(free_first(&[], &[], 2), [0, 1], "mask unknown");
        assert_eq!(free_first(&[0, 1], &[0], 1), [1], "core 0 is held");
        assert_eq!(free_first(&[0, 1], &[0], 2), [1, 0], "free, then held");
        assert_eq!(free_first(&[0, 1, 2], &[1], 3), [0, 2, 1]);
        assert_eq!(free_first(&[0, 1], &[0, 1], 1), [0], "all held");
        assert_eq!(free_first(&[3], &[7], 1), [3], "held outside the mask");
        assert_eq!(worker_cores(Some(&[7, 1]), 2), [7, 1], "given wins");
    }

    #[test]
    fn workers_sharing_a_core_are_named() {
        assert!(shared_within(&[0, 1]).is_empty());
        let lines = shared_within(&[0, 1, 0, 0]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("workers 0 and 2 are both on core 0:"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("workers 0 and 3 are both on core 0:"),
            "{lines:?}"
        );
    }

    #[test]
    fn core_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_core_list("0-2,5\n"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_core_list("\t3"), Some(vec![3]));
        assert_eq!(parse_core_list("0-1,4-5"), Some(vec![0, 1, 4, 5]));
        for bad in ["", "a", "3-1", "1,,2", "0-99999999"] {
            assert_eq!(parse_core_list(bad), None, "{bad:?}");
        }
    }

    /// A fake `/proc`: process `pid` with threads `(tid, comm, cpus)`.
    fn fake_process(root: &Path, pid: u32, cmdline: &[u8], threads: &[(u32, &str, &str)]) {
        let p = root.join(pid.to_string());
        fs::create_dir_all(p.join("task")).unwrap();
        fs::write(p.join("cmdline"), cmdline).unwrap();
        for (tid, comm, cpus) in threads {
            let t = p.join("task").join(tid.to_string());
            fs::create_dir_all(&t).unwrap();
            fs::write(t.join("comm"), format!("{comm}\n")).unwrap();
            fs::write(
                t.join("status"),
                format!("Name:\t{comm}\nCpus_allowed:\t3\nCpus_allowed_list:\t{cpus}\n"),
            )
            .unwrap();
        }
    }

    #[test]
    fn neighbours_are_other_processes_workers_pinned_to_our_cores() {
        struct Dir(std::path::PathBuf);
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = fs::remove_dir_all(&self.0);
            }
        }
        let dir = Dir(std::env::temp_dir().join(format!("xtcp-fake-proc-{}", std::process::id())));
        let root = dir.0.as_path();
        // Another xtcp serve: its main thread (any cores) and worker on 0.
        fake_process(
            root,
            100,
            b"xtcp\0serve\0--iface\0veth0\0",
            &[(100, "xtcp", "0-1"), (101, "xtcp-q0", "0")],
        );
        // Ourselves, with a worker on 0: not a neighbour.
        fake_process(root, 200, b"xtcp\0client\0", &[(201, "xtcp-q0", "0")]);
        // A worker not pinned (yet), one on core 1, one not ours by name.
        fake_process(
            root,
            300,
            b"xtcp\0recv\0",
            &[(301, "xtcp-q0", "0-1"), (302, "xtcp-q1", "1")],
        );
        fake_process(root, 400, b"other\0", &[(401, "xtcp-qx", "0")]);
        fs::create_dir_all(root.join("self")).unwrap();

        let found = scan(root, 200, &[0]);
        assert_eq!(
            found,
            [CoreNeighbour {
                core: 0,
                pid: 100,
                thread: "xtcp-q0".into(),
                command: "xtcp serve --iface veth0".into(),
            }]
        );
        let on_1 = scan(root, 200, &[1]);
        assert_eq!(on_1.len(), 1);
        assert_eq!((on_1[0].pid, on_1[0].thread.as_str()), (300, "xtcp-q1"));
        assert!(scan(root, 200, &[5]).is_empty());
        assert!(scan(&root.join("absent"), 200, &[0]).is_empty());

        let w = neighbour_warning("worker 0", &found[0]);
        assert!(
            w.starts_with("core 0 (worker 0's) is already taken by xtcp worker xtcp-q0 of process 100 (xtcp serve --iface veth0)"),
            "{w}"
        );
        assert!(w.contains("another core with --cores"), "{w}");
    }
}
