"""Checks every Kubernetes and Istio manifest keyflight ships (run by scripts/validate-manifests.sh).

Core Kubernetes objects (Deployment, Service, ...) are validated against the official
OpenAPI schemas of one Kubernetes version with `kubernetes-validate`, strictly (an unknown
field is an error). Istio resources and CloudNativePG `Cluster`s are validated strictly
against their projects' own CRDs (deploy/checks/schemas/istio/ and
deploy/checks/schemas/cloudnative-pg/, with their CEL rules: crd_schema.py), plus the
cross-references a typo would break (an EnvoyFilter's HTTP filter names its ECDS config).
The Envoy protos inside EnvoyFilter patches are loaded into real Envoy by envoy_patches.py,
and the filter's plugin JSON is checked by the filter's own validator in
filter/tests/shipped_configs.rs. Prometheus Operator and Kustomize objects have no schema
offline, nor have Envoy Gateway's objects, so they get structural checks: the apiVersion/kind pairs we use, the fields each
kind requires, and (Kustomization) that it lists every manifest next to it. Every file is
read with duplicate keys refused.

Usage: manifests.py KUBERNETES_VERSION FILE...   (exit status 1 on the first failing file set)
"""

import pathlib
import sys

import kubernetes_validate
import yaml

import crd_schema

SCHEMAS = pathlib.Path(__file__).resolve().parent / "schemas"
ISTIO_CRDS = SCHEMAS / "istio/customresourcedefinitions.gen.yaml"
CNPG_CRDS = SCHEMAS / "cloudnative-pg/postgresql.cnpg.io_clusters.yaml"

# apiVersion groups whose objects kubernetes-validate knows.
CORE_GROUPS = {"", "apps", "batch", "policy", "autoscaling", "networking.k8s.io", "rbac.authorization.k8s.io"}

# Custom resources without a schema here: (apiVersion, kind) -> spec fields that must be present.
CUSTOM = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ["selector", "endpoints"],
    ("monitoring.coreos.com/v1", "PrometheusRule"): ["groups"],
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): [],
    # Envoy Gateway (deploy/envoy-gateway; envoy_gateway.py checks more).
    ("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy"): ["provider", "dynamicModules"],
    ("gateway.envoyproxy.io/v1alpha1", "EnvoyExtensionPolicy"): ["targetRefs", "dynamicModule"],
    ("gateway.envoyproxy.io/v1alpha1", "EnvoyPatchPolicy"): ["targetRef", "type", "jsonPatches"],
}

WASM_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"


class Failure(Exception):
    """A manifest is wrong; the message names the file and the object."""


def group_of(api_version):
    return api_version.split("/")[0] if "/" in api_version else ""


def check_envoy_filter(where, spec):
    extension_names = set()
    discovered = []
    for i, patch in enumerate(spec.get("configPatches", [])):
        at = f"{where}: configPatches[{i}]"
        operation = patch.get("patch", {}).get("operation")
        value = patch.get("patch", {}).get("value", {})
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


def check_crd_object(path, doc, validator):
    """An Istio or CloudNativePG object, against its project's CRD."""
    where = f"{path}: {doc['kind']} {doc.get('metadata', {}).get('name', '?')}"
    errors = validator.validate(doc)
    if errors:
        raise Failure(f"{where}: refused by its CRD schema:\n       " + "\n       ".join(errors))
    if not (doc.get("metadata") or {}).get("namespace"):
        raise Failure(f"{where}: metadata.namespace is required (keyflight's manifests name their namespace)")
    if doc["kind"] == "EnvoyFilter":
        check_envoy_filter(where, doc.get("spec") or {})


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


def main(version, files):
    validator = crd_schema.Validator.from_files([ISTIO_CRDS, CNPG_CRDS])
    core = istio = cnpg = custom = 0
    for name in files:
        path = pathlib.Path(name)
        with path.open() as f:
            try:
                docs = [d for d in yaml.load_all(f, Loader=crd_schema.StrictLoader) if d is not None]
            except yaml.YAMLError as e:
                raise Failure(f"{path}: {e}")
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
            elif validator.knows(doc["apiVersion"], doc["kind"]):
                check_crd_object(path, doc, validator)
                if group_of(doc["apiVersion"]) == "postgresql.cnpg.io":
                    cnpg += 1
                else:
                    istio += 1
            else:
                check_custom(path, doc)
                custom += 1
    print(f"ok     {core} core objects valid against Kubernetes {version} (strict), "
          f"{istio} Istio objects valid against Istio's CRDs and {cnpg} CloudNativePG objects "
          f"against CloudNativePG's (strict, CEL rules evaluated), "
          f"{custom} other custom resources structurally checked")


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2:])
    except Failure as e:
        print(f"FAIL   {e}", file=sys.stderr)
        sys.exit(1)
