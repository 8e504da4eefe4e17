//! The workloads allowed to call the data plane under `--trust-xfcc`, reloaded when their
//! file changes (`docs/configuration.md#caller-identity`).
//!
//! `--workload` names them once, at start. `--workloads-file` holds one SPIFFE id per line
//! (blank lines and `#` comments skipped); it is re-read when it changes (`watched_file.rs`,
//! on the calls that carry a mesh identity), so onboarding or removing a workload needs no
//! restart; a file that lists no workload keeps the previous list.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::ConfigError;
use crate::watched_file::{FileKind, WatchedFile};

/// Longest SPIFFE id accepted (the SPIFFE standard's limit).
const MAX_SPIFFE_ID_BYTES: usize = 2048;

/// The SPIFFE ids of the workloads allowed in, as of one moment.
pub type Workloads = Arc<[Arc<str>]>;

/// The allowlist: fixed at start, or a file re-read when it changes.
#[derive(Debug)]
pub struct Allowlist {
    source: Source,
}

#[derive(Debug)]
enum Source {
    Fixed(Workloads),
    File(WatchedFile<Workloads>),
}

/// How a workloads file is read and logged (the ids: they are not secret).
static WORKLOADS_FILE: FileKind<Workloads> = FileKind {
    read,
    summary: |workloads| workloads.join(","),
    reloaded: "workload allowlist reloaded",
    unusable: "workloads file unusable; keeping the previous allowlist",
};

impl Allowlist {
    /// The ids given on the command line (`--workload`), checked.
    pub fn fixed<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        Ok(Allowlist {
            source: Source::Fixed(parse_ids(ids)?.into()),
        })
    }

    /// The ids of `path`, read now; a file that does not parse or lists none fails.
    pub fn from_file(path: PathBuf) -> Result<Self, ConfigError> {
        Ok(Allowlist {
            source: Source::File(WatchedFile::open(path, &WORKLOADS_FILE)?),
        })
    }

    /// The workloads allowed now (re-reading a changed file first).
    pub fn current(&self) -> Workloads {
        match &self.source {
            Source::Fixed(workloads) => Arc::clone(workloads),
            Source::File(file) => file.with(Arc::clone),
        }
    }
}

/// Reads and parses a workloads file.
fn read(path: &Path) -> Result<Workloads, ConfigError> {
    let invalid = |reason| ConfigError::WorkloadsFile {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| invalid(e.to_string()))?;
    let ids = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'));
    Ok(parse_ids(ids).map_err(invalid)?.into())
}

/// At least one id, each a `spiffe://` id listed once.
fn parse_ids<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<Vec<Arc<str>>, String> {
    let mut allowed: Vec<Arc<str>> = Vec::new();
    for id in ids {
        let id = id.trim();
        let spiffe = id.starts_with("spiffe://")
            && id.len() <= MAX_SPIFFE_ID_BYTES
            && id
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b",;\"\\".contains(&b));
        if !spiffe {
            return Err(format!(
                "{id:?} is not a SPIFFE id (spiffe://trust-domain/path, visible ASCII, no `,;\"\\`)"
            ));
        }
        if allowed.iter().any(|a| **a == *id) {
            return Err(format!("{id} is listed twice"));
        }
        allowed.push(id.into());
    }
    if allowed.is_empty() {
        return Err("--trust-xfcc needs at least one allowed SPIFFE id".to_owned());
    }
    Ok(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "spiffe://cluster.local/ns/payments/sa/checkout";
    const B: &str = "spiffe://cluster.local/ns/shop/sa/cart";

    #[test]
    fn ids_are_spiffe_ids_listed_once() {
        assert_eq!(parse_ids([A, B]).unwrap().len(), 2);
        for bad in [
            vec![],
            vec![A, A],
            vec!["https://x/y"],
            vec!["spiffe://x/a,b"],
            vec!["spiffe://x/a;URI=spiffe://y"],
        ] {
            assert!(parse_ids(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn onboarding_a_workload_and_a_broken_file() {
        let path = std::env::temp_dir().join(format!("keyflight-workloads-{}", std::process::id()));
        std::fs::write(&path, format!("# onboarded\n{A}\n")).unwrap();
        let list = Allowlist::from_file(path.clone()).unwrap();
        let Source::File(file) = &list.source else {
            unreachable!("a file source")
        };
        let recheck = || file.check_next_call();
        assert_eq!(&*list.current(), [A.into()]);
        std::fs::write(&path, format!("{A}\n{B}\n")).unwrap();
        recheck();
        assert_eq!(&*list.current(), [A.into(), B.into()]);
        std::fs::write(&path, "not-a-spiffe-id\n").unwrap();
        recheck();
        assert_eq!(list.current().len(), 2, "kept");
        std::fs::remove_file(&path).unwrap();
    }
}
