"""Checks that every metric the alerts and the dashboard query is one the code emits.

A dashboard panel or alert over a misspelt metric shows "no data" and never fires, which
looks exactly like a healthy system. So the names are derived from the code that emits them,
not from a list kept by hand:

* the lease-store (lease-store/src/metrics/mod.rs, its labels in labels.rs): each `registry.register("NAME", …, FIELD…)`
  with FIELD's type from the `Inner` struct; Prometheus adds `_total` to counters and
  `_bucket`/`_sum`/`_count` to histograms. Label values are checked too: `event` against
  `Event::as_str`, `outcome` against `claim_answered`, `code` against the protocol's
  `ProblemCode::as_str`, `route` against the axum router;
* the filter (filter/src/metrics.rs): each `Metric::X(v) => format!("keyflight.PREFIX.{}",
  v.as_str())` with the names of v's enum (`Outcome`, `EventKind` or `OutboxEvent`), and each
  `Gauge::X => "keyflight.NAME"`. Envoy exports these Wasm metrics to Prometheus as
  `keyflight_PREFIX_NAME` (dots become underscores, no `_total`).

Usage: metric_names.py REPO_ROOT RULES_YAML DASHBOARD_JSON
"""

import json
import pathlib
import re
import sys

import yaml

PROMQL_METRIC = re.compile(r"\b(keyflight_[a-z0-9_]+)\b")
LABEL_MATCHER = re.compile(r'\b(event|outcome|code|route)\s*=~?\s*"([^"]*)"')
# Metrics that come from Prometheus itself, not from keyflight.
PROMETHEUS_OWN = {"up"}


def enum_names(source, enum):
    """String literals of `Enum::Variant => "name"` arms."""
    return set(re.findall(rf'{enum}::\w+\s*=>\s*"([a-z0-9_]+)"', source))


def store_metrics(root):
    source = "\n".join(
        (root / "lease-store/src/metrics" / name).read_text() for name in ("mod.rs", "labels.rs")
    )
    inner = re.search(r"struct Inner \{(.*?)\n\}", source, re.S)
    if not inner:
        sys.exit("cannot find `struct Inner` in lease-store/src/metrics/mod.rs: update deploy/checks/metric_names.py")
    types = dict(re.findall(r"(\w+):\s*(?:Family<\w+,\s*)?(Counter|Gauge|Histogram)\b", inner.group(1)))
    names = set()
    for name, field in re.findall(r'register\(\s*"([a-z0-9_]+)",\s*"[^"]*",\s*(\w+)\.clone\(\)', source):
        kind = types.get(field)
        if kind is None:
            sys.exit(f"cannot tell the type of lease-store metric {name} (field {field})")
        suffixes = {"Counter": ["_total"], "Gauge": [""], "Histogram": ["_bucket", "_sum", "_count"]}[kind]
        names.update(name + s for s in suffixes)
    if not names:
        sys.exit("found no registered metrics in lease-store/src/metrics/mod.rs")
    outcomes = set(re.findall(r'ClaimResponse::\w+(?:\s*\{[^}]*\})?\s*=>\s*"([a-z_]+)"', source))
    outcomes |= set(re.findall(r'^\s*"([a-z_]+)"\s*$', source, re.M))
    protocol = (root / "protocol/src/problem.rs").read_text()
    routes = set(re.findall(r'\.route\(\s*"([^"]+)"', (root / "lease-store/src/api/mod.rs").read_text()))
    labels = {
        "event": enum_names(source, "Event"),
        "outcome": outcomes,
        "code": enum_names(protocol, "Self"),
        "route": routes,
    }
    return names, labels


def filter_metrics(root):
    source = (root / "filter/src/metrics.rs").read_text()
    variants = dict(re.findall(r"^\s*(\w+)\((Outcome|EventKind|OutboxEvent)\),", source, re.M))
    names = set()
    for variant, binding, prefix, used in re.findall(
        r'Metric::(\w+)\((\w)\)\s*=>\s*format!\("keyflight\.(\w+)\.\{\}",\s*(\w)\.as_str\(\)\)', source
    ):
        enum = variants.get(variant)
        if enum is None or binding != used:
            sys.exit(f"cannot follow Metric::{variant} in filter/src/metrics.rs: update deploy/checks/metric_names.py")
        names.update(f"keyflight_{prefix}_{n}" for n in enum_names(source, enum))
    gauges = re.findall(r'Gauge::\w+\s*=>\s*"keyflight\.([a-z0-9_.]+)"', source)
    if not gauges:
        sys.exit("found no gauges in filter/src/metrics.rs: update deploy/checks/metric_names.py")
    names.update("keyflight_" + g.replace(".", "_") for g in gauges)
    if not names:
        sys.exit("found no metrics in filter/src/metrics.rs")
    return names


def queries(rules_path, dashboard_path):
    with open(rules_path) as f:
        rules = yaml.safe_load(f)
    for group in rules["spec"]["groups"]:
        for rule in group["rules"]:
            yield f"{rules_path}: {rule.get('alert') or rule.get('record')}", rule["expr"]
    with open(dashboard_path) as f:
        dashboard = json.load(f)

    def walk(node, title):
        if isinstance(node, dict):
            title = node.get("title", title)
            if isinstance(node.get("expr"), str):
                yield f"{dashboard_path}: panel {title!r}", node["expr"]
            query = node.get("query")
            if isinstance(query, dict) and isinstance(query.get("query"), str):
                yield f"{dashboard_path}: variable {node.get('name')!r}", query["query"]
            for value in node.values():
                yield from walk(value, title)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value, title)

    yield from walk(dashboard, "")


def main(root, rules_path, dashboard_path):
    root = pathlib.Path(root)
    store, labels = store_metrics(root)
    emitted = store | filter_metrics(root)
    problems, used = [], set()
    for where, expr in queries(rules_path, dashboard_path):
        for name in PROMQL_METRIC.findall(expr):
            used.add(name)
            if name not in emitted:
                problems.append(f"{where}: {name} is not emitted by the code")
        for label, value in LABEL_MATCHER.findall(expr):
            if value not in labels[label]:
                problems.append(f"{where}: {label}=\"{value}\" is not a value the lease-store emits")
        if not PROMQL_METRIC.search(expr) and not any(m in expr for m in PROMETHEUS_OWN):
            problems.append(f"{where}: queries no keyflight metric")
    if problems:
        print("FAIL   metric names:\n       " + "\n       ".join(problems), file=sys.stderr)
        sys.exit(1)
    print(f"ok     {len(used)} metric names in alerts and dashboard, all emitted by the code "
          f"({len(emitted)} known)")


if __name__ == "__main__":
    main(*sys.argv[1:4])
