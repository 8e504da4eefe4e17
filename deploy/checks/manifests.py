"""Checks every Kubernetes and Istio manifest keyflight ships (run by scripts/validate-manifests.sh).

Core Kubernetes objects (Deployment, Service, ...) are validated against the official
OpenAPI schemas of one Kubernetes version with `kubernetes-validate`, strictly (an unknown
field is an error). Custom resources (Istio, Prometheus Operator, Kustomize) have no schema
offline, so they get the structural checks below: the apiVersion/kind pairs we use, the
fields each kind requires, the enum values of the fields we set, and the cross-references a
typo would break (an EnvoyFilter's HTTP filter names its ECDS config; a Kustomization lists
every manifest next to it). The filter's plugin JSON inside the Istio objects is checked by
the filter's own validator in filter/tests/shipped_configs.rs, not here.

Usage: manifests.py KUBERNETES_VERSION FILE...   (exit status 1 on the first failing file set)
"""

import pathlib
import sys

import kubernetes_validate
import yaml

# apiVersion groups whose objects kubernetes-validate knows.
CORE_GROUPS = {"", "apps", "batch", "policy", "autoscaling", "networking.k8s.io", "rbac.authorization.k8s.io"}

# Custom resources we ship: (apiVersion, kind) -> spec fields that must be present.
CUSTOM = {
    ("networking.istio.io/v1alpha3", "EnvoyFilter"): ["configPatches"],
    ("networking.istio.io/v1", "DestinationRule"): ["host"],
    ("networking.istio.io/v1", "VirtualService"): ["hosts", "http"],
    ("security.istio.io/v1", "PeerAuthentication"): ["mtls"],
    ("security.istio.io/v1", "AuthorizationPolicy"): ["selector", "action", "rules"],
    ("extensions.istio.io/v1alpha1", "WasmPlugin"): ["url", "pluginConfig"],
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ["selector", "endpoints"],
    ("monitoring.coreos.com/v1", "PrometheusRule"): ["groups"],
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): [],
}

APPLY_TO = {"LISTENER", "FILTER_CHAIN", "NETWORK_FILTER", "HTTP_FILTER", "ROUTE_CONFIGURATION",
            "VIRTUAL_HOST", "HTTP_ROUTE", "CLUSTER", "EXTENSION_CONFIG", "BOOTSTRAP",
            "LISTENER_FILTER"}
OPERATIONS = {"MERGE", "ADD", "REMOVE", "INSERT_BEFORE", "INSERT_AFTER", "INSERT_FIRST", "REPLACE"}
CONTEXTS = {"ANY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "GATEWAY"}
WASM_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"


class Failure(Exception):
    """A manifest is wrong; the message names the file and the object."""


def group_of(api_version):
    return api_version.split("/")[0] if "/" in api_version else ""


def check_envoy_filter(where, spec):
    extension_names = set()
    discovered = []
    for i, patch in enumerate(spec["configPatches"]):
        at = f"{where}: configPatches[{i}]"
        if patch.get("applyTo") not in APPLY_TO:
            raise Failure(f"{at}.applyTo {patch.get('applyTo')!r} is not an EnvoyFilter target")
        operation = patch.get("patch", {}).get("operation")
        if operation not in OPERATIONS:
            raise Failure(f"{at}.patch.operation {operation!r} is not an EnvoyFilter operation")
        context = patch.get("match", {}).get("context", "ANY")
        if context not in CONTEXTS:
            raise Failure(f"{at}.match.context {context!r} is not an EnvoyFilter context")
        value = patch["patch"].get("value", {})
        if patch["applyTo"] == "EXTENSION_CONFIG":
            if operation != "ADD":
                raise Failure(f"{at}: Istio only supports ADD for EXTENSION_CONFIG")
            if value.get("typed_config", {}).get("@type") != WASM_TYPE:
                raise Failure(f"{at}: the extension config is not an Envoy Wasm filter")
            extension_names.add(value.get("name"))
        if "config_discovery" in value:
            discovered.append((at, value.get("name")))
    for at, name in discovered:
        if name not in extension_names:
            raise Failure(f"{at}: HTTP filter {name!r} discovers an extension config this object does not add")


def check_kustomization(path, doc):
    here = path.parent
    listed = set(doc.get("resources", []))
    for resource in listed:
        if not (here / resource).is_file():
            raise Failure(f"{path}: lists {resource}, which does not exist")
    for manifest in sorted(here.glob("*.yaml")):
        if manifest.name != path.name and manifest.name not in listed:
            raise Failure(f"{path}: does not list {manifest.name} (kubectl apply -k would skip it)")


def check_custom(path, doc):
    key = (doc["apiVersion"], doc["kind"])
    where = f"{path}: {doc['kind']} {doc.get('metadata', {}).get('name', '?')}"
    if key not in CUSTOM:
        raise Failure(f"{where}: unknown custom resource {key[0]} {key[1]}")
    if doc["kind"] == "Kustomization":
        check_kustomization(path, doc)
        return
    metadata = doc.get("metadata") or {}
    for field in ("name", "namespace"):
        if not metadata.get(field):
            raise Failure(f"{where}: metadata.{field} is required")
    spec = doc.get("spec") or {}
    for field in CUSTOM[key]:
        if field not in spec:
            raise Failure(f"{where}: spec.{field} is required")
    kind = doc["kind"]
    if kind == "EnvoyFilter":
        check_envoy_filter(where, spec)
    elif kind == "PeerAuthentication" and spec["mtls"].get("mode") not in {"STRICT", "PERMISSIVE", "DISABLE"}:
        raise Failure(f"{where}: spec.mtls.mode is not STRICT, PERMISSIVE or DISABLE")
    elif kind == "AuthorizationPolicy" and spec["action"] not in {"ALLOW", "DENY", "AUDIT", "CUSTOM"}:
        raise Failure(f"{where}: spec.action is not ALLOW, DENY, AUDIT or CUSTOM")
    elif kind == "WasmPlugin" and spec.get("failStrategy", "FAIL_CLOSE") != "FAIL_CLOSE":
        raise Failure(f"{where}: keyflight must fail closed")


def main(version, files):
    core = custom = 0
    for name in files:
        path = pathlib.Path(name)
        with path.open() as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        for doc in docs:
            if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
                raise Failure(f"{path}: a document without apiVersion and kind")
            if group_of(doc["apiVersion"]) in CORE_GROUPS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    where = ".".join(str(p) for p in e.path)
                    raise Failure(f"{path}: {doc['kind']} {doc['metadata'].get('name')}: {where}: {e.message}")
                core += 1
            else:
                check_custom(path, doc)
                custom += 1
    print(f"ok     {core} core objects valid against Kubernetes {version} (strict), "
          f"{custom} custom resources structurally checked")


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2:])
    except Failure as e:
        print(f"FAIL   {e}", file=sys.stderr)
        sys.exit(1)
