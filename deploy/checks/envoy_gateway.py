"""Checks the Envoy Gateway example (deploy/envoy-gateway/) offline (run by scripts/validate-manifests.sh).

No Envoy Gateway CRD schema is vendored here, so the objects get what can be checked without
it: the cross-references Envoy Gateway resolves (every EnvoyExtensionPolicy module is
registered in an EnvoyProxy, by an absolute local path; the plugin's `lease_store.cluster` is
a cluster an EnvoyPatchPolicy adds; the name patterns and target kinds of Envoy Gateway's
v1.9 API), and then the Envoy configuration Envoy Gateway would generate from them, loaded
into real Envoy with `--mode validate`: the patch's cluster as a cluster, and the module as
Envoy Gateway writes it (a `DynamicModuleFilter` whose `filter_config` is the policy's
`config` as a JSON string), with the real module built from filter-native/, so the module's
own start-up check parses the plugin JSON.

Usage: envoy_gateway.py ENVOY MODULE_SO FILE...   (exit status 1 on the first failure)
"""

import json
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

import crd_schema

API = "gateway.envoyproxy.io/v1alpha1"
NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")
TARGET_KINDS = {"Gateway", "ListenerSet", "HTTPRoute", "GRPCRoute"}
CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
FILTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter"


class Failure(Exception):
    """The example is wrong; the message names the object."""


def objects(files):
    found = {"EnvoyProxy": [], "EnvoyExtensionPolicy": [], "EnvoyPatchPolicy": []}
    for name in files:
        with open(name) as f:
            for doc in yaml.load_all(f, Loader=crd_schema.StrictLoader):
                if doc is None:
                    continue
                if doc.get("apiVersion") != API or doc.get("kind") not in found:
                    raise Failure(f"{name}: not an Envoy Gateway object this check knows: "
                                  f"{doc.get('apiVersion')} {doc.get('kind')}")
                found[doc["kind"]].append(doc)
    return found


def registered_modules(proxies):
    modules = {}
    for proxy in proxies:
        for entry in proxy["spec"].get("dynamicModules", []):
            where = f"EnvoyProxy {proxy['metadata']['name']}: module {entry.get('name')}"
            if not NAME.match(entry.get("name", "")):
                raise Failure(f"{where}: the name does not match {NAME.pattern}")
            source = entry.get("source", {})
            path = source.get("local", {}).get("path", "")
            if source.get("type", "Local") != "Local" or not path.startswith("/"):
                raise Failure(f"{where}: expected a Local source with an absolute path")
            modules[entry["name"]] = entry
    return modules


def added_clusters(patches):
    clusters = {}
    for patch in patches:
        for p in patch["spec"].get("jsonPatches", []):
            operation = p.get("operation", {})
            if p.get("type") == CLUSTER_TYPE and operation.get("op") == "add" and not operation.get("path"):
                value = operation.get("value", {})
                if value.get("name") != p.get("name"):
                    raise Failure(f"EnvoyPatchPolicy {patch['metadata']['name']}: the patch is named "
                                  f"{p.get('name')} but adds the cluster {value.get('name')}")
                clusters[value["name"]] = value
    return clusters


def module_filters(policies, modules, clusters, module_so):
    """The HTTP filters Envoy Gateway would generate, with the module replaced by `module_so`."""
    filters = []
    for policy in policies:
        where = f"EnvoyExtensionPolicy {policy['metadata']['name']}"
        for ref in policy["spec"].get("targetRefs", []):
            if ref.get("group") != "gateway.networking.k8s.io" or ref.get("kind") not in TARGET_KINDS:
                raise Failure(f"{where}: targetRef {ref} is not a Gateway API target")
        for i, module in enumerate(policy["spec"].get("dynamicModule", [])):
            entry = modules.get(module.get("name"))
            if entry is None:
                raise Failure(f"{where}: module {module.get('name')} is registered in no EnvoyProxy")
            cluster = module.get("config", {}).get("lease_store", {}).get("cluster")
            if cluster not in clusters:
                raise Failure(f"{where}: lease_store.cluster {cluster} is added by no EnvoyPatchPolicy")
            filters.append({
                "name": f"keyflight-{i}",
                "typed_config": {
                    "@type": FILTER_TYPE,
                    "dynamic_module_config": {
                        "module": {"local": {"filename": str(module_so)}},
                        "do_not_close": entry.get("doNotClose", False),
                    },
                    "filter_name": module.get("filterName", ""),
                    "filter_config": {
                        "@type": "type.googleapis.com/google.protobuf.StringValue",
                        "value": json.dumps(module.get("config", {})),
                    },
                },
            })
    return filters


def bootstrap(filters, clusters):
    router = {"name": "envoy.filters.http.router", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "gateway",
        "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
            {"match": {"prefix": "/"}, "direct_response": {"status": 200}}]}]},
        "http_filters": filters + [router],
    }
    return {
        "static_resources": {
            "listeners": [{
                "name": "gateway",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10080}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": manager}]}],
            }],
            "clusters": list(clusters.values()),
        }
    }


def main(envoy, module_so, files):
    found = objects(files)
    modules = registered_modules(found["EnvoyProxy"])
    clusters = added_clusters(found["EnvoyPatchPolicy"])
    filters = module_filters(found["EnvoyExtensionPolicy"], modules, clusters, pathlib.Path(module_so).resolve())
    if not filters:
        raise Failure("no dynamic module in any EnvoyExtensionPolicy: nothing was checked")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(bootstrap(filters, clusters), f)
        f.flush()
        run = subprocess.run([envoy, "--mode", "validate", "-c", f.name, "--log-level", "error"],
                             capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise Failure(f"Envoy refused what Envoy Gateway would generate:\n{run.stdout}{run.stderr}")
    print(f"ok     envoy gateway: {len(filters)} dynamic module filter(s) and {len(clusters)} "
          f"cluster(s) as Envoy Gateway generates them, valid in real Envoy with the real module")


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2], sys.argv[3:])
    except Failure as e:
        print(f"FAIL   {e}", file=sys.stderr)
        sys.exit(1)
