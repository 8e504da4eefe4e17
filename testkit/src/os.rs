//! Small process-table helpers shared by the Postgres and HA clusters: signals by pid, the
//! children of a process, whether we run as root, unique temp directories, and the
//! detached watchdog shell that cleans up after a test process that died.
//!
//! Signals go through the `kill` utility rather than `libc::kill`: the workspace forbids
//! `unsafe`, and a test can afford the extra process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Sends `kill -<signal>` to `pids`. A pid that exited meanwhile is not an
/// error (a backend may end between listing and signalling).
pub(crate) fn send_signal(signal: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `(state, ppid)` of a process from `/proc/<pid>/stat`. The command name
/// may contain spaces and parentheses, so fields are read after its last `)`.
fn process_stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// The state letter of a process (`R`, `S`, `T` for stopped, `Z`…), `None` when it is gone.
pub(crate) fn process_state(pid: u32) -> Option<char> {
    process_stat(pid).map(|(state, _)| state)
}

/// Whether `pid` names a live process (not a zombie).
pub(crate) fn alive(pid: u32) -> bool {
    process_state(pid).is_some_and(|state| state != 'Z' && state != 'X')
}

/// The pids whose parent is `parent` (a postmaster's backends and workers).
pub(crate) fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| process_stat(pid).is_some_and(|(_, ppid)| ppid == parent))
        .collect()
}

/// Whether this process runs as root (then Postgres must run as `postgres`).
pub(crate) fn current_uid_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A fresh path under the system temp dir, `keyflight-<kind>-<pid>-<n>-<nanos>` (not created).
pub(crate) fn unique_temp_dir(kind: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "keyflight-{kind}-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    std::env::temp_dir().join(name)
}

/// Quotes each word for `sh`.
pub(crate) fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Quotes one word for `sh`.
pub(crate) fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Starts `script` in a detached `sh` with no stdio: a watchdog that outlives this
/// process if it dies without dropping what it started. `what` names it in the panic.
pub(crate) fn spawn_watchdog_shell(script: &str, what: &str) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn the {what} watchdog: {e}"))
}
