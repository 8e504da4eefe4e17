//! A settings file the lease-store re-reads when it changes, so it rotates without a restart
//! (`docs/configuration.md#caller-identity`): the filter's token set (`token_set.rs`), the
//! workloads allowlist (`workloads.rs`) and the operators' tokens (`admin_tokens.rs`).
//!
//! The file is checked on the calls that need it, at most once per its kind's
//! [`FileKind::recheck`], and re-read when its modification time or size changed (a
//! Kubernetes Secret or ConfigMap volume swaps the file whole). A file that no longer reads or parses keeps the previous
//! contents and says so in the log: a bad edit locks nobody out and lets nobody new in.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::settings::ConfigError;

/// How often a file read on the data path is checked for a change.
pub const RECHECK: Duration = Duration::from_secs(1);

/// How one kind of file is read, and what its log lines say.
pub struct FileKind<T> {
    /// Reads and parses the file; an error names the file and the line, never a secret.
    pub read: fn(&Path) -> Result<T, ConfigError>,
    /// What a reload logs about the new contents (never a secret).
    pub summary: fn(&T) -> String,
    /// The message of a reload.
    pub reloaded: &'static str,
    /// The message when the changed file cannot be used (the previous contents stay).
    pub unusable: &'static str,
    /// The least time between two checks for a change ([`RECHECK`], or zero: every call).
    pub recheck: Duration,
}

/// The file and its contents as last read.
pub struct WatchedFile<T: 'static> {
    path: PathBuf,
    kind: &'static FileKind<T>,
    loaded: Mutex<Loaded<T>>,
}

struct Loaded<T> {
    checked: Instant,
    stamp: Option<(SystemTime, u64)>,
    contents: T,
}

impl<T> fmt::Debug for WatchedFile<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchedFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl<T> WatchedFile<T> {
    /// Reads `path` now: a file that cannot be used fails (at start nothing is kept).
    pub fn open(path: PathBuf, kind: &'static FileKind<T>) -> Result<Self, ConfigError> {
        // Stamped before reading: a change in between is read again on the next check.
        let stamp = stamp(&path);
        let contents = (kind.read)(&path)?;
        let loaded = Loaded {
            checked: Instant::now(),
            stamp,
            contents,
        };
        Ok(WatchedFile {
            path,
            kind,
            loaded: Mutex::new(loaded),
        })
    }

    /// `look` at the contents, re-reading the file first when it changed.
    pub fn with<R>(&self, look: impl FnOnce(&T) -> R) -> R {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        self.reload_if_changed(&mut loaded, Instant::now());
        look(&loaded.contents)
    }

    fn reload_if_changed(&self, loaded: &mut Loaded<T>, now: Instant) {
        if now.duration_since(loaded.checked) < self.kind.recheck {
            return;
        }
        loaded.checked = now;
        let current = stamp(&self.path);
        if current == loaded.stamp {
            return;
        }
        loaded.stamp = current;
        match (self.kind.read)(&self.path) {
            Ok(contents) => {
                tracing::info!(
                    file = %self.path.display(),
                    contents = %(self.kind.summary)(&contents),
                    "{}",
                    self.kind.reloaded
                );
                loaded.contents = contents;
            }
            Err(e) => tracing::warn!(error = %e, "{}", self.kind.unusable),
        }
    }

    /// Makes the next call check the file at once (tests of a change within the second).
    #[cfg(test)]
    pub fn check_next_call(&self) {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        loaded.checked = Instant::now() - RECHECK;
    }
}

/// The file's modification time and size, what a change is recognised by.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    static LINES: FileKind<Vec<String>> = FileKind {
        read: |path| {
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::WorkloadsFile {
                path: path.to_owned(),
                reason: e.to_string(),
            })?;
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            if lines.is_empty() {
                return Err(ConfigError::WorkloadsFile {
                    path: path.to_owned(),
                    reason: "empty".to_owned(),
                });
            }
            Ok(lines)
        },
        summary: |lines| lines.len().to_string(),
        reloaded: "lines reloaded",
        unusable: "lines unusable",
        recheck: RECHECK,
    };

    #[test]
    fn a_changed_file_is_reread_at_most_once_a_second_and_a_broken_one_kept() {
        let path = std::env::temp_dir().join(format!("keyflight-watched-{}", std::process::id()));
        std::fs::write(&path, "one\n").unwrap();
        let file = WatchedFile::open(path.clone(), &LINES).unwrap();
        let lines = || file.with(|lines| lines.join(","));
        assert_eq!(lines(), "one");
        std::fs::write(&path, "one\ntwo-longer\n").unwrap();
        assert_eq!(lines(), "one", "checked at most once a second");
        file.check_next_call();
        assert_eq!(lines(), "one,two-longer");
        std::fs::write(&path, "").unwrap();
        file.check_next_call();
        assert_eq!(lines(), "one,two-longer", "kept");
        std::fs::remove_file(&path).unwrap();
        file.check_next_call();
        assert_eq!(lines(), "one,two-longer", "kept when the file is gone");
    }
}
