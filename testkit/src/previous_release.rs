//! The previous release's programs, built from git history, for the upgrade tests
//! (`docs/operations.md#upgrades`): its lease-store and its `.wasm`, run beside this
//! tree's in one stack.
//!
//! The release is a pinned commit ([`PREVIOUS_RELEASE`]). The first call exports it with
//! `git archive` into `target/previous-release/<commit>/src`, builds the two programs
//! there with their own target directory (a debug lease-store and the release `.wasm`,
//! as `make wasm` builds it; about 5–8 minutes on two cores), keeps the two files and
//! removes the sources and the build, so later runs (and `make test`) find them at once.
//! A file lock keeps parallel tests and test binaries from building it twice.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::binaries::{Binaries, workspace_root};

/// The last release before this round: the commit the upgrade tests run against.
pub const PREVIOUS_RELEASE: &str = "4b5604c29c044c425b9a28875724a2e1bd9dd03d";

/// What that release named its `.wasm` (the cdylib's lib name was `keyflight_filter`).
const PREVIOUS_WASM: &str = "keyflight_filter.wasm";

/// The previous release's lease-store and `.wasm`, with this tree's Envoy and upstream:
/// built on first use, then read from the cache.
pub fn previous_release() -> Binaries {
    let current = Binaries::locate();
    let cache = cache_dir(PREVIOUS_RELEASE);
    let built = Built::in_dir(&cache);
    if !built.exists() {
        build(PREVIOUS_RELEASE, &cache);
    }
    Binaries {
        lease_store: built.lease_store,
        wasm: built.wasm,
        ..current
    }
}

/// The two files a built release leaves in its cache directory.
struct Built {
    lease_store: PathBuf,
    wasm: PathBuf,
}

impl Built {
    fn in_dir(dir: &Path) -> Built {
        Built {
            lease_store: dir.join("lease-store"),
            wasm: dir.join(PREVIOUS_WASM),
        }
    }

    fn exists(&self) -> bool {
        self.lease_store.is_file() && self.wasm.is_file()
    }
}

/// `target/previous-release/<commit>` (under `CARGO_TARGET_DIR` when set).
fn cache_dir(commit: &str) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("previous-release")
        .join(commit)
}

/// Builds `commit` into `cache`, under a lock; another process that built it meanwhile
/// leaves nothing to do.
fn build(commit: &str, cache: &Path) {
    std::fs::create_dir_all(cache).unwrap_or_else(|e| panic!("create {}: {e}", cache.display()));
    let lock_path = cache.join("build.lock");
    let lock =
        File::create(&lock_path).unwrap_or_else(|e| panic!("open {}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", lock_path.display()));
    let built = Built::in_dir(cache);
    if built.exists() {
        return;
    }
    let started = std::time::Instant::now();
    let src = cache.join("src");
    let target = cache.join("build");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).unwrap_or_else(|e| panic!("create {}: {e}", src.display()));
    export(commit, &src);
    eprintln!(
        "building the previous release {commit} (once; cached in {})",
        cache.display()
    );
    cargo(
        &src,
        &target,
        &[
            "build",
            "-p",
            "keyflight-lease-store",
            "--bin",
            "lease-store",
        ],
    );
    cargo(
        &src,
        &target,
        &[
            "build",
            "-p",
            "keyflight-filter-wasm",
            "--target",
            "wasm32-wasip1",
            "--release",
        ],
    );
    // Copied under temporary names and renamed, so a half-copied file is never taken for
    // a build.
    for (from, to) in [
        (target.join("debug/lease-store"), &built.lease_store),
        (
            target.join("wasm32-wasip1/release").join(PREVIOUS_WASM),
            &built.wasm,
        ),
    ] {
        let partial = to.with_extension("partial");
        std::fs::copy(&from, &partial).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        std::fs::rename(&partial, to).unwrap_or_else(|e| panic!("rename {}: {e}", to.display()));
    }
    // The build is gigabytes; the two programs are all the tests need.
    let _ = std::fs::remove_dir_all(&target);
    let _ = std::fs::remove_dir_all(&src);
    eprintln!("built the previous release in {:?}", started.elapsed());
}

/// `git archive commit | tar -x -C dest`.
fn export(commit: &str, dest: &Path) {
    let archive = dest.join("release.tar");
    let status = Command::new("git")
        .arg("-C")
        .arg(workspace_root())
        .args(["archive", "--format=tar", "-o"])
        .arg(&archive)
        .arg(commit)
        .status()
        .unwrap_or_else(|e| panic!("run git: {e}"));
    assert!(
        status.success(),
        "git archive {commit} failed ({status}): the upgrade tests need the previous release's \
         commit in this clone (a shallow clone: `git fetch --unshallow`)"
    );
    let status = Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(dest)
        .status()
        .unwrap_or_else(|e| panic!("run tar: {e}"));
    assert!(status.success(), "tar -x of {commit} failed ({status})");
    let _ = std::fs::remove_file(&archive);
}

/// Runs `cargo args` in `src` with `target` as its target directory.
fn cargo(src: &Path, target: &Path, args: &[&str]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(src)
        .args(args)
        .env("CARGO_TARGET_DIR", target)
        .env("CARGO_INCREMENTAL", "0")
        .status()
        .unwrap_or_else(|e| panic!("run cargo: {e}"));
    assert!(
        status.success(),
        "building the previous release failed: cargo {} in {} ({status})",
        args.join(" "),
        src.display()
    );
}
