//! The two-replica stack a chaos run breaks, as the one launcher starts it
//! (`keyflight_testkit::stack`): one Postgres (or, with `--ha`, a Patroni pair), two
//! lease-stores, one demo upstream, two Envoys each reaching both lease-stores.
//!
//! What a fault-injection run needs beyond the test stack is options of the launcher: its
//! parts log to one file each under the run's directory (`logs/`), continued across
//! restarts and kept after the run, and each Envoy adds `x-keyflight-via: envoy-N` to the
//! requests it forwards, so the upstream's execution log says which Envoy dispatched each
//! execution. A run with network faults also puts each Envoy and lease-store in its own
//! network namespace (the launcher's `own_networks`), so their links can be cut. This
//! module only says which options, and reads what the run needs back.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use keyflight_testkit::binaries::Binaries;
use keyflight_testkit::stack::{Stack, StackOptions};
use serde_json::Value;

/// The launcher's options for a chaos run under `dir` with the plugin configuration
/// `plugin` and `replicas` Envoy + lease-store replicas.
pub fn options(
    dir: &Path,
    plugin: &Value,
    replicas: usize,
    replicated_postgres: bool,
    own_networks: bool,
) -> StackOptions {
    let options = StackOptions::default()
        .plugin(|shipped| *shipped = plugin.clone())
        .replicas(replicas)
        .run_dir(dir)
        .tag_envoys()
        // Envoy 0's listener comes from an LDS file: the plugin-push fault.
        .reconfigurable()
        // JSON lines: the evidence the checker reads (`checker/evidence.rs`).
        .store_env("KEYFLIGHT_LOG_FORMAT", "json")
        // A rolling upgrade runs the previous release, which reads its token only there.
        .inline_filter_token();
    match (replicated_postgres, own_networks) {
        (true, _) => options.replicated_postgres(),
        (false, true) => options.own_networks(),
        (false, false) => options,
    }
}

/// The lease-store, upstream and `.wasm` this run starts (and restarts, and pushes), copied
/// under `dir/bin` first: a run lasts minutes, and a build meanwhile would otherwise swap
/// the binaries under it (a lease-store built with a newer migration than its database has
/// is never ready). Envoy is installed, not built, so it stays where it is.
pub fn snapshot_binaries(dir: &Path) -> Result<Binaries, String> {
    snapshot(Binaries::locate(), dir)
}

/// Removes the copies [`snapshot_binaries`] made once the stack is down: the run's
/// directory keeps its evidence, not hundreds of megabytes of debug builds. A copy that
/// cannot be removed is only disk space, so the run goes on and says so.
pub fn remove_snapshot(dir: &Path) {
    let bin = dir.join("bin");
    if let Err(e) = std::fs::remove_dir_all(&bin) {
        eprintln!("keyflight-chaos: could not remove {}: {e}", bin.display());
    }
}

/// `located`'s built programs, copied under `dir/bin`.
fn snapshot(located: Binaries, dir: &Path) -> Result<Binaries, String> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("create {}: {e}", bin.display()))?;
    let copy = |from: &Path| -> Result<PathBuf, String> {
        let name = from
            .file_name()
            .ok_or_else(|| format!("{} names no file", from.display()))?;
        let to = bin.join(name);
        std::fs::copy(from, &to)
            .map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))?;
        Ok(to)
    };
    Ok(Binaries {
        lease_store: copy(&located.lease_store)?,
        upstream: copy(&located.upstream)?,
        wasm: copy(&located.wasm)?,
        envoy: located.envoy,
    })
}

/// Where the workload reaches the stack: copied out, so it never borrows the stack the
/// fault runner is changing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// Each Envoy's listener.
    pub listeners: Vec<SocketAddr>,
    /// The demo upstream.
    pub upstream: SocketAddr,
}

impl Endpoints {
    /// Where `stack`'s Envoys and upstream listen.
    pub fn of(stack: &Stack) -> Endpoints {
        Endpoints {
            listeners: (0..stack.replicas())
                .map(|index| {
                    SocketAddr::new(stack.envoy_ip(index), stack.envoy_ports(index).listener)
                })
                .collect(),
            upstream: stack.upstream_address(),
        }
    }
}

/// Each lease-store's and each Envoy's log so far (every process of a part writes to one
/// log), for the evidence they hold (`checker/evidence.rs`).
pub fn logs(stack: &Stack) -> (Vec<String>, Vec<String>) {
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    (
        (0..stack.replicas())
            .map(|index| read(stack.store_log_path(index)))
            .collect(),
        (0..stack.replicas())
            .map(|index| stack.envoy_log(index))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_build_during_the_run_does_not_reach_the_programs_it_runs() {
        let dir =
            std::env::temp_dir().join(format!("keyflight-chaos-snapshot-{}", std::process::id()));
        let built = dir.join("target");
        std::fs::create_dir_all(&built).unwrap();
        let program = |name: &str| {
            let path = built.join(name);
            std::fs::write(&path, "before").unwrap();
            path
        };
        let located = Binaries {
            lease_store: program("lease-store"),
            upstream: program("demo-upstream"),
            wasm: program("keyflight_filter_wasm.wasm"),
            envoy: PathBuf::from("/installed/envoy"),
        };
        let run = dir.join("run");
        let snapshot = snapshot(located.clone(), &run).unwrap();
        for path in [&located.lease_store, &located.upstream, &located.wasm] {
            std::fs::write(path, "rebuilt").unwrap();
        }
        for path in [&snapshot.lease_store, &snapshot.upstream, &snapshot.wasm] {
            assert!(
                path.starts_with(&run),
                "{} is not the run's copy",
                path.display()
            );
            assert_eq!(std::fs::read_to_string(path).unwrap(), "before");
        }
        assert_eq!(snapshot.envoy, located.envoy);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
