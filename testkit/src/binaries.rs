//! Where the end-to-end tests find the programs they run.
//!
//! | what | environment override | default (relative to the workspace root) |
//! |---|---|---|
//! | lease-store | `KEYFLIGHT_LEASE_STORE_BIN` | `target/debug/lease-store` |
//! | demo upstream | `KEYFLIGHT_UPSTREAM_BIN` | `target/debug/demo-upstream` |
//! | filter | `KEYFLIGHT_WASM` | `target/wasm32-wasip1/release/keyflight_filter_wasm.wasm` |
//! | native filter's directory ([`native_module_dir`]) | `KEYFLIGHT_NATIVE_DIR` | `target/debug` (holding `libkeyflight_filter_native.so`) |
//! | Envoy | `KEYFLIGHT_ENVOY` | where `scripts/envoy.sh` installs it (`.tools/venv/…/envoy/_bin/envoy`) |
//! | the oldest supported Envoy ([`Binaries::with_oldest_envoy`]) | `KEYFLIGHT_ENVOY_OLDEST` | where `scripts/envoy.sh 1.36` installs it (`.tools/venv-1.36/…`) |
//! | client command ([`client`]) | `KEYFLIGHT_CLIENT_BIN` | `target/debug/keyflight` |
//!
//! `CARGO_TARGET_DIR`, when set, replaces `target/`. A missing program fails the test with
//! a message naming the command that builds it: an end-to-end suite that silently skips
//! proves nothing.

use std::path::{Path, PathBuf};

/// The programs one stack runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The lease-store binary.
    pub lease_store: PathBuf,
    /// The demo upstream binary.
    pub upstream: PathBuf,
    /// The filter's `.wasm`.
    pub wasm: PathBuf,
    /// The Envoy binary.
    pub envoy: PathBuf,
}

impl Binaries {
    /// Locates every program (the debug builds), panicking with a how-to-build message for
    /// the first missing one.
    pub fn locate() -> Binaries {
        Binaries::locate_profile("debug")
    }

    /// [`Binaries::locate`] with the lease-store and upstream of a cargo `profile`
    /// (`debug` or `release`).
    pub fn locate_profile(profile: &str) -> Binaries {
        let root = workspace_root();
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let binaries = Binaries {
            lease_store: from_env("KEYFLIGHT_LEASE_STORE_BIN")
                .unwrap_or_else(|| target.join(profile).join("lease-store")),
            upstream: from_env("KEYFLIGHT_UPSTREAM_BIN")
                .unwrap_or_else(|| target.join(profile).join("demo-upstream")),
            wasm: from_env("KEYFLIGHT_WASM")
                .unwrap_or_else(|| target.join("wasm32-wasip1/release/keyflight_filter_wasm.wasm")),
            envoy: from_env("KEYFLIGHT_ENVOY")
                .or_else(|| installed_envoy(&root, "venv"))
                .unwrap_or_else(|| {
                    root.join(".tools/venv/lib/python3.*/site-packages/envoy/_bin/envoy")
                }),
        };
        require(
            &binaries.lease_store,
            "KEYFLIGHT_LEASE_STORE_BIN",
            &format!(
                "cargo build{} -p keyflight-lease-store",
                profile_flag(profile)
            ),
        );
        require(
            &binaries.upstream,
            "KEYFLIGHT_UPSTREAM_BIN",
            &format!(
                "cargo build{} -p keyflight-demo-upstream",
                profile_flag(profile)
            ),
        );
        require(
            &binaries.wasm,
            "KEYFLIGHT_WASM",
            "cargo build -p keyflight-filter-wasm --target wasm32-wasip1 --release",
        );
        require(&binaries.envoy, "KEYFLIGHT_ENVOY", "scripts/envoy.sh");
        binaries
    }
}

impl Binaries {
    /// These programs with the oldest Envoy keyflight supports (1.36, Istio 1.28's) in
    /// place of the default one, for the proxy-lifecycle facts checked on both
    /// (`docs/envoy-facts.md`).
    pub fn with_oldest_envoy(self) -> Binaries {
        let root = workspace_root();
        let envoy = from_env("KEYFLIGHT_ENVOY_OLDEST")
            .or_else(|| installed_envoy(&root, "venv-1.36"))
            .unwrap_or_else(|| {
                root.join(".tools/venv-1.36/lib/python3.*/site-packages/envoy/_bin/envoy")
            });
        require(&envoy, "KEYFLIGHT_ENVOY_OLDEST", "scripts/envoy.sh 1.36");
        Binaries { envoy, ..self }
    }
}

/// The `keyflight` client command, for the scenarios that drive it (not part
/// of [`Binaries`]: the other scenarios do not need it built).
pub fn client() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let path = from_env("KEYFLIGHT_CLIENT_BIN").unwrap_or_else(|| target.join("debug/keyflight"));
    require(
        &path,
        "KEYFLIGHT_CLIENT_BIN",
        "cargo build -p keyflight-client",
    );
    path
}

/// The file name Envoy looks up for the dynamic module `keyflight_filter_native`.
pub const NATIVE_MODULE_FILE: &str = "libkeyflight_filter_native.so";

/// The directory every Envoy of a stack searches for dynamic modules
/// (`ENVOY_DYNAMIC_MODULES_SEARCH_PATH`): where the native filter was built. Not checked
/// here: only a native stack needs it ([`require_native_module`]).
pub fn native_module_dir() -> PathBuf {
    from_env("KEYFLIGHT_NATIVE_DIR").unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"))
            .join("debug")
    })
}

/// Panics with how to build it when the native filter is not in [`native_module_dir`].
pub fn require_native_module() {
    require(
        &native_module_dir().join(NATIVE_MODULE_FILE),
        "KEYFLIGHT_NATIVE_DIR",
        "cargo build -p keyflight-filter-native --features test-panic",
    );
}

/// The workspace root (this crate lives in `<root>/testkit`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn from_env(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

/// The Envoy that `scripts/envoy.sh` installs: `.tools/<venv>/lib/python3.*/site-packages/envoy/_bin/envoy`.
fn installed_envoy(root: &Path, venv: &str) -> Option<PathBuf> {
    let lib = root.join(".tools").join(venv).join("lib");
    std::fs::read_dir(lib)
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("site-packages/envoy/_bin/envoy"))
        .find(|candidate| candidate.is_file())
}

/// The cargo flag that builds into `target/{profile}`.
fn profile_flag(profile: &str) -> String {
    match profile {
        "debug" => String::new(),
        "release" => " --release".to_owned(),
        other => format!(" --profile {other}"),
    }
}

fn require(path: &Path, variable: &str, build: &str) {
    assert!(
        path.is_file(),
        "{} not found. `make test` builds everything the end-to-end tests need \
         (here: `{build}`); or set {variable} to the program's path.",
        path.display()
    );
}
