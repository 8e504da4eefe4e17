//! Each Envoy's configuration for this stack: the shipped `envoy/*.yaml` rendered with the
//! stack's ports, wasm and plugin, its sockets placed on their parts' addresses, the
//! options' edits applied, and written out (its listener in an LDS file beside it when the
//! stack is reconfigurable).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::parts::Place;
use super::{STORE_SPIFFE_ID, StackOptions, VIA_HEADER, network, via_value};
use crate::binaries::Binaries;
use crate::envoy_config::{self, Ports};
use crate::envoy_variants::EnvoyEdit;
use crate::lds;

/// Where the parts of a stack run: every Envoy and lease-store, and the host side (the
/// upstream, Postgres).
pub(super) struct Sites {
    pub(super) envoys: Vec<Place>,
    pub(super) stores: Vec<Place>,
    pub(super) host_side: IpAddr,
}

/// The shipped config for Envoy `index`: `envoy/demo.yaml` for one lease-store,
/// `envoy/two-replicas.yaml` for two (their `native-` twins for the native adapter), with
/// the wasm, the plugin JSON, each socket on its part's address (a stack with its own
/// networks), the options' edits and (for a tagged stack) the [`VIA_HEADER`].
pub(super) fn render_envoy_config(
    binaries: &Binaries,
    options: &StackOptions,
    index: usize,
    ports: &Ports,
    sites: &Sites,
) -> String {
    let wasm = binaries.wasm.display().to_string();
    let rendered = if options.native {
        envoy_config::render_native(ports, &options.plugin)
    } else {
        envoy_config::render_shipped(ports, &wasm, &options.plugin)
    };
    let mut rendered = rendered.unwrap_or_else(|e| panic!("{e}"));
    if options.own_networks {
        rendered = network::place_sockets(&rendered, ports, index, sites);
    }
    let tag = options.tag_envoys.then(|| EnvoyEdit::AddRequestHeader {
        name: VIA_HEADER.to_owned(),
        value: via_value(index),
    });
    let store_mtls = options.mesh.as_ref().map(|mesh| {
        let workload = mesh.workload_cert(index);
        EnvoyEdit::StoreMtls {
            cert: workload.cert,
            key: workload.key,
            ca: mesh.ca(),
            store_id: STORE_SPIFFE_ID.to_owned(),
        }
    });
    for edit in options.envoy_edits.iter().chain(&tag).chain(&store_mtls) {
        rendered = edit.apply(&rendered).unwrap_or_else(|e| panic!("{e}"));
    }
    rendered
}

/// Writes Envoy `index`'s config to `path`; every Envoy of a reconfigurable stack gets its
/// listener in an LDS file beside it ([`lds_path_of`]).
pub(super) fn write_envoy_config(
    binaries: &Binaries,
    options: &StackOptions,
    index: usize,
    ports: &Ports,
    sites: &Sites,
    path: &Path,
) {
    let rendered = render_envoy_config(binaries, options, index, ports, sites);
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()))
    };
    if options.listener_from_file {
        let lds_path = lds_path_of(path);
        let split = lds::split(&rendered, &lds_path).unwrap_or_else(|e| panic!("{e}"));
        write(&lds_path, &split.listeners);
        write(path, &split.bootstrap);
    } else {
        write(path, &rendered);
    }
}

/// Where the listener of the bootstrap at `config` lives when it is served from a file.
pub(super) fn lds_path_of(config: &Path) -> PathBuf {
    config.with_extension("lds.json")
}
