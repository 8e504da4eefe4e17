//! Child processes for tests: free ports, readiness waits, kill on drop.
//!
//! Integration and end-to-end tests run the real binaries (`lease-store`,
//! Envoy, the demo upstream) as child processes. [`ChildGuard`] owns such a
//! child: its stdout and stderr go to a log file (so a failing test can show
//! what the child said, without interleaving it with the test's own output),
//! and dropping the guard kills and reaps the child, so a panicking test never
//! leaks a server that keeps a port or a database busy. The log file is
//! removed on drop unless the test is failing, when its path is printed.
//!
//! Signals are sent with the `kill` utility rather than `libc::kill`: the
//! workspace forbids `unsafe`, and a test can afford the extra process.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often readiness and exit waits re-check.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Lines of a child's log shown in a panic message.
const LOG_TAIL_LINES: usize = 40;

/// A TCP port on 127.0.0.1 that was free a moment ago.
///
/// Ports come from [`TEST_PORTS`], below Linux's ephemeral range (32768–60999):
/// a port the kernel handed out for `127.0.0.1:0` is released before a child
/// binds it, and in that gap any outgoing connection on the machine could be
/// given the same port as its local end (seen here: Envoy exiting at start-up
/// with "address already in use"). Below the ephemeral range only another
/// listener can collide, and a process-wide counter keeps parallel tests of one
/// binary apart; the start is spread by process id so consecutive test
/// binaries do not reuse each other's ports while a killed child lingers.
pub fn free_port() -> u16 {
    static NEXT: AtomicU64 = AtomicU64::new(u64::MAX);
    let span = u64::from(TEST_PORTS.end - TEST_PORTS.start);
    let start = u64::from(std::process::id()).wrapping_mul(97) % span;
    let _ = NEXT.compare_exchange(u64::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let Ok(port) = u16::try_from(u64::from(TEST_PORTS.start) + offset) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {TEST_PORTS:?} on 127.0.0.1");
}

/// Where [`free_port`] looks: below the kernel's ephemeral port range.
pub const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A signal a test sends to a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `SIGTERM`: ask for a graceful shutdown.
    Term,
    /// `SIGINT`: as if Ctrl-C was pressed.
    Int,
    /// `SIGKILL`: die at once, no clean-up.
    Kill,
    /// `SIGSTOP`: freeze (a hung process).
    Stop,
    /// `SIGCONT`: resume after `Stop`.
    Cont,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Int => "INT",
            Signal::Kill => "KILL",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
        }
    }
}

/// A spawned child process that is killed and reaped when dropped.
#[derive(Debug)]
pub struct ChildGuard {
    name: String,
    child: Child,
    log_path: PathBuf,
    /// The log belongs to the caller ([`ChildGuard::spawn_logged`]): never removed.
    keep_log: bool,
}

impl ChildGuard {
    /// Spawns `command` with stdout and stderr captured to a fresh log file.
    ///
    /// `name` labels the child in panic messages and names the log file.
    /// Panics if the program cannot be started.
    pub fn spawn(name: &str, command: Command) -> ChildGuard {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let log_path = std::env::temp_dir().join(format!(
            "keyflight-{}-{}-{}.log",
            sanitize(name),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("create log file {}: {e}", log_path.display()));
        ChildGuard::spawn_into(name, command, log, log_path, false)
    }

    /// Spawns `command` with stdout and stderr appended to `log_path`, which the caller
    /// owns: it is kept when the guard drops, and a restarted child (same path) continues
    /// it, so a harness that kills and restarts a service keeps one log per service.
    /// Panics if the log cannot be opened or the program cannot be started.
    pub fn spawn_logged(name: &str, command: Command, log_path: &Path) -> ChildGuard {
        let log = File::options()
            .create(true)
            .append(true)
            .open(log_path)
            .unwrap_or_else(|e| panic!("open log file {}: {e}", log_path.display()));
        ChildGuard::spawn_into(name, command, log, log_path.to_path_buf(), true)
    }

    fn spawn_into(
        name: &str,
        mut command: Command,
        log: File,
        log_path: PathBuf,
        keep_log: bool,
    ) -> ChildGuard {
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("clone log file handle: {e}"));
        let program = command.get_program().to_owned();
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({}): {e}", Path::new(&program).display()));
        ChildGuard {
            name: name.to_owned(),
            child,
            log_path,
            keep_log,
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the child's stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Everything the child has written so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last lines of the child's log, for panic messages.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let start = lines.len().saturating_sub(LOG_TAIL_LINES);
        lines[start..].join("\n")
    }

    /// Sends `signal` to the child. Panics if `kill` fails (e.g. the child is gone).
    pub fn signal(&self, signal: Signal) {
        let status = Command::new("kill")
            .args(["-s", signal.name(), &self.pid().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("run kill: {e}"));
        assert!(
            status.success(),
            "kill -s {} {} ({}) failed: {status}",
            signal.name(),
            self.pid(),
            self.name
        );
    }

    /// Kills the child (`SIGKILL`) and reaps it. Idempotent.
    pub fn kill(&mut self) {
        // An error here means the child already exited; reaping below still applies.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The exit status if the child has exited, without blocking.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .try_wait()
            .unwrap_or_else(|e| panic!("wait on {}: {e}", self.name))
    }

    /// Waits for the child to exit; panics with its log tail after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait() {
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} (pid {}) did not exit within {timeout:?}; log tail:\n{}",
                    self.name,
                    self.pid(),
                    self.log_tail()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

/// Kills the child; keeps its log only when a panic (a failing test) is unwinding, or when
/// the caller owns it.
impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
        if self.keep_log {
            return;
        }
        if std::thread::panicking() {
            eprintln!("{} log kept at {}", self.name, self.log_path.display());
        } else {
            // Best effort: a leftover log in the temp dir is harmless.
            let _ = std::fs::remove_file(&self.log_path);
        }
    }
}

/// Polls `condition` until it holds; panics naming `what` after `timeout`.
///
/// The sleep between checks only paces the polling: the condition is what a
/// test waits for, never a guessed duration.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Polls `url` until it answers 200, or panics after `timeout`.
///
/// When `child` is given, the panic message carries its log tail, and an
/// early exit of the child fails at once instead of waiting out the timeout.
pub async fn wait_http_ok(url: &str, timeout: Duration, mut child: Option<&mut ChildGuard>) {
    // No keep-alive: the server ends each probe's connection once it has answered, so a
    // probe never holds one of a part's connection slots after it is ready.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(0)
        .build()
        .expect("build an HTTP client");
    let deadline = Instant::now() + timeout;
    loop {
        let probe = client.get(url).header(reqwest::header::CONNECTION, "close");
        let last = match probe.send().await {
            Ok(resp) if resp.status() == reqwest::StatusCode::OK => return,
            Ok(resp) => format!("status {}", resp.status()),
            Err(e) => format!("error: {e}"),
        };
        if let Some(child) = child.as_deref_mut()
            && let Some(status) = child.try_wait()
        {
            panic!(
                "{} exited ({status}) before {url} answered 200; log tail:\n{}",
                child.name,
                child.log_tail()
            );
        }
        if Instant::now() >= deadline {
            let tail = child
                .as_deref()
                .map(|c| format!("; {} log tail:\n{}", c.name, c.log_tail()))
                .unwrap_or_default();
            panic!("{url} did not answer 200 within {timeout:?} (last: {last}){tail}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Keeps a name safe for a file name.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
