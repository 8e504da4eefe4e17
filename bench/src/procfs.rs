//! CPU time and memory of the processes under test, read from `/proc`.
//!
//! CPU per request is the growth of `utime + stime` of the processes a scenario runs through
//! (Envoy, lease-store, Postgres, upstream: never the load generator) divided by the requests
//! completed meanwhile. Postgres is one postmaster plus a backend per connection, so it is
//! read as a tree: the postmaster's own and reaped children's time plus each live child's.
//! The clock-tick resolution (usually 10 ms) is fine over rounds of thousands of requests.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

/// A process, or a process and all its children (Postgres).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// One process.
    Process(u32),
    /// A process and its direct children.
    Tree(u32),
}

/// `/proc` access, with the clock-tick rate read once.
#[derive(Debug, Clone, Copy)]
pub struct Procfs {
    ticks_per_second: u64,
}

impl Procfs {
    /// Reads the clock-tick rate (`getconf CLK_TCK`, 100 when it cannot be read).
    pub fn new() -> Procfs {
        let ticks_per_second = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
            .filter(|ticks| *ticks > 0)
            .unwrap_or(100);
        Procfs { ticks_per_second }
    }

    /// CPU seconds used so far by everything in `watched`.
    pub fn cpu_seconds(&self, watched: &[Watched]) -> f64 {
        let ticks: u64 = watched
            .iter()
            .map(|w| match *w {
                Watched::Process(pid) => own_ticks(pid).unwrap_or(0),
                Watched::Tree(pid) => tree_ticks(pid),
            })
            .sum();
        ticks as f64 / self.ticks_per_second as f64
    }
}

/// `VmRSS` and `VmHWM` (peak) of a process, in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// Resident set now.
    pub rss_kib: u64,
    /// Peak resident set.
    pub hwm_kib: u64,
}

/// The memory of `pid`, `None` when it is gone.
pub fn memory(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_memory(&status)
}

/// `VmRSS`/`VmHWM` from the text of `/proc/PID/status`.
pub fn parse_memory(status: &str) -> Option<Memory> {
    let kib = |key: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(Memory {
        rss_kib: kib("VmRSS:")?,
        hwm_kib: kib("VmHWM:")?,
    })
}

/// The fields of `/proc/PID/stat` after the command name (which may hold spaces).
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Numeric fields after `(comm)`, starting at field 3 (`state` reads as 0). Index 1 is the
/// parent pid, 11 `utime`, 12 `stime`, 13 `cutime`, 14 `cstime`.
pub fn parse_stat(stat: &str) -> Option<Vec<u64>> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    Some(
        after_comm
            .split_whitespace()
            .map(|field| field.parse().unwrap_or(0))
            .collect(),
    )
}

fn own_ticks(pid: u32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    Some(fields.get(11)? + fields.get(12)?)
}

/// CPU ticks of `pid` and its children, living or reaped, as one consistent reading: a
/// child reaped while its siblings are read moves its ticks into the parent's `cutime`
/// between the two reads and would be missed (pgbench's one backend, at the end of a round),
/// so the reading is taken again until the parent's own figures did not move meanwhile.
fn tree_ticks(pid: u32) -> u64 {
    let mut tries = 0;
    loop {
        let before = reaped_and_own_ticks(pid).unwrap_or(0);
        let children: u64 = children(pid).into_iter().filter_map(own_ticks).sum();
        let after = reaped_and_own_ticks(pid).unwrap_or(0);
        tries += 1;
        if after == before || tries == 10 {
            return after + children;
        }
    }
}

fn reaped_and_own_ticks(pid: u32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    Some(fields.get(11)? + fields.get(12)? + fields.get(13)? + fields.get(14)?)
}

/// Direct children of `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            stat_fields(*child)
                .and_then(|fields| fields.get(1).copied())
                .is_some_and(|parent| parent == u64::from(pid))
        })
        .collect()
}

/// The postmaster listening on `port`: the `postgres` process started with `-p PORT`.
pub fn postmaster(port: u16) -> Option<u32> {
    let port = port.to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let Ok(cmdline) =
                std::fs::read(Path::new("/proc").join(pid.to_string()).join("cmdline"))
            else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.first().is_some_and(|arg0| arg0.ends_with(b"postgres"))
                && args
                    .windows(2)
                    .any(|pair| pair[0] == b"-p" && pair[1] == port.as_bytes())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_skip_a_command_name_with_spaces() {
        let stat = "42 (my (odd) name) S 7 42 42 0 -1 4194560 1 0 0 0 250 30 5 6 20 0";
        let fields = parse_stat(stat).expect("parses");
        assert_eq!(fields[1], 7, "parent pid");
        assert_eq!(
            (fields[11], fields[12], fields[13], fields[14]),
            (250, 30, 5, 6)
        );
    }

    #[test]
    fn memory_is_read_from_status() {
        let status = "Name:\tenvoy\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\n";
        assert_eq!(
            parse_memory(status),
            Some(Memory {
                rss_kib: 40960,
                hwm_kib: 51200
            })
        );
        assert_eq!(parse_memory("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_is_visible() {
        let procfs = Procfs::new();
        let me = std::process::id();
        assert!(memory(me).is_some_and(|m| m.rss_kib > 0));
        assert!(procfs.cpu_seconds(&[Watched::Process(me)]) >= 0.0);
    }
}
