"""Loads every EnvoyFilter patch keyflight ships into real Envoy (run by scripts/validate-manifests.sh).

An EnvoyFilter's `patch.value` is free-form in Istio's CRD (`x-kubernetes-preserve-unknown-fields`):
it is an Envoy proto that istiod only converts when it pushes the patch, and a patch it cannot
convert is dropped with a log line, which for keyflight means an unguarded workload. So each
patch is embedded where Istio would put it, in a minimal bootstrap shaped like a sidecar's
(ADS, an HTTP connection manager ending in the router), and checked with
`envoy --mode validate`, which parses every field:

* EXTENSION_CONFIG (the Wasm filter's ECDS config) twice: as shipped, as an HTTP filter
  (every field of it, the remote `oci://` source included), and as istio-agent rewrites it
  before Envoy sees it (the remote module replaced by the real `.wasm` from the build), so
  Envoy runs the filter's own start-up check on the plugin JSON;
* HTTP_FILTER into the connection manager's filter list, before the router;
* NETWORK_FILTER before the connection manager (MERGE: merged into it);
* LISTENER, and CLUSTER with MERGE: merged into a minimal listener / cluster, the way istiod
  merges protos (maps merge, lists append, scalars replace); CLUSTER with ADD: added as is;
* HTTP_ROUTE, VIRTUAL_HOST, ROUTE_CONFIGURATION: merged into (or, ADD, added to) a minimal
  route configuration.

Any other `applyTo` fails: a patch this check cannot place is not silently passed. The
bootstraps are written as JSON from the YAML as Kubernetes reads it (YAML 1.1, like kubectl:
an unquoted `0000…` is the integer 0), so Envoy sees what istiod would convert.

Usage: envoy_patches.py ENVOY WASM FILE...   (exit status 1 if any patch fails)
"""

import concurrent.futures
import copy
import json
import pathlib
import subprocess
import sys
import tempfile

import yaml

import crd_schema

WASM_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
HCM_NAME = "envoy.filters.network.http_connection_manager"
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = {"name": "envoy.filters.http.router",
          "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
INSERTS = {"INSERT_BEFORE", "INSERT_AFTER", "INSERT_FIRST", "ADD"}


class Unplaceable(Exception):
    """A patch this check does not know how to embed."""


def merge(base, patch):
    """Proto merge semantics on JSON: messages merge, repeated fields append, scalars replace."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = out[key] + copy.deepcopy(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def connection_manager(http_filters=None, route_config=None):
    return {"name": HCM_NAME, "typed_config": {
        "@type": HCM_TYPE, "stat_prefix": "validate",
        "route_config": route_config or {"name": "validate"},
        "http_filters": (http_filters or []) + [ROUTER]}}


def listener(network_filters):
    return {"name": "validate", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 15006}},
            "filter_chains": [{"filters": network_filters}]}


def base_cluster(name="validate"):
    return {"name": name, "type": "STATIC", "connect_timeout": "1s",
            "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8080}}}}]}]}}


def bootstrap(listeners=(), clusters=()):
    """A sidecar-shaped bootstrap: ADS over an `xds-grpc` cluster, like istio-agent's."""
    xds = base_cluster("xds-grpc")
    xds["typed_extension_protocol_options"] = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {}}}}
    return {"node": {"id": "sidecar~10.0.0.1~validate.default~default.svc.cluster.local", "cluster": "validate"},
            "dynamic_resources": {"ads_config": {"api_type": "GRPC", "transport_api_version": "V3",
                                                 "grpc_services": [{"envoy_grpc": {"cluster_name": "xds-grpc"}}]}},
            "static_resources": {"listeners": list(listeners), "clusters": [xds, *clusters]}}


def agent_rewrite(extension, wasm):
    """What istio-agent does to a Wasm ECDS config: fetch the module, hand Envoy a local file."""
    out = copy.deepcopy(extension)
    code = out.get("typed_config", {}).get("config", {}).get("vm_config", {}).get("code", {})
    if "remote" in code:
        code.pop("remote")
        code["local"] = {"filename": str(wasm)}
    return out


def bootstraps_for(patch, wasm):
    """(label, bootstrap) pairs that embed one configPatch."""
    apply_to = patch.get("applyTo")
    operation = patch.get("patch", {}).get("operation")
    value = patch.get("patch", {}).get("value")
    if operation == "REMOVE" or value is None:
        return []
    if apply_to == "EXTENSION_CONFIG":
        as_filter = lambda ext: {"name": ext.get("name"), "typed_config": ext.get("typed_config")}
        out = [("as shipped", bootstrap([listener([connection_manager([as_filter(value)])])]))]
        if value.get("typed_config", {}).get("@type") == WASM_TYPE:
            rewritten = as_filter(agent_rewrite(value, wasm))
            out.append(("as istio-agent hands it to Envoy, with the real .wasm",
                        bootstrap([listener([connection_manager([rewritten])])])))
        return out
    if apply_to == "HTTP_FILTER" and operation in INSERTS:
        return [("", bootstrap([listener([connection_manager([value])])]))]
    if apply_to == "NETWORK_FILTER":
        if operation in INSERTS:
            return [("", bootstrap([listener([value, connection_manager()])]))]
        if operation == "MERGE":
            return [("", bootstrap([listener([merge(connection_manager(), value)])]))]
    if apply_to == "LISTENER" and operation == "MERGE":
        return [("", bootstrap([merge(listener([connection_manager()]), value)]))]
    if apply_to == "CLUSTER":
        if operation == "ADD":
            return [("", bootstrap(clusters=[value]))]
        if operation == "MERGE":
            return [("", bootstrap(clusters=[merge(base_cluster(), value)]))]
    route = {"match": {"prefix": "/"}, "route": {"cluster": "validate"}}
    host = {"name": "validate", "domains": ["*"], "routes": [route]}
    config = {"name": "validate", "virtual_hosts": [host]}
    placed = None
    if apply_to == "HTTP_ROUTE":
        placed = dict(config, virtual_hosts=[dict(host, routes=[merge(route, value) if operation == "MERGE" else value])])
    elif apply_to == "VIRTUAL_HOST":
        placed = dict(config, virtual_hosts=[merge(host, value) if operation == "MERGE" else value])
    elif apply_to == "ROUTE_CONFIGURATION" and operation == "MERGE":
        placed = merge(config, value)
    if placed is not None:
        return [("", bootstrap([listener([connection_manager(route_config=placed)])], [base_cluster()]))]
    raise Unplaceable(f"applyTo {apply_to} with {operation}: this check cannot embed it; "
                      f"extend deploy/checks/envoy_patches.py before shipping such a patch")


def validate(envoy, config_json):
    """Runs `envoy --mode validate`; returns None or the lines that say why it failed."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(config_json)
        f.flush()
        result = subprocess.run([envoy, "--mode", "validate", "-c", f.name, "--disable-hot-restart",
                                 "--log-level", "error"], capture_output=True, text=True, timeout=120)
    if result.returncode == 0:
        return None
    output = (result.stdout + result.stderr).splitlines()
    reasons = [line for line in output if "keyflight:" in line or "][critical][" in line or "][error][" in line]
    # Envoy follows a parse error with the whole config as JSON: keep the error.
    return "\n".join(line.split('): {"', 1)[0][:1000] for line in (reasons or output[-5:]))


def checks_for(path, doc, wasm):
    """(description, bootstrap) for every patch of one EnvoyFilter."""
    where = f"{path}: EnvoyFilter {doc.get('metadata', {}).get('name', '?')}"
    out = []
    for i, patch in enumerate(doc.get("spec", {}).get("configPatches", [])):
        for label, config in bootstraps_for(patch, wasm):
            description = f"{where} configPatches[{i}] ({patch.get('applyTo')}{', ' + label if label else ''})"
            out.append((description, config))
    return out


def run(envoy, wasm, files):
    checks = []
    for name in files:
        path = pathlib.Path(name)
        with path.open() as f:
            for doc in yaml.load_all(f, Loader=crd_schema.StrictLoader):
                if doc and doc.get("kind") == "EnvoyFilter":
                    checks.extend(checks_for(path, doc, wasm))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda check: validate(envoy, json.dumps(check[1])), checks))
    failures = [(description, reason) for (description, _), reason in zip(checks, results) if reason]
    return len(checks), failures


def main(envoy, wasm, files):
    if not pathlib.Path(wasm).is_file():
        print(f"FAIL   {wasm} not found: build the filter first (make wasm)", file=sys.stderr)
        return 1
    try:
        count, failures = run(envoy, pathlib.Path(wasm).resolve(), files)
    except Unplaceable as e:
        print(f"FAIL   {e}", file=sys.stderr)
        return 1
    for description, reason in failures:
        print(f"FAIL   {description}: envoy --mode validate refused it:\n{reason}", file=sys.stderr)
    if failures:
        return 1
    if count == 0:
        print("FAIL   no EnvoyFilter patches found to validate", file=sys.stderr)
        return 1
    print(f"ok     {count} EnvoyFilter patch embeddings accepted by envoy --mode validate")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
