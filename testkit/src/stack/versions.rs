//! Parts that run other programs than the stack's: a mixed-version mesh, a rollout and a
//! rollback (`docs/operations.md#upgrades`). A stack starts each Envoy and lease-store
//! with its own [`Binaries`] ([`super::StackOptions::envoy_binaries`],
//! [`super::StackOptions::store_binaries`]); these replace them while it runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Stack;
use crate::binaries::Binaries;

/// How long a terminated part may take to exit: a lease-store's graceful shutdown, Envoy's
/// exit on `SIGTERM`.
const TERMINATE_TIMEOUT: Duration = Duration::from_secs(30);

impl Stack {
    /// The programs Envoy `index` runs.
    pub fn envoy_binaries(&self, index: usize) -> &Binaries {
        &self.envoy(index).binaries
    }

    /// The programs lease-store `index` runs.
    pub fn store_binaries(&self, index: usize) -> &Binaries {
        &self.store(index).binaries
    }

    /// Replaces Envoy `index` by one running `binaries` (its Envoy and `.wasm`) on the same
    /// ports, as a rollout replaces a pod: `SIGTERM`, wait for the exit, start the new one
    /// and wait until it is ready.
    pub async fn replace_envoy(&mut self, index: usize, binaries: Binaries) {
        tokio::task::block_in_place(|| self.envoys[index].part.terminate(TERMINATE_TIMEOUT));
        self.envoys[index].binaries = binaries;
        let config = self.envoys[index].config.clone();
        super::write_envoy_config(
            &self.envoys[index].binaries,
            &self.options,
            index,
            &self.envoys[index].ports,
            &self.sites(),
            &config,
        );
        self.start_envoy(index).await;
    }

    /// Replaces lease-store `index` by one running `binaries`' lease-store on the same port:
    /// `SIGTERM` (its graceful shutdown), then the new one, which applies its migrations
    /// first (the migration Job of a rollout), and waits until it is ready.
    pub async fn replace_store(&mut self, index: usize, binaries: Binaries) {
        tokio::task::block_in_place(|| self.stores[index].part.terminate(TERMINATE_TIMEOUT));
        self.stores[index].binaries = binaries;
        self.start_store_with(index, true).await;
    }

    /// Pushes the Wasm module at `wasm` to Envoy `index` of a
    /// [`super::StackOptions::reconfigurable`] stack, as a control plane rolls a new
    /// `WasmPlugin` image: Envoy builds a new listener on a new VM and drains the old one,
    /// whose root contexts are retired (`docs/envoy-facts.md#a-retired-root-context-keeps-working`).
    /// Returns once Envoy has
    /// accepted the update.
    pub async fn upgrade_wasm(&mut self, index: usize, wasm: &Path) {
        self.envoys[index].binaries.wasm = wasm.to_path_buf();
        self.push_listener(index).await;
    }

    /// A copy of this stack's `.wasm` that differs only by a custom section naming
    /// `label`: another module to Envoy (a new build of the same filter), so pushing it
    /// makes a new VM and retires the old one, as a release would, while both sides run
    /// code whose log lines a test knows.
    pub fn rebuilt_wasm(&self, label: &str) -> PathBuf {
        let mut module = std::fs::read(&self.binaries.wasm)
            .unwrap_or_else(|e| panic!("read {}: {e}", self.binaries.wasm.display()));
        module.extend(custom_section("keyflight-rebuild", label.as_bytes()));
        let path = self.dir.join(format!("keyflight-{label}.wasm"));
        std::fs::write(&path, module).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }
}

/// A Wasm custom section (id 0): its size, its name and its payload. Appended to a module
/// it changes the bytes and nothing a runtime executes.
fn custom_section(name: &str, payload: &[u8]) -> Vec<u8> {
    let mut content = leb128(name.len());
    content.extend_from_slice(name.as_bytes());
    content.extend_from_slice(payload);
    let mut section = vec![0];
    section.extend(leb128(content.len()));
    section.extend(content);
    section
}

/// Unsigned LEB128, as Wasm encodes sizes.
fn leb128(mut value: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}
