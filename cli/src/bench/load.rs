//! What else ran on the host while a pair was measured: the CPU time of
//! every process but bench's own (bench, its servers and clients, and
//! their children), from `/proc/PID/stat`, and the time the hypervisor
//! took from this VM's CPUs (`steal` of `/proc/stat`). Kernel threads are
//! left out: softirq work and `ksoftirqd` carry the pair's own packets.
//!
//! On a host with few cores, another busy process takes time from the
//! pair's ends, and a ratio of two pairs that ran under different loads
//! says little; bench records the load with each sample and says so when
//! it was there.

use std::collections::HashMap;
use std::time::Instant;

/// `PF_KTHREAD` of a task's flags (`include/linux/sched.h`).
const PF_KTHREAD: u64 = 0x0020_0000;

/// One process, as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    comm: String,
    ppid: u32,
    kthread: bool,
    /// User and system time, clock ticks.
    ticks: u64,
    /// Start time after boot, clock ticks: with the pid, who it is.
    start: u64,
}

/// Parses a `/proc/PID/stat` line. The name (field 2) is in parentheses
/// and may hold spaces and parentheses itself: the fields after it follow
/// the last `)`.
fn parse_stat(line: &str) -> Option<Proc> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = line.get(open + 1..close)?.to_owned();
    // Field 3 (state) is index 0 here.
    let f: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    let n = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some(Proc {
        comm,
        ppid: u32::try_from(n(4)?).ok()?,
        kthread: n(9)? & PF_KTHREAD != 0,
        ticks: n(14)? + n(15)?,
        start: n(22)?,
    })
}

/// The `steal` ticks of `/proc/stat`'s `cpu` line (all CPUs).
fn parse_steal(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

/// The host's processes and steal time at one moment.
#[derive(Debug, Clone)]
pub struct Host {
    at: Instant,
    procs: HashMap<u32, Proc>,
    steal: Option<u64>,
}

impl Host {
    /// Reads `/proc` now (a process that ends while it is read is left out).
    pub fn now() -> Host {
        let mut procs = HashMap::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                if let Some(p) = std::fs::read_to_string(e.path().join("stat"))
                    .ok()
                    .and_then(|l| parse_stat(&l))
                {
                    procs.insert(pid, p);
                }
            }
        }
        Host {
            at: Instant::now(),
            procs,
            steal: std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_steal(&t)),
        }
    }

    /// Whether `pid` is `me` or one of its descendants, as this reading
    /// knows them.
    fn ours(&self, mut pid: u32, me: u32) -> bool {
        // A bounded walk up: a parent chain is short, and a loop (pids
        // reused while /proc was read) ends it.
        for _ in 0..64 {
            if pid == me {
                return true;
            }
            match self.procs.get(&pid) {
                Some(p) if p.ppid != 0 && p.ppid != pid => pid = p.ppid,
                _ => return false,
            }
        }
        false
    }

    /// What the others did between `before` and this reading: process
    /// `me`'s tree and kernel threads left out. A process that started in
    /// between counts whole; one that ended in between is not seen.
    pub fn others_since(&self, before: &Host, me: u32) -> OtherLoad {
        let secs = self.at.duration_since(before.at).as_secs_f64();
        let hz = rustix::param::clock_ticks_per_second() as f64;
        let mut total = 0u64;
        let mut busiest: Option<(u64, u32, &str)> = None;
        for (&pid, p) in &self.procs {
            if p.kthread || self.ours(pid, me) {
                continue;
            }
            let was = before
                .procs
                .get(&pid)
                .filter(|b| b.start == p.start)
                .map_or(0, |b| b.ticks);
            let used = p.ticks.saturating_sub(was);
            total += used;
            if used > 0 && busiest.is_none_or(|(u, _, _)| used > u) {
                busiest = Some((used, pid, &p.comm));
            }
        }
        let pct = |ticks: u64| {
            if secs > 0.0 {
                ticks as f64 / hz / secs * 100.0
            } else {
                0.0
            }
        };
        OtherLoad {
            other_cpu_pct: pct(total),
            busiest: busiest.map(|(used, pid, comm)| Busiest {
                comm: comm.to_owned(),
                pid,
                cpu_pct: pct(used),
            }),
            steal_pct: before
                .steal
                .zip(self.steal)
                .map(|(a, b)| pct(b.saturating_sub(a))),
        }
    }
}

/// The load of others over one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OtherLoad {
    /// Other processes' CPU, percent of one core over the run.
    pub other_cpu_pct: f64,
    /// The one among them that used the most.
    pub busiest: Option<Busiest>,
    /// CPU time the hypervisor took from this machine's CPUs (all of
    /// them), percent of one core; `None` where `/proc/stat` has none.
    pub steal_pct: Option<f64>,
}

/// The busiest other process of a run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Busiest {
    /// Its name (`comm`).
    pub comm: String,
    pub pid: u32,
    /// Its CPU, percent of one core over the run.
    pub cpu_pct: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_spaces_and_parentheses_in_its_name() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 \
                    98765 1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let p = parse_stat(line).unwrap();
        assert_eq!(
            p,
            Proc {
                comm: "a (b) c".into(),
                ppid: 17,
                kthread: false,
                ticks: 300,
                start: 98765,
            }
        );
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 3 0 0 20 0 1 0 1 0 0";
        assert!(parse_stat(kthread).unwrap().kthread);
        assert_eq!(parse_stat("7 (x) S 1"), None);
    }

    #[test]
    fn steal_is_the_eighth_number_of_the_cpu_line() {
        let text = "cpu  1839599 0 500397 1648625 16549 0 267014 4445 0 0\n\
                    cpu0 893185 0 235707 850161 4004 0 153055 2196 0 0\n";
        assert_eq!(parse_steal(text), Some(4445));
        assert_eq!(parse_steal("intr 1 2 3\n"), None);
    }

    fn proc(comm: &str, ppid: u32, ticks: u64, start: u64) -> Proc {
        Proc {
            comm: comm.into(),
            ppid,
            kthread: false,
            ticks,
            start,
        }
    }

    #[test]
    fn our_tree_and_kernel_threads_are_left_out_and_a_reused_pid_counts_whole() {
        let t0 = Instant::now();
        let before = Host {
            at: t0,
            procs: HashMap::from([
                (1, proc("init", 0, 10, 1)),
                (100, proc("bench", 1, 50, 5)),
                (200, proc("hog", 1, 1000, 6)),
                (300, proc("old", 1, 40, 7)),
            ]),
            steal: Some(1000),
        };
        let hz = rustix::param::clock_ticks_per_second();
        let mut kworker = proc("kworker/0:1", 2, 5000, 8);
        kworker.kthread = true;
        let after = Host {
            at: t0 + std::time::Duration::from_secs(2),
            procs: HashMap::from([
                (1, proc("init", 0, 10, 1)),
                (100, proc("bench", 1, 50 + 3 * hz, 5)),
                // bench's server, and its child: ours.
                (101, proc("xtcp", 100, 2 * hz, 9)),
                (102, proc("iperf3", 101, hz, 10)),
                // The hog used one core's worth of the 2 s.
                (200, proc("hog", 1, 1000 + 2 * hz, 6)),
                // Pid 300 ended, and a new process took it: all its
                // ticks are the run's.
                (300, proc("new", 1, hz / 2, 11)),
                (400, kworker),
            ]),
            steal: Some(1000 + hz / 5),
        };
        let l = after.others_since(&before, 100);
        assert!((l.other_cpu_pct - 125.0).abs() < 1e-9, "{l:?}");
        let b = l.busiest.unwrap();
        assert_eq!((b.comm.as_str(), b.pid), ("hog", 200));
        assert!((b.cpu_pct - 100.0).abs() < 1e-9);
        assert!((l.steal_pct.unwrap() - 10.0).abs() < 1e-9);
    }
}
