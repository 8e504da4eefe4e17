//! The workloads allowed to call the data plane under `--trust-xfcc`, reloaded when their
//! file changes (`docs/configuration.md#caller-identity`).
//!
//! `--workload` names them once, at start. `--workloads-file` holds one SPIFFE id per line
//! (`crate::settings::files`); it is re-read when it changes (`watched_file.rs`,
//! on the calls that carry a mesh identity), so onboarding or removing a workload needs no
//! restart; a file that lists no workload keeps the previous list.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::watched_file::{FileKind, RECHECK, WatchedFile};
use crate::settings::{ConfigError, WorkloadList, files};

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
    recheck: RECHECK,
};

impl Allowlist {
    /// The allowlist `settings` name, its file read now.
    pub fn open(settings: WorkloadList) -> Result<Self, ConfigError> {
        match settings {
            WorkloadList::Fixed(ids) => Ok(Allowlist::fixed(ids)),
            WorkloadList::File(path) => Allowlist::from_file(path),
        }
    }

    /// The ids given on the command line (`--workload`), as the settings checked them.
    pub fn fixed(ids: Vec<Arc<str>>) -> Self {
        Allowlist {
            source: Source::Fixed(ids.into()),
        }
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
    Ok(files::workloads(&text).map_err(invalid)?.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "spiffe://cluster.local/ns/payments/sa/checkout";
    const B: &str = "spiffe://cluster.local/ns/shop/sa/cart";

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
