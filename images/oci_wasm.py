"""Writes an OCI image layout holding one Wasm module, the way Istio pulls filters.

Istio's `oci://` Wasm fetcher accepts two image shapes; this writes the OCI-spec one: a
single layer that IS the module (media type `application/vnd.module.wasm.content.layer.v1+wasm`)
and a config of type `application/vnd.module.wasm.config.v1+json`. No Docker daemon and no
tarball: blobs are content-addressed files, so the layout is a few lines of JSON around the
module. Push it with `skopeo copy oci:DIR:TAG docker://REGISTRY/…:TAG`.

Usage: oci_wasm.py MODULE.wasm LAYOUT_DIR TAG
Prints the sha256 of the module (what an EnvoyFilter's `remote.sha256` must say).
"""

import hashlib
import json
import pathlib
import shutil
import sys

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.module.wasm.config.v1+json"
LAYER_TYPE = "application/vnd.module.wasm.content.layer.v1+wasm"


def write_blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main(module_path, layout_dir, tag):
    module = pathlib.Path(module_path).read_bytes()
    layout = pathlib.Path(layout_dir)
    # Rebuilt from scratch each time: stale blobs never linger, and the same module gives the
    # same digests (no timestamps anywhere).
    if layout.exists():
        shutil.rmtree(layout)
    layout.mkdir(parents=True)
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    layer = write_blob(layout, module)
    config = write_blob(layout, canonical({}))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, **config},
        "layers": [{
            "mediaType": LAYER_TYPE,
            **layer,
            "annotations": {"org.opencontainers.image.title": "keyflight_filter_wasm.wasm"},
        }],
        "annotations": {"org.opencontainers.image.title": "keyflight proxy-wasm filter"},
    }
    manifest_blob = write_blob(layout, canonical(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": MANIFEST_TYPE,
            **manifest_blob,
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }],
    }
    (layout / "index.json").write_bytes(canonical(index))
    print(layer["digest"].removeprefix("sha256:"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
